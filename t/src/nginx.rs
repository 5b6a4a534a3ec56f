//! A real nginx per test: a fresh prefix directory, a generated
//! `nginx.conf`, the built binary with the module loaded, and checks on the
//! way out.
//!
//! The harness writes the configuration's preamble (`load_module`,
//! `daemon off`, `master_process`, `worker_processes`, `pid`, `error_log`,
//! `events`); the test supplies the rest (`http {}` and/or `stream {}`).
//!
//! When an [`Nginx`] is dropped it is stopped with SIGQUIT (SIGKILL if it
//! does not exit in time), and, unless the test is already failing, the
//! test fails if nginx did not exit cleanly or `logs/error.log` has an
//! `[alert]`, `[crit]` or `[emerg]` line the test did not allow with
//! [`Nginx::allow_log`]. The prefix is removed when all went well and kept
//! (its path printed, with the log's tail) otherwise.

use std::fmt::Write as _;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use crate::paths::{module_path, nginx_bin};
use crate::process;
use crate::sys;
use crate::wait::{try_wait_for, try_wait_until};

/// How long starting, reloading and stopping may take.
pub const NGINX_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a stop may take when the test is failing anyway.
const FAILING_STOP_TIMEOUT: Duration = Duration::from_secs(3);
/// Log levels that fail a test unless allowed.
const BAD_LEVELS: [&str; 3] = ["[alert]", "[crit]", "[emerg]"];
/// Title nginx gives an active worker (a retiring one appends " is shutting down").
const WORKER_TITLE: &str = "nginx: worker process";
/// Set (to anything) to keep every prefix directory, even of passing tests.
pub const KEEP_ENV: &str = "HC_T_KEEP";
/// What nginx says when a `listen` port is taken.
const ADDR_IN_USE: &str = "failed (98: Address already in use)";
/// How many times [`Builder::start_with`] tries.
const START_ATTEMPTS: usize = 3;

/// Options for starting nginx or testing a configuration.
#[derive(Clone, Debug)]
pub struct Builder {
    workers: usize,
    master: bool,
    log_level: String,
    load_module: bool,
    events: String,
    connections: usize,
    bin: Option<PathBuf>,
    module: Option<PathBuf>,
    load_first: Vec<PathBuf>,
    main_first: Vec<String>,
    prefix_links: Vec<(String, PathBuf)>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            workers: 1,
            master: true,
            log_level: "info".to_string(),
            load_module: true,
            events: String::new(),
            connections: 1024,
            bin: None,
            module: None,
            load_first: Vec::new(),
            main_first: Vec::new(),
            prefix_links: Vec::new(),
        }
    }
}

impl Builder {
    /// `worker_processes n;` (default 1).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// `master_process off;` when false (single process; default on).
    pub fn master_process(mut self, on: bool) -> Self {
        self.master = on;
        self
    }

    /// Level of `error_log logs/error.log <level>;` (default `info`;
    /// `debug` needs the `--with-debug` binary scripts/build makes).
    pub fn log_level(mut self, level: &str) -> Self {
        self.log_level = level.to_string();
        self
    }

    /// `worker_connections` (1024 unless set).
    pub fn worker_connections(mut self, n: usize) -> Self {
        self.connections = n;
        self
    }

    /// Extra directives for the `events {}` block (e.g. `debug_connection`).
    pub fn events(mut self, directives: &str) -> Self {
        self.events.push_str(directives);
        self.events.push(' ');
        self
    }

    /// Leave out `load_module` (for harness self-tests and for testing
    /// what nginx says without the module).
    pub fn without_module(mut self) -> Self {
        self.load_module = false;
        self
    }

    /// Run this nginx binary instead of [`nginx_bin`] (e.g. a distribution's).
    pub fn binary(mut self, bin: impl Into<PathBuf>) -> Self {
        self.bin = Some(bin.into());
        self
    }

    /// Load this build of the module instead of [`module_path`].
    pub fn module(mut self, so: impl Into<PathBuf>) -> Self {
        self.module = Some(so.into());
        self
    }

    /// `load_module so;` before the module's own (e.g. nginx's
    /// `ngx_stream_module.so`), in the order of the calls.
    pub fn load_first(mut self, so: impl Into<PathBuf>) -> Self {
        self.load_first.push(so.into());
        self
    }

