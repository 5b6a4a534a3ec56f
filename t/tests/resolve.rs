//! Peers nginx resolves at run time (`server NAME:PORT resolve` in a `zone`
//! upstream, nginx 1.27.3+; docs/resolved.md),
//! against a real DNS server: dnsmasq on loopback ([`healthcheck_t::dns`]),
//! whose answers the tests change while nginx runs.
//!
//! Every address nginx has for the name is a row of the status page
//! (`name` the address, `server` the name as written), checked like a
//! static peer; the rows follow what nginx resolves (added, kept, removed)
//! and keep their state across re-resolution and `nginx -s reload`. The
//! backends sit on addresses of a random `127.a.b.0/24` ([`healthcheck_t::peers::Net`]),
//! all on one port, and answer with their own address, and every proxied
//! response carries nginx's `$upstream_addr` (every address nginx tried)
//! in `X-Upstream`.
//!
//! The whole file is skipped (each test returns at once, saying why) when
//! the nginx under test is older than 1.27.3, which has no `resolve`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use healthcheck_t::conf::http_conf;
use healthcheck_t::dns::Dns;
use healthcheck_t::http_backend::{response, HttpBackend, Reply};
use healthcheck_t::nginx::nginx_version;
use healthcheck_t::paths::nginx_bin;
use healthcheck_t::peers::Net;
use healthcheck_t::tls::{ClientAuth, Pki, TlsBackend, SERVER_NAME};
use healthcheck_t::wait::POLL_STEP;
use healthcheck_t::{
    assert_holds, free_port, http_get, poll_status_json, status_json, stream_roundtrip, wait_for,
    wait_until, Kind, Nginx, Status,
};
use serde_json::Value;

/// The name the upstreams resolve.
const NAME: &str = "backend.test";
/// Long enough for nginx to re-resolve (valid=1s) and a few check rounds.
const WAIT: Duration = Duration::from_secs(10);
/// The check line of most tests.
const CHECK: &str = "check interval=200 rise=1 fall=1 timeout=180";
/// The first nginx with `server ... resolve`.
const RESOLVE_SINCE: (u32, u32, u32) = (1, 27, 3);

/// Whether the nginx under test has `resolve`; if not, says why.
fn supported() -> bool {
    static TOO_OLD: OnceLock<Option<String>> = OnceLock::new();
    let too_old = TOO_OLD.get_or_init(|| {
        let bin = nginx_bin();
        let v = nginx_version(&bin);
        (v < RESOLVE_SINCE).then(|| {
            format!(
                "{} is nginx {}.{}.{}; `server ... resolve` needs 1.27.3+",
                bin.display(),
                v.0,
                v.1,
                v.2
            )
        })
    });
    if let Some(why) = too_old {
        eprintln!("skipped: {why}");
    }
    too_old.is_none()
}

// ---------------------------------------------------------------------------
// addresses and backends

/// Hosts `127.a.b.h` of a random `/24`, all on one port.
struct Site {
    net: Net,
    port: u16,
}

impl Site {
    fn ip(&self, h: u8) -> Ipv4Addr {
        self.net.ip(h)
    }

    fn ips(&self, hosts: &[u8]) -> Vec<Ipv4Addr> {
        hosts.iter().map(|&h| self.ip(h)).collect()
    }

    /// `127.a.b.h:port`, as the status page's `name` and `$upstream_addr`
    /// show it (and what the backend there answers).
    fn name(&self, h: u8) -> String {
        format!("{}:{}", self.ip(h), self.port)
    }

    fn names(&self, hosts: &[u8]) -> BTreeSet<String> {
        hosts.iter().map(|&h| self.name(h)).collect()
    }

    /// The `server` line's address, as written (and as the `server` field
    /// shows it).
    fn server(&self) -> String {
        format!("{NAME}:{}", self.port)
    }
}

/// An HTTP backend at `ip:port` answering its own address, then closing.
fn backend_at(ip: Ipv4Addr, port: u16) -> std::io::Result<HttpBackend> {
    let name = format!("{ip}:{port}");
    let reply = Reply::Raw {
        bytes: response(200, &[("Connection", "close")], name.as_bytes()),
        close: true,
    };
    HttpBackend::start_at(SocketAddr::from((ip, port)), reply)
}

