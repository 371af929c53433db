//! Encoding and decoding frames, with the size limit and error codes of the protocol.
//!
//! Decoding goes in two steps so that every bad frame gets the right error code: the bytes
//! are read as a generic CBOR value first (not CBOR, or not a map: `bad_frame`), then its
//! `type` is checked (`unknown_type`), then the map is read as that message (`invalid`,
//! naming the field's path, found by `locate` when serde's message does not say it). The
//! `req` is picked out of the map first, so even an invalid request
//! gets an error reply that its sender can match.

use ciborium::Value;
use hopper_core::log_limit::{LOG_TEXT_CHARS, capped};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::messages::{ErrorCode, Reply, Request};

/// Why a frame could not be decoded, with what to tell its sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// The error code for the reply.
    pub code: ErrorCode,
    /// The frame's `req`, if it could be read.
    pub req: Option<u64>,
    /// What was wrong, for people.
    pub message: String,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for DecodeError {}

impl DecodeError {
    fn new(code: ErrorCode, req: Option<u64>, message: impl Into<String>) -> Self {
        DecodeError {
            code,
            req,
            message: message.into(),
        }
    }

    /// The error reply to send back.
    pub fn to_reply(&self) -> Reply {
        Reply::error(self.req, self.code, self.message.clone())
    }
}

/// The deepest nesting of arrays and maps a frame may hold (the message's own map
/// included). Deeper frames are refused as `bad_frame` before anything is built from them,
/// so no input can exhaust the stack.
pub(crate) const MAX_DEPTH: usize = 256;

