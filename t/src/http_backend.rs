//! A scripted HTTP backend on `127.0.0.1:<kernel-chosen port>` (or an
//! address the test picks, [`HttpBackend::start_at`]): each test says what
//! it answers ([`Reply`]), and reads back what it received (every
//! request's bytes, connections, requests per connection).
//!
//! One thread accepts; each connection gets its own thread, which reads a
//! request head (up to the blank line), records it, and answers with the
//! reply in force at that moment. A reply may keep the connection for the
//! next request (HTTP keep-alive), close it, hang, trickle its bytes or send
//! forever. [`HttpBackend::set_reply`] applies to requests read after it
//! returns.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// Largest request head read; a longer one closes the connection.
const MAX_REQUEST: usize = 64 * 1024;
/// How long a connection thread waits for a request before it gives up.
const IDLE: Duration = Duration::from_secs(30);

/// What the backend does with each request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Send these bytes; then read the next request on the same connection
    /// unless `close`.
    Raw {
        /// The whole answer.
        bytes: Vec<u8>,
        /// Close (FIN) after it.
        close: bool,
    },
    /// Read the request and never answer (the connection stays open).
    Hang,
    /// Read the request and close the connection (FIN).
    Close,
    /// Send `bytes` in pieces of `piece` bytes, `gap` apart; then as `Raw`.
    Trickle {
        /// The whole answer.
        bytes: Vec<u8>,
        /// Bytes per write.
        piece: usize,
        /// Pause after each write.
        gap: Duration,
        /// Close (FIN) after it.
        close: bool,
    },
    /// Send `head` at once, then `body` in pieces of `piece` bytes, each
    /// after a pause of `gap` (a slow body behind a prompt head); then as
    /// `Raw`.
    SlowBody {
        /// Sent at once.
        head: Vec<u8>,
        /// Sent piece by piece.
        body: Vec<u8>,
        /// Bytes per write.
        piece: usize,
        /// Pause before each piece.
        gap: Duration,
        /// Close (FIN) after it.
        close: bool,
    },
    /// Wait `gap`, then send `bytes` and keep the connection (a slow
    /// peer).
    Delay {
        /// Sent after the wait.
        bytes: Vec<u8>,
        /// The wait before answering.
        gap: Duration,
    },
    /// The backend's nth request (counted over all its connections) gets
    /// reply `n % len` (a peer that fails a set share of requests). A
    /// `Rotate` inside closes the connection.
    Rotate(Vec<Reply>),
    /// Send `head`, then `repeat` again and again until the client goes.
    Endless {
        /// Sent once.
        head: Vec<u8>,
        /// Sent forever after it.
        repeat: Vec<u8>,
    },
}

impl Reply {
    /// `status` with the given headers and body, a `Content-Length`, kept
    /// alive.
    pub fn status(status: u16) -> Reply {
        Reply::Raw {
            bytes: response(status, &[], b"ok\n"),
            close: false,
        }
    }

    /// Raw bytes, then close.
    pub fn raw_close(bytes: &[u8]) -> Reply {
        Reply::Raw {
            bytes: bytes.to_vec(),
            close: true,
        }
    }
}

/// An HTTP/1.1 response with a `Content-Length` (added unless `headers`
/// has one) and `headers` in order.
pub fn response(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status} {}\r\n", reason(status)).into_bytes();
    let has_length = headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-length"));
    for (n, v) in headers {
        out.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
    }
    if !has_length {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        301 => "Moved Permanently",
        304 => "Not Modified",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Whatever",
    }
}

struct Shared {
    reply: Mutex<Reply>,
    requests: Mutex<Vec<Vec<u8>>>,
    /// Requests served per connection, in accept order.
    per_connection: Mutex<Vec<usize>>,
    connections: AtomicUsize,
    /// Requests answered by a `Reply::Rotate` so far.
    rotated: AtomicUsize,
    /// Connections whose serving thread still runs (it ends when the
    /// client closes).
    live: AtomicUsize,
    stop: AtomicBool,
    /// Clones of open connections, closed on drop.
    open: Mutex<Vec<TcpStream>>,
}

