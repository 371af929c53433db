//! Scheduling and control on SQLite (docs/scheduling.md): unique keys and groups at
//! insert, per-queue settings (pause, global concurrency and rate limits), the claim of a
//! queue with settings (groups take turns), and periodic jobs.
//!
//! Every function runs inside the caller's `BEGIN IMMEDIATE` transaction, which holds the
//! database's only write lock: what PostgreSQL settles with `ON CONFLICT`, row locks and
//! `SKIP LOCKED`, SQLite settles by being the only writer, so a read followed by a write is
//! as safe here as one statement is there.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use hopper_core::policy::{self, TokenBucket};
use hopper_core::{
    ClaimParams, ClaimedJob, CronAdvance, CronEntry, Error, InsertOutcome, NewJob, Priority,
    QueueSettings, QueueUpdate, RateLimit, Result, UniquePolicy,
};
use rusqlite::{Connection, OptionalExtension, Row, named_params};

use crate::error::map_sqlite;
use crate::poison::{self, Decoded};
use crate::query::{Inserted, Inserter, claimed_job};
use crate::rows::{self, col, delay_us, micros};
use crate::sql::Queries;

/// The statements of `job_claim_controlled.sql`, by position.
mod step {
    pub const RUNNING: usize = 0;
    pub const NEXT_GROUP: usize = 1;
    pub const FIRST_GROUP: usize = 2;
    pub const GROUP_JOBS: usize = 3;
    pub const QUEUE_JOBS: usize = 4;
    pub const CLAIM_ONE: usize = 5;
    pub const STORE_TOKENS: usize = 6;
}

/// One row of `hopper_queues`, with the rate bucket.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The public settings.
    pub settings: QueueSettings,
    tokens: f64,
    refilled_at: Option<i64>,
}

fn stored(row: &Row<'_>) -> Result<Stored> {
    let count = |i: usize| -> Result<Option<u32>> {
        let n: Option<i64> = col(row, i)?;
        Ok(n.and_then(|n| u32::try_from(n).ok()))
    };
    let rate = match (count(5)?, col::<Option<i64>>(row, 6)?, count(7)?) {
        (Some(jobs), Some(per_ms), burst) => Some(RateLimit {
            jobs,
            per: Duration::from_millis(u64::try_from(per_ms).unwrap_or(1)),
            burst: burst.unwrap_or(1),
        }),
        _ => None,
    };
    Ok(Stored {
        settings: QueueSettings {
            queue: col(row, 0)?,
            paused: col(row, 1)?,
            grouped: col(row, 2)?,
            max_running: count(3)?,
            max_running_per_group: count(4)?,
            rate,
        },
        tokens: col(row, 8)?,
        refilled_at: col(row, 9)?,
    })
}

/// The settings of every queue (`queue` `None`), or of one.
pub fn settings(conn: &Connection, q: &Queries, queue: Option<&str>) -> Result<Vec<Stored>> {
    let mut statement = conn.prepare_cached(&q.queue_list[0]).map_err(map_sqlite)?;
    let mut found = statement
        .query(named_params! { ":queue": queue })
        .map_err(map_sqlite)?;
    let mut out = Vec::new();
    while let Some(row) = found.next().map_err(map_sqlite)? {
        out.push(stored(row)?);
    }
    Ok(out)
}

/// Creates or changes one queue's settings; returns them.
pub fn update(conn: &Connection, q: &Queries, u: &QueueUpdate, now: i64) -> Result<QueueSettings> {
    let limit = |l: Option<Option<u32>>| (l.is_some(), l.flatten().map(i64::from));
    let (set_max, max) = limit(u.max_running);
    let (set_group, group) = limit(u.max_running_per_group);
    let rate = u.rate.flatten();
    let mut statement = conn
        .prepare_cached(&q.queue_update[0])
        .map_err(map_sqlite)?;
    let mut rows = statement
        .query(named_params! {
            ":queue": u.queue,
            ":paused": u.paused,
            ":set_max_running": set_max,
            ":max_running": max,
            ":set_max_running_per_group": set_group,
            ":max_running_per_group": group,
            ":set_rate": u.rate.is_some(),
            ":rate_limit": rate.map(|r| i64::from(r.jobs)),
            ":rate_interval_ms": rate.map(|r| i64::try_from(r.per.as_millis()).unwrap_or(i64::MAX)),
            ":rate_burst": rate.map(|r| i64::from(r.burst)),
            ":now": now,
        })
        .map_err(map_sqlite)?;
    match rows.next().map_err(map_sqlite)? {
        Some(row) => Ok(stored(row)?.settings),
        None => Err(Error::Schema("queue_update.sql returned no row".into())),
    }
}

