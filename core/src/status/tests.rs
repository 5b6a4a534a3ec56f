use super::*;
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};

const REASONS: &[(&str, u64)] = &[("refused", 3), ("timeout", 1), ("reset", 0)];
const SLOTS: [u64; DURATION_SLOTS] = [5, 2, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1];

fn row<'a>(group: Group, index: u32, upstream: &'a [u8], name: &'a [u8], up: bool) -> PeerRow<'a> {
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

// ---------------------------------------------------------------- json

fn json_of(format_rows: &[PeerRow], filter: Option<Filter>) -> Value {
    let body = out(Format::Json, filter, format_rows);
    let text = std::str::from_utf8(&body).expect("utf-8");
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn json_exact() {
    let v = json_of(&sample(), None);
    let up0 = json!({"index": 0, "upstream": "web", "name": "127.0.0.1:8081", "status": "up",
        "rise": 2, "fall": 0, "type": "tcp", "port": 0, "last_delay_ms": 1, "avg_delay_ms": 1,
        "min_delay_ms": 1, "max_delay_ms": 2, "checks": 9, "fails_total": 4,
        "last_failure_reason": null, "http_status": null, "last_change": null, "down_since": null,
        "server": "127.0.0.1:8081", "backup": false, "weight": 1, "admin": null,
        "tls_resumed": null});
    let down1 = json!({"index": 1, "upstream": "web", "name": "127.0.0.1:8082", "status": "down",
        "rise": 0, "fall": 4, "type": "tcp", "port": 0, "last_delay_ms": -1, "avg_delay_ms": -1,
        "min_delay_ms": -1, "max_delay_ms": -1, "checks": 9, "fails_total": 4,
        "last_failure_reason": "refused", "http_status": null, "last_change": 1_700_000_000_123u64,
        "down_since": 1_700_000_000_123u64, "server": "127.0.0.1:8082", "backup": false,
        "weight": 1, "admin": null, "tls_resumed": null});
    let mut s0 = up0.clone();
    s0["type"] = json!("udp");
    s0["port"] = json!(5353);
    // The summaries count every peer of the upstream, whatever the filter.
    let upstreams = json!([
        {"group": "http", "name": "web", "peers": 2, "up": 1, "down": 1, "disabled": 0,
         "selectable": 1, "fail_open": false},
        {"group": "stream", "name": "web", "peers": 1, "up": 1, "down": 0, "disabled": 0,
         "selectable": 1, "fail_open": false}]);
    assert_eq!(
        v,
        json!({"servers": {"total": 3, "up": 2, "down": 1, "generation": 3,
            "http": [up0.clone(), down1.clone()], "stream": [s0.clone()]},
            "upstreams": upstreams})
    );
    assert_eq!(
        json_of(&sample(), Some(Filter::Up)),
        json!({"servers": {"total": 2, "up": 2, "down": 0, "generation": 3,
            "http": [up0], "stream": [s0]}, "upstreams": upstreams})
    );
    assert_eq!(
        json_of(&sample(), Some(Filter::Down)),
        json!({"servers": {"total": 1, "up": 0, "down": 1, "generation": 3,
            "http": [down1], "stream": []}, "upstreams": upstreams})
    );
    // Field order: the C module's fields first, then ours.
    let body = String::from_utf8(out(Format::Json, None, &sample())).unwrap();
    let keys = [
        "index",
        "upstream",
        "name",
        "status",
        "rise",
        "fall",
        "type",
        "port",
        "last_delay_ms",
        "avg_delay_ms",
        "min_delay_ms",
        "max_delay_ms",
        "checks",
        "fails_total",
        "last_failure_reason",
        "http_status",
        "last_change",
        "down_since",
    ];
    let line = body.lines().find(|l| l.contains("8082")).unwrap();
    let pos: Vec<usize> = keys
        .iter()
        .map(|k| line.find(&format!("\"{k}\":")).unwrap())
        .collect();
    assert!(pos.windows(2).all(|w| w[0] < w[1]), "{line}");
    assert!(body.starts_with(
        "{\"servers\": {\n  \"total\": 3, \"up\": 2, \"down\": 1, \"generation\": 3,\n"
    ));
}

#[test]
fn json_http_status() {
    let v = json_of(&http_rows(), None);
    let codes: Vec<&Value> = v["servers"]["http"]
        .as_array()
        .unwrap()
        .iter()
        .chain(v["servers"]["stream"].as_array().unwrap())
        .map(|p| &p["http_status"])
        .collect();
    assert_eq!(
        codes,
        [
            &json!(503),
            &Value::Null,
            &Value::Null,
            &json!(200),
            &Value::Null
        ]
    );
    // Right after last_failure_reason.
    let body = String::from_utf8(out(Format::Json, None, &http_rows())).unwrap();
    let line = |name: &str| body.lines().find(|l| l.contains(name)).unwrap().to_string();
    assert!(line("10.0.0.1:80").contains(
        ", \"last_failure_reason\": \"refused\", \"http_status\": 503, \"last_change\": "
    ));
    assert!(line("10.0.0.2:80")
        .contains(", \"last_failure_reason\": null, \"http_status\": null, \"last_change\": "));
    let max = [PeerRow {
        http_status: Some(u16::MAX),
        ..http_rows()[0]
    }];
    assert_eq!(
        json_of(&max, None)["servers"]["http"][0]["http_status"],
        json!(65535)
    );
}

#[test]
fn json_empty() {
    for filter in FILTERS {
        let v = json_of(&[], filter);
        assert_eq!(
            v,
            json!({"servers": {"total": 0, "up": 0, "down": 0, "generation": 3, "http": [], "stream": []},
                "upstreams": []})
        );
    }
    let only_stream = [row(Group::Stream, 0, b"s", b"[::1]:53", false)];
    let v = json_of(&only_stream, Some(Filter::Down));
    assert_eq!(v["servers"]["http"], json!([]));
    assert_eq!(v["servers"]["stream"][0]["name"], json!("[::1]:53"));
    assert_eq!(
        json_of(&only_stream, Some(Filter::Up))["servers"]["stream"],
        json!([])
    );
}

#[test]
fn json_hostile() {
    let long = long_name();
    let rows = hostile_rows(&long);
    for filter in FILTERS {
        let v = json_of(&rows, filter);
        let shown: Vec<&PeerRow> = rows.iter().filter(|r| keeps(filter, r.up)).collect();
        let mut got = v["servers"]["http"].as_array().unwrap().clone();
        got.extend(v["servers"]["stream"].as_array().unwrap().iter().cloned());
        assert_eq!(got.len(), shown.len());
        for (g, r) in got.iter().zip(shown) {
            assert_eq!(g["upstream"], json!(lossy(r.upstream)));
            assert_eq!(g["name"], json!(lossy(r.name)));
        }
    }
    let mut s = Vec::new();
    json::string(&mut s, b"a\"\\\n\r\t\x08\x0c\x00\x1f\x7f\xff<");
    assert_eq!(
        s,
        b"\"a\\\"\\\\\\n\\r\\t\\b\\f\\u0000\\u001f\\u007f\\ufffd<\""
    );
}

// ---------------------------------------------------------------- csv

fn csv_records(body: &[u8]) -> (::csv::StringRecord, Vec<::csv::StringRecord>) {
    let mut rd = ::csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(body);
    let header = rd.headers().unwrap().clone();
    let recs = rd.records().collect::<Result<Vec<_>, _>>().unwrap();
    (header, recs)
}

fn inert(b: &[u8]) -> String {
    let s = lossy(b);
    match s.as_bytes().first() {
        Some(b'=' | b'+' | b'-' | b'@' | b'\t' | b'\r') => format!("'{s}"),
        _ => s,
    }
}

fn expected_csv(r: &PeerRow) -> Vec<String> {
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    vec![
        r.index.to_string(),
        r.group.as_str().into(),
        inert(r.upstream),
        inert(r.name),
        r.rise.to_string(),
        r.fall.to_string(),
        r.check_type.into(),
        r.port.to_string(),
        r.last_delay_ms.to_string(),
        r.avg_delay_ms.to_string(),
        r.min_delay_ms.to_string(),
        r.max_delay_ms.to_string(),
        if r.up { "up" } else { "down" }.into(),
        r.checks.to_string(),
        r.fails_total.to_string(),
        r.last_failure_reason.unwrap_or("").into(),
        opt((r.last_change_ms != 0).then_some(r.last_change_ms)),
        opt(if r.up { None } else { r.down_since_ms }),
        opt(r.http_status.map(u64::from)),
        inert(r.server),
        r.backup.to_string(),
        r.weight.to_string(),
        if r.disabled { "disabled" } else { "" }.into(),
    ]
}

fn check_csv(rows: &[PeerRow], filter: Option<Filter>) -> usize {
    let body = out(Format::Csv, filter, rows);
    std::str::from_utf8(&body).expect("utf-8");
    let (header, recs) = csv_records(&body);
    assert_eq!(header.iter().collect::<Vec<_>>().join(","), csv::HEADER);
    let shown: Vec<&PeerRow> = printed_all(rows, filter).collect();
    assert_eq!(recs.len(), shown.len());
    for (rec, r) in recs.iter().zip(shown) {
        assert_eq!(rec.iter().collect::<Vec<_>>(), expected_csv(r));
    }
    recs.len()
}

#[test]
fn csv_sample() {
    let body = String::from_utf8(out(Format::Csv, None, &sample())).unwrap();
    assert_eq!(
        body,
        "index,upstream_type,upstream_name,host,rise,fall,check_type,check_port,last_delay,avg_delay,min_delay,\
max_delay,status,checks,fails_total,last_failure_reason,last_change,down_since,http_status,\
server,backup,weight,admin\n\
0,http,web,127.0.0.1:8081,2,0,tcp,0,1,1,1,2,up,9,4,,,,,127.0.0.1:8081,false,1,\n\
1,http,web,127.0.0.1:8082,0,4,tcp,0,-1,-1,-1,-1,down,9,4,refused,1700000000123,1700000000123,,\
127.0.0.1:8082,false,1,\n\
0,stream,web,127.0.0.1:8081,2,0,udp,5353,1,1,1,2,up,9,4,,,,,127.0.0.1:8081,false,1,\n"
    );
    for filter in FILTERS {
        check_csv(&sample(), filter);
        assert_eq!(check_csv(&[], filter), 0);
    }
    let body = out(Format::Csv, None, &[]);
    assert_eq!(body, format!("{}\n", csv::HEADER).as_bytes());
}

#[test]
fn csv_columns_are_appended_in_order() {
    let old = "index,upstream_type,upstream_name,host,rise,fall,check_type,check_port,last_delay,\
avg_delay,min_delay,max_delay,status,checks,fails_total,last_failure_reason,last_change,down_since";
    assert_eq!(
        csv::HEADER,
        format!("{old},http_status,server,backup,weight,admin")
    );
    let mut rows = http_rows();
    rows[1].server = b"web.test:80";
    rows[1].backup = true;
    rows[1].weight = 7;
    rows[1].disabled = true;
    let body = out(Format::Csv, None, &rows);
    let (header, recs) = csv_records(&body);
    assert_eq!(header.len(), 23);
    assert_eq!(&header[18], "http_status");
    let status: Vec<&str> = recs.iter().map(|r| &r[18]).collect();
    assert_eq!(status, ["503", "", "", "200", ""]);
    // The columns before it are where they were.
    assert_eq!(&recs[0][15], "refused");
    assert_eq!(&recs[0][17], "1700000000123");
    let added: Vec<&str> = recs[1].iter().skip(19).collect();
    assert_eq!(added, ["web.test:80", "true", "7", "disabled"]);
    let text = String::from_utf8(body).unwrap();
    assert!(text
        .lines()
        .nth(1)
        .unwrap()
        .ends_with(",1700000000123,1700000000123,503,10.0.0.1:80,false,1,"));
    for filter in FILTERS {
        check_csv(&rows, filter);
    }
}

#[test]
fn csv_hostile() {
    let long = long_name();
    let rows = hostile_rows(&long);
    for filter in FILTERS {
        check_csv(&rows, filter);
    }
    let cell = |s: &[u8]| {
        let mut o = Vec::new();
        csv::text(&mut o, s);
        String::from_utf8(o).unwrap()
    };
    assert_eq!(cell(b"=1+2"), "'=1+2");
    assert_eq!(cell(b"=a,b"), "\"'=a,b\"");
    assert_eq!(cell(b"say \"hi\""), "\"say \"\"hi\"\"\"");
    assert_eq!(cell(b"-x"), "'-x");
    assert_eq!(cell(b"a=b"), "a=b");
    assert_eq!(cell(b"\xff=x"), "\u{fffd}=x");
}

// ---------------------------------------------------------------- html

fn html_of(rows: &[PeerRow], filter: Option<Filter>) -> String {
    String::from_utf8(out(Format::Html, filter, rows)).expect("valid utf-8")
}

#[test]
fn html_page() {
    let page = html_of(&sample(), None);
    assert!(page.starts_with("<!DOCTYPE html>\n<html lang=\"en\">"));
    assert!(page.ends_with("</html>\n"));
    assert!(page.contains("<title>Upstream health: 1 down</title>"));
    assert!(page.contains("Generation 3 &middot; 3 peers: 2 up, <span class=\"bad\">1 down</span>"));
    assert!(page
        .contains("<h2 id=\"http\">http: 2 peers: 1 up, <span class=\"bad\">1 down</span></h2>"));
    assert!(page.contains("<h2 id=\"stream\">stream: 1 peer: 1 up, 0 down</h2>"));
    assert_eq!(page.matches("<tr class=\"down\">").count(), 1);
    assert!(page.contains("at 2023-11-14 22:16:32 UTC"));
    assert!(page.contains(">3m 12s</span>"), "down for");
    assert!(!page.contains("http-equiv=\"refresh\""));
    assert!(page.contains("<a href=\"?format=html&amp;status=down\">down</a>"));
    assert!(page.contains("<a href=\"?format=json\">json</a>"));
    assert!(!page.contains("src=") && !page.contains("<link") && !page.contains("<script"));

    let page = html_of(&sample(), Some(Filter::Up));
    assert!(page.contains("<h2 id=\"http\">http: 1 peer: 1 up, 0 down</h2>"));
    assert!(!page.contains("<tr class=\"down\">"));
    assert!(page.contains("<a href=\"?format=csv&amp;status=up\">csv</a>"));
    let page = html_of(&sample(), Some(Filter::Down));
    assert!(page
        .contains("<h2 id=\"stream\">stream: 0 peers: 0 up, 0 down</h2>\n<p>No down peers.</p>"));
    for filter in FILTERS {
        let page = html_of(&[], filter);
        assert!(page.contains("<title>Upstream health: no peers</title>"));
        assert_eq!(page.matches("<table>").count(), 0);
    }

    let mut o = Vec::new();
    let q = parse_query(b"status=down&refresh=7").unwrap();
    render_with(Format::Html, &q, &META, &sample(), &mut o);
    let page = String::from_utf8(o).unwrap();
    assert!(page.contains("<meta http-equiv=\"refresh\" content=\"7\">"));
    assert!(page.contains("<a href=\"?format=html&amp;status=down&amp;refresh=7\">reload</a>"));
    assert!(page.contains("<a href=\"?format=html&amp;refresh=7\">all</a>"));
    assert!(page.contains(" <strong>7 s</strong>"));
}

#[test]
fn html_http_cell() {
    let page = html_of(&http_rows(), None);
    assert!(page.contains("<th>last failure</th><th>HTTP</th><th>last change</th>"));
    assert_eq!(page.matches("<th>HTTP</th>").count(), 2, "one per table");
    let line = |name: &str| page.lines().find(|l| l.contains(name)).unwrap().to_string();
    assert!(line("10.0.0.1:80").contains(">refused</td><td class=\"n\">503</td><td><span"));
    assert!(line("10.0.0.2:80").contains(">&ndash;</td><td class=\"n\"></td><td>never</td>"));
    assert!(line("10.0.0.3:80").contains("<td class=\"n\"></td><td>never</td>"));
    assert!(line("10.0.0.4:443").contains("<td class=\"n\">200</td>"));
    assert!(line("10.0.0.5:53").contains("<td class=\"n\"></td><td>never</td>"));
    for l in page.lines().filter(|l| l.starts_with("<tr")) {
        let columns = if l.starts_with("<tr class=\"upstream") {
            html::UPSTREAM_COLUMNS.len()
        } else {
            html::COLUMNS.len()
        };
        assert_eq!(l.matches("<td").count(), columns, "{l}");
    }
}

#[test]
fn html_hostile() {
    let long = long_name();
    let rows = hostile_rows(&long);
    for filter in FILTERS {
        let page = html_of(&rows, filter);
        assert!(!page.contains("<script"), "raw <script>");
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;") || filter.is_some());
        assert!(!page.contains('\0') && !page.contains('\u{1b}') && !page.contains('\u{85}'));
        // Every '<' opens one of our tags.
        for tag in page.split('<').skip(1) {
            let name: String = tag
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '/' || *c == '!')
                .collect();
            assert!(
                [
                    "!DOCTYPE", "html", "/html", "head", "/head", "meta", "title", "/title",
                    "style", "/style", "body", "/body", "h1", "/h1", "h2", "/h2", "p", "/p", "nav",
                    "/nav", "a", "/a", "strong", "/strong", "span", "/span", "table", "/table",
                    "thead", "/thead", "tbody", "/tbody", "tr", "/tr", "th", "/th", "td", "/td"
                ]
                .contains(&name.as_str()),
                "unexpected tag {name:?}"
            );
        }
    }
    let esc = |s: &[u8]| {
        let mut o = Vec::new();
        html::text(&mut o, s);
        String::from_utf8(o).unwrap()
    };
    assert_eq!(
        esc(b"<a href='x'>&\"</a>"),
        "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
    );
    assert_eq!(
        esc(b"a\x00b\xffc\x7f\xc2\x85\xc2\xa0"),
        "a\u{fffd}b\u{fffd}c\u{fffd}\u{fffd}\u{a0}"
    );
}

// ---------------------------------------------------------------- prometheus

#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn metric_name_ok(n: &str) -> bool {
    let mut c = n.chars();
    matches!(c.next(), Some('a'..='z' | 'A'..='Z' | '_' | ':'))
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn label_name_ok(n: &str) -> bool {
    let mut c = n.chars();
    matches!(c.next(), Some('a'..='z' | 'A'..='Z' | '_'))
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A strict reader for the subset of text format 0.0.4 we emit.
fn validate_prom(body: &[u8]) -> Result<Vec<Sample>, String> {
    let text = std::str::from_utf8(body).map_err(|e| e.to_string())?;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("no final newline".into());
    }
    let mut help = HashSet::new();
    let mut types: HashMap<String, String> = HashMap::new();
    let mut closed: HashSet<String> = HashSet::new();
    let mut current: Option<String> = None;
    let mut series = HashSet::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            if !metric_name_ok(name) || !help.insert(name.to_string()) {
                return Err(format!("bad or repeated HELP: {line}"));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split(' ');
            let (name, kind) = (it.next().unwrap(), it.next().ok_or("TYPE without type")?);
            if it.next().is_some()
                || !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind)
            {
                return Err(format!("bad TYPE: {line}"));
            }
            if types.insert(name.to_string(), kind.to_string()).is_some() || closed.contains(name) {
                return Err(format!("repeated TYPE: {line}"));
            }
            if let Some(prev) = current.take() {
                closed.insert(prev);
            }
            current = Some(name.to_string());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            return Err(format!("unexpected line: {line:?}"));
        }
        // name{labels} value
        let name_end = line.find(['{', ' ']).ok_or("no value")?;
        let name = &line[..name_end];
        if !metric_name_ok(name) {
            return Err(format!("bad metric name {name:?}"));
        }
        let mut rest = &line[name_end..];
        let mut labels = BTreeMap::new();
        if let Some(r) = rest.strip_prefix('{') {
            rest = r;
            loop {
                if let Some(r) = rest.strip_prefix('}') {
                    rest = r;
                    break;
                }
                let eq = rest.find("=\"").ok_or("label without =\"")?;
                let lname = &rest[..eq];
                if !label_name_ok(lname) {
                    return Err(format!("bad label name {lname:?}"));
                }
                let mut value = String::new();
                let mut chars = rest[eq + 2..].char_indices();
                let end = loop {
                    match chars.next().ok_or("unterminated label value")? {
                        (i, '"') => break i,
                        (_, '\\') => match chars.next().ok_or("dangling backslash")?.1 {
                            '\\' => value.push('\\'),
                            '"' => value.push('"'),
                            'n' => value.push('\n'),
                            c => return Err(format!("bad escape \\{c}")),
                        },
                        (_, '\n') => return Err("raw newline".into()),
                        (_, c) => value.push(c),
                    }
                };
                rest = &rest[eq + 2 + end + 1..];
                if labels.insert(lname.to_string(), value).is_some() {
                    return Err(format!("duplicate label {lname}"));
                }
                if let Some(r) = rest.strip_prefix(',') {
                    rest = r;
                } else if !rest.starts_with('}') {
                    return Err(format!("bad label separator in {line}"));
                }
            }
        }
        let value = rest.strip_prefix(' ').ok_or("no space before value")?;
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().map_err(|_| format!("bad value {v:?}"))?,
        };
        // Which family does it belong to?
        let family = if types.get(name).is_some_and(|k| k != "histogram") {
            name.to_string()
        } else {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|b| types.get(*b).is_some_and(|k| k == "histogram"))
                })
                .ok_or(format!("sample without TYPE: {name}"))?
                .to_string()
        };
        if current.as_deref() != Some(family.as_str()) {
            return Err(format!("{name} outside its family block"));
        }
        if !help.contains(&family) {
            return Err(format!("{family} has no HELP"));
        }
        if types[&family] == "histogram" && (name.ends_with("_bucket") != labels.contains_key("le"))
        {
            return Err(format!("le label misuse in {line}"));
        }
        if !series.insert((name.to_string(), labels.clone())) {
            return Err(format!("duplicate series: {line}"));
        }
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    Ok(samples)
}

