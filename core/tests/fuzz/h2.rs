//! Fuzz and property tests of the HTTP/2 client (`h2`) and the gRPC
//! health codec (`grpc`), over their public API.
//!
//! Invariants checked, beyond "no panic":
//! - frames our encoders produce read back as the same frames, whatever
//!   the split, and any bytes give the same frames and error whole, in
//!   random pieces and byte by byte, with at most one frame buffered;
//! - HPACK blocks from an encoder that uses every representation (static
//!   and dynamic indexes, the three literal kinds, Huffman or not, size
//!   updates) decode to the lists encoded, the dynamic table in step with
//!   the encoder's model; any bytes stay within the list limit and cap;
//! - a client fed a random server conversation (valid and invalid frames,
//!   garbage) ends in the same state, output and result however the bytes
//!   are split, within its memory bound, its output always valid frames;
//! - request data never passes the server's windows (a model of them,
//!   negative included) and is all sent, in order, once they allow;
//! - gRPC messages read the same in any split; HealthCheckResponses with
//!   unknown fields decode to their status; verdicts are one printable
//!   line; grpc-timeout values have at most 8 digits and never shorten
//!   the deadline.
//!
//! Failing seeds go to `core/tests/fuzz/h2.proptest-regressions`.

use std::collections::VecDeque;

use healthcheck_core::h2::frame::{self, setting, Frame, FrameReader};
use healthcheck_core::h2::hpack::{self, Decoder, STATIC_TABLE};
use healthcheck_core::h2::{huffman, Field};
use proptest::collection::vec;
use proptest::prelude::*;

/// `input` cut into pieces of the given lengths (cycled; 0 read as 1).
fn pieces<'a>(input: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < input.len() {
        let n = cuts
            .get(i % cuts.len().max(1))
            .copied()
            .unwrap_or(input.len())
            .max(1);
        let end = (at + n).min(input.len());
        out.push(&input[at..end]);
        at = end;
        i += 1;
    }
    out
}

// ---- frames -----------------------------------------------------------------

/// Reads `input` in these pieces: the frames (as debug strings) and the
/// error, checking the buffer bound on the way.
fn read_frames(max: u32, input: &[u8], cuts: &[usize]) -> (Vec<String>, Option<String>) {
    let mut r = FrameReader::new(max, false);
    let mut frames = Vec::new();
    for mut p in pieces(input, cuts) {
        while !p.is_empty() {
            match r.next(p) {
                Ok((used, f)) => {
                    p = &p[used..];
                    if let Some(f) = f {
                        frames.push(format!("{f:?}"));
                    }
                    assert!(r.heap_bytes() <= r.max_frame_size() as usize);
                }
                Err(e) => return (frames, Some(e.to_string())),
            }
        }
    }
    (frames, None)
}

#[derive(Clone, Debug)]
enum Out {
    Settings(Vec<(u16, u32)>),
    SettingsAck,
    Ping(bool, [u8; 8]),
    Window(u32, u32),
    Headers(u32, Vec<u8>, bool, u32),
    Data(u32, Vec<u8>, bool),
    Rst(u32, u32),
    GoAway(u32, u32, Vec<u8>),
}

fn out_frame() -> impl Strategy<Value = Out> {
    let stream = 1u32..frame::MAX_STREAM_ID;
    prop_oneof![
        vec((0u16..8, 0u32..16384), 0..6).prop_map(|p| Out::Settings(
            p.into_iter()
                .filter(|&(id, _)| id != setting::ENABLE_PUSH && id != setting::MAX_FRAME_SIZE)
                .collect()
        )),
        Just(Out::SettingsAck),
        (any::<bool>(), any::<[u8; 8]>()).prop_map(|(a, d)| Out::Ping(a, d)),
        (0u32..100, 1u32..=frame::MAX_WINDOW).prop_map(|(s, i)| Out::Window(s, i)),
        (
            stream.clone(),
            vec(any::<u8>(), 0..3000),
            any::<bool>(),
            1u32..2000
        )
            .prop_map(|(s, b, e, m)| Out::Headers(s, b, e, m)),
        (stream.clone(), vec(any::<u8>(), 0..2000), any::<bool>())
            .prop_map(|(s, d, e)| Out::Data(s, d, e)),
        (stream, any::<u32>()).prop_map(|(s, c)| Out::Rst(s, c)),
        (0u32..100, any::<u32>(), vec(any::<u8>(), 0..40))
            .prop_map(|(l, c, d)| Out::GoAway(l, c, d)),
    ]
}

