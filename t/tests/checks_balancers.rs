//! Every balancer skips a check-down peer, in http and stream, with and
//! without `zone` (docs/design.md, How checks work).
//!
//! Each test is one balancer. Its nginx has up to four upstreams (http,
//! http + zone, stream, stream + zone), each with three peers whose traffic
//! ports always serve and whose checks go (`port=`) to listeners the test
//! switches (see `common`). All variants run the same script in lockstep:
//!
//! 1. baseline: every peer up; pick a victim peer that receives traffic
//!    (for keyed balancers: the peer of key 0, or ip_hash's peer);
//! 2. the victim's check listener refuses: it is seen down within the
//!    fixed-rate window `[(fall-1)*interval, fall*interval]` (+ slack), and
//!    then no proxied request reaches it (its traffic server's accept count
//!    stays 0; replies name the serving peer); with `hash` the keys of the
//!    other peers do not move;
//! 3. the check listener serves again: up within `[(rise-1)*i, rise*i]`,
//!    and the victim gets traffic again (hashed keys return to it);
//! 4. every check refuses: requests fail fast (http 502, stream closed
//!    within 1 s) and reach no peer.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use healthcheck_t::peers::{Peers, Role};
use healthcheck_t::{
    assert_within, first_seen, free_ports, http_get, ms, stream_roundtrip, Kind, Nginx, Row,
};

const INTERVAL: u64 = 200;
const FALL: u64 = 3;
const RISE: u64 = 2;
/// Requests sent per phase and variant.
const REQUESTS: usize = 30;
/// Keys probed for hash balancers (http `?x=k`, stream: listen port `k`).
const KEYS: usize = 12;
/// Scheduling slack on top of a transition's fixed-rate window.
const LATE_SLACK: Duration = Duration::from_millis(INTERVAL + 300);
/// A round that started just before the switch may already fail (its
/// connection is reset when the listener closes): the window opens at most
/// one settle period earlier.
const EARLY_SLACK: Duration = Duration::from_millis(100);
/// "Quickly", for the all-down answer.
const FAST: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    /// No key: rr, weighted rr, least_conn, random.
    None,
    /// `hash` / `hash ... consistent`: keys of other peers never move.
    Hash,
    /// ip_hash: every request from 127.0.0.1 goes to the same peer.
    ClientIp,
}

struct Balancer {
    /// Directive in http, `None` if http has no such method.
    http: Option<&'static str>,
    /// Directive in stream, `None` if stream has no such method.
    stream: Option<&'static str>,
    /// `weight=` of the three peers.
    weights: [u32; 3],
    key: Key,
}

const RR: Balancer = Balancer {
    http: Some(""),
    stream: Some(""),
    weights: [1, 1, 1],
    key: Key::None,
};
const WEIGHTED: Balancer = Balancer {
    weights: [1, 2, 3],
    ..RR
};
const HASH: Balancer = Balancer {
    http: Some("hash $arg_x;"),
    stream: Some("hash $server_port;"),
    key: Key::Hash,
    ..RR
};
const HASH_CONSISTENT: Balancer = Balancer {
    http: Some("hash $arg_x consistent;"),
    stream: Some("hash $server_port consistent;"),
    key: Key::Hash,
    ..RR
};
const IP_HASH: Balancer = Balancer {
    http: Some("ip_hash;"),
    stream: None,
    key: Key::ClientIp,
    ..RR
};
const LEAST_CONN: Balancer = Balancer {
    http: Some("least_conn;"),
    stream: Some("least_conn;"),
    ..RR
};
const RANDOM: Balancer = Balancer {
    http: Some("random;"),
    stream: Some("random;"),
    ..RR
};
const RANDOM_TWO: Balancer = Balancer {
    http: Some("random two;"),
    stream: Some("random two;"),
    ..RR
};

/// One upstream of the test's nginx.
struct Variant {
    kind: Kind,
    upstream: String,
    peers: Peers,
    zone: bool,
    /// Stream: how many ports its server listens on, and (once nginx
    /// runs) which (key k uses `listen[k % len]`).
    ports: usize,
    listen: Vec<u16>,
    /// Peer that loses its check.
    victim: usize,
    /// Key -> serving peer, before the victim went down (hash only).
    baseline: BTreeMap<usize, usize>,
}

