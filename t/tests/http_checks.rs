//! `check ... type=http` and `check_match` (docs/directives.md, check and check_match),
//! against a real nginx and scripted backends on loopback.
//!
//! An http check sends a request (built from `check_http_request` and
//! `check_http_header`, or `check_http_send` verbatim) and judges the
//! response: by its status class (`check_http_expect_alive`, default 2xx
//! and 3xx), or by the tests of a `check_match` block. What an operator
//! sees for a failed round (`last_failure_reason` in JSON, the
//! `reason` label in Prometheus):
//!
//! | the response | reason |
//! |---|---|
//! | a status the check does not accept (class or `status` test) | `status` |
//! | a `header`, `body` or `expect` test fails (an `expect` literal as soon as it cannot match) | `mismatch` |
//! | more than `check_buffer_size` of head, or of a `send`/`expect` answer | `invalid` |
//! | malformed, oversized or wrongly framed | `invalid` |
//! | the connection closed before the response was complete | `closed` |
//! | not complete in time | `timeout` |
//!
//! The hostile backends (endless headers, absurd chunks, ...) each share an
//! upstream with a healthy peer: the hostile one goes down with its reason,
//! the healthy one stays up and takes the proxied traffic. tcp and udp
//! checks use `send` / `expect` blocks.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use healthcheck_t::conf::{http_conf_with, status_server};
use healthcheck_t::http_backend::{response, HttpBackend, Reply};
use healthcheck_t::page::{parse_prom, promtool_check};
use healthcheck_t::{
    assert_holds, free_port, http_get, poll_status_json, resting_fds, status_json,
    stream_roundtrip, wait_until, Kind, Nginx, Status, UdpBackend, UdpMode,
};

/// Long enough for a handful of rounds at the intervals used here.
const WAIT: Duration = Duration::from_secs(10);
/// For the tests that need many rounds.
const LONG: Duration = Duration::from_secs(15);
/// The built request's User-Agent.
const UA: &str = "nginx-healthcheck/0.1.0";
/// The check line of most tests: rounds every 200 ms, a 180 ms budget,
/// down after two failures, up after one success.
const CHECK: &str = "check interval=200 timeout=180 rise=1 fall=2 type=http";
/// The healthy peer's answer (and the body proxied requests must get); it
/// passes the body tests of the hostile stories too.
const HEALTHY: &[u8] = b"healthy: ready, done\n";

// ---------------------------------------------------------------------------
// helpers

/// `Reply::Raw` that keeps the connection.
fn raw(bytes: &[u8]) -> Reply {
    Reply::Raw {
        bytes: bytes.to_vec(),
        close: false,
    }
}

/// A kept-alive response with `status`, `headers` and `body`.
fn answer(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    raw(&response(status, headers, body))
}

/// A chunked 200 response with these chunks.
fn chunked(chunks: &[&[u8]]) -> Reply {
    let mut out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for c in chunks {
        out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        out.extend_from_slice(c);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    raw(&out)
}

fn healthy_reply() -> Reply {
    answer(200, &[], HEALTHY)
}

/// A JSON field of the row of `name` in `upstream`.
fn field<'a>(
    s: &'a Status,
    kind: Kind,
    upstream: &str,
    name: &str,
    f: &str,
) -> &'a serde_json::Value {
    &s.row(kind, upstream, name)[f]
}

/// Whether the peer is up and its last two rounds passed.
fn passing(s: &Status, kind: Kind, upstream: &str, name: &str) -> bool {
    s.is_up(kind, upstream, name) && s.get_int(kind, upstream, name, "rise") >= Some(2)
}

/// Whether the peer is down and its last round failed with `why`.
fn failing(s: &Status, kind: Kind, upstream: &str, name: &str, why: &str) -> bool {
    s.is_down(kind, upstream, name)
        && s.get_int(kind, upstream, name, "fall") >= Some(1)
        && s.reason(kind, upstream, name) == Some(why)
}

/// Poll until the peer passes (up, two rounds in a row passed).
fn wait_passing(port: u16, kind: Kind, upstream: &str, name: &str) -> Status {
    poll_status_json(port, WAIT, format!("{upstream} {name} passing"), |s| {
        passing(s, kind, upstream, name)
    })
}

/// Poll until the peer is down with `why` as its last failure.
fn wait_failing(port: u16, kind: Kind, upstream: &str, name: &str, why: &str) -> Status {
    poll_status_json(port, WAIT, format!("{upstream} {name} down: {why}"), |s| {
        failing(s, kind, upstream, name, why)
    })
}

/// Poll until `b` received at least `n` requests; returns every request.
fn wait_requests(b: &HttpBackend, n: usize) -> Vec<Vec<u8>> {
    wait_until(WAIT, format!("{n} requests at {}", b.addr()), || {
        b.request_count() >= n
    });
    b.requests()
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every request equals `want`, byte for byte.
fn assert_requests(requests: &[Vec<u8>], want: &str, what: &str) {
    assert!(!requests.is_empty(), "{what}: no request");
    for r in requests {
        assert_eq!(lossy(r), want, "{what}: the request as received");
    }
}

/// The built request with this request line start (`GET /`), `Host` and
/// `check_http_header` lines, without a kept connection.
fn default_request(method_uri: &str, host: &str, extra: &str) -> String {
    format!(
        "{method_uri} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: {UA}\r\nAccept: */*\r\n\
         Connection: close\r\n{extra}\r\n"
    )
}

/// `n` proxied `GET /` on `port`, each answered 200 by the healthy peer.
fn assert_proxied_to_healthy(port: u16, n: usize) {
    for i in 0..n {
        let r = http_get(port, "/").unwrap_or_else(|e| panic!("proxied GET #{i}: {e}"));
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, HEALTHY),
            "proxied GET #{i}: {}",
            r.text()
        );
    }
}

