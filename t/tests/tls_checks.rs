//! TLS checks (README: TLS checks): `type=https` and `type=tls` through
//! nginx's own SSL layer against real TLS servers (nginx, certificates the
//! test generates), in http and stream upstreams: the handshake, SNI,
//! verification, client certificates, resumption, and the failures.

use std::time::Duration;

use healthcheck_t::tls::{ClientAuth, Pki, TlsBackend, SERVER_NAME};
use healthcheck_t::{poll_status_json, Backend, Builder, Kind, Mode, Nginx, Status};

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

fn row<'a>(s: &'a Status, kind: Kind, ups: &str, name: &str) -> &'a serde_json::Value {
    s.row(kind, ups, name)
}

fn wait_status(port: u16, kind: Kind, ups: &str, name: &str, want: &str) -> Status {
    poll_status_json(port, LONG, format!("{ups} {name} {want}"), |s| {
        s.peer_status(kind, ups, name) == Some(want) && s.checks(kind, ups, name) >= 2
    })
}

fn reason(s: &Status, kind: Kind, ups: &str, name: &str) -> String {
    row(s, kind, ups, name)["last_failure_reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
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
    upstream raw {{ server {tls}; check type=tls interval=100 rise=1 fall=1; }}\n"
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
        row(&s, Kind::Stream, "s", &tls)["type"],
        "tls",
        "ssl_hello is tls: {s}"
    );

    // SNI: the https check names backend.test (check_ssl_name); the http
    // tls check of an IP literal sends none.
    let reqs = b.https_requests();
    assert!(reqs.len() >= 2, "{reqs:?}");
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
    // TODO(status): tls_resumed in JSON once the status rows carry it.
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
