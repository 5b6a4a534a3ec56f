//! `passive_fall` and `check_fail_open` with real traffic (docs/operations.md, Passive failures and Fail-open), each in the patched nginx and in stock mode.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use healthcheck_t::paths::{patched_bin, stock_bin};
use healthcheck_t::peers::{Peers, Role};
use healthcheck_t::{http_get, poll_status_json, status_json, Builder, Kind, Nginx, Row};

const LONG: Duration = Duration::from_secs(10);

/// The patched nginx and the unpatched one (stock mode).
fn binaries() -> [(&'static str, PathBuf); 2] {
    [("patched", patched_bin()), ("stock", stock_bin())]
}

/// An http context on `port` (listening with `reuseport`, so that the
/// kernel spreads connections over the workers) that proxies `/NAME/` to
/// upstream NAME and logs each request's pid and upstream addresses to
/// logs/upstream.log.
fn conf(port: u16, upstreams: &str, names: &[&str]) -> String {
    let locations: String = names
        .iter()
        .map(|n| format!("        location /{n}/ {{ proxy_pass http://{n}; }}\n"))
        .collect();
    format!(
        "http {{
    log_format attempts '$pid $upstream_addr';
    access_log logs/upstream.log attempts;
{upstreams}
    server {{
        listen 127.0.0.1:{port} reuseport;
{locations}
        location /status {{ access_log off; healthcheck_status json; }}
    }}
}}"
    )
}

/// The access-log lines written after the first `skip`: (pid, upstream
/// addresses tried, in order).
fn attempts(ng: &Nginx, skip: usize) -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(ng.prefix().join("logs/upstream.log")).unwrap_or_default();
    text.lines()
        .skip(skip)
        .filter_map(|l| {
            let (pid, addrs) = l.split_once(' ')?;
            let addrs = addrs.split(", ").map(str::to_string).collect();
            Some((pid.to_string(), addrs))
        })
        .collect()
}

fn log_lines(ng: &Nginx) -> usize {
    attempts(ng, 0).len()
}

/// Which peer served each of `n` requests to `path` (all must be 200).
fn served(port: u16, peers: &Peers, path: &str, n: usize) -> Vec<usize> {
    let mut count = vec![0; peers.len()];
    for _ in 0..n {
        let r = http_get(port, path).expect("request");
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        let i = peers.index_of(&r.text()).expect("a peer's name");
        count[i] += 1;
    }
    count
}

/// A peer whose traffic port refuses while its check port accepts, with
/// `max_fails=0` (nginx alone never takes it out): `passive_fall=4` takes
/// it down after exactly 4 failed attempts, counted across two workers,
/// and check rounds bring it back. Each phase sends requests one at a time
/// until the peer is down, so the count is exact; a phase whose failed
/// attempts all landed in one worker proves nothing about sharing and is
/// repeated (the kernel picks the worker: 1 in 8 phases).
#[test]
fn passive_fall_counts_failed_attempts_across_workers() {
    const FALL: usize = 4;
    for (mode, bin) in binaries() {
        let mut peers = Peers::start(2, Role::Http);
        let names = peers.names();
        // Peer 1's traffic port: nothing listens there any more.
        drop(peers.traffic.remove(1));
        let port = healthcheck_t::free_port();
        let ups = format!(
            "    upstream u {{ server {} max_fails=0; server {} max_fails=0;
        check type=tcp interval=200 rise=2 fall=3 port={} passive_fall={FALL}; }}\n",
            names[0], names[1], peers.check_port
        );
        let ng = Builder::default()
            .binary(bin)
            .workers(2)
            .start(&conf(port, &ups, &["u"]));
        let victim = Row::new(Kind::Http, "u", &names[1]);
        let mut shared = false;
        for phase in 0..8 {
            poll_status_json(port, LONG, "the victim up", |s| {
                victim.status(s) == Some("up")
            });
            let mark = log_lines(&ng);
            let checks = victim.int(&status_json(port).unwrap(), "checks");
            let mut down = false;
            for _ in 0..200 {
                let r = http_get(port, "/u/").expect("request");
                // proxy_next_upstream (default: error) retries the other peer.
                assert_eq!((r.status, r.text()), (200, names[0].clone()), "{mode}");
                let s = status_json(port).unwrap();
                if victim.status(&s) == Some("down") {
                    assert_eq!(
                        s.row(Kind::Http, "u", &names[1])["last_failure_reason"],
                        "passive",
                        "{mode}: {s}"
                    );
                    down = true;
                    break;
                }
            }
            assert!(down, "{mode}: the victim never went down");
            let tried: Vec<(String, Vec<String>)> = attempts(&ng, mark)
                .into_iter()
                .filter(|(_, a)| a.contains(&names[1]))
                .collect();
            assert_eq!(
                tried.len(),
                FALL,
                "{mode}: phase {phase}: {FALL} failed attempts take it down, not {}: {tried:?}",
                tried.len()
            );
            // Down: no attempt reaches it while it is down.
            let mark = log_lines(&ng);
            for _ in 0..10 {
                assert_eq!(http_get(port, "/u/").unwrap().status, 200);
            }
            let s = status_json(port).unwrap();
            if victim.status(&s) == Some("down") {
                let later = attempts(&ng, mark);
                assert!(
                    later.iter().all(|(_, a)| !a.contains(&names[1])),
                    "{mode}: attempts while down: {later:?}"
                );
            }
            // Only check rounds bring it back.
            let s = poll_status_json(port, LONG, "the victim up again", |s| {
                victim.status(s) == Some("up")
            });
            assert!(
                victim.int(&s, "checks") >= checks + 2,
                "{mode}: up again without rise=2 rounds: {s}"
            );
            let pids: BTreeSet<&String> = tried.iter().map(|(p, _)| p).collect();
            if pids.len() > 1 {
                shared = true;
                break;
            }
        }
        assert!(shared, "{mode}: every phase's failures hit one worker");
        let lines = ng.log_lines(&format!(
            "upstream u peer {} is down after {FALL} failed proxied attempts",
            names[1]
        ));
        assert!(
            !lines.is_empty() && lines[0].contains("[warn]"),
            "{mode}: {lines:?}"
        );
        ng.check_log();
    }
}

