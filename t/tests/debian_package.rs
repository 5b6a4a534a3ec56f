//! scripts/package's .deb in Debian 12's real nginx package: built with
//! `scripts/package --like /usr/sbin/nginx`, installed with `dpkg -i`,
//! loaded through `/etc/nginx/modules-enabled/` (checks an http and a stream
//! upstream in an nginx of the test's own on loopback), removed and purged
//! with nothing left, and a package built for another nginx ABI refused
//! (docs/packaging.md).
//!
//! It changes this machine, so it is ignored unless asked for: scripts/test
//! runs it as root in its Debian step (`--ignored`). While it runs:
//!
//! - `/usr/sbin/policy-rc.d` exits 101, so no package starts or reloads a
//!   service (the original file, if any, is put back afterwards);
//! - Debian's `nginx` and `libnginx-mod-stream` are installed if missing
//!   (`apt-get install`), and the packages that this installed are purged
//!   at the end: the machine keeps no nginx service it did not have;
//! - `libnginx-mod-http-healthcheck` is installed, removed and purged.
//!
//! What it did is recorded in `/var/tmp/nginx-healthcheck-debian-package/`
//! until it has undone it, so a run that was killed is undone by the next
//! one; runs on one machine take turns (a lock file). It never starts the
//! system's nginx, and fails if anything new listens on port 80.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use healthcheck_t::paths::workspace_root;
use healthcheck_t::ss::ss;
use healthcheck_t::wait::try_wait_for;
use healthcheck_t::{
    free_port, http_get, poll_status_json, stream_roundtrip, Backend, Kind, Mode, Nginx,
};

const PACKAGE: &str = "libnginx-mod-http-healthcheck";
const NGINX: &str = "/usr/sbin/nginx";
const MODULE: &str = "/usr/lib/nginx/modules/ngx_healthcheck_module.so";
const AVAILABLE: &str = "/usr/share/nginx/modules-available/mod-http-healthcheck.conf";
const LINK: &str = "/etc/nginx/modules-enabled/70-mod-http-healthcheck.conf";
const LINK_REMOVED: &str = "/etc/nginx/modules-enabled/70-mod-http-healthcheck.conf.removed";
const STREAM_LINK: &str = "/etc/nginx/modules-enabled/50-mod-stream.conf";
/// An ABI that Debian 12's nginx does not provide (trixie's nginx 1.26.3).
const OTHER_ABI: &str = "nginx-abi-1.26.3-1";
/// What the module logs once at start in an nginx without the hook patch:
/// in `nginx -t`'s output, the proof that the module was loaded.
const MODULE_NOTICE: &str = "ngx_healthcheck_module: nginx has no balancer hook patch";
/// Debian's packages the test needs: the binary (with nginx-common's
/// /etc/nginx) and the stream module, which must load before ours.
const SYSTEM_PACKAGES: [&str; 2] = ["nginx", "libnginx-mod-stream"];
const POLICY_RC_D: &str = "/usr/sbin/policy-rc.d";
const STATE_DIR: &str = "/var/tmp/nginx-healthcheck-debian-package";
const LOCK_FILE: &str = "/run/lock/nginx-healthcheck-debian-package.lock";

/// apt may wait for dpkg's lock (DPkg::Lock::Timeout=300) and download.
const APT_TIMEOUT: Duration = Duration::from_secs(600);
/// scripts/package: scripts/build --like (a module build when its tree is
/// new) and lintian.
const PACKAGE_TIMEOUT: Duration = Duration::from_secs(900);
/// dpkg, dpkg-query, dpkg-deb, nginx -t.
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
/// Waiting for another run of this test on the machine.
const LOCK_TIMEOUT: Duration = Duration::from_secs(1200);

// --- commands ----------------------------------------------------------------

/// What a command did: its exit code (-1 for a signal), stdout, and both
/// outputs together for messages.
struct Run {
    code: i32,
    stdout: String,
    all: String,
}

