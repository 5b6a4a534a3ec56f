//! An incremental, bounded HTTP/1.x response parser for health checks
//! (RFC 9112).
//!
//! The probe engine feeds the bytes of one response as they arrive, in any
//! split, and reads a [`State`] after each [`Parser::feed`] and on
//! [`Parser::eof`]. The verdict does not depend on how the bytes were
//! split: the head is parsed one byte at a time by a state machine that
//! keeps no partial line, bodies are consumed in runs.
//!
//! What is accepted:
//!
//! - a status line `HTTP/1.0` or `HTTP/1.1` (exactly; anything else,
//!   HTTP/0.9's headerless reply included, is [`Invalid::Version`]), one
//!   SP, three digits 100..=599 ([`Invalid::StatusLine`] otherwise), SP
//!   and a reason phrase, which may be empty (then the SP may be missing
//!   too); lines end in CRLF or a bare LF;
//! - header fields `name: value`, the name a token with nothing between it
//!   and the colon, the value trimmed of leading and trailing SP/HTAB; a
//!   line that starts with SP or HTAB (obs-fold) is refused; a control byte
//!   other than HTAB (in a reason or a value) anywhere in a head after its
//!   version, or a CR not followed by LF, is [`Invalid::HeaderSyntax`];
//! - up to [`MAX_INTERIM`] interim responses (1xx) before the final one,
//!   skipped with their headers. `101 Switching Protocols` is refused as
//!   [`Invalid::StatusLine`] (after a 101 the connection no longer speaks
//!   HTTP/1.x), unless [`Config::final_101`] makes it the final response,
//!   complete with its head and never reusable (a websocket upgrade check
//!   that accepts `http_1xx`);
//! - the final response's body framed as RFC 9112 section 6.3 says, in
//!   this order: none after a HEAD request, for 204 and for 304 (the
//!   response is complete with its head, whatever Content-Length or
//!   Transfer-Encoding say); `Transfer-Encoding` whose last coding is
//!   `chunked` (any other, `chunked` twice, Transfer-Encoding with
//!   Content-Length, or Transfer-Encoding in an HTTP/1.0 response is
//!   [`Invalid::Framing`]); one valid `Content-Length` (repeated identical
//!   values are accepted; differing, empty, signed or non-digit values are
//!   [`Invalid::Framing`]); otherwise the body runs until the peer closes
//!   (complete on eof, never reusable).
//!
//! Memory: see [`Parser`].

pub(crate) use grammar::is_tchar;
use grammar::{field_byte, framing, is_ctl, is_text, run, trim, trim_end, Fields};

/// The most interim (1xx) responses skipped before the final one; one more
/// is [`Invalid::TooManyInterim`].
pub const MAX_INTERIM: u32 = 8;

/// How a parser is set up for one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// `check_buffer_size`: the most bytes the head of one response (status
    /// line and header fields, line ends included) may take; interim
    /// responses count on their own. Also bounds one chunk-size line and
    /// the trailer section. The directive allows 1k..1m; any value works
    /// here.
    pub max_head: usize,
    /// The most bytes of decoded body kept for body tests (0: none).
    pub body_keep: usize,
    /// The request was HEAD: the final response has no body.
    pub head_request: bool,
    /// `101 Switching Protocols` is a final response (no body, the
    /// connection not reusable): the check accepts it (`http_1xx`, a
    /// websocket upgrade request). Else it is refused, as a health check
    /// cannot follow the protocol switch.
    pub final_101: bool,
}

/// Where a response stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// The final response's head is not complete yet.
    NeedMore,
    /// The final head is complete, its body is still arriving.
    Body,
    /// The response is complete.
    Complete,
    /// The response is malformed; the parser stays in this state.
    Invalid(Invalid),
}

