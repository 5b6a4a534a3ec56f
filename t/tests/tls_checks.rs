//! TLS checks (docs/tls.md): `type=https` and `type=tls` through
//! nginx's own SSL layer against real TLS servers (nginx, certificates the
//! test generates), in http and stream upstreams: the handshake, SNI,
//! verification, client certificates, resumption, and the failures.

use std::time::Duration;

use healthcheck_t::tls::{ClientAuth, Pki, TlsBackend, SERVER_NAME};
use healthcheck_t::{
    poll_status_json, resting_fds, status_json, Backend, Builder, Kind, Mode, Nginx, Status,
};

const LONG: Duration = Duration::from_secs(10);

/// nginx with `upstreams` in http (and `stream` blocks, if any) and the
/// JSON status page on the returned port.
fn start(http_upstreams: &str, stream: &str) -> (Nginx, u16) {
    let port = healthcheck_t::free_port();
    let body = format!(
        "{}\n{stream}",
        healthcheck_t::conf::http_conf(port, http_upstreams)
    );
    (Builder::default().start(&body), port)
}

fn wait_status(port: u16, kind: Kind, ups: &str, name: &str, want: &str) -> Status {
    poll_status_json(port, LONG, format!("{ups} {name} {want}"), |s| {
        s.peer_status(kind, ups, name) == Some(want) && s.checks(kind, ups, name) >= 2
    })
}

/// https and tls checks of a healthy TLS server are up; the https check's
/// requests carry the SNI and resume their sessions after the first round;
/// the tls check of a stream upstream too.
#[test]
fn healthy_tls_servers_are_up_with_sni_and_resumption() {
    let pki = Pki::generate();
    let b = TlsBackend::start(&pki, ClientAuth::None);
    let https = format!("127.0.0.1:{}", b.https_port());
    let tls = format!("127.0.0.1:{}", b.tls_port());
    let ups = format!(
        "    upstream web {{ server {https}; check type=https interval=100 rise=1 fall=1;
        check_ssl_name {SERVER_NAME}; }}
    upstream raw {{ server {tls}; check type=tls interval=100 rise=1 fall=1; }}
    upstream hosted {{ server {https}; check type=https interval=100 rise=1 fall=1;
        check_http_header Host {SERVER_NAME}:8443; }}
    upstream quiet {{ server {tls}; check type=tls interval=100 rise=1 fall=1;
        check_ssl_name {SERVER_NAME}; check_ssl_server_name off; }}\n"
    );
    let stream = format!(
        "stream {{ upstream s {{ server {tls}; check type=ssl_hello interval=100 rise=1 fall=1;
            check_ssl_name {SERVER_NAME}; }}
            server {{ listen 127.0.0.1:{}; proxy_pass s; }} }}",
        healthcheck_t::free_port()
    );
    let (ng, port) = start(&ups, &stream);
    wait_status(port, Kind::Http, "web", &https, "up");
    wait_status(port, Kind::Http, "raw", &tls, "up");
    let s = wait_status(port, Kind::Stream, "s", &tls, "up");
    assert_eq!(
        s.row(Kind::Stream, "s", &tls)["type"],
        "tls",
        "ssl_hello is tls: {s}"
    );

    wait_status(port, Kind::Http, "hosted", &https, "up");
    wait_status(port, Kind::Http, "quiet", &tls, "up");
    // SNI: the https checks name backend.test (check_ssl_name, or the
    // host of check_http_header Host); the tls check of an IP literal
    // sends none, nor does one with check_ssl_server_name off.
    let reqs = b.https_requests();
    assert!(reqs.len() >= 4, "{reqs:?}");
    assert!(
        reqs.iter().all(|h| h.sni.as_deref() == Some(SERVER_NAME)),
        "{reqs:?}"
    );
    // Resumption: after the first full handshake, rounds resume.
    healthcheck_t::wait_until(LONG, "the backend sees resumed https sessions", || {
        b.https_requests().iter().filter(|h| h.resumed).count() >= 3
    });
    healthcheck_t::wait_until(LONG, "the backend sees resumed tls sessions", || {
        b.tls_sessions().iter().filter(|h| h.resumed).count() >= 3
    });
    let s = poll_status_json(port, LONG, "resumptions counted", |s| {
        s.row(Kind::Http, "web", &https)["tls_resumed"].as_i64() >= Some(3)
    });
    let resumed = s.row(Kind::Http, "web", &https)["tls_resumed"]
        .as_i64()
        .unwrap();
    assert!(
        resumed < s.checks(Kind::Http, "web", &https),
        "the first round is full: {s}"
    );
    assert!(
        s.row(Kind::Http, "raw", &tls)["tls_resumed"].as_i64() >= Some(1),
        "{s}"
    );
    let sessions = b.tls_sessions();
    assert!(
        sessions.iter().any(|h| h.sni.is_none())
            && sessions
                .iter()
                .any(|h| h.sni.as_deref() == Some(SERVER_NAME)),
        "tls checks: one without SNI (IP literal), one with check_ssl_name: {sessions:?}"
    );
    ng.check_log();
}

