//! `check_state_file` (docs/directives.md, check_state_file): peers start as they were
//! after a restart and a binary upgrade (`USR2`); a missing, truncated,
//! foreign or hostile file is a `[warn]` and nginx starts as configured;
//! an unwritable path or a full disk is a `[warn]` and nginx goes on.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use healthcheck_t::paths::{module_path, nginx_bin};
use healthcheck_t::process::{children, is_alive, signal, title};
use healthcheck_t::wait::try_wait_until;
use healthcheck_t::{
    assert_holds, free_port, http_get, http_request, poll_status_json, status_json, wait_for,
    wait_until, Backend, Kind, Nginx, Status,
};

/// Long enough that no round flips a peer during a test step (rise 10).
const INTERVAL: u64 = 1000;
const DEADLINE: Duration = Duration::from_secs(15);
/// A change is written within a tick (500 ms); generous for a loaded CI.
const WRITE_DEADLINE: Duration = Duration::from_secs(5);

/// A fresh directory for state files, outside every nginx prefix (a
/// restart is a new prefix); removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new() -> Dir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "hc-state-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        // nginx's workers (user nobody when the tests run as root) write it.
        fs::set_permissions(&p, fs::Permissions::from_mode(0o777)).unwrap();
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).output();
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn conf(
    port: u16,
    sport: u16,
    b1: &Backend,
    b2: &Backend,
    http_file: &Path,
    stream_file: &Path,
) -> String {
    let check = format!("check interval={INTERVAL} rise=10 fall=1 timeout=500;");
    format!(
        "http {{
    access_log off;
    check_state_file {h};
    upstream web {{ server {a}; server {b}; {check} }}
    server {{
        listen 127.0.0.1:{port};
        location / {{ proxy_pass http://web; }}
        location /admin {{ healthcheck_admin; }}
        location /status {{ healthcheck_status json; }}
    }}
}}
stream {{
    check_state_file {s};
    upstream tcp {{ server {a}; server {b}; {check} }}
    server {{ listen 127.0.0.1:{sport}; proxy_pass tcp; }}
}}",
        h = http_file.display(),
        s = stream_file.display(),
        a = b1.addr(),
        b = b2.addr(),
    )
}

fn post(port: u16, q: &str) {
    let r = http_request(port, "POST", &format!("/admin?{q}"), &[], b"").unwrap();
    assert_eq!(r.status, 200, "{q}: {}", r.text());
}

/// The peer lines of a state file: (group, up, admin, name).
fn saved(path: &Path) -> Vec<(String, String, String, String)> {
    let text = fs::read_to_string(path).unwrap_or_default();
    if !text.ends_with("\n") || !text.lines().any(|l| l.starts_with("end ")) {
        return Vec::new();
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("peer "))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].into(), f[2].into(), f[3].into(), f[8].into())
        })
        .collect()
}

/// Disable b1 and set b2 down in both contexts; wait until both files say so.
fn change_and_wait_saved(port: u16, a: &str, b: &str, files: [&Path; 2]) {
    post(port, &format!("upstream=web&peer={a}&action=disable"));
    post(port, &format!("upstream=web&peer={b}&action=down"));
    post(port, &format!("upstream=tcp&peer={a}&action=disable"));
    post(port, &format!("upstream=tcp&peer={b}&action=down"));
    // Written within about a second of the change (a tick is 500 ms).
    for (file, group) in files.iter().zip(["http", "stream"]) {
        wait_until(
            Duration::from_secs(3),
            format!("{group} state saved"),
            || {
                let s = saved(file);
                s.contains(&(group.into(), "1".into(), "1".into(), a.into()))
                    && s.contains(&(group.into(), "0".into(), "0".into(), b.into()))
            },
        );
    }
}

/// b1 disabled (and up), b2 down, in both contexts.
fn as_saved(s: &Status, a: &str, b: &str) -> bool {
    [(Kind::Http, "web"), (Kind::Stream, "tcp")]
        .iter()
        .all(|&(k, u)| {
            s.row(k, u, a)["admin"] == "disabled"
                && s.is_up(k, u, a)
                && s.is_down(k, u, b)
                && s.row(k, u, b)["admin"].is_null()
        })
}