/// Inserts validated `jobs`, honouring group and unique keys. Returns what became of each
/// and the queues that got available jobs.
pub fn upsert(
    conn: &Connection,
    q: &Queries,
    jobs: &[NewJob],
    now: DateTime<Utc>,
) -> Result<(Vec<InsertOutcome>, Vec<String>)> {
    let now_us = micros(now);
    // Which queues rotate between groups; the first grouped job of a queue turns it so.
    let mut grouped: HashMap<&str, bool> = HashMap::new();
    for job in jobs {
        if !grouped.contains_key(job.queue.as_str()) {
            let is = settings(conn, q, Some(&job.queue))?
                .first()
                .is_some_and(|s| s.settings.grouped);
            grouped.insert(&job.queue, is);
        }
        if job.group.is_some() && grouped.get(job.queue.as_str()) == Some(&false) {
            let [mark, join] = &q.queue_mark_grouped[..] else {
                return Err(Error::Schema(
                    "queue_mark_grouped.sql has two statements".into(),
                ));
            };
            conn.prepare_cached(mark)
                .and_then(|mut s| s.execute(named_params! { ":queue": job.queue, ":now": now_us }))
                .map_err(map_sqlite)?;
            conn.prepare_cached(join)
                .and_then(|mut s| s.execute(named_params! { ":queue": job.queue }))
                .map_err(map_sqlite)?;
            grouped.insert(&job.queue, true);
        }
    }
    let mut inserter = Inserter::new(conn, q)?;
    let mut outcomes = Vec::with_capacity(jobs.len());
    let mut woken: Vec<String> = Vec::new();
    for (index, job) in jobs.iter().enumerate() {
        let group = match (&job.group, grouped.get(job.queue.as_str())) {
            (Some(group), _) => Some(group.as_str()),
            (None, Some(true)) => Some(""),
            (None, _) => None,
        };
        let window = job
            .unique_window_start(job.run_at.unwrap_or(now))
            .map(micros);
        let (outcome, due_queue) = match inserter.insert(job, now_us, group, window)? {
            Inserted::Yes { due } => (InsertOutcome::Inserted, due.then_some(&job.queue)),
            Inserted::Taken => resolve(conn, q, (jobs, index), group, window, now_us)?,
        };
        if let Some(queue) = due_queue
            && !woken.contains(queue)
        {
            woken.push(queue.clone());
        }
        outcomes.push(outcome);
    }
    Ok((outcomes, woken))
}