/// A [`Site`] with a backend on each of `live` (the other hosts have
/// nothing listening: their connections are refused).
fn site(live: &[u8]) -> (Site, BTreeMap<u8, HttpBackend>) {
    'net: for _ in 0..20 {
        let net = Net::random();
        // The first host picks the port; the others take the same one.
        let probe = TcpListener::bind((net.ip(live.first().copied().unwrap_or(1)), 0));
        let Ok(port) = probe.and_then(|l| l.local_addr()).map(|a| a.port()) else {
            continue;
        };
        let site = Site { net, port };
        let mut backends = BTreeMap::new();
        for &h in live {
            match backend_at(site.ip(h), port) {
                Ok(b) => {
                    backends.insert(h, b);
                }
                Err(_) => continue 'net,
            }
        }
        return (site, backends);
    }
    panic!("could not bind backends {live:?} on one port of a random 127.a.b.0/24");
}

// ---------------------------------------------------------------------------
// nginx

/// `resolver` lines for `dns`.
fn resolver(dns: &Dns) -> String {
    format!(
        "resolver {} valid=1s ipv6=off;\n    resolver_timeout 1s;",
        dns.addr()
    )
}

/// The upstream `web`: one `server NAME:PORT resolve` line and `check`.
fn web(site: &Site, check: &str) -> String {
    format!(
        "    upstream web {{ zone web 256k; server {} resolve; {check}; }}\n",
        site.server()
    )
}

/// `http {}` with `resolver`, `upstreams`, `/` proxied to `web` (with
/// `X-Upstream: $upstream_addr`) and the JSON status page, on `port`.
fn http_body(dns: &Dns, port: u16, upstreams: &str) -> String {
    healthcheck_t::conf::http_conf_with(
        port,
        &format!("    {}\n{upstreams}", resolver(dns)),
        "        location / {
            proxy_pass http://web;
            add_header X-Upstream $upstream_addr always;
        }",
    )
}

/// dnsmasq answering `NAME` with `hosts` of `site`, and nginx proxying to
/// `web` with `check`; the nginx's port.
fn start(site: &Site, hosts: &[u8], check: &str) -> (Dns, Nginx, u16) {
    let mut dns = Dns::start();
    dns.set(NAME, &site.ips(hosts));
    let port = free_port();
    let ng = Nginx::start(&http_body(&dns, port, &web(site, check)));
    (dns, ng, port)
}

// ---------------------------------------------------------------------------
// what an operator sees

/// The rows of `upstream`.
fn rows<'a>(s: &'a Status, kind: Kind, upstream: &str) -> Vec<&'a Value> {
    s.peers(kind)
        .iter()
        .filter(|p| p["upstream"] == upstream)
        .collect()
}

/// The `name`s of the rows of `upstream`.
fn row_names(s: &Status, kind: Kind, upstream: &str) -> BTreeSet<String> {
    rows(s, kind, upstream)
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_string))
        .collect()
}

/// Whether `upstream` has exactly the rows `names`, each `status` after at
/// least `checks` rounds.
fn rows_are(
    s: &Status,
    kind: Kind,
    upstream: &str,
    names: &BTreeSet<String>,
    status: &str,
    checks: i64,
) -> bool {
    rows(s, kind, upstream).len() == names.len()
        && row_names(s, kind, upstream) == *names
        && names.iter().all(|n| {
            s.peer_status(kind, upstream, n) == Some(status)
                && s.get_int(kind, upstream, n, "checks") >= Some(checks)
        })
}

/// Poll until `upstream` has exactly the rows `names`, all `status`, each
/// checked at least once.
fn wait_rows(
    port: u16,
    kind: Kind,
    upstream: &str,
    names: &BTreeSet<String>,
    status: &str,
) -> Status {
    poll_status_json(
        port,
        WAIT,
        format!("{upstream}: exactly {names:?}, all {status} and checked"),
        |s| rows_are(s, kind, upstream, names, status, 1),
    )
}

/// Every row of `upstream` shows `server` as the server line's name.
fn assert_server_field(s: &Status, kind: Kind, upstream: &str, server: &str) {
    for r in rows(s, kind, upstream) {
        assert_eq!(r["server"], server, "the server field of {r}: {s}");
    }
}