fn encode_out(frames: &[Out]) -> Vec<u8> {
    let mut v = Vec::new();
    for f in frames {
        match f {
            Out::Settings(p) => frame::put_settings(&mut v, p),
            Out::SettingsAck => frame::put_settings_ack(&mut v),
            Out::Ping(a, d) => frame::put_ping(&mut v, *a, *d),
            Out::Window(s, i) => frame::put_window_update(&mut v, *s, *i),
            Out::Headers(s, b, e, m) => frame::put_headers(&mut v, *s, b, *e, *m),
            Out::Data(s, d, e) => frame::put_data(&mut v, *s, d, *e),
            Out::Rst(s, c) => frame::put_rst_stream(&mut v, *s, *c),
            Out::GoAway(l, c, d) => frame::put_goaway(&mut v, *l, *c, d),
        }
    }
    v
}

/// What reading `frames` back must give: header blocks as one piece.
fn expected(frames: &[Out]) -> Vec<String> {
    frames
        .iter()
        .map(|f| match f {
            Out::Settings(p) => format!("S{p:?}"),
            Out::SettingsAck => "SA".into(),
            Out::Ping(a, d) => format!("P{a}{d:?}"),
            Out::Window(s, i) => format!("W{s} {i}"),
            Out::Headers(s, b, e, _) => format!("H{s} {e} {b:?}"),
            Out::Data(s, d, e) => format!("D{s} {e} {d:?}"),
            Out::Rst(s, c) => format!("R{s} {c}"),
            Out::GoAway(l, c, d) => format!("G{l} {c} {d:?}"),
        })
        .collect()
}

fn read_back(input: &[u8], cuts: &[usize]) -> Vec<String> {
    let mut r = FrameReader::new(frame::DEFAULT_MAX_FRAME_SIZE, false);
    let mut got = Vec::new();
    let mut block: Option<(u32, bool, Vec<u8>)> = None;
    for mut p in pieces(input, cuts) {
        while !p.is_empty() {
            let (used, f) = r.next(p).expect("our frames are valid");
            p = &p[used..];
            let Some(f) = f else { continue };
            let done = match f {
                Frame::Settings { ack: false, params } => {
                    got.push(format!("S{:?}", params.iter().collect::<Vec<_>>()));
                    None
                }
                Frame::Settings { ack: true, .. } => Some("SA".into()),
                Frame::Ping { ack, data } => Some(format!("P{ack}{data:?}")),
                Frame::WindowUpdate { stream, increment } => Some(format!("W{stream} {increment}")),
                Frame::Headers {
                    stream,
                    end_stream,
                    end_headers,
                    block: b,
                    priority: None,
                } => {
                    block = Some((stream, end_stream, b.to_vec()));
                    end_headers.then_some(String::new())
                }
                Frame::Continuation {
                    block: b,
                    end_headers,
                    ..
                } => {
                    block.as_mut().unwrap().2.extend_from_slice(b);
                    end_headers.then_some(String::new())
                }
                Frame::Data {
                    stream,
                    end_stream,
                    data,
                    ..
                } => Some(format!("D{stream} {end_stream} {data:?}")),
                Frame::RstStream { stream, code } => Some(format!("R{stream} {code}")),
                Frame::GoAway {
                    last_stream,
                    code,
                    debug,
                } => Some(format!("G{last_stream} {code} {debug:?}")),
                f => panic!("not ours: {f:?}"),
            };
            match done {
                Some(s) if s.is_empty() => {
                    let (s, e, b) = block.take().unwrap();
                    got.push(format!("H{s} {e} {b:?}"));
                }
                Some(s) => got.push(s),
                None => {}
            }
        }
    }
    got
}

