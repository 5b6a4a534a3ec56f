//! The client state machine: exchanges that work.

use super::{data, fields, headers, raw};
use crate::h2::conn::{Client, Event, Limits, OpenError};
use crate::h2::error::{code, ProtocolError as E};
use crate::h2::frame::{self, flag, kind, setting, Frame, FrameReader};
use crate::h2::hpack::Decoder;

/// Feeds `input` whole to `c` and byte by byte to a clone: both must end
/// in the same state, with the same output and result.
pub(super) fn feed(c: &mut Client, input: &[u8]) -> Result<(), E> {
    let mut bytewise = c.clone();
    let whole = c.feed(input);
    let mut each = Ok(());
    for b in input {
        each = bytewise.feed(std::slice::from_ref(b));
        if each.is_err() {
            break;
        }
    }
    assert_eq!(whole, each);
    assert_eq!(format!("{c:?}"), format!("{bytewise:?}"));
    whole
}

pub(super) fn settings(params: &[(u16, u32)]) -> Vec<u8> {
    let mut v = Vec::new();
    frame::put_settings(&mut v, params);
    v
}

/// A started client that has the server's (empty) SETTINGS, with its
/// output drained.
pub(super) fn ready(limits: Limits) -> Client {
    let mut c = Client::new(limits);
    c.start();
    feed(&mut c, &settings(&[])).unwrap();
    drain(&mut c);
    events(&mut c);
    c
}

/// The client's output as frames (debug strings, HEADERS and
/// CONTINUATION blocks decoded as field lists), drained. The preface is
/// shown as `PREFACE`.
pub(super) fn drain(c: &mut Client) -> Vec<String> {
    let mut out = c.output().to_vec();
    c.consume_output(out.len());
    let mut shown = Vec::new();
    if out.starts_with(frame::PREFACE) {
        shown.push("PREFACE".to_string());
        out.drain(..frame::PREFACE.len());
    }
    let mut r = FrameReader::new(frame::MAX_MAX_FRAME_SIZE, false);
    let mut input = &out[..];
    let mut block = Vec::new();
    while !input.is_empty() {
        let (used, f) = r.next(input).expect("the client's own frames parse");
        input = &input[used..];
        let Some(f) = f else { continue };
        match f {
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                block: b,
                ..
            } => {
                block.extend_from_slice(b);
                let es = if end_stream { " END_STREAM" } else { "" };
                shown.push(format!("HEADERS {stream}{es}"));
                if end_headers {
                    shown.push(decoded(&std::mem::take(&mut block)));
                }
            }
            Frame::Continuation {
                end_headers,
                block: b,
                ..
            } => {
                block.extend_from_slice(b);
                shown.push("CONTINUATION".into());
                if end_headers {
                    shown.push(decoded(&std::mem::take(&mut block)));
                }
            }
            Frame::Data {
                stream,
                end_stream,
                data,
                ..
            } => {
                let es = if end_stream { " END_STREAM" } else { "" };
                shown.push(format!("DATA {stream} {}{es}", data.len()));
            }
            Frame::Settings { ack: true, .. } => shown.push("SETTINGS ACK".into()),
            Frame::Settings { params, .. } => {
                let p: Vec<String> = params.iter().map(|(i, v)| format!("{i}={v}")).collect();
                shown.push(format!("SETTINGS {}", p.join(",")));
            }
            Frame::WindowUpdate { stream, increment } => {
                shown.push(format!("WINDOW_UPDATE {stream} {increment}"))
            }
            Frame::Ping { ack, data } => shown.push(format!("PING ack={ack} {data:?}")),
            Frame::RstStream { stream, code } => {
                shown.push(format!("RST_STREAM {stream} {}", code::name(code)))
            }
            Frame::GoAway {
                last_stream,
                code,
                debug,
            } => shown.push(format!(
                "GOAWAY {last_stream} {} {}",
                code::name(code),
                String::from_utf8_lossy(debug)
            )),
            f => shown.push(format!("{f:?}")),
        }
    }
    shown
}

fn decoded(block: &[u8]) -> String {
    let mut parts = Vec::new();
    Decoder::new(4096)
        .decode(block, 1 << 20, |n, v| {
            parts.push(format!(
                "{}={}",
                String::from_utf8_lossy(n),
                String::from_utf8_lossy(v)
            ))
        })
        .unwrap();
    parts.join(" ")
}

pub(super) fn get() -> Vec<crate::h2::Field> {
    fields(&[
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", "a"),
        (":path", "/"),
    ])
}

