//! Tests of the built request and of the host of a server line.

use super::*;
use crate::conf::{parse_http_header, parse_http_request};
use proptest::prelude::*;

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

fn ua() -> String {
    format!(
        "User-Agent: nginx-healthcheck/{}\r\n",
        env!("CARGO_PKG_VERSION")
    )
}

#[test]
fn default_request() {
    let r = build_request(&HttpRequest::default(), b"127.0.0.1", 80, 80, false);
    assert_eq!(
        text(&r),
        format!(
            "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n{}Accept: */*\r\nConnection: close\r\n\r\n",
            ua()
        )
    );
    assert_eq!(
        USER_AGENT,
        format!("nginx-healthcheck/{}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn keep_alive_and_port() {
    let r = build_request(&HttpRequest::default(), b"backend.example", 8080, 80, true);
    assert_eq!(
        text(&r),
        format!(
            "GET / HTTP/1.1\r\nHost: backend.example:8080\r\n{}Accept: */*\r\n\
             Connection: keep-alive\r\n\r\n",
            ua()
        )
    );
    // 443 is the default of https; 80 is then written.
    let r = build_request(&HttpRequest::default(), b"a", 80, 443, false);
    assert!(text(&r).contains("\r\nHost: a:80\r\n"));
    let r = build_request(&HttpRequest::default(), b"a", 443, 443, false);
    assert!(text(&r).contains("\r\nHost: a\r\n"));
}

#[test]
fn ipv6_hosts_are_bracketed_once() {
    let host = |h: &[u8], port| {
        let r = text(&build_request(&HttpRequest::default(), h, port, 80, false));
        r.lines().nth(1).unwrap().to_string()
    };
    assert_eq!(host(b"::1", 80), "Host: [::1]");
    assert_eq!(host(b"::1", 8080), "Host: [::1]:8080");
    assert_eq!(host(b"[::1]", 80), "Host: [::1]");
    assert_eq!(host(b"[::1]", 81), "Host: [::1]:81");
    assert_eq!(host(b"fe80::1%eth0", 80), "Host: [fe80::1%eth0]");
    assert_eq!(host(b"10.0.0.1", 81), "Host: 10.0.0.1:81");
}

#[test]
fn method_uri_and_headers() {
    let mut req = HttpRequest::default();
    let (m, u) = parse_http_request(&[b"HEAD", b"/healthz?x=1"]).unwrap();
    (req.method, req.uri) = (m, u);
    for (n, v) in [
        (&b"X-Probe"[..], &b"1"[..]),
        (b"accept", b"application/json"),
        (b"X-Empty", b""),
        (b"x-probe", b"2"),
    ] {
        let (n, v) = parse_http_header(&[n, v]).unwrap();
        req.set_header(n, v);
    }
    assert_eq!(
        req.headers,
        [
            (b"x-probe".to_vec(), b"2".to_vec()),
            (b"accept".to_vec(), b"application/json".to_vec()),
            (b"X-Empty".to_vec(), b"".to_vec()),
        ],
        "a later header of a name replaces the earlier one in place"
    );
    let r = build_request(&req, b"h", 80, 80, false);
    assert_eq!(
        text(&r),
        format!(
            "HEAD /healthz?x=1 HTTP/1.1\r\nHost: h\r\n{}accept: application/json\r\n\
             Connection: close\r\nx-probe: 2\r\nX-Empty: \r\n\r\n",
            ua()
        )
    );
}

#[test]
fn defaults_are_replaced_in_place() {
    let mut req = HttpRequest::default();
    req.set_header(b"X-A".to_vec(), b"a".to_vec());
    req.set_header(b"CONNECTION".to_vec(), b"close".to_vec());
    req.set_header(b"host".to_vec(), b"virtual.example".to_vec());
    req.set_header(b"User-agent".to_vec(), b"probe/1".to_vec());
    let r = build_request(&req, b"10.0.0.1", 8080, 80, true);
    assert_eq!(
        text(&r),
        "GET / HTTP/1.1\r\nhost: virtual.example\r\nUser-agent: probe/1\r\nAccept: */*\r\n\
         CONNECTION: close\r\nX-A: a\r\n\r\n",
        "the configured Connection wins over keep_alive"
    );
}

#[test]
fn duplicate_defaults_in_hand_built_requests_collapse() {
    // `headers` is public: a list with two Host lines still gives one,
    // the last.
    let req = HttpRequest {
        headers: vec![
            (b"Host".to_vec(), b"a".to_vec()),
            (b"X".to_vec(), b"1".to_vec()),
            (b"HOST".to_vec(), b"b".to_vec()),
            (b"X".to_vec(), b"2".to_vec()),
        ],
        ..HttpRequest::default()
    };
    let r = text(&build_request(&req, b"h", 80, 80, false));
    assert_eq!(
        r.matches("\r\nHost: ").count() + r.matches("\r\nHOST: ").count(),
        1
    );
    assert!(r.contains("\r\nHOST: b\r\n"));
    assert!(r.ends_with("X: 1\r\nX: 2\r\n\r\n"), "{r}");
}

#[test]
fn host_of_server_lines() {
    let cases: &[(&[u8], &[u8], Option<u16>)] = &[
        (b"127.0.0.1:8080", b"127.0.0.1", Some(8080)),
        (b"127.0.0.1", b"127.0.0.1", None),
        (b"backend.example:80", b"backend.example", Some(80)),
        (b"backend.example", b"backend.example", None),
        (b"[::1]:8080", b"[::1]", Some(8080)),
        (b"[::1]", b"[::1]", None),
        (b"[fe80::1%eth0]:65535", b"[fe80::1%eth0]", Some(65535)),
        (b"::1", b"::1", None),
        (b"2001:db8::1", b"2001:db8::1", None),
        (b"unix:/tmp/app.sock", b"localhost", None),
        (b"unix:", b"localhost", None),
        (b"", b"localhost", None),
        // Ports nginx would not accept are dropped.
        (b"a:0", b"a", None),
        (b"a:65536", b"a", None),
        (b"a:http", b"a", None),
        (b"a:", b"a", None),
        (b"a:+80", b"a", None),
        (b"a:000080", b"a", Some(80)),
        (b"a:00000", b"a", None),
        (b"a:99999999999999999999", b"a", None),
        (b"[::1]:x", b"[::1]", None),
        (b"[::1]x", b"[::1]", None),
        (b"[::1", b"[::1", None),
    ];
    for &(name, host, port) in cases {
        assert_eq!(
            host_of_server(name),
            (host, port),
            "{}",
            String::from_utf8_lossy(name)
        );
    }
}

#[test]
fn host_of_server_feeds_build_request() {
    for (name, want) in [
        (&b"[::1]:8080"[..], "Host: [::1]:8080"),
        (b"[::1]:80", "Host: [::1]"),
        (b"::1", "Host: [::1]"),
        (b"unix:/x.sock", "Host: localhost"),
        (b"b.example:81", "Host: b.example:81"),
    ] {
        let (host, port) = host_of_server(name);
        let r = text(&build_request(
            &HttpRequest::default(),
            host,
            port.unwrap_or(80),
            80,
            false,
        ));
        assert_eq!(r.lines().nth(1), Some(want));
    }
}

// ---- properties ------------------------------------------------------------

/// A request the conf parsers accept.
fn valid_request() -> impl Strategy<Value = HttpRequest> {
    let header = (
        prop_oneof![
            "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,12}",
            prop::sample::select(vec!["Host", "host", "USER-AGENT", "accept", "Connection"])
                .prop_map(String::from),
        ],
        proptest::collection::vec(
            any::<u8>().prop_filter("no CR, LF, NUL", |b| !matches!(b, b'\r' | b'\n' | 0)),
            0..16,
        ),
    );
    (
        "[A-Z]{1,8}",
        "/[!-~]{0,24}",
        proptest::collection::vec(header, 0..6),
    )
        .prop_map(|(method, uri, headers)| {
            let (method, uri) = parse_http_request(&[method.as_bytes(), uri.as_bytes()]).unwrap();
            let mut req = HttpRequest {
                method,
                uri,
                headers: vec![],
            };
            for (n, v) in headers {
                let (n, v) = parse_http_header(&[n.as_bytes(), &v]).unwrap();
                req.set_header(n, v);
            }
            req
        })
}

fn server_host() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        "[a-z0-9.-]{1,20}".prop_map(String::into_bytes),
        "[0-9a-f:]{2,20}".prop_map(String::into_bytes),
        "\\[[0-9a-f:]{2,20}\\]".prop_map(String::into_bytes),
        "unix:/[a-z/]{1,10}".prop_map(|s| host_of_server(s.as_bytes()).0.to_vec()),
    ]
}

