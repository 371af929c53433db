//! Per-job logs: structured lines a handler writes while it runs an attempt
//! (`JobContext::log` in Rust, `job.log(...)` in the Python and Node workers), stored with
//! the attempt in a table of their own, so the hot job row stays small, and shown by
//! `hopper jobs show`, the HTTP API and the dashboard. See `docs/job-meta-and-logs.md`.
//!
//! Bounded: an attempt keeps at most [`MAX_ATTEMPT_LOG_BYTES`] of lines (as JSON); a
//! message is cut at [`MAX_LOG_MESSAGE_BYTES`]. Past the bound, lines are counted, not
//! kept, and the attempt's log says how many were dropped. Logging never fails a job.
//!
//! ```
//! use hopper_core::job_log::{LogBuffer, LogLevel, MAX_ATTEMPT_LOG_BYTES};
//!
//! let mut buffer = LogBuffer::default();
//! for i in 0..100_000 {
//!     buffer.push(LogLevel::Info, format!("line {i}"), Default::default());
//! }
//! let (lines, dropped) = buffer.take();
//! assert!(!lines.is_empty() && dropped > 0);
//! let kept: usize = lines.iter().map(|l| l.size()).sum();
//! assert!(kept <= MAX_ATTEMPT_LOG_BYTES);
//! ```

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::lease::Lease;

/// The most log an attempt keeps, as the JSON of its lines (64 KiB).
pub const MAX_ATTEMPT_LOG_BYTES: usize = 64 * 1024;

/// How long a writer holds a line before storing it: lines are stored this long after the
/// first of them was written (with those written since), so that a process that dies
/// mid-attempt loses at most this much of its log.
pub const LOG_FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// How many bytes of lines (as JSON) a writer holds before storing them at once, without
/// waiting for [`LOG_FLUSH_INTERVAL`] (16 KiB: at most four stores per attempt for size).
pub const LOG_FLUSH_BYTES: usize = 16 * 1024;

/// The longest message kept of one line, in bytes; a longer one is cut and ends with `…`.
pub const MAX_LOG_MESSAGE_BYTES: usize = 4 * 1024;

/// How long a writer of one attempt's lines keeps trying a store of them that fails for a
/// transient reason, from its first try, before it gives those lines up (5 s): the
/// default of [`LogStore::job_log_store_window`].
pub const LOG_STORE_WINDOW: std::time::Duration = std::time::Duration::from_secs(5);

/// How much a log line matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Very detailed tracing.
    Trace,
    /// Details for debugging.
    Debug,
    /// Normal progress.
    Info,
    /// Something unexpected that the handler survived.
    Warn,
    /// A failure.
    Error,
}

impl LogLevel {
    /// The level's name: `trace`, `debug`, `info`, `warn` or `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, so that a width (`{:<5}`) lines levels up in a column.
        f.pad(self.as_str())
    }
}

impl FromStr for LogLevel {
    type Err = Error;

    /// Parses a level name (any case; `warning` is `warn`).
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "trace" => Ok(LogLevel::Trace),
            "debug" => Ok(LogLevel::Debug),
            "info" => Ok(LogLevel::Info),
            "warn" | "warning" => Ok(LogLevel::Warn),
            "error" => Ok(LogLevel::Error),
            _ => Err(Error::InvalidInput(format!(
                "unknown log level {:?}: expected trace, debug, info, warn or error",
                crate::log_limit::capped(s).to_string()
            ))),
        }
    }
}

/// One log line of an attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogLine {
    /// When it was written.
    pub at: DateTime<Utc>,
    /// How much it matters.
    pub level: LogLevel,
    /// What happened.
    pub message: String,
    /// Structured details (`{"rows": 42}`).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub fields: Map<String, Value>,
}

impl LogLine {
    /// Its size as stored (compact JSON), which the bound counts.
    pub fn size(&self) -> usize {
        crate::meta::json_size(self)
    }
}

/// The log of one attempt, as read back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptLog {
    /// The attempt (the lease's attempt number: claims so far).
    pub attempt: i32,
    /// The lines kept, oldest first.
    pub lines: Vec<LogLine>,
    /// Lines written past the bound and dropped: when not zero, the log is truncated.
    pub dropped: i64,
}

