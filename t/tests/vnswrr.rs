//! The `vnswrr` balancer through a real nginx (docs/directives.md, vnswrr): which
//! backend served each request, counted per peer.
//!
//! With one worker a ring is walked by one cursor, so every `N` consecutive
//! selections among the same usable peers (`N` = their reduced weights'
//! sum) hold each peer exactly `weight / gcd` times, whatever the random
//! start: the tests count whole cycles and compare exactly.

use std::collections::HashMap;
use std::net::{Ipv4Addr, TcpStream};
use std::time::Duration;

use healthcheck_t::{
    free_port, http_get, nginx_t, poll_status_json, stream_roundtrip, udp_roundtrip, Backend,
    Builder, Kind, Mode, Nginx, UdpBackend,
};

const WAIT: Duration = Duration::from_secs(10);

/// `n` sequential requests; served-by port -> count.
fn http_counts(port: u16, n: usize) -> HashMap<u16, usize> {
    let mut counts = HashMap::new();
    for i in 0..n {
        let r = http_get(port, "/").unwrap_or_else(|e| panic!("request {i}: {e}"));
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        let served: u16 = r.text().trim().parse().expect("backend port");
        *counts.entry(served).or_default() += 1;
    }
    counts
}

/// The order in which `n` sequential requests were served.
fn http_sequence(port: u16, n: usize) -> Vec<u16> {
    (0..n)
        .map(|i| {
            let r = http_get(port, "/").unwrap_or_else(|e| panic!("request {i}: {e}"));
            assert_eq!(r.status, 200, "request {i}: {}", r.text());
            r.text().trim().parse().expect("backend port")
        })
        .collect()
}

fn expect_counts(got: &HashMap<u16, usize>, want: &[(&Backend, usize)]) {
    let want: HashMap<u16, usize> = want
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(b, n)| (b.port(), *n))
        .collect();
    assert_eq!(got, &want, "requests per backend port");
}

/// An http server on `port` proxying to upstream `u` (declared in `ups`),
/// with the status page.
fn http_conf(port: u16, ups: &str) -> String {
    format!(
        "http {{
    {ups}
    server {{
        listen 127.0.0.1:{port};
        location / {{ proxy_pass http://u; }}
        location /status {{ healthcheck_status json; }}
    }}
}}"
    )
}

#[test]
fn http_whole_cycles_match_weights_exactly() {
    let b: Vec<Backend> = (0..3).map(|_| Backend::start()).collect();
    let port = free_port();
    let _ng = Nginx::start(&http_conf(
        port,
        &format!(
            "upstream u {{
        vnswrr;
        server {} weight=5;
        server {} weight=3;
        server {} weight=2;
    }}",
            b[0].addr(),
            b[1].addr(),
            b[2].addr()
        ),
    ));
    // the first request is the worker's first selection (random start)
    for k in [1, 4] {
        let got = http_counts(port, 10 * k);
        expect_counts(&got, &[(&b[0], 5 * k), (&b[1], 3 * k), (&b[2], 2 * k)]);
    }
}

#[test]
fn http_order_is_smooth_wrr() {
    // {5, 1, 1}: one cycle is a a b a c a a, from a random start
    let b: Vec<Backend> = (0..3).map(|_| Backend::start()).collect();
    let port = free_port();
    let _ng = Nginx::start(&http_conf(
        port,
        &format!(
            "upstream u {{
        vnswrr max_init=1;
        server {} weight=5;
        server {};
        server {};
    }}",
            b[0].addr(),
            b[1].addr(),
            b[2].addr()
        ),
    ));
    let (a, bb, c) = (b[0].port(), b[1].port(), b[2].port());
    let cycle = [a, a, bb, a, c, a, a];
    let got = http_sequence(port, 21);
    let rotation = (0..7).find(|&s| (0..21).all(|i| got[i] == cycle[(s + i) % 7]));
    assert!(
        rotation.is_some(),
        "not a rotation of a a b a c a a (a={a} b={bb} c={c}): {got:?}"
    );
}