/// One upstream `u` with `server` and `check ... extra` and `directives`;
/// returns nginx, the status port.
fn one(server: &str, check: &str, directives: &str) -> (Nginx, u16) {
    start(
        &format!("    upstream u {{ server {server}; check interval=200 rise=1 fall=1 {check}; {directives} }}\n"),
        "",
    )
}

/// The state-change line of `u`'s peer.
fn down_line(ng: &Nginx, name: &str) -> String {
    ng.wait_for_log(&format!("upstream u peer {name} is down"), LONG)
}

/// A backend that accepts TCP and never answers the ClientHello: the
/// handshake does not finish within `timeout`, reason `timeout`.
#[test]
fn silent_server_times_the_handshake_out() {
    let b = Backend::with_mode(Mode::Hang);
    for ty in ["tls", "https"] {
        let (ng, port) = one(&b.addr(), &format!("type={ty} timeout=150"), "");
        let s = wait_status(port, Kind::Http, "u", &b.addr(), "down");
        assert_eq!(
            s.reason(Kind::Http, "u", &b.addr()),
            Some("timeout"),
            "{ty}: {s}"
        );
        assert!(down_line(&ng, &b.addr()).contains("timed out"), "{ty}");
        ng.check_log();
    }
}

/// A plain port checked with https or tls: the handshake fails (`tls`),
/// and the log line carries OpenSSL's reason.
#[test]
fn plain_port_fails_the_handshake() {
    let b = Backend::start();
    for ty in ["tls", "https"] {
        let (ng, port) = one(&b.addr(), &format!("type={ty}"), "");
        let s = wait_status(port, Kind::Http, "u", &b.addr(), "down");
        assert_eq!(
            s.reason(Kind::Http, "u", &b.addr()),
            Some("tls"),
            "{ty}: {s}"
        );
        let line = down_line(&ng, &b.addr());
        assert!(
            line.contains("TLS handshake failed: SSL_do_handshake() failed (SSL: error:")
                && line.contains("wrong version number"),
            "{ty}: {line}"
        );
        ng.check_log();
    }
}