fn prom_of(rows: &[PeerRow], filter: Option<Filter>) -> Vec<Sample> {
    let body = out(Format::Prometheus, filter, rows);
    validate_prom(&body).unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(&body)))
}

/// The full page's (`?histogram=on`) body.
fn prom_full_body(rows: &[PeerRow], filter: Option<Filter>) -> String {
    let query = Query {
        format: Some(Format::Prometheus),
        filter,
        histogram: Some(true),
        ..Query::default()
    };
    let mut body = Vec::new();
    render_with(Format::Prometheus, &query, &META, rows, &mut body);
    String::from_utf8(body).expect("utf-8")
}

/// The full page's samples.
fn prom_full_of(rows: &[PeerRow], filter: Option<Filter>) -> Vec<Sample> {
    let body = prom_full_body(rows, filter);
    validate_prom(body.as_bytes()).unwrap_or_else(|e| panic!("{e}\n{body}"))
}

/// Families in the order of their `# TYPE` lines.
fn prom_families(body: &str) -> Vec<&str> {
    body.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect()
}

const HTTP_STATUS: &str = "nginx_upstream_server_http_status";

fn value_of(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let want: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    samples
        .iter()
        .find(|s| s.name == name && s.labels == want)
        .unwrap_or_else(|| panic!("no {name}{labels:?}"))
        .value
}