#[test]
fn down_peer_and_health_check_down_peer_are_skipped() {
    // c is `down`; d serves traffic but its check says down (it refused
    // once, then rise=1000 keeps it down while it serves again).
    let b: Vec<Backend> = (0..4).map(|_| Backend::start()).collect();
    let port = free_port();
    let _ng = Nginx::start(&http_conf(
        port,
        &format!(
            "upstream u {{
        vnswrr;
        server {} weight=5;
        server {} weight=3;
        server {} weight=2 down;
        server {} weight=4;
        check interval=100 rise=1000 fall=1 timeout=50;
    }}",
            b[0].addr(),
            b[1].addr(),
            b[2].addr(),
            b[3].addr()
        ),
    ));
    b[3].set_mode(Mode::Refuse);
    poll_status_json(port, WAIT, "d down", |s| {
        s.is_down(Kind::Http, "u", &b[3].addr())
    });
    b[3].set_mode(Mode::Serve);
    b[3].reset_counters();
    let got = http_counts(port, 8 * 6);
    expect_counts(&got, &[(&b[0], 30), (&b[1], 18)]);
    assert_eq!(b[3].requests(), 0, "a check-down peer was used");
    let s = healthcheck_t::status_json(port).expect("status");
    assert!(s.is_down(Kind::Http, "u", &b[3].addr()), "{s}");
}

#[test]
fn failed_peer_is_skipped_until_fail_timeout() {
    // e refuses: the request that picks it goes on to the next peer, and
    // max_fails=1 takes e out for fail_timeout.
    let b: Vec<Backend> = (0..2).map(|_| Backend::start()).collect();
    let e = Backend::with_mode(Mode::Refuse);
    let port = free_port();
    let ng = Nginx::start(&http_conf(
        port,
        &format!(
            "upstream u {{
        vnswrr;
        server {} weight=5;
        server {} weight=3;
        server {} weight=2 max_fails=1 fail_timeout=60s;
    }}",
            b[0].addr(),
            b[1].addr(),
            e.addr()
        ),
    ));
    // a whole cycle reaches e's nodes: every request still succeeds
    http_counts(port, 10);
    assert_eq!(
        ng.log_lines("upstream server temporarily disabled").len(),
        1,
        "{}",
        ng.log()
    );
    let got = http_counts(port, 8 * 5);
    expect_counts(&got, &[(&b[0], 25), (&b[1], 15)]);
    assert_eq!(
        ng.log_lines("connect() failed").len(),
        1,
        "e was tried again"
    );
}

#[test]
fn backup_takes_over_and_hands_back() {
    let primary: Vec<Backend> = (0..2).map(|_| Backend::start()).collect();
    let backup: Vec<Backend> = (0..2).map(|_| Backend::start()).collect();
    let port = free_port();
    let _ng = Nginx::start(&http_conf(
        port,
        &format!(
            "upstream u {{
        vnswrr;
        server {} weight=2;
        server {} weight=1;
        server {} weight=3 backup;
        server {} weight=1 backup;
        check interval=100 rise=1 fall=1 timeout=50;
    }}",
            primary[0].addr(),
            primary[1].addr(),
            backup[0].addr(),
            backup[1].addr()
        ),
    ));
    expect_counts(
        &http_counts(port, 3 * 4),
        &[(&primary[0], 8), (&primary[1], 4)],
    );

    for p in &primary {
        p.set_mode(Mode::Refuse);
    }
    poll_status_json(port, WAIT, "primaries down", |s| {
        primary
            .iter()
            .all(|p| s.is_down(Kind::Http, "u", &p.addr()))
    });
    expect_counts(
        &http_counts(port, 4 * 4),
        &[(&backup[0], 12), (&backup[1], 4)],
    );

    for p in &primary {
        p.set_mode(Mode::Serve);
    }
    poll_status_json(port, WAIT, "primaries up", |s| {
        primary.iter().all(|p| s.is_up(Kind::Http, "u", &p.addr()))
    });
    // the balancer trusts a "down" for at most a second
    healthcheck_t::wait_until(WAIT, "both primaries serve again", || {
        let got = http_counts(port, 3);
        got.contains_key(&primary[0].port()) && got.contains_key(&primary[1].port())
    });
    // the cycle restarts wherever the cursor is: skip to a cycle boundary
    // is not needed, any 3 consecutive selections hold 2 + 1
    expect_counts(
        &http_counts(port, 3 * 4),
        &[(&primary[0], 8), (&primary[1], 4)],
    );
}

