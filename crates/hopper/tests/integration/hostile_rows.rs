//! Rows written into PostgreSQL by hand that hopper cannot read (an infinite `run_at`, an
//! instant beyond what chrono reads, an error history of the wrong shape): each is moved
//! to `failed` with the decode error in its history, and nothing else stops. The
//! promoter, every claim (plain and fair), listing, showing and the stats keep working.

use anyhow::Context;
use std::time::Duration;

use crate::support::connect;
use hopper::backend::{ClaimParams, JobGetParams, JobRetryParams};
use hopper::testing::TestDatabase;
use hopper::{JobListParams, JobRecord, JobState, NewJob};
use hopper_conformance::logs::{StoredLine, ensure_stored_lines};
use serde_json::json;
use uuid::Uuid;

/// Writes one job row by hand, past every check of hopper's, with `columns` / `values`
/// added to the required ones. Returns its id.
pub(crate) async fn write_by_hand(
    db: &TestDatabase,
    queue: &str,
    state: &str,
    columns: &str,
    values: &str,
) -> anyhow::Result<Uuid> {
    let client = connect(db.url()).await?;
    let id = Uuid::now_v7();
    let schema = db.schema();
    client
        .batch_execute(&format!(
            "INSERT INTO {schema}.jobs (id, queue, kind, state{columns})
             VALUES ('{id}', '{queue}', 'k', '{state}'{values})"
        ))
        .await?;
    Ok(id)
}

/// The job as stored, read through hopper (after it was made readable).
pub(crate) async fn job(db: &TestDatabase, id: Uuid) -> anyhow::Result<JobRecord> {
    db.backend()
        .job_get(&JobGetParams { id })
        .await?
        .ok_or_else(|| anyhow::anyhow!("job {id} is gone"))
}

fn assert_failed_as_unreadable(job: &JobRecord) {
    assert_eq!(job.state, JobState::Failed, "{job:?}");
    let last = job.errors.last().map(|e| e.error.as_str()).unwrap_or("");
    assert!(last.contains("could not be read"), "{last}");
}

fn claim(queue: &str) -> ClaimParams {
    ClaimParams {
        queue: queue.to_owned(),
        node: Uuid::now_v7(),
        limit: 10,
        lease: Duration::from_secs(300),
        kinds: None,
    }
}

#[tokio::test]
async fn the_promoter_fails_an_infinite_scheduled_job_and_promotes_the_rest() -> anyhow::Result<()>
{
    let db = TestDatabase::new().await?;
    let backend = db.backend();
    let bad = write_by_hand(&db, "q", "scheduled", ", run_at", ", 'infinity'").await?;
    let beyond = write_by_hand(&db, "q", "scheduled", ", run_at", ", '290000-01-01'").await?;
    let due = write_by_hand(&db, "q", "scheduled", ", run_at", ", now() - interval '1s'").await?;
    let later_at = chrono::Utc::now() + chrono::Duration::hours(1);
    let later = NewJob::new("k", json!({}))
        .with_queue("q")
        .with_run_at(later_at);
    backend.job_insert(&later).await?;

    let store = backend
        .maintenance()
        .ok_or_else(|| anyhow::anyhow!("PostgreSQL does maintenance"))?;
    let outcome = store.job_promote_scheduled().await?;
    assert_eq!(outcome.promoted, 1, "the due job was promoted");
    let next = outcome
        .next_due
        .ok_or_else(|| anyhow::anyhow!("no next due time"))?;
    assert!((next - later_at).num_milliseconds().abs() <= 1, "{next}");
    assert_eq!(job(&db, due).await?.state, JobState::Available);
    assert_failed_as_unreadable(&job(&db, bad).await?);
    assert_failed_as_unreadable(&job(&db, beyond).await?);
    // And again: nothing left to stop it.
    store.job_promote_scheduled().await?;
    Ok(())
}