pub(super) fn events(c: &mut Client) -> Vec<Event> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

#[test]
fn start_sends_preface_and_settings() {
    let mut c = Client::new(Limits::default());
    assert!(!c.settings_received());
    c.start();
    c.start();
    assert_eq!(drain(&mut c), ["PREFACE", "SETTINGS 2=0,6=16384"]);
    let mut c = Client::new(Limits {
        header_table_size: 0,
        initial_window: 1 << 20,
        max_frame_size: 1 << 20,
        max_header_list_bytes: 1024,
        ..Limits::default()
    });
    c.start();
    assert_eq!(
        drain(&mut c),
        [
            "PREFACE",
            "SETTINGS 2=0,1=0,4=1048576,5=1048576,6=1024",
            "WINDOW_UPDATE 0 983041"
        ]
    );
}

#[test]
fn settings_are_acked_and_tracked() {
    let mut c = Client::new(Limits::default());
    c.start();
    drain(&mut c);
    let s = settings(&[
        (setting::MAX_CONCURRENT_STREAMS, 7),
        (setting::MAX_FRAME_SIZE, 20_000),
        (setting::HEADER_TABLE_SIZE, 0),
        (setting::MAX_HEADER_LIST_SIZE, 999),
        (0xff, 1),
    ]);
    feed(&mut c, &s).unwrap();
    assert!(c.settings_received() && !c.settings_acked());
    assert_eq!(drain(&mut c), ["SETTINGS ACK"]);
    let p = c.peer_settings();
    assert_eq!(p.max_concurrent_streams, Some(7));
    assert_eq!(p.max_frame_size, 20_000);
    assert_eq!(p.max_header_list_size, Some(999));
    let mut ack = Vec::new();
    frame::put_settings_ack(&mut ack);
    feed(&mut c, &ack).unwrap();
    assert!(c.settings_acked());
    assert_eq!(events(&mut c), [Event::Settings, Event::SettingsAck]);
    assert_eq!(drain(&mut c), Vec::<String>::new());
}

#[test]
fn get_with_body_and_trailers() {
    let mut c = ready(Limits::default());
    assert_eq!(c.next_stream_id(), Some(1));
    let id = c.open_stream(&get(), b"").unwrap();
    assert_eq!(id, 1);
    assert_eq!(
        drain(&mut c),
        [
            "HEADERS 1 END_STREAM",
            ":method=GET :scheme=http :authority=a :path=/"
        ]
    );
    let mut input = headers(
        1,
        &[(":status", "200"), ("content-type", "text/plain")],
        false,
    );
    input.extend(data(1, b"hello ", false));
    input.extend(data(1, b"world", false));
    input.extend(headers(1, &[("x-trailer", "t")], true));
    feed(&mut c, &input).unwrap();
    let r = c.response(1).unwrap();
    assert_eq!(r.status, Some(200));
    assert_eq!(r.header(b"content-type"), Some(&b"text/plain"[..]));
    assert_eq!(r.body, b"hello world");
    assert_eq!(r.trailer(b"x-trailer"), Some(&b"t"[..]));
    assert!(r.complete() && r.closed() && r.has_trailers && !r.body_truncated());
    assert_eq!(r.head().unwrap().status, 200);
    assert_eq!(
        events(&mut c),
        [
            Event::Headers(1),
            Event::Data(1, 11),
            Event::Trailers(1),
            Event::End(1)
        ]
    );
    assert_eq!(drain(&mut c), Vec::<String>::new());
    assert_eq!(c.active_streams(), 0);
    let r = c.take_response(1).unwrap();
    assert_eq!(r.body, b"hello world");
    // Nothing to reset: the stream was closed.
    assert_eq!(drain(&mut c), Vec::<String>::new());
    // The next round uses stream 3 on the same connection.
    c.begin_round();
    assert!(c.can_open_stream());
    assert_eq!(c.open_stream(&get(), b"").unwrap(), 3);
}

