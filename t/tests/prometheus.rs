//! The Prometheus page at fleet scale (docs/status.md; docs/operations.md, Cardinality): what a scrape costs per peer, which families the default
//! (lean) page and the full page (`?histogram=on`, or `histogram=on` on the
//! directive) carry, and that the series set a dashboard sees never churns.
//!
//! Per checked peer, the default page has `nginx_upstream_server_active`,
//! `_checks_total`, `_check_last_duration_seconds` and one
//! `_check_failures_total{reason}` per reason its check type can produce:
//!
//! | type | reasons | default | full |
//! |---|---|---|---|
//! | tcp | refused timeout reset closed icmp-unreachable error | 9 | 31 |
//! | udp | icmp-unreachable | 4 | 26 |
//! | tcp with `expect` | the tcp six + mismatch invalid | 11 | 33 |
//! | udp with `expect` | timeout icmp-unreachable error mismatch | 7 | 29 |
//! | http | the tcp six + status mismatch invalid | 12 | 35 |
//!
//! The full page adds `_rise`, `_fall`, `_last_change_timestamp_seconds`,
//! the peer transitions' four (`_effective_weight`,
//! `_slow_start_remaining_seconds`, `_draining`, `_sessions_shut_total`),
//! the `nginx_upstream_server_check_duration_seconds` histogram (13
//! buckets, `_sum`, `_count`) and, for http peers,
//! `nginx_upstream_server_http_status`. Every page fetched here must pass
//! `promtool check metrics`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use healthcheck_t::conf::http_conf_with;
use healthcheck_t::http_backend::{HttpBackend, Reply};
use healthcheck_t::page::{parse_prom, parse_prom_page, promtool_check, Fmt, Sample, PEER_LABELS};
use healthcheck_t::{
    free_port, http_get, poll_status_json, Backend, Kind, Mode, Nginx, Status, UdpBackend, UdpMode,
};

/// Long enough for a few rounds at the intervals used here.
const WAIT: Duration = Duration::from_secs(10);

const TCP_REASONS: [&str; 6] = [
    "refused",
    "timeout",
    "reset",
    "closed",
    "icmp-unreachable",
    "error",
];
const UDP_REASONS: [&str; 1] = ["icmp-unreachable"];
const TCP_EXPECT_REASONS: [&str; 8] = [
    "refused",
    "timeout",
    "reset",
    "closed",
    "icmp-unreachable",
    "error",
    "mismatch",
    "invalid",
];
const UDP_EXPECT_REASONS: [&str; 4] = ["timeout", "icmp-unreachable", "error", "mismatch"];
const HTTP_REASONS: [&str; 9] = [
    "refused",
    "timeout",
    "reset",
    "closed",
    "icmp-unreachable",
    "error",
    "status",
    "mismatch",
    "invalid",
];

/// The page-wide families, on both pages.
const PAGE_FAMILIES: [&str; 4] = [
    "nginx_upstream_count_total",
    "nginx_upstream_count_up",
    "nginx_upstream_count_down",
    "nginx_upstream_count_generation",
];

/// One series per upstream (docs/status.md).
const UPSTREAM_FAMILIES: [&str; 2] = ["nginx_upstream_peers_up", "nginx_upstream_fail_open"];

const ACTIVE: &str = "nginx_upstream_server_active";
const CHECKS: &str = "nginx_upstream_server_checks_total";
const FAILURES: &str = "nginx_upstream_server_check_failures_total";
const LAST_DURATION: &str = "nginx_upstream_server_check_last_duration_seconds";
/// The full page's peer-transition families, one series per peer.
const TRANSITIONS: [&str; 4] = [
    "nginx_upstream_server_effective_weight",
    "nginx_upstream_server_slow_start_remaining_seconds",
    "nginx_upstream_server_draining",
    "nginx_upstream_server_sessions_shut_total",
];
const RISE: &str = "nginx_upstream_server_rise";
const FALL: &str = "nginx_upstream_server_fall";
const LAST_CHANGE: &str = "nginx_upstream_server_last_change_timestamp_seconds";
const HISTOGRAM: &str = "nginx_upstream_server_check_duration_seconds";
const HTTP_STATUS: &str = "nginx_upstream_server_http_status";

/// Buckets of the duration histogram, `+Inf` included.
const BUCKETS: usize = 13;

/// The check types the tests configure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    Tcp,
    Udp,
    /// `type=tcp` with a `check_match` block's `send`/`expect`.
    TcpExpect,
    /// `type=udp` with a `check_match` block's `expect`.
    UdpExpect,
    Http,
}

