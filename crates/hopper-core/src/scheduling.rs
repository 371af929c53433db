//! Scheduling and control: per-queue settings (pause, global limits), unique-key policies,
//! periodic (cron) entries, and the parameters of the storage methods that serve them.
//!
//! What each setting does, and how fairness, limits and priorities combine, is described in
//! `docs/scheduling.md`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::job::{JobId, Priority, validate_name};

/// What an insert does when a job with the same unique key is already scheduled,
/// available or running (or, with a window, was inserted in the same window).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UniquePolicy {
    /// Insert nothing and answer with the existing job's id. The default.
    #[default]
    Ignore,
    /// Insert nothing and fail with [`Error::Conflict`]. In a bulk insert the whole batch
    /// is refused.
    Reject,
    /// Update the existing job with the new one's kind, arguments, priority, run time,
    /// attempts, timeout and group, if it is still waiting (scheduled or available); a
    /// running or finished holder is left alone and reported as a duplicate.
    Replace,
}

impl std::str::FromStr for UniquePolicy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "ignore" => Ok(UniquePolicy::Ignore),
            "reject" => Ok(UniquePolicy::Reject),
            "replace" => Ok(UniquePolicy::Replace),
            other => Err(Error::InvalidInput(format!(
                "unknown unique policy {other:?}: expected ignore, reject or replace"
            ))),
        }
    }
}

/// What became of one job handed to [`crate::SchedulingStore::job_upsert_many`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum InsertOutcome {
    /// The job was inserted under its own id.
    Inserted,
    /// Its unique key was taken; nothing was written. `existing` holds the key.
    Duplicate {
        /// The job holding the key.
        existing: JobId,
    },
    /// Its unique key was held by a waiting job, which was updated in its place.
    Replaced {
        /// The job that was updated (and keeps its id).
        existing: JobId,
    },
}

impl InsertOutcome {
    /// The id that now stands for the job: its own when inserted, the holder's otherwise.
    pub fn id(self, own: JobId) -> JobId {
        match self {
            InsertOutcome::Inserted => own,
            InsertOutcome::Duplicate { existing } | InsertOutcome::Replaced { existing } => {
                existing
            }
        }
    }
}

/// A rate limit: at most `jobs` started per `per`, across every node.
///
/// Enforced as a token bucket that refills continuously at `jobs / per` and holds at most
/// `burst` tokens, so no window of length `per` sees more than `jobs + burst` starts and a
/// long run averages `jobs / per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimit {
    /// Jobs per interval.
    pub jobs: u32,
    /// The interval.
    #[serde(with = "millis")]
    pub per: Duration,
    /// Most jobs started at once after a quiet spell. Default ([`RateLimit::new`]): a tenth
    /// of `jobs`, at least 1.
    pub burst: u32,
}

impl RateLimit {
    /// `jobs` per `per`, with the default burst.
    pub fn new(jobs: u32, per: Duration) -> Self {
        RateLimit {
            jobs,
            per,
            burst: jobs.div_ceil(10).max(1),
        }
    }

    /// Parses `N/s`, `N/m`, `N/h`, or `N/<duration>` such as `N/500ms` or `N/10s`.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = || {
            Error::InvalidInput(format!(
                "rate {text:?} must look like 100/s, 20/m, 1000/h or 5/10s"
            ))
        };
        let (jobs, per) = text.split_once('/').ok_or_else(bad)?;
        let jobs: u32 = jobs.trim().parse().map_err(|_| bad())?;
        let per = match per.trim() {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "m" | "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            other => parse_short_duration(other).ok_or_else(bad)?,
        };
        let limit = RateLimit::new(jobs, per);
        limit.validate()?;
        Ok(limit)
    }

    /// Refuses zero jobs, zero bursts and intervals under 1 ms or over 24 days.
    pub fn validate(&self) -> Result<()> {
        if self.jobs == 0 || self.burst == 0 {
            return Err(Error::InvalidInput(
                "a rate limit needs at least 1 job per interval and a burst of at least 1".into(),
            ));
        }
        let ms = self.per.as_millis();
        if ms < 1 || ms > i32::MAX as u128 {
            return Err(Error::InvalidInput(format!(
                "a rate limit's interval must be between 1 ms and {} ms, got {:?}",
                i32::MAX,
                self.per
            )));
        }
        if i32::try_from(self.jobs).is_err() || i32::try_from(self.burst).is_err() {
            return Err(Error::InvalidInput("rate limit too large".into()));
        }
        Ok(())
    }
}

impl std::fmt::Display for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.per.as_millis();
        match ms {
            1000 => write!(f, "{}/s", self.jobs),
            60_000 => write!(f, "{}/m", self.jobs),
            3_600_000 => write!(f, "{}/h", self.jobs),
            _ => write!(f, "{}/{ms}ms", self.jobs),
        }
    }
}

/// `250ms`, `10s`, `5m`, `2h`: the short forms a rate's interval is written in. `None`
/// for a count of minutes or hours whose seconds overflow (they would wrap to a short,
/// valid interval in a release build).
fn parse_short_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = text.split_at(split);
    let n: u64 = n.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => n.checked_mul(60).map(Duration::from_secs),
        "h" => n.checked_mul(3600).map(Duration::from_secs),
        _ => None,
    }
}

