//! The directives of `check ... type=http` (upstream context):
//! `check_http_send`, `check_http_expect_alive`, `check_http_request`,
//! `check_http_header`, and `check_buffer_size` (the response buffer of
//! http checks and of `expect` tests).
//!
//! Each function parses one directive's arguments (after its name); the
//! rules across directives are [`super::finish_context`]'s.

use super::escape::unescape;
use super::time::{parse_size, NumError};
use super::{printable, ConfError};

/// Smallest `check_buffer_size`, in bytes (1k).
pub const BUFFER_SIZE_MIN: usize = 1 << 10;
/// Largest `check_buffer_size`, in bytes (1m).
pub const BUFFER_SIZE_MAX: usize = 1 << 20;
/// `check_buffer_size` when it is not given, in bytes (16k).
pub const BUFFER_SIZE_DEFAULT: usize = 16 << 10;

/// The warning of a raw HTTP/1.1 request without `Host`.
pub const HOST_WARNING: &str =
    "check_http_send request is HTTP/1.1 without a Host header: backends will answer 400";

/// `invalid value "<arg>" in "<directive>" directive: <reason>`
pub(super) fn invalid_value(directive: &str, arg: &[u8], reason: &str) -> ConfError {
    ConfError(format!(
        "invalid value \"{}\" in \"{directive}\" directive: {reason}",
        printable(arg)
    ))
}

pub(super) fn invalid_count(directive: &str) -> ConfError {
    ConfError(format!(
        "invalid number of arguments in \"{directive}\" directive"
    ))
}

/// Whether `b` may appear in an HTTP token (RFC 9110 `tchar`): the
/// response parser's table.
pub(crate) use crate::http::response::is_tchar;

/// Whether `s` is an HTTP token (a method or a header name).
pub(crate) fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

/// How an error describes a token.
pub(crate) const TOKEN_SYNTAX: &str = "letters, digits and !#$%&'*+-.^_`|~";

/// A parsed `check_http_send`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpSend {
    /// The request, sent as it is (`\xHH` decoded).
    pub request: Vec<u8>,
    /// [`HOST_WARNING`] for an HTTP/1.1 request without a `Host` header
    /// line, or the warning of a head that never ends: a `[warn]`, not an
    /// error.
    pub warning: Option<ConfError>,
    /// The warning of an nginx variable in the request: it is sent as
    /// written (nor do the C modules expand it).
    pub variable: Option<ConfError>,
}

/// `check_http_send "GET / HTTP/1.0\r\n\r\n";`: the raw request, with
/// `\xHH` decoded by [`unescape`] (nginx has decoded `\r`, `\n`, `\t`,
/// `\"`, `\'` and `\\`). Not empty.
pub fn parse_http_send(arg: &[u8]) -> Result<HttpSend, ConfError> {
    const D: &str = "check_http_send";
    let request = unescape(arg).map_err(|reason| invalid_value(D, arg, &reason))?;
    if request.is_empty() {
        return Err(invalid_value(D, arg, "the request must not be empty"));
    }
    let warning = match () {
        () if looks_http(&request) && !ends_head(&request) => {
            Some(ConfError(unterminated_warning(&request)))
        }
        () if is_http11(&request) && !has_host(&request) => Some(ConfError(HOST_WARNING.into())),
        () => None,
    };
    let variable = variable_in(&request).map(|v| {
        ConfError(format!(
            "check_http_send request holds \"${v}\": nginx variables are not expanded in it; \
             it is sent as written"
        ))
    });
    Ok(HttpSend {
        request,
        warning,
        variable,
    })
}

/// The name of the first nginx variable (`$name`, `${name}`) in `bytes`.
fn variable_in(bytes: &[u8]) -> Option<String> {
    bytes.windows(2).enumerate().find_map(|(i, w)| {
        let starts = w[0] == b'$' && (w[1].is_ascii_alphabetic() || w[1] == b'_' || w[1] == b'{');
        starts.then(|| {
            let rest = &bytes[i + 1..];
            let rest = rest.strip_prefix(b"{").unwrap_or(rest);
            let name: Vec<u8> = rest
                .iter()
                .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
                .copied()
                .collect();
            String::from_utf8_lossy(&name).into_owned()
        })
    })
}

