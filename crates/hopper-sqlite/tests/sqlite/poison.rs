//! Rows written into SQLite by hand that hopper cannot read (an instant beyond what it
//! reads, a count beyond 32 bits, arguments nested deeper than it reads or not JSON at
//! all, an error history of the wrong shape): each is moved to `failed` with the decode
//! error in its history, and nothing else stops. The promoter, every claim (plain and
//! limited), listing, showing and the stats keep working. The PostgreSQL twin is
//! `crates/hopper/tests/hostile_rows.rs`.

use crate::common::harness;
use hopper_conformance::logs::{StoredLine, ensure_stored_lines};
use hopper_conformance::{Harness, t0};
use hopper_core::backend::{JobGetParams, JobPromoteOutcome, JobRetryParams, JobStatsParams};
use hopper_core::{ClaimedJob, JobListParams, JobRecord, JobState, NewJob, QueueUpdate, limits};
use serde_json::json;
use uuid::Uuid;

/// Writes one job of `queue` by hand: a plain row due at the test clock's start, then
/// `set` (an SQL `SET` list) applied past every check of hopper's and SQLite's. Returns
/// its id.
fn write_by_hand(store: &Harness, queue: &str, set: &str) -> anyhow::Result<Uuid> {
    let conn = rusqlite::Connection::open(crate::common::db(store))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let id = Uuid::now_v7();
    let t0 = t0().timestamp_micros();
    conn.execute_batch(&format!(
        "PRAGMA ignore_check_constraints = ON;
         INSERT INTO hopper_jobs (id, queue, kind, state, run_at, created_at)
         VALUES ('{id}', '{queue}', 'k', 'available', {t0}, {t0});
         UPDATE hopper_jobs SET {set} WHERE id = '{id}';"
    ))?;
    Ok(id)
}

/// The job as stored, read through hopper (after it was made readable).
async fn job(store: &Harness, id: Uuid) -> anyhow::Result<JobRecord> {
    store
        .backend
        .job_get(&JobGetParams { id })
        .await?
        .ok_or_else(|| anyhow::anyhow!("job {id} is gone"))
}

fn assert_failed_as_unreadable(job: &JobRecord) {
    assert_eq!(job.state, JobState::Failed, "{job:?}");
    let last = job.errors.last().map(|e| e.error.as_str()).unwrap_or("");
    assert!(last.contains("could not be read"), "{last}");
}

/// A finished job whose row could not be read: readable now, still in `state`, the reason
/// at the end of its history.
fn assert_mended(job: &JobRecord, state: JobState) {
    assert_eq!(job.state, state, "{job:?}");
    let last = job.errors.last().map(|e| e.error.as_str()).unwrap_or("");
    assert!(last.contains("could not be read"), "{last}");
}

/// Arguments nested deeper than serde_json reads (128), though valid JSON to SQLite.
fn too_deep() -> String {
    format!("'{}{}'", "[".repeat(200), "]".repeat(200))
}

#[tokio::test]
async fn the_promoter_fails_a_run_at_beyond_range_and_promotes_the_rest() -> anyhow::Result<()> {
    let store = harness().await?;
    let backend = &store.backend;
    let beyond = write_by_hand(
        &store,
        "q",
        &format!("state = 'scheduled', run_at = {}", i64::MAX),
    )?;
    let due = write_by_hand(&store, "q", "state = 'scheduled'")?;

    let JobPromoteOutcome {
        promoted,
        next_due: next,
    } = store.promote_outcome().await?;
    assert_eq!(promoted, 1, "the due job was promoted");
    assert_eq!(next, None, "{next:?}");
    assert_eq!(job(&store, due).await?.state, JobState::Available);
    let beyond = job(&store, beyond).await?;
    assert_failed_as_unreadable(&beyond);
    assert!(beyond.run_at <= limits::max_instant(), "{beyond:?}");

    // And again, with a readable job to come: nothing left to stop it.
    let later_at = t0() + chrono::Duration::hours(1);
    backend
        .job_insert(
            &NewJob::new("k", json!({}))
                .with_queue("q")
                .with_run_at(later_at),
        )
        .await?;
    let next = store.promote_outcome().await?.next_due;
    assert_eq!(next, Some(later_at));
    Ok(())
}

