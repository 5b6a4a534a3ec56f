//! The client side of one HTTP/2 connection, sans I/O.
//!
//! The engine owns the socket (or TLS session) and a [`Client`]:
//!
//! 1. [`Client::start`] queues the connection preface, our SETTINGS and,
//!    with a window above 65535, a connection WINDOW_UPDATE;
//! 2. [`Client::open_stream`] queues a request (HEADERS, CONTINUATIONs if
//!    the block needs them, DATA as the server's windows allow);
//! 3. the engine writes [`Client::output`] and reports what it wrote with
//!    [`Client::consume_output`], feeds what it reads to [`Client::feed`],
//!    and looks at [`Client::response`] (or drains [`Client::poll_event`])
//!    until the stream is [`Response::closed`];
//! 4. [`Client::take_response`] ends the stream (RST_STREAM CANCEL when it
//!    is still open), and the connection can carry the next round's
//!    stream while [`Client::can_open_stream`].
//!
//! What the client does by itself: it acknowledges SETTINGS and PING,
//! tracks the server's settings, sends WINDOW_UPDATEs so that bodies of
//! any length arrive (what is past `max_body_bytes` is dropped but still
//! credited), holds request data back while a send window is closed
//! (negative windows included) and sends it when WINDOW_UPDATE or
//! SETTINGS_INITIAL_WINDOW_SIZE opens it.
//!
//! Every [`ProtocolError`] ends the connection: [`Client::feed`] returns
//! it (and returns it again on every later call) and queues a GOAWAY
//! carrying its code, which the engine may write before closing. What
//! RFC 9113 calls a stream error (a malformed response, a bad frame on
//! one stream) is a connection error here too, as section 5.4.1 allows:
//! a health check has no other stream to save.
//!
//! Not checked: `content-length` against the DATA received (a response
//! to HEAD, a 204 or a 304 may announce a length it does not carry).
//!
//! # Memory
//!
//! A frame (at most `max_frame_size`, 16 KB by default), the HPACK table
//! (at most 4096 bytes of entries plus one allocation each), an open
//! header block and its decoded fields (each at most
//! `max_header_list_bytes`), the output (control frames are bounded by
//! `max_control_frames_per_round`, request data by the server's windows)
//! and, per stream, the response (headers, trailers, at most
//! `max_body_bytes` of body) and the request body not yet sent.
//! [`Client::heap_bytes`] adds them up.

use std::collections::VecDeque;

mod recv;

use super::error::{code, ProtocolError};
use super::frame::{self, setting, FrameReader};
use super::hpack::{self, Decoder};
use super::response::{Field, Response};

/// How a client is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Our `SETTINGS_MAX_FRAME_SIZE`: longer frames are refused (clamped
    /// to 16384..=2^24-1).
    pub max_frame_size: u32,
    /// Our `SETTINGS_HEADER_TABLE_SIZE`: the most the server's HPACK
    /// table may use (at most 4096; a lower value applies once the server
    /// acknowledged our SETTINGS).
    pub header_table_size: u32,
    /// The most bytes one header block may take, encoded and decoded
    /// (decoded as `SETTINGS_MAX_HEADER_LIST_SIZE` counts, name + value +
    /// 32 per field); the check's buffer size. Also sent as
    /// `SETTINGS_MAX_HEADER_LIST_SIZE`.
    pub max_header_list_bytes: usize,
    /// The most body bytes kept per response; the rest is dropped.
    pub max_body_bytes: usize,
    /// The most control frames (SETTINGS, PING, PRIORITY, WINDOW_UPDATE,
    /// RST_STREAM and GOAWAY, unknown frames, empty DATA without
    /// END_STREAM, empty header fragments) per round
    /// ([`Client::begin_round`]); at least 8.
    pub max_control_frames_per_round: u32,
    /// Our `SETTINGS_INITIAL_WINDOW_SIZE`, also the connection window we
    /// keep open (clamped to 65535..=2^31-1).
    pub initial_window: u32,
    /// Keep the regular header and trailer fields in the [`Response`]
    /// (a round that reads none, like an HTTP check without a match
    /// block, has them checked by RFC 9113's rules and dropped).
    pub keep_fields: bool,
}

