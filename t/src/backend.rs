//! A real TCP backend on `127.0.0.1:<kernel-chosen port>` whose behaviour a
//! test can switch at any time.
//!
//! One thread owns the listening socket and runs a poll(2) loop; mode changes
//! are commands sent to it, and [`Backend::set_mode`] returns only after the
//! thread applied the change, so a test never races the backend: once
//! `set_mode(Mode::Refuse)` returns, every new connection is refused.
//!
//! In [`Mode::Serve`] each accepted connection gets its own thread running a
//! tiny server: an HTTP request is answered `200` with the backend's port as
//! the body; anything else (a stream proxy's payload) gets the port number as
//! text, then the connection is closed. A connection that sends nothing (a
//! health check) is kept open until the peer closes it, so kept check
//! connections (`reuse`, `keepalive`) stay up.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::client::find;
use crate::sys::{self, Interest};

/// Listen backlog; a [`Mode::Silent`] backend stops completing handshakes
/// once this many connections wait in its accept queue.
const BACKLOG: i32 = 128;
/// How long [`Backend::set_mode`] waits for the backend thread to confirm.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// A request whose bytes so far are only capital letters could still become
/// an HTTP request line ("GET"…). Wait this long for more before answering
/// it as a raw stream payload.
const AMBIGUOUS_WAIT: Duration = Duration::from_millis(200);
/// Budget for the rest of a request once its first bytes arrived.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest request head the HTTP server reads.
const MAX_HEAD: usize = 64 * 1024;

/// What a [`Backend`] does with connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Accept and serve: HTTP requests get `200` with the port as body,
    /// other payloads get the port as text; then close.
    Serve = 0,
    /// Not listening: connects get RST (`ECONNREFUSED`). The port stays
    /// reserved, and switching back listens on it again.
    Refuse = 1,
    /// Accept and never read or write; the connection stays open until the
    /// peer closes it or [`Backend::close_connections`].
    Hang = 2,
    /// Accept, then close with `SO_LINGER 0`: the peer sees RST.
    Rst = 3,
    /// Accept, then close at once: the peer sees FIN.
    Fin = 4,
    /// Listen but never accept: the kernel completes handshakes into the
    /// accept queue (up to the backlog) and nothing more happens.
    Silent = 5,
}

impl Mode {
    fn from_u8(v: u8) -> Mode {
        match v {
            0 => Mode::Serve,
            1 => Mode::Refuse,
            2 => Mode::Hang,
            3 => Mode::Rst,
            4 => Mode::Fin,
            _ => Mode::Silent,
        }
    }
}

/// How [`Backend::close_connections`] ends the connections it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Close {
    /// Orderly close: the peer reads EOF.
    Fin,
    /// Abortive close (`SO_LINGER 0`): the peer gets RST.
    Rst,
}

enum Cmd {
    SetMode(Mode, mpsc::Sender<io::Result<()>>),
    Close(Close, mpsc::Sender<()>),
    Stop,
}

/// State shared between the [`Backend`] handle and its threads.
struct Shared {
    port: u16,
    mode: AtomicU8,
    accepted: AtomicUsize,
    requests: AtomicUsize,
    accept_times: Mutex<Vec<Instant>>,
    /// Connections in [`Mode::Hang`], owned by the accept thread; mirrored
    /// here as a count.
    hung: AtomicUsize,
    /// Clones of connections being served, so they can be closed from the
    /// accept thread; each serving thread removes its own entry.
    served: Mutex<HashMap<u64, TcpStream>>,
    next_id: AtomicU64,
}

/// A TCP backend on loopback. Dropping it stops the thread and closes every
/// connection it holds.
pub struct Backend {
    shared: Arc<Shared>,
    commands: mpsc::Sender<Cmd>,
    waker: UnixStream,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backend")
            .field("port", &self.port())
            .field("mode", &self.mode())
            .field("accepted", &self.accepted())
            .field("requests", &self.requests())
            .finish()
    }
}

impl Backend {
    /// A backend in [`Mode::Serve`].
    pub fn start() -> Backend {
        Backend::with_mode(Mode::Serve)
    }

