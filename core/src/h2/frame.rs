//! HTTP/2 frames (RFC 9113 sections 4 and 6): an incremental reader of the
//! server's frames and encoders of the frames a client sends.
//!
//! [`FrameReader::next`] takes bytes in any split and gives back one
//! complete frame at a time, checked against every frame-level rule a
//! client must enforce:
//!
//! - a length above our `SETTINGS_MAX_FRAME_SIZE` is refused as soon as
//!   the 9-byte header is in, before any payload is read;
//! - the stream identifier: 0 for SETTINGS, PING and GOAWAY, not 0 for
//!   DATA, HEADERS, PRIORITY, RST_STREAM, PUSH_PROMISE and CONTINUATION
//!   (WINDOW_UPDATE takes both); the reserved bit is ignored;
//! - fixed lengths: PRIORITY 5, RST_STREAM 4, PING 8, WINDOW_UPDATE 4,
//!   SETTINGS a multiple of 6 (0 with ACK), GOAWAY at least 8;
//! - padding (DATA, HEADERS, PUSH_PROMISE): the pad length must leave room
//!   for itself, the priority fields and the pad;
//! - WINDOW_UPDATE of 0; SETTINGS values: ENABLE_PUSH other than 0 (a
//!   server may not enable it), INITIAL_WINDOW_SIZE above 2^31-1,
//!   MAX_FRAME_SIZE outside 16384..=2^24-1;
//! - header blocks: after a HEADERS or PUSH_PROMISE without END_HEADERS
//!   only CONTINUATION frames of the same stream may follow, and a
//!   CONTINUATION anywhere else is refused;
//! - the first frame must be SETTINGS (the server's connection preface);
//!   a reply that starts with `HTTP/` is told apart (an HTTP/1.x server).
//!
//! Frames of unknown types are skipped without being buffered (section
//! 4.1) and reported as [`Frame::Unknown`]. A rule broken is a
//! [`ProtocolError`]: every one is a connection error.
//!
//! Memory: the reader keeps the header being read (9 bytes) and the
//! payload of one frame, at most `max_frame_size` bytes; the buffer is
//! reused from frame to frame.

use super::error::ProtocolError;

/// The client connection preface (section 3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Length of a frame header.
pub const HEADER_LEN: usize = 9;
/// The initial and smallest `SETTINGS_MAX_FRAME_SIZE`.
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;
/// The largest `SETTINGS_MAX_FRAME_SIZE`.
pub const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;
/// The initial flow-control window of a connection and of a stream.
pub const DEFAULT_WINDOW: u32 = 65_535;
/// The largest flow-control window.
pub const MAX_WINDOW: u32 = (1 << 31) - 1;
/// The largest stream identifier.
pub const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// Frame type codes (section 6).
pub mod kind {
    /// DATA
    pub const DATA: u8 = 0x0;
    /// HEADERS
    pub const HEADERS: u8 = 0x1;
    /// PRIORITY
    pub const PRIORITY: u8 = 0x2;
    /// RST_STREAM
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS
    pub const SETTINGS: u8 = 0x4;
    /// PUSH_PROMISE
    pub const PUSH_PROMISE: u8 = 0x5;
    /// PING
    pub const PING: u8 = 0x6;
    /// GOAWAY
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION
    pub const CONTINUATION: u8 = 0x9;

    /// The type's name, `UNKNOWN` for the others.
    pub const fn name(k: u8) -> &'static str {
        match k {
            DATA => "DATA",
            HEADERS => "HEADERS",
            PRIORITY => "PRIORITY",
            RST_STREAM => "RST_STREAM",
            SETTINGS => "SETTINGS",
            PUSH_PROMISE => "PUSH_PROMISE",
            PING => "PING",
            GOAWAY => "GOAWAY",
            WINDOW_UPDATE => "WINDOW_UPDATE",
            CONTINUATION => "CONTINUATION",
            _ => "UNKNOWN",
        }
    }
}

