//! Recovery: expired leases and dead nodes give their jobs back, as failed attempts.

use std::collections::HashSet;
use std::time::Duration;

use hopper_core::backend::{
    JobExtendManyParams, NodeDeregisterParams, NodeListParams, NodePage, NodeReleaseDeadParams,
};
use hopper_core::limits::MAX_DURATION;
use hopper_core::{Error, JobId, JobRecord, JobState, Lease, NewJob, NodeId};

use crate::{Harness, completed, job, node_info, secs};

const TEN_MINUTES: Duration = Duration::from_secs(600);

/// Nodes silent for 30 seconds are dead.
const DEAD_AFTER_30S: NodeReleaseDeadParams = NodeReleaseDeadParams {
    dead_after: Duration::from_secs(30),
};

/// Expired lease is rescued as a failed attempt.
pub async fn expired_lease_is_rescued_as_a_failed_attempt(h: &Harness) -> anyhow::Result<()> {
    let id = h
        .insert(job("vanish", "default").with_max_attempts(3))
        .await?;
    let claimed = h
        .claim_as(h.node.id, "default", 1, Duration::from_secs(10))
        .await?;
    assert_eq!(claimed.len(), 1);
    h.advance(Duration::from_secs(10));
    assert_eq!(
        h.maintenance().job_rescue_expired().await?,
        0,
        "a lease is good until it has passed"
    );
    assert_eq!(h.get(id).await?.state, JobState::Running);
    h.advance(Duration::from_secs(1));
    assert_eq!(h.maintenance().job_rescue_expired().await?, 1);
    let got = h.get(id).await?;
    assert_eq!(got.state, JobState::Available);
    assert_eq!(got.run_at, h.now());
    assert_eq!(got.lease_expires_at, None);
    assert_eq!(got.errors.len(), 1);
    let e = &got.errors[0];
    assert!(e.error.contains("lease expired"), "{:?}", e.error);
    assert_eq!(e.attempt, 1);
    assert_eq!(e.node, Some(h.node.id));
    assert_eq!(e.at, h.now());
    let again = h.claim_one("default").await?;
    assert_eq!(again.counted_attempt, 2, "the expired run counted");
    Ok(())
}

/// Expired lease on last attempt dead letters.
pub async fn expired_lease_on_last_attempt_dead_letters(h: &Harness) -> anyhow::Result<()> {
    let id = h
        .insert(job("vanish", "default").with_max_attempts(1))
        .await?;
    h.claim_as(h.node.id, "default", 1, Duration::from_secs(10))
        .await?;
    h.advance(Duration::from_secs(11));
    assert_eq!(h.maintenance().job_rescue_expired().await?, 1);
    let got = h.get(id).await?;
    assert_eq!(got.state, JobState::Failed);
    assert_eq!(got.finished_at, Some(h.now()));
    assert!(got.errors[0].error.contains("lease expired"));
    assert!(h.claim("default", 1).await?.is_empty());
    Ok(())
}

