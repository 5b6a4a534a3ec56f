//! The `healthcheck_status` page (docs/status.md)
//! against a real nginx with real http and stream backends: every format x
//! filter, query errors, response headers, methods, hostile upstream names,
//! access control and state changes.
//!
//! Every page is checked by parsing it the way a consumer would
//! (`healthcheck_t::page`): JSON with serde_json, CSV with the `csv` crate,
//! Prometheus with `promtool check metrics` plus a small label parser, HTML
//! by its tables and headings.

use std::collections::HashSet;
use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use healthcheck_t::client::{exchange, parse_response, read_response};
use healthcheck_t::page::{
    group_rows, parse_csv, parse_json, parse_page, parse_prom, promtool_check, totals, Fmt, Page,
    Row, Sample, CSV_BASE_HEADER, CSV_OUR_COLUMNS, PEER_LABELS,
};
use healthcheck_t::{
    connect, connect_from, free_port, http_request, poll_status_json, unix_ms, wait::try_wait_for,
    Backend, Kind, Mode, Nginx, Response, Status, UdpBackend,
};
use serde_json::Value;

/// How long checks may take to reach an expected state.
const SETTLE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// Requests through the harness's client (t/src/client.rs), which keeps the
// bytes nginx sends (HEAD must have no body, Content-Length must match),
// reads keep-alive responses and binds a source address; a failed request
// fails the test.

/// `method path` on a fresh HTTP/1.0 connection, read until nginx closes it.
fn request(port: u16, method: &str, path: &str) -> Response {
    http_request(port, method, path, &[], b"").unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

fn get(port: u16, path: &str) -> Response {
    request(port, "GET", path)
}

/// Send `req` on a fresh connection from `src` and read until nginx closes it.
fn exchange_from(src: Ipv4Addr, port: u16, req: &[u8]) -> Response {
    let s = connect_from(src, port)
        .unwrap_or_else(|e| panic!("connect from {src} to 127.0.0.1:{port}: {e}"));
    exchange(s, req).unwrap_or_else(|e| panic!("exchange from {src}: {e}"))
}

/// One response of a keep-alive connection (see `client::read_response`).
fn read_reply(s: &mut TcpStream, buf: &mut Vec<u8>) -> Response {
    read_response(s, buf).unwrap_or_else(|e| panic!("read response: {e}"))
}

// ---------------------------------------------------------------------------
// Pages (parsed by t/src/page.rs) and what every status response carries.

/// Check headers common to every status response: no caching, nosniff,
/// Content-Length equal to the body.
fn check_common_headers(r: &Response, what: &str) {
    let cc = r
        .unique_header("Cache-Control")
        .unwrap_or_else(|| panic!("{what}: no Cache-Control: {:?}", r.headers));
    assert!(
        cc.split(',')
            .any(|d| d.trim().eq_ignore_ascii_case("no-store")),
        "{what}: Cache-Control {cc:?} does not say no-store"
    );
    assert_eq!(
        r.unique_header("X-Content-Type-Options"),
        Some("nosniff"),
        "{what}: {:?}",
        r.headers
    );
    assert_eq!(
        r.content_length(),
        Some(r.body.len()),
        "{what}: Content-Length vs body"
    );
}

/// GET `path`, check status and headers for `fmt`, and parse the page.
fn fetch_page(port: u16, path: &str, fmt: Fmt) -> (Page, Response) {
    let r = get(port, path);
    assert_eq!(
        r.status,
        200,
        "GET {path}: {:?}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(
        r.unique_header("Content-Type"),
        Some(fmt.content_type()),
        "GET {path}"
    );
    check_common_headers(&r, &format!("GET {path}"));
    let page = parse_page(fmt, r.utf8(), path);
    (page, r)
}

/// The page at `path` shows exactly `expected` (http rows then stream
/// rows, each by index) and every total it prints counts them.
fn assert_page(port: u16, path: &str, fmt: Fmt, expected: &[Row]) -> Response {
    assert_page_gen(port, path, fmt, expected, Some(1))
}

/// [`assert_page`] expecting `generation` (`None`: not checked).
fn assert_page_gen(
    port: u16,
    path: &str,
    fmt: Fmt,
    expected: &[Row],
    generation: Option<u64>,
) -> Response {
    let (page, reply) = fetch_page(port, path, fmt);
    if let (Some(want), Some(got)) = (generation, page.generation) {
        assert_eq!(got, want, "GET {path} ({fmt:?}) generation");
    }
    assert_eq!(page.rows, expected, "GET {path} ({fmt:?}) rows");
    if let Some(t) = page.totals {
        assert_eq!(t, totals(expected), "GET {path} ({fmt:?}) totals");
    }
    if let Some(g) = page.groups {
        let want = [
            totals(&group_rows(expected, Kind::Http)),
            totals(&group_rows(expected, Kind::Stream)),
        ];
        assert_eq!(g, want, "GET {path} ({fmt:?}) per-group totals");
    }
    reply
}

// ---------------------------------------------------------------------------
// The configuration most tests share: a known mix of up and down peers in
// http and stream upstreams.

struct Mixed {
    _ng: Nginx,
    port: u16,
    /// http web: b1 b2 b3(refusing); http api: b1 with check port=b2.
    b: [Backend; 3],
    /// stream tcp_pool: s1 s2.
    s: [Backend; 2],
    /// stream udp_pool: u1.
    u: UdpBackend,
}

impl Mixed {
    fn start() -> Mixed {
        let b = [
            Backend::start(),
            Backend::start(),
            Backend::with_mode(Mode::Refuse),
        ];
        let s = [Backend::start(), Backend::start()];
        let u = UdpBackend::start();
        let (port, sport) = (free_port(), free_port());
        let ng = Nginx::start(&format!(
            "http {{
    access_log off;
    upstream web {{
        server {b0};
        server {b1};
        server {b2};
        check interval=300 rise=1 fall=2;
    }}
    upstream api {{
        server {b0};
        check interval=300 rise=1 fall=2 port={b1p};
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{ proxy_pass http://web; }}
        location /status {{ healthcheck_status; }}
        location /s/html {{ healthcheck_status html; }}
        location /s/csv {{ healthcheck_status csv; }}
        location /s/json {{ healthcheck_status json; }}
        location /s/prometheus {{ healthcheck_status prometheus; }}
    }}
}}
stream {{
    upstream tcp_pool {{
        server {s0};
        server {s1};
        check interval=300 rise=1 fall=2;
    }}
    upstream udp_pool {{
        server {u0};
        check type=udp interval=300 timeout=100 rise=1 fall=2;
    }}
    server {{
        listen 127.0.0.1:{sport};
        proxy_pass tcp_pool;
    }}
    server {{
        listen 127.0.0.1:{sport} udp;
        proxy_pass udp_pool;
    }}
}}",
            b0 = b[0].addr(),
            b1 = b[1].addr(),
            b2 = b[2].addr(),
            b1p = b[1].port(),
            s0 = s[0].addr(),
            s1 = s[1].addr(),
            u0 = u.addr(),
        ));
        let m = Mixed {
            _ng: ng,
            port,
            b,
            s,
            u,
        };
        // Settled: every peer ran a round and has the state it keeps.
        poll_status_json(port, SETTLE, "the mixed states", |st| {
            st.peers(Kind::Http).len() == 4
                && st.peers(Kind::Stream).len() == 3
                && m.expected_all().iter().all(|r| {
                    let kind = if r.group == "http" {
                        Kind::Http
                    } else {
                        Kind::Stream
                    };
                    st.peer(kind, &r.upstream, &r.name).is_some_and(|p| {
                        p["status"] == if r.up { "up" } else { "down" }
                            && p[if r.up { "rise" } else { "fall" }].as_u64() >= Some(1)
                    })
                })
        });
        m
    }

    fn expected_all(&self) -> Vec<Row> {
        vec![
            Row::new(Kind::Http, 0, "web", &self.b[0].addr(), true),
            Row::new(Kind::Http, 1, "web", &self.b[1].addr(), true),
            Row::new(Kind::Http, 2, "web", &self.b[2].addr(), false),
            Row::new(Kind::Http, 3, "api", &self.b[0].addr(), true),
            Row::new(Kind::Stream, 0, "tcp_pool", &self.s[0].addr(), true),
            Row::new(Kind::Stream, 1, "tcp_pool", &self.s[1].addr(), true),
            Row::new(Kind::Stream, 2, "udp_pool", &self.u.addr(), true),
        ]
    }

    fn expected(&self, filter: Option<bool>) -> Vec<Row> {
        self.expected_all()
            .into_iter()
            .filter(|r| match filter {
                None => true,
                Some(up) => r.up == up,
            })
            .collect()
    }
}

