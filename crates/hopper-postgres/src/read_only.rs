//! Pooled connections of a server that takes no writes, replaced once one of them says so.
//!
//! A connection made while the address led to a standby (a virtual IP, a proxy or a DNS
//! name a failover has not moved yet, or a host list without
//! `target_session_attrs=read-write`), or while `default_transaction_read_only` was on,
//! stays read-only for its whole life: every write on it fails (SQLSTATE 25006) even once
//! the address leads to the primary. The pool's own check of a connection it hands out (is
//! it closed?) cannot see that, so such a connection would be handed out, and fail, for
//! ever. The first refusal is noted here ([`note_refusal`], by `error::map_pg`), and the
//! pools drop every connection made before it instead of handing it out again
//! ([`made_before_refusal`]): the next one is made afresh, through the host list and
//! `target_session_attrs` again.
//!
//! One note per process rather than per connection, as the driver's error does not say
//! which connection it came from: a connection to the primary made before the refusal
//! costs one reconnect. That holds for a refusal on the application's own connection too
//! (an enqueue inside its `BEGIN READ ONLY` transaction): each costs the pools one
//! reconnect of the connections they hold, nothing more.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// When a connection last answered that the server takes no writes, as nanoseconds after
/// [`base`] (0: never). An atomic, not a lock: the pools read it at every checkout.
static LAST_REFUSAL: AtomicU64 = AtomicU64::new(0);

/// The instant [`LAST_REFUSAL`] counts from.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// Notes that a connection answered, just now, that the server takes no writes.
pub(crate) fn note_refusal() {
    let since = base().elapsed().as_nanos();
    LAST_REFUSAL.store(
        u64::try_from(since).unwrap_or(u64::MAX).max(1),
        Ordering::Release,
    );
}

/// True when a connection made at `created` may be one that answered so: it was made
/// before the last such answer.
pub(crate) fn made_before_refusal(created: Instant) -> bool {
    match LAST_REFUSAL.load(Ordering::Acquire) {
        0 => false,
        since => base()
            .checked_add(Duration::from_nanos(since))
            .is_some_and(|refused| created <= refused),
    }
}
