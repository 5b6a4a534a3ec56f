//! `check_outlier` with real traffic (docs/outliers.md): ten http peers, one
//! answering 500 to 30% of its requests, one always 503, one ten times
//! slower than `latency`, seven healthy, under a load of a few hundred
//! requests per second from several client threads; and a stream upstream
//! with a peer that resets every other connection. Each bad peer is ejected
//! by the rule that fits it, with that rule's detail; no healthy peer ever
//! is; the second ejection in a row lasts twice as long; `max_ejected`
//! holds; and the clients see only 200s (`proxy_next_upstream`).

use std::io::Read;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use healthcheck_t::http_backend::{response, HttpBackend, Reply};
use healthcheck_t::paths::{patched_bin, stock_bin};
use healthcheck_t::{
    http_get, set_linger_zero, status_json, stream_roundtrip, wait_for, Backend, Builder, Kind,
    Status,
};

const LONG: Duration = Duration::from_secs(15);
/// The latency above which an answer counts as an error, and the slow
/// peer's delay (twice that; the healthy peers answer in about 1 ms).
const LATENCY_MS: u64 = 300;
const SLOW: Duration = Duration::from_millis(600);

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Ten backends: 0 answers 500 to 3 requests in 10, 1 always 503, 2 after
/// [`SLOW`], the others at once; each names itself in its body.
fn ten_peers() -> (Vec<HttpBackend>, Vec<String>) {
    let backends: Vec<HttpBackend> = (0..10)
        .map(|_| HttpBackend::start(Reply::status(200)))
        .collect();
    let names: Vec<String> = backends.iter().map(HttpBackend::addr).collect();
    for (i, b) in backends.iter().enumerate() {
        let ok = response(200, &[], names[i].as_bytes());
        let raw = |bytes: Vec<u8>| Reply::Raw {
            bytes,
            close: false,
        };
        let reply = match i {
            0 => Reply::Rotate(
                [500, 200, 200, 500, 200, 200, 500, 200, 200, 200]
                    .iter()
                    .map(|&s| raw(response(s, &[], names[i].as_bytes())))
                    .collect(),
            ),
            1 => raw(response(503, &[], names[i].as_bytes())),
            2 => Reply::Delay {
                bytes: ok,
                gap: SLOW,
            },
            _ => raw(ok),
        };
        b.set_reply(reply);
    }
    (backends, names)
}

/// `server` lines for `names`, with `max_fails=0` (nginx's own failure
/// accounting would keep a failing peer out before check_outlier judges it).
fn servers(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("        server {n} max_fails=0;\n"))
        .collect()
}

/// Wait until every one of `names` in `ups` of `kind` is up.
fn wait_all_up(port: u16, kind: Kind, ups: &str, names: &[String]) {
    wait_for(LONG, format!("every peer of {ups} up"), || {
        let s = status_json(port).ok()?;
        names.iter().all(|n| s.is_up(kind, ups, n)).then_some(())
    });
}

fn http_conf(port: u16, names: &[String], max_ejected: &str) -> String {
    let servers = servers(names);
    format!(
        "http {{
    upstream app {{
{servers}        check type=tcp interval=500 rise=1 fall=2 timeout=1000;
        check_outlier consecutive_5xx=5 failure_percentage=20 success_rate=on
                      latency={LATENCY_MS}ms min_requests=10 interval=2s ejection=3s
                      max_ejected={max_ejected};
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://app;
            proxy_next_upstream error timeout http_500 http_503;
        }}
        location /status {{ access_log off; healthcheck_status json; }}
    }}
}}"
    )
}

/// Client threads sending requests until dropped; every answer is kept.
struct Load {
    stop: Arc<AtomicBool>,
    answers: Arc<Mutex<Vec<(u16, String)>>>,
    threads: Vec<JoinHandle<()>>,
}

impl Load {
    fn start(port: u16, threads: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..threads)
            .map(|_| {
                let (stop, answers) = (Arc::clone(&stop), Arc::clone(&answers));
                thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let a = match http_get(port, "/") {
                            Ok(r) => (r.status, r.text()),
                            Err(e) => (0, e.to_string()),
                        };
                        answers.lock().unwrap().push(a);
                    }
                })
            })
            .collect();
        Load {
            stop,
            answers,
            threads,
        }
    }

    fn answers(&self) -> Vec<(u16, String)> {
        self.answers.lock().unwrap().clone()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn row<'a>(s: &'a Status, kind: Kind, ups: &str, name: &str) -> &'a serde_json::Value {
    s.row(kind, ups, name)
}

