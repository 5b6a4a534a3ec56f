//! `check_log`'s lines (docs/operations.md, Event log): one per transition
//! of a peer or an upstream, as JSON or as text, and the directive's
//! arguments.
//!
//! A JSON line has exactly these keys, in this order: `time` (RFC 3339,
//! UTC, milliseconds), `upstream`, `upstream_type` (`http` or `stream`),
//! `name` and `server` (the peer's address and its `server` line; `null`
//! for an upstream's own event), `from` and `to` (the states, [`State`]),
//! `by` ([`By`]), `reason` and `detail` (`null` when there is none) and
//! `checks` (the peer's rounds so far, as the status page's `checks`;
//! `null` for an upstream's own event).

use crate::conf::ConfError;
use crate::status::json::string;
use crate::status::text::push_u64;

/// What made the transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    Check,
    Passive,
    Outlier,
    Admin,
    Resolve,
    FailOpen,
}

impl By {
    pub fn as_str(self) -> &'static str {
        match self {
            By::Check => "check",
            By::Passive => "passive",
            By::Outlier => "outlier",
            By::Admin => "admin",
            By::Resolve => "resolve",
            By::FailOpen => "fail-open",
        }
    }
}

/// A state on either side of a transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Up,
    Down,
    /// Kept out by an operator (admin `disable`).
    Disabled,
    /// A resolved address nginx does not have (before it is added, after
    /// it is removed).
    Absent,
    /// An upstream whose checks keep its down peers out.
    Enforced,
    /// An upstream that fails open (`check_fail_open`).
    FailOpen,
    /// `mandatory`: a new peer before its first round.
    Checking,
    /// Drained by an operator (admin `drain`).
    Draining,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Up => "up",
            State::Down => "down",
            State::Disabled => "disabled",
            State::Absent => "absent",
            State::Enforced => "enforced",
            State::FailOpen => "fail-open",
            State::Checking => "checking",
            State::Draining => "draining",
        }
    }

    /// `up` or `down`.
    pub fn health(up: bool) -> State {
        if up {
            State::Up
        } else {
            State::Down
        }
    }
}

/// One transition.
#[derive(Clone, Copy, Debug)]
pub struct Event<'a> {
    pub time_ms: u64,
    pub upstream: &'a [u8],
    /// `http` or `stream`.
    pub upstream_type: &'a str,
    /// The peer: its name and its `server` line (`None`: the upstream's
    /// own event).
    pub peer: Option<(&'a [u8], &'a [u8])>,
    pub from: State,
    pub to: State,
    pub by: By,
    pub reason: Option<&'a str>,
    pub detail: Option<&'a str>,
    pub checks: Option<u64>,
}

/// `check_log`'s format argument.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Json,
    Text,
}

/// Where `check_log` writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target<'a> {
    /// A file path as written (nginx joins a relative one to the prefix).
    File(&'a [u8]),
    /// `syslog:...` (nginx's syslog parameters parse the rest).
    Syslog,
}

/// `check_log PATH|syslog:... [json|text]`.
pub fn parse_directive<'a>(args: &[&'a [u8]]) -> Result<(Target<'a>, Format), ConfError> {
    let (target, format) = match args {
        [t] => (*t, None),
        [t, f] => (*t, Some(*f)),
        _ => {
            return Err(ConfError(
                "invalid number of arguments in \"check_log\" directive".into(),
            ))
        }
    };
    let format = match format {
        None | Some(b"json") => Format::Json,
        Some(b"text") => Format::Text,
        Some(other) => {
            return Err(ConfError(format!(
                "invalid format \"{}\" in \"check_log\" directive: write json or text",
                String::from_utf8_lossy(other)
            )))
        }
    };
    if target.is_empty() {
        return Err(ConfError(
            "invalid path \"\" in \"check_log\" directive: write a file path or syslog:server=ADDRESS"
                .into(),
        ));
    }
    if target.starts_with(b"syslog:") {
        return Ok((Target::Syslog, format));
    }
    if target == b"off" || target == b"stderr" {
        return Err(ConfError(format!(
            "invalid path \"{}\" in \"check_log\" directive: write a file path or \
             syslog:server=ADDRESS (leave the directive out for no event log)",
            String::from_utf8_lossy(target)
        )));
    }
    Ok((Target::File(target), format))
}

/// Append `ev` as one line (with its `\n`) in `format`.
pub fn line(ev: &Event, format: Format, out: &mut Vec<u8>) {
    match format {
        Format::Json => json(ev, out),
        Format::Text => text(ev, out),
    }
    out.push(b'\n');
}