/// Frame flags.
pub mod flag {
    /// DATA, HEADERS: the last frame of the stream.
    pub const END_STREAM: u8 = 0x1;
    /// SETTINGS, PING: an acknowledgement.
    pub const ACK: u8 = 0x1;
    /// HEADERS, PUSH_PROMISE, CONTINUATION: the block ends here.
    pub const END_HEADERS: u8 = 0x4;
    /// DATA, HEADERS, PUSH_PROMISE: padded.
    pub const PADDED: u8 = 0x8;
    /// HEADERS: carries priority fields.
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS parameters (section 6.5.2).
pub mod setting {
    /// SETTINGS_HEADER_TABLE_SIZE
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    /// SETTINGS_ENABLE_PUSH
    pub const ENABLE_PUSH: u16 = 0x2;
    /// SETTINGS_MAX_CONCURRENT_STREAMS
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    /// SETTINGS_INITIAL_WINDOW_SIZE
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    /// SETTINGS_MAX_FRAME_SIZE
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    /// SETTINGS_MAX_HEADER_LIST_SIZE
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// Priority fields of HEADERS and PRIORITY (deprecated by RFC 9113, read
/// and ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Priority {
    /// The stream depended on.
    pub dependency: u32,
    /// The exclusive bit.
    pub exclusive: bool,
    /// The weight minus one.
    pub weight: u8,
}

/// One frame, borrowed from the reader's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// DATA.
    Data {
        /// The stream.
        stream: u32,
        /// END_STREAM.
        end_stream: bool,
        /// The data, without padding.
        data: &'a [u8],
        /// The whole payload length, padding included: what flow control
        /// counts.
        flow_len: u32,
    },
    /// HEADERS.
    Headers {
        /// The stream.
        stream: u32,
        /// END_STREAM.
        end_stream: bool,
        /// END_HEADERS.
        end_headers: bool,
        /// The priority fields, when the PRIORITY flag is set.
        priority: Option<Priority>,
        /// The header block fragment, without padding.
        block: &'a [u8],
    },
    /// PRIORITY.
    Priority {
        /// The stream.
        stream: u32,
        /// Its fields.
        priority: Priority,
    },
    /// RST_STREAM.
    RstStream {
        /// The stream.
        stream: u32,
        /// The error code.
        code: u32,
    },
    /// SETTINGS (validated values; see the module).
    Settings {
        /// ACK.
        ack: bool,
        /// The parameters, in order.
        params: SettingsParams<'a>,
    },
    /// PUSH_PROMISE (always refused by the client: we disable push).
    PushPromise {
        /// The stream it is associated with.
        stream: u32,
        /// The promised stream.
        promised: u32,
        /// END_HEADERS.
        end_headers: bool,
        /// The header block fragment.
        block: &'a [u8],
    },
    /// PING.
    Ping {
        /// ACK.
        ack: bool,
        /// The opaque data.
        data: [u8; 8],
    },
    /// GOAWAY.
    GoAway {
        /// The last stream the server processed.
        last_stream: u32,
        /// The error code.
        code: u32,
        /// Additional debug data.
        debug: &'a [u8],
    },
    /// WINDOW_UPDATE (never 0).
    WindowUpdate {
        /// The stream, 0 for the connection.
        stream: u32,
        /// The increment, 1..=2^31-1.
        increment: u32,
    },
    /// CONTINUATION.
    Continuation {
        /// The stream.
        stream: u32,
        /// END_HEADERS.
        end_headers: bool,
        /// The header block fragment.
        block: &'a [u8],
    },
    /// A frame of an unknown type, skipped.
    Unknown {
        /// Its type.
        kind: u8,
        /// Its stream.
        stream: u32,
        /// Its payload length.
        len: u32,
    },
}

impl Frame<'_> {
    /// The frame's type code.
    pub fn kind(&self) -> u8 {
        match self {
            Frame::Data { .. } => kind::DATA,
            Frame::Headers { .. } => kind::HEADERS,
            Frame::Priority { .. } => kind::PRIORITY,
            Frame::RstStream { .. } => kind::RST_STREAM,
            Frame::Settings { .. } => kind::SETTINGS,
            Frame::PushPromise { .. } => kind::PUSH_PROMISE,
            Frame::Ping { .. } => kind::PING,
            Frame::GoAway { .. } => kind::GOAWAY,
            Frame::WindowUpdate { .. } => kind::WINDOW_UPDATE,
            Frame::Continuation { .. } => kind::CONTINUATION,
            Frame::Unknown { kind, .. } => *kind,
        }
    }
}

/// The parameters of a SETTINGS frame, each already validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettingsParams<'a>(&'a [u8]);

