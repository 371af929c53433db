//! Leases as fencing tokens: only the current attempt may report, extend or finish.

use std::collections::HashSet;
use std::time::Duration;

use hopper_core::backend::{
    Finish, FinishResult, JobAttemptsOfNodeParams, JobCancelParams, JobExtendManyParams,
    JobLeasesOfNodeParams, Outcome,
};
use hopper_core::{JobState, Lease};

use uuid::Uuid;

use crate::{Harness, LEASE, completed, job, retry, secs};

/// A job whose first lease expired, was rescued, and was claimed again: returns the stale
/// lease (attempt 1) and the current one (attempt 2).
async fn stale_and_current(h: &Harness) -> anyhow::Result<(Lease, Lease)> {
    h.insert(job("slow", "default")).await?;
    let first = h
        .claim_as(h.node.id, "default", 1, Duration::from_secs(10))
        .await?;
    anyhow::ensure!(first.len() == 1, "one job claimed");
    h.advance(Duration::from_secs(11));
    assert_eq!(h.maintenance().job_rescue_expired().await?, 1);
    let second = h.claim_one("default").await?;
    assert_eq!(second.lease.job_id, first[0].lease.job_id);
    assert_eq!(second.lease.attempt, first[0].lease.attempt + 1);
    Ok((first[0].lease, second.lease))
}

/// Stale lease outcomes are refused and change nothing.
pub async fn stale_lease_outcomes_are_refused_and_change_nothing(
    h: &Harness,
) -> anyhow::Result<()> {
    let (stale, current) = stale_and_current(h).await?;
    let before = h.get(stale.job_id).await?;
    assert_eq!(before.state, JobState::Running);
    assert_eq!(before.errors.len(), 1, "the expiry is recorded");

    let outcomes = [
        completed(),
        retry("late failure", Duration::from_secs(1)),
        Outcome::Failed {
            error: "late permanent failure".into(),
            duration_ms: 1,
        },
        Outcome::Snoozed {
            retry_in: Duration::from_secs(5),
        },
        Outcome::Released,
    ];
    for outcome in outcomes {
        let result = h.finish(stale, outcome.clone()).await?;
        assert_eq!(result, FinishResult::LeaseLost, "{outcome:?}");
    }
    let lost = h
        .backend
        .job_extend_many(&JobExtendManyParams {
            leases: vec![stale],
            by: Duration::from_secs(600),
        })
        .await?;
    assert_eq!(lost, vec![stale]);
    assert_eq!(h.get(stale.job_id).await?, before, "nothing changed");

    // The current holder is unaffected, in the same batch as a stale report or alone.
    let results = h
        .backend
        .job_finish_many(&[
            Finish {
                lease: current,
                outcome: completed(),
            },
            Finish {
                lease: stale,
                outcome: completed(),
            },
        ])
        .await?;
    assert_eq!(
        results,
        vec![
            FinishResult::Recorded(JobState::Completed),
            FinishResult::LeaseLost
        ]
    );
    assert_eq!(h.get(stale.job_id).await?.state, JobState::Completed);
    Ok(())
}

/// Extend moves the lease forward.
pub async fn extend_moves_the_lease_forward(h: &Harness) -> anyhow::Result<()> {
    let id = h.insert(job("long", "default")).await?;
    let other = h.insert(job("long", "default")).await?;
    let claimed = h
        .claim_as(h.node.id, "default", 2, Duration::from_secs(10))
        .await?;
    let lease = claimed
        .iter()
        .find(|c| c.lease.job_id == id)
        .expect("claimed")
        .lease;
    h.advance(Duration::from_secs(8));
    let lost = h
        .backend
        .job_extend_many(&JobExtendManyParams {
            leases: vec![lease],
            by: Duration::from_secs(10),
        })
        .await?;
    assert!(lost.is_empty());
    assert_eq!(h.get(id).await?.lease_expires_at, Some(h.now() + secs(10)));
    // At 15 s the other job's lease (10 s) expired, the extended one (18 s) did not.
    h.advance(Duration::from_secs(7));
    assert_eq!(h.maintenance().job_rescue_expired().await?, 1);
    assert_eq!(h.get(other).await?.state, JobState::Available);
    assert_eq!(h.get(id).await?.state, JobState::Running);
    h.advance(Duration::from_secs(4));
    assert_eq!(h.maintenance().job_rescue_expired().await?, 1);
    assert_eq!(h.get(id).await?.state, JobState::Available);
    Ok(())
}