/// Dead node jobs are released before their leases expire.
pub async fn dead_node_jobs_are_released_before_their_leases_expire(
    h: &Harness,
) -> anyhow::Result<()> {
    let dead = node_info("dead");
    let alive = node_info("alive");
    h.backend.node_heartbeat(&dead).await?;
    h.backend.node_heartbeat(&alive).await?;
    let mut dead_jobs = HashSet::new();
    for _ in 0..2 {
        dead_jobs.insert(h.insert(job("n", "default")).await?);
    }
    let last_try = h.insert(job("n", "default").with_max_attempts(1)).await?;
    dead_jobs.insert(last_try);
    let alive_job = h.insert(job("n", "default")).await?;
    let claimed = h.claim_as(dead.id, "default", 3, TEN_MINUTES).await?;
    let claimed: HashSet<JobId> = claimed.iter().map(|c| c.lease.job_id).collect();
    assert_eq!(claimed, dead_jobs);
    assert_eq!(
        h.claim_as(alive.id, "default", 1, TEN_MINUTES).await?[0]
            .lease
            .job_id,
        alive_job
    );

    // 40 s later the alive node has heartbeated, the dead one has not.
    h.advance(Duration::from_secs(40));
    h.backend.node_heartbeat(&alive).await?;
    h.backend.node_heartbeat(&h.node).await?;
    assert_eq!(
        h.maintenance().job_rescue_expired().await?,
        0,
        "leases still good"
    );
    let released = h.maintenance().node_release_dead(&DEAD_AFTER_30S).await?;
    assert_eq!(released, 3);
    for id in &dead_jobs {
        let got = h.get(*id).await?;
        let expected = if *id == last_try {
            JobState::Failed
        } else {
            JobState::Available
        };
        assert_eq!(got.state, expected);
        assert_eq!(got.lease_expires_at, None);
        assert_eq!(got.errors.len(), 1);
        assert!(
            got.errors[0].error.contains("stopped heartbeating"),
            "{:?}",
            got.errors[0].error
        );
        assert_eq!(got.errors[0].node, Some(dead.id));
    }
    let kept = h.get(alive_job).await?;
    assert_eq!(kept.state, JobState::Running);
    assert_eq!(kept.node_id, Some(alive.id));
    assert!(kept.errors.is_empty());
    assert_eq!(h.claim("default", 10).await?.len(), 2);
    // The dead node is forgotten: asking again releases nothing.
    assert_eq!(h.maintenance().node_release_dead(&DEAD_AFTER_30S).await?, 0);
    Ok(())
}

/// Heartbeating node keeps its jobs.
pub async fn heartbeating_node_keeps_its_jobs(h: &Harness) -> anyhow::Result<()> {
    let node = node_info("steady");
    h.backend.node_heartbeat(&node).await?;
    let id = h.insert(job("n", "default")).await?;
    let lease = h.claim_as(node.id, "default", 1, TEN_MINUTES).await?[0].lease;
    for _ in 0..3 {
        h.advance(Duration::from_secs(20));
        h.backend.node_heartbeat(&node).await?;
        h.backend.node_heartbeat(&h.node).await?;
        assert_eq!(h.maintenance().node_release_dead(&DEAD_AFTER_30S).await?, 0);
    }
    assert_eq!(h.get(id).await?.state, JobState::Running);
    // A node that deregistered cleanly, its job done, is not "dead": nothing is released.
    h.finish(lease, completed()).await?;
    h.backend
        .node_deregister(&NodeDeregisterParams { node: node.id })
        .await?;
    h.advance(Duration::from_secs(60));
    assert_eq!(h.maintenance().node_release_dead(&DEAD_AFTER_30S).await?, 0);
    assert_eq!(h.get(id).await?.state, JobState::Completed);
    Ok(())
}

/// Moves `leases` as far as a handler may ([`MAX_DURATION`] from now), so that only a
/// release, not their expiry, can take the jobs back within a case.
async fn extend_far(h: &Harness, leases: Vec<Lease>) -> anyhow::Result<()> {
    let params = JobExtendManyParams {
        leases,
        by: MAX_DURATION,
    };
    let lost = h.backend.job_extend_many(&params).await?;
    anyhow::ensure!(lost.is_empty(), "leases lost: {lost:?}");
    Ok(())
}

/// Whether `node` is registered, where the backend lists its nodes (`None` otherwise).
async fn registered(h: &Harness, node: NodeId) -> anyhow::Result<Option<bool>> {
    let Some(stats) = h.backend.stats() else {
        return Ok(None);
    };
    let nodes = stats.node_list(&NodeListParams::first(100)).await?.nodes;
    Ok(Some(nodes.iter().any(|n| n.info.id == node)))
}

