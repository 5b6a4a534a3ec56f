//! The engine of `scripts/bench-detection` (the ignored test
//! `bench_detection` in `tests/faults.rs`), run inside a network namespace.
//!
//! 1. Detection latency. Upstream `u` = backend A (a thread) + backend B
//!    (a child process, `max_fails=0` so only the check keeps traffic
//!    away from it), checked with `fall=3 rise=2` at each interval. Client
//!    threads send requests through nginx all the time. Each trial waits
//!    for B to be up, waits a random fraction of an interval (random phase
//!    against the fixed-rate rounds), injects a fault on B and polls the
//!    status page every 10 ms until B shows down. Faults: `kill` (SIGKILL
//!    of B's process), `blackhole` (iptables DROP of every packet to B's
//!    port), `refuse` (iptables REJECT --reject-with tcp-reset). The
//!    access log (`$msec $request_time $status $upstream_addr`) then says
//!    whether any request that started after B's `down_since` was sent to B.
//! 2. Passive comparison: the same faults held for DURATION seconds with
//!    nginx's default `max_fails=1 fail_timeout=10s` on both peers, once
//!    with stock nginx (no module) and once with the module's check; the
//!    clients count the requests that failed or took longer than SLOW_MS.
//!
//! Environment: TRIALS (20), DURATION (60), INTERVALS ("1000 200"),
//! FAULTS ("kill blackhole refuse"), CLIENTS (4), SLOW_MS (100),
//! PROXY_CONNECT_TIMEOUT (1s), NGINX_STOCK_BIN (build/nginx-stock-1.28.3).

use std::collections::hash_map::RandomState;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use healthcheck_t::{free_port, http_get, poll_status_json, status_json, Backend, Kind, Nginx};

use super::{iptables, ChildBackend};

const FALL: u64 = 3;
const RISE: u64 = 2;
/// The window's allowance beyond fall*interval (+ timeout) (docs/benchmarks.md).
const WINDOW_SLACK_MS: u64 = 50;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Kill,
    Blackhole,
    Refuse,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Blackhole => "blackhole",
            Fault::Refuse => "refuse",
        }
    }

    fn parse(s: &str) -> Fault {
        match s {
            "kill" => Fault::Kill,
            "blackhole" => Fault::Blackhole,
            "refuse" => Fault::Refuse,
            _ => panic!("unknown fault {s:?} (kill, blackhole, refuse)"),
        }
    }
}

struct Config {
    trials: usize,
    duration: u64,
    intervals: Vec<u64>,
    faults: Vec<Fault>,
    clients: usize,
    slow_ms: u64,
    proxy_connect_timeout: String,
    stock: PathBuf,
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_string())
}

impl Config {
    fn from_env() -> Config {
        let num = |n: &str, d: &str| -> u64 {
            env_or(n, d)
                .parse()
                .unwrap_or_else(|_| panic!("{n} must be a number"))
        };
        Config {
            trials: num("TRIALS", "20") as usize,
            duration: num("DURATION", "60"),
            intervals: env_or("INTERVALS", "1000 200")
                .split_whitespace()
                .map(|v| v.parse().expect("INTERVALS: numbers"))
                .collect(),
            faults: env_or("FAULTS", "kill blackhole refuse")
                .split_whitespace()
                .map(Fault::parse)
                .collect(),
            clients: num("CLIENTS", "4") as usize,
            slow_ms: num("SLOW_MS", "100"),
            proxy_connect_timeout: env_or("PROXY_CONNECT_TIMEOUT", "1s"),
            stock: PathBuf::from(env_or(
                "NGINX_STOCK_BIN",
                &healthcheck_t::paths::workspace_root()
                    .join("build/nginx-stock-1.28.3/sbin/nginx")
                    .display()
                    .to_string(),
            )),
        }
    }
}

fn random_below(n: u64) -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish() % n.max(1)
}

/// Peer B: a child process, and the faults applied to it.
struct PeerB {
    child: Option<ChildBackend>,
    port: u16,
}