/// A renewal never moves a lease earlier: a heartbeat's `by` (the runtime's lease) after a
/// handler's longer extend leaves the longer one.
pub async fn a_renewal_never_moves_a_lease_earlier(h: &Harness) -> anyhow::Result<()> {
    let id = h.insert(job("long", "default")).await?;
    let lease = h.claim_one("default").await?.lease;
    let extend = |by| JobExtendManyParams {
        leases: vec![lease],
        by,
    };
    assert!(
        h.backend
            .job_extend_many(&extend(Duration::from_secs(3600)))
            .await?
            .is_empty()
    );
    let until = h.now() + secs(3600);
    h.advance(Duration::from_secs(5));
    assert!(
        h.backend
            .job_extend_many(&extend(Duration::from_secs(10)))
            .await?
            .is_empty(),
        "a shorter renewal keeps the lease"
    );
    assert_eq!(h.get(id).await?.lease_expires_at, Some(until));
    h.advance(Duration::from_secs(60));
    assert_eq!(h.maintenance().job_rescue_expired().await?, 0);
    assert_eq!(h.get(id).await?.state, JobState::Running);
    // Past the longer lease, a renewal moves it on from now again.
    h.advance(Duration::from_secs(3600));
    assert!(
        h.backend
            .job_extend_many(&extend(Duration::from_secs(10)))
            .await?
            .is_empty()
    );
    assert_eq!(h.get(id).await?.lease_expires_at, Some(h.now() + secs(10)));
    Ok(())
}

/// Finished job refuses a second outcome.
pub async fn finished_job_refuses_a_second_outcome(h: &Harness) -> anyhow::Result<()> {
    let id = h.insert(job("once", "default")).await?;
    let claimed = h.claim_one("default").await?;
    assert_eq!(
        h.finish(claimed.lease, completed()).await?,
        FinishResult::Recorded(JobState::Completed)
    );
    let done = h.get(id).await?;
    assert_eq!(
        h.finish(claimed.lease, retry("after the fact", Duration::ZERO))
            .await?,
        FinishResult::LeaseLost
    );
    assert_eq!(
        h.finish(claimed.lease, completed()).await?,
        FinishResult::LeaseLost
    );
    let lost = h
        .backend
        .job_extend_many(&JobExtendManyParams {
            leases: vec![claimed.lease],
            by: Duration::from_secs(5),
        })
        .await?;
    assert_eq!(lost, vec![claimed.lease]);
    assert_eq!(h.get(id).await?, done);
    Ok(())
}

/// Cancel revokes a running lease.
pub async fn cancel_revokes_a_running_lease(h: &Harness) -> anyhow::Result<()> {
    let id = h.insert(job("cancel", "default")).await?;
    let claimed = h.claim_one("default").await?;
    let record = h.backend.job_cancel(&JobCancelParams { id }).await?;
    assert_eq!(record.state, JobState::Cancelled);
    assert_eq!(record.finished_at, Some(h.now()));
    assert_eq!(
        h.finish(claimed.lease, completed()).await?,
        FinishResult::LeaseLost
    );
    let lost = h
        .backend
        .job_extend_many(&JobExtendManyParams {
            leases: vec![claimed.lease],
            by: Duration::from_secs(5),
        })
        .await?;
    assert_eq!(lost, vec![claimed.lease]);
    // Nor does the rescuer bring it back.
    h.advance(Duration::from_secs(3600));
    assert_eq!(h.maintenance().job_rescue_expired().await?, 0);
    assert_eq!(h.get(id).await?.state, JobState::Cancelled);
    Ok(())
}

