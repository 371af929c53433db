//! The statements that run on every claim, and those over many jobs by id, read indexes,
//! never the whole table: each is planned (EXPLAIN EXECUTE of the statement as hopper sends
//! it: a custom plan, or the generic one where hopper forces it) over a table whose
//! statistics know it holds thousands of jobs, and its plan must not scan the table.
//! A sequential scan there costs the backlog's size on every call (8.8 ms on 20,000 jobs
//! for the fair claim's ring when its stragglers lookup lost the index's queue hash).

use crate::support::connect;
use hopper::testing::TestDatabase;
use hopper::{Client, NewJob};
use hopper_postgres::sql::Queries;
use serde_json::json;

/// A table of 6,000 jobs: 4,000 ready in `bench` over 16 groups, 1,000 ready in `other`,
/// 1,000 completed; analyzed.
async fn filled(db: &TestDatabase) -> anyhow::Result<tokio_postgres::Client> {
    let client = Client::new(db.backend());
    let jobs: Vec<NewJob> = (0..6_000u32)
        .map(|n| {
            let job = NewJob::new("planned", json!({ "n": n }));
            match n % 6 {
                0..=3 => job.with_queue("bench").with_group(format!("g{}", n % 16)),
                4 => job.with_queue("other"),
                _ => job.with_queue("done"),
            }
        })
        .collect();
    client.insert_many(&jobs).await?;
    let sql = connect(db.url()).await?;
    let schema = db.schema();
    sql.batch_execute(&format!(
        "UPDATE {schema}.jobs SET state = 'completed', finished_at = now() WHERE queue = 'done';
         ANALYZE {schema}.jobs;"
    ))
    .await?;
    Ok(sql)
}

/// The plan of `statement` (bound to the test's schema) with parameters of `types`, run
/// with `args` (SQL literals).
async fn plan(
    sql: &tokio_postgres::Client,
    name: &str,
    statement: &str,
    types: &str,
    args: &str,
) -> anyhow::Result<String> {
    sql.batch_execute(&format!("PREPARE {name}({types}) AS {statement}"))
        .await?;
    let rows = sql
        .query(&format!("EXPLAIN EXECUTE {name}({args})"), &[])
        .await?;
    Ok(rows
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n"))
}

/// The parameter types of job_claim_limited.sql and job_claim_fair.sql.
const LIMITED: &str = "text, uuid, bigint, integer, timestamptz, float8, timestamptz, text[]";
const FAIR: &str = "text, uuid, bigint, integer, timestamptz, text[], integer, integer, \
                    float8, timestamptz, uuid[], boolean, text[]";

#[tokio::test]
async fn the_claim_statements_read_indexes_not_the_table() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let sql = filled(&db).await?;
    let queries = Queries::new(db.schema());
    let node = uuid::Uuid::now_v7();
    // (what, statement, parameter types, arguments)
    let statements = [
        (
            "the fair claim's ring (queue_groups_ready.sql)",
            &queries.queue_groups_ready,
            "text, text, integer",
            "'bench', NULL, 16".to_owned(),
        ),
        (
            "the plain claim (job_claim.sql)",
            &queries.job_claim,
            "text, uuid, bigint, integer, timestamptz, smallint, timestamptz, uuid, text[]",
            format!("'other', '{node}', 100, 30000, NULL, NULL, NULL, NULL, NULL"),
        ),
        (
            "the claim of some kinds (job_claim.sql with $9)",
            &queries.job_claim,
            "text, uuid, bigint, integer, timestamptz, smallint, timestamptz, uuid, text[]",
            format!(
                "'other', '{node}', 100, 30000, NULL, NULL, NULL, NULL, ARRAY['planned', 'other']"
            ),
        ),
        (
            "the limited claim (job_claim_limited.sql)",
            &queries.job_claim_limited,
            LIMITED,
            format!("'other', '{node}', 100, 30000, NULL, NULL, NULL, NULL"),
        ),
        (
            "the limited claim of some kinds (job_claim_limited.sql with $8)",
            &queries.job_claim_limited,
            LIMITED,
            format!("'other', '{node}', 100, 30000, NULL, NULL, NULL, ARRAY['planned']"),
        ),
        (
            "the fair claim (job_claim_fair.sql)",
            &queries.job_claim_fair,
            FAIR,
            format!(
                "'bench', '{node}', 100, 30000, NULL, ARRAY['g1', 'g2', 'g3'], 10, 1000, \
                 NULL, NULL, ARRAY[]::uuid[], false, NULL"
            ),
        ),
        (
            "the fair claim of some kinds (job_claim_fair.sql with $13)",
            &queries.job_claim_fair,
            FAIR,
            format!(
                "'bench', '{node}', 100, 30000, NULL, ARRAY['g1', 'g2', 'g3'], 10, 1000, \
                 NULL, NULL, ARRAY[gen_random_uuid()], false, ARRAY['planned']"
            ),
        ),
    ];
    for (i, (what, statement, types, args)) in statements.iter().enumerate() {
        let plan = plan(&sql, &format!("planned_{i}"), &statement.sql, types, args).await?;
        assert!(
            !plan.contains("Seq Scan on jobs"),
            "{what} scans the whole job table:\n{plan}"
        );
        assert!(plan.contains("Index"), "{what} reads no index:\n{plan}");
    }
    Ok(())
}