impl PeerB {
    fn start() -> PeerB {
        let child = ChildBackend::spawn(0, 511);
        PeerB {
            port: child.port(),
            child: Some(child),
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn rule(&self, fault: Fault) -> String {
        match fault {
            Fault::Blackhole => format!("INPUT -i lo -p tcp --dport {} -j DROP", self.port),
            _ => format!(
                "INPUT -i lo -p tcp --dport {} -j REJECT --reject-with tcp-reset",
                self.port
            ),
        }
    }

    fn inject(&mut self, fault: Fault) {
        match fault {
            Fault::Kill => self.child.take().expect("B is running").kill(),
            _ => iptables(&format!("-A {}", self.rule(fault))),
        }
    }

    fn restore(&mut self, fault: Fault) {
        match fault {
            Fault::Kill => self.child = Some(ChildBackend::spawn(self.port, 511)),
            _ => iptables(&format!("-D {}", self.rule(fault))),
        }
    }
}

/// Client threads sending `GET /` through nginx until dropped; they count
/// requests, failures and slow answers.
struct Clients {
    stop: Arc<AtomicBool>,
    total: Arc<AtomicUsize>,
    errors: Arc<AtomicUsize>,
    slow: Arc<AtomicUsize>,
    max_ms: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl Clients {
    fn start(n: usize, port: u16, slow_ms: u64) -> Clients {
        let mut c = Clients {
            stop: Arc::new(AtomicBool::new(false)),
            total: Arc::new(AtomicUsize::new(0)),
            errors: Arc::new(AtomicUsize::new(0)),
            slow: Arc::new(AtomicUsize::new(0)),
            max_ms: Arc::new(AtomicU64::new(0)),
            threads: Vec::new(),
        };
        for _ in 0..n {
            let (stop, total, errors, slow, max_ms) = (
                Arc::clone(&c.stop),
                Arc::clone(&c.total),
                Arc::clone(&c.errors),
                Arc::clone(&c.slow),
                Arc::clone(&c.max_ms),
            );
            c.threads.push(thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let t = Instant::now();
                    let ok = http_get(port, "/").is_ok_and(|r| r.status == 200);
                    let took = t.elapsed().as_millis() as u64;
                    total.fetch_add(1, Ordering::SeqCst);
                    if !ok {
                        errors.fetch_add(1, Ordering::SeqCst);
                    } else if took > slow_ms {
                        slow.fetch_add(1, Ordering::SeqCst);
                    }
                    max_ms.fetch_max(took, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(5));
                }
            }));
        }
        c
    }

    fn reset(&self) {
        for a in [&self.total, &self.errors, &self.slow] {
            a.store(0, Ordering::SeqCst);
        }
        self.max_ms.store(0, Ordering::SeqCst);
    }

    fn counts(&self) -> (usize, usize, usize, u64) {
        (
            self.total.load(Ordering::SeqCst),
            self.errors.load(Ordering::SeqCst),
            self.slow.load(Ordering::SeqCst),
            self.max_ms.load(Ordering::SeqCst),
        )
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Access-log lines written since `offset`: (start ms, upstream addresses).
fn access_since(path: &Path, offset: &mut u64) -> Vec<(f64, Vec<String>)> {
    let Ok(mut f) = fs::File::open(path) else {
        return Vec::new();
    };
    let _ = f.seek(SeekFrom::Start(*offset));
    let mut text = String::new();
    let _ = f.read_to_string(&mut text);
    // Keep a partial last line for next time.
    let whole = text.rfind('\n').map_or(0, |i| i + 1);
    *offset += whole as u64;
    text[..whole]
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(4, ' ');
            let msec: f64 = it.next()?.parse().ok()?;
            let rt: f64 = it.next()?.parse().ok()?;
            let _status = it.next()?;
            let addrs = it
                .next()
                .unwrap_or("")
                .split(", ")
                .map(str::to_string)
                .collect();
            Some(((msec - rt) * 1000.0, addrs))
        })
        .collect()
}