#[test]
fn all_peers_down_is_502() {
    let b = Backend::start();
    let c = Backend::start();
    let port = free_port();
    let ng = Nginx::start(&http_conf(
        port,
        &format!(
            "upstream u {{
        vnswrr;
        server {} weight=2;
        server {} weight=1;
        check interval=100 rise=1 fall=1 timeout=50;
    }}",
            b.addr(),
            c.addr()
        ),
    ));
    b.set_mode(Mode::Refuse);
    c.set_mode(Mode::Refuse);
    poll_status_json(port, WAIT, "all down", |s| {
        s.is_down(Kind::Http, "u", &b.addr()) && s.is_down(Kind::Http, "u", &c.addr())
    });
    for _ in 0..3 {
        let r = http_get(port, "/").expect("request");
        assert_eq!(r.status, 502, "{}", r.text());
    }
    assert!(ng.log_contains("no live upstreams"), "{}", ng.log());
}

#[test]
fn with_zone_shares_and_backup() {
    let b: Vec<Backend> = (0..3).map(|_| Backend::start()).collect();
    let spare = Backend::start();
    let port = free_port();
    let _ng = Nginx::start(&http_conf(
        port,
        &format!(
            "upstream u {{
        zone u 64k;
        vnswrr;
        server {} weight=5;
        server {} weight=3;
        server {} weight=2;
        server {} backup;
        check interval=100 rise=1 fall=1 timeout=50;
    }}",
            b[0].addr(),
            b[1].addr(),
            b[2].addr(),
            spare.addr()
        ),
    ));
    expect_counts(
        &http_counts(port, 10 * 3),
        &[(&b[0], 15), (&b[1], 9), (&b[2], 6)],
    );
    b[0].set_mode(Mode::Refuse);
    poll_status_json(port, WAIT, "a down", |s| {
        s.is_down(Kind::Http, "u", &b[0].addr())
    });
    expect_counts(&http_counts(port, 5 * 3), &[(&b[1], 9), (&b[2], 6)]);
    for p in &b {
        p.set_mode(Mode::Refuse);
    }
    poll_status_json(port, WAIT, "all primaries down", |s| {
        b.iter().all(|p| s.is_down(Kind::Http, "u", &p.addr()))
    });
    expect_counts(&http_counts(port, 5), &[(&spare, 5)]);
}

#[test]
fn max_conns_peer_is_skipped_while_full() {
    // a holds one stream connection (max_conns=1): while it is open, the
    // other selections go to b; the shares return once it closes.
    let a = Backend::with_mode(Mode::Hang);
    let b = Backend::start();
    let (http_port, stream_port) = (free_port(), free_port());
    let _ng = Nginx::start(&format!(
        "http {{
    server {{
        listen 127.0.0.1:{http_port};
        location /status {{ healthcheck_status json; }}
    }}
}}
stream {{
    upstream s {{
        vnswrr;
        server {} weight=3 max_conns=1;
        server {} weight=1;
    }}
    server {{
        listen 127.0.0.1:{stream_port};
        proxy_pass s;
        proxy_timeout 30s;
    }}
}}",
        a.addr(),
        b.addr()
    ));
    // Hold connections until one reaches a (it hangs); the rest went to b.
    let mut held = Vec::new();
    healthcheck_t::wait_until(WAIT, "a connection on a", || {
        let s = TcpStream::connect((Ipv4Addr::LOCALHOST, stream_port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_millis(300))).ok();
        held.push(s);
        a.accepted() >= 1
    });
    b.reset_counters();
    for i in 0..8 {
        let reply = stream_roundtrip(stream_port, b"x\n").unwrap_or_else(|e| panic!("{i}: {e}"));
        assert_eq!(reply, b.port().to_string().as_bytes(), "request {i}");
    }
    assert_eq!(
        a.accepted(),
        1,
        "a got a second connection past max_conns=1"
    );
}