#[test]
fn restart_keeps_disabled_and_down_peers() {
    let (b1, b2) = (Backend::start(), Backend::start());
    let (a, b) = (b1.addr(), b2.addr());
    let dir = Dir::new();
    let (hf, sf) = (dir.0.join("http.state"), dir.0.join("stream.state"));
    let (port, sport) = (free_port(), free_port());
    let body = conf(port, sport, &b1, &b2, &hf, &sf);
    let mut ng = Nginx::start(&body);
    // First start: no file yet, a warn, peers as configured (up).
    assert!(ng.log_contains("[warn]"));
    assert!(ng.log_contains(&format!("check_state_file \"{}\" not read", hf.display())));
    poll_status_json(port, DEADLINE, "checked and up", |s| {
        s.is_up(Kind::Http, "web", &b) && s.checks(Kind::Http, "web", &b) > 0
    });
    change_and_wait_saved(port, &a, &b, [&hf, &sf]);
    let down_since = status_json(port)
        .unwrap()
        .int(Kind::Http, "web", &b, "down_since");
    ng.quit();
    assert!(
        !hf.with_extension("state.tmp").exists(),
        "no temporary file left"
    );

    // Restart (a new prefix, the same files): peers start as saved,
    // before any round could have changed them (rise=10 at 1 s).
    let ng = Nginx::start(&body);
    let s = status_json(port).unwrap();
    assert!(as_saved(&s, &a, &b), "{s}");
    assert_eq!(s.int(Kind::Http, "web", &b, "down_since"), down_since);
    for g in ["http", "stream"] {
        ng.wait_for_log(&format!("2 of 2 {g} peers start as saved"), DEADLINE);
    }
    // The disabled peer gets no traffic; the down one neither: 502.
    let r = http_get(port, "/").unwrap();
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(b1.requests() + b2.requests(), 0);
    // After a reload the new worker 0 takes over the file once the old
    // one exits: a later change is saved.
    let mut ng = ng;
    let old = ng.workers();
    ng.reload();
    ng.wait_workers_gone(&old, DEADLINE);
    post(port, &format!("upstream=web&peer={a}&action=enable"));
    wait_until(WRITE_DEADLINE, "the new worker 0 writes", || {
        saved(&hf).contains(&("http".into(), "1".into(), "0".into(), a.clone()))
    });
    drop(ng);
}

/// A daemonized nginx, run without the harness: nginx ignores `USR2` in a
/// master whose parent is the one it started with, which a harness nginx
/// (`daemon off`, a child of the test) always is. Stopped (every master
/// its pid files name, with SIGQUIT) when dropped; its error log must have
/// no `[alert]`, `[crit]` or `[emerg]`.
struct Daemon {
    prefix: Dir,
}

