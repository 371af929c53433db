//! Injectable time.
//!
//! Every storage call that depends on "now" takes an optional timestamp. The
//! [`SystemClock`] gives `None`, and the database uses its own `now()`, so that every node
//! agrees on one clock. The [`TestClock`] gives a fixed instant that tests move by hand,
//! so a test can expire a lease or reach a schedule without sleeping.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};

/// A source of "now" for storage calls.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// The instant to use as "now", or `None` for the database's own clock.
    fn now(&self) -> Option<DateTime<Utc>>;
}

/// The database's clock: `now()` on the server. The default.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Option<DateTime<Utc>> {
        None
    }
}

/// A clock that only moves when told to. Clones share the same instant.
#[derive(Debug, Clone)]
pub struct TestClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl TestClock {
    /// A clock stopped at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        TestClock {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now += by;
    }

    /// Sets the clock to `to`.
    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = to;
    }

    /// The clock's current instant.
    pub fn get(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Clock for TestClock {
    fn now(&self) -> Option<DateTime<Utc>> {
        Some(self.get())
    }
}
