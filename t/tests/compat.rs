//! Configurations written for the C health-check modules (yaoweibin's
//! nginx_upstream_check_module, Tengine's, zhouchangxun's, Akvicor's and
//! the stream forks) against a real nginx (docs/migrating.md): they load,
//! `check_status` serves the shapes their consumers read (Telegraf's
//! `nginx_upstream_check` input decodes its JSON), their spellings and
//! check types work against real servers (MariaDB, php-fpm) and scripted
//! ones (AJP13, a MySQL error packet), and what does not exist here is
//! refused with what to write instead.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// AJP13 CPing as a web server sends it (magic 0x1234, length 1, type 10).
const CPING: [u8; 5] = [0x12, 0x34, 0x00, 0x01, 0x0a];
/// AJP13 CPong as a container answers (magic "AB", length 1, type 9).
const CPONG: [u8; 5] = [0x41, 0x42, 0x00, 0x01, 0x09];
use healthcheck_t::daemons::{MariaDb, PhpFpm};
use healthcheck_t::http_backend::{response, HttpBackend, Reply};
use healthcheck_t::paths::workspace_root;
use healthcheck_t::scripted::{Script, ScriptedServer};
use healthcheck_t::status::get_json;
use healthcheck_t::{
    free_port, http_get, poll_status_json, wait_for, Backend, Kind, Mode, Nginx, UdpBackend,
};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// check_status: the C modules' shapes

/// One row of `check_status`'s JSON, decoded as Telegraf's
/// `nginxUpstreamCheckServer` struct decodes it: every field of its type
/// (`uint64`, `string`, `uint16`), or an error.
#[derive(Debug, PartialEq, Eq)]
struct TelegrafServer {
    index: u64,
    upstream: String,
    name: String,
    status: String,
    rise: u64,
    fall: u64,
    check_type: String,
    port: u16,
}

/// `servers { total, generation, server [...] }`, typed as Telegraf's
/// `nginxUpstreamCheckData`.
#[derive(Debug)]
struct TelegrafData {
    total: u64,
    generation: u64,
    server: Vec<TelegrafServer>,
}

fn decode_telegraf(body: &str) -> Result<TelegrafData, String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}: {body}"))?;
    let s = v.get("servers").ok_or("no servers")?;
    let u64_of = |o: &Value, k: &str| -> Result<u64, String> {
        o.get(k)
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("{k} is not a uint64 in {o}"))
    };
    let str_of = |o: &Value, k: &str| -> Result<String, String> {
        o.get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("{k} is not a string in {o}"))
    };
    let rows = s
        .get("server")
        .and_then(Value::as_array)
        .ok_or("servers.server is not an array")?;
    let mut server = Vec::new();
    for r in rows {
        let port = u64_of(r, "port")?;
        server.push(TelegrafServer {
            index: u64_of(r, "index")?,
            upstream: str_of(r, "upstream")?,
            name: str_of(r, "name")?,
            status: str_of(r, "status")?,
            rise: u64_of(r, "rise")?,
            fall: u64_of(r, "fall")?,
            check_type: str_of(r, "type")?,
            port: u16::try_from(port).map_err(|_| format!("port {port} is not a uint16"))?,
        });
    }
    Ok(TelegrafData {
        total: u64_of(s, "total")?,
        generation: u64_of(s, "generation")?,
        server,
    })
}

fn status_page(port: u16, path: &str) -> (String, String) {
    let r = http_get(port, path).unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    (r.header("Content-Type").unwrap_or("").to_string(), r.text())
}