    /// A backend starting in `mode` (its port is reserved even when
    /// starting in [`Mode::Refuse`]).
    pub fn with_mode(mode: Mode) -> Backend {
        let listener = sys::reserved_listener(BACKLOG).expect("backend: bind 127.0.0.1");
        listener
            .set_nonblocking(true)
            .expect("backend: set_nonblocking");
        let port = listener.local_addr().expect("backend: local_addr").port();
        let shared = Arc::new(Shared {
            port,
            mode: AtomicU8::new(Mode::Serve as u8),
            accepted: AtomicUsize::new(0),
            requests: AtomicUsize::new(0),
            accept_times: Mutex::new(Vec::new()),
            hung: AtomicUsize::new(0),
            served: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        });
        let (waker, wake_rx) = UnixStream::pair().expect("backend: socketpair");
        wake_rx
            .set_nonblocking(true)
            .expect("backend: set_nonblocking");
        let (commands, rx) = mpsc::channel();
        let thread_shared = Arc::clone(&shared);
        let thread = thread::Builder::new()
            .name(format!("backend-{port}"))
            .spawn(move || AcceptLoop::new(listener, thread_shared, rx, wake_rx).run())
            .expect("backend: spawn thread");
        let backend = Backend {
            shared,
            commands,
            waker,
            thread: Some(thread),
        };
        if mode != Mode::Serve {
            backend.set_mode(mode);
        }
        backend
    }

    /// The port it listens on (also while refusing).
    pub fn port(&self) -> u16 {
        self.shared.port
    }