fn http_body(port: u16, upstream: &str, pct: &str, log: bool) -> String {
    let access = if log {
        "access_log logs/access.log bench;"
    } else {
        "access_log off;"
    };
    format!(
        "http {{
    log_format bench '$msec $request_time $status $upstream_addr';
{upstream}
    server {{
        listen 127.0.0.1:{port};
        {access}
        proxy_connect_timeout {pct};
        location / {{ proxy_pass http://u; }}
        location /status {{ access_log off; healthcheck_status json; }}
    }}
}}"
    )
}

/// The `p` quantile (nearest rank) of sorted, non-empty `v`.
fn pct<T: Copy>(v: &[T], p: f64) -> T {
    v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
}

struct Trial {
    /// ms from the fault (before / after injecting it) to the first poll
    /// showing down.
    lo: u64,
    hi: u64,
    /// ms from the fault to the module's `down_since`.
    marked: i64,
    violations: usize,
}

fn detection(cfg: &Config, interval: u64, fault: Fault, out: &mut Vec<String>) {
    let timeout = interval - interval / 10;
    let a = Backend::start();
    let mut b = PeerB::start();
    let port = free_port();
    let upstream = format!(
        "    upstream u {{
        server {};
        server {} max_fails=0;
        check interval={interval} fall={FALL} rise={RISE} timeout={timeout};
    }}",
        a.addr(),
        b.addr()
    );
    let ng = Nginx::start(&http_body(
        port,
        &upstream,
        &cfg.proxy_connect_timeout,
        true,
    ));
    let access = ng.prefix().join("logs/access.log");
    let clients = Clients::start(cfg.clients, port, cfg.slow_ms);
    let settle = (timeout / 4).min(100);
    let (lo_bound, hi_bound) = match fault {
        Fault::Blackhole => (
            (FALL - 1) * interval + timeout,
            FALL * interval + timeout + WINDOW_SLACK_MS,
        ),
        // A round in its settle window when the process dies sees the FIN
        // and counts: the first failure may come from a round that started
        // up to `settle` ms before the fault.
        Fault::Kill => (
            (FALL - 1) * interval - settle,
            FALL * interval + WINDOW_SLACK_MS,
        ),
        Fault::Refuse => ((FALL - 1) * interval, FALL * interval + WINDOW_SLACK_MS),
    };
    let mut trials = Vec::new();
    let mut offset = 0u64;
    let wait = Duration::from_millis((FALL + RISE + 2) * interval + timeout + 5000);
    for _ in 0..cfg.trials {
        poll_status_json(port, wait, "B up", |s| {
            s.is_up(Kind::Http, "u", &b.addr())
                && s.get_int(Kind::Http, "u", &b.addr(), "rise").unwrap_or(0) >= RISE as i64
        });
        thread::sleep(Duration::from_millis(random_below(interval)));
        let _ = access_since(&access, &mut offset);
        let fault_unix = healthcheck_t::unix_ms();
        let before = Instant::now();
        b.inject(fault);
        let after = Instant::now();
        let mut seen = None;
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if let Ok(s) = status_json(port) {
                if s.is_down(Kind::Http, "u", &b.addr()) {
                    seen = Some((Instant::now(), s));
                    break;
                }
            }
            thread::sleep(Duration::from_millis(10));
        }
        let (seen_at, s) = seen.unwrap_or_else(|| panic!("{fault:?}: B never went down"));
        let down_since = s
            .get_int(Kind::Http, "u", &b.addr(), "down_since")
            .unwrap_or(0);
        // Traffic keeps flowing for another interval with B down.
        thread::sleep(Duration::from_millis(interval.max(500)));
        let violations = access_since(&access, &mut offset)
            .iter()
            .filter(|(start, addrs)| *start > down_since as f64 + 1.0 && addrs.contains(&b.addr()))
            .count();
        trials.push(Trial {
            lo: super::ms(before, seen_at),
            hi: super::ms(after, seen_at),
            marked: down_since - fault_unix as i64,
            violations,
        });
        b.restore(fault);
    }
    let mut lat: Vec<u64> = trials.iter().map(|t| t.lo).collect();
    lat.sort_unstable();
    let mut marked: Vec<i64> = trials.iter().map(|t| t.marked).collect();
    marked.sort_unstable();
    let inside = trials
        .iter()
        .filter(|t| t.lo >= lo_bound && t.hi <= hi_bound)
        .count();
    let violations: usize = trials.iter().map(|t| t.violations).sum();
    out.push(format!(
        "{:<10} {:>8} {:>7} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>14} {:>9} {:>10}",
        fault.name(),
        interval,
        timeout,
        trials.len(),
        lat[0],
        pct(&lat, 0.5),
        pct(&lat, 0.95),
        lat[lat.len() - 1],
        pct(&marked, 0.5),
        format!("[{lo_bound}, {hi_bound}]"),
        format!("{inside}/{}", trials.len()),
        violations
    ));
    drop(clients);
    drop(ng);
}