/// Lines to add to the log of the attempt of `lease` ([`LogStore::job_log_append`]).
#[derive(Debug, Clone, PartialEq)]
pub struct JobLogAppend {
    /// The attempt the lines belong to.
    pub lease: Lease,
    /// The lines, each within the bounds of [`LogBuffer`].
    pub lines: Vec<LogLine>,
    /// Lines already dropped by the writer (past the bound), added to the count.
    pub dropped: i64,
}

/// The lines of one attempt being written, kept within the bounds: each message cut at
/// [`MAX_LOG_MESSAGE_BYTES`], at most [`MAX_ATTEMPT_LOG_BYTES`] in all; what does not fit
/// is counted.
#[derive(Debug, Default)]
pub struct LogBuffer {
    lines: Vec<LogLine>,
    /// The JSON size of every line kept, taken or not: the attempt's bound.
    bytes: usize,
    /// The JSON size of the lines not taken yet.
    pending: usize,
    dropped: i64,
    /// Set by the first line dropped: every later one is dropped too, so the log is its
    /// first lines, whatever their sizes and however often the buffer is taken.
    full: bool,
}

impl LogBuffer {
    /// Adds a line written now, or counts it as dropped when the attempt's log is full.
    pub fn push(&mut self, level: LogLevel, message: String, fields: Map<String, Value>) {
        self.push_line(LogLine {
            at: Utc::now(),
            level,
            message,
            fields,
        });
    }

    /// Adds `line` (its message cut to the bound), or counts it as dropped.
    pub fn push_line(&mut self, mut line: LogLine) {
        cut_message(&mut line.message);
        if crate::meta::has_nul(&Value::String(line.message.clone()))
            || line
                .fields
                .iter()
                .any(|(k, v)| k.contains('\0') || crate::meta::has_nul(v))
        {
            // PostgreSQL's jsonb cannot hold U+0000: replace it rather than lose the line.
            line.message = line.message.replace('\0', "\u{fffd}");
            line.fields = serde_json::from_str(
                &serde_json::to_string(&line.fields)
                    .unwrap_or_default()
                    .replace("\\u0000", "\u{fffd}"),
            )
            .unwrap_or_default();
        }
        let size = line.size();
        if self.full || self.bytes + size > MAX_ATTEMPT_LOG_BYTES {
            self.full = true;
            self.dropped += 1;
            return;
        }
        self.bytes += size;
        self.pending += size;
        self.lines.push(line);
    }

    /// True when nothing was written since the last [`LogBuffer::take`].
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty() && self.dropped == 0
    }

    /// The JSON size of the lines written since the last [`LogBuffer::take`].
    pub fn pending_bytes(&self) -> usize {
        self.pending
    }

    /// The lines kept and the count of dropped lines since the last take, leaving the
    /// buffer empty but as full as it was: the attempt's bound counts what was taken too, so
    /// taking it as often as one likes never lets more than the bound through.
    pub fn take(&mut self) -> (Vec<LogLine>, i64) {
        self.pending = 0;
        let dropped = std::mem::take(&mut self.dropped);
        (std::mem::take(&mut self.lines), dropped)
    }
}

/// The appends of one attempt merged into one, with the JSON size of its lines: what a
/// store writes in one statement (a statement cannot update one row twice).
#[derive(Debug, Clone, PartialEq)]
pub struct MergedAppend {
    /// The attempt.
    pub lease: Lease,
    /// Its new lines, in the order written.
    pub lines: Vec<LogLine>,
    /// Their JSON size (saturating).
    pub bytes: i32,
    /// Lines the writers dropped.
    pub dropped: i64,
}

/// Merges `appends` per attempt, in first-seen order, dropping empty ones.
pub fn merge_appends(appends: &[JobLogAppend]) -> Vec<MergedAppend> {
    let mut merged: Vec<MergedAppend> = Vec::new();
    for a in appends {
        if a.lines.is_empty() && a.dropped == 0 {
            continue;
        }
        let at = match merged.iter().position(|m| m.lease == a.lease) {
            Some(i) => i,
            None => {
                merged.push(MergedAppend {
                    lease: a.lease,
                    lines: Vec::new(),
                    bytes: 0,
                    dropped: 0,
                });
                merged.len() - 1
            }
        };
        let m = &mut merged[at];
        let size: usize = a.lines.iter().map(LogLine::size).sum();
        m.bytes = m
            .bytes
            .saturating_add(i32::try_from(size).unwrap_or(i32::MAX));
        m.lines.extend(a.lines.iter().cloned());
        m.dropped = m.dropped.saturating_add(a.dropped);
    }
    merged
}