#[test]
fn check_status_serves_the_c_modules_shapes_with_stream_peers() {
    let live = Backend::start();
    let dead = Backend::with_mode(Mode::Refuse);
    let tcp = Backend::start();
    let port = free_port();
    let other = free_port();
    let stream_listen = free_port();
    let akvicor = free_port();
    let ng = Nginx::builder().start(&format!(
        "http {{
    upstream web {{
        server {live};
        server {dead};
        check interval=100 rise=1 fall=1 timeout=90 type=tcp;
    }}
    server {{
        listen 127.0.0.1:{port};
        location /status {{ check_status; }}
        location /json {{ check_status json; }}
        location /l4 {{ l4check_status csv; }}
        location /sc {{ stream_check_status json; }}
        location /tc {{ tcp_check_status; }}
        location /ours {{ healthcheck_status json; }}
    }}
    server {{
        listen 127.0.0.1:{other};
        check_status json;
    }}
    server {{
        listen 127.0.0.1:{akvicor};
        healthcheck_status json;
    }}
}}
stream {{
    upstream db {{
        server {tcp};
        check interval=100 rise=1 fall=1 timeout=90 type=tcp;
    }}
    server {{ listen 127.0.0.1:{stream_listen}; proxy_pass db; }}
}}",
        live = live.addr(),
        dead = dead.addr(),
        tcp = tcp.addr(),
    ));
    // JSON, as Telegraf decodes it: http then stream, index 0.. over all.
    let (ctype, body) = wait_for(WAIT, "the dead peer down, the others up", || {
        let (ctype, body) = status_page(port, "/status?format=json");
        let d = decode_telegraf(&body).ok()?;
        let st: Vec<&str> = d.server.iter().map(|s| s.status.as_str()).collect();
        let checked = d.server.iter().all(|s| s.rise + s.fall >= 1);
        (st == ["up", "down", "up"] && checked).then_some((ctype, body))
    });
    assert_eq!(ctype, "application/json");
    let d = decode_telegraf(&body).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.total, 3);
    assert!(d.generation >= 1);
    let want = |i, u: &str, n: &str, st: &str| (i, u.to_string(), n.to_string(), st.to_string());
    let got: Vec<_> = d
        .server
        .iter()
        .map(|s| {
            (
                s.index,
                s.upstream.clone(),
                s.name.clone(),
                s.status.clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            want(0, "web", &live.addr(), "up"),
            want(1, "web", &dead.addr(), "down"),
            want(2, "db", &tcp.addr(), "up"),
        ]
    );
    for s in &d.server {
        assert_eq!((s.check_type.as_str(), s.port), ("tcp", 0));
        if s.status == "up" {
            assert!(s.rise >= 1 && s.fall == 0, "{s:?}");
        } else {
            assert!(s.fall >= 1 && s.rise == 0, "{s:?}");
        }
    }
    // The keys are exactly the C module's (Telegraf ignores others, but
    // the shape is theirs).
    let v: Value = serde_json::from_str(&body).unwrap();
    let mut keys: Vec<&String> = v["servers"].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["generation", "server", "total"]);
    let mut row_keys: Vec<&String> = v["servers"]["server"][0]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    row_keys.sort();
    assert_eq!(
        row_keys,
        ["fall", "index", "name", "port", "rise", "status", "type", "upstream"]
    );
    // ?status= filters the rows (the index stays), and the JSON stays valid.
    let (_, body) = status_page(port, "/status?format=json&status=down");
    let d = decode_telegraf(&body).unwrap();
    assert_eq!((d.total, d.server.len()), (1, 1));
    assert_eq!(
        (d.server[0].index, d.server[0].status.as_str()),
        (1, "down")
    );
    let (_, body) = status_page(port, "/status?format=json&status=UP");
    assert_eq!(decode_telegraf(&body).unwrap().total, 2);
    // Argument names in any case, as the C modules (and nginx's $arg_) take them.
    let (ctype, body) = status_page(port, "/status?FORMAT=json&Status=down");
    assert_eq!(ctype, "application/json");
    assert_eq!(decode_telegraf(&body).unwrap().total, 1);

    // CSV: no header, the 8 columns, each decoded with its type.
    let (ctype, csv) = status_page(port, "/status?format=csv");
    assert!(ctype.starts_with("text/plain"), "{ctype}");
    let csv_rows: Vec<Vec<String>> = csv
        .lines()
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    assert_c_rows("CSV", &csv_rows, &[&live, &dead, &tcp]);
    let (_, up) = status_page(port, "/status?format=csv&status=up");
    assert_eq!(up.lines().count(), 2);

    // HTML: the server number line, the columns, each row's cells, a red
    // row for the down peer.
    let (ctype, html) = status_page(port, "/status");
    assert!(ctype.starts_with("text/html"), "{ctype}");
    assert!(
        html.contains("<h2>Check upstream server number: 3, generation: "),
        "{html}"
    );
    let heads: Vec<String> = cells(&html, "th").into_iter().flatten().collect();
    assert_eq!(
        heads,
        [
            "Index",
            "Upstream",
            "Name",
            "Status",
            "Rise counts",
            "Fall counts",
            "Check type",
            "Check port"
        ]
    );
    assert_c_rows("HTML", &cells(&html, "td"), &[&live, &dead, &tcp]);
    assert_eq!(html.matches("<tr bgcolor=\"#FF0000\">").count(), 1);
    let (_, html) = status_page(port, "/status?status=down");
    assert!(html.contains("Check upstream server number: 1,"));

    // The directive's format; the other names; the server context.
    for (p, path) in [
        (port, "/json"),
        (port, "/sc"),
        (port, "/status?format=json"),
        (other, "/anything"),
    ] {
        let (_, body) = status_page(p, path);
        assert_eq!(decode_telegraf(&body).map(|d| d.total), Ok(3), "{path}");
    }
    let (_, l4) = status_page(port, "/l4");
    assert_eq!(l4.lines().count(), 3);
    let (_, tc) = status_page(port, "/tc");
    assert!(tc.contains("Check upstream server number: 3"));
    // healthcheck_status keeps the richer shape, which has no "server".
    let ours = get_json(port, "/ours").unwrap();
    assert!(ours["servers"]["http"].is_array() && ours["servers"].get("server").is_none());
    // Akvicor's module allows healthcheck_status in a server block.
    let server_level = get_json(akvicor, "/any/path").unwrap();
    assert_eq!(server_level["servers"]["total"], 3);
    drop(ng);
}