const FILTERS: [(&str, Option<bool>); 6] = [
    ("", None),
    ("status=up", Some(true)),
    ("status=down", Some(false)),
    ("status=DOWN", Some(false)),
    ("status=Up", Some(true)),
    ("status=dOwN", Some(false)),
];

fn query(parts: &[&str]) -> String {
    let parts: Vec<&str> = parts.iter().copied().filter(|p| !p.is_empty()).collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// Every location (directive argument or none) x `?format=` (none or each)
/// x `?status=` (none, up, down, mixed case) shows the right rows in the
/// right format with totals counting them; `?status=down` leaves the
/// stream group empty (all stream peers are up).
#[test]
fn every_format_and_filter() {
    let m = Mixed::start();
    let locations = [
        ("/status", Fmt::Html),
        ("/s/html", Fmt::Html),
        ("/s/csv", Fmt::Csv),
        ("/s/json", Fmt::Json),
        ("/s/prometheus", Fmt::Prometheus),
    ];
    for (loc, default) in locations {
        let overrides = [None].into_iter().chain(Fmt::ALL.into_iter().map(Some));
        for fmt in overrides {
            for (filter, keep) in FILTERS {
                let f = fmt
                    .map(|f| format!("format={}", f.name()))
                    .unwrap_or_default();
                let path = format!("{loc}{}", query(&[&f, filter]));
                let want = m.expected(keep);
                assert_page(m.port, &path, fmt.unwrap_or(default), &want);
            }
        }
    }
    // Argument order does not matter, and the last of a repeated key wins.
    assert_page(
        m.port,
        "/s/csv?status=down&format=json",
        Fmt::Json,
        &m.expected(Some(false)),
    );
    assert_page(
        m.port,
        "/s/json?format=csv&status=up&format=prometheus",
        Fmt::Prometheus,
        &m.expected(Some(true)),
    );
    let down = m.expected(Some(false));
    assert!(group_rows(&down, Kind::Stream).is_empty());
    assert_eq!(group_rows(&down, Kind::Http).len(), 1);
}

/// No peer matches: every format prints a valid page with zero rows and
/// zero totals; the same for an nginx with no checked peer at all.
#[test]
fn zero_rows_and_no_peers() {
    let (b, s) = (Backend::start(), Backend::start());
    let port = free_port();
    let _ng = Nginx::start(&format!(
        "http {{
    upstream web {{ server {b}; check interval=100 rise=1 fall=3; }}
    server {{
        listen 127.0.0.1:{port};
        location /status {{ healthcheck_status; }}
    }}
}}
stream {{
    upstream tcp_pool {{ server {s}; check interval=100 rise=1 fall=3; }}
}}",
        b = b.addr(),
        s = s.addr()
    ));
    poll_status_json(port, SETTLE, "both peers up after a round", |st| {
        st.up() == Some(2)
            && st
                .peers(Kind::Http)
                .iter()
                .chain(st.peers(Kind::Stream))
                .all(|p| p["rise"].as_u64() >= Some(1))
    });
    for fmt in Fmt::ALL {
        let path = format!("/status?format={}&status=down", fmt.name());
        let r = assert_page(port, &path, fmt, &[]);
        match fmt {
            Fmt::Csv => assert_eq!(
                r.utf8(),
                format!("{CSV_BASE_HEADER},{CSV_OUR_COLUMNS}\n"),
                "header only"
            ),
            Fmt::Json => {
                let v: Value = serde_json::from_slice(&r.body).unwrap();
                assert_eq!(v["servers"]["http"], Value::Array(vec![]));
                assert_eq!(v["servers"]["stream"], Value::Array(vec![]));
            }
            _ => {}
        }
        // The up filter still shows both.
        let path = format!("/status?format={}&status=up", fmt.name());
        let want = [
            Row::new(Kind::Http, 0, "web", &b.addr(), true),
            Row::new(Kind::Stream, 0, "tcp_pool", &s.addr(), true),
        ];
        assert_page(port, &path, fmt, &want);
    }

    // No checked peer anywhere: valid empty pages (generation: see
    // `no_checked_peers_generation`).
    no_checked_peers(None);
}

