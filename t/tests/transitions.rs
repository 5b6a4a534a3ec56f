//! Peer transitions: a peer whose state is unknown is `checking` and takes
//! no traffic until its first round, which decides at once
//! (docs/directives.md, check: mandatory): on nginx's first start, and for
//! a server a reload adds. Each backend records every request head in
//! order: the check asks for `/health`, the clients for `/app`, so "no
//! traffic before the first round" reads as "no `/app` before the first
//! `/health`". And a peer that goes down loses its idle keepalive
//! connections at once (docs/operations.md, Peers that go down).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use healthcheck_t::http_backend::{response, HttpBackend, Reply};
use healthcheck_t::paths::{patched_bin, stock_bin};
use healthcheck_t::{http_get, status_json, wait_for, Builder, Kind, Status};

const LONG: Duration = Duration::from_secs(15);

fn binaries() -> [(&'static str, PathBuf); 2] {
    [("patched", patched_bin()), ("stock", stock_bin())]
}

/// A backend answering 200 with its address as the body.
fn backend() -> (HttpBackend, String) {
    let b = HttpBackend::start(Reply::status(200));
    let name = b.addr();
    b.set_reply(Reply::Raw {
        bytes: response(200, &[], name.as_bytes()),
        close: false,
    });
    (b, name)
}

fn conf(port: u16, servers: &[&str]) -> String {
    let servers: String = servers
        .iter()
        .map(|n| format!("        server {n} max_fails=0;\n"))
        .collect();
    format!(
        "http {{
    upstream u {{
{servers}        check type=http interval=2000 rise=3 fall=2 timeout=1000 mandatory;
        check_http_send \"GET /health HTTP/1.0\\r\\n\\r\\n\";
    }}
    server {{
        listen 127.0.0.1:{port};
        location /app {{ proxy_pass http://u; }}
        location /status {{ healthcheck_status json; }}
    }}
}}"
    )
}

/// The positions of the first check and the first proxied request among
/// the backend's requests.
fn first_check_and_request(b: &HttpBackend) -> (Option<usize>, Option<usize>) {
    let heads = b.requests();
    let pos = |prefix: &[u8]| heads.iter().position(|h| h.starts_with(prefix));
    (pos(b"GET /health "), pos(b"GET /app "))
}

/// Requests to `/app` from a thread until dropped.
struct Clients(Arc<AtomicBool>, Option<thread::JoinHandle<()>>);

impl Clients {
    fn start(port: u16) -> Clients {
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let t = thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let _ = http_get(port, "/app");
                thread::sleep(Duration::from_millis(5));
            }
        });
        Clients(stop, Some(t))
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        if let Some(t) = self.1.take() {
            let _ = t.join();
        }
    }
}

/// Wait until `name` is up; it must be up after one round (not `rise`).
fn up_after_one_round(port: u16, name: &str, what: &str) -> Status {
    let s = wait_for(LONG, format!("{what}: {name} up"), || {
        let s = status_json(port).ok()?;
        s.is_up(Kind::Http, "u", name).then_some(s)
    });
    let r = s.row(Kind::Http, "u", name);
    assert_eq!(
        r["checks"], 1,
        "{what}: up after its first round, not after rise=3: {r}"
    );
    s
}

/// First start, no state file: every peer is `checking` until its first
/// round; a pass is up at once, a refused one is down; no request reaches
/// a peer before its first round.
#[test]
fn a_new_peer_takes_no_traffic_before_its_first_round() {
    for (mode, bin) in binaries() {
        let ((a, an), (b, bn)) = (backend(), backend());
        let refused = format!("127.0.0.1:{}", healthcheck_t::free_port());
        let port = healthcheck_t::free_port();
        let ng = Builder::default()
            .binary(bin)
            .workers(2)
            .start(&conf(port, &[&an, &bn, &refused]));
        let clients = Clients::start(port);
        // Right after the start: each peer is checking unless its first
        // round already ran (its first round comes at a random point of the
        // first 2 s interval).
        let s = status_json(port).unwrap();
        for (bk, n) in [(&a, &an), (&b, &bn)] {
            let word = s.peer_status(Kind::Http, "u", n).unwrap_or("?");
            let checked = first_check_and_request(bk).0.is_some();
            assert!(word == "checking" || checked, "{mode}: {n} is {word}: {s}");
        }
        let summary = s.0["upstreams"][0].clone();
        let checking = ["checking"]
            .iter()
            .map(|w| {
                [&an, &bn, &refused]
                    .iter()
                    .filter(|n| s.peer_status(Kind::Http, "u", n) == Some(w))
                    .count()
            })
            .sum::<usize>();
        assert_eq!(
            summary["checking"].as_u64(),
            Some(checking as u64),
            "{mode}: {summary}"
        );
        for n in [&an, &bn] {
            up_after_one_round(port, n, mode);
        }
        ng.wait_for_log(
            &format!("peer {refused} is down after its first round: connection refused"),
            LONG,
        );
        // Traffic reaches both at once.
        wait_for(LONG, "both peers serve", || {
            (first_check_and_request(&a).1.is_some() && first_check_and_request(&b).1.is_some())
                .then_some(())
        });
        drop(clients);
        for (bk, n) in [(&a, &an), (&b, &bn)] {
            let (check, request) = first_check_and_request(bk);
            assert!(
                check.zip(request).is_some_and(|(c, r)| c < r),
                "{mode}: {n}: its first round (request {check:?}) before any proxied request \
                 ({request:?})"
            );
        }
        let s = status_json(port).unwrap();
        assert_eq!(
            s.peer_status(Kind::Http, "u", &refused),
            Some("down"),
            "{mode}"
        );
        assert_eq!(s.0["upstreams"][0]["checking"], 0, "{mode}: {s}");
    }
}

