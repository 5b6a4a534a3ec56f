//! FastCGI (the FastCGI 1.0 specification): the request a `type=fastcgi`
//! check sends, and the decoder of the response. The request is one
//! responder request, id 1, without `FCGI_KEEP_CONN` (the application
//! closes the connection when it is done): `FCGI_BEGIN_REQUEST`, the
//! parameters (`check_fastcgi_param`) in `FCGI_PARAMS` records, an empty
//! `FCGI_PARAMS` and an empty `FCGI_STDIN`. The answer is judged by the
//! CGI response's `Status` header (RFC 3875 section 6.3.3: without one the
//! status is 200, or 302 with a `Location` header), as
//! `check_http_expect_alive` says; what the application wrote to
//! `FCGI_STDERR` (PHP's notices) is not a verdict.

use super::{Answer, Verdict};
use crate::conf::StatusClasses;
use crate::reason::Reason;

const VERSION: u8 = 1;
const BEGIN_REQUEST: u8 = 1;
const END_REQUEST: u8 = 3;
const PARAMS: u8 = 4;
const STDIN: u8 = 5;
const STDOUT: u8 = 6;
/// `FCGI_STDERR`: what the application logs (not a verdict).
#[cfg(test)]
const STDERR: u8 = 7;
/// The request's id.
const ID: u16 = 1;
const RESPONDER: u16 = 1;

/// The parameters a check sends when `check_fastcgi_param` gives none:
/// what yaoweibin's module sends (docs/migrating.md).
pub const DEFAULT_PARAMS: [(&str, &str); 3] = [
    ("REQUEST_METHOD", "GET"),
    ("REQUEST_URI", "/"),
    ("SCRIPT_FILENAME", "index.php"),
];

fn header(out: &mut Vec<u8>, kind: u8, len: usize, pad: usize) {
    out.extend_from_slice(&[
        VERSION,
        kind,
        (ID >> 8) as u8,
        ID as u8,
        (len >> 8) as u8,
        len as u8,
        pad as u8,
        0,
    ]);
}

fn length(out: &mut Vec<u8>, n: usize) {
    if n < 128 {
        out.push(n as u8);
    } else {
        out.extend_from_slice(&(n as u32 | 0x8000_0000).to_be_bytes());
    }
}

/// The request's bytes for `params` (name, value), in order.
pub fn request(params: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    header(&mut out, BEGIN_REQUEST, 8, 0);
    out.extend_from_slice(&[(RESPONDER >> 8) as u8, RESPONDER as u8, 0, 0, 0, 0, 0, 0]);
    let mut body = Vec::new();
    for (n, v) in params {
        length(&mut body, n.len());
        length(&mut body, v.len());
        body.extend_from_slice(n);
        body.extend_from_slice(v);
    }
    // Records of at most 65535 bytes, each padded to a multiple of 8.
    for chunk in body.chunks(0xfff8) {
        let pad = (8 - chunk.len() % 8) % 8;
        header(&mut out, PARAMS, chunk.len(), pad);
        out.extend_from_slice(chunk);
        out.resize(out.len() + pad, 0);
    }
    header(&mut out, PARAMS, 0, 0);
    header(&mut out, STDIN, 0, 0);
    out
}

/// Where the decoder is in the record stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    /// Reading a record header: bytes of it so far.
    Header(usize),
    /// In a record's content: its type, bytes left, then padding.
    Content { kind: u8, left: usize, pad: usize },
    /// Skipping padding.
    Padding(usize),
}

/// The decoder of one response.
#[derive(Debug)]
pub struct Response {
    alive: StatusClasses,
    /// Bytes of the CGI head kept at most (`check_buffer_size`).
    max: usize,
    at: At,
    hdr: [u8; 8],
    /// The start of `FCGI_STDOUT`: the CGI response's head.
    head: Vec<u8>,
    /// An END_REQUEST body being read.
    end: Vec<u8>,
    /// The status once the head is complete.
    status: Option<u16>,
    done: Option<Verdict>,
}

impl Response {
    /// A decoder judging the status by `alive`, keeping at most `max`
    /// bytes of the response's head.
    pub fn new(alive: StatusClasses, max: usize) -> Response {
        Response {
            alive,
            max: max.max(64),
            at: At::Header(0),
            hdr: [0; 8],
            head: Vec::new(),
            end: Vec::new(),
            status: None,
            done: None,
        }
    }

