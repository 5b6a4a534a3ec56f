//! UDP checks (`check type=udp`, docs/operations.md, Limits operators must know).
//!
//! A UDP round sends one `NGX_UDP_CHECKER` datagram on its own connected
//! socket and fails only when `ECONNREFUSED` (an ICMP port unreachable) is
//! seen before the deadline. These tests run a real nginx against real UDP
//! sockets on loopback, where the kernel answers a datagram to an unbound
//! port with ICMP port unreachable at once (loopback is exempt from the
//! per-host ICMP rate limit; the global limit, 1000/s, is far above what
//! these tests cause).
//!
//! Stream upstreams are exercised through a `listen ... udp` proxy, and an
//! http upstream with `type=udp` shows that the check type works there too.

use std::collections::BTreeSet;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use healthcheck_t::conf::status_server;
use healthcheck_t::{
    free_port, http_get, poll_status_json, status_json, wait_until, Backend, Kind, Nginx, Status,
    UdpBackend, UdpMode,
};

/// The probe's payload.
const PAYLOAD: &[u8] = b"NGX_UDP_CHECKER";
/// Generous bound for anything that should take a few rounds.
const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// helpers

/// One client datagram through the nginx UDP proxy on `port`; the reply,
/// or the error after `timeout` without one.
fn udp_ask(port: u16, payload: &[u8], timeout: Duration) -> io::Result<Vec<u8>> {
    let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    s.set_read_timeout(Some(timeout))?;
    s.connect((Ipv4Addr::LOCALHOST, port))?;
    s.send(payload)?;
    let mut buf = vec![0u8; 2048];
    let n = s.recv(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// Assert that `received` datagrams and the status `checks` counter of one
/// peer agree: exactly one datagram per committed round, allowing one
/// round in flight. `received` is read before and after the status so a
/// round completing in between cannot make the comparison flaky.
fn assert_one_datagram_per_round(
    http_port: u16,
    kind: Kind,
    upstream: &str,
    name: &str,
    received: impl Fn() -> usize,
) -> (i64, usize) {
    let before = received() as i64;
    let s = status_json(http_port).expect("status");
    let after = received() as i64;
    let n = s.checks(kind, upstream, name);
    assert!(
        n >= before - 1 && n <= after + 1,
        "{upstream} {name}: {n} rounds committed but the backend received \
         {before}..={after} datagrams (one per round expected, +-1 in flight): {s}"
    );
    (n, after as usize)
}

/// A UDP server that answers each datagram with `echo:<payload>`, so a
/// client can tell an answer to its own datagram from anything else (a
/// check reply would read `echo:NGX_UDP_CHECKER`).
struct Echo {
    port: u16,
    stop: Arc<AtomicBool>,
    payloads: Arc<Mutex<Vec<Vec<u8>>>>,
    thread: Option<JoinHandle<()>>,
}

impl Echo {
    /// Bind `127.0.0.1:port` (0 = any free port).
    fn bind(port: u16) -> io::Result<Echo> {
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, port))?;
        socket.set_read_timeout(Some(Duration::from_millis(20)))?;
        let port = socket.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let payloads = Arc::new(Mutex::new(Vec::new()));
        let (stop2, payloads2) = (Arc::clone(&stop), Arc::clone(&payloads));
        let thread = thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !stop2.load(Ordering::SeqCst) {
                let (n, from): (usize, SocketAddr) = match socket.recv_from(&mut buf) {
                    Ok(r) => r,
                    Err(_) => continue,
                };
                payloads2.lock().unwrap().push(buf[..n].to_vec());
                let mut reply = b"echo:".to_vec();
                reply.extend_from_slice(&buf[..n]);
                let _ = socket.send_to(&reply, from);
            }
        });
        Ok(Echo {
            port,
            stop,
            payloads,
            thread: Some(thread),
        })
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn payloads(&self) -> Vec<Vec<u8>> {
        self.payloads.lock().unwrap().clone()
    }

    fn received(&self) -> usize {
        self.payloads.lock().unwrap().len()
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A TCP backend whose port is also bound by an [`Echo`] on UDP, so one
/// `server` line has both an HTTP server and a UDP check target.
fn backend_with_udp_echo() -> (Backend, Echo) {
    for _ in 0..20 {
        let b = Backend::start();
        if let Ok(e) = Echo::bind(b.port()) {
            return (b, e);
        }
    }
    panic!("could not bind UDP on a backend's TCP port in 20 tries");
}

// ---------------------------------------------------------------------------
// tests

/// A closed UDP port (the kernel answers ICMP port unreachable) goes down
/// after exactly `fall` failed rounds, its reason is `icmp-unreachable`,
/// and the stream `udp` proxy sends it no traffic: the replying peer
/// answers every datagram.
#[test]
fn closed_port_goes_down_and_takes_no_udp_traffic() {
    let good = UdpBackend::start();
    let bad = UdpBackend::with_mode(UdpMode::Closed);
    let (http_port, udp_port) = (free_port(), free_port());
    let ng = Nginx::start(&format!(
        "{}
stream {{
    upstream dns {{
        server {good};
        server {bad};
        check type=udp interval=100 timeout=50 fall=3 rise=1;
    }}
    server {{
        listen 127.0.0.1:{udp_port} udp;
        proxy_pass dns;
        proxy_responses 1;
        proxy_timeout 1s;
    }}
}}",
        status_server(http_port),
        good = good.addr(),
        bad = bad.addr()
    ));

    let s = poll_status_json(http_port, WAIT, "closed port down", |s| {
        s.is_down(Kind::Stream, "dns", &bad.addr())
    });
    let r = s.row(Kind::Stream, "dns", &bad.addr());
    assert_eq!(r["last_failure_reason"], "icmp-unreachable", "{s}");
    assert!(r["fall"].as_i64() >= Some(3), "down before 3 failures: {s}");
    assert!(r["checks"].as_i64() >= Some(3), "{s}");
    assert_eq!(r["rise"], 0, "{s}");
    // It went down on its 3rd consecutive failure, with the ICMP reason.
    let line = ng.wait_for_log(
        &format!("peer {} is down after 3 failures", bad.addr()),
        WAIT,
    );
    assert!(line.contains("[warn]"), "{line}");
    assert!(line.contains("port unreachable"), "{line}");
    assert!(line.contains("stream udp check"), "{line}");
    assert!(s.is_up(Kind::Stream, "dns", &good.addr()), "{s}");
    assert_eq!(s.int(Kind::Stream, "dns", &good.addr(), "fails_total"), 0);

    // Every client datagram reaches the replying backend.
    for i in 0..20 {
        let reply = udp_ask(
            udp_port,
            format!("query {i}").as_bytes(),
            Duration::from_secs(2),
        )
        .unwrap_or_else(|e| panic!("datagram {i} through the proxy: {e}"));
        assert_eq!(reply, good.port().to_string().as_bytes(), "datagram {i}");
    }
    let queries = good
        .payloads()
        .iter()
        .filter(|p| p.starts_with(b"query "))
        .count();
    assert_eq!(queries, 20, "the replying peer saw every client datagram");
    assert_eq!(bad.received(), 0, "nothing reached the closed port");
    let s = status_json(http_port).unwrap();
    assert!(s.is_down(Kind::Stream, "dns", &bad.addr()), "{s}");
}

/// A bound port that never answers stays up: silence until the deadline is
/// no confirmed failure, and the delay of such a round is the timeout.
/// The backend gets exactly one datagram per round (no retransmission
/// while waiting).
#[test]
fn silent_port_stays_up_with_timeout_as_delay() {
    let silent = UdpBackend::with_mode(UdpMode::Silent);
    let port = free_port();
    let timeout = 120;
    let _ng = Nginx::start(&format!(
        "{}
stream {{
    upstream quiet {{
        server {addr};
        check type=udp interval=250 timeout={timeout} fall=1 rise=1;
    }}
}}",
        status_server(port),
        addr = silent.addr()
    ));
    let name = silent.addr();
    let s = poll_status_json(port, WAIT, "6 silent rounds", |s| {
        s.checks(Kind::Stream, "quiet", &name) >= 6
    });
    assert!(s.is_up(Kind::Stream, "quiet", &name), "{s}");
    let r = s.row(Kind::Stream, "quiet", &name);
    assert_eq!(r["fails_total"], 0, "{s}");
    assert_eq!(r["fall"], 0, "{s}");
    assert!(r["last_failure_reason"].is_null(), "{s}");
    // A UDP round ending at its silent deadline records the timeout.
    for f in [
        "last_delay_ms",
        "min_delay_ms",
        "max_delay_ms",
        "avg_delay_ms",
    ] {
        let v = r[f].as_i64().unwrap();
        assert!(
            (timeout..=timeout + 20).contains(&v),
            "{f} = {v}, expected the timeout {timeout}: {s}"
        );
    }
    let (n, _) =
        assert_one_datagram_per_round(port, Kind::Stream, "quiet", &name, || silent.received());
    assert!(n >= 6);
    assert!(
        silent.payloads().iter().all(|p| p == PAYLOAD),
        "payloads: {:?}",
        silent.payloads()
    );
}

/// A replying server stays up; its replies end the round early (delay
/// below the timeout) and never leak to proxied clients: every client
/// datagram through the proxy gets exactly the answer to itself, while
/// check replies (`echo:NGX_UDP_CHECKER`) flow on the check sockets.
#[test]
fn replying_server_stays_up_and_replies_do_not_leak() {
    let echo = Echo::bind(0).expect("bind echo");
    let reply = UdpBackend::start();
    let (http_port, udp_port) = (free_port(), free_port());
    let timeout = 80;
    let _ng = Nginx::start(&format!(
        "{}
stream {{
    upstream echo {{
        server {echo};
        check type=udp interval=100 timeout={timeout} fall=1 rise=1;
    }}
    upstream reply {{
        server {reply};
        check type=udp interval=100 timeout={timeout} fall=1 rise=1;
    }}
    server {{
        listen 127.0.0.1:{udp_port} udp;
        proxy_pass echo;
        proxy_timeout 3s;
    }}
}}",
        status_server(http_port),
        echo = echo.addr(),
        reply = reply.addr()
    ));
    poll_status_json(http_port, WAIT, "5 rounds each", |s| {
        s.checks(Kind::Stream, "echo", &echo.addr()) >= 5
            && s.checks(Kind::Stream, "reply", &reply.addr()) >= 5
    });

    // One client session (same socket, so nginx keeps one upstream socket
    // for it) spanning several check rounds: every reply is the echo of
    // the datagram just sent, and nothing else arrives.
    let client = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    client.connect((Ipv4Addr::LOCALHOST, udp_port)).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut buf = vec![0u8; 2048];
    let probes = || {
        echo.payloads()
            .iter()
            .filter(|p| p.as_slice() == PAYLOAD)
            .count()
    };
    let checks_before = probes();
    for i in 0..6 {
        let msg = format!("client datagram {i}");
        client.send(msg.as_bytes()).unwrap();
        let n = client
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("reply to {msg:?}: {e}"));
        assert_eq!(
            String::from_utf8_lossy(&buf[..n]),
            format!("echo:{msg}"),
            "the client got something other than the answer to its datagram"
        );
        // A check round inside the session, before the next datagram.
        let seen = probes();
        wait_until(WAIT, format!("a check round after datagram {i}"), || {
            probes() > seen
        });
    }
    // Nothing more arrives on the session (a leaked check reply would).
    client
        .set_read_timeout(Some(Duration::from_millis(400)))
        .unwrap();
    match client.recv(&mut buf) {
        Ok(n) => panic!(
            "unexpected extra datagram for the client: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) => assert!(
            matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "{e}"
        ),
    }
    let checks_during = probes() - checks_before;
    assert!(
        checks_during >= 6,
        "only {checks_during} check rounds ran during the session"
    );

    let s = status_json(http_port).unwrap();
    for (ups, name) in [("echo", echo.addr()), ("reply", reply.addr())] {
        assert!(s.is_up(Kind::Stream, ups, &name), "{s}");
        assert_eq!(s.int(Kind::Stream, ups, &name, "fails_total"), 0, "{s}");
        // The reply ended each round: no round waited for its deadline.
        let max = s.int(Kind::Stream, ups, &name, "max_delay_ms");
        assert!(
            (0..timeout).contains(&max),
            "{ups}: max delay {max} (timeout {timeout}): replies did not end the rounds: {s}"
        );
    }
}

