//! UUIDs as hyphenated strings on the wire.
//!
//! CBOR is not a human-readable format for serde, so `uuid::Uuid` would go out as a 16-byte
//! byte string, which other languages read as `bytes`. The protocol sends UUIDs as text:
//! `"0190f3c2-7a1e-7c3b-9d2e-5b8f1a2c3d4e"`. Use with `#[serde(with = "uuid_str")]`.

use hopper_core::log_limit::capped;
use serde::{Deserialize, Deserializer, Serializer};
use uuid::Uuid;

/// Writes `id` as a hyphenated string.
pub fn serialize<S: Serializer>(id: &Uuid, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&id.hyphenated())
}

/// Reads a UUID from a string (any form `Uuid::parse_str` accepts).
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Uuid, D::Error> {
    let text = String::deserialize(d)?;
    Uuid::parse_str(&text).map_err(|e| {
        serde::de::Error::custom(format!("bad UUID {:?}: {e}", capped(&text).to_string()))
    })
}

/// The same, for `Option<Uuid>` (absent or null is `None`).
pub mod option {
    use super::*;

    /// Writes `Some(id)` as a string and `None` as null.
    pub fn serialize<S: Serializer>(id: &Option<Uuid>, s: S) -> Result<S::Ok, S::Error> {
        match id {
            Some(id) => s.collect_str(&id.hyphenated()),
            None => s.serialize_none(),
        }
    }

    /// Reads a string or null.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Uuid>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(text) => Uuid::parse_str(&text).map(Some).map_err(|e| {
                serde::de::Error::custom(format!("bad UUID {:?}: {e}", capped(&text).to_string()))
            }),
            None => Ok(None),
        }
    }
}

/// The same, for `Vec<Uuid>`.
pub mod vec {
    use super::*;
    use serde::ser::SerializeSeq;

    /// Writes each id as a string.
    pub fn serialize<S: Serializer>(ids: &[Uuid], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(ids.len()))?;
        for id in ids {
            seq.serialize_element(&id.hyphenated().to_string())?;
        }
        seq.end()
    }

    /// Reads an array of strings.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Uuid>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|text| {
                Uuid::parse_str(text).map_err(|e| {
                    serde::de::Error::custom(format!(
                        "bad UUID {:?}: {e}",
                        capped(text).to_string()
                    ))
                })
            })
            .collect()
    }
}