#[tokio::test]
async fn a_claim_fails_unreadable_jobs_and_hands_out_the_others() -> anyhow::Result<()> {
    let store = harness().await?;
    store
        .backend
        .queue_update(&QueueUpdate {
            max_running: Some(Some(100)),
            ..QueueUpdate::new("limited")
        })
        .await?;
    for queue in ["plain", "limited"] {
        let mut good = Vec::new();
        for n in 0..3 {
            good.push(
                store
                    .insert(NewJob::new("k", json!({ "n": n })).with_queue(queue))
                    .await?,
            );
        }
        let bad = [
            write_by_hand(&store, queue, &format!("run_at = {}", i64::MIN))?,
            write_by_hand(&store, queue, &format!("created_at = {}", i64::MAX))?,
            write_by_hand(&store, queue, &format!("attempt = {}", 1i64 << 40))?,
            // Its next attempt overflows: the claim must not fail with it.
            write_by_hand(&store, queue, &format!("attempt = {}", i64::MAX))?,
            // More claims not counted than claims: its retries would never end.
            write_by_hand(&store, queue, "uncounted = 7")?,
            write_by_hand(&store, queue, &format!("args = {}", too_deep()))?,
            write_by_hand(&store, queue, "args = 'not json'")?,
        ];

        let mut claimed: Vec<ClaimedJob> = store.claim(queue, 20).await?;
        claimed.sort_by_key(|j| j.lease.job_id);
        let ids: Vec<Uuid> = claimed.iter().map(|j| j.lease.job_id).collect();
        assert_eq!(ids, good, "{queue}: every readable job was claimed");
        for id in bad {
            assert_failed_as_unreadable(&job(&store, id).await?);
        }
        for id in good {
            assert_eq!(job(&store, id).await?.state, JobState::Running, "{queue}");
        }
        assert!(store.claim(queue, 20).await?.is_empty(), "{queue}");
    }
    Ok(())
}

#[tokio::test]
async fn listing_showing_and_stats_survive_unreadable_rows() -> anyhow::Result<()> {
    let store = harness().await?;
    let backend = &store.backend;
    let good = store
        .insert(NewJob::new("k", json!({})).with_queue("q"))
        .await?;
    let minus = write_by_hand(&store, "q", &format!("run_at = {}", i64::MIN))?;
    let history = write_by_hand(
        &store,
        "q",
        &format!(
            "state = 'completed', finished_at = {}, errors = '{{\"not\": \"a list\"}}'",
            t0().timestamp_micros()
        ),
    )?;
    let created = write_by_hand(
        &store,
        "q",
        &format!("state = 'completed', created_at = {}", i64::MAX),
    )?;
    let args = write_by_hand(&store, "q", "state = 'cancelled', args = '{broken'")?;
    let meta = write_by_hand(
        &store,
        "q",
        &format!("state = 'completed', meta = {}", too_deep()),
    )?;

    let stats = backend.queue_stats().await?;
    let q = stats.iter().find(|s| s.queue == "q").expect("queue q");
    assert_eq!(q.available, 2);
    assert_eq!(q.oldest_available_secs, 0.0, "{q:?}");
    (store.stats().expect("SQLite keeps statistics"))
        .job_stats_per_minute(&JobStatsParams {
            window: std::time::Duration::from_secs(3600),
        })
        .await?;

    let listed = backend
        .job_list(&JobListParams {
            limit: 100,
            ..JobListParams::default()
        })
        .await?;
    assert_eq!(listed.len(), 6, "every row is listed");
    assert_failed_as_unreadable(&job(&store, minus).await?);
    // Finished jobs are mended but keep their state, and their finishing time if it reads.
    for (id, state) in [
        (history, JobState::Completed),
        (created, JobState::Completed),
        (args, JobState::Cancelled),
        (meta, JobState::Completed),
    ] {
        assert_mended(&job(&store, id).await?, state);
    }
    assert_eq!(
        job(&store, history).await?.finished_at,
        Some(t0()),
        "a readable finishing time is kept"
    );
    assert_eq!(job(&store, good).await?.state, JobState::Available);
    let history = job(&store, history).await?;
    assert!(history.errors[0].error.contains("unreadable error history"));
    let args = job(&store, args).await?;
    assert_eq!(args.args, json!({ "unreadable_args": "{broken" }));
    let meta = job(&store, meta).await?;
    let kept = meta.meta["unreadable_meta"].as_str().unwrap_or("");
    assert!(kept.starts_with("[[["), "{:?}", meta.meta);

    // A row shown by id is moved too.
    let shown = write_by_hand(&store, "q", &format!("attempted_at = {}", i64::MAX))?;
    assert_failed_as_unreadable(&job(&store, shown).await?);
    // And a failed unreadable job can be retried by hand, like any other.
    backend.job_retry(&JobRetryParams { id: shown }).await?;
    assert_eq!(job(&store, shown).await?.state, JobState::Available);
    Ok(())
}