/// Exactly one datagram per round with the exact payload, for a replying,
/// a silent and an echoing backend.
#[test]
fn one_datagram_per_round_with_exact_payload() {
    let reply = UdpBackend::start();
    let silent = UdpBackend::with_mode(UdpMode::Silent);
    let echo = Echo::bind(0).expect("bind echo");
    let port = free_port();
    let _ng = Nginx::start(&format!(
        "{}
stream {{
    upstream a {{
        server {reply};
        server {silent};
        server {echo};
        check type=udp interval=100 timeout=40 fall=1 rise=1;
    }}
}}",
        status_server(port),
        reply = reply.addr(),
        silent = silent.addr(),
        echo = echo.addr()
    ));
    poll_status_json(port, WAIT, "20 rounds per peer", |s| {
        [reply.addr(), silent.addr(), echo.addr()]
            .iter()
            .all(|n| s.checks(Kind::Stream, "a", n) >= 20)
    });
    let (n, got) =
        assert_one_datagram_per_round(port, Kind::Stream, "a", &reply.addr(), || reply.received());
    assert!(n >= 20 && got >= 19);
    assert_one_datagram_per_round(port, Kind::Stream, "a", &silent.addr(), || {
        silent.received()
    });
    assert_one_datagram_per_round(port, Kind::Stream, "a", &echo.addr(), || echo.received());
    for (name, payloads) in [
        ("reply", reply.payloads()),
        ("silent", silent.payloads()),
        ("echo", echo.payloads()),
    ] {
        let wrong: Vec<String> = payloads
            .iter()
            .filter(|p| p.as_slice() != PAYLOAD)
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        assert!(wrong.is_empty(), "{name}: unexpected payloads {wrong:?}");
    }
    let s = status_json(port).unwrap();
    assert_eq!(s.down(), Some(0), "{s}");
}

