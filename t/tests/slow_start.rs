//! `check ... slow_start=10s` with real traffic (docs/transitions.md): two
//! equal-weight http peers; peer A fails its check, comes back, and from
//! the moment the status page gives as its return (`last_change`) its
//! share of the requests is measured in each fifth of the ramp. With
//! round robin, least_conn (patched and stock), random and vnswrr it must
//! be within 25% of 10, 30, 50, 70 and 90% of its full share (half the
//! requests), then its full share. With `hash $arg_k`, of the keys that map to A, the
//! share A serves grows the same way while the keys of B never move. A
//! peer that goes down mid-ramp starts its ramp again at its next return,
//! and one that returns after its ramp ended ramps again.
//! Upstream connections are kept alive: thousands of requests a second on
//! fresh connections would run the loopback out of ports.

use std::io::Write;
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use healthcheck_t::client::read_response;
use healthcheck_t::http_backend::{response, HttpBackend, Reply};
use healthcheck_t::paths::{patched_bin, stock_bin};
use healthcheck_t::{status_json, wait_for, Builder, Kind, Status};

const LONG: Duration = Duration::from_secs(15);
const RAMP_MS: i64 = 10_000;

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A backend answering 200 with its address as the body (checks too).
fn backend() -> (HttpBackend, String) {
    let b = HttpBackend::start(Reply::status(200));
    let name = b.addr();
    healthy(&b, &name);
    (b, name)
}

fn healthy(b: &HttpBackend, name: &str) {
    b.set_reply(Reply::Raw {
        bytes: response(200, &[], name.as_bytes()),
        close: false,
    });
}

fn conf(port: u16, balancer: &str, names: &[&String]) -> String {
    let servers: String = names
        .iter()
        .map(|n| format!("        server {n} max_fails=0;\n"))
        .collect();
    format!(
        "http {{
    upstream u {{
        {balancer}
{servers}        check type=http interval=200 rise=1 fall=1 timeout=1000 slow_start=10s;
        check_http_send \"GET /health HTTP/1.0\\r\\n\\r\\n\";
        keepalive 8;
    }}
    server {{
        listen 127.0.0.1:{port};
        access_log off;
        location /app {{
            proxy_pass http://u;
            proxy_next_upstream off;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }}
        location /status {{ healthcheck_status json; }}
    }}
}}"
    )
}

/// One client on a keep-alive connection until stopped: each answer's
/// time (unix ms), key index and body.
struct Recorder {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<(i64, usize, String)>>>,
    thread: Option<JoinHandle<()>>,
}