/// The cells of each `<tr>` of `html` (`tag` is "td" or "th"), rows
/// without such cells left out.
fn cells(html: &str, tag: &str) -> Vec<Vec<String>> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    html.split("<tr")
        .skip(1)
        .map(|row| {
            let row = row.split("</tr>").next().unwrap_or("");
            row.split(&open)
                .skip(1)
                .map(|c| c.split(&close).next().unwrap_or("").to_string())
                .collect::<Vec<_>>()
        })
        .filter(|r| !r.is_empty())
        .collect()
}

/// The C modules' 8 columns of `rows`, field by field and decoded with
/// their types (numbers as a consumer parses them): `live` and the stream
/// backend up with a rise count, `dead` down with a fall count.
fn assert_c_rows(shape: &str, rows: &[Vec<String>], peers: &[&Backend]) {
    assert_eq!(rows.len(), 3, "{shape}: {rows:?}");
    let upstreams = ["web", "web", "db"];
    let statuses = ["up", "down", "up"];
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r.len(), 8, "{shape} row {i}: {r:?}");
        let num = |k: usize| -> u64 {
            r[k].parse()
                .unwrap_or_else(|_| panic!("{shape} row {i} column {k} is not a number: {r:?}"))
        };
        assert_eq!(num(0), i as u64, "{shape} index: {r:?}");
        assert_eq!(r[1], upstreams[i], "{shape} upstream: {r:?}");
        assert_eq!(r[2], peers[i].addr(), "{shape} name: {r:?}");
        assert_eq!(r[3], statuses[i], "{shape} status: {r:?}");
        let (rise, fall) = (num(4), num(5));
        if statuses[i] == "up" {
            assert!(
                rise >= 1 && fall == 0,
                "{shape} rise/fall of an up peer: {r:?}"
            );
        } else {
            assert!(
                fall >= 1 && rise == 0,
                "{shape} rise/fall of a down peer: {r:?}"
            );
        }
        assert_eq!(r[6], "tcp", "{shape} type: {r:?}");
        let port = u16::try_from(num(7)).expect("a port");
        assert_eq!(port, 0, "{shape} port: {r:?}");
    }
}

// ---------------------------------------------------------------------------
// timeout not below interval

#[test]
fn a_timeout_not_below_interval_warns_and_a_round_in_flight_delays_the_next() {
    let hang = Backend::with_mode(Mode::Hang);
    let port = free_port();
    let body = format!(
        "http {{
    upstream slow {{
        server {};
        check interval=100 timeout=600 rise=1 fall=1 type=http;
    }}
    server {{ listen 127.0.0.1:{port}; location /status {{ healthcheck_status json; }} }}
}}",
        hang.addr()
    );
    let (code, out) = Nginx::builder().test_config(&body);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "[warn] \"check\" timeout=600 is above interval=100: a round still in flight \
             delays the next, so a slow peer's rounds start up to 600 ms apart"
        ),
        "{out}"
    );
    let ng = Nginx::start(&body);
    let s = poll_status_json(port, WAIT, "the hanging peer down", |s| {
        s.is_down(Kind::Http, "slow", &hang.addr())
    });
    assert_eq!(s.int(Kind::Http, "slow", &hang.addr(), "period_ms"), 600);
    // Each round waits its whole 600 ms: rounds start ~600 ms apart, not
    // every 100 ms.
    let before = hang.accepted();
    let t0 = Instant::now();
    wait_for(WAIT, "3 s of rounds", || {
        (t0.elapsed() >= Duration::from_secs(3)).then_some(())
    });
    let rounds = hang.accepted() - before;
    assert!(
        (3..=7).contains(&rounds),
        "{rounds} rounds in 3 s (600 ms each: about 5; 100 ms would be 30)"
    );
    drop(ng);
}

// ---------------------------------------------------------------------------
// The C modules' spellings

#[test]
fn the_c_modules_spellings_load_and_mean_what_they_meant() {
    let ok = HttpBackend::start(Reply::status(404));
    let port = free_port();
    let body = format!(
        "http {{
    upstream u {{
        server {};
        check interval=5000 type=tcp;
        check interval=100 rise=1 fall=1 timeout=90 default_down=TRUE type=http;
        check_http_send \"GET /old HTTP/1.0\\r\\n\\r\\n\";
        check_http_send \"GET /new HTTP/1.0\\r\\n\\r\\n\";
        check_http_expect_alive HTTP_2XX;
        check_http_expect_alive http_4xx;
    }}
    server {{ listen 127.0.0.1:{port}; location /status {{ healthcheck_status json; }} }}
}}",
        ok.addr()
    );
    let (code, out) = Nginx::builder().test_config(&body);
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("is given again"))
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].contains("[warn] \"check\" is given again and replaces the one at "));
    assert!(lines[1].contains("[warn] \"check_http_send\" is given again and replaces the one at "));
    let ng = Nginx::start(&body);
    // default_down=TRUE: it starts down (its first round, within 100 ms of
    // the start, may already be over: the log's "is up" says it came up
    // from down); a 404 passes (the classes are OR-ed); the last
    // check_http_send is sent.
    poll_status_json(port, WAIT, "up on 404", |s| {
        s.is_up(Kind::Http, "u", &ok.addr())
    });
    assert!(
        ng.log_contains(&format!(
            "upstream u peer {} is up after 1 successes",
            ok.addr()
        )),
        "default_down=TRUE: no down -> up transition\n{}",
        ng.log()
    );
    let sent = ok.requests();
    assert!(
        !sent.is_empty() && sent.iter().all(|r| r.starts_with(b"GET /new ")),
        "{sent:?}"
    );
    drop(ng);
}