/// Cuts `message` to [`MAX_LOG_MESSAGE_BYTES`] at a character boundary, ending it with `…`.
fn cut_message(message: &mut String) {
    if message.len() <= MAX_LOG_MESSAGE_BYTES {
        return;
    }
    let mut end = MAX_LOG_MESSAGE_BYTES - '…'.len_utf8();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push('…');
}

/// The lines of an attempt's log as stored (a JSON array of lines), each read as a
/// [`LogLine`]. A line hopper cannot read (written by hand or by another program: a level
/// it does not know, no time or one outside the instants hopper takes, not an object) hides
/// neither the job nor the other lines: it is read as a `warn` line whose message says so
/// and holds the line's JSON (cut at
/// [`MAX_LOG_MESSAGE_BYTES`]), at its own time when that reads, else at the Unix epoch.
/// Stored lines that are not an array at all are read as one such line.
pub fn read_stored_lines(stored: Value) -> Vec<LogLine> {
    let lines = match stored {
        Value::Array(lines) => lines,
        other => vec![other],
    };
    lines
        .into_iter()
        .map(|line| match LogLine::deserialize(&line) {
            Ok(read) => match crate::limits::check_instant("its time", read.at) {
                Ok(_) => read,
                Err(e) => unreadable_line(&line, &e),
            },
            Err(e) => unreadable_line(&line, &e),
        })
        .collect()
}

/// [`read_stored_lines`] of stored text: text that is not JSON is read as one unreadable
/// line holding it.
pub fn read_stored_text(stored: &str) -> Vec<LogLine> {
    read_stored_lines(
        serde_json::from_str(stored).unwrap_or_else(|_| Value::String(stored.to_owned())),
    )
}

/// The line that stands for a stored `line` hopper cannot read, for the reason `error`.
fn unreadable_line(line: &Value, error: &dyn std::fmt::Display) -> LogLine {
    let at = line
        .get("at")
        .and_then(|at| DateTime::<Utc>::deserialize(at).ok())
        .and_then(|at| crate::limits::check_instant("its time", at).ok())
        .unwrap_or(DateTime::UNIX_EPOCH);
    let mut message = format!("this log line could not be read ({error}); as stored: {line}");
    cut_message(&mut message);
    LogLine {
        at,
        level: LogLevel::Warn,
        message,
        fields: Map::new(),
    }
}

/// The error of an append that [`LogStore::job_log_append`] returned as held by another
/// transaction: transient, so that its writer sends it again.
pub fn held_elsewhere() -> Error {
    Error::Database("the attempt's job is held by another transaction".into())
}

/// Storing and reading per-job logs: a capability of the backends that keep them
/// (PostgreSQL and SQLite; `hopper serve` stores what remote workers send).
#[async_trait::async_trait]
pub trait LogStore: Send + Sync {
    /// Appends lines to attempts' logs. The store keeps each attempt within
    /// [`MAX_ATTEMPT_LOG_BYTES`] whatever the writers send, counting what it drops. Lines
    /// of a job that no longer exists are dropped without error.
    ///
    /// Returns the attempts whose lines were not stored because another transaction holds
    /// their job row right now (being deleted, or selected `FOR UPDATE`): the store does
    /// not wait for it, so that one held row does not stall the lines of every other
    /// attempt stored with them. Every other append was stored. Send those again later, as
    /// after a transient error. (A row of the attempt's log held by another transaction
    /// may be waited for: a writer of many callers' lines calls
    /// [`LogStore::job_log_append_shared`].)
    async fn job_log_append(&self, appends: &[JobLogAppend]) -> Result<Vec<Lease>>;

    /// [`LogStore::job_log_append`] for a writer that stores the lines of many callers
    /// one batch after another (`hopper serve`'s log writer): it waits on no row another
    /// transaction holds for more than a moment, the attempt's log row included, since
    /// every caller's lines would wait with it. An attempt whose log row is held is
    /// returned as held, as one whose job row is. Bounding that wait costs more (on
    /// PostgreSQL a connection of its own, or behind a transaction pooler settings sent
    /// around each store), which a writer of one attempt's lines at a time, stalling only
    /// itself, need not pay. By default the same as [`LogStore::job_log_append`] (a store
    /// without row locks).
    async fn job_log_append_shared(&self, appends: &[JobLogAppend]) -> Result<Vec<Lease>> {
        self.job_log_append(appends).await
    }

