//! `hopper serve --http` over HTTPS (`--http-tls-cert`, `--http-tls-key`), with a
//! certificate the test makes (rcgen) and a rustls client that trusts only it; and plain
//! HTTP refused off loopback unless `--http-insecure-plaintext`, as the ZeroMQ side refuses
//! plaintext there without CURVE.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{Hopper, http_address};
use hopper::testing::TestDatabase;
use rcgen::{CertificateParams, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "tls-test-admin-token-0123456789";

/// A self-signed certificate for 127.0.0.1 and its key, written into `dir`.
struct Identity {
    cert: PathBuf,
    key: PathBuf,
    der: CertificateDer<'static>,
}

fn identity(dir: &Path, name: &str) -> anyhow::Result<Identity> {
    let key = KeyPair::generate()?;
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?
        .self_signed(&key)?;
    let paths = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&paths.0, cert.pem())?;
    std::fs::write(&paths.1, key.serialize_pem())?;
    Ok(Identity {
        cert: paths.0,
        key: paths.1,
        der: cert.der().clone(),
    })
}

/// `GET /api/v1/queues` over TLS to `addr`, trusting `root` alone: the status line.
async fn https_get(addr: &str, root: &CertificateDer<'static>) -> anyhow::Result<String> {
    let answer = https_request(addr, "/api/v1/queues", root).await?;
    Ok(answer.lines().next().unwrap_or_default().to_owned())
}

/// `GET path` over TLS to `addr`, trusting `root` alone: the whole answer.
async fn https_request(
    addr: &str,
    path: &str,
    root: &CertificateDer<'static>,
) -> anyhow::Result<String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let mut tls = connector
        .connect(ServerName::try_from("127.0.0.1")?, tcp)
        .await?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    );
    tls.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    // A peer that closes without close_notify is an error to rustls; the answer is read.
    let _ = tls.read_to_end(&mut answer).await;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// `hopper serve` with `args`, authenticated by [`TOKEN`], once it prints its address:
/// the process, the scheme and the address (`host:port`).
fn serve(db: &TestDatabase, args: &[&str]) -> anyhow::Result<(Hopper, String, String)> {
    let shell = format!("export HOPPER_HTTP_ADMIN_TOKENS={TOKEN}");
    let serve = Hopper::start(db, &shell, &[&["serve"][..], args].concat())?;
    let line = serve.line_with("HTTP API on ", Duration::from_secs(30))?;
    let (scheme, addr) = http_address(&line)?;
    Ok((serve, scheme, addr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_api_serves_https_and_closes_what_is_not_tls() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let dir = tempfile_dir(db.schema())?;
    let id = identity(&dir, "server")?;
    let files = [
        "--http-tls-cert",
        path(&id.cert),
        "--http-tls-key",
        path(&id.key),
    ];
    let timeout = ["--http", "127.0.0.1:0", "--http-header-timeout", "300ms"];
    let (serve, scheme, addr) = serve(&db, &[&timeout[..], &files[..]].concat())?;
    assert_eq!(scheme, "https");
    let status = https_get(&addr, &id.der).await?;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");

    // Plain HTTP on the HTTPS port gets no HTTP answer, and the connection is closed.
    let mut plain = TcpStream::connect(&addr)?;
    plain.set_read_timeout(Some(Duration::from_secs(20)))?;
    plain.write_all(format!("GET /api/v1/queues HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/"), "{answer:?}");
    // A peer that starts no handshake is closed at the header timeout.
    let mut silent = TcpStream::connect(&addr)?;
    silent.set_read_timeout(Some(Duration::from_secs(20)))?;
    assert_eq!(
        silent.read(&mut [0u8; 16])?,
        0,
        "the silent peer was not closed"
    );
    // A client that trusts another certificate refuses the server; the server goes on.
    let other = identity(&dir, "other")?;
    assert!(https_get(&addr, &other.der).await.is_err());
    let status = https_get(&addr, &id.der).await?;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    // The plain request and the silent peer at least (the refused client's end may not be
    // counted yet): `hopper_http_connections_closed_total{reason="tls_handshake"}`.
    let metrics = https_request(&addr, "/metrics", &id.der).await?;
    let failed = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"hopper_http_connections_closed_total{reason="tls_handshake"}"#)
        })
        .and_then(|n| n.trim().parse::<f64>().ok());
    assert!(failed.is_some_and(|n| n >= 2.0), "{metrics}");
    drop(serve);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A renewed certificate is served from the next handshake after `SIGHUP`; files that
/// cannot be served (half written) are refused then, and the pair served before stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_certificate_is_served_after_sighup() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let dir = tempfile_dir(db.schema())?;
    let (old, new) = (identity(&dir, "old")?, identity(&dir, "new")?);
    let (cert, key) = (dir.join("live.crt"), dir.join("live.key"));
    let install = |id: &Identity| -> std::io::Result<()> {
        std::fs::copy(&id.cert, &cert)?;
        std::fs::copy(&id.key, &key).map(drop)
    };
    install(&old)?;
    let args = [
        "--http",
        "127.0.0.1:0",
        "--http-tls-cert",
        path(&cert),
        "--http-tls-key",
        path(&key),
    ];
    let (serve, _, addr) = serve(&db, &args)?;
    assert!(
        https_get(&addr, &old.der)
            .await?
            .starts_with("HTTP/1.1 200")
    );
    let hangup = || {
        let pid = serve.child.id().to_string();
        Command::new("kill").args(["-HUP", &pid]).status()
    };

    std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\nhalf")?;
    anyhow::ensure!(hangup()?.success(), "kill -HUP");
    serve.line_with("kept the HTTPS certificate", Duration::from_secs(20))?;
    assert!(
        https_get(&addr, &old.der)
            .await?
            .starts_with("HTTP/1.1 200")
    );

    install(&new)?;
    anyhow::ensure!(hangup()?.success(), "kill -HUP");
    serve.line_with("reloaded the HTTPS certificate", Duration::from_secs(20))?;
    assert!(
        https_get(&addr, &new.der)
            .await?
            .starts_with("HTTP/1.1 200")
    );
    assert!(
        https_get(&addr, &old.der).await.is_err(),
        "the old pair served"
    );
    drop(serve);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// HTTPS settings it cannot serve with, and plain HTTP off loopback, are refused before
/// the database is opened (the schema given is not created); `--http-insecure-plaintext`
/// serves plain HTTP off loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_off_loopback_and_bad_tls_files_are_refused() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let dir = tempfile_dir(db.schema())?;
    let id = identity(&dir, "server")?;
    let other = identity(&dir, "other")?;
    let garbage = dir.join("garbage.pem");
    std::fs::write(&garbage, "not a certificate")?;
    let missing = dir.join("missing.pem");
    let (cert, key) = (path(&id.cert), path(&id.key));
    let loopback = ["--http", "127.0.0.1:0"];
    let missing_said = format!("TLS certificate file {}: no such file", missing.display());
    let keyless_said = format!("TLS key file {cert}: no PEM private key in it");
    let cases: [(&[&str], &str); 7] = [
        (&["--http", "0.0.0.0:0"], "off loopback"),
        (&["--http", "[::]:0"], "--http-insecure-plaintext"),
        (
            &[
                &loopback[..],
                &["--http-tls-cert", path(&missing), "--http-tls-key", key],
            ]
            .concat(),
            &missing_said,
        ),
        (
            &[
                &loopback[..],
                &["--http-tls-cert", cert, "--http-tls-key", cert],
            ]
            .concat(),
            &keyless_said,
        ),
        (
            &[
                &loopback[..],
                &["--http-tls-cert", path(&garbage), "--http-tls-key", key],
            ]
            .concat(),
            "no PEM certificate",
        ),
        (
            &[
                &loopback[..],
                &["--http-tls-cert", cert, "--http-tls-key", path(&other.key)],
            ]
            .concat(),
            "TLS certificate and key",
        ),
        (
            &[&loopback[..], &["--http-tls-cert", cert]].concat(),
            "--http-tls-key",
        ),
    ];
    let unborn = format!("{}_unborn", db.schema());
    for (args, needle) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_hopper"))
            .arg("serve")
            .args(args)
            .env("DATABASE_URL", db.url())
            .env("HOPPER_SCHEMA", &unborn)
            .env("HOPPER_HTTP_ADMIN_TOKENS", TOKEN)
            .stdin(Stdio::null())
            .output()?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} started");
        assert!(
            stderr.contains(needle),
            "{args:?}: {needle:?} not in {stderr}"
        );
    }
    let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let found = client
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&unborn])
        .await?;
    assert!(found.is_none(), "schema {unborn} was created");

    let plain = ["--http", "0.0.0.0:0", "--http-insecure-plaintext"];
    let (_serve, scheme, addr) = serve(&db, &plain)?;
    assert_eq!(scheme, "http");
    let port = addr.rsplit(':').next().unwrap_or_default();
    let mut stream = TcpStream::connect(format!("127.0.0.1:{port}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    let request = format!(
        "GET /api/v1/queues HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A directory of the test's own under the system's temporary directory.
fn tempfile_dir(name: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("hopper-http-tls-{name}"));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}