/// An nginx whose only upstream has no `check`: every format and filter
/// prints a valid page with no rows.
fn no_checked_peers(generation: Option<u64>) {
    let b = Backend::start();
    let port = free_port();
    let _ng = Nginx::start(&format!(
        "http {{
    upstream plain {{ server {b}; }}
    server {{
        listen 127.0.0.1:{port};
        location /status {{ healthcheck_status; }}
    }}
}}",
        b = b.addr()
    ));
    for fmt in Fmt::ALL {
        for (filter, _) in FILTERS {
            let path = format!(
                "/status{}",
                query(&[&format!("format={}", fmt.name()), filter])
            );
            assert_page_gen(port, &path, fmt, &[], generation);
        }
    }
}

/// docs/status.md: `generation` is 1 after the first start,
/// also when no upstream has a check (there is no shared zone then).
#[test]
fn no_checked_peers_generation() {
    no_checked_peers(Some(1));
}

/// A successful reload bumps the generation every format prints.
#[test]
fn generation_counts_reloads() {
    let b = Backend::start();
    let port = free_port();
    let conf = |interval: u32| {
        format!(
            "http {{
    upstream web {{ server {b}; check interval={interval} rise=1 fall=3; }}
    server {{
        listen 127.0.0.1:{port};
        location /status {{ healthcheck_status; }}
    }}
}}",
            b = b.addr()
        )
    };
    let mut ng = Nginx::start(&conf(100));
    let row = [Row::new(Kind::Http, 0, "web", &b.addr(), true)];
    for fmt in Fmt::ALL {
        let path = format!("/status?format={}", fmt.name());
        assert_page_gen(port, &path, fmt, &row, Some(1));
    }
    for generation in [2, 3] {
        let old = ng.all_workers();
        ng.reload_with(&conf(100 + generation as u32));
        ng.wait_workers_gone(&old, SETTLE);
        for fmt in Fmt::ALL {
            let path = format!("/status?format={}", fmt.name());
            assert_page_gen(port, &path, fmt, &row, Some(generation));
        }
    }
}

/// Unknown format or status: 400 with one line saying why. `format` is
/// exact lowercase.
#[test]
fn bad_queries_are_400() {
    let b = Backend::start();
    let port = free_port();
    let _ng = Nginx::start(&format!(
        "http {{
    upstream web {{ server {b}; check interval=1000; }}
    server {{
        listen 127.0.0.1:{port};
        location /status {{ healthcheck_status; }}
        location /s/json {{ healthcheck_status json; }}
    }}
}}",
        b = b.addr()
    ));
    let cases = [
        ("/status?format=xml", "format"),
        ("/status?format=JSON", "format"),
        ("/status?format=Html", "format"),
        ("/status?format=", "format"),
        ("/status?format=json%0aX-Injected:%201", "format"),
        ("/status?status=maybe", "status"),
        ("/status?status=", "status"),
        ("/status?format=json&status=upp", "status"),
        ("/s/json?status=maybe", "status"),
        ("/s/json?format=xml&status=up", "format"),
    ];
    for (path, word) in cases {
        for method in ["GET", "HEAD"] {
            let r = request(port, method, path);
            assert_eq!(r.status, 400, "{method} {path}: {:?}", r.utf8());
            assert!(r.unique_header("X-Injected").is_none(), "{path}");
            assert_eq!(
                r.unique_header("X-Content-Type-Options"),
                Some("nosniff"),
                "{method} {path}"
            );
            if method == "HEAD" {
                assert!(r.body.is_empty(), "HEAD {path}: body {:?}", r.utf8());
                continue;
            }
            check_common_headers(&r, path);
            let text = r.utf8();
            assert!(
                text.ends_with('\n') && text.matches('\n').count() == 1,
                "{path}: not one line: {text:?}"
            );
            let line = text.trim_end();
            assert!(!line.is_empty(), "{path}: empty reason");
            assert!(
                line.bytes().all(|b| (0x20..0x7f).contains(&b)),
                "{path}: reason not printable ASCII: {line:?}"
            );
            assert!(
                line.contains(word),
                "{path}: reason {line:?} does not name {word}"
            );
        }
    }
    // Case-insensitive status and unknown other arguments are fine.
    for path in [
        "/status?status=UP",
        "/status?status=Down",
        "/status?format=json&foo=bar",
        "/status?refresh=5",
    ] {
        assert_eq!(get(port, path).status, 200, "{path}");
    }
}

