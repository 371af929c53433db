//! A server that accepts the TCP connection and then says nothing (a hung process, a proxy
//! with no server behind it) fails a connection at the `connect_timeout`, per host, startup
//! and TLS included, as libpq does: through one connection and through the pool.

use std::time::{Duration, Instant};

use hopper::{PgBackend, PgConnectOptions, PgOptions};
use tokio::net::TcpListener;

/// Accepts every connection and holds it open, answering nothing.
async fn silent_server() -> anyhow::Result<(u16, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    Ok((port, task))
}

/// Waits for `attempt` at most a little past `bound`: without the bound it would hang.
async fn within<T>(
    bound: Duration,
    attempt: impl std::future::Future<Output = hopper::Result<T>>,
) -> anyhow::Result<hopper::Error> {
    match tokio::time::timeout(bound + Duration::from_secs(3), attempt).await {
        Ok(Ok(_)) => anyhow::bail!("connected to a silent server"),
        Ok(Err(e)) => Ok(e),
        Err(_) => anyhow::bail!("still waiting for a silent server past {bound:?}"),
    }
}

fn assert_no_answer(error: &hopper::Error, started: Instant, bound: Duration) {
    let took = started.elapsed();
    assert!(
        took >= bound && took < bound + Duration::from_secs(3),
        "gave up after {took:?}, the bound being {bound:?}"
    );
    assert!(error.to_string().contains("no answer within"), "{error}");
}

#[tokio::test]
async fn a_server_that_never_answers_fails_at_the_connect_timeout() -> anyhow::Result<()> {
    let (port, server) = silent_server().await?;
    let one = Duration::from_secs(1);
    for ssl in ["disable", "prefer", "require"] {
        let url = format!("postgres://postgres@127.0.0.1:{port}/x?connect_timeout=1&sslmode={ssl}");
        let started = Instant::now();
        let e = within(one, PgConnectOptions::parse(&url)?.connect()).await?;
        assert_no_answer(&e, started, one);
    }

    // Two hosts, both silent: one bound each.
    let url = format!(
        "postgres://postgres@127.0.0.1:{port},127.0.0.1:{port}/x?connect_timeout=1&sslmode=disable"
    );
    let started = Instant::now();
    let e = within(2 * one, PgConnectOptions::parse(&url)?.connect()).await?;
    assert_no_answer(&e, started, 2 * one);

    // The pool's connections too (a backend takes one at once, to check the server).
    let url = format!("postgres://postgres@127.0.0.1:{port}/x?connect_timeout=1&sslmode=disable");
    let started = Instant::now();
    let e = within(one, PgBackend::connect(&url, PgOptions::default())).await?;
    assert_no_answer(&e, started, one);
    server.abort();
    Ok(())
}
