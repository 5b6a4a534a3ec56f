//! Real application servers for the checks that speak their protocols:
//! MariaDB (`type=mysql`, Debian package `mariadb-server`) and php-fpm
//! (`type=fastcgi`, Debian package `php-fpm`), each a child of the test in
//! the foreground, in a directory of its own, on `127.0.0.1:<free port>`.
//! `scripts/test` installs both (without starting their services).
//!
//! Each can be stopped and started again on the same port
//! ([`MariaDb::stop`], [`MariaDb::start_again`]); dropping one kills it and
//! removes its directory.

use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::free_port;
use crate::wait::try_wait_for;

/// How long a server may take to start or stop.
pub const DAEMON_TIMEOUT: Duration = Duration::from_secs(30);

/// A directory of the test's for a daemon (removed on drop).
fn scratch(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "nginx-hc-t-{what}-{}-{}",
        std::process::id(),
        free_port()
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// The first of `candidates` that exists.
fn binary(env: &str, candidates: &[&str], package: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    for c in candidates {
        if Path::new(c).exists() {
            return PathBuf::from(c);
        }
    }
    panic!(
        "no {} (Debian package {package}; {env} names another)",
        candidates.join(" or ")
    );
}

fn accepts(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_ok()
}

/// Stop a daemon the way its service would (SIGTERM: mariadbd shuts
/// down, php-fpm ends its workers too), SIGKILL if it does not exit.
fn kill(child: &mut Option<Child>) {
    let Some(mut c) = child.take() else { return };
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
    let gone = try_wait_for(DAEMON_TIMEOUT, || c.try_wait().ok().flatten());
    if gone.is_none() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// A MariaDB server with an empty database of its own.
pub struct MariaDb {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl MariaDb {
    /// Install a data directory and start the server.
    pub fn start() -> MariaDb {
        let dir = scratch("mariadb");
        let install = binary(
            "MARIADB_INSTALL_DB",
            &["/usr/bin/mariadb-install-db", "/usr/bin/mysql_install_db"],
            "mariadb-server",
        );
        let out = Command::new(install)
            .args(["--no-defaults", "--user=root", "--skip-test-db"])
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg("--auth-root-authentication-method=normal")
            .stdin(Stdio::null())
            .output()
            .expect("run mariadb-install-db");
        assert!(
            out.status.success(),
            "mariadb-install-db failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut m = MariaDb {
            dir,
            port: free_port(),
            child: None,
        };
        m.start_again();
        m
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Start the server (again) on its port, and wait until it accepts.
    pub fn start_again(&mut self) {
        kill(&mut self.child);
        let d = &self.dir;
        let bin = binary(
            "MARIADBD_BIN",
            &["/usr/sbin/mariadbd", "/usr/sbin/mysqld"],
            "mariadb-server",
        );
        let child = Command::new(bin)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", d.join("data").display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", d.join("sock").display()))
            .arg(format!("--pid-file={}", d.join("pid").display()))
            .arg(format!("--log-error={}", d.join("error.log").display()))
            .args([
                "--user=root",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=8M",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mariadbd");
        self.child = Some(child);
        let port = self.port;
        assert!(
            try_wait_for(DAEMON_TIMEOUT, || accepts(port).then_some(())).is_some(),
            "mariadbd did not listen on {port}: {}",
            fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
        );
    }

    /// Stop the server (its port refuses connections).
    pub fn stop(&mut self) {
        kill(&mut self.child);
        let port = self.port;
        let _ = try_wait_for(DAEMON_TIMEOUT, || (!accepts(port)).then_some(()));
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        kill(&mut self.child);
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A php-fpm pool with the PHP scripts of the test.
pub struct PhpFpm {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl PhpFpm {
    /// Start a pool on a free port; `scripts` are (file name, PHP code)
    /// written to its `www` directory ([`PhpFpm::script`] gives the path).
    pub fn start(scripts: &[(&str, &str)]) -> PhpFpm {
        let dir = scratch("php-fpm");
        fs::create_dir_all(dir.join("www")).expect("the www directory");
        for (name, code) in scripts {
            fs::write(dir.join("www").join(name), code).expect("a script");
        }
        let port = free_port();
        fs::write(
            dir.join("fpm.conf"),
            format!(
                "[global]\nerror_log = {log}\ndaemonize = no\n\
                 [www]\nlisten = 127.0.0.1:{port}\npm = static\npm.max_children = 2\n\
                 ping.path = /ping\nping.response = pong\n",
                log = dir.join("error.log").display()
            ),
        )
        .expect("the pool's configuration");
        let mut f = PhpFpm {
            dir,
            port,
            child: None,
        };
        f.start_again();
        f
    }

    /// The pool's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The absolute path of script `name` (for `SCRIPT_FILENAME`).
    pub fn script(&self, name: &str) -> String {
        self.dir.join("www").join(name).display().to_string()
    }

    /// Replace script `name`.
    pub fn write_script(&self, name: &str, code: &str) {
        fs::write(self.dir.join("www").join(name), code).expect("a script");
    }

    /// Start the pool (again) and wait until it accepts.
    pub fn start_again(&mut self) {
        kill(&mut self.child);
        let bin = std::env::var_os("PHP_FPM_BIN")
            .map(PathBuf::from)
            .or_else(|| {
                let mut found: Vec<PathBuf> = fs::read_dir("/usr/sbin")
                    .ok()?
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.starts_with("php-fpm"))
                    })
                    .collect();
                found.sort();
                found.pop()
            })
            .expect("no /usr/sbin/php-fpm* (Debian package php-fpm; PHP_FPM_BIN names another)");
        let child = Command::new(bin)
            .args(["-R", "-F", "-y"])
            .arg(self.dir.join("fpm.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start php-fpm");
        self.child = Some(child);
        let port = self.port;
        assert!(
            try_wait_for(DAEMON_TIMEOUT, || accepts(port).then_some(())).is_some(),
            "php-fpm did not listen on {port}: {}",
            fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
        );
    }

    /// Stop the pool.
    pub fn stop(&mut self) {
        kill(&mut self.child);
        let port = self.port;
        let _ = try_wait_for(DAEMON_TIMEOUT, || (!accepts(port)).then_some(()));
    }
}

impl Drop for PhpFpm {
    fn drop(&mut self) {
        kill(&mut self.child);
        let _ = fs::remove_dir_all(&self.dir);
    }
}