#[tokio::test]
async fn a_claim_fails_a_due_minus_infinity_job_and_hands_out_the_others() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let backend = db.backend();
    for queue in ["plain", "fair"] {
        let mut good = Vec::new();
        for n in 0..3 {
            let mut job = NewJob::new("k", json!({ "n": n })).with_queue(queue);
            if queue == "fair" {
                job = job.with_group(format!("g{n}"));
            }
            backend.job_insert(&job).await?;
            good.push(job.id);
        }
        let group = if queue == "fair" { "'g9'" } else { "NULL" };
        let bad = write_by_hand(
            &db,
            queue,
            "available",
            ", run_at, group_key",
            &format!(", '-infinity', {group}"),
        )
        .await?;

        let mut claimed = backend.job_claim(&claim(queue)).await?;
        claimed.sort_by_key(|j| j.lease.job_id);
        let ids: Vec<Uuid> = claimed.iter().map(|j| j.lease.job_id).collect();
        assert_eq!(ids, good, "{queue}: every readable job was claimed");
        assert_failed_as_unreadable(&job(&db, bad).await?);
        for id in good {
            assert_eq!(job(&db, id).await?.state, JobState::Running, "{queue}");
        }
        assert!(backend.job_claim(&claim(queue)).await?.is_empty());
    }
    Ok(())
}

#[tokio::test]
async fn listing_showing_and_stats_survive_unreadable_rows() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let backend = db.backend();
    let good = NewJob::new("k", json!({})).with_queue("q");
    backend.job_insert(&good).await?;
    let infinite = write_by_hand(&db, "q", "available", ", run_at", ", '-infinity'").await?;
    let history = write_by_hand(
        &db,
        "q",
        "completed",
        ", errors",
        ", '{\"not\": \"a list\"}'",
    )
    .await?;
    let created = write_by_hand(&db, "q", "completed", ", created_at", ", 'infinity'").await?;

    let stats = backend.queue_stats().await?;
    let q = stats.iter().find(|s| s.queue == "q").expect("queue q");
    assert_eq!(q.available, 2);
    assert!(q.oldest_available_secs.is_finite());

    let listed = backend
        .job_list(&JobListParams {
            limit: 100,
            ..JobListParams::default()
        })
        .await?;
    assert_eq!(listed.len(), 4, "every row is listed");
    assert_failed_as_unreadable(&job(&db, infinite).await?);
    // Finished jobs are mended but keep their state.
    for id in [history, created] {
        let mended = job(&db, id).await?;
        assert_eq!(mended.state, JobState::Completed, "{mended:?}");
        let last = mended.errors.last().map(|e| e.error.as_str()).unwrap_or("");
        assert!(last.contains("could not be read"), "{last}");
    }
    assert_eq!(job(&db, good.id).await?.state, JobState::Available);
    let history = job(&db, history).await?;
    assert!(history.errors[0].error.contains("unreadable error history"));

    // A row shown by id is moved too.
    let shown = write_by_hand(&db, "q", "scheduled", ", run_at", ", 'infinity'").await?;
    assert_failed_as_unreadable(&job(&db, shown).await?);
    // And a failed unreadable job can be retried by hand, like any other.
    backend.job_retry(&JobRetryParams { id: shown }).await?;
    assert_eq!(job(&db, shown).await?.state, JobState::Available);
    Ok(())
}

/// An unreadable row that another transaction holds is not waited for: a listing leaves it
/// out and shows the rest, showing it fails at once as a transient error, and once the
/// hold ends it is mended as any other. Without the skip, each read waited on the holder.
#[tokio::test]
async fn an_unreadable_row_held_elsewhere_stops_no_read() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let backend = db.backend();
    let good = NewJob::new("k", json!({})).with_queue("q");
    backend.job_insert(&good).await?;
    let held = write_by_hand(&db, "q", "available", ", run_at", ", '-infinity'").await?;
    let hold = db.hold_job(held).await?;

    let bound = Duration::from_secs(5);
    let all = JobListParams {
        limit: 100,
        ..JobListParams::default()
    };
    let listed = tokio::time::timeout(bound, backend.job_list(&all))
        .await
        .context("the listing waited on the held row")??;
    let ids: Vec<Uuid> = listed.iter().map(|j| j.id).collect();
    assert_eq!(ids, [good.id], "the held row is left out, the rest listed");
    let shown = tokio::time::timeout(bound, backend.job_get(&JobGetParams { id: held }))
        .await
        .context("showing the job waited on its held row")?;
    let err = shown
        .err()
        .context("a held unreadable row cannot be shown")?;
    assert!(err.is_lock_not_granted(), "{err}");
    assert!(err.to_string().contains("another transaction"), "{err}");

    hold.release().await?;
    assert_failed_as_unreadable(&job(&db, held).await?);
    Ok(())
}