#[test]
fn validator_rejects() {
    for bad in [
        "x 1\n",
        "# HELP x h\n# TYPE x gauge\nx 1\nx 2\n",
        "# HELP x h\n# TYPE x gauge\n# TYPE x gauge\nx 1\n",
        "# HELP x h\n# TYPE x gauge\nx{a=\"\\t\"} 1\n",
        "# HELP x h\n# TYPE x gauge\nx{a=\"1\",a=\"2\"} 1\n",
        "# HELP x h\n# TYPE x gauge\n# HELP y h\n# TYPE y gauge\ny 1\nx 1\n",
        "# HELP x h\n# TYPE x gauge\nx 1",
        "# HELP 1x h\n# TYPE 1x gauge\n1x 1\n",
    ] {
        assert!(validate_prom(bad.as_bytes()).is_err(), "{bad}");
    }
}

#[test]
fn prom_sample() {
    let s = prom_full_of(&sample(), None);
    assert_eq!(value_of(&s, "nginx_upstream_count_total", &[]), 3.0);
    assert_eq!(value_of(&s, "nginx_upstream_count_up", &[]), 2.0);
    assert_eq!(value_of(&s, "nginx_upstream_count_down", &[]), 1.0);
    assert_eq!(value_of(&s, "nginx_upstream_count_generation", &[]), 3.0);
    let peer =
        |t: &'static str, i: &'static str, n: &'static str, ty: &'static str, p: &'static str| {
            vec![
                ("index", i),
                ("upstream_type", t),
                ("upstream", "web"),
                ("name", n),
                ("type", ty),
                ("port", p),
            ]
        };
    let h0 = peer("http", "0", "127.0.0.1:8081", "tcp", "0");
    let h1 = peer("http", "1", "127.0.0.1:8082", "tcp", "0");
    let s0 = peer("stream", "0", "127.0.0.1:8081", "udp", "5353");
    assert_eq!(value_of(&s, "nginx_upstream_server_active", &h0), 1.0);
    assert_eq!(value_of(&s, "nginx_upstream_server_active", &h1), 0.0);
    assert_eq!(value_of(&s, "nginx_upstream_server_active", &s0), 1.0);
    assert_eq!(value_of(&s, "nginx_upstream_server_rise", &h0), 2.0);
    assert_eq!(value_of(&s, "nginx_upstream_server_fall", &h1), 4.0);
    assert_eq!(value_of(&s, "nginx_upstream_server_checks_total", &s0), 9.0);
    let mut l = h1.clone();
    l.push(("reason", "refused"));
    assert_eq!(
        value_of(&s, "nginx_upstream_server_check_failures_total", &l),
        3.0
    );
    assert_eq!(
        value_of(
            &s,
            "nginx_upstream_server_last_change_timestamp_seconds",
            &h1
        ),
        1_700_000_000.123
    );
    assert_eq!(
        value_of(
            &s,
            "nginx_upstream_server_last_change_timestamp_seconds",
            &h0
        ),
        0.0
    );
    let bucket = |le: &'static str| {
        let mut l = h0.clone();
        l.push(("le", le));
        value_of(
            &s,
            "nginx_upstream_server_check_duration_seconds_bucket",
            &l,
        )
    };
    assert_eq!(bucket("0.001"), 5.0);
    assert_eq!(bucket("0.005"), 7.0);
    assert_eq!(bucket("0.05"), 8.0);
    assert_eq!(bucket("10"), 8.0);
    assert_eq!(bucket("+Inf"), 9.0);
    assert_eq!(
        value_of(&s, "nginx_upstream_server_check_duration_seconds_sum", &h0),
        12.345
    );
    assert_eq!(
        value_of(
            &s,
            "nginx_upstream_server_check_duration_seconds_count",
            &h0
        ),
        9.0
    );
    assert!(s.iter().all(|s| !s.labels.contains_key("status")));

    let s = prom_of(&sample(), Some(Filter::Down));
    assert_eq!(value_of(&s, "nginx_upstream_count_total", &[]), 1.0);
    assert_eq!(value_of(&s, "nginx_upstream_count_up", &[]), 0.0);
    assert_eq!(
        s.iter()
            .filter(|s| s.name == "nginx_upstream_server_active")
            .count(),
        1
    );
    let s = prom_of(&sample(), Some(Filter::Up));
    assert_eq!(value_of(&s, "nginx_upstream_count_down", &[]), 0.0);
    assert_eq!(
        s.iter()
            .filter(|s| s.name == "nginx_upstream_server_active")
            .count(),
        2
    );
    for filter in FILTERS {
        let s = prom_of(&[], filter);
        assert_eq!(s.len(), 4);
    }
}

