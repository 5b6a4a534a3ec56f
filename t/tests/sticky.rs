//! nginx 1.29.6+ `sticky` and `drain` next to health checks (nginx 1.30;
//! patches/README.md): a session pinned to a peer the check found down
//! goes to another peer, and a draining peer keeps its sessions while its
//! check passes. On an older nginx (no `sticky`) the tests only say so.

use std::process::Command;
use std::time::Duration;

use healthcheck_t::paths::nginx_bin;
use healthcheck_t::{free_port, http_request, poll_status_json, Backend, Kind, Mode, Nginx};

/// rise=1 fall=1 at 100 ms: a state change within a round or two; the
/// deadline is for a loaded 2-core CI machine.
const SETTLE: Duration = Duration::from_secs(10);

/// Whether the nginx under test has `sticky` (1.29.6 and later).
fn has_sticky() -> bool {
    let out = Command::new(nginx_bin())
        .arg("-v")
        .output()
        .expect("run nginx -v");
    let text = String::from_utf8_lossy(&out.stderr);
    let version = text
        .trim()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .split('.')
        .map(|p| p.parse::<u64>().unwrap_or(0))
        .collect::<Vec<_>>();
    let has = version.as_slice() >= [1, 29, 6].as_slice();
    if !has {
        eprintln!("{}: no sticky before 1.29.6, nothing to test", text.trim());
    }
    has
}

/// `GET /st` with the session cookie `srv_id=sid`: (status, serving port).
fn get_with(port: u16, sid: &str) -> (u16, String) {
    let cookie = format!("srv_id={sid}");
    let r = http_request(port, "GET", "/st", &[("Cookie", &cookie)], b"").expect("request");
    (r.status, r.text())
}

fn conf(port: u16, a: &Backend, a_params: &str, b: &Backend) -> String {
    format!(
        "http {{
    access_log off;
    upstream st {{
        server {a} route=a {a_params};
        server {b} route=b;
        sticky cookie srv_id;
        check interval=100 rise=1 fall=1;
    }}
    server {{
        listen 127.0.0.1:{port};
        location /st {{ proxy_pass http://st; proxy_next_upstream off; }}
        location /status {{ healthcheck_status json; }}
        location /admin {{ healthcheck_admin; }}
    }}
}}",
        a = a.addr(),
        b = b.addr()
    )
}

// The session names peer a; once a's check fails, every request of that
// session goes to b, the first one included: without the hook in sticky's
// lookup nginx would pick a (not yet failed in its own accounting) and,
// with proxy_next_upstream off, answer 502.
#[test]
fn a_session_pinned_to_a_checked_down_peer_moves() {
    if !has_sticky() {
        return;
    }
    let (a, b) = (Backend::start(), Backend::start());
    let port = free_port();
    let _ng = Nginx::start(&conf(port, &a, "", &b));
    poll_status_json(port, SETTLE, "both peers up", |s| {
        s.is_up(Kind::Http, "st", &a.addr()) && s.is_up(Kind::Http, "st", &b.addr())
    });
    for i in 0..5 {
        assert_eq!(
            get_with(port, "a"),
            (200, a.port().to_string()),
            "pinned {i}"
        );
    }

    a.set_mode(Mode::Refuse);
    poll_status_json(port, SETTLE, "a down", |s| {
        s.is_down(Kind::Http, "st", &a.addr())
    });
    for i in 0..10 {
        assert_eq!(
            get_with(port, "a"),
            (200, b.port().to_string()),
            "request {i} of a's session after a was seen down"
        );
    }
}

// `drain`: nginx sends a draining peer only the sessions pinned to it. The
// hook must not change that while the check passes, and must stop those
// sessions too once it fails.
#[test]
fn a_draining_peer_keeps_its_sessions_until_its_check_fails() {
    if !has_sticky() {
        return;
    }
    let (a, b) = (Backend::start(), Backend::start());
    let port = free_port();
    let _ng = Nginx::start(&conf(port, &a, "drain", &b));
    poll_status_json(port, SETTLE, "both peers up", |s| {
        s.is_up(Kind::Http, "st", &a.addr()) && s.is_up(Kind::Http, "st", &b.addr())
    });
    for i in 0..5 {
        assert_eq!(
            get_with(port, "a"),
            (200, a.port().to_string()),
            "pinned {i}"
        );
        // A new session never lands on the draining peer.
        let r = http_request(port, "GET", "/st", &[], b"").expect("request");
        assert_eq!((r.status, r.text()), (200, b.port().to_string()), "new {i}");
    }

    a.set_mode(Mode::Refuse);
    poll_status_json(port, SETTLE, "a down", |s| {
        s.is_down(Kind::Http, "st", &a.addr())
    });
    for i in 0..10 {
        assert_eq!(
            get_with(port, "a"),
            (200, b.port().to_string()),
            "request {i} of the drained peer's session after it was seen down"
        );
    }
}

// Admin `drain` where nginx has its own drain: as the `drain` parameter,
// sessions pinned to the peer still reach it, new ones never do; `enable`
// ends it.
#[test]
fn an_admin_drained_peer_keeps_its_sticky_sessions() {
    if !has_sticky() {
        return;
    }
    let (a, b) = (Backend::start(), Backend::start());
    let port = free_port();
    let _ng = Nginx::start(&conf(port, &a, "", &b));
    poll_status_json(port, SETTLE, "both peers up", |s| {
        s.is_up(Kind::Http, "st", &a.addr()) && s.is_up(Kind::Http, "st", &b.addr())
    });
    let admin = |action: &str| {
        let path = format!("/admin?upstream=st&peer={}&action={action}", a.addr());
        let r = http_request(port, "POST", &path, &[], b"").expect("admin");
        assert_eq!(r.status, 200, "{action}: {}", r.text());
    };
    admin("drain");
    poll_status_json(port, SETTLE, "a draining", |s| {
        s.peer_status(Kind::Http, "st", &a.addr()) == Some("draining")
    });
    for i in 0..5 {
        let r = http_request(port, "GET", "/st", &[], b"").expect("request");
        assert_eq!((r.status, r.text()), (200, b.port().to_string()), "new {i}");
        assert_eq!(
            get_with(port, "a"),
            (200, a.port().to_string()),
            "pinned {i}"
        );
    }
    admin("enable");
    poll_status_json(port, SETTLE, "a up again", |s| {
        s.peer_status(Kind::Http, "st", &a.addr()) == Some("up")
    });
    // Every worker takes nginx's drain bit back within a tenth of a second.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        let r = http_request(port, "GET", "/st", &[], b"").expect("request");
        if r.text() == a.port().to_string() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no new session reached a within 3 s of enable"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