/// Whether the bytes start as an HTTP/1 request line does (`GET /x
/// HTTP/1.0`, with or without its line end).
fn looks_http(request: &[u8]) -> bool {
    let line = request
        .split(|&b| b == b'\n')
        .next()
        .unwrap_or_default()
        .strip_suffix(b"\r")
        .unwrap_or_else(|| request.split(|&b| b == b'\n').next().unwrap_or_default());
    let parts: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    matches!(parts[..], [method, target, version]
        if is_token(method) && target.starts_with(b"/") && version.starts_with(b"HTTP/1."))
}

/// Whether the request's head ends (an empty line).
fn ends_head(request: &[u8]) -> bool {
    request.windows(4).any(|w| w == b"\r\n\r\n") || request.windows(2).any(|w| w == b"\n\n")
}

/// The warning of an HTTP request whose head never ends: the backend
/// waits for the rest and every round times out.
fn unterminated_warning(request: &[u8]) -> String {
    let mut w = String::from(
        "check_http_send request has no empty line after its head: the backend waits for the \
         rest and every round times out; end it with \\r\\n\\r\\n",
    );
    let literal = request.windows(2).any(|p| p == b"\\r" || p == b"\\n");
    if literal {
        w.push_str(" (the request holds a backslash and an r or n: write \\r, not \\\\r)");
    }
    w
}

/// The lines of a request up to (without) the empty line that ends its
/// head, each without its `\n` or `\r\n`.
fn head_lines(request: &[u8]) -> impl Iterator<Item = &[u8]> {
    request
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .take_while(|l| !l.is_empty())
}

/// Whether the first line is `METHOD SP target SP HTTP/1.1`.
fn is_http11(request: &[u8]) -> bool {
    let Some(line) = head_lines(request).next() else {
        return false;
    };
    let parts: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    matches!(parts[..], [method, target, b"HTTP/1.1"] if is_token(method) && !target.is_empty())
}

/// Whether a header line after the request line is `Host:` (any case).
fn has_host(request: &[u8]) -> bool {
    head_lines(request)
        .skip(1)
        .any(|l| l.len() >= 5 && l[..4].eq_ignore_ascii_case(b"host") && l[4] == b':')
}

/// The status classes `check_http_expect_alive` accepts: a set of
/// `http_1xx` .. `http_5xx`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StatusClasses(u8);

impl StatusClasses {
    /// No class.
    pub const NONE: StatusClasses = StatusClasses(0);
    /// The default: `http_2xx http_3xx`.
    pub const DEFAULT: StatusClasses = StatusClasses::NONE.with(2).with(3);

    /// This set and class `class` (1 to 5; other values change nothing).
    pub const fn with(self, class: u8) -> StatusClasses {
        if class >= 1 && class <= 5 {
            StatusClasses(self.0 | 1 << class)
        } else {
            self
        }
    }

    /// Whether class `class` (1 to 5) is in the set.
    pub const fn has(self, class: u8) -> bool {
        class >= 1 && class <= 5 && self.0 & (1 << class) != 0
    }

    /// Whether `status` (100 to 599) is of a class in the set; any other
    /// status is not.
    pub const fn accepts(self, status: u16) -> bool {
        status >= 100 && status <= 599 && self.has((status / 100) as u8)
    }

    /// The status ranges of the set's classes (`http_2xx` is 200-299), as a
    /// `check_match` `status` test lists them.
    pub fn ranges(self) -> Vec<(u16, u16)> {
        (1..=5u8)
            .filter(|&c| self.has(c))
            .map(|c| (u16::from(c) * 100, u16::from(c) * 100 + 99))
            .collect()
    }

    /// The classes of both sets (a repeated `check_http_expect_alive`
    /// adds to the earlier, as yaoweibin's module does).
    pub const fn union(self, other: StatusClasses) -> StatusClasses {
        StatusClasses(self.0 | other.0)
    }

    /// The set as a bit mask: bit `n` for class `n`.
    pub const fn bits(self) -> u8 {
        self.0
    }
}

impl Default for StatusClasses {
    fn default() -> StatusClasses {
        StatusClasses::DEFAULT
    }
}

