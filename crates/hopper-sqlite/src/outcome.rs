//! Recording outcomes: one statement per finished attempt (complete, fail, snooze), each
//! fenced by its lease; and reading the rows of statements that hand jobs back.

use hopper_core::{Finish, JobState, Outcome, Result};
use rusqlite::{Connection, OptionalExtension, named_params};

use crate::error::map_sqlite;
use crate::rows::{col, delay_us};
use crate::sql::Queries;

/// Runs one outcome statement (complete, fail or snooze) for one lease: the job's new state
/// and queue, or `None` when the lease was lost.
pub fn finish_one(
    conn: &Connection,
    q: &Queries,
    finish: &Finish,
    now: i64,
    now_text: &str,
) -> Result<Option<(JobState, String)>> {
    let id = finish.lease.job_id.hyphenated().to_string();
    let attempt = finish.lease.attempt;
    let row = match &finish.outcome {
        Outcome::Completed { duration_ms } => complete(conn, q, &id, attempt, *duration_ms, now),
        Outcome::Retry {
            error,
            retry_in,
            duration_ms,
        } => {
            let retry_us = delay_us(*retry_in);
            let failure = Failure {
                error,
                retry_us,
                permanent: false,
                duration_ms: *duration_ms,
            };
            fail(conn, q, &id, attempt, &failure, now, now_text)
        }
        Outcome::Failed { error, duration_ms } => {
            let failure = Failure {
                error,
                retry_us: 0,
                permanent: true,
                duration_ms: *duration_ms,
            };
            fail(conn, q, &id, attempt, &failure, now, now_text)
        }
        Outcome::Snoozed { retry_in } => snooze(conn, q, &id, attempt, delay_us(*retry_in), now),
        Outcome::Released => snooze(conn, q, &id, attempt, 0, now),
    };
    match row.map_err(map_sqlite)? {
        Some((state, queue)) => Ok(Some((state.parse()?, queue))),
        None => Ok(None),
    }
}

/// `(state, queue)` of the row an outcome statement changed, if any.
type Changed = rusqlite::Result<Option<(String, String)>>;

fn complete(
    conn: &Connection,
    q: &Queries,
    id: &str,
    attempt: i32,
    duration_ms: i64,
    now: i64,
) -> Changed {
    conn.prepare_cached(&q.job_complete_many[0])?
        .query_row(
            named_params! { ":id": id, ":attempt": attempt, ":duration_ms": duration_ms, ":now": now },
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
}

/// What a failed attempt reports.
struct Failure<'a> {
    error: &'a str,
    retry_us: i64,
    permanent: bool,
    duration_ms: i64,
}

fn fail(
    conn: &Connection,
    q: &Queries,
    id: &str,
    attempt: i32,
    f: &Failure<'_>,
    now: i64,
    now_text: &str,
) -> Changed {
    let error = hopper_core::limits::bounded_error(f.error);
    conn.prepare_cached(&q.job_fail_many[0])?
        .query_row(
            named_params! {
                ":id": id, ":attempt": attempt, ":error": error, ":retry_us": f.retry_us,
                ":permanent": f.permanent, ":duration_ms": f.duration_ms,
                ":now": now, ":now_text": now_text,
            },
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
}

fn snooze(
    conn: &Connection,
    q: &Queries,
    id: &str,
    attempt: i32,
    retry_us: i64,
    now: i64,
) -> Changed {
    conn.prepare_cached(&q.job_snooze_many[0])?
        .query_row(
            named_params! { ":id": id, ":attempt": attempt, ":retry_us": retry_us, ":now": now },
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
}

/// Collects `(queue, state)` rows and returns how many there were and the queues of those
/// now available.
pub fn released_rows(
    statement: &mut rusqlite::CachedStatement<'_>,
    params: &[(&str, &dyn rusqlite::ToSql)],
) -> Result<(u64, Vec<String>)> {
    let mut rows = statement.query(params).map_err(map_sqlite)?;
    let mut count = 0u64;
    let mut woken = Vec::new();
    while let Some(row) = rows.next().map_err(map_sqlite)? {
        count += 1;
        let queue: String = col(row, 0)?;
        let state: String = col(row, 1)?;
        if state == "available" && !woken.contains(&queue) {
            woken.push(queue);
        }
    }
    Ok((count, woken))
}
