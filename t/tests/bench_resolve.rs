//! The benchmark of resolved peers, the engine of `scripts/bench-resolve`
//! (ignored here; the script runs it and says what the figures mean).
//!
//! `BENCH_NAMES` upstreams (50), each with one `server nameK.test:PORT
//! resolve;` line whose name dnsmasq ([`Dns`]) answers with `BENCH_ADDRS`
//! addresses (20) on `127.A.K.h` (`A` random per run; nothing listens
//! there, so every check is refused at once). A change replaces the
//! `BENCH_CHANGE` (2) oldest addresses of every name with new ones, in one
//! DNS update ([`Dns::set_all`]); `BENCH_ROUNDS` (5) changes per phase.
//!
//! - Phase A (`BENCH_WORKERS` workers, 2): the status page is polled every
//!   `BENCH_POLL_MS` (20) all the time; after each change, when it first
//!   shows exactly the new addresses (rows right) and the new ones checked
//!   at least once (T1), from T0, the moment dnsmasq answers the new set.
//! - Phase B (one worker, which does all the work): the status page is not
//!   fetched inside the measured windows; `BENCH_CLIENTS` (4) clients send
//!   `GET /ping` (`return 204`) on kept-alive connections, one every
//!   `BENCH_PING_GAP_US` (1000) each, staggered, and the latencies of those
//!   sent in the change window (`BENCH_WINDOW_MS` from just before the DNS
//!   update) are compared with those of the quiet window of the same
//!   length right before it. A request that arrives while the worker is in
//!   a long event-loop turn waits for the rest of it: the longest latency
//!   bounds the longest turn from above (it adds the client's and the
//!   kernel's share).
//!
//! The pings run in phase A too (with the polling in both of its windows).
//! The report goes to `BENCH_OUT` (else stdout); progress lines start with
//! `bench:` on stderr.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use healthcheck_t::dns::Dns;
use healthcheck_t::nginx::nginx_version;
use healthcheck_t::paths::nginx_bin;
use healthcheck_t::process;
use healthcheck_t::wait::try_wait_for;
use healthcheck_t::{free_port, status_json, unix_ms, Kind, Nginx, Status};

/// The first nginx with `server ... resolve`.
const RESOLVE_SINCE: (u32, u32, u32) = (1, 27, 3);
/// `resolver ... valid=`, seconds (dnsmasq's TTL is 1 s too).
const VALID_S: u64 = 1;
/// The longest event-loop turn the goal allows.
const TURN_GOAL_MS: f64 = 5.0;

fn env_num(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a whole number, got {v:?}")),
        _ => default,
    }
}

fn progress(msg: &str) {
    eprintln!("bench: {msg}");
}

/// The knobs, from the environment.
#[derive(Clone, Debug)]
struct Settings {
    names: usize,
    addrs: usize,
    change: usize,
    interval: u64,
    workers: usize,
    rounds: usize,
    clients: usize,
    gap_us: u64,
    poll_ms: u64,
    window_ms: u64,
    settle_ms: u64,
}

impl Settings {
    fn from_env() -> Settings {
        let interval = env_num("BENCH_INTERVAL", 1000);
        let s = Settings {
            names: env_num("BENCH_NAMES", 50) as usize,
            addrs: env_num("BENCH_ADDRS", 20) as usize,
            change: env_num("BENCH_CHANGE", 2) as usize,
            interval,
            workers: env_num("BENCH_WORKERS", 2) as usize,
            rounds: env_num("BENCH_ROUNDS", 5) as usize,
            clients: env_num("BENCH_CLIENTS", 4) as usize,
            gap_us: env_num("BENCH_PING_GAP_US", 1000),
            poll_ms: env_num("BENCH_POLL_MS", 20),
            window_ms: env_num("BENCH_WINDOW_MS", VALID_S * 1000 + 2 * interval + 500),
            settle_ms: env_num("BENCH_SETTLE_MS", interval),
        };
        assert!(
            (1..=256).contains(&s.names),
            "BENCH_NAMES must be 1..256 (one 127.A.K.0/24 each)"
        );
        assert!(
            s.addrs >= 1 && s.change <= s.addrs,
            "BENCH_ADDRS >= 1, BENCH_CHANGE <= BENCH_ADDRS"
        );
        assert!(
            s.addrs + s.change * s.rounds <= 254,
            "BENCH_ADDRS + BENCH_CHANGE x BENCH_ROUNDS must stay within 254 hosts"
        );
        assert!(
            s.interval > 0 && s.workers > 0 && s.rounds > 0 && s.poll_ms > 0 && s.window_ms > 0,
            "BENCH_INTERVAL, BENCH_WORKERS, BENCH_ROUNDS, BENCH_POLL_MS, BENCH_WINDOW_MS must be positive"
        );
        s
    }

    fn rows(&self) -> usize {
        self.names * self.addrs
    }

    fn check_line(&self) -> String {
        format!("check interval={} rise=1 fall=1", self.interval)
    }
}

// ---------------------------------------------------------------------------
// names and addresses

/// The names, their addresses now, and the next host number of each.
struct Names {
    a: u8,
    port: u16,
    current: Vec<VecDeque<u8>>,
    next: Vec<u8>,
}

impl Names {
    fn new(s: &Settings) -> Names {
        Names {
            a: 1 + (healthcheck_t::random_u64() % 254) as u8,
            port: free_port(),
            current: (0..s.names)
                .map(|_| (1..=s.addrs as u8).collect())
                .collect(),
            next: vec![s.addrs as u8 + 1; s.names],
        }
    }

    fn name(k: usize) -> String {
        format!("name{k}.test")
    }

    fn ip(&self, k: usize, h: u8) -> Ipv4Addr {
        Ipv4Addr::new(127, self.a, k as u8, h)
    }

    /// `127.A.K.h:PORT`, a row's `name`.
    fn row(&self, k: usize, h: u8) -> String {
        format!("{}:{}", self.ip(k, h), self.port)
    }

