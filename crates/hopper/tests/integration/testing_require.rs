//! The enqueue assertions of `hopper::testing` on both backends: each passes when it
//! should, fails when it should, and says what was enqueued when it fails.

use std::sync::Arc;

use hopper::testing::{
    ExpectedJob, RequireError, TestDatabase, require_inserted, require_inserted_in,
    require_many_inserted, require_many_inserted_in, require_not_inserted, require_not_inserted_in,
};
use hopper::{Client, JobArgs, JobState, NewJob, Priority, SqliteBackend, SqliteOptions};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Serialize, Deserialize)]
struct SendEmail {
    to: String,
    template: String,
}

impl JobArgs for SendEmail {
    const KIND: &'static str = "send_email";
}

fn mail(to: &str) -> SendEmail {
    SendEmail {
        to: to.to_owned(),
        template: "welcome".to_owned(),
    }
}

/// The message of an assertion that must fail.
fn failure<T: std::fmt::Debug>(result: Result<T, RequireError>) -> String {
    match result {
        Ok(found) => panic!("the assertion passed, but must fail; it found {found:?}"),
        Err(e) => e.to_string(),
    }
}

async fn sqlite_client() -> anyhow::Result<Client> {
    let backend = SqliteBackend::open_in_memory(SqliteOptions::default()).await?;
    let client = Client::new(Arc::new(backend));
    client.migrate().await?;
    Ok(client)
}

/// The cases, on any backend: two mails (one high priority on "mail", scheduled) and a
/// report.
async fn assertions_pass_and_fail_as_they_should(client: &Client) -> anyhow::Result<()> {
    require_not_inserted(client, ExpectedJob::kind("send_email")).await?;
    let empty = failure(require_inserted(client, ExpectedJob::of(&mail("ada@example.com"))).await);
    assert!(empty.contains("found none"), "{empty}");
    assert!(empty.contains("Enqueued: no jobs."), "{empty}");

    client.enqueue(&mail("ada@example.com")).await?;
    let later = NewJob::of(&mail("bob@example.com"))?
        .with_queue("mail")
        .with_priority(Priority::HIGH)
        .with_max_attempts(3)
        .with_delay(std::time::Duration::from_secs(3600));
    client.insert(later).await?;
    client
        .insert(NewJob::new("report", json!({"month": 11})))
        .await?;

    // Exact, partial, and with options.
    let ada = require_inserted(client, ExpectedJob::of(&mail("ada@example.com"))).await?;
    assert_eq!(ada.queue, "default");
    require_inserted(
        client,
        ExpectedJob::kind("send_email")
            .args_containing(json!({"to": "bob@example.com"}))
            .queue("mail")
            .priority(Priority::HIGH)
            .max_attempts(3)
            .state(JobState::Scheduled),
    )
    .await?;
    require_inserted(client, ExpectedJob::kind("report")).await?;

    // Wrong arguments, wrong option: none found, and the message lists what there is.
    let wrong = failure(require_inserted(client, ExpectedJob::of(&mail("eve@example.com"))).await);
    assert!(
        wrong.contains(r#"args exactly {"template":"welcome","to":"eve@example.com"}"#),
        "{wrong}"
    );
    assert!(wrong.contains("Enqueued (3 jobs, oldest first)"), "{wrong}");
    assert!(
        wrong.contains("ada@example.com") && wrong.contains("\"report\""),
        "{wrong}"
    );
    let state = failure(
        require_inserted(
            client,
            ExpectedJob::of(&mail("bob@example.com")).state(JobState::Available),
        )
        .await,
    );
    assert!(state.contains("state available, found none"), "{state}");
    let queue = failure(require_inserted(client, ExpectedJob::kind("report").queue("mail")).await);
    assert!(queue.contains("found none"), "{queue}");
    // Two match: one was expected.
    let two = failure(require_inserted(client, ExpectedJob::kind("send_email")).await);
    assert!(two.contains("found 2"), "{two}");
    assert!(two.contains("Matching (2 jobs"), "{two}");

    // Not inserted.
    require_not_inserted(client, ExpectedJob::of(&mail("eve@example.com"))).await?;
    require_not_inserted(client, ExpectedJob::kind("report").queue("mail")).await?;
    let present = failure(
        require_not_inserted(
            client,
            ExpectedJob::kind("send_email").args_containing(json!({"to": "ada@example.com"})),
        )
        .await,
    );
    assert!(present.contains("expected no job"), "{present}");
    assert!(present.contains("found 1"), "{present}");

    // Many: the jobs of the kinds named, in order, one for one.
    let both = require_many_inserted(
        client,
        &[
            ExpectedJob::of(&mail("ada@example.com")),
            ExpectedJob::kind("send_email").queue("mail"),
        ],
    )
    .await?;
    assert_eq!(both.len(), 2);
    assert_eq!(both[0].id, ada.id);
    let order = failure(
        require_many_inserted(
            client,
            &[
                ExpectedJob::kind("send_email").queue("mail"),
                ExpectedJob::of(&mail("ada@example.com")),
            ],
        )
        .await,
    );
    assert!(order.contains("job 1 differs"), "{order}");
    let fewer =
        failure(require_many_inserted(client, &[ExpectedJob::of(&mail("ada@example.com"))]).await);
    assert!(fewer.contains("but 2 jobs were enqueued"), "{fewer}");
    let more = failure(
        require_many_inserted(
            client,
            &[
                ExpectedJob::kind("report"),
                ExpectedJob::kind("report").args(json!({"month": 12})),
            ],
        )
        .await,
    );
    assert!(more.contains("only 1 job was enqueued"), "{more}");
    Ok(())
}

#[tokio::test]
async fn assertions_on_sqlite() -> anyhow::Result<()> {
    assertions_pass_and_fail_as_they_should(&sqlite_client().await?).await
}

#[tokio::test]
async fn assertions_on_postgres() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    assertions_pass_and_fail_as_they_should(&Client::new(db.backend())).await
}

#[tokio::test]
async fn assertions_see_inside_the_callers_transaction_before_rollback() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    let pg = db.pg();
    let (mut conn, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls).await?;
    tokio::spawn(connection);

    let tx = conn.transaction().await?;
    pg.enqueue_in(&tx, &mail("ada@example.com")).await?;
    pg.insert_in(
        &tx,
        &NewJob::new("report", json!({"month": 11})).with_queue("slow"),
    )
    .await?;
    let job = require_inserted_in(pg, &tx, ExpectedJob::of(&mail("ada@example.com"))).await?;
    assert_eq!(job.state, JobState::Available);
    assert_eq!(job.errors, vec![], "the row decodes whole");
    require_many_inserted_in(
        pg,
        &tx,
        &[
            ExpectedJob::kind("send_email"),
            ExpectedJob::kind("report").queue("slow"),
        ],
    )
    .await?;
    require_not_inserted_in(pg, &tx, ExpectedJob::kind("report").queue("default")).await?;
    let present = failure(require_not_inserted_in(pg, &tx, ExpectedJob::kind("report")).await);
    assert!(present.contains("found 1"), "{present}");
    // Outside the transaction nothing is there yet.
    require_not_inserted(&client, ExpectedJob::kind("send_email")).await?;
    tx.rollback().await?;
    require_not_inserted(&client, ExpectedJob::kind("send_email")).await?;
    Ok(())
}