/// A running row without a lease (hopper never leaves one) is taken back by the rescuer
/// like an expired lease, so it cannot hold its queue's concurrency for ever.
#[tokio::test]
async fn a_running_row_without_a_lease_is_taken_back() -> anyhow::Result<()> {
    let store = harness().await?;
    let id = write_by_hand(&store, "q", "state = 'running', attempt = 1")?;
    assert_eq!(store.maintenance().job_rescue_expired().await?, 1);
    let job = job(&store, id).await?;
    assert_eq!(job.state, JobState::Available);
    let last = job.errors.last().map(|e| e.error.as_str()).unwrap_or("");
    assert!(last.contains("running without a lease"), "{last}");
    assert_eq!(store.maintenance().job_rescue_expired().await?, 0);
    Ok(())
}

/// A row no quarantine can make readable (an id that is no UUID) is moved once: reading it
/// again writes nothing, so its history does not grow with every read.
#[tokio::test]
async fn an_unfixable_row_is_moved_once_not_at_every_read() -> anyhow::Result<()> {
    let store = harness().await?;
    let conn = rusqlite::Connection::open(crate::common::db(&store))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let t0 = t0().timestamp_micros();
    conn.execute_batch(&format!(
        "INSERT INTO hopper_jobs (id, queue, kind, state, run_at, created_at)
         VALUES ('not-a-uuid', 'sq', 'k', 'available', {t0}, {t0});"
    ))?;
    let history = || -> anyhow::Result<(String, String)> {
        Ok(conn.query_row(
            "SELECT state, errors FROM hopper_jobs WHERE id = 'not-a-uuid'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?)
    };
    let list = JobListParams {
        limit: 100,
        ..JobListParams::default()
    };
    assert!(store.backend.job_list(&list).await?.is_empty());
    let first = history()?;
    assert_eq!(first.0, "failed");
    for _ in 0..3 {
        assert!(store.backend.job_list(&list).await?.is_empty());
        assert_eq!(history()?, first, "a read wrote to the row");
    }
    Ok(())
}

/// A periodic job or a node row that cannot be read is left out of its listing: the
/// others are listed, not an error for the whole list.
#[tokio::test]
async fn one_unreadable_cron_or_node_row_hides_no_other() -> anyhow::Result<()> {
    let store = harness().await?;
    let conn = rusqlite::Connection::open(crate::common::db(&store))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let t0 = t0().timestamp_micros();
    let beyond = i64::MAX;
    conn.execute_batch(&format!(
        "PRAGMA ignore_check_constraints = ON;
         INSERT INTO hopper_cron_jobs (name, schedule, timezone, queue, kind, args, priority,
                                       max_attempts, timeout_ms, catch_up, next_run_at,
                                       registered_at, seen_at)
         VALUES ('good', '* * * * *', 'UTC', 'q', 'k', '{{}}', 2, 25, 1000, 0, {t0}, {t0}, {t0}),
                ('endless', '* * * * *', 'UTC', 'q', 'k', '{{}}', 2, 25, 1000, 0, {beyond}, {t0}, {t0});
         INSERT INTO hopper_nodes (id, name, queues, concurrency, started_at, heartbeat_at)
         VALUES ('{}', 'good', '[]', 1, {t0}, {t0}),
                ('{}', 'endless', '[]', 1, {beyond}, {t0});",
        Uuid::now_v7(),
        Uuid::now_v7(),
    ))?;
    let cron = store.backend.cron_list().await?;
    let names: Vec<&str> = cron.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["good"]);
    let stats = store.stats().ok_or_else(|| anyhow::anyhow!("stats"))?;
    let every = hopper_core::NodeListParams::first(u32::MAX);
    let nodes = stats.node_list(&every).await?.nodes;
    let names: Vec<&str> = nodes.iter().map(|n| n.info.name.as_str()).collect();
    assert!(
        names.contains(&"good") && !names.contains(&"endless"),
        "{names:?}"
    );
    Ok(())
}

/// Log lines written by hand that hopper cannot read (a level it does not know, no time,
/// text that is not JSON at all) hide neither the job nor the other lines: each is read as
/// a `warn` line saying so, with what was stored.
#[tokio::test]
async fn an_unreadable_log_line_hides_neither_the_job_nor_the_others() -> anyhow::Result<()> {
    let store = harness().await?;
    let id = write_by_hand(&store, "q", "state = 'failed', attempt = 2")?;
    let conn = rusqlite::Connection::open(crate::common::db(&store))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.execute_batch(&format!(
        r#"PRAGMA ignore_check_constraints = ON;
           INSERT INTO hopper_job_logs (job_id, attempt, lines)
           VALUES ('{id}', 1, '[{{"at": "2026-01-01T00:00:00Z", "level": "info", "message": "fine"}},
                               {{"at": "2026-01-01T00:00:01Z", "level": "fatal", "message": "boom"}},
                               {{"level": "warn", "message": "no time"}},
                               {{"at": "-0001-01-01T00:00:00Z", "level": "info", "message": "ancient"}}]'),
                  ('{id}', 2, 'not json at all');"#
    ))?;
    let logs = store
        .backend
        .logs()
        .ok_or_else(|| anyhow::anyhow!("SQLite keeps logs"))?
        .job_logs(id)
        .await?;
    ensure_stored_lines(
        &logs,
        &[
            StoredLine::Read(1, "fine"),
            StoredLine::Unreadable(1, "\"fatal\""),
            StoredLine::Unreadable(1, "\"no time\""),
            StoredLine::Unreadable(1, "\"ancient\""),
            StoredLine::Unreadable(2, "not json at all"),
        ],
    )?;
    assert!(job(&store, id).await.is_ok());
    Ok(())
}

/// A rate bucket written by hand (tokens at minus infinity, a refill time beyond what
/// hopper reads): the queue's claims go on, the bucket read from its nearest bound or as
/// never refilled, instead of taking nothing for ever or failing at every claim.
#[tokio::test]
async fn a_rate_bucket_written_by_hand_stops_no_claim() -> anyhow::Result<()> {
    let store = harness().await?;
    let t0 = t0().timestamp_micros();
    for (queue, set) in [
        (
            "minus-infinity",
            format!("rate_tokens = -1e999, rate_refilled_at = {t0} - 60000000"),
        ),
        ("beyond-refill", format!("rate_refilled_at = {}", i64::MAX)),
    ] {
        store
            .insert(NewJob::new("k", json!({})).with_queue(queue))
            .await?;
        store
            .backend
            .queue_update(&QueueUpdate {
                rate: Some(Some(hopper_core::RateLimit::new(
                    10,
                    std::time::Duration::from_secs(1),
                ))),
                ..QueueUpdate::new(queue)
            })
            .await?;
        let conn = rusqlite::Connection::open(crate::common::db(&store))?;
        conn.execute_batch(&format!(
            "UPDATE hopper_queues SET {set} WHERE name = '{queue}'"
        ))?;
        assert_eq!(store.claim(queue, 10).await?.len(), 1, "{queue}");
    }
    Ok(())
}