fn ejected(s: &Status, kind: Kind, ups: &str, name: &str) -> bool {
    let r = row(s, kind, ups, name);
    r["status"] == "down" && r["last_failure_reason"] == "outlier" && r["ejected_until"].is_i64()
}

fn detail(s: &Status, kind: Kind, ups: &str, name: &str) -> (String, String) {
    let o = &row(s, kind, ups, name)["outlier"];
    (
        o["rule"].as_str().unwrap_or_default().to_string(),
        o["detail"].as_str().unwrap_or_default().to_string(),
    )
}

fn binaries() -> [(&'static str, PathBuf); 2] {
    [("patched", patched_bin()), ("stock", stock_bin())]
}

/// Whether `detail` reads `failure rate P% over 2 s (N requests)` with P in
/// `range`.
fn failure_rate_in(detail: &str, range: std::ops::RangeInclusive<u32>) -> bool {
    let Some(rest) = detail.strip_prefix("failure rate ") else {
        return false;
    };
    let Some((pct, rest)) = rest.split_once("% over 2 s (") else {
        return false;
    };
    pct.parse::<u32>().is_ok_and(|p| range.contains(&p)) && rest.ends_with(" requests)")
}

/// The scenario of the file's doc, with `max_ejected=30%` (room for the
/// three bad peers), patched and stock.
#[test]
fn each_bad_peer_is_ejected_by_its_rule_and_no_healthy_one_is() {
    for (mode, bin) in binaries() {
        let (_backends, names) = ten_peers();
        let port = healthcheck_t::free_port();
        let ng = Builder::default()
            .binary(bin)
            .workers(2)
            .start(&http_conf(port, &names, "30%"));
        wait_all_up(port, Kind::Http, "app", &names);
        let started = Instant::now();
        let load = Load::start(port, 8);
        // The consecutive rule trips within a few requests to the peer.
        let s = wait_for(LONG, "the 503 peer ejected", || {
            let s = status_json(port).ok()?;
            ejected(&s, Kind::Http, "app", &names[1]).then_some(s)
        });
        assert_eq!(
            detail(&s, Kind::Http, "app", &names[1]),
            ("consecutive_5xx".into(), "5xx 5 in a row".into()),
            "{mode}"
        );
        let consecutive = started.elapsed();
        // The interval rules: judged at the end of each 2 s interval, from
        // the first with at least min_requests=10 to the peer. Each peer's
        // first ejection is caught as it happens (the first may be over
        // before the other starts).
        let mut seen: [Option<(String, String)>; 2] = [None, None];
        let s = wait_for(LONG, "the 30% and the slow peer ejected", || {
            let s = status_json(port).ok()?;
            for (k, i) in [0, 2].into_iter().enumerate() {
                if seen[k].is_none() && ejected(&s, Kind::Http, "app", &names[i]) {
                    seen[k] = Some(detail(&s, Kind::Http, "app", &names[i]));
                }
            }
            seen.iter().all(Option::is_some).then_some(s)
        });
        let interval = started.elapsed();
        let [Some((rule, text)), Some((slow_rule, slow_text))] = seen else {
            unreachable!()
        };
        assert_eq!(rule, "failure_percentage", "{mode}: {text}");
        assert!(failure_rate_in(&text, 20..=45), "{mode}: {text}");
        assert_eq!(slow_rule, "latency", "{mode}: {slow_text}");
        let (n, m) = slow_text
            .strip_prefix("latency: ")
            .and_then(|t| t.strip_suffix(&format!(" slower than {LATENCY_MS}ms")))
            .and_then(|t| t.split_once(" of "))
            .unwrap_or_else(|| panic!("{mode}: {slow_text}"));
        assert_eq!(
            n, m,
            "{mode}: every answer of the slow peer is slow: {slow_text}"
        );
        // Within a few requests for the consecutive rule; by the third
        // interval end after the load starts for the others (the first may
        // see only part of an interval's traffic).
        assert!(
            consecutive < Duration::from_secs(3) && interval < Duration::from_secs(7),
            "{mode}: ejected after {consecutive:?} (consecutive) and {interval:?} (interval)"
        );
        for n in &names[3..] {
            assert!(s.is_up(Kind::Http, "app", n), "{mode}: {n}: {s}");
        }
        let summary = s.0["upstreams"]
            .as_array()
            .and_then(|u| u.iter().find(|u| u["name"] == "app"))
            .cloned()
            .unwrap_or_default();
        assert!(summary["ejected"].as_i64() >= Some(1), "{mode}: {summary}");

        // The 503 peer comes back after 3 s and trips again at once: its
        // second ejection lasts 6 s.
        let s = wait_for(LONG, "the 503 peer's second ejection", || {
            let s = status_json(port).ok()?;
            let r = row(&s, Kind::Http, "app", &names[1]);
            (r["ejections"] == 2 && ejected(&s, Kind::Http, "app", &names[1])).then_some(s)
        });
        let left = row(&s, Kind::Http, "app", &names[1])["ejected_until"]
            .as_i64()
            .unwrap()
            - unix_ms();
        assert!(
            (4000..=6000).contains(&left),
            "{mode}: the second ejection lasts 6 s: {left} ms left"
        );
        let log = ng.log();
        let first = format!(
            "peer {} is ejected by check_outlier for 3s: 5xx 5 in a row (ejection 1 in a row)",
            names[1]
        );
        let second = format!(
            "peer {} is ejected by check_outlier for 6s: 5xx 5 in a row (ejection 2 in a row)",
            names[1]
        );
        assert!(
            log.contains(&first) && log.contains(&second),
            "{mode}: {log}"
        );
        assert!(
            log.contains(&format!(
                "peer {} returns from its 3s check_outlier ejection",
                names[1]
            )),
            "{mode}: {log}"
        );
        let elapsed = started.elapsed();
        let answers = load.answers();
        drop(load);
        // The clients saw only 200s, at a few hundred requests a second.
        let bad: Vec<&(u16, String)> = answers.iter().filter(|a| a.0 != 200).collect();
        assert!(
            bad.is_empty(),
            "{mode}: {} of {} not 200: {:?}",
            bad.len(),
            answers.len(),
            &bad[..bad.len().min(5)]
        );
        let rate = answers.len() as f64 / elapsed.as_secs_f64();
        assert!(rate > 200.0, "{mode}: {rate:.0} requests/s");
        // No healthy peer was ever ejected; each counted its traffic.
        let s = status_json(port).unwrap();
        for n in &names[3..] {
            let r = row(&s, Kind::Http, "app", n);
            assert_eq!(r["ejections"], 0, "{mode}: {n}: {r}");
            assert!(
                !ng.log_contains(&format!("peer {n} is ejected")),
                "{mode}: {n}"
            );
            assert!(
                r["outlier"]["requests_total"].as_i64() > Some(0),
                "{mode}: {r}"
            );
        }
    }
}

/// `max_ejected=20%` of ten peers: never more than two out at once, though
/// three deserve it, and the log says which peer was kept in and why.
#[test]
fn max_ejected_keeps_the_rest_in_service() {
    let (_backends, names) = ten_peers();
    let port = healthcheck_t::free_port();
    let ng = Builder::default()
        .workers(2)
        .start(&http_conf(port, &names, "20%"));
    wait_all_up(port, Kind::Http, "app", &names);
    let load = Load::start(port, 6);
    let mut most = 0;
    let kept = "is kept in service although check_outlier found";
    let deadline = Instant::now() + LONG;
    while Instant::now() < deadline {
        let s = status_json(port).unwrap();
        let out = names
            .iter()
            .filter(|n| ejected(&s, Kind::Http, "app", n))
            .count();
        assert!(out <= 2, "{out} peers ejected at once: {s}");
        most = most.max(out);
        if most == 2 && ng.log_contains(kept) {
            break;
        }
        thread::sleep(Duration::from_millis(50));
    }
    drop(load);
    assert_eq!(most, 2, "two peers out at most, and two at some point");
    let line = ng.log_lines(kept).into_iter().next().unwrap_or_default();
    assert!(
        line.contains("max_ejected=20% lets 2 of its 10 peers out and 2 are ("),
        "{line}"
    );
    assert!(
        names[..3]
            .iter()
            .any(|n| line.contains(&format!("peer {n} is kept"))),
        "a bad peer is the one kept: {line}"
    );
}

/// A stream peer that resets every other connection is ejected by its
/// failure rate; sessions then all succeed on the others. (`max_fails=0`:
/// nginx's own accounting would otherwise keep it out for `fail_timeout`
/// after each failed connect, and it would not get the traffic to judge.)
#[test]
fn a_stream_peer_resetting_half_its_connections_is_ejected() {
    let healthy: Vec<Backend> = (0..3).map(|_| Backend::start()).collect();
    let flaky = TcpListener::bind("127.0.0.1:0").unwrap();
    let flaky_name = flaky.local_addr().unwrap().to_string();
    thread::spawn(move || {
        for (n, conn) in flaky.incoming().enumerate() {
            let Ok(mut conn) = conn else { continue };
            if n % 2 == 0 {
                let _ = set_linger_zero(&conn);
                drop(conn);
            } else {
                thread::spawn(move || {
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut buf = [0u8; 64];
                    let _ = conn.read(&mut buf);
                    let _ = std::io::Write::write_all(&mut conn, b"flaky");
                });
            }
        }
    });
    let mut names: Vec<String> = healthy.iter().map(Backend::addr).collect();
    names.push(flaky_name.clone());
    let servers = servers(&names);
    let (port, sport) = (healthcheck_t::free_port(), healthcheck_t::free_port());
    let conf = format!(
        "stream {{
    upstream s {{
{servers}        check type=tcp interval=500 rise=1 fall=2 port={};
        check_outlier failure_percentage=30 min_requests=10 interval=2s ejection=30s;
    }}
    server {{ listen 127.0.0.1:{sport}; proxy_pass s; }}
}}
http {{
    server {{
        listen 127.0.0.1:{port};
        location /status {{ healthcheck_status json; }}
    }}
}}",
        healthy[0].port()
    );
    let ng = Builder::default().workers(2).start(&conf);
    wait_all_up(port, Kind::Stream, "s", &names);
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = stream_roundtrip(sport, b"ping\n");
            }
        })
    };
    let s = wait_for(LONG, "the flaky stream peer ejected", || {
        let s = status_json(port).ok()?;
        ejected(&s, Kind::Stream, "s", &flaky_name).then_some(s)
    });
    stop.store(true, Ordering::Relaxed);
    let _ = client.join();
    let (rule, text) = detail(&s, Kind::Stream, "s", &flaky_name);
    assert_eq!(rule, "failure_percentage", "{text}");
    assert!(failure_rate_in(&text, 40..=60), "{text}");
    for n in &names[..3] {
        assert!(s.is_up(Kind::Stream, "s", n), "{n}: {s}");
        assert_eq!(row(&s, Kind::Stream, "s", n)["ejections"], 0);
    }
    // Ejected: every session reaches a healthy peer.
    for _ in 0..100 {
        let got = stream_roundtrip(sport, b"ping\n").expect("a session");
        let text = String::from_utf8_lossy(&got).to_string();
        assert!(
            healthy.iter().any(|b| text == b.port().to_string()),
            "a healthy peer answers: {text:?}"
        );
    }
    drop(ng);
}

