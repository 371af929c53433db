//! Periodic jobs: a cron expression with a time zone, and the job each tick enqueues.
//!
//! Register them on the runtime ([`crate::Runtime::periodic`]). Every runtime that
//! registered an entry runs the enqueuer; each tick is enqueued exactly once however many
//! run it (see `hopper_postgres`'s `cron.rs`: a compare-and-set on the entry's
//! `next_run_at` plus a unique key per tick). After downtime, only the latest missed tick
//! is enqueued, unless the entry asks to catch up ([`PeriodicJob::with_catch_up`]).
//!
//! ```
//! use hopper::{NewJob, PeriodicJob};
//!
//! let nightly = PeriodicJob::new("nightly-report", "0 3 * * *", NewJob::new("report", serde_json::json!({})))?
//!     .with_timezone("Europe/Paris")?;
//! # Ok::<(), hopper::Error>(())
//! ```

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use chrono_tz::Tz;
use croner::Cron;
use hopper_core::backend::{Backend, SchedulingStore};
use hopper_core::{Clock, CronAdvance, CronEntry, Error, NewJob, Result};
use tokio_util::sync::CancellationToken;

use crate::middleware::Chain;
use crate::spans;

/// croner's flag for `L` in a field (`LAST_BIT`, not exported by croner).
const CRONER_LAST_BIT: u8 = 1 << 6;

/// The most missed ticks a catching-up entry enqueues at once.
pub const MAX_CATCH_UP: usize = 1000;

/// Longest sleep of the enqueuer between two looks at the table (entries registered by
/// other nodes may have moved).
const MAX_SLEEP: Duration = Duration::from_secs(1);

/// The most searches for one tick: croner finds a wall time that clocks set back repeat at
/// its first occurrence, which may lie before the instant searched from, and each further
/// search steps one tick past it (an hour repeated, at a tick a second, is 3,600).
const MAX_SEARCHES: usize = 4 * 3600;

/// The key of a periodic job's meta that names the entry that enqueued it
/// (`{"periodic": "nightly-report"}`); `hopper jobs list --meta periodic=nightly-report`
/// finds them.
pub const PERIODIC_META: &str = "periodic";

/// A job enqueued on a schedule. See the module docs.
#[derive(Debug, Clone)]
pub struct PeriodicJob {
    name: String,
    schedule: String,
    cron: Cron,
    timezone: Tz,
    job: NewJob,
    catch_up: bool,
}

impl PeriodicJob {
    /// Enqueues a copy of `job` (with a fresh id) at every tick of `schedule`: five cron
    /// fields (`minute hour day-of-month month day-of-week`), or six with seconds first.
    /// Times are read in UTC unless [`PeriodicJob::with_timezone`] says otherwise.
    pub fn new(name: impl Into<String>, schedule: &str, job: NewJob) -> Result<Self> {
        let name = name.into();
        hopper_core::job::validate_name("periodic job", &name)?;
        job.validate()?;
        let invalid = |why: String| {
            Error::InvalidInput(format!("periodic job {name}: schedule {schedule:?}: {why}"))
        };
        let cron = Cron::from_str(schedule).map_err(|e| invalid(e.to_string()))?;
        // croner accepts fields that match nothing (`,` alone, `+` alone in the day of the
        // week): a schedule that never fires, found only after searching a year second by
        // second (tens of seconds, blocking the enqueuer). Refused here instead.
        let p = &cron.pattern;
        for (field, c) in [
            ("second", &p.seconds),
            ("minute", &p.minutes),
            ("hour", &p.hours),
            ("day of month", &p.days),
            ("month", &p.months),
            ("day of week", &p.days_of_week),
        ] {
            // Any value bit (plain, nth weekday, last, nearest weekday), or `L` as a whole.
            let matches_something = (0..8).any(|bit| !c.get_set_values(1 << bit).is_empty())
                || c.is_feature_enabled(CRONER_LAST_BIT);
            if !matches_something {
                return Err(invalid(format!("the {field} field matches nothing")));
            }
        }
        let periodic = PeriodicJob {
            name,
            schedule: schedule.to_owned(),
            cron,
            timezone: Tz::UTC,
            job,
            catch_up: false,
        };
        // A schedule that matches no date ahead (30 February, a year field in the past):
        // refused here rather than registered as an entry that is never due.
        if periodic.next_after(Utc::now()).is_none() {
            return Err(Error::InvalidInput(format!(
                "periodic job {}: schedule {schedule:?}: it never fires",
                periodic.name
            )));
        }
        Ok(periodic)
    }

