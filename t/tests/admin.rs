//! `healthcheck_admin` (docs/directives.md, healthcheck_admin): its answers and
//! errors, the log line of every change, and what a disabled or an
//! admin-set-down peer means for proxied traffic in every balancer, with
//! and without `zone`, in http and stream, across a reload.
//!
//! These tests are mode-agnostic: with the harness's stock mode (the
//! module loaded into an unpatched nginx) they check the same behaviour.

use std::time::Duration;

use healthcheck_t::{
    http_get, http_request, poll_status_json, status_json, stream_roundtrip, Backend, Kind, Mode,
    Nginx, Response, Status,
};
use serde_json::Value;

const INTERVAL: u64 = 200;
/// Deadline for anything that takes a few check rounds.
const ROUNDS: Duration = Duration::from_secs(10);

fn post(port: u16, query: &str) -> Response {
    http_request(port, "POST", &format!("/admin?{query}"), &[], b"").expect("admin request")
}

fn json(r: &Response) -> Value {
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.text()))
}

/// The `upstreams` summary of `group`/`name`.
fn summary(s: &Status, group: &str, name: &str) -> Value {
    s.0["upstreams"]
        .as_array()
        .expect("upstreams")
        .iter()
        .find(|u| u["group"] == group && u["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no summary for {group} {name} in {s}"))
}

fn admin_conf(port: u16, b1: &Backend, b2: &Backend, stream_port: u16) -> String {
    format!(
        "http {{
    access_log off;
    upstream web {{
        server {a} weight=3;
        server {b} backup;
        check interval={INTERVAL} rise=2 fall=1 timeout=150;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{ proxy_pass http://web; }}
        location /admin {{ healthcheck_admin; }}
        location /status {{ healthcheck_status json; }}
    }}
}}
stream {{
    upstream web {{
        server {a};
        server localhost:{bp};
        check interval={INTERVAL} rise=2 fall=1 timeout=150;
    }}
    server {{ listen 127.0.0.1:{stream_port}; proxy_pass web; }}
}}",
        a = b1.addr(),
        b = b2.addr(),
        bp = b2.port(),
    )
}

