//! `PATCH /api/v1/queues/{queue}/limits`: a queue's global limits, across every node.
//!
//! A field left out keeps its limit, `null` removes it, a value sets it; the answer is the
//! queue's settings after the change. The limits are those of `hopper queues limit`
//! (`docs/scheduling.md`); queue weights are not here, since they belong to each runtime
//! (`RuntimeConfig::queue_weights`), not to the queue.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use hopper::{QueueSettings, QueueUpdate, RateLimit};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::ApiJson;
use crate::WebState;
use crate::error::ApiError;

/// What to change. Each field: absent (keep), `null` (remove) or a value (set).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitsRequest {
    /// Most jobs of the queue running at once.
    #[serde(default, deserialize_with = "present")]
    max_running: Option<Option<Value>>,
    /// Most jobs of one group running at once.
    #[serde(default, deserialize_with = "present")]
    max_running_per_group: Option<Option<Value>>,
    /// Most jobs started per interval: `"100/s"`, or `{"jobs", "per" (ms), "burst"}`.
    #[serde(default, deserialize_with = "present")]
    rate: Option<Option<Value>>,
}

/// A field that is present, as `Some` (holding `None` when it is `null`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<Value>>, D::Error> {
    Option::<Value>::deserialize(d).map(Some)
}

impl LimitsRequest {
    /// The settings change, with every value checked.
    pub(crate) fn into_update(self, queue: String) -> Result<QueueUpdate, String> {
        if self.max_running.is_none() && self.max_running_per_group.is_none() && self.rate.is_none()
        {
            return Err(
                "say which limit to change: max_running, max_running_per_group or rate".into(),
            );
        }
        let count = |field: &str, v: Option<Option<Value>>| {
            v.map(|v| v.map(|v| parse_count(field, &v)).transpose())
                .transpose()
        };
        Ok(QueueUpdate {
            max_running: count("max_running", self.max_running)?,
            max_running_per_group: count("max_running_per_group", self.max_running_per_group)?,
            rate: self
                .rate
                .map(|v| v.map(|v| parse_rate(&v)).transpose())
                .transpose()?,
            ..QueueUpdate::new(queue)
        })
    }
}

/// A limit on running jobs: a whole number from 1 to 2^31 - 1.
fn parse_count(field: &str, value: &Value) -> Result<u32, String> {
    value
        .as_u64()
        .filter(|n| *n >= 1)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| i32::try_from(*n).is_ok())
        .ok_or_else(|| {
            format!(
                "{field} must be a whole number from 1 to {} (or null to remove it), got {value}",
                i32::MAX
            )
        })
}

/// A rate: `"100/s"` (as `hopper queues limit --rate`) or `{"jobs": 100, "per": 1000,
/// "burst": 10}` (as the settings show it; `per` in milliseconds, `burst` optional).
fn parse_rate(value: &Value) -> Result<RateLimit, String> {
    let limit = match value {
        Value::String(text) => RateLimit::parse(text).map_err(message)?,
        Value::Object(fields) => {
            if let Some(unknown) = fields
                .keys()
                .find(|k| !["jobs", "per", "burst"].contains(&k.as_str()))
            {
                return Err(format!(
                    "rate has an unknown field {unknown:?}; expected jobs, per, burst"
                ));
            }
            let number = |name: &str| -> Result<Option<u64>, String> {
                match fields.get(name) {
                    None | Some(Value::Null) => Ok(None),
                    Some(v) => v
                        .as_u64()
                        .map(Some)
                        .ok_or_else(|| format!("rate.{name} must be a whole number, got {v}")),
                }
            };
            let small = |name: &str, n: u64| {
                u32::try_from(n).map_err(|_| format!("rate.{name} is too large: {n}"))
            };
            let jobs = number("jobs")?.ok_or("rate.jobs is missing")?;
            let per = number("per")?.ok_or("rate.per (milliseconds) is missing")?;
            let mut limit = RateLimit::new(small("jobs", jobs)?, Duration::from_millis(per));
            if let Some(burst) = number("burst")? {
                limit.burst = small("burst", burst)?;
            }
            limit
        }
        other => {
            return Err(format!(
                "rate must be text such as \"100/s\" or an object {{\"jobs\", \"per\", \"burst\"}}, got {other}"
            ));
        }
    };
    limit.validate().map_err(message)?;
    Ok(limit)
}

fn message(e: hopper::Error) -> String {
    match e {
        hopper::Error::InvalidInput(m) => m,
        other => other.to_string(),
    }
}

/// `PATCH /api/v1/queues/{queue}/limits`: sets or removes the queue's global limits.
pub(crate) async fn update(
    State(state): State<WebState>,
    queue: Result<Path<String>, PathRejection>,
    ApiJson(request): ApiJson<LimitsRequest>,
) -> Result<Json<QueueSettings>, ApiError> {
    let Path(queue) = queue.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let update = request
        .into_update(queue.clone())
        .map_err(ApiError::bad_request)?;
    let settings = state.client().update_queue(&update).await?;
    tracing::info!(%queue, ?update, "queue limits changed through the API");
    Ok(Json(settings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn update(v: Value) -> Result<QueueUpdate, String> {
        serde_json::from_value::<LimitsRequest>(v)
            .map_err(|e| e.to_string())?
            .into_update("q".into())
    }

    #[test]
    fn absent_keeps_null_removes_a_value_sets() -> Result<(), String> {
        let u = update(json!({"max_running": 5, "rate": null}))?;
        assert_eq!(u.max_running, Some(Some(5)));
        assert_eq!(u.max_running_per_group, None);
        assert_eq!(u.rate, Some(None));
        let u = update(json!({"rate": "100/s", "max_running_per_group": null}))?;
        assert_eq!(
            u.rate,
            Some(Some(RateLimit::new(100, Duration::from_secs(1))))
        );
        assert_eq!(u.max_running_per_group, Some(None));
        let u = update(json!({"rate": {"jobs": 20, "per": 500, "burst": 3}}))?;
        let rate = u.rate.flatten().ok_or("a rate")?;
        assert_eq!(
            (rate.jobs, rate.per, rate.burst),
            (20, Duration::from_millis(500), 3)
        );
        Ok(())
    }

    #[test]
    fn bad_limits_are_named() {
        let err = |v: Value| update(v).err().unwrap_or_default();
        assert!(err(json!({})).contains("say which limit"));
        assert!(err(json!({"max_running": 0})).contains("max_running must be"));
        assert!(err(json!({"max_running": -3})).contains("max_running must be"));
        assert!(err(json!({"max_running": "5"})).contains("max_running must be"));
        assert!(err(json!({"max_running": 4_294_967_296_u64})).contains("max_running must be"));
        assert!(err(json!({"rate": "fast"})).contains("rate"));
        assert!(err(json!({"rate": {"jobs": 0, "per": 1000}})).contains("at least 1 job"));
        assert!(err(json!({"rate": {"jobs": 5}})).contains("rate.per"));
        assert!(err(json!({"rate": {"jobs": 5, "per": 0}})).contains("interval"));
        assert!(err(json!({"rate": {"jobs": 5, "per": 10, "x": 1}})).contains("unknown field"));
        assert!(err(json!({"rate": 5})).contains("rate must be"));
        assert!(err(json!({"concurrency": 5})).contains("unknown field"));
    }
}
