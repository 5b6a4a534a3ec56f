//! The backend and the baseline of `scripts/bench-checks`.
//!
//! ```text
//! bench-sink sink --listeners N [--base ADDR] [--port P] [--backlog N]
//!                 --ready FILE --buckets FILE
//! bench-sink connect-loop --port P --listeners N [--base ADDR] --rate R
//!                 --seconds S [--warmup S] [--settle-ms MS] [--timeout-ms MS]
//! ```
//!
//! `sink` listens on `N` loopback addresses counted from `--base` (default
//! 127.0.100.1; addresses ending in .0 or .255 are skipped), all on one
//! port (`--port 0`, the default, picks a free one below the ephemeral
//! range). It accepts every connection and keeps it open, reading and
//! discarding anything sent, until the client closes or resets it: a TCP
//! health check sees a healthy server. Every accept is counted in a
//! 100 ms bucket of the wall clock. When all listeners are bound it writes
//! the port to the `--ready` file; on SIGTERM or SIGINT it writes the
//! buckets (`<bucket start, unix ms> <accepts>` per line, every bucket from
//! its start to its end, `#` lines for totals) to the `--buckets` file and
//! exits.
//!
//! `connect-loop` is the raw baseline of a TCP check round, single thread,
//! epoll: non-blocking connect to the sink's addresses in turn (within
//! `--timeout-ms`), `SO_ERROR`, peek one byte with `MSG_PEEK`, optionally
//! watch the socket for `--settle-ms` (as the module does after a connect
//! whose peek would block), then close with RST (`SO_LINGER` 0). Connects
//! start at `--rate` a second, evenly spread. After `--warmup` seconds it
//! measures `--seconds` seconds: rounds finished and its own CPU time
//! (`getrusage`, user + system), then stops starting rounds, lets the open
//! ones finish and prints `key=value` lines.
//!
//! Both raise `RLIMIT_NOFILE` as far as they may.

use std::collections::VecDeque;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

use healthcheck_t::unix_ms;

const USAGE: &str = "usage: bench-sink sink --listeners N [--base ADDR] [--port P] [--backlog N] \
                     --ready FILE --buckets FILE\n       \
                     bench-sink connect-loop --port P --listeners N [--base ADDR] --rate R \
                     --seconds S [--warmup S] [--settle-ms MS] [--timeout-ms MS]";