#[test]
fn admin_answers_and_errors() {
    let (b1, b2) = (Backend::start(), Backend::start());
    let (port, sport) = (healthcheck_t::free_port(), healthcheck_t::free_port());
    let ng = Nginx::start(&admin_conf(port, &b1, &b2, sport));
    let (a, b) = (b1.addr(), b2.addr());
    poll_status_json(port, ROUNDS, "every peer checked", |s| {
        s.peers(Kind::Http)
            .iter()
            .chain(s.peers(Kind::Stream))
            .all(|p| p["checks"].as_i64() > Some(0))
    });
    // The new row fields and the summary.
    let s = status_json(port).unwrap();
    let r = s.row(Kind::Http, "web", &a);
    assert_eq!(
        (&r["server"], &r["backup"], &r["weight"], &r["admin"]),
        (
            &Value::from(a.as_str()),
            &Value::from(false),
            &Value::from(3),
            &Value::Null
        )
    );
    assert_eq!(s.row(Kind::Http, "web", &b)["backup"], true);
    let stream_b: Vec<&Value> = s
        .peers(Kind::Stream)
        .iter()
        .filter(|p| p["server"] == format!("localhost:{}", b2.port()).as_str())
        .collect();
    assert!(!stream_b.is_empty(), "{s}");

    // Any method but POST: 405, nothing changes.
    for method in ["GET", "HEAD", "PUT", "DELETE"] {
        let q = format!("/admin?upstream=web&peer={a}&action=disable");
        let r = http_request(port, method, &q, &[], b"").unwrap();
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("Allow"), Some("POST"), "{method}");
    }
    // Bad or missing arguments: 400 naming the argument.
    for (q, want) in [
        (String::new(), "missing \"upstream\" argument"),
        (
            format!("peer={a}&action=up"),
            "missing \"upstream\" argument",
        ),
        (
            "upstream=web&action=up".into(),
            "missing \"peer\" or \"server\" argument",
        ),
        (
            format!("upstream=web&peer={a}"),
            "missing \"action\" argument",
        ),
        (
            format!("upstream=web&peer={a}&action=pause"),
            "unknown action \"pause\": use disable, drain, enable, down or up",
        ),
        (
            format!("upstream=web&peer={a}&action=up&group=tcp"),
            "unknown group \"tcp\": use http or stream",
        ),
        (
            format!("upstream=web&peer={a}&acton=up"),
            "unknown argument \"acton\": use upstream, peer or server, action and group",
        ),
    ] {
        let r = post(port, &q);
        assert_eq!((r.status, r.text().trim_end()), (400, want), "{q}");
    }
    // Unknown upstream or peer: 404.
    let r = post(port, &format!("upstream=nope&peer={a}&action=disable"));
    assert_eq!(
        (r.status, r.text().trim_end()),
        (404, "no checked upstream \"nope\"")
    );
    let r = post(port, "upstream=web&peer=127.0.0.1:1&action=disable");
    assert_eq!(
        (r.status, r.text().trim_end()),
        (404, "upstream \"web\" has no peer \"127.0.0.1:1\"")
    );
    let s = status_json(port).unwrap();
    assert!(
        s.peers(Kind::Http)
            .iter()
            .chain(s.peers(Kind::Stream))
            .all(|p| p["admin"].is_null()),
        "a refused request changes nothing: {s}"
    );

    // disable, in the http group only: the answer is the changed row.
    let mark = ng.log_mark();
    let r = post(
        port,
        &format!("upstream=web&peer={a}&action=disable&group=http"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = json(&r);
    assert_eq!(
        (&v["action"], &v["changed"]),
        (&Value::from("disable"), &Value::from(1))
    );
    let peers = v["peers"].as_array().unwrap();
    assert_eq!(peers.len(), 1, "{v}");
    assert_eq!(
        (
            &peers[0]["group"],
            &peers[0]["name"],
            &peers[0]["admin"],
            &peers[0]["status"]
        ),
        (
            &Value::from("http"),
            &Value::from(a.as_str()),
            &Value::from("disabled"),
            &Value::from("up")
        )
    );
    let line = ng.wait_for_log_since(mark, "healthcheck_admin:", ROUNDS);
    assert!(line.contains("[notice]"), "{line}");
    assert!(
        line.contains(&format!(
            "http upstream \"web\" peer {a} (server \"{a}\") disabled by client 127.0.0.1"
        )),
        "{line}"
    );
    let s = status_json(port).unwrap();
    assert_eq!(s.row(Kind::Http, "web", &a)["admin"], "disabled");
    assert_eq!(
        s.row(Kind::Stream, "web", &a)["admin"],
        Value::Null,
        "group=http only"
    );
    let u = summary(&s, "http", "web");
    assert_eq!(
        (&u["peers"], &u["disabled"], &u["selectable"]),
        (&2.into(), &1.into(), &1.into())
    );
    // The checks of a disabled peer go on.
    let before = s.checks(Kind::Http, "web", &a);
    poll_status_json(port, ROUNDS, "a disabled peer's checks go on", |s| {
        s.checks(Kind::Http, "web", &a) >= before + 3 && s.is_up(Kind::Http, "web", &a)
    });
    // Again: nothing changes, nothing is logged.
    let mark = ng.log_mark();
    let v = json(&post(
        port,
        &format!("upstream=web&peer={a}&action=disable&group=http"),
    ));
    assert_eq!(v["changed"], 0);
    assert_eq!(v["peers"][0]["changed"], false);

    // down: the health is set now; rounds that pass bring it back (rise=2).
    let v = json(&post(
        port,
        &format!("upstream=web&peer={b}&action=down&group=http"),
    ));
    assert_eq!(
        (&v["changed"], &v["peers"][0]["status"]),
        (&1.into(), &"down".into())
    );
    assert!(v["peers"][0]["down_since"].as_u64().is_some(), "{v}");
    let s = status_json(port).unwrap();
    assert!(s.is_down(Kind::Http, "web", &b), "{s}");
    let u = summary(&s, "http", "web");
    assert_eq!(
        (&u["down"], &u["selectable"]),
        (&1.into(), &0.into()),
        "{u}"
    );
    poll_status_json(port, ROUNDS, "later rounds bring it back up", |s| {
        s.is_up(Kind::Http, "web", &b)
    });
    // up on a down peer: its check refuses, so the next round takes it down.
    b2.set_mode(Mode::Refuse);
    poll_status_json(port, ROUNDS, "down by its check", |s| {
        s.is_down(Kind::Http, "web", &b)
    });
    // Now stable (a disabled, b refusing): every format says the upstream
    // has no selectable peer. HTML flags it; Prometheus counts its peers
    // up (the disabled one is up by its check).
    let html = http_get(port, "/status?format=html").unwrap().text();
    let line = html
        .lines()
        .find(|l| l.starts_with("<tr class=\"upstream") && l.contains("<td>http</td>"))
        .unwrap_or_else(|| panic!("no http upstream line: {html}"));
    assert!(
        line.contains("stranded") && line.contains("no selectable peer"),
        "{line}"
    );
    let prom = http_get(port, "/status?format=prometheus").unwrap().text();
    let peers_up: Vec<String> = healthcheck_t::page::parse_prom(&prom)
        .into_iter()
        .filter(|s| s.name == "nginx_upstream_peers_up" && s.label("upstream_type") == Some("http"))
        .map(|s| s.value)
        .collect();
    assert_eq!(peers_up, ["1"], "{prom}");
    let v = json(&post(
        port,
        &format!("upstream=web&peer={b}&action=up&group=http"),
    ));
    assert_eq!(v["peers"][0]["status"], "up");
    poll_status_json(port, ROUNDS, "a later round takes it down again", |s| {
        s.is_down(Kind::Http, "web", &b)
    });
    b2.set_mode(Mode::Serve);

    // server=: every address of a server line, here stream's localhost.
    let q = format!(
        "upstream=web&server=localhost:{}&action=disable&group=stream",
        b2.port()
    );
    let v = json(&post(port, &q));
    let peers = v["peers"].as_array().unwrap();
    assert_eq!(peers.len(), stream_b.len(), "{v}");
    assert!(peers
        .iter()
        .all(|p| p["admin"] == "disabled" && p["group"] == "stream"));
    // enable, in both groups at once (stream's peer was not disabled).
    let v = json(&post(port, &format!("upstream=web&peer={a}&action=enable")));
    let groups: Vec<(&Value, &Value)> = v["peers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (&p["group"], &p["changed"]))
        .collect();
    assert_eq!(
        groups,
        [
            (&"http".into(), &true.into()),
            (&"stream".into(), &false.into())
        ]
    );
    let lines = ng.log_lines_since(mark, "healthcheck_admin:");
    assert!(
        lines
            .iter()
            .all(|l| !l.contains("disabled by") || l.contains("stream upstream")),
        "the repeated disable logged nothing: {lines:?}"
    );
    assert!(lines
        .iter()
        .any(|l| l.contains(&format!("peer {b} (server \"{b}\") set down by client"))));
    assert!(lines
        .iter()
        .any(|l| l.contains(&format!("peer {a} (server \"{a}\") enabled by client"))));
    drop(ng);
}

/// The balancers of one context: directive (empty = round robin) and a
/// name for its upstream.
const HTTP_BALANCERS: [(&str, &str); 8] = [
    ("rr", ""),
    ("least_conn", "least_conn;"),
    ("ip_hash", "ip_hash;"),
    ("hash", "hash $request_uri;"),
    ("chash", "hash $request_uri consistent;"),
    ("random", "random;"),
    ("random2", "random two;"),
    ("vnswrr", "vnswrr;"),
];

const STREAM_BALANCERS: [(&str, &str); 6] = [
    ("rr", ""),
    ("least_conn", "least_conn;"),
    ("hash", "hash $remote_port;"),
    ("chash", "hash $remote_port consistent;"),
    ("random", "random;"),
    ("vnswrr", "vnswrr;"),
];

/// Every balancer twice (without and with `zone`) in http and stream,
/// each upstream with the two backends; http upstream `NAME` at
/// `/NAME/`, stream upstream `i` on `stream_ports[i]`.
fn balancers_conf(port: u16, b1: &Backend, b2: &Backend, stream_ports: &[u16]) -> String {
    let servers = format!("server {}; server {};", b1.addr(), b2.addr());
    let check = format!("check interval={INTERVAL} rise=1 fall=1 timeout=150;");
    let mut http_ups = String::new();
    let mut locations = String::new();
    let mut stream = String::new();
    for zone in [false, true] {
        let z = if zone { "_z" } else { "" };
        for (name, directive) in HTTP_BALANCERS {
            let zd = if zone {
                format!("zone h{name}{z} 64k;")
            } else {
                String::new()
            };
            http_ups.push_str(&format!(
                "    upstream h{name}{z} {{ {directive} {zd} {servers} {check} }}\n"
            ));
            locations.push_str(&format!(
                "        location /h{name}{z}/ {{ proxy_pass http://h{name}{z}; }}\n"
            ));
        }
    }
    let mut i = 0;
    for zone in [false, true] {
        let z = if zone { "_z" } else { "" };
        for (name, directive) in STREAM_BALANCERS {
            let zd = if zone {
                format!("zone s{name}{z} 64k;")
            } else {
                String::new()
            };
            stream.push_str(&format!(
                "    upstream s{name}{z} {{ {directive} {zd} {servers} {check} }}\n    \
                 server {{ listen 127.0.0.1:{}; proxy_pass s{name}{z}; }}\n",
                stream_ports[i]
            ));
            i += 1;
        }
    }
    format!(
        "http {{
    access_log off;
{http_ups}
    server {{
        listen 127.0.0.1:{port};
{locations}
        location /admin {{ healthcheck_admin; }}
        location /status {{ healthcheck_status json; }}
    }}
}}
stream {{
{stream}
}}"
    )
}