impl Check {
    /// The `type` label.
    fn name(self) -> &'static str {
        match self {
            Check::Tcp | Check::TcpExpect => "tcp",
            Check::Udp | Check::UdpExpect => "udp",
            Check::Http => "http",
        }
    }

    fn reasons(self) -> &'static [&'static str] {
        match self {
            Check::Tcp => &TCP_REASONS,
            Check::Udp => &UDP_REASONS,
            Check::TcpExpect => &TCP_EXPECT_REASONS,
            Check::UdpExpect => &UDP_EXPECT_REASONS,
            Check::Http => &HTTP_REASONS,
        }
    }

    /// Series of one peer on the default page: 3 + its reasons.
    fn lean_series(self) -> usize {
        3 + self.reasons().len()
    }

    /// Series of one peer on the full page: rise, fall, last change, the
    /// transitions' four, the histogram's buckets, `_sum` and `_count`, and
    /// `http_status` for http.
    fn full_series(self) -> usize {
        self.lean_series() + 3 + TRANSITIONS.len() + BUCKETS + 2 + usize::from(self == Check::Http)
    }
}

// ---------------------------------------------------------------------------
// Scraping and reading pages.

/// GET `path`: a 200 with the Prometheus content type whose body passes
/// `promtool check metrics`; the body.
fn scrape(port: u16, path: &str) -> String {
    let r = http_get(port, path).unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    assert_eq!(
        r.header("Content-Type"),
        Some(Fmt::Prometheus.content_type()),
        "GET {path}: {:?}",
        r.headers
    );
    let body = r.utf8().to_string();
    promtool_check(&body, path);
    body
}

/// A peer: `upstream_type` and `index`, which identify it on the page.
type PeerKey = (String, u64);

fn peer_key(s: &Sample) -> Option<PeerKey> {
    Some((
        s.label("upstream_type")?.to_string(),
        s.label("index")?.parse().ok()?,
    ))
}

/// The samples of every peer, by [`PeerKey`].
fn by_peer(samples: &[Sample]) -> BTreeMap<PeerKey, Vec<Sample>> {
    let mut out: BTreeMap<PeerKey, Vec<Sample>> = BTreeMap::new();
    for s in samples {
        if s.name.starts_with("nginx_upstream_server_") {
            let key = peer_key(s).unwrap_or_else(|| panic!("peer series without a peer: {s:?}"));
            out.entry(key).or_default().push(s.clone());
        }
    }
    out
}

/// The key of the peer `name` in `upstream` (of group `group`).
fn find_peer(samples: &[Sample], group: Kind, upstream: &str, name: &str) -> PeerKey {
    samples
        .iter()
        .find(|s| {
            s.name == ACTIVE
                && s.label("upstream_type") == Some(group.key())
                && s.label("upstream") == Some(upstream)
                && s.label("name") == Some(name)
        })
        .and_then(peer_key)
        .unwrap_or_else(|| panic!("no {ACTIVE} for {group:?} {upstream} {name}"))
}

/// Every series of a page: name and sorted labels.
fn series_set(samples: &[Sample]) -> BTreeSet<(String, Vec<(String, String)>)> {
    samples
        .iter()
        .map(|s| {
            let mut labels = s.labels.clone();
            labels.sort();
            (s.name.clone(), labels)
        })
        .collect()
}

/// The value of the one sample of `series` (a name and extra labels) among
/// `samples`, parsed as f64.
fn value(samples: &[Sample], series: &str, extra: &[(&str, &str)]) -> f64 {
    let found: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == series && extra.iter().all(|(k, v)| s.label(k) == Some(v)))
        .collect();
    assert_eq!(found.len(), 1, "{series} {extra:?}: {found:?}");
    found[0]
        .value
        .parse()
        .unwrap_or_else(|_| panic!("{series}: value {:?}", found[0].value))
}

