//! The rules every backend applies the same way, written once: a backend stores, these
//! decide.
//!
//! - [`TokenBucket`]: a queue's rate limit, refilled continuously up to its burst;
//! - [`cron_unique_key`], [`cron_tick_jobs`]: the unique key of a periodic job's tick and
//!   the jobs of an advance, so a tick is enqueued once however many nodes run the enqueuer;
//! - [`refuse_newer_schema`]: a database migrated by a newer hopper is not touched;
//! - [`validate_sql_name`]: the schema or table prefix spliced into SQL text;
//! - [`conflict`]: the answer to an operation a job's state does not allow;
//! - [`unique_key_rejected`]: the answer to a job whose unique key is taken, under the
//!   reject policy.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::error::{Error, Result};
use crate::job::{JobId, JobState, NewJob};
use crate::scheduling::{CronAdvance, RateLimit, UniquePolicy};

/// The rate bucket of a limited queue at the instant of a claim.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    /// Tokens after refilling up to the claim's instant, between zero and the burst.
    pub tokens: f64,
    /// Tokens added per microsecond.
    per_us: f64,
}

impl TokenBucket {
    /// Refills a bucket that held `tokens` at `refilled_at` up to `now`, capped at the
    /// burst. A bucket never refilled (`refilled_at` is `None`: the rate was just set)
    /// starts full, whatever was stored, so a new limit lets its burst through at once.
    /// Stored tokens outside zero to the burst (no claim leaves them so: written by hand,
    /// `-Infinity`, `NaN`, `-1e308`) count as the nearest bound, `NaN` as empty: a
    /// bucket stored at minus infinity would never refill, and its queue never run again.
    pub fn refill(
        rate: &RateLimit,
        tokens: f64,
        refilled_at: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Self {
        let per_us = f64::from(rate.jobs) / (rate.per.as_micros().max(1) as f64);
        let burst = f64::from(rate.burst);
        let tokens = match refilled_at {
            None => burst,
            Some(at) => {
                let stored = if tokens.is_nan() {
                    0.0
                } else {
                    tokens.clamp(0.0, burst)
                };
                let elapsed = (now - at).num_microseconds().unwrap_or(i64::MAX).max(0) as f64;
                (stored + elapsed * per_us).min(burst)
            }
        };
        TokenBucket { tokens, per_us }
    }

    /// Whole tokens available now: the most jobs a claim may take.
    pub fn whole(&self) -> u32 {
        self.tokens.max(0.0).floor().min(f64::from(u32::MAX)) as u32
    }

    /// The tokens to store after a claim took `taken` jobs.
    pub fn after(&self, taken: usize) -> f64 {
        self.tokens - taken as f64
    }

    /// How long until the bucket holds a whole token after `taken` are taken.
    pub fn next_token_in(&self, taken: u32) -> Duration {
        let missing = (1.0 - self.after(taken as usize)).max(0.0);
        Duration::from_micros((missing / self.per_us).ceil().max(0.0) as u64)
    }
}

/// The unique key of the job a periodic entry enqueues for one tick:
/// `cron:<name>:<tick, RFC 3339 in UTC with milliseconds>`.
pub fn cron_unique_key(name: &str, tick: DateTime<Utc>) -> String {
    format!(
        "cron:{name}:{}",
        tick.to_rfc3339_opts(SecondsFormat::Millis, true)
    )
}

/// The jobs an advance of a periodic entry inserts, one per tick: each due at its tick and
/// unique per (entry, tick) with [`cron_unique_key`], [`UniquePolicy::Ignore`] and a window
/// that outlives the job, so a tick is never enqueued twice whatever happens to the
/// entry's `next_run_at`.
pub fn cron_tick_jobs(advance: &CronAdvance) -> Vec<NewJob> {
    advance
        .jobs
        .iter()
        .map(|(tick, job)| {
            let mut job = job.clone();
            job.unique_key = Some(cron_unique_key(&advance.name, *tick));
            job.unique_policy = UniquePolicy::Ignore;
            job.unique_window = Some(Duration::from_millis(1));
            job.run_at = Some(*tick);
            job
        })
        .collect()
}

/// Refuses to migrate a store at a `applied` schema version newer than the `known` last
/// one of this build: `place` names it in the error (`schema hopper`, `tables hopper_*`).
pub fn refuse_newer_schema(place: &str, applied: i64, known: i64) -> Result<()> {
    if applied > known {
        return Err(Error::Schema(format!(
            "{place} is at version {applied}, but this hopper knows versions up to {known}; upgrade hopper"
        )));
    }
    Ok(())
}

/// Checks a name spliced into SQL text (a PostgreSQL schema, a SQLite table prefix): a
/// lowercase identifier that needs no quoting, so the splice cannot inject anything.
/// `what` names it in the error (`schema name`, `table prefix`).
pub fn validate_sql_name(what: &str, name: &str) -> Result<()> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && name.len() <= 50 {
        Ok(())
    } else {
        Err(Error::InvalidInput(format!(
            "{what} {name:?} must be 1 to 50 characters of a-z, 0-9 and _, not starting with a digit"
        )))
    }
}

