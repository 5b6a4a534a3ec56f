//! Helpers for the fault-injection tests (`tests/faults.rs`) and the
//! detection-latency benchmark (`scripts/bench-detection`).
//!
//! Every fault is injected inside a network namespace the test creates for
//! itself: [`in_netns`] runs the test body on a thread that has called
//! `unshare(CLONE_NEWNET)`. Everything that thread starts lives in that
//! namespace too: the threads it spawns (backends), the processes it
//! spawns (nginx, `iptables`, `sysctl`, `wrk`, child backends) and the
//! sockets it opens. The namespace has only `lo`; no traffic can leave it,
//! and no firewall rule or sysctl touches the host. The kernel frees an
//! unnamed namespace when its last thread, process and socket are gone,
//! so there is nothing to delete (even when a test panics).

#![allow(dead_code)]

use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use healthcheck_t::Status;

pub mod bench;

// ---------------------------------------------------------------------------
// network namespace

/// Run `f` on a new thread inside a new network namespace with `lo` up
/// (after [`ensure_tools`]), and return its result (a panic is passed
/// on). The thread has the name of the calling thread, so nginx prefixes
/// are named after the test.
pub fn in_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    ensure_tools();
    let name = thread::current().name().unwrap_or("faults").to_string();
    let handle = thread::Builder::new()
        .name(name)
        .spawn(move || {
            enter_new_netns();
            f()
        })
        .expect("spawn the namespace thread");
    match handle.join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

fn enter_new_netns() {
    // SAFETY: unshare(2) with CLONE_NEWNET moves only the calling thread
    // into a new network namespace; it has no memory-safety preconditions.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        panic!(
            "cannot create a network namespace: unshare(CLONE_NEWNET) failed: {}. \
             The fault-injection tests need root (CAP_SYS_ADMIN) to create network \
             namespaces; they inject faults with iptables there and never touch the host.",
            io::Error::last_os_error()
        );
    }
    run("ip", &["link", "set", "lo", "up"]);
}

/// Run a command (in the caller's namespace); panic with its output unless
/// it succeeds.
pub fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {} failed ({}): {}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Make sure `iptables` (and `ip`) exist: install the Debian packages if
/// they are missing, as scripts/test does for its other test tools.
pub fn ensure_tools() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let mut need = Vec::new();
        if !have("iptables") {
            need.push("iptables");
        }
        if !have("ip") {
            need.push("iproute2");
        }
        if need.is_empty() {
            return;
        }
        eprintln!("faults: installing {}", need.join(" "));
        let ok = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null && \
                 DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 \
                 install -y -qq --no-install-recommends {} >/dev/null",
                need.join(" ")
            ))
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok && have("iptables") && have("ip"),
            "the fault-injection tests need iptables and iproute2 \
             (apt-get install iptables iproute2) and installing them failed"
        );
    });
}

/// `iptables -w <args>` in the caller's namespace.
pub fn iptables(args: &str) {
    let mut v = vec!["-w"];
    v.extend(args.split_whitespace());
    run("iptables", &v);
}

/// `sysctl -w name=value` in the caller's namespace (network sysctls are
/// per namespace).
pub fn sysctl(name: &str, value: &str) {
    run("sysctl", &["-q", "-w", &format!("{name}={value}")]);
}

// ---------------------------------------------------------------------------
// a sink: one listener, many peer addresses