/// Valid frames with a byte changed, a frame cut, or bytes inserted.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    (
        vec(out_frame(), 0..6),
        any::<prop::sample::Index>(),
        any::<u8>(),
        0u8..3,
    )
        .prop_map(|(f, at, b, how)| {
            let mut v = encode_out(&f);
            if !v.is_empty() {
                let i = at.index(v.len());
                match how {
                    0 => v[i] = b,
                    1 => v.truncate(i),
                    _ => v.splice(i..i, [b, 0, 0, b]).for_each(drop),
                }
            }
            v
        })
}

proptest! {
    #![proptest_config(crate::cfg(256))]

    /// Our encoders' frames read back as themselves in any split.
    #[test]
    fn h2_frames_round_trip(frames in vec(out_frame(), 0..12),
                            cuts in vec(1usize..40, 1..20)) {
        let bytes = encode_out(&frames);
        let want = expected(&frames);
        prop_assert_eq!(read_back(&bytes, &[bytes.len()]), want.clone());
        prop_assert_eq!(read_back(&bytes, &cuts), want.clone());
        prop_assert_eq!(read_back(&bytes, &[1]), want);
    }

    /// Any bytes: the same frames and error whole, in pieces and byte by
    /// byte, at most one frame buffered.
    #[test]
    fn h2_reader_any_bytes(bytes in prop_oneof![vec(any::<u8>(), 0..600), mutated()],
                           max in prop_oneof![Just(16_384u32), 16_384u32..70_000],
                           cuts in vec(1usize..50, 1..20)) {
        let whole = read_frames(max, &bytes, &[bytes.len()]);
        prop_assert_eq!(&read_frames(max, &bytes, &cuts), &whole);
        prop_assert_eq!(&read_frames(max, &bytes, &[1]), &whole);
    }
}

// ---- HPACK ------------------------------------------------------------------

/// An HPACK encoder that uses every representation, with a model of the
/// dynamic table it shares with the decoder.
struct Enc {
    table: VecDeque<(Vec<u8>, Vec<u8>)>,
    size: usize,
    max: usize,
}

impl Enc {
    fn evict(&mut self) {
        while self.size > self.max {
            let (n, v) = self.table.pop_back().unwrap();
            self.size -= n.len() + v.len() + 32;
        }
    }

    fn find(&self, n: &[u8], v: Option<&[u8]>) -> Option<usize> {
        let st = STATIC_TABLE
            .iter()
            .map(|(a, b)| (a.as_bytes(), b.as_bytes()));
        let dy = self.table.iter().map(|(a, b)| (a.as_slice(), b.as_slice()));
        st.chain(dy)
            .position(|(a, b)| a == n && v.map_or(true, |v| v == b))
            .map(|i| i + 1)
    }

    fn string(out: &mut Vec<u8>, s: &[u8], huff: bool) {
        if huff {
            let mut h = Vec::new();
            huffman::encode(s, &mut h);
            assert_eq!(h.len(), huffman::encoded_len(s));
            hpack::encode_int(out, 0x80, 7, h.len());
            out.extend(h);
        } else {
            hpack::encode_str(out, s);
        }
    }

    fn block(&mut self, fields: &[Field], choice: &[u8], update: Option<usize>) -> Vec<u8> {
        let mut out = Vec::new();
        if let Some(u) = update {
            hpack::encode_int(&mut out, 0x20, 5, u);
            self.max = u;
            self.evict();
        }
        for (i, (n, v)) in fields.iter().enumerate() {
            let c = choice.get(i).copied().unwrap_or(0);
            if c % 4 == 0 {
                if let Some(idx) = self.find(n, Some(v)) {
                    hpack::encode_int(&mut out, 0x80, 7, idx);
                    continue;
                }
            }
            let (flags, prefix) = match (c >> 2) % 3 {
                0 => (0x40, 6),
                1 => (0x00, 4),
                _ => (0x10, 4),
            };
            match self.find(n, None).filter(|_| c & 0x20 != 0) {
                Some(idx) => hpack::encode_int(&mut out, flags, prefix, idx),
                None => {
                    hpack::encode_int(&mut out, flags, prefix, 0);
                    Self::string(&mut out, n, c & 0x40 != 0);
                }
            }
            Self::string(&mut out, v, c & 0x80 != 0);
            if flags == 0x40 {
                let size = n.len() + v.len() + 32;
                if size > self.max {
                    self.table.clear();
                    self.size = 0;
                } else {
                    self.table.push_front((n.clone(), v.clone()));
                    self.size += size;
                    self.evict();
                }
            }
        }
        out
    }
}

