//! `check_log` (docs/operations.md, Event log): every transition as one
//! line, written once across the workers, to a file nginx reopens or to a
//! syslog server; lines that cannot be written are counted, never waited
//! for.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use healthcheck_t::conf::http_conf_with;
use healthcheck_t::dns::Dns;
use healthcheck_t::nginx::nginx_version;
use healthcheck_t::paths::nginx_bin;
use healthcheck_t::peers::Net;
use healthcheck_t::wait::wait_for;
use healthcheck_t::{
    free_port, http_get, http_request, nginx_t, poll_status_json, status_json, Backend, Builder,
    Kind, Mode,
};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(15);

/// The keys of a JSON line, in the order the module writes them.
const KEYS: [&str; 11] = [
    "time",
    "upstream",
    "upstream_type",
    "name",
    "server",
    "from",
    "to",
    "by",
    "reason",
    "detail",
    "checks",
];

/// The JSON lines of `path` (each checked for the exact key set, in order,
/// and for its time), with the text of the whole file.
fn events(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"));
            let keys: Vec<&str> = v
                .as_object()
                .expect("an object")
                .keys()
                .map(String::as_str)
                .collect();
            let mut sorted = KEYS.to_vec();
            sorted.sort_unstable();
            assert_eq!(keys, sorted, "the exact key set: {l}");
            assert_eq!(
                l.find("\"time\"")
                    .zip(l.find("\"checks\""))
                    .map(|(a, b)| a < b),
                Some(true),
                "time first, checks last: {l}"
            );
            assert!(
                rfc3339_ms(v["time"].as_str().unwrap_or_default()),
                "time: {l}"
            );
            v
        })
        .collect()
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, of this year or the next.
fn rfc3339_ms(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    b.len() == 24
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[19] == b'.'
        && digits(20..23)
        && b[23] == b'Z'
}

/// An event's identity: upstream, peer name, from, to, by.
type Key = (String, String, String, String, String);

fn key(v: &Value) -> Key {
    let s = |k: &str| v[k].as_str().unwrap_or("null").to_string();
    (s("upstream"), s("name"), s("from"), s("to"), s("by"))
}

fn k(ups: &str, name: &str, from: &str, to: &str, by: &str) -> Key {
    (ups.into(), name.into(), from.into(), to.into(), by.into())
}

/// How many lines of each [`Key`].
fn counts(evs: &[Value]) -> BTreeMap<Key, usize> {
    let mut m = BTreeMap::new();
    for v in evs {
        *m.entry(key(v)).or_insert(0) += 1;
    }
    m
}

/// Wait until `path` has a line of `want`; all its lines.
fn wait_event(path: &Path, want: &Key) -> Vec<Value> {
    wait_for(WAIT, format!("{want:?} in {}", path.display()), || {
        let evs = events(path);
        evs.iter().any(|v| &key(v) == want).then_some(evs)
    })
}

fn the<'a>(evs: &'a [Value], want: &Key) -> &'a Value {
    evs.iter()
        .find(|v| &key(v) == want)
        .unwrap_or_else(|| panic!("{want:?} in {evs:?}"))
}

fn admin(port: u16, query: &str) {
    let r = http_request(port, "POST", &format!("/admin?{query}"), &[], b"").expect("admin");
    assert_eq!(r.status, 200, "{query}: {}", r.text());
}

fn dropped(port: u16) -> u64 {
    let s = status_json(port).expect("status");
    s.0["servers"]["dropped_events"]
        .as_u64()
        .expect("dropped_events")
}

