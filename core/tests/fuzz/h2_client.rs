//! The HTTP/2 client against random servers: split independence, memory
//! bound, valid output, flow control against a model.

use std::collections::VecDeque;

use super::pieces;
use healthcheck_core::h2::frame::{self, flag, kind, setting, Frame, FrameReader};
use healthcheck_core::h2::hpack;
use healthcheck_core::h2::{Client, Field, Limits};
use proptest::collection::vec;
use proptest::prelude::*;

/// One thing a server does.
#[derive(Clone, Debug)]
enum Act {
    Settings(Vec<(u16, u32)>),
    SettingsAck,
    Ping([u8; 8]),
    Window(u8, u32),
    Head {
        s: u8,
        fields: Vec<Field>,
        end: bool,
        split: usize,
        pad: Option<u8>,
    },
    Data {
        s: u8,
        len: usize,
        end: bool,
        pad: Option<u8>,
    },
    Rst(u8, u32),
    GoAway(u32, u32),
    Unknown(u8, Vec<u8>),
    Priority(u8),
    Garbage(Vec<u8>),
}

fn sid(sel: u8) -> u32 {
    [1, 3, 1, 3, 5, 2, 0][usize::from(sel) % 7]
}

fn f(n: &str, v: &str) -> Field {
    (n.as_bytes().to_vec(), v.as_bytes().to_vec())
}

fn field() -> impl Strategy<Value = Field> {
    prop_oneof![
        8 => (0usize..4, vec(any::<u8>(), 0..8)).prop_map(|(i, v)| {
            let n = ["content-type", "grpc-status", "x-a", "server"][i];
            (n.as_bytes().to_vec(), v)
        }),
        1 => Just(f("Upper", "x")),
        1 => Just(f("connection", "close")),
        1 => Just(f(":path", "/")),
        1 => Just(f(":status", "200")),
        1 => Just(f("", "x")),
        1 => Just(f("x-big", &"b".repeat(3000))),
    ]
}

fn head_fields() -> impl Strategy<Value = Vec<Field>> {
    let status = prop_oneof![
        6 => Just("200"), 1 => Just("100"), 1 => Just("204"), 1 => Just("503"),
        1 => Just("101"), 1 => Just("99"), 1 => Just("2000"),
    ];
    (prop::option::weighted(0.9, status), vec(field(), 0..4)).prop_map(|(s, rest)| {
        let mut v: Vec<Field> = s.map(|s| f(":status", s)).into_iter().collect();
        v.extend(rest);
        v
    })
}

fn settings_params() -> impl Strategy<Value = Vec<(u16, u32)>> {
    vec(
        prop_oneof![
            (
                Just(setting::INITIAL_WINDOW_SIZE),
                prop_oneof![0u32..70_000, Just(frame::MAX_WINDOW)]
            ),
            (Just(setting::MAX_FRAME_SIZE), 16_384u32..40_000),
            (Just(setting::MAX_CONCURRENT_STREAMS), 0u32..4),
            (Just(setting::HEADER_TABLE_SIZE), any::<u32>()),
            (
                Just(setting::ENABLE_PUSH),
                prop_oneof![9 => Just(0u32), 1 => Just(1u32)]
            ),
            (7u16..20, any::<u32>()),
        ],
        0..4,
    )
}