/// A round that reads no field (`keep_fields` off) gets the status, the
/// body and the trailer section's arrival, no field; the fields are
/// still checked and the HPACK table still follows them.
#[test]
fn fields_not_kept_are_checked_and_dropped() {
    let limits = Limits {
        keep_fields: false,
        ..Limits::default()
    };
    let mut c = ready(limits);
    c.open_stream(&get(), b"").unwrap();
    let mut input = headers(
        1,
        &[(":status", "200"), ("content-type", "text/plain")],
        false,
    );
    input.extend(data(1, b"hello", false));
    input.extend(headers(1, &[("x-trailer", "t")], true));
    feed(&mut c, &input).unwrap();
    let r = c.take_response(1).unwrap();
    assert_eq!(
        (r.status, &r.body[..], r.has_trailers),
        (Some(200), &b"hello"[..], true)
    );
    assert!(r.headers.is_empty() && r.trailers.is_empty(), "{r:?}");
    c.begin_round();
    c.open_stream(&get(), b"").unwrap();
    let e = feed(
        &mut c,
        &headers(3, &[(":status", "200"), ("Bad", "x")], true),
    )
    .unwrap_err();
    assert!(e.to_string().ends_with("invalid field name"), "{e}");
}

#[test]
fn interim_responses_are_skipped() {
    let mut c = ready(Limits::default());
    c.open_stream(&get(), b"").unwrap();
    let mut input = headers(1, &[(":status", "100")], false);
    input.extend(headers(1, &[(":status", "103"), ("link", "</a>")], false));
    input.extend(headers(1, &[(":status", "204")], true));
    feed(&mut c, &input).unwrap();
    let r = c.response(1).unwrap();
    assert_eq!((r.status, r.interim, r.complete()), (Some(204), 2, true));
    assert!(r.headers.is_empty());
}

#[test]
fn hpack_state_carries_across_streams() {
    // The server indexes a field on stream 1 and refers to it on 3.
    let mut c = ready(Limits::default());
    c.open_stream(&get(), b"").unwrap();
    let mut block = vec![0x88]; // :status 200
    block.push(0x40);
    crate::h2::hpack::encode_str(&mut block, b"server");
    let mut v = Vec::new();
    crate::h2::huffman::encode(b"test-server", &mut v);
    crate::h2::hpack::encode_int(&mut block, 0x80, 7, v.len());
    block.extend(v);
    let h = raw(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        1,
        &block,
    );
    feed(&mut c, &h).unwrap();
    c.take_response(1).unwrap();
    c.open_stream(&get(), b"").unwrap();
    let h = raw(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        3,
        &[0x88, 0xbe],
    );
    feed(&mut c, &h).unwrap();
    assert_eq!(
        c.response(3).unwrap().header(b"server"),
        Some(&b"test-server"[..])
    );
}

#[test]
fn continuation_and_padding_on_the_response() {
    let mut c = ready(Limits::default());
    c.open_stream(&get(), b"").unwrap();
    let block = crate::h2::hpack::encode_block(&fields(&[(":status", "200"), ("a", "b")]));
    let (one, two) = block.split_at(3);
    let mut padded = vec![2];
    padded.extend_from_slice(one);
    padded.extend_from_slice(&[0, 0]);
    let mut input = raw(kind::HEADERS, flag::PADDED, 1, &padded);
    input.extend(raw(kind::CONTINUATION, 0, 1, &[]));
    input.extend(raw(kind::CONTINUATION, flag::END_HEADERS, 1, two));
    input.extend(raw(
        kind::DATA,
        flag::PADDED | flag::END_STREAM,
        1,
        &[3, b'x', 0, 0, 0],
    ));
    feed(&mut c, &input).unwrap();
    let r = c.response(1).unwrap();
    assert_eq!(r.header(b"a"), Some(&b"b"[..]));
    assert_eq!(r.body, b"x");
}

#[test]
fn request_body_waits_for_windows() {
    let mut c = ready(Limits::default());
    let body = vec![7u8; 70_000];
    let id = c.open_stream(&get(), &body).unwrap();
    let out = drain(&mut c);
    assert_eq!(out[0], "HEADERS 1");
    assert_eq!(
        out[2..],
        [
            "DATA 1 16384",
            "DATA 1 16384",
            "DATA 1 16384",
            "DATA 1 16383"
        ]
    );
    assert!(c.send_blocked(id));
    // The server lowers its initial window: the stream's goes negative.
    feed(&mut c, &settings(&[(setting::INITIAL_WINDOW_SIZE, 1000)])).unwrap();
    assert_eq!(drain(&mut c), ["SETTINGS ACK"]);
    let wu = |stream: u32, inc: u32| {
        let mut v = Vec::new();
        frame::put_window_update(&mut v, stream, inc);
        v
    };
    feed(&mut c, &wu(0, 100_000)).unwrap();
    assert!(c.send_blocked(id));
    assert_eq!(drain(&mut c), Vec::<String>::new());
    feed(&mut c, &wu(1, 64_535)).unwrap();
    assert!(c.send_blocked(id));
    feed(&mut c, &wu(1, 1000)).unwrap();
    assert_eq!(drain(&mut c), ["DATA 1 1000"]);
    // Raising the initial window opens it too.
    feed(
        &mut c,
        &settings(&[(setting::INITIAL_WINDOW_SIZE, 100_000)]),
    )
    .unwrap();
    assert_eq!(drain(&mut c), ["SETTINGS ACK", "DATA 1 3465 END_STREAM"]);
    assert!(!c.send_blocked(id));
}