/// `http {}` with `upstreams` (and `check_match` blocks), the JSON status
/// at `/status`, Prometheus at `/metrics`, and `location /` proxying to
/// upstream `u` when `proxy`.
fn http_only(port: u16, upstreams: &str, proxy: bool) -> String {
    let mut locations =
        "        location /metrics { healthcheck_status prometheus; }\n".to_string();
    if proxy {
        locations.push_str("        location / { proxy_pass http://u; }\n");
    }
    http_conf_with(port, upstreams, &locations)
}

/// Requests per connection of a kept-connection backend once it has
/// `complete` connections before the current one: every finished
/// connection (all but the last) and the last one.
fn wait_connections(b: &HttpBackend, complete: usize, timeout: Duration) -> Vec<usize> {
    wait_until(
        timeout,
        format!("{} connections at {}", complete + 1, b.addr()),
        || b.requests_per_connection().len() > complete,
    );
    b.requests_per_connection()
}

// ---------------------------------------------------------------------------
// The request

/// Without check_http_*, the check sends `GET /` with the server line's host
/// and port, the module's User-Agent, `Accept: */*` and `Connection: close`;
/// with `port=N` the Host names the port probed.
#[test]
fn default_request_is_get_with_the_host_and_port_of_the_server_line() {
    let b = HttpBackend::start(Reply::status(200));
    let probed = HttpBackend::start(Reply::status(200));
    let port = free_port();
    let _ng = Nginx::start(&http_only(
        port,
        &format!(
            "    upstream u {{ server {}; {CHECK}; }}\n    \
             upstream other {{ server 127.0.0.1:1; {CHECK} port={}; }}\n",
            b.addr(),
            probed.port()
        ),
        false,
    ));
    let s = wait_passing(port, Kind::Http, "u", &b.addr());
    assert_eq!(
        field(&s, Kind::Http, "u", &b.addr(), "http_status"),
        200,
        "{s}"
    );
    wait_passing(port, Kind::Http, "other", "127.0.0.1:1");
    assert_requests(
        &wait_requests(&b, 2),
        &default_request("GET /", &b.addr(), ""),
        "default request",
    );
    assert_requests(
        &wait_requests(&probed, 2),
        &default_request("GET /", &format!("127.0.0.1:{}", probed.port()), ""),
        "default request with port=",
    );
}

/// `check_http_request HEAD /health;` and `check_http_header X-Probe 1;`
/// change the request line and add a header after the defaults; a
/// `check_http_header` named like a default replaces it in its place.
#[test]
fn check_http_request_and_header_shape_the_request() {
    let b = HttpBackend::start(answer(200, &[("Content-Length", "3")], b""));
    let named = HttpBackend::start(Reply::status(200));
    let port = free_port();
    let _ng = Nginx::start(&http_only(
        port,
        &format!(
            "    upstream u {{ server {}; {CHECK};
        check_http_request HEAD /health;
        check_http_header X-Probe 1;
    }}
    upstream named {{ server {}; {CHECK};
        check_http_header Host health.example;
        check_http_header user-agent probe/2;
    }}\n",
            b.addr(),
            named.addr()
        ),
        false,
    ));
    // A HEAD answered with a Content-Length and no body passes at once.
    wait_passing(port, Kind::Http, "u", &b.addr());
    assert_requests(
        &wait_requests(&b, 2),
        &default_request("HEAD /health", &b.addr(), "X-Probe: 1\r\n"),
        "HEAD /health with X-Probe",
    );
    wait_passing(port, Kind::Http, "named", &named.addr());
    assert_requests(
        &wait_requests(&named, 2),
        "GET / HTTP/1.1\r\nHost: health.example\r\nuser-agent: probe/2\r\n\
         Accept: */*\r\nConnection: close\r\n\r\n",
        "Host and User-Agent replaced",
    );
}

/// `check_http_send` is sent exactly as written, `\xHH` decoded.
#[test]
fn check_http_send_is_sent_verbatim() {
    let b = HttpBackend::start(Reply::status(200));
    let port = free_port();
    let _ng = Nginx::start(&http_only(
        port,
        &format!(
            "    upstream u {{ server {}; {CHECK};
        check_http_send \"GET /\\x41 HTTP/1.0\\r\\nHost: raw.example\\r\\nX-Byte: \\x7e\\r\\n\\r\\n\";
    }}\n",
            b.addr()
        ),
        false,
    ));
    wait_passing(port, Kind::Http, "u", &b.addr());
    assert_requests(
        &wait_requests(&b, 2),
        "GET /A HTTP/1.0\r\nHost: raw.example\r\nX-Byte: ~\r\n\r\n",
        "check_http_send",
    );
}

// ---------------------------------------------------------------------------
// Verdicts by status

/// A peer answering 503 goes down with reason `status`: the log line says
/// `HTTP 503`, JSON has `http_status` 503, Prometheus counts it under
/// `reason="status"`; answering 200 again brings it back.
#[test]
fn status_503_takes_the_peer_down_with_reason_status() {
    let b = HttpBackend::start(Reply::status(200));
    let port = free_port();
    let ng = Nginx::start(&http_only(
        port,
        &format!("    upstream u {{ server {}; {CHECK}; }}\n", b.addr()),
        false,
    ));
    let s = wait_passing(port, Kind::Http, "u", &b.addr());
    assert_eq!(field(&s, Kind::Http, "u", &b.addr(), "http_status"), 200);

    let mark = ng.log_mark();
    b.set_reply(Reply::status(503));
    let line = ng.wait_for_log_since(
        mark,
        &format!(
            "upstream u peer {} is down after 2 failures: HTTP 503 (http http check)",
            b.addr()
        ),
        WAIT,
    );
    assert!(line.contains("[warn]"), "{line}");
    let s = wait_failing(port, Kind::Http, "u", &b.addr(), "status");
    assert_eq!(
        field(&s, Kind::Http, "u", &b.addr(), "http_status"),
        503,
        "{s}"
    );
    assert!(s.int(Kind::Http, "u", &b.addr(), "fails_total") >= 2, "{s}");

    let page = http_get(port, "/metrics").expect("GET /metrics").text();
    promtool_check(&page, "/metrics");
    let status_failures: Vec<f64> = parse_prom(&page)
        .iter()
        .filter(|x| {
            x.name == "nginx_upstream_server_check_failures_total"
                && x.label("name") == Some(b.addr().as_str())
                && x.label("reason") == Some("status")
        })
        .map(|x| x.value.parse().unwrap())
        .collect();
    assert_eq!(status_failures.len(), 1, "{page}");
    assert!(status_failures[0] >= 2.0, "{page}");

    let mark = ng.log_mark();
    b.set_reply(Reply::status(200));
    ng.wait_for_log_since(
        mark,
        &format!(
            "upstream u peer {} is up after 1 successes (http http check)",
            b.addr()
        ),
        WAIT,
    );
    let s = wait_passing(port, Kind::Http, "u", &b.addr());
    assert_eq!(field(&s, Kind::Http, "u", &b.addr(), "http_status"), 200);
}