/// Open files wanted; the soft limit is raised to this (or the hard limit).
const NOFILE: u64 = 1 << 20;
/// Width of an accept bucket, ms.
const BUCKET_MS: u64 = 100;
/// epoll events taken per wait.
const EVENTS: usize = 1024;
/// Marks a listener in epoll data.
const LISTENER: u64 = 1 << 40;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn main() -> ExitCode {
    let mut it = std::env::args().skip(1);
    let mode = it.next().unwrap_or_default();
    let opts = match Opts::parse(it) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench-sink: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = match mode.as_str() {
        "sink" => sink(&opts),
        "connect-loop" => connect_loop(&opts),
        _ => {
            eprintln!("bench-sink: unknown mode {mode:?}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-sink {mode}: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Debug)]
struct Opts {
    listeners: usize,
    base: Ipv4Addr,
    port: u16,
    backlog: i32,
    ready: Option<String>,
    buckets: Option<String>,
    rate: u64,
    seconds: f64,
    warmup: f64,
    settle_ms: u64,
    timeout_ms: u64,
}

impl Opts {
    fn parse(mut it: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut o = Opts {
            listeners: 100,
            base: Ipv4Addr::new(127, 0, 100, 1),
            port: 0,
            backlog: 65535,
            ready: None,
            buckets: None,
            rate: 10_000,
            seconds: 60.0,
            warmup: 3.0,
            settle_ms: 0,
            timeout_ms: 900,
        };
        while let Some(flag) = it.next() {
            let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let bad = || format!("{flag}: invalid value {v:?}");
            match flag.as_str() {
                "--listeners" => o.listeners = v.parse().map_err(|_| bad())?,
                "--base" => o.base = v.parse().map_err(|_| bad())?,
                "--port" => o.port = v.parse().map_err(|_| bad())?,
                "--backlog" => o.backlog = v.parse().map_err(|_| bad())?,
                "--ready" => o.ready = Some(v),
                "--buckets" => o.buckets = Some(v),
                "--rate" => o.rate = v.parse().map_err(|_| bad())?,
                "--seconds" => o.seconds = v.parse().map_err(|_| bad())?,
                "--warmup" => o.warmup = v.parse().map_err(|_| bad())?,
                "--settle-ms" => o.settle_ms = v.parse().map_err(|_| bad())?,
                "--timeout-ms" => o.timeout_ms = v.parse().map_err(|_| bad())?,
                _ => return Err(format!("unknown argument {flag:?}")),
            }
        }
        if !(1..=60_000).contains(&o.listeners) {
            return Err("--listeners must be 1..60000".into());
        }
        if !o.base.is_loopback() {
            return Err(format!("--base {} is not a loopback address", o.base));
        }
        if o.rate == 0 || o.seconds <= 0.0 || o.warmup < 0.0 || o.timeout_ms == 0 {
            return Err("--rate, --seconds and --timeout-ms must be positive".into());
        }
        Ok(o)
    }

    /// The listener addresses: `listeners` loopback addresses from `base`,
    /// skipping .0 and .255.
    fn addresses(&self) -> Result<Vec<Ipv4Addr>, String> {
        let mut out = Vec::with_capacity(self.listeners);
        let mut a = u32::from(self.base);
        while out.len() < self.listeners {
            let ip = Ipv4Addr::from(a);
            if !ip.is_loopback() {
                return Err(format!(
                    "{} listeners from {} leave 127/8",
                    self.listeners, self.base
                ));
            }
            if !matches!(ip.octets()[3], 0 | 255) {
                out.push(ip);
            }
            a += 1;
        }
        Ok(out)
    }
}

// --- small libc helpers ------------------------------------------------------

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn os_err(what: &str) -> String {
    format!("{what}: {}", io::Error::last_os_error())
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    // SAFETY: all-zero timespec, valid clock id.
    let mut ts: libc::timespec = unsafe { zeroed() };
    // SAFETY: valid pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// User + system CPU time of this process, µs.
fn cpu_us() -> u64 {
    // SAFETY: all-zero rusage is a valid out buffer.
    let mut ru: libc::rusage = unsafe { zeroed() };
    // SAFETY: valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Raise the open-files limit as far as allowed; returns the soft limit.
fn raise_nofile() -> u64 {
    // SAFETY: all-zero rlimit is a valid out buffer.
    let mut rl: libc::rlimit = unsafe { zeroed() };
    // SAFETY: valid pointer.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) };
    let want = libc::rlimit {
        rlim_cur: NOFILE as libc::rlim_t,
        rlim_max: NOFILE.max(rl.rlim_max as u64) as libc::rlim_t,
    };
    // SAFETY: valid pointer. Raising the hard limit needs CAP_SYS_RESOURCE.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
        return NOFILE;
    }
    rl.rlim_cur = rl.rlim_max;
    // SAFETY: valid pointer.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) };
    rl.rlim_cur as u64
}

fn install_signals() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: all-zero sigaction plus a handler that only stores an
        // atomic; no SA_RESTART, so epoll_wait returns EINTR.
        unsafe {
            let mut sa: libc::sigaction = zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, ptr::null_mut());
        }
    }
}

fn sockaddr(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
    // SAFETY: all-zero sockaddr_in is valid.
    let mut sa: libc::sockaddr_in = unsafe { zeroed() };
    sa.sin_family = libc::AF_INET as libc::sa_family_t;
    sa.sin_port = port.to_be();
    sa.sin_addr.s_addr = u32::from(ip).to_be();
    sa
}

fn set_int(fd: i32, level: i32, name: i32, v: i32) -> i32 {
    // SAFETY: live fd, an int option value.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            ptr::addr_of!(v).cast(),
            size_of::<i32>() as libc::socklen_t,
        )
    }
}

