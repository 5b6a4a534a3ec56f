//! A scripted HTTP/2 server on loopback for the hostile gRPC and HTTP/2
//! checks (t/tests/grpc_hostile.rs): a thread per connection reads the
//! client preface and the client's frames (9-byte header: length, type,
//! flags, stream) and answers as its [`Behaviour`] says, with frames built
//! by hand here (HPACK literals without indexing and without Huffman, or
//! the static table's `:status 200`).
//!
//! [`Behaviour::Serving`] is a well-behaved gRPC Health server: its
//! SETTINGS (empty) at once, a SETTINGS ACK for the client's, and to every
//! request HEADERS (`:status 200`, `content-type application/grpc`), DATA
//! (a HealthCheckResponse saying SERVING) and trailers (`grpc-status 0`)
//! with END_STREAM. The other behaviours each break one rule.
//!
//! After answering, a connection keeps reading until the client closes
//! it (or 30 s of silence): what the client sends is never left unread
//! by a close of ours, so the client sees no RST it did not cause.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// The client connection preface (RFC 9113 section 3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types.
pub mod kind {
    /// DATA
    pub const DATA: u8 = 0x0;
    /// HEADERS
    pub const HEADERS: u8 = 0x1;
    /// RST_STREAM
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS
    pub const SETTINGS: u8 = 0x4;
    /// PING
    pub const PING: u8 = 0x6;
    /// GOAWAY
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub mod flag {
    /// DATA, HEADERS: END_STREAM. SETTINGS, PING: ACK.
    pub const END_STREAM: u8 = 0x1;
    /// SETTINGS, PING: ACK.
    pub const ACK: u8 = 0x1;
    /// HEADERS, CONTINUATION: END_HEADERS.
    pub const END_HEADERS: u8 = 0x4;
}

/// Error codes.
pub mod code {
    /// NO_ERROR
    pub const NO_ERROR: u32 = 0x0;
    /// PROTOCOL_ERROR
    pub const PROTOCOL_ERROR: u32 = 0x1;
    /// INTERNAL_ERROR
    pub const INTERNAL_ERROR: u32 = 0x2;
    /// FLOW_CONTROL_ERROR
    pub const FLOW_CONTROL_ERROR: u32 = 0x3;
    /// STREAM_CLOSED
    pub const STREAM_CLOSED: u32 = 0x5;
    /// FRAME_SIZE_ERROR
    pub const FRAME_SIZE_ERROR: u32 = 0x6;
    /// CANCEL
    pub const CANCEL: u32 = 0x8;
    /// COMPRESSION_ERROR
    pub const COMPRESSION_ERROR: u32 = 0x9;
    /// ENHANCE_YOUR_CALM
    pub const ENHANCE_YOUR_CALM: u32 = 0xb;
}

/// SETTINGS_INITIAL_WINDOW_SIZE.
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;

/// The HPACK static table's `:status 200` (index 8), indexed.
pub const STATUS_200: u8 = 0x88;

/// The gRPC-framed HealthCheckResponse `{status: SERVING}`: not
/// compressed, 2 bytes, field 1 = 1.
pub const SERVING_MESSAGE: [u8; 7] = [0, 0, 0, 0, 2, 0x08, 0x01];

/// What the server does on each connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// The well-behaved gRPC Health server (SERVING), on every stream of
    /// every connection.
    Serving,
    /// Accepts and reads, never sends a byte (no SETTINGS).
    Silent,
    /// Answers the request with a head whose header block (`:status 200`
    /// and `x-filler` fields, `total` bytes) goes in a HEADERS frame and
    /// CONTINUATIONs of `fragment` bytes each, END_HEADERS on the last.
    HeaderFlood {
        /// The block's size.
        total: usize,
        /// The size of each frame's fragment.
        fragment: usize,
    },
    /// A head that adds an `x-bomb` field of `entry` value bytes to the
    /// HPACK dynamic table (literal with incremental indexing), the
    /// SERVING message, then trailers that are `refs` one-byte references
    /// to that entry (index 62): a block of `refs` bytes that decodes to
    /// `refs * (entry + 38)`.
    HpackBomb {
        /// The value's length (at most 4096 - 38 to fit the table).
        entry: usize,
        /// The references in the trailers.
        refs: usize,
    },
    /// A head whose block starts with a dynamic table size update to
    /// this size.
    TableSizeUpdate(u32),
    /// A HEADERS frame of this many bytes (a frame header announcing it,
    /// then the bytes).
    OversizedFrame(u32),
    /// This many empty SETTINGS frames in answer to the request.
    SettingsFlood(usize),
    /// This many PINGs in answer to the request.
    PingFlood(usize),
    /// SETTINGS with SETTINGS_INITIAL_WINDOW_SIZE 0, and never a
    /// WINDOW_UPDATE: a request is answered (SERVING) only once its DATA
    /// came (END_STREAM).
    ZeroWindow,
    /// The SERVING answer, then a DATA frame on the ended stream: in the
    /// same write when `delay` is `None`, else that long after.
    DataAfterEnd {
        /// The pause before the late DATA.
        delay: Option<Duration>,
    },
    /// GOAWAY (last stream 0, NO_ERROR) as soon as the request's HEADERS
    /// came, and nothing else.
    GoAwayOnHeaders,
    /// RST_STREAM with this code for the request's stream.
    Reset(u32),
    /// `:status 200`, `content-type application/grpc`, the SERVING
    /// message, and trailers without `grpc-status`.
    NoGrpcStatus,
    /// `:status 200`, `content-type text/html` and an HTML page, ending
    /// the stream: an HTTP/2 web server, not gRPC.
    Html,
}