impl Default for Limits {
    /// 16 KB frames and header blocks, a 4096-byte HPACK table, 16 KB of
    /// body, 100 control frames per round, 64 KB windows, fields kept.
    fn default() -> Limits {
        Limits {
            max_frame_size: frame::DEFAULT_MAX_FRAME_SIZE,
            header_table_size: 4096,
            max_header_list_bytes: 16_384,
            max_body_bytes: 16_384,
            max_control_frames_per_round: 100,
            initial_window: frame::DEFAULT_WINDOW,
            keep_fields: true,
        }
    }
}

/// The largest HPACK table we let the server use.
pub const MAX_HEADER_TABLE_SIZE: u32 = 4096;
/// The most GOAWAY debug bytes kept.
pub const MAX_GOAWAY_DEBUG: usize = 256;
/// The most streams we reset whose late frames are still ignored.
const RESET_MEMORY: usize = 16;
/// WINDOW_UPDATE is sent once this much was received since the last one:
/// half the smallest window the server may believe we gave it.
const CREDIT_THRESHOLD: u64 = frame::DEFAULT_WINDOW as u64 / 2;

/// The server's settings (RFC 9113 section 6.5.2), initial values until
/// its SETTINGS comes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerSettings {
    /// SETTINGS_HEADER_TABLE_SIZE (our encoder uses no table).
    pub header_table_size: u32,
    /// SETTINGS_MAX_CONCURRENT_STREAMS, unlimited when `None`.
    pub max_concurrent_streams: Option<u32>,
    /// SETTINGS_INITIAL_WINDOW_SIZE.
    pub initial_window: u32,
    /// SETTINGS_MAX_FRAME_SIZE: the longest frame we send.
    pub max_frame_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE (advisory), unlimited when `None`.
    pub max_header_list_size: Option<u32>,
}

impl Default for PeerSettings {
    fn default() -> PeerSettings {
        PeerSettings {
            header_table_size: 4096,
            max_concurrent_streams: None,
            initial_window: frame::DEFAULT_WINDOW,
            max_frame_size: frame::DEFAULT_MAX_FRAME_SIZE,
            max_header_list_size: None,
        }
    }
}

/// A GOAWAY from the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoAway {
    /// The last stream it processed or may still process (the smallest
    /// of all its GOAWAYs).
    pub last_stream: u32,
    /// The error code of the last GOAWAY.
    pub code: u32,
    /// Its debug data, at most [`MAX_GOAWAY_DEBUG`] bytes.
    pub debug: Vec<u8>,
}

/// Something that happened, from [`Client::poll_event`]. Events are
/// coalesced (what came since the last poll): connection events first,
/// then each stream's in order head, data, trailers, end, reset or
/// refusal. The state they point at is in [`Client::response`] and the
/// connection's getters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A SETTINGS from the server came (and was acknowledged).
    Settings,
    /// The server acknowledged our SETTINGS.
    SettingsAck,
    /// A PING came (and was acknowledged).
    Ping,
    /// A GOAWAY came: see [`Client::goaway`].
    GoAway,
    /// The final response head of a stream came.
    Headers(u32),
    /// Body bytes came on a stream: how many since the last event.
    Data(u32, u64),
    /// The trailers of a stream came.
    Trailers(u32),
    /// The server ended a stream (complete response).
    End(u32),
    /// The server reset a stream, with this code.
    Reset(u32, u32),
    /// The server's GOAWAY refused a stream.
    Refused(u32),
}

/// Why a stream could not be opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// The connection failed.
    Failed,
    /// The server sent GOAWAY (or we did).
    GoingAway,
    /// Stream identifiers are used up.
    Exhausted,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS is reached.
    TooManyStreams,
}

const EV_SETTINGS: u8 = 1;
const EV_SETTINGS_ACK: u8 = 2;
const EV_PING: u8 = 4;
const EV_GOAWAY: u8 = 8;
const EV_HEADERS: u8 = 1;
const EV_DATA: u8 = 2;
const EV_TRAILERS: u8 = 4;
const EV_END: u8 = 8;
const EV_RESET: u8 = 16;
const EV_REFUSED: u8 = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No final head yet.
    Head,
    /// Final head in, body and trailers may follow.
    Body,
    /// Ended, reset or refused.
    Done,
}

#[derive(Clone, Debug)]
struct Stream {
    id: u32,
    send_window: i64,
    /// What the server may still send, counted leniently (see
    /// `CREDIT_THRESHOLD`).
    recv_window: i64,
    /// Received and not yet credited back.
    uncredited: u64,
    body: Vec<u8>,
    sent: usize,
    end_sent: bool,
    phase: Phase,
    resp: Response,
    events: u8,
    data_unreported: u64,
}

