//! Kept TCP check connections: `reuse=`, `keepalive=` and
//! `check_keepalive_requests` (docs/directives.md, check and check_keepalive_requests; docs/design.md, How checks work).
//!
//! With `reuse` or `keepalive` the peer's owning worker keeps the
//! connection of a successful round; later rounds only peek it
//! (`MSG_PEEK`) and it is re-made when its age reaches the rehandshake
//! period or, with `reuse=on`, after `check_keepalive_requests` rounds.
//! These tests watch that from the outside: the backends count the
//! connections they accept and hold, `/proc` says which worker holds a
//! socket, `ss` shows the kernel keepalive timer, and `pidfd_getfd(2)`
//! reads the nginx side's socket options.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use healthcheck_t::ss::{established_inodes, established_lines, keepalive_timer};
use healthcheck_t::{
    assert_holds, free_port, http_conf, poll_status_json, status_json, try_wait_until, upstream,
    wait_for, wait_until, Backend, Close, Kind, Mode, Nginx,
};

/// Generous bound for anything that should take a few rounds.
const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// who holds which socket

/// (pid, fd) of every descriptor among `pids` that is a socket in `inodes`.
fn holders(pids: &[u32], inodes: &[u64]) -> Vec<(u32, i32)> {
    let mut out = Vec::new();
    for &pid in pids {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for e in dir.flatten() {
            let Ok(target) = std::fs::read_link(e.path()) else {
                continue;
            };
            let t = target.to_string_lossy();
            let Some(ino) = t
                .strip_prefix("socket:[")
                .and_then(|r| r.strip_suffix(']'))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            if inodes.contains(&ino) {
                if let Ok(fd) = e.file_name().to_string_lossy().parse() {
                    out.push((pid, fd));
                }
            }
        }
    }
    out
}

/// The workers (among `pids`) holding an established connection to `port`.
fn check_conns(pids: &[u32], port: u16) -> Vec<(u32, i32)> {
    holders(pids, &established_inodes(port))
}

/// Socket options of nginx's side of a kept check connection, read
/// through a duplicate of the worker's descriptor (`pidfd_getfd(2)`; the
/// tests run as the parent of nginx, so ptrace access is granted).
#[derive(Debug, PartialEq, Eq)]
struct KeepaliveOpts {
    on: bool,
    idle: i32,
    intvl: i32,
    cnt: i32,
}

fn keepalive_opts(pid: u32, fd: i32) -> io::Result<KeepaliveOpts> {
    // SAFETY: plain syscalls; every returned descriptor is owned at once.
    let dup = unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0);
        if pidfd < 0 {
            return Err(io::Error::last_os_error());
        }
        let pidfd = OwnedFd::from_raw_fd(pidfd as i32);
        let dup = libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0);
        if dup < 0 {
            return Err(io::Error::last_os_error());
        }
        OwnedFd::from_raw_fd(dup as i32)
    };
    let get = |level: i32, name: i32| -> io::Result<i32> {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a live descriptor and an int-sized buffer.
        let rc = unsafe {
            libc::getsockopt(
                dup.as_raw_fd(),
                level,
                name,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(v)
        }
    };
    Ok(KeepaliveOpts {
        on: get(libc::SOL_SOCKET, libc::SO_KEEPALIVE)? != 0,
        idle: get(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE)?,
        intvl: get(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL)?,
        cnt: get(libc::IPPROTO_TCP, libc::TCP_KEEPCNT)?,
    })
}

// ---------------------------------------------------------------------------
// a TCP server that talks first

/// A TCP server that writes `banner` right after accepting, optionally
/// `idle_bytes` more (in 1 KB pieces) `idle_after` later, then holds the
/// connection until the peer closes it. Counts what happened.
struct Talker {
    port: u16,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
    open: Arc<AtomicUsize>,
    /// Connections the peer (nginx) closed or reset.
    closed_by_peer: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Talker {
    fn start(banner: &[u8], idle: Option<(Duration, usize)>) -> Talker {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind talker");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let closed_by_peer = Arc::new(AtomicUsize::new(0));
        let banner = banner.to_vec();
        let (st, acc, op, cl) = (
            Arc::clone(&stop),
            Arc::clone(&accepted),
            Arc::clone(&open),
            Arc::clone(&closed_by_peer),
        );
        let thread = thread::spawn(move || {
            let mut conns = Vec::new();
            while !st.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        acc.fetch_add(1, Ordering::SeqCst);
                        op.fetch_add(1, Ordering::SeqCst);
                        let (st, op, cl, banner) = (
                            Arc::clone(&st),
                            Arc::clone(&op),
                            Arc::clone(&cl),
                            banner.clone(),
                        );
                        conns.push(thread::spawn(move || {
                            if talk(stream, &banner, idle, &st) {
                                cl.fetch_add(1, Ordering::SeqCst);
                            }
                            op.fetch_sub(1, Ordering::SeqCst);
                        }));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(2)),
                }
            }
            for c in conns {
                let _ = c.join();
            }
        });
        Talker {
            port,
            stop,
            accepted,
            open,
            closed_by_peer,
            thread: Some(thread),
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
    fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
    fn closed_by_peer(&self) -> usize {
        self.closed_by_peer.load(Ordering::SeqCst)
    }
}