fn act() -> impl Strategy<Value = Act> {
    let pad = prop::option::weighted(0.2, 0u8..20);
    prop_oneof![
        2 => settings_params().prop_map(Act::Settings),
        1 => Just(Act::SettingsAck),
        1 => any::<[u8; 8]>().prop_map(Act::Ping),
        2 => (any::<u8>(), 1u32..100_000).prop_map(|(s, i)| Act::Window(s, i)),
        6 => (any::<u8>(), head_fields(), any::<bool>(), 1usize..200, pad.clone())
            .prop_map(|(s, fields, end, split, pad)| Act::Head { s, fields, end, split, pad }),
        6 => (any::<u8>(), prop_oneof![0usize..100, 0usize..17_000], any::<bool>(), pad)
            .prop_map(|(s, len, end, pad)| Act::Data { s, len, end, pad }),
        1 => (any::<u8>(), 0u32..16).prop_map(|(s, c)| Act::Rst(s, c)),
        1 => (0u32..6, 0u32..3).prop_map(|(l, c)| Act::GoAway(l, c)),
        1 => (10u8..=255, vec(any::<u8>(), 0..30)).prop_map(|(k, p)| Act::Unknown(k, p)),
        1 => any::<u8>().prop_map(Act::Priority),
        1 => vec(any::<u8>(), 1..20).prop_map(Act::Garbage),
    ]
}

/// A valid field of a response (lowercase token name, clean value).
fn good_field() -> impl Strategy<Value = Field> {
    (
        "[a-z][a-z0-9-]{0,10}",
        "[a-zA-Z0-9/.;=]([a-zA-Z0-9/.;= ]{0,10}[a-zA-Z0-9/.;=])?",
    )
        .prop_filter("not connection-specific", |(n, _)| {
            !matches!(
                n.as_str(),
                "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade"
            )
        })
        .prop_map(|(n, v)| (n.into_bytes(), v.into_bytes()))
}

/// One stream's valid response: 1xx heads, the head, DATA, maybe
/// trailers; END_STREAM on the last frame.
fn good_stream(sel: u8) -> impl Strategy<Value = Vec<Act>> {
    let pad = prop::option::weighted(0.2, 0u8..20);
    (
        vec(Just("100"), 0..2),
        prop_oneof![Just("200"), Just("204"), Just("503")],
        vec(good_field(), 0..4),
        vec((0usize..6000, pad.clone()), 0..5),
        prop::option::of(vec(good_field(), 0..3)),
        (1usize..300, pad),
    )
        .prop_map(
            move |(interim, status, fields, chunks, trailers, (split, hpad))| {
                let head = |st: &str, rest: Vec<Field>, end: bool| {
                    let mut f = vec![f(":status", st)];
                    f.extend(rest);
                    Act::Head {
                        s: sel,
                        fields: f,
                        end,
                        split,
                        pad: hpad,
                    }
                };
                let mut acts: Vec<Act> = interim.iter().map(|st| head(st, vec![], false)).collect();
                let ends_in_head = chunks.is_empty() && trailers.is_none();
                acts.push(head(status, fields, ends_in_head));
                let n = chunks.len();
                for (i, (len, pad)) in chunks.into_iter().enumerate() {
                    let end = i + 1 == n && trailers.is_none();
                    acts.push(Act::Data {
                        s: sel,
                        len,
                        end,
                        pad,
                    });
                }
                if let Some(t) = trailers {
                    acts.push(Act::Head {
                        s: sel,
                        fields: t,
                        end: true,
                        split,
                        pad: None,
                    });
                }
                acts
            },
        )
}

/// A control frame a well-behaved server may send.
fn good_control() -> impl Strategy<Value = Act> {
    prop_oneof![
        any::<[u8; 8]>().prop_map(Act::Ping),
        (prop_oneof![Just(0u8), Just(1u8), Just(2u8)], 1u32..10_000)
            .prop_map(|(s, i)| Act::Window(s, i)),
        vec((Just(setting::MAX_CONCURRENT_STREAMS), 2u32..100), 0..2).prop_map(Act::Settings),
        any::<u8>().prop_map(Act::Priority),
        (10u8..=255, vec(any::<u8>(), 0..30)).prop_map(|(k, p)| Act::Unknown(k, p)),
    ]
}

