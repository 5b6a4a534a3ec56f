//! The header list of an http check's request over HTTP/2
//! (`check_http_version 2`), from the same [`HttpRequest`] the HTTP/1.1
//! request is built from; the response is then judged by the same
//! verdict ([`crate::matcher::http_verdict`] over [`super::Response::head`]).

use super::response::{Field, CONNECTION_SPECIFIC};
use crate::http::request::{host_value, HttpRequest, USER_AGENT};

/// The request's fields, in this order:
///
/// ```text
/// :method    <method>
/// :scheme    <scheme>
/// :authority <authority>
/// :path      <path>
/// user-agent nginx-healthcheck/<version>
/// accept     */*
/// <extra fields>
/// ```
///
/// Extra field names are lowercased (HTTP/2 requires it) and then:
///
/// - `host` sets `:authority` (the last one wins) and is not sent;
/// - the connection-specific fields (`connection`, `keep-alive`,
///   `proxy-connection`, `transfer-encoding`, `upgrade`) are dropped;
/// - `te` is kept only as `te: trailers`, the one value HTTP/2 allows;
/// - `user-agent` and `accept` replace the default in its place (the last
///   one wins), as [`crate::http::request::build_request`] does;
/// - the others follow, in order.
pub fn request_headers(
    method: &[u8],
    scheme: &[u8],
    authority: &[u8],
    path: &[u8],
    extra: &[(Vec<u8>, Vec<u8>)],
) -> Vec<Field> {
    let lower = |n: &[u8]| n.to_ascii_lowercase();
    let last = |name: &[u8]| {
        extra
            .iter()
            .rev()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let mut out: Vec<Field> = Vec::with_capacity(6 + extra.len());
    out.push((b":method".to_vec(), method.to_vec()));
    out.push((b":scheme".to_vec(), scheme.to_vec()));
    let authority = last(b"host").unwrap_or_else(|| authority.to_vec());
    out.push((b":authority".to_vec(), authority));
    out.push((b":path".to_vec(), path.to_vec()));
    out.push((
        b"user-agent".to_vec(),
        last(b"user-agent").unwrap_or_else(|| USER_AGENT.as_bytes().to_vec()),
    ));
    out.push((
        b"accept".to_vec(),
        last(b"accept").unwrap_or_else(|| b"*/*".to_vec()),
    ));
    for (n, v) in extra {
        let n = lower(n);
        if matches!(n.as_slice(), b"host" | b"user-agent" | b"accept")
            || CONNECTION_SPECIFIC.contains(&n.as_slice())
        {
            continue;
        }
        if n == b"te" {
            if v.eq_ignore_ascii_case(b"trailers") {
                out.push((n, b"trailers".to_vec()));
            }
            continue;
        }
        out.push((n, v.clone()));
    }
    out
}

/// [`request_headers`] for an http check: `req`'s method, URI and
/// headers; scheme `https` or `http`; `:authority` the server line's host
/// and port as the HTTP/1.1 `Host` would have them (the port left out
/// when it is `default_port`; see [`crate::http::request::host_of_server`]).
pub fn http_request_headers(
    req: &HttpRequest,
    https: bool,
    host: &[u8],
    port: u16,
    default_port: u16,
) -> Vec<Field> {
    let scheme: &[u8] = if https { b"https" } else { b"http" };
    let authority = host_value(host, port, default_port);
    request_headers(&req.method, scheme, &authority, &req.uri, &req.headers)
}