/// The page-wide families, once each, and no family the page does not
/// document.
fn assert_page_families(samples: &[Sample], full: bool, what: &str) {
    for f in PAGE_FAMILIES {
        let n = samples.iter().filter(|s| s.name == f).count();
        assert_eq!(n, 1, "{what}: {f} appears {n} times");
    }
    // The per-upstream families: once per upstream, labelled by it alone.
    for f in UPSTREAM_FAMILIES {
        let mut seen = BTreeSet::new();
        for s in samples.iter().filter(|s| s.name == f) {
            let names: Vec<&str> = s.labels.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(names, ["upstream_type", "upstream"], "{what}: {s:?}");
            assert!(seen.insert(s.labels.clone()), "{what}: {f} twice for {s:?}");
        }
        assert!(!seen.is_empty(), "{what}: no {f}");
    }
    let mut known: Vec<String> = PAGE_FAMILIES
        .iter()
        .chain(&UPSTREAM_FAMILIES)
        .map(|s| s.to_string())
        .collect();
    known.extend([ACTIVE, CHECKS, FAILURES, LAST_DURATION].map(String::from));
    if full {
        known.extend([RISE, FALL, LAST_CHANGE, HTTP_STATUS].map(String::from));
        known.extend(TRANSITIONS.map(String::from));
        known.extend(["_bucket", "_sum", "_count"].map(|s| format!("{HISTOGRAM}{s}")));
    }
    for s in samples {
        assert!(known.contains(&s.name), "{what}: unexpected series {s:?}");
    }
}

/// One peer's series on the default page: exactly active, checks_total,
/// last_duration and a failure counter per reason of `check`, with the
/// peer labels in order.
fn assert_lean_peer(series: &[Sample], check: Check, what: &str) {
    assert_eq!(
        series.len(),
        check.lean_series(),
        "{what}: {} series on the default page for a {check:?} peer, want {}: {series:#?}",
        series.len(),
        check.lean_series()
    );
    assert_peer_labels(series, check, what);
    for f in [ACTIVE, CHECKS, LAST_DURATION] {
        let n = series.iter().filter(|s| s.name == f).count();
        assert_eq!(n, 1, "{what}: {f} x{n}");
    }
    let reasons: BTreeSet<&str> = series
        .iter()
        .filter(|s| s.name == FAILURES)
        .map(|s| s.label("reason").expect("failures without a reason"))
        .collect();
    let want: BTreeSet<&str> = check.reasons().iter().copied().collect();
    assert_eq!(
        reasons,
        want,
        "{what}: failure reasons of a {} peer",
        check.name()
    );
    for s in series {
        assert!(
            ![RISE, FALL, LAST_CHANGE, HTTP_STATUS].contains(&s.name.as_str())
                && !s.name.starts_with(HISTOGRAM),
            "{what}: {} is on the full page only: {s:?}",
            s.name
        );
    }
}

/// One peer's series on the full page: the lean ones, rise, fall, last
/// change, a well-formed histogram and (http) `http_status`.
fn assert_full_peer(series: &[Sample], check: Check, what: &str) {
    assert_eq!(
        series.len(),
        check.full_series(),
        "{what}: {} series on the full page for a {check:?} peer, want {}: {series:#?}",
        series.len(),
        check.full_series()
    );
    assert_peer_labels(series, check, what);
    let lean: Vec<Sample> = series
        .iter()
        .filter(|s| [ACTIVE, CHECKS, FAILURES, LAST_DURATION].contains(&s.name.as_str()))
        .cloned()
        .collect();
    assert_lean_peer(&lean, check, what);
    for f in [RISE, FALL, LAST_CHANGE].into_iter().chain(TRANSITIONS) {
        let n = series.iter().filter(|s| s.name == f).count();
        assert_eq!(n, 1, "{what}: {f} x{n}");
    }
    let http_status = series.iter().filter(|s| s.name == HTTP_STATUS).count();
    assert_eq!(
        http_status,
        usize::from(check == Check::Http),
        "{what}: {HTTP_STATUS} for a {} peer",
        check.name()
    );
    assert_histogram(series, what);
}

/// Buckets in ascending `le` ending at `+Inf`, cumulative, `+Inf` equal to
/// `_count`, one `_sum`.
fn assert_histogram(series: &[Sample], what: &str) {
    let buckets: Vec<&Sample> = series
        .iter()
        .filter(|s| s.name == format!("{HISTOGRAM}_bucket"))
        .collect();
    assert_eq!(buckets.len(), BUCKETS, "{what}: buckets {buckets:#?}");
    let bound = |s: &Sample| -> f64 {
        match s.label("le").expect("bucket without le") {
            "+Inf" => f64::INFINITY,
            le => le.parse().unwrap_or_else(|_| panic!("{what}: le {le:?}")),
        }
    };
    let count = |s: &Sample| -> u64 {
        s.value
            .parse()
            .unwrap_or_else(|_| panic!("{what}: bucket value {s:?}"))
    };
    for w in buckets.windows(2) {
        assert!(bound(w[0]) < bound(w[1]), "{what}: le order {w:?}");
        assert!(count(w[0]) <= count(w[1]), "{what}: not cumulative {w:?}");
    }
    assert_eq!(buckets[BUCKETS - 1].label("le"), Some("+Inf"), "{what}");
    let total = series
        .iter()
        .find(|s| s.name == format!("{HISTOGRAM}_count"))
        .unwrap_or_else(|| panic!("{what}: no {HISTOGRAM}_count"));
    assert_eq!(
        count(buckets[BUCKETS - 1]),
        count(total),
        "{what}: +Inf vs _count"
    );
    let sums = series
        .iter()
        .filter(|s| s.name == format!("{HISTOGRAM}_sum"))
        .count();
    assert_eq!(sums, 1, "{what}: {HISTOGRAM}_sum");
}