#[test]
fn check_http_send_is_the_bytes_of_a_tcp_check_and_the_datagram_of_udp() {
    let tcp = ScriptedServer::start(Script::greet(b""));
    let udp = UdpBackend::start();
    let port = free_port();
    let ng = Nginx::start(&format!(
        "http {{
    upstream t {{
        server {};
        check interval=100 rise=1 fall=1 timeout=90 type=tcp;
        check_http_send \"PING\\r\\n\";
    }}
    server {{ listen 127.0.0.1:{port}; location /status {{ healthcheck_status json; }} }}
}}
stream {{
    upstream u {{
        server {};
        check interval=100 rise=1 fall=1 timeout=90 type=udp;
        check_http_send \"UDP_TEST\";
    }}
    server {{ listen 127.0.0.1:{}; proxy_pass u; }}
}}",
        tcp.addr(),
        udp.addr(),
        free_port()
    ));
    poll_status_json(port, WAIT, "both up", |s| {
        s.is_up(Kind::Http, "t", &tcp.addr()) && s.checks(Kind::Http, "t", &tcp.addr()) >= 3
    });
    wait_for(WAIT, "a connection that sent PING", || {
        tcp.received()
            .iter()
            .any(|r| r == b"PING\r\n")
            .then_some(())
    });
    wait_for(WAIT, "a UDP_TEST datagram", || {
        udp.payloads()
            .iter()
            .any(|p| p == b"UDP_TEST")
            .then_some(())
    });
    assert!(udp.payloads().iter().all(|p| p == b"UDP_TEST"));
    drop(ng);
}

#[test]
fn check_http_expect_body_is_a_body_test() {
    let b = HttpBackend::start(Reply::Raw {
        bytes: response(200, &[], b"server1: UP"),
        close: true,
    });
    let port = free_port();
    let ng = Nginx::start(&format!(
        "http {{
    upstream u {{
        server {};
        check interval=100 rise=1 fall=1 timeout=90 type=http;
        check_http_send \"GET / HTTP/1.0\\r\\n\\r\\n\";
        check_http_expect_alive http_2xx http_3xx;
        check_http_expect_body ~ \"server[13].+UP\";
    }}
    server {{ listen 127.0.0.1:{port}; location /status {{ healthcheck_status json; }} }}
}}",
        b.addr()
    ));
    poll_status_json(port, WAIT, "up", |s| s.is_up(Kind::Http, "u", &b.addr()));
    b.set_reply(Reply::Raw {
        bytes: response(200, &[], b"server1: DOWN"),
        close: true,
    });
    let s = poll_status_json(port, WAIT, "down on the body", |s| {
        s.is_down(Kind::Http, "u", &b.addr())
    });
    assert_eq!(
        s.row(Kind::Http, "u", &b.addr())["last_failure_reason"],
        "mismatch"
    );
    drop(ng);
}

#[test]
fn port_applies_to_ip_servers_and_a_unix_server_is_checked_on_its_own_address() {
    let main = Backend::start();
    let check = Backend::start();
    let dir = std::env::temp_dir().join(format!("hc-compat-unix-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("app.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    // The workers may run as another user: let them connect.
    fs::set_permissions(&sock, fs::Permissions::from_mode(0o777)).unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let a = Arc::clone(&accepted);
    std::thread::spawn(move || {
        // Hold every connection open, as a live server does: a tcp check
        // reads a close as a failure.
        let mut held = Vec::new();
        for c in listener.incoming().flatten() {
            a.fetch_add(1, Ordering::Relaxed);
            held.push(c);
        }
    });
    let port = free_port();
    let body = format!(
        "http {{
    upstream mixed {{
        server {};
        server unix:{};
        check interval=100 rise=1 fall=1 timeout=90 type=tcp port={};
    }}
    server {{ listen 127.0.0.1:{port}; location /status {{ healthcheck_status json; }} }}
}}",
        main.addr(),
        sock.display(),
        check.port()
    );
    let (code, out) = Nginx::builder().test_config(&body);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!(
        "\"check\" ignores \"port={}\" for the unix-socket server \"unix:{}\" of upstream \
         \"mixed\": it has no port and is checked on its own address",
        check.port(),
        sock.display()
    )));
    let ng = Nginx::start(&body);
    wait_for(WAIT, "both checked", || {
        (check.accepted() >= 3 && accepted.load(Ordering::Relaxed) >= 3).then_some(())
    });
    assert_eq!(main.accepted(), 0, "the IP server is checked on port=");
    let unix = format!("unix:{}", sock.display());
    let s = poll_status_json(port, WAIT, "both up", |s| {
        s.is_up(Kind::Http, "mixed", &main.addr()) && s.is_up(Kind::Http, "mixed", &unix)
    });
    // The status row says which port each is checked on.
    assert_eq!(
        s.row(Kind::Http, "mixed", &main.addr())["port"],
        check.port()
    );
    assert_eq!(s.row(Kind::Http, "mixed", &unix)["port"], 0);
    drop(ng);
    let _ = fs::remove_dir_all(&dir);
}

