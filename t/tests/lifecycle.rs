//! Life cycle of the module (docs/directives.md, check (default_down) and check_shm_size; docs/design.md, How checks work and Reloads): state inherited across reloads by
//! peer identity, `generation`, zone sizing, reload storms, killed workers,
//! single-process mode, binary upgrade and the helper processes of
//! `proxy_cache_path`.
//!
//! A trick used throughout: with `rise=1000 fall=1000` a peer keeps its
//! state for 100 s at `interval=100` whatever its backend does, so after a
//! reload its state says where it came from: the old configuration
//! (inherited) or `default_down` (fresh). The `checks` counter says the same
//! independently: an inherited slot continues counting, a fresh one starts
//! at 0.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use healthcheck_t::conf::http_conf_with;
use healthcheck_t::page::{parse_html, parse_prom_page};
use healthcheck_t::paths::{module_path, nginx_bin};
use healthcheck_t::ss::ss;
use healthcheck_t::{
    fd_count, free_port, http_get, nginx_t, poll_status_json, process, status_json,
    stream_roundtrip, try_wait_until, wait_for, wait_until, Backend, Kind, Mode, Nginx, Status,
};

use Kind::{Http, Stream};

/// Budget for anything that should happen within a few intervals.
const WAIT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------
// Configuration and status helpers
// ---------------------------------------------------------------------------

fn status(port: u16) -> Status {
    status_json(port).unwrap_or_else(|e| panic!("status: {e}"))
}

fn generation(s: &Status) -> i64 {
    s.generation()
        .unwrap_or_else(|| panic!("no generation: {s}"))
}

/// Reload into `body` and wait until the old workers are gone: until then
/// an old worker may still answer a request (with the old zone), and a port
/// the old configuration listened on is still bound.
fn reload_settled(ng: &mut Nginx, body: &str) {
    let old = ng.all_workers();
    ng.reload_with(body);
    ng.wait_workers_gone(&old, WAIT);
}

/// The most rounds a fresh state (a new slot, checked every `interval` ms)
/// can have run since `since`: the new worker checks it at a random point
/// of its first interval, then once per interval. Fresh counters are held
/// to this bound, not to the old counters, which a slow reload would let
/// them reach; inherited ones exceed it.
fn fresh_rounds_bound(since: Instant, interval: u64) -> i64 {
    (since.elapsed().as_millis() as u64 / interval) as i64 + 1
}

/// Poll until the status document shows generation `g`.
fn wait_generation(port: u16, g: i64) -> Status {
    poll_status_json(port, WAIT, format!("generation {g}"), |s| {
        s.generation() == Some(g)
    })
}

/// `n` distinct loopback addresses (127.1.x.y:9) nothing listens on, for
/// padding upstreams; their probes are refused.
fn fillers(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("127.1.{}.{}:9", i / 250, i % 250 + 1))
        .collect()
}

fn servers(addrs: &[String]) -> String {
    addrs
        .iter()
        .map(|a| format!("server {a}; "))
        .collect::<String>()
}

/// The number right before "bytes" in a "too small" message.
fn needed_bytes(msg: &str) -> usize {
    let line = msg
        .lines()
        .find(|l| l.contains("too small"))
        .unwrap_or_else(|| panic!("no \"too small\" line in: {msg}"));
    let before = &line[..line
        .find(" bytes")
        .unwrap_or_else(|| panic!("no \"bytes\" in: {line}"))];
    let digits: String = before
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number before \"bytes\" in: {line}"))
}

/// Resident set size of `pid` in kB.
fn rss_kb(pid: u32) -> u64 {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/pid/status");
    text.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/pid/status")
}

/// Children of `ppid` whose title starts with `prefix`.
fn children_titled(ppid: u32, prefix: &str) -> Vec<u32> {
    process::children(ppid)
        .into_iter()
        .filter(|&p| process::title(p).is_some_and(|t| t.starts_with(prefix)))
        .collect()
}

// ---------------------------------------------------------------------------
// Who holds a TCP connection (`ss -tnp`: the kernel filters by port, which
// a scan of /proc/net/tcp on a busy host is too slow for)
// ---------------------------------------------------------------------------