/// A scripted HTTP backend. Dropping it stops its threads and closes its
/// connections.
pub struct HttpBackend {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl HttpBackend {
    /// A backend answering `reply` to every request.
    pub fn start(reply: Reply) -> HttpBackend {
        HttpBackend::start_at(SocketAddr::from(([127, 0, 0, 1], 0)), reply)
            .expect("bind an HTTP backend")
    }

    /// A backend on `addr` (any loopback address; port 0 for the kernel's
    /// choice) answering `reply` to every request; `Err` if it cannot bind.
    pub fn start_at(addr: SocketAddr, reply: Reply) -> io::Result<HttpBackend> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            reply: Mutex::new(reply),
            requests: Mutex::new(Vec::new()),
            per_connection: Mutex::new(Vec::new()),
            connections: AtomicUsize::new(0),
            rotated: AtomicUsize::new(0),
            live: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
        });
        let s = Arc::clone(&shared);
        let accept = thread::spawn(move || accept_loop(&listener, &s));
        Ok(HttpBackend {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `IP:PORT` (`127.0.0.1:PORT` unless started with [`HttpBackend::start_at`]).
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Answer later requests with `reply`.
    pub fn set_reply(&self, reply: Reply) {
        *self.shared.reply.lock().unwrap() = reply;
    }

    /// Every request head received so far, in order.
    pub fn requests(&self) -> Vec<Vec<u8>> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Number of requests received.
    pub fn request_count(&self) -> usize {
        self.shared.requests.lock().unwrap().len()
    }

    /// Connections accepted.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Requests served on each connection, in accept order.
    pub fn requests_per_connection(&self) -> Vec<usize> {
        self.shared.per_connection.lock().unwrap().clone()
    }

    /// Connections not closed by the client yet (their serving thread
    /// runs; after a reply that closes, or a client's FIN, it ends).
    pub fn live_connections(&self) -> usize {
        self.shared.live.load(Ordering::SeqCst)
    }

    /// Connections currently open.
    pub fn open_connections(&self) -> usize {
        let open = self.shared.open.lock().unwrap();
        open.iter().filter(|s| s.peer_addr().is_ok()).count()
    }
}

impl Drop for HttpBackend {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for s in self.shared.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(conn) = conn else { continue };
        let index = {
            let mut per = shared.per_connection.lock().unwrap();
            per.push(0);
            per.len() - 1
        };
        shared.connections.fetch_add(1, Ordering::SeqCst);
        if let Ok(clone) = conn.try_clone() {
            shared.open.lock().unwrap().push(clone);
        }
        let s = Arc::clone(shared);
        s.live.fetch_add(1, Ordering::SeqCst);
        thread::spawn(move || {
            let _ = serve(conn, &s, index);
            s.live.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// Read one request head (through the blank line); `None` at EOF.
fn read_request(conn: &mut TcpStream, pending: &mut Vec<u8>) -> io::Result<Option<Vec<u8>>> {
    loop {
        if let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = pending.split_off(end + 4);
            return Ok(Some(std::mem::replace(pending, rest)));
        }
        if pending.len() > MAX_REQUEST {
            return Ok(None);
        }
        let mut buf = [0u8; 4096];
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        pending.extend_from_slice(&buf[..n]);
    }
}

fn serve(mut conn: TcpStream, shared: &Shared, index: usize) -> io::Result<()> {
    conn.set_read_timeout(Some(IDLE))?;
    let _ = conn.set_nodelay(true);
    let mut pending = Vec::new();
    while let Some(request) = read_request(&mut conn, &mut pending)? {
        if shared.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        shared.requests.lock().unwrap().push(request);
        if let Some(n) = shared.per_connection.lock().unwrap().get_mut(index) {
            *n += 1;
        }
        let mut reply = shared.reply.lock().unwrap().clone();
        if let Reply::Rotate(all) = &reply {
            let n = shared.rotated.fetch_add(1, Ordering::SeqCst);
            reply = all
                .get(n % all.len().max(1))
                .cloned()
                .unwrap_or(Reply::Close);
        }
        match reply {
            Reply::Rotate(_) => return conn.shutdown(Shutdown::Both),
            Reply::Delay { bytes, gap } => {
                thread::sleep(gap);
                conn.write_all(&bytes)?;
            }
            Reply::Raw { bytes, close } => {
                conn.write_all(&bytes)?;
                if close {
                    return conn.shutdown(Shutdown::Write);
                }
            }
            Reply::Hang => loop {
                // Keep the connection until the client or the test goes.
                let mut buf = [0u8; 1024];
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => return Ok(()),
                    Ok(_) => {}
                }
            },
            Reply::Close => return conn.shutdown(Shutdown::Both),
            Reply::Trickle {
                bytes,
                piece,
                gap,
                close,
            } => {
                for part in bytes.chunks(piece.max(1)) {
                    conn.write_all(part)?;
                    thread::sleep(gap);
                }
                if close {
                    return conn.shutdown(Shutdown::Write);
                }
            }
            Reply::SlowBody {
                head,
                body,
                piece,
                gap,
                close,
            } => {
                conn.write_all(&head)?;
                for part in body.chunks(piece.max(1)) {
                    thread::sleep(gap);
                    conn.write_all(part)?;
                }
                if close {
                    return conn.shutdown(Shutdown::Write);
                }
            }
            Reply::Endless { head, repeat } => {
                conn.write_all(&head)?;
                while !shared.stop.load(Ordering::SeqCst) {
                    conn.write_all(&repeat)?;
                }
                return Ok(());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(port: u16, keep: bool, n: usize) -> Vec<Vec<u8>> {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut out = Vec::new();
        for _ in 0..n {
            let conn = if keep { "keep-alive" } else { "close" };
            write!(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: {conn}\r\n\r\n").unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            while !got.ends_with(b"ok\n") {
                let n = c.read(&mut buf).unwrap();
                assert!(n > 0, "closed early");
                got.extend_from_slice(&buf[..n]);
            }
            out.push(got);
        }
        out
    }

    #[test]
    fn answers_and_records_requests_per_connection() {
        let b = HttpBackend::start(Reply::status(503));
        let answers = get(b.port(), true, 3);
        assert!(answers[0].starts_with(b"HTTP/1.1 503 "));
        assert_eq!(b.request_count(), 3);
        assert_eq!(b.requests_per_connection(), vec![3]);
        assert!(b.requests()[0].starts_with(b"GET / HTTP/1.1\r\n"));
        b.set_reply(Reply::status(200));
        assert!(get(b.port(), true, 1)[0].starts_with(b"HTTP/1.1 200 "));
        assert_eq!(b.connections(), 2);
    }

    #[test]
    fn slow_body_sends_the_head_first() {
        let b = HttpBackend::start(Reply::SlowBody {
            head: b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n".to_vec(),
            body: b"ok\n".to_vec(),
            piece: 1,
            gap: Duration::from_millis(100),
            close: true,
        });
        let mut c = TcpStream::connect(("127.0.0.1", b.port())).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut buf = [0u8; 1024];
        let n = c.read(&mut buf).unwrap();
        assert!(buf[..n].ends_with(b"\r\n\r\n"), "{:?}", &buf[..n]);
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"ok\n");
    }

    #[test]
    fn close_reply_ends_the_connection() {
        let b = HttpBackend::start(Reply::Close);
        let mut c = TcpStream::connect(("127.0.0.1", b.port())).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(c.read(&mut buf).unwrap_or(0), 0);
    }
}