/// GET and HEAD answer the same headers (HEAD without a body); other
/// methods get 405 with `Allow`, their body is discarded and the
/// keep-alive connection keeps working.
#[test]
fn head_and_methods() {
    let b = Backend::start();
    let port = free_port();
    let _ng = Nginx::start(&format!(
        "http {{
    upstream web {{ server {b}; check interval=100 rise=1 fall=3; }}
    upstream dead {{ server 127.0.0.1:1; check interval=100 rise=1 fall=1; }}
    server {{
        listen 127.0.0.1:{port};
        location /status {{ healthcheck_status; }}
    }}
}}",
        b = b.addr()
    ));
    poll_status_json(port, SETTLE, "web up, dead down", |st| {
        st.is_up(Kind::Http, "web", &b.addr()) && st.is_down(Kind::Http, "dead", "127.0.0.1:1")
    });

    for fmt in Fmt::ALL {
        // Counters move between requests, so a page's length can change:
        // compare HEAD's Content-Length with two GETs around it that agree.
        for filter in ["", "&status=up", "&status=down"] {
            let path = format!("/status?format={}{filter}", fmt.name());
            let found = try_wait_for(SETTLE, || {
                let g1 = get(port, &path);
                let h = request(port, "HEAD", &path);
                let g2 = get(port, &path);
                assert_eq!((g1.status, h.status), (200, 200), "{path}");
                assert!(h.body.is_empty(), "HEAD {path} sent a body: {:?}", h.body);
                assert_eq!(
                    h.unique_header("Content-Type"),
                    Some(fmt.content_type()),
                    "HEAD {path}"
                );
                for name in ["Cache-Control", "X-Content-Type-Options", "Content-Type"] {
                    assert_eq!(
                        h.unique_header(name),
                        g1.unique_header(name),
                        "HEAD vs GET {path}: {name}"
                    );
                }
                (g1.body.len() == g2.body.len()).then(|| (h.content_length(), g1.body.len()))
            });
            let (head_len, get_len) =
                found.unwrap_or_else(|| panic!("{path}: page length never stable"));
            assert_eq!(head_len, Some(get_len), "HEAD Content-Length of {path}");
        }
    }

    // 405 for other methods, with a body that must be discarded, and the
    // next request on the same connection is served.
    let bodies: [(&str, Vec<u8>, &str); 6] = [
        ("POST", b"a=1&b=2".to_vec(), ""),
        ("PUT", vec![b'x'; 300_000], ""),
        ("DELETE", b"{}".to_vec(), ""),
        ("PATCH", b"p".to_vec(), ""),
        ("OPTIONS", Vec::new(), ""),
        ("PUT", b"5\r\nhello\r\n0\r\n\r\n".to_vec(), "chunked"),
    ];
    for (method, body, te) in bodies {
        let mut s = connect(port).expect("connect");
        let mut req = format!("{method} /status?format=json HTTP/1.1\r\nHost: localhost\r\n");
        if te == "chunked" {
            req.push_str("Transfer-Encoding: chunked\r\n");
        } else if !body.is_empty() {
            req.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(&body);
        // Pipelined: the GET follows the body in the same write.
        bytes.extend_from_slice(b"GET /status?format=json HTTP/1.1\r\nHost: localhost\r\n\r\n");
        let writer = {
            let mut w = s.try_clone().unwrap();
            std::thread::spawn(move || w.write_all(&bytes))
        };
        let mut buf = Vec::new();
        let r = read_reply(&mut s, &mut buf);
        assert_eq!(r.status, 405, "{method} ({te}): {:?}", r.utf8());
        assert_eq!(r.unique_header("Allow"), Some("GET, HEAD"), "{method}");
        check_common_headers(&r, method);
        let r2 = read_reply(&mut s, &mut buf);
        writer.join().unwrap().expect("write pipelined requests");
        assert_eq!(
            r2.status, 200,
            "GET after {method} ({te}) on the same connection"
        );
        assert_eq!(r2.unique_header("Content-Type"), Some("application/json"));
        serde_json::from_slice::<Value>(&r2.body).expect("JSON after 405");
        // And a third request after a pause, on the same connection.
        s.write_all(b"HEAD /status HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .unwrap();
        let mut head = Vec::new();
        let mut chunk = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut chunk).expect("read HEAD reply");
            assert!(n > 0, "connection closed after {method}");
            head.extend_from_slice(&chunk[..n]);
        }
        assert!(
            head.starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&head)
        );
        assert!(head.ends_with(b"\r\n\r\n"), "HEAD reply carried a body");
        assert!(buf.is_empty(), "extra bytes after the GET: {buf:?}");
    }
}

// ---------------------------------------------------------------------------

/// Exact JSON fields for http and stream rows: index, upstream, name,
/// status, type, port, rise/fall, delays, our counters, generation == 1.
#[test]
fn json_fields_exact() {
    let m = Mixed::start();
    let st = poll_status_json(m.port, SETTLE, "settled", |_| true);
    assert_eq!(st.generation(), Some(1), "{st}");
    assert_eq!(
        (st.total(), st.up(), st.down()),
        (Some(7), Some(6), Some(1)),
        "{st}"
    );
    let expect = |kind: Kind, idx: u64, up: &str, name: &str, ty: &str, port: u64| {
        let p = st
            .peer(kind, up, name)
            .unwrap_or_else(|| panic!("no {kind:?} {up} {name}: {st}"));
        assert_eq!(p["index"], idx, "{p}");
        assert_eq!(p["type"], ty, "{p}");
        assert_eq!(p["port"], port, "{p}");
        let (rise, fall) = (p["rise"].as_u64().unwrap(), p["fall"].as_u64().unwrap());
        let checks = p["checks"].as_u64().unwrap();
        let fails = p["fails_total"].as_u64().unwrap();
        assert!(checks >= 1 && fails <= checks, "{p}");
        let delays: Vec<i64> = [
            "last_delay_ms",
            "avg_delay_ms",
            "min_delay_ms",
            "max_delay_ms",
        ]
        .iter()
        .map(|k| p[*k].as_i64().unwrap())
        .collect();
        if p["status"] == "up" {
            assert!(rise >= 1 && fall == 0, "{p}");
            // default_down=false: up from the start, never changed.
            assert_eq!(p["last_change"], Value::Null, "never changed: {p}");
            assert_eq!(p["down_since"], Value::Null, "{p}");
            if ty == "tcp" {
                assert_eq!(fails, 0, "{p}");
                assert_eq!(p["last_failure_reason"], Value::Null, "{p}");
                let (l, a, mn, mx) = (delays[0], delays[1], delays[2], delays[3]);
                assert!(
                    l >= 0 && mn >= 0 && mn <= a && a <= mx && mn <= l && l <= mx,
                    "{p}"
                );
            }
        } else {
            assert!(rise == 0 && fall >= 1 && fails >= 1, "{p}");
            assert_eq!(p["last_failure_reason"], "refused", "{p}");
            assert_eq!(delays, [-1, -1, -1, -1], "no success yet: {p}");
            // Fell once: up -> down is its one change.
            let lc = p["last_change"].as_u64().unwrap_or_else(|| panic!("{p}"));
            assert!(lc > 1_600_000_000_000 && lc <= unix_ms() + 1000, "{p}");
            assert_eq!(p["down_since"].as_u64(), Some(lc), "{p}");
        }
        p.clone()
    };
    expect(Kind::Http, 0, "web", &m.b[0].addr(), "tcp", 0);
    expect(Kind::Http, 1, "web", &m.b[1].addr(), "tcp", 0);
    let down = expect(Kind::Http, 2, "web", &m.b[2].addr(), "tcp", 0);
    assert_eq!(down["status"], "down");
    expect(
        Kind::Http,
        3,
        "api",
        &m.b[0].addr(),
        "tcp",
        u64::from(m.b[1].port()),
    );
    expect(Kind::Stream, 0, "tcp_pool", &m.s[0].addr(), "tcp", 0);
    expect(Kind::Stream, 1, "tcp_pool", &m.s[1].addr(), "tcp", 0);
    expect(Kind::Stream, 2, "udp_pool", &m.u.addr(), "udp", 0);
    // Probes went where the rows say: api's checks hit b1, not b0's port.
    assert!(m.b[1].accepted() >= 1);
}

