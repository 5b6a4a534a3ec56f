//! Integration-test harness for the nginx healthcheck module: a real nginx
//! built by `scripts/build`, real TCP/UDP backends on loopback, and helpers
//! to talk to them and wait for things.
//!
//! ```no_run
//! use std::time::Duration;
//! use healthcheck_t::*;
//!
//! let b = Backend::start();
//! let port = free_port();
//! let ng = Nginx::start(&format!(
//!     "http {{
//!         upstream u {{ server {}; check interval=100 rise=1 fall=1; }}
//!         server {{
//!             listen 127.0.0.1:{port};
//!             location / {{ proxy_pass http://u; }}
//!             location /status {{ healthcheck_status json; }}
//!         }}
//!     }}",
//!     b.addr()
//! ));
//! assert_eq!(http_get(port, "/").unwrap().text(), b.port().to_string());
//! b.set_mode(Mode::Refuse);
//! poll_status_json(port, Duration::from_secs(5), "peer down", |s| {
//!     s.is_down(Kind::Http, "u", &b.addr())
//! });
//! drop(ng); // stops nginx and fails on [alert]/[crit]/[emerg] in error.log
//! ```
//!
//! # Running
//!
//! `scripts/build` first, then `cargo test -p healthcheck-t`. The binaries
//! come from `build/nginx/` unless `NGINX_BIN` / `NGINX_MODULE` name
//! others (see [`paths`]). A failing test keeps its nginx prefix under
//! `$TMPDIR/nginx-hc-t/` and prints its path and the error log's tail;
//! `HC_T_KEEP=1` keeps the prefixes of passing tests too.
//!
//! The backends' own tests (`src/selftest.rs`) and the nginx lifecycle
//! tests without the module (`tests/harness.rs`) check the harness itself.
//!
//! # Parallel and timing
//!
//! Everything is safe to run in parallel: each nginx gets its own prefix
//! directory, backends bind port 0 and nginx listens on ports from
//! [`free_port`], which nothing else takes unasked and no two test
//! processes share. Waiting is always
//! polling under a deadline (module [`wait`]), never a fixed sleep.

#![warn(missing_docs)]

pub mod backend;
pub mod client;
pub mod conf;
pub mod daemons;
pub mod dns;
pub mod grpc;
pub mod h2server;
pub mod http_backend;
pub mod nginx;
pub mod page;
pub mod paths;
pub mod peers;
pub mod process;
pub mod scripted;
pub mod ss;
pub mod status;
mod sys;
pub mod tls;
pub mod udp;
pub mod wait;
pub mod workers;

#[cfg(test)]
mod selftest;

use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use backend::{Backend, Close, Mode};
pub use client::{
    connect, connect_from, http_get, http_request, stream_roundtrip, udp_roundtrip, Response,
};
pub use conf::{http_conf, upstream};
pub use nginx::{nginx_t, Builder, Nginx};
pub use process::{fd_count, resting_fds};
pub use status::{
    assert_within, first_seen, poll_status_json, status_json, Kind, Row, Seen, Status,
};
pub use sys::set_linger_zero;
pub use udp::{UdpBackend, UdpMode};
pub use wait::{assert_holds, try_wait_until, wait_for, wait_until};

/// Lowest port [`free_port`] hands out.
const FREE_PORT_LOW: u16 = 10_000;

/// The file whose byte N a test process locks while it may use port N
/// (see [`free_port`]); in `/tmp` whatever `TMPDIR` says, so that test
/// processes with different temporary directories see each other's.
/// Where it cannot be opened, ports are reserved within the process only.
pub const PORT_LOCKS: &str = "/tmp/nginx-hc-t/ports.lock";

/// Reserve `port` for this process against every other that uses
/// [`PORT_LOCKS`]; false if one of them holds it.
fn reserve_across_processes(port: u16) -> bool {
    static FILE: OnceLock<Option<File>> = OnceLock::new();
    let file = FILE.get_or_init(|| {
        let path = Path::new(PORT_LOCKS);
        let _ = fs::create_dir_all(path.parent()?);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o666)
            .open(path)
            .ok()?;
        // Whoever creates it lets every user's tests lock it (umask).
        let _ = file.set_permissions(fs::Permissions::from_mode(0o666));
        Some(file)
    });
    match file {
        Some(f) => sys::try_lock_byte(f, u64::from(port)).unwrap_or(true),
        None => true,
    }
}

/// The first port of the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`, where bind(0) and connect() take
/// ports from), 32768 if it cannot be read.
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// A loopback port that is free for both TCP and UDP right now, for nginx's
/// own `listen` directives. The port is released before returning and
/// nginx binds it later, so it is picked where nothing else takes ports
/// unasked: below the kernel's ephemeral range, so no bind(0) or connect()
/// on the host (a backend starting, a client or a check connecting) can
/// take it in between, never twice in one test process, and never one
/// that another test process (another test binary, another checkout's
/// tests) has handed out: each is reserved for the life of the process
/// with a lock on its byte of [`PORT_LOCKS`]. Backends do not need this:
/// they bind port 0 themselves.
pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let handed_out = handed_out.get_or_insert_with(HashSet::new);
    let high = ephemeral_low().max(FREE_PORT_LOW + 1000);
    let span = u64::from(high - FREE_PORT_LOW);
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_usize(handed_out.len());
    let start = h.finish() % span;
    for i in 0..span {
        let port = FREE_PORT_LOW + ((start + i) % span) as u16;
        if handed_out.contains(&port) || !reserve_across_processes(port) {
            continue;
        }
        let free = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
            && UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).is_ok();
        if free {
            handed_out.insert(port);
            return port;
        }
    }
    panic!("no free port in {FREE_PORT_LOW}..{high} that no test process has handed out");
}

/// `n` distinct ports from [`free_port`].
pub fn free_ports(n: usize) -> Vec<u16> {
    let mut ports: Vec<u16> = Vec::with_capacity(n);
    while ports.len() < n {
        let p = free_port();
        if !ports.contains(&p) {
            ports.push(p);
        }
    }
    ports
}

/// A uniformly random 64-bit value (std's randomly keyed SipHash over the
/// time, pid and a counter; good enough to pick addresses).
pub fn random_u64() -> u64 {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.write_usize(COUNTER.fetch_add(1, Ordering::SeqCst));
    h.finish()
}

/// The wall clock in unix milliseconds (as the status page's
/// `last_change`); 0 before 1970.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
