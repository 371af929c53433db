//! The first step of decoding: a frame's bytes as one CBOR value, read header by header
//! under the rules of §2 of `docs/protocol.md`.
//!
//! ciborium's own reader cannot enforce them: it reads CBOR `undefined` as `null`, and
//! serde_json then turns NaN and ±Infinity into `null` too, so a job's `args` would be
//! stored other than sent. Reading the headers here (with `ciborium_ll`) sees each value
//! as sent. Two kinds of fault are told apart:
//!
//! - the bytes are not one well-formed CBOR item, or nest too deep: the frame cannot be
//!   read at all ([`read`] fails; `bad_frame`);
//! - the item is well-formed but holds a value the protocol has no use for (`undefined`,
//!   a non-finite float, a byte string, an integer below -2^63, a tag, a map key that is
//!   not text): it is read on, so that the request's `req` can still be answered, and the
//!   first such value is named by its path in [`Read::refused`] (`invalid`, for a
//!   request; a reply is read as ciborium would: `undefined` as null, the rest as sent).
//!
//! Every value of the protocol is text, a number, a boolean, null, an array or a map with
//! text keys: what JSON holds, as `args` and `meta` are JSON. A byte string is refused
//! wherever it is (serde would read one as text, where a field wants text), and so is an
//! integer that JSON numbers, read as 64-bit integers, cannot hold exactly: CBOR's
//! negative integers reach -2^64, and a bignum (tags 2 and 3) any size.

use ciborium::Value;
use ciborium::value::Integer;
use ciborium_ll::{Decoder, Header, simple};

use crate::codec::MAX_DEPTH;
use crate::path::{Step, written};

/// A frame read as one CBOR value.
#[derive(Debug)]
pub(crate) struct Read {
    /// The value.
    pub value: Value,
    /// How many bytes of the frame it took.
    pub len: usize,
    /// The first value the protocol does not take, as "path: why" (`job.args.x: NaN is
    /// not a JSON number`), or `None` when there is none.
    pub refused: Option<String>,
}

/// Reads the CBOR item at the start of `frame`; fails, with a sentence for people, when
/// it is not well-formed or nests deeper than [`MAX_DEPTH`].
pub(crate) fn read(frame: &[u8]) -> Result<Read, String> {
    let mut scratch = SCRATCH.take();
    scratch.resize(SCRATCH_BYTES, 0);
    let mut reader = Reader {
        decoder: Decoder::from(frame),
        path: Vec::new(),
        refused: None,
        scratch,
    };
    let value = reader.item(1);
    let len = reader.decoder.offset();
    SCRATCH.set(reader.scratch);
    Ok(Read {
        value: value?,
        len,
        refused: reader.refused,
    })
}

/// Why an integer beyond 64 bits is refused, after what it is.
const WIDE: &str = "does not fit in 64 bits: numbers are JSON numbers, read as 64-bit \
                    integers or doubles; send it as a string";

/// CBOR's tags of an unsigned and a negative bignum (RFC 8949 §3.4.3).
const BIGNUM: u64 = 2;
const NEGATIVE_BIGNUM: u64 = 3;

/// How much of a text or byte string is copied at a time.
const SCRATCH_BYTES: usize = 4096;

thread_local! {
    /// The copy buffer, kept per thread between frames: a frame is read on every request
    /// and every reply, and a fresh buffer each time cost an allocation and 4 KiB zeroed.
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

struct Reader<'a> {
    decoder: Decoder<&'a [u8]>,
    /// Where the item being read sits; a map's key is moved here while its value is read
    /// (not copied).
    path: Vec<Step>,
    refused: Option<String>,
    scratch: Vec<u8>,
}

/// Why the bytes cannot be read, in words.
fn broken<E>(e: ciborium_ll::Error<E>) -> String {
    match e {
        ciborium_ll::Error::Io(_) => "not CBOR: the frame ends in the middle of a value".to_owned(),
        ciborium_ll::Error::Syntax(at) => {
            format!("not CBOR: the bytes at offset {at} are not well-formed")
        }
    }
}

