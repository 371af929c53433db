//! `hopper serve --http --http-token-file FILE`: a token file that others may read is
//! refused before the database is opened, as the ZeroMQ `--token-file` is; a private one
//! gives admin tokens (bare or `admin TOKEN`) and read-only ones (`read TOKEN`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::common::{Hopper, http_address};
use hopper::testing::TestDatabase;

const ADMIN: &str = "http-file-admin-token-0123456789";
const BARE: &str = "http-file-bare-admin-token-01234";
const READ: &str = "http-file-read-token-0123456789";

/// Writes `text` to `path` with `mode`.
fn write(path: &Path, text: &str, mode: u32) -> anyhow::Result<()> {
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// `hopper serve --http 127.0.0.1:0 --http-token-file FILE` on a schema that does not
/// exist, with no token in the environment: it must exit within 30 s, failing; its
/// standard error. (One that starts is killed.)
async fn refused(db: &TestDatabase, file: &Path, unborn: &str) -> anyhow::Result<String> {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(["serve", "--http", "127.0.0.1:0", "--http-token-file"])
        .arg(file)
        .env("DATABASE_URL", db.url())
        .env("HOPPER_SCHEMA", unborn)
        .env_remove("HOPPER_HTTP_ADMIN_TOKENS")
        .env_remove("HOPPER_HTTP_READ_TOKENS")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .map_err(|_| anyhow::anyhow!("started with {file:?}"))??;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    anyhow::ensure!(!output.status.success(), "started with {file:?}: {stderr}");
    Ok(stderr)
}

/// `method path` on `addr` with `token`: the status line.
fn status(addr: &str, method: &str, path: &str, token: &str) -> anyhow::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer.lines().next().unwrap_or_default().to_owned())
}

fn dir(name: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("hopper-http-tokens-{name}"));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_token_file_is_refused_and_roles_are_read() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let dir = dir(db.schema())?;
    let file = dir.join("http.token");
    let unborn = format!("{}_unborn", db.schema());
    let tokens = format!("# ops\n{BARE}\nadmin {ADMIN}\n\nread  {READ}\n");

    for mode in [0o644, 0o640, 0o604, 0o620] {
        write(&file, &tokens, mode)?;
        let stderr = refused(&db, &file, &unborn).await?;
        assert!(stderr.contains("chmod 600"), "mode {mode:o}: {stderr}");
        assert!(
            !stderr.contains(ADMIN) && !stderr.contains(READ),
            "{stderr}"
        );
    }
    let bad: [(&str, &str); 4] = [
        (
            "worker http-file-worker-token-0123\n",
            "line 1: unknown role \"worker\"",
        ),
        ("# a\nread short\n", "line 2"),
        ("read two tokens-0123456789012345\n", "expected a token"),
        ("# nothing but a comment\n", "holds no token"),
    ];
    for (text, needle) in bad {
        write(&file, text, 0o600)?;
        let stderr = refused(&db, &file, &unborn).await?;
        assert!(
            stderr.contains(needle),
            "{text:?}: {needle:?} not in {stderr}"
        );
    }
    let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let found = client
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&unborn])
        .await?;
    assert!(found.is_none(), "schema {unborn} was created");

    write(&file, &tokens, 0o600)?;
    let path = file.to_str().unwrap_or_default();
    let serve = Hopper::start(
        &db,
        "unset HOPPER_HTTP_ADMIN_TOKENS HOPPER_HTTP_READ_TOKENS",
        &["serve", "--http", "127.0.0.1:0", "--http-token-file", path],
    )?;
    let line = serve.line_with("HTTP API on ", Duration::from_secs(30))?;
    let (_, addr) = http_address(&line)?;
    for token in [BARE, ADMIN, READ] {
        assert!(
            status(&addr, "GET", "/api/v1/queues", token)?.contains(" 200 "),
            "GET"
        );
    }
    let pause = "/api/v1/queues/q/pause";
    assert!(status(&addr, "POST", pause, READ)?.contains(" 403 "));
    assert!(status(&addr, "POST", pause, ADMIN)?.contains(" 200 "));
    assert!(status(&addr, "POST", pause, BARE)?.contains(" 200 "));
    assert!(status(&addr, "GET", "/api/v1/queues", "read")?.contains(" 401 "));
    drop(serve);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