impl Daemon {
    fn start(body: &str) -> Daemon {
        let prefix = Dir::new();
        fs::create_dir_all(prefix.0.join("logs")).unwrap();
        let conf = prefix.0.join("nginx.conf");
        fs::write(&conf, Daemon::render(body)).unwrap();
        let out = Command::new(nginx_bin())
            .arg("-p")
            .arg(format!("{}/", prefix.0.display()))
            .arg("-c")
            .arg(&conf)
            .args(["-e", "logs/error.log"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let d = Daemon { prefix };
        wait_until(DEADLINE, "the pid file", || {
            d.pid_file("nginx.pid").is_some()
        });
        d
    }

    fn render(body: &str) -> String {
        format!(
            "load_module {};\ndaemon on;\nmaster_process on;\nworker_processes 1;\n\
             pid logs/nginx.pid;\nerror_log logs/error.log info;\n\
             events {{ worker_connections 1024; }}\n{body}\n",
            module_path().display()
        )
    }

    fn write_conf(&self, body: &str) {
        fs::write(self.prefix.0.join("nginx.conf"), Daemon::render(body)).unwrap();
    }

    fn pid_file(&self, name: &str) -> Option<u32> {
        fs::read_to_string(self.prefix.0.join("logs").join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn log(&self) -> String {
        fs::read_to_string(self.prefix.0.join("logs/error.log")).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        for name in ["nginx.pid.oldbin", "nginx.pid"] {
            if let Some(pid) = self.pid_file(name) {
                let _ = signal(pid, libc::SIGQUIT);
                if !try_wait_until(DEADLINE, || !is_alive(pid)) {
                    let _ = signal(pid, libc::SIGKILL);
                }
            }
        }
        if !std::thread::panicking() {
            let log = self.log();
            let bad: Vec<&str> = log
                .lines()
                .filter(|l| {
                    ["[alert]", "[crit]", "[emerg]"]
                        .iter()
                        .any(|b| l.contains(b))
                })
                .collect();
            assert!(bad.is_empty(), "{bad:?}");
        } else {
            eprintln!("--- error.log ---\n{}", self.log());
        }
    }
}

fn workers_of(master: u32) -> Vec<u32> {
    children(master)
        .into_iter()
        .filter(|&p| title(p).is_some_and(|t| t.contains("worker process")))
        .collect()
}

#[test]
fn binary_upgrade_keeps_disabled_and_down_peers() {
    let (b1, b2) = (Backend::start(), Backend::start());
    let (a, b) = (b1.addr(), b2.addr());
    let dir = Dir::new();
    let (hf, sf) = (dir.0.join("http.state"), dir.0.join("stream.state"));
    let (port, sport, port2) = (free_port(), free_port(), free_port());
    let body = conf(port, sport, &b1, &b2, &hf, &sf);
    let ng = Daemon::start(&body);
    let old = ng.pid_file("nginx.pid").unwrap();
    poll_status_json(port, DEADLINE, "checked", |s| {
        s.checks(Kind::Http, "web", &b) > 0
    });
    change_and_wait_saved(port, &a, &b, [&hf, &sf]);

    // USR2: the old master execs the binary again with nginx.conf, which
    // now also listens on port2: only the new binary's workers answer
    // there. The new master reads the files into its fresh zones.
    let listen = format!("listen 127.0.0.1:{port};");
    ng.write_conf(&body.replacen(&listen, &format!("{listen} listen 127.0.0.1:{port2};"), 1));
    signal(old, libc::SIGUSR2).unwrap();
    let new = wait_for(DEADLINE, "the new master's pid file", || {
        let new = ng.pid_file("nginx.pid")?;
        (ng.pid_file("nginx.pid.oldbin") == Some(old) && new != old).then_some(new)
    });
    wait_until(DEADLINE, "the new master's worker", || {
        !workers_of(new).is_empty()
    });
    let s = wait_for(DEADLINE, "the new binary's status page", || {
        status_json(port2).ok()
    });
    assert!(as_saved(&s, &a, &b), "the new binary's peers: {s}");
    for g in ["http", "stream"] {
        let starts = ng
            .log()
            .matches(&format!("2 of 2 {g} peers start as saved"))
            .count();
        assert_eq!(starts, 1, "{g}");
    }
    let r = http_get(port2, "/").unwrap();
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(b1.requests() + b2.requests(), 0);

    // The upgrade completes: the old master quits, its worker 0 writes a
    // last time and lets go of the file; the new worker 0 takes it over
    // and saves the next change.
    signal(old, libc::SIGQUIT).unwrap();
    wait_until(DEADLINE, "the old master exits", || !is_alive(old));
    post(port2, &format!("upstream=web&peer={a}&action=enable"));
    wait_until(WRITE_DEADLINE, "the new binary writes", || {
        saved(&hf).contains(&("http".into(), "1".into(), "0".into(), a.clone()))
    });
    drop(ng);
}

/// Start nginx on a state file holding `bytes`; it must say `warn_text`
/// at `[warn]` and start the peers as configured.
fn starts_as_configured(bytes: &[u8], warn_text: &str) {
    let (b1, b2) = (Backend::start(), Backend::start());
    let dir = Dir::new();
    let (hf, sf) = (dir.0.join("http.state"), dir.0.join("stream.state"));
    fs::write(&hf, bytes).unwrap();
    let (port, sport) = (free_port(), free_port());
    let ng = Nginx::start(&conf(port, sport, &b1, &b2, &hf, &sf));
    let line = ng
        .log_lines(&format!("check_state_file \"{}\"", hf.display()))
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no line for {warn_text}: {}", ng.log()));
    assert!(
        line.contains("[warn]") && line.contains(warn_text),
        "{line}"
    );
    assert!(line.contains("http peers start as configured"), "{line}");
    let s = status_json(port).unwrap();
    for p in s.peers(Kind::Http) {
        assert!(p["status"] == "up" && p["admin"].is_null(), "{p}");
    }
    // And it writes a good file in place of the bad one.
    wait_until(WRITE_DEADLINE, "a good file written", || {
        saved(&hf).len() == 2
    });
    drop(ng);
}

#[test]
fn corrupt_and_hostile_files_are_ignored() {
    let magic = "# nginx-healthcheck state v1\n";
    let line = "peer http 0123456789abcdef 0 1 1 1 web 127.0.0.1:1 127.0.0.1:1\n";
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            format!("{magic}{line}").into_bytes(),
            "truncated (no \"end\" line)",
        ),
        (format!("{magic}{}", &line[..30]).into_bytes(), "truncated"),
        (
            b"\x7fELF\x02\x01\x01\0\0\0\xff\xfe".to_vec(),
            "not a state file of this module",
        ),
        (
            b"server 10.0.0.1:80 down\n".to_vec(),
            "not a state file of this module",
        ),
        (Vec::new(), "not a state file of this module"),
        (
            format!("{magic}peer stream 0123456789abcdef 0 1 1 1 s a b\nend 1\n").into_bytes(),
            "a peer of the other context",
        ),
        (
            format!("{magic}peer http 0123456789abcdef 7 1 1 1 a b c\nend 1\n").into_bytes(),
            "line 2: bad up",
        ),
        (
            format!("{magic}#{}\nend 0\n", "x".repeat(20_000)).into_bytes(),
            "line too long",
        ),
    ];
    for (bytes, want) in &cases {
        starts_as_configured(bytes, want);
    }
    // A million lines: more than two peers can need, not even parsed.
    let mut huge = magic.as_bytes().to_vec();
    for _ in 0..1_000_000 {
        huge.extend_from_slice(line.as_bytes());
    }
    starts_as_configured(&huge, "larger than");
}

#[test]
fn unwritable_path_and_full_disk_are_logged_and_nginx_goes_on() {
    let (b1, b2) = (Backend::start(), Backend::start());
    let a = b1.addr();
    // A directory that does not exist.
    let dir = Dir::new();
    let missing = dir.0.join("no/such/dir/http.state");
    let (port, sport) = (free_port(), free_port());
    let ng = Nginx::start(&conf(
        port,
        sport,
        &b1,
        &b2,
        &missing,
        &dir.0.join("s.state"),
    ));
    let line = ng.wait_for_log(
        &format!("check_state_file \"{}\" not written", missing.display()),
        DEADLINE,
    );
    assert!(line.contains("[warn]"), "{line}");
    post(port, &format!("upstream=web&peer={a}&action=disable"));
    let r = http_get(port, "/").unwrap();
    assert_eq!((r.status, r.text()), (200, b2.port().to_string()));
    // Logged once, not every tick.
    let what = format!("check_state_file \"{}\" not written", missing.display());
    assert_holds(Duration::from_millis(1500), "one warn only", || {
        ng.log_lines(&what).len() == 1
    });
    drop(ng);

    // A full disk: a 64 KiB tmpfs, filled.
    let disk = Dir::new();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&disk.0)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("SKIPPED the full-disk half: cannot mount a tmpfs (needs root)");
        return;
    }
    fs::set_permissions(&disk.0, fs::Permissions::from_mode(0o777)).unwrap();
    let filler = disk.0.join("filler");
    let _ = fs::write(&filler, vec![0u8; 1 << 20]);
    let hf = disk.0.join("http.state");
    let (port, sport) = (free_port(), free_port());
    let ng = Nginx::start(&conf(port, sport, &b1, &b2, &hf, &dir.0.join("s2.state")));
    let line = ng.wait_for_log(
        &format!("check_state_file \"{}\" not written", hf.display()),
        DEADLINE,
    );
    assert!(
        line.contains("[warn]") && line.contains("No space left on device"),
        "{line}"
    );
    let r = http_get(port, "/").unwrap();
    assert_eq!(r.status, 200);
    // Room again: written within a tick or two, and said so.
    fs::remove_file(&filler).unwrap();
    ng.wait_for_log(
        &format!("check_state_file \"{}\" written again", hf.display()),
        DEADLINE,
    );
    assert_eq!(saved(&hf).len(), 2);
    drop(ng);
}
