//! The admin requests through the server: a `Client` on a `tcp://` URL lists, searches,
//! cancels, retries, deletes and clears jobs, reads queue stats, pauses and limits queues
//! and lists periodic jobs, each checked against the database itself.

use std::time::Duration;

use crate::common::*;
use hopper::backend::{JobDeleteParams, JobSearchParams};
use hopper::testing::TestDatabase;
use hopper::{Client, JobListParams, JobState, NewJob, QueueUpdate, RateLimit};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_client_administers_jobs_and_queues() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(1)).await).await;
    let remote = Client::new(hopper::connect(&url(server.endpoint()), Default::default()).await?);
    let direct = Client::new(db.backend());
    let ids = [
        direct
            .insert(NewJob::new("k", serde_json::json!({"n": 1})).with_queue("mail"))
            .await?,
        direct
            .insert(NewJob::new("k", serde_json::json!({"n": 2})).with_queue("mail"))
            .await?,
        direct
            .insert(NewJob::new("other", serde_json::json!({})).with_queue("mail"))
            .await?,
    ];

    // List, filtered, newest first; the cursor pages on.
    let params = JobListParams {
        queue: Some("mail".into()),
        kind: Some("k".into()),
        limit: 10,
        ..JobListParams::default()
    };
    let listed: Vec<_> = remote.jobs(&params).await?.iter().map(|j| j.id).collect();
    assert_eq!(listed, vec![ids[1], ids[0]]);
    let older = remote
        .jobs(&JobListParams {
            before: Some(ids[1]),
            ..params.clone()
        })
        .await?;
    assert_eq!(older.iter().map(|j| j.id).collect::<Vec<_>>(), vec![ids[0]]);
    let search = JobSearchParams {
        list: JobListParams {
            limit: 10,
            ..JobListParams::default()
        },
        created_after: Some(chrono::Utc::now() + chrono::Duration::hours(1)),
        created_before: None,
    };
    assert!(remote.backend().job_search(&search).await?.is_empty());

    // Cancel, retry, delete.
    assert_eq!(remote.cancel(ids[0]).await?.state, JobState::Cancelled);
    let retried = remote.retry(ids[0]).await?;
    assert_eq!(retried.state, JobState::Available);
    assert_eq!(
        direct.job(ids[0]).await?.map(|j| j.state),
        Some(JobState::Available)
    );
    remote.cancel(ids[1]).await?;
    remote
        .backend()
        .job_delete(&JobDeleteParams { id: ids[1] })
        .await?;
    assert!(direct.job(ids[1]).await?.is_none());
    let missing = remote
        .backend()
        .job_delete(&JobDeleteParams { id: ids[1] })
        .await;
    assert!(
        matches!(missing, Err(hopper::Error::NotFound(_))),
        "{missing:?}"
    );

    // Stats match the database's.
    let stats = remote.stats().await?;
    let mail = stats
        .iter()
        .find(|s| s.queue == "mail")
        .expect("mail stats");
    assert_eq!((mail.available, mail.cancelled), (2, 0));
    let mut expected = db.queue_stats("mail").await?;
    assert!(mail.oldest_available_secs > 0.0);
    expected.oldest_available_secs = mail.oldest_available_secs;
    assert_eq!(mail, &expected);

    // Pause, limit, rate, then remove the limit; the database holds each change.
    let mut update = QueueUpdate::new("mail");
    update.paused = Some(true);
    update.max_running = Some(Some(5));
    update.rate = Some(Some(RateLimit::new(100, Duration::from_secs(1))));
    let settings = remote.update_queue(&update).await?;
    assert!(settings.paused);
    assert_eq!(settings.max_running, Some(5));
    assert_eq!(
        settings.rate.map(|r| (r.jobs, r.per)),
        Some((100, Duration::from_secs(1)))
    );
    let mut update = QueueUpdate::new("mail");
    update.max_running = Some(None);
    remote.update_queue(&update).await?;
    let stored = direct.queues().await?;
    let stored = stored.iter().find(|q| q.queue == "mail").expect("settings");
    assert!(stored.paused);
    assert_eq!(stored.max_running, None);
    assert!(stored.rate.is_some());
    assert_eq!(remote.queues().await?, direct.queues().await?);
    let bad = remote
        .update_queue(&QueueUpdate {
            max_running: Some(Some(0)),
            ..QueueUpdate::new("mail")
        })
        .await;
    assert!(bad.is_err(), "a zero limit is refused");

    // Periodic jobs: none registered, so an empty list from both.
    assert_eq!(
        remote.backend().cron_list().await?,
        db.backend().cron_list().await?
    );

    // Clear deletes what is not running.
    assert_eq!(remote.clear(Some("mail")).await?, 2);
    assert!(direct.jobs(&params).await?.is_empty());
    server.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_orders_and_outcomes_on_the_wire() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(1)).await).await;
    let direct = Client::new(db.backend());
    let jobs: Vec<NewJob> = (0..5)
        .map(|n| NewJob::new("k", serde_json::json!({ "n": n })))
        .collect();
    direct.insert_many(&jobs).await?;

    let mut peer = RawPeer::connect(server.endpoint()).await;
    let welcome = peer
        .hello(
            "worker",
            TOKEN,
            vec![
                ("concurrency", int(10)),
                ("batch", ciborium::Value::Bool(true)),
            ],
        )
        .await;
    assert_eq!(text_of(&welcome, "type"), "welcome");
    let mut orders = Vec::new();
    while orders.len() < 5 {
        let push = peer.recv_type("orders").await;
        let pushed = field(&push, "jobs")
            .and_then(ciborium::Value::as_array)
            .expect("jobs");
        orders.extend(pushed.iter().map(|o| {
            (
                text_of(o, "id").to_owned(),
                field(o, "attempt").cloned().expect("attempt"),
            )
        }));
    }
    // Complete three, fail one for good, release one; and one that is not held.
    let outcome = |i: usize, kind: &str, extra: Vec<(&str, ciborium::Value)>| {
        let mut entries = vec![
            ("outcome", text(kind)),
            ("id", text(&orders[i].0)),
            ("attempt", orders[i].1.clone()),
        ];
        entries.extend(extra);
        map(entries)
    };
    let items = vec![
        outcome(0, "completed", vec![("duration_ms", int(3))]),
        outcome(1, "completed", vec![]),
        outcome(2, "completed", vec![]),
        outcome(
            3,
            "failed",
            vec![
                ("error", text("bad")),
                ("retryable", ciborium::Value::Bool(false)),
            ],
        ),
        outcome(4, "released", vec![]),
        map(vec![
            ("outcome", text("completed")),
            ("id", text(&uuid::Uuid::now_v7().to_string())),
            ("attempt", int(1)),
        ]),
    ];
    peer.send(&map(vec![
        ("type", text("outcomes")),
        ("req", int(2)),
        ("outcomes", ciborium::Value::Array(items)),
    ]))
    .await;
    let acks = peer.recv_type("acks").await;
    let results: Vec<&str> = field(&acks, "results")
        .and_then(ciborium::Value::as_array)
        .expect("results")
        .iter()
        .filter_map(ciborium::Value::as_text)
        .collect();
    assert_eq!(
        results,
        [
            "recorded",
            "recorded",
            "recorded",
            "recorded",
            "recorded",
            "lease_lost"
        ]
    );
    let stats = db.queue_stats("default").await?;
    assert_eq!((stats.completed, stats.failed), (3, 1));
    assert_eq!(
        stats.available + stats.running,
        1,
        "the released job is back"
    );
    server.shutdown().await;
    Ok(())
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Charge {
    ok: bool,
}

