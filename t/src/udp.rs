//! A real UDP backend on `127.0.0.1:<kernel-chosen port>`.
//!
//! Like [`crate::Backend`], one thread owns the socket and mode changes are
//! commands it confirms, so after [`UdpBackend::set_mode`] returns the new
//! behaviour is in force.
//!
//! In [`UdpMode::Reply`] the answer is the port number as text unless
//! [`UdpBackend::set_answer`] scripted other bytes (a `check_match` block's
//! `expect` then has something to match, or not).

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::sys::{self, Interest};

const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// What a [`UdpBackend`] does with datagrams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum UdpMode {
    /// Record each datagram and answer it: with the port number as text,
    /// or with the bytes given to [`UdpBackend::set_answer`].
    Reply = 0,
    /// Record each datagram, answer nothing.
    Silent = 1,
    /// No socket: the kernel answers ICMP port unreachable. Switching back
    /// binds the same port again (this can fail if another process took the
    /// port meanwhile, which [`UdpBackend::set_mode`] reports).
    Closed = 2,
}

impl UdpMode {
    fn from_u8(v: u8) -> UdpMode {
        match v {
            0 => UdpMode::Reply,
            1 => UdpMode::Silent,
            _ => UdpMode::Closed,
        }
    }
}

enum Cmd {
    SetMode(UdpMode, mpsc::Sender<io::Result<()>>),
    Stop,
}

struct Shared {
    port: u16,
    mode: AtomicU8,
    received: AtomicUsize,
    datagrams: Mutex<Vec<(Instant, Vec<u8>)>>,
    /// What [`UdpMode::Reply`] answers; `None`: the port number.
    answer: Mutex<Option<Vec<u8>>>,
}

/// A UDP backend on loopback; dropping it stops its thread.
pub struct UdpBackend {
    shared: Arc<Shared>,
    commands: mpsc::Sender<Cmd>,
    waker: UnixStream,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for UdpBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpBackend")
            .field("port", &self.port())
            .field("mode", &self.mode())
            .field("received", &self.received())
            .finish()
    }
}

impl UdpBackend {
    /// A backend in [`UdpMode::Reply`].
    pub fn start() -> UdpBackend {
        UdpBackend::with_mode(UdpMode::Reply)
    }

    /// A backend starting in `mode`.
    pub fn with_mode(mode: UdpMode) -> UdpBackend {
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("udp backend: bind");
        socket
            .set_nonblocking(true)
            .expect("udp backend: set_nonblocking");
        let port = socket.local_addr().expect("udp backend: local_addr").port();
        let shared = Arc::new(Shared {
            port,
            mode: AtomicU8::new(UdpMode::Reply as u8),
            received: AtomicUsize::new(0),
            datagrams: Mutex::new(Vec::new()),
            answer: Mutex::new(None),
        });
        let (waker, wake) = UnixStream::pair().expect("udp backend: socketpair");
        wake.set_nonblocking(true)
            .expect("udp backend: set_nonblocking");
        let (commands, rx) = mpsc::channel();
        let thread_shared = Arc::clone(&shared);
        let thread = thread::Builder::new()
            .name(format!("udp-backend-{port}"))
            .spawn(move || run(Some(socket), thread_shared, rx, wake))
            .expect("udp backend: spawn thread");
        let backend = UdpBackend {
            shared,
            commands,
            waker,
            thread: Some(thread),
        };
        if mode != UdpMode::Reply {
            backend.set_mode(mode);
        }
        backend
    }