/// Arguments or metadata that jsonb holds and serde_json does not read (a number beyond a
/// double's range, nesting past 128 levels) are replaced by an object holding their text
/// by the first read that meets them, and the job is shown from then on; later reads
/// write nothing. Before, every read moved the job again (one more history entry each) and
/// left it out.
#[tokio::test]
async fn arguments_and_meta_serde_cannot_read_are_kept_as_text_once() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let huge = write_by_hand(&db, "q", "available", ", args", r#", '{"n": 1e400}'"#).await?;
    let nested = write_by_hand(&db, "q", "available", ", args", &format!(", '{deep}'")).await?;
    let meta = write_by_hand(&db, "q", "completed", ", meta", r#", '{"m": -1e400}'"#).await?;
    let all = JobListParams {
        limit: 100,
        ..JobListParams::default()
    };
    for read in 0..3 {
        let listed = db.backend().job_list(&all).await?;
        assert_eq!(listed.len(), 3, "read {read}: every job is listed");
    }
    for (id, column, key, state) in [
        (huge, "args", "unreadable_args", JobState::Failed),
        (nested, "args", "unreadable_args", JobState::Failed),
        (meta, "meta", "unreadable_meta", JobState::Completed),
    ] {
        let mended = job(&db, id).await?;
        assert_eq!(mended.state, state, "{mended:?}");
        let kept = if column == "args" {
            &mended.args
        } else {
            &mended.meta
        };
        let text = kept[key].as_str().context("the text kept")?;
        assert!(
            text.starts_with(if id == nested { "[[[" } else { "{" }),
            "{text}"
        );
        assert_eq!(mended.errors.len(), 1, "moved once: {:?}", mended.errors);
    }
    Ok(())
}

/// An error history whose entries have the right shape but do not decode (an `at` that is
/// no instant, a `node` that is no UUID): the first read moves the job and replaces the
/// history, and later reads find it readable and write nothing.
#[tokio::test]
async fn an_unreadable_error_entry_is_replaced_once_not_at_every_read() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let entries = [
        r#"{"attempt": 1, "at": "yesterday", "error": "e", "node": null, "duration_ms": 5}"#,
        r#"{"attempt": 1, "at": "2026-01-01T00:00:00Z", "error": "e", "node": "<b>n</b>"}"#,
    ];
    for entry in entries {
        let id = write_by_hand(&db, "q", "failed", ", errors", &format!(", '[{entry}]'")).await?;
        let first = job(&db, id).await?;
        assert_failed_as_unreadable(&first);
        assert!(
            first.errors[0].error.contains("unreadable error history"),
            "{:?}",
            first.errors
        );
        let reason = first.errors.last().map(|e| e.error.as_str()).unwrap_or("");
        assert!(reason.contains("stored error history"), "{reason}");
        for _ in 0..3 {
            let again = job(&db, id).await?;
            assert_eq!(again.errors, first.errors, "a read wrote to the job");
            assert_eq!(again.finished_at, first.finished_at);
        }
        let listed = db
            .backend()
            .job_list(&JobListParams {
                limit: 100,
                ..JobListParams::default()
            })
            .await?;
        let listed = listed.iter().find(|j| j.id == id);
        assert_eq!(listed.map(|j| j.errors.len()), Some(first.errors.len()));
    }
    Ok(())
}

/// A running row without a lease (hopper never leaves one) is taken back by the rescuer
/// like an expired lease, so it cannot hold its queue's concurrency for ever.
#[tokio::test]
async fn a_running_row_without_a_lease_is_taken_back() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let id = write_by_hand(&db, "q", "running", ", attempt", ", 1").await?;
    let backend = db.backend();
    let maintenance = backend.maintenance().context("maintenance")?;
    assert_eq!(maintenance.job_rescue_expired().await?, 1);
    let job = job(&db, id).await?;
    assert_eq!(job.state, JobState::Available);
    let last = job.errors.last().map(|e| e.error.as_str()).unwrap_or("");
    assert!(last.contains("running without a lease"), "{last}");
    assert_eq!(maintenance.job_rescue_expired().await?, 0);
    Ok(())
}

