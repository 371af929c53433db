//! Reading the maps nested in a request (`job`, `filter`, `update`, the items of `jobs`,
//! `leases`, `lines` and `outcomes`) as maps only.
//!
//! A request's fields reach serde through its buffer for the `type`-tagged enum, which
//! lets a struct be read from an array, field by field in order: `"filter": []` was an
//! empty filter, `"filter": ["mail"]` a filter on the queue `mail`. These helpers take the
//! value back out of that buffer and read it as CBOR again, where a struct must be a map.
//! Use with `#[serde(deserialize_with = "map_only::filter")]` (and `default` for an
//! optional field).

use ciborium::Value;
use serde::de::{DeserializeOwned, Error};
use serde::{Deserialize, Deserializer};

/// What a value is, for a message.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Integer(_) => "an integer",
        Value::Bytes(_) => "a byte string",
        Value::Float(_) => "a float",
        Value::Text(_) => "a text",
        Value::Bool(_) => "a boolean",
        Value::Null => "null",
        Value::Tag(..) => "a tagged value",
        Value::Array(_) => "an array",
        Value::Map(_) => "a map",
        _ => "another value",
    }
}

/// `value` as a `T`, refused unless it is a map.
fn from_map<T: DeserializeOwned, E: Error>(what: &str, value: Value) -> Result<T, E> {
    if !value.is_map() {
        return Err(E::custom(format!(
            "{what} must be a map, got {}",
            kind(&value)
        )));
    }
    value.deserialized().map_err(|e| {
        let ciborium::value::Error::Custom(why) = e;
        E::custom(format!("{what}: {why}"))
    })
}

/// One map.
fn one<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D, what: &str) -> Result<T, D::Error> {
    from_map(what, Value::deserialize(d)?)
}

/// An array of maps.
fn each<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
    what: &str,
) -> Result<Vec<T>, D::Error> {
    match Value::deserialize(d)? {
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| from_map(&format!("{what}[{i}]"), item))
            .collect(),
        other => Err(D::Error::custom(format!(
            "{what} must be an array, got {}",
            kind(&other)
        ))),
    }
}

/// `submit`'s `job`.
pub(crate) fn job<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<T, D::Error> {
    one(d, "job")
}

/// `list_jobs`'s `filter`.
pub(crate) fn filter<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<T, D::Error> {
    one(d, "filter")
}

/// `update_queue`'s `update`.
pub(crate) fn update<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<T, D::Error> {
    one(d, "update")
}

/// `submit_batch`'s `jobs`.
pub(crate) fn jobs<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    each(d, "jobs")
}

/// `heartbeat`'s `leases`.
pub(crate) fn leases<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    each(d, "leases")
}

/// `log`'s `lines`.
pub(crate) fn lines<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    each(d, "lines")
}

/// `outcomes`'s `outcomes`.
pub(crate) fn outcomes<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    each(d, "outcomes")
}
