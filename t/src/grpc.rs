//! A real gRPC server for the tests: `t/py/grpc_health_server.py` (grpcio
//! and grpcio-health-checking, which scripts/test installs into
//! `build/py`), whose Health statuses a test switches while nginx checks
//! it. `HC_PYTHON` names another interpreter that has those packages.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::paths::workspace_root;
use crate::tls::Pki;

/// What the server serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// The standard Health service ("" SERVING at start).
    Served,
    /// No Health service: a check gets UNIMPLEMENTED (grpc-status 12).
    Missing,
}

/// The running server; dropping it stops it.
pub struct GrpcServer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    port: u16,
}

/// The interpreter with grpcio: `HC_PYTHON`, else scripts/test's venv.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("HC_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = workspace_root().join("build/py/bin/python3");
    assert!(
        venv.exists(),
        "{} is missing: scripts/test makes it (python3 -m venv build/py and \
         t/py/requirements.txt), or set HC_PYTHON",
        venv.display()
    );
    venv
}

impl GrpcServer {
    /// Serve cleartext HTTP/2 (h2c) on a free loopback port.
    pub fn start(health: Health) -> GrpcServer {
        GrpcServer::spawn(health, None)
    }

    /// Serve over TLS with the PKI's server certificate (ALPN h2).
    pub fn start_tls(health: Health, pki: &Pki) -> GrpcServer {
        GrpcServer::spawn(health, Some(pki))
    }

    fn spawn(health: Health, pki: Option<&Pki>) -> GrpcServer {
        let port = crate::free_port();
        let script = workspace_root().join("t/py/grpc_health_server.py");
        let mut cmd = Command::new(python());
        cmd.arg(&script).arg(port.to_string());
        if let Some(pki) = pki {
            cmd.args(["--tls", &pki.path("server.pem"), &pki.path("server.key")]);
        }
        if health == Health::Missing {
            cmd.arg("--no-health");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the gRPC server");
        let stdin = child.stdin.take().expect("its stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("its stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read its first line");
        assert_eq!(
            line.trim(),
            format!("ready {port}"),
            "the gRPC server did not start"
        );
        GrpcServer {
            child,
            stdin,
            stdout,
            port,
        }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn command(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("write to the gRPC server");
        let mut answer = String::new();
        self.stdout
            .read_line(&mut answer)
            .expect("read the gRPC server's answer");
        assert_eq!(answer.trim(), "ok", "{line}");
    }

    /// Make `service` ("" for the server's overall health) answer
    /// `status`: SERVING, NOT_SERVING, UNKNOWN or SERVICE_UNKNOWN.
    pub fn set(&mut self, service: &str, status: &str) {
        let name = if service.is_empty() { "-" } else { service };
        self.command(&format!("set {name} {status}"));
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `n` Health/Check calls for "" to `target` over h2c (an nginx
/// `grpc_pass` location, say): each call's status name, or `error CODE`.
pub fn call(target: &str, n: usize) -> Vec<String> {
    let out = Command::new(python())
        .arg(workspace_root().join("t/py/grpc_health_server.py"))
        .args(["call", target, &n.to_string()])
        .output()
        .expect("run the gRPC client");
    assert!(
        out.status.success(),
        "the gRPC client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}