    /// Reads the schedule in an IANA time zone (`Europe/Paris`, `America/New_York`):
    /// `0 9 * * *` runs at 09:00 local time, summer and winter.
    pub fn with_timezone(mut self, timezone: &str) -> Result<Self> {
        self.timezone = Tz::from_str(timezone).map_err(|_| {
            Error::InvalidInput(format!(
                "periodic job {}: unknown time zone {timezone:?}",
                self.name
            ))
        })?;
        Ok(self)
    }

    /// After downtime, enqueue every missed tick (at most [`MAX_CATCH_UP`]) instead of
    /// only the latest one.
    pub fn with_catch_up(mut self, catch_up: bool) -> Self {
        self.catch_up = catch_up;
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The first tick strictly after `t`, on a whole second; `None` when the schedule has
    /// none left (a year field). Daylight saving time: a wall time that does not exist
    /// (clocks set forward) fires, for a schedule of fixed times, at the first instant after
    /// the gap; a wall time that repeats (clocks set back) fires once, at its first
    /// occurrence.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Searched from t's whole second: croner keeps a fraction of the start in the ticks
        // it finds around a change of offset, and a tick must have one value on every node
        // (its unique key names it).
        let t = whole_second(t);
        let mut from = t.with_timezone(&self.timezone);
        for _ in 0..MAX_SEARCHES {
            let found = self.cron.find_next_occurrence(&from, false).ok()?;
            let tick = whole_second(found.with_timezone(&Utc));
            if tick > t {
                return Some(tick);
            }
            // A repeated wall time, found at its first occurrence, already past.
            from = found;
        }
        None
    }

    /// The last tick at or before `t`, as [`PeriodicJob::next_after`] places ticks.
    fn latest_at_or_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let t = whole_second(t);
        let second = chrono::Duration::seconds(1);
        let mut before = t;
        for _ in 0..MAX_SEARCHES {
            // croner's backward search proposes; the forward one decides, since the two
            // differ around a change of offset (a fixed time in a gap is the second before
            // the gap backward, the second after it forward).
            let proposed = self
                .cron
                .find_previous_occurrence(&before.with_timezone(&self.timezone), true)
                .ok()?
                .with_timezone(&Utc);
            let mut latest = self.next_after(proposed - second)?;
            if latest <= t {
                for _ in 0..MAX_SEARCHES {
                    match self.next_after(latest) {
                        Some(next) if next <= t => latest = next,
                        _ => break,
                    }
                }
                return Some(latest);
            }
            before = whole_second(proposed) - second;
        }
        None
    }

    /// The entry to register, with its first tick after `now`; one with no tick left is
    /// [never due](never).
    fn entry(&self, now: DateTime<Utc>) -> CronEntry {
        let next_run_at = self.next_after(now).unwrap_or_else(never);
        CronEntry {
            name: self.name.clone(),
            schedule: self.schedule.clone(),
            timezone: self.timezone.name().to_owned(),
            queue: self.job.queue.clone(),
            kind: self.job.kind.clone(),
            args: self.job.args.clone(),
            priority: self.job.priority,
            max_attempts: self.job.max_attempts,
            timeout_ms: self.job.timeout_ms(),
            catch_up: self.catch_up,
            next_run_at,
            last_run_at: None,
            last_job_id: None,
        }
    }

    /// What to do with the stored entry at `now`: the ticks to enqueue and the next one
    /// ([never](never) when the schedule has none left). `None` when it is not due.
    pub fn plan(
        &self,
        stored_next: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Option<(Vec<DateTime<Utc>>, DateTime<Utc>)> {
        if stored_next > now {
            return None;
        }
        let mut ticks = vec![stored_next];
        let mut t = stored_next;
        if self.catch_up {
            while let Some(next) = self.next_after(t) {
                if next > now || ticks.len() >= MAX_CATCH_UP {
                    break;
                }
                ticks.push(next);
                t = next;
            }
        } else if let Some(latest) = self.latest_at_or_before(now).filter(|l| *l > t) {
            // Only the latest missed tick: no burst after downtime. Searched back from now,
            // not stepped to through every missed tick (a year down of a schedule firing
            // every second would be 31 million steps).
            ticks[0] = latest;
            t = latest;
        }
        let next = self.next_after(now.max(t)).unwrap_or_else(never);
        Some((ticks, next))
    }

    fn advance(&self, stored_next: DateTime<Utc>, now: DateTime<Utc>) -> Option<CronAdvance> {
        let (ticks, next) = self.plan(stored_next, now)?;
        let jobs = ticks
            .into_iter()
            .map(|tick| {
                let mut job = self.job.clone();
                job.id = uuid::Uuid::now_v7();
                job.meta
                    .insert(PERIODIC_META.to_owned(), self.name.clone().into());
                (tick, job)
            })
            .collect();
        Some(CronAdvance {
            name: self.name.clone(),
            expected_next_run_at: stored_next,
            next_run_at: next,
            jobs,
        })
    }
}