impl<'a> SettingsParams<'a> {
    /// `(identifier, value)` pairs in order, unknown identifiers included.
    pub fn iter(&self) -> impl Iterator<Item = (u16, u32)> + 'a {
        self.0.chunks_exact(6).map(|c| {
            (
                u16::from_be_bytes([c[0], c[1]]),
                u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
            )
        })
    }
}

/// A frame header being read.
#[derive(Clone, Copy, Debug, Default)]
struct Head {
    len: u32,
    kind: u8,
    flags: u8,
    stream: u32,
}

/// The incremental frame reader; see the module.
#[derive(Clone, Debug)]
pub struct FrameReader {
    max_frame_size: u32,
    head: [u8; HEADER_LEN],
    head_len: usize,
    /// The header of the frame whose payload is being read.
    cur: Option<Head>,
    payload: Vec<u8>,
    /// Payload bytes of an unknown frame left to skip.
    skipped: u32,
    /// The stream of an unfinished header block.
    in_block: Option<u32>,
    /// No frame read yet.
    first: bool,
}

impl FrameReader {
    /// A reader that refuses frames longer than `max_frame_size` (our
    /// `SETTINGS_MAX_FRAME_SIZE`, clamped to 16384..=2^24-1). When
    /// `expect_settings_first`, the first frame must be SETTINGS.
    pub fn new(max_frame_size: u32, expect_settings_first: bool) -> FrameReader {
        FrameReader {
            max_frame_size: max_frame_size.clamp(DEFAULT_MAX_FRAME_SIZE, MAX_MAX_FRAME_SIZE),
            head: [0; HEADER_LEN],
            head_len: 0,
            cur: None,
            payload: Vec::new(),
            skipped: 0,
            in_block: None,
            first: expect_settings_first,
        }
    }

    /// The largest frame accepted.
    pub fn max_frame_size(&self) -> u32 {
        self.max_frame_size
    }

    /// The heap bytes held (the payload buffer's capacity).
    pub fn heap_bytes(&self) -> usize {
        self.payload.capacity()
    }

    /// Whether a header block is open (a CONTINUATION must come next).
    pub fn in_header_block(&self) -> bool {
        self.in_block.is_some()
    }

    /// Whether the reader is between frames (no partial frame held).
    pub fn at_boundary(&self) -> bool {
        self.head_len == 0 && self.cur.is_none()
    }

    /// Reads from `input` up to the end of one frame. Returns how many
    /// bytes were used and the frame, if one was completed; with fewer
    /// bytes used than given only when a frame was completed. After an
    /// error the reader must not be used again.
    pub fn next<'s>(
        &'s mut self,
        input: &[u8],
    ) -> Result<(usize, Option<Frame<'s>>), ProtocolError> {
        let mut used = 0;
        let head = match self.cur {
            Some(h) => h,
            None => {
                let take = (HEADER_LEN - self.head_len).min(input.len());
                self.head[self.head_len..self.head_len + take].copy_from_slice(&input[..take]);
                self.head_len += take;
                used += take;
                if self.head_len < HEADER_LEN {
                    return Ok((used, None));
                }
                self.head_len = 0;
                let h = self.start(self.head)?;
                self.cur = Some(h);
                self.payload.clear();
                self.skipped = 0;
                h
            }
        };
        let rest = &input[used..];
        let missing = head.len as usize - self.got();
        let take = missing.min(rest.len());
        if is_known(head.kind) {
            if self.payload.capacity() < head.len as usize {
                self.payload.reserve_exact(head.len as usize);
            }
            self.payload.extend_from_slice(&rest[..take]);
        } else {
            self.skipped += take as u32;
        }
        used += take;
        if take < missing {
            return Ok((used, None));
        }
        self.cur = None;
        let frame = parse(head, &self.payload)?;
        Ok((used, Some(frame)))
    }

    fn got(&self) -> usize {
        self.payload.len() + self.skipped as usize
    }

    /// Checks a complete header against the rules that need no payload.
    fn start(&mut self, b: [u8; HEADER_LEN]) -> Result<Head, ProtocolError> {
        if self.first && b.starts_with(b"HTTP/") {
            return Err(ProtocolError::NotHttp2);
        }
        let h = Head {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & MAX_STREAM_ID,
        };
        if h.len > self.max_frame_size {
            return Err(ProtocolError::FrameTooLarge {
                len: h.len,
                max: self.max_frame_size,
            });
        }
        if std::mem::take(&mut self.first) && h.kind != kind::SETTINGS {
            return Err(ProtocolError::FirstNotSettings { kind: h.kind });
        }
        match self.in_block {
            Some(s) if h.kind != kind::CONTINUATION || h.stream != s => {
                return Err(ProtocolError::ExpectedContinuation {
                    kind: h.kind,
                    stream: s,
                });
            }
            None if h.kind == kind::CONTINUATION => {
                return Err(ProtocolError::UnexpectedContinuation { stream: h.stream });
            }
            _ => {}
        }
        let size_err = || ProtocolError::FrameSize {
            kind: h.kind,
            len: h.len,
        };
        let on_zero = matches!(h.kind, kind::SETTINGS | kind::PING | kind::GOAWAY);
        let needs_stream = matches!(
            h.kind,
            kind::DATA
                | kind::HEADERS
                | kind::PRIORITY
                | kind::RST_STREAM
                | kind::PUSH_PROMISE
                | kind::CONTINUATION
        );
        if (on_zero && h.stream != 0) || (needs_stream && h.stream == 0) {
            return Err(ProtocolError::BadStreamId {
                kind: h.kind,
                stream: h.stream,
            });
        }
        let ok_len = match h.kind {
            kind::PRIORITY => h.len == 5,
            kind::RST_STREAM | kind::WINDOW_UPDATE => h.len == 4,
            kind::PING => h.len == 8,
            kind::SETTINGS if h.flags & flag::ACK != 0 => h.len == 0,
            kind::SETTINGS => h.len % 6 == 0,
            kind::GOAWAY => h.len >= 8,
            _ => true,
        };
        if !ok_len {
            return Err(size_err());
        }
        match h.kind {
            kind::HEADERS | kind::PUSH_PROMISE | kind::CONTINUATION => {
                self.in_block = (h.flags & flag::END_HEADERS == 0).then_some(h.stream);
            }
            _ => {}
        }
        Ok(h)
    }
}