/// A listener on `0.0.0.0:<port>` (inside a test namespace) that accepts
/// every connection and holds it, reading and discarding what arrives,
/// until the peer closes it. With it, peers `127.a.b.c:<port>` for any
/// number of addresses are healthy TCP servers (a server that closes at
/// once is failed by the check's settle window). One thread, poll(2).
pub struct Sink {
    port: u16,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Sink {
    /// Listen on `0.0.0.0:0` with a large backlog.
    pub fn start() -> Sink {
        let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).expect("sink: bind");
        // SAFETY: listen(2) again on a listening socket only changes its backlog.
        unsafe { libc::listen(listener.as_raw_fd(), 4096) };
        listener.set_nonblocking(true).expect("sink: nonblocking");
        let port = listener.local_addr().expect("sink: local_addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (s, a) = (Arc::clone(&stop), Arc::clone(&accepted));
        let thread = thread::Builder::new()
            .name(format!("sink-{port}"))
            .spawn(move || sink_loop(&listener, &s, &a))
            .expect("sink: spawn");
        Sink {
            port,
            stop,
            accepted,
            thread: Some(thread),
        }
    }

    /// The port every peer address uses.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

fn sink_loop(listener: &TcpListener, stop: &AtomicBool, accepted: &AtomicUsize) {
    let mut held: Vec<TcpStream> = Vec::new();
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::SeqCst) {
        let mut fds: Vec<libc::pollfd> = std::iter::once(listener.as_raw_fd())
            .chain(held.iter().map(|s| s.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN | libc::POLLRDHUP,
                revents: 0,
            })
            .collect();
        // SAFETY: a live, correctly sized pollfd array.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 100) };
        if n <= 0 {
            continue;
        }
        // Peers that sent something or went away: read; drop the closed.
        let mut gone = Vec::new();
        for (i, p) in fds[1..].iter().enumerate() {
            if p.revents == 0 {
                continue;
            }
            match (&held[i]).read(&mut buf) {
                Ok(0) => gone.push(i),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => gone.push(i),
            }
        }
        for i in gone.into_iter().rev() {
            held.swap_remove(i);
        }
        if fds[0].revents != 0 {
            while let Ok((s, _)) = listener.accept() {
                if s.set_nonblocking(true).is_ok() {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    held.push(s);
                }
            }
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------------------
// a backend in its own process

/// A TCP backend running as a separate process (t/'s `child-backend`
/// binary, src/bin/child-backend.rs), so it can be SIGSTOPped or
/// SIGKILLed. It listens on `127.0.0.1:<port>` with the given backlog and
/// answers any HTTP request `200` with the body `child`; connections that
/// send nothing (checks) are held until the peer closes them or 5 s pass.
pub struct ChildBackend {
    child: Child,
    _stdout: BufReader<ChildStdout>,
    port: u16,
}

impl ChildBackend {
    /// Start one on `port` (0: any) with listen `backlog`.
    pub fn spawn(port: u16, backlog: i32) -> ChildBackend {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_child-backend"));
        cmd.args([port.to_string(), backlog.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        // SAFETY: the closure only calls prctl(2), which is async-signal-safe:
        // the child dies with the thread that started it.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("spawn child backend");
        let mut stdout = BufReader::new(child.stdout.take().expect("child stdout"));
        let mut line = String::new();
        let n = stdout.read_line(&mut line).expect("read child stdout");
        if n == 0 {
            let status = child.wait();
            panic!("child backend exited before listening: {status:?}");
        }
        let port = line.trim().parse().expect("child port");
        ChildBackend {
            child,
            _stdout: stdout,
            port,
        }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send `sig`.
    pub fn signal(&self, sig: libc::c_int) {
        healthcheck_t::process::signal(self.pid(), sig)
            .unwrap_or_else(|e| panic!("kill({}, {sig}): {e}", self.pid()));
    }

    /// SIGKILL and reap; returns once its sockets are closed.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildBackend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// process accounting

/// CPU time (user + system) `pid` has used so far.
pub fn cpu_time(pid: u32) -> Duration {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = text.rfind(')').map_or("", |i| &text[i + 1..]);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i)?.parse::<u64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

/// Process state letter of `pid` (`T` when stopped).
pub fn state(pid: u32) -> Option<char> {
    healthcheck_t::process::stat(pid).map(|s| s.state)
}

// ---------------------------------------------------------------------------
// status over a unix socket

/// A unique path for a unix socket.
pub fn unix_socket_path(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "hc-faults-{tag}-{}-{}.sock",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ))
}

/// The status document from `location /status` on the unix socket `path`
/// (no ephemeral port needed: works while the namespace has none left).
pub fn unix_status(path: &Path) -> Result<Status, String> {
    let mut s = UnixStream::connect(path).map_err(|e| format!("connect {path:?}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET /status?format=json HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| format!("read: {e}"))?;
    let r = healthcheck_t::client::parse_response(&raw).map_err(|e| e.to_string())?;
    if r.status != 200 {
        return Err(format!("status {}: {:?}", r.status, r.text()));
    }
    serde_json::from_slice(&r.body)
        .map(Status)
        .map_err(|e| format!("json: {e}"))
}

// ---------------------------------------------------------------------------
// status rows

/// Every peer row of the http section, by name.
pub fn rows(s: &Status) -> Vec<(String, serde_json::Value)> {
    s.peers(healthcheck_t::Kind::Http)
        .iter()
        .map(|r| (r["name"].as_str().unwrap_or("").to_string(), r.clone()))
        .collect()
}

/// Names of peers whose status is `down`, among `names`.
pub fn down_among(s: &Status, upstream: &str, names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| !s.is_up(healthcheck_t::Kind::Http, upstream, n))
        .cloned()
        .collect()
}

/// Sum of an integer field over the named peers.
pub fn sum_field(s: &Status, upstream: &str, names: &[String], field: &str) -> i64 {
    names
        .iter()
        .filter_map(|n| s.get_int(healthcheck_t::Kind::Http, upstream, n, field))
        .sum()
}

/// Guard that runs a closure on drop (cleanup that must happen on panic).
pub struct OnDrop<F: FnMut()>(pub F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// Lines of `text` per whole second of their nginx timestamp
/// (`2024/01/02 03:04:05 [...`): the largest count in one second.
pub fn max_per_second(lines: &[String]) -> usize {
    let mut counts = std::collections::BTreeMap::new();
    for l in lines {
        *counts
            .entry(l.get(..19).unwrap_or("").to_string())
            .or_insert(0) += 1;
    }
    counts.values().copied().max().unwrap_or(0)
}

/// Shared, growable log of events for threads.
pub type Shared<T> = Arc<Mutex<T>>;

/// Elapsed milliseconds between two instants (0 if `b` is earlier).
pub fn ms(a: Instant, b: Instant) -> u64 {
    b.saturating_duration_since(a).as_millis() as u64
}
