//! gRPC and HTTP/2 checks (docs/directives.md, type=grpc and type=grpcs;
//! check_http_version) against real servers: a grpcio server with the
//! standard Health service whose statuses the test switches (plain and
//! over TLS, t/src/grpc.rs), and nginx itself as an HTTP/2 server
//! (`http2 on;`, plain and TLS). Proxied gRPC calls go through
//! `grpc_pass` to a checked upstream. The hostile HTTP/2 servers are in
//! grpc_hostile.rs.

use std::time::Duration;

use healthcheck_t::grpc::{self, GrpcServer, Health};
use healthcheck_t::tls::{Pki, SERVER_NAME};
use healthcheck_t::{free_port, poll_status_json, resting_fds, Builder, Kind, Nginx, Status};

const WAIT: Duration = Duration::from_secs(15);

/// nginx with `upstreams` in http, the JSON status page on the returned
/// port, and `extra` (more http servers) beside them.
fn start(upstreams: &str, extra: &str) -> (Nginx, u16) {
    let port = free_port();
    let body = format!(
        "http {{
{upstreams}
    server {{ listen 127.0.0.1:{port}; location /status {{ healthcheck_status json; }} }}
{extra}
}}"
    );
    (Builder::default().start(&body), port)
}

fn wait(port: u16, what: &str, pred: impl FnMut(&Status) -> bool) -> Status {
    poll_status_json(port, WAIT, what, pred)
}

fn grpc_status(s: &Status, ups: &str, name: &str) -> Option<u64> {
    s.row(Kind::Http, ups, name)["grpc_status"].as_u64()
}

#[test]
fn up_and_down_follow_the_served_status_and_the_log_names_it() {
    let mut flaky = GrpcServer::start(Health::Served);
    let steady = GrpcServer::start(Health::Served);
    let (a, b) = (flaky.addr(), steady.addr());
    let (ng, port) = start(
        &format!(
            "    upstream g {{ server {a}; server {b};
        check type=grpc interval=200 rise=1 fall=2 timeout=1000; }}"
        ),
        "",
    );
    let s = wait(port, "both up", |s| {
        s.is_up(Kind::Http, "g", &a)
            && s.is_up(Kind::Http, "g", &b)
            && s.checks(Kind::Http, "g", &a) >= 2
    });
    assert_eq!(grpc_status(&s, "g", &a), Some(0));
    assert_eq!(s.row(Kind::Http, "g", &a)["http_status"], 200);
    flaky.set("", "NOT_SERVING");
    let s = wait(port, "NOT_SERVING down", |s| s.is_down(Kind::Http, "g", &a));
    assert_eq!(s.reason(Kind::Http, "g", &a), Some("status"));
    assert!(
        s.is_up(Kind::Http, "g", &b),
        "the healthy peer stays up: {s}"
    );
    ng.wait_for_log(
        &format!(
            "upstream g peer {a} is down after 2 failures: gRPC NOT_SERVING (http grpc check)"
        ),
        WAIT,
    );
    flaky.set("", "SERVING");
    wait(port, "up again", |s| s.is_up(Kind::Http, "g", &a));
    ng.wait_for_log(
        &format!("upstream g peer {a} is up after 1 successes"),
        WAIT,
    );
}

#[test]
fn the_service_is_asked_for_and_an_unknown_one_is_status() {
    let mut srv = GrpcServer::start(Health::Served);
    srv.set("shop.Cart", "SERVING");
    let addr = srv.addr();
    let (ng, port) = start(
        &format!(
            "    upstream cart {{ server {addr}; check type=grpc interval=200 rise=1 fall=1;
        check_grpc_service shop.Cart; }}
    upstream nope {{ server {addr}; check type=grpc interval=200 rise=1 fall=1;
        check_grpc_service shop.Nope; }}"
        ),
        "",
    );
    let s = wait(port, "cart up, nope down", |s| {
        s.is_up(Kind::Http, "cart", &addr)
            && s.checks(Kind::Http, "cart", &addr) >= 2
            && s.is_down(Kind::Http, "nope", &addr)
    });
    assert_eq!(s.reason(Kind::Http, "nope", &addr), Some("status"));
    assert_eq!(grpc_status(&s, "nope", &addr), Some(5));
    ng.wait_for_log(
        &format!("upstream nope peer {addr} is down after 1 failures: grpc-status 5 (NOT_FOUND)"),
        WAIT,
    );
    // The overall health does not decide a named service's check.
    srv.set("", "NOT_SERVING");
    srv.set("shop.Cart", "NOT_SERVING");
    wait(port, "cart down", |s| s.is_down(Kind::Http, "cart", &addr));
}