impl Recorder {
    /// Requests `/app`, or `/app?k=N` for N cycling over `keys` keys.
    fn start(port: u16, keys: Option<usize>) -> Recorder {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, out) = (Arc::clone(&stop), Arc::clone(&seen));
        let thread = thread::spawn(move || {
            let mut n = 0usize;
            let mut conn: Option<(TcpStream, Vec<u8>)> = None;
            while !s.load(Ordering::Relaxed) {
                let k = keys.map_or(0, |keys| n % keys);
                n += 1;
                let path = match keys {
                    Some(_) => format!("/app?k={k}"),
                    None => "/app".into(),
                };
                if conn.is_none() {
                    conn = TcpStream::connect(("127.0.0.1", port))
                        .ok()
                        .map(|c| (c, Vec::new()));
                }
                let Some((c, buf)) = conn.as_mut() else {
                    thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n");
                let answer = c
                    .write_all(req.as_bytes())
                    .and_then(|()| read_response(c, buf));
                match answer {
                    Ok(r) if r.status == 200 => {
                        out.lock().unwrap().push((unix_ms(), k, r.text()));
                    }
                    Ok(_) => {}
                    Err(_) => conn = None,
                }
            }
        });
        Recorder {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Vec<(i64, usize, String)> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn status(port: u16) -> Option<Status> {
    status_json(port).ok()
}

/// Take A down by its check, bring it back, and return the unix ms at
/// which the status page says it returned.
fn down_and_back(port: u16, a: &HttpBackend, name: &str) -> i64 {
    a.set_reply(Reply::status(500));
    wait_for(LONG, format!("{name} down"), || {
        status(port)?.is_down(Kind::Http, "u", name).then_some(())
    });
    healthy(a, name);
    wait_for(LONG, format!("{name} up again"), || {
        let s = status(port)?;
        s.is_up(Kind::Http, "u", name)
            .then(|| s.int(Kind::Http, "u", name, "last_change"))
    })
}

/// A's share of `seen` (among those `count` selects) in [from, to) ms.
fn share(seen: &[(i64, usize, String)], a: &str, from: i64, to: i64) -> (f64, usize) {
    let window: Vec<_> = seen
        .iter()
        .filter(|(t, _, _)| (from..to).contains(t))
        .collect();
    let n = window.len();
    let hits = window.iter().filter(|(_, _, b)| b == a).count();
    (hits as f64 / n.max(1) as f64, n)
}

/// Each fifth of the ramp within 25% of the ramp's mid-fifth share of
/// `full`, then `full` within 20% after it.
fn assert_ramp(what: &str, shares: impl Fn(i64, i64) -> (f64, usize), t0: i64, full: f64) {
    let mut report = String::new();
    let mut bad = Vec::new();
    for k in 0..5 {
        let (from, to) = (t0 + k * RAMP_MS / 5, t0 + (k + 1) * RAMP_MS / 5);
        let (got, n) = shares(from, to);
        let want = full * (0.1 + 0.2 * k as f64);
        report += &format!("fifth {}: {got:.3} of {n} (want {want:.3})\n", k + 1);
        if n < 200 || (got / want - 1.0).abs() > 0.25 {
            bad.push(k + 1);
        }
    }
    let (got, n) = shares(t0 + RAMP_MS + 300, t0 + RAMP_MS + 2_300);
    report += &format!("after: {got:.3} of {n} (want {full:.3})\n");
    if n < 200 || (got / full - 1.0).abs() > 0.2 {
        bad.push(6);
    }
    eprintln!("{what}:\n{report}");
    assert!(bad.is_empty(), "{what}: off in {bad:?}\n{report}");
}

fn ramp_with(balancer: &str, bin: PathBuf, what: &str) {
    let (a, an) = backend();
    let (_b, bn) = backend();
    let port = healthcheck_t::free_port();
    let ng = Builder::default()
        .binary(bin)
        .start(&conf(port, balancer, &[&an, &bn]));
    wait_for(LONG, "both up", || {
        let s = status(port)?;
        (s.is_up(Kind::Http, "u", &an) && s.is_up(Kind::Http, "u", &bn)).then_some(())
    });
    let rec = Recorder::start(port, None);
    let t0 = down_and_back(port, &a, &an);
    // While it ramps the status page shows the ramp.
    let s = status(port).unwrap();
    let left = s.int(Kind::Http, "u", &an, "slow_start_ms");
    assert!((1..=RAMP_MS).contains(&left), "slow_start_ms {left}");
    let w = s.row(Kind::Http, "u", &an)["effective_weight"]
        .as_f64()
        .unwrap();
    assert!(w < 1.0, "effective_weight {w} while ramping");
    wait_for(
        Duration::from_secs(20),
        "the ramp and 2.5 s after it",
        || (unix_ms() > t0 + RAMP_MS + 2_500).then_some(()),
    );
    let seen = rec.finish();
    let s = status(port).unwrap();
    assert!(s.row(Kind::Http, "u", &an)["slow_start_ms"].is_null());
    assert_eq!(
        s.row(Kind::Http, "u", &an)["effective_weight"].as_f64(),
        Some(1.0)
    );
    assert_ramp(what, |from, to| share(&seen, &an, from, to), t0, 0.5);
    drop(ng);
}

fn binaries() -> [(&'static str, PathBuf); 2] {
    [("patched", patched_bin()), ("stock", stock_bin())]
}

#[test]
fn round_robin_ramps_a_returning_peers_share_linearly() {
    for (mode, bin) in binaries() {
        ramp_with("", bin, &format!("round robin, {mode}"));
    }
}

#[test]
fn least_conn_ramps_a_returning_peers_share_linearly() {
    for (mode, bin) in binaries() {
        ramp_with("least_conn;", bin, &format!("least_conn, {mode}"));
    }
}

#[test]
fn random_ramps_a_returning_peers_share_linearly() {
    ramp_with("random;", patched_bin(), "random, patched");
}

#[test]
fn vnswrr_ramps_a_returning_peers_share_linearly() {
    ramp_with("vnswrr;", patched_bin(), "vnswrr, patched");
}

/// With `hash $arg_k` a growing share of A's keys reach A; B's keys never
/// move.
#[test]
fn hash_admits_a_growing_share_of_the_returning_peers_keys() {
    const KEYS: usize = 8_000;
    for (mode, bin) in binaries() {
        let (a, an) = backend();
        let (_b, bn) = backend();
        let port = healthcheck_t::free_port();
        let ng = Builder::default()
            .binary(bin)
            .start(&conf(port, "hash $arg_k;", &[&an, &bn]));
        wait_for(LONG, "both up", || {
            let s = status(port)?;
            (s.is_up(Kind::Http, "u", &an) && s.is_up(Kind::Http, "u", &bn)).then_some(())
        });
        // Where each key goes with both up.
        let rec = Recorder::start(port, Some(KEYS));
        wait_for(LONG, "every key asked once", || {
            (rec.seen.lock().unwrap().len() >= KEYS).then_some(())
        });
        let mut owner = vec![String::new(); KEYS];
        for (_, k, body) in rec.finish() {
            owner[k] = body;
        }
        let of_a = owner.iter().filter(|o| **o == an).count();
        assert!(
            (KEYS / 4..KEYS * 3 / 4).contains(&of_a),
            "{of_a} of {KEYS} keys on A"
        );
        let rec = Recorder::start(port, Some(KEYS));
        let t0 = down_and_back(port, &a, &an);
        wait_for(
            Duration::from_secs(20),
            "the ramp and 2.5 s after it",
            || (unix_ms() > t0 + RAMP_MS + 2_500).then_some(()),
        );
        let seen = rec.finish();
        let moved: Vec<_> = seen
            .iter()
            .filter(|(_, k, body)| owner[*k] == bn && *body != bn)
            .take(3)
            .collect();
        assert!(moved.is_empty(), "{mode}: keys of B moved: {moved:?}");
        let a_keys: Vec<_> = seen
            .iter()
            .filter(|(_, k, _)| owner[*k] == an)
            .cloned()
            .collect();
        assert_ramp(
            &format!("hash, {mode}"),
            |from, to| share(&a_keys, &an, from, to),
            t0,
            1.0,
        );
        drop(ng);
    }
}

/// A peer that goes down in the middle of its ramp starts from zero at its
/// next return.
#[test]
fn a_peer_down_mid_ramp_ramps_again_from_its_next_return() {
    let (a, an) = backend();
    let (_b, bn) = backend();
    let port = healthcheck_t::free_port();
    let _ng = Builder::default().start(&conf(port, "", &[&an, &bn]));
    wait_for(LONG, "both up", || {
        let s = status(port)?;
        (s.is_up(Kind::Http, "u", &an) && s.is_up(Kind::Http, "u", &bn)).then_some(())
    });
    let first = down_and_back(port, &a, &an);
    wait_for(LONG, "half the ramp", || {
        (unix_ms() > first + RAMP_MS / 2).then_some(())
    });
    let rec = Recorder::start(port, None);
    let t0 = down_and_back(port, &a, &an);
    assert!(t0 > first + RAMP_MS / 2);
    let left = status(port)
        .unwrap()
        .int(Kind::Http, "u", &an, "slow_start_ms");
    assert!(left > RAMP_MS / 2, "the ramp starts over: {left} ms left");
    wait_for(LONG, "the first fifth of the new ramp", || {
        (unix_ms() > t0 + RAMP_MS / 5 + 100).then_some(())
    });
    let seen = rec.finish();
    let (got, n) = share(&seen, &an, t0, t0 + RAMP_MS / 5);
    assert!(
        n >= 200 && (got / 0.05 - 1.0).abs() <= 0.25,
        "first fifth after the second return: {got:.3} of {n}, want 0.05"
    );
}

#[test]
fn a_peer_returning_after_a_finished_ramp_ramps_again() {
    // With no ramp left, a worker selects without the module's per-request
    // step; the hook must notice the next return all the same.
    let (a, an) = backend();
    let (_b, bn) = backend();
    let port = healthcheck_t::free_port();
    let _ng = Builder::default().start(&conf(port, "", &[&an, &bn]));
    wait_for(LONG, "both up", || {
        let s = status(port)?;
        (s.is_up(Kind::Http, "u", &an) && s.is_up(Kind::Http, "u", &bn)).then_some(())
    });
    let rec = Recorder::start(port, None);
    let first = down_and_back(port, &a, &an);
    wait_for(
        Duration::from_secs(20),
        "the first ramp over, 1 s more",
        || {
            let over = status(port)?.row(Kind::Http, "u", &an)["slow_start_ms"].is_null();
            (over && unix_ms() > first + RAMP_MS + 1_000).then_some(())
        },
    );
    let between = (first + RAMP_MS + 200, unix_ms());
    let t0 = down_and_back(port, &a, &an);
    wait_for(LONG, "the first fifth of the new ramp", || {
        (unix_ms() > t0 + RAMP_MS / 5 + 100).then_some(())
    });
    let seen = rec.finish();
    let (full, n) = share(&seen, &an, between.0, between.1);
    assert!(
        n >= 200 && (full / 0.5 - 1.0).abs() <= 0.2,
        "between the ramps: {full:.3} of {n}, want 0.5"
    );
    let (got, n) = share(&seen, &an, t0, t0 + RAMP_MS / 5);
    assert!(
        n >= 200 && (got / 0.05 - 1.0).abs() <= 0.25,
        "first fifth after the second return: {got:.3} of {n}, want 0.05"
    );
}

/// A TCP backend that writes its address to each connection and closes it.
fn named_tcp() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let name = l.local_addr().unwrap().to_string();
    let n = name.clone();
    thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let _ = c.write_all(n.as_bytes());
        }
    });
    name
}