fn json(ev: &Event, out: &mut Vec<u8>) {
    let opt = |out: &mut Vec<u8>, s: Option<&[u8]>| match s {
        Some(s) => string(out, s),
        None => out.extend_from_slice(b"null"),
    };
    out.extend_from_slice(b"{\"time\": \"");
    out.extend_from_slice(&rfc3339_ms(ev.time_ms));
    out.extend_from_slice(b"\", \"upstream\": ");
    string(out, ev.upstream);
    out.extend_from_slice(b", \"upstream_type\": ");
    string(out, ev.upstream_type.as_bytes());
    out.extend_from_slice(b", \"name\": ");
    opt(out, ev.peer.map(|p| p.0));
    out.extend_from_slice(b", \"server\": ");
    opt(out, ev.peer.map(|p| p.1));
    out.extend_from_slice(b", \"from\": \"");
    out.extend_from_slice(ev.from.as_str().as_bytes());
    out.extend_from_slice(b"\", \"to\": \"");
    out.extend_from_slice(ev.to.as_str().as_bytes());
    out.extend_from_slice(b"\", \"by\": \"");
    out.extend_from_slice(ev.by.as_str().as_bytes());
    out.extend_from_slice(b"\", \"reason\": ");
    opt(out, ev.reason.map(str::as_bytes));
    out.extend_from_slice(b", \"detail\": ");
    opt(out, ev.detail.map(str::as_bytes));
    out.extend_from_slice(b", \"checks\": ");
    match ev.checks {
        Some(n) => push_u64(out, n),
        None => out.extend_from_slice(b"null"),
    }
    out.push(b'}');
}

/// `TIME UPSTREAM_TYPE UPSTREAM [NAME (SERVER)] FROM -> TO by BY[: REASON[, DETAIL]] [(checks N)]`,
/// control bytes of the names as `\xHH`.
fn text(ev: &Event, out: &mut Vec<u8>) {
    out.extend_from_slice(&rfc3339_ms(ev.time_ms));
    out.push(b' ');
    out.extend_from_slice(ev.upstream_type.as_bytes());
    out.extend_from_slice(b" upstream ");
    plain(out, ev.upstream);
    if let Some((name, server)) = ev.peer {
        out.extend_from_slice(b" peer ");
        plain(out, name);
        out.extend_from_slice(b" (");
        plain(out, server);
        out.push(b')');
    }
    out.push(b' ');
    out.extend_from_slice(ev.from.as_str().as_bytes());
    out.extend_from_slice(b" -> ");
    out.extend_from_slice(ev.to.as_str().as_bytes());
    out.extend_from_slice(b" by ");
    out.extend_from_slice(ev.by.as_str().as_bytes());
    if let Some(r) = ev.reason {
        out.extend_from_slice(b": ");
        plain(out, r.as_bytes());
        if let Some(d) = ev.detail {
            out.extend_from_slice(b", ");
            plain(out, d.as_bytes());
        }
    } else if let Some(d) = ev.detail {
        out.extend_from_slice(b": ");
        plain(out, d.as_bytes());
    }
    if let Some(n) = ev.checks {
        out.extend_from_slice(b" (checks ");
        push_u64(out, n);
        out.push(b')');
    }
}

/// `s` with control bytes (a line's end above all) as `\xHH`.
fn plain(out: &mut Vec<u8>, s: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for &b in s {
        if b < 0x20 || b == 0x7f || b == b'\\' {
            out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 15)],
            ]);
        } else {
            out.push(b);
        }
    }
}

/// Unix ms as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339_ms(unix_ms: u64) -> [u8; 24] {
    let secs = unix_ms / 1000;
    let ms = unix_ms % 1000;
    let (y, mo, d) = civil_from_days((secs / 86_400) as i64);
    let tod = secs % 86_400;
    let (h, mi, s) = (tod / 3600, tod / 60 % 60, tod % 60);
    let mut out = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut v: u64| {
        for i in (0..width).rev() {
            out[at + i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, y.clamp(0, 9999) as u64);
    put(5, 2, mo);
    put(8, 2, d);
    put(11, 2, h);
    put(14, 2, mi);
    put(17, 2, s);
    put(20, 3, ms);
    out
}

/// The proleptic Gregorian date of a day count from 1970-01-01 (Howard
/// Hinnant's days-from-civil algorithm, inverted).
fn civil_from_days(z: i64) -> (i64, u64, u64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u64;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests;