/// Upstream names in the order `balancers_conf` writes them.
fn upstream_names() -> (Vec<String>, Vec<String>) {
    let mut http = Vec::new();
    let mut stream = Vec::new();
    for z in ["", "_z"] {
        http.extend(HTTP_BALANCERS.iter().map(|(n, _)| format!("h{n}{z}")));
        stream.extend(STREAM_BALANCERS.iter().map(|(n, _)| format!("s{n}{z}")));
    }
    (http, stream)
}

/// Requests per upstream and phase (hash keys vary with the URI and the
/// client port).
const REQUESTS: usize = 12;

/// Which backend port served each request to every upstream.
fn served(port: u16, stream_ports: &[u16]) -> Vec<(String, u16)> {
    let (http, stream) = upstream_names();
    let mut out = Vec::new();
    for name in &http {
        for k in 0..REQUESTS {
            let r = http_get(port, &format!("/{name}/{k}")).expect("proxied request");
            assert_eq!(r.status, 200, "{name}: {}", r.text());
            out.push((name.clone(), r.text().trim().parse().expect("a port")));
        }
    }
    for (name, &p) in stream.iter().zip(stream_ports) {
        for _ in 0..REQUESTS {
            let r = stream_roundtrip(p, b"hello\n").expect("proxied connection");
            let text = String::from_utf8_lossy(&r).trim().to_string();
            out.push((
                name.clone(),
                text.parse().unwrap_or_else(|_| panic!("{name}: {text:?}")),
            ));
        }
    }
    out
}