/// A proxied `GET /` as the client sees it.
#[derive(Debug)]
struct Served {
    status: u16,
    /// The backend's answer (its address).
    body: String,
    /// `$upstream_addr`: every address nginx tried, in order.
    tried: String,
}

fn get(port: u16) -> Served {
    let r = http_get(port, "/").expect("proxied GET /");
    Served {
        status: r.status,
        body: r.text(),
        tried: r.header("X-Upstream").unwrap_or_default().to_string(),
    }
}

/// Proxied requests until every address of `names` served one (each
/// served by one of them at the first try).
fn assert_serves_all(port: u16, names: &BTreeSet<String>) {
    let mut seen = BTreeSet::new();
    wait_until(
        WAIT,
        format!("requests served by each of {names:?}"),
        || {
            let r = get(port);
            assert_eq!(r.status, 200, "{r:?}");
            assert!(names.contains(&r.body), "served by {r:?}, not {names:?}");
            assert_eq!(r.tried, r.body, "nginx tried other addresses first: {r:?}");
            seen.insert(r.body);
            seen == *names
        },
    );
}

/// `n` proxied requests, each served by `name` at the first try.
fn assert_all_served_by(port: u16, n: usize, name: &str) {
    for i in 0..n {
        let r = get(port);
        assert!(
            r.status == 200 && r.body == name && r.tried == name,
            "request {i}: {r:?}, expected {name} alone"
        );
    }
}

// ---------------------------------------------------------------------------
// the tests

/// Two addresses at start: a row for each (`name` the address, `server` the
/// name as written), both checked and up, and both serving.
#[test]
fn two_addresses_at_start_are_checked_and_serve() {
    if !supported() {
        return;
    }
    let (site, _backends) = site(&[1, 2]);
    let (_dns, _ng, port) = start(&site, &[1, 2], CHECK);
    let s = wait_rows(port, Kind::Http, "web", &site.names(&[1, 2]), "up");
    assert_server_field(&s, Kind::Http, "web", &site.server());
    assert_eq!(
        s.row(Kind::Http, "web", &site.name(1))["type"],
        "tcp",
        "{s}"
    );
    assert_serves_all(port, &site.names(&[1, 2]));
}

/// One of two addresses dies: its row goes down, and then every request is
/// served by the other one, which nginx tries first.
#[test]
fn a_dead_address_goes_down_and_gets_no_traffic() {
    if !supported() {
        return;
    }
    let (site, mut backends) = site(&[1, 2]);
    let (_dns, _ng, port) = start(&site, &[1, 2], CHECK);
    wait_rows(port, Kind::Http, "web", &site.names(&[1, 2]), "up");
    drop(backends.remove(&2));
    poll_status_json(port, WAIT, "the dead address down", |s| {
        s.is_down(Kind::Http, "web", &site.name(2)) && s.is_up(Kind::Http, "web", &site.name(1))
    });
    assert_all_served_by(port, 20, &site.name(1));
    let s = status_json(port).unwrap();
    assert_eq!(
        s.row(Kind::Http, "web", &site.name(2))["last_failure_reason"],
        "refused",
        "{s}"
    );
    // It stays listed, down and checked, past the workers' periodic
    // rebuild of their views (5 s; in stock mode nginx's own `down` flag of
    // the peer is set then, which must not read as "down in the
    // configuration").
    let checks = s.checks(Kind::Http, "web", &site.name(2));
    assert_holds(
        Duration::from_secs(6),
        "the dead address listed down",
        || {
            status_json(port).is_ok_and(|s| {
                s.is_down(Kind::Http, "web", &site.name(2))
                    && s.is_up(Kind::Http, "web", &site.name(1))
            })
        },
    );
    let s = status_json(port).unwrap();
    assert!(s.checks(Kind::Http, "web", &site.name(2)) > checks, "{s}");
    assert_all_served_by(port, 10, &site.name(1));
}

