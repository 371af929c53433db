//! A job row held by another transaction (selected FOR UPDATE) does not stall the server's
//! outcome writers: the held job's outcome waits alone, written and acknowledged once the
//! row is free, while the others are written and acknowledged meanwhile; its lease is
//! renewed as it waits (noted beside the held row), so the rescuer does not take it back.
//!
//! The server writes with three writers: a writer that waited on a held row would be taken
//! for as long as the hold lasts, so four rounds of a held outcome then a free one would
//! leave the fourth round's free outcome without a writer.

use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::JobId;
use hopper::testing::TestDatabase;

/// An `outcomes` item completing attempt 1 of `id`.
fn completed_item(id: JobId) -> Value {
    map(vec![
        ("outcome", text("completed")),
        ("id", text(&id.to_string())),
        ("attempt", int(1)),
    ])
}

/// The `req` of a reply.
fn req(v: &Value) -> Option<i128> {
    field(v, "req").and_then(Value::as_integer).map(i128::from)
}

/// The state of job `id`, read on `sql`.
async fn state(sql: &tokio_postgres::Client, db: &TestDatabase, id: JobId) -> String {
    let row = sql
        .query_one(
            &format!("SELECT state::text FROM {}.jobs WHERE id = $1", db.schema()),
            &[&id],
        )
        .await
        .expect("the job's row");
    row.get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_rows_outcome_waits_alone() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(30)).await).await;
    let jobs = leased_by(&db, server.node_id(), 10).await?;
    let mut peer = RawPeer::connect(server.endpoint()).await;
    let extra = vec![
        ("name", text("finisher")),
        ("queues", Value::Array(vec![text("elsewhere")])),
    ];
    let welcome = peer.hello("worker", TOKEN, extra).await;
    assert_eq!(text_of(&welcome, "type"), "welcome", "{welcome:?}");
    let s = db.schema();
    let hold = |id: JobId| format!("BEGIN; SELECT 1 FROM {s}.jobs WHERE id = '{id}' FOR UPDATE");
    let mut holders = Vec::new();
    for round in 0..4 {
        let (held, free) = (jobs[2 * round], jobs[2 * round + 1]);
        let holder = sql(&db).await?;
        holder.batch_execute(&hold(held)).await?;
        holders.push(holder);
        let n = i64::try_from(round)?;
        peer.send(&completed(100 + n, &held.to_string(), 1)).await;
        peer.send(&completed(200 + n, &free.to_string(), 1)).await;
        // Within the receive timeout (10 s), and before the held one's.
        let ack = peer.recv().await;
        assert_eq!(
            req(&ack),
            Some(200 + i128::from(n)),
            "round {round}: {ack:?}"
        );
        assert_eq!(text_of(&ack, "result"), "recorded", "{ack:?}");
    }
    // One message of a held job's outcome and a free one's: one `acks`, once both are
    // written. The free one is written meanwhile.
    let (held, free) = (jobs[8], jobs[9]);
    let holder = sql(&db).await?;
    holder.batch_execute(&hold(held)).await?;
    holders.push(holder);
    let items = Value::Array(vec![completed_item(held), completed_item(free)]);
    peer.send(&map(vec![
        ("type", text("outcomes")),
        ("req", int(300)),
        ("outcomes", items),
    ]))
    .await;
    let reader = sql(&db).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while state(&reader, &db, free).await != "completed" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the free outcome of the message was not written while the other was held"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    peer.send(&map(vec![("type", text("heartbeat")), ("req", int(1))]))
        .await;
    let next = peer.recv().await;
    assert_eq!(
        text_of(&next, "type"),
        "heartbeat_ack",
        "no ack while held: {next:?}"
    );
    for id in [0, 2, 4, 6, 8] {
        assert_eq!(state(&reader, &db, jobs[id]).await, "running", "held");
    }

    for holder in &holders {
        holder.batch_execute("COMMIT").await?;
    }
    let mut acked = Vec::new();
    for _ in 0..5 {
        let reply = peer.recv().await;
        match req(&reply) {
            Some(300) => {
                let results = field(&reply, "results").cloned();
                let recorded = Value::Array(vec![text("recorded"), text("recorded")]);
                assert_eq!(results, Some(recorded), "{reply:?}");
            }
            _ => assert_eq!(text_of(&reply, "result"), "recorded", "{reply:?}"),
        }
        acked.extend(req(&reply));
    }
    acked.sort_unstable();
    assert_eq!(acked, [100, 101, 102, 103, 300]);
    for id in jobs {
        assert_eq!(state(&reader, &db, id).await, "completed");
    }
    server.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_outcomes_lease_is_renewed_while_it_waits() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(30)).await).await;
    let job = leased_by(&db, server.node_id(), 1).await?[0];
    let mut peer = RawPeer::connect(server.endpoint()).await;
    let extra = vec![("queues", Value::Array(vec![text("elsewhere")]))];
    let welcome = peer.hello("worker", TOKEN, extra).await;
    assert_eq!(text_of(&welcome, "type"), "welcome", "{welcome:?}");
    let hold = db.hold_job(job).await?;
    peer.send(&completed(1, &job.to_string(), 1)).await;
    // The row cannot take the renewal while held: it is noted beside it, for the rescuer.
    let reader = sql(&db).await?;
    let noted = format!(
        "SELECT count(*) FROM {}.held_leases WHERE job_id = $1 AND expires_at > now()",
        db.schema()
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while reader.query_one(&noted, &[&job]).await?.get::<_, i64>(0) == 0 {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the held outcome's lease was not renewed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(state(&reader, &db, job).await, "running", "held");
    hold.release().await?;
    let ack = peer.recv().await;
    assert_eq!(
        (req(&ack), text_of(&ack, "result")),
        (Some(1), "recorded"),
        "{ack:?}"
    );
    assert_eq!(state(&reader, &db, job).await, "completed");
    server.shutdown().await;
    Ok(())
}
