use super::*;
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};

const REASONS: &[(&str, u64)] = &[("refused", 3), ("timeout", 1), ("reset", 0)];
const SLOTS: [u64; DURATION_SLOTS] = [5, 2, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1];

pub(super) fn row<'a>(
    group: Group,
    index: u32,
    upstream: &'a [u8],
    name: &'a [u8],
    up: bool,
) -> PeerRow<'a> {
    PeerRow {
        group,
        index,
        upstream,
        name,
        server: name,
        backup: false,
        weight: 1,
        disabled: false,
        fail_open: false,
        unchecked: false,
        up,
        rise: if up { 2 } else { 0 },
        fall: if up { 0 } else { 4 },
        check_type: "tcp",
        port: 0,
        last_delay_ms: if up { 1 } else { -1 },
        avg_delay_ms: if up { 1 } else { -1 },
        min_delay_ms: if up { 1 } else { -1 },
        max_delay_ms: if up { 2 } else { -1 },
        checks: 9,
        fails_total: 4,
        failures_by_reason: REASONS,
        last_failure_reason: if up { None } else { Some("refused") },
        http_status: None,
        tls_resumed: None,
        grpc_status: None,
        shared_with: &[],
        ejected: false,
        checking: false,
        outlier: None,
        draining: false,
        slow_start_ms: None,
        effective_weight_x100: 100,
        connections: None,
        sessions_shut: 0,
        period_ms: 5000,
        last_change_ms: if up { 0 } else { 1_700_000_000_123 },
        last_duration_ms: 12,
        down_since_ms: if up { None } else { Some(1_700_000_000_123) },
        duration_buckets: &SLOTS,
        duration_sum_ms: 12_345,
        duration_count: 9,
    }
}

const META: Meta = Meta {
    generation: 3,
    now_ms: 1_700_000_192_123,
    dropped_events: 0,
    check_connections: 0,
};

/// http: web/127.0.0.1:8081 up, web/127.0.0.1:8082 down;
/// stream: web/127.0.0.1:8081 up (same upstream and server names as http).
fn sample() -> Vec<PeerRow<'static>> {
    vec![
        row(Group::Http, 0, b"web", b"127.0.0.1:8081", true),
        row(Group::Http, 1, b"web", b"127.0.0.1:8082", false),
        PeerRow {
            check_type: "udp",
            port: 5353,
            ..row(Group::Stream, 0, b"web", b"127.0.0.1:8081", true)
        },
    ]
}

/// http: an http peer that got a 503, one before its first response, a tcp
/// one and an https one that got a 200; stream: a udp peer.
fn http_rows() -> Vec<PeerRow<'static>> {
    vec![
        PeerRow {
            check_type: "http",
            http_status: Some(503),
            ..row(Group::Http, 0, b"web", b"10.0.0.1:80", false)
        },
        PeerRow {
            check_type: "http",
            ..row(Group::Http, 1, b"web", b"10.0.0.2:80", true)
        },
        row(Group::Http, 2, b"web", b"10.0.0.3:80", true),
        PeerRow {
            check_type: "https",
            http_status: Some(200),
            ..row(Group::Http, 3, b"web", b"10.0.0.4:443", true)
        },
        PeerRow {
            check_type: "udp",
            port: 53,
            ..row(Group::Stream, 0, b"dns", b"10.0.0.5:53", true)
        },
    ]
}

const HOSTILE: &[&[u8]] = &[
    b"quote\"d",
    b"back\\slash",
    b"<script>alert(1)</script>",
    b"a,b,c",
    b"line\nbreak\r\nx",
    b"=HYPERLINK(\"http://x\")",
    b"+1",
    b"-1",
    b"@SUM(A1)",
    b"\tTAB",
    b"\rCR",
    b"bad \xff\xfe utf8 \xe2\x82",
    b"ctl \x00\x01\x1b\x7f \xc2\x85",
    b"'single' & amp",
    b"",
    "ünïcödé ✓ \u{2028}".as_bytes(),
];