/// `check_http_expect_alive http_4xx;` makes a 404 up and a 200 down.
#[test]
fn expect_alive_http_4xx_makes_a_404_up() {
    let b = HttpBackend::start(Reply::status(404));
    let port = free_port();
    let _ng = Nginx::start(&http_only(
        port,
        &format!(
            "    upstream u {{ server {}; {CHECK}; check_http_expect_alive http_4xx; }}\n",
            b.addr()
        ),
        false,
    ));
    let s = wait_passing(port, Kind::Http, "u", &b.addr());
    assert_eq!(field(&s, Kind::Http, "u", &b.addr(), "http_status"), 404);
    assert_eq!(s.int(Kind::Http, "u", &b.addr(), "fails_total"), 0, "{s}");
    b.set_reply(Reply::status(200));
    let s = wait_failing(port, Kind::Http, "u", &b.addr(), "status");
    assert_eq!(field(&s, Kind::Http, "u", &b.addr(), "http_status"), 200);
}

/// `status` tests: a list, a range and a negation each pass and fail as
/// written; a failing `status` test is reason `status`. With a block, the
/// block decides alone: `status ! 500` accepts a 404.
#[test]
fn match_status_list_range_and_negation() {
    let cases = [
        ("list", "status 200 204;", 204, 206),
        ("range", "status 200-399;", 302, 404),
        ("negation", "status ! 500;", 404, 500),
    ];
    let backends: Vec<HttpBackend> = cases
        .iter()
        .map(|&(_, _, pass, _)| HttpBackend::start(Reply::status(pass)))
        .collect();
    let mut conf = String::new();
    for ((name, test, _, _), b) in cases.iter().zip(&backends) {
        conf.push_str(&format!(
            "    check_match {name} {{ {test} }}\n    \
             upstream {name} {{ server {}; {CHECK} match={name}; }}\n",
            b.addr()
        ));
    }
    let port = free_port();
    let _ng = Nginx::start(&http_only(port, &conf, false));
    for ((name, _, pass, _), b) in cases.iter().zip(&backends) {
        let s = wait_passing(port, Kind::Http, name, &b.addr());
        assert_eq!(field(&s, Kind::Http, name, &b.addr(), "http_status"), *pass);
    }
    for ((_, _, _, fail), b) in cases.iter().zip(&backends) {
        b.set_reply(Reply::status(*fail));
    }
    for ((name, _, _, fail), b) in cases.iter().zip(&backends) {
        let s = wait_failing(port, Kind::Http, name, &b.addr(), "status");
        assert_eq!(field(&s, Kind::Http, name, &b.addr(), "http_status"), *fail);
    }
}

// ---------------------------------------------------------------------------
// Verdicts by header and body

/// `header` tests (presence, absence, `=`, `!=`, `~`, `~*`; names in any
/// case) pass on the right response and fail with reason `mismatch`.
#[test]
fn match_headers() {
    type Headers = &'static [(&'static str, &'static str)];
    let cases: [(&str, &str, Headers, Headers); 6] = [
        ("present", "header X-Ready;", &[("x-ready", "1")], &[]),
        (
            "absent",
            "header ! X-Maintenance;",
            &[("X-Other", "1")],
            &[("X-Maintenance", "on")],
        ),
        (
            "equal",
            "header X-Role = primary;",
            &[("X-Role", "primary")],
            &[("X-Role", "primary-old")],
        ),
        (
            "not_equal",
            "header X-Role != replica;",
            &[("X-Role", "primary")],
            &[("X-Role", "replica")],
        ),
        (
            "regex",
            "header Server ~ \"^myapp/[0-9]+$\";",
            &[("Server", "myapp/42")],
            &[("Server", "myapp/dev")],
        ),
        (
            "caseless",
            "header Content-Type ~* \"^application/json\";",
            &[("Content-Type", "Application/JSON; charset=utf-8")],
            &[("Content-Type", "text/html")],
        ),
    ];
    let backends: Vec<HttpBackend> = cases
        .iter()
        .map(|(_, _, pass, _)| HttpBackend::start(answer(200, pass, b"ok\n")))
        .collect();
    let mut conf = String::new();
    for ((name, test, _, _), b) in cases.iter().zip(&backends) {
        conf.push_str(&format!(
            "    check_match {name} {{ {test} }}\n    \
             upstream {name} {{ server {}; {CHECK} match={name}; }}\n",
            b.addr()
        ));
    }
    let port = free_port();
    let _ng = Nginx::start(&http_only(port, &conf, false));
    for ((name, _, _, _), b) in cases.iter().zip(&backends) {
        wait_passing(port, Kind::Http, name, &b.addr());
    }
    for ((_, _, _, fail), b) in cases.iter().zip(&backends) {
        b.set_reply(answer(200, fail, b"ok\n"));
    }
    for ((name, _, _, _), b) in cases.iter().zip(&backends) {
        let s = wait_failing(port, Kind::Http, name, &b.addr(), "mismatch");
        // The status was fine: only the header test failed.
        assert_eq!(field(&s, Kind::Http, name, &b.addr(), "http_status"), 200);
    }
}

