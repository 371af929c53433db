//! PostgreSQL ends the sessions of a running `hopper worker` (an administrator's
//! `pg_terminate_backend`; a restart or a failover does the same): each warning the worker
//! logs about it says why, in the server's words, rather than "db error" or nothing.

use std::time::Duration;

use hopper::testing::TestDatabase;

use crate::common::Hopper;

#[tokio::test]
async fn warnings_about_ended_sessions_say_why_in_the_servers_words() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let name = format!("hopper_ended_{}", uuid::Uuid::now_v7().simple());
    let separator = if db.url().contains('?') { '&' } else { '?' };
    let shell = format!(
        "DATABASE_URL=\"$DATABASE_URL{separator}application_name={name}\"; export DATABASE_URL"
    );
    let worker = Hopper::start(&db, &shell, &["worker", "--queue", &name])?;
    worker.line_with("runtime started", Duration::from_secs(30))?;

    // The liveness session holds its lock before the runtime starts; the listener
    // subscribes in the background after it, so the test waits for both by what they
    // do, not by a count of sessions (the pool's may come first).
    let admin = hopper::PgConnectOptions::parse(db.url())?.connect().await?;
    let sessions = "SELECT count(*) FILTER (WHERE a.query LIKE 'LISTEN %') > 0 \
           AND count(*) FILTER (WHERE a.state = 'idle' AND EXISTS ( \
               SELECT 1 FROM pg_locks l \
               WHERE l.pid = a.pid AND l.locktype = 'advisory' AND l.granted)) > 0 \
         FROM pg_stat_activity a WHERE a.application_name = $1";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !admin.query_one(sessions, &[&name]).await?.get::<_, bool>(0) {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the worker never opened its sessions"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .await?;

    let mut liveness = None;
    let mut listener = None;
    while liveness.is_none() || listener.is_none() {
        let line = worker.line_with("lost", Duration::from_secs(30))?;
        if line.contains("liveness lock") {
            liveness = Some(line);
        } else if line.contains("notification connection") {
            listener = Some(line);
        }
    }
    for line in [liveness, listener].into_iter().flatten() {
        assert!(
            line.contains("terminating connection due to administrator command"),
            "{line}"
        );
    }
    Ok(())
}