fn field() -> impl Strategy<Value = Field> {
    let name = prop_oneof![
        (0..STATIC_TABLE.len()).prop_map(|i| STATIC_TABLE[i].0.as_bytes().to_vec()),
        vec(any::<u8>(), 0..12),
        Just(b"x-repeated".to_vec()),
    ];
    let value = prop_oneof![
        (0..STATIC_TABLE.len()).prop_map(|i| STATIC_TABLE[i].1.as_bytes().to_vec()),
        vec(any::<u8>(), 0..40),
        Just(vec![b'v'; 3000]),
    ];
    (name, value)
}

proptest! {
    #![proptest_config(crate::cfg(256))]

    /// Blocks using every representation decode to what was encoded, the
    /// table in step with the encoder's.
    #[test]
    fn hpack_round_trip(blocks in vec((vec(field(), 0..10), vec(any::<u8>(), 10),
                                       prop::option::of(0usize..=4096)), 1..6)) {
        let mut enc = Enc { table: VecDeque::new(), size: 0, max: 4096 };
        let mut dec = Decoder::new(4096);
        for (fields, choice, update) in &blocks {
            let b = enc.block(fields, choice, *update);
            let mut got = Vec::new();
            dec.decode(&b, usize::MAX, |n, v| got.push((n.to_vec(), v.to_vec()))).unwrap();
            prop_assert_eq!(&got, fields);
            prop_assert_eq!((dec.table_size(), dec.table_len()), (enc.size, enc.table.len()));
        }
        let ours = hpack::encode_block(&blocks[0].0);
        let mut got = Vec::new();
        let len = dec.table_len();
        dec.decode(&ours, usize::MAX, |n, v| got.push((n.to_vec(), v.to_vec()))).unwrap();
        prop_assert_eq!(&got, &blocks[0].0);
        prop_assert_eq!(dec.table_len(), len);
    }

    /// Any bytes: within the list limit and the table cap, no panic.
    #[test]
    fn hpack_any_bytes(blocks in vec(vec(any::<u8>(), 0..300), 1..4),
                       cap in 0usize..5000, limit in 0usize..5000) {
        let mut dec = Decoder::new(cap);
        for b in &blocks {
            let mut list = 0usize;
            let r = dec.decode(b, limit, |n, v| list += n.len() + v.len() + 32);
            prop_assert!(list <= limit);
            prop_assert!(dec.table_size() <= cap);
            if r.is_err() {
                prop_assert!(!r.unwrap_err().to_string().is_empty());
                break;
            }
        }
    }

    /// Huffman: any octets round-trip; any bytes decode without panic
    /// to at most 8/5 of their length.
    #[test]
    fn huffman_round_trip(s in vec(any::<u8>(), 0..200), junk in vec(any::<u8>(), 0..200)) {
        let mut h = Vec::new();
        huffman::encode(&s, &mut h);
        let mut d = Vec::new();
        prop_assert!(huffman::decode(&h, &mut d).is_ok());
        prop_assert_eq!(d, s);
        let mut d = Vec::new();
        let _ = huffman::decode(&junk, &mut d);
        prop_assert!(d.len() <= junk.len() * 8 / 5);
    }
}

// With `#[path]` in fuzz.rs, these resolve beside this file.
mod h2_client;
mod h2_grpc;