proptest! {
    #[test]
    fn built_requests_are_well_framed(req in valid_request(), host in server_host(),
                                      port: u16, default_port in prop_oneof![Just(80u16), Just(443u16), any::<u16>()],
                                      keep_alive: bool) {
        let r = build_request(&req, &host, port, default_port, keep_alive);
        prop_assert!(r.ends_with(b"\r\n\r\n"));
        let head = &r[..r.len() - 2];
        // Every line ends with CRLF; no CR or LF inside a line.
        let lines: Vec<&[u8]> = head.split(|&b| b == b'\n').collect();
        prop_assert_eq!(lines.last(), Some(&&b""[..]));
        for l in &lines[..lines.len() - 1] {
            prop_assert!(l.ends_with(b"\r"), "{:?}", String::from_utf8_lossy(l));
            prop_assert!(!l[..l.len() - 1].contains(&b'\r'));
        }
        // The end of the head is the end of the request.
        prop_assert_eq!(r.windows(4).position(|w| w == b"\r\n\r\n"), Some(r.len() - 4));
        let lines = &lines[..lines.len() - 1];
        let request_line = [&req.method[..], b" ", &req.uri, b" HTTP/1.1\r"].concat();
        prop_assert_eq!(lines[0], &request_line[..]);
        let names: Vec<Vec<u8>> = lines[1..]
            .iter()
            .map(|l| {
                let colon = l.iter().position(|&b| b == b':').unwrap();
                l[..colon].to_ascii_lowercase()
            })
            .collect();
        for d in ["host", "user-agent", "accept", "connection"] {
            prop_assert_eq!(names.iter().filter(|n| *n == d.as_bytes()).count(), 1, "{}", d);
        }
        prop_assert_eq!(&names[..4], &[b"host".to_vec(), b"user-agent".to_vec(), b"accept".to_vec(), b"connection".to_vec()][..]);
        // Every configured header is there, with its value.
        for (n, v) in &req.headers {
            let line = [&n[..], b": ", v, b"\r"].concat();
            prop_assert!(lines.contains(&&line[..]));
        }
        prop_assert_eq!(lines.len(), 1 + 4 + req.headers.iter().filter(|(n, _)| !DEFAULT_NAMES.iter().any(|d| d.eq_ignore_ascii_case(n))).count());
    }

    #[test]
    fn host_of_server_never_panics(name in proptest::collection::vec(any::<u8>(), 0..40)) {
        let (host, port) = host_of_server(&name);
        prop_assert!(port != Some(0));
        prop_assert!(host == b"localhost" || name.starts_with(host));
    }

    #[test]
    fn host_and_port_round_trip(host in "[a-z][a-z0-9.-]{0,20}", v6 in "[0-9a-f]{1,4}(:[0-9a-f]{0,4}){2,6}", port in 1u16..) {
        let name = format!("{host}:{port}");
        prop_assert_eq!(host_of_server(name.as_bytes()), (host.as_bytes(), Some(port)));
        let name = format!("[{v6}]:{port}");
        let bracketed = format!("[{v6}]");
        prop_assert_eq!(host_of_server(name.as_bytes()), (bracketed.as_bytes(), Some(port)));
        prop_assert_eq!(host_of_server(v6.as_bytes()), (v6.as_bytes(), None));
    }
}
