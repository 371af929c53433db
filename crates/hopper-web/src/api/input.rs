//! What callers send, and how it becomes hopper's types. Every check here runs before
//! anything is written, and names the field at fault.

use std::time::Duration;

use chrono::{DateTime, Utc};
use hopper::core::job::validate_name;
use hopper::{JobId, JobListParams, JobState, NewJob, Priority, UniquePolicy};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::object::Object;
use crate::error::ApiError;

/// The default page size of a listing (jobs, nodes).
pub(crate) const DEFAULT_PAGE: u32 = 50;
/// The largest page size of a listing (jobs, nodes).
pub(crate) const MAX_PAGE: u32 = 500;
/// The longest `delay_ms`: the one bound on durations of every surface.
pub(crate) const MAX_DELAY_MS: u64 = hopper::limits::MAX_DURATION_MS;

/// One job to enqueue: every option of [`NewJob`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnqueueRequest {
    /// Which worker runs it.
    kind: String,
    /// Its arguments: a JSON object or array (default `{}`).
    #[serde(default)]
    args: Option<Value>,
    /// Its queue (default `default`).
    #[serde(default)]
    queue: Option<String>,
    /// `high`, `normal`, `low`, or a number (lower runs first).
    #[serde(default)]
    priority: Option<Value>,
    /// Not before this instant (RFC 3339), read in [`EnqueueRequest::into_job`] so that a
    /// refusal names the form it wants.
    #[serde(default)]
    run_at: Option<String>,
    /// Not before this many milliseconds from now.
    #[serde(default)]
    delay_ms: Option<u64>,
    /// Attempts before the job is dead-lettered.
    #[serde(default)]
    max_attempts: Option<i32>,
    /// How long one run may take, in milliseconds.
    #[serde(default)]
    timeout_ms: Option<u64>,
    /// A UUIDv7 chosen by the caller, so that a retried request cannot enqueue twice (the
    /// second gets 409).
    #[serde(default)]
    id: Option<Uuid>,
    /// The group (tenant) within the queue; groups take turns.
    #[serde(default)]
    group: Option<String>,
    /// At most one unfinished job (or one per window) with this key.
    #[serde(default)]
    unique_key: Option<String>,
    /// `ignore` (default), `reject` or `replace`: what happens when the key is taken.
    #[serde(default)]
    unique_policy: Option<String>,
    /// Keeps the key taken for the rest of a window of this many milliseconds.
    #[serde(default)]
    unique_window_ms: Option<u64>,
    /// Metadata: a JSON object of at most 16 KiB (`traceparent`/`tracestate` there are the
    /// W3C trace context of the job).
    #[serde(default)]
    meta: Option<Value>,
}

/// The W3C trace context of a request (its `traceparent` and `tracestate` headers), stored
/// into the metadata of the jobs it enqueues that carry none of their own.
#[derive(Debug, Clone, Default)]
pub(crate) struct TraceContext {
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl TraceContext {
    /// The headers' trace context. As the W3C recommendation says, a malformed
    /// `traceparent` is ignored (the job starts no trace) rather than refused, and a
    /// `tracestate` counts only beside a valid `traceparent`.
    pub(crate) fn from_headers(headers: &axum::http::HeaderMap) -> Self {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .map(str::to_owned)
        };
        let Some(traceparent) =
            header("traceparent").filter(|tp| hopper::core::meta::validate_traceparent(tp).is_ok())
        else {
            return TraceContext::default();
        };
        let tracestate =
            header("tracestate").filter(|ts| hopper::core::meta::validate_tracestate(ts).is_ok());
        TraceContext {
            traceparent: Some(traceparent),
            tracestate,
        }
    }

    /// Adds the context to `job`'s metadata, unless it has a `traceparent` of its own.
    fn apply(&self, job: &mut NewJob) {
        use hopper::core::meta::{TRACEPARENT, TRACESTATE};
        let Some(tp) = &self.traceparent else {
            return;
        };
        if job.meta.contains_key(TRACEPARENT) {
            return;
        }
        job.meta
            .insert(TRACEPARENT.into(), Value::String(tp.clone()));
        if let Some(ts) = &self.tracestate {
            job.meta
                .insert(TRACESTATE.into(), Value::String(ts.clone()));
        }
    }
}