/// Serve one connection; true when the peer closed or reset it.
fn talk(
    mut s: TcpStream,
    banner: &[u8],
    idle: Option<(Duration, usize)>,
    stop: &AtomicBool,
) -> bool {
    let _ = s.set_read_timeout(Some(Duration::from_millis(20)));
    if !banner.is_empty() && s.write_all(banner).is_err() {
        return true;
    }
    let start = Instant::now();
    let mut pending = idle;
    let mut buf = [0u8; 1024];
    while !stop.load(Ordering::SeqCst) {
        if let Some((after, left)) = pending {
            if start.elapsed() >= after {
                let n = left.min(1024);
                if s.write_all(&vec![b'x'; n]).is_err() {
                    return true;
                }
                pending = (left > n).then_some((after, left - n));
            }
        }
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

impl Drop for Talker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------------------
// tests

/// Kept connections stay open across rounds: the backend accepted exactly
/// one connection, still holds it, while the checks counter grows.
#[test]
fn kept_connection_stays_open_across_rounds() {
    let (a, b, c) = (Backend::start(), Backend::start(), Backend::start());
    let port = free_port();
    let _ng = Nginx::start(&http_conf(
        port,
        &[
            upstream(
                "reuse",
                &[a.addr()],
                "check interval=100 fall=1 rise=1 reuse=30s;",
            ),
            upstream(
                "ka",
                &[b.addr()],
                "check interval=100 fall=1 rise=1 keepalive=on;",
            ),
            upstream(
                "both",
                &[c.addr()],
                "check interval=100 fall=1 rise=1 reuse=on keepalive=off:2s:1s:2;",
            ),
        ]
        .concat(),
    ));
    let peers = [("reuse", &a), ("ka", &b), ("both", &c)];
    let s0 = poll_status_json(port, WAIT, "a first round each", |s| {
        peers
            .iter()
            .all(|(u, b)| s.checks(Kind::Http, u, &b.addr()) >= 1)
    });
    // Watch 0.7 s (some 7 rounds): one connection each the whole time. The
    // `both` upstream (reuse=on) re-handshakes after check_keepalive_requests
    // (10) rounds, the opening one included: a watcher slowed down past its
    // 10th round sees that legitimate second connection, so from then on its
    // backend is not held to one. (Counts first, then the status: a second
    // connection implies 10 rounds on the page read after it.)
    let watch = Instant::now();
    loop {
        let counts: Vec<(usize, usize)> = peers
            .iter()
            .map(|(_, b)| (b.accepted(), b.open_connections()))
            .collect();
        let s = status_json(port).unwrap();
        for ((u, b), counts) in peers.iter().zip(counts) {
            if *u == "both" && s.checks(Kind::Http, u, &b.addr()) >= 10 {
                continue;
            }
            assert_eq!(
                counts,
                (1, 1),
                "{u}: (accepted, open) connections after {:?}: {s}",
                watch.elapsed()
            );
        }
        if watch.elapsed() >= Duration::from_millis(700) {
            break;
        }
        thread::sleep(healthcheck_t::wait::POLL_STEP);
    }
    let s1 = status_json(port).unwrap();
    for (u, b) in peers {
        let grown = s1.checks(Kind::Http, u, &b.addr()) - s0.checks(Kind::Http, u, &b.addr());
        assert!(grown >= 5, "{u}: only {grown} rounds in 0.7 s: {s1}");
        assert!(s1.is_up(Kind::Http, u, &b.addr()), "{s1}");
        assert_eq!(s1.int(Kind::Http, u, &b.addr(), "fails_total"), 0, "{s1}");
        assert_eq!(b.requests(), 0, "{u}: a check sent data");
    }
}

/// Re-handshake by age: with `interval=200 reuse=1s` a new connection
/// every second (the round whose connection is 1000 ms old), with
/// `interval=250 keepalive=2s` every two seconds; the old one is closed
/// each time.
#[test]
fn kept_connection_is_remade_when_its_age_reaches_the_period() {
    let (a, b) = (Backend::start(), Backend::start());
    let port = free_port();
    let _ng = Nginx::start(&http_conf(
        port,
        &[
            upstream("r1", &[a.addr()], "check interval=200 fall=1 reuse=1s;"),
            upstream("k2", &[b.addr()], "check interval=250 fall=1 keepalive=2s;"),
        ]
        .concat(),
    ));
    wait_until(
        Duration::from_secs(8),
        "3 connections to r1's backend",
        || a.accepted() >= 3,
    );
    wait_until(
        Duration::from_secs(8),
        "3 connections to k2's backend",
        || b.accepted() >= 3,
    );
    for (name, backend, period) in [("r1", &a, 1000u128), ("k2", &b, 2000)] {
        let times = backend.accept_times();
        let gaps: Vec<u128> = times
            .windows(2)
            .map(|w| (w[1] - w[0]).as_millis())
            .collect();
        for g in &gaps {
            assert!(
                *g + 150 >= period && *g <= period + 500,
                "{name}: connections made {gaps:?} ms apart, expected every {period} ms"
            );
        }
        // The old connection is closed when the new one is made.
        wait_until(WAIT, format!("{name}: one open connection"), || {
            backend.open_connections() == 1
        });
    }
    let s = status_json(port).unwrap();
    assert_eq!(s.down(), Some(0), "{s}");
    assert_eq!(s.int(Kind::Http, "r1", &a.addr(), "fails_total"), 0, "{s}");
    assert_eq!(s.int(Kind::Http, "k2", &b.addr(), "fails_total"), 0, "{s}");
}

/// `check_keepalive_time` replaces the default age limit of `reuse=on`
/// (and of keepalive's default field): the connection is made again every
/// 1 s (3 s) here where the default would keep it 30 s; a period written on the
/// line wins. `nginx -t` refuses a time not above the interval.
#[test]
fn check_keepalive_time_sets_the_age_limit() {
    let (a, b, c) = (Backend::start(), Backend::start(), Backend::start());
    let port = free_port();
    let _ng = Nginx::start(&http_conf(
        port,
        &[
            upstream(
                "timed",
                &[a.addr()],
                "check interval=200 fall=1 reuse=on;\n        check_keepalive_time 1s;",
            ),
            upstream(
                "ka",
                &[b.addr()],
                "check_keepalive_time 3s;\n        check interval=200 fall=1 keepalive=on;",
            ),
            upstream(
                "written",
                &[c.addr()],
                "check interval=200 fall=1 reuse=30s;\n        check_keepalive_time 1s;",
            ),
        ]
        .concat(),
    ));
    for (name, backend, period) in [("timed", &a, 1000u128), ("ka", &b, 3000)] {
        wait_until(
            Duration::from_secs(12),
            format!("3 connections to {name}'s backend"),
            || backend.accepted() >= 3,
        );
        let times = backend.accept_times();
        let gaps: Vec<u128> = times
            .windows(2)
            .map(|w| (w[1] - w[0]).as_millis())
            .collect();
        for g in &gaps {
            assert!(
                *g + 150 >= period && *g <= period + 500,
                "{name}: connections made {gaps:?} ms apart, expected every {period} ms"
            );
        }
    }
    assert_eq!(
        c.accepted(),
        1,
        "reuse=30s written on the line: one connection"
    );
    let s = status_json(port).unwrap();
    assert_eq!(s.down(), Some(0), "{s}");
    let (rc, out) = healthcheck_t::Builder::default().test_config(&http_conf(
        port,
        &upstream(
            "short",
            &[a.addr()],
            "check interval=2000 reuse=on;\n        check_keepalive_time 2s;",
        ),
    ));
    assert_ne!(rc, 0, "{out}");
    assert!(
        out.contains(
            "[emerg] check_keepalive_time (2000 ms) must be greater than the check's interval \
             (2000 ms): a kept connection would serve no second round"
        ),
        "{out}"
    );
}

/// Re-handshake by rounds: with `reuse=on` one connection serves at most
/// `check_keepalive_requests` rounds, the opening round included, so after
/// `n` rounds `ceil(n / k)` connections were made.
#[test]
fn reuse_on_remakes_after_check_keepalive_requests_rounds() {
    let (a, b, c, d) = (
        Backend::start(),
        Backend::start(),
        Backend::start(),
        Backend::start(),
    );
    let port = free_port();
    let ng = Nginx::start(&http_conf(
        port,
        &[
            upstream(
                "k3",
                &[a.addr()],
                "check interval=100 fall=1 reuse=on;\n        check_keepalive_requests 3;",
            ),
            upstream(
                "k1",
                &[b.addr()],
                "check interval=100 fall=1 reuse=on;\n        check_keepalive_requests 1;",
            ),
            upstream("k10", &[c.addr()], "check interval=100 fall=1 reuse=on;"),
            // A time-valued reuse re-handshakes by age only.
            upstream(
                "timed",
                &[d.addr()],
                "check interval=100 fall=1 reuse=30s;\n        check_keepalive_requests 3;",
            ),
        ]
        .concat(),
    ));
    assert!(
        ng.log_contains("[warn]",)
            && ng.log_contains("\"check_keepalive_requests\" has no effect in upstream \"timed\""),
        "{}",
        ng.log()
    );
    poll_status_json(port, WAIT, "30 rounds each", |s| {
        s.checks(Kind::Http, "k3", &a.addr()) >= 30
            && s.checks(Kind::Http, "k1", &b.addr()) >= 30
            && s.checks(Kind::Http, "k10", &c.addr()) >= 30
            && s.checks(Kind::Http, "timed", &d.addr()) >= 30
    });
    assert_eq!(d.accepted(), 1, "reuse=30s re-handshaked by rounds");
    for (u, backend, k) in [("k3", &a, 3i64), ("k1", &b, 1), ("k10", &c, 10)] {
        let before = backend.accepted() as i64;
        let s = status_json(port).unwrap();
        let after = backend.accepted() as i64;
        let n = s.checks(Kind::Http, u, &backend.addr());
        let expected = (n + k - 1) / k;
        assert!(
            expected >= before - 1 && expected <= after + 1,
            "{u}: {n} rounds with check_keepalive_requests {k} should make \
             {expected} connections; the backend accepted {before}..={after}"
        );
        assert_eq!(
            s.int(Kind::Http, u, &backend.addr(), "fails_total"),
            0,
            "{s}"
        );
        assert!(backend.open_connections() <= 1, "{u}: old connections kept");
    }
}

/// A backend closing idle check connections (FIN or RST, again and again)
/// never makes a failure: the connection is re-made, the peer stays up
/// with `fall=1`.
#[test]
fn backend_closing_idle_connections_does_not_flip_down() {
    let (a, b) = (Backend::start(), Backend::start());
    let port = free_port();
    let ng = Nginx::start(&http_conf(
        port,
        &[
            upstream(
                "r",
                &[a.addr()],
                "check interval=100 fall=1 rise=1 reuse=30s;",
            ),
            upstream(
                "k",
                &[b.addr()],
                "check interval=100 fall=1 rise=1 keepalive=30s:1s:1s:2;",
            ),
        ]
        .concat(),
    ));
    let peers = [("r", &a), ("k", &b)];
    // Close only connections that are kept: the round that opened one has
    // committed and a later round peeked it. (A close inside the opening
    // round's settle window is a server that accepts and at once closes,
    // which rightly fails.)
    let wait_kept = |i: usize| {
        let accepted: Vec<usize> = peers.iter().map(|(_, b)| b.accepted()).collect();
        let c0 = status_json(port).unwrap();
        poll_status_json(port, WAIT, format!("kept connections ({i})"), |s| {
            peers.iter().zip(&accepted).all(|((u, b), &n)| {
                s.checks(Kind::Http, u, &b.addr()) >= c0.checks(Kind::Http, u, &b.addr()) + 2
                    && b.accepted() == n
                    && b.open_connections() == 1
            })
        });
    };
    wait_until(WAIT, "first connections", || {
        peers.iter().all(|(_, b)| b.open_connections() == 1)
    });
    wait_kept(0);
    for i in 0..12 {
        let how = if i % 2 == 0 { Close::Fin } else { Close::Rst };
        let accepted: Vec<usize> = peers.iter().map(|(_, b)| b.accepted()).collect();
        for (_, backend) in peers {
            backend.close_connections(how);
        }
        // Re-made by a later round (or by the round that peeked it).
        wait_until(WAIT, format!("reconnect after close {i} ({how:?})"), || {
            peers
                .iter()
                .zip(&accepted)
                .all(|((_, b), &n)| b.accepted() > n && b.open_connections() == 1)
        });
        wait_kept(i + 1);
        let s = status_json(port).unwrap();
        for (u, backend) in peers {
            assert!(
                s.is_up(Kind::Http, u, &backend.addr()),
                "after close {i}: {s}"
            );
            assert_eq!(
                s.int(Kind::Http, u, &backend.addr(), "fails_total"),
                0,
                "{s}"
            );
            assert_eq!(s.int(Kind::Http, u, &backend.addr(), "fall"), 0, "{s}");
        }
    }
    assert!(a.accepted() >= 13 && b.accepted() >= 13);
    assert!(!ng.log_contains("is down"), "{}", ng.log());
}

/// A backend that dies (stops listening and resets its connections) while
/// a connection is kept goes down after exactly `fall` failed rounds.
#[test]
fn killed_backend_goes_down_within_fall_rounds() {
    let (a, b) = (Backend::start(), Backend::start());
    let port = free_port();
    let ng = Nginx::start(&http_conf(
        port,
        &[
            upstream(
                "r",
                &[a.addr()],
                "check interval=100 fall=3 rise=1 reuse=30s;",
            ),
            upstream(
                "k",
                &[b.addr()],
                "check interval=100 fall=3 rise=1 keepalive=30s:5s:1s:3;",
            ),
        ]
        .concat(),
    ));
    for (u, backend) in [("r", &a), ("k", &b)] {
        wait_until(WAIT, "a kept connection", || {
            backend.open_connections() == 1
        });
        // Kept: a round after the opening one has committed.
        let opened = status_json(port)
            .unwrap()
            .checks(Kind::Http, u, &backend.addr());
        let s = poll_status_json(port, WAIT, format!("{u}: kept"), |s| {
            s.checks(Kind::Http, u, &backend.addr()) >= opened + 2
        });
        assert_eq!(backend.accepted(), 1);
        let c0 = s.checks(Kind::Http, u, &backend.addr());
        backend.set_mode(Mode::Refuse);
        backend.close_connections(Close::Rst);
        let t = Instant::now();
        let s = poll_status_json(port, WAIT, format!("{u} down"), |s| {
            s.is_down(Kind::Http, u, &backend.addr())
        });
        let took = t.elapsed();
        let r = s.row(Kind::Http, u, &backend.addr());
        let fails = s.int(Kind::Http, u, &backend.addr(), "fails_total");
        let rounds = s.checks(Kind::Http, u, &backend.addr()) - c0;
        // Down on the 3rd failure (the log line below says so exactly; more
        // may have committed before the poll saw it, as many as the poll
        // was late); the reset itself counted nothing: every failure is a
        // round's, and they are consecutive.
        assert!(fails >= 3, "{u}: down after {fails} failures: {s}");
        assert!(
            fails <= rounds,
            "{u}: {fails} failures in {rounds} rounds: {s}"
        );
        assert_eq!(r["fall"], fails, "{u}: failures not consecutive: {s}");
        assert_eq!(r["last_failure_reason"], "refused", "{s}");
        assert!(
            took < Duration::from_millis(1500),
            "{u}: 3 rounds at interval 100 took {took:?}"
        );
        ng.wait_for_log(
            &format!(
                "peer {} is down after 3 failures: connection refused",
                backend.addr()
            ),
            WAIT,
        );
    }
}

/// A server that greets first (SMTP/FTP style) is up, kept or not.
#[test]
fn greeting_banner_stays_up() {
    let kept = Talker::start(b"220 kept.example ESMTP ready\r\n", None);
    let fresh = Talker::start(b"220 fresh.example ESMTP ready\r\n", None);
    let port = free_port();
    let _ng = Nginx::start(&http_conf(
        port,
        &[
            upstream(
                "kept",
                &[kept.addr()],
                "check interval=100 fall=1 rise=1 reuse=30s;",
            ),
            upstream(
                "fresh",
                &[fresh.addr()],
                "check interval=100 fall=1 rise=1;",
            ),
        ]
        .concat(),
    ));
    let s = poll_status_json(port, WAIT, "10 rounds each", |s| {
        s.checks(Kind::Http, "kept", &kept.addr()) >= 10
            && s.checks(Kind::Http, "fresh", &fresh.addr()) >= 10
    });
    for (u, t) in [("kept", &kept), ("fresh", &fresh)] {
        assert!(s.is_up(Kind::Http, u, &t.addr()), "{s}");
        assert_eq!(s.int(Kind::Http, u, &t.addr(), "fails_total"), 0, "{s}");
    }
    assert_eq!(kept.accepted(), 1, "the greeting connection was kept");
    assert_eq!(kept.open(), 1);
    assert!(fresh.accepted() >= 10, "reuse=off: a connection per round");
}

/// Data a server sends on an idle kept connection is read and discarded;
/// past 4 KB in total the connection is closed and a later round makes a
/// new one. The peer stays up. Under 4 KB the connection is kept.
#[test]
fn idle_data_past_4k_closes_and_remakes_the_connection() {
    // 5 KB, 300 ms after accept (when the connection is idle and kept).
    let chatty = Talker::start(b"", Some((Duration::from_millis(300), 5 * 1024)));
    // 3 KB the same way: stays.
    let quiet = Talker::start(b"", Some((Duration::from_millis(300), 3 * 1024)));
    let port = free_port();
    let _ng = Nginx::start(&http_conf(
        port,
        &[
            upstream(
                "chatty",
                &[chatty.addr()],
                "check interval=100 fall=1 rise=1 reuse=30s;",
            ),
            upstream(
                "quiet",
                &[quiet.addr()],
                "check interval=100 fall=1 rise=1 reuse=30s;",
            ),
        ]
        .concat(),
    ));
    wait_until(WAIT, "nginx closes 3 chatty connections", || {
        chatty.closed_by_peer() >= 3
    });
    wait_until(WAIT, "chatty connections re-made", || {
        chatty.accepted() >= 4
    });
    let s = status_json(port).unwrap();
    assert!(s.is_up(Kind::Http, "chatty", &chatty.addr()), "{s}");
    assert_eq!(
        s.int(Kind::Http, "chatty", &chatty.addr(), "fails_total"),
        0,
        "{s}"
    );
    assert!(
        chatty.open() <= 1,
        "closed connections still open: {}",
        chatty.open()
    );
    // The 3 KB connection was kept the whole time.
    assert_eq!(quiet.accepted(), 1, "3 KB while idle closed the connection");
    assert_eq!(quiet.closed_by_peer(), 0);
    assert_eq!(quiet.open(), 1);
    assert!(s.is_up(Kind::Http, "quiet", &quiet.addr()), "{s}");
}

/// A server that writes 5 KB at once on accept (a large greeting). The
/// first round sees data and keeps the connection; a kept connection is
/// closed past 4 KB of data (docs/design.md, How checks work), so the connection
/// must be closed and re-made, and the peer stays up.
#[test]
fn five_kb_greeting_closes_and_remakes_the_connection() {
    let big = Talker::start(&vec![b'g'; 5 * 1024], None);
    let port = free_port();
    let _ng = Nginx::start(&http_conf(
        port,
        &[upstream(
            "big",
            &[big.addr()],
            "check interval=100 fall=1 rise=1 reuse=30s;",
        )]
        .concat(),
    ));
    let s = poll_status_json(port, WAIT, "10 rounds", |s| {
        s.checks(Kind::Http, "big", &big.addr()) >= 10
    });
    assert!(s.is_up(Kind::Http, "big", &big.addr()), "{s}");
    assert_eq!(
        s.int(Kind::Http, "big", &big.addr(), "fails_total"),
        0,
        "{s}"
    );
    let remade = try_wait_until(Duration::from_secs(3), || {
        big.closed_by_peer() >= 1 && big.accepted() >= 2
    });
    assert!(
        remade,
        "the connection that received 5 KB on accept was not closed and re-made \
         (accepted {}, closed by nginx {}); nginx side (ss: Recv-Q Send-Q local peer): {:?}",
        big.accepted(),
        big.closed_by_peer(),
        established_lines(big.port)
    );
}

/// SO_KEEPALIVE and TCP_KEEPIDLE/TCP_KEEPINTVL/TCP_KEEPCNT are set from the
/// parsed values on nginx's side of the kept connection, and not at all
/// without `keepalive`. `ss -o` shows the kernel's keepalive timer, at
/// most `idle` away; `getsockopt` on a duplicate of the worker's socket
/// shows the exact values.
#[test]
fn keepalive_sets_kernel_options_from_the_parsed_values() {
    let backends: Vec<Backend> = (0..5).map(|_| Backend::start()).collect();
    let ka = |idle, intvl, cnt| {
        Some(KeepaliveOpts {
            on: true,
            idle,
            intvl,
            cnt,
        })
    };
    let cases: Vec<(&str, &str, Option<KeepaliveOpts>)> = vec![
        (
            "spec",
            "check interval=1000 timeout=900 reuse=30s keepalive=30s:5s:1s:3;",
            ka(5, 1, 3),
        ),
        (
            "offage",
            "check interval=1000 reuse=30s keepalive=off:7s:2s:4;",
            ka(7, 2, 4),
        ),
        // idle shrinks to 1 s (below the 2 s period), intvl 1, cnt 3.
        (
            "shrunk",
            "check interval=1500 reuse=2s keepalive=on;",
            ka(1, 1, 3),
        ),
        // idle = ceil(interval) = 2 s.
        ("defaults", "check interval=1200 keepalive=on;", ka(2, 1, 3)),
        ("reuse", "check interval=1000 reuse=30s;", None),
    ];
    let ups: String = cases
        .iter()
        .zip(&backends)
        .map(|((name, check, _), b)| upstream(name, &[b.addr()], check))
        .collect();
    let port = free_port();
    let ng = Nginx::start(&http_conf(port, &ups));
    // Two rounds each: the connection of the first is kept.
    poll_status_json(port, WAIT, "2 rounds each", |s| {
        cases
            .iter()
            .zip(&backends)
            .all(|((n, _, _), b)| s.checks(Kind::Http, n, &b.addr()) >= 2)
    });
    for ((name, _, want), b) in cases.iter().zip(&backends) {
        // Options are set when the round that made the connection ends
        // (`shrunk` re-makes its connection every 3 s): retry until then.
        let opts = wait_for(Duration::from_secs(5), format!("{name}: options"), || {
            let c = check_conns(&ng.workers(), b.port());
            let &[(pid, fd)] = c.as_slice() else {
                return None;
            };
            let o = keepalive_opts(pid, fd).ok()?;
            (want.is_none() || o.on).then_some(o)
        });
        let line = wait_for(Duration::from_secs(3), format!("{name}: ss line"), || {
            established_lines(b.port()).into_iter().next()
        });
        match want {
            Some(w) => {
                assert_eq!(&opts, w, "{name}");
                let idle = w.idle;
                let timer = keepalive_timer(&line)
                    .unwrap_or_else(|| panic!("{name}: no keepalive timer in {line:?}"));
                assert!(
                    timer <= Duration::from_secs(idle as u64),
                    "{name}: keepalive timer {timer:?} > idle {idle}s: {line}"
                );
            }
            None => {
                assert!(!opts.on, "{name}: SO_KEEPALIVE set without keepalive=");
                assert!(
                    !line.contains("keepalive"),
                    "{name}: keepalive timer without keepalive=: {line}"
                );
            }
        }
    }
    // Right after a (re)connection the timer is close to the full idle
    // time: the 7 s one reads more than the 5 s one could.
    let b = &backends[1];
    let accepted = b.accepted();
    b.close_connections(Close::Fin);
    wait_until(WAIT, "offage: reconnected", || b.accepted() > accepted);
    let timer = wait_for(
        Duration::from_secs(3),
        "offage: fresh keepalive timer",
        || {
            established_lines(b.port())
                .iter()
                .find_map(|l| keepalive_timer(l))
        },
    );
    assert!(
        timer > Duration::from_millis(5500) && timer <= Duration::from_secs(7),
        "offage: fresh timer {timer:?}, expected just under 7 s"
    );
    let s = status_json(port).unwrap();
    assert_eq!(s.down(), Some(0), "{s}");
}

/// With a kept connection and 4 workers the instance holds one check
/// connection per peer (6), not per peer and worker (24): peer `i` belongs
/// to worker slot `i % 4`. Killing the worker that holds peer 0 (and peer
/// 4): rounds go on within two intervals, and the respawned worker takes
/// both peers back.
#[test]
fn one_connection_per_peer_with_four_workers_and_takeover() {
    let backends: Vec<Backend> = (0..6).map(|_| Backend::start()).collect();
    let addrs: Vec<String> = backends.iter().map(Backend::addr).collect();
    let port = free_port();
    let interval = 200;
    let ng = Nginx::builder().workers(4).start(&http_conf(
        port,
        &upstream(
            "six",
            &addrs,
            &format!("check interval={interval} fall=2 rise=1 reuse=30s;"),
        ),
    ));
    ng.allow_log("exited on signal 9");
    let s = poll_status_json(port, WAIT, "3 rounds per peer", |s| {
        addrs.iter().all(|a| s.checks(Kind::Http, "six", a) >= 3)
    });
    let index: Vec<i64> = addrs
        .iter()
        .map(|a| s.int(Kind::Http, "six", a, "index"))
        .collect();
    assert_eq!(index, vec![0, 1, 2, 3, 4, 5], "{s}");

    let workers = ng.workers();
    assert_eq!(workers.len(), 4);
    let owners = |workers: &[u32]| -> Vec<u32> {
        backends
            .iter()
            .map(|b| {
                let c = check_conns(workers, b.port());
                assert_eq!(c.len(), 1, "{}: check connections {c:?}", b.addr());
                c[0].0
            })
            .collect()
    };
    assert_holds(
        Duration::from_millis(600),
        "exactly one connection per backend",
        || {
            backends
                .iter()
                .all(|b| b.open_connections() == 1 && b.accepted() == 1)
        },
    );
    let own = owners(&workers);
    // Peer i and i + 4 share a worker; 0..4 are on four different workers.
    assert_eq!(own[0], own[4], "owners {own:?}");
    assert_eq!(own[1], own[5], "owners {own:?}");
    let mut distinct = own[..4].to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "owners {own:?}");
    let total: usize = backends
        .iter()
        .map(|b| check_conns(&workers, b.port()).len())
        .sum();
    assert_eq!(total, 6, "established check connections");

    // Kill the owner of peers 0 and 4.
    let victim = own[0];
    let before = status_json(port).unwrap();
    let c0 = [
        before.checks(Kind::Http, "six", &addrs[0]),
        before.checks(Kind::Http, "six", &addrs[4]),
    ];
    healthcheck_t::process::signal(victim, libc::SIGKILL).unwrap();
    let killed = Instant::now();
    // Rounds continue: watch the gap between consecutive rounds of peer 0.
    // A round first seen on a page was counted after the request for the
    // page before it was sent and before that page's answer came: the gap
    // between two rounds is at least from the answer that showed the first
    // to the request of the last page without the second (a slowed-down
    // test widens what it cannot tell, not what it asserts).
    let mut last_change = killed;
    let mut last_quiet = killed;
    let mut last_checks = c0[0];
    let mut worst = Duration::ZERO;
    let mut rounds_after = 0;
    while killed.elapsed() < Duration::from_secs(2) {
        let asked = Instant::now();
        let s = status_json(port).unwrap();
        let n = s.checks(Kind::Http, "six", &addrs[0]);
        if n != last_checks {
            worst = worst.max(last_quiet.saturating_duration_since(last_change));
            last_change = Instant::now();
            rounds_after += n - last_checks;
            last_checks = n;
        }
        last_quiet = asked;
        thread::sleep(Duration::from_millis(10));
    }
    worst = worst.max(last_quiet.saturating_duration_since(last_change));
    assert!(
        rounds_after >= 6,
        "only {rounds_after} rounds of peer 0 in the 2 s after the kill"
    );
    assert!(
        worst <= Duration::from_millis(2 * interval + 300),
        "peer 0 went {worst:?} without a round after its worker was killed"
    );
    let s = status_json(port).unwrap();
    assert!(s.checks(Kind::Http, "six", &addrs[4]) >= c0[1] + 6, "{s}");

    // The respawned worker holds peers 0 and 4 again; still 6 connections.
    let respawned = wait_for(WAIT, "a respawned worker", || {
        let w = ng.workers();
        (w.len() == 4 && !w.contains(&victim)).then_some(w)
    });
    let new_pid = *respawned
        .iter()
        .find(|p| !workers.contains(p))
        .expect("a new pid");
    wait_until(WAIT, "the respawned worker holds peers 0 and 4", || {
        let c: Vec<Vec<(u32, i32)>> = backends
            .iter()
            .map(|b| check_conns(&respawned, b.port()))
            .collect();
        c.iter().all(|v| v.len() == 1)
            && c[0][0].0 == new_pid
            && c[4][0].0 == new_pid
            && backends.iter().all(|b| b.open_connections() == 1)
    });
    let own_after = owners(&respawned);
    for i in [1, 2, 3, 5] {
        assert_eq!(own_after[i], own[i], "peer {i} changed owner");
    }
    let s = status_json(port).unwrap();
    assert_eq!(s.down(), Some(0), "{s}");
    for a in &addrs {
        assert_eq!(s.int(Kind::Http, "six", a, "fails_total"), 0, "{s}");
    }
    assert!(ng.log_contains("exited on signal 9"));
}

/// Delay statistics with kept connections. What is measured (docs/design.md, How checks work):
/// from the round's start to its result, successful rounds only. A round
/// that only peeks the kept connection records its near-zero duration; a
/// round that (re-)handshakes records the connect-and-peek time (on
/// loopback also about 0 ms). So min/avg/max stay within 0..=timeout and
/// the peek-only rounds pull min to ~0.
#[test]
fn delay_statistics_stay_meaningful_with_reuse() {
    let backends: Vec<Backend> = (0..4).map(|_| Backend::start()).collect();
    let timeout = 80;
    let cases = [
        (
            "k5",
            format!("check interval=100 timeout={timeout} reuse=on;\n        check_keepalive_requests 5;"),
        ),
        ("r30", format!("check interval=100 timeout={timeout} reuse=30s;")),
        ("ka", format!("check interval=100 timeout={timeout} keepalive=on;")),
        ("off", format!("check interval=100 timeout={timeout};")),
    ];
    let ups: String = cases
        .iter()
        .zip(&backends)
        .map(|((n, c), b)| upstream(n, &[b.addr()], c))
        .collect();
    let port = free_port();
    let _ng = Nginx::start(&http_conf(port, &ups));
    let s = poll_status_json(port, WAIT, "20 rounds each", |s| {
        cases
            .iter()
            .zip(&backends)
            .all(|((n, _), b)| s.checks(Kind::Http, n, &b.addr()) >= 20)
    });
    for ((n, _), b) in cases.iter().zip(&backends) {
        let f = |k: &str| s.int(Kind::Http, n, &b.addr(), k);
        let (last, avg, min, max) = (
            f("last_delay_ms"),
            f("avg_delay_ms"),
            f("min_delay_ms"),
            f("max_delay_ms"),
        );
        assert!(
            0 <= min && min <= avg && avg <= max && max <= timeout,
            "{n}: min {min} avg {avg} max {max} (timeout {timeout}): {s}"
        );
        assert!((0..=timeout).contains(&last), "{n}: last {last}: {s}");
        assert!(min <= 1, "{n}: min delay {min} ms on loopback: {s}");
    }
    // k5 made a connection every 5 rounds; the rest were peeks.
    assert!(backends[0].accepted() >= 4);
    assert_eq!(backends[1].accepted(), 1);
    assert_eq!(backends[2].accepted(), 1);
    assert!(backends[3].accepted() >= 20);
}

/// On reload, an old worker that is shutting down (held by a proxied
/// stream session) starts no more rounds and closes its kept check
/// connections at once (docs/design.md, How checks work): the backend ends up with
/// exactly the new worker's connection.
#[test]
fn reload_closes_the_old_workers_kept_connections() {
    let checked = Backend::start();
    let hang = Backend::with_mode(Mode::Hang);
    let (port, stream_port) = (free_port(), free_port());
    let conf = format!(
        "{}
stream {{
    server {{
        listen 127.0.0.1:{stream_port};
        proxy_pass {hang};
    }}
}}",
        http_conf(
            port,
            &upstream(
                "r",
                &[checked.addr()],
                "check interval=100 fall=1 rise=1 reuse=30s;"
            )
        ),
        hang = hang.addr()
    );
    let mut ng = Nginx::start(&conf);
    wait_until(WAIT, "a kept connection", || {
        checked.open_connections() == 1
    });
    let old = ng.workers();
    // A stream session keeps the old worker alive after the reload.
    let session = TcpStream::connect((Ipv4Addr::LOCALHOST, stream_port)).unwrap();
    wait_until(WAIT, "the session reaches the hanging backend", || {
        hang.open_connections() == 1
    });
    let new = ng.reload();
    assert!(
        old.iter().all(|&p| healthcheck_t::process::is_alive(p)),
        "the old worker should still serve the session"
    );
    let t = Instant::now();
    let settled = try_wait_until(Duration::from_secs(3), || {
        let by_old = check_conns(&old, checked.port());
        let by_new = check_conns(&new, checked.port());
        by_old.is_empty() && by_new.len() == 1 && checked.open_connections() == 1
    });
    let report = format!(
        "after {:?}: old worker {old:?} holds {:?}, new {new:?} holds {:?}, backend open {}",
        t.elapsed(),
        check_conns(&old, checked.port()),
        check_conns(&new, checked.port()),
        checked.open_connections()
    );
    // Let the old worker go before asserting, so nginx stops cleanly.
    drop(session);
    hang.close_connections(Close::Fin);
    ng.wait_workers_gone(&old, WAIT);
    assert!(
        settled,
        "old kept check connection not closed at reload: {report}"
    );
    let s = status_json(port).unwrap();
    assert_eq!(
        s.int(Kind::Http, "r", &checked.addr(), "fails_total"),
        0,
        "{s}"
    );
}

/// Sends SIGCONT to a stopped worker when dropped, so a failing test never
/// leaves nginx frozen.
struct Resume(u32);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = healthcheck_t::process::signal(self.0, libc::SIGCONT);
    }
}