impl Run {
    fn ok(&self) -> bool {
        self.code == 0
    }
}

/// Run `cmd` (stdin closed) for at most `timeout`; kill it and panic after.
fn run(what: &str, cmd: &mut Command, timeout: Duration) -> Run {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let base = std::env::temp_dir().join(format!("hc-debian-package-{}-{n}", std::process::id()));
    let (out_path, err_path) = (base.with_extension("out"), base.with_extension("err"));
    let out = fs::File::create(&out_path).expect("create stdout file");
    let err = fs::File::create(&err_path).expect("create stderr file");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    let status = try_wait_for(timeout, || child.try_wait().ok().flatten());
    let read = |p: &Path| String::from_utf8_lossy(&fs::read(p).unwrap_or_default()).into_owned();
    let (stdout, stderr) = (read(&out_path), read(&err_path));
    let _ = fs::remove_file(&out_path);
    let _ = fs::remove_file(&err_path);
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{what}: still running after {timeout:?}, killed\n{stdout}{stderr}");
    };
    Run {
        code: status.code().unwrap_or(-1),
        all: format!("{stderr}{stdout}"),
        stdout,
    }
}

/// [`run`] that must exit 0.
fn run_ok(what: &str, cmd: &mut Command, timeout: Duration) -> Run {
    let r = run(what, cmd, timeout);
    assert!(r.ok(), "{what}: exit {}\n{}", r.code, r.all);
    r
}

fn cmd(program: &str, args: &[&str]) -> Command {
    let mut c = Command::new(program);
    c.args(args).env("LC_ALL", "C");
    c
}

fn apt_get(args: &[&str]) -> Command {
    let mut c = cmd("apt-get", &["-q", "-y", "-o", "DPkg::Lock::Timeout=300"]);
    c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
    c
}

fn dpkg(args: &[&str]) -> Run {
    let mut c = cmd("dpkg", &["--force-confdef", "--force-confold"]);
    c.args(args);
    run(&format!("dpkg {}", args.join(" ")), &mut c, TOOL_TIMEOUT)
}

/// dpkg's state of `package`: `installed`, `unpacked`, `config-files`, ...;
/// `not-installed` when dpkg does not know it.
fn state(package: &str) -> String {
    let r = run(
        "dpkg-query",
        &mut cmd("dpkg-query", &["-W", "-f=${db:Status-Status}", package]),
        TOOL_TIMEOUT,
    );
    if r.ok() && !r.stdout.trim().is_empty() {
        r.stdout.trim().to_string()
    } else {
        "not-installed".to_string()
    }
}

fn installed(package: &str) -> bool {
    state(package) == "installed"
}

/// `nginx -t` on the system's configuration (/etc/nginx/nginx.conf): it
/// must pass; returns what nginx printed.
fn system_nginx_t() -> String {
    run_ok("nginx -t", &mut cmd(NGINX, &["-t"]), TOOL_TIMEOUT).all
}

fn exists(path: &str) -> bool {
    fs::symlink_metadata(path).is_ok()
}

// --- the machine: what the test changes, recorded until undone -----------------

/// Takes turns with other runs on this machine (an flock held until drop).
struct Turn(#[allow(dead_code)] fs::File);

fn take_turn() -> Turn {
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_FILE)
        .unwrap_or_else(|e| panic!("open {LOCK_FILE}: {e}"));
    let got = try_wait_for(LOCK_TIMEOUT, || {
        // SAFETY: flock(2) on a descriptor this File owns.
        (unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0).then_some(())
    });
    assert!(
        got.is_some(),
        "another run of this test held {LOCK_FILE} for {LOCK_TIMEOUT:?}"
    );
    Turn(f)
}

/// What the test changed on the machine, mirrored in [`STATE_DIR`]:
/// `installed` (packages it installed, one a line), `policy-rc.d` (the
/// original file) or `policy-rc.d.absent`.
struct Machine {
    restored: bool,
}

fn state_file(name: &str) -> PathBuf {
    Path::new(STATE_DIR).join(name)
}