    /// The rows every upstream must have now.
    fn want(&self) -> Vec<BTreeSet<String>> {
        (0..self.current.len())
            .map(|k| self.current[k].iter().map(|&h| self.row(k, h)).collect())
            .collect()
    }

    /// Replace the `n` oldest addresses of every name; the new rows, per
    /// upstream.
    fn replace(&mut self, n: usize) -> Vec<BTreeSet<String>> {
        let mut added = Vec::new();
        for k in 0..self.current.len() {
            let mut new = BTreeSet::new();
            for _ in 0..n {
                self.current[k].pop_front();
                let h = self.next[k];
                self.next[k] += 1;
                self.current[k].push_back(h);
                new.insert(self.row(k, h));
            }
            added.push(new);
        }
        added
    }

    /// Tell dnsmasq the current addresses of every name, in one update;
    /// returns once it answers them.
    fn publish(&self, dns: &mut Dns) {
        let sets: Vec<(String, Vec<Ipv4Addr>)> = (0..self.current.len())
            .map(|k| {
                let ips = self.current[k].iter().map(|&h| self.ip(k, h)).collect();
                (Names::name(k), ips)
            })
            .collect();
        let refs: Vec<(&str, &[Ipv4Addr])> = sets
            .iter()
            .map(|(n, ips)| (n.as_str(), ips.as_slice()))
            .collect();
        dns.set_all(&refs);
    }
}

// ---------------------------------------------------------------------------
// nginx

fn conf(s: &Settings, names: &Names, dns: &Dns, port: u16) -> String {
    let mut ups = String::new();
    for k in 0..s.names {
        let _ = writeln!(
            ups,
            "    upstream u{k} {{ zone u{k} 256k; server {}:{} resolve; {}; }}",
            Names::name(k),
            names.port,
            s.check_line()
        );
    }
    format!(
        "http {{
    access_log off;
    keepalive_requests 1000000;
    resolver {} valid={VALID_S}s ipv6=off;
    resolver_timeout 1s;
{ups}
    server {{
        listen 127.0.0.1:{port} backlog=1024;
        location /ping {{ return 204; }}
        location /status {{ healthcheck_status json; }}
    }}
}}",
        dns.addr()
    )
}

/// On-CPU time of the worker processes, ms (/proc/PID/schedstat).
fn workers_cpu_ms(pids: &[u32]) -> f64 {
    pids.iter()
        .map(|p| {
            std::fs::read_to_string(format!("/proc/{p}/schedstat"))
                .ok()
                .and_then(|t| t.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0) as f64
                / 1e6
        })
        .sum()
}

/// The machine's CPU jiffies from /proc/stat: (busy, total, steal).
fn machine_cpu() -> (u64, u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = text
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = v.iter().sum();
    let idle = v.get(3).unwrap_or(&0) + v.get(4).unwrap_or(&0);
    (total - idle, total, *v.get(7).unwrap_or(&0))
}

/// What a status page says about the rows we want.
struct Seen {
    /// Every upstream has exactly the rows wanted.
    rows_right: bool,
    /// ... and each of them has been checked at least once.
    checked: bool,
    /// The latest `last_change` (unix ms) of the rows in `new`.
    last_change: Option<i64>,
    /// Rows listed `unchecked` (no room).
    unchecked: usize,
}

fn look(st: &Status, want: &[BTreeSet<String>], new: &[BTreeSet<String>]) -> Seen {
    // upstream -> name -> (checks, last_change, unchecked)
    type Row = (i64, Option<i64>, bool);
    let mut table: BTreeMap<&str, BTreeMap<&str, Row>> = BTreeMap::new();
    let mut unchecked = 0;
    for r in st.peers(Kind::Http) {
        let (Some(u), Some(n)) = (r["upstream"].as_str(), r["name"].as_str()) else {
            continue;
        };
        let is_unchecked = r["status"] == "unchecked";
        unchecked += usize::from(is_unchecked);
        table.entry(u).or_default().insert(
            n,
            (
                r["checks"].as_i64().unwrap_or(0),
                r["last_change"].as_i64(),
                is_unchecked,
            ),
        );
    }
    let mut rows_right = table.len() == want.len();
    let mut checked = true;
    let mut last_change = None;
    for (k, names) in want.iter().enumerate() {
        let empty = BTreeMap::new();
        let rows = table.get(format!("u{k}").as_str()).unwrap_or(&empty);
        if rows.len() != names.len() || !names.iter().all(|n| rows.contains_key(n.as_str())) {
            rows_right = false;
        }
        for n in names {
            match rows.get(n.as_str()) {
                Some(&(c, lc, unchecked)) => {
                    if c < 1 || unchecked {
                        checked = false;
                    }
                    if new.get(k).is_some_and(|s| s.contains(n)) {
                        last_change = last_change.max(lc);
                    }
                }
                None => checked = false,
            }
        }
    }
    Seen {
        rows_right,
        checked: rows_right && checked,
        last_change,
        unchecked,
    }
}

// ---------------------------------------------------------------------------
// the /ping clients

/// `(sent, latency)` in ns; `sent` from the phase's base instant.
type Samples = Vec<(u64, u64)>;

struct Pingers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<(Samples, usize)>>,
}