/// `body ~` and `body !~` see the decoded body of a chunked response: the
/// expression matches across a chunk boundary, where the raw bytes have a
/// chunk-size line in between.
#[test]
fn match_body_regex_on_a_chunked_body() {
    let ok = HttpBackend::start(chunked(&[b"stat", b"us: ", b"ok\n"]));
    let clean = HttpBackend::start(chunked(&[b"all ", b"good\n"]));
    let port = free_port();
    let _ng = Nginx::start(&http_only(
        port,
        &format!(
            "    check_match body_ok {{ body ~ \"status: *ok\"; }}
    check_match no_error {{ body !~ \"err+or\"; }}
    upstream ok {{ server {}; {CHECK} match=body_ok; }}
    upstream clean {{ server {}; {CHECK} match=no_error; }}\n",
            ok.addr(),
            clean.addr()
        ),
        false,
    ));
    wait_passing(port, Kind::Http, "ok", &ok.addr());
    wait_passing(port, Kind::Http, "clean", &clean.addr());
    ok.set_reply(chunked(&[b"stat", b"us: ", b"degraded\n"]));
    clean.set_reply(chunked(&[b"fatal er", b"ror\n"]));
    wait_failing(port, Kind::Http, "ok", &ok.addr(), "mismatch");
    wait_failing(port, Kind::Http, "clean", &clean.addr(), "mismatch");
}

// ---------------------------------------------------------------------------
// Peers that do not answer, or answer badly

/// A peer that accepts and never answers: a TCP check calls it up (the
/// the first limit of docs/operations.md), an http check times out.
#[test]
fn a_peer_that_accepts_and_hangs_times_out() {
    let b = HttpBackend::start(Reply::Hang);
    let port = free_port();
    let _ng = Nginx::start(&http_only(
        port,
        &format!(
            "    upstream u {{ server {b}; {CHECK}; }}
    upstream tcp_view {{ server {b}; check interval=200 rise=1 fall=2 type=tcp; }}\n",
            b = b.addr()
        ),
        false,
    ));
    let s = wait_failing(port, Kind::Http, "u", &b.addr(), "timeout");
    assert!(
        field(&s, Kind::Http, "u", &b.addr(), "http_status").is_null(),
        "no response, no status: {s}"
    );
    // The same peer under a tcp check (tcp_view is an http upstream too).
    let s = wait_passing(port, Kind::Http, "tcp_view", &b.addr());
    assert_eq!(
        s.int(Kind::Http, "tcp_view", &b.addr(), "fails_total"),
        0,
        "{s}"
    );
}

/// One hostile peer next to a healthy one in upstream `u` (proxied at `/`):
/// the hostile peer goes down with `why`, the healthy one stays up and takes
/// every proxied request. `blocks` go into `http {}`, `extra` after the
/// check line (e.g. ` match=NAME`), `more` are further upstreams.
struct Hostile {
    _ng: Nginx,
    port: u16,
    healthy: HttpBackend,
    hostile: HttpBackend,
}

impl Hostile {
    fn start(reply: Reply, blocks: &str, extra: &str, more: &str) -> Hostile {
        let healthy = HttpBackend::start(healthy_reply());
        let hostile = HttpBackend::start(reply);
        let port = free_port();
        let ng = Nginx::start(&http_only(
            port,
            &format!(
                "{blocks}\n    upstream u {{ server {}; server {}; {CHECK}{extra}; }}\n{more}",
                healthy.addr(),
                hostile.addr()
            ),
            true,
        ));
        Hostile {
            _ng: ng,
            port,
            healthy,
            hostile,
        }
    }

    /// The hostile peer down with `why`, the healthy one up, proxied
    /// traffic all on the healthy one while it stays up.
    fn assert_story(&self, why: &str) -> Status {
        let s = wait_failing(self.port, Kind::Http, "u", &self.hostile.addr(), why);
        wait_passing(self.port, Kind::Http, "u", &self.healthy.addr());
        assert_proxied_to_healthy(self.port, 20);
        assert_holds(
            Duration::from_secs(1),
            "the healthy peer up and the hostile one down",
            || {
                let s = status_json(self.port).expect("status");
                s.is_up(Kind::Http, "u", &self.healthy.addr())
                    && s.is_down(Kind::Http, "u", &self.hostile.addr())
            },
        );
        assert_proxied_to_healthy(self.port, 5);
        s
    }
}

/// Headers that never end: `invalid` once they exceed check_buffer_size.
#[test]
fn endless_headers_are_invalid() {
    let mut pad = b"X-Pad: ".to_vec();
    pad.extend_from_slice(&[b'a'; 1000]);
    pad.extend_from_slice(b"\r\n");
    let h = Hostile::start(
        Reply::Endless {
            head: b"HTTP/1.1 200 OK\r\n".to_vec(),
            repeat: pad,
        },
        "",
        "",
        "",
    );
    h.assert_story("invalid");
}

/// A chunked body that never ends, with a `body` test: we assert
/// `mismatch`, not `timeout`. A `body` test sees the first
/// check_buffer_size bytes of the decoded body, and the round ends as soon
/// as those have arrived (docs/directives.md, type=http: "The round ends as soon as the verdict is known"): 16 KB of filler come in well before the 180 ms
/// deadline, and they do not contain what the test looks for. Waiting for
/// the body's end instead would be `timeout`, and would let any backend
/// hold a check for its whole budget. The framing is valid, so it is not
/// `invalid` either.
#[test]
fn endless_chunked_body_with_a_body_test_is_a_mismatch() {
    let mut chunk = b"400\r\n".to_vec();
    chunk.extend_from_slice(&[b'x'; 0x400]);
    chunk.extend_from_slice(b"\r\n");
    let h = Hostile::start(
        Reply::Endless {
            head: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
            repeat: chunk,
        },
        "    check_match ready { body ~ \"ready\"; }",
        " match=ready",
        "",
    );
    h.assert_story("mismatch");
}

/// A chunk size of 20 hex digits (more than any 64-bit length): `invalid`.
#[test]
fn absurd_chunk_size_is_invalid() {
    let h = Hostile::start(
        raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFFFF\r\nxx"),
        "",
        "",
        "",
    );
    h.assert_story("invalid");
}

/// Two different Content-Length values: `invalid`.
#[test]
fn conflicting_content_length_is_invalid() {
    let h = Hostile::start(
        raw(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok"),
        "",
        "",
        "",
    );
    h.assert_story("invalid");
}

/// Nine interim (1xx) responses before the final one: `invalid`; eight are
/// skipped and the final 200 counts (upstream `eight`).
#[test]
fn nine_interim_responses_are_invalid() {
    let interim = |n: usize| {
        let mut out = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(n);
        out.extend_from_slice(&response(200, &[], b"ok"));
        out
    };
    let eight = HttpBackend::start(raw(&interim(8)));
    let h = Hostile::start(
        raw(&interim(9)),
        "",
        "",
        &format!(
            "    upstream eight {{ server {}; {CHECK}; }}\n",
            eight.addr()
        ),
    );
    h.assert_story("invalid");
    let s = wait_passing(h.port, Kind::Http, "eight", &eight.addr());
    assert_eq!(
        field(&s, Kind::Http, "eight", &eight.addr(), "http_status"),
        200
    );
}

/// A NUL byte in a header value: `invalid`.
#[test]
fn nul_in_a_header_is_invalid() {
    let h = Hostile::start(
        raw(b"HTTP/1.1 200 OK\r\nX-Bad: a\0b\r\nContent-Length: 2\r\n\r\nok"),
        "",
        "",
        "",
    );
    h.assert_story("invalid");
}

/// An HTTP/0.9 answer (a body without a status line, then close):
/// `invalid`, not `closed`.
#[test]
fn http_09_answer_is_invalid() {
    let h = Hostile::start(Reply::raw_close(b"<html>ok</html>\n"), "", "", "");
    h.assert_story("invalid");
}

/// An `HTTP/2.0` status line: `invalid`.
#[test]
fn http_2_status_line_is_invalid() {
    let h = Hostile::start(
        raw(b"HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        "",
        "",
        "",
    );
    h.assert_story("invalid");
}

/// A prompt head, then a body trickling in pieces that each arrive well
/// within the timeout but add up to more: `timeout` (the budget is the
/// round's, not per read). A body test makes the check wait for the body.
#[test]
fn trickling_body_slower_than_the_timeout_times_out() {
    let mut body = vec![b'.'; 124];
    body.extend_from_slice(b"done");
    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
    let h = Hostile::start(
        Reply::SlowBody {
            head: head.into_bytes(),
            body,
            piece: 8,
            // 16 pieces 40 ms apart: 640 ms against a 180 ms budget.
            gap: Duration::from_millis(40),
            close: false,
        },
        "    check_match done { body ~ \"done\"; }",
        " match=done",
        "",
    );
    h.assert_story("timeout");
}

/// A 20 MB body on a kept connection (`reuse=on`): the status decides
/// (up) as soon as the head is in. The rest is read within the round's
/// timeout (docs/directives.md, type=http: kept connections), and a response not complete by then
/// is never reused: upstream `slow` sends its 20 MB in 64 KB pieces 5 ms
/// apart (1.6 s against a 180 ms budget), so each of its connections
/// carries one round. Upstream `fast` sends the 20 MB at once; whether
/// loopback delivers it within the budget (then the connection is kept)
/// depends on the machine, so only what holds either way is asserted: up,
/// no failed round, at most check_keepalive_requests rounds per connection.
#[test]
fn twenty_mb_body_is_up_and_an_unfinished_one_is_not_reused() {
    const MB20: usize = 20 << 20;
    let slow = HttpBackend::start(Reply::SlowBody {
        head: format!("HTTP/1.1 200 OK\r\nContent-Length: {MB20}\r\n\r\n").into_bytes(),
        body: vec![b'x'; MB20],
        piece: 64 << 10,
        gap: Duration::from_millis(5),
        close: false,
    });
    let fast = HttpBackend::start(answer(200, &[], &vec![b'x'; MB20]));
    let port = free_port();
    let _ng = Nginx::start(&http_only(
        port,
        &format!(
            "    upstream slow {{ server {}; {CHECK} reuse=on; }}
    upstream fast {{ server {}; {CHECK} reuse=on; }}\n",
            slow.addr(),
            fast.addr()
        ),
        false,
    ));
    wait_passing(port, Kind::Http, "slow", &slow.addr());
    let per = wait_connections(&slow, 5, WAIT);
    assert!(
        per.iter().all(|&n| n <= 1),
        "a connection whose response was not complete was reused: {per:?}"
    );
    assert!(per.iter().filter(|&&n| n == 1).count() >= 5, "{per:?}");
    let s = wait_passing(port, Kind::Http, "fast", &fast.addr());
    assert!(
        fast.requests_per_connection().iter().all(|&n| n <= 10),
        "{:?}",
        fast.requests_per_connection()
    );
    for (u, b) in [("slow", &slow), ("fast", &fast)] {
        assert!(s.is_up(Kind::Http, u, &b.addr()), "{s}");
        assert_eq!(field(&s, Kind::Http, u, &b.addr(), "http_status"), 200);
        assert_eq!(
            s.int(Kind::Http, u, &b.addr(), "fails_total"),
            0,
            "{u}: {s}"
        );
    }
}

// ---------------------------------------------------------------------------
// Kept connections

/// `reuse=on`: a connection serves `check_keepalive_requests` rounds (3
/// here, 10 by default), every request saying `Connection: keep-alive`.
#[test]
fn reuse_on_serves_check_keepalive_requests_rounds_per_connection() {
    let three = HttpBackend::start(Reply::status(200));
    let ten = HttpBackend::start(Reply::status(200));
    let port = free_port();
    let _ng = Nginx::start(&http_only(
        port,
        &format!(
            "    upstream three {{ server {}; check interval=100 rise=1 fall=2 type=http reuse=on;
        check_keepalive_requests 3; }}
    upstream ten {{ server {}; check interval=100 rise=1 fall=2 type=http reuse=on; }}\n",
            three.addr(),
            ten.addr()
        ),
        false,
    ));
    let per = wait_connections(&three, 4, WAIT);
    let (done, current) = per.split_at(per.len() - 1);
    assert!(
        done.iter().all(|&n| n == 3),
        "requests per connection: {per:?}"
    );
    assert!(current[0] <= 3, "{per:?}");
    let want = format!(
        "GET / HTTP/1.1\r\nHost: {}\r\nUser-Agent: {UA}\r\nAccept: */*\r\n\
         Connection: keep-alive\r\n\r\n",
        three.addr()
    );
    assert_requests(&three.requests(), &want, "reuse=on request");

    let per = wait_connections(&ten, 2, LONG);
    let (done, _) = per.split_at(per.len() - 1);
    assert!(
        done.iter().all(|&n| n == 10),
        "requests per connection: {per:?}"
    );

    let s = status_json(port).unwrap();
    for (u, b) in [("three", &three), ("ten", &ten)] {
        assert!(passing(&s, Kind::Http, u, &b.addr()), "{s}");
        assert_eq!(s.int(Kind::Http, u, &b.addr(), "fails_total"), 0, "{s}");
    }
}

/// A HEAD answered with `Content-Length: 5000` and no body on a kept
/// connection: the check does not wait for a body, stays up without a
/// single failure, and reuses the connection.
#[test]
fn head_with_content_length_on_a_kept_connection_is_reused() {
    let b = HttpBackend::start(answer(200, &[("Content-Length", "5000")], b""));
    let port = free_port();
    let _ng = Nginx::start(&http_only(
        port,
        &format!(
            "    upstream u {{ server {}; check interval=100 rise=1 fall=2 type=http reuse=on;
        check_http_request HEAD /; check_keepalive_requests 4; }}\n",
            b.addr()
        ),
        false,
    ));
    let per = wait_connections(&b, 3, WAIT);
    let (done, _) = per.split_at(per.len() - 1);
    assert!(
        done.iter().all(|&n| n == 4),
        "requests per connection: {per:?}"
    );
    let s = status_json(port).unwrap();
    assert!(passing(&s, Kind::Http, "u", &b.addr()), "{s}");
    assert_eq!(s.int(Kind::Http, "u", &b.addr(), "fails_total"), 0, "{s}");
    assert!(b
        .requests()
        .iter()
        .all(|r| r.starts_with(b"HEAD / HTTP/1.1\r\n")));
}

