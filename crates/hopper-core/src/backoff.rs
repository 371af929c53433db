//! Exponential backoff between retries of a transient failure: a first delay that doubles
//! after each failure, up to a cap. Pure arithmetic: the caller sleeps, and decides when to
//! give up (a deadline, a shutdown).

use std::time::Duration;

/// The delays to wait before each retry: `first`, then twice the last, at most `max`.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// A backoff that starts at `first` and doubles up to `max` (`first` when `max` is
    /// smaller).
    pub const fn new(first: Duration, max: Duration) -> Self {
        Backoff {
            first,
            max,
            next: first,
        }
    }

    /// The delay to wait before the next retry; the one after is twice as long (capped).
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = self.next.saturating_mul(2).min(self.max).max(self.first);
        delay
    }

    /// Starts again from the first delay (after a success).
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_starts_again_on_reset() {
        let ms = Duration::from_millis;
        let mut backoff = Backoff::new(ms(50), ms(300));
        let delays: Vec<Duration> = (0..5).map(|_| backoff.next_delay()).collect();
        assert_eq!(delays, [ms(50), ms(100), ms(200), ms(300), ms(300)]);
        backoff.reset();
        assert_eq!(backoff.next_delay(), ms(50));
        let mut odd = Backoff::new(ms(50), ms(10));
        assert_eq!((odd.next_delay(), odd.next_delay()), (ms(50), ms(50)));
    }
}