#[test]
fn prom_duplicates_and_torn_histograms() {
    // The same server twice in one upstream, and a reason listed twice.
    let reasons: &[(&str, u64)] = &[("timeout", 1), ("refused", 2), ("timeout", 4)];
    let torn = [100u64; DURATION_SLOTS];
    let rows = [
        PeerRow {
            failures_by_reason: reasons,
            duration_buckets: &torn,
            duration_count: 150,
            ..row(Group::Http, 0, b"u", b"10.0.0.1:80", true)
        },
        PeerRow {
            duration_buckets: &[],
            duration_count: 3,
            ..row(Group::Http, 1, b"u", b"10.0.0.1:80", true)
        },
    ];
    let s = prom_full_of(&rows, None);
    let l = [
        ("index", "0"),
        ("upstream_type", "http"),
        ("upstream", "u"),
        ("name", "10.0.0.1:80"),
        ("type", "tcp"),
        ("port", "0"),
    ];
    let mut t = l.to_vec();
    t.push(("reason", "timeout"));
    assert_eq!(
        value_of(&s, "nginx_upstream_server_check_failures_total", &t),
        5.0
    );
    let buckets: Vec<f64> = s
        .iter()
        .filter(|s| s.name.ends_with("_bucket") && s.labels["index"] == "0")
        .map(|s| s.value)
        .collect();
    assert_eq!(buckets.len(), DURATION_SLOTS);
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    assert_eq!(*buckets.last().unwrap(), 150.0);
    let short: Vec<f64> = s
        .iter()
        .filter(|s| s.name.ends_with("_bucket") && s.labels["index"] == "1")
        .map(|s| s.value)
        .collect();
    assert_eq!(short[..DURATION_SLOTS - 1], [0.0; DURATION_SLOTS - 1]);
    assert_eq!(short[DURATION_SLOTS - 1], 3.0);
}

