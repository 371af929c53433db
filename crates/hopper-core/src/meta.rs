//! Job metadata: a JSON object stored beside a job's arguments, for what is about the job
//! rather than its work (the W3C trace context of the request that enqueued it, a tenant,
//! the user who asked for it). Handlers read it, the dashboard shows it, and the HTTP API
//! and the CLI find jobs by it (containment: every key and value given is in the job's
//! metadata). See `docs/job-meta-and-logs.md`.
//!
//! Two keys are reserved for the W3C trace context (<https://www.w3.org/TR/trace-context/>):
//! [`TRACEPARENT`] and [`TRACESTATE`]; when present they must be well-formed strings, so a
//! worker that continues the trace never meets a value it cannot parse.
//!
//! ```
//! use hopper_core::meta::{validate_meta, validate_traceparent};
//! use serde_json::json;
//!
//! let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
//! assert!(validate_traceparent(tp).is_ok());
//! assert!(validate_traceparent("00-0-0-0").is_err());
//! assert!(validate_meta(&json!({"traceparent": tp, "tenant": "acme"})).is_ok());
//! assert!(validate_meta(&json!(["not", "an", "object"])).is_err());
//! ```

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::json_numbers::check_integers;

/// The largest metadata accepted, as encoded JSON text (16 KiB). Metadata is read with
/// every claim, so it stays small; larger data belongs in the arguments or elsewhere.
pub const MAX_META_BYTES: usize = 16 * 1024;

/// The metadata key holding the W3C `traceparent` of the span that enqueued the job.
pub const TRACEPARENT: &str = "traceparent";

/// The metadata key holding the W3C `tracestate` that goes with [`TRACEPARENT`].
pub const TRACESTATE: &str = "tracestate";

/// The longest `tracestate` accepted, in bytes (the W3C recommendation: 512).
pub const MAX_TRACESTATE_LEN: usize = 512;

/// Empty metadata, as stored for a job that has none.
pub fn empty() -> Value {
    Value::Object(Map::new())
}

/// Checks metadata as every way in does: a JSON object of at most [`MAX_META_BYTES`],
/// no U+0000 anywhere (PostgreSQL's `jsonb` cannot store it), and well-formed trace
/// context under the reserved keys.
pub fn validate_meta(meta: &Value) -> Result<()> {
    let Value::Object(map) = meta else {
        return Err(Error::InvalidInput(format!(
            "meta must be a JSON object, got {}",
            json_type(meta)
        )));
    };
    validate_meta_map(map)
}

/// [`validate_meta`] for metadata already known to be an object.
pub fn validate_meta_map(map: &Map<String, Value>) -> Result<()> {
    if map.is_empty() {
        return Ok(());
    }
    let size = json_size(map);
    if size > MAX_META_BYTES {
        return Err(Error::InvalidInput(format!(
            "meta is {size} bytes as JSON, over the limit of {MAX_META_BYTES} bytes"
        )));
    }
    if map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)) {
        return Err(Error::InvalidInput(
            "meta must not contain the character U+0000 (\\u0000): PostgreSQL cannot store it in JSON"
                .into(),
        ));
    }
    if let Some(tp) = map.get(TRACEPARENT) {
        let Value::String(tp) = tp else {
            return Err(Error::InvalidInput(format!(
                "meta.traceparent must be a string, got {}",
                json_type(tp)
            )));
        };
        validate_traceparent(tp)?;
    }
    if let Some(ts) = map.get(TRACESTATE) {
        let Value::String(ts) = ts else {
            return Err(Error::InvalidInput(format!(
                "meta.tracestate must be a string, got {}",
                json_type(ts)
            )));
        };
        validate_tracestate(ts)?;
    }
    Ok(())
}

/// Checks a W3C `traceparent`: `version-traceid-parentid-flags` in lowercase hex (2, 32,
/// 16 and 2 digits), a version other than `ff`, neither id all zeros. Version `00` is
/// exactly 55 characters; a later version may append `-` and more, which is kept as sent.
pub fn validate_traceparent(tp: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::InvalidInput(format!(
            "traceparent {:?} is not a W3C traceparent (version-traceid-parentid-flags, e.g. \
             00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01): {why}",
            crate::log_limit::capped(tp).to_string()
        )))
    };
    let bytes = tp.as_bytes();
    if bytes.len() < 55 {
        return bad("too short");
    }
    let fields = [(0, 2), (3, 32), (36, 16), (53, 2)];
    for (start, len) in fields {
        let field = &bytes[start..start + len];
        if !field
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
        {
            return bad("fields must be lowercase hex");
        }
    }
    if [2, 35, 52].iter().any(|&i| bytes[i] != b'-') {
        return bad("fields must be separated by '-'");
    }
    match &tp[0..2] {
        "ff" => return bad("version ff is invalid"),
        "00" if bytes.len() != 55 => return bad("version 00 is exactly 55 characters"),
        _ if bytes.len() > 55 && bytes[55] != b'-' => return bad("junk after the flags"),
        _ => {}
    }
    if bytes.len() > 256 {
        return bad("longer than 256 characters");
    }
    if bytes[3..35].iter().all(|&b| b == b'0') {
        return bad("the trace id is all zeros");
    }
    if bytes[36..52].iter().all(|&b| b == b'0') {
        return bad("the parent id is all zeros");
    }
    Ok(())
}