fn ping_once(s: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<()> {
    s.write_all(b"GET /ping HTTP/1.1\r\nHost: bench\r\n\r\n")?;
    buf.clear();
    let mut chunk = [0u8; 1024];
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed"));
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    if !buf.starts_with(b"HTTP/1.1 204") {
        return Err(io::Error::other(format!(
            "unexpected answer {:?}",
            String::from_utf8_lossy(buf)
        )));
    }
    Ok(())
}

fn connect(port: u16) -> io::Result<TcpStream> {
    let s = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    Ok(s)
}

impl Pingers {
    fn start(s: &Settings, port: u16, base: Instant) -> Pingers {
        let stop = Arc::new(AtomicBool::new(false));
        let gap = Duration::from_micros(s.gap_us);
        let threads = (0..s.clients)
            .map(|i| {
                let stop = Arc::clone(&stop);
                let offset = gap * i as u32 / s.clients.max(1) as u32;
                thread::Builder::new()
                    .name(format!("ping-{i}"))
                    .spawn(move || {
                        let mut samples = Vec::with_capacity(1 << 16);
                        let mut errors = 0;
                        let mut conn = connect(port).ok();
                        let mut buf = Vec::with_capacity(512);
                        thread::sleep(offset);
                        let mut next = Instant::now();
                        while !stop.load(Ordering::Relaxed) {
                            let Some(c) = conn.as_mut() else {
                                errors += 1;
                                thread::sleep(Duration::from_millis(10));
                                conn = connect(port).ok();
                                continue;
                            };
                            let t = Instant::now();
                            match ping_once(c, &mut buf) {
                                Ok(()) => samples.push((
                                    (t - base).as_nanos() as u64,
                                    t.elapsed().as_nanos() as u64,
                                )),
                                Err(_) => {
                                    errors += 1;
                                    conn = connect(port).ok();
                                }
                            }
                            next += gap;
                            let now = Instant::now();
                            if next > now {
                                thread::sleep(next - now);
                            } else {
                                next = now;
                            }
                        }
                        (samples, errors)
                    })
                    .expect("spawn a ping client")
            })
            .collect();
        Pingers { stop, threads }
    }

    fn finish(self) -> (Vec<Samples>, usize) {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        let mut errors = 0;
        for t in self.threads {
            let (s, e) = t.join().expect("a ping client panicked");
            all.push(s);
            errors += e;
        }
        (all, errors)
    }
}

/// Latencies of the pings sent in `[a, b)` (ns from the base).
#[derive(Clone, Copy, Debug, Default)]
struct Lat {
    n: usize,
    p50: f64,
    p999: f64,
    max: f64,
}

fn latencies(all: &[Samples], a: u64, b: u64) -> Lat {
    let mut v: Vec<u64> = all
        .iter()
        .flat_map(|s| s.iter())
        .filter(|(t, _)| (a..b).contains(t))
        .map(|&(_, l)| l)
        .collect();
    if v.is_empty() {
        return Lat::default();
    }
    v.sort_unstable();
    let q = |p: f64| v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1] as f64 / 1e6;
    Lat {
        n: v.len(),
        p50: q(0.5),
        p999: q(0.999),
        max: *v.last().unwrap() as f64 / 1e6,
    }
}

// ---------------------------------------------------------------------------
// the workers' event-loop turns, from inside: perf

/// CLOCK_MONOTONIC, ns (what `Instant` and `perf record -k CLOCK_MONOTONIC` use).
fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `perf record` of the workers' epoll_wait entries and exits and their
/// context switches: a turn is the time from one epoll_wait's return to
/// the next call (whatever the worker did in between), and the part of it
/// the worker was switched out (preempted, or blocked outside epoll_wait).
struct Perf {
    child: Child,
    data: PathBuf,
    log: PathBuf,
}

/// One event-loop turn of a worker (CLOCK_MONOTONIC ns).
#[derive(Clone, Copy, Debug)]
struct Turn {
    tid: u32,
    start: u64,
    len: u64,
    /// How long of it the worker was switched out.
    off: u64,
    /// CPU samples that fell in it (one each `SAMPLE_US` on the CPU).
    samples: u32,
}

/// What perf saw: the turns, and where the workers' CPU samples (one
/// each `SAMPLE_US` on the CPU) fell: `(tid, time, "symbol (object)")`.
struct Trace {
    turns: Vec<Turn>,
    samples: Vec<(u32, u64, String)>,
}

/// The CPU sampling period of the workers, us.
const SAMPLE_US: u64 = 1000;