/// The default page: per peer, the lean families only (3 + one failure
/// series per reason passed), none of the histogram, rise, fall or last
/// change; the full page adds those (3 + 15 series).
#[test]
fn prom_lean_and_full_pages() {
    let tcp: Vec<(&str, u64)> = crate::conf::CheckType::Tcp
        .failure_reasons()
        .iter()
        .map(|r| (r.name(), 0))
        .collect();
    let udp: Vec<(&str, u64)> = crate::conf::CheckType::Udp
        .failure_reasons()
        .iter()
        .map(|r| (r.name(), 0))
        .collect();
    let rows = [
        PeerRow {
            failures_by_reason: &tcp,
            ..row(Group::Http, 0, b"u", b"10.0.0.1:80", true)
        },
        PeerRow {
            failures_by_reason: &udp,
            check_type: "udp",
            ..row(Group::Stream, 0, b"d", b"10.0.0.2:53", false)
        },
    ];
    let per_peer = |samples: &[Sample], group: &str| {
        samples
            .iter()
            .filter(|s| s.labels.get("upstream_type").map(String::as_str) == Some(group))
            .filter(|s| s.labels.contains_key("index"))
            .map(|s| s.name.clone())
            .collect::<Vec<_>>()
    };
    let lean = prom_of(&rows, None);
    let (h, st) = (per_peer(&lean, "http"), per_peer(&lean, "stream"));
    assert_eq!(h.len(), 9, "{h:?}");
    assert_eq!(st.len(), 4, "{st:?}");
    for names in [&h, &st] {
        assert!(!names.iter().any(|n| n.contains("duration_seconds_")
            || n.contains("last_change")
            || n.ends_with("_rise")
            || n.ends_with("_fall")));
        assert!(names.contains(&"nginx_upstream_server_check_last_duration_seconds".into()));
    }
    let full = prom_full_of(&rows, None);
    assert_eq!(per_peer(&full, "http").len(), 9 + 3 + 15);
    assert_eq!(per_peer(&full, "stream").len(), 4 + 3 + 15);
}