    /// The status of the response, once its head is complete.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    fn finish(&mut self, v: Verdict) -> Verdict {
        self.done = Some(v.clone());
        v
    }

    /// The head is complete: the status and its verdict.
    fn judge_head(&mut self) -> Verdict {
        let status = cgi_status(&self.head);
        self.status = Some(status);
        let v = if self.alive.accepts(status) {
            Verdict::Up
        } else {
            Verdict::Down(Reason::Status, format!("FastCGI Status {status}"))
        };
        self.finish(v)
    }

    /// Take `bytes` of `FCGI_STDOUT`.
    fn stdout(&mut self, bytes: &[u8]) -> Option<Verdict> {
        let room = self.max.saturating_sub(self.head.len());
        self.head.extend_from_slice(&bytes[..bytes.len().min(room)]);
        if head_end(&self.head).is_some() {
            return Some(self.judge_head());
        }
        if self.head.len() >= self.max {
            return Some(self.finish(Verdict::Down(
                Reason::Invalid,
                format!("a FastCGI response head over {} bytes", self.max),
            )));
        }
        None
    }

    /// The request ended (`FCGI_END_REQUEST`, its body in `end`).
    fn ended(&mut self) -> Verdict {
        let protocol = self.end.get(4).copied().unwrap_or(0);
        if protocol != 0 {
            let why = match protocol {
                1 => "cannot multiplex",
                2 => "overloaded",
                3 => "unknown role",
                _ => "refused the request",
            };
            return self.finish(Verdict::Down(
                Reason::Status,
                format!("FastCGI application {why} (protocolStatus {protocol})"),
            ));
        }
        if self.head.is_empty() {
            return self.finish(Verdict::Down(
                Reason::Invalid,
                "the FastCGI application ended the request without a response".into(),
            ));
        }
        // A head without the empty line that ends it: all of it is head.
        self.judge_head()
    }
}

/// Where the CGI head ends (after its empty line), if it does.
fn head_end(h: &[u8]) -> Option<usize> {
    let crlf = h.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = h.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The CGI head's status: its `Status` header's three digits, else 302
/// with a `Location` header, else 200.
fn cgi_status(head: &[u8]) -> u16 {
    let end = head_end(head).unwrap_or(head.len());
    let mut location = false;
    for line in head[..end].split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let value: &[u8] = {
            let start = value
                .iter()
                .position(|b| !b.is_ascii_whitespace())
                .unwrap_or(value.len());
            &value[start..]
        };
        if name.eq_ignore_ascii_case(b"status") {
            if let [a @ b'1'..=b'5', b @ b'0'..=b'9', c @ b'0'..=b'9', ..] = value {
                return u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0');
            }
            // A malformed Status is no accepted status.
            return 0;
        }
        location |= name.eq_ignore_ascii_case(b"location");
    }
    if location {
        302
    } else {
        200
    }
}

impl Answer for Response {
    fn feed(&mut self, mut bytes: &[u8]) -> Verdict {
        if let Some(v) = &self.done {
            return v.clone();
        }
        while !bytes.is_empty() {
            match self.at {
                At::Header(n) => {
                    let take = (8 - n).min(bytes.len());
                    self.hdr[n..n + take].copy_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if n + take < 8 {
                        self.at = At::Header(n + take);
                        continue;
                    }
                    let h = self.hdr;
                    let id = u16::from(h[2]) << 8 | u16::from(h[3]);
                    if h[0] != VERSION || (id != ID && id != 0) {
                        return self.finish(Verdict::Down(
                            Reason::Invalid,
                            format!("not a FastCGI record (version {}, request id {id})", h[0]),
                        ));
                    }
                    let left = usize::from(h[4]) << 8 | usize::from(h[5]);
                    self.at = At::Content {
                        kind: h[1],
                        left,
                        pad: usize::from(h[6]),
                    };
                    self.end.clear();
                }
                At::Content { kind, left, pad } => {
                    let take = left.min(bytes.len());
                    let (now, rest) = bytes.split_at(take);
                    bytes = rest;
                    match kind {
                        STDOUT => {
                            if let Some(v) = self.stdout(now) {
                                return v;
                            }
                        }
                        END_REQUEST => self
                            .end
                            .extend_from_slice(&now[..now.len().min(8 - self.end.len().min(8))]),
                        // STDERR and management records: not a verdict.
                        _ => {}
                    }
                    let left = left - take;
                    if left > 0 {
                        self.at = At::Content { kind, left, pad };
                        continue;
                    }
                    if kind == END_REQUEST {
                        return self.ended();
                    }
                    self.at = if pad > 0 {
                        At::Padding(pad)
                    } else {
                        At::Header(0)
                    };
                }
                At::Padding(left) => {
                    let take = left.min(bytes.len());
                    bytes = &bytes[take..];
                    self.at = if left > take {
                        At::Padding(left - take)
                    } else {
                        At::Header(0)
                    };
                }
            }
        }
        // A record that ends exactly here.
        if self.at
            == (At::Content {
                kind: END_REQUEST,
                left: 0,
                pad: 0,
            })
        {
            return self.ended();
        }
        Verdict::NeedMore
    }

    fn eof(&mut self) -> Verdict {
        if let Some(v) = &self.done {
            return v.clone();
        }
        Verdict::Down(
            Reason::Closed,
            "the FastCGI application closed the connection before its response".into(),
        )
    }
}

#[cfg(test)]
mod tests;