/// Without `check`: the rows exist (type `none`, no rounds), a peer is
/// ejected by its traffic and returns when its ejection time is over.
#[test]
fn without_a_check_a_peer_returns_when_its_ejection_ends() {
    let backends: Vec<HttpBackend> = (0..3)
        .map(|_| HttpBackend::start(Reply::status(200)))
        .collect();
    let names: Vec<String> = backends.iter().map(HttpBackend::addr).collect();
    backends[0].set_reply(Reply::status(503));
    let servers = servers(&names);
    let port = healthcheck_t::free_port();
    let conf = format!(
        "http {{
    check_log logs/events.log;
    upstream app {{
{servers}        check_outlier consecutive_5xx=3 ejection=1s;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{ proxy_pass http://app; proxy_next_upstream error http_503; }}
        location /status {{ healthcheck_status json; }}
    }}
}}"
    );
    let ng = Builder::default().workers(2).start(&conf);
    let s = status_json(port).unwrap();
    for n in &names {
        let r = row(&s, Kind::Http, "app", n);
        assert_eq!(
            (r["status"].as_str(), r["type"].as_str()),
            (Some("up"), Some("none")),
            "{r}"
        );
    }
    let mut ejected_seen = false;
    for _ in 0..50 {
        assert_eq!(http_get(port, "/").unwrap().status, 200);
        if ejected(&status_json(port).unwrap(), Kind::Http, "app", &names[0]) {
            ejected_seen = true;
            break;
        }
    }
    assert!(ejected_seen, "ejected after 3 answers of 503");
    // No traffic while ejected, and nothing brings it back but the time.
    let served_503 = backends[0].request_count();
    for _ in 0..20 {
        assert_eq!(http_get(port, "/").unwrap().status, 200);
    }
    assert_eq!(
        backends[0].request_count(),
        served_503,
        "no request reaches an ejected peer"
    );
    ng.wait_for_log(
        &format!(
            "peer {} returns from its 1s check_outlier ejection",
            names[0]
        ),
        LONG,
    );
    let s = status_json(port).unwrap();
    let r = row(&s, Kind::Http, "app", &names[0]);
    assert_eq!(r["status"], "up", "{r}");
    assert_eq!(r["checks"], 0, "no check rounds without check: {r}");
    assert!(backends[1..].iter().all(|b| b.request_count() > 0));
    // The full Prometheus page counts it.
    let page = http_get(port, "/status?format=prometheus&histogram=on")
        .unwrap()
        .text();
    let series = |family: &str, value: &str| {
        page.lines().any(|l| {
            l.starts_with(&format!("{family}{{"))
                && l.contains(&format!("\"{}\"", names[0]))
                && l.ends_with(&format!(" {value}"))
        })
    };
    assert!(
        series("nginx_upstream_server_ejections_total", "1"),
        "{page}"
    );
    assert!(series("nginx_upstream_server_ejected", "0"), "{page}");
    assert!(
        series("nginx_upstream_server_outlier_failures_total", "3"),
        "{page}"
    );
}

