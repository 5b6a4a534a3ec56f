//! The client state machine: what ends a connection.

use super::conn::{drain, feed, get, ready, settings};
use super::{data, headers, raw};
use crate::h2::conn::{Client, Limits, OpenError};
use crate::h2::error::{code, ProtocolError as E};
use crate::h2::frame::{self, flag, kind, setting};
use crate::h2::hpack::{encode_block, encode_str, HpackError};

/// A ready client with stream 1 open (GET), output drained.
fn open(limits: Limits) -> Client {
    let mut c = ready(limits);
    c.open_stream(&get(), b"").unwrap();
    drain(&mut c);
    c
}

fn fails(c: &mut Client, input: &[u8]) -> E {
    let e = feed(c, input).unwrap_err();
    // Sticky, and a GOAWAY with its code is queued.
    assert_eq!(c.feed(b"").unwrap_err(), e);
    assert_eq!(c.error(), Some(&e));
    let out = drain(c);
    let goaway = format!("GOAWAY 0 {} {}", code::name(e.code()), e);
    assert_eq!(out.last(), Some(&goaway), "{out:?}");
    assert_eq!(c.open_stream(&get(), b""), Err(OpenError::Failed));
    e
}

/// What ends the connection, the same whether the fields are kept or not.
fn malformed(list: &[(&str, &str)]) -> String {
    let mut c = open(Limits::default());
    let kept = fails(&mut c, &headers(1, list, true)).to_string();
    let mut c = open(Limits {
        keep_fields: false,
        ..Limits::default()
    });
    assert_eq!(fails(&mut c, &headers(1, list, true)).to_string(), kept);
    kept
}

#[test]
fn malformed_heads() {
    let m = |l: &[(&str, &str)]| malformed(l);
    assert_eq!(
        m(&[(":status", "200"), (":status", "200")]),
        "malformed response on stream 1: duplicate :status"
    );
    assert!(m(&[("a", "b")]).ends_with("missing :status"));
    assert!(m(&[(":status", "2000")]).ends_with("invalid :status"));
    assert!(m(&[(":status", "099")]).ends_with("invalid :status"));
    assert!(m(&[(":status", "20a")]).ends_with("invalid :status"));
    assert!(m(&[(":status", "101")]).ends_with("101 in HTTP/2"));
    assert!(m(&[(":status", "100")]).ends_with("1xx response with END_STREAM"));
    assert!(m(&[(":status", "200"), (":path", "/")]).ends_with("other than :status"));
    assert!(m(&[("a", "b"), (":status", "200")]).ends_with("after a regular field"));
    assert!(m(&[(":status", "200"), ("Upper", "x")]).ends_with("invalid field name"));
    assert!(m(&[(":status", "200"), ("", "x")]).ends_with("invalid field name"));
    assert!(m(&[(":status", "200"), ("a b", "x")]).ends_with("invalid field name"));
    assert!(m(&[(":status", "200"), ("connection", "close")])
        .ends_with("connection-specific header field"));
    assert!(m(&[(":status", "200"), ("transfer-encoding", "chunked")]).ends_with("header field"));
    assert!(m(&[(":status", "200"), ("a", " x")]).ends_with("invalid field value"));
    assert!(m(&[(":status", "200"), ("a", "x\t")]).ends_with("invalid field value"));
    assert!(m(&[(":status", "200"), ("a", "x\ny")]).ends_with("invalid field value"));
    assert!(m(&[(":status", "200"), ("a", "x\0")]).ends_with("invalid field value"));
    // Inner spaces and non-ASCII octets in values are fine.
    let mut c = open(Limits::default());
    feed(
        &mut c,
        &headers(1, &[(":status", "200"), ("a", "x y\u{e9}")], true),
    )
    .unwrap();
}