/// Why a response is malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Invalid {
    /// Not `HTTP/1.0` or `HTTP/1.1` (HTTP/0.9, HTTP/2, `HTTP/1.2`,
    /// lowercase, not HTTP at all).
    Version,
    /// A status code that is not three digits 100..=599, 101, or a missing
    /// SP between the version and the code.
    StatusLine,
    /// A malformed header field (or trailer field), obs-fold, a control
    /// byte or a lone CR in the head.
    HeaderSyntax,
    /// A head (or the trailer section) larger than `max_head`.
    HeadTooLarge,
    /// More than [`MAX_INTERIM`] interim responses.
    TooManyInterim,
    /// Conflicting or malformed Content-Length / Transfer-Encoding.
    Framing,
    /// A malformed chunk-size line (no digits, more than 16 hex digits,
    /// longer than `max_head`, a bad byte) or a bad line end after chunk
    /// data.
    Chunk,
    /// The peer closed the connection before the response ended.
    Truncated,
}

impl Invalid {
    /// Every variant.
    pub const ALL: [Invalid; 8] = [
        Invalid::Version,
        Invalid::StatusLine,
        Invalid::HeaderSyntax,
        Invalid::HeadTooLarge,
        Invalid::TooManyInterim,
        Invalid::Framing,
        Invalid::Chunk,
        Invalid::Truncated,
    ];

    /// A few words for the error log.
    pub const fn name(&self) -> &'static str {
        match self {
            Invalid::Version => "unsupported HTTP version",
            Invalid::StatusLine => "invalid status line",
            Invalid::HeaderSyntax => "invalid header",
            Invalid::HeadTooLarge => "header too large",
            Invalid::TooManyInterim => "too many 1xx responses",
            Invalid::Framing => "invalid body framing",
            Invalid::Chunk => "invalid chunked body",
            Invalid::Truncated => "truncated response",
        }
    }
}

/// The head of the final response.
///
/// The reason phrase and the header fields are kept in one buffer, each
/// field as `name:value\n` (a name holds no `:`, a value no LF), so a head
/// never takes more bytes than it had on the wire.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Head {
    /// 0: HTTP/1.0, 1: HTTP/1.1.
    pub version: u8,
    /// The status code, 100..=599.
    pub status: u16,
    text: Vec<u8>,
    reason_len: usize,
    fields: usize,
}

impl Head {
    /// The reason phrase as received (possibly empty).
    pub fn reason(&self) -> &[u8] {
        &self.text[..self.reason_len]
    }

    /// The header fields in order: names as received, values trimmed of
    /// surrounding SP/HTAB.
    pub fn headers(&self) -> Headers<'_> {
        Headers {
            rest: &self.text[self.reason_len..],
            left: self.fields,
        }
    }

    /// The value of the first field named `name` (any case).
    pub fn header(&self, name: &[u8]) -> Option<&[u8]> {
        self.headers()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// The values of every field named `name` (any case), in order.
    pub fn headers_named<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// The elements of the comma-separated lists in every field named
    /// `name`, trimmed of SP/HTAB, empty elements included.
    pub fn list<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers_named(name)
            .flat_map(|v| v.split(|&b| b == b','))
            .map(trim)
    }

    /// Whether a list element of a field named `name` is `token` (any case).
    pub fn has_token(&self, name: &[u8], token: &[u8]) -> bool {
        self.list(name).any(|t| t.eq_ignore_ascii_case(token))
    }
}

/// The header fields of a [`Head`], see [`Head::headers`].
#[derive(Clone, Debug)]
pub struct Headers<'a> {
    rest: &'a [u8],
    left: usize,
}

impl<'a> Iterator for Headers<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let end = self.rest.iter().position(|&b| b == b'\n')?;
        let line = &self.rest[..end];
        self.rest = &self.rest[end + 1..];
        self.left -= 1;
        let colon = line.iter().position(|&b| b == b':').unwrap_or(line.len());
        Some((&line[..colon], line.get(colon + 1..).unwrap_or_default()))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Headers<'_> {}

/// Where the byte-wise machine stands in a head or a trailer section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Line {
    /// `n` bytes of `HTTP/1.` matched; at 7 the minor digit is next.
    Version(u8),
    AfterVersion,
    /// `n` digits of the status code read.
    Status(u8),
    AfterStatus,
    Reason,
    StatusLf,
    FieldStart,
    Name,
    ValueStart,
    Value,
    FieldLf,
    EndLf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChunkLine {
    /// `n` hex digits read so far.
    Digits(u8),
    /// SP/HTAB after the digits.
    Space,
    /// In chunk extensions.
    Ext,
    /// CR seen.
    Lf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Head(Line),
    Length(u64),
    UntilClose,
    /// A chunk-size line; `size` so far.
    ChunkSize(ChunkLine, u64),
    ChunkData(u64),
    /// The line end after chunk data; `true` once its CR was seen.
    ChunkEnd(bool),
    Trailer(Line),
    Done,
}

