//! Where the plain claim starts (hopper-postgres `cursor.rs`, job_claim.sql): from the head
//! of the claim index in strict order while head claims are fast; after the last claimed
//! key once they are slow, with a head claim every `head_every` for the jobs that sort
//! before it; never one job under two leases. Each test has its own schema and a stopped
//! clock, so "`head_every` has passed" is a clock move, not a sleep.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use hopper::backend::{Backend, ClaimParams, ClaimedJob};
use hopper::testing::TestDatabase;
use hopper::{ClaimCursorConfig, ClaimStartMode, JobId, NewJob, Priority, TestClock};
use serde_json::json;
use uuid::Uuid;

const QUEUE: &str = "cursor";
const HEAD_EVERY: Duration = Duration::from_secs(60);

/// A schema whose backend's clock stands still until the test moves it.
async fn stopped_clock_db() -> anyhow::Result<(TestDatabase, TestClock)> {
    let clock = TestClock::new(Utc.with_ymd_and_hms(2026, 11, 24, 6, 0, 0).unwrap());
    let db = TestDatabase::with_clock(Arc::new(clock.clone())).await?;
    Ok((db, clock))
}

/// Every head claim counts as slow and one is enough: claims leave the head at once.
fn always_slow() -> ClaimCursorConfig {
    ClaimCursorConfig::default()
        .with_slow_head(Duration::ZERO)
        .with_slow_heads(1)
        .with_head_every(HEAD_EVERY)
}

/// [`stopped_clock_db`] whose head claims are all slow ([`always_slow`]), and its backend.
async fn slow_head_db() -> anyhow::Result<(TestDatabase, TestClock, Arc<dyn Backend>)> {
    let (db, clock) = stopped_clock_db().await?;
    db.pg().set_claim_cursor(always_slow());
    let backend = db.backend();
    Ok((db, clock, backend))
}

/// Inserts one job of `priority` on the test queue; its id.
async fn insert(db: &TestDatabase, priority: Priority) -> anyhow::Result<JobId> {
    let job = NewJob::new("cursor.test", json!({}))
        .with_queue(QUEUE)
        .with_priority(priority);
    let id = job.id;
    db.backend().job_insert(&job).await?;
    Ok(id)
}

/// Inserts `n` jobs of `priority`; their ids in insertion (= claim) order.
async fn insert_n(db: &TestDatabase, n: usize, priority: Priority) -> anyhow::Result<Vec<JobId>> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        ids.push(insert(db, priority).await?);
    }
    Ok(ids)
}

async fn claim(backend: &dyn Backend, limit: u32) -> anyhow::Result<Vec<ClaimedJob>> {
    Ok(backend
        .job_claim(&ClaimParams {
            queue: QUEUE.to_owned(),
            node: Uuid::now_v7(),
            limit,
            lease: Duration::from_secs(300),
            kinds: None,
        })
        .await?)
}

fn ids(jobs: &[ClaimedJob]) -> Vec<JobId> {
    jobs.iter().map(|j| j.lease.job_id).collect()
}

#[tokio::test]
async fn order_is_strict_while_head_claims_are_fast() -> anyhow::Result<()> {
    let (db, _clock) = stopped_clock_db().await?;
    // No head claim is ever slow: the head is clean by this measure.
    db.pg()
        .set_claim_cursor(always_slow().with_slow_head(Duration::MAX));
    let backend = db.backend();
    let normal = insert_n(&db, 6, Priority::NORMAL).await?;
    assert_eq!(ids(&claim(&*backend, 3).await?), normal[..3]);
    // Enqueued later but sorting before every claimed key: taken by the very next claim.
    let high = insert(&db, Priority::HIGH).await?;
    assert_eq!(ids(&claim(&*backend, 2).await?), [high, normal[3]]);
    let low = insert(&db, Priority::LOW).await?;
    let high2 = insert(&db, Priority::HIGH).await?;
    assert_eq!(
        ids(&claim(&*backend, 10).await?),
        [high2, normal[4], normal[5], low]
    );
    assert_eq!(db.pg().claim_start_mode(QUEUE), ClaimStartMode::Head);
    Ok(())
}

