//! What a W3 drain costs the database per job: WAL bytes, WAL records (and full-page
//! images among them) and commits, as the differences of PostgreSQL's own counters read
//! before and after the drain (`cost_counters.sql`).
//!
//! The counters are not the drain's alone: WAL is counted for the whole cluster and
//! commits for the whole database, so anything else running meanwhile (other sessions,
//! autovacuum, the drain's own 50 ms polls, which are read-only commits) is included.
//! Measure on a quiet database, or on a database of its own. Backends report their
//! counters when idle, at most once a second (and an idle one only after 10 s), so
//! before the second read every idle connection of the pool is asked to report at once
//! (`pg_stat_force_next_flush()`, PostgreSQL ≥ 15).

use anyhow::Context;
use hopper::PgBackend;
use serde::Serialize;

use super::{Bench, Report, drain};

/// `cost_counters.sql`.
const COUNTERS_SQL: &str = include_str!("cost_counters.sql");

/// The counters at one moment.
#[derive(Debug, Clone, Copy)]
struct Counters {
    wal_bytes: i64,
    wal_records: i64,
    wal_fpi: i64,
    commits: i64,
}

/// What one drain cost, in total and per job.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cost {
    /// WAL written meanwhile (whole cluster).
    pub wal_bytes: i64,
    /// WAL records written meanwhile (whole cluster).
    pub wal_records: i64,
    /// Full-page images among them.
    pub wal_fpi: i64,
    /// Transactions committed meanwhile in this database.
    pub commits: i64,
    /// `wal_bytes / jobs`.
    pub wal_bytes_per_job: f64,
    /// `wal_records / jobs`.
    pub wal_records_per_job: f64,
    /// `commits / jobs`.
    pub commits_per_job: f64,
}

impl Cost {
    fn between(before: Counters, after: Counters, jobs: u64) -> Cost {
        let per_job = |n: i64| {
            if jobs > 0 {
                n as f64 / jobs as f64
            } else {
                0.0
            }
        };
        let wal_bytes = after.wal_bytes - before.wal_bytes;
        let wal_records = after.wal_records - before.wal_records;
        let commits = after.commits - before.commits;
        Cost {
            wal_bytes,
            wal_records,
            wal_fpi: after.wal_fpi - before.wal_fpi,
            commits,
            wal_bytes_per_job: per_job(wal_bytes),
            wal_records_per_job: per_job(wal_records),
            commits_per_job: per_job(commits),
        }
    }
}

/// Runs W3 and prints its report with its cost (PostgreSQL only; elsewhere, or when the
/// counters cannot be read, the report alone).
pub async fn drain(bench: &Bench) -> anyhow::Result<()> {
    let pg = bench.client.backend().as_any().downcast_ref::<PgBackend>();
    let before = match pg {
        Some(pg) => counters(pg).await.map_err(warn).ok(),
        None => None,
    };
    let report = drain::run(bench).await?;
    let cost = match (pg, before) {
        (Some(pg), Some(before)) => {
            flush_stats(pg).await;
            let after = counters(pg).await.map_err(warn).ok();
            after.map(|after| Cost::between(before, after, report.jobs))
        }
        _ => None,
    };
    print(bench, &report, cost.as_ref());
    Ok(())
}

fn warn(e: anyhow::Error) {
    eprintln!("hopper bench: no cost per job: {e:#}");
}

/// The report, then its cost: in the same JSON object (`"cost": {…}`), or on a second
/// line of text.
fn print(bench: &Bench, report: &Report, cost: Option<&Cost>) {
    let Some(cost) = cost else {
        bench.print(report);
        return;
    };
    if bench.json {
        let mut value = serde_json::to_value(report).unwrap_or_default();
        if let (Some(object), Ok(cost)) = (value.as_object_mut(), serde_json::to_value(cost)) {
            object.insert("cost".to_owned(), cost);
        }
        println!("{value}");
    } else {
        bench.print(report);
        println!(
            "W3 cost per job  {:.0} WAL bytes, {:.2} WAL records ({} full-page images in all), {:.4} commits \
             (cluster-wide WAL, database-wide commits: other sessions included)",
            cost.wal_bytes_per_job, cost.wal_records_per_job, cost.wal_fpi, cost.commits_per_job
        );
    }
}

async fn counters(pg: &PgBackend) -> anyhow::Result<Counters> {
    let conn = pg
        .pool()
        .get()
        .await
        .context("reading WAL and commit counters")?;
    // Unnamed (no parameters to type): it works behind a transaction pooler too.
    let row = conn
        .query_typed_one(COUNTERS_SQL, &[])
        .await
        .context("reading pg_stat_wal and pg_stat_database")?;
    Ok(Counters {
        wal_bytes: row.try_get("wal_bytes")?,
        wal_records: row.try_get("wal_records")?,
        wal_fpi: row.try_get("wal_fpi")?,
        commits: row.try_get("commits")?,
    })
}

/// Has every idle connection of the pool report its counters now: each is held at once
/// (so each is asked), asked to report at its next idle moment, which comes when the
/// call returns.
async fn flush_stats(pg: &PgBackend) {
    let idle = pg.pool().status().available;
    let mut held = Vec::with_capacity(idle);
    for _ in 0..idle {
        match pg.pool().get().await {
            Ok(conn) => held.push(conn),
            Err(_) => break,
        }
    }
    for conn in &held {
        if let Err(e) = conn
            .batch_execute("SELECT pg_stat_force_next_flush()")
            .await
        {
            eprintln!("hopper bench: counters may lag by up to 10 s: {e}");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_is_the_difference_per_job() {
        let before = Counters {
            wal_bytes: 1_000,
            wal_records: 10,
            wal_fpi: 1,
            commits: 5,
        };
        let after = Counters {
            wal_bytes: 201_000,
            wal_records: 1_010,
            wal_fpi: 3,
            commits: 25,
        };
        let cost = Cost::between(before, after, 100);
        assert_eq!(cost.wal_bytes, 200_000);
        assert_eq!(cost.wal_fpi, 2);
        assert_eq!(cost.wal_bytes_per_job, 2_000.0);
        assert_eq!(cost.wal_records_per_job, 10.0);
        assert_eq!(cost.commits_per_job, 0.2);
        assert_eq!(Cost::between(before, after, 0).commits_per_job, 0.0);
    }
}
