//! `check_ssl_verify_interval` (docs/directives.md): a resumed TLS
//! session skips certificate verification, so with `check_ssl_verify on`
//! a probe makes a full handshake at least once per interval (and never
//! resumes a session whose certificate has expired). The backend is a TLS
//! server (Python's `ssl`, OpenSSL) whose certificate is replaced by an
//! expired one (from the same CA) in its running SSL context: its session
//! tickets stay valid, as they do for a server that keeps its ticket keys
//! across a reload. (nginx itself will not do: its session id context
//! covers the certificate, so it refuses the old sessions.)

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use healthcheck_t::tls::{Pki, SERVER_NAME};
use healthcheck_t::{poll_status_json, status_json, Builder, Kind, Nginx};

const SERVER: &str = r#"
import os, socket, ssl, sys, threading
port, cert, key, swap, log = sys.argv[1:6]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", int(port)))
ls.listen(64)
lock = threading.Lock()
def serve(c):
    try:
        c.settimeout(5)
        s = ctx.wrap_socket(c, server_side=True)
        with lock, open(log, "a") as f:
            f.write(("r" if s.session_reused else ".") + "\n")
        s.sendall(b"ok\n")
        s.close()
    except Exception:
        c.close()
swapped = False
while True:
    c, _ = ls.accept()
    if not swapped and os.path.exists(swap):
        ctx.load_cert_chain(swap, key)
        swapped = True
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// The TLS server; killed on drop.
struct Server {
    child: Child,
    log: PathBuf,
    swap: PathBuf,
}

impl Server {
    fn start(pki: &Pki, dir: &Path, port: u16) -> Server {
        let (log, swap) = (dir.join("handshakes.log"), dir.join("swap.pem"));
        let child = Command::new("python3")
            .args(["-c", SERVER, &port.to_string(), &pki.path("server.pem")])
            .arg(pki.path("server.key"))
            .arg(&swap)
            .arg(&log)
            .stdin(Stdio::null())
            .spawn()
            .expect("run python3");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the TLS server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Server { child, log, swap }
    }

    /// Handshakes completed, in order: resumed or full.
    fn handshakes(&self) -> Vec<bool> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| l == "r")
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A certificate for the server's key from the PKI's CA whose notAfter is
/// now (`-days 0`): expired a second later.
fn expired_certificate(pki: &Pki, out: &Path) {
    let st = Command::new("openssl")
        .args([
            "x509",
            "-req",
            "-in",
            &pki.path("server.csr"),
            "-CA",
            &pki.path("ca.pem"),
        ])
        .args([
            "-CAkey",
            &pki.path("ca.key"),
            "-CAcreateserial",
            "-days",
            "0",
        ])
        .args(["-extfile", &pki.path("server.ext"), "-out"])
        .arg(out)
        .output()
        .expect("run openssl");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    std::thread::sleep(Duration::from_millis(1100));
}

#[test]
fn a_replaced_expired_certificate_is_seen_within_the_verify_interval() {
    let pki = Pki::generate();
    let dir = std::env::temp_dir().join(format!("hc-reverify-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let bport = healthcheck_t::free_port();
    let b = Server::start(&pki, &dir, bport);
    // Made now: the swap below then follows the first verification closely.
    expired_certificate(&pki, &dir.join("expired.pem"));
    let port = healthcheck_t::free_port();
    let tls = |interval: &str| {
        format!(
            "check type=tls interval=200 rise=1 fall=1;
        check_ssl_verify on; check_ssl_trusted_certificate {}; check_ssl_name {SERVER_NAME};
        {interval}",
            pki.path("ca.pem")
        )
    };
    let ups = format!(
        "    upstream short {{ server 127.0.0.1:{bport}; {} }}
    upstream default {{ server 127.0.0.1:{bport}; {} }}\n",
        tls("check_ssl_verify_interval 4s;"),
        tls("")
    );
    let _ng: Nginx = Builder::default().start(&healthcheck_t::conf::http_conf(port, &ups));
    let name = format!("127.0.0.1:{bport}");
    poll_status_json(port, Duration::from_secs(10), "both up, resuming", |s| {
        s.is_up(Kind::Http, "short", &name)
            && s.is_up(Kind::Http, "default", &name)
            && s.int(Kind::Http, "default", &name, "tls_resumed") >= 1
            && s.int(Kind::Http, "short", &name, "tls_resumed") >= 1
    });
    // The certificate becomes an expired one; the tickets stay valid.
    let before = b.handshakes().len();
    fs::rename(dir.join("expired.pem"), &b.swap).unwrap();
    let swapped = Instant::now();
    let at_swap = status_json(port).expect("status");
    let rounds = |s: &healthcheck_t::Status| s.int(Kind::Http, "short", &name, "checks");
    let s = poll_status_json(
        port,
        Duration::from_secs(8),
        "short down (tls-verify)",
        |s| s.is_down(Kind::Http, "short", &name),
    );
    let took = swapped.elapsed();
    assert_eq!(
        s.reason(Kind::Http, "short", &name),
        Some("tls-verify"),
        "{s}"
    );
    assert!(
        took <= Duration::from_millis(4000 + 1500),
        "down {took:?} after the swap, check_ssl_verify_interval 4s"
    );
    // Until then the rounds after the swap passed on resumed sessions (the
    // backend sent no certificate): what kept the peer up, and still keeps
    // up the upstream with the default interval (1h).
    assert!(
        rounds(&s) - rounds(&at_swap) >= 4,
        "short: {} rounds between the swap and the full handshake",
        rounds(&s) - rounds(&at_swap)
    );
    let after = &b.handshakes()[before..];
    assert!(after.iter().filter(|r| **r).count() >= 4, "{after:?}");
    let s = status_json(port).expect("status");
    assert!(s.is_up(Kind::Http, "default", &name), "{s}");
    let _ = fs::remove_dir_all(&dir);
}