#[test]
fn stream_whole_cycles_match_weights_exactly() {
    let b: Vec<Backend> = (0..3).map(|_| Backend::start()).collect();
    let stream_port = free_port();
    let _ng = Nginx::start(&format!(
        "stream {{
    upstream s {{
        vnswrr;
        server {} weight=4;
        server {} weight=2;
        server {} weight=6;
    }}
    server {{
        listen 127.0.0.1:{stream_port};
        proxy_pass s;
    }}
}}",
        b[0].addr(),
        b[1].addr(),
        b[2].addr()
    ));
    // gcd 2: a cycle is 2 + 1 + 3 = 6 connections
    let mut counts: HashMap<u16, usize> = HashMap::new();
    for i in 0..6 * 5 {
        let reply = stream_roundtrip(stream_port, b"x\n").unwrap_or_else(|e| panic!("{i}: {e}"));
        let port: u16 = String::from_utf8_lossy(&reply)
            .trim()
            .parse()
            .expect("port");
        *counts.entry(port).or_default() += 1;
    }
    expect_counts(&counts, &[(&b[0], 10), (&b[1], 5), (&b[2], 15)]);
}

#[test]
fn stream_check_down_and_backup() {
    let a = Backend::start();
    let b = Backend::start();
    let spare = Backend::start();
    let (http_port, stream_port) = (free_port(), free_port());
    let _ng = Nginx::start(&format!(
        "http {{
    server {{
        listen 127.0.0.1:{http_port};
        location /status {{ healthcheck_status json; }}
    }}
}}
stream {{
    upstream s {{
        zone s 64k;
        vnswrr;
        server {} weight=2;
        server {} weight=1;
        server {} backup;
        check interval=100 rise=1 fall=1 timeout=50;
    }}
    server {{
        listen 127.0.0.1:{stream_port};
        proxy_pass s;
    }}
}}",
        a.addr(),
        b.addr(),
        spare.addr()
    ));
    let served = |n: usize| {
        let mut c: HashMap<u16, usize> = HashMap::new();
        for i in 0..n {
            let reply =
                stream_roundtrip(stream_port, b"x\n").unwrap_or_else(|e| panic!("{i}: {e}"));
            let port: u16 = String::from_utf8_lossy(&reply)
                .trim()
                .parse()
                .expect("port");
            *c.entry(port).or_default() += 1;
        }
        c
    };
    expect_counts(&served(9), &[(&a, 6), (&b, 3)]);
    a.set_mode(Mode::Refuse);
    poll_status_json(http_port, WAIT, "a down", |s| {
        s.is_down(Kind::Stream, "s", &a.addr())
    });
    expect_counts(&served(4), &[(&b, 4)]);
    b.set_mode(Mode::Refuse);
    poll_status_json(http_port, WAIT, "b down", |s| {
        s.is_down(Kind::Stream, "s", &b.addr())
    });
    expect_counts(&served(4), &[(&spare, 4)]);
}

