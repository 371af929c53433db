//! JSON numbers as hopper holds them, and the integers it refuses in JSON text.
//!
//! A job's `args` and `meta` are `serde_json::Value`s, and serde_json is built without
//! `arbitrary_precision` (that feature would change how a value is written to CBOR, on the
//! wire). So a JSON number is held as a 64-bit integer when it is an integer from -2^63 to
//! 2^64 - 1, and as the nearest double otherwise: `123456789012345678901` would become
//! `123456789012345680000`, stored other than sent. Send a larger integer as a string.
//!
//! Every way in refuses such an integer before anything is written, naming its path:
//!
//! - JSON text (the HTTP API's bodies, `hopper enqueue --args` and `--meta`): [`check_integers`],
//!   run on text that parsed;
//! - the wire protocol: its frame reader refuses CBOR integers below -2^63 and bignums;
//! - Rust values: serde_json refuses to serialize an `i128` or `u128` beyond 64 bits, and a
//!   `serde_json::Value` holds none.
//!
//! A row written by SQL cannot be refused for a wide integer: PostgreSQL's `jsonb` keeps
//! every number exactly, and a worker reads it as above (an integer beyond 64 bits, or a
//! decimal of more digits than a double holds, reaches it rounded). `hopper.enqueue` does
//! refuse what hopper cannot read at all: a number beyond a double's range, and nesting
//! deeper than 127 levels (migration 0014). `jsonb` keeps a number's value, not its
//! writing: a whole double written with an exponent (`1e19`, as serde_json writes the
//! doubles from 10^16) reads back as an integer when one holds it.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::log_limit::capped;
use crate::value_path::{Step, written};

/// Refuses an integer literal of `text` (JSON that parsed) that no 64-bit integer holds,
/// which serde_json would read as the nearest double: the message names its path from
/// `root`, the name of the whole (`args.id: the integer 123456789012345678901 does not fit
/// in 64 bits: …`; with `root` empty, `id: …`).
///
/// A number written with a fraction or an exponent (`1.5`, `1e21`) is a double by its own
/// writing, and passes. The check reads each byte of `text` once; only a text it refuses
/// is parsed again, to find the path.
///
/// ```
/// use hopper_core::json_numbers::check_integers;
///
/// assert!(check_integers(r#"{"n": 18446744073709551615, "x": 1e30}"#, "args").is_ok());
/// let why = check_integers(r#"{"n": [1, 18446744073709551616]}"#, "args").unwrap_err();
/// assert!(why.starts_with("args.n[1]: the integer 18446744073709551616 does not fit in 64 bits"));
/// ```
pub fn check_integers(text: &str, root: &str) -> Result<(), String> {
    let Some((index, literal)) = first_wide_integer(text) else {
        return Ok(());
    };
    let why = format!(
        "the integer {} does not fit in 64 bits: numbers are JSON numbers, read as 64-bit \
         integers or doubles; send it as a string",
        capped(literal)
    );
    let path = path_of_number(text, index, root).unwrap_or_else(|| root.to_owned());
    Err(if path.is_empty() {
        why
    } else {
        format!("{path}: {why}")
    })
}

/// The first integer literal outside the 64-bit integers in `text`, with how many numbers
/// come before it. `text` is read as JSON that parsed: outside strings, a number is a run
/// of `-+.eE` and digits that starts with `-` or a digit; a string runs to the next `"` not
/// escaped by a backslash.
fn first_wide_integer(text: &str) -> Option<(usize, &str)> {
    let bytes = text.as_bytes();
    let (mut at, mut numbers) = (0, 0);
    while at < bytes.len() {
        match bytes[at] {
            b'"' => {
                at += 1;
                while at < bytes.len() && bytes[at] != b'"' {
                    at += if bytes[at] == b'\\' { 2 } else { 1 };
                }
                at += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = at;
                while at < bytes.len()
                    && matches!(bytes[at], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    at += 1;
                }
                // Every byte of the run is ASCII: both ends are character boundaries.
                let literal = &text[start..at];
                let integer = !literal.contains(['.', 'e', 'E']);
                if integer && literal.parse::<i64>().is_err() && literal.parse::<u64>().is_err() {
                    return Some((numbers, literal));
                }
                numbers += 1;
            }
            _ => at += 1,
        }
    }
    None
}