/// A reload that adds a server: the new one is checking until its first
/// round, the known one stays up throughout.
#[test]
fn a_server_added_by_a_reload_waits_for_its_first_round() {
    let ((a, an), (b, bn)) = (backend(), backend());
    let port = healthcheck_t::free_port();
    let mut ng = Builder::default().workers(2).start(&conf(port, &[&an]));
    up_after_one_round(port, &an, "before the reload");
    let clients = Clients::start(port);
    let old = ng.workers();
    ng.reload_with(&conf(port, &[&an, &bn]));
    ng.wait_workers_gone(&old, LONG);
    let s = status_json(port).unwrap();
    assert_eq!(s.generation(), Some(2), "{s}");
    assert!(
        s.is_up(Kind::Http, "u", &an),
        "the known peer stays up: {s}"
    );
    let word = s.peer_status(Kind::Http, "u", &bn).unwrap_or("?");
    assert!(
        word == "checking" || first_check_and_request(&b).0.is_some(),
        "the new peer is {word}: {s}"
    );
    up_after_one_round(port, &bn, "after the reload");
    wait_for(LONG, "the new peer serves", || {
        first_check_and_request(&b).1.is_some().then_some(())
    });
    drop(clients);
    let (check, request) = first_check_and_request(&b);
    assert!(
        check.zip(request).is_some_and(|(c, r)| c < r),
        "its first round (request {check:?}) before any proxied request ({request:?})"
    );
    assert!(first_check_and_request(&a).1.is_some());
}

/// `keepalive 16`: a peer that goes down (by its check, then another by an
/// operator's `disable`) loses its idle keepalive connections in every
/// worker within one interval; the other peer's stay.
#[test]
fn a_peer_that_goes_down_loses_its_idle_keepalive_connections() {
    let ((a, an), (b, bn)) = (backend(), backend());
    let port = healthcheck_t::free_port();
    let conf = format!(
        "http {{
    upstream u {{
        server {an} max_fails=0;
        server {bn} max_fails=0;
        keepalive 16;
        check type=http interval=200 rise=1 fall=1 timeout=150;
        check_http_send \"GET /health HTTP/1.0\\r\\n\\r\\n\";
    }}
    server {{
        listen 127.0.0.1:{port} reuseport;
        location /app {{
            proxy_pass http://u;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }}
        location /admin {{ healthcheck_admin; }}
        location /status {{ healthcheck_status json; }}
    }}
}}"
    );
    let ng = Builder::default().workers(2).start(&conf);
    wait_for(LONG, "both peers up", || {
        let s = status_json(port).ok()?;
        (s.is_up(Kind::Http, "u", &an) && s.is_up(Kind::Http, "u", &bn)).then_some(())
    });
    // Traffic from several clients at once: both workers cache connections
    // to both peers.
    let keep = || {
        let clients: Vec<_> = (0..8)
            .map(|_| thread::spawn(move || (0..20).for_each(|_| drop(http_get(port, "/app")))))
            .collect();
        clients.into_iter().for_each(|c| drop(c.join()));
    };
    keep();
    wait_for(LONG, "idle keepalive connections to both", || {
        (a.live_connections() > 0 && b.live_connections() > 0).then_some(())
    });
    let kept_b = b.live_connections();
    // A fails its check: its idle connections close, B's stay.
    a.set_reply(Reply::status(500));
    let t = std::time::Instant::now();
    wait_for(LONG, "A down", || {
        status_json(port)
            .ok()?
            .is_down(Kind::Http, "u", &an)
            .then_some(())
    });
    wait_for(LONG, "A's idle connections closed", || {
        (a.live_connections() == 0).then_some(())
    });
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "closed {:?} after the failing round",
        t.elapsed()
    );
    assert_eq!(b.live_connections(), kept_b, "B's connections stay");
    // Its check rounds go on (the module's own connections are not the
    // cache's).
    let checks = |s: &Status| s.row(Kind::Http, "u", &an)["checks"].as_i64().unwrap_or(0);
    let before = checks(&status_json(port).unwrap());
    wait_for(LONG, "A's rounds go on", || {
        (checks(&status_json(port).ok()?) >= before + 3).then_some(())
    });
    // An operator's disable does the same for B.
    let r = healthcheck_t::http_request(
        port,
        "POST",
        &format!("/admin?upstream=u&peer={bn}&action=disable&group=http"),
        &[],
        b"",
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for(
        Duration::from_secs(2),
        "B's idle connections closed",
        || (b.live_connections() == 0).then_some(()),
    );
    drop(ng);
}