/// Every per-peer series starts with the peer labels, in order, with the
/// peer's check type; only `reason` (failures) and `le` (buckets) follow.
fn assert_peer_labels(series: &[Sample], check: Check, what: &str) {
    for s in series {
        let names: Vec<&str> = s.labels.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names.get(..PEER_LABELS.len()),
            Some(&PEER_LABELS[..]),
            "{what}: {s:?}"
        );
        let mut extra = &names[PEER_LABELS.len()..];
        if extra.first() == Some(&"server") {
            extra = &extra[1..];
        }
        let want: &[&str] = if s.name == FAILURES {
            &["reason"]
        } else if s.name.ends_with("_bucket") {
            &["le"]
        } else {
            &[]
        };
        assert_eq!(extra, want, "{what}: labels of {s:?}");
        assert_eq!(s.label("type"), Some(check.name()), "{what}: {s:?}");
    }
}

/// The http server with the status page in JSON at `/status` and the
/// Prometheus page at `/metrics` (lean by default) and `/full` (the
/// directive's `histogram=on`).
fn http_block(port: u16, upstreams: &str) -> String {
    http_conf_with(
        port,
        upstreams,
        "        location /metrics { healthcheck_status prometheus; }
        location /full { healthcheck_status prometheus histogram=on; }",
    )
}

/// Poll until every peer of the page has run at least `n` rounds.
fn wait_checked(port: u16, peers: usize, n: i64) -> Status {
    poll_status_json(port, WAIT, format!("{peers} peers checked {n}x"), |s| {
        let all: Vec<_> = s
            .peers(Kind::Http)
            .iter()
            .chain(s.peers(Kind::Stream))
            .collect();
        all.len() == peers && all.iter().all(|p| p["checks"].as_i64() >= Some(n))
    })
}

// ---------------------------------------------------------------------------

/// A tcp peer costs 9 series on the default page and a udp peer 4, in an
/// http or a stream upstream, up or down; nothing of the full page leaks
/// onto it.
#[test]
fn default_page_has_9_series_per_tcp_peer_and_4_per_udp_peer() {
    let up = Backend::start();
    let refusing = Backend::with_mode(Mode::Refuse);
    let udp_up = UdpBackend::start();
    let udp_closed = UdpBackend::with_mode(UdpMode::Closed);
    let port = free_port();
    let check_tcp = "check interval=100 rise=1 fall=1 type=tcp;";
    let check_udp = "check interval=100 timeout=50 rise=1 fall=1 type=udp;";
    let (a_up, a_refusing) = (up.addr(), refusing.addr());
    let (a_udp_up, a_udp_closed) = (udp_up.addr(), udp_closed.addr());
    let http = http_block(
        port,
        &format!(
            "    upstream ht {{ server {a_up}; server {a_refusing}; {check_tcp} }}\n    \
             upstream hu {{ server {a_udp_up}; {check_udp} }}\n"
        ),
    );
    let ng = Nginx::start(&format!(
        "{http}
stream {{
    upstream st {{ server {a_up}; {check_tcp} }}
    upstream su {{ server {a_udp_up}; server {a_udp_closed}; {check_udp} }}
}}"
    ));
    poll_status_json(port, WAIT, "the refusing and closed peers down", |s| {
        s.is_down(Kind::Http, "ht", &refusing.addr())
            && s.is_down(Kind::Stream, "su", &udp_closed.addr())
            && s.peers(Kind::Http)
                .iter()
                .chain(s.peers(Kind::Stream))
                .all(|p| p["checks"].as_i64() >= Some(2))
    });
    let page = scrape(port, "/metrics");
    let samples = parse_prom(&page);
    assert_page_families(&samples, false, "default page");
    let peers = by_peer(&samples);
    assert_eq!(peers.len(), 6, "peers on the page: {:?}", peers.keys());
    let cases = [
        (Kind::Http, "ht", up.addr(), Check::Tcp, true),
        (Kind::Http, "ht", refusing.addr(), Check::Tcp, false),
        (Kind::Http, "hu", udp_up.addr(), Check::Udp, true),
        (Kind::Stream, "st", up.addr(), Check::Tcp, true),
        (Kind::Stream, "su", udp_up.addr(), Check::Udp, true),
        (Kind::Stream, "su", udp_closed.addr(), Check::Udp, false),
    ];
    for (group, u, name, check, is_up) in &cases {
        let what = format!("default page, {group:?} {u} {name}");
        let key = find_peer(&samples, *group, u, name);
        let series = &peers[&key];
        assert_lean_peer(series, *check, &what);
        let active = value(series, ACTIVE, &[]);
        assert_eq!(active, if *is_up { 1.0 } else { 0.0 }, "{what}");
        assert!(value(series, CHECKS, &[]) >= 2.0, "{what}: checks_total");
    }
    let refused_key = find_peer(&samples, Kind::Http, "ht", &refusing.addr());
    assert!(
        value(&peers[&refused_key], FAILURES, &[("reason", "refused")]) >= 1.0,
        "the refusing peer's refused counter"
    );
    let closed_key = find_peer(&samples, Kind::Stream, "su", &udp_closed.addr());
    assert!(
        value(
            &peers[&closed_key],
            FAILURES,
            &[("reason", "icmp-unreachable")]
        ) >= 1.0,
        "the closed udp peer's icmp-unreachable counter"
    );
    assert_eq!(value(&samples, "nginx_upstream_count_total", &[]), 6.0);
    assert_eq!(value(&samples, "nginx_upstream_count_down", &[]), 2.0);
    drop(ng);
}

