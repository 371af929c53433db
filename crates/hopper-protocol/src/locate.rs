//! Finding the field at fault when a frame's map does not decode as its message.
//!
//! serde says what is wrong with a value (``invalid type: integer `5`, expected a
//! string``) but not where it is: derived code reads a `type`-tagged enum (a request), an
//! `outcome`-tagged one (an item of `outcomes`) and a flattened struct (the outcome of
//! `completed`) through a buffer of its own, which keeps no path. So when a frame is
//! refused, [`locate`] decodes parts of it again until it finds the smallest part that
//! fails with the same message, and names its path (`job.queue`, `outcomes[3].id`).
//!
//! It relies on how derived code reads a map: entry by entry in the order sent, stopping at
//! the first value it refuses, and only then looking for missing fields. So a failing
//! map's entries can be halved: if the first half alone (with the entries that choose the
//! message: `type`, `req`, `outcome`) fails alike, the fault is in it, otherwise in the
//! second half; an array's items likewise. The one entry found must fail alike on its own,
//! or the search stops where it is (a duplicate field, say, is no one entry's fault). Then
//! its value is searched the same way, until a value fails alike even emptied (an array
//! where a text is wanted) or holds nothing to search. A missing field is never a single
//! value's fault: it is named by the map that lacks it.
//!
//! A search runs only for a refused frame. At each level it decodes parts of the map whose
//! sizes add up to at most about twice the map's, in about log2(n) + 2 probes of n entries;
//! only the parts probed are cloned. A refused frame costs about twice a decoding (a
//! 600 KB submit with a bad `queue` beside its `args`: 74 ms, 34 ms to decode a good one).

use ciborium::Value;

use crate::path::{Step, written};

/// The keys a probe of a map keeps whenever it holds them: the tags that choose a message
/// and an outcome, and `req`, which derived code reads before a flattened outcome.
const KEPT: [&str; 3] = ["type", "req", "outcome"];

/// The most probes one search decodes: a bound for any frame (a message of the protocol
/// needs a few dozen at most).
const MAX_PROBES: usize = 256;

/// The path (empty: the message itself) of the part of `frame` at fault, where decoding
/// `frame` failed with `why` and `decode` decodes a probe as the frame was decoded.
pub(crate) fn locate(
    frame: &Value,
    why: &str,
    decode: impl Fn(&Value) -> Result<(), String>,
) -> String {
    let mut search = Search {
        fails_alike: |probe: &Value| decode(probe).err().as_deref() == Some(why),
        around: Vec::new(),
        probes: 0,
    };
    let missing = why.starts_with("missing field `");
    let mut path = Vec::new();
    let mut node = frame;
    loop {
        let found = match node {
            Value::Map(entries) => search.in_map(entries, missing),
            Value::Array(items) => search.in_array(items),
            _ => Found::Here,
        };
        match found {
            Found::Here => break,
            Found::Kept(key) => {
                path.push(Step::Key(key));
                break;
            }
            Found::Child(step, child, around) => {
                if missing && !matches!(child, Value::Map(_) | Value::Array(_)) {
                    break;
                }
                path.push(step);
                search.around.push(around);
                node = child;
            }
        }
    }
    written(&path)
}

/// What a search of one map or array found.
enum Found<'a> {
    /// The fault is the value itself (or cannot be narrowed down).
    Here,
    /// The fault is the kept entry with this key.
    Kept(Value),
    /// The fault is in this entry or item, which a probe keeps as shown.
    Child(Step, &'a Value, Around),
}

/// How a probe rebuilds an ancestor of the value searched around it.
enum Around {
    /// A map reduced to its kept entries and the entry searched.
    Map {
        kept: Vec<(Value, Value)>,
        key: Value,
    },
    /// An array reduced to the item searched.
    Array,
}

struct Search<F> {
    /// Whether a frame fails as the frame searched failed.
    fails_alike: F,
    /// The ancestors of the value searched, outermost first.
    around: Vec<Around>,
    probes: usize,
}