    /// How long a writer of one attempt's lines keeps trying one store of them (its tries
    /// after transient failures included) before it gives the lines up, from the first
    /// try. The attempt's outcome waits for its last store, so a store that stays away
    /// must not hold it until the lease runs out: by default [`LOG_STORE_WINDOW`]. A store
    /// whose requests may go unanswered for longer than that, and be sent again (a remote
    /// transport, waiting a reply timeout for each), gives a window to match.
    fn job_log_store_window(&self) -> std::time::Duration {
        LOG_STORE_WINDOW
    }

    /// The logs of the attempts of a job after attempt `after`, oldest attempt first, at
    /// most `limit` of them (none: empty): one page of [`LogStore::job_logs`].
    async fn job_logs_page(
        &self,
        job: crate::JobId,
        after: i32,
        limit: u32,
    ) -> Result<Vec<AttemptLog>>;

    /// The logs of every attempt of a job, oldest attempt first (none: empty), read a page
    /// of [`JOB_LOGS_PAGE`] attempts at a time.
    async fn job_logs(&self, job: crate::JobId) -> Result<Vec<AttemptLog>> {
        let mut logs: Vec<AttemptLog> = Vec::new();
        loop {
            let after = logs.last().map_or(0, |l| l.attempt);
            let page = self.job_logs_page(job, after, JOB_LOGS_PAGE).await?;
            let last = page.len() < JOB_LOGS_PAGE as usize;
            logs.extend(page);
            if last {
                return Ok(logs);
            }
        }
    }
}

/// How many attempts' logs [`LogStore::job_logs`] reads at a time.
pub const JOB_LOGS_PAGE: u32 = 100;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_kept_within_the_bound_and_counted() {
        let mut buffer = LogBuffer::default();
        for i in 0..10_000 {
            buffer.push(LogLevel::Info, format!("line {i}"), Map::new());
        }
        let (lines, dropped) = buffer.take();
        let kept: usize = lines.iter().map(LogLine::size).sum();
        assert!(kept <= MAX_ATTEMPT_LOG_BYTES);
        assert!(
            kept > MAX_ATTEMPT_LOG_BYTES - 200,
            "the bound is used up: {kept}"
        );
        assert_eq!(lines.len() as i64 + dropped, 10_000);
        assert_eq!(lines[0].message, "line 0", "the first lines are kept");
    }

    #[test]
    fn taking_often_keeps_the_bound_and_the_first_lines() {
        let mut buffer = LogBuffer::default();
        let (mut kept, mut dropped) = (Vec::new(), 0);
        for i in 0..2_000 {
            // Big lines, then small ones: after the first drop, the small ones that would
            // still fit are dropped too.
            let message = if i < 1_000 {
                "x".repeat(200)
            } else {
                "y".into()
            };
            buffer.push(LogLevel::Info, message, Map::new());
            if i % 7 == 0 {
                let (lines, d) = buffer.take();
                kept.extend(lines);
                dropped += d;
                assert_eq!(buffer.pending_bytes(), 0);
            }
        }
        let (lines, d) = buffer.take();
        kept.extend(lines);
        dropped += d;
        let size: usize = kept.iter().map(LogLine::size).sum();
        assert!(size <= MAX_ATTEMPT_LOG_BYTES, "{size}");
        assert_eq!(kept.len() as i64 + dropped, 2_000);
        assert!(kept.iter().all(|l| l.message.starts_with('x')), "no gap");
    }

    #[test]
    fn long_messages_are_cut_and_nul_replaced() {
        let mut buffer = LogBuffer::default();
        buffer.push(LogLevel::Warn, "é".repeat(10_000), Map::new());
        let mut fields = Map::new();
        fields.insert("k".into(), Value::String("a\0b".into()));
        buffer.push(LogLevel::Info, "x\0y".into(), fields);
        let (lines, dropped) = buffer.take();
        assert_eq!(dropped, 0);
        assert!(lines[0].message.len() <= MAX_LOG_MESSAGE_BYTES);
        assert!(lines[0].message.ends_with('…'));
        assert_eq!(lines[1].message, "x\u{fffd}y");
        assert_eq!(lines[1].fields["k"], "a\u{fffd}b");
    }

    #[test]
    fn levels_parse() {
        assert_eq!("WARNING".parse::<LogLevel>().ok(), Some(LogLevel::Warn));
        assert!("loud".parse::<LogLevel>().is_err());
    }
}