impl Reader<'_> {
    /// Notes the first refused value, at the current path.
    fn refuse(&mut self, why: &str) {
        if self.refused.is_some() {
            return;
        }
        let path = written(&self.path);
        self.refused = Some(if path.is_empty() {
            why.to_owned()
        } else {
            format!("{path}: {why}")
        });
    }

    /// One item, `depth` levels down (the frame's own item is level 1).
    fn item(&mut self, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!("values nested deeper than {MAX_DEPTH} levels"));
        }
        let header = self.decoder.pull().map_err(broken)?;
        Ok(match header {
            Header::Positive(n) => Value::Integer(n.into()),
            Header::Negative(n) => {
                // CBOR's negative integers run down to -2^64, which Integer holds; JSON
                // numbers, read as 64-bit integers, stop at -2^63.
                let n = -1 - i128::from(n);
                if i64::try_from(n).is_err() {
                    self.refuse(&format!("the integer {n} {WIDE}"));
                }
                let n = Integer::try_from(n)
                    .map_err(|_| "a negative integer out of range".to_owned())?;
                Value::Integer(n)
            }
            Header::Float(x) => {
                if x.is_nan() {
                    self.refuse("NaN is not a JSON number");
                } else if x.is_infinite() {
                    self.refuse("Infinity is not a JSON number");
                }
                Value::Float(x)
            }
            Header::Simple(simple::FALSE) => Value::Bool(false),
            Header::Simple(simple::TRUE) => Value::Bool(true),
            Header::Simple(simple::NULL) => Value::Null,
            Header::Simple(simple::UNDEFINED) => {
                self.refuse("undefined is not a JSON value (send null, or leave the key out)");
                Value::Null
            }
            Header::Simple(n) => {
                return Err(format!(
                    "the CBOR simple value {n} is not one the protocol uses"
                ));
            }
            Header::Tag(tag @ (BIGNUM | NEGATIVE_BIGNUM)) => {
                self.refuse(&format!("an integer in a CBOR bignum (tag {tag}) {WIDE}"));
                Value::Tag(tag, Box::new(self.item(depth + 1)?))
            }
            Header::Tag(tag) => {
                self.refuse(&format!(
                    "a CBOR tag ({tag}): the protocol uses none, send the value untagged"
                ));
                Value::Tag(tag, Box::new(self.item(depth + 1)?))
            }
            Header::Break => {
                return Err("not CBOR: a break code outside an indefinite-length item".into());
            }
            Header::Bytes(len) => {
                let mut bytes = Vec::new();
                let mut segments = self.decoder.bytes(len);
                while let Some(mut segment) = segments.pull().map_err(broken)? {
                    while let Some(chunk) = segment.pull(&mut self.scratch).map_err(broken)? {
                        bytes.extend_from_slice(chunk);
                    }
                }
                self.refuse(
                    "a byte string: the protocol's values are JSON values, send text as a \
                     CBOR text string",
                );
                Value::Bytes(bytes)
            }
            Header::Text(len) => Value::Text(self.text(len)?),
            Header::Array(len) => {
                let mut items = Vec::new();
                while self.more(len, items.len())? {
                    self.path.push(Step::Index(items.len()));
                    items.push(self.item(depth + 1)?);
                    self.path.pop();
                }
                Value::Array(items)
            }
            Header::Map(len) => {
                let mut entries = Vec::new();
                while self.more(len, entries.len())? {
                    let clean = self.refused.is_none();
                    let key = self.item(depth + 1)?;
                    let text = key.is_text();
                    self.path.push(Step::Key(key));
                    if !text {
                        // What is wrong with the key itself (a byte string, a tag) matters
                        // less than that it is not text.
                        if clean {
                            self.refused = None;
                        }
                        self.refuse("map keys must be text");
                    }
                    let value = self.item(depth + 1)?;
                    let key = match self.path.pop() {
                        Some(Step::Key(key)) => key,
                        _ => Value::Null,
                    };
                    entries.push((key, value));
                }
                Value::Map(entries)
            }
        })
    }

    /// A text item's segments, joined.
    fn text(&mut self, len: Option<usize>) -> Result<String, String> {
        let mut text = String::with_capacity(len.unwrap_or(0).min(SCRATCH_BYTES));
        let mut segments = self.decoder.text(len);
        while let Some(mut segment) = segments.pull().map_err(broken)? {
            while let Some(chunk) = segment.pull(&mut self.scratch).map_err(broken)? {
                text.push_str(chunk);
            }
        }
        Ok(text)
    }

    /// Whether a container of `len` items (`None`: until a break) that has `read` so far
    /// has another.
    fn more(&mut self, len: Option<usize>, read: usize) -> Result<bool, String> {
        match len {
            Some(len) => Ok(read < len),
            None => match self.decoder.pull().map_err(broken)? {
                Header::Break => Ok(false),
                header => {
                    self.decoder.push(header);
                    Ok(true)
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(bytes: &[u8]) -> Option<String> {
        read(bytes).expect("well-formed").refused
    }

    #[test]
    fn values_outside_json_are_named_by_their_path() {
        // {"job": {"args": {"x": [1, NaN]}}}
        let nan = b"\xa1\x63job\xa1\x64args\xa1\x61x\x82\x01\xf9\x7e\x00";
        assert_eq!(
            refused(nan).as_deref(),
            Some("job.args.x[1]: NaN is not a JSON number")
        );
        // {"meta": {"a": -Infinity}} as a double.
        let inf = b"\xa1\x64meta\xa1\x61a\xfb\xff\xf0\x00\x00\x00\x00\x00\x00";
        assert_eq!(
            refused(inf).as_deref(),
            Some("meta.a: Infinity is not a JSON number")
        );
        // {"fields": {"u": undefined}}, with an indefinite-length map inside.
        let undefined = b"\xa1\x66fields\xbf\x61u\xf7\xff";
        let why = refused(undefined).expect("refused");
        assert!(why.starts_with("fields.u: undefined"), "{why}");
        // {1: 2}
        assert_eq!(
            refused(b"\xa1\x01\x02").as_deref(),
            Some("?: map keys must be text")
        );
        // A tag: 37 over 16 bytes.
        let mut tagged = b"\xa1\x62id\xd8\x25\x50".to_vec();
        tagged.extend([0; 16]);
        assert!(
            refused(&tagged)
                .expect("refused")
                .starts_with("id: a CBOR tag (37)")
        );
        // A byte string, anywhere: {"job": {"kind": h'6b'}}, {"a": [h'00']}.
        for bytes in [
            &b"\xa1\x63job\xa1\x64kind\x41k"[..],
            b"\xa1\x61a\x81\x41\x00",
        ] {
            let why = refused(bytes).expect("refused");
            assert!(
                why.starts_with("job.kind: a byte string")
                    || why.starts_with("a[0]: a byte string"),
                "{why}"
            );
        }
        // A byte-string key is a key that is not text.
        assert_eq!(
            refused(b"\xa1\x41k\x01").as_deref(),
            Some("?: map keys must be text")
        );
        // Integers JSON numbers cannot hold exactly: below -2^63, or in a bignum.
        let wide = [
            (
                &b"\xa1\x61n\x3b\x80\x00\x00\x00\x00\x00\x00\x00"[..],
                "n: the integer -9223372036854775809 does not fit in 64 bits",
            ),
            (
                b"\xa1\x61n\x3b\xff\xff\xff\xff\xff\xff\xff\xff",
                "n: the integer -18446744073709551616 does not fit in 64 bits",
            ),
            (
                b"\xa1\x61n\xc2\x49\x01\x00\x00\x00\x00\x00\x00\x00\x00",
                "n: an integer in a CBOR bignum (tag 2) does not fit in 64 bits",
            ),
        ];
        for (frame, why) in wide {
            let refused = refused(frame).expect("refused");
            assert!(refused.starts_with(why), "{refused}");
            assert!(refused.ends_with("send it as a string"), "{refused}");
        }
        // The 64-bit extremes pass: -2^63 and 2^64 - 1.
        assert_eq!(refused(b"\x3b\x7f\xff\xff\xff\xff\xff\xff\xff"), None);
        assert_eq!(refused(b"\x1b\xff\xff\xff\xff\xff\xff\xff\xff"), None);
        // Ordinary values pass, and read as ciborium reads them.
        let fine = b"\xa3\x61a\xfb\x3f\xb9\x99\x99\x99\x99\x99\x9a\x61b\xf6\x61c\x7f\x61x\x61y\xff";
        let read = read(fine).expect("well-formed");
        assert_eq!(read.refused, None);
        assert_eq!(read.len, fine.len());
        let theirs: Value = ciborium::from_reader(&fine[..]).expect("CBOR");
        assert_eq!(read.value, theirs);
    }

    #[test]
    fn broken_frames_say_what_is_wrong_in_words() {
        assert_eq!(
            read(b"\xa1\x63jo").err().as_deref(),
            Some("not CBOR: the frame ends in the middle of a value")
        );
        assert_eq!(
            read(b"").err().as_deref(),
            Some("not CBOR: the frame ends in the middle of a value")
        );
        assert_eq!(
            read(b"\xff").err().as_deref(),
            Some("not CBOR: a break code outside an indefinite-length item")
        );
        assert!(read(b"\x1c").expect_err("reserved").contains("not CBOR"));
        // A text of 2^60 bytes announced in a few: nothing of that size is allocated.
        assert!(read(b"\x7b\x10\x00\x00\x00\x00\x00\x00\x00abc").is_err());
    }
}