/// 100 tcp peers in upstreams `pool_000` .. `pool_099`, named
/// `127.0.0.1:PORT`: each costs at most 1500 bytes on the default page
/// (docs/operations.md, Cardinality: about 1 400), and so does the whole page per peer.
#[test]
fn tcp_peer_costs_at_most_1500_bytes_on_the_default_page() {
    const PEERS: usize = 100;
    let b = Backend::start();
    let refusing = Backend::with_mode(Mode::Refuse);
    let port = free_port();
    // Every third peer refuses: down peers print the same series.
    let upstreams: String = (0..PEERS)
        .map(|i| {
            let server = if i % 3 == 0 {
                refusing.addr()
            } else {
                b.addr()
            };
            format!(
                "    upstream pool_{i:03} {{ server {server}; \
                 check interval=500 rise=1 fall=1 type=tcp; }}\n"
            )
        })
        .collect();
    let _ng = Nginx::start(&http_block(port, &upstreams));
    wait_checked(port, PEERS, 2);
    let page = scrape(port, "/metrics");
    let samples = parse_prom(&page);
    assert_page_families(&samples, false, "default page");
    // Bytes of each peer's sample lines, newline included.
    let mut bytes: BTreeMap<PeerKey, usize> = BTreeMap::new();
    for line in page
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let s = &parse_prom(line)[0];
        if let Some(key) = peer_key(s) {
            *bytes.entry(key).or_default() += line.len() + 1;
        }
    }
    assert_eq!(bytes.len(), PEERS, "peers on the page");
    let by_peer = by_peer(&samples);
    for (key, series) in &by_peer {
        assert_lean_peer(series, Check::Tcp, &format!("peer {key:?}"));
        let upstream = series[0].label("upstream").unwrap();
        assert!(
            upstream.starts_with("pool_") && upstream.len() == 8,
            "{upstream}"
        );
    }
    let (worst_key, worst) = bytes.iter().max_by_key(|(_, n)| **n).unwrap();
    assert!(
        *worst <= 1500,
        "peer {worst_key:?} takes {worst} bytes on the default page:\n{}",
        page.lines()
            .filter(|l| parse_prom(l).first().and_then(peer_key).as_ref() == Some(worst_key))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Here every peer is an upstream of its own: the per-upstream series
    // (docs/operations.md, Cardinality) cost per upstream, not per peer, and are
    // bounded on their own.
    let upstream_bytes: usize = page
        .lines()
        .filter(|l| {
            UPSTREAM_FAMILIES
                .iter()
                .any(|f| l.starts_with(&format!("{f}{{")))
        })
        .map(|l| l.len() + 1)
        .sum();
    let per_upstream = upstream_bytes / PEERS;
    assert!(
        per_upstream <= 200,
        "{upstream_bytes} bytes of upstream series for {PEERS} upstreams"
    );
    let per_peer = (page.len() - upstream_bytes) / PEERS;
    assert!(
        per_peer <= 1500,
        "the default page takes {} bytes for {PEERS} peers ({per_peer} per peer)",
        page.len()
    );
    eprintln!(
        "default page: {} bytes for {PEERS} tcp peers in {PEERS} upstreams; the largest peer \
         {worst} bytes, {per_peer} per peer with the page's own lines, {per_upstream} per \
         upstream",
        page.len()
    );
}