/// Two workers: check downs and ups (with reason and detail), admin
/// actions (with the client), a passive down, fail-open entered and left:
/// each exactly one line, and nothing else.
#[test]
fn every_transition_is_one_line_across_two_workers() {
    let (a, b) = (Backend::start(), Backend::start());
    // Upstream p: traffic to p1/p2, both checked on one shared port.
    let (p1, p2, pcheck) = (Backend::start(), Backend::start(), Backend::start());
    let port = free_port();
    let body = http_conf_with(
        port,
        &format!(
            "    check_log logs/events.log;
    upstream web {{ server {a}; server {b};
        check interval=100 rise=1 fall=1 timeout=90 type=tcp; check_fail_open on; }}
    upstream p {{ server {p1} max_fails=0; server {p2} max_fails=0;
        check interval=300 rise=3 fall=3 timeout=250 type=tcp port={pc} passive_fall=2; }}\n",
            a = a.addr(),
            b = b.addr(),
            p1 = p1.addr(),
            p2 = p2.addr(),
            pc = pcheck.port(),
        ),
        "        location /p/ { proxy_pass http://p; }
        location /admin { healthcheck_admin; }",
    );
    let ng = Builder::default().workers(2).start(&body);
    let log = ng.prefix().join("logs/events.log");
    let (an, bn, p2n) = (a.addr(), b.addr(), p2.addr());

    b.set_mode(Mode::Refuse);
    let evs = wait_event(&log, &k("web", &bn, "up", "down", "check"));
    let down = the(&evs, &k("web", &bn, "up", "down", "check"));
    // Refused; or reset, when a round had connected into the listener's
    // queue just before it closed (the kernel resets those connections).
    let detail = match down["reason"].as_str() {
        Some("refused") => "connection refused",
        Some("reset") => "connection reset by peer",
        other => panic!("reason {other:?}: {down}"),
    };
    assert_eq!(down["detail"], detail, "{down}");
    assert_eq!(down["upstream_type"], "http", "{down}");
    assert_eq!(down["server"], bn.as_str(), "{down}");
    assert!(down["checks"].as_u64().is_some_and(|n| n >= 1), "{down}");

    admin(port, &format!("upstream=web&peer={an}&action=disable"));
    admin(port, &format!("upstream=web&peer={an}&action=enable"));
    let evs = wait_event(&log, &k("web", &an, "disabled", "up", "admin"));
    let dis = the(&evs, &k("web", &an, "up", "disabled", "admin"));
    assert_eq!(dis["reason"], "disable", "{dis}");
    assert_eq!(dis["detail"], "by client 127.0.0.1", "{dis}");
    assert_eq!(
        the(&evs, &k("web", &an, "disabled", "up", "admin"))["reason"],
        "enable"
    );

    a.set_mode(Mode::Refuse);
    let evs = wait_event(
        &log,
        &k("web", "null", "enforced", "fail-open", "fail-open"),
    );
    let open = the(
        &evs,
        &k("web", "null", "enforced", "fail-open", "fail-open"),
    );
    assert_eq!(open["server"], Value::Null, "{open}");
    assert_eq!(open["checks"], Value::Null, "{open}");
    assert_eq!(
        open["detail"], "weight 0 of 2 of its checked peers is up",
        "{open}"
    );
    a.set_mode(Mode::Serve);
    b.set_mode(Mode::Serve);
    wait_event(
        &log,
        &k("web", "null", "fail-open", "enforced", "fail-open"),
    );
    wait_event(&log, &k("web", &bn, "down", "up", "check"));

    // Passive: p2's traffic port refuses while its check port answers;
    // requests go out one at a time until p2 is down, then stop.
    p2.set_mode(Mode::Refuse);
    let mut passive = false;
    for _ in 0..200 {
        let r = http_get(port, "/p/").expect("request");
        assert_eq!(r.status, 200);
        let s = status_json(port).expect("status");
        if s.row(Kind::Http, "p", &p2n)["status"] == "down" {
            passive = true;
            break;
        }
    }
    assert!(passive, "p2 never went down by passive_fall");
    let evs = wait_event(&log, &k("p", &p2n, "down", "up", "check"));
    let pd = the(&evs, &k("p", &p2n, "up", "down", "passive"));
    assert_eq!(pd["reason"], "passive", "{pd}");
    assert_eq!(
        pd["detail"], "2 failed proxied attempts (passive_fall=2)",
        "{pd}"
    );

    let got = counts(&events(&log));
    let want: BTreeMap<Key, usize> = [
        k("web", &bn, "up", "down", "check"),
        k("web", &an, "up", "disabled", "admin"),
        k("web", &an, "disabled", "up", "admin"),
        k("web", &an, "up", "down", "check"),
        k("web", "null", "enforced", "fail-open", "fail-open"),
        k("web", &an, "down", "up", "check"),
        k("web", "null", "fail-open", "enforced", "fail-open"),
        k("web", &bn, "down", "up", "check"),
        k("p", &p2n, "up", "down", "passive"),
        k("p", &p2n, "down", "up", "check"),
    ]
    .into_iter()
    .map(|key| (key, 1))
    .collect();
    assert_eq!(got, want, "each transition exactly once");
    assert_eq!(dropped(port), 0);
    ng.check_log();
}

