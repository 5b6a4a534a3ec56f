//! Peers on their own loopback addresses, for tests that must fail the
//! check of ONE peer while its traffic port keeps serving.
//!
//! The harness's [`crate::Backend`] listens on `127.0.0.1` only.
//! `check port=N` is a parameter of the whole upstream, so with every peer
//! on `127.0.0.1` all their probes would land on the same `127.0.0.1:N`.
//! Here the peers live on distinct loopback addresses of a random
//! `127.a.b.0/24` ([`Net`]): peer `k` serves traffic on `127.a.b.k:<its
//! port>` ([`Server`]) and is probed on `127.a.b.k:N` ([`Switch`]), which
//! the test flips between accepting and refusing ([`Peers`] sets up `n`
//! of them). Linux routes all of `127.0.0.0/8` to `lo`, and a random `/24`
//! per test keeps parallel tests off each other's ports. [`UnixServer`]
//! is a unix-socket peer.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::random_u64;
use crate::wait::try_wait_for;

/// How often the listener threads here look for new connections.
const ACCEPT_STEP: Duration = Duration::from_millis(2);
/// Budget of one served request.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// A random loopback `/24`, `127.a.b.0` with `a >= 1` (clients connecting
/// to it get the source address `127.0.0.1`, so nothing else binds here).
#[derive(Clone, Copy, Debug)]
pub struct Net {
    a: u8,
    b: u8,
}

impl Net {
    /// A random one.
    pub fn random() -> Net {
        let r = random_u64();
        Net {
            a: 1 + (r % 254) as u8,
            b: (r >> 8) as u8,
        }
    }

    /// `127.a.b.host`.
    pub fn ip(&self, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(127, self.a, self.b, host)
    }
}

/// What a [`Server`] does with an accepted connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Answer one HTTP request `200` with the server's name as the body.
    Http,
    /// Read the first bytes, answer the server's name as text, close.
    Raw,
    /// Keep the connection open, silent, until the peer closes it (a
    /// healthy server as a TCP check sees it).
    Hold,
}

/// Counters that survive a [`Switch`] re-binding its listener.
#[derive(Debug, Default)]
pub struct Stats {
    accepted: AtomicUsize,
    requests: AtomicUsize,
}

impl Stats {
    /// Connections accepted.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Requests answered ([`Role::Http`], [`Role::Raw`]).
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Both back to 0.
    pub fn reset(&self) {
        self.accepted.store(0, Ordering::SeqCst);
        self.requests.store(0, Ordering::SeqCst);
    }
}

/// A TCP server on any address (the harness's `Backend` is `127.0.0.1`
/// only). One accept thread; [`Role::Http`]/[`Role::Raw`] connections are
/// served on their own threads. Dropping it closes the listener and every
/// held connection.
pub struct Server {
    addr: SocketAddr,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Server({})", self.name())
    }
}

impl Server {
    /// Listen on `addr` (port 0: kernel's choice).
    pub fn bind(addr: SocketAddr, role: Role) -> io::Result<Server> {
        Server::bind_with(addr, role, Arc::new(Stats::default()))
    }

    fn bind_with(addr: SocketAddr, role: Role, stats: Arc<Stats>) -> io::Result<Server> {
        // std sets SO_REUSEADDR, so a Switch can re-bind the same port.
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let name = name_of(addr);
        let thread = {
            let (stats, stop) = (Arc::clone(&stats), Arc::clone(&stop));
            thread::Builder::new()
                .name(format!("server-{name}"))
                .spawn(move || accept_loop(listener, role, name, stats, stop))?
        };
        Ok(Server {
            addr,
            stats,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address as nginx writes it in `server` lines and the status
    /// page (`127.1.2.3:4567`, `[::1]:4567`); also what it answers.
    pub fn name(&self) -> String {
        name_of(self.addr)
    }

    /// Its counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn name_of(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("{}:{}", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
    }
}

fn accept_loop(
    listener: TcpListener,
    role: Role,
    name: String,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
) {
    let mut held: Vec<TcpStream> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((s, _)) => {
                stats.accepted.fetch_add(1, Ordering::SeqCst);
                match role {
                    Role::Hold => {
                        let _ = s.set_nonblocking(true);
                        held.push(s);
                    }
                    Role::Http | Role::Raw => {
                        let (stats, name) = (Arc::clone(&stats), name.clone());
                        let _ =
                            thread::Builder::new()
                                .name("server-conn".into())
                                .spawn(move || {
                                    let _ = serve(s, role, &name, &stats);
                                });
                    }
                }
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => {}
        }
        held.retain(still_open);
        thread::sleep(ACCEPT_STEP);
    }
}

/// Read and discard what a held connection received; false once the peer
/// closed or reset it.
fn still_open(s: &TcpStream) -> bool {
    let mut buf = [0u8; 512];
    loop {
        match (&*s).read(&mut buf) {
            Ok(0) => return false,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
}

fn serve(mut s: TcpStream, role: Role, name: &str, stats: &Stats) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if role == Role::Raw || buf.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    stats.requests.fetch_add(1, Ordering::SeqCst);
    let reply = match role {
        Role::Http => format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{name}",
            name.len()
        ),
        _ => name.to_string(),
    };
    s.write_all(reply.as_bytes())?;
    s.shutdown(Shutdown::Write)?;
    // Wait for the peer's close so ours never turns into a RST.
    let _ = s.read(&mut chunk);
    Ok(())
}

/// A check listener at a fixed address that the test turns on (accepts and
/// holds connections: the check passes) and off (nothing listens: the
/// check sees "connection refused"). Counters persist across switches.
pub struct Switch {
    addr: SocketAddr,
    stats: Arc<Stats>,
    server: Mutex<Option<Server>>,
}

impl Switch {
    /// Take `addr` (its port must be explicit or 0) and start serving.
    pub fn bind(addr: SocketAddr) -> io::Result<Switch> {
        let stats = Arc::new(Stats::default());
        let server = Server::bind_with(addr, Role::Hold, Arc::clone(&stats))?;
        Ok(Switch {
            addr: server.addr(),
            stats,
            server: Mutex::new(Some(server)),
        })
    }