#[test]
fn two_workers_share_out_by_weight() {
    let b: Vec<Backend> = (0..3).map(|_| Backend::start()).collect();
    let weights = [5usize, 3, 2];
    let port = free_port();
    let _ng = Builder::default().workers(2).start(&http_conf(
        port,
        &format!(
            "upstream u {{
        vnswrr;
        server {} weight=5;
        server {} weight=3;
        server {} weight=2;
    }}",
            b[0].addr(),
            b[1].addr(),
            b[2].addr()
        ),
    ));
    // Concurrent clients, so that both workers take connections.
    let n = 1000;
    let threads: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(move || http_counts(port, n / 4)))
        .collect();
    let mut counts: HashMap<u16, usize> = HashMap::new();
    for t in threads {
        for (k, v) in t.join().expect("client thread") {
            *counts.entry(k).or_default() += v;
        }
    }
    // Each worker's count is exact up to its last partial cycle, so the
    // total is within 2 * 10 of the weights; chi-square (2 degrees of
    // freedom, p = 0.001: 13.8) is the looser, conventional bound.
    let mut chi2 = 0.0;
    for (backend, w) in b.iter().zip(weights) {
        let expected = (n * w / 10) as f64;
        let observed = counts.get(&backend.port()).copied().unwrap_or(0) as f64;
        chi2 += (observed - expected).powi(2) / expected;
        assert!(
            (observed - expected).abs() <= 20.0,
            "{counts:?} vs weights {weights:?}"
        );
    }
    assert!(chi2 < 13.8, "chi-square {chi2}: {counts:?}");
}

#[test]
fn redefining_the_method_warns() {
    let port = free_port();
    for (first, second) in [
        ("least_conn;", "vnswrr;"),
        ("vnswrr;", "least_conn;"),
        ("hash $uri;", "vnswrr max_init=2;"),
    ] {
        let (code, out) = nginx_t(&http_conf(
            port,
            &format!("upstream u {{ {first} {second} server 127.0.0.1:1 weight=2; server 127.0.0.1:2; }}"),
        ));
        assert_eq!(code, 0, "{first} {second}: {out}");
        assert!(
            out.contains("[warn]") && out.contains("load balancing method redefined"),
            "{first} {second}: {out}"
        );
    }
    // stream too
    let (code, out) = nginx_t(&format!(
        "stream {{ upstream s {{ random; vnswrr; server 127.0.0.1:1; }} server {{ listen 127.0.0.1:{port}; proxy_pass s; }} }}"
    ));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("load balancing method redefined"), "{out}");
    // alone: no warning
    let (code, out) = nginx_t(&http_conf(
        port,
        "upstream u { vnswrr; server 127.0.0.1:1 weight=3; server 127.0.0.1:2 backup; }",
    ));
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("[warn]"), "{out}");
}

#[test]
fn resolve_is_refused() {
    let port = free_port();
    let (code, out) = nginx_t(&http_conf(
        port,
        "resolver 127.0.0.1 valid=1s;
    upstream u { zone u 64k; vnswrr; server localhost:1 resolve; }",
    ));
    assert_ne!(code, 0, "{out}");
    // nginx 1.27.3+ knows `resolve`; older ones reject the parameter itself
    assert!(
        out.contains("load balancing method does not support resolving names at run time")
            || out.contains("invalid parameter \"resolve\""),
        "{out}"
    );
}

#[test]
fn too_large_a_ring_fails_nginx_t() {
    let port = free_port();
    let (code, out) = nginx_t(&http_conf(
        port,
        "upstream u { vnswrr; server 127.0.0.1:1 weight=20000000; server 127.0.0.1:2; }",
    ));
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("[emerg]")
            && out.contains("\"vnswrr\" cannot balance upstream \"u\"")
            && out.contains("20000001 nodes"),
        "{out}"
    );
    // the same weights sharing a large gcd are fine
    let (code, out) = nginx_t(&http_conf(
        port,
        "upstream u { vnswrr; server 127.0.0.1:1 weight=20000000; server 127.0.0.1:2 weight=10000000; }",
    ));
    assert_eq!(code, 0, "{out}");
}

