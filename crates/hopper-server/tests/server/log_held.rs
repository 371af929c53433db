//! A job row or a log row held by another transaction (selected FOR UPDATE, being
//! deleted) does not stall the server's one log writer: the request whose attempt it is
//! gets a transient error at once, while the others stored with it are acknowledged; sent
//! again once the row is free, it is stored.
//!
//! With a row selected FOR UPDATE, both requests go in one batch: the test holds the log
//! table in SHARE mode while the peer sends them (so the first store waits and both
//! queue), and a heartbeat answered after them says they reached the server. (Not with a
//! DELETE: it waits for that lock itself.)

use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::JobId;
use hopper::testing::TestDatabase;

/// Sends `log` requests 2 (for `held`) and 3 (for `free`), in one batch when `batched`,
/// and returns their replies by request number.
async fn log_both(
    db: &TestDatabase,
    peer: &mut RawPeer,
    (held, free): (JobId, JobId),
    round: usize,
    batched: bool,
) -> anyhow::Result<[Value; 2]> {
    let table = match batched {
        true => Some(sql(db).await?),
        false => None,
    };
    if let Some(table) = &table {
        table
            .batch_execute(&format!(
                "BEGIN; LOCK TABLE {}.job_logs IN SHARE MODE",
                db.schema()
            ))
            .await?;
    }
    peer.send(&log_request(2, held, &format!("held {round}")))
        .await;
    peer.send(&log_request(3, free, &format!("free {round}")))
        .await;
    if let Some(table) = &table {
        peer.send(&map(vec![("type", text("heartbeat")), ("req", int(1))]))
            .await;
        peer.recv_type("heartbeat_ack").await;
        table.batch_execute("COMMIT").await?;
    }
    let (a, b) = (peer.recv().await, peer.recv().await);
    let req = |v: &Value| field(v, "req").and_then(Value::as_integer).map(i128::from);
    Ok(if req(&a) == Some(2) { [a, b] } else { [b, a] })
}

/// The messages stored for `id`.
async fn stored(db: &TestDatabase, id: JobId) -> anyhow::Result<Vec<String>> {
    let store = db.backend();
    let store = store.logs().expect("PostgreSQL keeps logs");
    let logs = store.job_logs(id).await?;
    Ok(logs
        .iter()
        .flat_map(|l| l.lines.iter().map(|line| line.message.clone()))
        .collect())
}

/// `reply` is the transient error of a held row.
fn assert_held(reply: &Value) {
    assert_eq!(text_of(reply, "type"), "error", "{reply:?}");
    assert_eq!(text_of(reply, "code"), "internal", "{reply:?}");
    assert_eq!(
        field(reply, "transient"),
        Some(&Value::Bool(true)),
        "{reply:?}"
    );
    assert!(
        text_of(reply, "message").contains("held by another transaction"),
        "{reply:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_row_costs_only_its_own_attempt_a_try() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(30)).await).await;
    let jobs = leased_by(&db, server.node_id(), 2).await?;
    let mut peer = RawPeer::connect(server.endpoint()).await;
    let extra = vec![
        ("name", text("logger")),
        ("queues", Value::Array(vec![text("elsewhere")])),
    ];
    let welcome = peer.hello("worker", TOKEN, extra).await;
    assert_eq!(text_of(&welcome, "type"), "welcome", "{welcome:?}");
    // Its orders: their lines are queued for storing as they come, both before the commit.
    adopt(&mut peer, &jobs).await;
    let s = db.schema();
    let holder = sql(&db).await?;
    // First one job's row held as `SELECT … FOR UPDATE` holds it, then the other's as an
    // uncommitted DELETE does (rolled back: the job stays); then the same with the log rows
    // the first two rounds stored, which an insert of the same attempt would wait on.
    let rounds = [
        (
            format!("SELECT 1 FROM {s}.jobs WHERE id = '{}' FOR UPDATE", jobs[0]),
            jobs[0],
            jobs[1],
            "COMMIT",
        ),
        (
            format!("DELETE FROM {s}.jobs WHERE id = '{}'", jobs[1]),
            jobs[1],
            jobs[0],
            "ROLLBACK",
        ),
        (
            format!(
                "SELECT 1 FROM {s}.job_logs WHERE job_id = '{}' FOR UPDATE",
                jobs[0]
            ),
            jobs[0],
            jobs[1],
            "COMMIT",
        ),
        (
            format!("DELETE FROM {s}.job_logs WHERE job_id = '{}'", jobs[1]),
            jobs[1],
            jobs[0],
            "ROLLBACK",
        ),
    ];
    for (round, (hold, held_id, free_id, end)) in rounds.into_iter().enumerate() {
        holder.batch_execute(&format!("BEGIN; {hold}")).await?;
        let pair = (held_id, free_id);
        let batched = hold.ends_with("FOR UPDATE");
        let [held, free] = log_both(&db, &mut peer, pair, round, batched).await?;
        assert_held(&held);
        assert_eq!(text_of(&free, "result"), "recorded", "{free:?}");
        let lines = stored(&db, free_id).await?;
        assert_eq!(lines.last(), Some(&format!("free {round}")), "{lines:?}");
        let lines = stored(&db, held_id).await?;
        assert!(!lines.contains(&format!("held {round}")), "{lines:?}");
        holder.batch_execute(end).await?;
    }

    // Free again: sent again, stored after what was stored before.
    peer.send(&log_request(4, jobs[1], "again")).await;
    let again = peer.recv().await;
    assert_eq!(text_of(&again, "result"), "recorded", "{again:?}");
    assert_eq!(stored(&db, jobs[1]).await?, ["free 0", "free 2", "again"]);
    assert_eq!(stored(&db, jobs[0]).await?, ["free 1", "free 3"]);
    server.shutdown().await;
    Ok(())
}
