//! A frame's `type` and `req`, read without building any of its values: what the server
//! needs to answer a large frame it will not read whole (a request before the peer's
//! `hello`, which anyone who reaches the endpoint may send). One pass over the item heads
//! (RFC 8949 §3) of the slice, strings stepped over by their length, unread.
//!
//! This runs on the server's one loop, so its speed bounds what a peer without a token can
//! take of it: strings are stepped over by their length, never copied nor checked as
//! UTF-8. A reader that copies them through a buffer, as `ciborium_ll`'s does (the one
//! [`crate::read`] decodes frames with), is about 12 times slower on a frame of many short
//! strings (docs/benchmarks.md).

use crate::Request;
use crate::codec::{DecodeError, MAX_DEPTH, type_error};

/// The longest key compared with `type` and `req`; longer keys are stepped over.
const MAX_KEY_BYTES: u64 = 16;

/// CBOR's major types (RFC 8949 §3.1).
const UNSIGNED: u8 = 0;
const BYTES: u8 = 2;
const TEXT: u8 = 3;
const ARRAY: u8 = 4;
const MAP: u8 = 5;
const TAG: u8 = 6;
const SIMPLE: u8 = 7;

/// The top-level `type` and `req` of a frame.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Envelope {
    /// The `type`: `None` when the map has none, `Some(None)` when it is not text.
    pub ty: Option<Option<String>>,
    /// The `req`, when it is an unsigned integer.
    pub req: Option<u64>,
}

impl Envelope {
    /// The refusal [`crate::decode_request`] answers a frame of this envelope with for its
    /// `type` (none, not text, or not a request's), or `None` when it names a request.
    pub fn type_refusal(&self) -> Option<DecodeError> {
        let ty = self.ty.as_ref().map(Option::as_deref);
        type_error(ty, self.req, &Request::TYPES)
    }
}

/// Reads the `type` and `req` of the CBOR map at the start of `frame`, stepping over every
/// other value; `None` when the frame does not start with a well-formed map (nesting at
/// most [`MAX_DEPTH`] levels). What follows the map is not looked at.
pub fn envelope(frame: &[u8]) -> Option<Envelope> {
    let mut cursor = Cursor {
        bytes: frame,
        at: 0,
    };
    let (MAP, len) = cursor.head()? else {
        return None;
    };
    let mut envelope = Envelope::default();
    let mut read = 0;
    while cursor.more(len, read)? {
        read += 1;
        let key = match cursor.head()? {
            (TEXT, Some(len)) if len <= MAX_KEY_BYTES => Some(cursor.take(len)?),
            head => {
                cursor.skip_after(head, 2)?;
                None
            }
        };
        match key {
            Some(b"type") => envelope.ty = Some(cursor.text()?),
            Some(b"req") => match cursor.head()? {
                (UNSIGNED, Some(n)) => envelope.req = Some(n),
                head => cursor.skip_after(head, 2)?,
            },
            _ => cursor.skip(2)?,
        }
    }
    Some(envelope)
}