/// Verification: an untrusted chain and a wrong name fail with
/// `tls-verify` and OpenSSL's or nginx's words; the right CA with the
/// certificate's DNS name, or its IP address by default, passes.
#[test]
fn verification_of_chain_and_name() {
    let pki = Pki::generate();
    let b = TlsBackend::start(&pki, ClientAuth::None);
    let addr = format!("127.0.0.1:{}", b.tls_port());
    let verify = |ca: &str| {
        format!(
            "check_ssl_verify on; check_ssl_trusted_certificate {};",
            pki.path(ca)
        )
    };
    for (what, directives, want) in [
        (
            "untrusted chain",
            verify("other-ca.pem"),
            Some("certificate verify failed: unable to "),
        ),
        (
            "wrong name",
            verify("ca.pem") + " check_ssl_name wrong.test;",
            Some("certificate does not match \"wrong.test\""),
        ),
        (
            "the DNS name",
            verify("ca.pem") + &format!(" check_ssl_name {SERVER_NAME};"),
            None,
        ),
        ("the IP address", verify("ca.pem"), None),
    ] {
        let (ng, port) = one(&addr, "type=tls", &directives);
        match want {
            Some(words) => {
                let s = wait_status(port, Kind::Http, "u", &addr, "down");
                assert_eq!(
                    s.reason(Kind::Http, "u", &addr),
                    Some("tls-verify"),
                    "{what}: {s}"
                );
                let line = down_line(&ng, &addr);
                assert!(
                    line.contains(&format!("is down after 1 failures: {words}")),
                    "{what}: {line}"
                );
            }
            None => {
                wait_status(port, Kind::Http, "u", &addr, "up");
            }
        }
        ng.check_log();
    }
}

/// A backend that requires a client certificate: without one the check
/// fails (`tls`); with `check_ssl_certificate` it passes, for https and tls.
#[test]
fn client_certificate() {
    let pki = Pki::generate();
    let b = TlsBackend::start(&pki, ClientAuth::Required);
    let with_cert = format!(
        "check_ssl_certificate {}; check_ssl_certificate_key {};",
        pki.path("client.pem"),
        pki.path("client.key")
    );
    for (ty, port) in [("https", b.https_port()), ("tls", b.tls_port())] {
        let addr = format!("127.0.0.1:{port}");
        let (ng, status) = one(&addr, &format!("type={ty}"), "");
        let s = wait_status(status, Kind::Http, "u", &addr, "down");
        let r = s.reason(Kind::Http, "u", &addr).unwrap_or_default();
        // TLS 1.3: the client's side of the handshake completes before
        // the server looks at the (empty) certificate; nginx as the server
        // then answers https with 400 ("No required SSL certificate was
        // sent") and closes a stream session; other servers send an alert.
        let expected: &[&str] = match ty {
            "https" => &["tls", "status"],
            _ => &["tls", "closed"],
        };
        assert!(expected.contains(&r), "{ty}: {s}");
        ng.check_log();
        let (ng, status) = one(&addr, &format!("type={ty}"), &with_cert);
        wait_status(status, Kind::Http, "u", &addr, "up");
        ng.check_log();
    }
}

/// https with `reuse=on`: keep-alive over TLS, one handshake serving many
/// rounds (the backend sees requests 2, 3, ... on one connection).
#[test]
fn https_keepalive_over_tls() {
    let pki = Pki::generate();
    let b = TlsBackend::start(&pki, ClientAuth::None);
    let addr = format!("127.0.0.1:{}", b.https_port());
    let (ng, port) = one(
        &addr,
        "type=https reuse=on",
        "check_keepalive_requests 100;",
    );
    wait_status(port, Kind::Http, "u", &addr, "up");
    healthcheck_t::wait_until(LONG, "requests on a kept TLS connection", || {
        b.https_requests().iter().any(|h| h.request >= 4)
    });
    let reqs = b.https_requests();
    let fresh = reqs.iter().filter(|h| h.request == 1).count();
    assert!(
        fresh * 3 <= reqs.len(),
        "most rounds reuse the connection: {reqs:?}"
    );
    ng.check_log();
}