    /// `127.0.0.1:<port>`, as written in an nginx `server` line.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        Mode::from_u8(self.shared.mode.load(Ordering::SeqCst))
    }

    /// Switch mode; returns once the backend behaves the new way.
    pub fn set_mode(&self, mode: Mode) {
        let (tx, rx) = mpsc::channel();
        self.send(Cmd::SetMode(mode, tx));
        match rx.recv_timeout(COMMAND_TIMEOUT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("backend {}: switching to {mode:?} failed: {e}", self.port()),
            Err(_) => panic!("backend {}: thread did not confirm {mode:?}", self.port()),
        }
    }

    /// Close every connection the backend holds (served or hung), the way
    /// `how` says. The listener is not affected.
    pub fn close_connections(&self, how: Close) {
        let (tx, rx) = mpsc::channel();
        self.send(Cmd::Close(how, tx));
        rx.recv_timeout(COMMAND_TIMEOUT)
            .unwrap_or_else(|_| panic!("backend {}: thread did not confirm close", self.port()));
    }

    /// Connections accepted so far (every mode that accepts).
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// When each connection was accepted, in order.
    pub fn accept_times(&self) -> Vec<Instant> {
        self.shared.accept_times.lock().unwrap().clone()
    }

    /// Requests answered so far (HTTP requests and raw payloads).
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Connections currently open on the backend side: being served or
    /// hung. A connection leaves the count shortly after its peer closes it.
    pub fn open_connections(&self) -> usize {
        self.shared.hung.load(Ordering::SeqCst) + self.shared.served.lock().unwrap().len()
    }

    /// Zero the accepted/requests counters and the accept times.
    pub fn reset_counters(&self) {
        let mut times = self.shared.accept_times.lock().unwrap();
        times.clear();
        self.shared.accepted.store(0, Ordering::SeqCst);
        self.shared.requests.store(0, Ordering::SeqCst);
    }

    fn send(&self, cmd: Cmd) {
        self.commands
            .send(cmd)
            .unwrap_or_else(|_| panic!("backend {}: thread is gone", self.port()));
        // A full socket buffer still means a wake-up is pending.
        let _ = (&self.waker).write(&[1]);
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if self.commands.send(Cmd::Stop).is_ok() {
            let _ = (&self.waker).write(&[1]);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The accept thread: owns the listener and the hung connections.
struct AcceptLoop {
    listener: TcpListener,
    listening: bool,
    mode: Mode,
    shared: Arc<Shared>,
    commands: mpsc::Receiver<Cmd>,
    wake: UnixStream,
    hung: Vec<TcpStream>,
}

impl AcceptLoop {
    fn new(
        listener: TcpListener,
        shared: Arc<Shared>,
        commands: mpsc::Receiver<Cmd>,
        wake: UnixStream,
    ) -> Self {
        AcceptLoop {
            listener,
            listening: true,
            mode: Mode::Serve,
            shared,
            commands,
            wake,
            hung: Vec::new(),
        }
    }

    fn run(mut self) {
        loop {
            let accepting = self.listening && self.mode != Mode::Silent;
            let mut fds = vec![(self.wake.as_raw_fd(), Interest::Read)];
            if accepting {
                fds.push((self.listener.as_raw_fd(), Interest::Read));
            }
            fds.extend(self.hung.iter().map(|s| (s.as_raw_fd(), Interest::Close)));
            let ready = match sys::poll(&fds, None) {
                Ok(r) => r,
                Err(e) => panic!("backend {}: poll: {e}", self.shared.port),
            };
            if ready[0].readable {
                let mut buf = [0u8; 64];
                while matches!((&self.wake).read(&mut buf), Ok(n) if n > 0) {}
                while let Ok(cmd) = self.commands.try_recv() {
                    match cmd {
                        Cmd::SetMode(mode, ack) => {
                            let _ = ack.send(self.apply_mode(mode));
                        }
                        Cmd::Close(how, ack) => {
                            self.close_all(how);
                            let _ = ack.send(());
                        }
                        Cmd::Stop => {
                            self.close_all(Close::Fin);
                            return;
                        }
                    }
                }
                // State may have changed: poll again with the new fd set.
                continue;
            }
            let hung_start = if accepting {
                if ready[1].readable {
                    self.accept_pending();
                }
                2
            } else {
                1
            };
            // Drop hung connections whose peer has gone (newly accepted ones
            // were appended after the polled ones, so indices still match).
            let closed: Vec<usize> = ready[hung_start..]
                .iter()
                .enumerate()
                .filter(|(_, r)| r.closed)
                .map(|(i, _)| i)
                .collect();
            for i in closed.into_iter().rev() {
                self.hung.remove(i);
            }
            self.shared.hung.store(self.hung.len(), Ordering::SeqCst);
        }
    }

    fn apply_mode(&mut self, mode: Mode) -> io::Result<()> {
        let want_listen = mode != Mode::Refuse;
        if self.listening && !want_listen {
            sys::unlisten(&self.listener)?;
            self.listening = false;
        } else if !self.listening && want_listen {
            sys::relisten(&self.listener, BACKLOG)?;
            self.listening = true;
        }
        self.mode = mode;
        self.shared.mode.store(mode as u8, Ordering::SeqCst);
        Ok(())
    }

    fn accept_pending(&mut self) {
        loop {
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // ECONNABORTED and friends: the connection died in the queue.
                Err(_) => return,
            };
            self.shared
                .accept_times
                .lock()
                .unwrap()
                .push(Instant::now());
            self.shared.accepted.fetch_add(1, Ordering::SeqCst);
            match self.mode {
                Mode::Serve => self.serve(stream),
                Mode::Hang => self.hung.push(stream),
                Mode::Rst => {
                    let _ = sys::set_linger_zero(&stream);
                    drop(stream);
                }
                Mode::Fin => drop(stream),
                // Not accepting in these modes; a connection that slipped
                // through a mode switch is closed.
                Mode::Refuse | Mode::Silent => drop(stream),
            }
        }
    }

    fn serve(&mut self, stream: TcpStream) {
        let id = self.shared.next_id.fetch_add(1, Ordering::SeqCst);
        let Ok(clone) = stream.try_clone() else {
            return;
        };
        self.shared.served.lock().unwrap().insert(id, clone);
        let shared = Arc::clone(&self.shared);
        let spawned = thread::Builder::new()
            .name(format!("backend-{}-conn", shared.port))
            .spawn(move || {
                let _ = serve_connection(stream, &shared);
                shared.served.lock().unwrap().remove(&id);
            });
        if spawned.is_err() {
            self.shared.served.lock().unwrap().remove(&id);
        }
    }

    fn close_all(&mut self, how: Close) {
        let served: Vec<TcpStream> = self
            .shared
            .served
            .lock()
            .unwrap()
            .drain()
            .map(|(_, s)| s)
            .collect();
        for s in served.iter().chain(self.hung.iter()) {
            match how {
                // FIN now, and wakes the serving thread's read with EOF.
                Close::Fin => {
                    let _ = s.shutdown(Shutdown::Both);
                }
                // Wake the serving thread without sending anything; the
                // last close of the socket then sends RST.
                Close::Rst => {
                    let _ = sys::set_linger_zero(s);
                    let _ = s.shutdown(Shutdown::Read);
                }
            }
        }
        self.hung.clear();
        self.shared.hung.store(0, Ordering::SeqCst);
    }
}

/// What the bytes received so far look like.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    /// Capital letters only: maybe the start of an HTTP method.
    Ambiguous,
    /// An HTTP request line whose head is not complete yet.
    HttpPartial,
    /// A complete HTTP head of this many bytes.
    Http(usize),
    /// Not HTTP: answer with the port and close.
    Raw,
}