impl EnqueueRequest {
    /// The job, validated as every entry point validates it.
    pub(crate) fn into_job(self, trace: &TraceContext) -> Result<NewJob, String> {
        let mut job = NewJob::new(
            self.kind,
            self.args
                .unwrap_or_else(|| Value::Object(Default::default())),
        );
        if let Some(queue) = self.queue {
            job = job.with_queue(queue);
        }
        if let Some(priority) = self.priority {
            job = job.with_priority(parse_priority(&priority)?);
        }
        match (self.run_at, self.delay_ms) {
            (Some(_), Some(_)) => return Err("give run_at or delay_ms, not both".to_owned()),
            (Some(at), None) => job = job.with_run_at(rfc3339("run_at", &at)?),
            (None, Some(ms)) if ms > MAX_DELAY_MS => {
                return Err(format!(
                    "delay_ms must be at most {MAX_DELAY_MS} (10 years), got {ms}"
                ));
            }
            (None, Some(ms)) => job = job.with_delay(Duration::from_millis(ms)),
            (None, None) => {}
        }
        if let Some(max_attempts) = self.max_attempts {
            job = job.with_max_attempts(max_attempts);
        }
        if let Some(ms) = self.timeout_ms {
            job = job.with_timeout(Duration::from_millis(ms));
        }
        if let Some(group) = self.group {
            job = job.with_group(group);
        }
        if let Some(key) = self.unique_key {
            job = job.with_unique_key(key);
        }
        if let Some(policy) = self.unique_policy {
            job = job.with_unique_policy(policy.parse::<UniquePolicy>().map_err(message)?);
            // Even `ignore`, the default, as the document says (`dependentRequired`): a
            // policy given without its key is a mistake, not a request for no key.
            if job.unique_key.is_none() {
                return Err("a unique policy needs a unique key".to_owned());
            }
        }
        if let Some(ms) = self.unique_window_ms {
            job = job.with_unique_window(Duration::from_millis(ms));
        }
        if let Some(meta) = self.meta {
            hopper::core::meta::validate_meta(&meta).map_err(message)?;
            if let Value::Object(map) = meta {
                job = job.with_meta(map);
            }
        }
        trace.apply(&mut job);
        if let Some(id) = self.id {
            hopper::core::job::validate_chosen_id(id, chrono::Utc::now()).map_err(message)?;
            job.id = id;
        }
        job.validate().map_err(message)?;
        Ok(job)
    }
}

/// A batch to enqueue, all or nothing.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchRequest {
    /// The jobs, each a JSON object.
    pub jobs: Vec<Object<EnqueueRequest>>,
}

/// Which failed jobs to retry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RetryFailedRequest {
    /// Only this queue.
    #[serde(default)]
    pub queue: Option<String>,
    /// Only this kind.
    #[serde(default)]
    pub kind: Option<String>,
}

/// The message of a validation error, without the "invalid input:" prefix.
fn message(e: hopper::Error) -> String {
    match e {
        hopper::Error::InvalidInput(m) => m,
        other => other.to_string(),
    }
}

fn parse_priority(value: &Value) -> Result<Priority, String> {
    let bad = || {
        format!(
            "priority must be \"high\", \"normal\", \"low\" or a number from -32768 to 32767, got {value}"
        )
    };
    match value {
        Value::String(name) => name.parse::<Priority>().map_err(|_| bad()),
        Value::Number(n) => n
            .as_i64()
            .and_then(|n| i16::try_from(n).ok())
            .map(Priority)
            .ok_or_else(bad),
        _ => Err(bad()),
    }
}

/// The query string of `GET /api/v1/jobs`, all as text so each field's error is ours.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    queue: Option<String>,
    state: Option<String>,
    kind: Option<String>,
    group: Option<String>,
    meta: Option<String>,
    since: Option<String>,
    until: Option<String>,
    before: Option<String>,
    limit: Option<String>,
}

/// A parsed listing request.
#[derive(Debug)]
pub(crate) struct ListRequest {
    pub list: JobListParams,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

impl ListQuery {
    /// Checks and converts every filter. Empty values (as an HTML form sends them) mean
    /// "no filter".
    pub(crate) fn parse(self) -> Result<ListRequest, ApiError> {
        let present = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
        let queue = present(self.queue);
        if let Some(q) = &queue {
            validate_name("queue", q)?;
        }
        let kind = present(self.kind);
        if let Some(k) = &kind {
            validate_name("kind", k)?;
        }
        let group = present(self.group);
        if let Some(g) = &group {
            validate_name("group", g)?;
        }
        let state = present(self.state)
            .map(|s| s.parse::<JobState>())
            .transpose()?;
        let meta = present(self.meta)
            .map(|m| hopper::core::meta::parse_meta_filter(&m))
            .transpose()?;
        let since = present(self.since)
            .map(|s| parse_time("since", &s))
            .transpose()?;
        let until = present(self.until)
            .map(|s| parse_time("until", &s))
            .transpose()?;
        if let (Some(a), Some(b)) = (since, until)
            && a >= b
        {
            return Err(ApiError::bad_request(format!(
                "since ({a}) must be before until ({b})"
            )));
        }
        let before = present(self.before)
            .map(|s| {
                parse_id(&s).map_err(|e| ApiError::bad_request(format!("before: {}", e.message())))
            })
            .transpose()?;
        let limit = page_limit(self.limit)?;
        Ok(ListRequest {
            list: JobListParams {
                queue,
                state,
                kind,
                group,
                meta,
                before,
                limit,
            },
            since,
            until,
        })
    }
}

/// The `limit` of a listing's page: [`DEFAULT_PAGE`] when absent or empty, else a whole
/// number from 1 to [`MAX_PAGE`].
pub(crate) fn page_limit(limit: Option<String>) -> Result<u32, ApiError> {
    match limit.filter(|s| !s.trim().is_empty()) {
        None => Ok(DEFAULT_PAGE),
        Some(s) => whole_number("limit", &s, MAX_PAGE),
    }
}

/// The whole number from 1 to `max` of the query parameter `field`, refused naming it.
pub(crate) fn whole_number(field: &str, text: &str, max: u32) -> Result<u32, ApiError> {
    text.trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "{field} must be a whole number from 1 to {max}, got {text:?}"
            ))
        })
}