/// One queue's settings, as stored. A queue nobody configured has the defaults: not
/// paused, no limits.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueSettings {
    /// The queue.
    pub queue: String,
    /// No job of this queue is claimed while paused.
    pub paused: bool,
    /// Jobs with groups were inserted: claims rotate between groups.
    pub grouped: bool,
    /// Most jobs running at once, across every node.
    pub max_running: Option<u32>,
    /// Most jobs of one group running at once, across every node.
    pub max_running_per_group: Option<u32>,
    /// Most jobs started per interval, across every node.
    pub rate: Option<RateLimit>,
}

impl QueueSettings {
    /// True when claims must lock the settings row: some global limit is set.
    pub fn is_limited(&self) -> bool {
        self.max_running.is_some() || self.max_running_per_group.is_some() || self.rate.is_some()
    }

    /// True when the plain claim (one index scan, no lock, no rotation) serves this queue.
    pub fn is_plain(&self) -> bool {
        !self.paused && !self.grouped && !self.is_limited()
    }
}

/// A change to one queue's settings ([`crate::Backend::queue_update`]). `None` leaves a
/// setting as it is; for the limits, `Some(None)` removes the limit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueUpdate {
    /// The queue.
    pub queue: String,
    /// Pause (`true`) or resume (`false`).
    pub paused: Option<bool>,
    /// Set or remove the global concurrency limit.
    pub max_running: Option<Option<u32>>,
    /// Set or remove the per-group concurrency limit.
    pub max_running_per_group: Option<Option<u32>>,
    /// Set or remove the rate limit.
    pub rate: Option<Option<RateLimit>>,
}

impl QueueUpdate {
    /// A change to `queue` that changes nothing yet.
    pub fn new(queue: impl Into<String>) -> Self {
        QueueUpdate {
            queue: queue.into(),
            ..QueueUpdate::default()
        }
    }

    /// Checks the queue name and the limits.
    pub fn validate(&self) -> Result<()> {
        validate_name("queue", &self.queue)?;
        for (what, limit) in [
            ("concurrency", self.max_running),
            ("per-group concurrency", self.max_running_per_group),
        ] {
            if let Some(Some(n)) = limit
                && (n == 0 || i32::try_from(n).is_err())
            {
                return Err(Error::InvalidInput(format!(
                    "{what} limit must be between 1 and {}, got {n}",
                    i32::MAX
                )));
            }
        }
        if let Some(Some(rate)) = &self.rate {
            rate.validate()?;
        }
        Ok(())
    }
}

/// A periodic job as registered: its schedule and the job each tick enqueues.
///
/// The schedule is parsed by the runtime (`hopper::PeriodicJob`); storage keeps it as text
/// so `hopper cron list` can show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CronEntry {
    /// A unique name; the job of each tick carries the unique key `cron:<name>:<tick>`.
    pub name: String,
    /// The cron expression (five fields, or six with seconds first).
    pub schedule: String,
    /// The IANA time zone the schedule is read in.
    pub timezone: String,
    /// The queue of the jobs it enqueues.
    pub queue: String,
    /// Their kind.
    pub kind: String,
    /// Their arguments.
    pub args: serde_json::Value,
    /// Their priority.
    pub priority: Priority,
    /// Their attempts.
    pub max_attempts: i32,
    /// Their timeout, in milliseconds.
    pub timeout_ms: i32,
    /// Enqueue every tick missed while no runtime ran (true), or only the latest (false).
    pub catch_up: bool,
    /// The next tick to enqueue.
    pub next_run_at: DateTime<Utc>,
    /// The last tick enqueued, if any.
    pub last_run_at: Option<DateTime<Utc>>,
    /// The job enqueued for the last tick, if any.
    pub last_job_id: Option<JobId>,
}

/// Enqueues the due ticks of one periodic job ([`crate::SchedulingStore::cron_advance`]), if no
/// other node did it first.
#[derive(Debug, Clone, PartialEq)]
pub struct CronAdvance {
    /// The entry.
    pub name: String,
    /// The `next_run_at` this node read; the advance happens only if it is still stored.
    pub expected_next_run_at: DateTime<Utc>,
    /// The `next_run_at` to store.
    pub next_run_at: DateTime<Utc>,
    /// One job per tick to enqueue, with the tick: each is inserted with the unique key
    /// `cron:<name>:<tick>` and the tick as its window, so a tick is never enqueued twice.
    pub jobs: Vec<(DateTime<Utc>, crate::job::NewJob)>,
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_in_short_forms() {
        let r = RateLimit::parse("100/s").expect("valid");
        assert_eq!((r.jobs, r.per, r.burst), (100, Duration::from_secs(1), 10));
        assert_eq!(
            RateLimit::parse("5/10s").expect("valid").per,
            Duration::from_secs(10)
        );
        assert_eq!(RateLimit::parse("3/m").expect("valid").burst, 1);
        // 307445734561825861 minutes are 2^64 + 44 seconds: wrapped, 44 s would pass.
        for bad in [
            "",
            "100",
            "x/s",
            "0/s",
            "10/fortnight",
            "10/0s",
            "1/307445734561825861m",
            "1/5124095576030432h",
            "1/99999999999999999999s",
            "1/24856h",
        ] {
            assert!(RateLimit::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(RateLimit::parse("20/m").expect("valid").to_string(), "20/m");
    }

    #[test]
    fn plain_queues_need_no_lock() {
        let mut s = QueueSettings::default();
        assert!(s.is_plain());
        s.rate = Some(RateLimit::new(10, Duration::from_secs(1)));
        assert!(s.is_limited() && !s.is_plain());
    }
}
