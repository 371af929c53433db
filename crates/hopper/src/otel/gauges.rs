//! The queue gauges of `/metrics` as OpenTelemetry observable gauges: `hopper_jobs` by
//! queue and state and `hopper_queue_oldest_available_seconds` by queue, with the names
//! and labels Prometheus shows (see [`crate::metrics`]).
//!
//! `/metrics` reads them from the database when it is scraped; an OpenTelemetry reader
//! collects on a thread of its own, whose callbacks cannot wait for the database. So a
//! task reads the counts ([`Backend::queue_stats`], one statement) every export interval
//! and the callbacks report the last reading: the figures are at most one interval old,
//! and none at all while the database does not answer.
//! A queue that disappears from the reading disappears from the export, as on `/metrics`.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hopper_core::{Backend, QueueStats, Result};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, ObservableGauge};

use crate::metrics::{JOBS, QUEUE_OLDEST_AVAILABLE_SECONDS};

/// The last reading of the queue counts, shared with the gauges' callbacks.
type Reading = Arc<Mutex<Vec<QueueStats>>>;

/// The queue gauges, exported while this value lives: dropping it stops the task that
/// reads the counts (the gauges then report nothing new). Made by
/// [`Telemetry::queue_gauges`](super::Telemetry::queue_gauges) or [`QueueGauges::new`].
#[derive(Debug)]
pub struct QueueGauges {
    backend: Arc<dyn Backend>,
    reading: Reading,
    task: tokio::task::JoinHandle<()>,
    _gauges: (ObservableGauge<u64>, ObservableGauge<f64>),
}

impl QueueGauges {
    /// Registers the gauges on `meter` and starts reading `backend`'s queue counts now
    /// and then every `every` (the meter's export interval is the right value). Needs a
    /// Tokio runtime.
    pub fn new(meter: &Meter, backend: Arc<dyn Backend>, every: Duration) -> Self {
        let reading = Reading::default();
        let jobs = {
            let reading = reading.clone();
            meter
                .u64_observable_gauge(JOBS)
                .with_description("Jobs by queue and state, read from the database.")
                .with_callback(move |observer| {
                    for s in lock(&reading).iter() {
                        for (state, n) in s.by_state() {
                            observer.observe(
                                u64::try_from(n).unwrap_or(0),
                                &[
                                    KeyValue::new("queue", s.queue.clone()),
                                    KeyValue::new("state", state),
                                ],
                            );
                        }
                    }
                })
                .build()
        };
        let oldest = {
            let reading = reading.clone();
            meter
                .f64_observable_gauge(QUEUE_OLDEST_AVAILABLE_SECONDS)
                .with_unit("s")
                .with_description(
                    "Age of the oldest available job of a queue, in seconds (0 when none).",
                )
                .with_callback(move |observer| {
                    for s in lock(&reading).iter() {
                        observer.observe(
                            s.oldest_available_secs,
                            &[KeyValue::new("queue", s.queue.clone())],
                        );
                    }
                })
                .build()
        };
        let task = tokio::spawn(read_every(backend.clone(), reading.clone(), every));
        QueueGauges {
            backend,
            reading,
            task,
            _gauges: (jobs, oldest),
        }
    }

    /// Reads the counts now, for the next export (the task does it every interval). A
    /// failed read empties the reading, as the task's do.
    pub async fn refresh(&self) -> Result<()> {
        settle(&self.reading, self.backend.queue_stats().await)
    }
}

impl Drop for QueueGauges {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(reading: &Reading) -> std::sync::MutexGuard<'_, Vec<QueueStats>> {
    reading.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Keeps a read's counts, or empties the reading when it failed.
fn settle(reading: &Reading, read: Result<Vec<QueueStats>>) -> Result<()> {
    match read {
        Ok(stats) => {
            *lock(reading) = stats;
            Ok(())
        }
        Err(e) => {
            lock(reading).clear();
            Err(e)
        }
    }
}

/// Reads the counts every `every` (one read at a time, each bounded by `every`, and never
/// more often than once a second: every exporting process runs this query). A read that
/// fails or times out empties the reading, so that the gauges stop reporting rather than
/// go on exporting counts from before a database outage (logged once per new reason, at
/// `warn`).
async fn read_every(backend: Arc<dyn Backend>, reading: Reading, every: Duration) {
    // At most once a second, and at least once in the longest duration hopper takes: a
    // period past it would overflow the timer's clock.
    let every = every.clamp(Duration::from_secs(1), hopper_core::limits::MAX_DURATION);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_error: Option<String> = None;
    loop {
        tick.tick().await;
        let read = match tokio::time::timeout(every, backend.queue_stats()).await {
            Ok(read) => read,
            Err(_) => Err(hopper_core::Error::database(std::io::Error::other(
                format!("no answer within {every:?}"),
            ))),
        };
        let Err(e) = settle(&reading, read) else {
            last_error = None;
            continue;
        };
        let why = e.with_causes();
        if last_error.as_deref() != Some(why.as_str()) {
            tracing::warn!(target: "hopper::otel", error = %why, "reading the queue counts for the OpenTelemetry gauges failed");
            last_error = Some(why);
        }
    }
}