    /// The address it listens on (when serving).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address as nginx shows it (`127.1.2.3:4567`, `[::1]:4567`).
    pub fn name(&self) -> String {
        name_of(self.addr)
    }

    /// Accept again (re-binds the same address; returns once listening).
    pub fn serve(&self) {
        let mut server = self.server.lock().unwrap();
        if server.is_some() {
            return;
        }
        let bound = try_wait_for(Duration::from_secs(2), || {
            Server::bind_with(self.addr, Role::Hold, Arc::clone(&self.stats)).ok()
        });
        *server = Some(bound.unwrap_or_else(|| panic!("re-bind check listener {}", self.addr)));
    }

    /// Stop listening; returns once new connections are refused.
    pub fn refuse(&self) {
        self.server.lock().unwrap().take();
    }

    /// Its counters (across switches).
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
}

/// `n` peers on one random [`Net`]: peer `i` serves traffic on
/// `127.a.b.(i+1):<port>` and is checked on `127.a.b.(i+1):check_port`.
pub struct Peers {
    /// Peer `i`'s traffic listener.
    pub traffic: Vec<Server>,
    /// Peer `i`'s check listener.
    pub checks: Vec<Switch>,
    /// The port of every check listener (`check port=`).
    pub check_port: u16,
}

impl Peers {
    /// `n` peers serving traffic as `role`, their checks passing.
    pub fn start(n: usize, role: Role) -> Peers {
        for _ in 0..20 {
            if let Ok(p) = Peers::try_start(n, role, Net::random()) {
                return p;
            }
        }
        panic!("could not bind {n} peers on a random 127.a.b.0/24");
    }

    fn try_start(n: usize, role: Role, net: Net) -> io::Result<Peers> {
        let host = |i: usize| net.ip(i as u8 + 1);
        let traffic = (0..n)
            .map(|i| Server::bind(SocketAddr::from((host(i), 0)), role))
            .collect::<io::Result<Vec<_>>>()?;
        let first = Switch::bind(SocketAddr::from((host(0), 0)))?;
        let check_port = first.addr().port();
        let mut checks = vec![first];
        for i in 1..n {
            checks.push(Switch::bind(SocketAddr::from((host(i), check_port)))?);
        }
        Ok(Peers {
            traffic,
            checks,
            check_port,
        })
    }

    /// How many.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.traffic.len()
    }

    /// Peer `i`'s address as written in nginx.conf and shown in status.
    pub fn name(&self, i: usize) -> String {
        self.traffic[i].name()
    }

    /// Every peer's [`Peers::name`].
    pub fn names(&self) -> Vec<String> {
        self.traffic.iter().map(Server::name).collect()
    }

    /// Which peer a reply (the serving peer's name) came from.
    pub fn index_of(&self, reply: &str) -> Option<usize> {
        self.traffic.iter().position(|s| s.name() == reply)
    }

    /// Traffic connections each peer accepted since the last reset.
    pub fn accepted(&self) -> Vec<usize> {
        self.traffic.iter().map(|s| s.stats().accepted()).collect()
    }

    /// Reset the traffic listeners' counters.
    pub fn reset_traffic(&self) {
        for s in &self.traffic {
            s.stats().reset();
        }
    }
}

/// A unix-socket listener at a temp path that accepts and holds
/// connections; [`UnixServer::stop`] closes the listener (the path stays,
/// so connects are refused) and [`UnixServer::start_again`] re-binds.
pub struct UnixServer {
    path: PathBuf,
    accepted: Arc<AtomicUsize>,
    running: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
}

impl UnixServer {
    /// Listen at a fresh temp path.
    pub fn start() -> UnixServer {
        let path = std::env::temp_dir().join(format!("hc-t-{:016x}.sock", random_u64()));
        let mut s = UnixServer {
            path,
            accepted: Arc::new(AtomicUsize::new(0)),
            running: None,
        };
        s.start_again();
        s
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `unix:/path`, as nginx names the peer.
    pub fn name(&self) -> String {
        format!("unix:{}", self.path.display())
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Close the listener (the path stays: connects are refused).
    pub fn stop(&mut self) {
        if let Some((stop, t)) = self.running.take() {
            stop.store(true, Ordering::SeqCst);
            let _ = t.join();
        }
    }

    /// Listen again at the same path.
    pub fn start_again(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(&self.path);
        let listener = UnixListener::bind(&self.path).expect("bind unix socket");
        // nginx workers run as an unprivileged user (`nobody` when the
        // tests run as root): they need write permission to connect.
        std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o777))
            .expect("chmod unix socket");
        listener.set_nonblocking(true).expect("set_nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, accepted) = (Arc::clone(&stop), Arc::clone(&self.accepted));
        let t = thread::spawn(move || {
            let mut held: Vec<UnixStream> = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                if let Ok((s, _)) = listener.accept() {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let _ = s.set_nonblocking(true);
                    held.push(s);
                    continue;
                }
                held.retain(|s| {
                    let mut b = [0u8; 64];
                    matches!((&*s).read(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
                });
                thread::sleep(ACCEPT_STEP);
            }
        });
        self.running = Some((stop, t));
    }
}

impl Drop for UnixServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(&self.path);
    }
}
