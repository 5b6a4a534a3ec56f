//! A scripted TCP server on loopback: to every connection it sends what its
//! script says (at once, or after the peer's first bytes arrive), keeps
//! what each connection sent, then closes. For the protocols a real server
//! is not at hand for: AJP13's CPong, a MySQL error packet, the bytes a
//! `type=tcp` check with `check_http_send` writes.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// What the server does on each connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Script {
    /// Bytes to read before answering (0: answer at once).
    pub read_first: usize,
    /// The answer.
    pub reply: Vec<u8>,
}

impl Script {
    /// Answer `reply` as soon as the connection is accepted.
    pub fn greet(reply: &[u8]) -> Script {
        Script {
            read_first: 0,
            reply: reply.to_vec(),
        }
    }

    /// Read `n` bytes, then answer `reply`.
    pub fn answer(n: usize, reply: &[u8]) -> Script {
        Script {
            read_first: n,
            reply: reply.to_vec(),
        }
    }
}

struct Shared {
    script: Mutex<Script>,
    /// What each connection sent (up to 64 KB each), in accept order.
    received: Mutex<Vec<Vec<u8>>>,
    stop: AtomicBool,
}

/// The server; dropping it stops it.
pub struct ScriptedServer {
    port: u16,
    shared: Arc<Shared>,
}

impl ScriptedServer {
    /// Start serving `script` on 127.0.0.1 (a port of the kernel's).
    pub fn start(script: Script) -> ScriptedServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("its address").port();
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let shared = Arc::new(Shared {
            script: Mutex::new(script),
            received: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        thread::spawn(move || {
            while !s.stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let s = Arc::clone(&s);
                        thread::spawn(move || serve(conn, &s));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        ScriptedServer { port, shared }
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Answer the next connections with `script`.
    pub fn set_script(&self, script: Script) {
        *self.shared.script.lock().expect("the script") = script;
    }

    /// What each connection so far sent.
    pub fn received(&self) -> Vec<Vec<u8>> {
        self.shared.received.lock().expect("the log").clone()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.received.lock().expect("the log").len()
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(mut conn: TcpStream, s: &Shared) {
    let script = s.script.lock().expect("the script").clone();
    let at = {
        let mut r = s.received.lock().expect("the log");
        r.push(Vec::new());
        r.len() - 1
    };
    let _ = conn.set_read_timeout(Some(Duration::from_millis(500)));
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got.len() < script.read_first {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    if got.len() >= script.read_first {
        let _ = conn.write_all(&script.reply);
    }
    // Keep what else arrives until the peer closes (or a short while).
    let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
    while got.len() < 64 * 1024 {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    s.received.lock().expect("the log")[at] = got;
    let _ = conn.shutdown(Shutdown::Both);
}