/// A keep-alive HTTP backend answering `200 ok`, and a configuration
/// whose upstream `u` checks it with `lines`; what `nginx -t` says of it.
fn keepalive_case(lines: &str) -> (HttpBackend, String, String) {
    let b = HttpBackend::start(Reply::Raw {
        bytes: response(200, &[("Content-Length", "2")], b"ok"),
        close: false,
    });
    let port = free_port();
    let body = format!(
        "http {{
    upstream u {{
        server {};
        check_keepalive_requests 10;
        {lines}
    }}
    server {{ listen 127.0.0.1:{port}; location /status {{ healthcheck_status json; }} }}
}}",
        b.addr()
    );
    let (code, out) = Nginx::builder().test_config(&body);
    assert_eq!(code, 0, "{out}");
    (b, body, out)
}

#[test]
fn check_keepalive_requests_keeps_an_http_checks_connection() {
    let (b, body, out) = keepalive_case(
        "check interval=100 rise=1 fall=1 timeout=90 type=http;
        check_http_send \"GET / HTTP/1.0\\r\\nConnection: keep-alive\\r\\n\\r\\n\";",
    );
    assert!(!out.contains("has no effect"), "{out}");
    let ng = Nginx::start(&body);
    wait_for(WAIT, "20 requests", || {
        (b.request_count() >= 20).then_some(())
    });
    let per = b.requests_per_connection();
    assert!(
        per.iter().any(|&n| n >= 5) && b.connections() * 3 <= b.request_count(),
        "requests per connection: {per:?}"
    );
    drop(ng);
}

#[test]
fn an_explicit_reuse_off_keeps_check_keepalive_requests_from_keeping_the_connection() {
    let (b, body, out) =
        keepalive_case("check interval=100 rise=1 fall=1 timeout=90 type=http reuse=off;");
    assert!(
        out.contains(
            "\"check_keepalive_requests\" has no effect in upstream \"u\": its check is not reuse=on"
        ),
        "{out}"
    );
    let ng = Nginx::start(&body);
    wait_for(WAIT, "10 requests", || {
        (b.request_count() >= 10).then_some(())
    });
    let per = b.requests_per_connection();
    assert!(
        per.iter().all(|&n| n == 1),
        "requests per connection: {per:?}"
    );
    drop(ng);
}

// ---------------------------------------------------------------------------
// type=mysql, type=ajp, type=fastcgi

#[test]
fn mysql_checks_read_a_real_mariadb_greeting_and_an_error_packet_is_status() {
    let mut db = MariaDb::start();
    let full = ScriptedServer::start(Script::greet(&too_many_connections()));
    let port = free_port();
    let ng = Nginx::start(&format!(
        "http {{
    upstream db {{
        server {};
        server {};
        check interval=100 rise=1 fall=1 timeout=500 type=mysql;
    }}
    server {{ listen 127.0.0.1:{port}; location /status {{ healthcheck_status json; }} }}
}}",
        db.addr(),
        full.addr()
    ));
    let s = poll_status_json(port, WAIT, "mariadb up, the full server down", |s| {
        s.is_up(Kind::Http, "db", &db.addr())
            && s.is_down(Kind::Http, "db", &full.addr())
            && s.checks(Kind::Http, "db", &db.addr()) >= 5
    });
    assert_eq!(
        s.row(Kind::Http, "db", &full.addr())["last_failure_reason"],
        "status"
    );
    ng.wait_for_log(
        &format!(
            "upstream db peer {} is down after 1 failures: MySQL error 1040: Too many connections",
            full.addr()
        ),
        WAIT,
    );
    db.stop();
    let s = poll_status_json(port, WAIT, "down when stopped", |s| {
        s.is_down(Kind::Http, "db", &db.addr())
    });
    assert_eq!(
        s.row(Kind::Http, "db", &db.addr())["last_failure_reason"],
        "refused"
    );
    db.start_again();
    poll_status_json(port, WAIT, "up again", |s| {
        s.is_up(Kind::Http, "db", &db.addr())
    });
    drop(ng);
}

/// The "Too many connections" error packet of the MySQL protocol.
fn too_many_connections() -> Vec<u8> {
    let mut err = vec![0xff, 0x10, 0x04, b'#'];
    err.extend_from_slice(b"08004Too many connections");
    let mut packet = vec![err.len() as u8, 0, 0, 0];
    packet.extend_from_slice(&err);
    packet
}