// ---------------------------------------------------------------------------
// Hostile upstream names.

static TMP_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A private temp directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "hc-status-{}-{}",
            std::process::id(),
            TMP_COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `name` as an nginx double-quoted token.
fn conf_quote(name: &[u8]) -> Vec<u8> {
    let mut out = vec![b'"'];
    for &c in name {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\r' => out.extend_from_slice(b"\\r"),
            c => out.push(c),
        }
    }
    out.push(b'"');
    out
}

/// How HTML shows a name: lossy UTF-8, then C0 controls (but TAB, LF, CR),
/// DEL and C1 controls replaced by U+FFFD.
fn html_shown(name: &[u8]) -> String {
    String::from_utf8_lossy(name)
        .chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => c,
            c if c.is_control() => '\u{fffd}',
            c => c,
        })
        .collect()
}

/// How a CSV cell shows a name: lossy UTF-8, with a `'` before a leading
/// `= + - @ TAB CR` so spreadsheets do not evaluate it.
fn csv_shown(name: &[u8]) -> String {
    let s = String::from_utf8_lossy(name).into_owned();
    if matches!(
        name.first(),
        Some(b'=' | b'+' | b'-' | b'@' | b'\t' | b'\r')
    ) {
        format!("'{s}")
    } else {
        s
    }
}

#[test]
fn hostile_names_render_valid_and_inert() {
    let b = Backend::start();
    let long: Vec<u8> = b"<script>alert(\"x\")</script>,=\\;"
        .iter()
        .copied()
        .cycle()
        .take(3000)
        .collect();
    let names: Vec<Vec<u8>> = vec![
        b"we,b\"<script>=x".to_vec(),
        b"=cmd|' /C calc'!A0".to_vec(),
        b"+1+2".to_vec(),
        b"-2-3".to_vec(),
        b"@SUM(A1:A2)".to_vec(),
        b"\ttabbed".to_vec(),
        b"back\\slash\nnew\tline\r".to_vec(),
        b"caf\xe9\xff bytes".to_vec(),
        b"ctl\x01\x7f\xc2\x85x".to_vec(),
        b"</td></tr></table><img src=x onerror=alert(1)>&amp;".to_vec(),
        b"}\"\\n{name=\"evil\"}".to_vec(),
        long,
    ];
    let dir = TempDir::new();
    let mut http = Vec::new();
    let mut stream = Vec::new();
    for n in &names {
        for out in [&mut http, &mut stream] {
            out.extend_from_slice(b"upstream ");
            out.extend_from_slice(&conf_quote(n));
            out.extend_from_slice(
                format!(
                    " {{ server {}; check interval=100 rise=1 fall=3; }}\n",
                    b.addr()
                )
                .as_bytes(),
            );
        }
    }
    // The same server twice in one upstream: series must still be unique.
    http.extend_from_slice(
        format!(
            "upstream twice {{ server {a}; server {a}; check interval=100 rise=1 fall=3; }}\n",
            a = b.addr()
        )
        .as_bytes(),
    );
    let (hf, sf) = (dir.0.join("http.conf"), dir.0.join("stream.conf"));
    fs::write(&hf, &http).unwrap();
    fs::write(&sf, &stream).unwrap();
    let port = free_port();
    let _ng = Nginx::start(&format!(
        "http {{
    include {hf};
    server {{
        listen 127.0.0.1:{port};
        location /status {{ healthcheck_status; }}
    }}
}}
stream {{
    include {sf};
}}",
        hf = hf.display(),
        sf = sf.display()
    ));
    let n = names.len() as u64;
    let all = Some(2 * n as i64 + 2);
    let st = poll_status_json(port, SETTLE, "every hostile peer checked", |st| {
        st.total() == all
            && st
                .peers(Kind::Http)
                .iter()
                .chain(st.peers(Kind::Stream))
                .all(|p| p["rise"].as_u64() >= Some(1))
    });
    assert_eq!(st.up(), all, "{st}");

    // Expected rows per format.
    let rows = |shown: &dyn Fn(&[u8]) -> String| {
        let mut v = Vec::new();
        for (i, nm) in names.iter().enumerate() {
            v.push(Row::new(Kind::Http, i as u64, &shown(nm), &b.addr(), true));
        }
        v.push(Row::new(Kind::Http, n, "twice", &b.addr(), true));
        v.push(Row::new(Kind::Http, n + 1, "twice", &b.addr(), true));
        for (i, nm) in names.iter().enumerate() {
            v.push(Row::new(
                Kind::Stream,
                i as u64,
                &shown(nm),
                &b.addr(),
                true,
            ));
        }
        v
    };
    let lossy = |nm: &[u8]| String::from_utf8_lossy(nm).into_owned();
    for filter in ["", "&status=up"] {
        assert_page(
            port,
            &format!("/status?format=json{filter}"),
            Fmt::Json,
            &rows(&lossy),
        );
        assert_page(
            port,
            &format!("/status?format=prometheus{filter}"),
            Fmt::Prometheus,
            &rows(&lossy),
        );
        assert_page(
            port,
            &format!("/status?format=csv{filter}"),
            Fmt::Csv,
            &rows(&csv_shown),
        );
        let r = assert_page(
            port,
            &format!("/status{filter}"),
            Fmt::Html,
            &rows(&html_shown),
        );
        // Inert HTML: the only tags are the page's own.
        let body = r.utf8();
        assert!(!body.contains("<script"), "raw <script> in HTML");
        assert!(!body.contains("<img"), "raw <img> in HTML");
        assert!(body.contains("&lt;script&gt;"), "escaped name missing");
        assert!(
            !body.contains('\u{1}') && !body.contains('\u{7f}'),
            "control chars in HTML"
        );
    }
    // CSV: every cell starting with a formula character is neutralised.
    let csv_page = get(port, "/status?format=csv");
    for rec in parse_csv(csv_page.utf8(), "csv") {
        for (col, cell) in &rec {
            assert!(
                !cell.starts_with(['=', '+', '@', '\t', '\r'])
                    && (!cell.starts_with('-') || cell.parse::<i64>().is_ok()),
                "CSV cell {col}={cell:?} would be evaluated by a spreadsheet"
            );
        }
    }
    // JSON: control characters are escaped, not raw.
    let json = get(port, "/status?format=json");
    assert!(
        !json.body.iter().any(|&c| c < 0x20 && c != b'\n'),
        "raw control characters in JSON"
    );
    // Prometheus: nothing got out of its label value.
    let samples = parse_prom(get(port, "/status?format=prometheus&histogram=on").utf8());
    let known = [&PEER_LABELS[..], &["reason", "le"]].concat();
    for s in &samples {
        for (k, _) in &s.labels {
            assert!(known.contains(&k.as_str()), "stray label {k} in {s:?}");
        }
        if let Some(name) = s.label("name") {
            assert_eq!(name, b.addr(), "{s:?}");
        }
    }
}