fn is_known(k: u8) -> bool {
    k <= kind::CONTINUATION
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Strips the padding of a PADDED frame: the pad length octet, then
/// `before` octets of fixed fields, then the data, then the pad.
fn unpad(h: &Head, p: &[u8], before: usize) -> Result<(usize, usize), ProtocolError> {
    if h.flags & flag::PADDED == 0 {
        return if p.len() < before {
            Err(ProtocolError::FrameSize {
                kind: h.kind,
                len: h.len,
            })
        } else {
            Ok((0, p.len()))
        };
    }
    let pad = usize::from(
        *p.first()
            .ok_or(ProtocolError::BadPadding { kind: h.kind })?,
    );
    if 1 + before + pad > p.len() {
        return Err(ProtocolError::BadPadding { kind: h.kind });
    }
    Ok((1, p.len() - pad))
}

fn priority(b: &[u8]) -> Priority {
    let d = be32(b);
    Priority {
        dependency: d & MAX_STREAM_ID,
        exclusive: d & !MAX_STREAM_ID != 0,
        weight: b[4],
    }
}

fn parse(h: Head, p: &[u8]) -> Result<Frame<'_>, ProtocolError> {
    let end_stream = h.flags & flag::END_STREAM != 0;
    let end_headers = h.flags & flag::END_HEADERS != 0;
    Ok(match h.kind {
        kind::DATA => {
            let (from, to) = unpad(&h, p, 0)?;
            Frame::Data {
                stream: h.stream,
                end_stream,
                data: &p[from..to],
                flow_len: h.len,
            }
        }
        kind::HEADERS => {
            let prio = h.flags & flag::PRIORITY != 0;
            let before = if prio { 5 } else { 0 };
            let (from, to) = unpad(&h, p, before)?;
            Frame::Headers {
                stream: h.stream,
                end_stream,
                end_headers,
                priority: prio.then(|| priority(&p[from..from + 5])),
                block: &p[from + before..to],
            }
        }
        kind::PRIORITY => Frame::Priority {
            stream: h.stream,
            priority: priority(p),
        },
        kind::RST_STREAM => Frame::RstStream {
            stream: h.stream,
            code: be32(p),
        },
        kind::SETTINGS => {
            let params = SettingsParams(p);
            for (id, value) in params.iter() {
                let ok = match id {
                    setting::ENABLE_PUSH => value == 0,
                    setting::INITIAL_WINDOW_SIZE => value <= MAX_WINDOW,
                    setting::MAX_FRAME_SIZE => {
                        (DEFAULT_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&value)
                    }
                    _ => true,
                };
                if !ok {
                    return Err(ProtocolError::BadSetting { id, value });
                }
            }
            Frame::Settings {
                ack: h.flags & flag::ACK != 0,
                params,
            }
        }
        kind::PUSH_PROMISE => {
            let (from, to) = unpad(&h, p, 4)?;
            Frame::PushPromise {
                stream: h.stream,
                promised: be32(&p[from..]) & MAX_STREAM_ID,
                end_headers,
                block: &p[from + 4..to],
            }
        }
        kind::PING => {
            let mut data = [0; 8];
            data.copy_from_slice(p);
            Frame::Ping {
                ack: h.flags & flag::ACK != 0,
                data,
            }
        }
        kind::GOAWAY => Frame::GoAway {
            last_stream: be32(p) & MAX_STREAM_ID,
            code: be32(&p[4..]),
            debug: &p[8..],
        },
        kind::WINDOW_UPDATE => {
            let increment = be32(p) & MAX_WINDOW;
            if increment == 0 {
                return Err(ProtocolError::ZeroWindowIncrement { stream: h.stream });
            }
            Frame::WindowUpdate {
                stream: h.stream,
                increment,
            }
        }
        kind::CONTINUATION => Frame::Continuation {
            stream: h.stream,
            end_headers,
            block: p,
        },
        k => Frame::Unknown {
            kind: k,
            stream: h.stream,
            len: h.len,
        },
    })
}

