//! The frame reader: every frame-level rule, splits, unknown frames.

use super::raw;
use crate::h2::error::ProtocolError as E;
use crate::h2::frame::*;

/// Reads all of `input` one byte at a time and as one piece; both must
/// give the same frames (as debug strings) and the same error.
fn read_all(max: u32, input: &[u8]) -> (Vec<String>, Option<E>) {
    let whole = read_split(max, input, input.len().max(1));
    let bytewise = read_split(max, input, 1);
    assert_eq!(whole, bytewise);
    whole
}

fn read_split(max: u32, mut input: &[u8], step: usize) -> (Vec<String>, Option<E>) {
    let mut r = FrameReader::new(max, false);
    let mut frames = Vec::new();
    while !input.is_empty() {
        let n = step.min(input.len());
        let mut piece = &input[..n];
        input = &input[n..];
        while !piece.is_empty() {
            match r.next(piece) {
                Ok((used, f)) => {
                    assert!(used > 0);
                    piece = &piece[used..];
                    if let Some(f) = f {
                        frames.push(format!("{f:?}"));
                    }
                }
                Err(e) => return (frames, Some(e)),
            }
        }
    }
    (frames, None)
}

fn one(input: &[u8]) -> Result<String, E> {
    match read_all(DEFAULT_MAX_FRAME_SIZE, input) {
        (_, Some(e)) => Err(e),
        (f, None) => Ok(f.join(" | ")),
    }
}

#[test]
fn every_frame_type_parses() {
    let f = |b: Vec<u8>| one(&b).unwrap();
    assert!(f(raw(kind::DATA, flag::END_STREAM, 1, b"hi")).contains("data: [104, 105]"));
    // Padded DATA: pad length 2, "ab", 2 pad bytes; flow counts all 5.
    let d = f(raw(kind::DATA, flag::PADDED, 1, &[2, b'a', b'b', 0, 0]));
    assert!(d.contains("data: [97, 98], flow_len: 5"), "{d}");
    // HEADERS padded with priority.
    let h = f(raw(
        kind::HEADERS,
        flag::PADDED | flag::PRIORITY | flag::END_HEADERS,
        3,
        &[1, 0x80, 0, 0, 1, 15, 0x82, 0],
    ));
    assert!(
        h.contains("dependency: 1, exclusive: true, weight: 15"),
        "{h}"
    );
    assert!(h.contains("block: [130]"), "{h}");
    assert!(f(raw(kind::PRIORITY, 0, 3, &[0, 0, 0, 1, 7])).starts_with("Priority"));
    assert!(f(raw(kind::RST_STREAM, 0, 3, &[0, 0, 0, 8])).contains("code: 8"));
    let mut s = Vec::new();
    put_settings(&mut s, &[(setting::MAX_CONCURRENT_STREAMS, 100), (0x99, 5)]);
    assert!(f(s).starts_with("Settings { ack: false"));
    let mut s = Vec::new();
    put_settings_ack(&mut s);
    assert!(f(s).starts_with("Settings { ack: true"));
    let mut p = Vec::new();
    put_ping(&mut p, false, *b"12345678");
    assert!(f(p).contains("ack: false"));
    let mut g = Vec::new();
    put_goaway(&mut g, 5, 2, b"bye");
    assert!(f(g).contains("last_stream: 5, code: 2, debug: [98, 121, 101]"));
    let mut w = Vec::new();
    put_window_update(&mut w, 0, 100);
    assert!(f(w).contains("increment: 100"));
    let pp = f(raw(
        kind::PUSH_PROMISE,
        flag::END_HEADERS,
        1,
        &[0, 0, 0, 2, 0x82],
    ));
    assert!(pp.contains("promised: 2"), "{pp}");
    // Unknown type: skipped, reported with its length.
    assert_eq!(
        f(raw(0xfa, 0xff, 7, &[1, 2, 3])),
        "Unknown { kind: 250, stream: 7, len: 3 }"
    );
}

#[test]
fn header_blocks_need_their_continuations() {
    let h = raw(kind::HEADERS, 0, 1, &[0x82]);
    let c = raw(kind::CONTINUATION, flag::END_HEADERS, 1, &[0x84]);
    assert!(one(&[h.clone(), c.clone()].concat()).is_ok());
    // Something else in between, even PING or an unknown frame.
    let mut ping = Vec::new();
    put_ping(&mut ping, false, [0; 8]);
    assert_eq!(
        one(&[h.clone(), ping].concat()),
        Err(E::ExpectedContinuation {
            kind: kind::PING,
            stream: 1
        })
    );
    assert!(one(&[h.clone(), raw(0xfa, 0, 0, b"")].concat()).is_err());
    // A CONTINUATION of another stream.
    let c3 = raw(kind::CONTINUATION, flag::END_HEADERS, 3, &[0x84]);
    assert!(one(&[h, c3].concat()).is_err());
    // A CONTINUATION after a complete block, or first.
    let hh = raw(kind::HEADERS, flag::END_HEADERS, 1, &[0x82]);
    let e = one(&[hh, c.clone()].concat()).unwrap_err();
    assert_eq!(e, E::UnexpectedContinuation { stream: 1 });
    assert_eq!(
        e.to_string(),
        "CONTINUATION not following HEADERS on stream 1"
    );
    assert!(one(&c).is_err());
}