/// Resolved addresses added and removed (nginx 1.27.3+), and a stream
/// upstream's transitions, in one event log written from the http and the
/// stream context.
#[test]
fn resolved_addresses_and_stream_peers() {
    if nginx_version(&nginx_bin()) < (1, 27, 3) {
        eprintln!("skipped: `server ... resolve` needs nginx 1.27.3+");
        return;
    }
    let net = Net::random();
    let cport = free_port();
    let ip = |h: u8| -> Ipv4Addr { net.ip(h) };
    let name = |h: u8| format!("{}:{cport}", ip(h));
    let mut dns = Dns::start();
    dns.set("backend.test", &[ip(1), ip(2)]);
    let dead = Backend::with_mode(Mode::Refuse);
    let (port, sport) = (free_port(), free_port());
    let dir = tempdir();
    let log = dir.join("events.log");
    let http = http_conf_with(
        port,
        &format!(
            "    resolver {} valid=1s ipv6=off;
    resolver_timeout 1s;
    check_log {log};
    upstream web {{ zone web 256k; server backend.test:{cport} resolve;
        check interval=200 rise=1 fall=1 timeout=150 type=tcp; }}\n",
            dns.addr(),
            log = log.display()
        ),
        "",
    );
    // The stream upstream names the same file in its own check_log.
    let body = format!(
        "{http}
stream {{
    upstream s {{ server {}; check interval=100 rise=1 fall=1 timeout=90 type=tcp;
        check_log {}; }}
    server {{ listen 127.0.0.1:{sport}; proxy_pass s; }}
}}",
        dead.addr(),
        log.display()
    );
    let ng = Builder::default().workers(2).start(&body);
    // Nothing listens on the resolved addresses: added, then down.
    for h in [1, 2] {
        wait_event(&log, &k("web", &name(h), "up", "down", "check"));
    }
    let evs = wait_event(&log, &k("s", &dead.addr(), "up", "down", "check"));
    assert_eq!(
        the(&evs, &k("s", &dead.addr(), "up", "down", "check"))["upstream_type"],
        "stream"
    );
    dns.set("backend.test", &[ip(1), ip(3)]);
    wait_event(&log, &k("web", &name(3), "up", "down", "check"));
    let evs = wait_event(&log, &k("web", &name(2), "down", "absent", "resolve"));
    let added = the(&evs, &k("web", &name(1), "absent", "up", "resolve"));
    assert_eq!(added["server"], format!("backend.test:{cport}"), "{added}");
    let got = counts(&evs);
    let want: BTreeMap<Key, usize> = [
        k("web", &name(1), "absent", "up", "resolve"),
        k("web", &name(2), "absent", "up", "resolve"),
        k("web", &name(1), "up", "down", "check"),
        k("web", &name(2), "up", "down", "check"),
        k("s", &dead.addr(), "up", "down", "check"),
        k("web", &name(3), "absent", "up", "resolve"),
        k("web", &name(3), "up", "down", "check"),
        k("web", &name(2), "down", "absent", "resolve"),
    ]
    .into_iter()
    .map(|key| (key, 1))
    .collect();
    assert_eq!(got, want, "each transition exactly once");
    drop(ng);
    drop(dns);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A scratch directory outside the nginx prefix (the test removes it).
fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("hc-events-{}", healthcheck_t::random_u64()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// `nginx -s reopen` after the file was renamed: later lines go to the new
/// file, none to the old one.
#[test]
fn reopen_after_a_rename_writes_to_the_new_file() {
    let b = Backend::start();
    let port = free_port();
    let ng = Builder::default().workers(2).start(&http_conf_with(
        port,
        &format!(
            "    check_log logs/events.log text;
    upstream web {{ server {}; check interval=100 rise=1 fall=1 timeout=90 type=tcp; }}\n",
            b.addr()
        ),
        "",
    ));
    let log = ng.prefix().join("logs/events.log");
    let old = ng.prefix().join("logs/events.log.1");
    b.set_mode(Mode::Refuse);
    let text = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    wait_for(WAIT, "the down line", || {
        text(&log).contains("up -> down by check").then_some(())
    });
    std::fs::rename(&log, &old).expect("rename");
    ng.signal(libc::SIGUSR1);
    wait_for(WAIT, "the new file", || log.exists().then_some(()));
    b.set_mode(Mode::Serve);
    wait_for(WAIT, "the up line in the new file", || {
        text(&log).contains("down -> up by check").then_some(())
    });
    let lines: Vec<String> = text(&old).lines().map(str::to_string).collect();
    assert_eq!(
        lines.len(),
        1,
        "the renamed file keeps only the down line: {lines:?}"
    );
    let want = format!("http upstream web peer {0} ({0}) up -> down by check: refused, connection refused (checks ", b.addr());
    assert!(lines[0][25..].starts_with(&want), "{}", lines[0]);
    assert!(rfc3339_ms(&lines[0][..24]), "{}", lines[0]);
    assert_eq!(text(&log).lines().count(), 1, "{}", text(&log));
    ng.check_log();
}

/// A syslog server on loopback gets each line as nginx's syslog code sends
/// it (RFC 3164: `<PRI>Mmm dd hh:mm:ss HOST TAG: MSG`).
#[test]
fn a_syslog_server_gets_the_lines() {
    let rx = UdpSocket::bind("127.0.0.1:0").expect("bind");
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let rport = rx.local_addr().unwrap().port();
    let b = Backend::start();
    let port = free_port();
    let ng = Builder::default().start(&http_conf_with(
        port,
        &format!(
            "    check_log syslog:server=127.0.0.1:{rport},tag=hc,facility=daemon,severity=notice;
    upstream web {{ server {}; check interval=100 rise=1 fall=1 timeout=90 type=tcp; }}\n",
            b.addr()
        ),
        "",
    ));
    b.set_mode(Mode::Refuse);
    let deadline = Instant::now() + WAIT;
    let mut buf = [0u8; 9000];
    let got = loop {
        assert!(Instant::now() < deadline, "no datagram");
        if let Ok(n) = rx.recv(&mut buf) {
            break String::from_utf8_lossy(&buf[..n]).into_owned();
        }
    };
    // daemon (3) * 8 + notice (5) = 29.
    let (head, msg) = got.split_once(" hc: ").unwrap_or_else(|| panic!("{got:?}"));
    assert!(head.starts_with("<29>"), "{got:?}");
    let stamp = &head[4..];
    // `Mmm dd hh:mm:ss HOST`: the day space-padded, then the host name.
    let h = stamp.as_bytes();
    assert!(
        stamp.len() > 16
            && ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
                .iter()
                .any(|m| stamp.starts_with(m))
            && h[3] == b' '
            && (h[4] == b' ' || h[4].is_ascii_digit())
            && h[5].is_ascii_digit()
            && h[6] == b' '
            && h[9] == b':'
            && h[12] == b':'
            && h[15] == b' '
            && !stamp[16..].contains(' '),
        "RFC 3164 header: {got:?}"
    );
    let v: Value = serde_json::from_str(msg).unwrap_or_else(|e| panic!("{e}: {msg:?}"));
    assert_eq!(
        (v["name"].as_str(), v["to"].as_str()),
        (Some(b.addr().as_str()), Some("down"))
    );
    assert!(!msg.ends_with('\n'), "{msg:?}");
    ng.check_log();
}

/// A full disk (`/dev/full`) and a syslog server that is gone: every line
/// not written is counted in `dropped_events`; checks, pages and traffic
/// go on.
#[test]
fn lines_that_cannot_be_written_are_counted() {
    let (a, b) = (Backend::start(), Backend::start());
    let gone = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let gport = gone.local_addr().unwrap().port();
    drop(gone);
    let port = free_port();
    let ng = Builder::default().workers(2).start(&http_conf_with(
        port,
        &format!(
            "    check_log /dev/full;
    upstream web {{ server {}; server {}; check interval=100 rise=1 fall=1 timeout=90 type=tcp; }}
    upstream sys {{ server {}; check interval=100 rise=1 fall=1 timeout=90 type=tcp;
        check_log syslog:server=127.0.0.1:{gport}; }}\n",
            a.addr(),
            b.addr(),
            a.addr()
        ),
        "",
    ));
    ng.allow_log("while logging to syslog");
    a.set_mode(Mode::Refuse);
    b.set_mode(Mode::Refuse);
    // web: 2 downs to /dev/full, both dropped; sys: 1 down.
    poll_status_json(port, WAIT, "both web peers down", |s| {
        s.row(Kind::Http, "web", &a.addr())["status"] == "down"
            && s.row(Kind::Http, "web", &b.addr())["status"] == "down"
    });
    a.set_mode(Mode::Serve);
    // 1 more (web up) to /dev/full, and sys up to the gone syslog server:
    // after an ICMP port unreachable its next send fails.
    poll_status_json(port, WAIT, "a up again", |s| {
        s.row(Kind::Http, "web", &a.addr())["status"] == "up"
            && s.row(Kind::Http, "sys", &a.addr())["status"] == "up"
    });
    wait_for(WAIT, "dropped_events counts the lines", || {
        let n = dropped(port);
        (n >= 3).then_some(())
    });
    let n = dropped(port);
    assert!(n <= 5, "3 to /dev/full and at most both sys lines: {n}");
    assert_eq!(http_get(port, "/status").expect("page").status, 200);
    assert_eq!(ng.workers().len(), 2);
}

/// What `nginx -t` says of a bad `check_log`.
#[test]
fn nginx_t_names_the_bad_argument() {
    let cases = [
        (
            "check_log logs/e.log xml;",
            "invalid format \"xml\" in \"check_log\" directive: write json or text",
        ),
        (
            "check_log off;",
            "invalid path \"off\" in \"check_log\" directive: write a file path or \
             syslog:server=ADDRESS (leave the directive out for no event log)",
        ),
        (
            "check_log syslog:nope=1;",
            "unknown syslog parameter \"nope=1\"",
        ),
        (
            "check_log logs/a.log; check_log logs/b.log;",
            "\"check_log\" directive is duplicate",
        ),
    ];
    for (line, want) in cases {
        let (rc, out) = nginx_t(&format!(
            "http {{ {line} upstream u {{ server 127.0.0.1:1; check type=tcp; }} }}"
        ));
        assert_ne!(rc, 0, "{line}: {out}");
        assert!(out.contains(&format!("[emerg] {want}")), "{line}: {out}");
    }
    let (rc, out) = nginx_t(
        "http { upstream u { server 127.0.0.1:1; check type=tcp; check_log logs/u.log text; } }
stream { check_log logs/s.log; upstream s { server 127.0.0.1:1; check type=tcp; } }",
    );
    assert_eq!(rc, 0, "{out}");
    let (rc, out) = nginx_t("http { server { location / { check_log logs/x.log; } } }");
    assert_ne!(rc, 0, "{out}");
    assert!(
        out.contains("\"check_log\" directive is not allowed here"),
        "{out}"
    );
}