impl Machine {
    /// Undo what an earlier run left (killed before it restored), then
    /// keep services from starting.
    fn prepare() -> Machine {
        if Path::new(STATE_DIR).exists() {
            eprintln!("an earlier run did not finish: undoing what it recorded in {STATE_DIR}");
            undo(true);
        }
        assert!(
            state(PACKAGE) == "not-installed",
            "{PACKAGE} is already on this machine ({}): the test would replace it; \
             `dpkg -P {PACKAGE}` first",
            state(PACKAGE)
        );
        fs::create_dir_all(STATE_DIR).expect("create the state directory");
        match fs::read(POLICY_RC_D) {
            Ok(original) => {
                let mode = fs::metadata(POLICY_RC_D).unwrap().permissions().mode();
                fs::write(state_file("policy-rc.d"), original).unwrap();
                fs::set_permissions(state_file("policy-rc.d"), fs::Permissions::from_mode(mode))
                    .unwrap();
            }
            Err(_) => fs::write(state_file("policy-rc.d.absent"), "").unwrap(),
        }
        fs::write(
            POLICY_RC_D,
            "#!/bin/sh\n# t/tests/debian_package.rs (nginx-healthcheck): no service starts \
             while it runs\nexit 101\n",
        )
        .unwrap();
        fs::set_permissions(POLICY_RC_D, fs::Permissions::from_mode(0o755)).unwrap();
        Machine { restored: false }
    }

    /// Install the missing ones of [`SYSTEM_PACKAGES`], recording first
    /// every package apt is about to install.
    fn install_system_packages(&self) {
        let missing: Vec<&str> = SYSTEM_PACKAGES
            .into_iter()
            .filter(|p| !installed(p))
            .collect();
        if missing.is_empty() {
            return;
        }
        let mut args = vec!["install", "--no-install-recommends"];
        args.extend(&missing);
        let mut simulate = args.clone();
        simulate.push("-s");
        let mut sim = run("apt-get install -s", &mut apt_get(&simulate), APT_TIMEOUT);
        if !sim.ok() {
            // A fresh machine has no package lists yet.
            run_ok("apt-get update", &mut apt_get(&["update"]), APT_TIMEOUT);
            sim = run_ok("apt-get install -s", &mut apt_get(&simulate), APT_TIMEOUT);
        }
        let new: Vec<String> = sim
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("Inst ")?.split_whitespace().next())
            .map(str::to_string)
            .collect();
        assert!(
            !new.is_empty(),
            "apt would install nothing for {missing:?}:\n{}",
            sim.all
        );
        fs::write(state_file("installed"), new.join("\n") + "\n").unwrap();
        eprintln!("installing {} (purged at the end)", new.join(" "));
        run_ok("apt-get install", &mut apt_get(&args), APT_TIMEOUT);
    }

    fn restore(&mut self) {
        undo(false);
        self.restored = true;
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        if !self.restored {
            undo(true);
        }
    }
}