/// `check_http_expect_alive http_2xx http_3xx;`: one or more classes
/// (`http_1xx` .. `http_5xx`), compared ignoring case as the C modules do
/// (`HTTP_2XX`); a class named twice is the same class.
pub fn parse_http_expect_alive(args: &[&[u8]]) -> Result<StatusClasses, ConfError> {
    const D: &str = "check_http_expect_alive";
    if args.is_empty() {
        return Err(invalid_count(D));
    }
    let mut set = StatusClasses::NONE;
    for &arg in args {
        let lower = arg.to_ascii_lowercase();
        let class = match lower.as_slice() {
            [b'h', b't', b't', b'p', b'_', c @ b'1'..=b'5', b'x', b'x'] => c - b'0',
            b"|" | b"," => {
                return Err(invalid_value(
                    D,
                    arg,
                    "must be http_1xx, http_2xx, http_3xx, http_4xx or http_5xx, separated by \
                     spaces",
                ))
            }
            _ => {
                return Err(invalid_value(
                    D,
                    arg,
                    "must be http_1xx, http_2xx, http_3xx, http_4xx or http_5xx",
                ))
            }
        };
        set = set.with(class);
    }
    Ok(set)
}

/// `check_http_request [METHOD] URI;`: returns `(method, uri)`; the
/// method is `GET` when omitted. METHOD is uppercase letters; URI starts
/// with `/` and is printable ASCII without spaces (percent-encode the
/// rest).
pub fn parse_http_request(args: &[&[u8]]) -> Result<(Vec<u8>, Vec<u8>), ConfError> {
    const D: &str = "check_http_request";
    let (method, uri) = match *args {
        [uri] => (&b"GET"[..], uri),
        [method, uri] => (method, uri),
        _ => return Err(invalid_count(D)),
    };
    if method.is_empty() || !method.iter().all(u8::is_ascii_uppercase) {
        return Err(invalid_value(
            D,
            method,
            "the method must be uppercase letters (GET, HEAD)",
        ));
    }
    if uri.first() != Some(&b'/') || !uri.iter().all(|&b| b.is_ascii_graphic()) {
        return Err(invalid_value(
            D,
            uri,
            "the URI must start with \"/\" and be printable ASCII without spaces \
             (percent-encode the rest)",
        ));
    }
    Ok((method.to_vec(), uri.to_vec()))
}

/// `check_http_header NAME VALUE;`: returns `(name, value)`. NAME is an
/// HTTP token; VALUE has no CR, LF or NUL (it may be empty).
pub fn parse_http_header(args: &[&[u8]]) -> Result<(Vec<u8>, Vec<u8>), ConfError> {
    const D: &str = "check_http_header";
    let [name, value] = *args else {
        return Err(invalid_count(D));
    };
    if !is_token(name) {
        return Err(invalid_value(
            D,
            name,
            &format!("a header name is a token ({TOKEN_SYNTAX})"),
        ));
    }
    if value.iter().any(|&b| matches!(b, b'\r' | b'\n' | 0)) {
        return Err(invalid_value(
            D,
            value,
            "a header value must not contain CR, LF or NUL",
        ));
    }
    Ok((name.to_vec(), value.to_vec()))
}

/// `check_buffer_size SIZE;`: nginx size syntax, from
/// [`BUFFER_SIZE_MIN`] to [`BUFFER_SIZE_MAX`].
pub fn parse_buffer_size(arg: &[u8]) -> Result<usize, ConfError> {
    const D: &str = "check_buffer_size";
    match parse_size(arg) {
        Ok(n) if (BUFFER_SIZE_MIN as u64..=BUFFER_SIZE_MAX as u64).contains(&n) => {
            Ok(usize::try_from(n).unwrap_or(BUFFER_SIZE_MAX))
        }
        Ok(_) | Err(NumError::Overflow) => Err(invalid_value(D, arg, "size must be from 1k to 1m")),
        Err(NumError::Malformed) => Err(invalid_value(
            D,
            arg,
            "size must be a number of bytes, optionally with a unit k or m (16k)",
        )),
    }
}

#[cfg(test)]
mod tests;
