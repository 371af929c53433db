//! TLS to PostgreSQL, as libpq's `sslmode` reads it, against a private cluster whose CA,
//! server certificate and client certificate the test makes (rcgen), and against the
//! machine's own server (TLS on, Debian's snakeoil certificate) with `sslmode=require`.

use std::path::PathBuf;
use std::sync::Arc;

use hopper::backend::Backend;
use hopper::testing::TestCluster;
use hopper::{Error, PgBackend, PgConnectOptions, PgOptions};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

/// A CA that signs certificates.
struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> anyhow::Result<Self> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate()?;
        let pem = params.self_signed(&key)?.pem();
        Ok(Ca {
            pem,
            issuer: Issuer::new(params, key),
        })
    }

    /// A certificate for `names` (host names, or the user name as common name), and its key.
    fn sign(&self, common_name: &str, names: &[&str]) -> anyhow::Result<(String, String)> {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names)?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// The private cluster and the files a client points at.
struct Fixture {
    cluster: TestCluster,
    ca: PathBuf,
    other_ca: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

/// A TLS cluster whose certificate names `localhost` only (so `127.0.0.1` is a wrong host
/// name), and whose `hopper_cert` user logs in with a client certificate alone.
fn fixture() -> anyhow::Result<Fixture> {
    let ca = Ca::new("hopper test CA")?;
    let other = Ca::new("another CA")?;
    let (server_cert, server_key) = ca.sign("localhost", &["localhost"])?;
    let (client_cert, client_key) = ca.sign("hopper_cert", &[])?;
    let cluster = TestCluster::init().map_err(anyhow::Error::msg)?;
    cluster
        .enable_tls(&server_cert, &server_key, Some(&ca.pem))
        .map_err(anyhow::Error::msg)?;
    cluster
        .write_hba(&[
            "local all all trust",
            "hostssl all hopper_cert 127.0.0.1/32 cert",
            "host all hopper_cert 127.0.0.1/32 reject",
            "host all all 127.0.0.1/32 trust",
        ])
        .map_err(anyhow::Error::msg)?;
    cluster.start().map_err(anyhow::Error::msg)?;
    let write = |name: &str, text: &str| -> anyhow::Result<PathBuf> {
        let path = cluster.dir().join(name);
        std::fs::write(&path, text)?;
        Ok(path)
    };
    Ok(Fixture {
        ca: write("ca.pem", &ca.pem)?,
        other_ca: write("other_ca.pem", &other.pem)?,
        client_cert: write("client.crt", &client_cert)?,
        client_key: write("client.key", &client_key)?,
        cluster,
    })
}

impl Fixture {
    /// A URL to the cluster by the name `host` (connecting to 127.0.0.1 whatever it is).
    fn url(&self, host: &str, params: &str) -> String {
        format!(
            "postgres://postgres@{host}:{}/postgres?hostaddr=127.0.0.1&{params}",
            self.cluster.port()
        )
    }

    fn ca(&self) -> String {
        self.ca.display().to_string()
    }
}

/// Connects and asks whether the session is encrypted.
async fn encrypted(url: &str) -> anyhow::Result<bool> {
    let client = PgConnectOptions::parse(url)?.connect().await?;
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// The error a connection to `url` fails with, as a user would read it.
async fn failure(url: &str) -> String {
    match encrypted(url).await {
        Ok(_) => panic!("{url} connected, but should have failed"),
        Err(e) => {
            eprintln!("{url}: {e}");
            e.to_string()
        }
    }
}

#[tokio::test]
async fn sslmodes_against_a_private_cluster() -> anyhow::Result<()> {
    let f = fixture()?;
    let ca = f.ca();
    let full = format!("sslmode=verify-full&sslrootcert={ca}");

    // verify-full: the right CA and the right name.
    assert!(encrypted(&f.url("localhost", &full)).await?);

    // verify-full: a CA that did not sign the server's certificate.
    let wrong_ca = format!("sslmode=verify-full&sslrootcert={}", f.other_ca.display());
    let e = failure(&f.url("localhost", &wrong_ca)).await;
    assert!(e.contains("not signed by a trusted root"), "{e}");
    assert!(e.contains("other_ca.pem"), "names the root file: {e}");

    // verify-full: the right CA, a name the certificate does not carry.
    let e = failure(&f.url("wrong.hopper.test", &full)).await;
    assert!(e.contains("not valid for the host name"), "{e}");
    assert!(e.contains("wrong.hopper.test"), "{e}");

    // verify-ca checks the chain only: the wrong name passes, the wrong CA does not.
    let ca_only = format!("sslmode=verify-ca&sslrootcert={ca}");
    assert!(encrypted(&f.url("wrong.hopper.test", &ca_only)).await?);
    let wrong_ca_only = format!("sslmode=verify-ca&sslrootcert={}", f.other_ca.display());
    let e = failure(&f.url("localhost", &wrong_ca_only)).await;
    assert!(e.contains("not signed by a trusted root"), "{e}");

    // require encrypts without checking anything when no root is given, and checks the
    // chain when one is (libpq's rule).
    assert!(encrypted(&f.url("wrong.hopper.test", "sslmode=require")).await?);
    let require_wrong_ca = format!("sslmode=require&sslrootcert={}", f.other_ca.display());
    let e = failure(&f.url("localhost", &require_wrong_ca)).await;
    assert!(e.contains("not signed by a trusted root"), "{e}");

    // prefer (the default) encrypts when the server offers TLS; disable does not.
    assert!(encrypted(&f.url("localhost", "")).await?);
    assert!(!encrypted(&f.url("localhost", "sslmode=disable")).await?);

    // The key=value form reads the same parameters.
    let key_values = format!(
        "host=wrong.hopper.test hostaddr=127.0.0.1 port={} user=postgres dbname=postgres sslmode=verify-full sslrootcert='{ca}'",
        f.cluster.port()
    );
    let e = failure(&key_values).await;
    assert!(e.contains("not valid for the host name"), "{e}");
    // hopper::connect (the CLI's way in) takes the key=value form as PostgreSQL.
    let key_values = key_values.replace("wrong.hopper.test", "localhost");
    let backend = hopper::connect(&key_values, hopper::ConnectOptions::default()).await?;
    backend.migrate().await?;
    Ok(())
}

#[tokio::test]
async fn every_connection_of_a_backend_is_encrypted_and_client_certificates_log_in()
-> anyhow::Result<()> {
    let f = fixture()?;
    let full = format!(
        "sslmode=verify-full&sslrootcert={}&application_name=hopper_tls_check",
        f.ca()
    );
    let backend = PgBackend::connect(&f.url("localhost", &full), PgOptions::default()).await?;
    backend.migrate().await?;
    let _wakeups = backend.subscribe().await?;
    // Hold several pool connections at once, so the pool has more than one.
    let held = futures_util::future::try_join_all((0..3).map(|_| backend.pool().get())).await?;
    let admin = PgConnectOptions::parse(&f.cluster.url("sslmode=disable"))?
        .connect()
        .await?;
    let row = admin
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE s.ssl)
             FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
             WHERE a.application_name = 'hopper_tls_check'",
            &[],
        )
        .await?;
    let (all, encrypted): (i64, i64) = (row.get(0), row.get(1));
    // Three pool connections and the LISTEN connection.
    assert!(all >= 4, "{all} hopper connections");
    assert_eq!(encrypted, all, "every hopper connection is encrypted");
    drop(held);