impl hopper::JobArgs for Charge {
    const KIND: &'static str = "charge";
}

struct Biller;

#[async_trait::async_trait]
impl hopper::Worker for Biller {
    type Args = Charge;
    async fn process(
        &self,
        _ctx: &hopper::JobContext,
        args: Charge,
    ) -> Result<(), hopper::JobError> {
        if args.ok {
            Ok(())
        } else {
            Err(hopper::JobError::permanent("declined"))
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_client_lists_nodes_and_statistics_per_minute() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(1)).await).await;
    let remote = Client::new(hopper::connect(&url(server.endpoint()), Default::default()).await?);
    let direct = Client::new(db.backend());

    // A node registered directly is listed through the server as the database holds it.
    let node = hopper::backend::NodeInfo {
        id: uuid::Uuid::now_v7(),
        name: "seeded-node".into(),
        queues: vec!["mail".into(), "default".into()],
        concurrency: 7,
    };
    db.backend().node_heartbeat(&node).await?;
    let seeded = |nodes: Vec<hopper::backend::NodeRecord>| {
        nodes.into_iter().find(|n| n.info.name == "seeded-node")
    };
    let every = hopper::NodeListParams::first(1000);
    let listed = seeded(remote.nodes(&every).await?.nodes).expect("the seeded node, remotely");
    assert_eq!(listed.info, node);
    assert_eq!(Some(listed), seeded(direct.nodes(&every).await?.nodes));

    // Two jobs completed and one failed in this minute: the same minutes either way.
    let mut workers = hopper::Workers::new();
    workers.register(Biller);
    let inline = hopper::testing::InlineClient::new(db.backend(), workers);
    for ok in [true, true, false] {
        inline.enqueue(&Charge { ok }).await?;
    }
    let hour = hopper::backend::JobStatsParams {
        window: Duration::from_secs(3600),
    };
    fn stats(client: &Client) -> &dyn hopper::backend::StatsStore {
        client.backend().stats().expect("statistics")
    }
    let minutes = stats(&remote).job_stats_per_minute(&hour).await?;
    let finished = minutes
        .iter()
        .fold((0, 0), |(c, f), m| (c + m.completed, f + m.failed));
    assert_eq!(finished, (2, 1));
    assert_eq!(minutes, stats(&direct).job_stats_per_minute(&hour).await?);

    // Windows of no minute or of more than a day are refused, by the client and by the
    // server alike.
    for window in [Duration::ZERO, Duration::from_secs(86_401)] {
        let refused = stats(&remote)
            .job_stats_per_minute(&hopper::backend::JobStatsParams { window })
            .await;
        assert!(
            matches!(&refused, Err(hopper::Error::InvalidInput(m)) if m.contains("1440")),
            "{window:?}: {refused:?}"
        );
    }
    let mut peer = RawPeer::connect(server.endpoint()).await;
    peer.hello("client", TOKEN, vec![]).await;
    for minutes in [0, 1441] {
        peer.send(&map(vec![
            ("type", text("job_stats")),
            ("req", int(2)),
            ("minutes", int(minutes)),
        ]))
        .await;
        let refused = peer.recv_type("error").await;
        assert_eq!(text_of(&refused, "code"), "invalid");
        assert!(text_of(&refused, "message").contains("1 to 1440"));
    }
    server.shutdown().await;
    Ok(())
}
