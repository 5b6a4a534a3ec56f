//! The request an http check sends when there is no `check_http_send`:
//! built from `check_http_request` and `check_http_header` and the server
//! line's host.

/// The `User-Agent` of the built request.
pub const USER_AGENT: &str = concat!("nginx-healthcheck/", env!("CARGO_PKG_VERSION"));

/// What `check_http_request` and `check_http_header` configure (the
/// values their parsers in [`crate::conf`] validated).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRequest {
    /// An uppercase method (default `GET`).
    pub method: Vec<u8>,
    /// The request target, starting with `/` (default `/`).
    pub uri: Vec<u8>,
    /// The `check_http_header` lines, one per name (see
    /// [`HttpRequest::set_header`]), in the order first given.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Default for HttpRequest {
    /// `GET /` without extra headers.
    fn default() -> HttpRequest {
        HttpRequest {
            method: b"GET".to_vec(),
            uri: b"/".to_vec(),
            headers: Vec::new(),
        }
    }
}

impl HttpRequest {
    /// Adds a header, or replaces the value (and the spelling of the name)
    /// of the one of the same name, ignoring ASCII case, in its place: a
    /// later `check_http_header` of a name wins.
    pub fn set_header(&mut self, name: Vec<u8>, value: Vec<u8>) {
        match self
            .headers
            .iter_mut()
            .find(|(n, _)| n.eq_ignore_ascii_case(&name))
        {
            Some(h) => *h = (name, value),
            None => self.headers.push((name, value)),
        }
    }
}

/// The headers every built request has, in this order; a
/// `check_http_header` of one of these names replaces it in place.
const DEFAULT_NAMES: [&[u8]; 4] = [b"Host", b"User-Agent", b"Accept", b"Connection"];

/// The request:
///
/// ```text
/// METHOD URI HTTP/1.1
/// Host: <host>[:<port>]
/// User-Agent: nginx-healthcheck/<version>
/// Accept: */*
/// Connection: close | keep-alive
/// <check_http_header lines>
///
/// ```
///
/// every line ended by CRLF. `host` is the server line's host as written
/// (see [`host_of_server`]); one that contains `:` and is not in brackets
/// (an IPv6 literal) is put in brackets. The port is left out when it
/// equals `default_port` (80 for http). `Connection` says `keep-alive` when
/// `keep_alive` (the check keeps its connection), else `close`.
///
/// A header of `req.headers` named like one of the four defaults (ASCII
/// case ignored) replaces it in its place, with its own spelling and value
/// (the last one when `headers` names it more than once); the others
/// follow, in order. So the request has exactly one `Host` line.
///
/// The bytes are not checked again: with values the parsers of
/// [`crate::conf`] accepted, and a host from a server line, no line holds a
/// CR or LF of its own.
pub fn build_request(
    req: &HttpRequest,
    host: &[u8],
    port: u16,
    default_port: u16,
    keep_alive: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + req.uri.len());
    let line = |out: &mut Vec<u8>, name: &[u8], value: &[u8]| {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    let given = |name: &[u8]| {
        req.headers
            .iter()
            .rev()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
    };

    out.extend_from_slice(&req.method);
    out.push(b' ');
    out.extend_from_slice(&req.uri);
    out.extend_from_slice(b" HTTP/1.1\r\n");

    for name in DEFAULT_NAMES {
        if let Some((n, v)) = given(name) {
            line(&mut out, n, v);
            continue;
        }
        let value = match name {
            b"Host" => host_value(host, port, default_port),
            b"User-Agent" => USER_AGENT.as_bytes().to_vec(),
            b"Accept" => b"*/*".to_vec(),
            _ if keep_alive => b"keep-alive".to_vec(),
            _ => b"close".to_vec(),
        };
        line(&mut out, name, &value);
    }
    for (n, v) in &req.headers {
        if !DEFAULT_NAMES.iter().any(|d| d.eq_ignore_ascii_case(n)) {
            line(&mut out, n, v);
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// `host[:port]`, an unbracketed IPv6 literal in brackets (also the
/// `:authority` of HTTP/2 requests).
pub fn host_value(host: &[u8], port: u16, default_port: u16) -> Vec<u8> {
    let mut v = Vec::with_capacity(host.len() + 8);
    if host.contains(&b':') && !host.starts_with(b"[") {
        v.push(b'[');
        v.extend_from_slice(host);
        v.push(b']');
    } else {
        v.extend_from_slice(host);
    }
    if port != default_port {
        v.extend_from_slice(format!(":{port}").as_bytes());
    }
    v
}

/// Splits the address of a server line, as written, into the host to
/// send in `Host` and its port, if it names one:
///
/// - `name:port`, `1.2.3.4:port` -> (`name`, Some(port));
/// - `[v6]:port` -> (`[v6]`, Some(port)); `[v6]` -> (`[v6]`, None);
/// - a bare name, or an IPv6 literal without brackets (`::1`) -> (it, None);
/// - `unix:/path` (no host) -> (`localhost`, None), as is an empty name.
///
/// A port that is not a decimal number from 1 to 65535 (nginx rejects such
/// server lines) is dropped: the host alone is returned. Leading zeros are
/// read as nginx reads them (`:080` is 80).
pub fn host_of_server(server_line_name: &[u8]) -> (&[u8], Option<u16>) {
    let name = server_line_name;
    if name.is_empty() || name.starts_with(b"unix:") {
        return (b"localhost", None);
    }
    if name.starts_with(b"[") {
        return match name.iter().position(|&b| b == b']') {
            Some(close) => {
                let (host, rest) = name.split_at(close + 1);
                (host, rest.strip_prefix(b":").and_then(port_number))
            }
            None => (name, None),
        };
    }
    let mut colons = name.iter().enumerate().filter(|&(_, &b)| b == b':');
    match (colons.next(), colons.next()) {
        (Some((at, _)), None) => (&name[..at], port_number(&name[at + 1..])),
        _ => (name, None),
    }
}

/// A decimal port, 1 to 65535, as nginx reads it (`ngx_atoi`: digits
/// only, leading zeros allowed).
fn port_number(s: &[u8]) -> Option<u16> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter()
        .try_fold(0u16, |n, &d| {
            n.checked_mul(10)?.checked_add(u16::from(d - b'0'))
        })
        .filter(|&p| p != 0)
}

#[cfg(test)]
mod tests;
