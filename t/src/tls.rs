//! TLS for the tests: a throwaway PKI made with the `openssl` command, and
//! TLS backends served by nginx itself (the binary under test, without the
//! module) that log, for every handshake, the SNI the client sent and
//! whether the session was resumed.
//!
//! The PKI ([`Pki::generate`]): a CA, a server certificate for
//! `backend.test` and `127.0.0.1` signed by it, a client certificate signed
//! by it, and a second CA that signed nothing the backends use (an
//! untrusted chain for the checks).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::nginx::{Builder, Nginx};

/// The server certificate's DNS name.
pub const SERVER_NAME: &str = "backend.test";

/// Certificates and keys in a temporary directory (removed on drop).
pub struct Pki {
    dir: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (Debian package openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    /// Make a fresh PKI (EC P-256 keys: fast).
    pub fn generate() -> Pki {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "nginx-hc-pki-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create the PKI directory");
        let key = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for ca in ["ca", "other-ca"] {
            let mut args = vec!["req", "-x509"];
            args.extend(key);
            let (k, c, subj) = (
                format!("{ca}.key"),
                format!("{ca}.pem"),
                format!("/CN=healthcheck test {ca}"),
            );
            args.extend(["-keyout", &k, "-out", &c, "-days", "2", "-subj", &subj]);
            openssl(&dir, &args);
        }
        fs::write(
            dir.join("server.ext"),
            format!("subjectAltName=DNS:{SERVER_NAME},IP:127.0.0.1\n"),
        )
        .unwrap();
        fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        for (name, subj) in [
            ("server", format!("/CN={SERVER_NAME}")),
            ("client", "/CN=checker".into()),
        ] {
            let mut args = vec!["req"];
            args.extend(key);
            let (k, csr) = (format!("{name}.key"), format!("{name}.csr"));
            args.extend(["-keyout", &k, "-out", &csr, "-subj", &subj]);
            openssl(&dir, &args);
            let (pem, ext) = (format!("{name}.pem"), format!("{name}.ext"));
            openssl(
                &dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-out",
                    &pem,
                    "-days",
                    "2",
                    "-extfile",
                    &ext,
                ],
            );
        }
        Pki { dir }
    }

    /// A file of the PKI: `ca.pem`, `other-ca.pem`, `server.pem`,
    /// `server.key`, `client.pem`, `client.key`.
    pub fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// What a TLS backend requires of clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate asked for.
    None,
    /// A client certificate signed by the PKI's CA is required.
    Required,
}

/// TLS servers on loopback run by an nginx without the module: an https
/// server answering `200 ok` on [`TlsBackend::https_port`] and a TLS stream
/// server answering `ok\n` on [`TlsBackend::tls_port`]. Each handshake's
/// SNI (`-` for none) and resumption (`r` or `.`) are logged
/// ([`TlsBackend::handshakes`]).
pub struct TlsBackend {
    nginx: Nginx,
    https: u16,
    tls: u16,
}

/// One logged connection or request of a [`TlsBackend`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handshake {
    /// The SNI, if the client sent one.
    pub sni: Option<String>,
    /// Whether the session was resumed.
    pub resumed: bool,
    /// https: the request's number on its connection (1 = a new one).
    pub request: u32,
}

impl TlsBackend {
    /// Start the servers with the PKI's server certificate.
    pub fn start(pki: &Pki, auth: ClientAuth) -> TlsBackend {
        TlsBackend::start_with(pki, auth, "75s")
    }

    /// [`TlsBackend::start`] with the https server's `keepalive_timeout`
    /// (nginx closes an idle connection after it with a TLS close_notify
    /// and FIN).
    pub fn start_with(pki: &Pki, auth: ClientAuth, keepalive_timeout: &str) -> TlsBackend {
        let (https, tls) = (crate::free_port(), crate::free_port());
        let verify = match auth {
            ClientAuth::None => String::new(),
            ClientAuth::Required => format!(
                "ssl_verify_client on; ssl_client_certificate {};",
                pki.path("ca.pem")
            ),
        };
        let common = format!(
            "ssl_certificate {}; ssl_certificate_key {}; ssl_session_cache builtin:1000;
             ssl_session_tickets on; {verify}",
            pki.path("server.pem"),
            pki.path("server.key")
        );
        let body = format!(
            "http {{
    log_format tls '$ssl_server_name $ssl_session_reused $ssl_protocol $connection_requests';
    server {{
        listen 127.0.0.1:{https} ssl;
        keepalive_requests 1000;
        keepalive_timeout {keepalive_timeout};
        {common}
        access_log logs/https.log tls;
        location / {{ return 200 ok; }}
    }}
}}
stream {{
    log_format tls '$ssl_server_name $ssl_session_reused $ssl_protocol';
    server {{
        listen 127.0.0.1:{tls} ssl;
        {common}
        access_log logs/tls.log tls;
        return \"ok\\n\";
    }}
}}"
        );
        let nginx = Builder::default().without_module().start(&body);
        // Handshakes that fail (the tests' purpose) are logged at info.
        TlsBackend { nginx, https, tls }
    }

    /// The https server's port.
    pub fn https_port(&self) -> u16 {
        self.https
    }

    /// The TLS stream server's port.
    pub fn tls_port(&self) -> u16 {
        self.tls
    }

    fn log(&self, file: &str) -> Vec<Handshake> {
        let text =
            fs::read_to_string(self.nginx.prefix().join("logs").join(file)).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let mut f = l.split(' ');
                let (sni, reused, protocol) = (f.next()?, f.next()?, f.next()?);
                // Sessions whose handshake failed have no protocol.
                if protocol.is_empty() || protocol == "-" {
                    return None;
                }
                Some(Handshake {
                    sni: (sni != "-" && !sni.is_empty()).then(|| sni.to_string()),
                    resumed: reused == "r",
                    request: f.next().and_then(|n| n.parse().ok()).unwrap_or(1),
                })
            })
            .collect()
    }

    /// Requests the https server answered.
    pub fn https_requests(&self) -> Vec<Handshake> {
        self.log("https.log")
    }

    /// Connections the TLS stream server completed.
    pub fn tls_sessions(&self) -> Vec<Handshake> {
        self.log("tls.log")
    }

    /// The backend nginx (for its error log).
    pub fn nginx(&self) -> &Nginx {
        &self.nginx
    }
}