/// The full page by query (`?histogram=on`) and by directive
/// (`healthcheck_status prometheus histogram=on;`), the query overriding
/// the directive both ways, and an unknown value refused with a reason.
#[test]
fn full_page_by_query_and_by_directive() {
    let b = Backend::start();
    let refusing = Backend::with_mode(Mode::Refuse);
    let u = UdpBackend::start();
    let port = free_port();
    let _ng = Nginx::start(&format!(
        "{}
stream {{
    upstream su {{ server {u}; check interval=100 timeout=50 rise=1 fall=1 type=udp; }}
}}",
        http_block(
            port,
            &format!(
                "    upstream ht {{ server {b}; server {r}; \
                 check interval=100 rise=1 fall=1 type=tcp; }}\n",
                b = b.addr(),
                r = refusing.addr()
            )
        ),
        u = u.addr()
    ));
    wait_checked(port, 3, 3);

    let by_query = scrape(port, "/metrics?histogram=on");
    let by_directive = scrape(port, "/full");
    let lean_by_query = scrape(port, "/full?histogram=off");
    let lean = scrape(port, "/metrics");
    let lean_explicit = scrape(port, "/metrics?histogram=off");

    for (page, what) in [
        (&by_query, "?histogram=on"),
        (&by_directive, "histogram=on"),
    ] {
        // One rise and fall per printed row, unique series, peer labels.
        parse_prom_page(page, what);
        let samples = parse_prom(page);
        assert_page_families(&samples, true, what);
        let peers = by_peer(&samples);
        assert_eq!(peers.len(), 3, "{what}: peers {:?}", peers.keys());
        for (group, up, name, check) in [
            (Kind::Http, "ht", b.addr(), Check::Tcp),
            (Kind::Http, "ht", refusing.addr(), Check::Tcp),
            (Kind::Stream, "su", u.addr(), Check::Udp),
        ] {
            let series = &peers[&find_peer(&samples, group, up, &name)];
            let what = format!("{what}, {group:?} {up} {name}");
            assert_full_peer(series, check, &what);
            let count = value(series, &format!("{HISTOGRAM}_count"), &[]);
            assert!(
                count <= value(series, CHECKS, &[]),
                "{what}: more histogram rounds than rounds"
            );
        }
        let up_peer = &peers[&find_peer(&samples, Kind::Http, "ht", &b.addr())];
        assert!(
            value(up_peer, RISE, &[]) >= 1.0,
            "{what}: rise of the up peer"
        );
        assert!(
            value(up_peer, &format!("{HISTOGRAM}_count"), &[]) >= 1.0,
            "{what}: the up peer's rounds are in the histogram"
        );
        let down_peer = &peers[&find_peer(&samples, Kind::Http, "ht", &refusing.addr())];
        assert!(
            value(down_peer, FALL, &[]) >= 1.0,
            "{what}: fall of the down peer"
        );
        assert!(
            value(down_peer, LAST_CHANGE, &[]) > 1.0e9,
            "{what}: the down peer changed state (unix seconds)"
        );
    }
    assert_eq!(
        series_set(&parse_prom(&by_query)),
        series_set(&parse_prom(&by_directive)),
        "the full page by query and by directive"
    );
    for (page, what) in [
        (&lean_by_query, "/full?histogram=off"),
        (&lean_explicit, "/metrics?histogram=off"),
    ] {
        assert_eq!(
            series_set(&parse_prom(page)),
            series_set(&parse_prom(&lean)),
            "{what} is the default page"
        );
    }
    let samples = parse_prom(&lean);
    assert_page_families(&samples, false, "default page");
    for series in by_peer(&samples).values() {
        let check = if series[0].label("type") == Some("udp") {
            Check::Udp
        } else {
            Check::Tcp
        };
        assert_lean_peer(series, check, "default page");
    }

    for path in ["/metrics?histogram=bogus", "/full?histogram=bogus"] {
        let r = http_get(port, path).unwrap_or_else(|e| panic!("GET {path}: {e}"));
        assert_eq!(r.status, 400, "GET {path}: {}", r.text());
        assert!(
            r.text()
                .contains("unknown histogram \"bogus\": use on or off"),
            "GET {path}: {:?}",
            r.text()
        );
    }
}