/// A reload keeps an ejection (and its end); a reload that takes
/// `check_outlier` away ends it at once.
#[test]
fn an_ejection_survives_a_reload_and_ends_with_the_directive() {
    let backends: Vec<HttpBackend> = (0..3)
        .map(|_| HttpBackend::start(Reply::status(200)))
        .collect();
    let names: Vec<String> = backends.iter().map(HttpBackend::addr).collect();
    backends[0].set_reply(Reply::status(503));
    let port = healthcheck_t::free_port();
    let conf = |outlier: &str| {
        let servers = servers(&names);
        format!(
            "http {{
    upstream app {{
{servers}        check type=tcp interval=200 rise=1 fall=2;
        {outlier}
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{ proxy_pass http://app; proxy_next_upstream error http_503; }}
        location /status {{ healthcheck_status json; }}
    }}
}}"
        )
    };
    let with = conf("check_outlier consecutive_5xx=3 ejection=60s;");
    let mut ng = Builder::default().workers(2).start(&with);
    wait_all_up(port, Kind::Http, "app", &names);
    let until = wait_for(LONG, "the 503 peer ejected", || {
        let _ = http_get(port, "/");
        let s = status_json(port).ok()?;
        ejected(&s, Kind::Http, "app", &names[0])
            .then(|| row(&s, Kind::Http, "app", &names[0])["ejected_until"].as_i64())
            .flatten()
    });
    let old = ng.workers();
    ng.reload_with(&with);
    ng.wait_workers_gone(&old, LONG);
    let s = status_json(port).unwrap();
    assert_eq!(s.generation(), Some(2), "the new configuration's page: {s}");
    assert!(ejected(&s, Kind::Http, "app", &names[0]), "{s}");
    let r = row(&s, Kind::Http, "app", &names[0]);
    assert_eq!(
        (r["ejections"].as_i64(), r["ejected_until"].as_i64()),
        (Some(1), Some(until)),
        "{r}"
    );
    for _ in 0..20 {
        assert_eq!(http_get(port, "/").unwrap().status, 200);
    }
    assert_eq!(
        backends[0].request_count(),
        3,
        "still no traffic after the reload"
    );
    ng.reload_with(&conf(""));
    wait_for(LONG, "the peer back without check_outlier", || {
        let s = status_json(port).ok()?;
        s.is_up(Kind::Http, "app", &names[0]).then_some(())
    });
}
