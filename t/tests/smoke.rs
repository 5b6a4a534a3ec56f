//! Smoke test: nginx starts with the module loaded, proxies to a checked
//! upstream, answers on the status location, and quits cleanly.

use std::time::Duration;

use healthcheck_t::{
    free_port, http_get, poll_status_json, status_json, stream_roundtrip, Backend, Kind, Nginx,
};

fn http_conf(port: u16, backend: &Backend) -> String {
    format!(
        "http {{
    upstream web {{
        server {addr};
        check interval=100 rise=1 fall=1;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{ proxy_pass http://web; }}
        location /status {{ healthcheck_status json; }}
    }}
}}",
        addr = backend.addr()
    )
}

#[test]
fn starts_proxies_and_quits_cleanly() {
    let b = Backend::start();
    let port = free_port();
    let mut ng = Nginx::start(&http_conf(port, &b));

    let r = http_get(port, "/").expect("proxied request");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), b.port().to_string(), "served by the backend");

    let s = http_get(port, "/status").expect("status request");
    assert_eq!(s.status, 200, "status endpoint: {}", s.text());

    ng.quit();
    ng.check_log();
}

#[test]
fn stream_proxy_with_check() {
    let b = Backend::start();
    let (http_port, stream_port) = (free_port(), free_port());
    let mut ng = Nginx::start(&format!(
        "http {{
    server {{
        listen 127.0.0.1:{http_port};
        location /status {{ healthcheck_status json; }}
    }}
}}
stream {{
    upstream tcp_backends {{
        server {addr};
        check interval=100 rise=1 fall=1;
    }}
    server {{
        listen 127.0.0.1:{stream_port};
        proxy_pass tcp_backends;
    }}
}}",
        addr = b.addr()
    ));
    let reply = stream_roundtrip(stream_port, b"hello\n").expect("stream round trip");
    assert_eq!(
        reply,
        b.port().to_string().as_bytes(),
        "served by the backend"
    );
    assert_eq!(http_get(http_port, "/status").expect("status").status, 200);
    ng.quit();
}

// The status handler's JSON output (docs/status.md).
#[test]
fn status_json_shape() {
    let b = Backend::start();
    let port = free_port();
    let _ng = Nginx::start(&http_conf(port, &b));

    let r = http_get(port, "/status").expect("status request");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    let s = status_json(port).expect("status JSON");
    assert_eq!(s.total(), Some(1), "{s}");
    assert_eq!(s.generation(), Some(1), "{s}");
    assert!(s.peers(Kind::Stream).is_empty(), "{s}");
    let peer = s
        .peer(Kind::Http, "web", &b.addr())
        .unwrap_or_else(|| panic!("no row for web {}: {s}", b.addr()));
    assert_eq!(peer["index"], 0, "{s}");
    assert_eq!(peer["type"], "tcp", "{s}");
    assert_eq!(peer["port"], 0, "{s}");
    for field in [
        "rise",
        "fall",
        "last_delay_ms",
        "avg_delay_ms",
        "min_delay_ms",
        "max_delay_ms",
    ] {
        assert!(
            peer[field].is_i64(),
            "field {field} missing or not an integer: {s}"
        );
    }
    // default_down=false: up from the start, and a serving backend stays up.
    let s = poll_status_json(port, Duration::from_secs(5), "a successful round", |s| {
        s.get_int(Kind::Http, "web", &b.addr(), "rise") >= Some(1)
    });
    assert!(s.is_up(Kind::Http, "web", &b.addr()), "{s}");
    assert_eq!((s.up(), s.down()), (Some(1), Some(0)), "{s}");
    assert!(b.accepted() >= 1, "the backend saw no probe");
}

// TCP probes and the patched peer selection: a refused peer is marked down
// and not selected (502), then comes back.
#[test]
fn refusing_backend_goes_down_and_comes_back() {
    let b = Backend::start();
    let port = free_port();
    let _ng = Nginx::start(&http_conf(port, &b));
    let addr = b.addr();

    b.set_mode(healthcheck_t::Mode::Refuse);
    poll_status_json(port, Duration::from_secs(5), "peer down", |s| {
        s.is_down(Kind::Http, "web", &addr)
    });
    let r = http_get(port, "/").expect("request while down");
    assert_eq!(r.status, 502, "no live upstreams: {}", r.text());

    b.set_mode(healthcheck_t::Mode::Serve);
    poll_status_json(port, Duration::from_secs(5), "peer up again", |s| {
        s.is_up(Kind::Http, "web", &addr)
    });
    assert_eq!(
        http_get(port, "/").expect("request after recovery").text(),
        b.port().to_string()
    );
}

// The module must load into an nginx whose stream part is a module of its
// own (Debian's `--with-stream=dynamic`, without libnginx-mod-stream) or
// missing: `load_module` fails on any undefined symbol, so the .so may not
// need a single stream symbol from nginx (README.md, Stream as a dynamic module). The http symbols it needs are always in the binary.
#[test]
fn module_needs_no_stream_symbol_from_nginx() {
    let module = healthcheck_t::paths::module_path();
    let out = std::process::Command::new("nm")
        .args(["-D", "--undefined-only"])
        .arg(&module)
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "nm {}: {out:?}", module.display());
    let text = String::from_utf8_lossy(&out.stdout);
    let undefined: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    // The listing is real: the module does take http symbols from nginx.
    assert!(
        undefined.contains(&"ngx_http_upstream_module"),
        "nm output lacks ngx_http_upstream_module: is this the module?\n{text}"
    );
    let stream: Vec<&&str> = undefined
        .iter()
        .filter(|s| s.starts_with("ngx_stream_"))
        .collect();
    assert!(
        stream.is_empty(),
        "{} needs stream symbols from nginx: {stream:?}",
        module.display()
    );
}