    /// The port (also while closed).
    pub fn port(&self) -> u16 {
        self.shared.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    /// The current mode.
    pub fn mode(&self) -> UdpMode {
        UdpMode::from_u8(self.shared.mode.load(Ordering::SeqCst))
    }

    /// Switch mode; returns once it is in force. Panics if re-binding the
    /// port fails.
    pub fn set_mode(&self, mode: UdpMode) {
        let (tx, rx) = mpsc::channel();
        self.commands
            .send(Cmd::SetMode(mode, tx))
            .unwrap_or_else(|_| panic!("udp backend {}: thread is gone", self.port()));
        let _ = (&self.waker).write(&[1]);
        match rx.recv_timeout(COMMAND_TIMEOUT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!(
                "udp backend {}: switching to {mode:?} failed: {e}",
                self.port()
            ),
            Err(_) => panic!(
                "udp backend {}: thread did not confirm {mode:?}",
                self.port()
            ),
        }
    }

    /// In [`UdpMode::Reply`], answer with `answer` instead of the port
    /// number (`None`: the port number again). In force for every datagram
    /// received after this returns.
    pub fn set_answer(&self, answer: Option<&[u8]>) {
        *self.shared.answer.lock().unwrap() = answer.map(<[u8]>::to_vec);
    }

    /// Datagrams received so far.
    pub fn received(&self) -> usize {
        self.shared.received.load(Ordering::SeqCst)
    }

    /// Payloads received so far, in order.
    pub fn payloads(&self) -> Vec<Vec<u8>> {
        self.shared
            .datagrams
            .lock()
            .unwrap()
            .iter()
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// Arrival times of the datagrams received so far.
    pub fn receive_times(&self) -> Vec<Instant> {
        self.shared
            .datagrams
            .lock()
            .unwrap()
            .iter()
            .map(|(t, _)| *t)
            .collect()
    }

    /// Forget what was received.
    pub fn reset_counters(&self) {
        let mut d = self.shared.datagrams.lock().unwrap();
        d.clear();
        self.shared.received.store(0, Ordering::SeqCst);
    }
}

impl Drop for UdpBackend {
    fn drop(&mut self) {
        if self.commands.send(Cmd::Stop).is_ok() {
            let _ = (&self.waker).write(&[1]);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(
    mut socket: Option<UdpSocket>,
    shared: Arc<Shared>,
    commands: mpsc::Receiver<Cmd>,
    wake: UnixStream,
) {
    let mut mode = UdpMode::Reply;
    let mut buf = vec![0u8; 65536];
    loop {
        let mut fds = vec![(wake.as_raw_fd(), Interest::Read)];
        if let Some(s) = &socket {
            fds.push((s.as_raw_fd(), Interest::Read));
        }
        let ready = sys::poll(&fds, None)
            .unwrap_or_else(|e| panic!("udp backend {}: poll: {e}", shared.port));
        if ready[0].readable {
            let mut b = [0u8; 64];
            while matches!((&wake).read(&mut b), Ok(n) if n > 0) {}
            while let Ok(cmd) = commands.try_recv() {
                match cmd {
                    Cmd::SetMode(new, ack) => {
                        let result = if new == UdpMode::Closed {
                            socket = None;
                            Ok(())
                        } else if socket.is_none() {
                            rebind(shared.port).map(|s| socket = Some(s))
                        } else {
                            Ok(())
                        };
                        if result.is_ok() {
                            mode = new;
                            shared.mode.store(new as u8, Ordering::SeqCst);
                        }
                        let _ = ack.send(result);
                    }
                    Cmd::Stop => return,
                }
            }
            continue;
        }
        let Some(s) = &socket else { continue };
        loop {
            match s.recv_from(&mut buf) {
                Ok((n, from)) => {
                    shared
                        .datagrams
                        .lock()
                        .unwrap()
                        .push((Instant::now(), buf[..n].to_vec()));
                    shared.received.fetch_add(1, Ordering::SeqCst);
                    if mode == UdpMode::Reply {
                        let answer = shared.answer.lock().unwrap().clone();
                        let answer = answer.unwrap_or_else(|| shared.port.to_string().into_bytes());
                        let _ = s.send_to(&answer, from);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // WouldBlock, or an ICMP error queued for an earlier reply.
                Err(_) => break,
            }
        }
    }
}

fn rebind(port: u16) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))?;
    s.set_nonblocking(true)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::udp_roundtrip;

    #[test]
    fn scripted_answer_replaces_the_port() {
        let b = UdpBackend::start();
        assert_eq!(
            udp_roundtrip(b.port(), b"x").unwrap(),
            b.port().to_string().into_bytes()
        );
        b.set_answer(Some(b"+PONG"));
        assert_eq!(udp_roundtrip(b.port(), b"PING").unwrap(), b"+PONG");
        b.set_answer(None);
        assert_eq!(
            udp_roundtrip(b.port(), b"y").unwrap(),
            b.port().to_string().into_bytes()
        );
        assert_eq!(b.payloads(), [&b"x"[..], b"PING", b"y"]);
    }
}