/// The full page has an HTTP status series for each http and https peer
/// (0 before its first response) and none for tcp and udp peers; its
/// header comes with its first sample, after the last duration's family.
#[test]
fn prom_http_status_on_the_full_page() {
    let rows = http_rows();
    let body = prom_full_body(&rows, None);
    let s = prom_full_of(&rows, None);
    let peer = |i: &'static str, n: &'static str, ty: &'static str, p: &'static str| {
        vec![
            ("index", i),
            ("upstream_type", "http"),
            ("upstream", "web"),
            ("name", n),
            ("type", ty),
            ("port", p),
        ]
    };
    assert_eq!(
        value_of(&s, HTTP_STATUS, &peer("0", "10.0.0.1:80", "http", "0")),
        503.0
    );
    assert_eq!(
        value_of(&s, HTTP_STATUS, &peer("1", "10.0.0.2:80", "http", "0")),
        0.0
    );
    assert_eq!(
        value_of(&s, HTTP_STATUS, &peer("3", "10.0.0.4:443", "https", "0")),
        200.0
    );
    let typed: Vec<&str> = s
        .iter()
        .filter(|s| s.name == HTTP_STATUS)
        .map(|s| s.labels["type"].as_str())
        .collect();
    assert_eq!(typed, ["http", "http", "https"], "no tcp or udp series");
    assert!(body.contains(
        "# HELP nginx_upstream_server_http_status Last HTTP status code of the peer's check, \
0 before any.\n# TYPE nginx_upstream_server_http_status gauge\n"
    ));
    let families = prom_families(&body);
    let at = |name: &str| families.iter().position(|f| *f == name).unwrap();
    assert_eq!(
        at(HTTP_STATUS),
        at("nginx_upstream_server_check_last_duration_seconds") + 1
    );
    assert_eq!(
        at("nginx_upstream_server_check_duration_seconds"),
        at(HTTP_STATUS) + 1
    );

    // tcp and udp peers only, or no http peer printed: no family at all.
    let tcp_only = prom_full_body(&sample(), None);
    assert!(!tcp_only.contains(HTTP_STATUS), "{tcp_only}");
    prom_full_of(&sample(), None);
    assert!(prom_full_of(&rows, Some(Filter::Up))
        .iter()
        .any(|s| s.name == HTTP_STATUS));
    let down = prom_full_of(&rows, Some(Filter::Down));
    assert_eq!(down.iter().filter(|s| s.name == HTTP_STATUS).count(), 1);
    let mut up_http = sample();
    up_http.push(PeerRow {
        check_type: "http",
        http_status: Some(200),
        ..row(Group::Http, 2, b"web", b"10.0.0.9:80", true)
    });
    up_http.sort_by_key(|r| r.group == Group::Stream);
    assert!(prom_full_body(&up_http, None).contains(HTTP_STATUS));
    assert!(!prom_full_body(&up_http, Some(Filter::Down)).contains(HTTP_STATUS));

    // A tcp row's series are the same whatever it carries in http_status.
    let odd = [PeerRow {
        http_status: Some(404),
        ..row(Group::Http, 0, b"u", b"10.0.0.1:80", true)
    }];
    assert!(!prom_full_body(&odd, None).contains(HTTP_STATUS));
}

