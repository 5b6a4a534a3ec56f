//! gRPC health checks (`check ... type=grpc|grpcs`): the
//! grpc.health.v1.Health/Check request and the verdict on its response,
//! over the HTTP/2 client of [`crate::h2`].
//!
//! The engine opens a stream with [`request_headers`] and
//! [`request_body`], and once the stream is closed hands its
//! [`Response`] to [`verdict`]. A round passes when `:status` is 200,
//! `grpc-status` is 0 and the HealthCheckResponse says SERVING, or when
//! `grpc-status` is one of the extra codes of `check_grpc_status`.
//!
//! The response needs `max_body_bytes` of at least
//! `5 + `[`proto::MAX_MESSAGE`] to be judged whatever the server adds
//! to its message; a body cut short is `invalid`.

pub mod proto;

use crate::h2::{Field, Response};
use crate::reason::Reason;

pub use proto::{
    decode_health_response, request_body, MessageError, MessageReader, ProtoError, ServingStatus,
    MAX_MESSAGE,
};

/// The method's path.
pub const PATH: &str = "/grpc.health.v1.Health/Check";
/// The request's content type.
pub const CONTENT_TYPE: &str = "application/grpc";
/// The most bytes of a decoded `grpc-message` kept for the log.
pub const MAX_GRPC_MESSAGE: usize = 256;

/// The status codes' names (gRPC's `statuscodes.md`), index = code.
pub const STATUS_NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// A status code's name, `None` past 16.
pub fn status_name(code: u32) -> Option<&'static str> {
    STATUS_NAMES.get(code as usize).copied()
}

/// The request's header list:
///
/// ```text
/// :method       POST
/// :scheme       http | https
/// :path         /grpc.health.v1.Health/Check
/// :authority    <authority>
/// content-type  application/grpc
/// te            trailers
/// user-agent    <user_agent>
/// grpc-timeout  <timeout_value(ms)>     (when a timeout is given)
/// ```
pub fn request_headers(
    https: bool,
    authority: &[u8],
    user_agent: &[u8],
    timeout_ms: Option<u64>,
) -> Vec<Field> {
    let f = |n: &str, v: &[u8]| (n.as_bytes().to_vec(), v.to_vec());
    let scheme: &[u8] = if https { b"https" } else { b"http" };
    let mut h = vec![
        f(":method", b"POST"),
        f(":scheme", scheme),
        f(":path", PATH.as_bytes()),
        f(":authority", authority),
        f("content-type", CONTENT_TYPE.as_bytes()),
        f("te", b"trailers"),
        f("user-agent", user_agent),
    ];
    if let Some(ms) = timeout_ms {
        h.push(f("grpc-timeout", timeout_value(ms).as_bytes()));
    }
    h
}

/// A `grpc-timeout` value: at most 8 digits and a unit. Milliseconds
/// (`4500m`) while they fit, else whole seconds, minutes or hours rounded
/// up (the deadline is never shorter than asked), at most `99999999H`.
/// 0 is sent as `1m`: the value must be positive.
pub fn timeout_value(ms: u64) -> String {
    const MAX: u64 = 99_999_999;
    let ms = ms.max(1);
    if ms <= MAX {
        return format!("{ms}m");
    }
    let mut v = ms.div_ceil(1000);
    for unit in ["S", "M"] {
        if v <= MAX {
            return format!("{v}{unit}");
        }
        v = v.div_ceil(60);
    }
    format!("{}H", v.min(MAX))
}

/// A `grpc-status` value: decimal digits only, at most `u32::MAX`.
pub fn parse_grpc_status(v: &[u8]) -> Option<u32> {
    if v.is_empty() || v.len() > 10 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    v.iter().try_fold(0u32, |n, &d| {
        n.checked_mul(10)?.checked_add(u32::from(d - b'0'))
    })
}