/// A backend that closes idle kept TLS connections (close_notify and FIN,
/// `keepalive_timeout` shorter than the interval): each close is seen while
/// the connection is idle, and the next round connects anew instead of
/// writing to the closed one. The peer stays up with no failed round, and
/// the rounds go on new connections.
#[test]
fn https_backend_closing_idle_connections_stays_up() {
    let pki = Pki::generate();
    // The backend closes 100 ms into the idle time, 900 ms before the next
    // round: a close that late is no race with the round.
    let b = TlsBackend::start_with(&pki, ClientAuth::None, "100ms");
    let addr = format!("127.0.0.1:{}", b.https_port());
    let (ng, port) = start(
        &format!(
            "    upstream u {{ server {addr}; check interval=1000 rise=1 fall=1 type=https reuse=on;
        check_keepalive_requests 100; }}\n"
        ),
        "",
    );
    wait_status(port, Kind::Http, "u", &addr, "up");
    let s = poll_status_json(port, LONG, "6 rounds", |s| {
        s.checks(Kind::Http, "u", &addr) >= 6
    });
    assert_eq!(s.peer_status(Kind::Http, "u", &addr), Some("up"), "{s}");
    assert_eq!(s.int(Kind::Http, "u", &addr, "fails_total"), 0, "{s}");
    let reqs = b.https_requests();
    assert!(reqs.len() >= 6, "{reqs:?}");
    assert!(
        reqs.iter().all(|h| h.request == 1),
        "every round on a new connection: {reqs:?}"
    );
    // Those connections resume their sessions.
    assert!(reqs.iter().skip(1).all(|h| h.resumed), "{reqs:?}");
    assert!(!ng.log_contains("is down"), "{}", ng.log());
    ng.check_log();
}

/// 8 reloads while TLS checks run, handshakes in flight among them (a
/// server that never answers the ClientHello, checked with a long
/// timeout): the old workers exit, and the new worker's and the master's
/// descriptors stay where they were.
#[test]
fn reloads_during_tls_handshakes_keep_descriptors_flat() {
    let pki = Pki::generate();
    let b = TlsBackend::start(&pki, ClientAuth::None);
    let silent = Backend::with_mode(Mode::Hang);
    let plain = Backend::start();
    let (web, raw) = (
        format!("127.0.0.1:{}", b.https_port()),
        format!("127.0.0.1:{}", b.tls_port()),
    );
    let ups = format!(
        "    upstream web {{ server {web}; check type=https interval=100 reuse=on; }}
    upstream raw {{ server {raw}; server {}; check type=tls interval=100; }}
    upstream slow {{ server {}; check type=tls interval=1000 timeout=900; }}\n",
        plain.addr(),
        silent.addr()
    );
    let (mut ng, port) = start(&ups, "");
    let rows = [
        ("web", web.clone()),
        ("raw", raw.clone()),
        ("raw", plain.addr()),
        ("slow", silent.addr()),
    ];
    let all_checked = |s: &Status, at_least: i64| {
        rows.iter()
            .all(|(u, n)| s.checks(Kind::Http, u, n) >= at_least)
    };
    poll_status_json(port, LONG, "every peer checked", |s| all_checked(s, 1));
    let (master, first) = (ng.pid(), ng.workers()[0]);
    let (master_fds, worker_fds) = (resting_fds(master), resting_fds(first));
    for i in 0..8 {
        let old = ng.workers();
        // Reload while a handshake with the silent server is in flight.
        healthcheck_t::wait_until(LONG, "a handshake in flight", || {
            silent.open_connections() >= 1
        });
        let before = status_json(port).unwrap().checks(Kind::Http, "web", &web);
        ng.reload();
        ng.wait_workers_gone(&old, LONG);
        poll_status_json(port, LONG, format!("rounds after reload {i}"), |s| {
            s.checks(Kind::Http, "web", &web) > before
        });
    }
    let s = status_json(port).unwrap();
    assert_eq!(s.peer_status(Kind::Http, "web", &web), Some("up"), "{s}");
    assert_eq!(
        s.peer_status(Kind::Http, "raw", &plain.addr()),
        Some("down"),
        "{s}"
    );
    let worker = ng.workers()[0];
    let (m, w) = (resting_fds(master), resting_fds(worker));
    assert!(
        m <= master_fds,
        "master: {master_fds} descriptors before, {m} after 8 reloads"
    );
    assert!(
        w <= worker_fds + 1,
        "worker: {worker_fds} descriptors in the first worker, {w} in the ninth"
    );
    ng.check_log();
}
