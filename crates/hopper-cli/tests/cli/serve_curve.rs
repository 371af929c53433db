//! `hopper serve --curve`, run as a user runs it: the key pair is generated beside the token
//! on first start (mode 0600) and read back on the next, the public key is printed, and a
//! Rust client reaches the server with it and only with it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hopper::testing::TestDatabase;

/// A `hopper serve` child process and what it printed up to "CURVE on".
struct Serving {
    child: Child,
    endpoint: String,
    server_key: String,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `hopper serve --curve` on a free loopback port with its files in `dir`, and reads
/// its stderr until it says where it listens and which key peers need.
fn serve(db: &TestDatabase, dir: &Path) -> Serving {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args([
            "serve",
            "--listen",
            "tcp://127.0.0.1:0",
            "--curve",
            "--token-file",
        ])
        .arg(dir.join("serve.token"))
        .env("DATABASE_URL", db.url())
        .env("HOPPER_SCHEMA", db.schema())
        .env_remove("HOPPER_LOG")
        .env_remove("HOPPER_KEY_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hopper serve starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut serving = Serving {
        child,
        endpoint: String::new(),
        server_key: String::new(),
    };
    let mut lines = BufReader::new(stderr).lines();
    for line in lines.by_ref() {
        let line = line.expect("reads stderr");
        if let Some(rest) = line.strip_prefix("hopper serve: listening on ") {
            serving.endpoint = rest.split_whitespace().next().unwrap_or("").to_owned();
        }
        if let Some(rest) = line.split("peers need the server key ").nth(1) {
            serving.server_key = rest.split_whitespace().next().unwrap_or("").to_owned();
            break;
        }
    }
    // The rest of its stderr is read (and dropped) so that it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    assert!(
        serving.endpoint.starts_with("tcp://") && serving.server_key.len() == 40,
        "hopper serve printed no endpoint or key"
    );
    serving
}

fn token(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("serve.token")).expect("the token file");
    text.lines()
        .find(|l| !l.starts_with('#') && !l.is_empty())
        .expect("a token")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_curve_makes_its_key_once_and_serves_only_peers_that_know_it() {
    let db = TestDatabase::new().await.expect("a test database");
    let dir = std::env::temp_dir().join(format!("hopper-serve-curve-{}", uuid::Uuid::now_v7()));
    let first = serve(&db, &dir);
    let key_file = dir.join("serve.key");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_file)
            .expect("the key file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the key file is private");
    }
    let key = first.server_key.clone();
    assert!(
        std::fs::read_to_string(&key_file)
            .expect("the key file")
            .contains(&key),
        "the printed key is the file's public key"
    );

    let token = token(&dir);
    let url = format!("{}?token={token}", first.endpoint);
    let mut without = hopper::RemoteOptions::from_url(&url).expect("a URL");
    without.request_timeout = Duration::from_secs(2);
    assert!(
        hopper::RemoteBackend::connect(without).await.is_err(),
        "a peer without the key gets nothing"
    );
    let with = hopper::connect(&format!("{url}&server_key={key}"), Default::default())
        .await
        .expect("a peer with the key connects");
    hopper::Client::new(with)
        .insert(hopper::NewJob::new("encrypted", serde_json::json!({})))
        .await
        .expect("and submits");
    drop(first);

    let second = serve(&db, &dir);
    assert_eq!(
        second.server_key, key,
        "the key pair is read back, not made anew"
    );
    drop(second);
    let _ = std::fs::remove_dir_all(dir);
}
