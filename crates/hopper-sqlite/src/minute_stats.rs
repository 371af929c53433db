//! Per-minute statistics of finished jobs, computed from the rows of
//! `job_stats_per_minute.sql`: SQLite has no `percentile_cont`, so the grouping, means and
//! 95th percentiles that PostgreSQL computes in SQL are computed here, with the same
//! definitions (continuous percentile, NULLs ignored, 0 when there is nothing to measure).

use hopper_core::{MinuteStats, Result};

use crate::rows;

/// One finished job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Finished {
    /// When it finished (µs since the epoch).
    pub at_us: i64,
    /// `completed` (else `failed`).
    pub completed: bool,
    /// Wait from due to the start of its last attempt, in ms.
    pub latency_ms: Option<f64>,
    /// Its successful run's duration, in ms.
    pub duration_ms: Option<i64>,
}

/// Groups `finished` (in any order) by UTC minute, oldest first.
pub fn per_minute(finished: &[Finished]) -> Result<Vec<MinuteStats>> {
    const MINUTE_US: i64 = 60_000_000;
    let mut sorted = finished.to_vec();
    sorted.sort_by_key(|f| f.at_us);
    let mut out = Vec::new();
    for group in
        sorted.chunk_by(|a, b| a.at_us.div_euclid(MINUTE_US) == b.at_us.div_euclid(MINUTE_US))
    {
        let minute = group[0].at_us.div_euclid(MINUTE_US) * MINUTE_US;
        let mut latencies: Vec<f64> = group.iter().filter_map(|f| f.latency_ms).collect();
        let mut durations: Vec<f64> = group
            .iter()
            .filter(|f| f.completed)
            .filter_map(|f| f.duration_ms)
            .map(|d| d as f64)
            .collect();
        let completed = group.iter().filter(|f| f.completed).count();
        out.push(MinuteStats {
            minute: rows::time(minute)?,
            completed: completed as i64,
            failed: (group.len() - completed) as i64,
            latency_avg_ms: mean(&latencies),
            latency_p95_ms: percentile_cont(&mut latencies, 0.95),
            duration_avg_ms: mean(&durations),
            duration_p95_ms: percentile_cont(&mut durations, 0.95),
        });
    }
    Ok(out)
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// PostgreSQL's `percentile_cont(p)`: linear interpolation between the two values around
/// position `p * (n - 1)` of the sorted values; 0 for none.
fn percentile_cont(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let position = p * (values.len() - 1) as f64;
    let (lower, upper) = (position.floor() as usize, position.ceil() as usize);
    values[lower] + (values[upper] - values[lower]) * (position - lower as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_like_postgres() {
        // SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY x) FROM generate_series(1, 10) x
        // = 9.55
        let mut values: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        assert!((percentile_cont(&mut values, 0.95) - 9.55).abs() < 1e-9);
        assert_eq!(percentile_cont(&mut [4.0], 0.95), 4.0);
        assert_eq!(percentile_cont(&mut [], 0.95), 0.0);
    }

    #[test]
    fn jobs_are_grouped_by_minute() -> Result<()> {
        let minute = 29_000_000 * 60_000_000i64;
        let finished = [
            Finished {
                at_us: minute + 61_000_000,
                completed: true,
                latency_ms: Some(1.0),
                duration_ms: Some(10),
            },
            Finished {
                at_us: minute + 1_000_000,
                completed: true,
                latency_ms: Some(2.0),
                duration_ms: Some(20),
            },
            Finished {
                at_us: minute + 59_999_999,
                completed: false,
                latency_ms: Some(4.0),
                duration_ms: None,
            },
        ];
        let stats = per_minute(&finished)?;
        assert_eq!(stats.len(), 2);
        assert_eq!(stats[0].minute, rows::time(minute)?);
        assert_eq!((stats[0].completed, stats[0].failed), (1, 1));
        assert_eq!(
            (stats[0].latency_avg_ms, stats[0].duration_avg_ms),
            (3.0, 20.0)
        );
        assert_eq!(stats[1].minute, rows::time(minute + 60_000_000)?);
        assert_eq!((stats[1].completed, stats[1].duration_p95_ms), (1, 10.0));
        Ok(())
    }
}