/// The default page never has the HTTP status family.
#[test]
fn prom_lean_page_has_no_http_status() {
    for filter in FILTERS {
        let body = String::from_utf8(out(Format::Prometheus, filter, &http_rows())).unwrap();
        validate_prom(body.as_bytes()).unwrap();
        assert!(!body.contains(HTTP_STATUS), "{body}");
        assert!(!prom_families(&body).is_empty());
    }
}

#[test]
fn prom_hostile() {
    let long = long_name();
    let rows = hostile_rows(&long);
    for filter in FILTERS {
        let s = prom_of(&rows, filter);
        for r in rows.iter().filter(|r| keeps(filter, r.up)) {
            let s = s
                .iter()
                .find(|s| {
                    s.name == "nginx_upstream_server_active"
                        && s.labels["index"] == r.index.to_string()
                        && s.labels["upstream_type"] == r.group.as_str()
                })
                .unwrap();
            assert_eq!(s.labels["upstream"], lossy(r.upstream));
            assert_eq!(s.labels["name"], lossy(r.name));
        }
    }
    let mut o = Vec::new();
    prom::label_value(&mut o, b"a\\b\"c\nd\re\xff");
    assert_eq!(o, "a\\\\b\\\"c\\nd\re\u{fffd}".as_bytes());
}

/// Writes the sample page (with hostile names) for `promtool check metrics`:
/// `cargo test -p healthcheck-core -- --ignored write_prom_sample` then
/// `promtool check metrics < /tmp/healthcheck-status-all.prom` (and `-up`,
/// `-down`, `-empty`, `-full`).
#[test]
#[ignore]
fn write_prom_sample() {
    let long = long_name();
    let mut rows = sample();
    rows.retain(|r| r.group == Group::Http);
    let hostile = hostile_rows(&long);
    let base = rows.len() as u32;
    rows.extend(
        hostile
            .iter()
            .filter(|r| r.group == Group::Http)
            .map(|r| PeerRow {
                index: r.index + base,
                ..*r
            }),
    );
    rows.extend(sample().into_iter().filter(|r| r.group == Group::Stream));
    rows.extend(
        hostile
            .iter()
            .filter(|r| r.group == Group::Stream)
            .map(|r| PeerRow {
                index: r.index + 1,
                ..*r
            }),
    );
    for (filter, file) in [
        (None, "all"),
        (Some(Filter::Up), "up"),
        (Some(Filter::Down), "down"),
    ] {
        std::fs::write(
            format!("/tmp/healthcheck-status-{file}.prom"),
            out(Format::Prometheus, filter, &rows),
        )
        .unwrap();
    }
    std::fs::write(
        "/tmp/healthcheck-status-empty.prom",
        out(Format::Prometheus, None, &[]),
    )
    .unwrap();
    // The full page, with http and https peers (the HTTP status family).
    let mut full = rows.clone();
    full.extend(
        http_rows()
            .into_iter()
            .filter(|r| r.group == Group::Http)
            .map(|r| PeerRow {
                index: r.index + 1000,
                ..r
            }),
    );
    full.sort_by_key(|r| (r.group == Group::Stream, r.index));
    std::fs::write(
        "/tmp/healthcheck-status-full.prom",
        prom_full_body(&full, None),
    )
    .unwrap();
    for f in Format::ALL {
        std::fs::write(
            format!("/tmp/healthcheck-status-sample.{}", f.as_str()),
            out(f, None, &sample()),
        )
        .unwrap();
    }
}

// ---------------------------------------------------------------- every format x filter

#[test]
fn totals_match_printed_rows_everywhere() {
    let long = long_name();
    let mut rows = sample();
    let h = hostile_rows(&long);
    rows.extend(h.iter().map(|r| PeerRow {
        index: r.index + 2,
        ..*r
    }));
    rows.sort_by_key(|r| (r.group == Group::Stream, r.index));
    for filter in FILTERS {
        let want = Counts::of(&rows, filter);
        let v = json_of(&rows, filter);
        assert_eq!(v["servers"]["total"], json!(want.total()));
        assert_eq!(v["servers"]["up"], json!(want.up()));
        assert_eq!(v["servers"]["down"], json!(want.down()));
        let n = v["servers"]["http"].as_array().unwrap().len()
            + v["servers"]["stream"].as_array().unwrap().len();
        assert_eq!(n as u64, want.total());
        assert_eq!(check_csv(&rows, filter) as u64, want.total());
        let s = prom_of(&rows, filter);
        assert_eq!(
            value_of(&s, "nginx_upstream_count_total", &[]),
            want.total() as f64
        );
        assert_eq!(
            s.iter()
                .filter(|s| s.name == "nginx_upstream_server_active")
                .count() as u64,
            want.total()
        );
        let page = html_of(&rows, filter);
        assert_eq!(
            page.matches("<tr class=\"down\">").count() as u64
                + page.matches("<tr><td").count() as u64,
            want.total()
        );
        assert_eq!(
            page.matches("<tr class=\"down\">").count() as u64,
            want.down()
        );
    }
}

// ---------------------------------------------------------------- properties

#[derive(Debug, Clone)]
struct OwnedRow {
    stream: bool,
    upstream: Vec<u8>,
    name: Vec<u8>,
    up: bool,
    rise: u32,
    fall: u32,
    check_type: &'static str,
    port: u16,
    delays: [i64; 4],
    checks: u64,
    fails: u64,
    reason: Option<usize>,
    http_status: Option<u16>,
    last_change_ms: u64,
    down_since_ms: Option<u64>,
    slots: Vec<u64>,
    sum: u64,
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            4 => any::<u8>(),
            2 => prop::sample::select(b"\"\\,\n\r\t=+-@<>&'{}%".to_vec()),
            1 => Just(0xffu8),
        ],
        0..40,
    )
}