/// The enqueuer: registers `entries`, then enqueues their due ticks until `stop`.
pub(crate) async fn run(
    backend: Arc<dyn Backend>,
    clock: Arc<dyn Clock>,
    entries: Vec<PeriodicJob>,
    middleware: Chain,
    stop: CancellationToken,
) {
    let Some(store) = backend.scheduling() else {
        tracing::warn!(
            backend = backend.name(),
            "this backend does not store periodic jobs; they are not enqueued"
        );
        return;
    };
    let mut backoff = Duration::from_millis(100);
    loop {
        let now = now(&*clock);
        let registered: Vec<CronEntry> = entries.iter().map(|e| e.entry(now)).collect();
        match store.cron_register(&registered).await {
            Ok(()) => break,
            Err(e) => {
                tracing::warn!(error = %e.with_causes(), "registering periodic jobs failed");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.cancelled() => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
    loop {
        let wait = match tick(&*backend, store, &*clock, &entries, &middleware).await {
            Ok(wait) => wait,
            Err(e) => {
                tracing::warn!(error = %e.with_causes(), "enqueuing periodic jobs failed");
                MAX_SLEEP
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// The next run of an entry whose schedule has no tick left: the last instant hopper
/// stores (9999-12-31), so it is never due and its enqueuer does not look again sooner
/// than usual.
fn never() -> DateTime<Utc> {
    hopper_core::limits::max_instant()
}

/// `t` without its fraction of a second.
fn whole_second(t: DateTime<Utc>) -> DateTime<Utc> {
    t.with_nanosecond(0).unwrap_or(t)
}

/// The clock's instant, or this host's when the clock defers to the database: the
/// schedule is planned here, so it needs an instant, not the database's `now()`.
fn now(clock: &dyn Clock) -> DateTime<Utc> {
    clock.now().unwrap_or_else(Utc::now)
}

/// Enqueues what is due; returns how long to sleep before the next tick.
async fn tick(
    backend: &dyn Backend,
    store: &dyn SchedulingStore,
    clock: &dyn Clock,
    entries: &[PeriodicJob],
    middleware: &Chain,
) -> Result<Duration> {
    let stored = backend.cron_list().await?;
    let now = now(clock);
    let mut wait = MAX_SLEEP;
    for entry in entries {
        let Some(row) = stored.iter().find(|r| r.name == entry.name) else {
            continue;
        };
        let next = match entry.advance(row.next_run_at, now) {
            Some(advance) => {
                let next = advance.next_run_at;
                if enqueue(store, advance, &entry.job, middleware).await? {
                    tracing::debug!(name = %entry.name, "enqueued periodic job");
                }
                next
            }
            None => row.next_run_at,
        };
        let until = (next - now).to_std().unwrap_or(Duration::ZERO);
        wait = wait.min(until + Duration::from_millis(1));
    }
    Ok(wait)
}

/// Enqueues the ticks of `advance` (of an entry enqueuing `job`) inside a
/// `hopper.periodic` span, through the enqueue side of the runtime's middleware (which
/// stores the span's trace context in each job's meta, with the OpenTelemetry one).
/// Answers whether this node enqueued them (false: another node did, or another
/// transaction holds the entry's row, which is not waited for: the loop looks again within
/// [`MAX_SLEEP`]).
async fn enqueue(
    store: &dyn SchedulingStore,
    mut advance: CronAdvance,
    job: &NewJob,
    middleware: &Chain,
) -> Result<bool> {
    let ticks = advance.jobs.len();
    let span = spans::periodic(&advance.name, job, ticks);
    let enqueue = async {
        if !middleware.is_empty() {
            let (times, mut jobs): (Vec<_>, Vec<_>) = advance.jobs.drain(..).unzip();
            middleware.enqueue(&mut jobs).await?;
            advance.jobs = times.into_iter().zip(jobs).collect();
        }
        store.cron_advance(&advance).await
    };
    spans::seam(span, enqueue, |moved| {
        Some(if *moved { ticks as u64 } else { 0 })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 28, h, m, 0)
            .single()
            .expect("valid")
    }

    fn hourly(catch_up: bool) -> PeriodicJob {
        PeriodicJob::new(
            "hourly",
            "0 * * * *",
            NewJob::new("k", serde_json::json!({})),
        )
        .expect("valid")
        .with_catch_up(catch_up)
    }

    /// Found by the `cron_schedule` fuzz target: fields that match nothing (`,` alone, `+`
    /// alone as the day of the week) parsed, and the first next-tick search took over a
    /// minute.
    #[test]
    fn a_field_matching_nothing_is_refused_at_once() {
        let job = NewJob::new("k", serde_json::json!({}));
        for schedule in [", 0 * 20 * 2, ", "0 , * * *", "0 0 * * ,,", "7 0 * 2 * +"] {
            let started = std::time::Instant::now();
            let err = PeriodicJob::new("p", schedule, job.clone()).expect_err(schedule);
            assert!(err.to_string().contains("matches nothing"), "{err}");
            assert!(started.elapsed() < Duration::from_secs(1));
        }
        for fine in [
            "0 9,17 * * 1,",
            "0 0 L * *",
            "0 0 * * 5#3",
            "0 0 * * 5L",
            "0 0 15W * *",
        ] {
            let p = PeriodicJob::new("p", fine, job.clone()).expect(fine);
            assert!(p.next_after(at(0, 0)).is_some(), "{fine}");
        }
    }

    /// Found by the `cron_schedule` fuzz target: after a long downtime, planning stepped
    /// through every missed tick to reach the latest (a century of seconds).
    #[test]
    fn a_long_downtime_is_planned_without_stepping_through_it() {
        let every_second =
            PeriodicJob::new("s", "* * * * * *", NewJob::new("k", serde_json::json!({})))
                .expect("valid");
        let started = std::time::Instant::now();
        let from = Utc
            .with_ymd_and_hms(1971, 1, 1, 0, 0, 0)
            .single()
            .expect("valid");
        let now = at(4, 30) + chrono::Duration::milliseconds(500);
        let (ticks, next) = every_second.plan(from, now).expect("due");
        assert_eq!(ticks, vec![at(4, 30)]);
        assert!(
            next > now && next <= now + chrono::Duration::seconds(1),
            "{next}"
        );
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn downtime_enqueues_only_the_latest_tick_unless_catching_up() {
        let (ticks, next) = hourly(false).plan(at(1, 0), at(4, 30)).expect("due");
        assert_eq!((ticks, next), (vec![at(4, 0)], at(5, 0)));
        let (ticks, _) = hourly(true).plan(at(1, 0), at(4, 30)).expect("due");
        assert_eq!(ticks, vec![at(1, 0), at(2, 0), at(3, 0), at(4, 0)]);
        assert!(hourly(false).plan(at(5, 0), at(4, 30)).is_none());
    }

    #[test]
    fn time_zones_follow_daylight_saving() {
        let job = PeriodicJob::new("nine", "0 9 * * *", NewJob::new("k", serde_json::json!({})))
            .expect("valid")
            .with_timezone("Europe/Paris")
            .expect("zone");
        // Paris switches to summer time on 2026-03-29: 09:00 is 08:00 UTC before, 07:00 after.
        assert_eq!(job.next_after(at(0, 0)), Some(at(8, 0)));
        let next_day = Utc.with_ymd_and_hms(2026, 3, 29, 7, 0, 0).single();
        assert_eq!(job.next_after(at(9, 0)), next_day);
        assert!(job.clone().with_timezone("Mars/Olympus").is_err());
        assert!(
            PeriodicJob::new("bad", "61 * * * *", NewJob::new("k", serde_json::json!({}))).is_err()
        );
    }

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("an RFC 3339 instant")
            .with_timezone(&Utc)
    }

    fn in_paris(schedule: &str) -> PeriodicJob {
        PeriodicJob::new("p", schedule, NewJob::new("k", serde_json::json!({})))
            .expect("valid")
            .with_timezone("Europe/Paris")
            .expect("zone")
    }

    /// Paris sets its clocks back on 2026-10-25 at 03:00 CEST (01:00 UTC): 02:00-02:59
    /// happen twice. Every tick lies after the instant searched from, on a whole second,
    /// and a repeated wall time fires once. A search from the second pass must not answer a
    /// tick of the first (in the past: an enqueuer started then would look again every
    /// millisecond for an hour), and ticks near the change fall on whole seconds (a fraction
    /// kept from the instant searched from would give a tick two names, two unique keys).
    #[test]
    fn ticks_around_clocks_set_back_move_forward_on_whole_seconds() {
        let quarter = in_paris("*/15 * * * *");
        let mut ticks = Vec::new();
        let mut t = utc("2026-10-24T23:40:00.5Z");
        while t < utc("2026-10-25T02:10:00Z") {
            let next = quarter.next_after(t).expect("a tick");
            assert!(next > t, "{next} after {t}");
            ticks.push(next);
            t = next + chrono::Duration::milliseconds(300);
        }
        let expected: Vec<DateTime<Utc>> = [
            "2026-10-24T23:45:00Z",
            "2026-10-25T00:00:00Z",
            "2026-10-25T00:15:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-25T00:45:00Z",
            "2026-10-25T02:00:00Z",
            "2026-10-25T02:15:00Z",
        ]
        .into_iter()
        .map(utc)
        .collect();
        assert_eq!(ticks, expected);
        // From inside the second pass, the next tick is the first after it.
        for second_pass in ["2026-10-25T01:15:00.5Z", "2026-10-25T01:00:00Z"] {
            let next = quarter.next_after(utc(second_pass));
            assert_eq!(next, Some(utc("2026-10-25T02:00:00Z")), "{second_pass}");
        }
        let fixed = in_paris("30 2 * * *");
        let next = fixed.next_after(utc("2026-10-25T01:35:00Z"));
        assert_eq!(next, Some(utc("2026-10-26T01:30:00Z")));
        let latest = fixed.latest_at_or_before(utc("2026-10-25T01:35:00Z"));
        assert_eq!(
            latest,
            Some(utc("2026-10-25T00:30:00Z")),
            "its first occurrence"
        );
    }

    /// Paris sets its clocks forward on 2026-03-29 at 02:00 CET: 02:30 does not exist, and
    /// `30 2 * * *` fires at 03:00 CEST (01:00 UTC). After a downtime the latest missed
    /// tick is that one too; croner's backward search answered 01:59:59 CET, a tick no
    /// forward search gives (so a node back at 00:59:59.5 UTC enqueued it, then 01:00).
    #[test]
    fn a_fixed_time_in_the_gap_is_one_tick_forward_and_back() {
        let fixed = in_paris("30 2 * * *");
        let gap_tick = utc("2026-03-29T01:00:00Z");
        assert_eq!(
            fixed.next_after(utc("2026-03-28T23:00:00Z")),
            Some(gap_tick)
        );
        assert_eq!(
            fixed.next_after(utc("2026-03-29T00:59:59.5Z")),
            Some(gap_tick)
        );
        assert_eq!(
            fixed.latest_at_or_before(utc("2026-03-29T12:00:00Z")),
            Some(gap_tick)
        );
        let day_before = utc("2026-03-28T01:30:00Z");
        let early = utc("2026-03-29T00:59:59.5Z");
        assert_eq!(fixed.latest_at_or_before(early), Some(day_before));
        let (ticks, next) = fixed.plan(day_before, early).expect("due");
        assert_eq!((ticks, next), (vec![day_before], gap_tick));
        let (ticks, _) = fixed
            .plan(day_before, utc("2026-03-29T12:00:00Z"))
            .expect("due");
        assert_eq!(ticks, vec![gap_tick]);
    }

    /// A schedule that matches no date ahead is refused when made (else the enqueuer would
    /// try to register it for ever, and with it every other periodic job of the runtime);
    /// one whose last tick passed enqueues it and is never due again (else the enqueuer
    /// could look again every millisecond).
    #[test]
    fn a_schedule_without_ticks_is_refused_or_never_due() {
        let job = NewJob::new("k", serde_json::json!({}));
        for never in ["0 0 30 2 *", "0 0 31 4 *", "0 0 0 1 1 * 2020"] {
            let err = PeriodicJob::new("n", never, job.clone()).expect_err(never);
            assert!(err.to_string().contains("never fires"), "{err}");
        }
        let last = PeriodicJob::new("y", "0 0 0 1 1 * 2999", job).expect("fires once");
        let tick = utc("2999-01-01T00:00:00Z");
        let (ticks, next) = last
            .plan(tick, tick + chrono::Duration::milliseconds(500))
            .expect("due");
        assert_eq!((ticks, next), (vec![tick], never()));
        assert!(last.plan(next, utc("3000-06-01T00:00:00Z")).is_none());
    }
}
