//! Peers from DNS SRV records (`server NAME service=NAME resolve`, nginx
//! 1.27.3+; docs/resolved.md, SRV records and Consul) against dnsmasq's
//! SRV records: each target's address and port is a checked row with the
//! record's weight, the rows follow the records as they change, `port=`
//! sends the checks elsewhere while traffic goes to the SRV port, and a
//! name that no longer exists takes its rows away.
//!
//! Skipped (each test returns at once, saying why) on an nginx older than
//! 1.27.3.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::time::Duration;

use healthcheck_t::conf::http_conf_with;
use healthcheck_t::dns::Dns;
use healthcheck_t::http_backend::{response, HttpBackend, Reply};
use healthcheck_t::nginx::nginx_version;
use healthcheck_t::paths::nginx_bin;
use healthcheck_t::peers::{Net, Switch};
use healthcheck_t::{http_get, poll_status_json, Kind, Nginx, Status};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(15);
const OWNER: &str = "_http._tcp.backend.test";

fn supported() -> bool {
    let v = nginx_version(&nginx_bin());
    if v < (1, 27, 3) {
        eprintln!("skipped: nginx {v:?} has no `server ... service= resolve` (1.27.3+)");
        return false;
    }
    true
}

/// Hosts `h` of a random `127.a.b.0/24`, named `hH.test`, each with an
/// HTTP backend answering its own `address:port` on its own port.
struct Site {
    net: Net,
    ports: BTreeMap<u8, u16>,
    _backends: Vec<HttpBackend>,
}

impl Site {
    fn start(hosts: &[u8]) -> Site {
        'net: for _ in 0..20 {
            let net = Net::random();
            let mut ports = BTreeMap::new();
            let mut backends = Vec::new();
            for &h in hosts {
                let Ok(port) = TcpListener::bind((net.ip(h), 0))
                    .and_then(|l| l.local_addr())
                    .map(|a| a.port())
                else {
                    continue 'net;
                };
                let name = format!("{}:{port}", net.ip(h));
                let reply = Reply::Raw {
                    bytes: response(200, &[("Connection", "close")], name.as_bytes()),
                    close: true,
                };
                match HttpBackend::start_at(SocketAddr::from((net.ip(h), port)), reply) {
                    Ok(b) => backends.push(b),
                    Err(_) => continue 'net,
                }
                ports.insert(h, port);
            }
            return Site {
                net,
                ports,
                _backends: backends,
            };
        }
        panic!("no backends could bind on a random 127.a.b.0/24");
    }

    fn ip(&self, h: u8) -> Ipv4Addr {
        self.net.ip(h)
    }

    /// `address:port` of host `h` (its backend's port, or `port`).
    fn name(&self, h: u8) -> String {
        format!("{}:{}", self.ip(h), self.ports[&h])
    }
}

/// dnsmasq with `hH.test` for every host of `site` (and `hosts_without`
/// more, nothing listening on them) and the SRV records `records` (host,
/// port, priority, weight).
fn dns(site: &Site, extra: &[u8], records: &[(u8, u16, u16, u16)]) -> Dns {
    let mut dns = Dns::start();
    for h in site.ports.keys().chain(extra) {
        dns.set(&format!("h{h}.test"), &[site.ip(*h)]);
    }
    set_srv(&mut dns, records);
    dns
}

fn set_srv(dns: &mut Dns, records: &[(u8, u16, u16, u16)]) {
    let targets: Vec<String> = records.iter().map(|r| format!("h{}.test", r.0)).collect();
    let recs: Vec<(&str, u16, u16, u16)> = records
        .iter()
        .zip(&targets)
        .map(|(&(_, port, prio, weight), t)| (t.as_str(), port, prio, weight))
        .collect();
    dns.set_srv(OWNER, &recs);
}

/// nginx proxying `/` to `web` (one `service=` server line, `check`),
/// with `X-Upstream: $upstream_addr`.
fn start(dns: &Dns, check: &str) -> (Nginx, u16) {
    let port = healthcheck_t::free_port();
    let ng = Nginx::start(&http_conf_with(
        port,
        &format!(
            "    resolver {} valid=1s ipv6=off;
    resolver_timeout 1s;
    upstream web {{ zone web 256k; server backend.test service=_http._tcp resolve; {check}; }}\n",
            dns.addr()
        ),
        "        location / { proxy_pass http://web; add_header X-Upstream $upstream_addr always; }",
    ));
    (ng, port)
}

fn rows(s: &Status) -> Vec<&Value> {
    s.peers(Kind::Http)
        .iter()
        .filter(|p| p["upstream"] == "web")
        .collect()
}

/// Poll until `web` has exactly the rows `want` (name -> status).
fn wait_rows(port: u16, want: &[(String, &str)]) -> Status {
    let want: BTreeMap<String, String> = want
        .iter()
        .map(|(n, s)| (n.clone(), s.to_string()))
        .collect();
    poll_status_json(port, WAIT, format!("web rows {want:?}"), |s| {
        let got: BTreeMap<String, String> = rows(s)
            .iter()
            .filter(|r| r["checks"].as_i64() >= Some(1))
            .filter_map(|r| Some((r["name"].as_str()?.into(), r["status"].as_str()?.into())))
            .collect();
        got == want && rows(s).len() == want.len()
    })
}

