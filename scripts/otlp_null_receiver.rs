//! Build: `rustc -O scripts/otlp_null_receiver.rs -o /tmp/nullrecv`; run: `/tmp/nullrecv 127.0.0.1:4319`.
//! Used by docs/benchmarks.md ("Where the exporter's cost goes"); not part of the workspace.
//! An OTLP/HTTP receiver that reads every request's body and answers 200 with an empty
//! protobuf ExportTraceServiceResponse: the cheapest honest receiver for benchmarks.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:4318".into());
    let listener = TcpListener::bind(&addr).expect("bind");
    let bytes = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let jobs = Arc::new(AtomicU64::new(0));
    {
        let (b, r, j) = (bytes.clone(), requests.clone(), jobs.clone());
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(std::time::Duration::from_secs(5));
                eprintln!(
                    "requests {} bytes {} job spans {}",
                    r.load(Ordering::Relaxed),
                    b.load(Ordering::Relaxed),
                    j.load(Ordering::Relaxed)
                );
            }
        });
    }
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let (b, r, j) = (bytes.clone(), requests.clone(), jobs.clone());
        std::thread::spawn(move || {
            let mut out = stream.try_clone().expect("clone");
            let mut reader = BufReader::new(stream);
            loop {
                let mut length = 0usize;
                let mut line = String::new();
                let mut first = true;
                loop {
                    line.clear();
                    match reader.read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    if line == "\r\n" {
                        break;
                    }
                    if first {
                        first = false;
                        continue;
                    }
                    if let Some((k, v)) = line.split_once(':') {
                        if k.eq_ignore_ascii_case("content-length") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                }
                let mut body = vec![0u8; length];
                if reader.read_exact(&mut body).is_err() {
                    return;
                }
                b.fetch_add(length as u64, Ordering::Relaxed);
                let n = body.windows(10).filter(|w| *w == b"hopper.job").count() as u64;
                j.fetch_add(n, Ordering::Relaxed);
                r.fetch_add(1, Ordering::Relaxed);
                let reply = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                if out.write_all(reply).is_err() {
                    return;
                }
            }
        });
    }
}