#[derive(Clone, Debug)]
struct Block {
    stream: u32,
    end_stream: bool,
    buf: Vec<u8>,
    continuations: u32,
}

/// The client; see the module.
#[derive(Clone, Debug)]
pub struct Client {
    reader: FrameReader,
    c: Conn,
}

#[derive(Clone, Debug)]
struct Conn {
    limits: Limits,
    hpack: Decoder,
    out: Vec<u8>,
    started: bool,
    settings_received: bool,
    settings_acked: bool,
    peer: PeerSettings,
    send_window: i64,
    recv_window: i64,
    uncredited: u64,
    next_stream: u32,
    streams: Vec<Stream>,
    reset_by_us: VecDeque<u32>,
    block: Option<Block>,
    goaway: Option<GoAway>,
    goaway_sent: bool,
    control: u32,
    error: Option<ProtocolError>,
    events: u8,
    /// Allocations of finished rounds, for the next ones.
    spare: Spare,
}

/// What the responses of finished streams give back (their fields, field
/// lists and buffers), so that a kept connection's rounds decode without
/// allocating. At most [`SPARE_BYTES`] of capacity is kept. Its `Debug`
/// shows counts only: capacities depend on how the input was split.
#[derive(Clone, Default)]
struct Spare {
    fields: Vec<Field>,
    lists: Vec<Vec<Field>>,
    bufs: Vec<Vec<u8>>,
    /// The capacity held in the three.
    bytes: usize,
}

impl core::fmt::Debug for Spare {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "Spare({} fields, {} lists, {} buffers)",
            self.fields.len(),
            self.lists.len(),
            self.bufs.len()
        )
    }
}

/// The most capacity kept for later rounds (a round's response of nginx
/// or a gRPC server holds well under 1 KB).
const SPARE_BYTES: usize = 4 * 1024;
/// Bookkeeping charged per kept field or list.
const SPARE_ENTRY: usize = 48;

impl Spare {
    fn field(&mut self, n: &[u8], v: &[u8]) -> Field {
        let (mut name, mut value) = match self.fields.pop() {
            Some(f) => {
                self.bytes -= f.0.capacity() + f.1.capacity() + SPARE_ENTRY;
                f
            }
            None => Field::default(),
        };
        name.clear();
        name.extend_from_slice(n);
        value.clear();
        value.extend_from_slice(v);
        (name, value)
    }

    fn list(&mut self) -> Vec<Field> {
        match self.lists.pop() {
            Some(l) => {
                self.bytes -= l.capacity() * SPARE_ENTRY + SPARE_ENTRY;
                l
            }
            None => Vec::new(),
        }
    }

    fn buf(&mut self) -> Vec<u8> {
        match self.bufs.pop() {
            Some(mut b) => {
                self.bytes -= b.capacity();
                b.clear();
                b
            }
            None => Vec::new(),
        }
    }

    fn room(&mut self, size: usize) -> bool {
        if self.bytes + size > SPARE_BYTES {
            return false;
        }
        self.bytes += size;
        true
    }

    fn keep_field(&mut self, f: Field) {
        if self.room(f.0.capacity() + f.1.capacity() + SPARE_ENTRY) {
            self.fields.push(f);
        }
    }

    fn keep_list(&mut self, mut list: Vec<Field>) {
        for f in list.drain(..) {
            self.keep_field(f);
        }
        if list.capacity() > 0 && self.room(list.capacity() * SPARE_ENTRY + SPARE_ENTRY) {
            self.lists.push(list);
        }
    }

    fn keep_buf(&mut self, b: Vec<u8>) {
        if b.capacity() > 0 && self.room(b.capacity()) {
            self.bufs.push(b);
        }
    }
}