/// Which backend served each of `n` requests (each at the first try).
fn served(port: u16, n: usize) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for _ in 0..n {
        let r = http_get(port, "/").expect("proxied GET /");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("X-Upstream"), Some(r.text().as_str()), "first try");
        *m.entry(r.text()).or_insert(0) += 1;
    }
    m
}

/// Two SRV targets of one priority: a row each (the target's address and
/// the record's port), checked and up, with the record's weight, and
/// traffic split by those weights (10:30 over 80 requests, one worker:
/// exactly 20 and 60 by round robin).
#[test]
fn srv_targets_are_checked_rows_with_their_weights() {
    if !supported() {
        return;
    }
    let site = Site::start(&[1, 2]);
    let (p1, p2) = (site.ports[&1], site.ports[&2]);
    let dns = dns(&site, &[], &[(1, p1, 10, 10), (2, p2, 10, 30)]);
    let (_ng, port) = start(
        &dns,
        "check type=http interval=200 rise=1 fall=1 timeout=150",
    );
    let s = wait_rows(port, &[(site.name(1), "up"), (site.name(2), "up")]);
    let weight = |n: &str| {
        rows(&s)
            .into_iter()
            .find(|r| r["name"] == n)
            .and_then(|r| r["weight"].as_u64())
    };
    assert_eq!(weight(&site.name(1)), Some(10), "{s}");
    assert_eq!(weight(&site.name(2)), Some(30), "{s}");
    // `server`: the SRV record's target, as nginx names the peer.
    for (h, n) in [(1, site.name(1)), (2, site.name(2))] {
        let r = rows(&s)
            .into_iter()
            .find(|r| r["name"] == n.as_str())
            .unwrap();
        assert_eq!(r["type"], "http", "{r}");
        assert_eq!(r["server"], format!("h{h}.test"), "{r}");
    }
    let got = served(port, 80);
    assert_eq!(
        got,
        BTreeMap::from([(site.name(1), 20), (site.name(2), 60)]),
        "weights 10:30"
    );
}

/// The records move: a target replaced by one where nothing listens (a
/// new row that goes down and gets no traffic), the old target's row
/// gone; then no SRV record at all (the name gone): no row left.
#[test]
fn a_moving_srv_target_is_followed_and_nxdomain_removes_the_rows() {
    if !supported() {
        return;
    }
    let site = Site::start(&[1, 2]);
    let (p1, p2) = (site.ports[&1], site.ports[&2]);
    let dead_port = healthcheck_t::free_port();
    let mut dns = dns(&site, &[3], &[(1, p1, 10, 1), (2, p2, 10, 1)]);
    let (_ng, port) = start(
        &dns,
        "check type=http interval=200 rise=1 fall=1 timeout=150",
    );
    wait_rows(port, &[(site.name(1), "up"), (site.name(2), "up")]);
    set_srv(&mut dns, &[(1, p1, 10, 1), (3, dead_port, 10, 1)]);
    let dead = format!("{}:{dead_port}", site.ip(3));
    wait_rows(port, &[(site.name(1), "up"), (dead.clone(), "down")]);
    let got = served(port, 10);
    assert_eq!(
        got,
        BTreeMap::from([(site.name(1), 10)]),
        "the dead target gets none"
    );
    set_srv(&mut dns, &[]);
    poll_status_json(port, WAIT, "no row left in web", |s| rows(s).is_empty());
    let r = http_get(port, "/").expect("proxied GET /");
    assert_eq!(r.status, 502, "an upstream without addresses");
}

/// `check port=N`: the checks of every SRV target go to its address on N
/// (a listener there counts them, and its refusing takes the rows down)
/// while traffic keeps the SRV ports; the status shows port N.
#[test]
fn port_overrides_the_srv_port_for_checks_only() {
    if !supported() {
        return;
    }
    let site = Site::start(&[1, 2]);
    let (p1, p2) = (site.ports[&1], site.ports[&2]);
    let cport = healthcheck_t::free_port();
    let switches: Vec<Switch> = [1u8, 2]
        .iter()
        .map(|&h| Switch::bind(SocketAddr::from((site.ip(h), cport))).expect("check port"))
        .collect();
    let dns = dns(&site, &[], &[(1, p1, 10, 1), (2, p2, 10, 1)]);
    let (_ng, port) = start(
        &dns,
        &format!("check type=tcp interval=200 rise=1 fall=1 timeout=150 port={cport}"),
    );
    let s = wait_rows(port, &[(site.name(1), "up"), (site.name(2), "up")]);
    for r in rows(&s) {
        assert_eq!(r["port"], u64::from(cport), "{r}");
    }
    let got: BTreeSet<String> = served(port, 10).into_keys().collect();
    assert_eq!(
        got,
        BTreeSet::from([site.name(1), site.name(2)]),
        "traffic to the SRV ports"
    );
    switches[1].refuse();
    wait_rows(port, &[(site.name(1), "up"), (site.name(2), "down")]);
    assert_eq!(
        served(port, 6),
        BTreeMap::from([(site.name(1), 6)]),
        "the check port decides"
    );
}