fn owned_row() -> impl Strategy<Value = OwnedRow> {
    (
        (
            any::<bool>(),
            bytes(),
            bytes(),
            any::<bool>(),
            any::<u32>(),
            any::<u32>(),
            prop::sample::select(vec!["tcp", "udp", "http", "https"]),
            any::<u16>(),
        ),
        (
            prop::array::uniform4(-1i64..100_000),
            any::<u64>(),
            any::<u64>(),
            (prop::option::of(0usize..6), prop::option::of(any::<u16>())),
            any::<u64>(),
            prop::option::of(any::<u64>()),
            prop::collection::vec(0u64..1000, 0..=DURATION_SLOTS),
            any::<u64>(),
        ),
    )
        .prop_map(
            |(
                (stream, upstream, name, up, rise, fall, check_type, port),
                (delays, checks, fails, (reason, http_status), lc, ds, slots, sum),
            )| {
                OwnedRow {
                    stream,
                    upstream,
                    name,
                    up,
                    rise,
                    fall,
                    check_type,
                    port,
                    delays,
                    checks,
                    fails,
                    reason,
                    http_status,
                    last_change_ms: lc,
                    down_since_ms: ds,
                    slots,
                    sum,
                }
            },
        )
}

fn borrow(owned: &[OwnedRow]) -> Vec<PeerRow<'_>> {
    let (mut http, mut stream) = (0u32, 0u32);
    let mut rows: Vec<PeerRow> = owned
        .iter()
        .map(|o| {
            let counter = if o.stream { &mut stream } else { &mut http };
            let index = *counter;
            *counter += 1;
            PeerRow {
                group: if o.stream { Group::Stream } else { Group::Http },
                index,
                upstream: &o.upstream,
                name: &o.name,
                server: &o.name,
                backup: false,
                weight: 1,
                disabled: false,
                fail_open: false,
                unchecked: false,
                up: o.up,
                rise: o.rise,
                fall: o.fall,
                check_type: o.check_type,
                port: o.port,
                last_delay_ms: o.delays[0],
                avg_delay_ms: o.delays[1],
                min_delay_ms: o.delays[2],
                max_delay_ms: o.delays[3],
                checks: o.checks,
                fails_total: o.fails,
                failures_by_reason: REASONS,
                last_failure_reason: o.reason.map(|i| crate::reason::NAMES[i]),
                http_status: o.http_status,
                tls_resumed: matches!(o.check_type, "https" | "tls").then_some(o.checks / 2),
                last_change_ms: o.last_change_ms,
                last_duration_ms: o.sum,
                down_since_ms: o.down_since_ms,
                duration_buckets: &o.slots,
                duration_sum_ms: o.sum,
                duration_count: o.slots.iter().sum(),
            }
        })
        .collect();
    rows.sort_by_key(|r| r.group == Group::Stream);
    rows
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn prop_every_format_is_valid(owned in prop::collection::vec(owned_row(), 0..12), f in 0usize..3) {
        let rows = borrow(&owned);
        let filter = FILTERS[f];
        let want = Counts::of(&rows, filter);

        let v = json_of(&rows, filter);
        prop_assert_eq!(&v["servers"]["total"], &json!(want.total()));
        prop_assert_eq!(&v["servers"]["up"], &json!(want.up()));
        prop_assert_eq!(&v["servers"]["down"], &json!(want.down()));
        let shown: Vec<&PeerRow> = printed_all(&rows, filter).collect();
        let mut got = v["servers"]["http"].as_array().unwrap().clone();
        got.extend(v["servers"]["stream"].as_array().unwrap().iter().cloned());
        prop_assert_eq!(got.len(), shown.len());
        for (g, r) in got.iter().zip(&shown) {
            prop_assert_eq!(&g["upstream"], &json!(lossy(r.upstream)));
            prop_assert_eq!(&g["name"], &json!(lossy(r.name)));
            prop_assert_eq!(&g["status"], &json!(if r.up { "up" } else { "down" }));
            prop_assert_eq!(&g["http_status"], &json!(r.http_status));
        }

        prop_assert_eq!(check_csv(&rows, filter) as u64, want.total());

        let body = out(Format::Prometheus, filter, &rows);
        let s = validate_prom(&body).map_err(|e| TestCaseError::fail(format!("{e}\n{}", String::from_utf8_lossy(&body))))?;
        prop_assert_eq!(value_of(&s, "nginx_upstream_count_total", &[]), want.total() as f64);
        prop_assert_eq!(s.iter().filter(|s| s.name == "nginx_upstream_server_active").count() as u64, want.total());
        prop_assert!(!String::from_utf8_lossy(&body).contains(HTTP_STATUS), "lean page");
        let s = prom_full_of(&rows, filter);
        for r in &shown {
            let http = s.iter().find(|s| {
                s.name == "nginx_upstream_server_http_status"
                    && s.labels["upstream_type"] == r.group.as_str()
                    && s.labels["index"] == r.index.to_string()
            });
            let want = matches!(r.check_type, "http" | "https")
                .then(|| f64::from(r.http_status.unwrap_or(0)));
            prop_assert_eq!(http.map(|s| s.value), want);
        }

        let page = html_of(&rows, filter);
        prop_assert!(!page.contains("<script"));
        prop_assert_eq!(page.matches("<tr class=\"down\">").count() as u64, want.down());
    }

    #[test]
    fn prop_query_never_panics(q in prop::collection::vec(any::<u8>(), 0..64)) {
        match parse_query(&q) {
            Ok(_) => {}
            Err(e) => {
                prop_assert!(!e.contains('\n') && e.is_ascii(), "{}", e);
            }
        }
    }
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