/// Purge our package and what the test installed, put policy-rc.d back,
/// forget the record. `quiet`: report failures instead of panicking (in
/// Drop, or for an earlier run's leftovers).
fn undo(quiet: bool) {
    let mut problems = Vec::new();
    if state(PACKAGE) != "not-installed" {
        let r = dpkg(&["-P", PACKAGE]);
        if !r.ok() {
            problems.push(format!("dpkg -P {PACKAGE}: {}", r.all));
        }
    }
    if let Ok(list) = fs::read_to_string(state_file("installed")) {
        let ours: Vec<&str> = list
            .lines()
            .filter(|p| !p.is_empty() && state(p) != "not-installed")
            .collect();
        if !ours.is_empty() {
            let mut args = vec!["purge"];
            args.extend(&ours);
            let r = run("apt-get purge", &mut apt_get(&args), APT_TIMEOUT);
            if !r.ok() {
                problems.push(format!("apt-get purge {}: {}", ours.join(" "), r.all));
            }
        }
    }
    if let Ok(original) = fs::read(state_file("policy-rc.d")) {
        let mode = fs::metadata(state_file("policy-rc.d"))
            .map(|m| m.permissions().mode())
            .unwrap_or(0o755);
        if fs::write(POLICY_RC_D, original).is_err()
            || fs::set_permissions(POLICY_RC_D, fs::Permissions::from_mode(mode)).is_err()
        {
            problems.push(format!("could not restore {POLICY_RC_D}"));
        }
    } else if state_file("policy-rc.d.absent").exists() {
        let _ = fs::remove_file(POLICY_RC_D);
    }
    if problems.is_empty() {
        let _ = fs::remove_dir_all(STATE_DIR);
    } else if quiet {
        eprintln!(
            "could not restore the machine (kept {STATE_DIR}):\n{}",
            problems.join("\n")
        );
    } else {
        panic!(
            "could not restore the machine (kept {STATE_DIR}):\n{}",
            problems.join("\n")
        );
    }
}

/// Listening sockets on port 80, any address (`ss`).
fn listening_on_80() -> Vec<String> {
    ss(&["-Hltn", "sport = :80"])
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// Processes running /usr/sbin/nginx.
fn system_nginx_pids() -> BTreeSet<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return BTreeSet::new();
    };
    dir.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let exe = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
        exe.to_str()?.starts_with(NGINX).then_some(pid)
    })
    .collect()
}

// --- the package -----------------------------------------------------------------

/// `scripts/package --like /usr/sbin/nginx ARGS`: the .deb it printed last.
fn build_package(args: &[&str]) -> PathBuf {
    let mut c = Command::new(workspace_root().join("scripts/package"));
    c.args(["--like", NGINX]).args(args).env("LINTIAN", "1");
    c.current_dir(workspace_root());
    // Nothing of this test's own build: the nested cargo builds for the
    // tree scripts/build configures like the binary, and .cargo/config.toml
    // sets NGINX_SOURCE_DIR for the default one (scripts/build reads it).
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if (k.starts_with("CARGO_") && k != "CARGO_HOME") || k.starts_with("NGINX_") {
            c.env_remove(k);
        }
    }
    let what = format!("scripts/package --like {NGINX} {}", args.join(" "));
    let r = run_ok(&what, &mut c, PACKAGE_TIMEOUT);
    let deb = PathBuf::from(r.stdout.lines().last().unwrap_or_default());
    assert!(
        deb.is_file() && deb.extension().is_some_and(|e| e == "deb"),
        "{what}: the last line is not a .deb:\n{}",
        r.all
    );
    assert!(
        r.all.contains("==> lintian "),
        "{what} ran no lintian:\n{}",
        r.all
    );
    deb
}

/// The module's version in the workspace's Cargo.toml ([package] version).
fn cargo_version() -> String {
    let toml = fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap();
    toml.lines()
        .skip_while(|l| l.trim() != "[package]")
        .find_map(|l| l.trim().strip_prefix("version = \"")?.strip_suffix('"'))
        .expect("version in Cargo.toml's [package]")
        .to_string()
}

fn field(deb: &Path, name: &str) -> String {
    let deb = deb.to_str().unwrap();
    run_ok(
        "dpkg-deb -f",
        &mut cmd("dpkg-deb", &["-f", deb, name]),
        TOOL_TIMEOUT,
    )
    .stdout
    .trim()
    .to_string()
}