/// Disable (or set down) the first backend in every upstream.
fn act_on_all(port: u16, peer: &str, action: &str) {
    let (http, stream) = upstream_names();
    for (group, names) in [("http", &http), ("stream", &stream)] {
        for name in names {
            let r = post(
                port,
                &format!("upstream={name}&peer={peer}&action={action}&group={group}"),
            );
            assert_eq!(r.status, 200, "{name}: {}", r.text());
            assert_eq!(json(&r)["changed"], 1, "{name}");
        }
    }
}

#[test]
fn disabled_peer_gets_no_traffic_in_any_balancer() {
    let (b1, b2) = (Backend::start(), Backend::start());
    let port = healthcheck_t::free_port();
    let stream_ports: Vec<u16> = (0..2 * STREAM_BALANCERS.len())
        .map(|_| healthcheck_t::free_port())
        .collect();
    // Two workers: the one that takes the admin request and the other see
    // the same shared state.
    let mut ng = Nginx::builder()
        .workers(2)
        .start(&balancers_conf(port, &b1, &b2, &stream_ports));
    let a = b1.addr();
    let all_up = |s: &Status| {
        s.peers(Kind::Http)
            .iter()
            .chain(s.peers(Kind::Stream))
            .all(|p| p["status"] == "up" && p["checks"].as_i64() > Some(0))
    };
    poll_status_json(port, ROUNDS, "every peer up", all_up);
    // Baseline: both backends get traffic.
    let base = served(port, &stream_ports);
    assert!(
        base.iter().any(|(_, p)| *p == b1.port()),
        "b1 serves at first"
    );

    act_on_all(port, &a, "disable");
    let s = status_json(port).unwrap();
    let checks_before: Vec<i64> = s
        .peers(Kind::Http)
        .iter()
        .chain(s.peers(Kind::Stream))
        .filter(|p| p["name"] == a.as_str())
        .map(|p| p["checks"].as_i64().unwrap())
        .collect();
    let requests_before = b1.requests();
    let got = served(port, &stream_ports);
    let wrong: Vec<_> = got.iter().filter(|(_, p)| *p != b2.port()).collect();
    assert!(wrong.is_empty(), "a disabled peer served: {wrong:?}");
    assert_eq!(
        b1.requests(),
        requests_before,
        "no request reached the disabled peer"
    );
    // Its checks went on all along, and it is still up by its check.
    let s = poll_status_json(port, ROUNDS, "the disabled peer's checks go on", |s| {
        let now: Vec<i64> = s
            .peers(Kind::Http)
            .iter()
            .chain(s.peers(Kind::Stream))
            .filter(|p| p["name"] == a.as_str())
            .map(|p| p["checks"].as_i64().unwrap())
            .collect();
        now.iter().zip(&checks_before).all(|(n, b)| n > b)
    });
    assert!(s
        .peers(Kind::Http)
        .iter()
        .chain(s.peers(Kind::Stream))
        .filter(|p| p["name"] == a.as_str())
        .all(|p| p["status"] == "up" && p["admin"] == "disabled"));

    // Admin state survives a reload.
    ng.reload();
    let s = status_json(port).unwrap();
    assert!(
        s.peers(Kind::Http)
            .iter()
            .chain(s.peers(Kind::Stream))
            .filter(|p| p["name"] == a.as_str())
            .all(|p| p["admin"] == "disabled"),
        "{s}"
    );
    let requests_before = b1.requests();
    let got = served(port, &stream_ports);
    assert!(
        got.iter().all(|(_, p)| *p == b2.port()),
        "after reload: {got:?}"
    );
    assert_eq!(b1.requests(), requests_before);

    // enable: traffic comes back to it.
    act_on_all(port, &a, "enable");
    let got = served(port, &stream_ports);
    assert!(
        got.iter().any(|(_, p)| *p == b1.port()),
        "enabled peer serves again"
    );
    drop(ng);
}
