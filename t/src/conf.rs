//! Configuration snippets tests share.

use std::borrow::Borrow;

use crate::backend::Backend;

/// `http {}` with the given upstream blocks and a JSON status location
/// at `/status` on `127.0.0.1:port`.
pub fn http_conf(port: u16, upstreams: &str) -> String {
    http_conf_with(port, upstreams, "")
}

/// [`http_conf`] with more `locations` in its server.
pub fn http_conf_with(port: u16, upstreams: &str, locations: &str) -> String {
    format!(
        "http {{
    access_log off;
{upstreams}
    server {{
        listen 127.0.0.1:{port};
{locations}
        location /status {{ healthcheck_status json; }}
    }}
}}"
    )
}

/// An `http {}` with only the JSON status location (at `/status` on
/// `127.0.0.1:port`), for tests whose upstreams are all in `stream {}`.
pub fn status_server(port: u16) -> String {
    http_conf(port, "")
}

/// [`http_conf`] with one upstream `web`: a `server` line per backend,
/// then `check` (the whole `check ...;` line).
pub fn web_conf<B: Borrow<Backend>>(port: u16, backends: &[B], check: &str) -> String {
    let servers: Vec<String> = backends.iter().map(|b| b.borrow().addr()).collect();
    http_conf(port, &upstream("web", &servers, check))
}

/// One upstream block: `servers` and a `check` line (plus extra lines).
pub fn upstream(name: &str, servers: &[String], check: &str) -> String {
    let servers: String = servers
        .iter()
        .map(|s| format!("        server {s};\n"))
        .collect();
    format!("    upstream {name} {{\n{servers}        {check}\n    }}\n")
}