#[test]
fn large_bodies_arrive_and_are_cut_at_the_limit() {
    let mut c = ready(Limits {
        max_body_bytes: 1000,
        ..Limits::default()
    });
    c.open_stream(&get(), b"").unwrap();
    drain(&mut c);
    let mut input = headers(1, &[(":status", "200")], false);
    let chunk = vec![b'z'; 16_384];
    for _ in 0..20 {
        input.extend(data(1, &chunk, false));
    }
    input.extend(data(1, b"", true));
    feed(&mut c, &input).unwrap();
    let r = c.response(1).unwrap();
    assert_eq!((r.body.len(), r.body_len), (1000, 20 * 16_384));
    assert!(r.body_truncated() && r.complete());
    let out = drain(&mut c);
    // Every 2 frames (32768 bytes) the stream and the connection are
    // credited, the dropped bytes too.
    assert_eq!(
        out.iter()
            .filter(|f| f.starts_with("WINDOW_UPDATE 0 "))
            .count(),
        10
    );
    assert_eq!(
        out.iter()
            .filter(|f| f.starts_with("WINDOW_UPDATE 1 "))
            .count(),
        10
    );
    assert!(c.heap_bytes() < 64 * 1024, "{}", c.heap_bytes());
}

#[test]
fn ping_is_acked_with_its_data() {
    let mut c = ready(Limits::default());
    let mut p = Vec::new();
    frame::put_ping(&mut p, false, *b"abcdefgh");
    frame::put_ping(&mut p, true, *b"ignored!");
    feed(&mut c, &p).unwrap();
    assert_eq!(
        drain(&mut c),
        ["PING ack=true [97, 98, 99, 100, 101, 102, 103, 104]"]
    );
    assert_eq!(events(&mut c), [Event::Ping]);
}

#[test]
fn server_reset_and_goaway() {
    let mut c = ready(Limits::default());
    for _ in 0..3 {
        c.open_stream(&get(), b"").unwrap();
    }
    drain(&mut c);
    let mut input = raw(kind::RST_STREAM, 0, 1, &code::REFUSED_STREAM.to_be_bytes());
    let mut g = Vec::new();
    frame::put_goaway(&mut g, 3, code::NO_ERROR, &[b'd'; 1000]);
    input.extend(g);
    feed(&mut c, &input).unwrap();
    assert_eq!(c.response(1).unwrap().reset, Some(code::REFUSED_STREAM));
    assert!(!c.response(3).unwrap().closed());
    assert!(c.response(5).unwrap().refused);
    let g = c.goaway().unwrap();
    assert_eq!((g.last_stream, g.code, g.debug.len()), (3, 0, 256));
    assert!(!c.can_open_stream());
    assert_eq!(c.open_stream(&get(), b""), Err(OpenError::GoingAway));
    // Stream 3 may still complete.
    feed(&mut c, &headers(3, &[(":status", "200")], true)).unwrap();
    assert!(c.response(3).unwrap().complete());
    assert_eq!(
        events(&mut c),
        [
            Event::GoAway,
            Event::Reset(1, 7),
            Event::Headers(3),
            Event::End(3),
            Event::Refused(5)
        ]
    );
    // A later GOAWAY cannot raise the last stream id.
    let mut g = Vec::new();
    frame::put_goaway(&mut g, 9, code::PROTOCOL_ERROR, b"");
    feed(&mut c, &g).unwrap();
    assert_eq!(c.goaway().unwrap().last_stream, 3);
    // Taking closed streams resets nothing.
    c.take_response(1);
    c.take_response(3);
    c.take_response(5);
    assert_eq!(drain(&mut c), Vec::<String>::new());
}