impl Client {
    /// A client with these limits, clamped to their documented ranges.
    pub fn new(limits: Limits) -> Client {
        let limits = Limits {
            max_frame_size: limits
                .max_frame_size
                .clamp(frame::DEFAULT_MAX_FRAME_SIZE, frame::MAX_MAX_FRAME_SIZE),
            header_table_size: limits.header_table_size.min(MAX_HEADER_TABLE_SIZE),
            max_control_frames_per_round: limits.max_control_frames_per_round.max(8),
            initial_window: limits
                .initial_window
                .clamp(frame::DEFAULT_WINDOW, frame::MAX_WINDOW),
            ..limits
        };
        Client {
            reader: FrameReader::new(limits.max_frame_size, true),
            c: Conn {
                limits,
                hpack: Decoder::new(MAX_HEADER_TABLE_SIZE as usize),
                out: Vec::new(),
                started: false,
                settings_received: false,
                settings_acked: false,
                peer: PeerSettings::default(),
                send_window: i64::from(frame::DEFAULT_WINDOW),
                recv_window: i64::from(frame::DEFAULT_WINDOW),
                uncredited: 0,
                next_stream: 1,
                streams: Vec::new(),
                reset_by_us: VecDeque::new(),
                block: None,
                goaway: None,
                goaway_sent: false,
                control: 0,
                error: None,
                events: 0,
                spare: Spare::default(),
            },
        }
    }

    /// The limits in force (after clamping).
    pub fn limits(&self) -> &Limits {
        &self.c.limits
    }

    /// Queues the connection preface, our SETTINGS (ENABLE_PUSH 0,
    /// MAX_HEADER_LIST_SIZE, and the others that differ from the
    /// protocol's initial values) and a connection WINDOW_UPDATE when
    /// `initial_window` is above 65535. Once only; [`Client::open_stream`]
    /// calls it if needed.
    pub fn start(&mut self) {
        let c = &mut self.c;
        if c.started {
            return;
        }
        c.started = true;
        c.out.extend_from_slice(frame::PREFACE);
        let l = c.limits;
        let mut params = vec![(setting::ENABLE_PUSH, 0)];
        if l.header_table_size != 4096 {
            params.push((setting::HEADER_TABLE_SIZE, l.header_table_size));
        }
        if l.initial_window != frame::DEFAULT_WINDOW {
            params.push((setting::INITIAL_WINDOW_SIZE, l.initial_window));
        }
        if l.max_frame_size != frame::DEFAULT_MAX_FRAME_SIZE {
            params.push((setting::MAX_FRAME_SIZE, l.max_frame_size));
        }
        let list = u32::try_from(l.max_header_list_bytes).unwrap_or(u32::MAX);
        params.push((setting::MAX_HEADER_LIST_SIZE, list));
        frame::put_settings(&mut c.out, &params);
        let extra = l.initial_window - frame::DEFAULT_WINDOW;
        if extra > 0 {
            frame::put_window_update(&mut c.out, 0, extra);
            c.recv_window += i64::from(extra);
        }
    }

    /// Starts a new round: the control-frame count starts again from 0.
    pub fn begin_round(&mut self) {
        self.c.control = 0;
    }

    /// Consumes bytes from the server, in any split: the same bytes give
    /// the same state, output and result however they are split. Returns
    /// the error that ended the connection (now or before).
    pub fn feed(&mut self, mut input: &[u8]) -> Result<(), ProtocolError> {
        if let Some(e) = &self.c.error {
            return Err(e.clone());
        }
        while !input.is_empty() {
            let step = match self.reader.next(input) {
                Ok((used, frame)) => {
                    input = &input[used..];
                    match frame {
                        Some(f) => self.c.frame(f),
                        None => Ok(()),
                    }
                }
                Err(e) => Err(e),
            };
            if let Err(e) = step {
                return Err(self.c.fail(e));
            }
        }
        Ok(())
    }

    /// The bytes to write, in order.
    pub fn output(&self) -> &[u8] {
        &self.c.out
    }

    /// `n` bytes of [`Client::output`] were written.
    pub fn consume_output(&mut self, n: usize) {
        let n = n.min(self.c.out.len());
        self.c.out.drain(..n);
    }

    /// The next event, if any; see [`Event`].
    pub fn poll_event(&mut self) -> Option<Event> {
        let c = &mut self.c;
        for (bit, ev) in [
            (EV_SETTINGS, Event::Settings),
            (EV_SETTINGS_ACK, Event::SettingsAck),
            (EV_PING, Event::Ping),
            (EV_GOAWAY, Event::GoAway),
        ] {
            if c.events & bit != 0 {
                c.events &= !bit;
                return Some(ev);
            }
        }
        for s in &mut c.streams {
            if s.events == 0 {
                continue;
            }
            let id = s.id;
            let bit = 1 << s.events.trailing_zeros();
            s.events &= !bit;
            return Some(match bit {
                EV_HEADERS => Event::Headers(id),
                EV_DATA => Event::Data(id, std::mem::take(&mut s.data_unreported)),
                EV_TRAILERS => Event::Trailers(id),
                EV_END => Event::End(id),
                EV_RESET => Event::Reset(id, s.resp.reset.unwrap_or(0)),
                _ => Event::Refused(id),
            });
        }
        None
    }