/// Stream sessions ramp as http requests do (round robin, an operator's
/// `up` as the return). Sessions are paced (a few hundred a second): each
/// is a new connection.
#[test]
fn stream_sessions_ramp_the_same_way() {
    use std::io::Read;
    let (an, bn) = (named_tcp(), named_tcp());
    let (port, sport) = (healthcheck_t::free_port(), healthcheck_t::free_port());
    let _ng = Builder::default().start(&format!(
        "stream {{
    upstream s {{
        server {an} max_fails=0;
        server {bn} max_fails=0;
        check type=tcp interval=200 rise=3 fall=1 timeout=1000 slow_start=10s;
    }}
    server {{ listen 127.0.0.1:{sport}; proxy_pass s; }}
}}
http {{
    server {{
        listen 127.0.0.1:{port};
        location /status {{ healthcheck_status json; }}
        location /admin {{ healthcheck_admin; }}
    }}
}}"
    ));
    wait_for(LONG, "both up", || {
        let s = status(port)?;
        (s.is_up(Kind::Stream, "s", &an) && s.is_up(Kind::Stream, "s", &bn)).then_some(())
    });
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let client = {
        let (stop, seen) = (Arc::clone(&stop), Arc::clone(&seen));
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(mut c) = TcpStream::connect(("127.0.0.1", sport)) {
                    let mut body = String::new();
                    if c.read_to_string(&mut body).is_ok() && !body.is_empty() {
                        seen.lock().unwrap().push((unix_ms(), 0usize, body));
                    }
                }
                thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let post = |action: &str| {
        let r = healthcheck_t::client::http_request(
            port,
            "POST",
            &format!("/admin?upstream=s&peer={an}&action={action}&group=stream"),
            &[],
            b"",
        )
        .unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
    };
    post("down");
    post("up");
    let t0 = status(port)
        .unwrap()
        .int(Kind::Stream, "s", &an, "last_change");
    wait_for(
        Duration::from_secs(20),
        "the ramp and 2.5 s after it",
        || (unix_ms() > t0 + RAMP_MS + 2_500).then_some(()),
    );
    stop.store(true, Ordering::Relaxed);
    client.join().unwrap();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    assert_ramp(
        "stream, round robin",
        |from, to| share(&seen, &an, from, to),
        t0,
        0.5,
    );
}