#[test]
fn the_down_line_names_the_last_rounds_failure_not_an_earlier_answer() {
    // One round gets the error packet, the next ones find nothing
    // listening: the peer goes down on "connection refused".
    let full = ScriptedServer::start(Script::greet(&too_many_connections()));
    let addr = full.addr();
    let port = free_port();
    let ng = Nginx::start(&format!(
        "http {{
    upstream db {{
        server {addr};
        check interval=1000 rise=1 fall=3 timeout=500 type=mysql;
    }}
    server {{ listen 127.0.0.1:{port}; location /status {{ healthcheck_status json; }} }}
}}"
    ));
    wait_for(WAIT, "the first round", || {
        (full.connections() >= 1).then_some(())
    });
    drop(full);
    let s = poll_status_json(port, WAIT, "down", |s| s.is_down(Kind::Http, "db", &addr));
    assert_eq!(s.reason(Kind::Http, "db", &addr), Some("refused"));
    let line = ng.wait_for_log(
        &format!("upstream db peer {addr} is down after 3 failures:"),
        WAIT,
    );
    assert!(line.contains("connection refused"), "{line}");
    assert!(!line.contains("MySQL error"), "{line}");
}

#[test]
fn ajp_checks_send_a_cping_and_expect_the_cpong() {
    let ajp = ScriptedServer::start(Script::answer(CPING.len(), &CPONG));
    let port = free_port();
    let ng = Nginx::start(&format!(
        "stream {{
    upstream tomcat {{
        server {};
        check interval=100 rise=1 fall=1 timeout=90 type=ajp;
    }}
    server {{ listen 127.0.0.1:{}; proxy_pass tomcat; }}
}}
http {{ server {{ listen 127.0.0.1:{port}; location /status {{ healthcheck_status json; }} }} }}",
        ajp.addr(),
        free_port()
    ));
    poll_status_json(port, WAIT, "up", |s| {
        s.is_up(Kind::Stream, "tomcat", &ajp.addr())
    });
    wait_for(WAIT, "a CPing", || {
        ajp.received().iter().any(|r| r == &CPING).then_some(())
    });
    ajp.set_script(Script::answer(
        CPING.len(),
        b"HTTP/1.1 400 Bad Request\r\n\r\n",
    ));
    let s = poll_status_json(port, WAIT, "down", |s| {
        s.is_down(Kind::Stream, "tomcat", &ajp.addr())
    });
    assert_eq!(
        s.row(Kind::Stream, "tomcat", &ajp.addr())["last_failure_reason"],
        "mismatch"
    );
    drop(ng);
}

#[test]
fn fastcgi_checks_judge_a_real_php_fpms_status() {
    let mut fpm = PhpFpm::start(&[
        ("ok.php", "<?php echo \"ok\\n\";"),
        (
            "down.php",
            "<?php http_response_code(503); echo \"down\\n\";",
        ),
    ]);
    let port = free_port();
    let upstream = |name: &str, params: &str| {
        format!(
            "upstream {name} {{
        server {};
        check interval=100 rise=1 fall=1 timeout=500 type=fastcgi;
        check_http_expect_alive http_2xx;
        {params}
    }}",
            fpm.addr()
        )
    };
    let ng = Nginx::start(&format!(
        "http {{
    {}
    {}
    {}
    server {{ listen 127.0.0.1:{port}; location /status {{ healthcheck_status json; }} }}
}}",
        upstream(
            "ok",
            &format!("check_fastcgi_param SCRIPT_FILENAME {};", fpm.script("ok.php"))
        ),
        upstream(
            "bad",
            &format!(
                "check_fastcgi_param REQUEST_METHOD GET; check_fastcgi_param SCRIPT_FILENAME {};",
                fpm.script("down.php")
            )
        ),
        upstream(
            "ping",
            "check_fastcgi_param REQUEST_METHOD GET; check_fastcgi_param SCRIPT_NAME /ping; check_fastcgi_param SCRIPT_FILENAME /ping;"
        ),
    ));
    let s = poll_status_json(port, WAIT, "ok and ping up, bad down", |s| {
        s.is_up(Kind::Http, "ok", &fpm.addr())
            && s.is_up(Kind::Http, "ping", &fpm.addr())
            && s.is_down(Kind::Http, "bad", &fpm.addr())
    });
    let bad = s.row(Kind::Http, "bad", &fpm.addr());
    assert_eq!(
        (
            bad["last_failure_reason"].as_str(),
            bad["http_status"].as_i64()
        ),
        (Some("status"), Some(503))
    );
    ng.wait_for_log(
        &format!(
            "upstream bad peer {} is down after 1 failures: FastCGI Status 503",
            fpm.addr()
        ),
        WAIT,
    );
    fpm.stop();
    poll_status_json(port, WAIT, "all down", |s| {
        s.is_down(Kind::Http, "ok", &fpm.addr())
    });
    fpm.start_again();
    poll_status_json(port, WAIT, "up again", |s| {
        s.is_up(Kind::Http, "ok", &fpm.addr())
    });
    drop(ng);
}

// ---------------------------------------------------------------------------
// What does not exist here says what to write instead