    /// Whether the server's first SETTINGS has come. The engine fails the
    /// round (`protocol`) when it has not within its time.
    pub fn settings_received(&self) -> bool {
        self.c.settings_received
    }

    /// Whether the server acknowledged our SETTINGS.
    pub fn settings_acked(&self) -> bool {
        self.c.settings_acked
    }

    /// The server's settings as they stand.
    pub fn peer_settings(&self) -> &PeerSettings {
        &self.c.peer
    }

    /// The server's GOAWAY, if one came.
    pub fn goaway(&self) -> Option<&GoAway> {
        self.c.goaway.as_ref()
    }

    /// The error that ended the connection, if one did.
    pub fn error(&self) -> Option<&ProtocolError> {
        self.c.error.as_ref()
    }

    /// Whether [`Client::open_stream`] would succeed.
    pub fn can_open_stream(&self) -> bool {
        self.c.open_check().is_ok()
    }

    /// The id the next stream gets (1, 3, 5, ...), `None` once used up.
    pub fn next_stream_id(&self) -> Option<u32> {
        (self.c.next_stream <= frame::MAX_STREAM_ID).then_some(self.c.next_stream)
    }

    /// Streams opened and not yet closed by the server.
    pub fn active_streams(&self) -> usize {
        self.c.active()
    }

    /// Opens a stream: queues HEADERS with `headers` (HPACK literals
    /// without indexing, split into CONTINUATIONs by the server's
    /// MAX_FRAME_SIZE), END_STREAM on it when `body` is empty, else the
    /// body as DATA, END_STREAM on the last frame, as far as the server's
    /// windows allow now (the rest goes when they open). Starts the
    /// connection if [`Client::start`] was not called.
    pub fn open_stream(&mut self, headers: &[Field], body: &[u8]) -> Result<u32, OpenError> {
        self.open_stream_encoded(&hpack::encode_block(headers), body)
    }

    /// [`Client::open_stream`] with the header block already encoded by
    /// [`hpack::encode_block`] (its literals leave no table state, so
    /// blocks may be made once and joined: a probe's fixed fields, then a
    /// round's own).
    pub fn open_stream_encoded(&mut self, block: &[u8], body: &[u8]) -> Result<u32, OpenError> {
        self.start();
        let c = &mut self.c;
        c.open_check()?;
        let id = c.next_stream;
        c.next_stream += 2;
        frame::put_headers(
            &mut c.out,
            id,
            block,
            body.is_empty(),
            c.peer.max_frame_size,
        );
        c.streams.push(Stream {
            id,
            send_window: i64::from(c.peer.initial_window),
            recv_window: i64::from(c.limits.initial_window),
            uncredited: 0,
            body: {
                let mut b = c.spare.buf();
                b.extend_from_slice(body);
                b
            },
            sent: 0,
            end_sent: body.is_empty(),
            phase: Phase::Head,
            resp: Response {
                body: c.spare.buf(),
                ..Response::default()
            },
            events: 0,
            data_unreported: 0,
        });
        c.flush();
        Ok(id)
    }

    /// The response of a stream not yet taken. A stream stays, closed or
    /// not, until [`Client::take_response`]: take every stream opened.
    pub fn response(&self, id: u32) -> Option<&Response> {
        self.c.stream(id).map(|s| &s.resp)
    }

    /// Whether a stream still has request body to send and a send window
    /// (its own or the connection's) at or below 0.
    pub fn send_blocked(&self, id: u32) -> bool {
        self.c
            .stream(id)
            .is_some_and(|s| !s.end_sent && (s.send_window <= 0 || self.c.send_window <= 0))
    }

    /// Removes a stream and gives its response. A stream the server has
    /// not closed is reset (RST_STREAM CANCEL); its late frames are then
    /// ignored.
    pub fn take_response(&mut self, id: u32) -> Option<Response> {
        let c = &mut self.c;
        let at = c.streams.iter().position(|s| s.id == id)?;
        let s = c.streams.remove(at);
        if s.phase != Phase::Done && c.error.is_none() {
            frame::put_rst_stream(&mut c.out, id, code::CANCEL);
            c.remember_reset(id);
        }
        c.spare.keep_buf(s.body);
        Some(s.resp)
    }