/// Every check fails while the traffic ports serve: without
/// `check_fail_open` the upstream answers 502; with `check_fail_open on`
/// it fails open (logged once at warn) and nginx balances over all peers;
/// when a check passes again it stops failing open and the down peer
/// gets no traffic.
#[test]
fn fail_open_lets_traffic_through_when_no_peer_is_up() {
    for (mode, bin) in binaries() {
        let peers = Peers::start(2, Role::Http);
        for c in &peers.checks {
            c.refuse();
        }
        let names = peers.names();
        let port = healthcheck_t::free_port();
        let mut ups = String::new();
        for (name, extra) in [("closed", ""), ("open", "check_fail_open on;")] {
            ups += &format!(
                "    upstream {name} {{ server {}; server {}; {extra}
        check type=tcp interval=100 rise=1 fall=1 default_down=true port={}; }}\n",
                names[0], names[1], peers.check_port
            );
        }
        let ng =
            Builder::default()
                .binary(bin)
                .workers(2)
                .start(&conf(port, &ups, &["closed", "open"]));
        let rows = |u: &str| [0, 1].map(|i| Row::new(Kind::Http, u, &names[i]));
        poll_status_json(port, LONG, "a round of every peer", |s| {
            rows("open")
                .iter()
                .chain(&rows("closed"))
                .all(|r| r.int(s, "checks") >= 1 && r.status(s) == Some("down"))
        });
        for _ in 0..10 {
            let r = http_get(port, "/closed/").unwrap();
            assert_eq!(
                r.status,
                502,
                "{mode}: no peer up, no fail-open: {}",
                r.text()
            );
        }
        let count = served(port, &peers, "/open/", 20);
        assert!(count.iter().all(|&n| n > 0), "{mode}: fail-open: {count:?}");
        let entering = ng.log_lines("upstream open fails open");
        assert_eq!(entering.len(), 1, "{mode}: {entering:?}");
        assert!(entering[0].contains("[warn]"), "{entering:?}");
        assert!(
            entering[0].contains("weight 0 of 2 of its checked peers is up (check_fail_open on)"),
            "{entering:?}"
        );
        assert!(ng.log_lines("upstream closed").is_empty(), "{}", ng.log());

        // Peer 0's check passes: one peer up, no longer failing open.
        peers.checks[0].serve();
        ng.wait_for_log("upstream open no longer fails open", LONG);
        poll_status_json(port, LONG, "peer 0 up", |s| {
            rows("open")[0].status(s) == Some("up")
        });
        let count = served(port, &peers, "/open/", 20);
        assert_eq!(count, vec![20, 0], "{mode}: only the up peer");
        ng.check_log();
    }
}

