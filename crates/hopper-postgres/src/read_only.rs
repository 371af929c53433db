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
//! costs one reconnect.

use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// When a connection last answered that the server takes no writes.
static LAST_REFUSAL: Mutex<Option<Instant>> = Mutex::new(None);

/// Notes that a connection answered, just now, that the server takes no writes.
pub(crate) fn note_refusal() {
    *LAST_REFUSAL.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
}

/// True when a connection made at `created` may be one that answered so: it was made
/// before the last such answer.
pub(crate) fn made_before_refusal(created: Instant) -> bool {
    LAST_REFUSAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .is_some_and(|refused| created <= refused)
}