// ---------------------------------------------------------------------------
// Stream upstreams

/// A stream upstream with `type=http` and a `check_match` block of
/// `stream {}`: up while the peer answers 200, down with `status` on 503
/// (the log line says `stream http check`), proxying meanwhile.
#[test]
fn stream_upstream_with_an_http_check() {
    let b = HttpBackend::start(Reply::Raw {
        bytes: response(200, &[("Connection", "close")], b"pong\n"),
        close: true,
    });
    let (port, sport) = (free_port(), free_port());
    let ng = Nginx::start(&format!(
        "{}
stream {{
    check_match alive {{ status 200; header Content-Length; }}
    upstream s {{ server {}; {CHECK} match=alive; check_http_request GET /ping; }}
    server {{ listen 127.0.0.1:{sport}; proxy_pass s; }}
}}",
        status_server(port),
        b.addr()
    ));
    let s = wait_passing(port, Kind::Stream, "s", &b.addr());
    assert_eq!(field(&s, Kind::Stream, "s", &b.addr(), "http_status"), 200);
    assert!(wait_requests(&b, 1)[0].starts_with(b"GET /ping HTTP/1.1\r\n"));
    let got = stream_roundtrip(sport, b"GET / HTTP/1.0\r\n\r\n").expect("proxied stream");
    assert!(lossy(&got).ends_with("pong\n"), "{}", lossy(&got));

    let mark = ng.log_mark();
    b.set_reply(Reply::Raw {
        bytes: response(503, &[("Connection", "close")], b"busy\n"),
        close: true,
    });
    ng.wait_for_log_since(
        mark,
        &format!(
            "upstream s peer {} is down after 2 failures: HTTP 503 (stream http check)",
            b.addr()
        ),
        WAIT,
    );
    let s = wait_failing(port, Kind::Stream, "s", &b.addr(), "status");
    assert_eq!(field(&s, Kind::Stream, "s", &b.addr(), "http_status"), 503);
}

