//! Hostile calls of the public SQL function `hopper.enqueue`: each is refused with
//! SQLSTATE 22023 and a sentence naming the argument (never a constraint violation that
//! prints the row), and writes nothing. The bounds are those of `hopper_core::limits`.

use crate::support::connect;
use hopper::testing::TestDatabase;
use hopper::{JobListParams, limits};
use tokio_postgres::error::SqlState;

async fn job_count(db: &TestDatabase) -> anyhow::Result<usize> {
    let all = db
        .backend()
        .job_list(&JobListParams {
            limit: 1000,
            ..JobListParams::default()
        })
        .await?;
    Ok(all.len())
}

#[tokio::test]
async fn sql_enqueue_refuses_every_hostile_value_with_a_clear_message() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = connect(db.url()).await?;
    let schema = db.schema();
    let calls: [(&str, &str); _] = [
        ("run_at => 'infinity'", "run_at infinity is out of range"),
        ("run_at => '-infinity'", "run_at -infinity is out of range"),
        (
            "run_at => '1969-12-31 23:59:59.999999+00'",
            "is out of range",
        ),
        ("run_at => '10000-01-01 00:00:00+00'", "is out of range"),
        ("run_at => '294276-01-01 00:00:00+00'", "is out of range"),
        ("priority => 40000", "priority must be from -32768 to 32767"),
        (
            "priority => -40000",
            "priority must be from -32768 to 32767",
        ),
        ("priority => NULL", "priority must be from -32768 to 32767"),
        ("max_attempts => 0", "max_attempts must be at least 1"),
        ("max_attempts => NULL", "max_attempts must be at least 1"),
        (
            "timeout => interval '0.0004 seconds'",
            "timeout must be between",
        ),
        ("timeout => interval '-1 second'", "timeout must be between"),
        ("timeout => interval '25 days'", "timeout must be between"),
        (
            "timeout => interval '178000000 years'",
            "timeout must be between",
        ),
        ("timeout => NULL", "timeout must be between"),
        (
            "args => '\"text\"'",
            "args must be a JSON object or array, got string",
        ),
        (
            "args => 'null'",
            "args must be a JSON object or array, got null",
        ),
        (
            "args => NULL",
            "args must be a JSON object or array, got NULL",
        ),
        ("unique_key => ''", "unique key must be 1 to 255 bytes"),
        (
            "unique_key => repeat('k', 256)",
            "unique key must be 1 to 255 bytes",
        ),
        ("unique_key => 'a' || chr(10) || 'b'", "control characters"),
        ("unique_key => 'bell' || chr(7)", "control characters"),
        ("unique_key => 'del' || chr(127)", "control characters"),
        ("unique_key => 'c1' || chr(155)", "control characters"),
        ("meta => '[]'", "meta must be a JSON object, got array"),
        ("meta => '\"x\"'", "meta must be a JSON object, got string"),
        ("meta => NULL", "meta must be a JSON object, got NULL"),
        (
            "meta => jsonb_build_object('blob', repeat('x', 16384))",
            "over the limit of 16384 bytes",
        ),
        (
            "meta => '{\"traceparent\": \"00-abc-def-01\"}'",
            "is not a W3C traceparent",
        ),
        ("meta => '{\"traceparent\": 7}'", "is not a W3C traceparent"),
        (
            "meta => '{\"traceparent\": \"00-00000000000000000000000000000000-00f067aa0ba902b7-01\"}'",
            "is not a W3C traceparent",
        ),
        (
            "meta => jsonb_build_object('tracestate', 'a' || chr(10))",
            "meta.tracestate must be a string",
        ),
        (
            "args => '{\"n\": 1e400}'",
            "args cannot be read by hopper: a number beyond a double's range",
        ),
        (
            "args => '[1.797693134862315807937289714053e308]'",
            "args cannot be read by hopper: a number beyond a double's range",
        ),
        (
            "meta => '{\"m\": [-1e309]}'",
            "meta cannot be read by hopper: a number beyond a double's range",
        ),
        (
            &format!("args => '{}'", nested(128)),
            "args cannot be read by hopper: nested deeper than 127 levels",
        ),
        (
            &format!("meta => '{{\"m\": {}}}'", nested(127)),
            "meta cannot be read by hopper: nested deeper than 127 levels",
        ),
    ];
    for (argument, expected) in calls {
        let sql = format!("SELECT {schema}.enqueue('k', queue => 'q', {argument})");
        let err = client.query_one(&sql, &[]).await.expect_err(&sql);
        let db_error = err.as_db_error().expect("a database error");
        assert_eq!(db_error.code(), &SqlState::INVALID_PARAMETER_VALUE, "{sql}");
        let message = db_error.message();
        assert!(message.contains(expected), "{sql}: {message}");
        assert!(
            message.starts_with(&format!("{schema}.enqueue: ")),
            "{message}"
        );
        assert!(db_error.detail().is_none(), "{sql}: the row is not printed");
    }
    assert_eq!(job_count(&db).await?, 0, "nothing was written");
    Ok(())
}