impl Variant {
    fn new(kind: Kind, name: &str, zone: bool, key: Key) -> Variant {
        let role = if kind == Kind::Http {
            Role::Http
        } else {
            Role::Raw
        };
        let ports = match (kind, key) {
            (Kind::Stream, Key::Hash) => KEYS,
            (Kind::Stream, _) => 1,
            (Kind::Http, _) => 0,
        };
        Variant {
            kind,
            upstream: format!("{}_{name}{}", kind.key(), if zone { "_zone" } else { "" }),
            peers: Peers::start(3, role),
            zone,
            ports,
            listen: Vec::new(),
            victim: 1,
            baseline: BTreeMap::new(),
        }
    }

    fn upstream_conf(&self, b: &Balancer) -> String {
        let method = match self.kind {
            Kind::Http => b.http,
            Kind::Stream => b.stream,
        }
        .expect("variant of a supported balancer");
        let mut s = format!("    upstream {} {{\n", self.upstream);
        if self.zone {
            s += &format!("        zone {} 64k;\n", self.upstream);
        }
        s += &format!("        {method}\n");
        for (i, name) in self.peers.names().iter().enumerate() {
            s += &format!("        server {name} weight={};\n", b.weights[i]);
        }
        s += &format!(
            "        check interval={INTERVAL} fall={FALL} rise={RISE} port={};\n    }}\n",
            self.peers.check_port
        );
        s
    }

    fn row(&self, i: usize) -> Row {
        Row::new(self.kind, &self.upstream, &self.peers.name(i))
    }

    fn rows(&self) -> Vec<Row> {
        (0..self.peers.len()).map(|i| self.row(i)).collect()
    }

    /// One proxied request with `key`; Ok(index of the serving peer).
    fn request(&self, http_port: u16, key: usize) -> Result<usize, String> {
        let reply = match self.kind {
            Kind::Http => {
                let r = http_get(http_port, &format!("/{}?x={key}", self.upstream))
                    .map_err(|e| format!("{}: request: {e}", self.upstream))?;
                if r.status != 200 {
                    return Err(format!(
                        "{}: status {} {:?}",
                        self.upstream,
                        r.status,
                        r.text()
                    ));
                }
                r.text()
            }
            Kind::Stream => {
                let port = self.listen[key % self.listen.len()];
                let r = stream_roundtrip(port, b"ping\n")
                    .map_err(|e| format!("{}: round trip: {e}", self.upstream))?;
                String::from_utf8_lossy(&r).into_owned()
            }
        };
        self.peers
            .index_of(&reply)
            .ok_or_else(|| format!("{}: reply {reply:?} names no peer", self.upstream))
    }

    fn must(&self, http_port: u16, key: usize) -> usize {
        self.request(http_port, key)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// How many of `REQUESTS` requests (keys 0..) each peer served.
    fn spread(&self, http_port: u16) -> [usize; 3] {
        let mut n = [0; 3];
        for k in 0..REQUESTS {
            n[self.must(http_port, k)] += 1;
        }
        n
    }

    fn key_map(&self, http_port: u16) -> BTreeMap<usize, usize> {
        (0..KEYS).map(|k| (k, self.must(http_port, k))).collect()
    }
}

/// nginx.conf for `variants` with fresh listen ports: the config, the
/// http port, and each variant's stream listen ports.
fn render(b: &Balancer, variants: &[Variant]) -> (String, (u16, Vec<Vec<u16>>)) {
    let need = 1 + variants.iter().map(|v| v.ports).sum::<usize>();
    let mut fresh = free_ports(need).into_iter();
    let http_port = fresh.next().unwrap();
    let mut listen = Vec::new();
    let mut http_ups = String::new();
    let mut locations = String::new();
    let mut stream_ups = String::new();
    let mut stream_servers = String::new();
    for v in variants {
        let ports: Vec<u16> = fresh.by_ref().take(v.ports).collect();
        match v.kind {
            Kind::Http => {
                http_ups += &v.upstream_conf(b);
                locations += &format!(
                    "        location /{0} {{ proxy_pass http://{0}; }}\n",
                    v.upstream
                );
            }
            Kind::Stream => {
                stream_ups += &v.upstream_conf(b);
                let listens: String = ports
                    .iter()
                    .map(|p| format!("listen 127.0.0.1:{p}; "))
                    .collect();
                stream_servers += &format!(
                    "    server {{ {listens}proxy_pass {}; proxy_connect_timeout 2s; }}\n",
                    v.upstream
                );
            }
        }
        listen.push(ports);
    }
    let stream = if stream_ups.is_empty() {
        String::new()
    } else {
        format!("stream {{\n{stream_ups}{stream_servers}}}\n")
    };
    let conf = format!(
        "http {{
    access_log off;
{http_ups}    server {{
        listen 127.0.0.1:{http_port};
{locations}        location /status {{ healthcheck_status json; }}
    }}
}}
{stream}"
    );
    (conf, (http_port, listen))
}