#[test]
fn a_server_without_the_health_service_passes_only_with_check_grpc_status_12() {
    let srv = GrpcServer::start(Health::Missing);
    let addr = srv.addr();
    let (ng, port) = start(
        &format!(
            "    upstream lenient {{ server {addr}; check type=grpc interval=200 rise=1 fall=1;
        check_grpc_status 12; }}
    upstream strict {{ server {addr}; check type=grpc interval=200 rise=1 fall=1; }}"
        ),
        "",
    );
    let s = wait(port, "lenient up, strict down", |s| {
        s.is_up(Kind::Http, "lenient", &addr)
            && s.checks(Kind::Http, "lenient", &addr) >= 2
            && s.is_down(Kind::Http, "strict", &addr)
    });
    assert_eq!(grpc_status(&s, "lenient", &addr), Some(12));
    assert_eq!(grpc_status(&s, "strict", &addr), Some(12));
    ng.wait_for_log(
        &format!(
            "upstream strict peer {addr} is down after 1 failures: grpc-status 12 (UNIMPLEMENTED)"
        ),
        WAIT,
    );
}

#[test]
fn grpcs_verifies_the_server_and_follows_its_status() {
    let pki = Pki::generate();
    let mut srv = GrpcServer::start_tls(Health::Served, &pki);
    let addr = srv.addr();
    let (ng, port) = start(
        &format!(
            "    upstream secure {{ server {addr}; check type=grpcs interval=200 rise=1 fall=1;
        check_ssl_verify on; check_ssl_trusted_certificate {ca};
        check_ssl_name {SERVER_NAME}; }}
    upstream wrong_ca {{ server {addr}; check type=grpcs interval=200 rise=1 fall=1;
        check_ssl_verify on; check_ssl_trusted_certificate {other};
        check_ssl_name {SERVER_NAME}; }}",
            ca = pki.path("ca.pem"),
            other = pki.path("other-ca.pem"),
        ),
        "",
    );
    let s = wait(port, "secure up, wrong_ca down", |s| {
        s.is_up(Kind::Http, "secure", &addr)
            && s.checks(Kind::Http, "secure", &addr) >= 2
            && s.is_down(Kind::Http, "wrong_ca", &addr)
    });
    assert_eq!(s.reason(Kind::Http, "wrong_ca", &addr), Some("tls-verify"));
    assert!(s.row(Kind::Http, "secure", &addr)["tls_resumed"].is_u64());
    srv.set("", "NOT_SERVING");
    wait(port, "secure down", |s| {
        s.is_down(Kind::Http, "secure", &addr)
    });
    ng.wait_for_log(
        &format!("upstream secure peer {addr} is down after 1 failures: gRPC NOT_SERVING (http grpcs check)"),
        WAIT,
    );
}

#[test]
fn proxied_grpc_calls_skip_a_not_serving_peer() {
    let mut sick = GrpcServer::start(Health::Served);
    let well = GrpcServer::start(Health::Served);
    sick.set("", "NOT_SERVING");
    let (a, b) = (sick.addr(), well.addr());
    let front = free_port();
    let (_ng, port) = start(
        &format!(
            "    upstream g {{ server {a}; server {b};
        check type=grpc interval=200 rise=1 fall=1; }}"
        ),
        &format!(
            "    server {{ listen 127.0.0.1:{front}; http2 on;
        location / {{ grpc_pass grpc://g; }} }}"
        ),
    );
    wait(port, "sick down, well up", |s| {
        s.is_down(Kind::Http, "g", &a) && s.is_up(Kind::Http, "g", &b)
    });
    // Every call lands on the serving peer: the NOT_SERVING one is skipped.
    let answers = grpc::call(&format!("127.0.0.1:{front}"), 20);
    assert_eq!(answers.len(), 20);
    assert!(answers.iter().all(|a| a == "SERVING"), "{answers:?}");
}

