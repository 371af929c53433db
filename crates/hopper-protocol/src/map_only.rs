//! Reading the maps nested in a request (`job`, `filter`, `update`, the items of `jobs`,
//! `leases`, `lines` and `outcomes`) as maps only.
//!
//! A request's fields reach serde through its buffer for the `type`-tagged enum, which
//! lets a struct be read from an array, field by field in order: `"filter": []` was an
//! empty filter, `"filter": ["mail"]` a filter on the queue `mail`. These helpers take the
//! value back out of that buffer and read it as CBOR again, where a struct must be a map.
//! Use with `#[serde(deserialize_with = "map_only::one")]` for a map, `map_only::each`
//! for an array of maps (and `default` for an optional field). Their messages name no
//! field: the decoder finds the path of the value at fault (`crate::locate`).

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
fn from_map<T: DeserializeOwned, E: Error>(value: Value) -> Result<T, E> {
    if !value.is_map() {
        return Err(E::custom(format!("must be a map, got {}", kind(&value))));
    }
    value.deserialized().map_err(|e| {
        let ciborium::value::Error::Custom(why) = e;
        E::custom(why)
    })
}

/// One map.
pub(crate) fn one<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<T, D::Error> {
    from_map(Value::deserialize(d)?)
}

/// An array of maps.
pub(crate) fn each<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    match Value::deserialize(d)? {
        Value::Array(items) => items.into_iter().map(from_map).collect(),
        other => Err(D::Error::custom(format!(
            "must be an array, got {}",
            kind(&other)
        ))),
    }
}