/// A port that closes goes down (ICMP unreachable), and up again once it
/// is bound again.
#[test]
fn port_closing_and_reopening_goes_down_and_up() {
    let b = UdpBackend::start();
    let port = free_port();
    let ng = Nginx::start(&format!(
        "{}
stream {{
    upstream flip {{
        server {addr};
        check type=udp interval=100 timeout=50 fall=2 rise=2;
    }}
}}",
        status_server(port),
        addr = b.addr()
    ));
    let name = b.addr();
    poll_status_json(port, WAIT, "3 good rounds", |s| {
        s.checks(Kind::Stream, "flip", &name) >= 3
    });
    for cycle in 0..2 {
        b.set_mode(UdpMode::Closed);
        let t = Instant::now();
        let s = poll_status_json(port, WAIT, format!("down (cycle {cycle})"), |s| {
            s.is_down(Kind::Stream, "flip", &name)
        });
        assert_eq!(
            s.row(Kind::Stream, "flip", &name)["last_failure_reason"],
            "icmp-unreachable",
            "{s}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "2 failures at interval 100 took {:?}",
            t.elapsed()
        );
        b.set_mode(UdpMode::Reply);
        let t = Instant::now();
        poll_status_json(port, WAIT, format!("up (cycle {cycle})"), |s| {
            s.is_up(Kind::Stream, "flip", &name)
        });
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "2 successes at interval 100 took {:?}",
            t.elapsed()
        );
    }
    assert_eq!(
        ng.log_lines(&format!(
            "peer {name} is down after 2 failures: port unreachable"
        ))
        .len(),
        2,
        "{}",
        ng.log()
    );
    assert_eq!(
        ng.log_lines(&format!("peer {name} is up after 2 successes"))
            .len(),
        2
    );
}