#[test]
fn grpc_reuse_on_keeps_one_connection_and_reloads_leak_nothing() {
    let srv = GrpcServer::start(Health::Served);
    let addr = srv.addr();
    let (mut ng, port) = start(
        &format!(
            "    upstream g {{ server {addr};
        check type=grpc interval=100 rise=1 fall=1 reuse=on; check_keepalive_requests 1000; }}"
        ),
        "",
    );
    wait(port, "30 rounds", |s| {
        s.checks(Kind::Http, "g", &addr) >= 30
    });
    let conns = healthcheck_t::ss::established_lines(srv.port()).len();
    assert_eq!(conns, 1, "one kept connection serves every round");
    let mut pids = ng.workers();
    for i in 0..8 {
        pids = ng.reload();
        wait(port, &format!("rounds after reload {i}"), |s| {
            s.generation() >= Some(i + 2) && s.is_up(Kind::Http, "g", &addr)
        });
    }
    let pid = pids[0];
    let before = resting_fds(pid);
    let start = healthcheck_t::status_json(port)
        .unwrap()
        .checks(Kind::Http, "g", &addr);
    wait(port, "50 more rounds", |s| {
        s.checks(Kind::Http, "g", &addr) >= start + 50
    });
    let after = resting_fds(pid);
    assert!(
        after <= before + 1,
        "worker {pid}: {before} fds, then {after}"
    );
    let conns = healthcheck_t::ss::established_lines(srv.port()).len();
    assert_eq!(conns, 1, "still one connection after 8 reloads");
}

