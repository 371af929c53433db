//! [`Object`]: a request body (or part of one) that must be a JSON object.
//!
//! serde's derived `Deserialize` for a struct also accepts a JSON array, reading the fields
//! by position (`[5, 2]` would set the first two limits): a caller's mistake would then be
//! taken for a request. Wrapping the type in [`Object`] accepts only `{…}`; the rest
//! (unknown fields, types) is left to the wrapped type.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// `T`, read only from a JSON object.
#[derive(Debug)]
pub(crate) struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for Fields<T> {
            type Value = T;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }

        deserializer
            .deserialize_map(Fields(PhantomData))
            .map(Object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Pair {
        a: u32,
        #[serde(default)]
        b: Option<u32>,
    }

    #[test]
    fn only_objects_are_read() {
        let ok: Result<Object<Pair>, _> = serde_json::from_str(r#"{"a": 1}"#);
        assert_eq!(ok.ok().map(|o| o.0), Some(Pair { a: 1, b: None }));
        for bad in ["[1, 2]", "3", "\"a\"", "null", r#"{"a": 1, "c": 2}"#, "{}"] {
            let parsed: Result<Object<Pair>, _> = serde_json::from_str(bad);
            assert!(parsed.is_err(), "{bad} accepted");
        }
        let array: Result<Object<Pair>, _> = serde_json::from_str("[1, 2]");
        let message = array.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("expected a JSON object"), "{message}");
    }
}