/// The path from `root` of the number `index` (counted from 0, in the order written) in
/// `text`, read by serde_json; `None` when `text` does not parse that far.
fn path_of_number(text: &str, index: usize, root: &str) -> Option<String> {
    let mut walk = Walk {
        path: if root.is_empty() {
            Vec::new()
        } else {
            vec![Place::Key(root.to_owned())]
        },
        seen: 0,
        index,
        found: None,
    };
    // The walk ends with an error as soon as it has the path.
    let _ = (&mut walk).deserialize(&mut serde_json::Deserializer::from_str(text));
    walk.found
}

/// A walk through a JSON value that counts its numbers and notes the path of one.
struct Walk {
    /// Where the walk is.
    path: Vec<Place>,
    seen: usize,
    index: usize,
    found: Option<String>,
}

/// One step of a walk's path.
enum Place {
    Key(String),
    Index(usize),
}

impl Walk {
    /// Counts a number; the one sought ends the walk.
    fn number<E: de::Error>(&mut self) -> Result<(), E> {
        if self.seen == self.index {
            self.found = Some(written(self.path.iter().map(|place| match place {
                Place::Key(key) => Step::Key(key),
                Place::Index(i) => Step::Index(*i),
            })));
            return Err(E::custom("found"));
        }
        self.seen += 1;
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for &mut Walk {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for &mut Walk {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.number()
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.number()
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.number()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        for i in 0.. {
            self.path.push(Place::Index(i));
            let item = seq.next_element_seed(&mut *self)?;
            self.path.pop();
            if item.is_none() {
                break;
            }
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            self.path.push(Place::Key(key));
            map.next_value_seed(&mut *self)?;
            self.path.pop();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_beyond_64_bits_are_refused_naming_their_path() {
        for (text, why) in [
            ("123456789012345678901", "the integer 123456789012345678901"),
            (
                r#"{"a": {"b": [0, -9223372036854775809]}}"#,
                "a.b[1]: the integer -9223372036854775809",
            ),
            (
                r#"[{"x": 1.5}, {"y": 18446744073709551616}]"#,
                "[1].y: the integer 18446744073709551616",
            ),
            // Numbers inside strings, keys included, are text; escaped quotes do not end them.
            (
                r#"{"k\"1 2": "3 \" 99999999999999999999", "n": 99999999999999999999}"#,
                "n: the integer 99999999999999999999",
            ),
        ] {
            let refused = check_integers(text, "").expect_err(text);
            assert!(
                refused.starts_with(&format!("{why} does not fit in 64 bits")),
                "{refused}"
            );
            assert!(refused.ends_with("send it as a string"), "{refused}");
        }
        // A long literal (within the doubles, or it would not have parsed) is quoted cut.
        let long = format!("[1{}]", "0".repeat(300));
        let refused = check_integers(&long, "").expect_err("refused");
        assert!(refused.starts_with("[0]: the integer 1000"), "{refused}");
        assert!(refused.contains("…(301 bytes) does not fit"), "{refused}");
    }

    #[test]
    fn what_64_bits_hold_and_doubles_pass() {
        for text in [
            r#"{"min": -9223372036854775808, "max": 18446744073709551615, "zero": -0}"#,
            r#"[1e400, 1.5, -2E+3, 123456789012345678901.0, 0.1]"#,
            r#"{"s": "123456789012345678901", "123456789012345678901": true, "e": "\\"}"#,
            "null",
        ] {
            assert_eq!(check_integers(text, "args"), Ok(()), "{text}");
        }
    }

    #[test]
    fn the_path_is_that_of_the_number_counted_in_order() {
        let text = r#"{"z": [1, 2.5, {"k": -3}], "a": 4e0, "m": 5}"#;
        for (index, path) in [(0, "z[0]"), (1, "z[1]"), (2, "z[2].k"), (3, "a"), (4, "m")] {
            assert_eq!(path_of_number(text, index, "").as_deref(), Some(path));
        }
        assert_eq!(path_of_number(text, 5, ""), None);
        assert_eq!(
            path_of_number("[[7]]", 0, "args").as_deref(),
            Some("args[0][0]")
        );
        assert_eq!(
            check_integers("123456789012345678901", "args").map_err(|e| e[..36].to_owned()),
            Err("args: the integer 123456789012345678".to_owned())
        );
    }
}