/// `type=udp` in an http upstream: the server whose port has no UDP socket
/// goes down and takes no HTTP requests; the one with a UDP responder on
/// the same port number stays up and serves all of them. A second
/// upstream checks a separate UDP port through `port=`.
#[test]
fn http_upstream_with_udp_check() {
    let (served, served_udp) = backend_with_udp_echo();
    // A TCP backend with no UDP socket on its port number.
    let unchecked = Backend::start();
    let other_udp = UdpBackend::start();
    let other_tcp = Backend::start();
    let port = free_port();
    let ng = Nginx::start(&format!(
        "http {{
    access_log off;
    upstream web {{
        server {served};
        server {unchecked};
        check type=udp interval=100 timeout=50 fall=2 rise=1;
    }}
    upstream ported {{
        server {other_tcp};
        check type=udp port={other_udp_port} interval=100 timeout=50 fall=1 rise=1;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{ proxy_pass http://web; }}
        location /ported {{ proxy_pass http://ported; }}
        location /status {{ healthcheck_status json; }}
    }}
}}",
        served = served.addr(),
        unchecked = unchecked.addr(),
        other_tcp = other_tcp.addr(),
        other_udp_port = other_udp.port()
    ));
    let s = poll_status_json(port, WAIT, "UDP-less http peer down", |s| {
        s.is_down(Kind::Http, "web", &unchecked.addr())
            && s.checks(Kind::Http, "ported", &other_tcp.addr()) >= 3
    });
    assert_eq!(
        s.row(Kind::Http, "web", &unchecked.addr())["last_failure_reason"],
        "icmp-unreachable",
        "{s}"
    );
    assert_eq!(s.row(Kind::Http, "web", &unchecked.addr())["type"], "udp");
    assert!(s.is_up(Kind::Http, "web", &served.addr()), "{s}");
    assert!(ng.log_contains(&format!(
        "peer {} is down after 2 failures: port unreachable (http udp check)",
        unchecked.addr()
    )));
    for i in 0..10 {
        let r = http_get(port, &format!("/{i}")).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), served.port().to_string(), "request {i}");
    }
    assert_eq!(unchecked.requests(), 0);
    // The UDP responder on the served port got only probes, one per round.
    assert_one_datagram_per_round(port, Kind::Http, "web", &served.addr(), || {
        served_udp.received()
    });
    assert!(served_udp.payloads().iter().all(|p| p == PAYLOAD));

    // port=: the probe goes to the UDP port, not the server's.
    let s = status_json(port).unwrap();
    let r = s.row(Kind::Http, "ported", &other_tcp.addr());
    assert_eq!(r["port"], other_udp.port(), "{s}");
    assert_eq!(r["status"], "up", "{s}");
    assert_one_datagram_per_round(port, Kind::Http, "ported", &other_tcp.addr(), || {
        other_udp.received()
    });
    assert_eq!(http_get(port, "/ported").unwrap().status, 200);
    other_udp.set_mode(UdpMode::Closed);
    poll_status_json(port, WAIT, "ported peer down", |s| {
        s.is_down(Kind::Http, "ported", &other_tcp.addr())
    });
    assert_eq!(http_get(port, "/ported").unwrap().status, 502);
}