/// A dead node's job whose row another transaction holds when the node is released is
/// left running (where the backend skips held rows, rather than make every node's rescuer
/// wait on the holder), but its node stays registered, so the next release takes the job
/// once the row is free, years before its lease would: a node is forgotten only with its
/// last running job. A backend without row locks releases both at once.
pub async fn a_dead_nodes_held_job_keeps_its_node_until_released(
    h: &Harness,
) -> anyhow::Result<()> {
    let dead = node_info("dead");
    h.backend.node_heartbeat(&dead).await?;
    let held = h.insert(job("n", "default")).await?;
    let free = h.insert(job("n", "default")).await?;
    let claimed = h.claim_as(dead.id, "default", 2, TEN_MINUTES).await?;
    assert_eq!(claimed.len(), 2);
    extend_far(h, claimed.iter().map(|c| c.lease).collect()).await?;
    let hold = h.hold_job(held).await?;

    h.advance(Duration::from_secs(40));
    h.backend.node_heartbeat(&h.node).await?;
    let first = h.maintenance().node_release_dead(&DEAD_AFTER_30S).await?;
    assert_eq!(h.get(free).await?.state, JobState::Available);
    let skipped = h.get(held).await?.state == JobState::Running;
    assert_eq!(first, if skipped { 1 } else { 2 }, "skipped: {skipped}");
    if skipped {
        assert_eq!(
            registered(h, dead.id).await?,
            h.backend.stats().map(|_| true),
            "the node of a job left running stays registered"
        );
    }

    if let Some(hold) = hold {
        hold.release().await?;
    }
    // The next check, a second later: the lease has ten years to run.
    h.advance(Duration::from_secs(1));
    h.backend.node_heartbeat(&h.node).await?;
    let second = h.maintenance().node_release_dead(&DEAD_AFTER_30S).await?;
    assert_eq!(first + second, 2, "each job released once");
    let got = h.get(held).await?;
    assert_eq!(got.state, JobState::Available, "{got:?}");
    assert_eq!(got.lease_expires_at, None);
    assert_eq!(got.errors.len(), 1, "a counted attempt: {:?}", got.errors);
    assert!(
        got.errors[0].error.contains("stopped heartbeating"),
        "{:?}",
        got.errors
    );
    assert_eq!(got.errors[0].node, Some(dead.id));
    // Forgotten with its last job.
    assert_eq!(h.maintenance().node_release_dead(&DEAD_AFTER_30S).await?, 0);
    assert_eq!(
        registered(h, dead.id).await?,
        h.backend.stats().map(|_| false)
    );
    Ok(())
}

/// Checks that `job` was released by the stop of `node` (`Backend::node_deregister`): in
/// `state` (available, or failed at its last attempt), its lease cleared, and one counted
/// attempt in its history, which names the node and says it stopped. For the runtime tests
/// of each backend too.
pub fn ensure_released_by_stop(
    job: &JobRecord,
    state: JobState,
    node: NodeId,
) -> anyhow::Result<()> {
    anyhow::ensure!(job.state == state, "not {state:?}: {job:?}");
    anyhow::ensure!(job.lease_expires_at.is_none(), "a lease left: {job:?}");
    match job.errors.as_slice() {
        [entry] => {
            anyhow::ensure!(
                entry.error.contains("stopped while this job still ran"),
                "another reason: {entry:?}"
            );
            anyhow::ensure!(entry.node == Some(node), "another node: {entry:?}");
            Ok(())
        }
        other => anyhow::bail!("not one counted attempt: {other:?}"),
    }
}