/// `jobs[index]` was not inserted: finds who holds its key and applies its policy.
/// Returns the outcome and, when a waiting holder was replaced and is due, its queue.
fn resolve<'j>(
    conn: &Connection,
    q: &Queries,
    (jobs, index): (&'j [NewJob], usize),
    group: Option<&str>,
    window: Option<i64>,
    now: i64,
) -> Result<(InsertOutcome, Option<&'j String>)> {
    let Some(job) = jobs.get(index) else {
        return Err(Error::InvalidInput(format!(
            "no job at {index} of the insert"
        )));
    };
    let id_taken = || Error::Conflict(format!("a job with id {} already exists", job.id));
    let Some(key) = &job.unique_key else {
        return Err(id_taken());
    };
    let holder: Option<(String, String)> = conn
        .prepare_cached(&q.job_unique_holder[0])
        .and_then(|mut s| {
            s.query_row(named_params! { ":key": key, ":window": window }, |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
        })
        .map_err(map_sqlite)?;
    let Some((holder, state)) = holder else {
        return Err(id_taken());
    };
    let existing = rows::uuid(&holder)?;
    match job.unique_policy {
        UniquePolicy::Ignore => Ok((InsertOutcome::Duplicate { existing }, None)),
        UniquePolicy::Reject => Err(policy::unique_key_rejected(
            jobs, index, key, existing, state,
        )),
        UniquePolicy::Replace => {
            let run_at = job.run_at.map_or(now, micros);
            let args = serde_json::to_string(&job.args)?;
            let meta = serde_json::to_string(&job.meta)?;
            let replaced: Option<String> = conn
                .prepare_cached(&q.job_replace[0])
                .and_then(|mut s| {
                    s.query_row(
                        named_params! {
                            ":id": holder,
                            ":kind": job.kind,
                            ":args": args,
                            ":priority": job.priority.0,
                            ":run_at": run_at,
                            ":max_attempts": job.max_attempts,
                            ":timeout_ms": job.timeout_ms(),
                            ":group_key": group,
                            ":now": now,
                            ":meta": meta,
                        },
                        |r| r.get(0),
                    )
                    .optional()
                })
                .map_err(map_sqlite)?;
            Ok(match replaced {
                Some(state) => (
                    InsertOutcome::Replaced { existing },
                    (state == "available").then_some(&job.queue),
                ),
                None => (InsertOutcome::Duplicate { existing }, None),
            })
        }
    }
}

/// Claims from a queue with settings (see `job_claim_controlled.sql`). `cursor` is the
/// group this backend served last in the queue; `kinds` (a JSON array), if any, the only
/// kinds to claim. Returns the jobs (each read on its own: see `poison.rs`) and the new
/// cursor.
pub fn claim(
    conn: &Connection,
    q: &Queries,
    p: &ClaimParams,
    queue: &Stored,
    now: i64,
    cursor: Option<&str>,
    kinds: Option<&str>,
) -> Result<(Vec<Decoded<ClaimedJob>>, Option<String>)> {
    let s = &queue.settings;
    if s.paused {
        return Ok((Vec::new(), None));
    }
    let steps = &q.job_claim_controlled;
    let mut allowance = i64::from(p.limit);
    // Running jobs, by group, only when a limit needs them.
    let mut running: HashMap<String, i64> = HashMap::new();
    if s.max_running.is_some() || s.max_running_per_group.is_some() {
        let mut statement = conn
            .prepare_cached(&steps[step::RUNNING])
            .map_err(map_sqlite)?;
        let mut found = statement
            .query(named_params! { ":queue": p.queue })
            .map_err(map_sqlite)?;
        while let Some(row) = found.next().map_err(map_sqlite)? {
            running.insert(col(row, 0)?, col(row, 1)?);
        }
    }
    if let Some(max) = s.max_running {
        allowance = allowance.min(i64::from(max) - running.values().sum::<i64>());
    }
    // The token bucket, refilled continuously up to its burst.
    let bucket = match s.rate {
        // A refill time hopper cannot read (written by hand) is read as never refilled, a
        // full bucket, rather than fail every claim of the queue.
        Some(rate) => Some(TokenBucket::refill(
            &rate,
            queue.tokens,
            rows::opt_time(queue.refilled_at).ok().flatten(),
            rows::time(now)?,
        )),
        None => None,
    };
    if let Some(bucket) = bucket {
        allowance = allowance.min(i64::from(bucket.whole()));
    }
    let (picked, cursor) = if allowance <= 0 {
        (Vec::new(), cursor.map(str::to_owned))
    } else if s.grouped {
        let room = |g: &str| match s.max_running_per_group {
            Some(max) => i64::from(max) - running.get(g).copied().unwrap_or(0),
            None => allowance,
        };
        pick_fair(conn, steps, &p.queue, kinds, allowance, cursor, room)?
    } else {
        let ids = ids(
            conn,
            &steps[step::QUEUE_JOBS],
            named_params! {
                ":queue": p.queue, ":kinds": kinds, ":limit": allowance,
            },
        )?;
        (ids, None)
    };
    let mut claimed = Vec::with_capacity(picked.len());
    let mut statement = conn
        .prepare_cached(&steps[step::CLAIM_ONE])
        .map_err(map_sqlite)?;
    for id in picked {
        let mut rows = statement
            .query(named_params! {
                ":id": id,
                ":node": p.node.hyphenated().to_string(),
                ":lease_us": delay_us(p.lease),
                ":now": now,
            })
            .map_err(map_sqlite)?;
        if let Some(row) = rows.next().map_err(map_sqlite)? {
            claimed.push(poison::decode(row, 0, claimed_job)?);
        }
    }
    if let Some(bucket) = bucket {
        conn.prepare_cached(&steps[step::STORE_TOKENS])
            .and_then(|mut st| {
                st.execute(named_params! {
                    ":tokens": bucket.after(claimed.len()),
                    ":now": now,
                    ":queue": p.queue,
                })
            })
            .map_err(map_sqlite)?;
    }
    Ok((claimed, cursor))
}

/// Runs a statement returning ids.
fn ids(
    conn: &Connection,
    sql: &str,
    params: &[(&str, &dyn rusqlite::ToSql)],
) -> Result<Vec<String>> {
    let mut statement = conn.prepare_cached(sql).map_err(map_sqlite)?;
    let mut found = statement.query(params).map_err(map_sqlite)?;
    let mut out = Vec::new();
    while let Some(row) = found.next().map_err(map_sqlite)? {
        out.push(col(row, 0)?);
    }
    Ok(out)
}

/// Round-robin between the groups of a queue: the ring of groups with ready jobs starting
/// after `cursor` (one index probe per group), each group's first jobs in claim order, then
/// the first job of every group in ring order, the second of every group, and so on, up to
/// `allowance`. Groups without `room` (at their per-group limit) are skipped.
fn pick_fair(
    conn: &Connection,
    steps: &[String],
    queue: &str,
    kinds: Option<&str>,
    allowance: i64,
    cursor: Option<&str>,
    room: impl Fn(&str) -> i64,
) -> Result<(Vec<String>, Option<String>)> {
    let next = |after: &str| -> Result<Option<String>> {
        let after_it: Option<String> = conn
            .prepare_cached(&steps[step::NEXT_GROUP])
            .and_then(|mut s| {
                s.query_row(named_params! { ":queue": queue, ":after": after }, |r| {
                    r.get(0)
                })
                .optional()
            })
            .map_err(map_sqlite)?;
        match after_it {
            Some(g) => Ok(Some(g)),
            None => conn
                .prepare_cached(&steps[step::FIRST_GROUP])
                .and_then(|mut s| {
                    s.query_row(named_params! { ":queue": queue }, |r| r.get(0))
                        .optional()
                })
                .map_err(map_sqlite),
        }
    };
    let Some(first) = next(cursor.unwrap_or(""))? else {
        return Ok((Vec::new(), cursor.map(str::to_owned)));
    };
    // Bounded: at most `allowance` groups with room, and a fixed number of full ones.
    let (mut ring, mut probes, mut group) = (Vec::new(), 0usize, first.clone());
    loop {
        if room(&group) > 0 {
            ring.push(group.clone());
        }
        probes += 1;
        if ring.len() as i64 >= allowance || probes > allowance as usize + 1000 {
            break;
        }
        match next(&group)? {
            Some(g) if g != first => group = g,
            _ => break,
        }
    }
    if ring.is_empty() {
        return Ok((Vec::new(), cursor.map(str::to_owned)));
    }
    let per_group = (allowance + ring.len() as i64 - 1) / ring.len() as i64;
    let mut candidates = Vec::with_capacity(ring.len());
    for g in &ring {
        let limit = per_group.min(room(g));
        candidates.push(ids(
            conn,
            &steps[step::GROUP_JOBS],
            named_params! {
                ":queue": queue, ":group_key": g, ":kinds": kinds, ":limit": limit,
            },
        )?);
    }
    let (mut picked, mut last) = (Vec::new(), None);
    'turns: for turn in 0..per_group as usize {
        for (g, jobs) in ring.iter().zip(&candidates) {
            if let Some(id) = jobs.get(turn) {
                picked.push(id.clone());
                last = Some(g.clone());
                if picked.len() as i64 >= allowance {
                    break 'turns;
                }
            }
        }
    }
    // Nothing picked (the ring's jobs are all of kinds not asked for): the next claim
    // starts after this ring, so that groups beyond it are reached.
    Ok((picked, last.or_else(|| ring.last().cloned())))
}

