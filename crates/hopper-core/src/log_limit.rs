//! Keeping what peers control from flooding the log.
//!
//! Anything a peer sends (a request path, a header, a worker's name, a queue name) may be
//! megabytes long and may hold newlines or escape sequences. Two tools keep such input
//! from growing the log without bound:
//!
//! - [`capped`] shows at most a few dozen characters of a string, control characters
//!   escaped, and says how long the whole was;
//! - [`LogThrottle`] lets a repeated event through at most a few times per interval and
//!   counts what it held back, so a thousand refused requests a second cost one line a
//!   minute.
//!
//! ```
//! use std::time::Duration;
//! use hopper_core::log_limit::{LogThrottle, capped};
//!
//! static REFUSED: LogThrottle = LogThrottle::new(Duration::from_secs(60));
//! let path = "/api/v1/".to_owned() + &"x".repeat(60_000);
//! if let Some(suppressed) = REFUSED.check() {
//!     println!("refused {} ({suppressed} more refusals not logged)", capped(&path));
//! }
//! assert!(capped(&path).to_string().len() < 200);
//! ```

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many characters of a peer's string [`capped`] shows.
pub const LOG_TEXT_CHARS: usize = 64;

/// A string shown in a log line: at most [`LOG_TEXT_CHARS`] characters, control
/// characters escaped, and when cut, the length of the whole in bytes.
pub fn capped(text: &str) -> Capped<'_> {
    Capped {
        text,
        max_chars: LOG_TEXT_CHARS,
    }
}

/// A string cut for a log line; see [`capped`]. Formats with `Display` (`%` in `tracing`).
#[derive(Debug, Clone, Copy)]
pub struct Capped<'a> {
    text: &'a str,
    max_chars: usize,
}

impl Capped<'_> {
    /// Shows at most `max_chars` characters instead of [`LOG_TEXT_CHARS`].
    pub fn max_chars(self, max_chars: usize) -> Self {
        Capped { max_chars, ..self }
    }
}

impl fmt::Display for Capped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (shown, c) in self.text.chars().enumerate() {
            if shown == self.max_chars {
                return write!(f, "…({} bytes)", self.text.len());
            }
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                fmt::Write::write_char(f, c)?;
            }
        }
        Ok(())
    }
}

/// Lets a repeated event be logged at most `limit` times per interval, counting the times
/// it was held back.
///
/// Usable as a `static` (see the module example). Cheap: one uncontended lock per check.
#[derive(Debug)]
pub struct LogThrottle {
    limit: u32,
    interval: Duration,
    state: Mutex<ThrottleState>,
}

#[derive(Debug)]
struct ThrottleState {
    window_start: Option<Instant>,
    logged: u32,
    suppressed: u64,
}

impl LogThrottle {
    /// A throttle that lets one event through per `interval`.
    pub const fn new(interval: Duration) -> Self {
        LogThrottle::per_interval(1, interval)
    }

    /// A throttle that lets the first `limit` events of each `interval` through.
    pub const fn per_interval(limit: u32, interval: Duration) -> Self {
        LogThrottle {
            limit,
            interval,
            state: Mutex::new(ThrottleState {
                window_start: None,
                logged: 0,
                suppressed: 0,
            }),
        }
    }

    /// `Some(n)` when the event may be logged now, `n` being how many were held back
    /// since the last one logged; `None` when it must not be logged.
    pub fn check(&self) -> Option<u64> {
        self.check_at(Instant::now())
    }

    /// [`LogThrottle::check`] at a given instant (for tests, which never sleep).
    pub fn check_at(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let new_window = match state.window_start {
            None => true,
            Some(start) => now.saturating_duration_since(start) >= self.interval,
        };
        if new_window {
            state.window_start = Some(now);
            state.logged = 0;
        }
        if state.logged < self.limit {
            state.logged += 1;
            Some(std::mem::take(&mut state.suppressed))
        } else {
            state.suppressed = state.suppressed.saturating_add(1);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_shown_whole() {
        assert_eq!(capped("default").to_string(), "default");
        assert_eq!(capped("").to_string(), "");
    }

    #[test]
    fn long_text_is_cut_and_says_its_length() {
        let long = "é".repeat(100_000);
        let shown = capped(&long).to_string();
        assert!(shown.starts_with(&"é".repeat(LOG_TEXT_CHARS)), "{shown}");
        assert!(shown.ends_with("…(200000 bytes)"), "{shown}");
        assert_eq!(capped(&long).max_chars(3).to_string(), "ééé…(200000 bytes)");
    }

    #[test]
    fn control_characters_are_escaped() {
        let shown = capped("a\nb\u{1b}[31mc\r").to_string();
        assert_eq!(shown, "a\\nb\\u{1b}[31mc\\r");
        assert!(!shown.chars().any(char::is_control));
    }

    #[test]
    fn throttle_lets_one_through_per_interval_and_counts_the_rest() {
        let throttle = LogThrottle::new(Duration::from_secs(60));
        let start = Instant::now();
        assert_eq!(throttle.check_at(start), Some(0));
        for s in 1..60 {
            assert_eq!(throttle.check_at(start + Duration::from_secs(s)), None);
        }
        assert_eq!(throttle.check_at(start + Duration::from_secs(60)), Some(59));
        assert_eq!(throttle.check_at(start + Duration::from_secs(61)), None);
        assert_eq!(throttle.check_at(start + Duration::from_secs(200)), Some(1));
    }

    #[test]
    fn throttle_lets_a_burst_through_per_interval() {
        let throttle = LogThrottle::per_interval(3, Duration::from_secs(10));
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        assert_eq!(throttle.check_at(at(0)), Some(0));
        assert_eq!(throttle.check_at(at(1)), Some(0));
        assert_eq!(throttle.check_at(at(2)), Some(0));
        for ms in 3..1000 {
            assert_eq!(throttle.check_at(at(ms)), None);
        }
        assert_eq!(throttle.check_at(at(10_000)), Some(997));
        assert_eq!(throttle.check_at(at(10_001)), Some(0));
    }
}