/// A node that stops (deregisters) after its last outcome was written releases what still
/// runs under it, a failed attempt each, as a dead node's jobs are: a handler that did not
/// stop by the shutdown deadline, an outcome that could not be written. Its finished jobs
/// are left alone. A job whose row another transaction holds keeps the node registered,
/// and the release of dead nodes takes it once free.
pub async fn a_stopping_node_releases_what_still_runs_under_it(h: &Harness) -> anyhow::Result<()> {
    let node = node_info("stopping");
    h.backend.node_heartbeat(&node).await?;
    let done = h.insert(job("n", "default")).await?;
    let stuck = h.insert(job("n", "default")).await?;
    let last = h.insert(job("n", "default").with_max_attempts(1)).await?;
    let held = h.insert(job("n", "default")).await?;
    let claimed = h.claim_as(node.id, "default", 4, TEN_MINUTES).await?;
    assert_eq!(claimed.len(), 4);
    let lease_of = |id: JobId| {
        claimed
            .iter()
            .find(|c| c.lease.job_id == id)
            .map(|c| c.lease)
            .ok_or_else(|| anyhow::anyhow!("job {id} not claimed"))
    };
    h.finish(lease_of(done)?, completed()).await?;
    extend_far(h, vec![lease_of(stuck)?, lease_of(last)?, lease_of(held)?]).await?;
    let hold = h.hold_job(held).await?;

    h.backend
        .node_deregister(&NodeDeregisterParams { node: node.id })
        .await?;
    assert_eq!(h.get(done).await?.state, JobState::Completed);
    for (id, state) in [(stuck, JobState::Available), (last, JobState::Failed)] {
        let got = h.get(id).await?;
        ensure_released_by_stop(&got, state, node.id)?;
        assert_eq!(got.run_at, h.now());
    }
    // The first in line (inserted before `held`), run again as its second attempt.
    let again = h.claim_as(h.node.id, "default", 1, TEN_MINUTES).await?;
    let again: Vec<_> = again
        .iter()
        .map(|c| (c.lease.job_id, c.counted_attempt))
        .collect();
    assert_eq!(again, [(stuck, 2)]);

    let skipped = h.get(held).await?.state == JobState::Running;
    if let Some(hold) = hold {
        hold.release().await?;
    }
    if skipped {
        assert_eq!(
            registered(h, node.id).await?,
            h.backend.stats().map(|_| true),
            "the node of a job left running stays registered"
        );
        // Its heartbeat stopped with it: silent, it is released as a dead node.
        h.advance(Duration::from_secs(40));
        h.backend.node_heartbeat(&h.node).await?;
        assert_eq!(h.maintenance().node_release_dead(&DEAD_AFTER_30S).await?, 1);
        let got = h.get(held).await?;
        assert!(
            got.errors[0].error.contains("stopped heartbeating"),
            "{:?}",
            got.errors
        );
    }
    assert_eq!(h.get(held).await?.state, JobState::Available);
    assert_eq!(
        registered(h, node.id).await?,
        h.backend.stats().map(|_| false),
        "forgotten with its last job"
    );
    Ok(())
}

/// Registered nodes are listed with what their last heartbeat wrote, by name; a node that
/// deregistered is gone from the list.
pub async fn registered_nodes_are_listed_as_their_last_heartbeat_left_them(
    h: &Harness,
) -> anyhow::Result<()> {
    let Some(stats) = h.stats() else {
        return Ok(());
    };
    let started = h.now();
    let mut beta = node_info("beta");
    beta.queues = vec!["mail".to_owned(), "pdf".to_owned()];
    beta.concurrency = 12;
    let alpha = node_info("alpha");
    h.backend.node_heartbeat(&beta).await?;
    h.backend.node_heartbeat(&alpha).await?;
    h.advance(Duration::from_secs(7));
    h.backend.node_heartbeat(&beta).await?;

    let every = NodeListParams::first(100);
    let page = stats.node_list(&every).await?;
    assert_eq!(page.next_before, None, "one page holds them all");
    let nodes = page.nodes;
    let names: Vec<&str> = nodes.iter().map(|n| n.info.name.as_str()).collect();
    assert_eq!(names, ["alpha", "beta", h.node.name.as_str()], "by name");
    let listed = nodes
        .iter()
        .find(|n| n.info.id == beta.id)
        .expect("beta listed");
    assert_eq!(listed.info.queues, ["mail", "pdf"]);
    assert_eq!(listed.info.concurrency, 12);
    assert_eq!(listed.started_at, started);
    assert_eq!(listed.heartbeat_at, started + secs(7));

    h.backend
        .node_deregister(&NodeDeregisterParams { node: beta.id })
        .await?;
    let nodes = stats.node_list(&every).await?.nodes;
    assert!(
        nodes.iter().all(|n| n.info.id != beta.id),
        "deregistered: not listed"
    );
    Ok(())
}