/// `depth` arrays, one inside the other, around a number: JSON of that nesting depth.
fn nested(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

/// What `hopper.enqueue` takes at the edges of what hopper reads, a worker reads: the
/// largest double and nesting 127 levels deep (serde_json's limit is 128 containers).
#[tokio::test]
async fn sql_enqueue_takes_json_at_the_edges_of_what_hopper_reads() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = connect(db.url()).await?;
    let schema = db.schema();
    for args in [
        "[1.7976931348623157e308, -1.7976931348623157e308, 1e-400]".to_owned(),
        nested(127),
    ] {
        let sql = format!("SELECT {schema}.enqueue('k', '{args}', 'q')");
        let id: uuid::Uuid = client.query_one(&sql, &[]).await?.get(0);
        let job = db
            .backend()
            .job_get(&hopper::backend::JobGetParams { id })
            .await?
            .ok_or_else(|| anyhow::anyhow!("job {id} was not read"))?;
        assert_eq!(job.state, hopper::JobState::Available, "{args}: {job:?}");
        assert!(job.errors.is_empty(), "{args}: {:?}", job.errors);
    }
    Ok(())
}

#[tokio::test]
async fn sql_enqueue_takes_an_integer_priority_and_the_edges_of_the_range() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = connect(db.url()).await?;
    let schema = db.schema();
    let first = limits::min_instant();
    let last = limits::max_instant();
    let good = [
        "priority => 1".to_owned(),
        "priority => 32767".to_owned(),
        "priority => 1::smallint".to_owned(),
        "priority => -32768".to_owned(),
        format!("run_at => '{}'", first.to_rfc3339()),
        format!("run_at => '{}'", last.to_rfc3339()),
        "timeout => interval '2147483.647 seconds'".to_owned(),
        "unique_key => 'user:42/welcome mail ü'".to_owned(),
        "meta => '{\"traceparent\": \"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\", \"tracestate\": \"k=v\"}'".to_owned(),
        "meta => jsonb_build_object('blob', repeat('x', 16000))".to_owned(),
    ];
    for argument in &good {
        let sql = format!("SELECT {schema}.enqueue('k', queue => 'q', {argument})");
        client
            .query_one(&sql, &[])
            .await
            .map_err(|e| anyhow::anyhow!("{sql}: {}", hopper_postgres::map_pg(e)))?;
    }
    assert_eq!(job_count(&db).await?, good.len());
    let row = client
        .query_one(
            &format!("SELECT priority FROM {schema}.jobs ORDER BY id LIMIT 1"),
            &[],
        )
        .await?;
    assert_eq!(row.get::<_, i16>(0), 1);
    // Read back through hopper: every one of these rows decodes.
    let jobs = db
        .backend()
        .job_list(&JobListParams {
            limit: 100,
            ..JobListParams::default()
        })
        .await?;
    assert!(jobs.iter().any(|j| j.run_at == last));
    assert!(jobs.iter().any(|j| j.run_at == first));
    assert!(
        jobs.iter()
            .any(|j| j.meta["tracestate"] == "k=v" && j.meta["traceparent"].is_string())
    );
    assert_eq!(
        jobs.iter()
            .filter(|j| j.meta == serde_json::json!({}))
            .count(),
        good.len() - 2,
        "a job enqueued without meta has {{}}"
    );
    Ok(())
}

/// A statement the server answers with an error that waiting will not cure (here a user's
/// trigger that raises) is `Error::Refused` with the server's words, not a transient
/// database error that the runtime and the maintenance services would retry for ever.
#[tokio::test]
async fn a_trigger_that_raises_is_refused_not_transient() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let sql = connect(db.url()).await?;
    let schema = db.schema();
    sql.batch_execute(&format!(
        "CREATE FUNCTION {schema}.no_jobs() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN RAISE EXCEPTION 'no jobs on fridays'; END $$;
         CREATE TRIGGER no_jobs BEFORE INSERT ON {schema}.jobs
             FOR EACH ROW EXECUTE FUNCTION {schema}.no_jobs();"
    ))
    .await?;
    let client = hopper::Client::new(db.backend());
    let err = client
        .insert(hopper::NewJob::new("k", serde_json::json!({})))
        .await
        .expect_err("the trigger refuses every insert");
    assert!(matches!(err, hopper::Error::Refused(_)), "{err:?}");
    assert!(!err.is_transient());
    assert!(
        err.to_string()
            .contains("no jobs on fridays (SQLSTATE P0001)"),
        "{err}"
    );
    assert_eq!(job_count(&db).await?, 0);
    Ok(())
}