// ---------------------------------------------------------------------------
// tcp checks with send / expect

/// A line server: each line received (through `\n`) is recorded and
/// answered with the reply in force; with `close` the server then closes
/// its side.
struct LineServer {
    addr: SocketAddr,
    shared: Arc<LineShared>,
    accept: Option<JoinHandle<()>>,
}

struct LineShared {
    reply: Mutex<(Vec<u8>, bool)>,
    lines: Mutex<Vec<Vec<u8>>>,
    stop: AtomicBool,
    open: Mutex<Vec<TcpStream>>,
}

impl LineServer {
    fn start(reply: &[u8], close: bool) -> LineServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a line server");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(LineShared {
            reply: Mutex::new((reply.to_vec(), close)),
            lines: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
        });
        let s = Arc::clone(&shared);
        let accept = thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                if let Ok(c) = conn.try_clone() {
                    s.open.lock().unwrap().push(c);
                }
                let s = Arc::clone(&s);
                thread::spawn(move || {
                    let _ = serve_lines(conn, &s);
                });
            }
        });
        LineServer {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    fn addr(&self) -> String {
        self.addr.to_string()
    }

    fn set_reply(&self, reply: &[u8], close: bool) {
        *self.shared.reply.lock().unwrap() = (reply.to_vec(), close);
    }

    fn lines(&self) -> Vec<Vec<u8>> {
        self.shared.lines.lock().unwrap().clone()
    }
}

