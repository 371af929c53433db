//! What the server adds to the wire conversions of [`hopper_protocol`]: error texts for
//! logs and the backoff of failures that name no delay.

use std::time::Duration;

use hopper_core::Error;

/// An error with the chain of its causes, for logs ([`Error::with_causes`]).
pub(crate) fn detail(e: &Error) -> String {
    e.with_causes()
}

/// Exponential backoff with jitter for failed attempts that name no delay: about
/// 2^attempt seconds, capped at one hour, spread ±10% (the same rule as the Rust runtime).
pub(crate) fn default_backoff(counted_attempt: i32) -> Duration {
    let exp = counted_attempt.clamp(1, 12) as u32;
    let base = Duration::from_secs(2u64.pow(exp)).min(Duration::from_secs(3600));
    base.mul_f64(rand::random_range(0.9..1.1))
}