/// How the final response's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// The bytes of `HTTP/1.x ddd`, a status line's start up to its code.
const STATUS_START: usize = 12;

/// An incremental parser of one HTTP/1.x response.
///
/// Memory: the parser holds the final head's reason phrase and header
/// fields (never more bytes than the head had, so at most `max_head`; an
/// interim response's are dropped when it ends, and trailer fields and
/// chunk extensions are checked and dropped), the kept body (at most
/// `body_keep`), and the `Parser` value itself (under 200 bytes on 64-bit
/// targets). The two buffers grow by doubling up to those limits and no
/// further, so [`Parser::held`] (their capacity) is at most
/// `max_head + body_keep` for any input; body bytes past `body_keep` are
/// counted, never stored, and nothing else is allocated.
#[derive(Clone, Debug)]
pub struct Parser {
    cfg: Config,
    state: State,
    phase: Phase,
    head: Head,
    /// The final response's head is complete.
    head_done: bool,
    /// Where the name of the field being read starts in `head.text`.
    name_start: usize,
    /// Where the value of the field being read starts in `head.text`.
    value_start: usize,
    /// What the head's fields so far say about the connection and the
    /// body's framing (noted as each field line ends).
    fields: Fields,
    /// Bytes of the current head, chunk-size line or trailer section.
    count: usize,
    interim: u32,
    framing: Framing,
    keep_alive: bool,
    body: Vec<u8>,
    body_len: u64,
    trailing: u64,
    closed: bool,
}

impl Parser {
    /// A parser waiting for the first byte of a response.
    pub fn new(cfg: Config) -> Parser {
        Parser {
            cfg,
            state: State::NeedMore,
            phase: Phase::Head(Line::Version(0)),
            head: Head::default(),
            head_done: false,
            name_start: 0,
            value_start: 0,
            fields: Fields::default(),
            count: 0,
            interim: 0,
            framing: Framing::None,
            keep_alive: false,
            body: Vec::new(),
            body_len: 0,
            trailing: 0,
            closed: false,
        }
    }

    /// Consumes all of `input`; returns the state after it. Bytes after
    /// the response only count as [`Parser::trailing`]; after
    /// [`State::Invalid`] bytes are ignored.
    pub fn feed(&mut self, input: &[u8]) -> State {
        let mut i = 0;
        while i < input.len() {
            match self.state {
                State::Invalid(_) => break,
                State::Complete => {
                    let rest = (input.len() - i) as u64;
                    self.trailing = self.trailing.saturating_add(rest);
                    break;
                }
                State::NeedMore | State::Body => {}
            }
            match self.phase {
                Phase::Length(left) => {
                    let n = run(left, input.len() - i);
                    self.keep(&input[i..i + n]);
                    i += n;
                    if left == n as u64 {
                        self.complete();
                    } else {
                        self.phase = Phase::Length(left - n as u64);
                    }
                }
                Phase::UntilClose => {
                    self.keep(&input[i..]);
                    i = input.len();
                }
                Phase::ChunkData(left) => {
                    let n = run(left, input.len() - i);
                    self.keep(&input[i..i + n]);
                    i += n;
                    self.phase = if left == n as u64 {
                        Phase::ChunkEnd(false)
                    } else {
                        Phase::ChunkData(left - n as u64)
                    };
                }
                _ => {
                    if self.phase == Phase::Head(Line::Version(0)) && self.status_line(&input[i..])
                    {
                        i += STATUS_START;
                        continue;
                    }
                    if self.phase == Phase::Head(Line::FieldStart) {
                        let n = self.field_line(&input[i..]);
                        if n > 0 {
                            i += n;
                            continue;
                        }
                    }
                    let n = self.text_run(&input[i..]);
                    if n > 0 {
                        self.take_run(&input[i..i + n]);
                        i += n;
                        continue;
                    }
                    let b = input[i];
                    i += 1;
                    if let Err(e) = self.step(b) {
                        self.state = State::Invalid(e);
                    }
                }
            }
        }
        self.state
    }