#[test]
fn refusals_say_what_to_write_instead() {
    let cases: &[(&str, &str)] = &[
        (
            "upstream u { server 127.0.0.1:1; check type=tcp; check_send \"x\"; }",
            "\"check_send\" is a directive of the C health-check modules: write check_match NAME { \
             send \"...\"; expect \"...\"; }",
        ),
        (
            "upstream u { server 127.0.0.1:1; check type=tcp; check_expect_response \"x\"; }",
            "\"check_expect_response\" is a directive of the C health-check modules: write check_match",
        ),
        (
            "upstream u { server 127.0.0.1:1; check type=tcp; check_smtp_expect_alive smtp_2xx; }",
            "\"check_smtp_expect_alive\" is a directive of the C health-check modules: write check_match",
        ),
        (
            "upstream u { server 127.0.0.1:1; check type=fastcgi; check_fastcgi_params A B; }",
            "the directive is check_fastcgi_param NAME VALUE;",
        ),
        (
            "upstream u { server 127.0.0.1:1; check type=pop3; }",
            "invalid parameter \"type=pop3\": type=pop3 is not a type here: write type=tcp match=NAME \
             with a block check_match NAME { expect \"+OK\"; }",
        ),
        (
            "upstream u { server 127.0.0.1:1; check type=ikev2; }",
            "type=ikev2 is not a type here: write type=udp match=NAME",
        ),
        (
            "upstream u { server 127.0.0.1:1; check type=HTTP; }",
            "unknown type \"HTTP\": did you mean type=http?",
        ),
        (
            "upstream u { server 127.0.0.1:1; check type=ssl; }",
            "unknown type \"ssl\": did you mean type=tls?",
        ),
        (
            "upstream u { server 127.0.0.1:1; check type=redis; }",
            "a protocol without a type of its own is written type=tcp (or type=udp) match=NAME \
             with a check_match NAME { send ...; expect ...; } block (docs/migrating.md)",
        ),
        (
            "upstream u { server 127.0.0.1:1; check type=tcp unique=true; }",
            "invalid parameter \"unique=true\": unique= is Tengine's",
        ),
        (
            "upstream u { server 127.0.0.1:1; check type=tcp log_level=warn; }",
            "invalid parameter \"log_level=warn\": log_level= is not a parameter here",
        ),
        (
            "upstream u { server 127.0.0.1:1; check type=mysql; check_http_send \"x\"; }",
            "\"check_http_send\" requires \"check ... type=http (the request), type=tcp (bytes sent, \
             nothing read) or type=udp (the datagram)\" in upstream \"u\", which has type=mysql",
        ),
    ];
    for (upstream, want) in cases {
        let (code, out) = Nginx::builder().test_config(&format!("http {{ {upstream} }}"));
        assert_eq!(code, 1, "{upstream}: {out}");
        assert!(
            out.contains("[emerg]") && out.contains(want),
            "{upstream}:\n{out}\nwant: {want}"
        );
    }
    for name in [
        "check_status",
        "l4check_status",
        "stream_check_status",
        "tcp_check_status",
    ] {
        let (code, out) = Nginx::builder().test_config(&format!(
            "stream {{ server {{ listen 127.0.0.1:1; {name}; }} }}"
        ));
        assert_eq!(code, 1, "{name}: {out}");
        assert!(
            out.contains("the status page is served from an http location"),
            "{name}: {out}"
        );
    }
}

#[test]
fn a_migrated_configuration_relying_on_default_down_gets_one_notice() {
    let b = Backend::start();
    let port = free_port();
    let mut ng = Nginx::builder().log_level("notice").start(&format!(
        "http {{
    upstream legacy {{ server {}; check interval=3000 rise=2 fall=5 timeout=1000 type=tcp; }}
    upstream explicit {{ server {}; check interval=3000 default_down=false; }}
    server {{ listen 127.0.0.1:{port}; location /status {{ check_status; }} }}
}}",
        b.addr(),
        b.addr()
    ));
    let notice = "[notice]";
    let text = "upstream \"legacy\" looks written for a C health-check module \
                (check_status) and its \"check\" has no default_down: here its peers start up \
                (default_down=false), where those modules start them down; write \
                default_down=true to keep that";
    let lines = ng.wait_for_log(text, WAIT);
    assert!(lines.contains(notice), "{lines}");
    ng.reload();
    assert_eq!(ng.log_lines(text).len(), 1, "once, not again at a reload");
}

#[test]
fn the_migration_notice_sees_check_status_after_a_stream_block_and_leaves_udp_alone() {
    let b = Backend::start();
    let u = UdpBackend::start();
    let port = free_port();
    // The stream block (finished first) has the upstream that relies on
    // default_down's default; check_status comes later, in http.
    let conf = |with_tcp: bool| {
        format!(
            "stream {{
    upstream dns {{ server {}; check interval=3000 type=udp; }}
    {}
}}
http {{ server {{ listen 127.0.0.1:{port}; location /status {{ check_status; }} }} }}",
            u.addr(),
            if with_tcp {
                format!(
                    "upstream db {{ server {}; check interval=3000 type=tcp; }}",
                    b.addr()
                )
            } else {
                String::new()
            }
        )
    };
    let ng = Nginx::builder().log_level("notice").start(&conf(true));
    ng.wait_for_log(
        "upstream \"db\" looks written for a C health-check module (check_status)",
        WAIT,
    );
    drop(ng);
    // A udp check alone starts up in Akvicor's module too: no notice.
    let ng = Nginx::builder().log_level("notice").start(&conf(false));
    ng.wait_for_log("start worker process", WAIT);
    assert!(ng.log_lines("looks written for").is_empty());
}