/// An nginx binary run as it is (for the stock build, which cannot load
/// the module): its own prefix, stopped with SIGQUIT on drop.
struct RawNginx {
    child: Child,
    prefix: PathBuf,
}

impl RawNginx {
    fn start(bin: &Path, body: &str) -> RawNginx {
        static N: AtomicUsize = AtomicUsize::new(0);
        let prefix = std::env::temp_dir().join("nginx-hc-t").join(format!(
            "bench-stock-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&prefix);
        fs::create_dir_all(prefix.join("logs")).expect("stock prefix");
        let conf = prefix.join("nginx.conf");
        fs::write(
            &conf,
            format!(
                "daemon off;\nmaster_process on;\nworker_processes 1;\npid logs/nginx.pid;\n\
                 error_log logs/error.log info;\nevents {{ worker_connections 1024; }}\n{body}\n"
            ),
        )
        .expect("stock conf");
        let mut cmd = Command::new(bin);
        cmd.arg("-p")
            .arg(format!("{}/", prefix.display()))
            .arg("-c")
            .arg(&conf)
            .args(["-e", "logs/error.log"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only prctl(2), async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGTERM as libc::c_ulong,
                    0,
                    0,
                    0,
                );
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let ng = RawNginx { child, prefix };
        let pid_file = ng.prefix.join("logs/nginx.pid");
        let ok = healthcheck_t::try_wait_until(Duration::from_secs(10), || {
            fs::read_to_string(&pid_file).is_ok_and(|p| p.trim() == ng.child.id().to_string())
        });
        assert!(
            ok,
            "stock nginx did not start: {}",
            fs::read_to_string(ng.prefix.join("logs/error.log")).unwrap_or_default()
        );
        ng
    }
}

impl Drop for RawNginx {
    fn drop(&mut self) {
        let _ = healthcheck_t::process::signal(self.child.id(), libc::SIGQUIT);
        let done = healthcheck_t::try_wait_until(Duration::from_secs(5), || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        });
        if !done {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = fs::remove_dir_all(&self.prefix);
    }
}

/// One passive-comparison run: the fault held for `cfg.duration` s.
fn passive(cfg: &Config, fault: Fault, stock: bool, out: &mut Vec<String>) {
    let a = Backend::start();
    let mut b = PeerB::start();
    let port = free_port();
    let check = if stock {
        String::new()
    } else {
        "        check interval=1000 fall=3 rise=2 timeout=900;\n".to_string()
    };
    let upstream = format!(
        "    upstream u {{
        server {};
        server {};
{check}    }}",
        a.addr(),
        b.addr()
    );
    let mut body = http_body(port, &upstream, &cfg.proxy_connect_timeout, true);
    let (label, _hc, _raw, access);
    if stock {
        body = body.replace(
            "location /status { access_log off; healthcheck_status json; }",
            "",
        );
        let raw = RawNginx::start(&cfg.stock, &body);
        access = raw.prefix.join("logs/access.log");
        label = "stock, passive only".to_string();
        _raw = Some(raw);
        _hc = None;
    } else {
        let ng = Nginx::start(&body);
        access = ng.prefix().join("logs/access.log");
        label = "module, interval=1000".to_string();
        _hc = Some(ng);
        _raw = None;
    }
    let clients = Clients::start(cfg.clients, port, cfg.slow_ms);
    thread::sleep(Duration::from_secs(2));
    let mut offset = 0u64;
    let _ = access_since(&access, &mut offset);
    clients.reset();
    b.inject(fault);
    let start = Instant::now();
    thread::sleep(Duration::from_secs(cfg.duration));
    let (total, errors, slow, max_ms) = clients.counts();
    let secs = start.elapsed().as_secs_f64();
    let to_b = access_since(&access, &mut offset)
        .iter()
        .filter(|(_, addrs)| addrs.contains(&b.addr()))
        .count();
    drop(clients);
    b.restore(fault);
    let per_min = |n: usize| n as f64 * 60.0 / secs;
    out.push(format!(
        "{:<10} {:<22} {:>9} {:>7} {:>6} {:>12.1} {:>14.1} {:>8}",
        fault.name(),
        label,
        total,
        errors,
        slow,
        per_min(errors + slow),
        per_min(to_b),
        max_ms
    ));
}

/// The whole benchmark; prints its tables on stdout, and into the file
/// named by BENCH_OUT if set.
pub fn run() {
    let cfg = Config::from_env();
    let bin = healthcheck_t::paths::nginx_bin();
    let mut report = vec![
        format!(
            "detection latency: {} trials per row, fall={FALL} rise={RISE}, {} client threads, \
             nginx {}",
            cfg.trials,
            cfg.clients,
            bin.display()
        ),
        "(timeout = interval - interval/10: the issue's timeout=1000 at interval=1000 is \
         rejected by nginx -t, timeout must be less than interval)"
            .to_string(),
        format!(
            "{:<10} {:>8} {:>7} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>14} {:>9} {:>10}",
            "fault",
            "interval",
            "timeout",
            "trials",
            "min",
            "median",
            "p95",
            "max",
            "marked",
            "window",
            "in window",
            "after-down"
        ),
    ];
    for &interval in &cfg.intervals {
        for &fault in &cfg.faults {
            eprintln!("bench: detection, {} at interval {interval}", fault.name());
            detection(&cfg, interval, fault, &mut report);
        }
    }
    report.push(format!(
        "latencies in ms from the fault to the first status poll (every 10 ms) showing the \
         peer down; marked = median ms from the fault to the module's down_since; window = \
         [(fall-1)*interval, fall*interval] (+timeout for blackholes) +{WINDOW_SLACK_MS} ms, \
         the kill window starting min(timeout/4, 100) ms earlier (a round in its settle \
         window sees the dying process's FIN); after-down = client requests sent to the \
         peer after its down_since (the peer has max_fails=0: only the check keeps traffic \
         away)"
    ));

    if cfg.duration > 0 {
        assert!(
            cfg.stock.is_file(),
            "no stock nginx at {} (NGINX_STOCK=1 scripts/build)",
            cfg.stock.display()
        );
        report.push(String::new());
        report.push(format!(
            "passive comparison: each fault held {} s, {} client threads, default max_fails=1 \
             fail_timeout=10s, proxy_connect_timeout {}, slow = over {} ms; stock = {}",
            cfg.duration,
            cfg.clients,
            cfg.proxy_connect_timeout,
            cfg.slow_ms,
            cfg.stock.display()
        ));
        report.push(format!(
            "{:<10} {:<22} {:>9} {:>7} {:>6} {:>12} {:>14} {:>8}",
            "fault",
            "nginx",
            "requests",
            "errors",
            "slow",
            "stalled/min",
            "tries at B/min",
            "max ms"
        ));
        for &fault in &cfg.faults {
            for stock in [true, false] {
                eprintln!(
                    "bench: passive, {} with {}",
                    fault.name(),
                    if stock { "stock nginx" } else { "the module" }
                );
                passive(&cfg, fault, stock, &mut report);
            }
        }
        report.push(
            "stalled = requests that failed or took longer than SLOW_MS; tries at B = \
             requests nginx sent to the faulty peer (first try or retry), from $upstream_addr"
                .to_string(),
        );
    }
    let text = report.join("\n") + "\n";
    println!("\n{text}");
    if let Ok(path) = std::env::var("BENCH_OUT") {
        fs::write(&path, &text).unwrap_or_else(|e| panic!("write {path}: {e}"));
    }
}