/// Appends a frame header.
pub fn put_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let len = len as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & MAX_STREAM_ID).to_be_bytes());
}

/// Appends a SETTINGS frame with these parameters.
pub fn put_settings(out: &mut Vec<u8>, params: &[(u16, u32)]) {
    put_header(out, params.len() * 6, kind::SETTINGS, 0, 0);
    for (id, v) in params {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// Appends a SETTINGS acknowledgement.
pub fn put_settings_ack(out: &mut Vec<u8>) {
    put_header(out, 0, kind::SETTINGS, flag::ACK, 0);
}

/// Appends a PING (an acknowledgement when `ack`).
pub fn put_ping(out: &mut Vec<u8>, ack: bool, data: [u8; 8]) {
    put_header(out, 8, kind::PING, if ack { flag::ACK } else { 0 }, 0);
    out.extend_from_slice(&data);
}

/// Appends a WINDOW_UPDATE (stream 0: the connection). `increment` must
/// be 1..=2^31-1.
pub fn put_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    put_header(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&(increment & MAX_WINDOW).to_be_bytes());
}

/// Appends a header block as HEADERS and as many CONTINUATION frames as
/// `max_frame_size` (the peer's) needs, END_HEADERS on the last one.
pub fn put_headers(
    out: &mut Vec<u8>,
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame_size: u32,
) {
    let max = (max_frame_size as usize).max(1);
    let mut chunks = block.chunks(max).peekable();
    let mut kind = kind::HEADERS;
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if chunks.peek().is_none() {
        put_header(out, 0, kind, flags | flag::END_HEADERS, stream);
        return;
    }
    while let Some(c) = chunks.next() {
        let last = chunks.peek().is_none();
        let f = if last {
            flags | flag::END_HEADERS
        } else {
            flags
        };
        put_header(out, c.len(), kind, f, stream);
        out.extend_from_slice(c);
        kind = kind::CONTINUATION;
        flags = 0;
    }
}

/// Appends a DATA frame (`data` at most the peer's max frame size).
pub fn put_data(out: &mut Vec<u8>, stream: u32, data: &[u8], end_stream: bool) {
    let flags = if end_stream { flag::END_STREAM } else { 0 };
    put_header(out, data.len(), kind::DATA, flags, stream);
    out.extend_from_slice(data);
}

/// Appends a RST_STREAM.
pub fn put_rst_stream(out: &mut Vec<u8>, stream: u32, code: u32) {
    put_header(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&code.to_be_bytes());
}

/// Appends a GOAWAY.
pub fn put_goaway(out: &mut Vec<u8>, last_stream: u32, code: u32, debug: &[u8]) {
    put_header(out, 8 + debug.len(), kind::GOAWAY, 0, 0);
    out.extend_from_slice(&(last_stream & MAX_STREAM_ID).to_be_bytes());
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(debug);
}