    // Client-certificate authentication: `cert` in pg_hba, the certificate's CN the user.
    admin
        .batch_execute("CREATE ROLE hopper_cert LOGIN SUPERUSER")
        .await?;
    let cert_url = |params: &str| {
        format!(
            "postgres://hopper_cert@localhost:{}/postgres?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={}{params}",
            f.cluster.port(),
            f.ca()
        )
    };
    let with_cert = cert_url(&format!(
        "&sslcert={}&sslkey={}",
        f.client_cert.display(),
        f.client_key.display()
    ));
    let backend = PgBackend::connect(&with_cert, PgOptions::default()).await?;
    let user: String = backend
        .pool()
        .get()
        .await?
        .query_one("SELECT current_user::text", &[])
        .await?
        .get(0);
    assert_eq!(user, "hopper_cert");
    let refused = PgBackend::connect(&cert_url(""), PgOptions::default()).await;
    let e = refused.expect_err("no certificate, no login").to_string();
    assert!(e.contains("certificate"), "{e}");
    Ok(())
}

#[tokio::test]
async fn bad_tls_parameters_are_refused_before_connecting() {
    let refused = |url: &str| match PgConnectOptions::parse(url) {
        Err(Error::InvalidInput(e)) => e,
        other => panic!("{url}: expected invalid input, got {other:?}"),
    };
    let e = refused("postgres://h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem");
    assert!(
        e.contains("sslrootcert=/nonexistent/ca.pem: no such file"),
        "{e}"
    );
    let e = refused(
        "postgres://h/db?sslmode=require&sslcert=/nonexistent/c.crt&sslkey=/nonexistent/c.key",
    );
    assert!(
        e.contains("sslcert=/nonexistent/c.crt: no such file"),
        "{e}"
    );
    // A certificate given as the key: the parameter is named, and what its file lacks.
    let cert = std::env::temp_dir().join(format!("hopper-tls-as-key-{}.pem", std::process::id()));
    std::fs::write(&cert, Ca::new("a CA").expect("a CA").pem).expect("a temporary file");
    let e = refused(&format!(
        "postgres://h/db?sslmode=require&sslcert={0}&sslkey={0}",
        cert.display()
    ));
    let _ = std::fs::remove_file(&cert);
    let lacks = format!("sslkey={}: no PEM private key in it", cert.display());
    assert!(e.contains(&lacks), "{e}");
    let e = refused("postgres://h/db?sslmode=verify-everything");
    assert!(e.contains("verify-everything"), "{e}");
    let e = refused("postgres://h/db?sslmode=require&sslrootcert=system");
    assert!(e.contains("verify-full"), "{e}");
    let e = refused("postgres://h/db?sslkey=/tmp/k.pem");
    assert!(e.contains("sslcert"), "{e}");
    if std::env::var_os("HOME")
        .is_none_or(|home| !PathBuf::from(home).join(".postgresql/root.crt").exists())
    {
        let e = refused("postgres://h/db?sslmode=verify-ca");
        assert!(e.contains("sslrootcert"), "{e}");
    }
    // The system's roots load, and imply verify-full.
    let system = PgConnectOptions::parse("postgres://h/db?sslrootcert=system").expect("loads");
    assert_eq!(system.ssl_mode(), "verify-full");
}

#[tokio::test]
async fn the_machines_server_with_sslmode_require() -> anyhow::Result<()> {
    let url = hopper::testing::database_url();
    let separator = if url.contains('?') { '&' } else { '?' };
    let require = format!("{url}{separator}sslmode=require");
    assert!(
        encrypted(&require).await?,
        "the machine's server has TLS on"
    );
    let backend = Arc::new(PgBackend::connect(&require, PgOptions::default()).await?);
    backend
        .pool()
        .get()
        .await?
        .batch_execute("SELECT 1")
        .await?;
    Ok(())
}