/// Checks a W3C `tracestate`: at most [`MAX_TRACESTATE_LEN`] bytes of printable ASCII.
pub fn validate_tracestate(ts: &str) -> Result<()> {
    if ts.len() > MAX_TRACESTATE_LEN {
        return Err(Error::InvalidInput(format!(
            "tracestate is {} bytes, over the limit of {MAX_TRACESTATE_LEN}",
            ts.len()
        )));
    }
    if !ts.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(Error::InvalidInput(
            "tracestate must be printable ASCII".into(),
        ));
    }
    Ok(())
}

/// Checks a containment filter ([`crate::JobListParams::meta`]): a JSON object of at most
/// [`MAX_META_BYTES`] whose values are strings, numbers, booleans or null. A job matches
/// when its metadata has every key with an equal value. Nested values are refused, so the
/// filter means the same on every backend (PostgreSQL's `@>` and SQLite's JSON functions
/// differ on nested arrays).
pub fn validate_meta_filter(filter: &Value) -> Result<()> {
    let Value::Object(map) = filter else {
        return Err(Error::InvalidInput(format!(
            "a meta filter must be a JSON object, got {}",
            json_type(filter)
        )));
    };
    if let Some((key, v)) = map.iter().find(|(_, v)| v.is_object() || v.is_array()) {
        return Err(Error::InvalidInput(format!(
            "a meta filter matches top-level values only: {key:?} is {}",
            json_type(v)
        )));
    }
    let size = json_size(map);
    if size > MAX_META_BYTES {
        return Err(Error::InvalidInput(format!(
            "a meta filter is {size} bytes as JSON, over the limit of {MAX_META_BYTES} bytes"
        )));
    }
    if has_nul(filter) {
        return Err(Error::InvalidInput(
            "a meta filter must not contain U+0000".into(),
        ));
    }
    Ok(())
}

/// Parses a containment filter given as JSON text (a CLI flag, a query parameter) and
/// checks it ([`validate_meta_filter`]).
pub fn parse_meta_filter(text: &str) -> Result<Value> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| Error::InvalidInput(format!("the meta filter is not valid JSON: {e}")))?;
    check_integers(text, "the meta filter").map_err(Error::InvalidInput)?;
    validate_meta_filter(&value)?;
    Ok(value)
}

/// Parses metadata given as JSON text (a CLI flag, a query parameter) and checks it.
pub fn parse_meta(text: &str) -> Result<Map<String, Value>> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| Error::InvalidInput(format!("meta is not valid JSON: {e}")))?;
    check_integers(text, "meta").map_err(Error::InvalidInput)?;
    validate_meta(&value)?;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(Error::InvalidInput("meta must be a JSON object".into())),
    }
}

/// The name of a JSON value's type, for error messages.
pub(crate) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// True when a string or key anywhere in `v` holds U+0000.
pub(crate) fn has_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(fields) => fields.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// The size of `v` encoded as compact JSON, counted without allocating.
pub(crate) fn json_size(v: &impl serde::Serialize) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing a Value into an infallible sink cannot fail.
    let _ = serde_json::to_writer(&mut counter, v);
    counter.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparents_are_checked_field_by_field() {
        assert!(validate_traceparent(TP).is_ok());
        let future = format!("{}-extra", TP.replacen("00", "01", 1));
        assert!(validate_traceparent(&future).is_ok());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            &TP.to_uppercase(),
            &TP.replacen("00", "ff", 1),
            &format!("{TP}-x"),
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            &format!("01{}x", &TP[2..]),
        ] {
            assert!(validate_traceparent(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn meta_must_be_a_small_object_with_wellformed_trace_context() {
        assert!(validate_meta(&json!({})).is_ok());
        assert!(validate_meta(&json!({"traceparent": TP, "tracestate": "k=v"})).is_ok());
        for bad in [
            json!(null),
            json!([1]),
            json!("s"),
            json!({"traceparent": 1}),
            json!({"traceparent": "nope"}),
            json!({"tracestate": "x".repeat(MAX_TRACESTATE_LEN + 1)}),
            json!({"tracestate": "a\nb"}),
            json!({"k": "a\u{0}"}),
            json!({"big": "x".repeat(MAX_META_BYTES)}),
        ] {
            assert!(validate_meta(&bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn parse_meta_refuses_what_is_not_json_objects() {
        assert_eq!(parse_meta(r#"{"a":"b"}"#).ok().map(|m| m.len()), Some(1));
        assert!(parse_meta("{").is_err());
        assert!(parse_meta("[]").is_err());
        // An integer no 64-bit integer holds would be stored rounded.
        let wide = parse_meta(r#"{"n": 123456789012345678901}"#);
        assert!(
            matches!(&wide, Err(Error::InvalidInput(m)) if m.starts_with("meta.n: the integer 123456789012345678901 does not fit")),
            "{wide:?}"
        );
        let filter = parse_meta_filter(r#"{"n": -9223372036854775809}"#);
        assert!(
            matches!(&filter, Err(Error::InvalidInput(m)) if m.starts_with("the meta filter.n: the integer")),
            "{filter:?}"
        );
    }
}