/// The name moves to a new address: the old rows go, the new one appears,
/// is checked, up, and takes the traffic.
#[test]
fn the_name_moving_replaces_the_rows() {
    if !supported() {
        return;
    }
    let (site, _backends) = site(&[1, 2, 3]);
    let (mut dns, _ng, port) = start(&site, &[1, 2], CHECK);
    wait_rows(port, Kind::Http, "web", &site.names(&[1, 2]), "up");
    dns.set(NAME, &site.ips(&[3]));
    let s = poll_status_json(port, WAIT, "only the new address, checked twice", |s| {
        rows_are(s, Kind::Http, "web", &site.names(&[3]), "up", 2)
    });
    assert_server_field(&s, Kind::Http, "web", &site.server());
    assert_all_served_by(port, 10, &site.name(3));
}

/// The DNS server stops for longer than several `valid=` periods: nginx
/// keeps its addresses, and so does the status page; their checks go on
/// and traffic is served. Once it is back, nginx follows a change again.
#[test]
fn the_dns_server_stopped_keeps_rows_and_checks() {
    if !supported() {
        return;
    }
    let (site, _backends) = site(&[1, 2, 3]);
    let (mut dns, ng, port) = start(&site, &[1, 2], CHECK);
    let names = site.names(&[1, 2]);
    let before = wait_rows(port, Kind::Http, "web", &names, "up");
    dns.stop();
    // Five valid= periods, each at least one failed resolution (timeout 1s).
    assert_holds(
        Duration::from_secs(5),
        "both rows up while the DNS server is stopped",
        || status_json(port).is_ok_and(|s| rows_are(&s, Kind::Http, "web", &names, "up", 1)),
    );
    let during = status_json(port).unwrap();
    for n in &names {
        let (a, b) = (
            before.checks(Kind::Http, "web", n),
            during.checks(Kind::Http, "web", n),
        );
        // 5 s at interval=200: about 25 rounds.
        assert!(b >= a + 10, "{n}: checks {a} -> {b} in 5 s: {during}");
    }
    assert_serves_all(port, &names);
    assert!(
        ng.log_contains(&format!("{NAME} could not be resolved")),
        "nginx did not try to resolve while the server was stopped"
    );
    dns.restart();
    dns.set(NAME, &site.ips(&[1, 2, 3]));
    let after = wait_rows(port, Kind::Http, "web", &site.names(&[1, 2, 3]), "up");
    for n in &names {
        assert!(
            after.checks(Kind::Http, "web", n) >= during.checks(Kind::Http, "web", n),
            "{n} lost its state after the DNS server came back: {after}"
        );
    }
}

/// The name answers NXDOMAIN: nginx drops its addresses and the rows go;
/// when the name comes back, so does a row.
#[test]
fn nxdomain_removes_the_rows() {
    if !supported() {
        return;
    }
    let (site, _backends) = site(&[1, 2]);
    let (mut dns, _ng, port) = start(&site, &[1, 2], CHECK);
    wait_rows(port, Kind::Http, "web", &site.names(&[1, 2]), "up");
    dns.remove(NAME);
    poll_status_json(port, WAIT, "no row left in web", |s| {
        rows(s, Kind::Http, "web").is_empty()
    });
    let r = get(port);
    assert_eq!(r.status, 502, "an upstream without addresses: {r:?}");
    dns.set(NAME, &site.ips(&[1]));
    wait_rows(port, Kind::Http, "web", &site.names(&[1]), "up");
    assert_all_served_by(port, 5, &site.name(1));
}

/// `nginx -s reload`: each address keeps its state; the live one's
/// `checks` go on from where they were, and the dead one, which a fresh
/// start would show up (default_down=false), is down in every page of the
/// new generation.
#[test]
fn a_reload_keeps_the_state_of_resolved_addresses() {
    if !supported() {
        return;
    }
    let (site, mut backends) = site(&[1, 2]);
    let (dns, mut ng, port) = start(&site, &[1, 2], CHECK);
    let (live, dead) = (site.name(1), site.name(2));
    wait_rows(port, Kind::Http, "web", &site.names(&[1, 2]), "up");
    drop(backends.remove(&2));
    let before = poll_status_json(port, WAIT, "the dead address down", |s| {
        s.is_down(Kind::Http, "web", &dead) && s.checks(Kind::Http, "web", &dead) >= 3
    });
    let generation = before.generation().expect("generation");
    ng.reload_with(&http_body(&dns, port, &web(&site, CHECK)));
    let deadline = Instant::now() + WAIT;
    let mut pages = 0;
    loop {
        thread::sleep(POLL_STEP);
        assert!(
            Instant::now() < deadline,
            "no page of generation {} with both rows within {WAIT:?}; last: {}",
            generation + 1,
            status_json(port).map_or_else(|e| e, |s| s.to_string())
        );
        let Ok(s) = status_json(port) else { continue };
        if s.generation() != Some(generation + 1) {
            continue;
        }
        for (n, want) in [(&live, "up"), (&dead, "down")] {
            if let Some(status) = s.peer_status(Kind::Http, "web", n) {
                assert_eq!(status, want, "{n} after the reload: {s}");
                let (a, b) = (
                    before.checks(Kind::Http, "web", n),
                    s.checks(Kind::Http, "web", n),
                );
                assert!(b >= a, "{n}: checks {a} before the reload, {b} after: {s}");
            }
        }
        pages += 1;
        if rows(&s, Kind::Http, "web").len() == 2 && pages >= 20 {
            break;
        }
    }
    assert_all_served_by(port, 10, &live);
}

