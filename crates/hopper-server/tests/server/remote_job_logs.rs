//! Reading a job's logs through `hopper serve`: the `job_logs` request pages through the
//! attempts (at most `LOGS_PAGE` a reply), a client token may send it, a missing job is
//! `not_found`, and `Client::job_logs` on a `RemoteBackend` reads every page and gets what
//! the database holds, as does its `job_logs_page` asked for more than one reply holds.

use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::testing::TestDatabase;
use hopper::{
    AttemptLog, JobArgs, JobContext, JobError, LogLevel, NewJob, Runtime, RuntimeConfig, Worker,
    Workers,
};
use hopper_server::{Access, Auth, Credential};
use serde::{Deserialize, Serialize};
use serde_json::Map;

/// Fails until its attempt `succeed_at`, logging one line per attempt.
#[derive(Serialize, Deserialize)]
struct Flaky {
    succeed_at: i32,
}

impl JobArgs for Flaky {
    const KIND: &'static str = "flaky";
}

struct FlakyWorker;

#[async_trait::async_trait]
impl Worker for FlakyWorker {
    type Args = Flaky;
    async fn process(&self, ctx: &JobContext, args: Flaky) -> Result<(), JobError> {
        let mut fields = Map::new();
        fields.insert("attempt".into(), ctx.attempt().into());
        ctx.log(LogLevel::Warn, format!("try {}", ctx.attempt()), fields);
        if ctx.attempt() < args.succeed_at {
            return Err(JobError::retry_after("not yet", Duration::ZERO));
        }
        Ok(())
    }
}

fn job_logs(req: i64, id: &str, after: Option<i64>) -> Value {
    let mut entries = vec![
        ("type", text("job_logs")),
        ("req", int(req)),
        ("id", text(id)),
    ];
    if let Some(after) = after {
        entries.push(("after", int(after)));
    }
    map(entries)
}

/// The attempt numbers of a `logs` reply, and its `next`.
fn page(reply: &Value) -> (Vec<i64>, Option<i64>) {
    assert_eq!(text_of(reply, "type"), "logs", "{reply:?}");
    let attempts = field(reply, "logs")
        .and_then(Value::as_array)
        .expect("logs")
        .iter()
        .map(|l| {
            field(l, "attempt")
                .and_then(Value::as_integer)
                .and_then(|i| i64::try_from(i).ok())
                .expect("an attempt")
        })
        .collect();
    let next = field(reply, "next").and_then(Value::as_integer);
    (attempts, next.and_then(|i| i64::try_from(i).ok()))
}

/// A job that ran 11 attempts (more than one `job_logs` reply holds), each logging a line,
/// and its logs as the database holds them.
async fn eleven_logged_attempts(db: &TestDatabase) -> anyhow::Result<(NewJob, Vec<AttemptLog>)> {
    let local = hopper::Client::new(db.backend());
    let flaky = NewJob::of(&Flaky { succeed_at: 11 })?.with_max_attempts(20);
    local.insert(flaky.clone()).await?;
    let mut workers = Workers::new();
    workers.register(FlakyWorker);
    let handle = Runtime::new(db.backend(), workers, RuntimeConfig::default())
        .start()
        .await?;
    db.wait_for("default", Duration::from_secs(60), |s| s.completed == 1)
        .await
        .map_err(anyhow::Error::msg)?;
    handle.shutdown().await;
    let stored = local.job_logs(flaky.id).await?;
    assert_eq!(stored.len(), 11, "one log per attempt");
    Ok((flaky, stored))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_logs_past_one_reply_follows_the_servers_cursor() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let (flaky, stored) = eleven_logged_attempts(&db).await?;

    let remote = hopper::connect(&url(server.endpoint()), Default::default()).await?;
    let logs = remote.logs().expect("a remote backend reads logs");
    assert_eq!(logs.job_logs_page(flaky.id, 0, 100).await?, stored);
    assert_eq!(logs.job_logs_page(flaky.id, 1, 9).await?, stored[1..10]);
    assert_eq!(logs.job_logs_page(flaky.id, 8, 2).await?, stored[8..10]);
    assert_eq!(logs.job_logs_page(flaky.id, 0, 0).await?, Vec::new());
    assert_eq!(logs.job_logs(flaky.id).await?, stored);
    server.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_logs_are_read_through_the_server_a_page_at_a_time() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let mut config = config(&db, Duration::from_secs(5)).await;
    let client_token = "c".repeat(20);
    config.auth = Auth::Credentials(vec![
        Credential {
            token: client_token.clone(),
            access: Access::Client,
        },
        Credential {
            token: TOKEN.to_owned(),
            access: Access::Admin,
        },
    ]);
    let server = start(config).await;
    let local = hopper::Client::new(db.backend());
    let silent = NewJob::new("silent", serde_json::json!({})).with_queue("elsewhere");
    local.insert(silent.clone()).await?;
    let (flaky, stored) = eleven_logged_attempts(&db).await?;

    // The Rust client reads every page and gets what the database holds.
    let remote =
        hopper::Client::new(hopper::connect(&url(server.endpoint()), Default::default()).await?);
    assert_eq!(remote.job_logs(flaky.id).await?, stored);
    assert_eq!(remote.job_logs(silent.id).await?, Vec::new());
    let missing = uuid::Uuid::now_v7();
    assert!(
        matches!(
            remote.job_logs(missing).await,
            Err(hopper::Error::NotFound(_))
        ),
        "a job that does not exist is not found"
    );

    // On the wire, with a client token: pages of 8 attempts, `next` the cursor.
    let mut peer = RawPeer::connect(server.endpoint()).await;
    let welcome = peer.hello("client", &client_token, vec![]).await;
    assert_eq!(text_of(&welcome, "type"), "welcome");
    let id = flaky.id.to_string();
    peer.send(&job_logs(2, &id, None)).await;
    let first = peer.recv().await;
    assert_eq!(page(&first), ((1..=8).collect(), Some(8)));
    let line = &field(&first, "logs")
        .and_then(Value::as_array)
        .expect("logs")[0];
    let lines = field(line, "lines")
        .and_then(Value::as_array)
        .expect("lines");
    assert_eq!(text_of(&lines[0], "message"), "try 1");
    assert_eq!(text_of(&lines[0], "level"), "warn");
    assert!(text_of(&lines[0], "at").ends_with('Z'), "RFC 3339 in UTC");
    assert!(field(&lines[0], "fields").is_some());
    assert_eq!(
        field(line, "dropped").and_then(Value::as_integer),
        Some(0.into())
    );
    peer.send(&job_logs(3, &id, Some(8))).await;
    assert_eq!(page(&peer.recv().await), (vec![9, 10, 11], None));
    peer.send(&job_logs(4, &silent.id.to_string(), None)).await;
    assert_eq!(page(&peer.recv().await), (vec![], None));
    peer.send(&job_logs(5, &missing.to_string(), None)).await;
    let reply = peer.recv().await;
    assert_eq!(text_of(&reply, "code"), "not_found", "{reply:?}");
    peer.send(&job_logs(6, "not-a-uuid", None)).await;
    let reply = peer.recv().await;
    assert_eq!(text_of(&reply, "code"), "invalid", "{reply:?}");

    server.shutdown().await;
    Ok(())
}
