//! Per-job logs (`docs/job-meta-and-logs.md`): kept per attempt, in order, within the
//! bound (lines past it are counted, not kept), gone with their job.

use anyhow::ensure;
use chrono::Utc;
use hopper_core::backend::JobDeleteParams;
use hopper_core::job_log::{JobLogAppend, LogLevel, LogLine, MAX_ATTEMPT_LOG_BYTES};
use hopper_core::{Lease, Outcome};
use serde_json::{Map, json};

use crate::{Harness, completed, job};

fn line(message: &str) -> LogLine {
    let mut fields = Map::new();
    fields.insert("n".into(), json!(message.len()));
    LogLine {
        at: Utc::now(),
        level: LogLevel::Info,
        message: message.to_owned(),
        fields,
    }
}

fn append(lease: Lease, lines: Vec<LogLine>) -> JobLogAppend {
    JobLogAppend {
        lease,
        lines,
        dropped: 0,
    }
}

/// Lines are kept per attempt in the order written, across several appends; a flood past
/// the bound is counted as dropped; a deleted job's logs go with it.
pub async fn logs_are_kept_per_attempt_bounded_and_deleted_with_the_job(
    h: &Harness,
) -> anyhow::Result<()> {
    let Some(store) = h.backend.logs() else {
        eprintln!("skipped: {} keeps no logs", h.backend.name());
        return Ok(());
    };
    let id = h.insert(job("k", "q")).await?;
    let first = h.claim_one("q").await?;
    store
        .job_log_append(&[
            append(first.lease, vec![line("one"), line("two")]),
            append(first.lease, vec![line("three")]),
        ])
        .await?;
    let held = store
        .job_log_append(&[append(first.lease, vec![line("four")])])
        .await?;
    ensure!(held.is_empty(), "nothing holds the rows, yet {held:?}");
    h.finish(
        first.lease,
        Outcome::Retry {
            error: "again".into(),
            retry_in: std::time::Duration::ZERO,
            duration_ms: 1,
        },
    )
    .await?;
    let second = h.claim_one("q").await?;
    let flood: Vec<LogLine> = (0..5_000).map(|i| line(&format!("flood {i}"))).collect();
    for chunk in flood.chunks(100) {
        store
            .job_log_append(&[append(second.lease, chunk.to_vec())])
            .await?;
    }
    h.finish(second.lease, completed()).await?;

    let logs = store.job_logs(id).await?;
    ensure!(logs.len() == 2, "{} attempts logged", logs.len());
    let messages: Vec<&str> = logs[0].lines.iter().map(|l| l.message.as_str()).collect();
    assert_eq!(messages, ["one", "two", "three", "four"]);
    assert_eq!(logs[0].lines[0].fields["n"], 3);
    assert_eq!((logs[0].attempt, logs[0].dropped), (first.lease.attempt, 0));
    let kept = &logs[1];
    assert_eq!(kept.attempt, second.lease.attempt);
    let bytes: usize = kept.lines.iter().map(LogLine::size).sum();
    ensure!(bytes <= MAX_ATTEMPT_LOG_BYTES, "{bytes} bytes kept");
    ensure!(kept.dropped > 0, "a flood is truncated");
    assert_eq!(kept.lines.len() as i64 + kept.dropped, 5_000);
    assert_eq!(kept.lines[0].message, "flood 0", "the first lines are kept");

    // Lines of a job that does not exist are skipped, not an error.
    let ghost = Lease {
        job_id: uuid::Uuid::now_v7(),
        attempt: 1,
    };
    let held = store
        .job_log_append(&[append(ghost, vec![line("x")])])
        .await?;
    ensure!(
        held.is_empty(),
        "a job that does not exist is held: {held:?}"
    );
    ensure!(store.job_logs(ghost.job_id).await?.is_empty());
    // Nor are lines of attempts the job never had: a peer cannot grow a job's logs
    // without bound by naming attempts at will.
    for attempt in [0, -1, second.lease.attempt + 1, i32::MAX] {
        let made_up = Lease {
            job_id: id,
            attempt,
        };
        let held = store
            .job_log_append(&[append(made_up, vec![line("x")])])
            .await?;
        ensure!(held.is_empty(), "attempt {attempt} is held: {held:?}");
    }
    ensure!(
        store.job_logs(id).await?.len() == 2,
        "logs of attempts the job never had were kept"
    );

    h.backend.job_delete(&JobDeleteParams { id }).await?;
    ensure!(
        store.job_logs(id).await?.is_empty(),
        "logs outlived their job"
    );
    Ok(())
}

/// What a test that wrote a job's log lines by hand expects to read of one of them: its
/// attempt, and either its message (a line hopper reads) or a piece of the line as stored
/// (one it cannot read, which must be shown as a `warn` line saying so).
#[derive(Debug, Clone, Copy)]
pub enum StoredLine<'a> {
    /// A line that reads: its attempt and message.
    Read(i32, &'a str),
    /// A line that does not: its attempt and a piece of its stored text.
    Unreadable(i32, &'a str),
}

/// Checks that `logs` (read through a backend from rows written by hand) hold exactly the
/// `expected` lines, in order.
pub fn ensure_stored_lines(
    logs: &[hopper_core::job_log::AttemptLog],
    expected: &[StoredLine<'_>],
) -> anyhow::Result<()> {
    let lines: Vec<(i32, &LogLine)> = logs
        .iter()
        .flat_map(|log| log.lines.iter().map(move |l| (log.attempt, l)))
        .collect();
    ensure!(lines.len() == expected.len(), "{lines:?}");
    for ((attempt, line), expected) in lines.into_iter().zip(expected) {
        match *expected {
            StoredLine::Read(want, message) => {
                ensure!(attempt == want && line.message == message, "{line:?}");
            }
            StoredLine::Unreadable(want, stored) => {
                ensure!(attempt == want && line.level == LogLevel::Warn, "{line:?}");
                ensure!(line.message.contains("could not be read"), "{line:?}");
                ensure!(line.message.contains(stored), "{stored} not in {line:?}");
                ensure!(
                    hopper_core::limits::check_instant("at", line.at).is_ok(),
                    "an unreadable line stands at a time hopper takes: {line:?}"
                );
            }
        }
    }
    Ok(())
}
