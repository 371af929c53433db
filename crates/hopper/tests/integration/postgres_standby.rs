//! A standby where the primary was expected. A read-only server refuses every write
//! (SQLSTATE 25006): hopper says so, naming the setting that keeps it off standbys, and a
//! pool whose connections were made on a standby replaces them once one of them answers so,
//! so that when the address leads to the primary again (a virtual IP, a proxy or a DNS name
//! moved by a failover) work goes on without a restart.
//!
//! Two private clusters, a primary and its streaming standby (`pg_basebackup -R`); the
//! moving address is a TCP proxy of the test's own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

use hopper::backend::Backend;
use hopper::testing::TestCluster;
use hopper::{Client, PgBackend, PgConnectOptions, PgOptions};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

job_kind!(Mail, "standby_mail");

/// A primary with hopper's schema, and its streaming standby (a copy made after the
/// migration, so the schema is there too).
async fn clusters() -> anyhow::Result<(TestCluster, TestCluster)> {
    TestCluster::migrated_with_standby("standby1")
        .await
        .map_err(anyhow::Error::from_boxed)
}

/// A TCP proxy on 127.0.0.1: each connection it accepts goes to the port it points at
/// then, and stays there, as a virtual IP or a DNS name that a failover moves leaves the
/// connections already made where they are.
struct Proxy {
    port: u16,
    target: Arc<AtomicU16>,
    accepting: JoinHandle<()>,
}

impl Proxy {
    async fn start(target: u16) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let target = Arc::new(AtomicU16::new(target));
        let to = target.clone();
        let accepting = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let port = to.load(Ordering::SeqCst);
                tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", port)).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Ok(Proxy {
            port,
            target,
            accepting,
        })
    }

    /// New connections go to `port` from now on.
    fn point_at(&self, port: u16) {
        self.target.store(port, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

async fn enqueue(client: &Client, n: u64) -> hopper::Result<hopper::JobId> {
    client.enqueue(&Mail { n }).await
}

/// Asserts that `e` is the transient refusal of a read-only server, in the server's words
/// and with what to do about it.
fn assert_read_only(e: &hopper::Error) {
    let text = e.to_string();
    assert!(e.is_transient(), "{text}");
    assert!(text.contains("read-only transaction"), "{text}");
    assert!(text.contains("standby"), "{text}");
    assert!(text.contains("target_session_attrs=read-write"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_given_as_the_url_is_refused_saying_why() -> anyhow::Result<()> {
    let (_primary, standby) = clusters().await?;
    let backend: Arc<dyn Backend> =
        Arc::new(PgBackend::connect(&standby.url("sslmode=disable"), PgOptions::default()).await?);
    let e = backend
        .migrate()
        .await
        .expect_err("a standby takes no migration");
    assert_read_only(&e);
    let e = Client::new(backend)
        .enqueue(&Mail { n: 1 })
        .await
        .expect_err("a standby takes no job");
    assert_read_only(&e);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_made_on_a_standby_are_replaced_once_the_address_leads_to_the_primary()
-> anyhow::Result<()> {
    let (primary, standby) = clusters().await?;
    let proxy = Proxy::start(standby.port()).await?;
    let client = Client::connect(&format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
        proxy.port
    ))
    .await?;

    // Several connections of the pool made on the standby, each refusing a write.
    let refused = futures_util::future::join_all((0..4).map(|n| enqueue(&client, n))).await;
    for result in &refused {
        assert_read_only(result.as_ref().expect_err("the standby takes no job"));
    }

    // The address now leads to the primary: the next enqueue lands there, not on a
    // connection the pool made on the standby.
    proxy.point_at(primary.port());
    let first = client.enqueue(&Mail { n: 10 }).await?;
    let all = futures_util::future::try_join_all((11..19).map(|n| enqueue(&client, n))).await?;
    let on_primary = PgConnectOptions::parse(&primary.url("sslmode=disable"))?
        .connect()
        .await?;
    let ids: Vec<uuid::Uuid> = std::iter::once(first).chain(all).collect();
    let found: i64 = on_primary
        .query_one(
            "SELECT count(*) FROM hopper.jobs WHERE id = ANY($1)",
            &[&ids],
        )
        .await?
        .get(0);
    assert_eq!(found, 9, "every job acknowledged is on the primary");
    Ok(())
}