/// Every public SQL function that takes a name refuses an empty, NULL, long or hostile one
/// before it writes anything, with SQLSTATE 22023 and the words of
/// `hopper_core::job::validate_name` after the function's name (never a constraint
/// violation, never silence). A hostile name is shown escaped and cut.
#[tokio::test]
async fn sql_functions_refuse_bad_names_in_the_words_of_the_rust_client() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = connect(db.url()).await?;
    let schema = db.schema();
    // (SQL of the name, what the message says of it); `None`: word for word what
    // validate_name says of the name given as Rust text.
    let long_bad = format!("{} ", "k".repeat(70));
    let names: Vec<(String, Option<String>, Option<&str>)> = vec![
        ("''".into(), Some(String::new()), None),
        ("repeat('q', 129)".into(), Some("q".repeat(129)), None),
        ("'a b'".into(), Some("a b".into()), None),
        ("'a''b'".into(), Some("a'b".into()), None),
        (
            "'q;drop table x'".into(),
            Some("q;drop table x".into()),
            None,
        ),
        ("'say \"hi\"'".into(), Some("say \"hi\"".into()), None),
        (r"'back\slash'".into(), Some(r"back\slash".into()), None),
        (format!("'{long_bad}'"), Some(long_bad.clone()), None),
        (
            "NULL".into(),
            None,
            Some("name must be 1 to 128 characters, got NULL"),
        ),
        (
            "repeat('é', 100)".into(),
            None,
            Some("name must be 1 to 128 characters, got 200"),
        ),
        (
            "'x' || chr(27) || '[31mred'".into(),
            None,
            Some(r#"name "x\u{1b}[31mred" has the character '\u{1b}'"#),
        ),
        (
            "'ok' || chr(8238) || 'gpj.exe'".into(),
            None,
            Some(r#"name "ok\u{202e}gpj.exe" has the character '\u{202e}'"#),
        ),
        (
            "'line' || chr(10) || 'break'".into(),
            None,
            Some(r#"name "line\u{a}break" has the character '\u{a}'"#),
        ),
        (
            "'ünï'".into(),
            None,
            Some(r#"name "\u{fc}n\u{ef}" has the character '\u{fc}'"#),
        ),
    ];
    // (the call, with {} where the name goes; the function; what the name is called)
    let calls = [
        ("pause_queue({})", "pause_queue", "queue"),
        ("resume_queue({})", "resume_queue", "queue"),
        ("mark_grouped(ARRAY['fine', {}])", "mark_grouped", "queue"),
        ("enqueue({}, queue => 'q')", "enqueue", "kind"),
        ("enqueue('k', queue => {})", "enqueue", "queue"),
        (
            "enqueue('k', queue => 'q', group_key => {})",
            "enqueue",
            "group",
        ),
    ];
    for (call, function, what) in calls {
        for (name, rust_text, expected) in &names {
            if what == "group" && name == "NULL" {
                continue; // no group at all, not a bad one
            }
            let sql = format!("SELECT {schema}.{}", call.replace("{}", name));
            let err = client.query_one(&sql, &[]).await.expect_err(&sql);
            let db_error = err.as_db_error().expect("a database error");
            assert_eq!(db_error.code(), &SqlState::INVALID_PARAMETER_VALUE, "{sql}");
            assert!(db_error.detail().is_none(), "{sql}: the row is not printed");
            let message = db_error.message();
            let said = match (rust_text, expected) {
                (Some(text), _) => match hopper::core::job::validate_name(what, text) {
                    Err(hopper::Error::InvalidInput(said)) => said,
                    other => panic!("validate_name accepted {text:?}: {other:?}"),
                },
                (None, Some(expected)) => format!("{what} {expected}"),
                (None, None) => unreachable!("every name says what to expect"),
            };
            if rust_text.is_some() {
                assert_eq!(message, format!("{schema}.{function}: {said}"), "{sql}");
            } else {
                assert!(
                    message.starts_with(&format!("{schema}.{function}: {said}")),
                    "{sql}: {message}"
                );
            }
            assert!(
                message
                    .chars()
                    .all(|c| (' '..='~').contains(&c) || c == '…'),
                "{sql}: {message:?} shows a character as itself"
            );
            assert!(message.len() < 256, "{sql}: {message}");
        }
    }
    let queues = client
        .query_one(&format!("SELECT count(*) FROM {schema}.queues"), &[])
        .await?;
    assert_eq!(queues.get::<_, i64>(0), 0, "no queue row was written");
    assert_eq!(job_count(&db).await?, 0, "nothing was written");

    // Good names of every shape the rule allows still go in.
    let good = "A.b-c_9:Z";
    client
        .batch_execute(&format!(
            "SELECT {schema}.pause_queue('{good}'); SELECT {schema}.resume_queue('{good}');
             SELECT {schema}.mark_grouped(ARRAY['{good}']);
             SELECT {schema}.pause_queue('{long}');",
            long = "q".repeat(128)
        ))
        .await?;
    let row = client
        .query_one(
            &format!("SELECT count(*), bool_or(paused) FROM {schema}.queues"),
            &[],
        )
        .await?;
    assert_eq!((row.get::<_, i64>(0), row.get::<_, bool>(1)), (2, true));
    Ok(())
}