/// A position in a frame.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    /// The next `n` bytes, stepped over.
    fn take(&mut self, n: u64) -> Option<&'a [u8]> {
        let end = self.at.checked_add(usize::try_from(n).ok()?)?;
        let taken = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(taken)
    }

    /// An item's head: its major type and argument (`None`: indefinite length, or the
    /// break code for [`SIMPLE`]). Floats' and simple values' arguments are their bits.
    fn head(&mut self) -> Option<(u8, Option<u64>)> {
        let first = *self.take(1)?.first()?;
        let (major, info) = (first >> 5, first & 0x1f);
        let argument = match info {
            0..=23 => Some(u64::from(info)),
            24..=27 => {
                let bytes = self.take(1 << (info - 24))?;
                Some(bytes.iter().fold(0u64, |n, b| (n << 8) | u64::from(*b)))
            }
            31 if matches!(major, BYTES | TEXT | ARRAY | MAP | SIMPLE) => None,
            _ => return None,
        };
        Some((major, argument))
    }

    /// A text item, whole; `Some(None)` for an item of another type (stepped over), `None`
    /// when broken (its bytes are no UTF-8 too).
    fn text(&mut self) -> Option<Option<String>> {
        let text = match self.head()? {
            (TEXT, Some(len)) => self.take(len)?.to_vec(),
            (TEXT, None) => {
                let mut text = Vec::new();
                loop {
                    match self.head()? {
                        (SIMPLE, None) => break,
                        (TEXT, Some(len)) => text.extend_from_slice(self.take(len)?),
                        _ => return None,
                    }
                }
                text
            }
            head => {
                self.skip_after(head, 2)?;
                return Some(None);
            }
        };
        String::from_utf8(text).ok().map(Some)
    }

    /// Steps over the next item, `depth` levels down.
    fn skip(&mut self, depth: usize) -> Option<()> {
        let head = self.head()?;
        self.skip_after(head, depth)
    }

    /// Steps over the rest of the item whose head was `head`, `depth` levels down.
    fn skip_after(&mut self, head: (u8, Option<u64>), depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match head {
            (BYTES | TEXT, Some(len)) => {
                self.take(len)?;
            }
            (major @ (BYTES | TEXT), None) => {
                // Chunks of the same major type, each of definite length, until a break.
                loop {
                    match self.head()? {
                        (SIMPLE, None) => break,
                        (chunk, Some(len)) if chunk == major => {
                            self.take(len)?;
                        }
                        _ => return None,
                    }
                }
            }
            (ARRAY | MAP, len) => {
                let per_entry = if head.0 == MAP { 2 } else { 1 };
                let mut read = 0;
                while self.more(len, read)? {
                    read += 1;
                    for _ in 0..per_entry {
                        self.skip(depth + 1)?;
                    }
                }
            }
            (TAG, Some(_)) => self.skip(depth + 1)?,
            // A break where no indefinite-length item is open.
            (SIMPLE, None) => return None,
            _ => {}
        }
        Some(())
    }

    /// Whether a container of `len` items (`None`: until a break) that has `read` so far
    /// has another; a break is stepped over.
    fn more(&mut self, len: Option<u64>, read: u64) -> Option<bool> {
        match (len, self.bytes.get(self.at)) {
            (Some(len), _) => Some(read < len),
            (None, Some(0xff)) => {
                self.at += 1;
                Some(false)
            }
            (None, Some(_)) => Some(true),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ciborium::Value;

    fn cbor(value: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        ciborium::into_writer(value, &mut out).expect("encodable");
        out
    }

    fn text(s: &str) -> Value {
        Value::Text(s.to_owned())
    }

    #[test]
    fn type_and_req_are_read_wherever_they_are_in_the_map() {
        let item = Value::Map(vec![
            (text("id"), text("x")),
            (text("n"), Value::Float(0.5)),
            (text("big"), Value::Integer(u64::MAX.into())),
            (
                text("tagged"),
                Value::Tag(1, Box::new(Value::Integer(5.into()))),
            ),
        ]);
        let frame = cbor(&Value::Map(vec![
            (text("outcomes"), Value::Array(vec![item; 3])),
            (Value::Integer(7.into()), Value::Bytes(vec![1, 2, 3])),
            (text("type"), text("outcomes")),
            (text("req"), Value::Integer(42.into())),
        ]));
        let read = envelope(&frame).expect("a map");
        assert_eq!(read.ty, Some(Some("outcomes".to_owned())));
        assert_eq!(read.req, Some(42));
        assert!(read.type_refusal().is_none());
    }

    #[test]
    fn indefinite_lengths_are_stepped_over() {
        // {_ "a": [_ 1, (_ "x" "y")], "req": 3, "type": "status"}
        let mut frame = vec![
            0xbf, 0x61, b'a', 0x9f, 0x01, 0x7f, 0x61, b'x', 0x61, b'y', 0xff,
        ];
        frame.extend([0xff, 0x63, b'r', b'e', b'q', 0x03]);
        frame.extend([0x64, b't', b'y', b'p', b'e', 0x66]);
        frame.extend(b"status");
        frame.push(0xff);
        let read = envelope(&frame).expect("a map");
        assert_eq!(read.ty, Some(Some("status".to_owned())));
        assert_eq!(read.req, Some(3));
    }

    #[test]
    fn a_type_that_names_no_request_is_refused_as_decoding_refuses_it() {
        let refusal = |entries: Vec<(Value, Value)>| {
            let frame = cbor(&Value::Map(entries));
            let read = envelope(&frame).expect("a map").type_refusal();
            let decoded = crate::decode_request(&frame, usize::MAX).expect_err("refused");
            let read = read.expect("refused");
            assert_eq!((read.code, read.req), (decoded.code, decoded.req));
            assert_eq!(read.message, decoded.message);
            read
        };
        let r = refusal(vec![
            (text("type"), Value::Integer(1.into())),
            (text("req"), Value::Integer(5.into())),
        ]);
        assert!(r.message.contains("must be a string"), "{}", r.message);
        let r = refusal(vec![(text("req"), Value::Integer((-1).into()))]);
        assert_eq!(r.req, None);
        let long = "t".repeat(100_000);
        let r = refusal(vec![(text("type"), text(&long))]);
        assert!(r.message.len() < 1_000, "{}", r.message);
    }

    #[test]
    fn frames_that_are_not_one_map_are_none() {
        assert_eq!(envelope(&cbor(&Value::Array(vec![]))), None);
        assert_eq!(envelope(&[0xa1, 0x61]), None, "cut in a key");
        assert_eq!(
            envelope(&[0xa1, 0x61, b'a', 0x5a, 0xff]),
            None,
            "cut in a length"
        );
        assert_eq!(envelope(&[0xbf, 0x61, b'a', 0x01]), None, "no break");
        assert_eq!(envelope(&[0xa1, 0x61, b'a', 0xff]), None, "a stray break");
        assert_eq!(
            envelope(&[0xa1, 0x61, b'a', 0x1c]),
            None,
            "a reserved length"
        );
        // Arrays nested past the depth limit.
        let mut deep = vec![0xa1, 0x61, b'a'];
        deep.extend(std::iter::repeat_n(0x81, MAX_DEPTH + 1));
        deep.push(0x00);
        assert_eq!(envelope(&deep), None);
    }
}