/// The first scrape after start and one after peers went down and rounds
/// ran have the same series (names and label sets), on both pages: state
/// changes never churn series.
#[test]
fn series_are_the_same_from_the_first_scrape_on() {
    let b = Backend::start();
    let flaky = Backend::start();
    let u = UdpBackend::start();
    let port = free_port();
    let ng = Nginx::start(&format!(
        "{}
stream {{
    upstream su {{ server {u}; check interval=100 timeout=50 rise=1 fall=1 type=udp; }}
    upstream st {{ server {flaky}; check interval=100 rise=1 fall=1 type=tcp default_down=true; }}
}}",
        http_block(
            port,
            &format!(
                "    upstream ht {{ server {b}; server {flaky}; \
                 check interval=100 rise=1 fall=1 type=tcp; }}\n",
                b = b.addr(),
                flaky = flaky.addr()
            )
        ),
        u = u.addr(),
        flaky = flaky.addr()
    ));
    // As early as nginx answers: before or around the first round.
    let first_lean = scrape(port, "/metrics");
    let first_full = scrape(port, "/full");

    wait_checked(port, 4, 2);
    flaky.set_mode(Mode::Refuse);
    u.set_mode(UdpMode::Closed);
    let s = poll_status_json(port, WAIT, "the flaky and udp peers down", |s| {
        s.is_down(Kind::Http, "ht", &flaky.addr())
            && s.is_down(Kind::Stream, "st", &flaky.addr())
            && s.is_down(Kind::Stream, "su", &u.addr())
    });
    let rounds = s.checks(Kind::Http, "ht", &b.addr());
    poll_status_json(port, WAIT, "more rounds", |s| {
        s.checks(Kind::Http, "ht", &b.addr()) >= rounds + 3
    });
    let later_lean = scrape(port, "/metrics");
    let later_full = scrape(port, "/full");

    for (first, later, what) in [
        (&first_lean, &later_lean, "default page"),
        (&first_full, &later_full, "full page"),
    ] {
        let (a, z) = (parse_prom(first), parse_prom(later));
        let (sa, sz) = (series_set(&a), series_set(&z));
        let gone: Vec<_> = sa.difference(&sz).collect();
        let new: Vec<_> = sz.difference(&sa).collect();
        assert!(
            gone.is_empty() && new.is_empty(),
            "{what}: series changed between scrapes\n  gone: {gone:#?}\n  new: {new:#?}"
        );
        assert_eq!(by_peer(&z).len(), 4, "{what}: peers");
        // The values did move: the same series, later state.
        let key = find_peer(&z, Kind::Http, "ht", &flaky.addr());
        assert_eq!(value(&by_peer(&z)[&key], ACTIVE, &[]), 0.0, "{what}");
        assert!(
            value(&by_peer(&z)[&key], CHECKS, &[]) > value(&by_peer(&a)[&key], CHECKS, &[]),
            "{what}: checks_total did not grow"
        );
    }
    drop(ng);
}