/// The open descriptors of `pid` as (fd, link target) pairs.
fn fd_set(pid: u32) -> BTreeSet<(String, String)> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/fd: {e}"));
    dir.filter_map(|e| {
        let e = e.ok()?;
        let target = std::fs::read_link(e.path()).ok()?;
        Some((
            e.file_name().to_string_lossy().into_owned(),
            target.to_string_lossy().into_owned(),
        ))
    })
    .collect()
}

/// The resting descriptors of each worker: those present, unchanged, in
/// two snapshots taken longer than a round apart. A round in flight holds
/// a fresh socket (new inode) for at most its timeout, so it never counts;
/// a leaked socket stays and does. The smallest of a few such counts.
fn resting_fd_counts(ng: &Nginx, pids: &[u32]) -> Vec<usize> {
    let mut min = vec![usize::MAX; pids.len()];
    for _ in 0..5 {
        let first: Vec<_> = pids.iter().map(|&p| fd_set(p)).collect();
        thread::sleep(Duration::from_millis(120));
        for ((m, &pid), a) in min.iter_mut().zip(pids).zip(&first) {
            let stable = fd_set(pid).intersection(a).count();
            *m = (*m).min(stable);
        }
    }
    assert_eq!(ng.workers(), pids, "workers changed while sampling");
    min
}