/// The control fields, files, ownership, modes and maintainer scripts of
/// the package, as Debian lays out its module packages.
fn check_layout(deb: &Path, abi: &str) {
    let arch = run_ok(
        "dpkg --print-architecture",
        &mut cmd("dpkg", &["--print-architecture"]),
        TOOL_TIMEOUT,
    );
    assert_eq!(field(deb, "Package"), PACKAGE);
    assert_eq!(field(deb, "Version"), format!("{}-1", cargo_version()));
    assert_eq!(field(deb, "Architecture"), arch.stdout.trim());
    let depends = field(deb, "Depends");
    assert!(
        depends.starts_with(&format!("{abi}, ")) && depends.contains("libc6 (>= "),
        "Depends: {depends} (want {abi} and dpkg-shlibdeps' libc6 first)"
    );
    assert_eq!(field(deb, "Recommends"), "nginx");

    let listing = run_ok(
        "dpkg-deb -c",
        &mut cmd("dpkg-deb", &["-c", deb.to_str().unwrap()]),
        TOOL_TIMEOUT,
    );
    let mut files = BTreeSet::new();
    for line in listing.stdout.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert!(f.len() >= 6, "dpkg-deb -c line: {line}");
        let (mode, owner, path) = (f[0], f[1], f[5].trim_start_matches('.'));
        assert_eq!(owner, "root/root", "{line}");
        match mode.chars().next() {
            Some('d') => assert_eq!(mode, "drwxr-xr-x", "{line}"),
            Some('-') => {
                assert_eq!(mode, "-rw-r--r--", "{line}");
                files.insert(path.to_string());
            }
            _ => panic!("neither a file nor a directory: {line}"),
        }
    }
    let doc = format!("/usr/share/doc/{PACKAGE}");
    let want: BTreeSet<String> = [
        MODULE.to_string(),
        AVAILABLE.to_string(),
        format!("{doc}/copyright"),
        format!("{doc}/changelog.Debian.gz"),
        format!("{doc}/changelog.gz"),
    ]
    .into();
    assert_eq!(files, want, "the package's files");

    let ctl = std::env::temp_dir().join(format!("hc-debian-package-ctl-{}", std::process::id()));
    let _ = fs::remove_dir_all(&ctl);
    run_ok(
        "dpkg-deb -e",
        &mut cmd(
            "dpkg-deb",
            &["-e", deb.to_str().unwrap(), ctl.to_str().unwrap()],
        ),
        TOOL_TIMEOUT,
    );
    for (name, mode) in [
        ("control", 0o644),
        ("md5sums", 0o644),
        ("postinst", 0o755),
        ("prerm", 0o755),
        ("postrm", 0o755),
    ] {
        let p = ctl.join(name);
        let m = fs::metadata(&p).unwrap_or_else(|e| panic!("DEBIAN/{name}: {e}"));
        assert_eq!(
            m.permissions().mode() & 0o7777,
            mode,
            "DEBIAN/{name}'s mode"
        );
        if mode == 0o755 {
            let text = fs::read_to_string(&p).unwrap();
            assert!(text.starts_with("#!/bin/sh\n"), "DEBIAN/{name}: {text}");
            assert!(text.lines().any(|l| l == "set -e"), "DEBIAN/{name}: {text}");
            // dash: Debian's /bin/sh, POSIX and no more.
            run_ok(
                &format!("dash -n DEBIAN/{name}"),
                &mut cmd("dash", &["-n", p.to_str().unwrap()]),
                TOOL_TIMEOUT,
            );
        }
    }
    let md5sums = fs::read_to_string(ctl.join("md5sums")).unwrap();
    assert_eq!(md5sums.lines().count(), want.len(), "md5sums:\n{md5sums}");
    let _ = fs::remove_dir_all(&ctl);
}

/// Every path `dpkg -L` listed is gone, but directories that another
/// package still owns.
fn assert_all_gone(listed: &[String], when: &str) {
    for p in listed {
        let Ok(m) = fs::symlink_metadata(p) else {
            continue;
        };
        let shared = m.is_dir()
            && run(
                "dpkg-query -S",
                &mut cmd("dpkg-query", &["-S", p]),
                TOOL_TIMEOUT,
            )
            .ok();
        assert!(shared, "{when}: {p} is still there");
    }
}