fn serve_lines(mut conn: TcpStream, s: &LineShared) -> io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut pending = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        pending.extend_from_slice(&buf[..n]);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            s.lines.lock().unwrap().push(line);
            let (reply, close) = s.reply.lock().unwrap().clone();
            conn.write_all(&reply)?;
            if close {
                conn.shutdown(Shutdown::Write)?;
                // Read to the peer's close, so closing sends no RST.
                while conn.read(&mut buf)? > 0 {}
                return Ok(());
            }
        }
    }
}

impl Drop for LineServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for c in self.shared.open.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

/// `send "PING\r\n"; expect "+PONG";` on a tcp check: up while the server
/// answers `+PONG`; `-ERR` can no longer start with `+PONG`, so the round
/// fails with `mismatch` at once, although the server keeps the connection
/// open (not `timeout`).
#[test]
fn tcp_send_expect_prefix() {
    let srv = LineServer::start(b"+PONG\r\n", false);
    let (port, sport) = (free_port(), free_port());
    let _ng = Nginx::start(&format!(
        "{}
stream {{
    check_match redis {{ send \"PING\\r\\n\"; expect \"+PONG\"; }}
    upstream redis {{ server {}; check interval=200 timeout=180 rise=1 fall=2 type=tcp match=redis; }}
    server {{ listen 127.0.0.1:{sport}; proxy_pass redis; }}
}}",
        status_server(port),
        srv.addr()
    ));
    wait_passing(port, Kind::Stream, "redis", &srv.addr());
    let lines = srv.lines();
    assert!(lines.len() >= 2, "{lines:?}");
    assert!(lines.iter().all(|l| l == b"PING\r\n"), "{lines:?}");
    srv.set_reply(b"-ERR unknown command\r\n", false);
    let s = wait_failing(port, Kind::Stream, "redis", &srv.addr(), "mismatch");
    assert!(
        s.int(Kind::Stream, "redis", &srv.addr(), "fails_total") >= 2,
        "{s}"
    );
}

/// `expect ~ "^\+PONG"` (a regex) in an http upstream's tcp check: up on
/// `+PONG`. A regex cannot tell "no match yet" from "never": an answer
/// that outgrows `check_buffer_size` (1k here) without matching is
/// `invalid`, and a wrong answer after which the server closes is `closed`
/// (docs/directives.md, check_match: "the server closes first").
#[test]
fn tcp_send_expect_regex() {
    let srv = LineServer::start(b"+PONG\r\n", true);
    let port = free_port();
    let _ng = Nginx::start(&http_only(
        port,
        &format!(
            "    check_match pong {{ send \"PING\\x0d\\x0a\"; expect ~ \"^\\+PONG\"; }}
    upstream redis {{ server {}; check interval=200 timeout=180 rise=1 fall=2 type=tcp match=pong;
        check_buffer_size 1k; }}\n",
            srv.addr()
        ),
        false,
    ));
    wait_passing(port, Kind::Http, "redis", &srv.addr());
    assert!(
        srv.lines().iter().all(|l| l == b"PING\r\n"),
        "{:?}",
        srv.lines()
    );
    srv.set_reply(&[b'-'; 2048], false);
    wait_failing(port, Kind::Http, "redis", &srv.addr(), "invalid");
    srv.set_reply(b"-PONG\r\n", true);
    wait_failing(port, Kind::Http, "redis", &srv.addr(), "closed");
    srv.set_reply(b"+PONG\r\n", true);
    wait_passing(port, Kind::Http, "redis", &srv.addr());
}

// ---------------------------------------------------------------------------
// udp checks with send / expect

/// The stream upstreams of the udp tests: `pong` sends `PING` and expects
/// `PONG`; `bare` only expects (the payload stays `NGX_UDP_CHECKER`).
fn udp_conf(port: u16, upstreams: &str) -> String {
    format!(
        "{}
stream {{
    check_match pong {{ send \"PING\"; expect \"PONG\"; }}
    check_match bare {{ expect \"PONG\"; }}
{upstreams}
}}",
        status_server(port)
    )
}

const UDP_CHECK: &str = "check type=udp interval=200 timeout=150 rise=1 fall=2";

/// An answering peer is up; `send` replaces the `NGX_UDP_CHECKER` payload,
/// and without `send` the payload is the usual one.
#[test]
fn udp_expect_with_a_matching_reply_is_up_and_send_sets_the_payload() {
    let b = UdpBackend::start();
    b.set_answer(Some(b"PONG"));
    let bare = UdpBackend::start();
    bare.set_answer(Some(b"PONG and more"));
    let port = free_port();
    let _ng = Nginx::start(&udp_conf(
        port,
        &format!(
            "    upstream u {{ server {}; {UDP_CHECK} default_down=true match=pong; }}
    upstream bare {{ server {}; {UDP_CHECK} default_down=true match=bare; }}",
            b.addr(),
            bare.addr()
        ),
    ));
    let s = wait_passing(port, Kind::Stream, "u", &b.addr());
    assert_eq!(s.int(Kind::Stream, "u", &b.addr(), "fails_total"), 0, "{s}");
    let payloads = b.payloads();
    assert!(payloads.len() >= 2, "{payloads:?}");
    assert!(payloads.iter().all(|p| p == b"PING"), "{payloads:?}");
    wait_passing(port, Kind::Stream, "bare", &bare.addr());
    assert!(
        bare.payloads().iter().all(|p| p == b"NGX_UDP_CHECKER"),
        "{:?}",
        bare.payloads()
    );
}

/// With `expect`, silence is no longer success: a peer that stops
/// answering goes down with `timeout`.
#[test]
fn udp_expect_and_a_silent_peer_times_out() {
    let b = UdpBackend::start();
    b.set_answer(Some(b"PONG"));
    let port = free_port();
    let _ng = Nginx::start(&udp_conf(
        port,
        &format!(
            "    upstream u {{ server {}; {UDP_CHECK} match=pong; }}",
            b.addr()
        ),
    ));
    wait_passing(port, Kind::Stream, "u", &b.addr());
    b.set_mode(UdpMode::Silent);
    wait_failing(port, Kind::Stream, "u", &b.addr(), "timeout");
}

/// A reply that does not start with `PONG` is `mismatch`; a closed port
/// (ICMP unreachable) is `icmp-unreachable`; `PONG` again brings it back.
#[test]
fn udp_expect_and_a_wrong_reply_is_a_mismatch() {
    let b = UdpBackend::start();
    b.set_answer(Some(b"PONG"));
    let port = free_port();
    let _ng = Nginx::start(&udp_conf(
        port,
        &format!(
            "    upstream u {{ server {}; {UDP_CHECK} match=pong; }}",
            b.addr()
        ),
    ));
    wait_passing(port, Kind::Stream, "u", &b.addr());
    b.set_answer(Some(b"PANG"));
    wait_failing(port, Kind::Stream, "u", &b.addr(), "mismatch");
    b.set_mode(UdpMode::Closed);
    wait_failing(port, Kind::Stream, "u", &b.addr(), "icmp-unreachable");
    b.set_mode(UdpMode::Reply);
    b.set_answer(Some(b"PONG"));
    wait_passing(port, Kind::Stream, "u", &b.addr());
}

// ---------------------------------------------------------------------------
// Resources

/// 50 rounds against a peer answering an invalid status line (even with
/// `reuse=on`) leave the worker's descriptors where they were, and no
/// connection carries a second round.
#[test]
fn fd_count_stays_flat_over_50_rounds_of_an_invalid_peer() {
    let b = HttpBackend::start(raw(b"HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok"));
    let port = free_port();
    let ng = Nginx::start(&http_only(
        port,
        &format!(
            "    upstream u {{ server {}; check interval=100 rise=1 fall=1 type=http reuse=on; }}\n",
            b.addr()
        ),
        false,
    ));
    let s = poll_status_json(port, WAIT, "a few invalid rounds", |s| {
        failing(s, Kind::Http, "u", &b.addr(), "invalid")
            && s.checks(Kind::Http, "u", &b.addr()) >= 3
    });
    let pid = ng.workers()[0];
    let before = resting_fds(pid);
    let start = s.checks(Kind::Http, "u", &b.addr());
    poll_status_json(port, LONG, "50 more rounds", |s| {
        s.checks(Kind::Http, "u", &b.addr()) >= start + 50
    });
    let after = resting_fds(pid);
    assert!(
        after <= before + 1,
        "worker {pid}: {before} descriptors before 50 invalid rounds, {after} after"
    );
    let per = b.requests_per_connection();
    assert!(per.len() >= 50, "{} connections for 50 rounds", per.len());
    assert!(
        per.iter().all(|&n| n <= 1),
        "an invalid answer's connection was reused: {per:?}"
    );
    let s = status_json(port).unwrap();
    assert!(failing(&s, Kind::Http, "u", &b.addr(), "invalid"), "{s}");
    assert_eq!(ng.workers(), vec![pid], "the worker changed");
}

/// The worker's resident memory, in KiB (`VmRSS` of /proc/PID/status).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Peers that send endless headers, an endless chunked body to a body test
/// and a 20 MB body cost each round at most `check_buffer_size` of head and
/// of body: 50 rounds of each leave the worker's resident memory within
/// 2 MiB of where it was after the first rounds (the parser holds a bounded
/// amount; what it does not keep is counted, not stored).
#[test]
fn worker_memory_stays_flat_against_endless_and_huge_responses() {
    let endless = HttpBackend::start(Reply::Endless {
        head: b"HTTP/1.1 200 OK\r\n".to_vec(),
        repeat: b"X-Filler: yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\r\n".to_vec(),
    });
    let chunked = HttpBackend::start(Reply::Endless {
        head: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
        repeat: b"40\r\nzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz\r\n"
            .to_vec(),
    });
    let huge = HttpBackend::start(answer(200, &[], &vec![b'h'; 20 << 20]));
    let port = free_port();
    let ng = Nginx::start(&http_only(
        port,
        &format!(
            "    check_match needs_body {{ body ~ \"never-there\"; }}\n\
             upstream e {{ server {}; check interval=100 timeout=80 rise=1 fall=1 type=http; }}\n\
             upstream c {{ server {}; check interval=100 timeout=80 rise=1 fall=1 type=http match=needs_body; }}\n\
             upstream h {{ server {}; check interval=100 timeout=80 rise=1 fall=1 type=http reuse=on; }}\n",
            endless.addr(),
            chunked.addr(),
            huge.addr()
        ),
        false,
    ));
    let rounds = |s: &Status| {
        [("e", &endless), ("c", &chunked), ("h", &huge)]
            .iter()
            .map(|(u, b)| s.checks(Kind::Http, u, &b.addr()))
            .min()
            .unwrap_or(0)
    };
    let s = poll_status_json(port, WAIT, "a few rounds of each", |s| rounds(s) >= 5);
    let pid = ng.workers()[0];
    let before = rss_kib(pid);
    let start = rounds(&s);
    poll_status_json(port, LONG, "50 more rounds of each", |s| {
        rounds(s) >= start + 50
    });
    let after = rss_kib(pid);
    assert!(
        after <= before + 2048,
        "worker {pid}: {before} KiB resident before 50 rounds of each, {after} KiB after"
    );
    let s = status_json(port).unwrap();
    assert!(
        failing(&s, Kind::Http, "e", &endless.addr(), "invalid"),
        "{s}"
    );
    assert_eq!(ng.workers(), vec![pid], "the worker changed");
}