// ---------------------------------------------------------------------------

/// `allow 127.0.0.1; deny all;` on the status location: 403 from
/// 127.0.0.2, 200 from 127.0.0.1 (whatever the method).
#[test]
fn access_control_is_honoured() {
    let b = Backend::start();
    let port = free_port();
    let _ng = Nginx::start(&format!(
        "http {{
    upstream web {{ server {b}; check interval=1000; }}
    server {{
        listen 127.0.0.1:{port};
        location /status {{
            allow 127.0.0.1;
            deny all;
            healthcheck_status json;
        }}
    }}
}}",
        b = b.addr()
    ));
    let other = Ipv4Addr::new(127, 0, 0, 2);
    let s = connect_from(other, port).expect("connect from 127.0.0.2");
    assert_eq!(s.local_addr().unwrap().ip(), other, "source address");
    drop(s);
    let req = |method: &str, path: &str| {
        format!("{method} {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").into_bytes()
    };
    for (method, path) in [
        ("GET", "/status"),
        ("GET", "/status?format=prometheus"),
        ("HEAD", "/status"),
        ("POST", "/status"),
        ("GET", "/status?format=xml"),
    ] {
        let r = exchange_from(other, port, &req(method, path));
        assert_eq!(r.status, 403, "{method} {path} from {other}");
        let body = String::from_utf8_lossy(&r.body);
        assert!(!body.contains("servers"), "status leaked: {body}");
        assert!(!body.contains("nginx_upstream"), "status leaked: {body}");
    }
    let r = exchange_from(Ipv4Addr::LOCALHOST, port, &req("GET", "/status"));
    assert_eq!(r.status, 200, "from 127.0.0.1");
    parse_json(r.utf8(), "allowed");
}

// ---------------------------------------------------------------------------

