//! Reading the optional RFC 3339 times a peer sends (`run_at`, a log line's `at`, a
//! filter's `created_after` and `created_before`) with errors that say what was expected,
//! in words: chrono's own say "input contains invalid characters" and no more. The decoder
//! names the field (`crate::locate`). Use with
//! `#[serde(default, deserialize_with = "time_str::optional")]`; times are written as chrono
//! writes them.

use std::fmt;

use chrono::{DateTime, Utc};
use hopper_core::log_limit::capped;
use serde::Deserializer;
use serde::de::{self, Visitor};

/// Reads `null` (or nothing) as `None` and an RFC 3339 string as the instant; anything
/// else fails.
pub(crate) fn optional<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
    d.deserialize_option(Instant)
}

struct Instant;

impl<'de> Visitor<'de> for Instant {
    type Value = Option<DateTime<Utc>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an RFC 3339 time")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        text.parse::<DateTime<Utc>>().map(Some).map_err(|_| {
            E::custom(format!(
                "not an RFC 3339 time such as 2026-11-22T10:00:00Z: {:?}",
                capped(text).to_string()
            ))
        })
    }
}
