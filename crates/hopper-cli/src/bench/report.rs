//! One workload's figures, as text or as one JSON object, and the progress bars shown
//! while a workload runs.

use std::fmt;
use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// Enqueue→start latencies of W4, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    /// The median.
    pub p50_ms: f64,
    /// The 99th percentile.
    pub p99_ms: f64,
    /// The largest.
    pub max_ms: f64,
}

impl Latency {
    /// The percentiles of `samples` (any order), interpolated as `harness.py` does.
    pub fn of(samples: &mut [f64]) -> Option<Latency> {
        samples.sort_by(f64::total_cmp);
        Some(Latency {
            p50_ms: percentile(samples, 0.5)?,
            p99_ms: percentile(samples, 0.99)?,
            max_ms: *samples.last()?,
        })
    }
}

/// The `q` quantile of sorted `xs`, linearly interpolated between the closest ranks.
fn percentile(xs: &[f64], q: f64) -> Option<f64> {
    let last = xs.len().checked_sub(1)?;
    let k = last as f64 * q;
    let lo = k.floor() as usize;
    let hi = (lo + 1).min(last);
    Some(xs[lo] + (xs[hi] - xs[lo]) * (k - lo as f64))
}

/// What one workload measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// `enqueue`, `enqueue-single`, `drain` or `latency`.
    pub workload: &'static str,
    /// Its id in `BENCHMARK.md` (W1…W4).
    pub id: &'static str,
    /// Jobs enqueued (W1, W2, W4) or drained (W3).
    pub jobs: u64,
    /// Wall time of the measured phase.
    pub seconds: f64,
    /// `jobs / seconds`.
    pub jobs_per_sec: f64,
    /// Worker concurrency (W3, W4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
    /// The runtime's prefetch, when set (W3, W4 run with `--prefetch`; absent: the default,
    /// twice the concurrency).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefetch: Option<usize>,
    /// The runtime's claims in flight (W3, W4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claims_in_flight: Option<usize>,
    /// Latencies (W4 only).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub latency: Option<Latency>,
}

impl Report {
    /// A throughput report: `jobs` in `seconds`.
    pub fn new(workload: &'static str, id: &'static str, jobs: u64, seconds: f64) -> Self {
        let jobs_per_sec = if seconds > 0.0 {
            jobs as f64 / seconds
        } else {
            0.0
        };
        Report {
            workload,
            id,
            jobs,
            seconds,
            jobs_per_sec,
            concurrency: None,
            prefetch: None,
            claims_in_flight: None,
            latency: None,
        }
    }

    /// Records the settings of the runtime that ran the workload.
    pub fn ran_with(&mut self, config: &hopper::RuntimeConfig) {
        self.concurrency = Some(config.concurrency);
        self.prefetch = config.prefetch;
        self.claims_in_flight = Some(config.claims_in_flight);
    }

    /// The report as one line of JSON.
    pub fn to_json(&self) -> String {
        // A struct of numbers and strings always serializes.
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:<15} {:>8} jobs in {:>7.3} s  {:>10.0} jobs/s",
            self.id, self.workload, self.jobs, self.seconds, self.jobs_per_sec
        )?;
        if let Some(c) = self.concurrency {
            write!(f, "  (concurrency {c})")?;
        }
        if let Some(l) = &self.latency {
            write!(
                f,
                "  latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                l.p50_ms, l.p99_ms, l.max_ms
            )?;
        }
        Ok(())
    }
}

/// A progress bar on stderr for a phase of `len` steps; hidden with `--json` or when
/// stderr is not a terminal.
pub fn progress(len: u64, label: &'static str, json: bool) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(
        "{prefix:>15} [{elapsed_precise}] {wide_bar} {pos}/{len} ({per_sec})",
    ) {
        bar.set_style(style);
    }
    bar.set_prefix(label);
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_like_the_harness() {
        let mut xs: Vec<f64> = (1..=100).map(f64::from).collect();
        let l = Latency::of(&mut xs).expect("samples");
        assert!((l.p50_ms - 50.5).abs() < 1e-9);
        assert!((l.p99_ms - 99.01).abs() < 1e-9);
        assert_eq!(l.max_ms, 100.0);
        assert!(Latency::of(&mut []).is_none());
    }

    #[test]
    fn json_has_the_documented_keys() {
        let mut r = Report::new("latency", "W4", 10, 2.0);
        r.latency = Some(Latency {
            p50_ms: 1.0,
            p99_ms: 2.0,
            max_ms: 3.0,
        });
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).expect("json");
        for key in [
            "workload",
            "jobs",
            "seconds",
            "jobs_per_sec",
            "p50_ms",
            "p99_ms",
            "max_ms",
        ] {
            assert!(v.get(key).is_some(), "{key} missing from {v}");
        }
        assert_eq!(v["jobs_per_sec"], 5.0);
    }
}