#[test]
fn frame_size_rules() {
    let big = vec![0; 20_000];
    let e = one(&raw(kind::DATA, 0, 1, &big)).unwrap_err();
    assert_eq!(e.to_string(), "frame of 20000 bytes > max 16384");
    // Refused from the header alone.
    let mut r = FrameReader::new(DEFAULT_MAX_FRAME_SIZE, false);
    assert!(r.next(&raw(kind::DATA, 0, 1, &big)[..9]).is_err());
    // A larger max takes it.
    assert_eq!(read_all(32_768, &raw(kind::DATA, 0, 1, &big)).0.len(), 1);
    let size =
        |k: u8, flags: u8, stream: u32, len: usize| one(&raw(k, flags, stream, &vec![0; len]));
    assert!(matches!(
        size(kind::PING, 0, 0, 7),
        Err(E::FrameSize { .. })
    ));
    assert!(matches!(
        size(kind::PING, 0, 0, 9),
        Err(E::FrameSize { .. })
    ));
    assert!(matches!(
        size(kind::PRIORITY, 0, 1, 4),
        Err(E::FrameSize { .. })
    ));
    assert!(matches!(
        size(kind::RST_STREAM, 0, 1, 5),
        Err(E::FrameSize { .. })
    ));
    assert!(matches!(
        size(kind::WINDOW_UPDATE, 0, 0, 3),
        Err(E::FrameSize { .. })
    ));
    assert!(matches!(
        size(kind::SETTINGS, 0, 0, 7),
        Err(E::FrameSize { .. })
    ));
    assert!(matches!(
        size(kind::SETTINGS, flag::ACK, 0, 6),
        Err(E::FrameSize { .. })
    ));
    assert!(matches!(
        size(kind::GOAWAY, 0, 0, 7),
        Err(E::FrameSize { .. })
    ));
    assert!(matches!(
        size(kind::PUSH_PROMISE, 0, 1, 3),
        Err(E::FrameSize { .. })
    ));
    assert!(matches!(
        size(kind::HEADERS, flag::PRIORITY | flag::END_HEADERS, 1, 4),
        Err(E::FrameSize { .. })
    ));
    assert_eq!(
        size(kind::PING, 0, 0, 7).unwrap_err().to_string(),
        "PING of 7 bytes"
    );
}

#[test]
fn stream_id_rules() {
    let on = |k: u8, stream: u32, len: usize| one(&raw(k, 0, stream, &vec![0; len]));
    for (k, len) in [(kind::SETTINGS, 0), (kind::PING, 8), (kind::GOAWAY, 8)] {
        let e = on(k, 1, len).unwrap_err();
        assert_eq!(e, E::BadStreamId { kind: k, stream: 1 });
    }
    assert_eq!(
        on(kind::SETTINGS, 1, 0).unwrap_err().to_string(),
        "SETTINGS on stream 1"
    );
    for (k, len) in [
        (kind::DATA, 0),
        (kind::HEADERS, 0),
        (kind::PRIORITY, 5),
        (kind::RST_STREAM, 4),
        (kind::PUSH_PROMISE, 4),
    ] {
        assert!(matches!(on(k, 0, len), Err(E::BadStreamId { .. })), "{k}");
    }
    // The reserved bit is ignored.
    let d = one(&raw(kind::DATA, 0, 0x8000_0001, b"")).unwrap();
    assert!(d.contains("stream: 1,"), "{d}");
}