fn parse_time(field: &str, s: &str) -> Result<DateTime<Utc>, ApiError> {
    rfc3339(field, s).map_err(ApiError::bad_request)
}

/// The instant `s` of `field`, or why it is none (`infinity`, a year past 9999, an offset
/// past a day, a bare date), saying what form is wanted.
fn rfc3339(field: &str, s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s.trim())
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            format!(
                "{field} must be an RFC 3339 time such as 2026-01-31T12:00:00Z, got \"{}\" ({e})",
                hopper::core::log_limit::capped(s)
            )
        })
}

/// A job id from a path or cursor.
pub(crate) fn parse_id(s: &str) -> Result<JobId, ApiError> {
    Uuid::parse_str(s.trim())
        .map_err(|_| ApiError::bad_request(format!("{s:?} is not a job id (a UUID)")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(v: Value) -> Result<NewJob, String> {
        serde_json::from_value::<EnqueueRequest>(v)
            .map_err(|e| e.to_string())?
            .into_job(&TraceContext::default())
    }

    #[test]
    fn every_option_reaches_the_job() -> Result<(), String> {
        let id = Uuid::now_v7();
        let job = request(json!({
            "kind": "mail", "args": {"to": "a"}, "queue": "q1", "priority": "high",
            "run_at": "2030-01-01T00:00:00Z", "max_attempts": 3, "timeout_ms": 1500,
            "id": id,
        }))?;
        assert_eq!(job.id, id);
        assert_eq!(job.queue, "q1");
        assert_eq!(job.priority, Priority::HIGH);
        assert_eq!(job.max_attempts, 3);
        assert_eq!(job.timeout, Duration::from_millis(1500));
        assert!(job.run_at.is_some());
        assert_eq!(
            request(json!({"kind": "k", "priority": -4}))?.priority,
            Priority(-4)
        );
        let unique = request(json!({
            "kind": "k", "group": "tenant-7", "unique_key": "user:42/welcome mail",
            "unique_policy": "replace", "unique_window_ms": 60000,
        }))?;
        assert_eq!(unique.group.as_deref(), Some("tenant-7"));
        assert_eq!(unique.unique_key.as_deref(), Some("user:42/welcome mail"));
        assert_eq!(unique.unique_policy, UniquePolicy::Replace);
        assert_eq!(unique.unique_window, Some(Duration::from_secs(60)));
        Ok(())
    }

    #[test]
    fn bad_options_are_named() {
        let err = |v: Value| request(v).err().unwrap_or_default();
        assert!(err(json!({"kind": "k", "queue": "a b"})).contains("queue name"));
        assert!(err(json!({"kind": "k", "args": 3})).contains("args must be"));
        assert!(err(json!({"kind": "k", "priority": "urgent"})).contains("priority"));
        assert!(
            err(json!({"kind": "k", "delay_ms": 5, "run_at": "2030-01-01T00:00:00Z"}))
                .contains("not both")
        );
        assert!(err(json!({"kind": "k", "id": Uuid::new_v4()})).contains("UUIDv7"));
        assert!(err(json!({"kind": "k", "delay": 5})).contains("unknown field"));
        assert!(err(json!({"kind": "k", "max_attempts": 0})).contains("max_attempts"));
        assert!(
            err(json!({"kind": "k", "unique_key": "a", "unique_policy": "maybe"}))
                .contains("unique policy")
        );
        assert!(err(json!({"kind": "k", "unique_window_ms": 5})).contains("unique key"));
        for policy in ["ignore", "reject", "replace"] {
            let e = err(json!({"kind": "k", "unique_policy": policy}));
            assert_eq!(e, "a unique policy needs a unique key");
        }
        assert!(err(json!({"kind": "k", "group": "a b"})).contains("group name"));
        assert!(err(json!({"kind": "k", "delay_ms": MAX_DELAY_MS + 1})).contains("delay_ms"));
        for at in [
            "infinity",
            "275760-09-13T00:00:00Z",
            "2030-01-01",
            "2030-01-01T00:00:00+99:00",
        ] {
            let e = err(json!({"kind": "k", "run_at": at}));
            assert!(
                e.starts_with("run_at must be an RFC 3339 time"),
                "{at}: {e}"
            );
        }
        let e = err(json!({"kind": "k", "run_at": "1969-12-31T23:59:59Z"}));
        assert!(e.contains("out of range"), "{e}");
        assert!(request(json!({"kind": "k", "delay_ms": MAX_DELAY_MS})).is_ok());
    }
}