    /// A main-context line at the very top of nginx.conf, before every
    /// `load_module` (e.g. `include /etc/nginx/modules-enabled/*.conf;`, as
    /// Debian's nginx.conf loads its packaged modules), in the order of
    /// the calls.
    pub fn main_first(mut self, line: &str) -> Self {
        self.main_first.push(line.to_string());
        self
    }

    /// A symlink `name` in the prefix directory pointing at `target`, made
    /// before nginx runs: e.g. `modules` -> `/usr/share/nginx/modules`, so
    /// that a packaged `load_module modules/x.so;` (relative to the prefix)
    /// finds the .so where the package put it.
    pub fn prefix_link(mut self, name: &str, target: impl Into<PathBuf>) -> Self {
        self.prefix_links.push((name.to_string(), target.into()));
        self
    }

    fn make_prefix(&self) -> Prefix {
        let prefix = Prefix::create();
        for (name, target) in &self.prefix_links {
            let link = prefix.path.join(name);
            std::os::unix::fs::symlink(target, &link).unwrap_or_else(|e| {
                panic!("symlink {} -> {}: {e}", link.display(), target.display())
            });
        }
        prefix
    }

    fn nginx(&self) -> PathBuf {
        self.bin.clone().unwrap_or_else(nginx_bin)
    }

    /// The full nginx.conf for `body`.
    pub fn render(&self, body: &str) -> String {
        let mut conf = String::new();
        for line in &self.main_first {
            let _ = writeln!(conf, "{line}");
        }
        for so in &self.load_first {
            let _ = writeln!(conf, "load_module {};", so.display());
        }
        if self.load_module {
            let module = self.module.clone().unwrap_or_else(module_path);
            let _ = writeln!(conf, "load_module {};", module.display());
        }
        let _ = writeln!(conf, "daemon off;");
        let _ = writeln!(
            conf,
            "master_process {};",
            if self.master { "on" } else { "off" }
        );
        let _ = writeln!(conf, "worker_processes {};", self.workers);
        let _ = writeln!(conf, "pid logs/nginx.pid;");
        let _ = writeln!(conf, "error_log logs/error.log {};", self.log_level);
        let _ = writeln!(
            conf,
            "events {{ worker_connections {}; {}}}",
            self.connections, self.events
        );
        conf.push('\n');
        conf.push_str(body);
        conf.push('\n');
        conf
    }

    /// Run `nginx -t` on the configuration for `body`; returns the exit
    /// code and everything nginx printed (stderr, then stdout).
    pub fn test_config(&self, body: &str) -> (i32, String) {
        let prefix = self.make_prefix();
        let conf = prefix.write_conf(&self.render(body));
        let out = Command::new(self.nginx())
            .arg("-t")
            .args(prefix_args(&prefix.path, &conf))
            .stdin(Stdio::null())
            .output()
            .expect("run nginx -t");
        let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stdout));
        prefix.remove();
        (out.status.code().unwrap_or(-1), text)
    }

    /// Start nginx with the configuration for `body` and wait until it is
    /// ready: the pid file names the process (so listening sockets are
    /// open) and, with a master, all workers are running. Panics with
    /// nginx's stderr if it does not get there.
    pub fn start(&self, body: &str) -> Nginx {
        let mut nginx = self.spawn(body);
        if let Err(e) = nginx.wait_ready() {
            nginx.fail(&e);
        }
        nginx
    }

    /// [`Builder::start`] with the configuration `make` returns, and
    /// whatever else it returns (typically the ports it took from
    /// [`crate::free_port`]), for a start that cannot fail on a port.
    ///
    /// No test process takes a port another has from `free_port`, but a
    /// process outside the tests (a benchmark script, say) could bind it
    /// between the pick and nginx's bind; nginx then fails with "Address
    /// already in use" (after its own bind retries; a retry that succeeded
    /// leaves `[emerg]` lines, allowed here). Then `make` runs again for
    /// fresh ports, up to 3 attempts; any other failure panics as
    /// [`Builder::start`] does.
    pub fn start_with<T>(&self, mut make: impl FnMut() -> (String, T)) -> (Nginx, T) {
        let mut attempt = 1;
        loop {
            let (body, extra) = make();
            let mut nginx = self.spawn(&body);
            match nginx.wait_ready() {
                Ok(()) => {
                    nginx.allow_log(ADDR_IN_USE);
                    return (nginx, extra);
                }
                Err(e) if attempt < START_ATTEMPTS && nginx.stderr().contains(ADDR_IN_USE) => {
                    eprintln!("note: nginx lost a listen port to a race, retrying: {e}");
                    nginx.discard();
                    attempt += 1;
                }
                Err(e) => nginx.fail(&e),
            }
        }
    }

    /// Start nginx for `body`, without waiting for it.
    fn spawn(&self, body: &str) -> Nginx {
        let prefix = self.make_prefix();
        let conf = prefix.write_conf(&self.render(body));
        let stdout =
            fs::File::create(prefix.path.join("logs/stdout.log")).expect("create stdout.log");
        let stderr =
            fs::File::create(prefix.path.join("logs/stderr.log")).expect("create stderr.log");
        let mut cmd = Command::new(self.nginx());
        cmd.args(prefix_args(&prefix.path, &conf))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        // If the test process dies without dropping the Nginx (killed, or
        // aborted), the master gets SIGTERM (fast shutdown) and takes its
        // workers with it. The signal is tied to the spawning *thread*:
        // create and drop an Nginx on the same thread.
        //
        // SAFETY: the closure only calls prctl(2), which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| sys::set_parent_death_signal(libc::SIGTERM));
        }
        let child = cmd.spawn().expect("spawn nginx");
        Nginx {
            prefix,
            conf,
            builder: self.clone(),
            child: Some(child),
            allowed: Mutex::new(Vec::new()),
            discarded: false,
        }
    }
}

