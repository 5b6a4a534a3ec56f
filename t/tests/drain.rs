//! Admin `drain` and `check_shutdown_sessions` (docs/transitions.md):
//!
//! - A drained peer takes no new request or stream session, shows
//!   `draining` with its open connections, and what it was already serving
//!   goes on (a slow http request completes, a stream session keeps
//!   echoing); `enable` gives it new traffic again.
//! - With `check_shutdown_sessions on`, a peer that goes down (here by an
//!   operator's `down`) loses its proxied connections: a client waiting on
//!   a slow http request and a stream session in the middle of a transfer
//!   see their connection closed within a second, each ended one is logged
//!   at `info` and counted in `sessions_shut`. Without it they go on.
//!
//! Drain and shutdown run with the patch and in stock mode.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use healthcheck_t::client::http_request;
use healthcheck_t::http_backend::{response, HttpBackend, Reply};
use healthcheck_t::paths::{patched_bin, stock_bin};
use healthcheck_t::{http_get, status_json, wait_for, Builder, Kind, Status};

const LONG: Duration = Duration::from_secs(15);

/// A TCP echo server counting its sessions: the connections that sent
/// data (the `type=tcp` check's rounds connect and send nothing, so they
/// are not counted). A session is counted before its first echo is
/// written, so a client that read its echo finds it counted.
struct Echo {
    port: u16,
    sessions: Arc<AtomicUsize>,
    _thread: JoinHandle<()>,
}

