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
//! directory and backends bind port 0. Waiting is always polling under a
//! deadline (module [`wait`]), never a fixed sleep.

#![warn(missing_docs)]

pub mod backend;
pub mod client;
pub mod conf;
pub mod nginx;
pub mod page;
pub mod paths;
pub mod process;
pub mod ss;
pub mod status;
mod sys;
pub mod udp;
pub mod wait;

#[cfg(test)]
mod selftest;

use std::net::{Ipv4Addr, TcpListener, UdpSocket};

pub use backend::{Backend, Close, Mode};
pub use client::{
    connect, connect_from, http_get, http_request, stream_roundtrip, udp_roundtrip, Response,
};
pub use conf::{http_conf, upstream};
pub use nginx::{nginx_t, Builder, Nginx};
pub use process::fd_count;
pub use status::{poll_status_json, status_json, Kind, Status};
pub use sys::set_linger_zero;
pub use udp::{UdpBackend, UdpMode};
pub use wait::{assert_holds, try_wait_until, wait_for, wait_until};

/// A loopback port that is free for both TCP and UDP right now, for nginx's
/// own `listen` directives. The port is released before returning, so
/// another process could take it before nginx binds it; with the kernel
/// handing out ports from a range of ~28000 that race is negligible.
/// Backends do not need this: they bind port 0 themselves.
pub fn free_port() -> u16 {
    loop {
        let tcp = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
        let port = tcp.local_addr().expect("local_addr").port();
        if UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
}
