//! A frame's `type` and `req`, read without building any of its values: what the server
//! needs to answer a large frame it will not read whole (a request before the peer's
//! `hello`). One pass over the item headers with `ciborium_ll` (as [`crate::read`] does),
//! every other value stepped over unkept: a frame of 2 MiB costs a few milliseconds,
//! where decoding it costs a quarter of a second (a debug build).

use ciborium_ll::{Decoder, Header};

use crate::Request;
use crate::codec::{DecodeError, MAX_DEPTH, type_error};

/// The longest key compared with `type` and `req`; longer keys are stepped over.
const MAX_KEY_BYTES: usize = 16;

/// How much of a string is read at a time while it is stepped over.
const CHUNK_BYTES: usize = 4096;

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
    let mut reader = Reader {
        decoder: Decoder::from(frame),
        chunk: vec![0; CHUNK_BYTES],
    };
    let Header::Map(len) = reader.pull()? else {
        return None;
    };
    let mut envelope = Envelope::default();
    let mut read = 0;
    while reader.more(len, read)? {
        read += 1;
        let key = match reader.pull()? {
            Header::Text(Some(len)) if len <= MAX_KEY_BYTES => Some(reader.string(Some(len))?),
            header => {
                reader.skip_after(header, 2)?;
                None
            }
        };
        match key.as_deref() {
            Some("type") => envelope.ty = Some(reader.text()?),
            Some("req") => match reader.pull()? {
                Header::Positive(n) => envelope.req = Some(n),
                header => reader.skip_after(header, 2)?,
            },
            _ => reader.skip(2)?,
        }
    }
    Some(envelope)
}

/// The frame's decoder, and the buffer strings are read through.
struct Reader<'a> {
    decoder: Decoder<&'a [u8]>,
    chunk: Vec<u8>,
}

impl Reader<'_> {
    /// The next item's header; `None` when the bytes are not well-formed.
    fn pull(&mut self) -> Option<Header> {
        self.decoder.pull().ok()
    }

    /// A text item whose header was [`Header::Text`] of `len`, whole; `None` when broken
    /// (its bytes no UTF-8 included).
    fn string(&mut self, len: Option<usize>) -> Option<String> {
        let mut text = String::new();
        let mut segments = self.decoder.text(len);
        while let Some(mut segment) = segments.pull().ok()? {
            while let Some(part) = segment.pull(&mut self.chunk).ok()? {
                text.push_str(part);
            }
        }
        Some(text)
    }

    /// A text item, whole; `Some(None)` for an item of another type (stepped over), `None`
    /// when broken.
    fn text(&mut self) -> Option<Option<String>> {
        match self.pull()? {
            Header::Text(len) => self.string(len).map(Some),
            header => {
                self.skip_after(header, 2)?;
                Some(None)
            }
        }
    }

    /// Steps over the next item, `depth` levels down.
    fn skip(&mut self, depth: usize) -> Option<()> {
        let header = self.pull()?;
        self.skip_after(header, depth)
    }

    /// Steps over the rest of the item whose header was `header`, `depth` levels down.
    fn skip_after(&mut self, header: Header, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match header {
            Header::Text(len) => {
                self.string(len)?;
            }
            Header::Bytes(len) => {
                let mut segments = self.decoder.bytes(len);
                while let Some(mut segment) = segments.pull().ok()? {
                    while segment.pull(&mut self.chunk).ok()?.is_some() {}
                }
            }
            Header::Array(len) | Header::Map(len) => {
                let per_entry = if matches!(header, Header::Map(_)) {
                    2
                } else {
                    1
                };
                let mut read = 0;
                while self.more(len, read)? {
                    read += 1;
                    for _ in 0..per_entry {
                        self.skip(depth + 1)?;
                    }
                }
            }
            Header::Tag(_) => self.skip(depth + 1)?,
            // A break where no indefinite-length item is open.
            Header::Break => return None,
            Header::Positive(_) | Header::Negative(_) | Header::Float(_) | Header::Simple(_) => {}
        }
        Some(())
    }

    /// Whether a container of `len` items (`None`: until a break) that has `read` so far
    /// has another; a break is stepped over.
    fn more(&mut self, len: Option<usize>, read: usize) -> Option<bool> {
        match len {
            Some(len) => Some(read < len),
            None => match self.pull()? {
                Header::Break => Some(false),
                header => {
                    self.decoder.push(header);
                    Some(true)
                }
            },
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