/// Backends switched to Refuse go down on the page (http and stream), with
/// the counters, reason and times our additions promise; switched back,
/// they come up again and `down_since` clears.
#[test]
fn page_follows_state_changes() {
    let hb = Backend::start();
    let sb = Backend::start();
    let port = free_port();
    let ng = Nginx::start(&format!(
        "http {{
    upstream web {{ server {h}; check interval=200 rise=1 fall=2; }}
    server {{
        listen 127.0.0.1:{port};
        location /status {{ healthcheck_status; }}
    }}
}}
stream {{
    upstream tcp_pool {{ server {s}; check interval=200 rise=1 fall=2; }}
}}",
        h = hb.addr(),
        s = sb.addr()
    ));
    let peers = [
        (Kind::Http, "web", hb.addr()),
        (Kind::Stream, "tcp_pool", sb.addr()),
    ];
    let get_peer = |st: &Status, i: usize| {
        let (k, u, n) = &peers[i];
        st.peer(*k, u, n).cloned().unwrap()
    };
    let before = poll_status_json(port, SETTLE, "two successful rounds each", |st| {
        (0..2).all(|i| {
            st.peer(peers[i].0, peers[i].1, &peers[i].2)
                .is_some_and(|p| p["rise"].as_u64() >= Some(2))
        })
    });
    for i in 0..2 {
        let p = get_peer(&before, i);
        assert_eq!(p["status"], "up", "{p}");
        assert_eq!(p["fails_total"], 0, "{p}");
        assert_eq!(p["last_failure_reason"], Value::Null, "{p}");
        assert_eq!(p["last_change"], Value::Null, "{p}");
        assert_eq!(p["down_since"], Value::Null, "{p}");
        assert!(p["last_delay_ms"].as_i64() >= Some(0), "{p}");
    }

    let t_switch = unix_ms();
    hb.set_mode(Mode::Refuse);
    sb.set_mode(Mode::Refuse);
    let down = poll_status_json(port, SETTLE, "both peers down", |st| {
        (0..2).all(|i| st.is_down(peers[i].0, peers[i].1, &peers[i].2))
    });
    let t_seen = unix_ms();
    // nginx's cached clock may lag the test's by a timer tick.
    let slack = 1000;
    let mut changed_at = [0u64; 2];
    for (i, at) in changed_at.iter_mut().enumerate() {
        let (p, b) = (get_peer(&down, i), get_peer(&before, i));
        assert!(
            p["checks"].as_u64() >= Some(b["checks"].as_u64().unwrap() + 2),
            "{p}"
        );
        assert!(p["fails_total"].as_u64() >= Some(2), "fall=2: {p}");
        assert_eq!(p["rise"], 0, "{p}");
        assert!(p["fall"].as_u64() >= Some(2), "{p}");
        assert_eq!(p["last_failure_reason"], "refused", "{p}");
        let lc = p["last_change"]
            .as_u64()
            .unwrap_or_else(|| panic!("last_change unset: {p}"));
        assert!(
            lc + slack >= t_switch && lc <= t_seen + slack,
            "last_change {lc} outside [{t_switch}, {t_seen}]: {p}"
        );
        assert_eq!(
            p["down_since"].as_u64(),
            Some(lc),
            "down since the change: {p}"
        );
        // Delays describe successful rounds only: unchanged by failures.
        assert!(p["last_delay_ms"].as_i64() >= Some(0), "{p}");
        *at = lc;
    }
    // The other formats say the same.
    let csv_rows = parse_csv(get(port, "/status?format=csv&status=DOWN").utf8(), "csv");
    assert_eq!(csv_rows.len(), 2, "{csv_rows:?}");
    for (i, rec) in csv_rows.iter().enumerate() {
        assert_eq!(rec["status"], "down");
        assert_eq!(rec["last_failure_reason"], "refused");
        assert_eq!(rec["last_change"], changed_at[i].to_string());
        assert_eq!(rec["down_since"], changed_at[i].to_string());
        assert!(rec["fails_total"].parse::<u64>().unwrap() >= 2);
    }
    let prom = get(port, "/status?format=prometheus&histogram=on")
        .utf8()
        .to_string();
    promtool_check(&prom, "prometheus while down");
    let samples = parse_prom(&prom);
    for (i, (kind, up, name)) in peers.iter().enumerate() {
        let of = |family: &str| -> Vec<&Sample> {
            samples
                .iter()
                .filter(|s| {
                    s.name == family
                        && s.label("upstream_type") == Some(kind.key())
                        && s.label("upstream") == Some(up)
                        && s.label("name") == Some(name.as_str())
                })
                .collect()
        };
        assert_eq!(of("nginx_upstream_server_active")[0].value, "0");
        // One series per reason. The probe racing the switch may count as
        // `reset` rather than `refused`; the later ones are refused.
        let failures = of("nginx_upstream_server_check_failures_total");
        let reasons: HashSet<&str> = failures.iter().filter_map(|s| s.label("reason")).collect();
        assert_eq!(reasons.len(), failures.len(), "{failures:?}");
        let count = |s: &&Sample| s.value.parse::<u64>().unwrap();
        let refused: Vec<&Sample> = failures
            .iter()
            .copied()
            .filter(|s| s.label("reason") == Some("refused"))
            .collect();
        assert_eq!(refused.len(), 1);
        assert!(count(&refused[0]) >= 1, "{refused:?}");
        assert!(failures.iter().map(count).sum::<u64>() >= 2, "{failures:?}");
        let ts: f64 = of("nginx_upstream_server_last_change_timestamp_seconds")[0]
            .value
            .parse()
            .unwrap();
        assert!(
            (ts * 1000.0 - changed_at[i] as f64).abs() < 1.5,
            "{ts} vs {}",
            changed_at[i]
        );
        let checks: u64 = of("nginx_upstream_server_checks_total")[0]
            .value
            .parse()
            .unwrap();
        assert!(checks >= 2);
    }
    let html = get(port, "/status?status=down").utf8().to_string();
    assert_eq!(html.matches("<tr class=\"down\">").count(), 2, "{html}");
    assert!(html.contains("refused"));

    hb.set_mode(Mode::Serve);
    sb.set_mode(Mode::Serve);
    let up = poll_status_json(port, SETTLE, "both peers up again", |st| {
        (0..2).all(|i| st.is_up(peers[i].0, peers[i].1, &peers[i].2))
    });
    for (i, at) in changed_at.iter().enumerate() {
        let p = get_peer(&up, i);
        assert_eq!(p["down_since"], Value::Null, "{p}");
        assert!(p["last_change"].as_u64() > Some(*at), "{p}");
        assert_eq!(p["fall"], 0, "{p}");
        assert_eq!(
            p["last_failure_reason"], "refused",
            "the last failure is kept: {p}"
        );
    }
    drop(ng);
}

// ---------------------------------------------------------------------------
// Big pages: a 10 000-peer page is built over many event-loop turns (about
// 250 us of work each), so the worker serves other requests in between, and
// an old worker finishes the page after a reload. The module logs each turn
// at debug level, which `debug_connection` turns on for one client address.

const TURN: &str = "healthcheck_status: page in progress, turn";
const DONE: &str = "healthcheck_status: page of";
const DEBUG_SRC: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);

/// 100 upstreams x 100 servers nobody listens on (refused at once), checked
/// every minute, and one proxied upstream.
fn big_nginx(app: &Backend) -> (Nginx, u16) {
    let port = free_port();
    let mut conf = String::from("http {\n    access_log off;\n");
    for u in 0..100 {
        conf.push_str(&format!("    upstream big{u} {{\n"));
        for s in 1..=100 {
            conf.push_str(&format!("        server 127.3.{u}.{s}:9;\n"));
        }
        conf.push_str("        check interval=60000 timeout=1000 rise=1 fall=1;\n    }\n");
    }
    conf.push_str(&format!(
        "    upstream app {{ server {}; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{ proxy_pass http://app; }}
        location /s {{ healthcheck_status json; }}
    }}
}}\n",
        app.addr()
    ));
    let ng = Nginx::builder()
        .events(&format!("debug_connection {DEBUG_SRC};"))
        .start(&conf);
    (ng, port)
}