#[tokio::test]
async fn slow_head_claims_continue_after_the_cursor_and_come_back_within_head_every()
-> anyhow::Result<()> {
    let (db, clock, backend) = slow_head_db().await?;
    let normal = insert_n(&db, 10, Priority::NORMAL).await?;
    assert_eq!(ids(&claim(&*backend, 3).await?), normal[..3]);
    assert_eq!(db.pg().claim_start_mode(QUEUE), ClaimStartMode::AfterCursor);

    // Two high-priority jobs sort before the cursor: claims after it do not see them...
    let high = insert_n(&db, 2, Priority::HIGH).await?;
    assert_eq!(ids(&claim(&*backend, 2).await?), normal[3..5]);
    clock.advance(chrono::Duration::from_std(
        HEAD_EVERY - Duration::from_millis(1),
    )?);
    assert_eq!(ids(&claim(&*backend, 1).await?), normal[5..6]);

    // ...until `head_every` after the last head claim: the next claim reads the head.
    clock.advance(chrono::Duration::milliseconds(1));
    assert_eq!(
        ids(&claim(&*backend, 3).await?),
        [high[0], high[1], normal[6]]
    );
    // That head claim was slow too: the next ones continue after the cursor.
    assert_eq!(db.pg().claim_start_mode(QUEUE), ClaimStartMode::AfterCursor);
    assert_eq!(ids(&claim(&*backend, 10).await?), normal[7..]);
    Ok(())
}

#[tokio::test]
async fn a_full_head_claim_before_the_cursor_moves_the_cursor_back() -> anyhow::Result<()> {
    let (db, clock, backend) = slow_head_db().await?;
    let normal = insert_n(&db, 4, Priority::NORMAL).await?;
    assert_eq!(ids(&claim(&*backend, 2).await?), normal[..2]);
    // A backlog of a higher priority arrives, larger than one claim.
    let high = insert_n(&db, 5, Priority::HIGH).await?;
    clock.advance(chrono::Duration::from_std(HEAD_EVERY)?);
    assert_eq!(ids(&claim(&*backend, 3).await?), high[..3]);
    // The head claim came back full, all before the old cursor: the claims after the cursor
    // go on from its last key, so the rest of that backlog comes next, in order.
    assert_eq!(
        ids(&claim(&*backend, 3).await?),
        [high[3], high[4], normal[2]]
    );
    Ok(())
}

#[tokio::test]
async fn a_fast_head_claim_returns_to_strict_order() -> anyhow::Result<()> {
    let (db, clock, backend) = slow_head_db().await?;
    let normal = insert_n(&db, 4, Priority::NORMAL).await?;
    assert_eq!(ids(&claim(&*backend, 1).await?), normal[..1]);
    assert_eq!(db.pg().claim_start_mode(QUEUE), ClaimStartMode::AfterCursor);

    // The head is clean again (by this measure, no head claim is slow any more).
    db.pg()
        .set_claim_cursor(always_slow().with_slow_head(Duration::MAX));
    clock.advance(chrono::Duration::from_std(HEAD_EVERY)?);
    assert_eq!(ids(&claim(&*backend, 1).await?), normal[1..2]);
    assert_eq!(db.pg().claim_start_mode(QUEUE), ClaimStartMode::Head);
    let high = insert(&db, Priority::HIGH).await?;
    assert_eq!(ids(&claim(&*backend, 1).await?), [high]);
    Ok(())
}

#[tokio::test]
async fn concurrent_claims_after_the_cursor_never_claim_a_job_twice() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    // Head claims as often as they may (one at a time), among claims after the cursor.
    db.pg()
        .set_claim_cursor(always_slow().with_head_every(Duration::ZERO));
    let backend = db.backend();
    let jobs: Vec<NewJob> = (0..2000)
        .map(|n| {
            NewJob::new("cursor.test", json!({}))
                .with_queue(QUEUE)
                .with_priority(Priority(i16::try_from(n % 3).unwrap_or(0)))
        })
        .collect();
    let expected: HashSet<JobId> = jobs.iter().map(|j| j.id).collect();
    backend.job_insert_many(&jobs).await?;

    let mut claimers = Vec::new();
    for _ in 0..8 {
        let backend = backend.clone();
        claimers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = claim(&*backend, 37).await?;
                if got.is_empty() {
                    return anyhow::Ok(mine);
                }
                mine.extend(got);
            }
        }));
    }
    // Jobs a claimer skipped (locked by another) may sort before the cursor when the
    // claimers stop: the head claims pick them up, as the loop below does.
    let mut claimed: Vec<ClaimedJob> = Vec::new();
    for claimer in claimers {
        claimed.extend(claimer.await??);
    }
    loop {
        let got = claim(&*backend, 100).await?;
        if got.is_empty() {
            break;
        }
        claimed.extend(got);
    }
    let leases: HashSet<_> = claimed.iter().map(|j| j.lease).collect();
    assert_eq!(leases.len(), claimed.len(), "a lease handed out twice");
    assert!(claimed.iter().all(|j| j.lease.attempt == 1));
    let got: HashSet<JobId> = ids(&claimed).into_iter().collect();
    assert_eq!(got.len(), claimed.len(), "a job claimed twice");
    assert_eq!(got, expected, "every job claimed once");
    Ok(())
}