fn hostile_rows(long: &[u8]) -> Vec<PeerRow<'_>> {
    let mut rows = Vec::new();
    let mut names: Vec<&[u8]> = HOSTILE.to_vec();
    names.push(long);
    for (i, &n) in names.iter().enumerate() {
        let group = if i % 2 == 0 {
            Group::Http
        } else {
            Group::Stream
        };
        let idx = rows.iter().filter(|r: &&PeerRow| r.group == group).count() as u32;
        rows.push(row(group, idx, n, names[names.len() - 1 - i], i % 3 != 0));
    }
    rows.sort_by_key(|r| r.group == Group::Stream);
    rows
}

fn long_name() -> Vec<u8> {
    let mut v = b"=".to_vec();
    while v.len() < 4096 {
        v.extend_from_slice(b"a\"b\\c,<d>\n\xff");
    }
    v.truncate(4096);
    v
}

fn out(format: Format, filter: Option<Filter>, rows: &[PeerRow]) -> Vec<u8> {
    let mut o = Vec::new();
    render(format, filter, &META, rows, &mut o);
    o
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const FILTERS: [Option<Filter>; 3] = [None, Some(Filter::Up), Some(Filter::Down)];

// ---------------------------------------------------------------- query

#[test]
fn query_parsing() {
    let q = |s: &str| parse_query(s.as_bytes());
    assert_eq!(q(""), Ok(Query::default()));
    assert_eq!(q("format=json").unwrap().format, Some(Format::Json));
    assert_eq!(
        q("format=prometheus&status=DOWN").unwrap(),
        Query {
            format: Some(Format::Prometheus),
            filter: Some(Filter::Down),
            refresh: None,
            histogram: None,
            c_shapes: false,
        }
    );
    assert_eq!(q("histogram=on").unwrap().histogram, Some(true));
    assert_eq!(q("histogram=off").unwrap().histogram, Some(false));
    assert_eq!(
        q("histogram=yes"),
        Err("unknown histogram \"yes\": use on or off".to_string())
    );
    assert_eq!(q("status=Up").unwrap().filter, Some(Filter::Up));
    assert_eq!(
        q("a=1&&b&format=csv&x=%zz").unwrap().format,
        Some(Format::Csv)
    );
    assert_eq!(
        q("format=xml&format=html").unwrap().format,
        Some(Format::Html),
        "last wins"
    );
    assert_eq!(
        q("format=%6a%73on").unwrap().format,
        Some(Format::Json),
        "percent-decoded"
    );
    assert_eq!(
        q("%66ormat=csv").unwrap().format,
        Some(Format::Csv),
        "key decoded too"
    );
    assert_eq!(q("status=%44own").unwrap().filter, Some(Filter::Down));
    assert_eq!(
        q("format=xml").unwrap_err(),
        "unknown format \"xml\": use html, csv, json or prometheus"
    );
    assert_eq!(
        q("format=html&format=JSON").unwrap_err(),
        "unknown format \"JSON\": use html, csv, json or prometheus",
        "format is case-sensitive"
    );
    assert_eq!(
        q("status=sideways").unwrap_err(),
        "unknown status \"sideways\": use up or down"
    );
    assert!(q("format=").is_err());
    assert!(q("status").is_err());
    assert!(q("status=up+").is_err());
    let e = q("format=%0a%22%5c%ff%e2%9c%93").unwrap_err();
    assert_eq!(
        e,
        "unknown format \"\\x0a\\\"\\\\\\xff\\xe2\\x9c\\x93\": use html, csv, json or prometheus"
    );
    let e = q(&format!("status={}", "x".repeat(5000))).unwrap_err();
    assert!(
        e.len() < 150 && e.contains("...") && !e.contains('\n'),
        "{e}"
    );
    assert_eq!(q("refresh=5").unwrap().refresh, Some(5));
    assert_eq!(q("refresh=0").unwrap().refresh, None);
    assert_eq!(
        q("refresh=99999999999").unwrap().refresh,
        None,
        "too long to parse: ignored"
    );
    assert_eq!(q("refresh=86400").unwrap().refresh, Some(MAX_REFRESH_S));
    assert_eq!(
        q("refresh=-3&format=csv").unwrap(),
        Query {
            format: Some(Format::Csv),
            ..Query::default()
        }
    );
}

#[test]
fn names_and_types() {
    for f in Format::ALL {
        assert_eq!(Format::from_name(f.as_str().as_bytes()), Some(f));
    }
    assert_eq!(Format::from_name(b"Html"), None);
    assert_eq!(Format::default(), Format::Html);
    assert_eq!(content_type(Format::Html), "text/html; charset=utf-8");
    assert_eq!(content_type(Format::Csv), "text/csv; charset=utf-8");
    assert_eq!(content_type(Format::Json), "application/json");
    assert_eq!(
        content_type(Format::Prometheus),
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert_eq!(Group::Http.as_str(), "http");
    assert_eq!(Group::Stream.as_str(), "stream");
}

#[test]
fn duration_slots() {
    assert_eq!(duration_bucket(0), 0);
    assert_eq!(duration_bucket(1), 0);
    assert_eq!(duration_bucket(2), 1);
    assert_eq!(duration_bucket(5), 1);
    assert_eq!(duration_bucket(10_000), DURATION_BUCKETS_MS.len() - 1);
    assert_eq!(duration_bucket(10_001), DURATION_BUCKETS_MS.len());
    assert!(DURATION_BUCKETS_MS.windows(2).all(|w| w[0] < w[1]));
}

// ---------------------------------------------------------------- timing

/// `cargo test --release -p healthcheck-core -- --ignored --nocapture render_timing`
#[test]
#[ignore]
fn render_timing() {
    let names: Vec<(Vec<u8>, Vec<u8>)> = (0..10_000)
        .map(|i| {
            (
                format!("backend_{}", i / 100).into_bytes(),
                format!("10.0.{}.{}:8080", i / 250, i % 250).into_bytes(),
            )
        })
        .collect();
    let rows: Vec<PeerRow> = names
        .iter()
        .enumerate()
        .map(|(i, (u, n))| {
            row(
                if i < 5000 { Group::Http } else { Group::Stream },
                (i % 5000) as u32,
                u,
                n,
                i % 7 != 0,
            )
        })
        .collect();
    let mut buf = Vec::new();
    for f in Format::ALL {
        let mut times = Vec::new();
        for _ in 0..30 {
            buf.clear();
            let t = std::time::Instant::now();
            render(f, None, &META, &rows, &mut buf);
            times.push(t.elapsed());
        }
        times.sort();
        println!(
            "{:>10}: p50 {:?} max {:?}, {} bytes for {} rows",
            f.as_str(),
            times[times.len() / 2],
            times[times.len() - 1],
            buf.len(),
            rows.len()
        );
    }
}

#[test]
fn summaries_count_every_peer_of_each_upstream() {
    let rows = [
        row(Group::Http, 0, b"a", b"10.0.0.1:80", true),
        PeerRow {
            disabled: true,
            ..row(Group::Http, 1, b"a", b"10.0.0.2:80", true)
        },
        row(Group::Http, 2, b"b", b"10.0.0.3:80", false),
        // `a` again, apart from its first rows: still one summary.
        row(Group::Http, 3, b"a", b"10.0.0.4:80", false),
        PeerRow {
            fail_open: true,
            unchecked: false,
            ..row(Group::Stream, 0, b"a", b"10.0.0.5:53", false)
        },
    ];
    let s = summarize(&rows);
    let brief: Vec<_> = s
        .iter()
        .map(|u| {
            (
                u.group,
                u.name,
                u.peers,
                u.up,
                u.down,
                u.disabled,
                u.selectable,
                u.fail_open,
            )
        })
        .collect();
    assert_eq!(
        brief,
        [
            (Group::Http, &b"a"[..], 3, 2, 1, 1, 1, false),
            (Group::Http, &b"b"[..], 1, 0, 1, 0, 0, false),
            (Group::Stream, &b"a"[..], 1, 0, 1, 0, 1, true),
        ]
    );
    // HTML flags the upstream left with no selectable peer, whatever the
    // filter prints.
    let page = html_of(&rows, Some(Filter::Up));
    assert!(page.contains("Upstreams: 3, <span class=\"bad\">1 with no selectable peer</span>"));
    let stranded: Vec<&str> = page
        .lines()
        .filter(|l| l.starts_with("<tr class=\"upstream stranded\">"))
        .collect();
    assert_eq!(stranded.len(), 1);
    assert!(stranded[0].contains("<td class=\"w\">b</td>"));
    assert!(stranded[0].contains("no selectable peer"));
    // Prometheus: one series per upstream and family.
    let samples = prom_of(&rows, Some(Filter::Down));
    let up = |group: &str, name: &str| {
        value_of(
            &samples,
            "nginx_upstream_peers_up",
            &[("upstream_type", group), ("upstream", name)],
        )
    };
    assert_eq!(
        (up("http", "a"), up("http", "b"), up("stream", "a")),
        (2.0, 0.0, 0.0)
    );
    let open = value_of(
        &samples,
        "nginx_upstream_fail_open",
        &[("upstream_type", "stream"), ("upstream", "a")],
    );
    assert_eq!(open, 1.0);
}

#[test]
fn admin_answer_lists_rows_with_group_and_change() {
    let rows = sample();
    let peers = [
        (
            PeerRow {
                disabled: true,
                ..rows[0]
            },
            true,
        ),
        (rows[2], false),
    ];
    let mut body = Vec::new();
    json::admin_answer("disable", &peers, &mut body);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["action"], json!("disable"));
    assert_eq!(v["changed"], json!(1));
    let listed = v["peers"].as_array().unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0]["group"], json!("http"));
    assert_eq!(listed[0]["changed"], json!(true));
    assert_eq!(listed[0]["admin"], json!("disabled"));
    assert_eq!(listed[0]["name"], json!("127.0.0.1:8081"));
    assert_eq!(listed[1]["group"], json!("stream"));
    assert_eq!(listed[1]["admin"], Value::Null);
    // The status row's fields, plus group and changed.
    let status = json_of(&rows, None);
    let mut row = status["servers"]["http"][0].clone();
    row["admin"] = json!("disabled");
    row["group"] = json!("http");
    row["changed"] = json!(true);
    assert_eq!(listed[0], row);
    let mut empty = Vec::new();
    json::admin_answer("up", &[], &mut empty);
    assert_eq!(
        empty,
        b"{\"action\": \"up\", \"changed\": 0, \"peers\": []}\n"
    );
}