/// Every octet in a name and in a value, against the rules of RFC 9113
/// section 8.2.1 written out.
#[test]
fn field_octets_by_the_rules() {
    use crate::h2::response::check_fields;
    for b in 0..=255u8 {
        let status = (b":status".to_vec(), b"200".to_vec());
        let name = vec![b'a', b, b'a'];
        let r = check_fields(&[status.clone(), (name, b"v".to_vec())], false);
        let bad = b <= 0x20 || b.is_ascii_uppercase() || b >= 0x7f || b == b':';
        assert_eq!(r.is_err(), bad, "name octet {b:#04x}: {r:?}");
        let value = vec![b'a', b, b'a'];
        let r = check_fields(&[status, (b"n".to_vec(), value)], false);
        assert_eq!(
            r.is_err(),
            matches!(b, 0 | b'\r' | b'\n'),
            "value octet {b:#04x}: {r:?}"
        );
        // At every place of a value long enough for whole words.
        for at in 1..19 {
            let mut value = vec![b'a'; 20];
            value[at] = b;
            let r = check_fields(&[(b"n".to_vec(), value)], true);
            assert_eq!(
                r.is_err(),
                matches!(b, 0 | b'\r' | b'\n'),
                "value octet {b:#04x} at {at}: {r:?}"
            );
        }
    }
}

#[test]
fn malformed_sequences() {
    let mut c = open(Limits::default());
    let e = fails(&mut c, &data(1, b"x", false));
    assert!(e.to_string().ends_with("DATA before the response head"));
    // Trailers must end the stream and carry no pseudo-header.
    let mut c = open(Limits::default());
    let mut input = headers(1, &[(":status", "200")], false);
    input.extend(headers(1, &[("t", "1")], false));
    assert!(fails(&mut c, &input)
        .to_string()
        .ends_with("trailers without END_STREAM"));
    let mut c = open(Limits::default());
    let mut input = headers(1, &[(":status", "200")], false);
    input.extend(headers(1, &[(":status", "200")], true));
    assert!(fails(&mut c, &input)
        .to_string()
        .ends_with("pseudo-header in trailers"));
    // Too many 1xx.
    let mut c = open(Limits::default());
    let input: Vec<u8> = (0..9)
        .flat_map(|_| headers(1, &[(":status", "100")], false))
        .collect();
    assert!(fails(&mut c, &input)
        .to_string()
        .ends_with("too many 1xx responses"));
}

#[test]
fn frames_on_streams_that_are_not_open() {
    let mut c = open(Limits::default());
    let mut input = headers(1, &[(":status", "200")], true);
    input.extend(data(1, b"late", false));
    let e = fails(&mut c, &input);
    assert_eq!(e.to_string(), "DATA on closed stream 1");
    assert_eq!(e.code(), code::STREAM_CLOSED);
    let mut c = open(Limits::default());
    let e = fails(&mut c, &headers(3, &[(":status", "200")], true));
    assert_eq!(e.to_string(), "HEADERS on idle stream 3");
    let mut c = open(Limits::default());
    let e = fails(&mut c, &headers(2, &[(":status", "200")], true));
    assert_eq!(
        e,
        E::IdleStream {
            kind: kind::HEADERS,
            stream: 2
        }
    );
    let mut c = open(Limits::default());
    fails(&mut c, &raw(kind::RST_STREAM, 0, 5, &[0, 0, 0, 0]));
    let mut c = open(Limits::default());
    fails(&mut c, &raw(kind::WINDOW_UPDATE, 0, 7, &[0, 0, 0, 1]));
    // A stream taken after it closed: frames on it are errors.
    let mut c = open(Limits::default());
    feed(&mut c, &headers(1, &[(":status", "200")], true)).unwrap();
    c.take_response(1);
    assert_eq!(
        fails(&mut c, &data(1, b"", true)).to_string(),
        "DATA on closed stream 1"
    );
    // PRIORITY is fine anywhere.
    let mut c = open(Limits::default());
    feed(&mut c, &raw(kind::PRIORITY, 0, 99, &[0, 0, 0, 1, 1])).unwrap();
}