/// An http peer: 12 series on the default page (the nine reasons an http
/// check can fail with), 31 on the full page with
/// `nginx_upstream_server_http_status` (the last status code); the series
/// are there from the first scrape on, and a 503 counts as `status`.
#[test]
fn http_peer_has_12_series_and_http_status_on_the_full_page() {
    let ok = HttpBackend::start(Reply::status(200));
    let failing = HttpBackend::start(Reply::status(200));
    let port = free_port();
    let _ng = Nginx::start(&http_block(
        port,
        &format!(
            "    upstream web {{ server {}; server {}; \
             check interval=100 rise=1 fall=1 type=http; }}\n",
            ok.addr(),
            failing.addr()
        ),
    ));
    let first_lean = scrape(port, "/metrics");
    let first_full = scrape(port, "/full");
    wait_checked(port, 2, 2);
    failing.set_reply(Reply::status(503));
    poll_status_json(port, WAIT, "the 503 peer down", |s| {
        s.is_down(Kind::Http, "web", &failing.addr())
            && s.row(Kind::Http, "web", &failing.addr())["last_failure_reason"] == "status"
    });
    let lean = scrape(port, "/metrics");
    let full = scrape(port, "/full");

    let samples = parse_prom(&lean);
    assert_page_families(&samples, false, "default page");
    let peers = by_peer(&samples);
    for name in [ok.addr(), failing.addr()] {
        let series = &peers[&find_peer(&samples, Kind::Http, "web", &name)];
        assert_lean_peer(series, Check::Http, &format!("default page, {name}"));
    }
    let failed = &peers[&find_peer(&samples, Kind::Http, "web", &failing.addr())];
    assert!(value(failed, FAILURES, &[("reason", "status")]) >= 1.0);
    assert_eq!(value(failed, FAILURES, &[("reason", "invalid")]), 0.0);

    parse_prom_page(&full, "full page");
    let samples = parse_prom(&full);
    assert_page_families(&samples, true, "full page");
    let peers = by_peer(&samples);
    for (name, code) in [(ok.addr(), 200.0), (failing.addr(), 503.0)] {
        let series = &peers[&find_peer(&samples, Kind::Http, "web", &name)];
        assert_full_peer(series, Check::Http, &format!("full page, {name}"));
        assert_eq!(value(series, HTTP_STATUS, &[]), code, "{name}: http_status");
    }
    for (first, later, what) in [
        (&first_lean, &lean, "default page"),
        (&first_full, &full, "full page"),
    ] {
        assert_eq!(
            series_set(&parse_prom(first)),
            series_set(&parse_prom(later)),
            "{what}: http series changed between the first scrape and a later one"
        );
    }
}

/// A `send`/`expect` block gives tcp and udp checks reasons of their own:
/// a tcp peer with `expect` has 11 series on the default page (29 full),
/// a udp peer with `expect` 7 (25), from the first scrape on; a wrong
/// reply counts under `reason="mismatch"`.
#[test]
fn expect_checks_have_their_own_failure_reasons() {
    // Answers each blank-line-terminated request with +PONG, keeping the
    // connection.
    let tcp = HttpBackend::start(Reply::Raw {
        bytes: b"+PONG\r\n".to_vec(),
        close: false,
    });
    let udp = UdpBackend::start();
    udp.set_answer(Some(b"PONG"));
    let port = free_port();
    let _ng = Nginx::start(&format!(
        "{}
stream {{
    check_match tping {{ send \"PING\\r\\n\\r\\n\"; expect ~ \"^\\+PONG\"; }}
    check_match uping {{ send \"PING\"; expect \"PONG\"; }}
    upstream st {{ server {}; check interval=100 rise=1 fall=1 type=tcp match=tping; }}
    upstream su {{ server {}; check interval=100 timeout=50 rise=1 fall=1 type=udp match=uping; }}
}}",
        http_block(port, ""),
        tcp.addr(),
        udp.addr()
    ));
    let first_lean = scrape(port, "/metrics");
    let first_full = scrape(port, "/full");
    wait_checked(port, 2, 2);
    udp.set_answer(Some(b"PANG"));
    poll_status_json(port, WAIT, "the udp peer down with mismatch", |s| {
        s.is_down(Kind::Stream, "su", &udp.addr())
            && s.row(Kind::Stream, "su", &udp.addr())["last_failure_reason"] == "mismatch"
    });
    let lean = scrape(port, "/metrics");
    let full = scrape(port, "/full");
    let cases = [
        ("st", tcp.addr(), Check::TcpExpect),
        ("su", udp.addr(), Check::UdpExpect),
    ];

    let samples = parse_prom(&lean);
    assert_page_families(&samples, false, "default page");
    let peers = by_peer(&samples);
    for (u, name, check) in &cases {
        let series = &peers[&find_peer(&samples, Kind::Stream, u, name)];
        assert_lean_peer(series, *check, &format!("default page, {u} {name}"));
    }
    let su = &peers[&find_peer(&samples, Kind::Stream, "su", &udp.addr())];
    assert!(value(su, FAILURES, &[("reason", "mismatch")]) >= 1.0);

    parse_prom_page(&full, "full page");
    let samples = parse_prom(&full);
    assert_page_families(&samples, true, "full page");
    let peers = by_peer(&samples);
    for (u, name, check) in &cases {
        let series = &peers[&find_peer(&samples, Kind::Stream, u, name)];
        assert_full_peer(series, *check, &format!("full page, {u} {name}"));
    }
    for (first, later, what) in [
        (&first_lean, &lean, "default page"),
        (&first_full, &full, "full page"),
    ] {
        assert_eq!(
            series_set(&parse_prom(first)),
            series_set(&parse_prom(later)),
            "{what}: series changed between the first scrape and a later one"
        );
    }
}