/// Pids holding a TCP connection whose remote port is `port`.
fn ss_pids(port: u16) -> Vec<u32> {
    ss(&["-tnpH", "dport", "=", &format!(":{port}")])
        .split("pid=")
        .skip(1)
        .filter_map(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// Which of `pids` hold a connection to one of `ports` right now.
fn connection_owners(ports: &[u16], pids: &[u32]) -> Vec<u32> {
    let holders: HashSet<u32> = ports.iter().flat_map(|&p| ss_pids(p)).collect();
    pids.iter()
        .copied()
        .filter(|p| holders.contains(p))
        .collect()
}

// ---------------------------------------------------------------------------
// Background load: a proxy hammer and a status watcher
// ---------------------------------------------------------------------------

/// Outcome counts per target: "200 <body>", "502", "error: ...".
type Tally = BTreeMap<String, BTreeMap<String, usize>>;

/// Requests `targets` in a loop from a thread until finished. A target is
/// an http path (`/x`) or `stream:<port>` (a stream round trip).
struct Hammer {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Tally>>,
}

impl Hammer {
    fn start(port: u16, targets: &[&str]) -> Hammer {
        let stop = Arc::new(AtomicBool::new(false));
        let targets: Vec<String> = targets.iter().map(|t| t.to_string()).collect();
        let flag = Arc::clone(&stop);
        let handle = thread::spawn(move || {
            let mut tally = Tally::new();
            while !flag.load(Ordering::SeqCst) {
                for t in &targets {
                    let outcome = if let Some(p) = t.strip_prefix("stream:") {
                        let p: u16 = p.parse().expect("stream port");
                        match stream_roundtrip(p, b"hello\n") {
                            Ok(b) => format!("reply {}", String::from_utf8_lossy(&b)),
                            Err(e) => format!("error: {e}"),
                        }
                    } else {
                        match http_get(port, t) {
                            Ok(r) if r.status == 200 => format!("200 {}", r.text()),
                            Ok(r) => format!("{}", r.status),
                            Err(e) => format!("error: {e}"),
                        }
                    };
                    *tally
                        .entry(t.clone())
                        .or_default()
                        .entry(outcome)
                        .or_default() += 1;
                }
            }
            tally
        });
        Hammer {
            stop,
            handle: Some(handle),
        }
    }

    fn finish(mut self) -> Tally {
        self.stop.store(true, Ordering::SeqCst);
        self.handle
            .take()
            .expect("not finished")
            .join()
            .expect("hammer thread panicked")
    }
}

impl Drop for Hammer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Only `expected` outcomes for `target`, and at least `min` requests.
fn assert_only(tally: &Tally, target: &str, expected: &str, min: usize) {
    let outcomes = tally
        .get(target)
        .unwrap_or_else(|| panic!("no requests to {target}"));
    let total: usize = outcomes.values().sum();
    assert!(
        outcomes.keys().all(|k| k == expected),
        "{target}: expected only {expected:?}, got {outcomes:?}"
    );
    assert!(
        total >= min,
        "{target}: only {total} requests during the test (want >= {min})"
    );
}

/// Polls the status page from a thread and records every document that
/// breaks `check` (which returns a description of the problem).
struct Watcher {
    stop: Arc<AtomicBool>,
    polls: Arc<AtomicUsize>,
    /// Answers cut off with no byte (their worker was killed mid-request),
    /// when the watcher is told to expect them.
    cut: Arc<AtomicUsize>,
    handle: Option<JoinHandle<(Vec<String>, Duration)>>,
}

impl Watcher {
    fn start(port: u16, check: impl FnMut(&Status) -> Option<String> + Send + 'static) -> Watcher {
        Watcher::start_with(port, false, check)
    }

    /// `kills`: workers are killed meanwhile; a request the killed worker
    /// had accepted ends with no answer at all, counted in `cut`, not a
    /// problem (any answer that came is still checked).
    fn start_with(
        port: u16,
        kills: bool,
        mut check: impl FnMut(&Status) -> Option<String> + Send + 'static,
    ) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let polls = Arc::new(AtomicUsize::new(0));
        let cut = Arc::new(AtomicUsize::new(0));
        let (flag, count, cuts) = (Arc::clone(&stop), Arc::clone(&polls), Arc::clone(&cut));
        let handle = thread::spawn(move || {
            let mut problems = Vec::new();
            let mut slowest = Duration::ZERO;
            while !flag.load(Ordering::SeqCst) {
                let t = Instant::now();
                let r = status_json(port);
                slowest = slowest.max(t.elapsed());
                count.fetch_add(1, Ordering::SeqCst);
                let problem = match r {
                    Ok(s) => check(&s),
                    Err(e)
                        if kills
                            && (e.ends_with("no end of headers in \"\"")
                                || e.contains("reset by peer")) =>
                    {
                        cuts.fetch_add(1, Ordering::SeqCst);
                        None
                    }
                    Err(e) => Some(format!("status failed: {e}")),
                };
                if let Some(p) = problem {
                    problems.push(p);
                }
                thread::sleep(Duration::from_millis(20));
            }
            (problems, slowest)
        });
        Watcher {
            stop,
            polls,
            cut,
            handle: Some(handle),
        }
    }

    /// Problems seen, the number of polls and the slowest status answer.
    fn finish(mut self) -> (Vec<String>, usize, Duration) {
        self.stop.store(true, Ordering::SeqCst);
        let (problems, slowest) = self
            .handle
            .take()
            .expect("not finished")
            .join()
            .expect("watcher thread panicked");
        (problems, self.polls.load(Ordering::SeqCst), slowest)
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn first_problems(problems: &[String]) -> String {
    let mut s = problems
        .iter()
        .take(5)
        .cloned()
        .collect::<Vec<_>>()
        .join("\n");
    if problems.len() > 5 {
        s.push_str(&format!("\n... {} more", problems.len() - 5));
    }
    s
}

// ---------------------------------------------------------------------------
// State kept across reload
// ---------------------------------------------------------------------------

// A check-down peer gets no request before, during or after reloads; an up
// peer of a `default_down=true` upstream never answers 502 across them.
#[test]
fn reload_keeps_down_peer_unselected_and_up_peer_serving() {
    let down = Backend::with_mode(Mode::Refuse);
    let other = Backend::start();
    let dd = Backend::start();
    let port = free_port();
    let conf = |interval: u32| {
        http_conf_with(
            port,
            &format!(
                "upstream held {{ server {}; server {}; check interval={interval} rise=1000 fall=1; }}
    upstream dd {{ server {}; check interval={interval} rise=2 fall=3 default_down=true; }}",
                down.addr(),
                other.addr(),
                dd.addr()
            ),
            "location /held { proxy_pass http://held; }
        location /dd { proxy_pass http://dd; }",
        )
    };
    let mut ng = Nginx::builder().workers(2).start(&conf(100));
    let s = poll_status_json(port, WAIT, "held/down down, dd up", |s| {
        s.is_down(Http, "held", &down.addr())
            && s.is_up(Http, "held", &other.addr())
            && s.is_up(Http, "dd", &dd.addr())
    });
    let g = generation(&s);
    // From now on the down peer's checks succeed, but rise=1000 keeps it
    // down: any request it gets was selected while check-down.
    down.set_mode(Mode::Serve);
    assert_eq!(down.requests(), 0);

    let hammer = Hammer::start(port, &["/held", "/dd"]);
    // Let the hammer run before, between and after the reloads.
    let settle = |n: usize| {
        wait_until(WAIT, "proxied traffic", || dd.requests() >= n);
    };
    settle(10);
    reload_settled(&mut ng, &conf(100));
    wait_generation(port, g + 1);
    settle(dd.requests() + 20);
    // An interval change keeps the identity too.
    reload_settled(&mut ng, &conf(150));
    wait_generation(port, g + 2);
    settle(dd.requests() + 20);
    let tally = hammer.finish();

    assert_eq!(
        down.requests(),
        0,
        "the check-down peer got requests across reloads: {tally:?}"
    );
    assert_only(&tally, "/held", &format!("200 {}", other.port()), 20);
    assert_only(&tally, "/dd", &format!("200 {}", dd.port()), 20);
    let s = status(port);
    assert!(s.is_down(Http, "held", &down.addr()), "{s}");
    assert!(s.is_up(Http, "dd", &dd.addr()), "{s}");
}

// rise, fall, checks, fails_total, delay statistics and failure details
// continue across a reload (with a changed interval).
#[test]
fn reload_carries_counters_and_delays() {
    let ok = Backend::start();
    let bad = Backend::with_mode(Mode::Refuse);
    let port = free_port();
    let conf = |interval: u32| {
        http_conf_with(
            port,
            &format!(
                "upstream u {{ server {}; server {}; check interval={interval} rise=1 fall=1; }}",
                ok.addr(),
                bad.addr()
            ),
            "",
        )
    };
    let mut ng = Nginx::start(&conf(100));
    let s1 = poll_status_json(port, WAIT, "5 rounds each", |s| {
        s.get_int(Http, "u", &ok.addr(), "checks") >= Some(5)
            && s.peer(Http, "u", &bad.addr())
                .is_some_and(|p| p["checks"].as_i64() >= Some(5) && p["status"] == "down")
    });
    let g = generation(&s1);
    reload_settled(&mut ng, &conf(120));
    let s2 = wait_generation(port, g + 1);

    let (o, b) = (ok.addr(), bad.addr());
    for name in [&o, &b] {
        for field in ["checks", "fails_total"] {
            assert!(
                s2.int(Http, "u", name, field) >= s1.int(Http, "u", name, field),
                "{name} {field} went back after reload:\nbefore {s1}\nafter {s2}"
            );
        }
    }
    // The healthy peer: rise keeps counting, delays are kept.
    assert!(s2.is_up(Http, "u", &o), "{s2}");
    assert!(
        s2.int(Http, "u", &o, "rise") >= s1.int(Http, "u", &o, "rise"),
        "rise reset:\nbefore {s1}\nafter {s2}"
    );
    assert_eq!(s2.int(Http, "u", &o, "fails_total"), 0, "{s2}");
    let (min1, max1) = (
        s1.int(Http, "u", &o, "min_delay_ms"),
        s1.int(Http, "u", &o, "max_delay_ms"),
    );
    assert!(min1 >= 0 && max1 >= 0, "{s1}");
    let (min2, max2) = (
        s2.int(Http, "u", &o, "min_delay_ms"),
        s2.int(Http, "u", &o, "max_delay_ms"),
    );
    assert!(
        (0..=min1).contains(&min2) && max2 >= max1,
        "delays not carried:\nbefore {s1}\nafter {s2}"
    );
    for field in ["last_delay_ms", "avg_delay_ms"] {
        assert!(s2.int(Http, "u", &o, field) >= 0, "{field}: {s2}");
    }
    // The failing peer: fall keeps counting, its failure details stay.
    assert!(s2.is_down(Http, "u", &b), "{s2}");
    assert!(
        s2.int(Http, "u", &b, "fall") >= s1.int(Http, "u", &b, "fall"),
        "fall reset:\nbefore {s1}\nafter {s2}"
    );
    let (r1, r2) = (s1.row(Http, "u", &b), s2.row(Http, "u", &b));
    assert_eq!(r2["last_failure_reason"], "refused", "{s2}");
    assert!(r1["last_change"].is_u64(), "{s1}");
    assert_eq!(r2["last_change"], r1["last_change"], "last_change");
    assert_eq!(r2["down_since"], r1["down_since"], "down_since");
    assert_eq!(r2["min_delay_ms"], -1, "never succeeded: {s2}");
}

// The same address in two upstreams has two states: down in one (its check
// goes to a refusing port), up in the other; both survive a reload.
#[test]
fn same_address_in_two_upstreams_keeps_two_states() {
    let a = Backend::start();
    let refusing = Backend::with_mode(Mode::Refuse);
    let port = free_port();
    let conf = http_conf_with(
        port,
        &format!(
            "upstream one {{ server {a}; check interval=100 rise=1 fall=1 port={rp}; }}
    upstream two {{ server {a}; check interval=100 rise=1 fall=1; }}",
            a = a.addr(),
            rp = refusing.port()
        ),
        "location /one { proxy_pass http://one; }
        location /two { proxy_pass http://two; }",
    );
    let mut ng = Nginx::start(&conf);
    let addr = a.addr();
    let s1 = poll_status_json(port, WAIT, "one down, two up, 3 rounds", |s| {
        s.is_down(Http, "one", &addr)
            && s.is_up(Http, "two", &addr)
            && s.get_int(Http, "one", &addr, "checks") >= Some(3)
            && s.get_int(Http, "two", &addr, "checks") >= Some(3)
    });
    let check_proxy = || {
        assert_eq!(http_get(port, "/one").unwrap().status, 502);
        assert_eq!(http_get(port, "/two").unwrap().text(), a.port().to_string());
    };
    check_proxy();

    reload_settled(&mut ng, &conf);
    let s2 = wait_generation(port, generation(&s1) + 1);
    assert!(s2.is_down(Http, "one", &addr), "{s2}");
    assert!(s2.is_up(Http, "two", &addr), "{s2}");
    for ups in ["one", "two"] {
        assert!(
            s2.checks(Http, ups, &addr) >= s1.checks(Http, ups, &addr),
            "{ups}: checks reset:\nbefore {s1}\nafter {s2}"
        );
    }
    assert_eq!(s2.int(Http, "two", &addr, "fails_total"), 0, "{s2}");
    assert!(
        s2.int(Http, "one", &addr, "fails_total") >= s1.int(Http, "one", &addr, "fails_total"),
        "{s2}"
    );
    check_proxy();
}

// ---------------------------------------------------------------------------
// Resize, reorder, identity changes
// ---------------------------------------------------------------------------

// 50 peers added (the zone grows), the old ones reordered: state follows
// identity, new peers start at default_down; shrinking back keeps it too.
#[test]
fn resize_and_reorder_keep_state_by_identity() {
    let a = Backend::start();
    let b = Backend::with_mode(Mode::Refuse);
    let port = free_port();
    let (aa, ba) = (a.addr(), b.addr());
    let fill = fillers(50);
    let conf = |peers: &str, check: &str| {
        http_conf_with(
            port,
            &format!("upstream u {{ {peers} check interval=100 {check}; }}"),
            "location / { proxy_pass http://u; }",
        )
    };
    let mut ng = Nginx::start(&conf(&servers(&[aa.clone(), ba.clone()]), "rise=1 fall=1"));
    let s1 = poll_status_json(port, WAIT, "a up, b down, 10 rounds each", |s| {
        s.is_up(Http, "u", &aa)
            && s.is_down(Http, "u", &ba)
            && [&aa, &ba]
                .iter()
                .all(|n| s.get_int(Http, "u", n, "checks") >= Some(10))
    });
    let g = generation(&s1);

    // Reordered, grown by 50 peers; thresholds changed so nothing can flip.
    let mut grown = vec![ba.clone(), aa.clone()];
    grown.extend(fill.iter().cloned());
    let reloaded = Instant::now();
    reload_settled(
        &mut ng,
        &conf(&servers(&grown), "rise=1000 fall=1000 default_down=true"),
    );
    let s2 = wait_generation(port, g + 1);
    let fresh = fresh_rounds_bound(reloaded, 100);
    assert_eq!(s2.total(), Some(52), "{s2}");
    assert_eq!(s2.int(Http, "u", &ba, "index"), 0, "{s2}");
    assert_eq!(s2.int(Http, "u", &aa, "index"), 1, "{s2}");
    assert!(s2.is_up(Http, "u", &aa), "a lost its state: {s2}");
    assert!(s2.is_down(Http, "u", &ba), "{s2}");
    for n in [&aa, &ba] {
        assert!(
            s2.checks(Http, "u", n) >= s1.checks(Http, "u", n),
            "{n}: checks reset:\nbefore {s1}\nafter {s2}"
        );
        assert!(
            s2.int(Http, "u", n, "fails_total") >= s1.int(Http, "u", n, "fails_total"),
            "{s2}"
        );
    }
    for f in &fill {
        assert!(
            s2.is_down(Http, "u", f),
            "new peer {f} not default_down: {s2}"
        );
        assert!(
            s2.checks(Http, "u", f) <= fresh,
            "new peer {f} inherited counters (a fresh one has at most {fresh}): {s2}"
        );
        assert!(s2.row(Http, "u", f)["last_change"].is_null(), "{s2}");
    }

    // Shrink back to the original order; default_down flipped: a fresh b
    // would now start up.
    reload_settled(
        &mut ng,
        &conf(
            &servers(&[aa.clone(), ba.clone()]),
            "rise=1000 fall=1000 default_down=false",
        ),
    );
    let s3 = wait_generation(port, g + 2);
    assert_eq!(s3.total(), Some(2), "{s3}");
    assert!(s3.is_up(Http, "u", &aa), "{s3}");
    assert!(s3.is_down(Http, "u", &ba), "b lost its state: {s3}");
    for n in [&aa, &ba] {
        assert!(
            s3.checks(Http, "u", n) >= s2.checks(Http, "u", n),
            "{n}: checks reset:\nbefore {s2}\nafter {s3}"
        );
    }
    for _ in 0..10 {
        assert_eq!(http_get(port, "/").unwrap().text(), a.port().to_string());
    }
}

/// The upstream `u` with one server and `check`.
fn one_peer(port: u16, addr: &str, check: &str) -> String {
    http_conf_with(
        port,
        &format!("upstream u {{ server {addr}; check {check}; }}"),
        "",
    )
}

/// Wait until peer `name` of `u` has at least `n` checks; returns the status.
fn wait_checks(port: u16, name: &str, n: i64) -> Status {
    poll_status_json(port, WAIT, format!("{n} rounds of {name}"), |s| {
        s.get_int(Http, "u", name, "checks") >= Some(n)
    })
}

// Changing interval, timeout, rise, fall, reuse, keepalive or default_down
// keeps a peer's state; changing the check port or type gives it a fresh
// state (default_down applies).
#[test]
fn check_port_or_type_change_gives_fresh_state() {
    let a = Backend::start();
    let other = Backend::start();
    let port = free_port();
    let name = a.addr();
    let op = other.port();
    let mut ng = Nginx::start(&one_peer(
        port,
        &name,
        "interval=100 rise=1 fall=1 default_down=true",
    ));
    let s = poll_status_json(port, WAIT, "up", |s| s.is_up(Http, "u", &name));
    let mut g = generation(&s);
    let s = wait_checks(port, &name, 10);

    let mut step = |check: &str| {
        let before = wait_checks(port, &name, 10).checks(Http, "u", &name);
        let reloaded = Instant::now();
        reload_settled(&mut ng, &one_peer(port, &name, check));
        g += 1;
        let after = wait_generation(port, g);
        (before, after, fresh_rounds_bound(reloaded, 100))
    };

    // Same identity: interval, timeout, rise, fall, reuse, keepalive changed.
    let (before, s1, _) = step(
        "interval=200 timeout=150 rise=1000 fall=1000 default_down=true reuse=on keepalive=on",
    );
    assert!(s1.is_up(Http, "u", &name), "state lost: {s1}");
    assert!(s1.checks(Http, "u", &name) >= before, "checks reset: {s1}");
    assert!(s1.checks(Http, "u", &name) >= s.checks(Http, "u", &name));

    // New check port: fresh state, down by default_down=true.
    let (_, s2, fresh) = step(&format!(
        "interval=100 rise=1000 fall=1000 default_down=true port={op}"
    ));
    assert!(
        s2.is_down(Http, "u", &name),
        "port change kept the state: {s2}"
    );
    assert!(
        s2.checks(Http, "u", &name) <= fresh,
        "counters kept (a fresh state has at most {fresh}): {s2}"
    );
    assert_eq!(s2.int(Http, "u", &name, "port"), i64::from(op), "{s2}");
    assert!(s2.row(Http, "u", &name)["last_change"].is_null(), "{s2}");

    // New check type: fresh state, up by default_down=false.
    let (_, s3, fresh) = step(&format!(
        "type=udp interval=100 rise=1000 fall=1000 default_down=false port={op}"
    ));
    assert!(
        s3.is_up(Http, "u", &name),
        "type change kept the state: {s3}"
    );
    assert!(
        s3.checks(Http, "u", &name) <= fresh,
        "counters kept (a fresh state has at most {fresh}): {s3}"
    );
    assert_eq!(s3.row(Http, "u", &name)["type"], "udp", "{s3}");

    // Same identity again (udp, same port): default_down flipped, kept.
    let (before, s4, _) = step(&format!(
        "type=udp interval=150 timeout=100 rise=1000 fall=1000 default_down=true port={op}"
    ));
    assert!(s4.is_up(Http, "u", &name), "state lost: {s4}");
    assert!(s4.checks(Http, "u", &name) >= before, "checks reset: {s4}");
}

// docs/design.md, Reloads: identity uses the *effective* check port. `port=`
// naming the server's own port does not change where the probe goes, so the
// state must be kept.
#[test]
fn explicit_port_equal_to_server_port_keeps_state() {
    let a = Backend::start();
    let port = free_port();
    let name = a.addr();
    let mut ng = Nginx::start(&one_peer(
        port,
        &name,
        "interval=100 rise=1 fall=1 default_down=true",
    ));
    poll_status_json(port, WAIT, "up", |s| s.is_up(Http, "u", &name));
    let s1 = wait_checks(port, &name, 5);
    reload_settled(
        &mut ng,
        &one_peer(
            port,
            &name,
            &format!(
                "interval=100 rise=1000 fall=1000 default_down=true port={}",
                a.port()
            ),
        ),
    );
    let s2 = wait_generation(port, generation(&s1) + 1);
    assert!(
        s2.is_up(Http, "u", &name),
        "same effective check address, state lost: {s2}"
    );
    assert!(
        s2.checks(Http, "u", &name) >= s1.checks(Http, "u", &name),
        "checks reset: {s2}"
    );
}

// ---------------------------------------------------------------------------
// Upstreams and whole blocks added and removed
// ---------------------------------------------------------------------------

#[test]
fn blocks_and_upstreams_added_and_removed() {
    let h = Backend::start();
    let sb = Backend::start();
    let (port, sport) = (free_port(), free_port());
    let (ha, sa) = (h.addr(), sb.addr());
    let conf = |extra_http: bool, stream_default_down: Option<bool>| {
        let mut ups = format!("upstream h {{ server {ha}; check interval=100 rise=1 fall=1; }}");
        if extra_http {
            ups.push_str(&format!(
                "\n    upstream h2 {{ server {ha}; check interval=100 rise=1000 fall=1000 default_down=true; }}"
            ));
        }
        let mut body = http_conf_with(port, &ups, "");
        if let Some(dd) = stream_default_down {
            body.push_str(&format!(
                "
stream {{
    upstream s {{ server {sa}; check interval=100 rise=1000 fall=1000 default_down={dd}; }}
    server {{ listen 127.0.0.1:{sport}; proxy_pass s; }}
}}"
            ));
        }
        body
    };
    let mut ng = Nginx::start(&conf(false, None));
    let s1 = poll_status_json(port, WAIT, "h up", |s| {
        s.is_up(Http, "h", &ha) && s.get_int(Http, "h", &ha, "checks") >= Some(5)
    });
    assert_eq!(s1.total(), Some(1), "{s1}");

    // Add a stream block and a second http upstream with the same address.
    let reloaded = Instant::now();
    reload_settled(&mut ng, &conf(true, Some(true)));
    let s2 = poll_status_json(port, WAIT, "3 peers", |s| s.total() == Some(3));
    let fresh = fresh_rounds_bound(reloaded, 100);
    assert!(s2.is_up(Http, "h", &ha), "{s2}");
    assert!(s2.checks(Http, "h", &ha) >= s1.checks(Http, "h", &ha));
    assert!(
        s2.is_down(Http, "h2", &ha),
        "added upstream not default_down: {s2}"
    );
    assert!(
        s2.is_down(Stream, "s", &sa),
        "added block not default_down: {s2}"
    );
    assert!(
        s2.checks(Http, "h2", &ha) <= fresh,
        "added upstream inherited counters (a fresh one has at most {fresh}): {s2}"
    );
    let reply = stream_roundtrip(sport, b"hello\n").unwrap_or_default();
    assert!(reply.is_empty(), "stream peer down, yet proxied: {reply:?}");
    assert_eq!(sb.requests(), 0);
    poll_status_json(port, WAIT, "stream peer counting", |s| {
        s.get_int(Stream, "s", &sa, "checks") >= Some(10)
    });

    // Remove both: their rows vanish.
    reload_settled(&mut ng, &conf(false, None));
    let s3 = poll_status_json(port, WAIT, "1 peer", |s| s.total() == Some(1));
    assert!(s3.peers(Stream).is_empty(), "{s3}");
    assert!(s3.peer(Http, "h2", &ha).is_none(), "{s3}");
    assert!(s3.is_up(Http, "h", &ha), "{s3}");
    assert!(s3.checks(Http, "h", &ha) >= s2.checks(Http, "h", &ha));

    // Add the stream block again, default_down=false now: fresh state (up,
    // counting from 0), not the state it had two loads ago.
    let reloaded = Instant::now();
    reload_settled(&mut ng, &conf(false, Some(false)));
    let s4 = poll_status_json(port, WAIT, "2 peers", |s| s.total() == Some(2));
    let fresh = fresh_rounds_bound(reloaded, 100);
    assert!(s4.is_up(Stream, "s", &sa), "{s4}");
    assert!(
        s4.checks(Stream, "s", &sa) <= fresh,
        "old counters came back (a fresh state has at most {fresh}): {s4}"
    );
    assert_eq!(
        stream_roundtrip(sport, b"hello\n").unwrap(),
        sb.port().to_string().as_bytes()
    );
}

// ---------------------------------------------------------------------------
// generation
// ---------------------------------------------------------------------------

/// The generation the Prometheus page prints (parsed by `healthcheck_t::page`).
fn prometheus_generation(port: u16) -> i64 {
    let text = http_get(port, "/status?format=prometheus").unwrap().text();
    let page = parse_prom_page(&text, "prometheus page");
    page.generation.expect("generation") as i64
}

/// The generation the HTML page prints.
fn html_generation(port: u16) -> i64 {
    let text = http_get(port, "/status?format=html").unwrap().text();
    let page = parse_html(&text, "html page");
    page.generation.expect("generation") as i64
}

// +1 per successful reload, unchanged by rejected ones (a configuration
// error, and a failure after the zones were initialised: a busy listen
// port), which leave the old configuration and its state running.
#[test]
fn generation_counts_successful_reloads_only() {
    let ok = Backend::start();
    let bad = Backend::with_mode(Mode::Refuse);
    let port = free_port();
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_port = busy.local_addr().unwrap().port();
    let ups = format!(
        "upstream u {{ server {}; server {}; check interval=100 rise=1 fall=1; }}",
        ok.addr(),
        bad.addr()
    );
    let conf = http_conf_with(port, &ups, "location / { proxy_pass http://u; }");
    let mut ng = Nginx::start(&conf);
    let s = poll_status_json(port, WAIT, "ok up, bad down", |s| {
        s.is_up(Http, "u", &ok.addr()) && s.is_down(Http, "u", &bad.addr())
    });
    assert_eq!(generation(&s), 1, "{s}");
    assert_eq!(prometheus_generation(port), 1);
    assert_eq!(html_generation(port), 1);

    // Settled: reload_expect_failure compares the worker list before and
    // after.
    reload_settled(&mut ng, &conf);
    let s2 = wait_generation(port, 2);

    // A configuration error.
    ng.reload_expect_failure(
        &http_conf_with(
            port,
            &ups.replace("interval=100", "interval=abc"),
            "location / { proxy_pass http://u; }",
        ),
        "invalid parameter \"interval=abc\"",
    );
    // Zones initialised, then bind() fails (nginx retries for ~2.5 s).
    ng.allow_log("still could not bind()");
    ng.reload_expect_failure(
        &http_conf_with(
            port,
            &format!("{ups}\n    server {{ listen 127.0.0.1:{busy_port}; }}"),
            "location / { proxy_pass http://u; }",
        ),
        "Address already in use",
    );
    ng.wait_for_log("still could not bind()", Duration::from_secs(10));

    let s3 = status(port);
    assert_eq!(
        generation(&s3),
        2,
        "a failed reload changed generation: {s3}"
    );
    assert!(s3.is_up(Http, "u", &ok.addr()), "{s3}");
    assert!(s3.is_down(Http, "u", &bad.addr()), "{s3}");
    assert!(s3.checks(Http, "u", &ok.addr()) >= s2.checks(Http, "u", &ok.addr()));
    // The old configuration still probes and serves.
    let c = s3.checks(Http, "u", &ok.addr());
    poll_status_json(port, WAIT, "old configuration still probing", |s| {
        s.get_int(Http, "u", &ok.addr(), "checks") > Some(c + 2)
    });
    assert_eq!(http_get(port, "/").unwrap().text(), ok.port().to_string());

    reload_settled(&mut ng, &conf);
    let s4 = wait_generation(port, 3);
    assert!(s4.is_down(Http, "u", &bad.addr()), "{s4}");
    assert_eq!(prometheus_generation(port), 3);
    assert_eq!(html_generation(port), 3);
    drop(busy);
}

// docs/design.md, Reloads: `generation` counts successful loads, the zone existing
// as soon as an `http` or `stream` block does — also when the http zone
// appears or disappears (no checked http peer) while stream keeps its
// checks.
#[test]
fn generation_counts_loads_when_a_context_gains_or_loses_checks() {
    let h = Backend::start();
    let sb = Backend::start();
    let (port, sport) = (free_port(), free_port());
    let conf = |http_checks: bool| {
        let ups = if http_checks {
            format!(
                "upstream h {{ server {}; check interval=100 rise=1 fall=1; }}",
                h.addr()
            )
        } else {
            String::new()
        };
        format!(
            "{}
stream {{
    upstream s {{ server {}; check interval=100 rise=1 fall=1; }}
    server {{ listen 127.0.0.1:{sport}; proxy_pass s; }}
}}",
            http_conf_with(port, &ups, ""),
            sb.addr()
        )
    };
    let mut ng = Nginx::start(&conf(true));
    let mut seen = vec![generation(&status(port))];
    for http_checks in [false, true, false, true] {
        reload_settled(&mut ng, &conf(http_checks));
        let want = if http_checks { 2 } else { 1 };
        let s = poll_status_json(port, WAIT, "the new configuration", |s| {
            s.total() == Some(want)
        });
        seen.push(generation(&s));
    }
    assert_eq!(seen, vec![1, 2, 3, 4, 5], "generation after each load");
}

// The same when, for one load, no context has a checked peer at all (no
// zone exists then).
#[test]
fn generation_counts_loads_without_any_checked_peer() {
    let h = Backend::start();
    let port = free_port();
    let conf = |checked: bool| {
        let check = if checked {
            "check interval=100 rise=1 fall=1;"
        } else {
            ""
        };
        http_conf_with(
            port,
            &format!("upstream h {{ server {}; {check} }}", h.addr()),
            "location / { proxy_pass http://h; }",
        )
    };
    let mut ng = Nginx::start(&conf(true));
    let mut seen = vec![generation(&status(port))];
    for checked in [false, true] {
        reload_settled(&mut ng, &conf(checked));
        let want = i64::from(checked);
        let s = poll_status_json(port, WAIT, "the new configuration", |s| {
            s.total() == Some(want)
        });
        seen.push(generation(&s));
    }
    assert_eq!(seen, vec![1, 2, 3], "generation after each load");
}

// ---------------------------------------------------------------------------
// Zone sizing
// ---------------------------------------------------------------------------

fn many_peers_conf(ctx: &str, n: usize, shm: &str) -> String {
    let peers = servers(&fillers(n));
    match ctx {
        "http" => format!(
            "http {{ check_shm_size {shm}; upstream u {{ {peers} check interval=1000; }} }}"
        ),
        _ => format!(
            "stream {{ check_shm_size {shm}; upstream u {{ {peers} check interval=1000; }} }}"
        ),
    }
}

// `nginx -t` with a too-small check_shm_size fails and says how much is
// needed; that much passes, one byte less fails.
#[test]
fn too_small_shm_size_fails_nginx_t_with_needed_size() {
    for ctx in ["http", "stream"] {
        let (code, out) = nginx_t(&many_peers_conf(ctx, 1000, "8k"));
        assert_ne!(code, 0, "{out}");
        assert!(
            out.contains("too small") && out.contains("bytes") && out.contains("[emerg]"),
            "{out}"
        );
        let need = needed_bytes(&out);
        assert!(need > 1000 * 64, "{need} bytes for 1000 peers? {out}");
        let (code, out) = nginx_t(&many_peers_conf(ctx, 1000, &need.to_string()));
        assert_eq!(code, 0, "exactly the needed size must pass: {out}");
        let (code, out) = nginx_t(&many_peers_conf(ctx, 1000, &(need - 1).to_string()));
        assert_ne!(code, 0, "one byte less must fail: {out}");
        // Without the directive the module sizes the zone itself.
        let (code, out) =
            nginx_t(&many_peers_conf(ctx, 1000, "8k").replace("check_shm_size 8k;", ""));
        assert_eq!(code, 0, "{out}");
    }
}

// A reload into a configuration whose zone is too small is refused; the
// old configuration keeps serving with its state.
#[test]
fn reload_into_too_small_zone_is_refused() {
    let a = Backend::start();
    let port = free_port();
    let small = |extra: &str, shm: &str| {
        http_conf_with(
            port,
            &format!(
                "{shm}\n    upstream u {{ server {}; {extra} check interval=100 rise=1 fall=1; }}",
                a.addr()
            ),
            "location / { proxy_pass http://u; }",
        )
    };
    let mut ng = Nginx::start(&small("", ""));
    let s1 = poll_status_json(port, WAIT, "up", |s| s.is_up(Http, "u", &a.addr()));
    let line = ng.reload_expect_failure(
        &small(&servers(&fillers(1000)), "check_shm_size 8k;"),
        "too small",
    );
    assert!(line.contains("bytes"), "{line}");
    assert_eq!(http_get(port, "/").unwrap().text(), a.port().to_string());
    let s2 = status(port);
    assert_eq!(s2.total(), Some(1), "{s2}");
    assert_eq!(generation(&s2), generation(&s1), "{s2}");
    assert!(s2.checks(Http, "u", &a.addr()) >= s1.checks(Http, "u", &a.addr()));
}

// At most 256 bytes of shared memory per peer (docs/directives.md,
// check_shm_size documents 256), read from the needed size nginx -t reports for 1000 and
// 2000 peers.
#[test]
fn shared_memory_per_peer_is_at_most_256_bytes() {
    for ctx in ["http", "stream"] {
        let need = |n: usize| {
            let (code, out) = nginx_t(&many_peers_conf(ctx, n, "4k"));
            assert_ne!(code, 0, "{out}");
            needed_bytes(&out)
        };
        let (n1, n2) = (need(1000), need(2000));
        assert!(n2 > n1, "{ctx}: {n1} -> {n2}");
        let per_peer = (n2 - n1) / 1000;
        eprintln!("{ctx}: 1000 peers need {n1} bytes, 2000 need {n2}: {per_peer} B/peer");
        assert!(per_peer <= 256, "{ctx}: {per_peer} bytes per peer");
    }
}

// ---------------------------------------------------------------------------
// Reload storm
// ---------------------------------------------------------------------------

#[test]
fn reload_storm_no_crash_no_flap_no_leak() {
    const INTERVAL: u64 = 200;
    const FALL: i64 = 3;
    let web = [Backend::start(), Backend::start()];
    let kept = Backend::start();
    let streamed = Backend::start();
    let refused = Backend::with_mode(Mode::Refuse);
    let (port, sport) = (free_port(), free_port());
    let conf = |variant: usize| {
        // The variants differ only in what keeps identities (timeout).
        let t = 150 + 10 * (variant % 2);
        format!(
            "{}
stream {{
    upstream st {{ server {}; check interval={INTERVAL} timeout={t} rise=2 fall={FALL}; }}
    server {{ listen 127.0.0.1:{sport}; proxy_pass st; }}
}}",
            http_conf_with(
                port,
                &format!(
                    "upstream web {{ server {}; server {}; check interval={INTERVAL} timeout={t} rise=2 fall={FALL}; }}
    upstream kept {{ server {}; check interval={INTERVAL} timeout={t} rise=2 fall={FALL} reuse=on keepalive=on; }}
    upstream bad {{ server {}; check interval={INTERVAL} timeout={t} rise=2 fall={FALL}; }}",
                    web[0].addr(),
                    web[1].addr(),
                    kept.addr(),
                    refused.addr()
                ),
                "location / { proxy_pass http://web; }",
            ),
            streamed.addr()
        )
    };
    let healthy: Vec<(Kind, &str, String)> = vec![
        (Http, "web", web[0].addr()),
        (Http, "web", web[1].addr()),
        (Http, "kept", kept.addr()),
        (Stream, "st", streamed.addr()),
    ];
    let mut ng = Nginx::builder().workers(2).start(&conf(0));
    let all_ok = {
        let healthy = healthy.clone();
        let bad = refused.addr();
        move |s: &Status| -> Option<String> {
            for (k, u, n) in &healthy {
                let Some(p) = s.peer(*k, u, n) else {
                    return Some(format!("no row {u} {n}: {s}"));
                };
                if p["status"] != "up" || p["fall"].as_i64() >= Some(FALL) {
                    return Some(format!("healthy peer {u} {n} flapped: {p}"));
                }
            }
            if !s.is_down(Http, "bad", &bad) {
                return Some(format!("refusing peer not down: {s}"));
            }
            None
        }
    };
    let ready = all_ok.clone();
    poll_status_json(port, WAIT, "all up, bad down", |s| ready(s).is_none());
    // Warm up: the master's first reloads allocate what later ones reuse.
    for v in 1..=2 {
        let old = ng.all_workers();
        ng.reload_with(&conf(v));
        ng.wait_workers_gone(&old, WAIT);
    }
    let master = ng.pid();
    let (fd0, rss0) = (fd_count(master).unwrap(), rss_kb(master));
    let worker_fds0: usize = ng.worker_fd_counts().iter().sum();

    let watcher = Watcher::start(port, all_ok.clone());
    let hammer = Hammer::start(port, &["/", &format!("stream:{sport}")]);
    let storm = Instant::now();
    let mut last_hup = storm;
    for i in 0..20 {
        let pace = storm + Duration::from_millis(100 * i as u64);
        if let Some(d) = pace.checked_duration_since(Instant::now()) {
            thread::sleep(d);
        }
        last_hup = Instant::now();
        ng.reload_with(&conf(i));
    }
    let storm_time = storm.elapsed();
    // Old workers: gone within max(interval, timeout) + 1 s of the last
    // reload.
    let limit = Duration::from_millis(INTERVAL) + Duration::from_secs(1);
    let gone = try_wait_until(
        (last_hup + limit).saturating_duration_since(Instant::now()),
        || ng.all_workers().len() == 2,
    );
    let lingering: Vec<(u32, Option<String>)> = ng
        .all_workers()
        .into_iter()
        .map(|p| (p, process::title(p)))
        .collect();
    assert!(
        gone,
        "old workers still there {:?} after the last reload: {lingering:?}",
        last_hup.elapsed()
    );
    let tally = hammer.finish();
    let (problems, polls, slowest) = watcher.finish();
    eprintln!(
        "storm: 20 reloads in {storm_time:?}, {polls} status polls (slowest {slowest:?}), traffic {tally:?}"
    );
    assert!(
        problems.is_empty(),
        "{} of {polls} status polls broke the rules:\n{}",
        problems.len(),
        first_problems(&problems)
    );
    assert!(polls >= 20, "only {polls} status polls");
    let web_ports: Vec<String> = web.iter().map(|b| format!("200 {}", b.port())).collect();
    let outcomes = &tally["/"];
    assert!(
        outcomes.keys().all(|k| web_ports.contains(k)),
        "proxy errors during the storm: {outcomes:?}"
    );
    let st = &tally[&format!("stream:{sport}")];
    assert!(
        st.keys()
            .all(|k| *k == format!("reply {}", streamed.port())),
        "stream errors during the storm: {st:?}"
    );
    let flaps: Vec<String> = ng
        .log_lines("is down after")
        .into_iter()
        .filter(|l| !l.contains(&refused.addr()))
        .collect();
    assert!(flaps.is_empty(), "healthy peers went down: {flaps:?}");

    // Checks keep running in the new workers.
    let s = status(port);
    poll_status_json(port, WAIT, "checks after the storm", |now| {
        healthy
            .iter()
            .all(|(k, u, n)| now.checks(*k, u, n) >= s.checks(*k, u, n) + 2)
    });
    // The kept connection is not duplicated by old workers.
    wait_until(WAIT, "one kept check connection", || {
        kept.open_connections() <= 1
    });

    // Flat: the master's descriptors come back to what they were once it
    // has reaped the old workers (their channel sockets close then);
    // workers' counts move with in-flight probes and requests, and with
    // their spare check sockets: a worker keeps up to one per TCP round it
    // has had in flight at once, at most the 5 checked peers each.
    let fd_flat = try_wait_until(WAIT, || fd_count(master).unwrap() <= fd0);
    let spares = 5 * ng.workers().len();
    let worker_flat = try_wait_until(WAIT, || {
        ng.worker_fd_counts().iter().sum::<usize>() <= worker_fds0 + 2 + spares
    });
    let (fd1, rss1) = (fd_count(master).unwrap(), rss_kb(master));
    let worker_fds1: usize = ng.worker_fd_counts().iter().sum();
    eprintln!(
        "master fds {fd0} -> {fd1}, master RSS {rss0} kB -> {rss1} kB, worker fds {worker_fds0} -> {worker_fds1}"
    );
    assert!(fd_flat, "master fds {fd0} -> {fd1} across 20 reloads");
    assert!(
        rss1 <= rss0 + 1024,
        "master RSS grew from {rss0} kB to {rss1} kB across 20 reloads"
    );
    assert!(
        worker_flat,
        "worker fds grew from {worker_fds0} to {worker_fds1}"
    );
    let refused_fall = status(port).int(Http, "bad", &refused.addr(), "fall");
    assert!(
        refused_fall >= FALL,
        "refusing peer's fall was reset: {refused_fall}"
    );
}

// ---------------------------------------------------------------------------
// Killed workers
// ---------------------------------------------------------------------------

const KILL_INTERVAL: u64 = 300;

/// What happened after killing a worker in the middle of a probe.
struct KillReport {
    /// Per peer: when, after the kill, its next round completed: after the
    /// first (the last status page still showing it waiting, or the kill)
    /// and by the second (the first page showing it). The two are a poll
    /// apart unless the test was slowed down; only the first proves a
    /// peer late.
    resumed: Vec<(String, Duration, Duration)>,
}

impl KillReport {
    /// Peers whose round surely came later than `bound` after the kill.
    fn late(&self, bound: Duration) -> Vec<&(String, Duration, Duration)> {
        self.resumed
            .iter()
            .filter(|(_, after, _)| *after > bound)
            .collect()
    }
}

/// Kill (with `sig`) a worker that holds an in-flight probe connection to
/// one of `ports` (as soon as `ss` shows it), then measure when every
/// peer's `checks` moves.
fn kill_mid_probe(
    ng: &Nginx,
    port: u16,
    sig: libc::c_int,
    ports: &[u16],
    peers: &[(&str, String)],
) -> KillReport {
    // Taken first: a round that completes between this and the kill only
    // makes its peer look resumed early.
    let before = status(port);
    let workers = ng.workers();
    let victim = wait_for(WAIT, "a worker in the middle of a probe", || {
        connection_owners(ports, &workers).first().copied()
    });
    let mark = ng.log_mark();
    process::signal(victim, sig).unwrap();
    let killed = Instant::now();
    // Polled from the kill on (the surviving worker answers); a page
    // reflects a moment after its request was sent.
    let mut resumed = Vec::new();
    let mut pending: Vec<&(&str, String)> = peers.iter().collect();
    let mut waiting = Duration::ZERO;
    let deadline = killed + Duration::from_secs(10);
    while !pending.is_empty() && Instant::now() < deadline {
        let asked = killed.elapsed();
        if let Ok(now) = status_json(port) {
            let seen = killed.elapsed();
            pending.retain(|(u, n)| {
                if now.checks(Http, u, n) > before.checks(Http, u, n) {
                    resumed.push((format!("{u} {n}"), waiting, seen));
                    false
                } else {
                    true
                }
            });
            waiting = asked;
        }
        thread::sleep(Duration::from_millis(5));
    }
    assert!(
        pending.is_empty(),
        "checks stopped after signal {sig}: {pending:?} did not move in 10 s"
    );
    ng.wait_for_log_since(mark, &format!("exited on signal {sig}"), WAIT);
    wait_until(WAIT, "the worker respawned", || {
        let w = ng.workers();
        w.len() == 2 && !w.contains(&victim)
    });
    KillReport { resumed }
}

struct KillSetup {
    ng: Nginx,
    port: u16,
    hang: Vec<Backend>,
    serve: Vec<Backend>,
}

impl KillSetup {
    fn start() -> KillSetup {
        let hang = vec![
            Backend::with_mode(Mode::Hang),
            Backend::with_mode(Mode::Hang),
        ];
        let serve = vec![Backend::start(), Backend::start(), Backend::start()];
        let port = free_port();
        let ng = Nginx::builder().workers(2).start(&format!(
            "worker_rlimit_core 0;\n{}",
            http_conf_with(
                port,
                &format!(
                    "upstream p {{ {} check interval={KILL_INTERVAL} rise=1 fall=1; }}
    upstream hang {{ {} check interval={KILL_INTERVAL} rise=1 fall=1; }}",
                    servers(&serve.iter().map(Backend::addr).collect::<Vec<_>>()),
                    servers(&hang.iter().map(Backend::addr).collect::<Vec<_>>()),
                ),
                "location / { proxy_pass http://p; }",
            )
        ));
        ng.allow_log("exited on signal");
        let setup = KillSetup {
            ng,
            port,
            hang,
            serve,
        };
        let peers = setup.peers();
        poll_status_json(port, WAIT, "every peer up after 2 rounds", |s| {
            peers
                .iter()
                .all(|(u, n)| s.is_up(Http, u, n) && s.get_int(Http, u, n, "checks") >= Some(2))
        });
        setup
    }

    fn peers(&self) -> Vec<(&'static str, String)> {
        let mut v: Vec<(&str, String)> = self.serve.iter().map(|b| ("p", b.addr())).collect();
        v.extend(self.hang.iter().map(|b| ("hang", b.addr())));
        v
    }

    fn kill(&self, sig: libc::c_int) -> KillReport {
        let ports: Vec<u16> = self
            .hang
            .iter()
            .chain(&self.serve)
            .map(Backend::port)
            .collect();
        kill_mid_probe(&self.ng, self.port, sig, &ports, &self.peers())
    }
}

// SIGKILL and SIGSEGV in the middle of a probe: the master respawns the
// worker, every peer is checked again, state changes still happen, status
// and proxying answer (no deadlock on a lease or a half-written slot).
#[test]
fn killed_workers_are_respawned_and_checks_continue() {
    let k = KillSetup::start();
    let watcher = Watcher::start_with(k.port, true, |_| None);
    for sig in [libc::SIGKILL, libc::SIGSEGV] {
        let r = k.kill(sig);
        eprintln!("after signal {sig}: rounds resumed {:?}", r.resumed);
        // Bound: a dead worker's round lease blocks its peer for the
        // round's timeout (270 ms) + 1 s; then retries at interval steps.
        let bound = Duration::from_millis(270 + 1000 + 3 * KILL_INTERVAL + 500);
        let late = r.late(bound);
        assert!(
            late.is_empty(),
            "signal {sig}: peers waited longer than {bound:?} for their next round: {late:?}"
        );
    }
    // A backend that starts refusing is still detected.
    let victim = &k.serve[2];
    victim.set_mode(Mode::Refuse);
    poll_status_json(k.port, WAIT, "refusing peer down", |s| {
        s.is_down(Http, "p", &victim.addr())
    });
    for _ in 0..10 {
        let r = http_get(k.port, "/").unwrap();
        assert_eq!(r.status, 200);
        assert_ne!(r.text(), victim.port().to_string());
    }
    let cut = watcher.cut.load(Ordering::SeqCst);
    let (problems, polls, slowest) = watcher.finish();
    assert!(problems.is_empty(), "{}", first_problems(&problems));
    // At most the request in flight at each of the two kills.
    assert!(cut <= 2, "{cut} of {polls} status requests got no answer");
    assert!(
        slowest < Duration::from_secs(1),
        "a status answer took {slowest:?} ({polls} polls)"
    );
}

// "Checks continue within 2 intervals" (docs/design.md, Reloads) also for the peer whose
// round the dead worker was running.
#[test]
fn killed_worker_peer_is_checked_again_within_two_intervals() {
    let k = KillSetup::start();
    // Four kills: each lands in a round with high probability, not surely.
    for sig in [libc::SIGKILL, libc::SIGSEGV, libc::SIGKILL, libc::SIGSEGV] {
        let r = k.kill(sig);
        // Two intervals, plus respawn and polling slack.
        let bound = Duration::from_millis(2 * KILL_INTERVAL + 200);
        let late = r.late(bound);
        assert!(
            late.is_empty(),
            "signal {sig}: peers not checked within 2 intervals ({bound:?}): {late:?}; all: {:?}",
            r.resumed
        );
    }
}

// ---------------------------------------------------------------------------
// Single process
// ---------------------------------------------------------------------------

fn two_peer_conf(port: u16, a: &Backend, b: &Backend, interval: u32) -> String {
    http_conf_with(
        port,
        &format!(
            "upstream u {{ server {}; server {}; check interval={interval} rise=1 fall=1; }}",
            a.addr(),
            b.addr()
        ),
        "location / { proxy_pass http://u; }",
    )
}

#[test]
fn master_process_off_checks_and_status_work() {
    let a = Backend::start();
    let b = Backend::with_mode(Mode::Refuse);
    let port = free_port();
    let mut ng = Nginx::builder()
        .master_process(false)
        .start(&two_peer_conf(port, &a, &b, 100));
    let s = poll_status_json(port, WAIT, "a up, b down", |s| {
        s.is_up(Http, "u", &a.addr()) && s.is_down(Http, "u", &b.addr())
    });
    assert_eq!(generation(&s), 1);
    let c = s.checks(Http, "u", &a.addr());
    poll_status_json(port, WAIT, "checks counting", |s| {
        s.checks(Http, "u", &a.addr()) >= c + 3
    });
    assert_eq!(http_get(port, "/").unwrap().text(), a.port().to_string());
    b.set_mode(Mode::Serve);
    a.set_mode(Mode::Refuse);
    poll_status_json(port, WAIT, "states swapped", |s| {
        s.is_down(Http, "u", &a.addr()) && s.is_up(Http, "u", &b.addr())
    });
    assert_eq!(http_get(port, "/").unwrap().text(), b.port().to_string());
    ng.quit();
}

// SIGHUP with `master_process off`: stock nginx re-reads its configuration
// in place (a development mode: even without the module, new connections
// are reset after such a reload, so nothing is asserted about serving).
// The module must not take the process down.
#[test]
fn master_process_off_reload_does_not_crash() {
    let a = Backend::start();
    let b = Backend::with_mode(Mode::Refuse);
    let port = free_port();
    let mut ng = Nginx::builder()
        .master_process(false)
        .start(&two_peer_conf(port, &a, &b, 100));
    poll_status_json(port, WAIT, "a up, b down", |s| {
        s.is_up(Http, "u", &a.addr()) && s.is_down(Http, "u", &b.addr())
    });
    let mark = ng.log_mark();
    ng.reload_with(&two_peer_conf(port, &a, &b, 120));
    ng.wait_for_log_since(mark, "reconfiguring", WAIT);
    // Ten intervals of probe timers after the reload.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(1) {
        assert!(
            ng.is_running(),
            "nginx died {:?} after SIGHUP with master_process off",
            start.elapsed()
        );
        thread::sleep(Duration::from_millis(10));
    }
    ng.quit();
}

// ---------------------------------------------------------------------------
// Binary upgrade
// ---------------------------------------------------------------------------

/// An nginx run with `daemon on`: USR2 is ignored while the master's parent
/// is the process that started it (nginx's ngx_parent check), so the binary
/// upgrade test cannot use the harness's `daemon off` instance. Stops every
/// master it knows of when dropped; keeps the prefix of a failing test.
struct Daemon {
    prefix: PathBuf,
    masters: Mutex<Vec<u32>>,
    allowed: Vec<String>,
}

impl Daemon {
    fn start(body: &str) -> Daemon {
        static N: AtomicUsize = AtomicUsize::new(0);
        let prefix = std::env::temp_dir().join("nginx-hc-t").join(format!(
            "lifecycle-upgrade-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&prefix);
        fs::create_dir_all(prefix.join("logs")).unwrap();
        let conf = prefix.join("nginx.conf");
        fs::write(
            &conf,
            format!(
                "load_module {};
daemon on;
master_process on;
worker_processes 1;
worker_rlimit_core 0;
pid logs/nginx.pid;
error_log logs/error.log info;
events {{ worker_connections 1024; }}
{body}
",
                module_path().display()
            ),
        )
        .unwrap();
        let d = Daemon {
            prefix: prefix.clone(),
            masters: Mutex::new(Vec::new()),
            allowed: Vec::new(),
        };
        let out = Command::new(nginx_bin())
            .arg("-p")
            .arg(format!("{}/", prefix.display()))
            .arg("-c")
            .arg(&conf)
            .args(["-e", "logs/error.log"])
            .stdin(Stdio::null())
            .output()
            .expect("run nginx");
        assert!(
            out.status.success(),
            "nginx failed to start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let master = wait_for(WAIT, "the pid file", || d.pid_file("nginx.pid"));
        d.masters.lock().unwrap().push(master);
        wait_until(WAIT, "a worker", || d.workers_of(master).len() == 1);
        d
    }

    fn pid_file(&self, name: &str) -> Option<u32> {
        fs::read_to_string(self.prefix.join("logs").join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn workers_of(&self, master: u32) -> Vec<u32> {
        children_titled(master, "nginx: worker process")
    }

    fn log(&self) -> String {
        String::from_utf8_lossy(&fs::read(self.prefix.join("logs/error.log")).unwrap_or_default())
            .into_owned()
    }

    fn bad_lines(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| {
                ["[alert]", "[crit]", "[emerg]"]
                    .iter()
                    .any(|b| l.contains(b))
            })
            .filter(|l| !self.allowed.iter().any(|a| l.contains(a.as_str())))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let masters = self.masters.lock().unwrap().clone();
        let mut kids = Vec::new();
        for &m in &masters {
            kids.extend(process::children(m));
            let _ = process::signal(m, libc::SIGQUIT);
        }
        let all: Vec<u32> = masters.iter().copied().chain(kids).collect();
        if !try_wait_until(WAIT, || all.iter().all(|&p| !process::is_alive(p))) {
            for &p in &all {
                let _ = process::signal(p, libc::SIGKILL);
            }
        }
        let bad = self.bad_lines();
        if thread::panicking() || !bad.is_empty() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!(
                "nginx prefix kept: {}\n--- error.log (tail) ---\n{}",
                self.prefix.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
            if !thread::panicking() {
                panic!("unexpected lines in error.log:\n{}", bad.join("\n"));
            }
        } else if std::env::var_os("HC_T_KEEP").is_none() {
            let _ = fs::remove_dir_all(&self.prefix);
        }
    }
}

// USR2 (new master and workers next to the old ones), WINCH (old workers
// leave), QUIT (old master leaves). The new binary maps new zones: state
// does not carry over, default_down applies (generation restarts at 1).
// What must hold throughout: status answers, checks run, a check-down
// peer (default_down=true) is never selected, an up peer
// (default_down=false) never answers 502.
#[test]
fn binary_upgrade_keeps_checking_and_never_selects_down_peer() {
    let up = Backend::start();
    let down = Backend::start();
    let refusing = Backend::with_mode(Mode::Refuse);
    let port = free_port();
    let d = Daemon::start(&http_conf_with(
        port,
        &format!(
            "upstream up {{ server {}; check interval=100 rise=1 fall=1; }}
    upstream down {{ server {}; check interval=100 rise=1 fall=1 port={} default_down=true; }}",
            up.addr(),
            down.addr(),
            refusing.port()
        ),
        "location /up { proxy_pass http://up; }
        location /down { proxy_pass http://down; }",
    ));
    let old = d.masters.lock().unwrap()[0];
    let (ua, da) = (up.addr(), down.addr());
    let s0 = poll_status_json(port, WAIT, "up up, down down", |s| {
        s.is_up(Http, "up", &ua)
            && s.is_down(Http, "down", &da)
            && s.get_int(Http, "up", &ua, "checks") >= Some(10)
    });
    let watcher = {
        let (ua, da) = (ua.clone(), da.clone());
        Watcher::start(port, move |s| {
            (!s.is_up(Http, "up", &ua) || !s.is_down(Http, "down", &da))
                .then(|| format!("wrong state: {s}"))
        })
    };
    let hammer = Hammer::start(port, &["/up", "/down"]);

    process::signal(old, libc::SIGUSR2).unwrap();
    let new = wait_for(WAIT, "the new master's pid file", || {
        d.pid_file("nginx.pid").filter(|&p| p != old)
    });
    d.masters.lock().unwrap().push(new);
    assert_eq!(d.pid_file("nginx.pid.oldbin"), Some(old));
    wait_until(WAIT, "the new master's worker", || {
        d.workers_of(new).len() == 1
    });
    let old_workers = d.workers_of(old);
    wait_until(WAIT, "requests served by both", || up.requests() >= 20);

    process::signal(old, libc::SIGWINCH).unwrap();
    wait_until(WAIT, "old workers gone", || {
        old_workers.iter().all(|&p| !process::is_alive(p))
    });
    // Only the new binary's worker answers now.
    let s1 = status(port);
    let c1 = s1.checks(Http, "up", &ua);
    poll_status_json(port, WAIT, "the new binary probing", |s| {
        s.checks(Http, "up", &ua) >= c1 + 3 && s.checks(Http, "down", &da) >= 3
    });

    process::signal(old, libc::SIGQUIT).unwrap();
    wait_until(WAIT, "old master gone", || !process::is_alive(old));
    let n = up.requests();
    wait_until(WAIT, "requests after the old master left", || {
        up.requests() >= n + 20
    });
    let s2 = status(port);
    let tally = hammer.finish();
    let (problems, polls, slowest) = watcher.finish();

    eprintln!(
        "binary upgrade: before generation {} up.checks()={}; new binary generation {} up.checks()={} down.checks()={}; {polls} status polls, slowest {slowest:?}",
        generation(&s0),
        s0.checks(Http, "up", &ua),
        generation(&s2),
        s2.checks(Http, "up", &ua),
        s2.checks(Http, "down", &da),
    );
    assert!(
        problems.is_empty(),
        "status during the upgrade:\n{}",
        first_problems(&problems)
    );
    assert_eq!(down.requests(), 0, "check-down peer selected: {tally:?}");
    assert_only(&tally, "/up", &format!("200 {}", up.port()), 50);
    assert_only(&tally, "/down", "502", 50);
    assert!(
        s2.is_up(Http, "up", &ua) && s2.is_down(Http, "down", &da),
        "{s2}"
    );
    // New zones in the new binary: a fresh lineage, fresh counters.
    assert_eq!(generation(&s2), 1, "{s2}");
}

// ---------------------------------------------------------------------------
// proxy_cache_path helpers
// ---------------------------------------------------------------------------

// The cache manager and cache loader run module init_process too; they
// must not probe. With one worker: every round the debug log records is
// the worker's, no probe connection ever belongs to a helper (ss), and the
// backend sees one probe per interval.
#[test]
fn cache_helper_processes_never_probe() {
    const INTERVAL: u64 = 200;
    let b = Backend::start();
    let port = free_port();
    let ng = Nginx::builder().log_level("debug").start(&http_conf_with(
        port,
        &format!(
            "proxy_cache_path cache keys_zone=hc_cache:1m;
    upstream u {{ server {}; check interval={INTERVAL} rise=1 fall=1; }}",
            b.addr()
        ),
        "location / { proxy_pass http://u; proxy_cache hc_cache; }",
    ));
    let master = ng.pid();
    let helpers = wait_for(WAIT, "cache manager and loader", || {
        let m = children_titled(master, "nginx: cache manager process");
        let l = children_titled(master, "nginx: cache loader process");
        (!m.is_empty() && !l.is_empty()).then(|| [m, l].concat())
    });
    let worker = ng.workers();
    assert_eq!(worker.len(), 1);
    let name = b.addr();
    poll_status_json(port, WAIT, "3 rounds", |s| {
        s.get_int(Http, "u", &name, "checks") >= Some(3)
    });

    let c0 = status(port).checks(Http, "u", &name);
    let a0 = b.accepted();
    let mark = ng.log_mark();
    let start = Instant::now();
    let window = Duration::from_millis(10 * INTERVAL);
    let mut everyone = worker.clone();
    everyone.extend(&helpers);
    let mut held_by_helper = Vec::new();
    while start.elapsed() < window {
        held_by_helper.extend(
            connection_owners(&[b.port()], &everyone)
                .into_iter()
                .filter(|p| helpers.contains(p)),
        );
        thread::sleep(Duration::from_millis(3));
    }
    // The window ends when the probes are counted: a slow status answer
    // after it must not lengthen the time they are compared with.
    let accepts = b.accepted() - a0;
    let elapsed = start.elapsed();
    let rounds = status(port).checks(Http, "u", &name) - c0;
    let expected = elapsed.as_millis() as usize / INTERVAL as usize;
    // Debug lines start "<date> <time> [debug] <pid>#<tid>: ".
    let round_pids: BTreeMap<u32, usize> = ng
        .log_lines_since(mark, ": round start after")
        .iter()
        .filter_map(|l| l.split("[debug] ").nth(1)?.split('#').next()?.parse().ok())
        .fold(BTreeMap::new(), |mut m, pid| {
            *m.entry(pid).or_default() += 1;
            m
        });
    eprintln!(
        "cache helpers {helpers:?}, worker {worker:?}: {accepts} probes and {rounds} rounds in {elapsed:?} (expected ~{expected}); rounds by pid {round_pids:?}"
    );
    assert!(
        held_by_helper.is_empty(),
        "helpers held probe connections: {held_by_helper:?}"
    );
    assert!(
        round_pids.keys().all(|p| worker.contains(p)) && !round_pids.is_empty(),
        "rounds logged by {round_pids:?}; worker {worker:?}, helpers {helpers:?}"
    );
    // One probe per interval: a second prober would add some.
    assert!(
        accepts + 2 >= expected && accepts <= expected + expected / 3 + 1,
        "{accepts} probe connections in {elapsed:?} at interval {INTERVAL} ms (expected ~{expected})"
    );
    assert!(
        (accepts as i64 - rounds).abs() <= 2,
        "{accepts} probe connections but {rounds} rounds counted"
    );
    for &h in &helpers {
        assert!(process::is_alive(h), "helper {h} died");
    }
}