fn dpkg_list(package: &str) -> Vec<String> {
    let r = run_ok(
        "dpkg -L",
        &mut cmd("dpkg-query", &["-L", package]),
        TOOL_TIMEOUT,
    );
    r.stdout
        .lines()
        .filter(|l| l.starts_with('/') && *l != "/.")
        .map(str::to_string)
        .collect()
}

// --- the nginx of the test ---------------------------------------------------------

/// Debian's binary has /var/lib/nginx compiled in for its temporary files.
const TEMP_PATHS: &str = "client_body_temp_path logs/body; proxy_temp_path logs/proxy; \
     fastcgi_temp_path logs/fastcgi; uwsgi_temp_path logs/uwsgi; scgi_temp_path logs/scgi;";

/// /usr/sbin/nginx loading its modules as Debian's nginx.conf does (the
/// include first), a prefix whose `modules` is Debian's, an http and a
/// stream upstream of a live and a dead backend checked every 100 ms.
fn serve_through_modules_enabled() {
    let live = Backend::start();
    let dead = Backend::with_mode(Mode::Refuse);
    let (http_port, stream_port) = (free_port(), free_port());
    let ng = Nginx::builder()
        .binary(NGINX)
        .without_module()
        .main_first("include /etc/nginx/modules-enabled/*.conf;")
        .prefix_link("modules", "/usr/share/nginx/modules")
        .start(&format!(
            "http {{
    {TEMP_PATHS}
    access_log off;
    upstream web {{
        server {live};
        server {dead};
        check interval=100 rise=1 fall=1;
    }}
    server {{
        listen 127.0.0.1:{http_port};
        location / {{ proxy_pass http://web; proxy_next_upstream off; }}
        location /status {{ healthcheck_status json; }}
    }}
}}
stream {{
    upstream tcp {{
        server {live};
        server {dead};
        check interval=100 rise=1 fall=1;
    }}
    server {{
        listen 127.0.0.1:{stream_port};
        proxy_pass tcp;
        proxy_next_upstream off;
    }}
}}",
            live = live.addr(),
            dead = dead.addr()
        ));
    assert!(ng.log_contains(MODULE_NOTICE), "{}", ng.log());
    // rise=1 fall=1 at 100 ms: a round or two; 10 s is for a loaded CI box.
    let s = poll_status_json(http_port, Duration::from_secs(10), "dead peers down", |s| {
        s.is_down(Kind::Http, "web", &dead.addr())
            && s.is_up(Kind::Http, "web", &live.addr())
            && s.is_down(Kind::Stream, "tcp", &dead.addr())
            && s.is_up(Kind::Stream, "tcp", &live.addr())
    });
    assert_eq!((s.up(), s.down()), (Some(2), Some(2)), "{s}");
    assert!(s.checks(Kind::Stream, "tcp", &dead.addr()) > 0, "{s}");
    // With proxy_next_upstream off, a request given to the dead peer would
    // fail: every one is the live backend's.
    for i in 0..10 {
        let r = http_get(http_port, "/").expect("proxied request");
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        assert_eq!(r.text(), live.port().to_string(), "request {i}");
        let reply = stream_roundtrip(stream_port, b"hello\n").expect("stream round trip");
        assert_eq!(reply, live.port().to_string().as_bytes(), "session {i}");
    }
    // Dropping nginx fails the test on any [alert] (such as a stream zone
    // without slots, had the module loaded before the stream module).
    drop(ng);
}

// --- the test ----------------------------------------------------------------------