/// default_down=true: a new address whose backend is dead shows down and
/// never gets a proxied request, not even in the moment nginx adds it.
#[test]
fn a_new_dead_address_with_default_down_never_gets_traffic() {
    if !supported() {
        return;
    }
    let (site, _backends) = site(&[1]);
    let check = format!("{CHECK} default_down=true");
    let (mut dns, _ng, port) = start(&site, &[1], &check);
    let (live, dead) = (site.name(1), site.name(2));
    wait_rows(port, Kind::Http, "web", &site.names(&[1]), "up");
    let mut served = 0;
    let mut request = || {
        let r = get(port);
        assert!(
            r.status == 200 && r.body == live && r.tried == live,
            "request {served}: {r:?}, expected {live} alone"
        );
        served += 1;
    };
    request();
    dns.set(NAME, &site.ips(&[1, 2]));
    wait_for(WAIT, format!("{dead} listed down after checks"), || {
        request();
        let s = status_json(port).ok()?;
        (s.is_down(Kind::Http, "web", &dead) && s.checks(Kind::Http, "web", &dead) >= 2)
            .then_some(())
    });
    for _ in 0..20 {
        request();
    }
    let s = status_json(port).unwrap();
    assert!(s.is_down(Kind::Http, "web", &dead), "{s}");
    assert!(s.is_up(Kind::Http, "web", &live), "{s}");
}

/// `mandatory` (docs/directives.md, check: mandatory): an address nginx
/// newly resolves is `checking` and takes no request until its first
/// round, which brings it up at once (not after `rise` rounds).
#[test]
fn a_newly_resolved_address_waits_for_its_first_round_with_mandatory() {
    if !supported() {
        return;
    }
    let (site, backends) = site(&[1, 2]);
    let check = "check type=http interval=1000 rise=3 fall=1 timeout=500 mandatory";
    let (mut dns, _ng, port) = start(&site, &[1], check);
    let new = site.name(2);
    wait_rows(port, Kind::Http, "web", &site.names(&[1]), "up");
    dns.set(NAME, &site.ips(&[1, 2]));
    let mut seen_checking = false;
    let s = wait_for(WAIT, format!("{new} up"), || {
        let _ = get(port);
        let s = status_json(port).ok()?;
        seen_checking |= s.peer_status(Kind::Http, "web", &new) == Some("checking");
        s.is_up(Kind::Http, "web", &new).then_some(s)
    });
    assert_eq!(
        s.checks(Kind::Http, "web", &new),
        1,
        "up after its first round: {s}"
    );
    for _ in 0..20 {
        let _ = get(port);
    }
    // Its requests: a round's first, the first proxied one only after it.
    let heads = backends[&2].requests();
    let first_check = heads.iter().position(|h| is_check(h));
    let first_proxied = heads.iter().position(|h| !is_check(h));
    assert!(
        first_check.zip(first_proxied).is_some_and(|(c, p)| c < p),
        "a round (request {first_check:?}) before any proxied request ({first_proxied:?}); \
         checking seen: {seen_checking}"
    );
}

/// Whether a request head is a check round's: the built request has a
/// `User-Agent` (nginx-healthcheck/...); the test's clients send none, so
/// the requests nginx proxies have none either.
fn is_check(head: &[u8]) -> bool {
    let text = String::from_utf8_lossy(head).to_ascii_lowercase();
    text.contains("user-agent:")
}