    /// How many of `input`'s first bytes the head machine would only
    /// store, one at a time, without a change of line or an error: a run
    /// of a field name's, a field value's or the reason phrase's bytes
    /// (stopping short of `max_head`, whose excess byte takes the byte-wise
    /// path and its error).
    fn text_run(&self, input: &[u8]) -> usize {
        let Phase::Head(line) = self.phase else {
            return 0;
        };
        let room = self.cfg.max_head.saturating_sub(self.count);
        let input = &input[..input.len().min(room)];
        match line {
            Line::Name => input.iter().position(|b| !is_tchar(*b)),
            Line::Value | Line::Reason => input.iter().position(|b| !is_text(*b)),
            _ => return 0,
        }
        .unwrap_or(input.len())
    }

    /// Stores a [`Parser::text_run`] at once, as its bytes one by one would.
    fn take_run(&mut self, run: &[u8]) {
        self.count += run.len();
        if self.phase == Phase::Head(Line::Reason) {
            self.head.reason_len += run.len();
        }
        self.grow_text(self.head.text.len() + run.len());
        self.head.text.extend_from_slice(run);
    }

    /// The peer closed the connection (a read returned 0): completes a
    /// body read until close; anything else unfinished is
    /// [`Invalid::Truncated`], even before the first byte.
    pub fn eof(&mut self) -> State {
        self.closed = true;
        if matches!(self.state, State::NeedMore | State::Body) {
            if self.phase == Phase::UntilClose {
                self.complete();
            } else {
                self.state = State::Invalid(Invalid::Truncated);
            }
        }
        self.state
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// The final (non-1xx) response's head once its header fields are
    /// complete; it stays available if the body then turns out malformed
    /// ([`Invalid::Framing`], [`Invalid::Chunk`], a trailer error,
    /// [`Invalid::Truncated`]), for the log line.
    pub fn head(&self) -> Option<&Head> {
        self.head_done.then_some(&self.head)
    }

    /// Decoded body bytes kept so far (at most `body_keep`).
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Whether [`Parser::body`] is final: the response is complete, or the
    /// body is still arriving and `body_keep` bytes of it are kept.
    pub fn body_settled(&self) -> bool {
        match self.state {
            State::Complete => true,
            State::Body => self.body.len() >= self.cfg.body_keep,
            State::NeedMore | State::Invalid(_) => false,
        }
    }

    /// Decoded body bytes received so far, kept or not (saturating).
    pub fn body_len(&self) -> u64 {
        self.body_len
    }

    /// Bytes received after the response was complete (pipelining or
    /// garbage, saturating): a connection with any is not reusable.
    pub fn trailing(&self) -> u64 {
        self.trailing
    }

    /// Whether the connection may carry another request: the response is
    /// complete, nothing followed it, the peer has not closed, its framing
    /// is not read-until-close, and it is HTTP/1.1 without a `close`
    /// Connection option or HTTP/1.0 with `keep-alive` (and no `close`).
    pub fn reusable(&self) -> bool {
        self.state == State::Complete
            && self.trailing == 0
            && !self.closed
            && self.keep_alive
            && self.framing != Framing::UntilClose
    }

    /// The bytes the parser's buffers take (their capacity): at most
    /// `max_head + body_keep`.
    pub fn held(&self) -> usize {
        self.head.text.capacity() + self.body.capacity()
    }

    fn complete(&mut self) {
        self.phase = Phase::Done;
        self.state = State::Complete;
    }

    fn keep(&mut self, data: &[u8]) {
        self.body_len = self.body_len.saturating_add(data.len() as u64);
        let room = self.cfg.body_keep - self.body.len();
        let data = &data[..data.len().min(room)];
        if data.is_empty() {
            return;
        }
        let want = self.body.len() + data.len();
        if want > self.body.capacity() {
            let cap = (self.body.capacity() * 2)
                .max(want)
                .max(256)
                .min(self.cfg.body_keep);
            self.body.reserve_exact(cap - self.body.len());
        }
        self.body.extend_from_slice(data);
    }

    /// Stores one byte of the head's text; never beyond `max_head`.
    fn store(&mut self, b: u8) {
        let text = &mut self.head.text;
        if text.len() == text.capacity() {
            let cap = (text.capacity() * 2).max(256).min(self.cfg.max_head);
            text.reserve_exact(cap.max(text.len() + 1) - text.len());
        }
        text.push(b);
    }

    /// One byte outside a body run.
    fn step(&mut self, b: u8) -> Result<(), Invalid> {
        match self.phase {
            Phase::Head(line) => {
                self.count += 1;
                if self.count > self.cfg.max_head {
                    return Err(Invalid::HeadTooLarge);
                }
                self.head_byte(line, b)
            }
            Phase::Trailer(line) => {
                self.count += 1;
                if self.count > self.cfg.max_head {
                    return Err(Invalid::HeadTooLarge);
                }
                self.trailer_byte(line, b)
            }
            Phase::ChunkSize(line, size) => {
                self.count += 1;
                if self.count > self.cfg.max_head {
                    return Err(Invalid::Chunk);
                }
                self.chunk_size_byte(line, size, b)
            }
            Phase::ChunkEnd(cr) => match (cr, b) {
                (false, b'\r') => {
                    self.phase = Phase::ChunkEnd(true);
                    Ok(())
                }
                (_, b'\n') => {
                    self.count = 0;
                    self.phase = Phase::ChunkSize(ChunkLine::Digits(0), 0);
                    Ok(())
                }
                _ => Err(Invalid::Chunk),
            },
            // Handled in runs by `feed`, or no more input is parsed.
            Phase::Length(_) | Phase::UntilClose | Phase::ChunkData(_) | Phase::Done => {
                unreachable!("body bytes are consumed in runs")
            }
        }
    }

    fn head_byte(&mut self, line: Line, b: u8) -> Result<(), Invalid> {
        const PREFIX: &[u8; 7] = b"HTTP/1.";
        let next = match line {
            Line::Version(n) if usize::from(n) < PREFIX.len() => {
                if b != PREFIX[usize::from(n)] {
                    return Err(Invalid::Version);
                }
                Line::Version(n + 1)
            }
            Line::Version(_) => {
                self.head.version = match b {
                    b'0' => 0,
                    b'1' => 1,
                    _ => return Err(Invalid::Version),
                };
                Line::AfterVersion
            }
            _ if is_ctl(b) => return Err(Invalid::HeaderSyntax),
            Line::AfterVersion => match b {
                b' ' => Line::Status(0),
                // A longer version: HTTP/1.10, HTTP/1.1.1.
                b'.' | b'0'..=b'9' => return Err(Invalid::Version),
                _ => return Err(Invalid::StatusLine),
            },
            Line::Status(n) => {
                if !b.is_ascii_digit() {
                    return Err(Invalid::StatusLine);
                }
                self.head.status = self.head.status * 10 + u16::from(b - b'0');
                if n < 2 {
                    Line::Status(n + 1)
                } else {
                    self.check_status(self.head.status)?;
                    Line::AfterStatus
                }
            }
            Line::AfterStatus => match b {
                b' ' => Line::Reason,
                b'\r' => Line::StatusLf,
                b'\n' => Line::FieldStart,
                _ => return Err(Invalid::StatusLine),
            },
            Line::Reason => match b {
                b'\r' => Line::StatusLf,
                b'\n' => Line::FieldStart,
                _ => {
                    self.store(b);
                    self.head.reason_len += 1;
                    Line::Reason
                }
            },
            Line::StatusLf => match b {
                b'\n' => Line::FieldStart,
                _ => return Err(Invalid::HeaderSyntax),
            },
            _ => match field_byte(line, b)? {
                Field::Next(next) => {
                    match (line, next) {
                        (Line::FieldStart, Line::Name) => {
                            self.name_start = self.head.text.len();
                            self.store(b);
                        }
                        (_, Line::Name | Line::Value) => self.store(b),
                        (Line::Name, Line::ValueStart) => {
                            self.store(b':');
                            self.value_start = self.head.text.len();
                        }
                        _ => {}
                    }
                    next
                }
                Field::LineEnd => {
                    self.end_field_line();
                    Line::FieldStart
                }
                Field::SectionEnd => return self.end_of_head(),
            },
        };
        self.phase = Phase::Head(next);
        Ok(())
    }

    /// A field line ended (its value stored from `value_start` on, trailing
    /// SP/HTAB included): trim the value, note the field, end it with LF.
    pub(super) fn end_field_line(&mut self) {
        let keep = trim_end(&self.head.text[self.value_start..]).len();
        self.head.text.truncate(self.value_start + keep);
        let text = &self.head.text;
        self.fields.note(
            &text[self.name_start..self.value_start - 1],
            &text[self.value_start..],
        );
        self.store(b'\n');
        self.head.fields += 1;
    }

    fn trailer_byte(&mut self, line: Line, b: u8) -> Result<(), Invalid> {
        if is_ctl(b) {
            return Err(Invalid::HeaderSyntax);
        }
        match field_byte(line, b)? {
            Field::Next(next) => self.phase = Phase::Trailer(next),
            Field::LineEnd => self.phase = Phase::Trailer(Line::FieldStart),
            Field::SectionEnd => self.complete(),
        }
        Ok(())
    }

    fn chunk_size_byte(&mut self, line: ChunkLine, size: u64, b: u8) -> Result<(), Invalid> {
        let next = match (line, b) {
            // At most 16 digits: the size always fits in u64.
            (ChunkLine::Digits(16), _) if b.is_ascii_hexdigit() => return Err(Invalid::Chunk),
            (ChunkLine::Digits(n), _) if b.is_ascii_hexdigit() => {
                let d = (b as char).to_digit(16).unwrap_or_default();
                self.phase = Phase::ChunkSize(ChunkLine::Digits(n + 1), size << 4 | u64::from(d));
                return Ok(());
            }
            (ChunkLine::Digits(0), _) => return Err(Invalid::Chunk),
            (ChunkLine::Digits(_) | ChunkLine::Space, b' ' | b'\t') => ChunkLine::Space,
            (ChunkLine::Digits(_) | ChunkLine::Space | ChunkLine::Ext, b';') => ChunkLine::Ext,
            (ChunkLine::Digits(_) | ChunkLine::Space | ChunkLine::Ext, b'\r') => ChunkLine::Lf,
            (ChunkLine::Digits(_) | ChunkLine::Space | ChunkLine::Ext | ChunkLine::Lf, b'\n') => {
                self.count = 0;
                self.phase = if size == 0 {
                    Phase::Trailer(Line::FieldStart)
                } else {
                    Phase::ChunkData(size)
                };
                return Ok(());
            }
            (ChunkLine::Ext, _) if !is_ctl(b) => ChunkLine::Ext,
            _ => return Err(Invalid::Chunk),
        };
        self.phase = Phase::ChunkSize(next, size);
        Ok(())
    }

    /// The empty line ending a head: skips an interim response, or fixes
    /// the final response's framing.
    fn end_of_head(&mut self) -> Result<(), Invalid> {
        let switching = self.head.status == 101;
        if self.head.status < 200 && !switching {
            self.interim += 1;
            self.head.text.clear();
            self.head.reason_len = 0;
            self.head.fields = 0;
            self.fields = Fields::default();
            self.head.status = 0;
            self.count = 0;
            self.phase = Phase::Head(Line::Version(0));
            return Ok(());
        }
        self.head_done = true;
        let head = &self.head;
        let fields = self.fields;
        self.keep_alive = !switching && !fields.close && (head.version == 1 || fields.keep_alive);
        // After a 101 the connection speaks another protocol: no body.
        self.framing = match switching {
            true => Framing::None,
            false => framing(head, fields, self.cfg.head_request)?,
        };
        self.count = 0;
        self.state = State::Body;
        match self.framing {
            Framing::None | Framing::Length(0) => self.complete(),
            Framing::Length(n) => self.phase = Phase::Length(n),
            Framing::Chunked => self.phase = Phase::ChunkSize(ChunkLine::Digits(0), 0),
            Framing::UntilClose => self.phase = Phase::UntilClose,
        }
        Ok(())
    }
}

/// What a byte of a field line did.
enum Field {
    Next(Line),
    /// A field line ended.
    LineEnd,
    /// The empty line ending the section.
    SectionEnd,
}

mod grammar;
mod lines;
#[cfg(test)]
mod tests;