/// The nodes are listed a page at a time, by the bytes of their names (`B` before `a`,
/// whatever the database's collation) and then by id: pages walk every node once, a page
/// goes on after its cursor's node even when that node has deregistered, and a page of no
/// nodes is refused.
pub async fn registered_nodes_are_paged_by_name_bytes_then_id(h: &Harness) -> anyhow::Result<()> {
    let Some(stats) = h.stats() else {
        return Ok(());
    };
    let names = [
        "web-3", "B-node", "a-node", "twin", "twin", "web-10", "Ω", "twin",
    ];
    let mut expected = vec![(h.node.name.clone(), h.node.id)];
    for name in names {
        let node = node_info(name);
        h.backend.node_heartbeat(&node).await?;
        expected.push((node.name, node.id));
    }
    expected.sort();

    let listed = |page: &NodePage| -> Vec<(String, NodeId)> {
        page.nodes
            .iter()
            .map(|n| (n.info.name.clone(), n.info.id))
            .collect()
    };
    let mut params = NodeListParams::first(3);
    let mut walked = Vec::new();
    let mut pages = Vec::new();
    loop {
        let page = stats.node_list(&params).await?;
        assert_eq!(page.nodes.len(), 3, "{} nodes: pages of 3", expected.len());
        walked.extend(listed(&page));
        pages.push(params.clone());
        match page.next_before {
            Some(next) => params.before = Some(next),
            None => break,
        }
    }
    assert_eq!(walked, expected);
    assert_eq!(pages.len(), 3);

    // The first page's last node deregisters: the second page is the same.
    let second = stats.node_list(&pages[1]).await?;
    h.backend
        .node_deregister(&NodeDeregisterParams {
            node: expected[2].1,
        })
        .await?;
    assert_eq!(stats.node_list(&pages[1]).await?, second);
    assert_eq!(listed(&second), expected[3..6]);

    assert!(matches!(
        stats.node_list(&NodeListParams::first(0)).await,
        Err(Error::InvalidInput(m)) if m.contains("limit")
    ));
    Ok(())
}

/// Rescue takes back every expired lease.
pub async fn rescue_takes_back_every_expired_lease(h: &Harness) -> anyhow::Result<()> {
    const N: usize = 2_500;
    let jobs: Vec<NewJob> = (0..N).map(|_| job("mass", "default")).collect();
    h.backend.job_insert_many(&jobs).await?;
    let claimed = h
        .claim_as(h.node.id, "default", N as u32, Duration::from_secs(10))
        .await?;
    assert_eq!(claimed.len(), N);
    h.advance(Duration::from_secs(11));
    assert_eq!(h.maintenance().job_rescue_expired().await?, N as u64);
    let stats = h.backend.queue_stats().await?;
    assert_eq!((stats[0].available, stats[0].running), (N as i64, 0));
    Ok(())
}

/// The backend's liveness capability: every backend of this suite offers it on the store
/// the harness gives (a database, a file).
fn liveness(h: &Harness) -> anyhow::Result<&dyn hopper_core::NodeLiveness> {
    h.backend
        .node_liveness()
        .ok_or_else(|| anyhow::anyhow!("{} offers no node liveness", h.backend.name()))
}