fn prefix_args(prefix: &Path, conf: &Path) -> Vec<String> {
    // A trailing slash: nginx concatenates the prefix and relative paths.
    vec![
        "-p".into(),
        format!("{}/", prefix.display()),
        "-c".into(),
        conf.display().to_string(),
        "-e".into(),
        "logs/error.log".into(),
    ]
}

/// A temp directory `<tmp>/nginx-hc-t/<test name>-<pid>-<n>` with `logs/`.
struct Prefix {
    path: PathBuf,
}

impl Prefix {
    fn create() -> Prefix {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let test = thread::current()
            .name()
            .unwrap_or("nginx")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect::<String>();
        // Sanitized to ASCII, so byte slicing is safe; keep the (more
        // specific) end of long names.
        let test = test.trim_start_matches('_');
        let tail = &test[test.len().saturating_sub(60)..];
        let name = format!(
            "{tail}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let path = std::env::temp_dir().join("nginx-hc-t").join(name);
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(path.join("logs")).expect("create prefix");
        Prefix { path }
    }

    fn write_conf(&self, text: &str) -> PathBuf {
        let conf = self.path.join("nginx.conf");
        fs::write(&conf, text).expect("write nginx.conf");
        conf
    }

    fn remove(&self) {
        if std::env::var_os(KEEP_ENV).is_none() {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// A running nginx; see the module docs.
pub struct Nginx {
    prefix: Prefix,
    conf: PathBuf,
    builder: Builder,
    child: Option<Child>,
    allowed: Mutex<Vec<String>>,
    /// Set by [`Nginx::discard`]: Drop has nothing left to do.
    discarded: bool,
}

impl Nginx {
    /// Start with default options (one worker, master on, log level info).
    pub fn start(body: &str) -> Nginx {
        Builder::default().start(body)
    }

    /// Options for [`Builder::start`].
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The prefix directory.
    pub fn prefix(&self) -> &Path {
        &self.prefix.path
    }

    /// The generated nginx.conf.
    pub fn conf_path(&self) -> &Path {
        &self.conf
    }

    /// Pid of the master (or of the single process).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("nginx was stopped").id()
    }

    /// Wait until nginx is ready (see [`Builder::start`]); `Err` says
    /// what it did instead.
    fn wait_ready(&mut self) -> Result<(), String> {
        let pid = self.pid();
        let pid_file = self.prefix.path.join("logs/nginx.pid");
        let ready = try_wait_for(NGINX_TIMEOUT, || {
            if let Some(status) = self.child.as_mut()?.try_wait().ok()? {
                return Some(Err(format!("nginx exited during startup: {status}")));
            }
            let written = fs::read_to_string(&pid_file).ok()?;
            (written.trim() == pid.to_string()).then_some(Ok(()))
        });
        match ready {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(e),
            None => {
                return Err(format!(
                    "nginx did not write its pid file within {NGINX_TIMEOUT:?}"
                ))
            }
        }
        if self.builder.master {
            let n = self.builder.workers;
            if !try_wait_until(NGINX_TIMEOUT, || self.workers().len() == n) {
                return Err(format!(
                    "nginx did not start {n} workers within {NGINX_TIMEOUT:?}"
                ));
            }
        }
        Ok(())
    }

    /// What nginx wrote to its stderr.
    fn stderr(&self) -> String {
        fs::read_to_string(self.prefix.path.join("logs/stderr.log")).unwrap_or_default()
    }

    /// Stop it and remove its prefix without the checks of Drop: a start
    /// that is tried again.
    fn discard(mut self) {
        let _ = self.stop(FAILING_STOP_TIMEOUT);
        self.prefix.remove();
        self.discarded = true;
    }

    /// Panic with `msg` and nginx's stderr; Drop (running because the
    /// thread panics) then stops nginx, keeps the prefix and prints the
    /// error log's tail.
    fn fail(&self, msg: &str) -> ! {
        let stderr = self.stderr();
        if stderr.trim().is_empty() {
            panic!("{msg}");
        }
        panic!("{msg}\n--- nginx stderr ---\n{stderr}");
    }

    /// Active worker pids (children titled `nginx: worker process`).
    pub fn workers(&self) -> Vec<u32> {
        self.worker_titles()
            .into_iter()
            .filter(|(_, t)| t == WORKER_TITLE)
            .map(|(p, _)| p)
            .collect()
    }

    /// Every worker, including those still shutting down after a reload.
    pub fn all_workers(&self) -> Vec<u32> {
        self.worker_titles().into_iter().map(|(p, _)| p).collect()
    }

    fn worker_titles(&self) -> Vec<(u32, String)> {
        let Some(child) = &self.child else {
            return Vec::new();
        };
        process::children(child.id())
            .into_iter()
            .filter_map(|p| Some((p, process::title(p)?)))
            .filter(|(_, t)| t.starts_with(WORKER_TITLE))
            .collect()
    }

    /// Send `sig` (e.g. `libc::SIGHUP`) to the master.
    pub fn signal(&self, sig: libc::c_int) {
        process::signal(self.pid(), sig)
            .unwrap_or_else(|e| panic!("kill({}, {sig}): {e}", self.pid()));
    }

    /// Replace nginx.conf with the configuration for `body` (same preamble)
    /// without signalling nginx.
    pub fn write_config(&mut self, body: &str) {
        self.conf = self.prefix.write_conf(&self.builder.render(body));
    }

    /// SIGHUP and wait until a full set of new workers runs; returns their
    /// pids. Old workers may still be shutting down (see
    /// [`Nginx::wait_workers_gone`]). A rejected configuration times out
    /// with the log's tail in the message; for that case use
    /// [`Nginx::reload_expect_failure`].
    pub fn reload(&mut self) -> Vec<u32> {
        let old = self.all_workers();
        self.signal(libc::SIGHUP);
        if !self.builder.master {
            return Vec::new();
        }
        let n = self.builder.workers;
        let new = try_wait_for(NGINX_TIMEOUT, || {
            let fresh: Vec<u32> = self
                .workers()
                .into_iter()
                .filter(|p| !old.contains(p))
                .collect();
            (fresh.len() == n).then_some(fresh)
        });
        new.unwrap_or_else(|| {
            self.fail(&format!(
                "reload: no {n} new workers within {NGINX_TIMEOUT:?}"
            ))
        })
    }

    /// [`Nginx::write_config`] then [`Nginx::reload`].
    pub fn reload_with(&mut self, body: &str) -> Vec<u32> {
        self.write_config(body);
        self.reload()
    }

    /// Reload into the configuration for `body`, which nginx must reject
    /// with an `[emerg]` containing `expected`: that line is allowed, the
    /// old workers must keep running, and the returned value is the log
    /// line.
    pub fn reload_expect_failure(&mut self, body: &str, expected: &str) -> String {
        let before = self.workers();
        let mark = self.log_mark();
        self.allow_log(expected);
        self.write_config(body);
        self.signal(libc::SIGHUP);
        let line = self.wait_for_log_since(mark, expected, NGINX_TIMEOUT);
        assert!(
            line.contains("[emerg]"),
            "expected an [emerg] line, got: {line}"
        );
        assert_eq!(
            self.workers(),
            before,
            "workers changed after a rejected reload"
        );
        line
    }

    /// Wait until none of `pids` is alive (old workers after a reload).
    pub fn wait_workers_gone(&self, pids: &[u32], timeout: Duration) {
        if !try_wait_until(timeout, || pids.iter().all(|&p| !process::is_alive(p))) {
            let alive: Vec<u32> = pids
                .iter()
                .copied()
                .filter(|&p| process::is_alive(p))
                .collect();
            self.fail(&format!("workers {alive:?} still alive after {timeout:?}"));
        }
    }

    /// Allow error-log lines containing `pattern` at `[alert]`, `[crit]`
    /// or `[emerg]`.
    pub fn allow_log(&self, pattern: &str) {
        self.allowed.lock().unwrap().push(pattern.to_string());
    }

    /// The whole error log.
    pub fn log(&self) -> String {
        let bytes = fs::read(self.prefix.path.join("logs/error.log")).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// A position in the error log; pass it to the `*_since` methods to
    /// look only at what was logged afterwards.
    pub fn log_mark(&self) -> usize {
        fs::metadata(self.prefix.path.join("logs/error.log")).map_or(0, |m| m.len() as usize)
    }

    fn log_since(&self, mark: usize) -> String {
        let bytes = fs::read(self.prefix.path.join("logs/error.log")).unwrap_or_default();
        String::from_utf8_lossy(bytes.get(mark..).unwrap_or_default()).into_owned()
    }

    /// Whether any error-log line contains `pattern`.
    pub fn log_contains(&self, pattern: &str) -> bool {
        self.log().contains(pattern)
    }

    /// Error-log lines containing `pattern`.
    pub fn log_lines(&self, pattern: &str) -> Vec<String> {
        lines_with(&self.log(), pattern)
    }

    /// Error-log lines logged after `mark` that contain `pattern`.
    pub fn log_lines_since(&self, mark: usize, pattern: &str) -> Vec<String> {
        lines_with(&self.log_since(mark), pattern)
    }

    /// Wait for an error-log line containing `pattern`; returns it.
    pub fn wait_for_log(&self, pattern: &str, timeout: Duration) -> String {
        self.wait_for_log_since(0, pattern, timeout)
    }

    /// Wait for a line containing `pattern` logged after `mark`.
    pub fn wait_for_log_since(&self, mark: usize, pattern: &str, timeout: Duration) -> String {
        let found = try_wait_for(timeout, || {
            self.log_lines_since(mark, pattern).into_iter().next()
        });
        found.unwrap_or_else(|| {
            self.fail(&format!(
                "no error-log line containing {pattern:?} within {timeout:?}"
            ))
        })
    }

    /// `[alert]`/`[crit]`/`[emerg]` lines not allowed by [`Nginx::allow_log`].
    pub fn unexpected_log_lines(&self) -> Vec<String> {
        let allowed = self.allowed.lock().unwrap();
        self.log()
            .lines()
            .filter(|l| BAD_LEVELS.iter().any(|lvl| l.contains(lvl)))
            .filter(|l| !allowed.iter().any(|a| l.contains(a.as_str())))
            .map(str::to_string)
            .collect()
    }

    /// Panic if the error log has unexpected `[alert]`/`[crit]`/`[emerg]`
    /// lines. Drop does this too; call it to check at a chosen moment.
    pub fn check_log(&self) {
        let bad = self.unexpected_log_lines();
        if !bad.is_empty() {
            self.fail(&format!(
                "unexpected lines in error.log:\n{}",
                bad.join("\n")
            ));
        }
    }

    /// Open descriptors of each active worker.
    pub fn worker_fd_counts(&self) -> Vec<usize> {
        self.workers()
            .into_iter()
            .map(|p| process::fd_count(p).unwrap_or_else(|e| panic!("fd count of {p}: {e}")))
            .collect()
    }

    /// Graceful stop (SIGQUIT) and wait; panics unless nginx exits with
    /// status 0 in time and its workers are gone.
    pub fn quit(&mut self) {
        if let Err(e) = self.stop(NGINX_TIMEOUT) {
            self.fail(&e);
        }
    }

    /// Whether the master process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGQUIT, wait up to `timeout`, then SIGKILL master and workers.
    /// Err describes anything but a clean exit.
    fn stop(&mut self, timeout: Duration) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let pid = child.id();
        let kids = process::children(pid);
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("nginx had already exited: {status}"));
        }
        let _ = sys::kill(pid, libc::SIGQUIT);
        let exited: Option<ExitStatus> = try_wait_for(timeout, || child.try_wait().ok().flatten());
        let mut result = match exited {
            Some(status) if status.success() => Ok(()),
            Some(status) => Err(format!("nginx exited with {status} after SIGQUIT")),
            None => {
                let _ = sys::kill(pid, libc::SIGKILL);
                let _ = child.wait();
                Err(format!(
                    "nginx did not exit within {timeout:?} of SIGQUIT; killed"
                ))
            }
        };
        // After a clean exit the master has reaped its workers; anything
        // left (a crashed or killed master) is killed and reported.
        let gone = |pids: &[u32]| pids.iter().all(|&p| !process::is_alive(p));
        let leftover: Vec<u32> = kids.into_iter().filter(|&p| process::is_alive(p)).collect();
        if !try_wait_until(FAILING_STOP_TIMEOUT, || gone(&leftover)) {
            for &p in &leftover {
                let _ = sys::kill(p, libc::SIGKILL);
            }
            if result.is_ok() {
                result = Err(format!(
                    "worker processes {leftover:?} outlived the master; killed"
                ));
            }
        }
        result
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if self.discarded {
            return;
        }
        let path = self.prefix.path.display().to_string();
        if thread::panicking() {
            let _ = self.stop(FAILING_STOP_TIMEOUT);
            eprintln!(
                "nginx prefix kept: {path}\n--- error.log (tail) ---\n{}",
                tail(&self.log(), 40)
            );
            return;
        }
        let mut problems = Vec::new();
        if let Err(e) = self.stop(NGINX_TIMEOUT) {
            problems.push(e);
        }
        let bad = self.unexpected_log_lines();
        if !bad.is_empty() {
            problems.push(format!(
                "unexpected lines in error.log:\n{}",
                bad.join("\n")
            ));
        }
        if problems.is_empty() {
            self.prefix.remove();
            return;
        }
        panic!(
            "{}\nnginx prefix kept: {path}\n--- error.log (tail) ---\n{}",
            problems.join("\n"),
            tail(&self.log(), 40)
        );
    }
}

fn lines_with(text: &str, pattern: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains(pattern))
        .map(str::to_string)
        .collect()
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = lines[lines.len().saturating_sub(n)..].join("\n");
    out.push('\n');
    out
}