struct Epoll {
    fd: i32,
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    fn new() -> Result<Self, String> {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(os_err("epoll_create1"));
        }
        Ok(Self {
            fd,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS],
        })
    }

    fn add(&self, fd: i32, events: u32, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: data };
        // SAFETY: live fds, valid event.
        if unsafe { libc::epoll_ctl(self.fd, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Wait up to `timeout_ms`; the ready events as (events, data).
    fn wait(&mut self, timeout_ms: i32) -> Result<Vec<(u32, u64)>, String> {
        // SAFETY: the buffer holds EVENTS entries.
        let n = unsafe {
            libc::epoll_wait(self.fd, self.events.as_mut_ptr(), EVENTS as i32, timeout_ms)
        };
        if n < 0 {
            return if errno() == libc::EINTR {
                Ok(Vec::new())
            } else {
                Err(os_err("epoll_wait"))
            };
        }
        Ok(self.events[..n as usize]
            .iter()
            .map(|e| (e.events, e.u64))
            .collect())
    }
}

// --- sink --------------------------------------------------------------------

/// Accepts per 100 ms bucket of the wall clock.
struct Buckets {
    first: u64,
    counts: Vec<u64>,
}

impl Buckets {
    fn new(now_ms: u64) -> Self {
        Self {
            first: now_ms / BUCKET_MS,
            counts: Vec::with_capacity(36_000),
        }
    }

    fn touch(&mut self, now_ms: u64) -> usize {
        let i = (now_ms / BUCKET_MS).saturating_sub(self.first) as usize;
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        i
    }

    fn add(&mut self, now_ms: u64) {
        let i = self.touch(now_ms);
        self.counts[i] += 1;
    }
}

#[derive(Default)]
struct SinkStats {
    accepted: u64,
    closed_eof: u64,
    closed_error: u64,
    open: u64,
    peak_open: u64,
    accept_errors: u64,
    last_accept_error: i32,
}

fn pick_port_below_ephemeral(seed: &mut u64) -> u16 {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(32768)
        .clamp(12_000, 65_535);
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (10_000 + (*seed >> 33) % (low - 10_000)) as u16
}

/// Bind a listener on every address, all on one port.
fn bind_all(addrs: &[Ipv4Addr], port: u16, backlog: i32) -> Result<(u16, Vec<i32>), String> {
    let mut seed = unix_ms() ^ (u64::from(std::process::id()) << 20);
    for _attempt in 0..100 {
        let p = if port == 0 {
            pick_port_below_ephemeral(&mut seed)
        } else {
            port
        };
        let mut fds = Vec::with_capacity(addrs.len());
        let mut busy = None;
        for &ip in addrs {
            // SAFETY: plain syscall.
            let fd = unsafe {
                libc::socket(
                    libc::AF_INET,
                    libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                    0,
                )
            };
            if fd < 0 {
                return Err(os_err("socket"));
            }
            fds.push(fd);
            set_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1);
            let sa = sockaddr(ip, p);
            // SAFETY: valid sockaddr of the stated length.
            let rc = unsafe {
                libc::bind(
                    fd,
                    ptr::addr_of!(sa).cast(),
                    size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            };
            // SAFETY: bound socket.
            if rc < 0 || unsafe { libc::listen(fd, backlog) } < 0 {
                busy = Some((ip, io::Error::last_os_error()));
                break;
            }
        }
        match busy {
            None => return Ok((p, fds)),
            Some((ip, e)) => {
                for fd in fds {
                    // SAFETY: our own fds.
                    unsafe { libc::close(fd) };
                }
                if port != 0 || e.raw_os_error() != Some(libc::EADDRINUSE) {
                    return Err(format!("cannot listen on {ip}:{p}: {e}"));
                }
            }
        }
    }
    Err("no free port found in 100 attempts".into())
}

fn sink(o: &Opts) -> Result<(), String> {
    let (Some(ready), Some(bucket_file)) = (&o.ready, &o.buckets) else {
        return Err("--ready and --buckets are required".into());
    };
    let nofile = raise_nofile();
    install_signals();
    let addrs = o.addresses()?;
    let (port, listeners) = bind_all(&addrs, o.port, o.backlog)?;
    let mut ep = Epoll::new()?;
    for (i, &fd) in listeners.iter().enumerate() {
        ep.add(fd, libc::EPOLLIN as u32, LISTENER | i as u64)
            .map_err(|e| format!("epoll_ctl: {e}"))?;
    }
    let tmp = format!("{ready}.tmp");
    std::fs::write(&tmp, format!("{port}\n"))
        .and_then(|()| std::fs::rename(&tmp, ready))
        .map_err(|e| format!("{ready}: {e}"))?;
    eprintln!(
        "bench-sink: {} listeners {}..{} port {port}, RLIMIT_NOFILE {nofile}",
        addrs.len(),
        addrs[0],
        addrs[addrs.len() - 1]
    );

    let mut buckets = Buckets::new(unix_ms());
    let mut st = SinkStats::default();
    let mut buf = [0u8; 4096];
    let conn_events = (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
    while !STOP.load(Ordering::Relaxed) {
        let ready_events = ep.wait(200)?;
        buckets.touch(unix_ms());
        for (events, data) in ready_events {
            if data & LISTENER != 0 {
                let lfd = listeners[(data & !LISTENER) as usize];
                loop {
                    // SAFETY: a listening socket; peer address not wanted.
                    let fd = unsafe {
                        libc::accept4(
                            lfd,
                            ptr::null_mut(),
                            ptr::null_mut(),
                            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                        )
                    };
                    if fd < 0 {
                        match errno() {
                            libc::EAGAIN => break,
                            libc::EINTR | libc::ECONNABORTED => continue,
                            e => {
                                // EMFILE and the like: counted; the
                                // level-triggered listener retries.
                                st.accept_errors += 1;
                                st.last_accept_error = e;
                                break;
                            }
                        }
                    }
                    buckets.add(unix_ms());
                    st.accepted += 1;
                    st.open += 1;
                    st.peak_open = st.peak_open.max(st.open);
                    if ep.add(fd, conn_events, fd as u64).is_err() {
                        st.closed_error += 1;
                        st.open -= 1;
                        // SAFETY: our own fd.
                        unsafe { libc::close(fd) };
                    }
                }
                continue;
            }
            let fd = data as i32;
            let mut close = events & (libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0;
            let mut eof = false;
            if !close {
                // Drain: clients send nothing, but read whatever comes.
                loop {
                    // SAFETY: live fd and buffer.
                    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
                    if n > 0 {
                        continue;
                    }
                    if n == 0 {
                        (close, eof) = (true, true);
                    } else {
                        match errno() {
                            libc::EINTR => continue,
                            libc::EAGAIN => {}
                            _ => close = true,
                        }
                    }
                    break;
                }
            }
            if close {
                if eof {
                    st.closed_eof += 1;
                } else {
                    st.closed_error += 1;
                }
                st.open -= 1;
                // SAFETY: our own accepted fd; closing removes it from epoll.
                unsafe { libc::close(fd) };
            }
        }
    }

    let mut out = String::with_capacity(buckets.counts.len() * 20 + 256);
    out.push_str(&format!(
        "# accepted {} closed_eof {} closed_error {} open {} peak_open {} accept_errors {} \
         last_accept_errno {}\n",
        st.accepted,
        st.closed_eof,
        st.closed_error,
        st.open,
        st.peak_open,
        st.accept_errors,
        st.last_accept_error
    ));
    for (i, n) in buckets.counts.iter().enumerate() {
        out.push_str(&format!("{} {n}\n", (buckets.first + i as u64) * BUCKET_MS));
    }
    std::fs::write(bucket_file, out).map_err(|e| format!("{bucket_file}: {e}"))
}

// --- connect-loop --------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Free,
    Connecting,
    Settling,
}

#[derive(Clone, Copy)]
struct Slot {
    phase: Phase,
    /// Bumped on every new connection on this fd: stale queue entries
    /// carry an older generation.
    generation: u32,
    /// Whether the round started inside the measured window.
    measured: bool,
}

/// How a round ended.
#[derive(Default)]
struct Rounds {
    ok: u64,
    refused: u64,
    reset: u64,
    closed: u64,
    timeout: u64,
    other: u64,
    local: u64,
}

impl Rounds {
    fn total(&self) -> u64 {
        self.ok + self.refused + self.reset + self.closed + self.timeout + self.other + self.local
    }

    fn fail(&mut self, err: i32) {
        match err {
            libc::ECONNREFUSED => self.refused += 1,
            libc::ECONNRESET | libc::EPIPE => self.reset += 1,
            libc::ETIMEDOUT => self.timeout += 1,
            _ => self.other += 1,
        }
    }
}

enum Peek {
    Data,
    WouldBlock,
    Closed,
    Failed(i32),
}

fn peek(fd: i32) -> Peek {
    let mut b = 0u8;
    loop {
        // SAFETY: live fd, one-byte buffer.
        let n = unsafe { libc::recv(fd, ptr::addr_of_mut!(b).cast(), 1, libc::MSG_PEEK) };
        if n > 0 {
            return Peek::Data;
        }
        if n == 0 {
            return Peek::Closed;
        }
        match errno() {
            libc::EAGAIN => return Peek::WouldBlock,
            libc::EINTR => continue,
            e => return Peek::Failed(e),
        }
    }
}

fn so_error(fd: i32) -> i32 {
    let mut err: i32 = 0;
    let mut len = size_of::<i32>() as libc::socklen_t;
    // SAFETY: live fd, int buffer.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            ptr::addr_of_mut!(err).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        errno()
    } else {
        err
    }
}

/// Close with RST: `SO_LINGER` on with a zero timeout.
fn rst_close(fd: i32) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: our own fd; closing removes it from epoll.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            ptr::addr_of!(l).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        );
        libc::close(fd);
    }
}

