//! The wire decoder of `hopper serve`: any bytes a peer can send as a frame.
//!
//! Properties: decoding never panics; a frame over the size limit is refused as
//! `too_large` before it is read; whatever decodes re-encodes to a frame that decodes to the
//! same message; and an error keeps only a `req` the frame really carried.
#![no_main]

use hopper_protocol::{ErrorCode, MAX_FRAME, decode_reply, decode_request, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|frame: &[u8]| {
    match decode_request(frame, MAX_FRAME) {
        Ok(request) => {
            let again = encode(&request).expect("a decoded request encodes");
            assert_eq!(decode_request(&again, MAX_FRAME), Ok(request));
        }
        Err(e) => assert!(!e.message.is_empty(), "an error says what was wrong"),
    }
    if let Ok(reply) = decode_reply(frame, MAX_FRAME) {
        let again = encode(&reply).expect("a decoded reply encodes");
        assert_eq!(decode_reply(&again, MAX_FRAME), Ok(reply));
    }
    // The size check comes first: one byte over the limit is refused unread.
    if let Some(limit) = frame.len().checked_sub(1) {
        let e = decode_request(frame, limit).expect_err("over the limit");
        assert_eq!((e.code, e.req), (ErrorCode::TooLarge, None));
    }
});