/// An operation on one job that its state may refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobAction {
    /// [`crate::backend::Backend::job_retry`]: only `failed` or `cancelled` jobs.
    Retry,
    /// [`crate::backend::Backend::job_cancel`]: only jobs not finished.
    Cancel,
    /// [`crate::backend::Backend::job_delete`]: only jobs not running.
    Delete,
}

/// The [`Error::Conflict`] of an action refused because job `id` is in `state`.
pub fn conflict(action: JobAction, id: JobId, state: JobState) -> Error {
    let rule = match action {
        JobAction::Retry => "only failed or cancelled jobs can be retried",
        JobAction::Cancel => "only scheduled, available or running jobs can be cancelled",
        JobAction::Delete => "cancel it before deleting it",
    };
    Error::Conflict(format!("job {id} is {state}; {rule}"))
}

/// The [`Error::Conflict`] of `jobs[index]`, refused under [`UniquePolicy::Reject`]
/// because its unique key `key` is held by job `holder` (in `state`). When the holder is an
/// earlier job of the same insert, which the refusal rolls back with the rest, the answer
/// says that two jobs of the batch share the key rather than name a holder that will never
/// exist.
pub fn unique_key_rejected(
    jobs: &[NewJob],
    index: usize,
    key: &str,
    holder: JobId,
    state: impl std::fmt::Display,
) -> Error {
    let earlier = jobs
        .get(..index)
        .and_then(|before| before.iter().position(|j| j.id == holder));
    Error::Conflict(match earlier {
        Some(earlier) => format!(
            "jobs[{earlier}] and jobs[{index}] of the batch share the unique key {key:?}, \
             and the reject policy refuses the second"
        ),
        None => format!("unique key {key:?} is held by job {holder} ({state})"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2031-01-01T00:00:00Z")
            .expect("valid")
            .with_timezone(&Utc)
    }

    #[test]
    fn a_new_bucket_starts_full_whatever_was_stored() {
        let rate = RateLimit::new(100, Duration::from_secs(1));
        assert_eq!(
            TokenBucket::refill(&rate, 0.0, None, t0()).whole(),
            rate.burst
        );
        assert_eq!(
            TokenBucket::refill(&rate, -3.0, None, t0()).whole(),
            rate.burst
        );
    }

    #[test]
    fn buckets_refill_at_the_rate_and_cap_at_the_burst() {
        let rate = RateLimit::new(100, Duration::from_secs(1));
        let t0 = t0();
        let later = t0 + chrono::Duration::milliseconds(50);
        assert_eq!(TokenBucket::refill(&rate, 0.0, Some(t0), later).whole(), 5);
        let much_later = t0 + chrono::Duration::seconds(60);
        assert_eq!(
            TokenBucket::refill(&rate, 0.0, Some(t0), much_later).whole(),
            rate.burst
        );
        // A clock that went back refills nothing.
        let earlier = t0 - chrono::Duration::seconds(1);
        assert_eq!(
            TokenBucket::refill(&rate, 2.5, Some(t0), earlier).whole(),
            2
        );
    }

    /// `rate_tokens` edited by hand: minus infinity (or -1e308) must refill as the nearest
    /// bound, or the queue's claims would take nothing for ever.
    #[test]
    fn stored_tokens_no_claim_leaves_refill_from_their_nearest_bound() {
        let rate = RateLimit::new(100, Duration::from_secs(1));
        let later = t0() + chrono::Duration::milliseconds(50);
        for stored in [f64::NEG_INFINITY, -1e308, -3.0, f64::NAN] {
            let bucket = TokenBucket::refill(&rate, stored, Some(t0()), later);
            assert_eq!(bucket.whole(), 5, "{stored}: 100/s for 50 ms from empty");
        }
        let full = TokenBucket::refill(&rate, f64::INFINITY, Some(t0()), t0());
        assert_eq!(full.whole(), rate.burst);
    }

    #[test]
    fn the_next_token_is_one_refill_period_away_from_empty() {
        let rate = RateLimit::new(100, Duration::from_secs(1));
        let empty = TokenBucket::refill(&rate, 0.0, Some(t0()), t0());
        assert_eq!(empty.whole(), 0);
        assert_eq!(empty.next_token_in(0), Duration::from_millis(10));
        let three = TokenBucket::refill(&rate, 3.0, Some(t0()), t0());
        assert_eq!(three.next_token_in(2), Duration::ZERO);
        assert_eq!(three.next_token_in(3), Duration::from_millis(10));
        assert_eq!(three.after(3), 0.0);
    }

    #[test]
    fn cron_keys_name_the_entry_and_the_tick_to_the_millisecond() {
        let tick = t0() + chrono::Duration::milliseconds(1500);
        assert_eq!(
            cron_unique_key("nightly", tick),
            "cron:nightly:2031-01-01T00:00:01.500Z"
        );
    }

    #[test]
    fn each_tick_is_one_job_unique_to_its_entry_and_tick() {
        let job = NewJob::new("report", serde_json::json!({}));
        let ticks = [t0(), t0() + chrono::Duration::minutes(1)];
        let advance = CronAdvance {
            name: "nightly".to_owned(),
            expected_next_run_at: ticks[0],
            next_run_at: ticks[1] + chrono::Duration::minutes(1),
            jobs: ticks.iter().map(|t| (*t, job.clone())).collect(),
        };
        let jobs = cron_tick_jobs(&advance);
        assert_eq!(jobs.len(), 2);
        for (job, tick) in jobs.iter().zip(ticks) {
            assert_eq!(job.run_at, Some(tick));
            assert_eq!(job.unique_key, Some(cron_unique_key("nightly", tick)));
            assert_eq!(job.unique_policy, UniquePolicy::Ignore);
            assert!(job.unique_window.is_some());
        }
    }

    #[test]
    fn a_newer_schema_is_refused_naming_both_versions() {
        assert!(refuse_newer_schema("schema hopper", 8, 8).is_ok());
        assert!(refuse_newer_schema("schema hopper", 3, 8).is_ok());
        match refuse_newer_schema("schema hopper", 9, 8) {
            Err(Error::Schema(message)) => {
                assert!(
                    message.contains("schema hopper is at version 9"),
                    "{message}"
                );
                assert!(message.contains("up to 8"), "{message}");
            }
            other => panic!("expected a schema error, got {other:?}"),
        }
    }

    #[test]
    fn sql_names_are_plain_identifiers() {
        assert!(validate_sql_name("schema name", "hopper").is_ok());
        assert!(validate_sql_name("schema name", "t_42").is_ok());
        assert!(validate_sql_name("schema name", "_x").is_ok());
        for bad in [
            "",
            "1abc",
            "Hopper",
            "a;b",
            "a.b",
            "a\"b",
            "é",
            &"x".repeat(51),
        ] {
            let err = validate_sql_name("table prefix", bad).expect_err(bad);
            assert!(err.to_string().contains("table prefix"), "{err}");
        }
    }

    #[test]
    fn conflicts_say_the_state_and_the_rule() {
        let id = JobId::nil();
        let e = conflict(JobAction::Delete, id, JobState::Running);
        assert!(
            matches!(&e, Error::Conflict(m) if m.contains("is running; cancel it")),
            "{e}"
        );
        let e = conflict(JobAction::Retry, id, JobState::Completed);
        assert!(
            matches!(&e, Error::Conflict(m) if m.contains("only failed or cancelled")),
            "{e}"
        );
    }
}