#[test]
fn prom_server_label_only_when_not_the_address() {
    let rows = [
        row(Group::Http, 0, b"web", b"10.0.0.1:80", true),
        PeerRow {
            server: b"web.test:80",
            ..row(Group::Http, 1, b"web", b"10.0.0.2:80", true)
        },
    ];
    for samples in [prom_of(&rows, None), prom_full_of(&rows, None)] {
        for s in samples.iter().filter(|s| s.labels.contains_key("index")) {
            let want = (s.labels["index"] == "1").then(|| "web.test:80".to_string());
            assert_eq!(s.labels.get("server"), want.as_ref(), "{}", s.name);
        }
    }
}

/// A resolved address without a slot: status `unchecked` in JSON, CSV and
/// HTML, counted with the up peers, and no series on the Prometheus page.
#[test]
fn unchecked_rows_say_so_and_have_no_series() {
    let rows = vec![
        row(Group::Http, 0, b"web", b"127.0.0.1:8081", true),
        PeerRow {
            unchecked: true,
            server: b"backend.test:8080",
            ..row(Group::Http, 1, b"web", b"127.0.0.9:8080", true)
        },
    ];
    let text = |format| {
        let mut out = Vec::new();
        render(format, None, &META, &rows, &mut out);
        String::from_utf8(out).unwrap()
    };
    let json: serde_json::Value = serde_json::from_str(&text(Format::Json)).unwrap();
    assert_eq!(json["servers"]["http"][1]["status"], "unchecked");
    assert_eq!(json["servers"]["http"][1]["server"], "backend.test:8080");
    assert_eq!(json["servers"]["http"][0]["status"], "up");
    assert_eq!(json["servers"]["up"], 2, "counted with the up peers");
    let csv = text(Format::Csv);
    let line = csv.lines().find(|l| l.contains("127.0.0.9:8080")).unwrap();
    assert!(line.contains(",unchecked,"), "{line}");
    assert!(text(Format::Html).contains("<td class=\"s\">unchecked"));
    let prom = text(Format::Prometheus);
    assert!(prom.contains("name=\"127.0.0.1:8081\""));
    assert!(!prom.contains("127.0.0.9"), "{prom}");
}

mod csv_page;
mod html_page;
mod json_page;
mod outlier_page;
mod prom_page;
mod properties;

use csv_page::*;
use html_page::*;
use json_page::*;
use prom_page::*;
mod c_shapes_page;
