//! One peer's backlog delays another peer's frames by a bounded amount only: the server
//! takes the frames waiting in turn, one peer's at a time, and stops reading a peer that
//! has many waiting. A worker flooding it with the largest frames the protocol takes
//! leaves a well-behaved worker's heartbeats answered within a bound (its session, and its
//! order's attempt, kept) and another client's reads answered alike.

use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::JobState;
use hopper::backend::JobGetParams;
use hopper::testing::TestDatabase;
use tokio::time::Instant;

/// Frames the flooder sends at once. Each takes the server's loop about 0.3 s to decode in
/// a debug build, so in arrival order they would hold it some 12 s.
const FLOOD: usize = 40;

/// How many of the flooder's frames a well-behaved peer's request may wait for, whatever
/// their number: the one being handled when it is sent, one read before it, the one being
/// handled when it is read and when its answer comes back from the database, and room
/// for frames that take longer than the mean on a loaded machine. Served in arrival order,
/// the first request would wait for all of them.
const FRAMES_WAITED: u32 = 12;

/// How often the well-behaved peers send.
const EVERY: Duration = Duration::from_millis(500);

/// A `heartbeat` listing the most leases one may: made-up jobs, none held by anyone.
pub(crate) fn largest_heartbeat() -> anyhow::Result<Vec<u8>> {
    let leases = (0..hopper_protocol::MAX_HEARTBEAT_LEASES)
        .map(|_| {
            map(vec![
                ("id", text(&uuid::Uuid::now_v7().to_string())),
                ("attempt", int(1)),
            ])
        })
        .collect();
    let beat = map(vec![
        ("type", text("heartbeat")),
        ("req", int(1)),
        ("leases", Value::Array(leases)),
    ]);
    let mut frame = Vec::new();
    ciborium::into_writer(&beat, &mut frame)?;
    Ok(frame)
}

/// What a well-behaved peer saw during the flood.
struct Asked {
    /// Requests answered.
    answered: usize,
    /// The longest wait for an answer.
    longest: Duration,
    /// The answers of another type than the one expected.
    wrong: Vec<String>,
}

/// Sends `request(n)` every [`EVERY`] until `stop`, and waits for each answer (the reply
/// with the same `req`), expected to be of type `answer`.
async fn keep_asking(
    peer: &mut RawPeer,
    request: impl Fn(i64) -> Value,
    answer: &str,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Asked {
    let mut asked = Asked {
        answered: 0,
        longest: Duration::ZERO,
        wrong: Vec::new(),
    };
    let mut n = 100;
    peer.set_timeout(Duration::from_secs(60));
    while !*stop.borrow() {
        n += 1;
        let sent = Instant::now();
        peer.send(&request(n)).await;
        let reply = loop {
            let reply = peer.recv().await;
            if field(&reply, "req") == Some(&int(n)) {
                break reply;
            }
        };
        asked.longest = asked.longest.max(sent.elapsed());
        asked.answered += 1;
        if text_of(&reply, "type") != answer {
            asked.wrong.push(format!("{reply:?}"));
        }
        tokio::time::sleep(EVERY).await;
    }
    asked
}

// The server runs in the test's runtime: its loop holds a thread while it decodes a large
// frame, and the well-behaved peers' tasks must not wait for that thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flooding_worker_delays_no_other_peer_past_a_bound() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    // A peer silent for 6 s is dropped.
    let server = start(config(&db, Duration::from_secs(2)).await).await;
    let endpoint = server.endpoint().to_owned();

    // A well-behaved worker holds an order.
    let mut worker = RawPeer::connect(&endpoint).await;
    let r = worker
        .hello(
            "worker",
            TOKEN,
            vec![("queues", Value::Array(vec![text("fair")]))],
        )
        .await;
    assert_eq!(text_of(&r, "type"), "welcome", "{r:?}");
    let job = hopper::NewJob::new("fair", serde_json::json!({})).with_queue("fair");
    db.backend().job_insert(&job).await?;
    let (id, attempt) = order(&mut worker).await;
    assert_eq!(id, job.id.to_string());
    let mut client = RawPeer::connect(&endpoint).await;
    let r = client.hello("client", TOKEN, vec![]).await;
    assert_eq!(text_of(&r, "type"), "welcome", "{r:?}");

    // The flooder, a worker with a valid token, sends its frames all at once and reads
    // every reply.
    let mut flooder = RawPeer::connect(&endpoint).await;
    let extra = vec![("queues", Value::Array(vec![text("elsewhere")]))];
    let r = flooder.hello("worker", TOKEN, extra).await;
    assert_eq!(text_of(&r, "type"), "welcome", "{r:?}");
    let frame = largest_heartbeat()?;
    assert!(frame.len() < hopper_protocol::MAX_FRAME, "{}", frame.len());
    let started = Instant::now();
    for _ in 0..FLOOD {
        flooder.send_bytes(frame.clone()).await;
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let flood = tokio::spawn(async move {
        flooder.set_timeout(Duration::from_secs(60));
        for _ in 0..FLOOD {
            let reply = flooder.recv().await;
            let ty = text_of(&reply, "type").to_owned();
            assert!(ty == "heartbeat_ack" || ty == "error", "{reply:?}");
        }
        let _ = stop.send(true);
        started.elapsed()
    });

    let lease = map(vec![("id", text(&id)), ("attempt", int(attempt))]);
    let beats = {
        let stopped = stopped.clone();
        tokio::spawn(async move {
            let beat = |n| {
                map(vec![
                    ("type", text("heartbeat")),
                    ("req", int(n)),
                    ("leases", Value::Array(vec![lease.clone()])),
                ])
            };
            let answered = keep_asking(&mut worker, beat, "heartbeat_ack", &stopped).await;
            (worker, answered)
        })
    };
    let reads = tokio::spawn({
        let id = id.clone();
        async move {
            let status = |n| {
                map(vec![
                    ("type", text("status")),
                    ("req", int(n)),
                    ("id", text(&id)),
                ])
            };
            keep_asking(&mut client, status, "job", &stopped).await
        }
    });
    let flooded_for = flood.await?;
    let (mut worker, beats) = beats.await?;
    let reads = reads.await?;
    let per_frame = flooded_for / u32::try_from(FLOOD)?;
    eprintln!(
        "flood served in {flooded_for:?} ({per_frame:?} a frame); {} heartbeats (longest wait {:?}), {} reads (longest {:?})",
        beats.answered, beats.longest, reads.answered, reads.longest
    );
    assert!(
        beats.answered >= 3 && reads.answered >= 3,
        "the flood lasted a while"
    );
    for (what, asked) in [("heartbeat", &beats), ("status", &reads)] {
        assert!(asked.wrong.is_empty(), "{what}: {:?}", asked.wrong);
        assert!(
            asked.longest <= per_frame * FRAMES_WAITED,
            "a {what} waited {:?}, more than {FRAMES_WAITED} of the flooder's frames ({per_frame:?} each)",
            asked.longest
        );
    }

    // The worker kept its session and its order: the outcome of its attempt is recorded.
    worker.set_timeout(Duration::from_secs(10));
    worker.send(&completed(2, &id, attempt)).await;
    let ack = worker.recv_type("ack").await;
    assert_eq!(text_of(&ack, "result"), "recorded", "{ack:?}");
    let stored = db
        .backend()
        .job_get(&JobGetParams { id: job.id })
        .await?
        .expect("the job");
    assert_eq!(stored.state, JobState::Completed);
    assert_eq!(stored.attempt, 1, "never retried: {stored:?}");
    server.shutdown().await;
    Ok(())
}