/// Two valid responses interleaved with control frames, and sometimes
/// one random act (often a fault) somewhere.
fn conversation() -> impl Strategy<Value = Vec<Act>> {
    (
        good_stream(0),
        good_stream(1),
        vec(any::<bool>(), 0..40),
        vec((any::<prop::sample::Index>(), good_control()), 0..4),
        prop::option::weighted(0.4, (any::<prop::sample::Index>(), act())),
    )
        .prop_map(|(a, b, order, controls, fault)| {
            let (mut a, mut b) = (VecDeque::from(a), VecDeque::from(b));
            let mut acts = Vec::new();
            let mut order = order.into_iter();
            while !a.is_empty() || !b.is_empty() {
                let from_a = b.is_empty() || (!a.is_empty() && order.next().unwrap_or(true));
                acts.extend(if from_a { a.pop_front() } else { b.pop_front() });
            }
            for (at, c) in controls {
                acts.insert(at.index(acts.len() + 1), c);
            }
            if let Some((at, f)) = fault {
                acts.insert(at.index(acts.len() + 1), f);
            }
            acts
        })
}

fn put(v: &mut Vec<u8>, k: u8, flags: u8, stream: u32, payload: &[u8]) {
    frame::put_header(v, payload.len(), k, flags, stream);
    v.extend_from_slice(payload);
}

fn padded(body: &[u8], pad: Option<u8>) -> (u8, Vec<u8>) {
    match pad {
        None => (0, body.to_vec()),
        Some(p) => {
            let mut v = vec![p];
            v.extend_from_slice(body);
            v.extend(std::iter::repeat(0).take(usize::from(p)));
            (flag::PADDED, v)
        }
    }
}

fn encode(acts: &[Act]) -> Vec<u8> {
    let mut v = Vec::new();
    for a in acts {
        match a {
            Act::Settings(p) => frame::put_settings(&mut v, p),
            Act::SettingsAck => frame::put_settings_ack(&mut v),
            Act::Ping(d) => frame::put_ping(&mut v, false, *d),
            Act::Window(s, i) => frame::put_window_update(&mut v, sid(*s).min(3), *i),
            Act::Head {
                s,
                fields,
                end,
                split,
                pad,
            } => {
                let block = hpack::encode_block(fields);
                let (first, rest) = block.split_at((*split).min(block.len()));
                let es = if *end { flag::END_STREAM } else { 0 };
                let eh = if rest.is_empty() {
                    flag::END_HEADERS
                } else {
                    0
                };
                let (pf, payload) = padded(first, *pad);
                put(&mut v, kind::HEADERS, es | eh | pf, sid(*s), &payload);
                let mut chunks = rest.chunks(*split).peekable();
                while let Some(c) = chunks.next() {
                    let eh = if chunks.peek().is_none() {
                        flag::END_HEADERS
                    } else {
                        0
                    };
                    put(&mut v, kind::CONTINUATION, eh, sid(*s), c);
                }
            }
            Act::Data { s, len, end, pad } => {
                let (pf, payload) = padded(&vec![b'd'; *len], *pad);
                let es = if *end { flag::END_STREAM } else { 0 };
                put(&mut v, kind::DATA, es | pf, sid(*s), &payload);
            }
            Act::Rst(s, c) => frame::put_rst_stream(&mut v, sid(*s), *c),
            Act::GoAway(l, c) => frame::put_goaway(&mut v, *l, *c, b"bye"),
            Act::Unknown(k, p) => put(&mut v, *k, 0, 0, p),
            Act::Priority(s) => put(&mut v, kind::PRIORITY, 0, sid(*s), &[0, 0, 0, 0, 7]),
            Act::Garbage(g) => v.extend_from_slice(g),
        }
    }
    v
}

fn limits() -> impl Strategy<Value = Limits> {
    (
        1024usize..20_000,
        0usize..5000,
        8u32..60,
        prop_oneof![Just(65_535u32), 65_535u32..300_000],
        prop_oneof![Just(4096u32), 0u32..4096],
    )
        .prop_map(|(hl, body, ctl, win, table)| Limits {
            max_header_list_bytes: hl,
            max_body_bytes: body,
            max_control_frames_per_round: ctl,
            initial_window: win,
            header_table_size: table,
            ..Limits::default()
        })
}

