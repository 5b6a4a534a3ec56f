//! The module in Debian 12's own nginx (1.22.1, built `--with-compat` and
//! `--with-stream=dynamic`; its stream module is the separate package
//! libnginx-mod-stream), built for that binary with `scripts/build --like`
//! (docs/stock-mode.md, Building for an installed nginx).
//!
//! Needs `scripts/debian-nginx` (the three packages unpacked under
//! build/debian-nginx/, no service installed) and
//! `scripts/build --like build/debian-nginx/root/usr/sbin/nginx`; scripts/test
//! runs both. `NGINX_DEBIAN_BIN`, `NGINX_DEBIAN_STREAM_MODULE` and
//! `NGINX_DEBIAN_MODULE` override the paths.
//!
//! Debian's nginx has no balancer hook patch, so everything past loading
//! runs the module in stock mode (docs/stock-mode.md).

use std::path::PathBuf;
use std::time::Duration;

use healthcheck_t::paths::workspace_root;
use healthcheck_t::{
    free_port, http_get, poll_status_json, stream_roundtrip, Backend, Builder, Kind, Mode, Nginx,
};

fn path(env: &str, default: &str, what: &str) -> PathBuf {
    let p = std::env::var_os(env)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(default));
    assert!(
        p.is_file(),
        "{what} not found at {} (set {env}): run scripts/debian-nginx and \
         scripts/build --like build/debian-nginx/root/usr/sbin/nginx",
        p.display()
    );
    p
}

fn debian_bin() -> PathBuf {
    path(
        "NGINX_DEBIAN_BIN",
        "build/debian-nginx/root/usr/sbin/nginx",
        "Debian's nginx",
    )
}

fn debian_stream_module() -> PathBuf {
    path(
        "NGINX_DEBIAN_STREAM_MODULE",
        "build/debian-nginx/root/usr/lib/nginx/modules/ngx_stream_module.so",
        "Debian's ngx_stream_module.so",
    )
}

fn like_module() -> PathBuf {
    path(
        "NGINX_DEBIAN_MODULE",
        "build/like-1.22.1/modules/ngx_healthcheck_module.so",
        "the module built --like Debian's nginx",
    )
}

/// Debian's nginx with the module built for it (and nothing else loaded).
fn debian() -> Builder {
    Nginx::builder().binary(debian_bin()).module(like_module())
}

/// Debian's binary has /var/lib/nginx compiled in for its temporary files;
/// a test prefix keeps them in its logs/ (the one directory it has: nginx
/// creates only the last path component).
const TEMP_PATHS: &str = "client_body_temp_path logs/body; proxy_temp_path logs/proxy; \
     fastcgi_temp_path logs/fastcgi; uwsgi_temp_path logs/uwsgi; scgi_temp_path logs/scgi;";

fn http_block(port: u16, live: &Backend, dead: &Backend) -> String {
    format!(
        "http {{
    {TEMP_PATHS}
    access_log off;
    upstream web {{
        server {live};
        server {dead};
        check interval=100 rise=1 fall=1;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{ proxy_pass http://web; proxy_next_upstream off; }}
        location /status {{ healthcheck_status json; }}
    }}
}}",
        live = live.addr(),
        dead = dead.addr()
    )
}

#[test]
fn debian_nginx_is_the_one_the_module_was_built_like() {
    let out = std::process::Command::new(debian_bin())
        .arg("-V")
        .output()
        .expect("run nginx -V");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("nginx version: nginx/1.22.1"), "{text}");
    assert!(text.contains("--with-compat"), "{text}");
    assert!(text.contains("--with-stream=dynamic"), "{text}");
}

// `load_module` alone: nginx checks the module's signature against its own
// (binary compatibility) and resolves every symbol the .so needs, with no
// stream module loaded.
#[test]
fn debian_nginx_loads_the_module_without_its_stream_module() {
    let (code, out) = debian().test_config("");
    assert_eq!(code, 0, "nginx -t must accept the module:\n{out}");
    assert!(out.contains("test is successful"), "{out}");

    // Without ngx_stream_module.so there is no stream {} at all: the
    // operator sees nginx's own message, nothing of the module's.
    let (code, out) = debian().test_config("stream { }");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("unknown directive \"stream\""), "{out}");

    // Loaded after stream (README.md's two load_module lines), as well.
    let (code, out) = debian().load_first(debian_stream_module()).test_config("");
    assert_eq!(code, 0, "stream first, then the module:\n{out}");
}

#[test]
fn debian_nginx_accepts_checked_http_upstreams_without_stream() {
    let (code, out) = debian().test_config(&format!(
        "http {{ {TEMP_PATHS}
            upstream u {{ server 127.0.0.1:1; check interval=1000 type=http; }} }}"
    ));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("test is successful"), "{out}");
}

#[test]
fn debian_nginx_shows_a_dead_http_backend_down() {
    let live = Backend::start();
    let dead = Backend::with_mode(Mode::Refuse);
    let port = free_port();
    let _ng = debian().start(&http_block(port, &live, &dead));
    // rise=1 fall=1 at 100 ms: a round or two; 10 s is for a loaded CI box.
    let s = poll_status_json(port, Duration::from_secs(10), "dead peer down", |s| {
        s.is_down(Kind::Http, "web", &dead.addr()) && s.is_up(Kind::Http, "web", &live.addr())
    });
    assert_eq!((s.up(), s.down()), (Some(1), Some(1)), "{s}");
}

// SELECTION (stock mode): Debian's nginx has no hook patch, so only stock
// mode's `peer->down` keeps requests off the dead peer.
#[test]
fn debian_nginx_sends_no_request_to_a_checked_down_backend() {
    let live = Backend::start();
    let dead = Backend::with_mode(Mode::Refuse);
    let port = free_port();
    let _ng = debian().start(&http_block(port, &live, &dead));
    poll_status_json(port, Duration::from_secs(10), "dead peer down", |s| {
        s.is_down(Kind::Http, "web", &dead.addr())
    });
    // With proxy_next_upstream off, a request round robin gave the dead
    // peer would fail with 502: all 20 are the live backend's.
    for i in 0..20 {
        let r = http_get(port, "/").expect("proxied request");
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        assert_eq!(r.text(), live.port().to_string(), "request {i}");
    }
}

#[test]
fn debian_nginx_checks_stream_upstreams_with_its_stream_module_loaded_first() {
    let live = Backend::start();
    let dead = Backend::with_mode(Mode::Refuse);
    let (http_port, stream_port) = (free_port(), free_port());
    let _ng = debian().load_first(debian_stream_module()).start(&format!(
        "http {{
    {TEMP_PATHS}
    access_log off;
    server {{
        listen 127.0.0.1:{http_port};
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
    poll_status_json(
        http_port,
        Duration::from_secs(10),
        "dead stream peer down",
        |s| {
            s.is_down(Kind::Stream, "tcp", &dead.addr())
                && s.is_up(Kind::Stream, "tcp", &live.addr())
        },
    );
    // SELECTION (stock mode), as for http.
    for i in 0..10 {
        let reply = stream_roundtrip(stream_port, b"hello\n").expect("stream round trip");
        assert_eq!(reply, live.port().to_string().as_bytes(), "session {i}");
    }
}
