//! How long a node's jobs take, and the prefetch that follows from it: the runtime's default
//! prefetch, and the extra credit `hopper serve` grants a remote worker that announced one.
//!
//! A node that runs jobs of a few microseconds drains fastest with large claims (one commit
//! for hundreds of jobs, measured on W3 in docs/benchmarks.md), while a node that runs jobs
//! of seconds should not hold more than it starts soon: jobs on hand wait on this node while
//! another node may be idle. So the default prefetch is the number of jobs the node starts in
//! [`HORIZON`] at its concurrency and the jobs' mean duration, between twice the concurrency
//! (the fixed default before) and one claim batch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long the last job on hand may wait for a slot, at the measured pace.
pub const HORIZON: Duration = Duration::from_millis(10);

/// The mean duration of the jobs this node ran: an exponentially weighted mean (each job
/// weighs 1/16), so it follows a change of workload within a few dozen jobs.
#[derive(Debug, Default)]
pub struct Pace {
    /// Nanoseconds; 0 until a job has run.
    mean_ns: AtomicU64,
}

impl Pace {
    /// Counts one job that ran for `ran`.
    pub fn record(&self, ran: Duration) {
        let sample = u64::try_from(ran.as_nanos()).unwrap_or(u64::MAX).max(1);
        // The closure always returns Some, so the update cannot fail.
        let _ = self
            .mean_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |mean| {
                Some(if mean == 0 {
                    sample
                } else {
                    // mean + (sample − mean) / 16, in signed arithmetic.
                    let next = mean as i128 + (sample as i128 - mean as i128) / 16;
                    u64::try_from(next.max(1)).unwrap_or(u64::MAX)
                })
            });
    }

    /// The mean so far; `None` before the first job.
    pub fn mean(&self) -> Option<Duration> {
        match self.mean_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }
}

/// Jobs to keep on hand beyond the free slots: what `concurrency` slots start in
/// [`HORIZON`] at `mean` per job, at least twice the concurrency, at most `most` (and never
/// less than the floor, even if `most` is smaller). Before any job ran: the floor.
pub fn prefetch_for(concurrency: usize, mean: Option<Duration>, most: usize) -> usize {
    let floor = concurrency.max(1).saturating_mul(2);
    let Some(mean) = mean else {
        return floor;
    };
    let per_slot = HORIZON.as_nanos() / mean.as_nanos().max(1);
    let want =
        usize::try_from(per_slot.saturating_mul(concurrency.max(1) as u128)).unwrap_or(usize::MAX);
    want.min(most).max(floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefetch_follows_the_jobs_duration_between_its_bounds() {
        let ms = Duration::from_millis;
        // Before any job: twice the concurrency.
        assert_eq!(prefetch_for(50, None, 1000), 100);
        // Slow jobs (50 slots start 100 jobs in 10 ms only if each takes 5 ms or less).
        assert_eq!(prefetch_for(50, Some(ms(50)), 1000), 100);
        assert_eq!(prefetch_for(50, Some(ms(5)), 1000), 100);
        // 1 ms jobs: 50 slots start 500 in 10 ms.
        assert_eq!(prefetch_for(50, Some(ms(1)), 1000), 500);
        // No-op jobs: one claim batch.
        assert_eq!(
            prefetch_for(50, Some(Duration::from_micros(20)), 1000),
            1000
        );
        // The floor wins over a small batch.
        assert_eq!(prefetch_for(50, Some(Duration::from_micros(20)), 10), 100);
        assert_eq!(prefetch_for(0, Some(ms(1)), 1000), 10);
    }

    #[test]
    fn the_mean_follows_a_change_of_pace() {
        let pace = Pace::default();
        assert_eq!(pace.mean(), None);
        pace.record(Duration::from_millis(100));
        assert_eq!(pace.mean(), Some(Duration::from_millis(100)));
        for _ in 0..200 {
            pace.record(Duration::from_micros(10));
        }
        let mean = pace.mean().expect("jobs ran");
        assert!(mean < Duration::from_micros(50), "{mean:?}");
        // A zero-length run still counts, and the mean never reads as "no job yet".
        for _ in 0..1000 {
            pace.record(Duration::ZERO);
        }
        assert!(pace.mean().is_some());
    }
}