impl Echo {
    fn start() -> Echo {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let sessions = Arc::new(AtomicUsize::new(0));
        let n = Arc::clone(&sessions);
        let thread = thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { continue };
                let n = Arc::clone(&n);
                thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let mut first = true;
                    while let Ok(k) = c.read(&mut buf) {
                        if k == 0 {
                            break;
                        }
                        if first {
                            n.fetch_add(1, Ordering::SeqCst);
                            first = false;
                        }
                        if c.write_all(&buf[..k]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Echo {
            port,
            sessions,
            _thread: thread,
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn sessions(&self) -> usize {
        self.sessions.load(Ordering::SeqCst)
    }
}

fn conf(port: u16, sport: u16, http: [&str; 2], stream: [&str; 2], shut: &str) -> String {
    format!(
        "http {{
    access_log off;
    upstream web {{
        server {h0} max_fails=0;
        server {h1} max_fails=0;
        check type=tcp interval=200 rise=3 fall=1 timeout=1000;
        {shut}
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{ proxy_pass http://web; proxy_read_timeout 30s; }}
        location /admin {{ healthcheck_admin; }}
        location /status {{ healthcheck_status json; }}
    }}
}}
stream {{
    upstream echo {{
        server {s0} max_fails=0;
        server {s1} max_fails=0;
        check type=tcp interval=200 rise=3 fall=1 timeout=1000;
        {shut}
    }}
    server {{ listen 127.0.0.1:{sport}; proxy_pass echo; }}
}}",
        h0 = http[0],
        h1 = http[1],
        s0 = stream[0],
        s1 = stream[1],
    )
}

fn admin(port: u16, group: &str, ups: &str, peer: &str, action: &str) {
    let r = http_request(
        port,
        "POST",
        &format!("/admin?upstream={ups}&peer={peer}&action={action}&group={group}"),
        &[],
        b"",
    )
    .unwrap();
    assert_eq!(r.status, 200, "{action} {peer}: {}", r.text());
}

fn status(port: u16) -> Option<Status> {
    status_json(port).ok()
}

fn all_up(port: u16, http: &[&str], stream: &[&str]) {
    wait_for(LONG, "every peer up", || {
        let s = status(port)?;
        (http.iter().all(|n| s.is_up(Kind::Http, "web", n))
            && stream.iter().all(|n| s.is_up(Kind::Stream, "echo", n)))
        .then_some(())
    });
}

/// A slow http request from a thread: its status and body, or the error.
fn slow_request(port: u16) -> JoinHandle<Result<(u16, String), String>> {
    thread::spawn(move || {
        http_get(port, "/slow")
            .map(|r| (r.status, r.text()))
            .map_err(|e| e.to_string())
    })
}

/// Start slow requests until one is in flight on `a` (which counts its
/// requests); the others (answered at once by the other peer) are done.
fn in_flight_on(port: u16, a: &HttpBackend) -> JoinHandle<Result<(u16, String), String>> {
    for _ in 0..20 {
        let before = a.request_count();
        let t = slow_request(port);
        let on_a = wait_for(
            Duration::from_secs(5),
            "the request answered or on A",
            || {
                if a.request_count() > before {
                    Some(true)
                } else if t.is_finished() {
                    Some(false)
                } else {
                    None
                }
            },
        );
        if on_a {
            return t;
        }
        t.join().unwrap().unwrap();
    }
    panic!("no request reached A in 20 tries");
}

/// A stream session on `a`: sessions are opened until `a` accepts one.
fn session_on(sport: u16, a: &Echo) -> TcpStream {
    for _ in 0..20 {
        let before = a.sessions();
        let mut c = TcpStream::connect(("127.0.0.1", sport)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        echo(&mut c, b"hello").unwrap();
        if a.sessions() > before {
            return c;
        }
    }
    panic!("no session reached A in 20 tries");
}

fn echo(c: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    c.write_all(bytes)?;
    let mut got = vec![0u8; bytes.len()];
    c.read_exact(&mut got)?;
    assert_eq!(got, bytes);
    Ok(())
}

/// The http backends: A answers after `gap`, B at once; each names itself.
fn http_pair(gap: Duration) -> (HttpBackend, HttpBackend, String, String) {
    let a = HttpBackend::start(Reply::status(200));
    let b = HttpBackend::start(Reply::status(200));
    let (an, bn) = (a.addr(), b.addr());
    a.set_reply(Reply::Delay {
        bytes: response(200, &[], an.as_bytes()),
        gap,
    });
    b.set_reply(Reply::Raw {
        bytes: response(200, &[], bn.as_bytes()),
        close: false,
    });
    (a, b, an, bn)
}

#[test]
fn a_drained_peer_takes_no_new_sessions_and_keeps_its_open_ones() {
    for bin in [patched_bin(), stock_bin()] {
        a_drained_peer_takes_no_new_sessions_and_keeps_its_open_ones_with(bin);
    }
}

fn a_drained_peer_takes_no_new_sessions_and_keeps_its_open_ones_with(bin: PathBuf) {
    let (a, _b, an, bn) = http_pair(Duration::from_secs(5));
    let (ea, eb) = (Echo::start(), Echo::start());
    let (ean, ebn) = (ea.addr(), eb.addr());
    let (port, sport) = (healthcheck_t::free_port(), healthcheck_t::free_port());
    let _ng =
        Builder::default()
            .binary(bin)
            .start(&conf(port, sport, [&an, &bn], [&ean, &ebn], ""));
    all_up(port, &[&an, &bn], &[&ean, &ebn]);

    // http: a slow request in flight on A, then A drained.
    let slow = in_flight_on(port, &a);
    let mut session = session_on(sport, &ea);
    admin(port, "http", "web", &an, "drain");
    admin(port, "stream", "echo", &ean, "drain");
    let s = wait_for(
        LONG,
        "both drained peers with their open connection",
        || {
            let s = status(port)?;
            (s.int(Kind::Http, "web", &an, "connections") == 1
                && s.int(Kind::Stream, "echo", &ean, "connections") == 1)
                .then_some(s)
        },
    );
    for (kind, ups, name) in [(Kind::Http, "web", &an), (Kind::Stream, "echo", &ean)] {
        assert_eq!(s.peer_status(kind, ups, name), Some("draining"), "{s}");
        assert_eq!(s.row(kind, ups, name)["admin"], "draining", "{s}");
    }
    let summary = &s.0["upstreams"];
    for u in summary.as_array().unwrap() {
        assert_eq!(u["draining"], 1, "{u}");
        assert_eq!(u["selectable"], 1, "{u}");
    }
    // New requests and sessions all go to B.
    let before = a.request_count();
    for _ in 0..20 {
        let r = http_get(port, "/new").unwrap();
        assert_eq!((r.status, r.text()), (200, bn.clone()));
    }
    assert_eq!(
        a.request_count(),
        before,
        "a drained peer got a new request"
    );
    let sessions = ea.sessions();
    for _ in 0..10 {
        let mut c = TcpStream::connect(("127.0.0.1", sport)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        echo(&mut c, b"new").unwrap();
    }
    assert_eq!(ea.sessions(), sessions, "a drained peer got a new session");
    // What A was serving goes on.
    echo(&mut session, b"still here").unwrap();
    assert_eq!(slow.join().unwrap(), Ok((200, an.clone())));

    // enable: new traffic reaches it again.
    admin(port, "http", "web", &an, "enable");
    admin(port, "stream", "echo", &ean, "enable");
    wait_for(LONG, "A serving again", || {
        let s = status(port)?;
        let row = s.row(Kind::Http, "web", &an);
        (row["status"] == "up" && row["admin"].is_null() && row["connections"].is_null())
            .then_some(())
    });
    let before = a.request_count();
    a.set_reply(Reply::Raw {
        bytes: response(200, &[], an.as_bytes()),
        close: false,
    });
    // In nginx 1.30 every worker takes nginx's drain bit back within a
    // tenth of a second of the enable.
    let deadline = Instant::now() + Duration::from_secs(3);
    while http_get(port, "/again").unwrap().text() != an {
        assert!(
            Instant::now() < deadline,
            "A gets no request within 3 s of enable"
        );
        thread::sleep(Duration::from_millis(20));
    }
    assert!(a.request_count() > before);
    let sessions = ea.sessions();
    for _ in 0..10 {
        let mut c = TcpStream::connect(("127.0.0.1", sport)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        echo(&mut c, b"back").unwrap();
    }
    assert!(ea.sessions() > sessions, "A gets no session after enable");
}

/// Whether the client side of a slow request or a session sees its
/// connection end within `within`.
fn ended_within(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn check_shutdown_sessions_ends_the_connections_of_a_peer_that_goes_down() {
    for bin in [patched_bin(), stock_bin()] {
        check_shutdown_sessions_ends_the_connections_of_a_peer_that_goes_down_with(bin);
    }
}

fn check_shutdown_sessions_ends_the_connections_of_a_peer_that_goes_down_with(bin: PathBuf) {
    let (a, _b, an, bn) = http_pair(Duration::from_secs(6));
    let (ea, eb) = (Echo::start(), Echo::start());
    let (ean, ebn) = (ea.addr(), eb.addr());
    let (port, sport) = (healthcheck_t::free_port(), healthcheck_t::free_port());
    let ng = Builder::default().binary(bin).start(&conf(
        port,
        sport,
        [&an, &bn],
        [&ean, &ebn],
        "check_shutdown_sessions on;",
    ));
    all_up(port, &[&an, &bn], &[&ean, &ebn]);
    let slow = in_flight_on(port, &a);
    let mut session = session_on(sport, &ea);
    let mark = ng.log().len();
    let t0 = Instant::now();
    admin(port, "http", "web", &an, "down");
    admin(port, "stream", "echo", &ean, "down");
    // The http client's connection is closed without an answer.
    assert!(
        ended_within(Duration::from_secs(2), || slow.is_finished()),
        "the slow request to the down peer is still open"
    );
    let got = slow.join().unwrap();
    assert!(
        !matches!(got, Ok((200, _))),
        "the request to the down peer was answered: {got:?}"
    );
    // The stream session reads the end.
    session
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut buf = [0u8; 16];
    let end = session.read(&mut buf);
    assert!(
        matches!(end, Ok(0) | Err(_)) && t0.elapsed() < Duration::from_secs(3),
        "the session to the down peer goes on: {end:?}"
    );
    ng.wait_for_log_since(
        mark,
        &format!("upstream web peer {an} is down: ending a proxied request to it (check_shutdown_sessions)"),
        LONG,
    );
    ng.wait_for_log_since(
        mark,
        &format!("upstream echo peer {ean} is down: ending a proxied session to it (check_shutdown_sessions)"),
        LONG,
    );
    let s = status(port).unwrap();
    assert_eq!(s.int(Kind::Http, "web", &an, "sessions_shut"), 1, "{s}");
    assert_eq!(s.int(Kind::Stream, "echo", &ean, "sessions_shut"), 1, "{s}");
    assert_eq!(s.int(Kind::Http, "web", &bn, "sessions_shut"), 0, "{s}");
}

#[test]
fn without_check_shutdown_sessions_the_connections_of_a_down_peer_go_on() {
    let (a, _b, an, bn) = http_pair(Duration::from_millis(2_500));
    let (ea, eb) = (Echo::start(), Echo::start());
    let (ean, ebn) = (ea.addr(), eb.addr());
    let (port, sport) = (healthcheck_t::free_port(), healthcheck_t::free_port());
    let _ng = Builder::default().start(&conf(port, sport, [&an, &bn], [&ean, &ebn], ""));
    all_up(port, &[&an, &bn], &[&ean, &ebn]);
    let slow = in_flight_on(port, &a);
    let mut session = session_on(sport, &ea);
    admin(port, "http", "web", &an, "down");
    admin(port, "stream", "echo", &ean, "down");
    wait_for(LONG, "both down", || {
        let s = status(port)?;
        (s.is_down(Kind::Http, "web", &an) && s.is_down(Kind::Stream, "echo", &ean)).then_some(())
    });
    // Nothing to wait for but time: the module would have acted within
    // its 100 ms period (the peer stays down for 3 rounds, 600 ms).
    thread::sleep(Duration::from_millis(400));
    echo(&mut session, b"still here").unwrap();
    assert_eq!(slow.join().unwrap(), Ok((200, an.clone())));
    let s = status(port).unwrap();
    assert_eq!(s.int(Kind::Http, "web", &an, "sessions_shut"), 0, "{s}");
}

/// `check_fail_open on` counts a drained peer as not selectable: with A
/// down by an operator, B alone serves and nothing fails open; once B is
/// drained too, no peer is selectable, the upstream fails open and A (down,
/// let through) serves every request while B, drained, still gets none.
#[test]
fn fail_open_counts_a_drained_peer_as_not_selectable() {
    let named = || {
        let b = HttpBackend::start(Reply::status(200));
        let name = b.addr();
        b.set_reply(Reply::Raw {
            bytes: response(200, &[], name.as_bytes()),
            close: false,
        });
        (b, name)
    };
    let ((_a, an), (_b, bn)) = (named(), named());
    let port = healthcheck_t::free_port();
    // rise=100: a peer an operator set down stays down for the test.
    let ng = Builder::default().workers(2).start(&format!(
        "http {{
    access_log off;
    upstream web {{
        server {an} max_fails=0;
        server {bn} max_fails=0;
        check type=tcp interval=300 rise=100 fall=1 timeout=250;
        check_fail_open on;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{ proxy_pass http://web; }}
        location /admin {{ healthcheck_admin; }}
        location /status {{ healthcheck_status json; }}
    }}
}}"
    ));
    wait_for(LONG, "both up", || {
        let s = status(port)?;
        (s.is_up(Kind::Http, "web", &an) && s.is_up(Kind::Http, "web", &bn)).then_some(())
    });
    let served = |n: usize| {
        let mut by = (0, 0);
        for _ in 0..n {
            let r = http_get(port, "/").unwrap();
            assert_eq!(r.status, 200, "{}", r.text());
            match r.text() {
                t if t == an => by.0 += 1,
                t if t == bn => by.1 += 1,
                t => panic!("served by {t}"),
            }
        }
        by
    };
    admin(port, "http", "web", &an, "down");
    wait_for(LONG, "A down", || {
        status(port)?.is_down(Kind::Http, "web", &an).then_some(())
    });
    assert_eq!(served(20), (0, 20), "A down: B alone");
    assert!(ng.log_lines("fails open").is_empty(), "{}", ng.log());
    admin(port, "http", "web", &bn, "drain");
    ng.wait_for_log("upstream web fails open", LONG);
    let entering = ng.log_lines("upstream web fails open");
    assert!(
        entering[0].contains("weight 0 of 2 of its checked peers is up"),
        "{entering:?}"
    );
    let u = status(port).unwrap().0["upstreams"][0].clone();
    // Failing open, A (down) is selectable again; B, drained, is not.
    assert_eq!(
        (&u["draining"], &u["fail_open"], &u["selectable"]),
        (&1.into(), &true.into(), &1.into()),
        "{u}"
    );
    assert_eq!(served(20), (20, 0), "failing open: A, never the drained B");
}