/// A stream upstream with `resolve`: its addresses are rows under
/// `stream`, checked and up, and both serve proxied sessions.
#[test]
fn a_stream_upstream_with_resolve_is_checked() {
    if !supported() {
        return;
    }
    let (site, _backends) = site(&[1, 2]);
    let mut dns = Dns::start();
    dns.set(NAME, &site.ips(&[1, 2]));
    let (port, stream_port) = (free_port(), free_port());
    let body = format!(
        "{}
stream {{
    {}
    upstream s {{ zone s 256k; server {} resolve; {CHECK}; }}
    server {{ listen 127.0.0.1:{stream_port}; proxy_pass s; }}
}}",
        http_conf(port, ""),
        resolver(&dns),
        site.server()
    );
    let _ng = Nginx::start(&body);
    let names = site.names(&[1, 2]);
    let s = wait_rows(port, Kind::Stream, "s", &names, "up");
    assert_server_field(&s, Kind::Stream, "s", &site.server());
    let mut seen = BTreeSet::new();
    wait_until(WAIT, "sessions served by both addresses", || {
        let reply = stream_roundtrip(stream_port, b"GET / HTTP/1.0\r\n\r\n").expect("session");
        let reply = String::from_utf8_lossy(&reply).into_owned();
        let served = names
            .iter()
            .find(|n| reply.ends_with(n.as_str()))
            .unwrap_or_else(|| panic!("a session answered {reply:?}"));
        seen.insert(served.clone());
        seen == names
    });
}

/// type=http checks of a resolved address send `Host` with the server
/// line's name and port, as for a static peer.
#[test]
fn http_checks_of_resolved_addresses_send_the_server_name_as_host() {
    if !supported() {
        return;
    }
    let (site, backends) = site(&[1]);
    let (_dns, _ng, port) = start(&site, &[1], &format!("{CHECK} type=http"));
    wait_rows(port, Kind::Http, "web", &site.names(&[1]), "up");
    let checks: Vec<String> = backends[&1]
        .requests()
        .iter()
        .map(|r| String::from_utf8_lossy(r).into_owned())
        .filter(|r| r.contains("User-Agent: nginx-healthcheck/"))
        .collect();
    assert!(!checks.is_empty(), "no check request reached the backend");
    let want = format!("Host: {}\r\n", site.server());
    for r in &checks {
        assert!(
            r.starts_with("GET / HTTP/1.1\r\n") && r.contains(&want),
            "a check request without {want:?}: {r:?}"
        );
    }
}

/// TLS checks of resolved addresses (https in http, tls in stream) send
/// the server line's host as SNI and verify the certificate against it.
#[test]
fn tls_checks_of_resolved_addresses_send_the_server_name_as_sni() {
    if !supported() {
        return;
    }
    let pki = Pki::generate();
    let b = TlsBackend::start(&pki, ClientAuth::None);
    let mut dns = Dns::start();
    dns.set(SERVER_NAME, &[Ipv4Addr::LOCALHOST]);
    let (port, stream_port) = (free_port(), free_port());
    let tls = format!(
        "check_ssl_server_name on; check_ssl_verify on; check_ssl_trusted_certificate {};",
        pki.path("ca.pem")
    );
    let check = CHECK;
    let upstreams = format!(
        "    {}
    upstream web {{ zone web 256k; server {SERVER_NAME}:{} resolve;
        {check} type=https; {tls} }}\n",
        resolver(&dns),
        b.https_port()
    );
    let body = format!(
        "{}
stream {{
    {}
    upstream s {{ zone s 256k; server {SERVER_NAME}:{} resolve; {check} type=tls; {tls} }}
    server {{ listen 127.0.0.1:{stream_port}; proxy_pass s; }}
}}",
        http_conf(port, &upstreams),
        resolver(&dns),
        b.tls_port()
    );
    let _ng = Nginx::start(&body);
    let https = BTreeSet::from([format!("127.0.0.1:{}", b.https_port())]);
    let tls_name = BTreeSet::from([format!("127.0.0.1:{}", b.tls_port())]);
    poll_status_json(port, WAIT, "both TLS rows up after two rounds", |s| {
        rows_are(s, Kind::Http, "web", &https, "up", 2)
            && rows_are(s, Kind::Stream, "s", &tls_name, "up", 2)
    });
    let requests = b.https_requests();
    let sessions = b.tls_sessions();
    assert!(
        !requests.is_empty() && !sessions.is_empty(),
        "no handshakes"
    );
    for h in requests.iter().chain(&sessions) {
        assert_eq!(h.sni.as_deref(), Some(SERVER_NAME), "{h:?}");
    }
}