    /// Gives back a response taken with [`Client::take_response`] once it
    /// is judged: its allocations serve the next rounds of the connection.
    pub fn recycle(&mut self, resp: Response) {
        let spare = &mut self.c.spare;
        spare.keep_list(resp.headers);
        spare.keep_list(resp.trailers);
        spare.keep_buf(resp.body);
    }

    /// Makes the next stream id `id` (tests of stream-id exhaustion).
    #[cfg(test)]
    pub(crate) fn skip_streams_to(&mut self, id: u32) {
        self.c.next_stream = id;
    }

    /// Queues our GOAWAY (no stream of the server's processed) with
    /// `code`: the connection carries no new stream.
    pub fn go_away(&mut self, code: u32) {
        let c = &mut self.c;
        if !c.goaway_sent && c.error.is_none() {
            c.goaway_sent = true;
            frame::put_goaway(&mut c.out, 0, code, b"");
        }
    }

    /// Heap bytes this connection holds, roughly: buffers, HPACK table,
    /// streams (responses and unsent bodies).
    pub fn heap_bytes(&self) -> usize {
        let c = &self.c;
        self.reader.heap_bytes()
            + c.hpack.heap_bytes()
            + c.out.capacity()
            + c.block.as_ref().map_or(0, |b| b.buf.capacity())
            + c.streams
                .iter()
                .map(|s| s.resp.heap_bytes() + s.body.capacity() + std::mem::size_of::<Stream>())
                .sum::<usize>()
            + c.goaway.as_ref().map_or(0, |g| g.debug.capacity())
            + c.spare.bytes
    }
}

impl Conn {
    fn stream(&self, id: u32) -> Option<&Stream> {
        self.streams.iter().find(|s| s.id == id)
    }

    fn active(&self) -> usize {
        self.streams
            .iter()
            .filter(|s| s.phase != Phase::Done)
            .count()
    }

    fn open_check(&self) -> Result<(), OpenError> {
        if self.error.is_some() {
            return Err(OpenError::Failed);
        }
        if self.goaway.is_some() || self.goaway_sent {
            return Err(OpenError::GoingAway);
        }
        if self.next_stream > frame::MAX_STREAM_ID {
            return Err(OpenError::Exhausted);
        }
        if let Some(max) = self.peer.max_concurrent_streams {
            if self.active() >= max as usize {
                return Err(OpenError::TooManyStreams);
            }
        }
        Ok(())
    }

    fn remember_reset(&mut self, id: u32) {
        if self.reset_by_us.len() == RESET_MEMORY {
            self.reset_by_us.pop_front();
        }
        self.reset_by_us.push_back(id);
    }

    /// Records the error and queues our GOAWAY with its code.
    fn fail(&mut self, e: ProtocolError) -> ProtocolError {
        if !self.goaway_sent {
            self.goaway_sent = true;
            let detail = e.to_string();
            let debug = &detail.as_bytes()[..detail.len().min(MAX_GOAWAY_DEBUG)];
            frame::put_goaway(&mut self.out, 0, e.code(), debug);
        }
        self.error = Some(e.clone());
        e
    }

    fn control_frame(&mut self) -> Result<(), ProtocolError> {
        self.control += 1;
        if self.control > self.limits.max_control_frames_per_round {
            return Err(ProtocolError::TooManyControlFrames {
                max: self.limits.max_control_frames_per_round,
            });
        }
        Ok(())
    }

    /// Sends request data as the windows allow.
    fn flush(&mut self) {
        let max = self.peer.max_frame_size as i64;
        for s in &mut self.streams {
            while !s.end_sent {
                let left = (s.body.len() - s.sent) as i64;
                let n = left.min(self.send_window).min(s.send_window).min(max);
                if n <= 0 {
                    break;
                }
                let n = n as usize;
                let last = n as i64 == left;
                frame::put_data(&mut self.out, s.id, &s.body[s.sent..s.sent + n], last);
                s.sent += n;
                self.send_window -= n as i64;
                s.send_window -= n as i64;
                if last {
                    s.end_sent = true;
                    s.body = Vec::new();
                    s.sent = 0;
                }
            }
        }
    }
}