/// Of the leases asked about, those a node runs are found: not another node's, not an
/// earlier attempt, not a finished job's.
pub async fn leases_of_a_node_are_only_those_it_runs(h: &Harness) -> anyhow::Result<()> {
    let (stale, current) = stale_and_current(h).await?;
    h.insert(job("done", "default")).await?;
    let done = h.claim_one("default").await?.lease;
    assert!(matches!(
        h.finish(done, completed()).await?,
        FinishResult::Recorded(_)
    ));
    let elsewhere = Uuid::now_v7();
    h.insert(job("theirs", "theirs")).await?;
    let theirs = h.claim_as(elsewhere, "theirs", 1, LEASE).await?;
    anyhow::ensure!(theirs.len() == 1, "one job claimed");
    let theirs = theirs[0].lease;
    let asked = vec![stale, current, done, theirs];
    let of = |node| JobLeasesOfNodeParams {
        node,
        leases: asked.clone(),
    };
    let maintenance = h.maintenance();
    assert_eq!(
        maintenance.job_leases_of_node(&of(h.node.id)).await?,
        vec![current]
    );
    assert_eq!(
        maintenance.job_leases_of_node(&of(elsewhere)).await?,
        vec![theirs]
    );
    let nobody = maintenance.job_leases_of_node(&of(Uuid::now_v7())).await?;
    assert!(nobody.is_empty(), "{nobody:?}");
    Ok(())
}

/// Of the attempts asked about, those a node made that are their job's latest are found,
/// whatever the job's state now: running, completed, waiting for a retry, cancelled. Not
/// another node's (running or finished), not an earlier attempt, not a missing job's.
pub async fn attempts_of_a_node_are_its_jobs_latest_in_any_state(
    h: &Harness,
) -> anyhow::Result<()> {
    let (stale, running) = stale_and_current(h).await?;
    let mine = |queue: &'static str| async move {
        h.insert(job(queue, queue)).await?;
        anyhow::Ok(h.claim_one(queue).await?.lease)
    };
    let done = mine("done").await?;
    assert!(matches!(
        h.finish(done, completed()).await?,
        FinishResult::Recorded(_)
    ));
    let retrying = mine("retrying").await?;
    assert!(matches!(
        h.finish(retrying, retry("flaky", Duration::from_secs(60)))
            .await?,
        FinishResult::Recorded(_)
    ));
    assert_eq!(h.get(retrying.job_id).await?.state, JobState::Scheduled);
    let cancelled = mine("cancelled").await?;
    h.backend
        .job_cancel(&JobCancelParams {
            id: cancelled.job_id,
        })
        .await?;
    let elsewhere = Uuid::now_v7();
    let theirs = |queue: &'static str| async move {
        h.insert(job(queue, queue)).await?;
        let claimed = h.claim_as(elsewhere, queue, 1, LEASE).await?;
        anyhow::ensure!(claimed.len() == 1, "one job claimed");
        anyhow::Ok(claimed[0].lease)
    };
    let theirs_running = theirs("theirs").await?;
    let theirs_done = theirs("theirs-done").await?;
    assert!(matches!(
        h.finish(theirs_done, completed()).await?,
        FinishResult::Recorded(_)
    ));
    let missing = Lease {
        job_id: Uuid::now_v7(),
        attempt: 1,
    };
    let asked = vec![
        stale,
        running,
        done,
        retrying,
        cancelled,
        theirs_running,
        theirs_done,
        missing,
    ];
    let asked = &asked;
    let of = |node| async move {
        let params = JobAttemptsOfNodeParams {
            node,
            leases: asked.clone(),
        };
        let found = h.maintenance().job_attempts_of_node(&params).await?;
        anyhow::Ok(found.into_iter().collect::<HashSet<_>>())
    };
    assert_eq!(
        of(h.node.id).await?,
        HashSet::from([running, done, retrying, cancelled])
    );
    assert_eq!(
        of(elsewhere).await?,
        HashSet::from([theirs_running, theirs_done])
    );
    assert!(of(Uuid::now_v7()).await?.is_empty());
    let none = JobAttemptsOfNodeParams {
        node: h.node.id,
        leases: Vec::new(),
    };
    assert!(
        h.maintenance()
            .job_attempts_of_node(&none)
            .await?
            .is_empty()
    );
    Ok(())
}
