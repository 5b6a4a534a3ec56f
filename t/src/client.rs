//! Minimal clients: HTTP/1.0 requests and stream (TCP/UDP) round trips to
//! `127.0.0.1`, every step under a timeout.

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
    /// The body, read until the server closed the connection.
    pub body: Vec<u8>,
}

impl Response {
    /// First header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

fn connect(port: u16) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&loopback(port), CONNECT_TIMEOUT)?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(s)
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
    let mut s = connect(port)?;
    let mut req = format!("{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_response(&raw, method == "HEAD")
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

fn parse_response(raw: &[u8], head_only: bool) -> io::Result<Response> {
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| {
            invalid(format!(
                "no end of headers in {:?}",
                String::from_utf8_lossy(raw)
            ))
        })?;
    let head = std::str::from_utf8(&raw[..head_end])
        .map_err(|e| invalid(format!("header not UTF-8: {e}")))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid(format!("bad status line {status_line:?}")))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let body = if head_only {
        Vec::new()
    } else {
        raw[head_end + 4..].to_vec()
    };
    Ok(Response {
        status,
        headers,
        body,
    })
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
            false,
        )
        .unwrap();
        assert_eq!(r.status, 404);
        assert_eq!(r.header("content-type"), Some("text/plain"));
        assert_eq!(r.header("x"), Some("a:b"));
        assert_eq!(r.text(), "nope");
        assert!(parse_response(b"garbage", false).is_err());
    }
}