struct Loop {
    ep: Epoll,
    slots: Vec<Slot>,
    /// (fd, generation, deadline ns): connect timeouts and settle windows,
    /// each with one fixed length, so both are FIFO.
    connecting: VecDeque<(i32, u32, u64)>,
    settling: VecDeque<(i32, u32, u64)>,
    settle_ns: u64,
    timeout_ns: u64,
    /// Rounds started inside the measured window, by outcome.
    measured: Rounds,
    /// All rounds, by outcome.
    all: Rounds,
    open: u64,
    peak_open: u64,
}

impl Loop {
    fn slot(&mut self, fd: i32) -> &mut Slot {
        let i = fd as usize;
        if i >= self.slots.len() {
            self.slots.resize(
                (i + 1).max(self.slots.len() * 2),
                Slot {
                    phase: Phase::Free,
                    generation: 0,
                    measured: false,
                },
            );
        }
        &mut self.slots[i]
    }

    /// End a round: close with RST and count the outcome.
    fn finish(&mut self, fd: i32, outcome: impl Fn(&mut Rounds)) {
        let s = self.slot(fd);
        let measured = s.measured;
        s.phase = Phase::Free;
        rst_close(fd);
        self.open -= 1;
        outcome(&mut self.all);
        if measured {
            outcome(&mut self.measured);
        }
    }