fn run(b: &Balancer, name: &str) {
    let mut variants = Vec::new();
    for (kind, method) in [(Kind::Http, b.http), (Kind::Stream, b.stream)] {
        if method.is_some() {
            for zone in [false, true] {
                variants.push(Variant::new(kind, name, zone, b.key));
            }
        }
    }
    let (ng, (http_port, listen)) = Nginx::builder().start_with(|| render(b, &variants));
    for (v, ports) in variants.iter_mut().zip(listen) {
        v.listen = ports;
    }
    let all_rows: Vec<Row> = variants.iter().flat_map(Variant::rows).collect();

    // 1. Baseline: every peer checked and up; choose the victims.
    first_seen(
        http_port,
        Instant::now(),
        Duration::from_secs(5),
        "every peer checked and up",
        &all_rows,
        |r, s| r.status(s) == Some("up") && r.int(s, "checks") >= 1,
    );
    for v in &mut variants {
        match b.key {
            Key::Hash => {
                v.baseline = v.key_map(http_port);
                v.victim = v.baseline[&0];
            }
            Key::ClientIp => v.victim = v.must(http_port, 0),
            Key::None => {
                let n = v.spread(http_port);
                assert!(
                    n[v.victim] > 0,
                    "{}: victim got no traffic: {n:?}",
                    v.upstream
                );
                if b.weights != [1, 1, 1] && !name.contains("random") {
                    assert_eq!(n, [5, 10, 15], "{}: weights 1:2:3", v.upstream);
                }
            }
        }
    }

    // 2. The victims' checks fail while their traffic ports still serve.
    let victims: Vec<Row> = variants.iter().map(|v| v.row(v.victim)).collect();
    let t0 = Instant::now();
    for v in &variants {
        v.peers.checks[v.victim].refuse();
    }
    let down = first_seen(
        http_port,
        t0,
        ms(FALL * INTERVAL) + LATE_SLACK + Duration::from_secs(2),
        "victims down",
        &victims,
        |r, s| r.status(s) == Some("down"),
    );
    for (row, at) in &down {
        assert_within(
            *at,
            ms((FALL - 1) * INTERVAL).saturating_sub(EARLY_SLACK),
            ms(FALL * INTERVAL) + LATE_SLACK,
            format!("{row} down after its check started refusing"),
        );
    }
    let s = healthcheck_t::status_json(http_port).expect("status");
    for v in &variants {
        let row = v.row(v.victim);
        assert_eq!(
            s.peer(row.kind, &row.upstream, &row.name).unwrap()["last_failure_reason"],
            "refused",
            "{row}: {s}"
        );
        for i in (0..3).filter(|&i| i != v.victim) {
            assert_eq!(v.row(i).status(&s), Some("up"), "{}: {s}", v.row(i));
        }
        v.peers.reset_traffic();
    }
    for v in &variants {
        match b.key {
            Key::Hash => {
                let now = v.key_map(http_port);
                for (k, before) in &v.baseline {
                    if *before == v.victim {
                        assert_ne!(
                            now[k], v.victim,
                            "{}: key {k} still on the victim",
                            v.upstream
                        );
                    } else {
                        assert_eq!(
                            now[k], *before,
                            "{}: key {k} moved off a healthy peer (before {:?}, now {now:?}, victim {})",
                            v.upstream, v.baseline, v.victim
                        );
                    }
                }
                v.spread(http_port);
            }
            Key::ClientIp | Key::None => {
                let n = v.spread(http_port);
                if b.key == Key::None {
                    for i in (0..3).filter(|&i| i != v.victim) {
                        assert!(
                            n[i] > 0,
                            "{}: healthy peer {i} got nothing: {n:?}",
                            v.upstream
                        );
                    }
                }
            }
        }
        assert_eq!(
            v.peers.traffic[v.victim].stats().accepted(),
            0,
            "{}: the check-down peer {} received proxied connections",
            v.upstream,
            v.peers.name(v.victim)
        );
    }

    // 3. The checks pass again: up after `rise` rounds, traffic returns.
    let t1 = Instant::now();
    for v in &variants {
        v.peers.checks[v.victim].serve();
    }
    let up = first_seen(
        http_port,
        t1,
        ms(RISE * INTERVAL) + LATE_SLACK + Duration::from_secs(2),
        "victims up again",
        &victims,
        |r, s| r.status(s) == Some("up"),
    );
    for (row, at) in &up {
        assert_within(
            *at,
            ms((RISE - 1) * INTERVAL).saturating_sub(EARLY_SLACK),
            ms(RISE * INTERVAL) + LATE_SLACK,
            format!("{row} up after its check started passing"),
        );
    }
    for v in &variants {
        v.peers.reset_traffic();
        match b.key {
            Key::Hash => assert_eq!(
                v.key_map(http_port),
                v.baseline,
                "{}: keys did not return to their peers",
                v.upstream
            ),
            Key::ClientIp => assert_eq!(
                v.spread(http_port)[v.victim],
                REQUESTS,
                "{}: ip_hash did not return to its peer",
                v.upstream
            ),
            Key::None => {
                let n = v.spread(http_port);
                assert!(
                    n[v.victim] > 0,
                    "{}: no traffic after recovery: {n:?}",
                    v.upstream
                );
            }
        }
    }

    // 4. Every check fails: nginx's usual fast failure, no peer reached.
    let t2 = Instant::now();
    for v in &variants {
        for c in &v.peers.checks {
            c.refuse();
        }
    }
    first_seen(
        http_port,
        t2,
        ms(FALL * INTERVAL) + LATE_SLACK + Duration::from_secs(2),
        "every peer down",
        &all_rows,
        |r, s| r.status(s) == Some("down"),
    );
    for v in &variants {
        v.peers.reset_traffic();
        for key in 0..3 {
            let start = Instant::now();
            match v.kind {
                Kind::Http => {
                    let r = http_get(http_port, &format!("/{}?x={key}", v.upstream))
                        .unwrap_or_else(|e| panic!("{}: all down: {e}", v.upstream));
                    assert_eq!(r.status, 502, "{}: all peers down", v.upstream);
                }
                Kind::Stream => {
                    let port = v.listen[key % v.listen.len()];
                    if let Ok(reply) = stream_roundtrip(port, b"ping\n") {
                        assert!(
                            reply.is_empty(),
                            "{}: all peers down, got {:?}",
                            v.upstream,
                            String::from_utf8_lossy(&reply)
                        );
                    }
                }
            }
            assert!(
                start.elapsed() < FAST,
                "{}: all-down answer took {:?}",
                v.upstream,
                start.elapsed()
            );
        }
        assert_eq!(
            v.peers.accepted(),
            vec![0, 0, 0],
            "{}: a check-down peer was connected to",
            v.upstream
        );
    }
    drop(ng);
}

#[test]
fn round_robin() {
    run(&RR, "rr");
}

#[test]
fn weighted_round_robin() {
    run(&WEIGHTED, "wrr");
}

#[test]
fn hash() {
    run(&HASH, "hash");
}

#[test]
fn hash_consistent() {
    run(&HASH_CONSISTENT, "chash");
}

#[test]
fn ip_hash() {
    run(&IP_HASH, "iphash");
}

#[test]
fn least_conn() {
    run(&LEAST_CONN, "lc");
}

#[test]
fn random() {
    run(&RANDOM, "random");
}

#[test]
fn random_two() {
    run(&RANDOM_TWO, "random2");
}