impl<F: Fn(&Value) -> bool> Search<F> {
    /// Whether the frame with the value searched replaced by `value` fails alike; `None`
    /// once the probes are spent.
    fn probe(&mut self, value: Value) -> Option<bool> {
        if self.probes == MAX_PROBES {
            return None;
        }
        self.probes += 1;
        let mut value = value;
        for around in self.around.iter().rev() {
            value = match around {
                Around::Map { kept, key } => {
                    let mut entries = kept.clone();
                    entries.push((key.clone(), value));
                    Value::Map(entries)
                }
                Around::Array => Value::Array(vec![value]),
            };
        }
        Some((self.fails_alike)(&value))
    }

    /// Which of `entries` the fault is in.
    fn in_map<'a>(&mut self, entries: &'a [(Value, Value)], missing: bool) -> Found<'a> {
        let (kept, others): (Vec<_>, Vec<_>) = entries.iter().partition(|(k, v)| is_kept(k, v));
        let kept: Vec<(Value, Value)> = kept.into_iter().cloned().collect();
        let with = |kept: &[(Value, Value)], more: &[&(Value, Value)]| {
            Value::Map(
                kept.iter()
                    .cloned()
                    .chain(more.iter().map(|&e| e.clone()))
                    .collect(),
            )
        };
        match self.probe(with(&kept, &[])) {
            None => return Found::Here,
            Some(true) if missing => return Found::Here,
            Some(true) => {
                // A kept entry is at fault (a `req` that is no number, an unknown
                // `outcome`): the one that fails alike beside the tags alone.
                let tags: Vec<(Value, Value)> = (kept.iter())
                    .filter(|(k, _)| k.as_text() == Some("type"))
                    .cloned()
                    .collect();
                for entry in kept.iter().filter(|(k, _)| k.as_text() != Some("type")) {
                    if self.probe(with(&tags, &[entry])) == Some(true) {
                        return Found::Kept(entry.0.clone());
                    }
                }
                return Found::Here;
            }
            Some(false) => {}
        }
        let Some(at) = self.halve(others.len(), |lo, hi| with(&kept, &others[lo..hi])) else {
            return Found::Here;
        };
        let (key, value) = others[at];
        Found::Child(
            Step::Key(key.clone()),
            value,
            Around::Map {
                kept,
                key: key.clone(),
            },
        )
    }

    /// Which of `items` the fault is in.
    fn in_array<'a>(&mut self, items: &'a [Value]) -> Found<'a> {
        if self.probe(Value::Array(Vec::new())) != Some(false) {
            return Found::Here;
        }
        match self.halve(items.len(), |lo, hi| Value::Array(items[lo..hi].to_vec())) {
            Some(at) => Found::Child(Step::Index(at), &items[at], Around::Array),
            None => Found::Here,
        }
    }

    /// The one of `n` parts whose probe (`part(i, i + 1)`) fails alike, found by halving
    /// the range known to hold it, where `part(lo, hi)` is the value with parts `lo..hi`.
    fn halve(&mut self, n: usize, part: impl Fn(usize, usize) -> Value) -> Option<usize> {
        let (mut lo, mut hi) = (0, n);
        if n == 0 {
            return None;
        }
        // Whether `lo..hi` is known to fail alike (the whole is), or taken on trust.
        let mut known = true;
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.probe(part(lo, mid))? {
                hi = mid;
            } else {
                lo = mid;
                known = false;
            }
        }
        // A part taken on trust must fail alike on its own.
        if known || self.probe(part(lo, hi))? {
            Some(lo)
        } else {
            None
        }
    }
}

/// Whether a map's entry is one a probe keeps: a key of [`KEPT`] with a short value (a
/// tag or a request number; a long one is searched as any other entry).
fn is_kept(key: &Value, value: &Value) -> bool {
    let short = match value {
        Value::Integer(_) => true,
        Value::Text(text) => text.len() <= 64,
        _ => false,
    };
    short && key.as_text().is_some_and(|k| KEPT.contains(&k))
}