/// Send a page request from the debug address; the response is read later.
fn start_page(port: u16, path: &str) -> TcpStream {
    let mut s = connect_from(DEBUG_SRC, port).expect("connect from 127.0.0.3");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .expect("write request");
    s
}

/// Read a whole HTTP/1.0 response and check it is complete.
fn finish_page(mut s: TcpStream, what: &str) -> Response {
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    let reply = parse_response(&raw)
        .unwrap_or_else(|e| panic!("{what}: {e} ({} bytes received)", raw.len()));
    assert_eq!(reply.status, 200, "{what}");
    assert_eq!(
        reply.content_length(),
        Some(reply.body.len()),
        "{what}: Content-Length vs body received"
    );
    reply
}

/// The JSON page lists all 10 000 big peers in order (and is strict JSON).
fn assert_big_json(body: &[u8], what: &str) {
    let v: Value = serde_json::from_slice(body).unwrap_or_else(|e| panic!("{what}: {e}"));
    let http = v["servers"]["http"].as_array().expect("servers.http");
    assert_eq!(v["servers"]["total"], 10_000, "{what}: total");
    assert_eq!(http.len(), 10_000, "{what}: rows");
    for (i, row) in http.iter().enumerate() {
        assert_eq!(row["index"], i, "{what}: row order");
        let (u, s) = (i / 100, i % 100 + 1);
        assert_eq!(row["upstream"], format!("big{u}"), "{what}: row {i}");
        assert_eq!(row["name"], format!("127.3.{u}.{s}:9"), "{what}: row {i}");
    }
}

/// Turn lines of the page requested by the connection whose debug lines
/// follow `mark` (one page at a time in these tests).
fn turns_since(ng: &Nginx, mark: usize) -> usize {
    ng.log_lines_since(mark, TURN).len()
}

#[test]
fn big_page_is_built_in_turns_between_other_requests() {
    let app = Backend::start();
    let (ng, port) = big_nginx(&app);
    // The page is the same bytes in one piece (small pages are) and in
    // turns: compare with a HEAD's Content-Length and the row check.
    let mut interleaved = false;
    for attempt in 1..=5 {
        let mark = ng.log_mark();
        let page = start_page(port, "/s?format=prometheus");
        ng.wait_for_log_since(mark, TURN, SETTLE);
        // A proxied request while the page is in progress...
        let r = get(port, "/");
        assert_eq!(r.status, 200, "proxied request during the page");
        assert_eq!(r.utf8(), app.port().to_string());
        let turns_at_reply = turns_since(&ng, mark);
        let reply = finish_page(page, "prometheus page");
        let done = ng.wait_for_log_since(mark, DONE, SETTLE);
        let turns = turns_since(&ng, mark);
        assert!(turns >= 10, "a 10 000-peer page took {turns} turns: {done}");
        let text = reply.utf8();
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("nginx_upstream_server_active{"))
                .count(),
            10_000
        );
        // ...was answered before the page's last turn.
        if turns_at_reply < turns {
            interleaved = true;
            break;
        }
        eprintln!("attempt {attempt}: the page finished before the proxied reply");
    }
    assert!(
        interleaved,
        "no proxied reply was served while a page was in progress"
    );
    // JSON and CSV in turns: complete and in order.
    let mark = ng.log_mark();
    let reply = finish_page(start_page(port, "/s"), "json page");
    assert!(turns_since(&ng, mark) >= 2, "the JSON page took one turn");
    assert_big_json(&reply.body, "json page");
    let csv = finish_page(start_page(port, "/s?format=csv"), "csv page");
    assert_eq!(csv.utf8().lines().count(), 10_001, "csv header + rows");
    let head = request(port, "HEAD", "/s");
    assert!(head.body.is_empty(), "HEAD has no body");
    let len = head.content_length().expect("HEAD Content-Length");
    assert!(
        len.abs_diff(reply.body.len()) < reply.body.len() / 10,
        "HEAD length {len} vs GET {}",
        reply.body.len()
    );
    ng.check_log();
}

#[test]
fn client_gone_mid_page_then_graceful_stop_waits_for_a_page() {
    let app = Backend::start();
    let (ng, port) = big_nginx(&app);
    // A client that goes away mid-page costs nothing but the page.
    let mark = ng.log_mark();
    let page = start_page(port, "/s?format=prometheus");
    ng.wait_for_log_since(mark, TURN, SETTLE);
    // The close that follows sends RST.
    healthcheck_t::set_linger_zero(&page).expect("SO_LINGER");
    drop(page);
    ng.wait_for_log_since(mark, DONE, SETTLE);
    assert_big_json(
        &finish_page(start_page(port, "/s"), "json after").body,
        "json after",
    );
    ng.check_log();

    // A graceful stop (what an old worker gets from the master on reload)
    // while a page is in progress: the worker finishes and sends the page,
    // then exits (and the master starts a new one).
    let worker = ng.workers()[0];
    let mark = ng.log_mark();
    let page = start_page(port, "/s?format=prometheus");
    ng.wait_for_log_since(mark, TURN, SETTLE);
    let reader = std::thread::spawn(move || finish_page(page, "page across a graceful stop"));
    healthcheck_t::process::signal(worker, libc::SIGQUIT).expect("SIGQUIT the worker");
    let reply = reader.join().expect("page reader");
    assert_eq!(
        reply
            .utf8()
            .lines()
            .filter(|l| l.starts_with("nginx_upstream_server_checks_total{"))
            .count(),
        10_000
    );
    let log = ng.log();
    let tail = log.get(mark..).unwrap_or_default();
    let shutting = tail
        .find(&format!("{worker}#{worker}: gracefully shutting down"))
        .expect("the worker logged its graceful shutdown");
    let done = tail.find(DONE).expect("the page's last turn");
    assert!(
        shutting < done,
        "the page was done before the stop reached the worker: nothing shown"
    );
    ng.wait_workers_gone(&[worker], SETTLE);
    ng.check_log();
}