    fn start(&mut self, sa: &libc::sockaddr_in, now: u64, measured: bool) {
        // SAFETY: plain syscall.
        let fd = unsafe {
            libc::socket(
                libc::AF_INET,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            self.all.local += 1;
            if measured {
                self.measured.local += 1;
            }
            return;
        }
        self.open += 1;
        self.peak_open = self.peak_open.max(self.open);
        let s = self.slot(fd);
        s.generation = s.generation.wrapping_add(1);
        s.measured = measured;
        s.phase = Phase::Connecting;
        let generation = s.generation;
        // SAFETY: valid sockaddr of the stated length.
        let rc = unsafe {
            libc::connect(
                fd,
                ptr::addr_of!(*sa).cast(),
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        let err = if rc < 0 { errno() } else { 0 };
        if rc < 0 && err != libc::EINPROGRESS {
            return match err {
                libc::EADDRNOTAVAIL | libc::EMFILE | libc::ENFILE | libc::ENOBUFS => {
                    self.finish(fd, |r| r.local += 1)
                }
                _ => self.finish(fd, |r| r.fail(err)),
            };
        }
        let events = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
        if self.ep.add(fd, events, fd as u64).is_err() {
            return self.finish(fd, |r| r.local += 1);
        }
        if rc == 0 {
            self.connected(fd, generation, now);
        } else {
            self.connecting
                .push_back((fd, generation, now + self.timeout_ns));
        }
    }

    fn connected(&mut self, fd: i32, generation: u32, now: u64) {
        match peek(fd) {
            Peek::Data => self.finish(fd, |r| r.ok += 1),
            Peek::Closed => self.finish(fd, |r| r.closed += 1),
            Peek::Failed(e) => self.finish(fd, |r| r.fail(e)),
            Peek::WouldBlock if self.settle_ns == 0 => self.finish(fd, |r| r.ok += 1),
            Peek::WouldBlock => {
                self.slot(fd).phase = Phase::Settling;
                self.settling
                    .push_back((fd, generation, now + self.settle_ns));
            }
        }
    }

    fn event(&mut self, fd: i32, now: u64) {
        let s = *self.slot(fd);
        match s.phase {
            Phase::Free => {}
            Phase::Connecting => {
                let err = so_error(fd);
                if err != 0 {
                    return self.finish(fd, |r| r.fail(err));
                }
                self.connected(fd, s.generation, now);
            }
            Phase::Settling => match peek(fd) {
                Peek::Data => self.finish(fd, |r| r.ok += 1),
                Peek::WouldBlock => {}
                Peek::Closed => self.finish(fd, |r| r.closed += 1),
                Peek::Failed(e) => self.finish(fd, |r| r.fail(e)),
            },
        }
    }

    /// Expire connect timeouts (failure) and settle windows (success).
    fn expire(&mut self, now: u64) {
        while let Some(&(fd, generation, deadline)) = self.connecting.front() {
            if deadline > now {
                break;
            }
            self.connecting.pop_front();
            let s = *self.slot(fd);
            if s.generation == generation && s.phase == Phase::Connecting {
                self.finish(fd, |r| r.timeout += 1);
            }
        }
        while let Some(&(fd, generation, deadline)) = self.settling.front() {
            if deadline > now {
                break;
            }
            self.settling.pop_front();
            let s = *self.slot(fd);
            if s.generation == generation && s.phase == Phase::Settling {
                self.finish(fd, |r| r.ok += 1);
            }
        }
    }

    fn next_deadline(&self) -> Option<u64> {
        let a = self.connecting.front().map(|e| e.2);
        let b = self.settling.front().map(|e| e.2);
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

fn connect_loop(o: &Opts) -> Result<(), String> {
    if o.port == 0 {
        return Err("--port is required".into());
    }
    let nofile = raise_nofile();
    install_signals();
    let targets: Vec<libc::sockaddr_in> = o
        .addresses()?
        .into_iter()
        .map(|ip| sockaddr(ip, o.port))
        .collect();
    let mut lp = Loop {
        ep: Epoll::new()?,
        slots: Vec::new(),
        connecting: VecDeque::new(),
        settling: VecDeque::new(),
        settle_ns: o.settle_ms * 1_000_000,
        timeout_ns: o.timeout_ms * 1_000_000,
        measured: Rounds::default(),
        all: Rounds::default(),
        open: 0,
        peak_open: 0,
    };

    let start = mono_ns();
    let window_start = start + (o.warmup * 1e9) as u64;
    let window_end = window_start + (o.seconds * 1e9) as u64;
    let (mut started, mut next_target) = (0u64, 0usize);
    let mut in_window = false;
    let (mut cpu0, mut unix0, mut started0) = (0, 0, 0);
    let (mut cpu1, mut unix1, mut started1) = (0, 0, 0);
    let mut done = false;
    let mut finished_at_end = 0;

    loop {
        let now = mono_ns();
        if !in_window && !done && now >= window_start {
            in_window = true;
            (cpu0, unix0, started0) = (cpu_us(), unix_ms(), started);
        }
        if in_window && now >= window_end {
            in_window = false;
            done = true;
            (cpu1, unix1, started1) = (cpu_us(), unix_ms(), started);
            finished_at_end = lp.measured.total();
        }
        if STOP.load(Ordering::Relaxed) && !done {
            return Err("interrupted".into());
        }
        if done && lp.open == 0 {
            break;
        }
        lp.expire(now);
        if !done {
            // Every connect due by now, evenly spread at `rate` a second.
            let due = (u128::from(now - start) * u128::from(o.rate) / 1_000_000_000) as u64;
            while started < due {
                let sa = targets[next_target];
                next_target = (next_target + 1) % targets.len();
                lp.start(&sa, now, in_window);
                started += 1;
            }
        }
        let next_connect = (!done)
            .then(|| start + (started + 1) * 1_000_000_000 / o.rate)
            .map(|t| t.min(if in_window { window_end } else { window_start }));
        let wake = match (next_connect, lp.next_deadline()) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(now + 100_000_000),
        };
        let timeout_ms = wake.saturating_sub(now).div_ceil(1_000_000).min(1000) as i32;
        for (_, data) in lp.ep.wait(timeout_ms)? {
            lp.event(data as i32, mono_ns());
        }
    }

    let m = &lp.measured;
    let seconds = (window_end - window_start) as f64 / 1e9;
    let cpu = cpu1 - cpu0;
    // Rounds started in the window (all finished by now): CPU per round
    // uses the rounds started, like the checks count of the module.
    let rounds = m.total();
    println!("rlimit_nofile={nofile}");
    println!("rate={}", o.rate);
    println!("settle_ms={}", o.settle_ms);
    println!("window_start_unix_ms={unix0}");
    println!("window_end_unix_ms={unix1}");
    println!("window_seconds={seconds:.3}");
    println!("started={}", started1 - started0);
    println!("finished_in_window={finished_at_end}");
    println!("rounds={rounds}");
    println!("ok={}", m.ok);
    println!(
        "failed={} (refused {} reset {} closed {} timeout {} other {})",
        m.refused + m.reset + m.closed + m.timeout + m.other,
        m.refused,
        m.reset,
        m.closed,
        m.timeout,
        m.other
    );
    println!("local_errors={}", m.local);
    println!("peak_open={}", lp.peak_open);
    println!("cpu_us={cpu}");
    println!(
        "cpu_per_round_us={:.3}",
        if rounds > 0 {
            cpu as f64 / rounds as f64
        } else {
            0.0
        }
    );
    println!("all_rounds={}", lp.all.total());
    Ok(())
}
