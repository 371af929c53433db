//! hopper's wire protocol, version 1: the messages that `hopper serve` exchanges with
//! clients and workers over ZeroMQ, encoded as CBOR.
//!
//! This crate does no I/O. It holds the message types ([`Request`], peer to server;
//! [`Reply`], server to peer), [`encode`] and [`decode_request`] / [`decode_reply`] with the
//! frame size limit ([`MAX_FRAME`]), the error codes ([`ErrorCode`]), and the conversions
//! between the messages and the types of [`hopper_core`] (`From` impls, in one place for the
//! server and the remote transport). The full
//! description, enough to write a client in any language, is `docs/protocol.md` in the
//! repository; this crate is its reference implementation.
//!
//! The wire convention, chosen so that Python (cbor2), Node (cbor-x) and Go (fxamacker/cbor)
//! read and write it with their defaults: every message is one CBOR map with string keys and
//! a `"type"` key naming the message in `snake_case`; no CBOR tags anywhere; UUIDs are
//! hyphenated strings; timestamps are RFC 3339 strings; job arguments are any JSON-compatible
//! value.
//!
//! ```
//! use hopper_protocol::{Request, decode_request, encode};
//!
//! let frame = encode(&Request::Status { req: 7, id: uuid::Uuid::nil() }).unwrap();
//! let back = decode_request(&frame, hopper_protocol::MAX_FRAME).unwrap();
//! assert_eq!(back, Request::Status { req: 7, id: uuid::Uuid::nil() });
//! ```

mod admin;
mod batch;
mod codec;
pub mod convert;
mod envelope;
mod job_page;
mod jobs;
mod locate;
mod map_only;
mod messages;
mod path;
mod read;
mod time_str;
pub mod uuid_str;

pub use admin::{CronInfo, JobFilter, NodeInfo, QueueChange, QueueCounts, QueueInfo, RateInfo};
pub use batch::{Completed, Failed, OutcomeItem, Released, Snoozed};
pub use codec::{DecodeError, decode_reply, decode_request, encode};
pub use envelope::{Envelope, envelope};
pub use job_page::jobs_reply;
pub use jobs::{AttemptInfo, JobInfo, JobSpec, LogLineSpec, Order, PriorityValue};
pub use messages::{ErrorCode, FinishResult, LeaseRef, Reply, Request, Role};

/// The protocol version this crate speaks. A peer's `hello` names the version it speaks;
/// the server refuses any other with an `invalid` error naming the versions it accepts.
pub const VERSION: u32 = 1;

/// The largest frame accepted by default (2 MiB): room for a job's arguments at their
/// largest (1 MiB as JSON) plus the message around them. Larger frames get a `too_large`
/// error and are not decoded.
pub const MAX_FRAME: usize = 2 * 1024 * 1024;

/// The most items one `outcomes` message holds; more are refused (`invalid`) and none of
/// them is written. A frame's cost to the server grows with its items (each is decoded,
/// checked and written), so each list a peer sends is bounded, well above what a
/// well-behaved peer sends: the Rust transport sends at most 500 outcomes a message, the
/// Python and Node workers one.
pub const MAX_OUTCOMES: usize = 1_000;

/// The most leases one `heartbeat` lists; more are refused (`invalid`), and none of them
/// is extended. A worker holds at most its `concurrency` plus its `prefetch` orders (each
/// at most 10,000), and lists besides those it reported whose ack has not come: 30,000
/// leaves room for 10,000 of these at the largest credit.
pub const MAX_HEARTBEAT_LEASES: usize = 30_000;

/// The most jobs one `submit_batch` holds; more are refused (`invalid`) and none is
/// inserted. A larger batch goes in several messages (each all or none).
pub const MAX_BATCH_JOBS: usize = 10_000;

/// The most lines one `log` request holds; more are refused (`invalid`) and none is
/// stored. An attempt keeps at most 64 KiB of lines as JSON, each at least 57 bytes, so
/// no more than about 1,150 lines of one attempt are ever kept.
pub const MAX_LOG_LINES: usize = 4_096;

/// The most attempts' logs one `logs` reply holds. An attempt keeps at most 64 KiB of
/// lines as JSON, which CBOR writes in at most about 2.25 times that (a float such as `0.1`
/// takes 9 bytes in CBOR, 4 in a JSON array): 8 attempts stay under 1.2 MiB, well within
/// [`MAX_FRAME`], which clients may apply to replies too.
pub const LOGS_PAGE: u32 = 8;

/// The longest window a `job_stats` request may ask for: a day, in minutes (as the HTTP
/// API's `GET /api/v1/stats`).
pub const MAX_STATS_MINUTES: u32 = 1440;

/// How often a peer should send something (a heartbeat at least) when the server does not
/// say otherwise in its `welcome`, in milliseconds.
pub const DEFAULT_HEARTBEAT_MS: u64 = 5_000;

/// The characters of Z85 (ZeroMQ RFC 32), in which CURVE keys are written.
const Z85: &str =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/// True when `key` is written as a CURVE key is: 40 Z85 characters (32 bytes). The server's
/// public key, given to peers, has this form.
pub fn is_curve_key(key: &str) -> bool {
    key.len() == 40 && key.chars().all(|c| Z85.contains(c))
}

#[cfg(test)]
mod key_tests {
    #[test]
    fn curve_keys_are_forty_z85_characters() {
        assert!(super::is_curve_key(
            "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
        ));
        assert!(!super::is_curve_key(
            "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf"
        ));
        assert!(!super::is_curve_key(
            "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]y f7"
        ));
        assert!(!super::is_curve_key(&"\"".repeat(40)));
    }
}