/// A periodic job or a node row that cannot be read is left out of its listing: the
/// others are listed, not an error for the whole list.
#[tokio::test]
async fn one_unreadable_cron_or_node_row_hides_no_other() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = connect(db.url()).await?;
    let schema = db.schema();
    client
        .batch_execute(&format!(
            "INSERT INTO {schema}.cron_jobs (name, schedule, queue, kind, next_run_at)
             VALUES ('good', '* * * * *', 'q', 'k', now()),
                    ('endless', '* * * * *', 'q', 'k', 'infinity');
             INSERT INTO {schema}.nodes (id, name, started_at)
             VALUES (gen_random_uuid(), 'good', now()),
                    (gen_random_uuid(), 'endless', 'infinity');"
        ))
        .await?;
    let backend = db.backend();
    let cron = backend.cron_list().await?;
    let names: Vec<&str> = cron.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["good"]);
    let every = hopper::NodeListParams::first(u32::MAX);
    let nodes = backend.stats().context("stats")?.node_list(&every).await?;
    let names: Vec<&str> = nodes.nodes.iter().map(|n| n.info.name.as_str()).collect();
    assert_eq!(names, ["good"]);
    Ok(())
}

#[tokio::test]
async fn per_minute_stats_survive_infinite_times() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let now = "now() - interval '1s'";
    write_by_hand(
        &db,
        "q",
        "completed",
        ", run_at, attempted_at, finished_at, duration_ms",
        &format!(", '-infinity', {now}, {now}, 5"),
    )
    .await?;
    write_by_hand(
        &db,
        "q",
        "failed",
        ", attempted_at, finished_at",
        &format!(", 'infinity', {now}"),
    )
    .await?;
    write_by_hand(
        &db,
        "q",
        "completed",
        ", attempted_at, finished_at, duration_ms",
        &format!(", {now}, 'infinity', 7"),
    )
    .await?;

    let backend = db.backend();
    let stats = backend
        .stats()
        .context("PostgreSQL keeps per-minute statistics")?
        .job_stats_per_minute(&hopper::backend::JobStatsParams {
            window: Duration::from_secs(3600),
        })
        .await?;
    let completed: i64 = stats.iter().map(|m| m.completed).sum();
    let failed: i64 = stats.iter().map(|m| m.failed).sum();
    assert_eq!((completed, failed), (1, 1), "{stats:?}");
    for minute in &stats {
        assert!(minute.latency_avg_ms.is_finite(), "{minute:?}");
        assert!(minute.latency_p95_ms.is_finite(), "{minute:?}");
    }
    Ok(())
}

/// Log lines written by hand that hopper cannot read (a level it does not know, no time,
/// not an object) hide neither the job nor the other lines: each is read as a `warn`
/// line saying so, with its JSON, and its own time when that reads, so that `hopper jobs
/// show`, the API's job page and the dashboard still show the job.
#[tokio::test]
async fn an_unreadable_log_line_hides_neither_the_job_nor_the_others() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let id = write_by_hand(&db, "q", "failed", ", attempt", ", 2").await?;
    let client = connect(db.url()).await?;
    let schema = db.schema();
    client
        .batch_execute(&format!(
            r#"INSERT INTO {schema}.job_logs (job_id, attempt, lines)
               VALUES ('{id}', 1, '[{{"at": "2026-01-01T00:00:00Z", "level": "info", "message": "fine"}},
                                   {{"at": "2026-01-01T00:00:01Z", "level": "fatal", "message": "boom"}},
                                   {{"level": "warn", "message": "no time"}},
                                   {{"at": "-0001-01-01T00:00:00Z", "level": "info", "message": "ancient"}},
                                   42]'),
                      ('{id}', 2, '[{{"at": "2026-01-01T00:00:02Z", "level": "warn", "message": "later"}}]')"#
        ))
        .await?;
    let logs = hopper::Client::new(db.backend()).job_logs(id).await?;
    ensure_stored_lines(
        &logs,
        &[
            StoredLine::Read(1, "fine"),
            StoredLine::Unreadable(1, "\"fatal\""),
            StoredLine::Unreadable(1, "\"no time\""),
            StoredLine::Unreadable(1, "\"ancient\""),
            StoredLine::Unreadable(1, "42"),
            StoredLine::Read(2, "later"),
        ],
    )?;
    let boom = &logs[0].lines[1];
    assert_eq!(boom.at.to_rfc3339(), "2026-01-01T00:00:01+00:00");
    assert!(job(&db, id).await.is_ok());
    Ok(())
}
