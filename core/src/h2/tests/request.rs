//! The header list of an http check's request over HTTP/2.

use super::fields;
use crate::h2::request::{http_request_headers, request_headers};
use crate::http::request::{HttpRequest, USER_AGENT};

#[test]
fn defaults() {
    let req = HttpRequest::default();
    let h = http_request_headers(&req, false, b"example.com", 8080, 80);
    assert_eq!(
        h,
        fields(&[
            (":method", "GET"),
            (":scheme", "http"),
            (":authority", "example.com:8080"),
            (":path", "/"),
            ("user-agent", USER_AGENT),
            ("accept", "*/*"),
        ])
    );
    let h = http_request_headers(&req, true, b"::1", 443, 443);
    assert_eq!(h[1], fields(&[(":scheme", "https")])[0]);
    assert_eq!(h[2], fields(&[(":authority", "[::1]")])[0]);
}

#[test]
fn extra_headers_are_mapped() {
    let extra = fields(&[
        ("Host", "virtual.example"),
        ("X-Custom", "Value"),
        ("Connection", "close"),
        ("Keep-Alive", "5"),
        ("Transfer-Encoding", "chunked"),
        ("Upgrade", "h2c"),
        ("Proxy-Connection", "x"),
        ("TE", "gzip"),
        ("User-Agent", "probe"),
        ("Accept", "text/html"),
    ]);
    let h = request_headers(b"HEAD", b"http", b"10.0.0.1", b"/health?x=1", &extra);
    assert_eq!(
        h,
        fields(&[
            (":method", "HEAD"),
            (":scheme", "http"),
            (":authority", "virtual.example"),
            (":path", "/health?x=1"),
            ("user-agent", "probe"),
            ("accept", "text/html"),
            ("x-custom", "Value"),
        ])
    );
    let h = request_headers(b"GET", b"http", b"a", b"/", &fields(&[("te", "Trailers")]));
    assert_eq!(h.last(), Some(&fields(&[("te", "trailers")])[0]));
    // Every list our encoder sends passes our own response field rules
    // but for the pseudo-headers: names are lowercase tokens.
    for (n, _) in &h[4..] {
        assert!(n.iter().all(|b| !b.is_ascii_uppercase()));
    }
}