/// Registers (or refreshes) periodic entries.
pub fn cron_register(
    conn: &Connection,
    q: &Queries,
    entries: &[CronEntry],
    now: i64,
) -> Result<()> {
    let mut statement = conn
        .prepare_cached(&q.cron_register[0])
        .map_err(map_sqlite)?;
    for e in entries {
        hopper_core::job::validate_name("periodic job", &e.name)?;
        hopper_core::job::validate_name("queue", &e.queue)?;
        hopper_core::job::validate_name("kind", &e.kind)?;
        statement
            .execute(named_params! {
                ":name": e.name,
                ":schedule": e.schedule,
                ":timezone": e.timezone,
                ":queue": e.queue,
                ":kind": e.kind,
                ":args": serde_json::to_string(&e.args)?,
                ":priority": e.priority.0,
                ":max_attempts": e.max_attempts,
                ":timeout_ms": e.timeout_ms,
                ":catch_up": e.catch_up,
                ":next_run_at": micros(e.next_run_at),
                ":now": now,
            })
            .map_err(map_sqlite)?;
    }
    Ok(())
}

/// Every periodic entry, by name.
pub fn cron_list(conn: &Connection, q: &Queries) -> Result<Vec<CronEntry>> {
    let mut statement = conn.prepare_cached(&q.cron_list[0]).map_err(map_sqlite)?;
    let mut found = statement.query([]).map_err(map_sqlite)?;
    let mut out = Vec::new();
    while let Some(r) = found.next().map_err(map_sqlite)? {
        out.extend(rows::listed("periodic job", cron_entry(r)));
    }
    Ok(out)
}