/// 10 000 UDP rounds (100 peers at interval 100: 10 upstreams x 10
/// servers over 5 replying, 3 silent and 2 closed ports, about 10 s) on two
/// workers leave every worker's resting fd count where it was.
#[test]
fn ten_thousand_rounds_leave_fd_count_flat() {
    let backends: Vec<UdpBackend> = (0..10)
        .map(|i| match i {
            0..=4 => UdpBackend::start(),
            5..=7 => UdpBackend::with_mode(UdpMode::Silent),
            _ => UdpBackend::with_mode(UdpMode::Closed),
        })
        .collect();
    let servers: String = backends
        .iter()
        .map(|b| format!("        server {};\n", b.addr()))
        .collect();
    let upstreams: String = (0..10)
        .map(|u| {
            format!(
                "    upstream m{u} {{\n{servers}        \
                 check type=udp interval=100 timeout=30 fall=1 rise=1;\n    }}\n"
            )
        })
        .collect();
    let port = free_port();
    let ng = Nginx::builder().workers(2).start(&format!(
        "{}\nstream {{\n{upstreams}}}",
        status_server(port)
    ));
    let total = |s: &Status| -> i64 {
        s.peers(Kind::Stream)
            .iter()
            .map(|p| p["checks"].as_i64().unwrap_or(0))
            .sum()
    };
    let s = poll_status_json(port, WAIT, "every peer checked twice", |s| {
        s.peers(Kind::Stream).len() == 100
            && s.peers(Kind::Stream)
                .iter()
                .all(|p| p["checks"].as_i64() >= Some(2))
    });
    let pids = ng.workers();
    assert_eq!(pids.len(), 2);
    let before = resting_fd_counts(&ng, &pids);
    let start_checks = total(&s);
    let t = Instant::now();
    let target = start_checks + 10_000;
    let mut last = String::new();
    wait_until(
        Duration::from_secs(40),
        "10 000 more rounds",
        || match status_json(port) {
            Ok(s) => {
                last = format!("{} rounds", total(&s) - start_checks);
                total(&s) >= target
            }
            Err(e) => {
                last = e;
                false
            }
        },
    );
    let took = t.elapsed();
    let after = resting_fd_counts(&ng, &pids);
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!(
            a.abs_diff(*b) <= 2,
            "worker {} fd count {b} -> {a} after 10 000 rounds ({last}, {took:?})",
            pids[i]
        );
    }
    let s = status_json(port).unwrap();
    for b in &backends[..8] {
        for u in 0..10 {
            assert!(
                s.is_up(Kind::Stream, &format!("m{u}"), &b.addr()),
                "m{u} {}: {s}",
                b.addr()
            );
        }
    }
    for b in &backends[8..] {
        let fails: i64 = (0..10)
            .map(|u| s.int(Kind::Stream, &format!("m{u}"), &b.addr(), "fails_total"))
            .sum();
        assert!(fails > 0, "closed port {} never failed: {s}", b.addr());
    }
    eprintln!("10 000 UDP rounds in {took:?}; resting fds before {before:?} after {after:?}");
}