// ---------------------------------------------------------------------------
// The corpus

/// Rewrite every address of a corpus configuration to loopback: each
/// distinct `IP:port` of a `server` line to `127.0.0.1:<a free port>`,
/// every `listen` to `127.0.0.1:<a free port>`, every `unix:` path into
/// `dir`.
fn to_loopback(conf: &str, dir: &std::path::Path) -> String {
    let mut ports: HashMap<String, u16> = HashMap::new();
    let mut out = String::new();
    for line in conf.lines() {
        let indent = &line[..line.len() - line.trim_start().len()];
        let words: Vec<&str> = line.split_whitespace().collect();
        let rewritten = match words.first().copied() {
            Some("server") if words.get(1).is_some_and(|w| *w != "{") => {
                let addr = words[1].trim_end_matches(';');
                let new = if let Some(path) = addr.strip_prefix("unix:") {
                    let base = PathBuf::from(path);
                    let file = base.file_name().map(|f| f.to_string_lossy().into_owned());
                    format!("unix:{}/{}", dir.display(), file.unwrap_or_default())
                } else {
                    let p = *ports.entry(addr.to_string()).or_insert_with(free_port);
                    format!("127.0.0.1:{p}")
                };
                let rest = words[1..].join(" ").replacen(addr, &new, 1);
                format!("{indent}server {rest}")
            }
            Some("listen") => {
                let p = free_port();
                let rest: Vec<&str> = words[2..].to_vec();
                let tail = if words[1].ends_with(';') {
                    ";".to_string()
                } else {
                    format!(" {}", rest.join(" "))
                };
                format!("{indent}listen 127.0.0.1:{p}{tail}")
            }
            _ => line.to_string(),
        };
        out.push_str(&rewritten);
        out.push('\n');
    }
    out
}

#[test]
fn every_corpus_configuration_loads() {
    let corpus = workspace_root().join("t/corpus");
    let mut files: Vec<PathBuf> = fs::read_dir(&corpus)
        .expect("t/corpus")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().and_then(|x| x.to_str()) == Some("conf"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 30,
        "{} configurations in t/corpus",
        files.len()
    );
    let dir = std::env::temp_dir().join(format!("hc-corpus-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let mut failed = Vec::new();
    for f in &files {
        let conf = to_loopback(&fs::read_to_string(f).unwrap(), &dir);
        for line in conf.lines().map(str::trim_start) {
            if line.starts_with("server ") && !line.starts_with("server {")
                || line.starts_with("listen ")
            {
                let addr = line.split_whitespace().nth(1).unwrap_or("");
                assert!(
                    addr.starts_with("127.0.0.1:") || addr.starts_with("unix:"),
                    "{}: not rewritten to loopback: {line}",
                    f.display()
                );
            }
        }
        let (code, out) = Nginx::builder().test_config(&conf);
        if code != 0 || out.contains("[emerg]") {
            failed.push(format!("{}:\n{out}", f.display()));
        }
    }
    let _ = fs::remove_dir_all(&dir);
    assert!(
        failed.is_empty(),
        "{} of {} fail nginx -t:\n{}",
        failed.len(),
        files.len(),
        failed.join("\n")
    );
}

#[test]
fn a_websocket_check_accepting_http_1xx_passes_on_101() {
    let ws = HttpBackend::start(Reply::Raw {
        bytes:
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
                .to_vec(),
        close: false,
    });
    let port = free_port();
    let ng = Nginx::start(&format!(
        "http {{
    upstream ws {{
        server {addr};
        check interval=100 rise=1 fall=1 timeout=500 type=http;
        check_http_send \"GET /ws HTTP/1.1\\r\\nHost: ws.test\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\\r\\nSec-WebSocket-Version: 13\\r\\n\\r\\n\";
        check_http_expect_alive http_1xx;
    }}
    upstream plain {{
        server {addr};
        check interval=100 rise=1 fall=1 timeout=500 type=http;
    }}
    server {{ listen 127.0.0.1:{port}; location /status {{ healthcheck_status json; }} }}
}}",
        addr = ws.addr()
    ));
    let s = poll_status_json(port, WAIT, "ws up, plain down", |s| {
        s.is_up(Kind::Http, "ws", &ws.addr())
            && s.checks(Kind::Http, "ws", &ws.addr()) >= 3
            && s.is_down(Kind::Http, "plain", &ws.addr())
    });
    assert_eq!(s.row(Kind::Http, "ws", &ws.addr())["http_status"], 101);
    // Without http_1xx a 101 is not an answer a health check can follow.
    assert_eq!(s.reason(Kind::Http, "plain", &ws.addr()), Some("invalid"));
    drop(ng);
}