/// What the client did, as the server saw it.
#[derive(Default)]
struct Seen {
    /// Requests (HEADERS that open a stream) per connection, in accept
    /// order.
    requests: Vec<usize>,
    /// The client's GOAWAYs: (error code, debug data).
    goaways: Vec<(u32, Vec<u8>)>,
    /// The client's RST_STREAMs: (stream, error code).
    resets: Vec<(u32, u32)>,
}

struct Shared {
    behaviour: Mutex<Behaviour>,
    seen: Mutex<Seen>,
    stop: AtomicBool,
    live: AtomicUsize,
}

/// The server; dropping it stops accepting (connections end when the
/// client closes them).
pub struct H2Server {
    port: u16,
    shared: Arc<Shared>,
}

impl H2Server {
    /// Serve `behaviour` on 127.0.0.1 (a port of the kernel's).
    pub fn start(behaviour: Behaviour) -> H2Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let shared = Arc::new(Shared {
            behaviour: Mutex::new(behaviour),
            seen: Mutex::new(Seen::default()),
            stop: AtomicBool::new(false),
            live: AtomicUsize::new(0),
        });
        let s = Arc::clone(&shared);
        thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let s = Arc::clone(&s);
                s.live.fetch_add(1, Ordering::SeqCst);
                thread::spawn(move || {
                    let at = {
                        let mut seen = s.seen.lock().expect("the record");
                        seen.requests.push(0);
                        seen.requests.len() - 1
                    };
                    let _ = serve(conn, &s, at);
                    s.live.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        H2Server { port, shared }
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Answer the next connections with `behaviour`.
    pub fn set(&self, behaviour: Behaviour) {
        *self.shared.behaviour.lock().expect("the behaviour") = behaviour;
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.seen.lock().expect("the record").requests.len()
    }

    /// Connections open now.
    pub fn live_connections(&self) -> usize {
        self.shared.live.load(Ordering::SeqCst)
    }

    /// Requests (streams opened) on each connection so far.
    pub fn requests_per_connection(&self) -> Vec<usize> {
        self.shared
            .seen
            .lock()
            .expect("the record")
            .requests
            .clone()
    }

    /// Requests (streams opened) in all.
    pub fn requests(&self) -> usize {
        self.requests_per_connection().iter().sum()
    }

    /// The GOAWAYs the client sent: (error code, debug data as text).
    pub fn goaways(&self) -> Vec<(u32, String)> {
        let seen = self.shared.seen.lock().expect("the record");
        seen.goaways
            .iter()
            .map(|(c, d)| (*c, String::from_utf8_lossy(d).into_owned()))
            .collect()
    }

    /// The RST_STREAMs the client sent: (stream, error code).
    pub fn resets(&self) -> Vec<(u32, u32)> {
        self.shared.seen.lock().expect("the record").resets.clone()
    }
}

impl Drop for H2Server {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Appends a frame.
pub fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    frame_header(out, payload.len() as u32, kind, flags, stream);
    out.extend_from_slice(payload);
}

/// Appends a frame header announcing `len` payload bytes.
pub fn frame_header(out: &mut Vec<u8>, len: u32, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
}

/// Appends an HPACK integer with an N-bit prefix (RFC 7541 section 5.1);
/// `flags` are the first octet's bits above the prefix.
pub fn hpack_int(out: &mut Vec<u8>, flags: u8, prefix: u32, mut value: usize) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    value -= max;
    while value >= 0x80 {
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends a plain (not Huffman) HPACK string.
fn hpack_str(out: &mut Vec<u8>, s: &[u8]) {
    hpack_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// Appends a literal field without indexing, with a literal name, no
/// Huffman: `0x00`, name length, name, value length, value.
pub fn literal(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.push(0x00);
    hpack_str(out, name.as_bytes());
    hpack_str(out, value);
}

/// Appends a literal field with incremental indexing (it enters the
/// dynamic table), with a literal name.
pub fn literal_indexed(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.push(0x40);
    hpack_str(out, name.as_bytes());
    hpack_str(out, value);
}

/// The gRPC response head's block: `:status 200`, `content-type
/// application/grpc`.
pub fn grpc_head() -> Vec<u8> {
    let mut b = vec![STATUS_200];
    literal(&mut b, "content-type", b"application/grpc");
    b
}

/// The trailers' block: `grpc-status <code>`.
pub fn grpc_trailers(code: u32) -> Vec<u8> {
    let mut b = Vec::new();
    literal(&mut b, "grpc-status", code.to_string().as_bytes());
    b
}

/// The whole SERVING answer on `stream`: HEADERS, DATA, trailers with
/// END_STREAM.
pub fn serving_answer(out: &mut Vec<u8>, stream: u32) {
    frame(out, kind::HEADERS, flag::END_HEADERS, stream, &grpc_head());
    frame(out, kind::DATA, 0, stream, &SERVING_MESSAGE);
    let trailers = grpc_trailers(0);
    frame(
        out,
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        stream,
        &trailers,
    );
}

/// A frame as read: header fields and payload.
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

/// The most payload read per frame (the client's frames are small).
const MAX_READ_FRAME: usize = 1 << 20;

fn read_frame(conn: &mut TcpStream) -> io::Result<Frame> {
    let mut h = [0u8; 9];
    conn.read_exact(&mut h)?;
    let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
    if len > MAX_READ_FRAME {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "frame too long"));
    }
    let mut payload = vec![0u8; len];
    conn.read_exact(&mut payload)?;
    Ok(Frame {
        kind: h[3],
        flags: h[4],
        stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        payload,
    })
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// What the connection answers to its request on `stream`.
fn answer(b: &Behaviour, out: &mut Vec<u8>, stream: u32) {
    match b {
        Behaviour::Serving | Behaviour::ZeroWindow => serving_answer(out, stream),
        Behaviour::Silent | Behaviour::GoAwayOnHeaders => {}
        Behaviour::HeaderFlood { total, fragment } => {
            let mut block = vec![STATUS_200];
            while block.len() < *total {
                literal(&mut block, "x-filler", &[b'f'; 100]);
            }
            let chunks: Vec<&[u8]> = block.chunks((*fragment).max(1)).collect();
            for (i, c) in chunks.iter().enumerate() {
                let k = if i == 0 {
                    kind::HEADERS
                } else {
                    kind::CONTINUATION
                };
                let f = if i + 1 == chunks.len() {
                    flag::END_HEADERS
                } else {
                    0
                };
                frame(out, k, f, stream, c);
            }
        }
        Behaviour::HpackBomb { entry, refs } => {
            let mut head = grpc_head();
            literal_indexed(&mut head, "x-bomb", &vec![b'b'; *entry]);
            frame(out, kind::HEADERS, flag::END_HEADERS, stream, &head);
            frame(out, kind::DATA, 0, stream, &SERVING_MESSAGE);
            // Index 62: the newest entry of the dynamic table.
            let bomb = vec![0x80 | 62; *refs];
            frame(
                out,
                kind::HEADERS,
                flag::END_HEADERS | flag::END_STREAM,
                stream,
                &bomb,
            );
        }
        Behaviour::TableSizeUpdate(size) => {
            let mut head = Vec::new();
            hpack_int(&mut head, 0x20, 5, *size as usize);
            head.extend_from_slice(&grpc_head());
            frame(out, kind::HEADERS, flag::END_HEADERS, stream, &head);
            frame(out, kind::DATA, 0, stream, &SERVING_MESSAGE);
            let trailers = grpc_trailers(0);
            frame(
                out,
                kind::HEADERS,
                flag::END_HEADERS | flag::END_STREAM,
                stream,
                &trailers,
            );
        }
        Behaviour::OversizedFrame(len) => {
            frame_header(out, *len, kind::HEADERS, flag::END_HEADERS, stream);
            out.push(STATUS_200);
            out.resize(out.len() + *len as usize - 1, 0);
        }
        Behaviour::SettingsFlood(n) => {
            for _ in 0..*n {
                frame(out, kind::SETTINGS, 0, 0, &[]);
            }
        }
        Behaviour::PingFlood(n) => {
            for i in 0..*n {
                frame(out, kind::PING, 0, 0, &(i as u64).to_be_bytes());
            }
        }
        Behaviour::DataAfterEnd { delay } => {
            serving_answer(out, stream);
            if delay.is_none() {
                frame(out, kind::DATA, 0, stream, &SERVING_MESSAGE);
            }
        }
        Behaviour::Reset(c) => frame(out, kind::RST_STREAM, 0, stream, &c.to_be_bytes()),
        Behaviour::NoGrpcStatus => {
            frame(out, kind::HEADERS, flag::END_HEADERS, stream, &grpc_head());
            frame(out, kind::DATA, 0, stream, &SERVING_MESSAGE);
            let mut trailers = Vec::new();
            literal(&mut trailers, "x-served-by", b"h2server");
            frame(
                out,
                kind::HEADERS,
                flag::END_HEADERS | flag::END_STREAM,
                stream,
                &trailers,
            );
        }
        Behaviour::Html => {
            let mut head = vec![STATUS_200];
            literal(&mut head, "content-type", b"text/html");
            frame(out, kind::HEADERS, flag::END_HEADERS, stream, &head);
            frame(
                out,
                kind::DATA,
                flag::END_STREAM,
                stream,
                b"<html><body>It works!</body></html>\n",
            );
        }
    }
}

fn serve(mut conn: TcpStream, s: &Shared, at: usize) -> io::Result<()> {
    let b = s.behaviour.lock().expect("the behaviour").clone();
    conn.set_nodelay(true)?;
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut preface = [0u8; 24];
    conn.read_exact(&mut preface)?;
    if &preface != PREFACE {
        let _ = conn.shutdown(Shutdown::Both);
        return Ok(());
    }
    let silent = b == Behaviour::Silent;
    let mut out = Vec::new();
    match b {
        Behaviour::Silent => {}
        Behaviour::ZeroWindow => {
            let mut p = SETTINGS_INITIAL_WINDOW_SIZE.to_be_bytes().to_vec();
            p.extend_from_slice(&0u32.to_be_bytes());
            frame(&mut out, kind::SETTINGS, 0, 0, &p);
        }
        _ => frame(&mut out, kind::SETTINGS, 0, 0, &[]),
    }
    conn.write_all(&out)?;
    // Streams whose request has begun, and whether it was answered.
    let mut streams: HashMap<u32, bool> = HashMap::new();
    // Until the client closes (or goes quiet for 30 s).
    while let Ok(f) = read_frame(&mut conn) {
        out.clear();
        let mut late = None;
        match f.kind {
            kind::SETTINGS if f.flags & flag::ACK == 0 && !silent => {
                frame(&mut out, kind::SETTINGS, flag::ACK, 0, &[]);
            }
            kind::PING if f.flags & flag::ACK == 0 && !silent => {
                frame(&mut out, kind::PING, flag::ACK, 0, &f.payload);
            }
            kind::GOAWAY if f.payload.len() >= 8 => {
                let mut seen = s.seen.lock().expect("the record");
                seen.goaways
                    .push((be32(&f.payload[4..]), f.payload[8..].to_vec()));
            }
            kind::RST_STREAM if f.payload.len() == 4 => {
                let mut seen = s.seen.lock().expect("the record");
                seen.resets.push((f.stream, be32(&f.payload)));
            }
            kind::HEADERS => {
                if streams.insert(f.stream, false).is_none() {
                    s.seen.lock().expect("the record").requests[at] += 1;
                }
                if b == Behaviour::GoAwayOnHeaders {
                    let mut p = 0u32.to_be_bytes().to_vec();
                    p.extend_from_slice(&code::NO_ERROR.to_be_bytes());
                    frame(&mut out, kind::GOAWAY, 0, 0, &p);
                }
            }
            _ => {}
        }
        // A request is complete at its END_STREAM (HEADERS or DATA).
        let ends = matches!(f.kind, kind::HEADERS | kind::DATA) && f.flags & flag::END_STREAM != 0;
        if ends && streams.get(&f.stream) == Some(&false) {
            streams.insert(f.stream, true);
            answer(&b, &mut out, f.stream);
            if let Behaviour::DataAfterEnd { delay: Some(d) } = b {
                late = Some((d, f.stream));
            }
        }
        if !out.is_empty() {
            conn.write_all(&out)?;
        }
        if let Some((d, stream)) = late {
            thread::sleep(d);
            out.clear();
            frame(&mut out, kind::DATA, 0, stream, &SERVING_MESSAGE);
            conn.write_all(&out)?;
        }
    }
    let _ = conn.shutdown(Shutdown::Both);
    Ok(())
}