/// Vanished node jobs are released at once.
pub async fn vanished_node_jobs_are_released_at_once(h: &Harness) -> anyhow::Result<()> {
    let liveness = liveness(h)?;
    let gone = node_info("gone");
    let stays = node_info("stays");
    let gone_hold = liveness.node_hold(&gone).await?;
    let _stays_hold = liveness.node_hold(&stays).await?;
    let gone_job = h.insert(job("n", "default")).await?;
    let last_try = h.insert(job("n", "default").with_max_attempts(1)).await?;
    h.claim_as(gone.id, "default", 2, TEN_MINUTES).await?;
    let stays_job = h.insert(job("n", "default")).await?;
    h.claim_as(stays.id, "default", 1, TEN_MINUTES).await?;
    assert_eq!(
        liveness.node_release_vanished().await?,
        0,
        "every lock is held"
    );

    // The holder goes away (its session, its process): the lock is free, no time passes.
    drop(gone_hold);
    let released = wait_for_release(liveness).await?;
    assert_eq!(released, 2);
    for (id, state) in [
        (gone_job, JobState::Available),
        (last_try, JobState::Failed),
    ] {
        let got = h.get(id).await?;
        assert_eq!(got.state, state, "{got:?}");
        assert_eq!(got.run_at, h.now());
        assert_eq!(got.lease_expires_at, None);
        assert_eq!(got.errors.len(), 1, "a counted attempt");
        assert!(got.errors[0].error.contains("vanished"), "{:?}", got.errors);
        assert_eq!(got.errors[0].node, Some(gone.id));
    }
    assert_eq!(h.get(stays_job).await?.state, JobState::Running);
    assert_eq!(h.claim("default", 10).await?.len(), 1);
    // Forgotten: asking again releases nothing.
    assert_eq!(liveness.node_release_vanished().await?, 0);
    Ok(())
}

/// Releases vanished nodes until one is found: a PostgreSQL session ends a moment after
/// its client closes the connection.
async fn wait_for_release(liveness: &dyn hopper_core::NodeLiveness) -> anyhow::Result<u64> {
    for _ in 0..500 {
        let released = liveness.node_release_vanished().await?;
        if released > 0 {
            return Ok(released);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    anyhow::bail!("the dropped hold was never seen free")
}

/// A held liveness lock keeps a silent node alive, for the vanished-node check and for
/// the release of silent nodes alike: a node whose heartbeat was held up (its row or the
/// database locked past the silent bound) still holds its lock, and the release must not
/// win the race against its waiting heartbeat once the holder lets go. Given back, the
/// lock no longer spares it.
pub async fn a_held_liveness_lock_keeps_a_silent_node_alive(h: &Harness) -> anyhow::Result<()> {
    let liveness = liveness(h)?;
    let quiet = node_info("quiet");
    let hold = liveness.node_hold(&quiet).await?;
    let id = h.insert(job("n", "default")).await?;
    h.claim_as(quiet.id, "default", 1, TEN_MINUTES).await?;
    // No heartbeat for five minutes: only the lock counts here.
    h.advance(Duration::from_secs(300));
    assert_eq!(liveness.node_release_vanished().await?, 0);
    assert_eq!(h.maintenance().node_release_dead(&DEAD_AFTER_30S).await?, 0);
    assert_eq!(h.get(id).await?.state, JobState::Running);

    // The lock given back (its session ends a moment later on a server), the silent node
    // is released by its silence.
    drop(hold);
    for _ in 0..500 {
        if h.maintenance().node_release_dead(&DEAD_AFTER_30S).await? == 1 {
            let got = h.get(id).await?;
            assert_eq!(got.state, JobState::Available, "{got:?}");
            assert!(
                got.errors[0].error.contains("stopped heartbeating"),
                "{got:?}"
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    anyhow::bail!("the silent node was never released once its lock was given back")
}

/// A liveness lock is held by one holder at a time.
pub async fn a_liveness_lock_is_held_by_one_holder_at_a_time(h: &Harness) -> anyhow::Result<()> {
    let liveness = liveness(h)?;
    let node = node_info("twice");
    let hold = liveness.node_hold(&node).await?;
    let err = liveness
        .node_hold(&node)
        .await
        .err()
        .ok_or_else(|| anyhow::anyhow!("a second holder took a held lock"))?;
    assert!(matches!(err, hopper_core::Error::Conflict(_)), "{err}");
    // Given back, it can be taken again (the node re-taking its lock).
    drop(hold);
    for _ in 0..500 {
        if liveness.node_hold(&node).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    anyhow::bail!("the lock given back was never free again")
}