impl Perf {
    /// None when BENCH_PERF=0 or perf does not run (the reason on stderr).
    fn start(pids: &[u32], label: &str) -> Option<Perf> {
        if std::env::var("BENCH_PERF").as_deref() == Ok("0") {
            return None;
        }
        let tag = format!(
            "bench-resolve-{}-{}",
            std::process::id(),
            label.replace(' ', "-")
        );
        let data = std::env::temp_dir().join(format!("{tag}.perf"));
        let log = std::env::temp_dir().join(format!("{tag}.perf.log"));
        let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
        let mut cmd = Command::new("perf");
        cmd.args(["record", "-q", "-k", "CLOCK_MONOTONIC", "--switch-events"]);
        cmd.args(["-e", &format!("cpu-clock/period={}/", SAMPLE_US * 1000)]);
        for e in ["epoll_wait", "epoll_pwait"] {
            cmd.args(["-e", &format!("syscalls:sys_enter_{e}")]);
            cmd.args(["-e", &format!("syscalls:sys_exit_{e}")]);
        }
        cmd.args(["-p", &pids.join(","), "-o"])
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).ok()?);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                progress(&format!("no perf ({e}): turns not measured from inside"));
                return None;
            }
        };
        // Attached once it has written the file's header.
        thread::sleep(Duration::from_millis(500));
        if let Ok(Some(st)) = child.try_wait() {
            progress(&format!(
                "perf record exited ({st}): {}",
                std::fs::read_to_string(&log).unwrap_or_default().trim()
            ));
            return None;
        }
        Some(Perf { child, data, log })
    }

    /// Stop recording; the turns of every worker.
    fn finish(mut self) -> Result<Trace, String> {
        let _ = process::signal(self.child.id(), libc::SIGINT);
        let exited = try_wait_for(Duration::from_secs(20), || {
            self.child.try_wait().ok().flatten()
        });
        if exited.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            return Err("perf record did not stop within 20 s".into());
        }
        let out = Command::new("perf")
            .args([
                "script",
                "-F",
                "tid,time,event,ip,sym,dso",
                "--ns",
                "--show-switch-events",
                "-i",
            ])
            .arg(&self.data)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .map_err(|e| format!("perf script: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        // per thread: the turn it is in (start, off-CPU so far, switched
        // out at)
        let mut open: BTreeMap<u32, (u64, u64, Option<u64>)> = BTreeMap::new();
        let mut turns = Vec::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            let mut f = line.split_whitespace();
            let (Some(tid), Some(time), Some(event)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let dir = f.next().unwrap_or("");
            let (Ok(tid), Some((sec, ns))) = (
                tid.parse::<u32>(),
                time.trim_end_matches(':').split_once('.'),
            ) else {
                continue;
            };
            let (Ok(sec), Ok(ns)) = (sec.parse::<u64>(), ns.parse::<u64>()) else {
                continue;
            };
            let t = sec * 1_000_000_000 + ns;
            if event.contains("sys_exit_epoll") {
                open.insert(tid, (t, 0, None));
            } else if event.contains("sys_enter_epoll") {
                if let Some((start, off, _)) = open.remove(&tid) {
                    turns.push(Turn {
                        tid,
                        start,
                        len: t.saturating_sub(start),
                        off,
                        samples: 0,
                    });
                }
            } else if event.starts_with("cpu-clock") {
                // "ip symbol (object)": the symbol may hold spaces
                let rest = line.split_once(event).map_or("", |(_, r)| r).trim();
                let rest = rest.split_once(' ').map_or("", |(_, r)| r);
                let (sym, dso) = rest.rsplit_once(" (").unwrap_or((rest, ""));
                let dso = dso.trim_end_matches(')');
                let dso = dso.rsplit('/').next().unwrap_or(dso);
                samples.push((tid, t, format!("{sym} ({dso})")));
            } else if event == "PERF_RECORD_SWITCH" {
                if let Some(turn) = open.get_mut(&tid) {
                    match (dir, turn.2) {
                        ("OUT", _) => turn.2 = Some(t),
                        ("IN", Some(out)) => {
                            turn.1 += t.saturating_sub(out);
                            turn.2 = None;
                        }
                        _ => {}
                    }
                }
            }
        }
        if std::env::var_os(healthcheck_t::nginx::KEEP_ENV).is_none() {
            let _ = std::fs::remove_file(&self.data);
            let _ = std::fs::remove_file(&self.log);
        }
        if turns.is_empty() {
            return Err(format!(
                "perf recorded no epoll_wait of the workers (perf script: {})",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        // Count each sample in the turn it fell in.
        turns.sort_by_key(|t| (t.tid, t.start));
        for (tid, t, _) in &samples {
            let i = turns.partition_point(|x| (x.tid, x.start) <= (*tid, *t));
            if let Some(turn) = i.checked_sub(1).map(|i| &mut turns[i]) {
                if turn.tid == *tid && *t < turn.start + turn.len {
                    turn.samples += 1;
                }
            }
        }
        Ok(Trace { turns, samples })
    }
}

/// The turn begun in `[a, b)` (ns from the base) that spent the most
/// time on the CPU.
fn busiest_in(trace: &Trace, base_mono: u64, a: u64, b: u64) -> Option<Turn> {
    let (a, b) = (base_mono + a, base_mono + b);
    trace
        .turns
        .iter()
        .filter(|t| (a..b).contains(&t.start))
        .max_by_key(|t| t.len.saturating_sub(t.off))
        .copied()
}

/// Where the CPU samples inside `turn` fell: the count and the top
/// symbols with their shares.
fn where_it_went(trace: &Trace, turn: &Turn, top: usize) -> (usize, String) {
    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
    let mut n = 0;
    for (tid, t, sym) in &trace.samples {
        if *tid == turn.tid && (turn.start..turn.start + turn.len).contains(t) {
            *by.entry(sym.as_str()).or_default() += 1;
            n += 1;
        }
    }
    let mut v: Vec<(&str, usize)> = by.into_iter().collect();
    v.sort_by_key(|x| std::cmp::Reverse(x.1));
    let text = v
        .iter()
        .take(top)
        .map(|(sym, c)| format!("{:.0}% {sym}", 100.0 * *c as f64 / n.max(1) as f64))
        .collect::<Vec<_>>()
        .join(", ");
    (n, text)
}

/// The turns begun in `[a, b)` (ns from the base).
#[derive(Clone, Copy, Debug)]
struct TurnStats {
    /// The longest (ms) and how much of it was on the CPU.
    max: f64,
    max_on_cpu: f64,
    /// The longest time on the CPU in one turn (ms).
    on_cpu: f64,
    /// Turns of `TURN_GOAL_MS` or more.
    over: usize,
    /// The most CPU samples in one turn.
    samples: u32,
}

fn longest_turn(trace: &Option<Trace>, base_mono: u64, a: u64, b: u64) -> Option<TurnStats> {
    let turns = &trace.as_ref()?.turns;
    let (a, b) = (base_mono + a, base_mono + b);
    let mut st = TurnStats {
        max: 0.0,
        max_on_cpu: 0.0,
        on_cpu: 0.0,
        over: 0,
        samples: 0,
    };
    for &Turn {
        start: t,
        len,
        off,
        samples,
        ..
    } in turns
    {
        if (a..b).contains(&t) {
            st.samples = st.samples.max(samples);
        }
        if !(a..b).contains(&t) {
            continue;
        }
        let (len, on) = (len as f64 / 1e6, len.saturating_sub(off) as f64 / 1e6);
        if len > st.max {
            st.max = len;
            st.max_on_cpu = on;
        }
        st.on_cpu = st.on_cpu.max(on);
        st.over += usize::from(len >= TURN_GOAL_MS);
    }
    Some(st)
}

// ---------------------------------------------------------------------------
// a phase

/// When a page first showed something: the request time of the last page
/// that did not and the answer time of the first that did, ms from T0.
#[derive(Clone, Copy, Debug)]
struct When {
    after: f64,
    by: f64,
}

#[derive(Debug, Default)]
struct Round {
    /// dns.set_all: from the hosts file rewrite to dnsmasq answering (T0).
    dns_ms: f64,
    rows_right: Option<When>,
    checked: Option<When>,
    /// phase B: right when the window ended (one page), else when a page
    /// first was (polled afterwards).
    right_at_end: bool,
    /// The latest `last_change` of the new rows, ms from T0.
    last_change: Option<i64>,
    /// Windows (ns from the base): change, quiet.
    change: (u64, u64),
    quiet: (u64, u64),
    cpu_change: f64,
    cpu_quiet: f64,
}

struct Phase {
    label: String,
    workers: usize,
    poll: bool,
    rounds: Vec<Round>,
    pings: Vec<Samples>,
    ping_errors: usize,
    start_rows_ms: f64,
    bad_lines: Vec<String>,
    warn_lines: Vec<String>,
    unchecked_max: usize,
    fetch_ms: Vec<f64>,
    status_bytes: usize,
    /// From perf; the base instant's CLOCK_MONOTONIC.
    turns: Option<Trace>,
    perf_note: String,
    base_mono: u64,
    /// The machine's busy and steal share over the rounds.
    machine: String,
}

/// Fetch the page; the page, the request's and the answer's instants.
fn fetch(port: u16, fetch_ms: &mut Vec<f64>) -> Option<(Status, Instant, Instant)> {
    let a = Instant::now();
    let s = status_json(port).ok()?;
    let b = Instant::now();
    fetch_ms.push((b - a).as_secs_f64() * 1e3);
    Some((s, a, b))
}

fn ms_between(a: Instant, b: Instant) -> f64 {
    if b >= a {
        (b - a).as_secs_f64() * 1e3
    } else {
        -((a - b).as_secs_f64() * 1e3)
    }
}

fn run_phase(s: &Settings, label: &str, workers: usize, poll: bool) -> Phase {
    progress(&format!(
        "{label}: starting dnsmasq and nginx ({workers} worker(s))"
    ));
    let mut names = Names::new(s);
    let mut dns = Dns::start();
    names.publish(&mut dns);
    let builder = Nginx::builder().workers(workers).log_level("notice");
    let (ng, port) = builder.start_with(|| {
        let port = free_port();
        (conf(s, &names, &dns, port), port)
    });
    let pids = ng.workers();
    let poll_step = Duration::from_millis(s.poll_ms);
    let mut fetch_ms = Vec::new();
    let mut unchecked_max = 0;

    // All rows there and checked.
    let started = Instant::now();
    let want = names.want();
    let first_timeout = Duration::from_millis(10 * s.interval) + Duration::from_secs(30);
    let status_bytes = loop {
        if let Some((st, _, _)) = fetch(port, &mut fetch_ms) {
            let seen = look(&st, &want, &[]);
            unchecked_max = unchecked_max.max(seen.unchecked);
            if seen.checked {
                break st.to_string().len();
            }
        }
        assert!(
            started.elapsed() < first_timeout,
            "{label}: the {} rows were not all there and checked within {first_timeout:?}",
            s.rows()
        );
        thread::sleep(poll_step);
    };
    let start_rows_ms = started.elapsed().as_secs_f64() * 1e3;
    progress(&format!(
        "{label}: {} rows there and checked after {start_rows_ms:.0} ms",
        s.rows()
    ));
    fetch_ms.clear();

    let perf = Perf::start(&pids, label);
    let base = Instant::now();
    let base_mono = mono_ns();
    let ns = |t: Instant| (t - base).as_nanos() as u64;
    let pingers = Pingers::start(s, port, base);
    let mach0 = machine_cpu();
    let window = Duration::from_millis(s.window_ms);
    let settle = Duration::from_millis(s.settle_ms);
    let timeout = Duration::from_millis(10 * s.interval) + Duration::from_secs(10);
    // Poll the page (phase A) or sleep (phase B) until `until`.
    let idle = |until: Instant, fetch_ms: &mut Vec<f64>| loop {
        let now = Instant::now();
        if now >= until {
            break;
        }
        if poll {
            let _ = fetch(port, fetch_ms);
            let now = Instant::now();
            if now < until {
                thread::sleep(poll_step.min(until - now));
            }
        } else {
            thread::sleep(until - now);
        }
    };
    let mut rounds = Vec::new();
    for r in 1..=s.rounds {
        let mut round = Round::default();
        // A random point of the resolver's and the checks' cycles.
        let jitter =
            Duration::from_millis(healthcheck_t::random_u64() % s.interval.max(VALID_S * 1000));
        idle(Instant::now() + settle + jitter, &mut fetch_ms);
        let q0 = Instant::now();
        let cpu_q0 = workers_cpu_ms(&pids);
        idle(q0 + window, &mut fetch_ms);
        // The change.
        let tset = Instant::now();
        let cpu_set = workers_cpu_ms(&pids);
        let new = names.replace(s.change);
        let want = names.want();
        names.publish(&mut dns);
        let t0 = Instant::now();
        let t0_unix = unix_ms() as i64;
        round.dns_ms = ms_between(tset, t0);
        let mut last_not_right = tset;
        let mut last_not_checked = tset;
        if poll {
            let t1 = loop {
                if let Some((st, a, b)) = fetch(port, &mut fetch_ms) {
                    let seen = look(&st, &want, &new);
                    unchecked_max = unchecked_max.max(seen.unchecked);
                    if seen.rows_right {
                        round.rows_right.get_or_insert(When {
                            after: ms_between(t0, last_not_right),
                            by: ms_between(t0, b),
                        });
                    } else {
                        last_not_right = a;
                    }
                    if seen.checked {
                        round.checked = Some(When {
                            after: ms_between(t0, last_not_checked),
                            by: ms_between(t0, b),
                        });
                        round.last_change = seen.last_change.map(|t| t - t0_unix);
                        break b;
                    }
                    last_not_checked = a;
                }
                assert!(
                    tset.elapsed() < timeout,
                    "{label} round {r}: the status page was not right within {timeout:?}"
                );
                thread::sleep(poll_step);
            };
            let len = (t1 - tset).min(window);
            round.change = (ns(tset), ns(t1));
            round.quiet = (ns(tset - len), ns(tset));
            round.cpu_change = workers_cpu_ms(&pids) - cpu_set;
            // the quiet window's CPU, scaled to the same length
            round.cpu_quiet =
                (cpu_set - cpu_q0) * len.as_secs_f64() / (tset - q0).as_secs_f64().max(1e-9);
        } else {
            let end = tset + window;
            idle(end, &mut fetch_ms);
            let tend = Instant::now();
            round.cpu_change = workers_cpu_ms(&pids) - cpu_set;
            round.cpu_quiet = cpu_set - cpu_q0;
            round.change = (ns(tset), ns(end));
            round.quiet = (ns(tset - window), ns(tset));
            loop {
                if let Some((st, a, b)) = fetch(port, &mut fetch_ms) {
                    let seen = look(&st, &want, &new);
                    unchecked_max = unchecked_max.max(seen.unchecked);
                    if seen.checked {
                        round.right_at_end = a <= tend + poll_step;
                        round.checked = Some(When {
                            after: ms_between(t0, last_not_checked.max(tend)),
                            by: ms_between(t0, b),
                        });
                        round.last_change = seen.last_change.map(|t| t - t0_unix);
                        break;
                    }
                    last_not_checked = a;
                }
                assert!(
                    tset.elapsed() < timeout,
                    "{label} round {r}: the status page was not right within {timeout:?}"
                );
                thread::sleep(poll_step);
            }
        }
        progress(&format!(
            "{label} round {r}: right by {:.0} ms from T0, last new row changed at {} ms",
            round.checked.map_or(f64::NAN, |w| w.by),
            round.last_change.map_or("-".into(), |t| t.to_string())
        ));
        rounds.push(round);
    }
    let mach1 = machine_cpu();
    let (pings, ping_errors) = pingers.finish();
    let dt = (mach1.1 - mach0.1).max(1) as f64;
    let machine = format!(
        "machine CPU {:.0}% busy, {:.1}% steal",
        100.0 * (mach1.0 - mach0.0) as f64 / dt,
        100.0 * (mach1.2 - mach0.2) as f64 / dt
    );
    let (turns, perf_note) = match perf.map(Perf::finish) {
        None => (None, "not measured (no perf, or BENCH_PERF=0)".to_string()),
        Some(Err(e)) => (None, format!("not measured: {e}")),
        Some(Ok(t)) => {
            let note = format!(
                "{} turns, {} CPU samples recorded",
                t.turns.len(),
                t.samples.len()
            );
            (Some(t), note)
        }
    };
    let log = ng.log();
    let bad_lines: Vec<String> = ng.unexpected_log_lines();
    // Reported, not failed on: the report lists them.
    ng.allow_log("");
    let warn_lines = log
        .lines()
        .filter(|l| l.contains("[warn]"))
        .map(str::to_string)
        .collect();
    drop(ng);
    drop(dns);
    Phase {
        label: label.to_string(),
        workers,
        poll,
        rounds,
        pings,
        ping_errors,
        start_rows_ms,
        bad_lines,
        warn_lines,
        unchecked_max,
        fetch_ms,
        status_bytes,
        turns,
        perf_note,
        base_mono,
        machine,
    }
}

// ---------------------------------------------------------------------------
// the report

fn verdict(ok: bool) -> &'static str {
    if ok {
        "goal met"
    } else {
        "MISSED"
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn lat_cell(l: Lat) -> String {
    format!("{:6.2} {:5.2} {:4.2}", l.max, l.p999, l.p50)
}

fn turn_cell(t: Option<TurnStats>) -> String {
    t.map_or("       -            ".to_string(), |t| {
        format!(
            "{:5.2} ({:4.2}) {:4.2} {:2}",
            t.max, t.max_on_cpu, t.on_cpu, t.over
        )
    })
}

/// A `[warn]` line without its time, pid and numbers, to count its kind.
fn warn_kind(line: &str) -> String {
    let text = line.split("[warn] ").nth(1).unwrap_or(line);
    let text = text.split_once(": ").map_or(text, |(_, t)| t);
    let mut out = String::new();
    let mut in_num = false;
    for c in text.chars().take(120) {
        if c.is_ascii_digit() {
            if !in_num {
                out.push('N');
            }
            in_num = true;
        } else {
            in_num = false;
            out.push(c);
        }
    }
    out
}

fn report(s: &Settings, a: &Phase, b: &Phase) -> String {
    let mut o = String::new();
    let iv = s.interval as f64;
    let _ = writeln!(
        o,
        "Resolved peers: {} upstreams, each one `server nameK.test:PORT resolve;` line (zone 256k), \
         {} addresses a name = {} rows, on 127.A.K.h",
        s.names,
        s.addrs,
        s.rows()
    );
    let _ = writeln!(
        o,
        "  nothing listens there (every check is refused at once); `{};` resolver valid={VALID_S}s \
         (dnsmasq, TTL 1 s)",
        s.check_line()
    );
    let _ = writeln!(
        o,
        "  a change: {} addresses of every name replaced ({} of {}, {:.0}%) in one DNS update; \
         T0 = dnsmasq answers every name's new set; {} changes a phase, at a random point of the \
         cycles",
        s.change,
        s.change * s.names,
        s.rows(),
        100.0 * s.change as f64 / s.addrs as f64,
        s.rounds
    );
    let _ = writeln!(
        o,
        "  /ping load: {} clients, kept-alive, one `return 204` each {} us (staggered), in both phases; \
         turns: perf record of the workers' epoll_wait (return to next call)",
        s.clients, s.gap_us
    );
    for p in [a, b] {
        let _ = writeln!(o);
        let fetch = median(p.fetch_ms.clone());
        let fmax = p.fetch_ms.iter().copied().fold(0.0, f64::max);
        if p.poll {
            let _ = writeln!(
                o,
                "{}: worker_processes {}; the status page ({} KB) polled every {} ms all the time \
                 (fetch median {fetch:.1} ms, max {fmax:.1}); change window T-set..T1, quiet window \
                 the same length before it",
                p.label,
                p.workers,
                p.status_bytes / 1024,
                s.poll_ms
            );
        } else {
            let _ = writeln!(
                o,
                "{}: worker_processes {}; no status fetch inside the windows ({} ms each: change \
                 from just before the DNS update, quiet right before it); one fetch after",
                p.label, p.workers, s.window_ms
            );
        }
        let _ = writeln!(
            o,
            "  round   rows right      T1: right+checked   T1/interval     last new row | \
             /ping ms: max p99.9 p50, change | quiet | turn ms: longest (its CPU) most CPU #>=5ms, change | quiet | worker CPU ms"
        );
        for (i, r) in p.rounds.iter().enumerate() {
            let when = |w: Option<When>| {
                w.map_or("-".to_string(), |w| {
                    format!("{:5.0}..{:5.0}", w.after, w.by)
                })
            };
            let t1 = r.checked.map_or(f64::NAN, |w| w.by);
            let right = if p.poll {
                when(r.rows_right)
            } else if r.right_at_end {
                "at window end".to_string()
            } else {
                "AFTER window".to_string()
            };
            let t1_cell = if p.poll {
                format!(
                    "{:>12}  {:5.2}x {:8}",
                    when(r.checked),
                    t1 / iv,
                    verdict(t1 <= iv)
                )
            } else {
                format!("{:>12}  {:>15}", when(r.checked), "(not polled)")
            };
            let ch = latencies(&p.pings, r.change.0, r.change.1);
            let qu = latencies(&p.pings, r.quiet.0, r.quiet.1);
            let _ = writeln!(
                o,
                "  {:>5}  {right:>13}   {t1_cell}  {:>8} ms |     {} | {} |     {} | {} | {:5.0} / {:5.0}",
                i + 1,
                r.last_change.map_or("-".into(), |t| format!("{t:+}")),
                lat_cell(ch),
                lat_cell(qu),
                turn_cell(longest_turn(&p.turns, p.base_mono, r.change.0, r.change.1)),
                turn_cell(longest_turn(&p.turns, p.base_mono, r.quiet.0, r.quiet.1)),
                r.cpu_change,
                r.cpu_quiet
            );
        }
        let n: usize = p.pings.iter().map(Vec::len).sum();
        let dns = median(p.rounds.iter().map(|r| r.dns_ms).collect());
        let _ = writeln!(
            o,
            "  (ms from T0: the last page without, the first page with; the DNS update took {dns:.0} ms \
             before T0 (median); all rows checked {:.0} ms after nginx started)",
            p.start_rows_ms
        );
        let _ = writeln!(
            o,
            "  {} over the rounds; pings: {n} answered, {} errors; turns: {}; error log: {} \
             [alert]/[crit]/[emerg] lines, {} [warn]; rows listed unchecked (no room) at most {}",
            p.machine,
            p.ping_errors,
            p.perf_note,
            p.bad_lines.len(),
            p.warn_lines.len(),
            p.unchecked_max
        );
        if let Some(trace) = &p.turns {
            for (what, change) in [("change", true), ("quiet", false)] {
                let busiest = p
                    .rounds
                    .iter()
                    .enumerate()
                    .filter_map(|(i, r)| {
                        let (a, b) = if change { r.change } else { r.quiet };
                        Some((i, r, busiest_in(trace, p.base_mono, a, b)?))
                    })
                    .max_by_key(|(_, _, t)| t.len.saturating_sub(t.off));
                if let Some((i, r, t)) = busiest {
                    let (n, text) = where_it_went(trace, &t, 4);
                    let at = (t.start as f64 - (p.base_mono + r.change.0) as f64) / 1e6;
                    let _ = writeln!(
                        o,
                        "  most CPU in one turn, {what} windows: {:.2} ms (of {:.2} ms), round {}, \
                         {at:+.0} ms from the DNS update; its {n} CPU samples (1 per {SAMPLE_US} us): {}",
                        t.len.saturating_sub(t.off) as f64 / 1e6,
                        t.len as f64 / 1e6,
                        i + 1,
                        if text.is_empty() { "-" } else { &text }
                    );
                }
            }
        }
        for l in p.bad_lines.iter().take(5) {
            let _ = writeln!(o, "    {l}");
        }
        let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
        for l in &p.warn_lines {
            *kinds.entry(warn_kind(l)).or_default() += 1;
        }
        for (k, c) in kinds.iter().take(4) {
            let _ = writeln!(o, "    [warn] x{c}: {k}");
        }
    }
    // Summary.
    let t1s: Vec<f64> = a
        .rounds
        .iter()
        .filter_map(|r| r.checked.map(|w| w.by))
        .collect();
    let rights: Vec<f64> = a
        .rounds
        .iter()
        .filter_map(|r| r.rows_right.map(|w| w.by))
        .collect();
    let within = t1s.iter().filter(|&&t| t <= iv).count();
    let worst = t1s.iter().copied().fold(f64::NAN, f64::max);
    let _ = writeln!(o);
    let _ = writeln!(o, "Summary");
    let _ = writeln!(
        o,
        "  status page right from the DNS change (T1-T0, {}): median {:.0} ms, worst {:.0} ms = \
         {:.2}x the interval ({within}/{} rounds within one; includes nginx's own re-resolution \
         delay, below)",
        a.label,
        median(t1s.clone()),
        worst,
        worst / iv,
        t1s.len(),
    );
    let _ = writeln!(
        o,
        "    rows right (nginx re-resolved, the module's watch saw it; new rows not checked yet): \
         median {:.0} ms, worst {:.0} ms",
        median(rights.clone()),
        rights.iter().copied().fold(f64::NAN, f64::max)
    );
    let share: Vec<f64> = a
        .rounds
        .iter()
        .filter_map(|r| Some(r.checked?.by - r.rows_right?.by))
        .collect();
    let share_worst = share.iter().copied().fold(f64::NAN, f64::max);
    let _ = writeln!(
        o,
        "  status page right from nginx's change (rows listed, which the page shows as soon as \
         nginx has them, until every new row was checked: T1 - rows right): median {:.0} ms, \
         worst {:.0} ms = {:.2}x the interval: {}",
        median(share.clone()),
        share_worst,
        share_worst / iv,
        verdict(!share.is_empty() && share_worst <= iv)
    );
    let _ = writeln!(
        o,
        "    (nginx re-resolves a name {} s after each answer with valid={VALID_S}s: timer = \
         1000 x (valid - now + 1), ngx_http_upstream_zone_module.c)",
        VALID_S + 1
    );
    let (mut cmax, mut qmax, mut cp, mut qp) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let (mut cn, mut qn) = (0, 0);
    let (mut tc, mut tq): (Option<f64>, Option<f64>) = (None, None);
    let (mut cpu_c, mut cpu_q) = (0.0f64, 0.0f64);
    let (mut smp_c, mut smp_q) = (0u32, 0u32);
    for r in &b.rounds {
        let ch = latencies(&b.pings, r.change.0, r.change.1);
        let qu = latencies(&b.pings, r.quiet.0, r.quiet.1);
        cn += ch.n;
        qn += qu.n;
        cmax = cmax.max(ch.max);
        qmax = qmax.max(qu.max);
        cp = cp.max(ch.p999);
        qp = qp.max(qu.p999);
        if let Some(t) = longest_turn(&b.turns, b.base_mono, r.change.0, r.change.1) {
            tc = Some(tc.unwrap_or(0.0).max(t.max));
            cpu_c = cpu_c.max(t.on_cpu);
            smp_c = smp_c.max(t.samples);
        }
        if let Some(t) = longest_turn(&b.turns, b.base_mono, r.quiet.0, r.quiet.1) {
            tq = Some(tq.unwrap_or(0.0).max(t.max));
            cpu_q = cpu_q.max(t.on_cpu);
            smp_q = smp_q.max(t.samples);
        }
    }
    let _ = writeln!(
        o,
        "  longest turn while a change is applied, from outside ({}, max /ping latency in the change \
         windows): {cmax:.2} ms = {:.2}x the 5 ms goal: {}{}",
        b.label,
        cmax / TURN_GOAL_MS,
        verdict(cmax < TURN_GOAL_MS),
        if cmax >= TURN_GOAL_MS && qmax >= TURN_GOAL_MS {
            " (the quiet windows reach it too: not the change's doing alone)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        o,
        "    quiet windows: max {qmax:.2} ms; worst p99.9 change {cp:.2} ms vs quiet {qp:.2} ms \
         ({:.2}x); {cn} pings in the change windows, {qn} in the quiet ones",
        if qp > 0.0 { cp / qp } else { f64::NAN }
    );
    match (tc, tq) {
        (Some(c), Some(q)) => {
            let _ = writeln!(
                o,
                "  from inside (perf, the worker's epoll_wait return to next call): longest turn in the \
                 change windows {c:.2} ms = {:.2}x the goal: {}; quiet windows {q:.2} ms",
                c / TURN_GOAL_MS,
                verdict(c < TURN_GOAL_MS)
            );
            let _ = writeln!(
                o,
                "    the most CPU one turn took: change windows {cpu_c:.2} ms = {:.2}x the goal: {}; \
                 quiet {cpu_q:.2} ms (the rest of a long turn: the worker switched out, preempted)",
                cpu_c / TURN_GOAL_MS,
                verdict(cpu_c < TURN_GOAL_MS)
            );
            let _ = writeln!(
                o,
                "    the most CPU samples in one turn: change windows {smp_c}, quiet {smp_q} \
                 (1 per {SAMPLE_US} us on the CPU: a turn of N ms on the CPU has about N; fewer \
                 means the time went where the guest does not see it, e.g. the hypervisor's steal)"
            );
        }
        _ => {
            let _ = writeln!(o, "  from inside: {}", b.perf_note);
        }
    }
    let bad = a.bad_lines.len() + b.bad_lines.len();
    let _ = writeln!(
        o,
        "  error log [alert]/[crit]/[emerg]: {bad} lines: {}",
        if bad == 0 { "none" } else { "SEE ABOVE" }
    );
    o
}

#[test]
#[ignore = "benchmark (about 2 minutes): run scripts/bench-resolve"]
fn bench_resolve() {
    let bin = nginx_bin();
    let v = nginx_version(&bin);
    assert!(
        v >= RESOLVE_SINCE,
        "{} is nginx {}.{}.{}; `server ... resolve` needs 1.27.3+",
        bin.display(),
        v.0,
        v.1,
        v.2
    );
    let s = Settings::from_env();
    progress(&format!("{s:?}"));
    let a = run_phase(&s, "phase A", s.workers, true);
    let b = run_phase(&s, "phase B", 1, false);
    let text = report(&s, &a, &b);
    match std::env::var_os("BENCH_OUT") {
        Some(p) if !p.is_empty() => std::fs::write(&p, &text).expect("write BENCH_OUT"),
        _ => print!("{text}"),
    }
}