/// `check_fail_open N%` weighs peers: with weights 3, 1, 1, 1 and 40%, the
/// heavy peer alone up is 3 of 6 (50%, not failing open, although it is
/// one peer of four); a light peer alone is 1 of 6 (failing open).
#[test]
fn fail_open_threshold_is_by_weight() {
    for (mode, bin) in binaries() {
        let peers = Peers::start(4, Role::Http);
        let names = peers.names();
        for c in &peers.checks[1..] {
            c.refuse();
        }
        let port = healthcheck_t::free_port();
        let ups = format!(
            "    upstream u {{ server {} weight=3; server {}; server {}; server {};
        check_fail_open 40%;
        check type=tcp interval=100 rise=1 fall=1 port={}; }}\n",
            names[0], names[1], names[2], names[3], peers.check_port
        );
        let ng = Builder::default()
            .binary(bin)
            .workers(2)
            .start(&conf(port, &ups, &["u"]));
        let rows: Vec<Row> = names.iter().map(|n| Row::new(Kind::Http, "u", n)).collect();
        let state = |s: &healthcheck_t::Status| -> Vec<Option<String>> {
            rows.iter()
                .map(|r| r.status(s).map(str::to_string))
                .collect()
        };
        let want = |v: [&str; 4]| v.map(|x| Some(x.to_string())).to_vec();
        poll_status_json(port, LONG, "only the heavy peer up", |s| {
            state(s) == want(["up", "down", "down", "down"])
        });
        let count = served(port, &peers, "/u/", 24);
        assert_eq!(count, vec![24, 0, 0, 0], "{mode}: 50% up is above 40%");
        assert!(ng.log_lines("fails open").is_empty(), "{}", ng.log());

        // Swap, through 4 of 6 (never all down): a light peer alone up, 1 of 6.
        peers.checks[1].serve();
        poll_status_json(port, LONG, "a light peer up too", |s| {
            state(s) == want(["up", "up", "down", "down"])
        });
        peers.checks[0].refuse();
        poll_status_json(port, LONG, "only a light peer up", |s| {
            state(s) == want(["down", "up", "down", "down"])
        });
        ng.wait_for_log("upstream u fails open", LONG);
        let count = served(port, &peers, "/u/", 48);
        assert!(
            count.iter().all(|&n| n > 0),
            "{mode}: failing open, nginx balances over all: {count:?}"
        );
        let line = ng.wait_for_log("upstream u fails open", LONG);
        assert!(
            line.contains("weight 1 of 6 of its checked peers is up (check_fail_open 40%)"),
            "{line}"
        );
        ng.check_log();
    }
}

/// The stream side of both: `passive_fall` takes out a peer whose traffic
/// port refuses after exactly that many failed connections (nginx's
/// `proxy_next_upstream` goes on to the other peer), and an upstream whose
/// every check fails serves connections with `check_fail_open on`.
#[test]
fn stream_passive_fall_and_fail_open() {
    const FALL: usize = 3;
    for (mode, bin) in binaries() {
        let mut peers = Peers::start(2, Role::Raw);
        let names = peers.names();
        drop(peers.traffic.remove(1));
        let open = Peers::start(2, Role::Raw);
        for c in &open.checks {
            c.refuse();
        }
        let (port, open_port) = (healthcheck_t::free_port(), healthcheck_t::free_port());
        let status = healthcheck_t::free_port();
        let on = open.names();
        let body = format!(
            "stream {{
    log_format attempts '$pid $upstream_addr';
    access_log logs/upstream.log attempts;
    upstream p {{ server {} max_fails=0; server {} max_fails=0;
        check type=tcp interval=200 rise=2 fall=3 port={} passive_fall={FALL}; }}
    upstream o {{ server {}; server {}; check_fail_open on;
        check type=tcp interval=100 rise=1 fall=1 default_down=true port={}; }}
    server {{ listen 127.0.0.1:{port}; proxy_pass p; }}
    server {{ listen 127.0.0.1:{open_port}; proxy_pass o; }}
}}
http {{ server {{ listen 127.0.0.1:{status}; location /status {{ healthcheck_status json; }} }} }}",
            names[0], names[1], peers.check_port, on[0], on[1], open.check_port
        );
        let ng = Builder::default().binary(bin).start(&body);
        let victim = Row::new(Kind::Stream, "p", &names[1]);
        poll_status_json(status, LONG, "the victim up", |s| {
            victim.status(s) == Some("up")
        });
        let mut down = false;
        for _ in 0..100 {
            let reply = healthcheck_t::stream_roundtrip(port, b"hi").expect("stream");
            assert_eq!(String::from_utf8_lossy(&reply), names[0], "{mode}");
            let s = status_json(status).unwrap();
            if victim.status(&s) == Some("down") {
                assert_eq!(
                    s.row(Kind::Stream, "p", &names[1])["last_failure_reason"],
                    "passive",
                    "{mode}: {s}"
                );
                down = true;
                break;
            }
        }
        assert!(down, "{mode}: the victim never went down");
        let tried = attempts(&ng, 0)
            .into_iter()
            .filter(|(_, a)| a.contains(&names[1]))
            .count();
        assert_eq!(tried, FALL, "{mode}: failed attempts before down");

        // Fail-open: every check of `o` fails, yet both peers serve.
        let rows = [0, 1].map(|i| Row::new(Kind::Stream, "o", &on[i]));
        poll_status_json(status, LONG, "o checked and down", |s| {
            rows.iter()
                .all(|r| r.int(s, "checks") >= 1 && r.status(s) == Some("down"))
        });
        let mut seen = BTreeSet::new();
        for _ in 0..10 {
            let reply = healthcheck_t::stream_roundtrip(open_port, b"hi").expect("fail-open");
            seen.insert(String::from_utf8_lossy(&reply).into_owned());
        }
        assert_eq!(
            seen.len(),
            2,
            "{mode}: both peers serve while failing open: {seen:?}"
        );
        assert_eq!(
            ng.log_lines("upstream o fails open").len(),
            1,
            "{}",
            ng.log()
        );
        ng.check_log();
    }
}