/// A row of `cron_list.sql`.
fn cron_entry(r: &rusqlite::Row<'_>) -> Result<CronEntry> {
    let last_job: Option<String> = col(r, 12)?;
    Ok(CronEntry {
        name: col(r, 0)?,
        schedule: col(r, 1)?,
        timezone: col(r, 2)?,
        queue: col(r, 3)?,
        kind: col(r, 4)?,
        args: serde_json::from_str(&col::<String>(r, 5)?)?,
        priority: Priority(i16::try_from(col::<i64>(r, 6)?).unwrap_or(Priority::NORMAL.0)),
        max_attempts: rows::int(col(r, 7)?, "max_attempts")?,
        timeout_ms: rows::int(col(r, 8)?, "timeout_ms")?,
        catch_up: col(r, 9)?,
        next_run_at: rows::time(col(r, 10)?)?,
        last_run_at: rows::opt_time(col(r, 11)?)?,
        last_job_id: last_job.as_deref().map(rows::uuid).transpose()?,
    })
}

/// Enqueues a periodic entry's due ticks if its `next_run_at` is still the expected one
/// (compare-and-set). Returns whether it moved, and the queues to wake.
pub fn cron_advance(
    conn: &Connection,
    q: &Queries,
    advance: &CronAdvance,
    now: DateTime<Utc>,
) -> Result<(bool, Vec<String>)> {
    let jobs = policy::cron_tick_jobs(advance);
    for job in &jobs {
        job.validate()?;
    }
    let last_tick = advance.jobs.last().map(|(tick, _)| micros(*tick));
    let last_id = jobs.last().map(|j| j.id.hyphenated().to_string());
    let moved: Option<String> = conn
        .prepare_cached(&q.cron_advance[0])
        .and_then(|mut s| {
            s.query_row(
                named_params! {
                    ":name": advance.name,
                    ":expected": micros(advance.expected_next_run_at),
                    ":next_run_at": micros(advance.next_run_at),
                    ":last_run_at": last_tick,
                    ":last_job_id": last_id,
                },
                |r| r.get(0),
            )
            .optional()
        })
        .map_err(map_sqlite)?;
    if moved.is_none() {
        return Ok((false, Vec::new()));
    }
    let (_, woken) = upsert(conn, q, &jobs, now)?;
    Ok((true, woken))
}