/// A `grpc-message` for the log: percent-decoded (`%XX`; a `%` not
/// followed by two hex digits is kept as it is), at most `max` decoded
/// bytes, then made printable for one log line ([`log_safe`]).
pub fn decode_grpc_message(v: &[u8], max: usize) -> String {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(v.len().min(max));
    let mut i = 0;
    while i < v.len() && out.len() < max {
        let b = v[i];
        if b == b'%' {
            if let (Some(h), Some(l)) = (
                v.get(i + 1).copied().and_then(hex),
                v.get(i + 2).copied().and_then(hex),
            ) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(b);
        i += 1;
    }
    log_safe(&out)
}

/// Bytes from the server made safe for one log line: UTF-8 kept, but
/// invalid UTF-8, control characters (C0, DEL and C1) and the Unicode
/// line and paragraph separators written as `\xHH` (their UTF-8 bytes).
pub fn log_safe(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
                let mut buf = [0; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    let _ = write!(out, "\\x{b:02x}");
                }
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// What [`verdict`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Pass, or the failure's reason ([`Reason::Status`],
    /// [`Reason::Invalid`] or [`Reason::Protocol`]) and a detail for the
    /// log.
    pub result: Result<(), (Reason, String)>,
    /// The `grpc-status` seen, valid or not judged (the status page's
    /// `grpc_status`).
    pub grpc_status: Option<u32>,
    /// The HealthCheckResponse's status, when one was decoded.
    pub serving: Option<ServingStatus>,
    /// The decoded `grpc-message`, when there was one.
    pub message: Option<String>,
}

/// Judges a closed stream's response. `extra_pass` are the codes of
/// `check_grpc_status` that pass as they are. In this order:
///
/// 1. not complete: `protocol`, `stream reset (CODE)` or `stream refused
///    (GOAWAY)`; `invalid`, `response incomplete`;
/// 2. `:status` not 200: `invalid`, `HTTP 503` (a gRPC server answers
///    200 even for errors, so another status is a proxy or not gRPC);
/// 3. `grpc-status` from the trailers, or from the head when no trailers
///    came (a trailers-only response); none: `invalid`, `no grpc-status`,
///    with the content type when it is not gRPC's, e.g. `no grpc-status
///    (content-type text/html)`; not a number: `invalid`;
/// 4. `grpc-status` in `extra_pass`: pass;
/// 5. `grpc-status` not 0: `status`, `grpc-status 14 (UNAVAILABLE)`;
/// 6. a content type other than `application/grpc[+...|;...]`:
///    `invalid`;
/// 7. the body: exactly one message, not compressed, at most
///    [`MAX_MESSAGE`] bytes, all of it kept: else `invalid`;
/// 8. the HealthCheckResponse malformed: `invalid`; SERVING: pass;
///    anything else: `status`, `gRPC NOT_SERVING`, `gRPC SERVICE_UNKNOWN`,
///    `gRPC UNKNOWN`, `gRPC status 7`.
pub fn verdict(resp: &Response, extra_pass: &[u32]) -> Verdict {
    let mut v = Verdict {
        result: Ok(()),
        grpc_status: None,
        serving: None,
        message: None,
    };
    v.result = judge(resp, extra_pass, &mut v);
    v
}

fn invalid(detail: impl Into<String>) -> Result<(), (Reason, String)> {
    Err((Reason::Invalid, detail.into()))
}

fn status(detail: String) -> Result<(), (Reason, String)> {
    Err((Reason::Status, detail))
}

/// A header value's printable form, at most 64 bytes of it.
fn shown(v: &[u8]) -> String {
    log_safe(&v[..v.len().min(64)])
}

fn is_grpc_type(ct: &[u8]) -> bool {
    let base = b"application/grpc";
    ct.len() >= base.len()
        && ct[..base.len()].eq_ignore_ascii_case(base)
        && matches!(ct.get(base.len()), None | Some(b'+' | b';'))
}

fn judge(resp: &Response, extra_pass: &[u32], v: &mut Verdict) -> Result<(), (Reason, String)> {
    if !resp.complete() {
        if let Some(c) = resp.reset {
            return Err((
                Reason::Protocol,
                format!("stream reset ({})", crate::h2::code::name(c)),
            ));
        }
        if resp.refused {
            return Err((Reason::Protocol, "stream refused (GOAWAY)".into()));
        }
        return invalid("response incomplete");
    }
    match resp.status {
        Some(200) => {}
        Some(s) => return invalid(format!("HTTP {s}")),
        None => return invalid("no response head"),
    }
    let from_head = || {
        (!resp.has_trailers)
            .then(|| resp.header(b"grpc-message"))
            .flatten()
    };
    if let Some(m) = resp.trailer(b"grpc-message").or_else(from_head) {
        v.message = Some(decode_grpc_message(m, MAX_GRPC_MESSAGE));
    }
    let ct = resp.header(b"content-type");
    let raw = match resp.trailer(b"grpc-status") {
        Some(s) => Some(s),
        None if !resp.has_trailers => resp.header(b"grpc-status"),
        None => None,
    };
    let Some(raw) = raw else {
        return invalid(match ct {
            Some(t) if is_grpc_type(t) => "no grpc-status".to_string(),
            Some(t) => format!("no grpc-status (content-type {})", shown(t)),
            None => "no grpc-status (no content-type)".to_string(),
        });
    };
    let Some(code) = parse_grpc_status(raw) else {
        return invalid(format!("invalid grpc-status \"{}\"", shown(raw)));
    };
    v.grpc_status = Some(code);
    if extra_pass.contains(&code) {
        return Ok(());
    }
    if code != 0 {
        return status(match status_name(code) {
            Some(n) => format!("grpc-status {code} ({n})"),
            None => format!("grpc-status {code}"),
        });
    }
    match ct {
        Some(t) if is_grpc_type(t) => {}
        Some(t) => return invalid(format!("content-type {}", shown(t))),
        None => return invalid("no content-type"),
    }
    if resp.body_truncated() {
        return invalid(format!("body over {} bytes", resp.body.len()));
    }
    let mut reader = MessageReader::new(MAX_MESSAGE);
    if let Err(e) = reader.feed(&resp.body).and_then(|()| reader.finish()) {
        return invalid(e.to_string());
    }
    let msg = match (reader.messages(), reader.first()) {
        (1, Some(m)) => m,
        (0, _) => return invalid("no message"),
        (n, _) => return invalid(format!("{n} messages")),
    };
    let serving = match decode_health_response(msg) {
        Ok(s) => s,
        Err(e) => return invalid(format!("malformed HealthCheckResponse: {e}")),
    };
    v.serving = Some(serving);
    match serving {
        ServingStatus::Serving => Ok(()),
        ServingStatus::Other(n) => status(format!("gRPC status {n}")),
        s => status(format!("gRPC {}", s.name().unwrap_or("UNKNOWN"))),
    }
}

#[cfg(test)]
mod tests;