#[test]
fn padding_rules() {
    let p = |k: u8, flags: u8, payload: &[u8]| one(&raw(k, flags | flag::PADDED, 1, payload));
    assert!(matches!(p(kind::DATA, 0, &[]), Err(E::BadPadding { .. })));
    assert!(matches!(p(kind::DATA, 0, &[1]), Err(E::BadPadding { .. })));
    assert!(p(kind::DATA, 0, &[0]).is_ok());
    assert!(p(kind::DATA, 0, &[1, 0]).is_ok());
    let hp = flag::PRIORITY | flag::END_HEADERS;
    assert!(matches!(
        p(kind::HEADERS, hp, &[1, 0, 0, 0, 0, 0]),
        Err(E::BadPadding { .. })
    ));
    assert!(p(kind::HEADERS, hp, &[1, 0, 0, 0, 0, 0, 0]).is_ok());
    assert!(matches!(
        p(kind::PUSH_PROMISE, flag::END_HEADERS, &[1, 0, 0, 0, 2]),
        Err(E::BadPadding { .. })
    ));
    assert_eq!(
        p(kind::DATA, 0, &[5]).unwrap_err().to_string(),
        "DATA padding longer than payload"
    );
}

#[test]
fn settings_and_window_values() {
    let s = |id: u16, v: u32| {
        let mut b = Vec::new();
        put_settings(&mut b, &[(id, v)]);
        one(&b)
    };
    assert!(s(setting::ENABLE_PUSH, 0).is_ok());
    assert_eq!(
        s(setting::ENABLE_PUSH, 1),
        Err(E::BadSetting {
            id: setting::ENABLE_PUSH,
            value: 1
        })
    );
    assert!(s(setting::INITIAL_WINDOW_SIZE, MAX_WINDOW).is_ok());
    assert!(s(setting::INITIAL_WINDOW_SIZE, MAX_WINDOW + 1).is_err());
    assert!(s(setting::MAX_FRAME_SIZE, 16_383).is_err());
    assert!(s(setting::MAX_FRAME_SIZE, MAX_MAX_FRAME_SIZE + 1).is_err());
    assert!(s(setting::MAX_FRAME_SIZE, MAX_MAX_FRAME_SIZE).is_ok());
    assert!(s(0x1234, u32::MAX).is_ok());
    let e = one(&raw(kind::WINDOW_UPDATE, 0, 3, &[0x80, 0, 0, 0])).unwrap_err();
    assert_eq!(e, E::ZeroWindowIncrement { stream: 3 });
    assert_eq!(e.to_string(), "WINDOW_UPDATE of 0 on stream 3");
}

#[test]
fn first_frame_must_be_settings() {
    let mut r = FrameReader::new(DEFAULT_MAX_FRAME_SIZE, true);
    assert_eq!(r.next(b"HTTP/1.1 400 Bad Request\r\n"), Err(E::NotHttp2));
    let mut r = FrameReader::new(DEFAULT_MAX_FRAME_SIZE, true);
    let mut ping = Vec::new();
    put_ping(&mut ping, false, [0; 8]);
    assert_eq!(r.next(&ping), Err(E::FirstNotSettings { kind: kind::PING }));
    let mut r = FrameReader::new(DEFAULT_MAX_FRAME_SIZE, true);
    let mut s = Vec::new();
    put_settings(&mut s, &[]);
    s.extend_from_slice(&ping);
    let (used, f) = r.next(&s).unwrap();
    assert!(matches!(f, Some(Frame::Settings { .. })));
    assert!(matches!(
        r.next(&s[used..]),
        Ok((8 | 17, Some(Frame::Ping { .. })))
    ));
}

#[test]
fn unknown_frames_are_not_buffered() {
    let mut r = FrameReader::new(DEFAULT_MAX_FRAME_SIZE, false);
    let f = raw(0x20, 0, 0, &[7; 16_000]);
    for b in f.chunks(1000) {
        r.next(b).unwrap();
    }
    assert_eq!(r.heap_bytes(), 0);
    assert!(r.at_boundary());
}

#[test]
fn encoders_split_header_blocks() {
    let block: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
    let mut out = Vec::new();
    put_headers(&mut out, 5, &block, true, 16_384);
    let mut r = FrameReader::new(DEFAULT_MAX_FRAME_SIZE, false);
    let mut got = Vec::new();
    let mut kinds = Vec::new();
    let mut input = &out[..];
    while !input.is_empty() {
        let (used, f) = r.next(input).unwrap();
        input = &input[used..];
        match f.unwrap() {
            Frame::Headers {
                block,
                end_stream: true,
                end_headers: false,
                ..
            } => {
                kinds.push("H");
                got.extend_from_slice(block);
            }
            Frame::Continuation {
                block, end_headers, ..
            } => {
                kinds.push(if end_headers { "C!" } else { "C" });
                got.extend_from_slice(block);
            }
            f => panic!("{f:?}"),
        }
    }
    assert_eq!(kinds, ["H", "C", "C!"]);
    assert_eq!(got, block);
    let mut out = Vec::new();
    put_headers(&mut out, 5, &[], false, 16_384);
    assert_eq!(out, [0, 0, 0, 1, flag::END_HEADERS, 0, 0, 0, 5]);
}