/// A stalled owner (SIGSTOP) keeps its kept connection but runs no rounds:
/// another worker runs the overdue rounds (on fresh connections, which it
/// does not keep), and once the owner resumes it peeks its connection
/// again and the fresh connections stop.
#[test]
fn stalled_owner_rounds_are_taken_over_and_given_back() {
    let backends: Vec<Backend> = (0..4).map(|_| Backend::start()).collect();
    let addrs: Vec<String> = backends.iter().map(Backend::addr).collect();
    let port = free_port();
    let interval = 200;
    let ng = Nginx::builder().workers(4).start(&http_conf(
        port,
        &upstream(
            "four",
            &addrs,
            &format!("check interval={interval} fall=2 rise=1 reuse=30s;"),
        ),
    ));
    poll_status_json(port, WAIT, "3 rounds per peer", |s| {
        addrs.iter().all(|a| s.checks(Kind::Http, "four", a) >= 3)
    });
    wait_until(WAIT, "one kept connection per peer", || {
        backends
            .iter()
            .all(|b| b.open_connections() == 1 && b.accepted() == 1)
    });
    let workers = ng.workers();
    let owner = |b: &Backend| -> u32 {
        let c = check_conns(&workers, b.port());
        assert_eq!(c.len(), 1, "{}: {c:?}", b.addr());
        c[0].0
    };
    let stalled = owner(&backends[0]);
    let b0 = &backends[0];
    let c0 = status_json(port)
        .unwrap()
        .checks(Kind::Http, "four", &addrs[0]);
    let accepted0 = b0.accepted();

    healthcheck_t::process::signal(stalled, libc::SIGSTOP).unwrap();
    let resume = Resume(stalled);
    let stall = Duration::from_secs(2);
    let t = Instant::now();
    // Other workers take over within two intervals (a round then runs
    // each time it is an interval overdue) on fresh connections.
    wait_until(Duration::from_secs(1), "a taken-over round", || {
        b0.accepted() > accepted0
    });
    // When the backend accepted it, not when the test noticed.
    let first = b0.accept_times()[accepted0].saturating_duration_since(t);
    while t.elapsed() < stall {
        thread::sleep(Duration::from_millis(20));
    }
    let s = status_json(port).unwrap();
    let rounds = s.checks(Kind::Http, "four", &addrs[0]) - c0;
    let fresh = b0.accepted() - accepted0;
    drop(resume);
    assert!(
        first <= Duration::from_millis(2 * interval + 300),
        "first taken-over round {first:?} after the stall"
    );
    assert!(rounds >= 3, "{rounds} rounds of peer 0 in {stall:?}: {s}");
    assert!(
        fresh as i64 >= rounds - 1,
        "{rounds} rounds but {fresh} fresh connections: taken-over rounds \
         should not use the stalled owner's kept connection"
    );
    assert_eq!(
        s.int(Kind::Http, "four", &addrs[0], "fails_total"),
        0,
        "{s}"
    );
    assert!(s.is_up(Kind::Http, "four", &addrs[0]), "{s}");
    // The others were not disturbed.
    for b in &backends[1..] {
        assert_eq!(b.accepted(), 1, "{}", b.addr());
    }

    // Resumed: the owner peeks its kept connection again; no more fresh
    // connections after a settling moment.
    wait_until(WAIT, "owner back", || {
        let c = check_conns(&workers, b0.port());
        c.len() == 1 && c[0].0 == stalled
    });
    // Let a round or two run (one already in flight may still be a
    // taken-over one), then watch.
    let back = status_json(port)
        .unwrap()
        .checks(Kind::Http, "four", &addrs[0]);
    poll_status_json(port, WAIT, "rounds after the resume", |s| {
        s.checks(Kind::Http, "four", &addrs[0]) >= back + 2
    });
    let settled = b0.accepted();
    let c1 = status_json(port)
        .unwrap()
        .checks(Kind::Http, "four", &addrs[0]);
    assert_holds(
        Duration::from_millis(5 * interval),
        "no fresh connections once the owner is back",
        || b0.accepted() == settled && b0.open_connections() == 1,
    );
    let c2 = status_json(port)
        .unwrap()
        .checks(Kind::Http, "four", &addrs[0]);
    assert!(c2 >= c1 + 3, "rounds {c1} -> {c2} after the owner resumed");
}
