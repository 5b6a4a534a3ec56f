//! Configuration snippets tests share.

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

/// One upstream block: `servers` and a `check` line (plus extra lines).
pub fn upstream(name: &str, servers: &[String], check: &str) -> String {
    let servers: String = servers
        .iter()
        .map(|s| format!("        server {s};\n"))
        .collect();
    format!("    upstream {name} {{\n{servers}        {check}\n    }}\n")
}