#[test]
fn taking_an_open_stream_cancels_it_and_ignores_its_late_frames() {
    let mut c = ready(Limits::default());
    c.open_stream(&get(), b"").unwrap();
    drain(&mut c);
    assert!(c.take_response(1).unwrap().status.is_none());
    assert_eq!(drain(&mut c), ["RST_STREAM 1 CANCEL"]);
    let mut input = headers(1, &[(":status", "200")], false);
    input.extend(data(1, &[0; 16_384], false));
    input.extend(data(1, &[0; 16_384], false));
    input.extend(raw(kind::RST_STREAM, 0, 1, &[0, 0, 0, 0]));
    input.extend(raw(kind::WINDOW_UPDATE, 0, 1, &[0, 0, 0, 1]));
    feed(&mut c, &input).unwrap();
    // The connection window is still credited.
    assert_eq!(drain(&mut c), ["WINDOW_UPDATE 0 32768"]);
    assert!(c.response(1).is_none());
}

#[test]
fn server_ending_early_stops_the_request_body() {
    let mut c = ready(Limits::default());
    c.open_stream(&get(), &vec![1; 100_000]).unwrap();
    drain(&mut c);
    feed(&mut c, &headers(1, &[(":status", "413")], true)).unwrap();
    assert_eq!(drain(&mut c), ["RST_STREAM 1 NO_ERROR"]);
    assert!(!c.send_blocked(1));
    let mut wu = Vec::new();
    frame::put_window_update(&mut wu, 0, 100_000);
    frame::put_window_update(&mut wu, 1, 100_000);
    feed(&mut c, &wu).unwrap();
    assert_eq!(drain(&mut c), Vec::<String>::new());
}

#[test]
fn max_concurrent_streams_is_honoured() {
    let mut c = Client::new(Limits::default());
    c.start();
    feed(&mut c, &settings(&[(setting::MAX_CONCURRENT_STREAMS, 1)])).unwrap();
    c.open_stream(&get(), b"").unwrap();
    assert!(!c.can_open_stream());
    assert_eq!(c.open_stream(&get(), b""), Err(OpenError::TooManyStreams));
    feed(&mut c, &headers(1, &[(":status", "200")], true)).unwrap();
    assert!(c.can_open_stream());
}

#[test]
fn stream_ids_run_out() {
    let mut c = ready(Limits::default());
    c.skip_streams_to(frame::MAX_STREAM_ID);
    assert_eq!(c.next_stream_id(), Some(frame::MAX_STREAM_ID));
    assert_eq!(c.open_stream(&get(), b""), Ok(frame::MAX_STREAM_ID));
    assert_eq!(c.next_stream_id(), None);
    assert!(!c.can_open_stream());
    assert_eq!(c.open_stream(&get(), b""), Err(OpenError::Exhausted));
}

#[test]
fn our_goaway() {
    let mut c = ready(Limits::default());
    c.go_away(code::NO_ERROR);
    c.go_away(code::NO_ERROR);
    assert_eq!(drain(&mut c), ["GOAWAY 0 NO_ERROR "]);
    assert_eq!(c.open_stream(&get(), b""), Err(OpenError::GoingAway));
}

#[test]
fn requests_split_into_continuations() {
    let mut c = ready(Limits::default());
    let mut h = get();
    h.push((b"x-big".to_vec(), vec![b'b'; 20_000]));
    c.open_stream(&h, b"").unwrap();
    let out = drain(&mut c);
    assert_eq!(out[..2], ["HEADERS 1 END_STREAM", "CONTINUATION"]);
    assert!(out[2].ends_with(&"b".repeat(100)));
}

#[test]
fn recycled_responses_serve_the_next_rounds_alike_and_bounded() {
    let mut c = ready(Limits::default());
    let mut first = None;
    let mut heap = Vec::new();
    for round in 0..100u32 {
        c.begin_round();
        let id = c.open_stream(&get(), b"").unwrap();
        assert_eq!(id, 2 * round + 1);
        drain(&mut c);
        let mut input = headers(
            id,
            &[
                (":status", "200"),
                ("content-type", "text/plain"),
                ("server", "nginx"),
            ],
            false,
        );
        input.extend(data(id, b"ok", false));
        input.extend(headers(id, &[("x-trailer", "t")], true));
        feed(&mut c, &input).unwrap();
        events(&mut c);
        let r = c.take_response(id).unwrap();
        // The same response each round, whatever the buffers served before.
        let shown = format!(
            "{:?} {:?} {:?} {:?}",
            r.status, r.headers, r.body, r.trailers
        );
        assert_eq!(first.get_or_insert_with(|| shown.clone()), &shown);
        c.recycle(r);
        heap.push(c.heap_bytes());
    }
    // Nothing grows with the rounds once the spares are in use.
    assert_eq!(heap[10..].iter().max(), heap[10..].iter().min(), "{heap:?}");
}