#[test]
#[ignore = "installs Debian packages on this machine (root): scripts/test runs it"]
fn debian_package_installs_serves_and_removes_cleanly() {
    let start = Instant::now();
    assert_eq!(
        // SAFETY: geteuid(2) has no preconditions.
        unsafe { libc::geteuid() },
        0,
        "run as root (scripts/test does)"
    );
    let _turn = take_turn();
    let port_80_before = listening_on_80();
    let nginx_before = system_nginx_pids();

    let mut machine = Machine::prepare();
    machine.install_system_packages();
    assert!(
        Path::new(NGINX).is_file(),
        "no {NGINX} after installing nginx"
    );
    let provides = run_ok(
        "dpkg-query Provides",
        &mut cmd("dpkg-query", &["-W", "-f=${Provides}", "nginx"]),
        TOOL_TIMEOUT,
    )
    .stdout;
    let abi = provides
        .split(',')
        .map(str::trim)
        .find(|p| p.starts_with("nginx-abi-"))
        .unwrap_or_else(|| panic!("Debian's nginx provides no nginx-abi-*: {provides}"))
        .to_string();
    assert_ne!(abi, OTHER_ABI);
    for p in [MODULE, AVAILABLE, LINK, LINK_REMOVED] {
        assert!(!exists(p), "{p} is there before the package is");
    }
    let out = system_nginx_t();
    assert!(
        !out.contains(MODULE_NOTICE),
        "the module loads without the package:\n{out}"
    );

    // Build both packages first: the second only changes Depends.
    let deb = build_package(&[]);
    check_layout(&deb, &abi);
    let other = build_package(&["--abi", OTHER_ABI]);
    assert_ne!(deb, other);
    check_layout(&other, OTHER_ABI);

    // Install: enabled through modules-enabled, after the stream module.
    let r = dpkg(&["-i", deb.to_str().unwrap()]);
    assert!(r.ok(), "dpkg -i: {}", r.all);
    assert_eq!(state(PACKAGE), "installed");
    assert_eq!(
        fs::read_link(LINK).ok(),
        Some(PathBuf::from(AVAILABLE)),
        "{LINK}"
    );
    assert_eq!(
        fs::read_to_string(AVAILABLE).unwrap(),
        "load_module modules/ngx_healthcheck_module.so;\n"
    );
    assert!(
        STREAM_LINK < LINK && exists(STREAM_LINK),
        "{STREAM_LINK} must sort first"
    );
    assert_eq!(
        fs::canonicalize("/usr/share/nginx/modules/ngx_healthcheck_module.so").ok(),
        Some(PathBuf::from(MODULE)),
        "nginx's modules/ must resolve to the .so"
    );
    let verify = dpkg(&["--verify", PACKAGE]);
    assert!(
        verify.ok() && verify.all.trim().is_empty(),
        "dpkg --verify: {}",
        verify.all
    );
    let out = system_nginx_t();
    assert!(
        out.contains(MODULE_NOTICE),
        "nginx -t did not load the module:\n{out}"
    );
    let dump = run_ok("nginx -T", &mut cmd(NGINX, &["-T"]), TOOL_TIMEOUT).stdout;
    assert!(
        dump.contains(&format!("# configuration file {LINK}:"))
            && dump.contains("load_module modules/ngx_healthcheck_module.so;"),
        "nginx -T does not show {LINK}"
    );

    serve_through_modules_enabled();

    // Installing again (an upgrade to the same version) keeps the link; an
    // admin's removal of the link survives it, as with Debian's modules.
    let r = dpkg(&["-i", deb.to_str().unwrap()]);
    assert!(r.ok(), "dpkg -i again: {}", r.all);
    assert!(exists(LINK) && !exists(LINK_REMOVED), "after a reinstall");
    fs::remove_file(LINK).unwrap();
    let r = dpkg(&["-i", deb.to_str().unwrap()]);
    assert!(r.ok(), "dpkg -i after the admin's removal: {}", r.all);
    assert!(
        !exists(LINK),
        "an upgrade re-enabled a module the admin disabled"
    );
    std::os::unix::fs::symlink(AVAILABLE, LINK).unwrap();

    // Remove: every file gone; the link moved aside as Debian's modules do
    // (LINK.removed, which `*.conf` does not match), so that a reinstall
    // enables it again.
    let listed = dpkg_list(PACKAGE);
    assert!(listed.iter().any(|p| p == MODULE), "dpkg -L: {listed:?}");
    let r = dpkg(&["-r", PACKAGE]);
    assert!(r.ok(), "dpkg -r: {}", r.all);
    assert_all_gone(&listed, "after dpkg -r");
    assert!(!exists(LINK), "{LINK} left after dpkg -r");
    assert!(
        fs::read_link(LINK_REMOVED).is_ok(),
        "no {LINK_REMOVED} after dpkg -r"
    );
    let out = system_nginx_t();
    assert!(
        !out.contains(MODULE_NOTICE),
        "nginx still loads the module:\n{out}"
    );

    let r = dpkg(&["-i", deb.to_str().unwrap()]);
    assert!(r.ok(), "dpkg -i after dpkg -r: {}", r.all);
    assert!(
        exists(LINK) && !exists(LINK_REMOVED),
        "a reinstall after a remove"
    );

    // Purge: nothing left, the moved link neither.
    let r = dpkg(&["-P", PACKAGE]);
    assert!(r.ok(), "dpkg -P: {}", r.all);
    assert_eq!(state(PACKAGE), "not-installed");
    assert_all_gone(&listed, "after dpkg -P");
    assert!(
        !exists(LINK) && !exists(LINK_REMOVED),
        "a link left after dpkg -P"
    );
    system_nginx_t();

    // Another ABI: apt refuses it before unpacking anything; dpkg -i
    // unpacks it but, its Depends unmet, configures nothing: the module is
    // not enabled and nginx does not load it (docs/packaging.md).
    let other_path = other.to_str().unwrap();
    let r = run(
        "apt-get install ./deb",
        &mut apt_get(&["install", other_path]),
        APT_TIMEOUT,
    );
    assert!(
        !r.ok(),
        "apt-get installed a package for {OTHER_ABI}:\n{}",
        r.all
    );
    assert!(
        r.all.contains(&format!("Depends: {OTHER_ABI}")),
        "{}",
        r.all
    );
    assert_eq!(state(PACKAGE), "not-installed");
    assert!(!exists(MODULE), "apt-get unpacked {MODULE}");

    let r = dpkg(&["-i", other_path]);
    assert!(
        !r.ok(),
        "dpkg -i accepted a package for {OTHER_ABI}:\n{}",
        r.all
    );
    assert!(
        r.all.contains("dependency problems") && r.all.contains(OTHER_ABI),
        "dpkg -i: {}",
        r.all
    );
    assert_ne!(state(PACKAGE), "installed");
    assert!(
        !exists(LINK) && !exists(LINK_REMOVED),
        "postinst ran for {OTHER_ABI}"
    );
    let out = system_nginx_t();
    assert!(
        !out.contains(MODULE_NOTICE),
        "nginx loads the {OTHER_ABI} module:\n{out}"
    );
    let listed = dpkg_list(PACKAGE);
    let r = dpkg(&["-P", PACKAGE]);
    assert!(r.ok(), "dpkg -P of the unconfigured package: {}", r.all);
    assert_eq!(state(PACKAGE), "not-installed");
    assert_all_gone(&listed, "after dpkg -P of the unconfigured package");

    // The machine as it was: no nginx service started, nothing new on 80.
    let installed_here = fs::read_to_string(state_file("installed")).unwrap_or_default();
    machine.restore();
    for p in installed_here.lines().filter(|p| !p.is_empty()) {
        assert_eq!(
            state(p),
            "not-installed",
            "{p}, installed by the test, is left"
        );
    }
    if installed_here.lines().any(|p| p == "nginx") {
        assert!(!exists(NGINX), "{NGINX} left");
    }
    assert!(!Path::new(STATE_DIR).exists(), "{STATE_DIR} left");
    let new_nginx: Vec<u32> = system_nginx_pids()
        .difference(&nginx_before)
        .copied()
        .collect();
    assert!(
        new_nginx.is_empty(),
        "nginx processes left running: {new_nginx:?}"
    );
    assert_eq!(listening_on_80(), port_80_before, "port 80");
    eprintln!("debian_package: {:.1} s", start.elapsed().as_secs_f64());
}
