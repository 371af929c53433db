//! `hopper serve --http` against peers that hold connections without using them: one that
//! sends nothing, one that sends half a request line (slowloris), one that stays idle after
//! its request; each is closed at `--http-header-timeout`. And at most
//! `--http-max-connections` are open at once: a peer past it waits until one closes. (Served
//! by `axum::serve`, none was ever closed: 15,000 idle connections held 330 MB and 15,000
//! descriptors until the process's limit refused every new peer.) A body trickled after
//! prompt headers is cut at `--http-body-timeout`, and a peer that never reads its
//! responses at `--http-send-timeout`.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common::{metric, serve_open_http};
use hopper::testing::TestDatabase;

/// How long a test waits for the server to act: far past the timeouts under test, so a
/// slow machine does not fail it, and short enough that a server that never acts does.
const PATIENCE: Duration = Duration::from_secs(20);

/// A connection to `addr` whose reads wait at most `wait`.
fn connect(addr: &str, wait: Duration) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connects");
    stream.set_read_timeout(Some(wait)).expect("read timeout");
    stream
}

/// Reads until the server closes `stream`; false if it is still open after [`PATIENCE`].
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(PATIENCE))
        .expect("read timeout");
    let mut sink = [0u8; 4096];
    loop {
        match stream.read(&mut sink) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// A keep-alive `GET /api/v1/queues` on `stream`; its response's status line.
fn get_status(stream: &mut TcpStream, addr: &str) -> std::io::Result<String> {
    let request = format!("GET /api/v1/queues HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    read_status(stream)
}

/// The status line of the response coming on `stream` (empty if it closes first).
fn read_status(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // The head and the JSON body come in one or two reads; a status line is enough.
    while !answer.windows(2).any(|w| w == b"\r\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    let answer = String::from_utf8_lossy(&answer);
    Ok(answer.lines().next().unwrap_or_default().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_http_peers_are_closed_at_the_header_timeout() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (_serve, _, addr) = serve_open_http(&db, &["--http-header-timeout", "300ms"])?;

    let mut silent = connect(&addr, PATIENCE);
    let mut slow = connect(&addr, PATIENCE);
    slow.write_all(b"GET /api/v1/queues HTTP/1.1\r\nHost: ")?;
    let mut idle = connect(&addr, PATIENCE);
    let status = get_status(&mut idle, &addr)?;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");

    assert!(
        closed_by_server(&mut silent),
        "a silent peer kept its connection"
    );
    assert!(
        closed_by_server(&mut slow),
        "a slow peer kept its connection"
    );
    assert!(
        closed_by_server(&mut idle),
        "an idle peer kept its connection"
    );
    // The server goes on serving, and counts what it closed.
    let status = get_status(&mut connect(&addr, PATIENCE), &addr)?;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let timed_out = r#"hopper_http_connections_closed_total{reason="header_timeout"}"#;
    assert_eq!(metric(&addr, timed_out)?, Some(3.0));
    assert!(metric(&addr, "hopper_http_connections")?.is_some_and(|n| n >= 1.0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_connections_past_the_limit_wait_for_one_to_close() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let limits = [
        "--http-max-connections",
        "4",
        "--http-header-timeout",
        "60s",
    ];
    let (_serve, _, addr) = serve_open_http(&db, &limits)?;
    // Four peers hold every connection, idle after a request each.
    let mut held: Vec<TcpStream> = (0..4).map(|_| connect(&addr, PATIENCE)).collect();
    for stream in &mut held {
        let status = get_status(stream, &addr)?;
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    }
    // A fifth is connected by the kernel (the listen backlog) but not served...
    let mut fifth = connect(&addr, Duration::from_millis(500));
    match get_status(&mut fifth, &addr) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("served past the limit: {other:?}"),
    }
    // ... until one of the four leaves.
    drop(held.pop());
    fifth.set_read_timeout(Some(PATIENCE))?;
    let status = read_status(&mut fifth)?;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_request_body_is_cut_at_the_body_timeout() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let timeouts = [
        "--http-body-timeout",
        "500ms",
        "--http-header-timeout",
        "60s",
    ];
    let (_serve, _, addr) = serve_open_http(&db, &timeouts)?;
    let mut stream = connect(&addr, PATIENCE);
    let head = format!(
        "POST /api/v1/jobs HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: 4000\r\n\r\n{{\"kind\": \"slow\", \"args\": {{\"pad\": \""
    );
    stream.write_all(head.as_bytes())?;
    // One byte every 100 ms: never a pause as long as the timeout, and never done.
    let mut trickle = stream.try_clone()?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickling = std::thread::spawn({
        let stop = stop.clone();
        move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && trickle.write_all(b"x").is_ok()
            {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    });
    let status = read_status(&mut stream);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let status = status?;
    assert!(status.starts_with("HTTP/1.1 408"), "{status:?}");
    assert!(
        closed_by_server(&mut stream),
        "the trickling peer kept its connection"
    );
    trickling.join().expect("the trickle thread");
    // Nothing was enqueued, and the server goes on serving.
    let jobs = hopper::Client::new(db.backend())
        .jobs(&hopper::JobListParams::default())
        .await?;
    assert!(jobs.is_empty(), "{jobs:?}");
    let status = get_status(&mut connect(&addr, PATIENCE), &addr)?;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    Ok(())
}

/// A request whose `Content-Length` is over the body limit (16 MiB) is answered 413 at
/// once, its body unsent: without `Expect: 100-continue` the client does not wait for the
/// body timeout (30 s, far past the wait here), and with it the server does not ask for
/// the body (`100 Continue`) first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_body_over_the_limit_is_refused_before_it_is_sent() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (_serve, _, addr) = serve_open_http(&db, &[])?;
    let over = 18 * 1024 * 1024;
    for expect in ["", "Expect: 100-continue\r\n"] {
        let mut stream = connect(&addr, Duration::from_secs(10));
        let head = format!(
            "POST /api/v1/jobs HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {over}\r\n{expect}\r\n"
        );
        stream.write_all(head.as_bytes())?;
        let status = read_status(&mut stream)?;
        assert!(status.starts_with("HTTP/1.1 413"), "{expect:?}: {status:?}");
        assert!(
            closed_by_server(&mut stream),
            "{expect:?}: the connection was kept"
        );
    }
    let status = get_status(&mut connect(&addr, PATIENCE), &addr)?;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    Ok(())
}

/// A peer that asks for responses and never reads them (a slow-read attack) holds its
/// connection only until the server has gone `--http-send-timeout` without getting a byte
/// of them out; it needs no token, since the dashboard's files are public. With one
/// connection allowed, the next peer is served once the reader's connection is closed,
/// and the close is counted as `send_timeout`. (hyper alone waits on the full socket for
/// ever: as many such peers as the connection limit would lock every client out.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_reads_its_responses_is_closed_at_the_send_timeout() -> anyhow::Result<()>
{
    let db = TestDatabase::new().await?;
    let limits = [
        "--http-max-connections",
        "1",
        "--http-header-timeout",
        "60s",
        "--http-send-timeout",
        "500ms",
    ];
    let (_serve, _, addr) = serve_open_http(&db, &limits)?;
    // A small receive window, and far more response bytes asked for than the socket
    // buffers of both ends hold (each app.js is tens of KB).
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(4096)?;
    let reader = socket.connect(addr.parse()?).await?;
    let requests = format!("GET /assets/app.js HTTP/1.1\r\nHost: {addr}\r\n\r\n").repeat(400);
    let mut reader = reader.into_std()?;
    reader.set_nonblocking(false)?;
    reader.write_all(requests.as_bytes())?;

    let mut next = connect(&addr, PATIENCE);
    let status = get_status(&mut next, &addr)
        .map_err(|e| anyhow::anyhow!("the next peer was not served: {e}"))?;
    assert!(status.starts_with("HTTP/1.1 200"), "{status:?}");
    drop(next);
    let stalled = r#"hopper_http_connections_closed_total{reason="send_timeout"}"#;
    assert_eq!(metric(&addr, stalled)?, Some(1.0));
    drop(reader);
    Ok(())
}