#[test]
fn push_promise_is_refused() {
    let mut c = open(Limits::default());
    let e = fails(
        &mut c,
        &raw(kind::PUSH_PROMISE, flag::END_HEADERS, 1, &[0, 0, 0, 2]),
    );
    assert_eq!(e.to_string(), "PUSH_PROMISE with push disabled");
    let mut c = open(Limits::default());
    let e = fails(&mut c, &settings(&[(setting::ENABLE_PUSH, 1)]));
    assert_eq!(e.to_string(), "SETTINGS parameter 2 = 1");
}

#[test]
fn header_block_limits() {
    let limits = Limits {
        max_header_list_bytes: 4096,
        ..Limits::default()
    };
    // Encoded: 3 frames of 2000 bytes pass 4096.
    let mut c = open(limits);
    let mut input = raw(kind::HEADERS, 0, 1, &[0; 2000]);
    input.extend(raw(kind::CONTINUATION, 0, 1, &[0; 2000]));
    input.extend(raw(kind::CONTINUATION, 0, 1, &[0; 2000]));
    let e = fails(&mut c, &input);
    assert_eq!(e.to_string(), "header block over 4096 bytes");
    // Decoded: a small block that names one big entry many times.
    let mut c = open(limits);
    let mut block = vec![0x88, 0x40];
    encode_str(&mut block, b"x");
    encode_str(&mut block, &[b'y'; 2000]);
    block.extend_from_slice(&[0xbe; 100]);
    let h = raw(kind::HEADERS, flag::END_HEADERS, 1, &block);
    let e = fails(&mut c, &h);
    assert_eq!(e, E::Hpack(HpackError::ListTooLarge { max: 4096 }));
    assert_eq!(e.code(), code::ENHANCE_YOUR_CALM);
    // A table-size update above 4096.
    let mut c = open(limits);
    let h = raw(
        kind::HEADERS,
        flag::END_HEADERS,
        1,
        &[0x3f, 0xe1, 0xff, 0x03, 0x88],
    );
    assert_eq!(
        fails(&mut c, &h).to_string(),
        "HPACK table size update 65536 > 4096"
    );
    // Garbage.
    let mut c = open(limits);
    let e = fails(&mut c, &raw(kind::HEADERS, flag::END_HEADERS, 1, &[0x80]));
    assert_eq!(e.code(), code::COMPRESSION_ERROR);
}

#[test]
fn continuation_flood() {
    let mut c = open(Limits {
        max_header_list_bytes: 1024,
        ..Limits::default()
    });
    let mut input = raw(kind::HEADERS, 0, 1, &[0x88]);
    for _ in 0..20 {
        input.extend(raw(kind::CONTINUATION, 0, 1, &[0x88]));
    }
    let e = fails(&mut c, &input);
    assert_eq!(
        e.to_string(),
        "CONTINUATION flood (over 17 in one header block)"
    );
}

#[test]
fn control_frame_floods() {
    let max = Limits::default().max_control_frames_per_round;
    let mut ping = Vec::new();
    frame::put_ping(&mut ping, false, [1; 8]);
    let pings: Vec<u8> = (0..max).flat_map(|_| ping.clone()).collect();
    let mut c = ready(Limits::default());
    c.begin_round();
    feed(&mut c, &pings).unwrap();
    // The next round may have as many again.
    c.begin_round();
    feed(&mut c, &pings).unwrap();
    drain(&mut c);
    let e = fails(&mut c, &ping);
    assert!(e
        .to_string()
        .starts_with("too many control frames (SETTINGS/PING/...) in one round"));
    let floods: [Vec<u8>; 5] = [
        settings(&[]),
        raw(kind::WINDOW_UPDATE, 0, 0, &[0, 0, 0, 1]),
        raw(0x42, 0, 0, b""),
        raw(kind::PRIORITY, 0, 1, &[0, 0, 0, 0, 1]),
        data(1, b"", false),
    ];
    for f in floods {
        let mut c = open(Limits::default());
        feed(&mut c, &headers(1, &[(":status", "200")], false)).unwrap();
        c.begin_round();
        let input: Vec<u8> = (0..=max).flat_map(|_| f.clone()).collect();
        assert!(matches!(
            fails(&mut c, &input),
            E::TooManyControlFrames { .. }
        ));
    }
}