/// nginx as the HTTP/2 server: `http2 on;` on a plain listener (h2c with
/// prior knowledge) and on a TLS one (ALPN h2), and an HTTP/1.1-only TLS
/// server for the `protocol` failure.
fn h2_servers(pki: &Pki) -> (Nginx, u16, u16, u16, u16) {
    let (h2c, h2tls, h1tls, h1) = (free_port(), free_port(), free_port(), free_port());
    let tls = format!(
        "ssl_certificate {}; ssl_certificate_key {};",
        pki.path("server.pem"),
        pki.path("server.key")
    );
    let body = format!(
        "http {{
    log_format conn '$connection $connection_requests $server_protocol $uri';
    access_log logs/h2.log conn;
    server {{ listen 127.0.0.1:{h2c}; http2 on;
        location / {{ return 200 \"ok\\n\"; }} location /sick {{ return 503; }}
        location /page {{ return 200 \"<html>the page says up</html>\\n\"; }} }}
    server {{ listen 127.0.0.1:{h2tls} ssl; http2 on; {tls}
        location / {{ return 200 \"ok\\n\"; }} }}
    server {{ listen 127.0.0.1:{h1tls} ssl; {tls}
        location / {{ return 200 \"ok\\n\"; }} }}
    server {{ listen 127.0.0.1:{h1};
        location / {{ return 200 \"ok\\n\"; }} }}
}}"
    );
    let ng = Builder::default().without_module().start(&body);
    (ng, h2c, h2tls, h1tls, h1)
}

#[test]
fn check_http_version_2_speaks_h2c_and_h2_over_tls_with_every_http_feature() {
    let pki = Pki::generate();
    let (backend, h2c, h2tls, h1tls, h1) = h2_servers(&pki);
    let at = |p: u16| format!("127.0.0.1:{p}");
    let (ng, port) = start(
        &format!(
            "    upstream plain {{ server {c}; check type=http interval=200 rise=1 fall=1;
        check_http_version 2; }}
    upstream sick {{ server {c}; check type=http interval=200 rise=1 fall=1;
        check_http_version 2; check_http_request GET /sick; }}
    upstream body {{ server {c}; check type=http interval=200 rise=1 fall=1 match=page;
        check_http_version 2; check_http_request GET /page; }}
    upstream secure {{ server {s}; check type=https interval=200 rise=1 fall=1;
        check_http_version 2; check_ssl_name {SERVER_NAME}; }}
    upstream h1only {{ server {o}; check type=https interval=200 rise=1 fall=1;
        check_http_version 2; }}
    upstream cleartext_h1 {{ server {p}; check type=http interval=200 rise=1 fall=1;
        check_http_version 2; }}",
            c = at(h2c),
            s = at(h2tls),
            o = at(h1tls),
            p = at(h1),
        ),
        "    check_match page { status 200; body ~ \"says up\"; }",
    );
    let s = wait(port, "the verdicts", |s| {
        s.is_up(Kind::Http, "plain", &at(h2c))
            && s.is_down(Kind::Http, "sick", &at(h2c))
            && s.is_up(Kind::Http, "body", &at(h2c))
            && s.is_up(Kind::Http, "secure", &at(h2tls))
            && s.is_down(Kind::Http, "h1only", &at(h1tls))
            && s.is_down(Kind::Http, "cleartext_h1", &at(h1))
    });
    assert_eq!(s.reason(Kind::Http, "sick", &at(h2c)), Some("status"));
    assert_eq!(s.row(Kind::Http, "sick", &at(h2c))["http_status"], 503);
    assert_eq!(s.reason(Kind::Http, "h1only", &at(h1tls)), Some("protocol"));
    assert_eq!(
        s.reason(Kind::Http, "cleartext_h1", &at(h1)),
        Some("protocol")
    );
    ng.wait_for_log(
        &format!(
            "upstream h1only peer {} is down after 1 failures: HTTP/2 protocol error: the server \
             chose ALPN http/1.1 (h2 required)",
            at(h1tls)
        ),
        WAIT,
    );
    // The requests were HTTP/2 (nginx logs a request once it is done:
    // poll, rounds go on meanwhile).
    let log_path = backend.prefix().join("logs/h2.log");
    healthcheck_t::wait::wait_for(WAIT, "HTTP/2 requests in the backend's log", || {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let has = |uri: &str| log.lines().any(|l| l.ends_with(&format!("HTTP/2.0 {uri}")));
        (has("/page") && has("/sick")).then_some(())
    });
}

#[test]
fn an_h2_check_with_reuse_on_sends_its_rounds_as_streams_of_one_connection() {
    let pki = Pki::generate();
    let (backend, h2c, _, _, _) = h2_servers(&pki);
    let addr = format!("127.0.0.1:{h2c}");
    let (_ng, port) = start(
        &format!(
            "    upstream kept {{ server {addr}; check type=http interval=100 rise=1 fall=1 reuse=on;
        check_http_version 2; check_keepalive_requests 5; check_http_request GET /kept; }}"
        ),
        "",
    );
    wait(port, "21 rounds", |s| {
        s.checks(Kind::Http, "kept", &addr) >= 21
    });
    let log = std::fs::read_to_string(backend.prefix().join("logs/h2.log")).unwrap();
    let mut per_conn = std::collections::BTreeMap::<String, u32>::new();
    for l in log.lines().filter(|l| l.ends_with("HTTP/2.0 /kept")) {
        let conn = l.split(' ').next().unwrap().to_string();
        *per_conn.entry(conn).or_default() += 1;
    }
    let counts: Vec<u32> = per_conn.values().copied().collect();
    // check_keepalive_requests 5 counts streams: five rounds per connection.
    assert!(counts.len() >= 4, "{counts:?}");
    assert!(counts.iter().all(|&n| n <= 5), "{counts:?}");
    assert!(
        counts.iter().filter(|&&n| n == 5).count() >= 3,
        "{counts:?}"
    );
}
