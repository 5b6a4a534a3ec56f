//! `check_max_inflight` (docs/directives.md): at most N probes of a worker
//! connect or handshake at once; the others wait in order, and the wait is
//! not part of their timeout. TLS checks against a real TLS server (nginx)
//! behind a front that holds each new connection 400 ms before it passes
//! the bytes on, so that every handshake lasts 400 ms and the front can
//! count the handshakes in progress.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use healthcheck_t::tls::{ClientAuth, Pki, TlsBackend};
use healthcheck_t::{poll_status_json, Builder, Kind, Nginx, Status};

const HOLD: Duration = Duration::from_millis(400);
const LONG: Duration = Duration::from_secs(20);

#[derive(Default)]
struct Counts {
    /// Connections the front holds now (their handshake cannot have ended).
    held: AtomicUsize,
    /// The most it held at once.
    most: AtomicUsize,
    accepted: AtomicUsize,
}

/// Listeners on `n` loopback ports that pass every connection on to
/// `target` after [`HOLD`]; dropping it stops accepting.
struct SlowFront {
    ports: Vec<u16>,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
}

impl SlowFront {
    fn start(n: usize, target: u16) -> SlowFront {
        let counts = Arc::new(Counts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut ports = Vec::new();
        for _ in 0..n {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
            ports.push(l.local_addr().expect("its address").port());
            l.set_nonblocking(true).expect("non-blocking listener");
            let (counts, stop) = (Arc::clone(&counts), Arc::clone(&stop));
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match l.accept() {
                        Ok((c, _)) => {
                            let counts = Arc::clone(&counts);
                            thread::spawn(move || pass_on(c, target, &counts));
                        }
                        Err(_) => thread::sleep(Duration::from_millis(2)),
                    }
                }
            });
        }
        SlowFront {
            ports,
            counts,
            stop,
        }
    }

    fn most(&self) -> usize {
        self.counts.most.load(Ordering::SeqCst)
    }

    fn accepted(&self) -> usize {
        self.counts.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for SlowFront {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn pass_on(client: TcpStream, target: u16, counts: &Counts) {
    counts.accepted.fetch_add(1, Ordering::SeqCst);
    let now = counts.held.fetch_add(1, Ordering::SeqCst) + 1;
    counts.most.fetch_max(now, Ordering::SeqCst);
    thread::sleep(HOLD);
    counts.held.fetch_sub(1, Ordering::SeqCst);
    let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
        return;
    };
    client.set_nonblocking(false).ok();
    let (mut c2, mut s2) = match (client.try_clone(), server.try_clone()) {
        (Ok(c), Ok(s)) => (c, s),
        _ => return,
    };
    let up = thread::spawn(move || {
        copy(&mut c2, &mut s2);
    });
    let (mut s, mut c) = (server, client);
    copy(&mut s, &mut c);
    up.join().ok();
}

/// Copy until EOF or an error, then shut both halves.
fn copy(from: &mut TcpStream, to: &mut TcpStream) {
    let mut buf = [0u8; 16384];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    to.shutdown(Shutdown::Both).ok();
    from.shutdown(Shutdown::Both).ok();
}

/// The front's peers as `server` lines.
fn servers(front: &SlowFront) -> String {
    front
        .ports
        .iter()
        .map(|p| format!("server 127.0.0.1:{p};\n"))
        .collect()
}

/// Every peer of `ups` up after at least `rounds` rounds, none failed.
fn all_up_without_failure(
    port: u16,
    kind: Kind,
    ups: &str,
    front: &SlowFront,
    rounds: i64,
) -> Status {
    let names: Vec<String> = front
        .ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let s = poll_status_json(
        port,
        LONG,
        format!("every peer of {ups} up, {rounds} rounds"),
        |s| {
            names
                .iter()
                .all(|n| s.is_up(kind, ups, n) && s.checks(kind, ups, n) >= rounds)
        },
    );
    for n in &names {
        assert_eq!(
            s.int(kind, ups, n, "fails_total"),
            0,
            "{ups} {n}: a round failed (a queue wait counted in its timeout?): {}",
            s.row(kind, ups, n)
        );
    }
    s
}

/// http: 8 `type=tls` peers whose first rounds all fall due within 300 ms,
/// each handshake 400 ms, `check_max_inflight 2` in the http block: the
/// front never holds more than 2 handshakes at once; the last of each
/// burst waits about 1.2 s in the queue, beyond its 1 s timeout, and
/// still passes (its timeout starts when it connects).
/// What a test of the http block's limit runs on: the TLS server, the
/// front of its 8 peers, nginx with `check_max_inflight limit`, the status
/// port (the PKI lives as long as the server).
struct Http8 {
    // Dropped in this order: nginx first, the PKI last.
    _nginx: Nginx,
    front: SlowFront,
    _backend: TlsBackend,
    _pki: Pki,
    port: u16,
}

fn http8(limit: u32) -> Http8 {
    let pki = Pki::generate();
    let backend = TlsBackend::start(&pki, ClientAuth::None);
    let front = SlowFront::start(8, backend.tls_port());
    let port = healthcheck_t::free_port();
    let ups = format!(
        "    check_max_inflight {limit};
    upstream slow {{ {}  check type=tls interval=300 timeout=1000 rise=1 fall=1; }}\n",
        servers(&front)
    );
    let nginx = Builder::default().start(&healthcheck_t::conf::http_conf(port, &ups));
    Http8 {
        _nginx: nginx,
        front,
        _backend: backend,
        _pki: pki,
        port,
    }
}

#[test]
fn at_most_n_handshakes_at_once_and_the_wait_is_not_a_failure() {
    let Http8 { front, port, .. } = &http8(2);
    let port = *port;
    all_up_without_failure(port, Kind::Http, "slow", front, 2);
    assert!(front.accepted() >= 16, "{} rounds", front.accepted());
    assert_eq!(
        front.most(),
        2,
        "handshakes in progress at once, with check_max_inflight 2"
    );
}

/// The same 8 peers with `check_max_inflight 0` (no limit): their first
/// rounds overlap (the front holds most of them at once): the bound of
/// the test above is the directive's, not the front's.
#[test]
fn zero_means_no_limit() {
    let Http8 { front, port, .. } = &http8(0);
    all_up_without_failure(*port, Kind::Http, "slow", front, 1);
    assert!(
        front.most() >= 6,
        "only {} handshakes at once without a limit",
        front.most()
    );
}

/// stream: an upstream's own `check_max_inflight 1` bounds its probes
/// alone; a second upstream under the block's default runs its 4
/// handshakes together.
#[test]
fn an_upstream_limit_is_its_own() {
    let pki = Pki::generate();
    let b = TlsBackend::start(&pki, ClientAuth::None);
    let one = SlowFront::start(4, b.tls_port());
    let free = SlowFront::start(4, b.tls_port());
    let port = healthcheck_t::free_port();
    let stream = format!(
        "stream {{
    upstream one {{ {}  check type=ssl_hello interval=300 timeout=1000 rise=1 fall=1;
        check_max_inflight 1; }}
    upstream free {{ {}  check type=ssl_hello interval=300 timeout=1000 rise=1 fall=1; }}
    server {{ listen 127.0.0.1:{}; proxy_pass one; }}
}}",
        servers(&one),
        servers(&free),
        healthcheck_t::free_port()
    );
    let body = format!("{}\n{stream}", healthcheck_t::conf::status_server(port));
    let _ng: Nginx = Builder::default().start(&body);
    all_up_without_failure(port, Kind::Stream, "one", &one, 2);
    all_up_without_failure(port, Kind::Stream, "free", &free, 1);
    assert_eq!(
        one.most(),
        1,
        "handshakes at once in `one` (check_max_inflight 1)"
    );
    assert!(
        free.most() >= 3,
        "only {} handshakes at once in `free`",
        free.most()
    );
}
