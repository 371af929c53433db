//! Reading the optional RFC 3339 times a peer sends (`run_at`, a log line's `at`, a
//! filter's `created_after` and `created_before`) with errors that name the field and say
//! what was expected, in words: chrono's own say "input contains invalid characters" and
//! no more. Use with `#[serde(default, deserialize_with = "time_str::run_at")]`; times are
//! written as chrono writes them.

use std::fmt;

use chrono::{DateTime, Utc};
use hopper_core::log_limit::capped;
use serde::Deserializer;
use serde::de::{self, Visitor};

/// Reads `null` (or nothing) as `None` and an RFC 3339 string as the instant; anything
/// else fails naming `field`.
fn optional<'de, D: Deserializer<'de>>(
    d: D,
    field: &'static str,
) -> Result<Option<DateTime<Utc>>, D::Error> {
    d.deserialize_option(Instant(field))
}

struct Instant(&'static str);

impl<'de> Visitor<'de> for Instant {
    type Value = Option<DateTime<Utc>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an RFC 3339 time for {}", self.0)
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
                "{}: not an RFC 3339 time such as 2026-11-22T10:00:00Z: {:?}",
                self.0,
                capped(text).to_string()
            ))
        })
    }
}

/// A job's `run_at`.
pub(crate) fn run_at<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
    optional(d, "run_at")
}

/// A log line's `at`.
pub(crate) fn at<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
    optional(d, "at")
}

/// A job filter's `created_after`.
pub(crate) fn created_after<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<DateTime<Utc>>, D::Error> {
    optional(d, "created_after")
}

/// A job filter's `created_before`.
pub(crate) fn created_before<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<DateTime<Utc>>, D::Error> {
    optional(d, "created_before")
}