/// No room: 40 addresses for one `resolve` line, which gets room for 32 by
/// default. 32 rows are checked, 8 are listed `unchecked`, and one
/// `[warn]` names the upstream and `check_shm_size`.
#[test]
fn addresses_beyond_the_room_are_listed_unchecked_with_one_warning() {
    if !supported() {
        return;
    }
    let (site, _none) = site(&[]);
    let hosts: Vec<u8> = (1..=40).collect();
    let (_dns, ng, port) = start(&site, &hosts, CHECK);
    let names = site.names(&hosts);
    let counts = |s: &Status| {
        let (mut checked, mut unchecked) = (0, 0);
        for r in rows(s, Kind::Http, "web") {
            match r["status"].as_str() {
                Some("unchecked") => unchecked += 1,
                Some("down") if r["checks"].as_i64() >= Some(1) => checked += 1,
                _ => {}
            }
        }
        (checked, unchecked)
    };
    let s = poll_status_json(port, WAIT, "32 rows checked and 8 unchecked", |s| {
        row_names(s, Kind::Http, "web") == names && counts(s) == (32, 8)
    });
    assert_eq!(rows(&s, Kind::Http, "web").len(), 40, "{s}");
    assert_server_field(&s, Kind::Http, "web", &site.server());
    let warned = |l: &String| {
        l.contains("[warn]") && l.contains("upstream \"web\"") && l.contains("unchecked")
    };
    wait_until(WAIT, "a [warn] about the unchecked addresses", || {
        ng.log_lines("check_shm_size").iter().any(warned)
    });
    assert_holds(Duration::from_secs(2), "one [warn] only", || {
        ng.log_lines("check_shm_size")
            .iter()
            .filter(|l| warned(l))
            .count()
            == 1
    });
    // The unchecked ones stay unchecked (no room freed), the others go on.
    let later = status_json(port).unwrap();
    assert_eq!(counts(&later), (32, 8), "{later}");
}

/// `check_fail_open` follows the addresses nginx has: with one address up
/// (its check port answers) and one down (only its traffic port does), the
/// upstream does not fail open; when DNS drops the up one, the remaining
/// down address is the upstream's only peer, the upstream fails open and
/// the address serves.
#[test]
fn fail_open_follows_the_addresses_nginx_has() {
    if !supported() {
        return;
    }
    let (site, _backends) = site(&[1, 2]);
    // The check port: listening on host 1 only.
    let check = (0..20)
        .find_map(|_| {
            let l = TcpListener::bind((site.ip(1), 0)).ok()?;
            let port = l.local_addr().ok()?.port();
            Some((l, port))
        })
        .expect("a check port on host 1");
    let line = format!("{CHECK} port={}; check_fail_open on", check.1);
    let (mut dns, ng, port) = start(&site, &[1, 2], &line);
    poll_status_json(port, WAIT, "host 1 up, host 2 down", |s| {
        s.is_up(Kind::Http, "web", &site.name(1)) && s.is_down(Kind::Http, "web", &site.name(2))
    });
    assert_all_served_by(port, 10, &site.name(1));
    dns.set(NAME, &site.ips(&[2]));
    let s = poll_status_json(port, WAIT, "host 2 alone, failing open", |s| {
        row_names(s, Kind::Http, "web") == site.names(&[2])
            && s.0["upstreams"].as_array().is_some_and(|u| {
                u.iter()
                    .any(|u| u["name"] == "web" && u["fail_open"] == true)
            })
    });
    assert!(s.is_down(Kind::Http, "web", &site.name(2)), "{s}");
    wait_until(WAIT, "the down address serves while failing open", || {
        get(port).body == site.name(2)
    });
    assert_all_served_by(port, 10, &site.name(2));
    assert!(ng.log().contains("fails open"), "{}", ng.log());
}
