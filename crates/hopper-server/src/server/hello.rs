//! `hello`: checking a peer's registration (version, token and its role, names, bounds) and
//! keeping it. A refused hello changes nothing: a peer that had a session keeps it.

use hopper_core::log_limit::capped;
use hopper_protocol::{DecodeError, ErrorCode, Reply, Role, VERSION};
use tokio::time::Instant;

use super::{Core, PeerId, Registration, hex};
use crate::auth::Access;

/// Most queues one worker may serve: each served queue is claimed from for it, so the
/// bound keeps one peer from making the server's work grow without end.
pub(crate) const MAX_QUEUES: usize = 100;

/// Most kinds one worker may declare.
pub(crate) const MAX_KINDS: usize = 1000;

/// The name of a peer whose hello gives none, in error histories and logs.
const UNNAMED: &str = "unnamed";

/// Most characters of a peer's `name` kept (for logs and error histories).
pub(crate) const MAX_NAME_CHARS: usize = 128;

/// Most orders a worker may run at once (`concurrency`) or hold ahead (`prefetch`).
const MAX_CREDIT: u32 = 10_000;

/// The largest `hello` frame: 1,000 kinds and 100 queues of 128 characters take about
/// 150 KB. It bounds the one frame of a peer without a session that is decoded whole (its
/// others have only their `type` and `req` read), so that a peer that never said hello
/// cannot have the server decode large frames, in the one loop every peer waits on, only
/// to refuse them.
pub(crate) const MAX_HELLO_FRAME: usize = 256 * 1024;

/// The most of a refused frame's reason a log line shows: the reason quotes what the peer
/// sent (an unknown `type`, a field's value).
const REFUSAL_LOG_CHARS: usize = 160;

/// The refusal of a request before a hello.
pub(crate) const BEFORE_HELLO: &str = "say hello (with a valid token) first";

/// The fields of a hello.
pub(crate) struct Hello {
    pub req: u64,
    pub version: u32,
    pub role: Role,
    pub token: Option<String>,
    pub name: Option<String>,
    pub kinds: Option<Vec<String>>,
    pub queues: Option<Vec<String>>,
    pub concurrency: Option<u32>,
    pub prefetch: Option<u32>,
    pub batch: bool,
}

impl Core {
    pub(super) fn on_hello(&mut self, peer: PeerId, hello: Hello, now: Instant) {
        let req = Some(hello.req);
        if hello.version != VERSION {
            let message = format!(
                "protocol version {} is not supported; this server speaks {VERSION}",
                hello.version
            );
            crate::recording::hello_refused("invalid");
            return self.reply(&peer, Reply::error(req, ErrorCode::Invalid, message));
        }
        let refuse = |core: &mut Core, why: &str| {
            crate::recording::hello_refused("unauthorized");
            if let Some(held_back) = core.refusals.check() {
                let name = capped(hello.name.as_deref().unwrap_or(""));
                tracing::warn!(peer = %hex(&peer), %name, held_back, "refused a hello: {why}");
            }
        };
        let Some(access) = self.config.auth.access(hello.token.as_deref()) else {
            refuse(self, "bad or missing token");
            return self.reply(
                &peer,
                Reply::error(req, ErrorCode::Unauthorized, "bad or missing token"),
            );
        };
        if hello.role == Role::Worker && access < Access::Worker {
            refuse(self, "a client token cannot say hello as a worker");
            let message = "this token's role is client: it may submit, read and cancel jobs, not run them; use a worker token";
            return self.reply(&peer, Reply::error(req, ErrorCode::Unauthorized, message));
        }
        if let Err(message) = check_registration(&hello) {
            crate::recording::hello_refused("invalid");
            return self.reply(&peer, Reply::error(req, ErrorCode::Invalid, message));
        }
        let queues = hello
            .queues
            .unwrap_or_else(|| vec![hopper_core::DEFAULT_QUEUE.to_owned()]);
        let concurrency = hello.concurrency.unwrap_or(1);
        let prefetch = hello.prefetch.unwrap_or(0);
        let name = match hello.name {
            Some(name) => name.chars().take(MAX_NAME_CHARS).collect(),
            // Not the routing id: a peer that learnt the server's next anonymous routing
            // ids could abort it (`transport.rs`, `seed_anonymous_routing_ids`).
            None => UNNAMED.to_owned(),
        };
        for q in &queues {
            self.hot.entry(q.clone()).or_insert(true);
        }
        let registration = Registration {
            role: hello.role,
            access,
            name,
            kinds: hello.kinds.map(|k| k.into_iter().collect()),
            queues,
            concurrency: concurrency as usize,
            prefetch: prefetch as usize,
            batch: hello.batch,
        };
        let entry = self.peers.register(&peer, registration, now);
        tracing::info!(peer = %hex(&peer), name = %capped(&entry.name), role = ?entry.role(), access = access.as_str(), queues = entry.queues().len(), concurrency, prefetch, "peer said hello");
        let welcome = Reply::Welcome {
            req: hello.req,
            version: VERSION,
            session: entry.session,
            heartbeat_ms: u64::try_from(self.config.heartbeat.as_millis()).unwrap_or(u64::MAX),
            max_frame: self.config.max_frame as u64,
        };
        self.reply(&peer, welcome);
    }
}

