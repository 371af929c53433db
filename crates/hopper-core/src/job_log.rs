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

/// The longest message kept of one line, in bytes; a longer one is cut and ends with `…`.
pub const MAX_LOG_MESSAGE_BYTES: usize = 4 * 1024;

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
    bytes: usize,
    dropped: i64,
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
        if self.dropped > 0 || self.bytes + size > MAX_ATTEMPT_LOG_BYTES {
            self.dropped += 1;
            return;
        }
        self.bytes += size;
        self.lines.push(line);
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty() && self.dropped == 0
    }

    /// The lines kept and the count of dropped lines, leaving the buffer empty but full:
    /// the attempt's bound counts what was taken too.
    pub fn take(&mut self) -> (Vec<LogLine>, i64) {
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

/// Storing and reading per-job logs: a capability of the backends that keep them
/// (PostgreSQL and SQLite; `hopper serve` stores what remote workers send).
#[async_trait::async_trait]
pub trait LogStore: Send + Sync {
    /// Appends lines to attempts' logs. The store keeps each attempt within
    /// [`MAX_ATTEMPT_LOG_BYTES`] whatever the writers send, counting what it drops. Lines
    /// of a job that no longer exists are dropped without error.
    async fn job_log_append(&self, appends: &[JobLogAppend]) -> Result<()>;

    /// The logs of every attempt of a job, oldest attempt first (none: empty).
    async fn job_logs(&self, job: crate::JobId) -> Result<Vec<AttemptLog>>;
}

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