#[test]
fn flow_control_violations() {
    // A single DATA frame larger than the window we gave.
    let mut c = open(Limits {
        max_frame_size: 1 << 20,
        ..Limits::default()
    });
    let mut input = headers(1, &[(":status", "200")], false);
    input.extend(data(1, &vec![0; 70_000], false));
    let e = fails(&mut c, &input);
    assert_eq!(
        e.to_string(),
        "DATA of 70000 bytes > connection window 65535"
    );
    assert_eq!(e.code(), code::FLOW_CONTROL_ERROR);
    // The stream's window: stream 1 takes 30000 (not yet credited), then
    // stream 3 60000, which credits the connection; stream 1's 40000
    // more fit the connection window, not its own.
    let mut c = open(Limits {
        max_frame_size: 1 << 20,
        ..Limits::default()
    });
    c.open_stream(&get(), b"").unwrap();
    let mut input = headers(1, &[(":status", "200")], false);
    input.extend(headers(3, &[(":status", "200")], false));
    input.extend(data(1, &vec![0; 30_000], false));
    input.extend(data(3, &vec![0; 30_000], false));
    input.extend(data(1, &vec![0; 40_000], false));
    let e = fails(&mut c, &input);
    assert_eq!(
        e.to_string(),
        "DATA of 40000 bytes > window 35535 on stream 1"
    );
    // Window overflow from WINDOW_UPDATE and from SETTINGS.
    let mut c = open(Limits::default());
    let big = frame::MAX_WINDOW.to_be_bytes();
    let e = fails(&mut c, &raw(kind::WINDOW_UPDATE, 0, 0, &big));
    assert_eq!(e, E::WindowOverflow { stream: 0 });
    let mut c = open(Limits::default());
    let e = fails(&mut c, &raw(kind::WINDOW_UPDATE, 0, 1, &big));
    assert_eq!(e.to_string(), "send window of stream 1 above 2^31-1");
    let mut c = open(Limits::default());
    let mut input = raw(kind::WINDOW_UPDATE, 0, 1, &1_000_000u32.to_be_bytes());
    input.extend(settings(&[(
        setting::INITIAL_WINDOW_SIZE,
        frame::MAX_WINDOW,
    )]));
    assert_eq!(fails(&mut c, &input), E::WindowOverflow { stream: 1 });
}

#[test]
fn not_http2_at_all() {
    let mut c = Client::new(Limits::default());
    c.start();
    drain(&mut c);
    let e = fails(&mut c, b"HTTP/1.1 400 Bad Request\r\n\r\n");
    assert_eq!(e.to_string(), "server answered in HTTP/1.x");
    let mut c = Client::new(Limits::default());
    c.start();
    drain(&mut c);
    let e = fails(&mut c, &raw(kind::PING, 0, 0, &[0; 8]));
    assert_eq!(e.to_string(), "first frame is PING, not SETTINGS");
}

#[test]
fn memory_stays_bounded_under_garbage() {
    let mut c = open(Limits::default());
    feed(&mut c, &headers(1, &[(":status", "200")], false)).unwrap();
    let mut bytes = Vec::new();
    for i in 0..2000u32 {
        bytes.extend(data(1, &vec![i as u8; 1000], false));
    }
    let _ = feed(&mut c, &bytes);
    assert!(c.heap_bytes() < 64 * 1024, "{}", c.heap_bytes());
    let _ = encode_block(&[]);
}