impl Core {
    /// The refusal of a frame from a peer without a session, read no further than its
    /// `type` and `req` ([`hopper_protocol::envelope`]): not one CBOR map, a `type` that
    /// names no request, a request other than `hello`, or a `hello` over
    /// [`MAX_HELLO_FRAME`], each answered as decoding it would be. `None`: a `hello`, to be
    /// decoded whole.
    pub(super) fn refuse_before_hello(&mut self, peer: &PeerId, frame: &[u8]) -> Option<Reply> {
        let Some(envelope) = hopper_protocol::envelope(frame) else {
            if let Some(held_back) = self.frame_refusals.check() {
                tracing::warn!(peer = %hex(peer), held_back, bytes = frame.len(), "refused a frame before hello: not one CBOR map");
            }
            let message = "not one well-formed CBOR map (a frame before hello is read no further)";
            return Some(Reply::error(None, ErrorCode::BadFrame, message));
        };
        if let Some(refused) = envelope.type_refusal() {
            self.log_frame_refusal(peer, &refused);
            return Some(refused.to_reply());
        }
        if envelope.ty == Some(Some("hello".to_owned())) {
            return hello_too_large(envelope.req, frame.len());
        }
        self.log_early_refusal(peer);
        Some(Reply::error(
            envelope.req,
            ErrorCode::Unauthorized,
            BEFORE_HELLO,
        ))
    }
}

impl Core {
    /// Logs a frame refused undecoded (not a request, a field out of range), at most once
    /// per interval with the count held back, and only the start of why: the reason quotes
    /// what the peer sent.
    pub(super) fn log_frame_refusal(&mut self, peer: &PeerId, refused: &DecodeError) {
        if let Some(held_back) = self.frame_refusals.check() {
            let why = capped(&refused.message).max_chars(REFUSAL_LOG_CHARS);
            tracing::warn!(peer = %hex(peer), code = %refused.code, held_back, "refused a frame: {why}");
        }
    }

    /// Logs a request refused because its peer has not said hello, at most once per
    /// interval with the count held back.
    pub(super) fn log_early_refusal(&mut self, peer: &PeerId) {
        if let Some(held_back) = self.early_refusals.check() {
            tracing::warn!(peer = %hex(peer), held_back, "refused a request before hello");
        }
    }
}

/// The refusal of a `hello` frame of `bytes` over [`MAX_HELLO_FRAME`]; `None` within it.
pub(super) fn hello_too_large(req: Option<u64>, bytes: usize) -> Option<Reply> {
    if bytes <= MAX_HELLO_FRAME {
        return None;
    }
    crate::recording::hello_refused("invalid");
    let message = format!(
        "hello: a hello frame is at most {MAX_HELLO_FRAME} bytes, this one is {bytes} bytes"
    );
    Some(Reply::error(req, ErrorCode::Invalid, message))
}

/// Checks the names and bounds of a hello; the message says what is wrong.
fn check_registration(hello: &Hello) -> Result<(), String> {
    let queues = hello.queues.as_deref().unwrap_or_default();
    let kinds = hello.kinds.as_deref().unwrap_or_default();
    if queues.len() > MAX_QUEUES {
        return Err(format!(
            "{} queues declared; a worker serves at most {MAX_QUEUES}",
            queues.len()
        ));
    }
    if kinds.len() > MAX_KINDS {
        return Err(format!(
            "{} kinds declared; a worker declares at most {MAX_KINDS}",
            kinds.len()
        ));
    }
    for q in queues {
        hopper_core::job::validate_name("queue", q).map_err(|e| e.to_string())?;
    }
    for k in kinds {
        hopper_core::job::validate_name("kind", k).map_err(|e| e.to_string())?;
    }
    for (what, value) in [
        ("concurrency", hello.concurrency),
        ("prefetch", hello.prefetch),
    ] {
        if let Some(n) = value.filter(|n| *n > MAX_CREDIT) {
            return Err(format!("{what} {n} is over the limit of {MAX_CREDIT}"));
        }
    }
    Ok(())
}
