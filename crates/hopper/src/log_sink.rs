//! The log of the attempt a handler runs, stored while it runs: lines are held in memory
//! (a `JobContext::log` call never waits on the database) and stored
//! [`LOG_FLUSH_INTERVAL`] after the first of them was written, or at once when
//! [`LOG_FLUSH_BYTES`] of them wait, and a last time when the handler returns, before its
//! outcome is reported. A process that dies mid-attempt loses at most the last interval's
//! lines. One attempt's stores run one after the other, so its lines are stored in order.
//!
//! A store that fails for a transient reason (the connection lost, a serialization failure,
//! a stale prepared statement, the attempt's job held by another transaction, a request
//! to the server left without a reply) is tried again with the same lines, with backoff,
//! within the store's window in all ([`LogStore::job_log_store_window`]: 5 s on a
//! database, longer on the remote transport); lines logged meanwhile wait for the next
//! store, so the order holds. A store refused for good, or still failing at the bound, is
//! given up (logged, with the number of lines lost).
//! Storage is at least once: a retry after a store whose commit was not acknowledged (the
//! connection lost at that moment) stores its lines twice.

use std::sync::Mutex;
use std::time::Duration;

use hopper_core::job_log::{
    JobLogAppend, LOG_FLUSH_BYTES, LOG_FLUSH_INTERVAL, LogBuffer, LogLevel, LogLine, LogStore,
    held_elsewhere,
};
use hopper_core::limits::MAX_DURATION;
use hopper_core::{Backoff, Lease};
use tokio::sync::Notify;
use tokio::time::Instant;

/// The delays between the tries of a store that failed for a transient reason: 50 ms,
/// doubling up to 1 s (about eight tries within 5 s).
const STORE_RETRY: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));

/// One attempt's log being written (see the module's docs).
#[derive(Debug, Default)]
pub(crate) struct LogSink {
    state: Mutex<State>,
    /// Woken by the first line after a store, by a line that passes [`LOG_FLUSH_BYTES`],
    /// and by [`LogSink::close`].
    wake: Notify,
}

#[derive(Debug, Default)]
struct State {
    buffer: LogBuffer,
    /// When the oldest line not stored yet was written.
    since: Option<Instant>,
    closed: bool,
}

impl State {
    /// When the lines waiting must be stored (`None`: none wait).
    fn due(&self) -> Option<Instant> {
        let since = self.since?;
        if self.buffer.pending_bytes() >= LOG_FLUSH_BYTES {
            Some(since)
        } else {
            Some(since + LOG_FLUSH_INTERVAL)
        }
    }
}

impl LogSink {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a line (or counts it as dropped past the attempt's bound).
    pub(crate) fn push(
        &self,
        level: LogLevel,
        message: String,
        fields: serde_json::Map<String, serde_json::Value>,
    ) {
        let mut state = self.state();
        let before = state.buffer.pending_bytes();
        state.buffer.push(level, message, fields);
        let after = state.buffer.pending_bytes();
        if after == before {
            // Dropped past the attempt's bound: only counted, and the count goes with the
            // next store (the last one at the latest). A handler that goes on logging past
            // the bound must not cause a store a second that carries no line.
            return;
        }
        if state.since.is_none() {
            state.since = Some(Instant::now());
            self.wake.notify_one();
        } else if before < LOG_FLUSH_BYTES && after >= LOG_FLUSH_BYTES {
            self.wake.notify_one();
        }
    }

    /// The handler returned: [`LogSink::run`] stores what is left and ends.
    pub(crate) fn close(&self) {
        self.state().closed = true;
        self.wake.notify_one();
    }

    /// Stores the attempt's lines as they become due, until [`LogSink::close`]; then
    /// stores the rest and returns. Without a store (a backend that keeps no logs) it only
    /// waits for the close.
    pub(crate) async fn run(&self, store: Option<&dyn LogStore>, lease: Lease) {
        loop {
            // Made before the state is read, so that a wake between the two is not lost.
            let woken = self.wake.notified();
            let (closed, due) = {
                let state = self.state();
                (state.closed, state.due())
            };
            if closed {
                self.store(store, lease).await;
                return;
            }
            match due {
                None => woken.await,
                Some(at) if at <= Instant::now() => self.store(store, lease).await,
                Some(at) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => self.store(store, lease).await,
                        _ = woken => {}
                    }
                }
            }
        }
    }

    /// Stores the lines waiting, if any, retrying transient failures ([`store_retrying`]).
    /// A failure is logged and forgotten: logs never fail a job.
    async fn store(&self, store: Option<&dyn LogStore>, lease: Lease) {
        let (lines, dropped) = {
            let mut state = self.state();
            state.since = None;
            if state.buffer.is_empty() {
                return;
            }
            state.buffer.take()
        };
        let Some(store) = store else {
            return;
        };
        store_retrying(store, lease, lines, dropped).await;
    }
}

/// Stores one attempt's `lines`, trying again while the store fails for a transient reason,
/// with [`STORE_RETRY`] between tries, until the store's window
/// ([`LogStore::job_log_store_window`]) after the first: the job's outcome waits for the
/// last store, and a store that stays away must not hold it until the lease runs out.
/// Gives up (logged) on a permanent failure or at the bound.
async fn store_retrying(store: &dyn LogStore, lease: Lease, lines: Vec<LogLine>, dropped: i64) {
    let count = lines.len();
    let append = [JobLogAppend {
        lease,
        lines,
        dropped,
    }];
    // Past ten years (`MAX_DURATION`), ten years: the clock cannot add any duration.
    let window = store.job_log_store_window().min(MAX_DURATION);
    let deadline = Instant::now() + window;
    let mut backoff = STORE_RETRY;
    let mut tries = 0u32;
    loop {
        tries += 1;
        let error = match tokio::time::timeout_at(deadline, store.job_log_append(&append)).await {
            Ok(Ok(held)) if held.is_empty() => return,
            // Its job held by another transaction: the store did not wait for it.
            Ok(Ok(_)) => held_elsewhere(),
            Ok(Err(e)) => e,
            Err(_) => {
                tracing::warn!(job_id = %lease.job_id, lines = count, tries, timeout = ?window, "storing the job's log timed out; these lines are lost");
                return;
            }
        };
        let delay = backoff.next_delay();
        if !error.is_transient() || Instant::now() + delay >= deadline {
            tracing::warn!(job_id = %lease.job_id, lines = count, tries, error = %error.with_causes(), "storing the job's log failed; these lines are lost");
            return;
        }
        tracing::debug!(job_id = %lease.job_id, lines = count, error = %error.with_causes(), retry_in = ?delay, "storing the job's log failed; retrying");
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_dropped_past_the_bound_schedule_no_store() {
        let sink = LogSink::default();
        let line = || ("x".repeat(4_000), serde_json::Map::new());
        for _ in 0..20 {
            let (message, fields) = line();
            sink.push(LogLevel::Info, message, fields);
        }
        // As a store does: the lines taken, nothing due.
        let (kept, dropped) = {
            let mut state = sink.state();
            state.since = None;
            state.buffer.take()
        };
        assert!(!kept.is_empty() && dropped > 0, "the bound was passed");
        let (message, fields) = line();
        sink.push(LogLevel::Info, message, fields);
        let state = sink.state();
        assert_eq!(
            state.due(),
            None,
            "a dropped line alone is not worth a store"
        );
        assert!(
            !state.buffer.is_empty(),
            "its count waits for the last store"
        );
    }
}