/// Encodes a message as one CBOR map. Fails only for values CBOR cannot hold (none of the
/// protocol's messages).
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(128);
    ciborium::into_writer(message, &mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// Decodes a frame a peer sent, refusing frames over `max_frame` bytes unread, values
/// JSON cannot hold (`undefined`, NaN, ±Infinity, byte strings, integers below -2^63),
/// tags and non-text keys anywhere in it, and lists longer than their bounds
/// ([`crate::MAX_OUTCOMES`] and the others). An error names the path of the value at fault.
pub fn decode_request(frame: &[u8], max_frame: usize) -> Result<Request, DecodeError> {
    decode(frame, max_frame, &Request::TYPES, Strict::Yes)
}

/// The lists a request holds that a frame could otherwise fill with as many items as its
/// bytes allow, each the server's work grows with: (`type`, field, most items). Checked
/// before the items are read as the message's types.
const LIST_BOUNDS: [(&str, &str, usize); 4] = [
    ("outcomes", "outcomes", crate::MAX_OUTCOMES),
    ("heartbeat", "leases", crate::MAX_HEARTBEAT_LEASES),
    ("submit_batch", "jobs", crate::MAX_BATCH_JOBS),
    ("log", "lines", crate::MAX_LOG_LINES),
];

/// The refusal of a request of type `ty` (`entries` its map) that holds more items in a
/// list than [`LIST_BOUNDS`] allows.
fn list_refusal(ty: &str, entries: &[(Value, Value)]) -> Option<String> {
    let (_, name, most) = LIST_BOUNDS.iter().find(|(t, _, _)| *t == ty)?;
    let items = entries
        .iter()
        .find(|(k, _)| k.as_text() == Some(name))
        .and_then(|(_, v)| v.as_array())?;
    (items.len() > *most).then(|| {
        format!(
            "{ty}: {name}: {} items, over the limit of {most} in one message",
            items.len()
        )
    })
}

/// Decodes a frame the server sent. The server's own values are read as they come (a
/// statistic that is NaN, say, does not cost the whole reply).
pub fn decode_reply(frame: &[u8], max_frame: usize) -> Result<Reply, DecodeError> {
    decode(frame, max_frame, &Reply::TYPES, Strict::No)
}

/// Whether the frame is a peer's: values outside JSON, and lists past their bounds,
/// refuse it.
#[derive(PartialEq)]
enum Strict {
    Yes,
    No,
}

fn decode<T: DeserializeOwned>(
    frame: &[u8],
    max_frame: usize,
    types: &[&str],
    strict: Strict,
) -> Result<T, DecodeError> {
    if frame.len() > max_frame {
        return Err(DecodeError::new(
            ErrorCode::TooLarge,
            None,
            format!(
                "frame of {} bytes is over the limit of {max_frame} bytes",
                frame.len()
            ),
        ));
    }
    let read =
        crate::read::read(frame).map_err(|why| DecodeError::new(ErrorCode::BadFrame, None, why))?;
    if read.len != frame.len() {
        return Err(DecodeError::new(
            ErrorCode::BadFrame,
            None,
            format!(
                "{} bytes after the message: a frame holds exactly one CBOR map",
                frame.len() - read.len
            ),
        ));
    }
    let value = read.value;
    let Value::Map(entries) = &value else {
        return Err(DecodeError::new(
            ErrorCode::BadFrame,
            None,
            "a frame must hold one CBOR map with a \"type\" key",
        ));
    };
    let field = |name: &str| {
        entries
            .iter()
            .find(|(k, _)| k.as_text() == Some(name))
            .map(|(_, v)| v)
    };
    let req = field("req")
        .and_then(Value::as_integer)
        .and_then(|i| u64::try_from(i).ok());
    let ty = field("type").map(|ty| ty.as_text());
    if let Some(refused) = type_error(ty, req, types) {
        return Err(refused);
    }
    let ty = ty.flatten().unwrap_or_default();
    if let Some(why) = read.refused.filter(|_| strict == Strict::Yes) {
        return Err(DecodeError::new(
            ErrorCode::Invalid,
            req,
            format!("{ty}: {why}"),
        ));
    }
    if strict == Strict::Yes
        && let Some(why) = list_refusal(ty, entries)
    {
        return Err(DecodeError::new(ErrorCode::Invalid, req, why));
    }
    value.deserialized::<T>().map_err(|e| {
        let why = said(e);
        let path = crate::locate::locate(&value, &why, |probe| {
            probe.deserialized::<T>().map(drop).map_err(said)
        });
        let at = if path.is_empty() {
            why
        } else {
            format!("{path}: {why}")
        };
        DecodeError::new(
            ErrorCode::Invalid,
            req,
            format!("{ty}: {}", echoes_cut(&in_words(at))),
        )
    })
}

/// The refusal of a frame whose `type` is `ty` (`None`: no such key; `Some(None)`: not
/// text), when it is not one of `types`.
pub(crate) fn type_error(
    ty: Option<Option<&str>>,
    req: Option<u64>,
    types: &[&str],
) -> Option<DecodeError> {
    let (code, message) = match ty {
        None => (ErrorCode::Invalid, "the map has no \"type\" key".to_owned()),
        Some(None) => (ErrorCode::Invalid, "\"type\" must be a string".to_owned()),
        Some(Some(ty)) if types.contains(&ty) => return None,
        Some(Some(ty)) => (
            ErrorCode::UnknownType,
            format!(
                "unknown message type {:?}; expected one of {types:?}",
                capped(ty).to_string()
            ),
        ),
    };
    Some(DecodeError::new(code, req, message))
}

/// The terse expectations of ciborium's reader (a nested map's fields are read by it),
/// in the words serde's own use.
fn in_words(message: String) -> String {
    const WORDS: [(&str, &str); 6] = [
        ("expected str", "expected a string"),
        ("expected (big)int", "expected an integer"),
        ("expected bool", "expected a boolean"),
        ("expected f64", "expected a number"),
        ("expected array", "expected a sequence"),
        ("expected map", "expected a map"),
    ];
    for (terse, words) in WORDS {
        if let Some(start) = message.strip_suffix(terse) {
            return format!("{start}{words}");
        }
    }
    message
}

/// What serde said, from ciborium's error.
fn said(e: ciborium::value::Error) -> String {
    let ciborium::value::Error::Custom(why) = e;
    why
}

/// The longest message a decoding error is given, whatever a peer sent.
const MAX_MESSAGE_CHARS: usize = 512;

/// A serde message with what it quotes of the peer's values cut, as logs show them
/// ([`capped`]: 64 characters, then the length of the whole): serde quotes a value it
/// does not take whole (`invalid type: string "…"`, ``unknown variant `…` ``), and a
/// peer's value may be megabytes long. The message as a whole is bounded too.
fn echoes_cut(message: &str) -> String {
    fn cut(out: &mut String, quoted: &str) {
        if quoted.chars().count() > LOG_TEXT_CHARS {
            out.push_str(&capped(quoted).to_string());
        } else {
            out.push_str(quoted);
        }
    }
    let mut out = String::new();
    let mut quote: Option<char> = None;
    let mut quoted = String::new();
    let mut escaped = false;
    for c in message.chars() {
        match quote {
            None => {
                out.push(c);
                if matches!(c, '"' | '`') {
                    quote = Some(c);
                    quoted.clear();
                }
            }
            // A debug-quoted string escapes its quotes; backticks quote verbatim.
            Some(q) if c == q && !escaped => {
                cut(&mut out, &quoted);
                out.push(c);
                quote = None;
            }
            Some(q) => {
                quoted.push(c);
                escaped = q == '"' && c == '\\' && !escaped;
            }
        }
    }
    if quote.is_some() {
        cut(&mut out, &quoted);
    }
    capped(&out).max_chars(MAX_MESSAGE_CHARS).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::*;
    use crate::messages::*;
    use crate::{
        Completed, CronInfo, Failed, JobFilter, NodeInfo, OutcomeItem, QueueChange, QueueCounts,
        QueueInfo, RateInfo, Released, Snoozed,
    };
    use crate::{MAX_FRAME, VERSION};
    use serde_json::json;
    use uuid::Uuid;

    fn cbor(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        ciborium::into_writer(v, &mut out).expect("encodes");
        out
    }

    fn map(entries: Vec<(&str, Value)>) -> Value {
        Value::Map(
            entries
                .into_iter()
                .map(|(k, v)| (Value::Text(k.to_owned()), v))
                .collect(),
        )
    }

    #[test]
    fn every_request_round_trips() {
        let id = Uuid::now_v7();
        let requests = vec![
            Request::Hello {
                req: 1,
                version: VERSION,
                role: Role::Worker,
                token: Some("t".into()),
                name: Some("w1".into()),
                kinds: Some(vec!["email".into()]),
                queues: None,
                concurrency: Some(4),
                prefetch: Some(400),
                batch: true,
            },
            Request::Submit {
                req: 2,
                job: JobSpec {
                    priority: Some(PriorityValue::Name("high".into())),
                    delay_ms: Some(10),
                    meta: Some(json!({"tenant": "acme"})),
                    ..JobSpec::new("email", json!({"to": "a@b", "n": [1, 2.5, null]}))
                },
            },
            Request::SubmitBatch {
                req: 3,
                jobs: vec![JobSpec::new("a", json!([]))],
            },
            Request::Status { req: 4, id },
            Request::Cancel { req: 5, id },
            Request::Completed {
                req: 6,
                outcome: Completed {
                    id,
                    attempt: 1,
                    duration_ms: 12,
                },
            },
            Request::Failed {
                req: 7,
                outcome: Failed {
                    id,
                    attempt: 1,
                    error: "boom".into(),
                    retryable: false,
                    retry_in_ms: Some(5),
                    duration_ms: 3,
                },
            },
            Request::Snoozed {
                req: 8,
                outcome: Snoozed {
                    id,
                    attempt: 2,
                    delay_ms: 100,
                },
            },
            Request::Released {
                req: 9,
                outcome: Released { id, attempt: 2 },
            },
            Request::Heartbeat {
                req: 10,
                leases: vec![LeaseRef { id, attempt: 3 }],
            },
            Request::Extend {
                req: 11,
                id,
                attempt: 3,
                by_ms: 60_000,
            },
            Request::Log {
                req: 22,
                id,
                attempt: 3,
                lines: vec![crate::jobs::LogLineSpec {
                    level: "warn".into(),
                    message: "retrying".into(),
                    fields: Some(json!({"try": 2})),
                    at: "2026-11-26T12:00:00.123Z".parse().ok(),
                }],
                dropped: 4,
            },
            Request::JobLogs {
                req: 23,
                id,
                after: 8,
            },
            Request::Bye { req: u64::MAX },
            Request::Outcomes {
                req: 12,
                outcomes: vec![
                    OutcomeItem::Completed(Completed {
                        id,
                        attempt: 1,
                        duration_ms: 3,
                    }),
                    OutcomeItem::Failed(Failed {
                        id,
                        attempt: 2,
                        error: "boom".into(),
                        retryable: true,
                        retry_in_ms: None,
                        duration_ms: 0,
                    }),
                    OutcomeItem::Snoozed(Snoozed {
                        id,
                        attempt: 3,
                        delay_ms: 10,
                    }),
                    OutcomeItem::Released(Released { id, attempt: 4 }),
                ],
            },
            Request::ListJobs {
                req: 13,
                filter: JobFilter {
                    state: Some("failed".into()),
                    group: Some("tenant-1".into()),
                    meta: Some(serde_json::json!({"region": "eu", "tier": 2})),
                    before: Some(id),
                    created_after: Some(chrono::Utc::now()),
                    limit: Some(5),
                    ..JobFilter::default()
                },
            },
            Request::Retry { req: 14, id },
            Request::Delete { req: 15, id },
            Request::RetryFailed {
                req: 16,
                queue: Some("q".into()),
                kind: None,
            },
            Request::Clear {
                req: 17,
                queue: None,
            },
            Request::QueueStats { req: 18 },
            Request::ListQueues { req: 19 },
            Request::UpdateQueue {
                req: 20,
                update: QueueChange {
                    queue: "mail".into(),
                    paused: Some(true),
                    max_running: Some(None),
                    max_running_per_group: None,
                    rate: Some(Some(RateInfo {
                        jobs: 10,
                        per_ms: 1000,
                        burst: None,
                    })),
                },
            },
            Request::ListCron { req: 21 },
            Request::ListNodes {
                req: 22,
                before: Some("AZC0b2Fy".into()),
                limit: Some(5),
            },
            Request::JobStats {
                req: 23,
                minutes: 60,
            },
        ];
        assert_eq!(requests.len(), Request::TYPES.len());
        for request in requests {
            let frame = encode(&request).expect("encodes");
            assert_eq!(decode_request(&frame, MAX_FRAME), Ok(request));
        }
    }

    #[test]
    fn every_reply_round_trips() {
        let id = Uuid::now_v7();
        let now = chrono::Utc::now();
        let replies = vec![
            Reply::Welcome {
                req: 1,
                version: 1,
                session: id,
                heartbeat_ms: 5000,
                max_frame: MAX_FRAME as u64,
            },
            Reply::Submitted {
                req: 2,
                ids: vec![id, Uuid::nil()],
            },
            Reply::Ack {
                req: 3,
                result: FinishResult::LeaseLost,
            },
            Reply::HeartbeatAck {
                req: 4,
                lost: vec![LeaseRef { id, attempt: 1 }],
            },
            Reply::Order {
                job: Order {
                    id,
                    attempt: 1,
                    queue: "default".into(),
                    kind: "k".into(),
                    args: json!({"a": 1}),
                    priority: 2,
                    counted_attempt: 1,
                    max_attempts: 25,
                    timeout_ms: 1000,
                    created_at: now,
                    run_at: now,
                    meta: json!({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}),
                },
            },
            Reply::Cancel { id },
            Reply::error(None, ErrorCode::BadFrame, "nope"),
            Reply::Orders { jobs: vec![] },
            Reply::Acks {
                req: 5,
                results: vec![FinishResult::Recorded, FinishResult::LeaseLost],
            },
            Reply::Jobs {
                req: 6,
                jobs: vec![],
                next_before: Some(id),
            },
            Reply::Count { req: 7, count: 3 },
            Reply::Stats {
                req: 8,
                queues: vec![QueueCounts {
                    queue: "q".into(),
                    available: 1,
                    scheduled: 2,
                    running: 3,
                    completed: 4,
                    failed: 5,
                    cancelled: 6,
                    oldest_available_secs: 1.5,
                }],
            },
            Reply::Queues {
                req: 9,
                queues: vec![],
            },
            Reply::Queue {
                req: 10,
                queue: QueueInfo {
                    queue: "q".into(),
                    paused: true,
                    grouped: false,
                    max_running: Some(3),
                    max_running_per_group: None,
                    rate: None,
                },
            },
            Reply::Cron {
                req: 11,
                entries: vec![CronInfo {
                    name: "n".into(),
                    schedule: "* * * * *".into(),
                    timezone: "UTC".into(),
                    queue: "q".into(),
                    kind: "k".into(),
                    args: json!({}),
                    priority: 2,
                    max_attempts: 3,
                    timeout_ms: 1000,
                    catch_up: false,
                    next_run_at: now,
                    last_run_at: None,
                    last_job_id: Some(id),
                }],
            },
            Reply::Nodes {
                req: 13,
                nodes: vec![NodeInfo {
                    id,
                    name: "host:12".into(),
                    queues: vec!["default".into()],
                    concurrency: 8,
                    started_at: now,
                    heartbeat_at: now,
                }],
                next_before: Some("AZC0b2Fy".into()),
            },
            Reply::Minutes {
                req: 14,
                minutes: vec![hopper_core::MinuteStats {
                    minute: now,
                    completed: 3,
                    ..Default::default()
                }],
            },
            Reply::Logs {
                req: 12,
                id,
                logs: vec![hopper_core::job_log::AttemptLog {
                    attempt: 2,
                    lines: vec![hopper_core::job_log::LogLine {
                        at: now,
                        level: hopper_core::job_log::LogLevel::Warn,
                        message: "slow".into(),
                        fields: json!({"ms": 900}).as_object().cloned().unwrap_or_default(),
                    }],
                    dropped: 3,
                }],
                next: Some(9),
            },
        ];
        for reply in replies {
            let frame = encode(&reply).expect("encodes");
            assert_eq!(decode_reply(&frame, MAX_FRAME), Ok(reply));
        }
    }

    #[test]
    fn uuids_and_times_are_strings_on_the_wire() {
        let id = Uuid::now_v7();
        let frame = encode(&Request::Status { req: 1, id }).expect("encodes");
        let value: Value = ciborium::from_reader(&frame[..]).expect("decodes");
        let entries = value.as_map().expect("a map");
        let got = entries
            .iter()
            .find(|(k, _)| k.as_text() == Some("id"))
            .and_then(|(_, v)| v.as_text())
            .expect("id is text");
        assert_eq!(got, id.hyphenated().to_string());
    }

    #[test]
    fn garbage_is_a_bad_frame() {
        for frame in [
            &b"\xff\xfe\x00garbage"[..],
            &b""[..],
            &b"\x9f"[..],
            &b"GET / HTTP/1.1\r\n\r\n"[..],
        ] {
            let err = decode_request(frame, MAX_FRAME).expect_err("refused");
            assert_eq!(err.code, ErrorCode::BadFrame, "{frame:?}: {err}");
        }
        // A CBOR value that is not a map.
        let err = decode_request(&cbor(&Value::Integer(5.into())), MAX_FRAME).expect_err("refused");
        assert_eq!(err.code, ErrorCode::BadFrame);
        // Two maps in one frame.
        let mut two = cbor(&map(vec![("type", Value::Text("bye".into()))]));
        two.extend(two.clone());
        assert_eq!(
            decode_request(&two, MAX_FRAME).map_err(|e| e.code),
            Err(ErrorCode::BadFrame)
        );
    }

    #[test]
    fn list_nodes_without_paging_reads_as_a_first_page_and_a_last_reply() {
        // A peer that predates paging sends neither `before` nor `limit`.
        let frame = cbor(&map(vec![
            ("type", Value::Text("list_nodes".into())),
            ("req", Value::Integer(3.into())),
        ]));
        assert_eq!(
            decode_request(&frame, MAX_FRAME),
            Ok(Request::ListNodes {
                req: 3,
                before: None,
                limit: None,
            })
        );
        // A server that predates paging sends no `next_before`: there is no next page.
        let frame = cbor(&map(vec![
            ("type", Value::Text("nodes".into())),
            ("req", Value::Integer(3.into())),
            ("nodes", Value::Array(Vec::new())),
        ]));
        assert_eq!(
            decode_reply(&frame, MAX_FRAME),
            Ok(Reply::Nodes {
                req: 3,
                nodes: Vec::new(),
                next_before: None,
            })
        );
        // A limit that is not a count is refused, naming it.
        for limit in [Value::Integer((-1).into()), Value::Text("20".into())] {
            let frame = cbor(&map(vec![
                ("type", Value::Text("list_nodes".into())),
                ("req", Value::Integer(4.into())),
                ("limit", limit),
            ]));
            let err = decode_request(&frame, MAX_FRAME).expect_err("refused");
            assert_eq!((err.code, err.req), (ErrorCode::Invalid, Some(4)));
            assert!(err.message.starts_with("list_nodes: limit: "), "{err}");
        }
    }

    #[test]
    fn unknown_types_and_wrong_fields_keep_the_req() {
        let unknown = cbor(&map(vec![
            ("type", Value::Text("launch_missiles".into())),
            ("req", Value::Integer(42.into())),
        ]));
        let err = decode_request(&unknown, MAX_FRAME).expect_err("refused");
        assert_eq!((err.code, err.req), (ErrorCode::UnknownType, Some(42)));

        let wrong = cbor(&map(vec![
            ("type", Value::Text("status".into())),
            ("req", Value::Integer(7.into())),
            ("id", Value::Integer(3.into())),
        ]));
        let err = decode_request(&wrong, MAX_FRAME).expect_err("refused");
        assert_eq!((err.code, err.req), (ErrorCode::Invalid, Some(7)));

        let bad_uuid = cbor(&map(vec![
            ("type", Value::Text("cancel".into())),
            ("req", Value::Integer(8.into())),
            ("id", Value::Text("not-a-uuid".into())),
        ]));
        let err = decode_request(&bad_uuid, MAX_FRAME).expect_err("refused");
        assert_eq!((err.code, err.req), (ErrorCode::Invalid, Some(8)));
        assert!(err.message.contains("not-a-uuid"), "{}", err.message);

        let no_type = cbor(&map(vec![("req", Value::Integer(9.into()))]));
        let err = decode_request(&no_type, MAX_FRAME).expect_err("refused");
        assert_eq!((err.code, err.req), (ErrorCode::Invalid, Some(9)));

        // A CBOR tag (cbor2 sends uuid.UUID as tag 37): refused, not misread.
        let tagged = cbor(&map(vec![
            ("type", Value::Text("status".into())),
            ("req", Value::Integer(10.into())),
            (
                "id",
                Value::Tag(37, Box::new(Value::Bytes(Uuid::nil().as_bytes().to_vec()))),
            ),
        ]));
        let err = decode_request(&tagged, MAX_FRAME).expect_err("refused");
        assert_eq!(err.code, ErrorCode::Invalid);
    }

    #[test]
    fn values_json_cannot_hold_are_refused_naming_the_field() {
        let submit = |args: Value, meta: Value| {
            cbor(&map(vec![
                ("type", Value::Text("submit".into())),
                ("req", Value::Integer(3.into())),
                (
                    "job",
                    map(vec![
                        ("kind", Value::Text("k".into())),
                        ("args", args),
                        ("meta", meta),
                    ]),
                ),
            ]))
        };
        let ok = map(vec![]);
        for (frame, field, why) in [
            (
                submit(map(vec![("x", Value::Float(f64::NAN))]), ok.clone()),
                "job.args.x",
                "NaN",
            ),
            (
                submit(
                    Value::Array(vec![Value::Float(f64::NEG_INFINITY)]),
                    ok.clone(),
                ),
                "job.args[0]",
                "Infinity",
            ),
            (
                submit(ok.clone(), map(vec![("t", Value::Float(f64::INFINITY))])),
                "job.meta.t",
                "Infinity",
            ),
        ] {
            let err = decode_request(&frame, MAX_FRAME).expect_err("refused");
            assert_eq!((err.code, err.req), (ErrorCode::Invalid, Some(3)), "{err}");
            assert!(
                err.message.starts_with(&format!("submit: {field}: {why}")),
                "{err}"
            );
        }
        // `undefined` (0xf7) where ciborium would read null: in a log line's fields.
        let mut frame = cbor(&map(vec![
            ("type", Value::Text("log".into())),
            ("req", Value::Integer(4.into())),
            ("id", Value::Text(Uuid::nil().to_string())),
            ("attempt", Value::Integer(1.into())),
            (
                "lines",
                Value::Array(vec![map(vec![
                    ("level", Value::Text("info".into())),
                    ("message", Value::Text("m".into())),
                    ("fields", map(vec![("u", Value::Null)])),
                ])]),
            ),
        ]));
        let null = frame.iter().rposition(|&b| b == 0xf6).expect("the null");
        frame[null] = 0xf7;
        let err = decode_request(&frame, MAX_FRAME).expect_err("refused");
        assert_eq!((err.code, err.req), (ErrorCode::Invalid, Some(4)), "{err}");
        assert!(
            err.message
                .starts_with("log: lines[0].fields.u: undefined is not a JSON value"),
            "{err}"
        );
        // The server's own replies are read as they come.
        let stats = Reply::Stats {
            req: 5,
            queues: vec![QueueCounts {
                queue: "q".into(),
                available: 0,
                scheduled: 0,
                running: 0,
                completed: 0,
                failed: 0,
                cancelled: 0,
                oldest_available_secs: f64::NAN,
            }],
        };
        let frame = encode(&stats).expect("encodes");
        match decode_reply(&frame, MAX_FRAME) {
            Ok(Reply::Stats { queues, .. }) => assert!(queues[0].oldest_available_secs.is_nan()),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn decode_errors_read_as_sentences_naming_the_field() {
        let submit = |job: Vec<(&str, Value)>| {
            let mut entries = vec![("kind", Value::Text("k".into()))];
            entries.extend(job);
            cbor(&map(vec![
                ("type", Value::Text("submit".into())),
                ("req", Value::Integer(1.into())),
                ("job", map(entries)),
            ]))
        };
        let message = |frame: &[u8]| {
            let err = decode_request(frame, MAX_FRAME).expect_err("refused");
            assert!(!err.message.contains("Custom("), "{err}");
            assert!(!err.message.contains("Io("), "{err}");
            err.message
        };
        let frame = submit(vec![("run_at", Value::Text("infinity".into()))]);
        assert_eq!(
            message(&frame),
            "submit: job.run_at: not an RFC 3339 time such as 2026-11-22T10:00:00Z: \"infinity\""
        );
        let frame = submit(vec![("run_at", Value::Integer(5.into()))]);
        assert_eq!(
            message(&frame),
            "submit: job.run_at: invalid type: integer `5`, expected an RFC 3339 time"
        );
        for n in [32768, -32769, i64::MAX] {
            let frame = submit(vec![("priority", Value::Integer(n.into()))]);
            assert_eq!(
                message(&frame),
                format!("submit: job.priority: must be -32768..32767 or high/normal/low, got {n}")
            );
        }
        let frame = submit(vec![("priority", Value::Integer((-32768).into()))]);
        assert!(decode_request(&frame, MAX_FRAME).is_ok());
        let filter = cbor(&map(vec![
            ("type", Value::Text("list_jobs".into())),
            ("req", Value::Integer(2.into())),
            (
                "filter",
                map(vec![("created_before", Value::Text("yesterday".into()))]),
            ),
        ]));
        assert!(
            message(&filter).starts_with("list_jobs: filter.created_before: not an RFC 3339 time")
        );
        // A frame cut short.
        let whole = submit(vec![]);
        assert_eq!(
            message(&whole[..whole.len() - 1]),
            "not CBOR: the frame ends in the middle of a value"
        );
    }

    #[test]
    fn every_decode_error_names_the_path_of_the_value_at_fault() {
        let t = |s: &str| Value::Text(s.into());
        let n = |i: i64| Value::Integer(i.into());
        let id = || t(&Uuid::nil().to_string());
        let request = |ty: &str, fields: Vec<(&str, Value)>| {
            let mut entries = vec![("type", t(ty))];
            entries.extend(fields);
            cbor(&map(entries))
        };
        let worker = |field: &str, value: Value| {
            let mut fields = vec![("req", n(7)), ("version", n(1)), ("role", t("worker"))];
            fields.retain(|(k, _)| *k != field);
            fields.push((field, value));
            request("hello", fields)
        };
        let outcome = |fields: Vec<(&str, Value)>| {
            request(
                "outcomes",
                vec![("req", n(7)), ("outcomes", Value::Array(vec![map(fields)]))],
            )
        };
        let cases = [
            (
                worker("concurrency", t("x")),
                "hello: concurrency: invalid type: string \"x\", expected u32",
            ),
            (
                worker("role", t("boss")),
                "hello: role: unknown variant `boss`, expected `client` or `worker`",
            ),
            (
                worker("kinds", Value::Array(vec![t("a"), n(5)])),
                "hello: kinds[1]: invalid type: integer `5`, expected a string",
            ),
            (
                worker("queues", t("mail")),
                "hello: queues: invalid type: string \"mail\", expected a sequence",
            ),
            (
                request("retry_failed", vec![("req", n(7)), ("queue", n(5))]),
                "retry_failed: queue: invalid type: integer `5`, expected a string",
            ),
            (
                request("status", vec![("id", n(3)), ("req", n(7))]),
                "status: id: invalid type: integer `3`, expected a string",
            ),
            (
                request("status", vec![("req", t("x")), ("id", id())]),
                "status: req: invalid type: string \"x\", expected u64",
            ),
            (
                request(
                    "extend",
                    vec![
                        ("req", n(7)),
                        ("id", id()),
                        ("attempt", n(1)),
                        ("by_ms", n(-1)),
                    ],
                ),
                "extend: by_ms: invalid value: integer `-1`, expected u64",
            ),
            (
                request(
                    "completed",
                    vec![("req", n(7)), ("id", n(5)), ("attempt", n(1))],
                ),
                "completed: id: invalid type: integer `5`, expected a string",
            ),
            (
                request(
                    "submit",
                    vec![
                        ("req", n(7)),
                        ("job", map(vec![("kind", t("k")), ("queue", n(5))])),
                    ],
                ),
                "submit: job.queue: invalid type: integer `5`, expected a string",
            ),
            (
                request(
                    "submit_batch",
                    vec![
                        ("req", n(7)),
                        (
                            "jobs",
                            Value::Array(vec![
                                map(vec![("kind", t("k"))]),
                                map(vec![("kind", n(1))]),
                            ]),
                        ),
                    ],
                ),
                "submit_batch: jobs[1].kind: invalid type: integer `1`, expected a string",
            ),
            (
                outcome(vec![
                    ("outcome", t("completed")),
                    ("id", n(5)),
                    ("attempt", n(1)),
                ]),
                "outcomes: outcomes[0].id: invalid type: integer `5`, expected a string",
            ),
            (
                outcome(vec![
                    ("outcome", t("finished")),
                    ("id", id()),
                    ("attempt", n(1)),
                ]),
                "outcomes: outcomes[0].outcome: unknown variant `finished`, expected one of \
                 `completed`, `failed`, `snoozed`, `released`",
            ),
            (
                request(
                    "heartbeat",
                    vec![
                        ("req", n(7)),
                        (
                            "leases",
                            Value::Array(vec![map(vec![("id", id()), ("attempt", t("x"))])]),
                        ),
                    ],
                ),
                "heartbeat: leases[0].attempt: invalid type: string \"x\", expected an integer",
            ),
            (
                request(
                    "update_queue",
                    vec![
                        ("req", n(7)),
                        (
                            "update",
                            map(vec![
                                ("queue", t("q")),
                                ("rate", map(vec![("jobs", t("x")), ("per_ms", n(1))])),
                            ]),
                        ),
                    ],
                ),
                "update_queue: update.rate.jobs: invalid type: string \"x\", expected an integer",
            ),
            (
                request(
                    "log",
                    vec![
                        ("req", n(7)),
                        ("id", id()),
                        ("attempt", n(1)),
                        (
                            "lines",
                            Value::Array(vec![map(vec![("level", n(5)), ("message", t("m"))])]),
                        ),
                    ],
                ),
                "log: lines[0].level: invalid type: integer `5`, expected a string",
            ),
            // A missing field is named by the map that lacks it.
            (
                request(
                    "submit",
                    vec![("req", n(7)), ("job", map(vec![("args", map(vec![]))]))],
                ),
                "submit: job: missing field `kind`",
            ),
            (
                request("hello", vec![("req", n(7)), ("version", n(1))]),
                "hello: missing field `role`",
            ),
            (
                request(
                    "failed",
                    vec![("req", n(7)), ("id", id()), ("attempt", n(1))],
                ),
                "failed: missing field `error`",
            ),
            // No one value is at fault.
            (
                request(
                    "retry_failed",
                    vec![("req", n(7)), ("queue", t("a")), ("queue", n(5))],
                ),
                "retry_failed: duplicate field `queue`",
            ),
        ];
        for (frame, why) in cases {
            let err = decode_request(&frame, MAX_FRAME).expect_err("refused");
            assert_eq!(err.code, ErrorCode::Invalid, "{err}");
            assert_eq!(err.message, why);
        }
    }

    #[test]
    fn byte_strings_and_integers_beyond_64_bits_are_refused_naming_the_field() {
        let t = |s: &str| Value::Text(s.into());
        let bytes = |s: &str| Value::Bytes(s.as_bytes().to_vec());
        let request = |ty: &str, fields: Vec<(&str, Value)>| {
            let mut entries = vec![("type", t(ty)), ("req", Value::Integer(6.into()))];
            entries.extend(fields);
            cbor(&map(entries))
        };
        let submit = |job: Vec<(&str, Value)>| request("submit", vec![("job", map(job))]);
        let wide = |n: i128| Value::Integer(n.try_into().expect("CBOR holds it"));
        for (frame, why) in [
            (
                request("retry_failed", vec![("queue", bytes("mail"))]),
                "retry_failed: queue: a byte string",
            ),
            (
                request("status", vec![("id", bytes(&Uuid::nil().to_string()))]),
                "status: id: a byte string",
            ),
            (
                submit(vec![("kind", bytes("k"))]),
                "submit: job.kind: a byte string",
            ),
            (
                submit(vec![
                    ("kind", t("k")),
                    (
                        "args",
                        map(vec![("to", Value::Array(vec![t("a"), bytes("b")]))]),
                    ),
                ]),
                "submit: job.args.to[1]: a byte string",
            ),
            (
                submit(vec![
                    ("kind", t("k")),
                    ("meta", map(vec![("tenant", bytes("acme"))])),
                ]),
                "submit: job.meta.tenant: a byte string",
            ),
            (
                submit(vec![
                    ("kind", t("k")),
                    ("args", map(vec![("n", wide(-(1 << 63) - 1))])),
                ]),
                "submit: job.args.n: the integer -9223372036854775809 does not fit in 64 bits",
            ),
            (
                submit(vec![
                    ("kind", t("k")),
                    ("args", Value::Array(vec![wide(-(1 << 64))])),
                ]),
                "submit: job.args[0]: the integer -18446744073709551616 does not fit in 64 bits",
            ),
            (
                submit(vec![
                    ("kind", t("k")),
                    (
                        "args",
                        map(vec![("n", Value::Tag(2, Box::new(bytes("\x01\x00"))))]),
                    ),
                ]),
                "submit: job.args.n: an integer in a CBOR bignum (tag 2) does not fit",
            ),
        ] {
            let err = decode_request(&frame, MAX_FRAME).expect_err("refused");
            assert_eq!((err.code, err.req), (ErrorCode::Invalid, Some(6)), "{err}");
            assert!(err.message.starts_with(why), "{err}");
        }
        // The 64-bit extremes are held exactly.
        let frame = submit(vec![
            ("kind", t("k")),
            (
                "args",
                Value::Array(vec![wide(i128::from(i64::MIN)), wide(i128::from(u64::MAX))]),
            ),
        ]);
        match decode_request(&frame, MAX_FRAME) {
            Ok(Request::Submit { job, .. }) => {
                assert_eq!(job.args, json!([i64::MIN, u64::MAX]));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn the_field_at_fault_is_found_among_many() {
        // 100,000 unknown keys and one bad value, last: found by halving, not one by one.
        let mut entries: Vec<(Value, Value)> = (0..100_000)
            .map(|i| (Value::Text(format!("k{i}")), Value::Null))
            .collect();
        entries.insert(
            0,
            (
                Value::Text("type".into()),
                Value::Text("retry_failed".into()),
            ),
        );
        entries.push((Value::Text("queue".into()), Value::Integer(5.into())));
        entries.push((Value::Text("req".into()), Value::Integer(1.into())));
        let err = decode_request(&cbor(&Value::Map(entries)), MAX_FRAME).expect_err("refused");
        assert_eq!(
            err.message,
            "retry_failed: queue: invalid type: integer `5`, expected a string"
        );
        // So is a bad item among as many outcomes as a message holds.
        let good = || {
            map(vec![
                ("outcome", Value::Text("released".into())),
                ("id", Value::Text(Uuid::nil().to_string())),
                ("attempt", Value::Integer(1.into())),
            ])
        };
        let mut items: Vec<Value> = (0..crate::MAX_OUTCOMES).map(|_| good()).collect();
        items[777] = map(vec![
            ("outcome", Value::Text("released".into())),
            ("id", Value::Text(Uuid::nil().to_string())),
            ("attempt", Value::Text("one".into())),
        ]);
        let frame = cbor(&map(vec![
            ("type", Value::Text("outcomes".into())),
            ("req", Value::Integer(2.into())),
            ("outcomes", Value::Array(items)),
        ]));
        let err = decode_request(&frame, MAX_FRAME).expect_err("refused");
        assert!(
            err.message
                .starts_with("outcomes: outcomes[777].attempt: invalid type"),
            "{err}"
        );
    }

    #[test]
    fn a_peer_value_echoed_in_an_error_is_cut() {
        let huge = "x".repeat(2 << 20);
        let bounded = |frame: Vec<u8>| {
            let err = decode_request(&frame, 4 * MAX_FRAME).expect_err("refused");
            let start: String = err.message.chars().take(300).collect();
            assert!(err.message.len() < 1000, "{start}");
            assert!(err.message.contains("xxx…("), "{start}");
            err
        };
        let err = bounded(cbor(&map(vec![
            ("type", Value::Text(huge.clone())),
            ("req", Value::Integer(1.into())),
        ])));
        assert_eq!(err.code, ErrorCode::UnknownType);
        for (field, value) in [
            ("role", Value::Text(huge.clone())),
            ("version", Value::Text(huge.clone())),
        ] {
            let mut hello = vec![
                ("type", Value::Text("hello".into())),
                ("req", Value::Integer(1.into())),
                ("version", Value::Integer(1.into())),
                ("role", Value::Text("client".into())),
            ];
            hello.retain(|(k, _)| *k != field);
            hello.push((field, value));
            assert_eq!(bounded(cbor(&map(hello))).code, ErrorCode::Invalid);
        }
        // Quoted as serde quotes: escaped quotes stay inside, the template stays whole.
        let long = format!("a\\\"{}", "b".repeat(100));
        let cut = echoes_cut(&format!("invalid type: string \"{long}\", expected `x`"));
        assert!(
            cut.starts_with("invalid type: string \"a\\\"bbb") && cut.ends_with("\", expected `x`"),
            "{cut}"
        );
        assert!(cut.len() < 120, "{cut}");
        let status = cbor(&map(vec![
            ("type", Value::Text("status".into())),
            ("req", Value::Integer(1.into())),
            ("id", Value::Text(huge)),
        ]));
        bounded(status);
    }

    #[test]
    fn a_struct_given_as_an_array_is_refused() {
        let request = |ty: &str, field: &str, value: Value| {
            cbor(&map(vec![
                ("type", Value::Text(ty.into())),
                ("req", Value::Integer(5.into())),
                (field, value),
            ]))
        };
        let text = |s: &str| Value::Text(s.into());
        let lease = Value::Array(vec![
            text(&Uuid::nil().to_string()),
            Value::Integer(1.into()),
        ]);
        for (frame, why) in [
            (
                request("list_jobs", "filter", Value::Array(vec![])),
                "list_jobs: filter: must be a map, got an array",
            ),
            (
                request("list_jobs", "filter", Value::Array(vec![text("mail")])),
                "list_jobs: filter: must be a map, got an array",
            ),
            (
                request("submit", "job", Value::Array(vec![text("k")])),
                "submit: job: must be a map, got an array",
            ),
            (
                request(
                    "submit_batch",
                    "jobs",
                    Value::Array(vec![Value::Array(vec![text("k")])]),
                ),
                "submit_batch: jobs[0]: must be a map, got an array",
            ),
            (
                request("heartbeat", "leases", Value::Array(vec![lease])),
                "heartbeat: leases[0]: must be a map, got an array",
            ),
            (
                request("update_queue", "update", Value::Array(vec![text("q")])),
                "update_queue: update: must be a map, got an array",
            ),
            (
                request(
                    "outcomes",
                    "outcomes",
                    Value::Array(vec![Value::Array(vec![text("released")])]),
                ),
                "outcomes: outcomes[0]: must be a map, got an array",
            ),
        ] {
            let err = decode_request(&frame, MAX_FRAME).expect_err("refused");
            assert_eq!((err.code, err.req), (ErrorCode::Invalid, Some(5)), "{err}");
            assert_eq!(err.message, why);
        }
        // A filter given as a map, and none at all, are read as ever.
        let frame = request("list_jobs", "filter", map(vec![("queue", text("mail"))]));
        match decode_request(&frame, MAX_FRAME) {
            Ok(Request::ListJobs { filter, .. }) => {
                assert_eq!(filter.queue.as_deref(), Some("mail"));
            }
            other => panic!("unexpected {other:?}"),
        }
        let frame = request("list_jobs", "other", Value::Null);
        assert!(matches!(
            decode_request(&frame, MAX_FRAME),
            Ok(Request::ListJobs { filter, .. }) if filter == JobFilter::default()
        ));
    }

    #[test]
    fn deep_nesting_is_refused_with_a_clear_message() {
        let mut frame = vec![0x81; 100_000];
        frame.push(0xa0);
        let err = decode_request(&frame, MAX_FRAME).expect_err("refused");
        assert_eq!(err.code, ErrorCode::BadFrame);
        assert!(err.message.contains("nested deeper than 256"), "{err}");
        // A map inside 254 arrays is 255 levels: within the limit, so it decodes as far
        // as the message check (a frame must be a map).
        let mut frame = vec![0x81; 254];
        frame.push(0xa0);
        assert!(
            decode_request(&frame, MAX_FRAME)
                .expect_err("not a map")
                .message
                .contains("one CBOR map")
        );
    }

    #[test]
    fn oversized_frames_are_refused_unread() {
        let job = JobSpec::new("k", json!({"blob": "x".repeat(3 * 1024 * 1024)}));
        let frame = encode(&Request::Submit { req: 1, job }).expect("encodes");
        let err = decode_request(&frame, MAX_FRAME).expect_err("refused");
        assert_eq!(err.code, ErrorCode::TooLarge);
    }

    #[test]
    fn lists_past_their_bounds_are_refused_naming_the_field_and_the_limit() {
        let id = || Value::Text(Uuid::now_v7().to_string());
        let lease = || map(vec![("id", id()), ("attempt", Value::Integer(1.into()))]);
        let outcome = || {
            map(vec![
                ("outcome", Value::Text("released".into())),
                ("id", id()),
                ("attempt", Value::Integer(1.into())),
            ])
        };
        let job = || map(vec![("kind", Value::Text("k".into()))]);
        let line = || {
            map(vec![
                ("level", Value::Text("info".into())),
                ("message", Value::Text(String::new())),
            ])
        };
        let lists: [(&str, &str, usize, &dyn Fn() -> Value); 4] = [
            ("outcomes", "outcomes", crate::MAX_OUTCOMES, &outcome),
            ("heartbeat", "leases", crate::MAX_HEARTBEAT_LEASES, &lease),
            ("submit_batch", "jobs", crate::MAX_BATCH_JOBS, &job),
            ("log", "lines", crate::MAX_LOG_LINES, &line),
        ];
        for (ty, name, most, item) in lists {
            let frame = |n: usize| {
                cbor(&map(vec![
                    ("type", Value::Text(ty.into())),
                    ("req", Value::Integer(3.into())),
                    ("id", id()),
                    ("attempt", Value::Integer(1.into())),
                    (name, Value::Array((0..n).map(|_| item()).collect())),
                ]))
            };
            let at_most = decode_request(&frame(most), MAX_FRAME);
            assert!(at_most.is_ok(), "{ty} of {most}: {at_most:?}");
            let err = decode_request(&frame(most + 1), MAX_FRAME).expect_err("refused");
            assert_eq!((err.code, err.req), (ErrorCode::Invalid, Some(3)), "{err}");
            assert_eq!(
                err.message,
                format!(
                    "{ty}: {name}: {} items, over the limit of {most} in one message",
                    most + 1
                )
            );
        }
    }

    #[test]
    fn defaults_fill_missing_optional_fields() {
        let frame = cbor(&map(vec![
            ("type", Value::Text("failed".into())),
            ("req", Value::Integer(1.into())),
            ("id", Value::Text(Uuid::nil().to_string())),
            ("attempt", Value::Integer(1.into())),
            ("error", Value::Text("x".into())),
            ("some_future_field", Value::Bool(true)),
        ]));
        match decode_request(&frame, MAX_FRAME) {
            Ok(Request::Failed {
                outcome:
                    Failed {
                        retryable,
                        retry_in_ms,
                        duration_ms,
                        ..
                    },
                ..
            }) => assert_eq!((retryable, retry_in_ms, duration_ms), (true, None, 0)),
            other => panic!("unexpected {other:?}"),
        }
        let submit = cbor(&map(vec![
            ("type", Value::Text("submit".into())),
            ("req", Value::Integer(2.into())),
            (
                "job",
                map(vec![
                    ("kind", Value::Text("k".into())),
                    ("priority", Value::Integer(1.into())),
                ]),
            ),
        ]));
        match decode_request(&submit, MAX_FRAME) {
            Ok(Request::Submit { job, .. }) => {
                assert_eq!(job.args, json!({}));
                assert_eq!(job.priority, Some(PriorityValue::Number(1)));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_queue_change_tells_absent_from_null() {
        let frame = cbor(&map(vec![
            ("type", Value::Text("update_queue".into())),
            ("req", Value::Integer(1.into())),
            (
                "update",
                map(vec![
                    ("queue", Value::Text("q".into())),
                    ("max_running", Value::Null),
                    ("max_running_per_group", Value::Integer(4.into())),
                ]),
            ),
        ]));
        match decode_request(&frame, MAX_FRAME) {
            Ok(Request::UpdateQueue { update, .. }) => {
                assert_eq!(update.paused, None);
                assert_eq!(update.max_running, Some(None));
                assert_eq!(update.max_running_per_group, Some(Some(4)));
                assert_eq!(update.rate, None);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