#[test]
fn single_server_honours_the_check() {
    // nginx's single-peer path: no ring, but a check-down peer is not used.
    let a = Backend::start();
    let port = free_port();
    let _ng = Nginx::start(&http_conf(
        port,
        &format!(
            "upstream u {{
        vnswrr;
        server {} weight=7;
        check interval=100 rise=1000 fall=1 timeout=50;
    }}",
            a.addr()
        ),
    ));
    expect_counts(&http_counts(port, 3), &[(&a, 3)]);
    a.set_mode(Mode::Refuse);
    poll_status_json(port, WAIT, "a down", |s| {
        s.is_down(Kind::Http, "u", &a.addr())
    });
    a.set_mode(Mode::Serve);
    a.reset_counters();
    for _ in 0..3 {
        let r = http_get(port, "/").expect("request");
        assert_eq!(r.status, 502, "{}", r.text());
    }
    assert_eq!(a.requests(), 0, "a check-down single peer was used");
}

#[test]
fn the_balancer_in_use_is_vnswrr() {
    // Counts alone cannot tell vnswrr from nginx's smooth round robin (the
    // same sequence): the debug log names the balancer that chose.
    let a = Backend::start();
    let b = Backend::start();
    let (port, stream_port) = (free_port(), free_port());
    let ng = Builder::default().log_level("debug").start(&format!(
        "{}
stream {{
    upstream s {{ vnswrr; server {a} weight=2; server {b}; }}
    server {{ listen 127.0.0.1:{stream_port}; proxy_pass s; }}
}}",
        http_conf(
            port,
            &format!(
                "upstream u {{ vnswrr; server {} weight=2; server {}; }}",
                a.addr(),
                b.addr()
            ),
        ),
        a = a.addr(),
        b = b.addr()
    ));
    http_counts(port, 3);
    stream_roundtrip(stream_port, b"x\n").expect("stream");
    let ours = ng.log_lines("get vnswrr peer, try:");
    assert!(ours.len() >= 4, "{}", ng.log());
    assert!(ng.log_lines("get rr peer").is_empty(), "round robin chose");
}

#[test]
fn stream_udp_whole_cycles_match_weights_exactly() {
    let b: Vec<UdpBackend> = (0..2).map(|_| UdpBackend::start()).collect();
    let port = free_port();
    let _ng = Nginx::start(&format!(
        "stream {{
    upstream s {{
        vnswrr;
        server {} weight=3;
        server {} weight=1;
    }}
    server {{
        listen 127.0.0.1:{port} udp;
        proxy_pass s;
        proxy_responses 1;
        proxy_timeout 2s;
    }}
}}",
        b[0].addr(),
        b[1].addr()
    ));
    let mut counts: HashMap<u16, usize> = HashMap::new();
    for i in 0..4 * 5 {
        let reply = udp_roundtrip(port, b"x").unwrap_or_else(|e| panic!("{i}: {e}"));
        let served: u16 = String::from_utf8_lossy(&reply)
            .trim()
            .parse()
            .expect("port");
        *counts.entry(served).or_default() += 1;
    }
    let want: HashMap<u16, usize> = [(b[0].port(), 15), (b[1].port(), 5)].into();
    assert_eq!(counts, want);
}

#[test]
fn every_load_starts_at_a_random_node() {
    // Equal weights: a worker's first request goes to server s + 1 for a
    // random s. Across reloads the first requests must not all hit the
    // same server (all equal by chance: 10^-6).
    let b: Vec<Backend> = (0..10).map(|_| Backend::start()).collect();
    let port = free_port();
    let servers: String = b
        .iter()
        .map(|x| format!("server {};\n", x.addr()))
        .collect();
    let conf = http_conf(port, &format!("upstream u {{ vnswrr; {servers} }}"));
    let mut ng = Nginx::start(&conf);
    let mut firsts = vec![http_sequence(port, 1)[0]];
    for _ in 0..6 {
        let old = ng.all_workers();
        ng.reload();
        ng.wait_workers_gone(&old, WAIT);
        firsts.push(http_sequence(port, 1)[0]);
    }
    firsts.sort_unstable();
    firsts.dedup();
    assert!(firsts.len() > 1, "every load started on {firsts:?}");
}