/// The statements that lock or read many running jobs by id, as they run (with a generic
/// plan), probe the primary key per id: the lease renewal, the way around held rows of a
/// batch of outcomes (`job_lock_running.sql`), and the server's lookups of leases no peer
/// holds (`job_leases_of_node.sql` for outcomes, `job_attempts_of_node.sql` for logs). A
/// scan there would read the whole table on every heartbeat, on every outcome batch that
/// met a held row, and on every log of an attempt a reconnected worker finished.
#[tokio::test]
async fn the_statements_over_many_jobs_by_id_probe_the_primary_key() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let sql = filled(&db).await?;
    let queries = Queries::new(db.schema());
    let running = sql
        .query(
            &format!(
                "UPDATE {}.jobs SET state = 'running', attempt = 1 \
                 WHERE id IN (SELECT id FROM {}.jobs WHERE queue = 'other' LIMIT 300) \
                 RETURNING id::text",
                db.schema(),
                db.schema()
            ),
            &[],
        )
        .await?;
    let ids: Vec<String> = running
        .iter()
        .map(|r| format!("'{}'", r.get::<_, String>(0)))
        .collect();
    let ids = format!("ARRAY[{}]::uuid[]", ids.join(", "));
    let attempts = format!("array_fill(1, ARRAY[{}])", running.len());
    sql.batch_execute("SET plan_cache_mode = force_generic_plan")
        .await?;
    let statements = [
        (
            "the way around held rows (job_lock_running.sql)",
            &queries.job_lock_running,
            "uuid[], integer[]",
            format!("{ids}, {attempts}"),
        ),
        (
            "the lease renewal (job_extend_many.sql)",
            &queries.job_extend_many,
            "uuid[], integer[], bigint, timestamptz",
            format!("{ids}, {attempts}, 30000, NULL"),
        ),
        (
            "the server's lookup of unheld leases (job_leases_of_node.sql)",
            &queries.job_leases_of_node,
            "uuid[], integer[], uuid",
            format!("{ids}, {attempts}, gen_random_uuid()"),
        ),
        (
            "the server's lookup of attempts it logs for (job_attempts_of_node.sql)",
            &queries.job_attempts_of_node,
            "uuid[], integer[], uuid",
            format!("{ids}, {attempts}, gen_random_uuid()"),
        ),
    ];
    for (i, (what, statement, types, args)) in statements.iter().enumerate() {
        let plan = plan(&sql, &format!("by_id_{i}"), &statement.sql, types, args).await?;
        assert!(
            !plan.contains("Seq Scan on jobs"),
            "{what} scans the whole job table:\n{plan}"
        );
        assert!(
            plan.contains("jobs_pkey"),
            "{what} does not probe the primary key:\n{plan}"
        );
    }
    Ok(())
}

/// The drain polls of the public SQL API, as installed (the function's own text, run under
/// its own settings): `any_unfinished_jobs()` stops at the first entry of the available
/// jobs' partial index, whatever the backlog; `unfinished_jobs()` counts the three partial
/// indexes without reading the table.
#[tokio::test]
async fn the_drain_polls_read_the_partial_indexes() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let mut sql = filled(&db).await?;
    let schema = db.schema();
    for function in ["any_unfinished_jobs", "unfinished_jobs"] {
        let row = sql
            .query_one(
                "SELECT prosrc, proconfig FROM pg_proc WHERE oid = $1::text::regproc",
                &[&format!("{schema}.{function}")],
            )
            .await?;
        let (body, settings): (String, Vec<String>) = (row.get(0), row.get(1));
        let tx = sql.transaction().await?;
        for setting in &settings {
            let (name, value) = setting
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("{function}: setting {setting:?}"))?;
            tx.batch_execute(&format!("SET LOCAL {name} = '{value}'"))
                .await?;
        }
        let plan = tx
            .query(
                &format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {body}"),
                &[],
            )
            .await?
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
            .join("\n");
        tx.rollback().await?;
        assert!(
            !plan.contains("Seq Scan") && !plan.contains("Bitmap"),
            "{function} reads the table:\n{plan}"
        );
        for index in ["jobs_claim_idx", "jobs_running_idx", "jobs_scheduled_idx"] {
            assert!(
                plan.contains(&format!("Index Only Scan using {index}")),
                "{function} does not read {index}:\n{plan}"
            );
        }
        let available = plan
            .lines()
            .find(|l| l.contains("using jobs_claim_idx"))
            .unwrap_or_default();
        if function == "any_unfinished_jobs" {
            assert!(
                available.contains("actual rows=1 loops=1"),
                "{function} read more than the first of 5,000 available jobs:\n{plan}"
            );
            assert!(
                plan.contains("never executed"),
                "{function} looked past the state that has a job:\n{plan}"
            );
        } else {
            assert!(
                available.contains("actual rows=5000 loops=1"),
                "{function} did not count the 5,000 available jobs:\n{plan}"
            );
        }
    }
    Ok(())
}