/// `nginx -t` on the configuration for `body` (default preamble, module
/// loaded): exit code and output.
pub fn nginx_t(body: &str) -> (i32, String) {
    Builder::default().test_config(body)
}

/// The version `bin -v` reports (`nginx version: nginx/1.28.3` ->
/// `(1, 28, 3)`); panics if the binary does not run or says something else.
pub fn nginx_version(bin: &Path) -> (u32, u32, u32) {
    let out = Command::new(bin)
        .arg("-v")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {} -v: {e}", bin.display()));
    let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stdout));
    parse_version(&text).unwrap_or_else(|| panic!("{} -v: no version in {text:?}", bin.display()))
}

/// The `X.Y.Z` after `nginx/` in `nginx -v` output.
fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let v = text.split("nginx/").nth(1)?;
    let v = v.split(|c: char| c.is_whitespace() || c == '(').next()?;
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    let version = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(version)
}

#[cfg(test)]
mod tests {
    use super::parse_version;

    #[test]
    fn parses_nginx_v() {
        assert_eq!(
            parse_version("nginx version: nginx/1.28.3\n"),
            Some((1, 28, 3))
        );
        assert_eq!(
            parse_version("nginx version: nginx/1.22.1 (Debian)\n"),
            Some((1, 22, 1))
        );
        assert_eq!(parse_version("nginx version: nginx/1.30"), None);
        assert_eq!(parse_version("openresty/1.2.3"), None);
    }
}
