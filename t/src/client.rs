//! Minimal clients: HTTP requests and stream (TCP/UDP) round trips to
//! `127.0.0.1`, every step under a timeout.
//!
//! The HTTP side keeps the bytes nginx sent: a response to `HEAD` keeps
//! whatever followed its head (so a test can require that nothing did), a
//! request can come from another loopback source address
//! ([`connect_from`]), and [`read_response`] reads one response of a
//! keep-alive connection by its `Content-Length`.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

/// Budget for connecting.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Budget for each read or write.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// A parsed HTTP response.
#[derive(Clone, Debug)]
pub struct Response {
    /// Status code, e.g. 200.
    pub status: u16,
    /// Header fields in order, names as sent.
    pub headers: Vec<(String, String)>,
    /// Everything after the head: the body, read until the server closed
    /// the connection (or, from [`read_response`], `Content-Length` bytes).
    pub body: Vec<u8>,
}

impl Response {
    /// First header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers_named(name).first().copied()
    }

    /// The header named `name` (case-insensitive); panics if it is repeated.
    pub fn unique_header(&self, name: &str) -> Option<&str> {
        let all = self.headers_named(name);
        assert!(all.len() <= 1, "header {name} repeated: {:?}", self.headers);
        all.first().copied()
    }

    /// Every header named `name` (case-insensitive), in order.
    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// `Content-Length` (it must be unique); panics if it is not a number.
    pub fn content_length(&self) -> Option<usize> {
        self.unique_header("Content-Length").map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("bad Content-Length {v:?}"))
        })
    }

    /// The body as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body, which must be UTF-8 (panics with the bytes otherwise).
    pub fn utf8(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not UTF-8 ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

fn with_timeouts(s: TcpStream) -> io::Result<TcpStream> {
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(s)
}

/// A TCP connection to `127.0.0.1:port` with [`IO_TIMEOUT`] on reads and
/// writes.
pub fn connect(port: u16) -> io::Result<TcpStream> {
    with_timeouts(TcpStream::connect_timeout(
        &loopback(port),
        CONNECT_TIMEOUT,
    )?)
}

/// Like [`connect`], from the source address `src` (any 127.0.0.0/8
/// address works on Linux loopback).
pub fn connect_from(src: Ipv4Addr, port: u16) -> io::Result<TcpStream> {
    with_timeouts(crate::sys::connect_from(src, port)?)
}

/// `GET path` on `127.0.0.1:port`.
pub fn http_get(port: u16, path: &str) -> io::Result<Response> {
    http_request(port, "GET", path, &[], b"")
}

/// Any HTTP/1.0 request; `Host` and (for a non-empty body)
/// `Content-Length` are added. Reads the response until EOF.
pub fn http_request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<Response> {
    let mut req = format!("{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    exchange(connect(port)?, &bytes)
}

/// Send the raw request `req` on `s` and read the response until the
/// server closes the connection.
pub fn exchange(mut s: TcpStream, req: &[u8]) -> io::Result<Response> {
    s.write_all(req)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_response(&raw)
}

/// Read one response from a keep-alive connection: the head, then
/// `Content-Length` bytes of body. `buf` carries bytes read past it (the
/// start of the next response) from one call to the next.
pub fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<Response> {
    let mut chunk = [0u8; 65536];
    let end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(invalid(format!(
                "connection closed before a full response head: {:?}",
                String::from_utf8_lossy(buf)
            )));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let (status, headers) = parse_head(&buf[..end])?;
    let mut r = Response {
        status,
        headers,
        body: Vec::new(),
    };
    let len = r
        .content_length()
        .ok_or_else(|| invalid("keep-alive response without Content-Length".into()))?;
    while buf.len() < end + 4 + len {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(invalid("connection closed inside a response body".into()));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    r.body = buf[end + 4..end + 4 + len].to_vec();
    buf.drain(..end + 4 + len);
    Ok(r)
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Where `needle` first starts in `hay`.
pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Parse a whole response as read until EOF: status line, header lines
/// (each must be `name: value`), and everything after the head as the body.
pub fn parse_response(raw: &[u8]) -> io::Result<Response> {
    let head_end = find(raw, b"\r\n\r\n").ok_or_else(|| {
        invalid(format!(
            "no end of headers in {:?}",
            String::from_utf8_lossy(raw)
        ))
    })?;
    let (status, headers) = parse_head(&raw[..head_end])?;
    Ok(Response {
        status,
        headers,
        body: raw[head_end + 4..].to_vec(),
    })
}

fn parse_head(head: &[u8]) -> io::Result<(u16, Vec<(String, String)>)> {
    let head = std::str::from_utf8(head).map_err(|e| invalid(format!("header not UTF-8: {e}")))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid(format!("bad status line {status_line:?}")))?;
    let headers = lines
        .map(|l| {
            let (k, v) = l
                .split_once(':')
                .ok_or_else(|| invalid(format!("bad header line {l:?}")))?;
            Ok((k.trim().to_string(), v.trim().to_string()))
        })
        .collect::<io::Result<_>>()?;
    Ok((status, headers))
}

/// Connect to `127.0.0.1:port`, send `bytes`, read until the other side
/// closes. The write side stays open: nginx's stream proxy ends a session
/// on client EOF unless `proxy_half_close` is on.
pub fn stream_roundtrip(port: u16, bytes: &[u8]) -> io::Result<Vec<u8>> {
    let mut s = connect(port)?;
    s.write_all(bytes)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    Ok(out)
}

/// Send one datagram to `127.0.0.1:port` and wait for one reply.
pub fn udp_roundtrip(port: u16, bytes: &[u8]) -> io::Result<Vec<u8>> {
    let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.connect(loopback(port))?;
    s.send(bytes)?;
    let mut buf = vec![0u8; 65536];
    let n = s.recv(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_response() {
        let r = parse_response(
            b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nX: a:b\r\n\r\nnope",
        )
        .unwrap();
        assert_eq!(r.status, 404);
        assert_eq!(r.header("content-type"), Some("text/plain"));
        assert_eq!(r.header("x"), Some("a:b"));
        assert_eq!(r.text(), "nope");
        assert_eq!(r.utf8(), "nope");
        assert!(parse_response(b"garbage").is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n").is_err());
        let twice = parse_response(b"HTTP/1.1 200 OK\r\nA: 1\r\na: 2\r\n\r\n").unwrap();
        assert_eq!(twice.headers_named("A"), ["1", "2"]);
        assert!(std::panic::catch_unwind(|| twice.unique_header("a")).is_err());
    }
}