fn get() -> Vec<Field> {
    vec![
        f(":method", "GET"),
        f(":scheme", "http"),
        f(":authority", "a"),
        f(":path", "/"),
    ]
}

/// Feeds the pieces in order, stopping at the first error.
fn feed_pieces(c: &mut Client, input: &[u8], cuts: &[usize]) -> Result<(), String> {
    for p in pieces(input, cuts) {
        c.feed(p).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The client's output after the preface, as frames: it must parse.
fn output_frames(c: &Client) -> Vec<u8> {
    let out = c.output();
    assert!(out.starts_with(frame::PREFACE));
    let mut input = &out[frame::PREFACE.len()..];
    let mut r = FrameReader::new(frame::MAX_MAX_FRAME_SIZE, false);
    let mut kinds = Vec::new();
    while !input.is_empty() {
        let (used, f) = r.next(input).expect("the client's output is valid frames");
        input = &input[used..];
        if let Some(f) = f {
            kinds.push(f.kind());
        }
    }
    assert!(r.at_boundary());
    kinds
}

proptest! {
    #![proptest_config(crate::cfg(256))]

    /// A random server conversation: the same state, output and result
    /// whole, in random pieces and byte by byte; bounded memory; the
    /// output valid frames, ending in GOAWAY after an error.
    #[test]
    fn h2_client_any_conversation(limits in limits(),
                                  bodies in (0usize..70_000, 0usize..100),
                                  first in settings_params(),
                                  acts in prop_oneof![1 => vec(act(), 0..24), 3 => conversation()],
                                  cuts in vec(1usize..64, 1..16)) {
        let mut c = Client::new(limits);
        c.start();
        let _ = c.open_stream(&get(), &vec![b'q'; bodies.0]);
        let _ = c.open_stream(&get(), &vec![b'r'; bodies.1]);
        let mut input = Vec::new();
        frame::put_settings(&mut input, &first);
        input.extend(encode(&acts));
        let (mut whole, mut split, mut bytewise) = (c.clone(), c.clone(), c);
        let r1 = whole.feed(&input).map_err(|e| e.to_string());
        let r2 = feed_pieces(&mut split, &input, &cuts);
        let r3 = feed_pieces(&mut bytewise, &input, &[1]);
        prop_assert_eq!(&r1, &r2);
        prop_assert_eq!(&r1, &r3);
        let state = format!("{whole:?}");
        prop_assert_eq!(&state, &format!("{split:?}"));
        prop_assert_eq!(&state, &format!("{bytewise:?}"));

        let l = *whole.limits();
        let per_stream = 3 * l.max_header_list_bytes + 2 * l.max_body_bytes + 70_000 + 1024;
        let bound = 40_000 + 2 * whole.output().len() + 3 * l.max_header_list_bytes
            + 2 * per_stream;
        prop_assert!(whole.heap_bytes() <= bound, "{} > {}", whole.heap_bytes(), bound);
        for id in [1, 3] {
            if let Some(r) = whole.response(id) {
                prop_assert!(r.body.len() <= l.max_body_bytes);
                prop_assert!(r.body_len >= r.body.len() as u64);
            }
        }
        let kinds = output_frames(&whole);
        if r1.is_err() {
            prop_assert_eq!(kinds.last(), Some(&kind::GOAWAY));
            prop_assert!(!whole.can_open_stream());
        }
        // Taking the streams never fails and leaves the output valid.
        whole.take_response(1);
        whole.take_response(3);
        output_frames(&whole);
    }

    /// Any bytes after a valid server preface: no panic, bounded memory,
    /// a sticky error.
    #[test]
    fn h2_client_any_bytes(bytes in vec(any::<u8>(), 0..2000), cuts in vec(1usize..64, 1..8)) {
        let mut c = Client::new(Limits::default());
        c.open_stream(&get(), b"").unwrap();
        let mut input = Vec::new();
        frame::put_settings(&mut input, &[]);
        input.extend(bytes);
        let r = feed_pieces(&mut c, &input, &cuts);
        prop_assert!(c.heap_bytes() < 64 * 1024 + 2 * c.output().len());
        if let Err(e) = r {
            prop_assert_eq!(c.feed(b"x").unwrap_err().to_string(), e);
        }
    }
}

#[derive(Clone, Debug)]
enum Grant {
    Conn(u32),
    Stream(u32),
    Initial(u32),
}

proptest! {
    #![proptest_config(crate::cfg(256))]

    /// Request data against a model of the server's windows: no DATA
    /// frame passes them or the server's max frame size, the bytes go out
    /// in order, and all of them once the windows allow.
    #[test]
    fn h2_client_flow_control(body_len in 0usize..200_000, w0 in 0u32..100_000,
                              max_frame in 16_384u32..40_000,
                              grants in vec(prop_oneof![
                                  (1u32..60_000).prop_map(Grant::Conn),
                                  (1u32..60_000).prop_map(Grant::Stream),
                                  (0u32..150_000).prop_map(Grant::Initial),
                              ], 0..16)) {
        let body: Vec<u8> = (0..body_len).map(|i| (i % 251) as u8).collect();
        let mut c = Client::new(Limits::default());
        c.start();
        let mut s = Vec::new();
        frame::put_settings(&mut s, &[(setting::INITIAL_WINDOW_SIZE, w0),
                                      (setting::MAX_FRAME_SIZE, max_frame)]);
        c.feed(&s).unwrap();
        let (mut conn, mut stream, mut initial) = (65_535i64, i64::from(w0), i64::from(w0));
        let skip = c.output().len();
        c.consume_output(skip);
        c.open_stream(&get(), &body).unwrap();
        let mut sent = Vec::new();
        let mut ended = false;
        let mut check = |c: &mut Client, conn: &mut i64, stream: &mut i64| {
            let out = c.output().to_vec();
            c.consume_output(out.len());
            let mut r = FrameReader::new(frame::MAX_MAX_FRAME_SIZE, false);
            let mut input = &out[..];
            while !input.is_empty() {
                let (used, f) = r.next(input).unwrap();
                input = &input[used..];
                match f {
                    Some(Frame::Data { data, end_stream, .. }) => {
                        let n = data.len() as i64;
                        assert!(n <= i64::from(max_frame) && n <= *conn && n <= *stream);
                        *conn -= n;
                        *stream -= n;
                        sent.extend_from_slice(data);
                        ended |= end_stream;
                    }
                    Some(Frame::Headers { end_stream, .. }) => ended |= end_stream,
                    _ => {}
                }
            }
        };
        check(&mut c, &mut conn, &mut stream);
        for g in &grants {
            let mut v = Vec::new();
            match g {
                Grant::Conn(i) => { frame::put_window_update(&mut v, 0, *i); conn += i64::from(*i) }
                Grant::Stream(i) => { frame::put_window_update(&mut v, 1, *i); stream += i64::from(*i) }
                Grant::Initial(w) => {
                    frame::put_settings(&mut v, &[(setting::INITIAL_WINDOW_SIZE, *w)]);
                    stream += i64::from(*w) - initial;
                    initial = i64::from(*w);
                }
            }
            c.feed(&v).unwrap();
            check(&mut c, &mut conn, &mut stream);
        }
        prop_assert_eq!(&sent[..], &body[..sent.len()]);
        let done = sent.len() == body.len();
        prop_assert_eq!(ended, done);
        prop_assert_eq!(c.send_blocked(1), !done);
        if !done {
            prop_assert!(conn <= 0 || stream <= 0, "could send more: {} {}", conn, stream);
        }
    }
}