fn classify(buf: &[u8]) -> Request {
    let method_len = buf.iter().take_while(|b| b.is_ascii_uppercase()).count();
    if method_len == buf.len() {
        return if method_len <= 16 {
            Request::Ambiguous
        } else {
            Request::Raw
        };
    }
    if method_len == 0 || buf[method_len] != b' ' {
        return Request::Raw;
    }
    if let Some(i) = find(buf, b"\r\n\r\n") {
        return Request::Http(i + 4);
    }
    if let Some(i) = find(buf, b"\n\n") {
        return Request::Http(i + 2);
    }
    if buf.len() > MAX_HEAD {
        return Request::Raw;
    }
    Request::HttpPartial
}

/// Serve one connection; see the module docs.
fn serve_connection(mut stream: TcpStream, shared: &Shared) -> io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let started = Instant::now();
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if classify(&buf) == Request::Ambiguous {
                    return answer_raw(&mut stream, shared);
                }
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        buf.extend_from_slice(&chunk[..n]);
        match classify(&buf) {
            Request::Raw => return answer_raw(&mut stream, shared),
            Request::Http(head_len) => return answer_http(&mut stream, shared, &buf, head_len),
            Request::Ambiguous => stream.set_read_timeout(Some(AMBIGUOUS_WAIT))?,
            Request::HttpPartial => {
                let left = REQUEST_TIMEOUT.saturating_sub(started.elapsed());
                if left.is_zero() {
                    return Ok(());
                }
                stream.set_read_timeout(Some(left))?;
            }
        }
    }
}

fn answer_raw(stream: &mut TcpStream, shared: &Shared) -> io::Result<()> {
    shared.requests.fetch_add(1, Ordering::SeqCst);
    stream.write_all(shared.port.to_string().as_bytes())?;
    stream.shutdown(Shutdown::Write)
}

fn answer_http(
    stream: &mut TcpStream,
    shared: &Shared,
    buf: &[u8],
    head_len: usize,
) -> io::Result<()> {
    let head = String::from_utf8_lossy(&buf[..head_len]);
    let is_head = head.starts_with("HEAD ");
    let content_length: usize = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    // Read (and discard) a request body, so closing does not send RST.
    let mut body_left = content_length.saturating_sub(buf.len() - head_len);
    let mut chunk = [0u8; 4096];
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    while body_left > 0 {
        match stream.read(&mut chunk)? {
            0 => break,
            n => body_left = body_left.saturating_sub(n),
        }
    }
    shared.requests.fetch_add(1, Ordering::SeqCst);
    let body = shared.port.to_string();
    let mut response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         X-Backend-Port: {}\r\nConnection: close\r\n\r\n",
        body.len(),
        shared.port
    );
    if !is_head {
        response.push_str(&body);
    }
    stream.write_all(response.as_bytes())?;
    stream.shutdown(Shutdown::Write)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_requests() {
        assert_eq!(classify(b"GE"), Request::Ambiguous);
        assert_eq!(classify(b"GET / HTTP/1.0\r\n"), Request::HttpPartial);
        assert_eq!(classify(b"GET / HTTP/1.0\r\n\r\n"), Request::Http(18));
        assert_eq!(classify(b"GET / HTTP/1.0\n\nxx"), Request::Http(16));
        assert_eq!(classify(b"hello"), Request::Raw);
        assert_eq!(classify(b"PING\n"), Request::Raw);
        assert_eq!(classify(b" GET"), Request::Raw);
        assert_eq!(classify(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"), Request::Raw);
    }
}
