//! The fair claim takes its groups from a per-process cache (the ring, reloaded every
//! 100 ms): groups that appear while it is cached must still be served promptly.

use std::sync::Arc;
use std::time::Duration;

use hopper::backend::{Backend, ClaimParams};
use hopper::testing::TestDatabase;
use hopper::{Client, NewJob};
use tokio::time::Instant;

use super::common::probe;

/// Claims up to `limit` jobs of `queue` and returns their labels.
async fn claim(backend: &Arc<dyn Backend>, queue: &str, limit: u32) -> anyhow::Result<Vec<String>> {
    let jobs = backend
        .job_claim(&ClaimParams {
            queue: queue.into(),
            node: uuid::Uuid::now_v7(),
            limit,
            lease: Duration::from_secs(30),
            kinds: None,
        })
        .await?;
    Ok(jobs
        .iter()
        .map(|j| j.args["label"].as_str().unwrap_or_default().to_owned())
        .collect())
}

/// A schema whose queue `ring` holds `n` jobs of group A.
async fn group_a(n: usize) -> anyhow::Result<(TestDatabase, Arc<dyn Backend>, Client)> {
    let db = TestDatabase::new().await?;
    let backend = db.backend();
    let client = Client::new(backend.clone());
    let a: Vec<NewJob> = (0..n)
        .map(|_| probe("ring", "A", 0).with_group("A"))
        .collect();
    client.insert_many(&a).await?;
    Ok((db, backend, client))
}

/// When the cached groups have nothing left, a claim looks for new groups at once: the
/// first claim after a new group's insert gets its job.
#[tokio::test]
async fn a_new_group_is_claimed_at_once_when_the_cached_ones_are_empty() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let backend = db.backend();
    let client = Client::new(backend.clone());
    let a: Vec<NewJob> = (0..10)
        .map(|_| probe("ring", "A", 0).with_group("A"))
        .collect();
    client.insert_many(&a).await?;
    // Loads the ring ([A]) and takes all of A.
    assert_eq!(claim(&backend, "ring", 10).await?.len(), 10);
    client.insert(probe("ring", "B", 0).with_group("B")).await?;
    assert_eq!(claim(&backend, "ring", 10).await?, ["B"]);
    Ok(())
}

/// While the cached groups keep every claim full, a new group still gets its turn once the
/// ring is reloaded (every 100 ms), long before the others' backlog is gone.
#[tokio::test]
async fn a_new_group_is_served_while_the_others_keep_claims_full() -> anyhow::Result<()> {
    let (_db, backend, client) = group_a(2_000).await?;
    assert_eq!(claim(&backend, "ring", 5).await?.len(), 5);
    client.insert(probe("ring", "B", 0).with_group("B")).await?;
    let inserted = Instant::now();
    let mut a_claimed = 0;
    loop {
        let labels = claim(&backend, "ring", 5).await?;
        if labels.iter().any(|l| l == "B") {
            break;
        }
        a_claimed += labels.len();
        anyhow::ensure!(
            a_claimed < 1_500,
            "B not served after {a_claimed} of A's jobs"
        );
    }
    println!(
        "B served after {a_claimed} of A's jobs, {:?} after its insert",
        inserted.elapsed()
    );
    // The ring is at most 100 ms old; allow for a loaded machine.
    assert!(inserted.elapsed() < Duration::from_secs(2));
    Ok(())
}

/// A claim whose other groups ran dry is filled from the groups that still have jobs: the
/// runtime takes a short claim for a drained queue and stops claiming until its poll
/// interval, so a short claim while one group still has a backlog would leave workers idle.
#[tokio::test]
async fn a_claim_is_filled_from_the_groups_that_still_have_jobs() -> anyhow::Result<()> {
    let (_db, backend, client) = group_a(20).await?;
    let others: Vec<NewJob> = ["B", "C", "D"]
        .into_iter()
        .map(|g| probe("ring", g, 0).with_group(g))
        .collect();
    client.insert_many(&others).await?;
    // Four groups: a share of 3 each, of which B, C and D have 1; A gives the rest.
    let labels = claim(&backend, "ring", 12).await?;
    assert_eq!(labels.len(), 12, "{labels:?}");
    for g in ["B", "C", "D"] {
        assert_eq!(labels.iter().filter(|l| *l == g).count(), 1, "{labels:?}");
    }
    assert_eq!(labels.iter().filter(|l| *l == "A").count(), 9, "{labels:?}");
    // What is left of A comes back in full too.
    assert_eq!(claim(&backend, "ring", 11).await?.len(), 11);
    Ok(())
}

/// The fair claim forces a generic plan for itself and the limited claim commits
/// asynchronously (then waits for a synchronous flush): neither setting outlives the claim
/// on its pooled connection, where the plain claim runs next.
#[tokio::test]
async fn claims_leave_their_connection_as_they_found_it() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    client.limit("ring-limited", Some(100), None).await?;
    for queue in ["ring", "ring-limited"] {
        let jobs: Vec<NewJob> = (0..4)
            .map(|_| probe(queue, "A", 0).with_group("A"))
            .collect();
        client.insert_many(&jobs).await?;
    }
    // A backend connected now reads both queues' settings (grouped; grouped and limited)
    // before its first claim.
    let backend = hopper::PgBackend::connect(
        db.url(),
        hopper::PgOptions::default()
            .with_schema(db.schema())
            .with_pool_size(1)
            .with_clock(Arc::new(hopper::SystemClock)),
    )
    .await?;
    let backend: Arc<dyn Backend> = Arc::new(backend);
    assert_eq!(claim(&backend, "ring", 2).await?.len(), 2);
    assert_eq!(claim(&backend, "ring-limited", 2).await?.len(), 2);
    let pg = backend
        .as_any()
        .downcast_ref::<hopper::PgBackend>()
        .expect("a PostgreSQL backend");
    let conn = pg.pool().get().await?;
    let row = conn
        .query_one(
            "SELECT current_setting('plan_cache_mode'), current_setting('synchronous_commit')",
            &[],
        )
        .await?;
    assert_eq!(row.get::<_, String>(0), "auto");
    assert_eq!(row.get::<_, String>(1), "on");
    Ok(())
}
