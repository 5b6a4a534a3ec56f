//! The `healthcheck_status` page in its four formats, parsed the way a
//! consumer would: JSON with serde_json, CSV with the `csv` crate (strict
//! RFC 4180), Prometheus with `promtool check metrics` plus a small label
//! parser, HTML by its tables and headings. Every parser panics, naming
//! `what` (the page) and the problem, on anything the documented format
//! does not allow (docs/status.md).

use std::collections::{BTreeMap, HashSet};
use std::io::{self, Write};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::status::Kind;

/// One of the page's formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fmt {
    /// `html`, the default.
    Html,
    /// `csv`.
    Csv,
    /// `json`.
    Json,
    /// `prometheus` (text exposition format 0.0.4).
    Prometheus,
}

impl Fmt {
    /// Every format.
    pub const ALL: [Fmt; 4] = [Fmt::Html, Fmt::Csv, Fmt::Json, Fmt::Prometheus];

    /// Its name in `?format=` and in the directive.
    pub fn name(self) -> &'static str {
        match self {
            Fmt::Html => "html",
            Fmt::Csv => "csv",
            Fmt::Json => "json",
            Fmt::Prometheus => "prometheus",
        }
    }

    /// Its `Content-Type`, as docs/status.md lists them,
    /// exactly.
    pub fn content_type(self) -> &'static str {
        match self {
            Fmt::Html => "text/html; charset=utf-8",
            Fmt::Csv => "text/csv; charset=utf-8",
            Fmt::Json => "application/json",
            Fmt::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// One printed peer row, in the terms every format shares.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Row {
    /// `http` or `stream`.
    pub group: String,
    /// The peer's index in its group.
    pub index: u64,
    /// The upstream's name as printed (unescaped).
    pub upstream: String,
    /// The peer's address as printed.
    pub name: String,
    /// Whether it is printed up (else down).
    pub up: bool,
}

impl Row {
    /// The row of a peer in `group`.
    pub fn new(group: Kind, index: u64, upstream: &str, name: &str, up: bool) -> Row {
        Row {
            group: group.key().to_string(),
            index,
            upstream: upstream.to_string(),
            name: name.to_string(),
            up,
        }
    }
}

/// total, up, down.
pub type Totals = (u64, u64, u64);

/// The totals `rows` make.
pub fn totals(rows: &[Row]) -> Totals {
    let up = rows.iter().filter(|r| r.up).count() as u64;
    (rows.len() as u64, up, rows.len() as u64 - up)
}

/// The rows of one group.
pub fn group_rows(rows: &[Row], kind: Kind) -> Vec<Row> {
    rows.iter()
        .filter(|r| r.group == kind.key())
        .cloned()
        .collect()
}

/// What one page parsed into.
#[derive(Debug)]
pub struct Page {
    /// Every printed peer row, http rows then stream rows.
    pub rows: Vec<Row>,
    /// Page totals the format prints (CSV prints none).
    pub totals: Option<Totals>,
    /// Per-group totals, http then stream (HTML headings, JSON arrays).
    pub groups: Option<[Totals; 2]>,
    /// The configuration generation (CSV prints none).
    pub generation: Option<u64>,
}

/// Parse a page of format `fmt` (Prometheus pages must also pass
/// [`promtool_check`]); panics naming `what` and the problem.
pub fn parse_page(fmt: Fmt, body: &str, what: &str) -> Page {
    match fmt {
        Fmt::Json => parse_json(body, what),
        Fmt::Csv => Page {
            rows: parse_csv(body, what)
                .into_iter()
                .map(|c| Row {
                    group: c["upstream_type"].clone(),
                    index: c["index"].parse().unwrap(),
                    upstream: c["upstream_name"].clone(),
                    name: c["host"].clone(),
                    up: status_is_up(&c["status"]),
                })
                .collect(),
            totals: None,
            groups: None,
            generation: None,
        },
        Fmt::Prometheus => {
            promtool_check(body, what);
            parse_prom_page(body, what)
        }
        Fmt::Html => parse_html(body, what),
    }
}

/// `up` or `down` as printed; panics on anything else.
pub fn status_is_up(s: &str) -> bool {
    match s {
        "up" => true,
        "down" => false,
        other => panic!("status {other:?} is neither up nor down"),
    }
}

// --- JSON --------------------------------------------------------------------

/// The keys of a JSON peer object.
pub const JSON_PEER_KEYS: [&str; 33] = [
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
    "server",
    "backup",
    "weight",
    "admin",
    "tls_resumed",
    "period_ms",
    "grpc_status",
    "shared_with",
    "ejections",
    "ejected_until",
    "outlier",
    "slow_start_ms",
    "effective_weight",
    "connections",
    "sessions_shut",
];

/// A JSON page: exactly the documented keys, totals and per-group totals.
pub fn parse_json(body: &str, what: &str) -> Page {
    let v: Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{what}: invalid JSON ({e}): {body}"));
    let top = v.as_object().expect("JSON top level is an object");
    assert_eq!(
        top.keys().collect::<Vec<_>>(),
        ["servers", "upstreams"],
        "{what}"
    );
    assert!(v["upstreams"].is_array(), "{what}: upstreams is a list");
    let servers = v["servers"].as_object().expect("servers is an object");
    let mut keys: Vec<&str> = servers.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "check_connections",
            "down",
            "dropped_events",
            "generation",
            "http",
            "stream",
            "total",
            "up"
        ],
        "{what}"
    );
    assert!(
        servers["dropped_events"].is_u64(),
        "{what}: dropped_events is a count"
    );
    assert!(
        servers["check_connections"].is_u64(),
        "{what}: check_connections is a count"
    );
    let num = |k: &str| {
        v["servers"][k]
            .as_u64()
            .unwrap_or_else(|| panic!("{what}: servers.{k} not an unsigned integer"))
    };
    let mut rows = Vec::new();
    let mut groups = [(0, 0, 0); 2];
    for (gi, kind) in [Kind::Http, Kind::Stream].into_iter().enumerate() {
        let arr = v["servers"][kind.key()]
            .as_array()
            .unwrap_or_else(|| panic!("{what}: servers.{} is not an array", kind.key()));
        let mut group = Vec::new();
        for p in arr {
            let obj = p.as_object().expect("peer is an object");
            let mut pk: Vec<&str> = obj.keys().map(String::as_str).collect();
            let mut want = JSON_PEER_KEYS.to_vec();
            pk.sort_unstable();
            want.sort_unstable();
            assert_eq!(pk, want, "{what}: peer keys of {p}");
            group.push(Row {
                group: kind.key().to_string(),
                index: p["index"].as_u64().expect("index"),
                upstream: p["upstream"].as_str().expect("upstream").to_string(),
                name: p["name"].as_str().expect("name").to_string(),
                up: status_is_up(p["status"].as_str().expect("status")),
            });
        }
        groups[gi] = totals(&group);
        rows.extend(group);
    }
    Page {
        rows,
        totals: Some((num("total"), num("up"), num("down"))),
        groups: Some(groups),
        generation: Some(num("generation")),
    }
}

// --- CSV ---------------------------------------------------------------------

/// The CSV header the page starts with (docs/status.md).
pub const CSV_BASE_HEADER: &str = "index,upstream_type,upstream_name,host,rise,fall,check_type,\
check_port,last_delay,avg_delay,min_delay,max_delay,status";
/// The columns the module adds after it.
pub const CSV_OUR_COLUMNS: &str =
    "checks,fails_total,last_failure_reason,last_change,down_since,http_status,\
server,backup,weight,admin,period_ms,grpc_status,ejections,ejected_until,outlier_requests,\
outlier_failures,outlier_mean_ms,slow_start_ms,effective_weight,connections,sessions_shut";

/// Every record as column -> value, through a strict RFC 4180 parser
/// (equal field counts, valid UTF-8).
pub fn parse_csv(body: &str, what: &str) -> Vec<BTreeMap<String, String>> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .from_reader(body.as_bytes());
    let header: Vec<String> = rdr
        .headers()
        .unwrap_or_else(|e| panic!("{what}: CSV header: {e}"))
        .iter()
        .map(str::to_string)
        .collect();
    assert_eq!(
        header.join(","),
        format!("{CSV_BASE_HEADER},{CSV_OUR_COLUMNS}"),
        "{what}: CSV header"
    );
    assert!(
        body.starts_with(&format!("{CSV_BASE_HEADER},")),
        "{what}: CSV must start with the documented header"
    );
    rdr.records()
        .map(|rec| {
            let rec = rec.unwrap_or_else(|e| panic!("{what}: CSV record: {e}\n{body}"));
            header
                .iter()
                .cloned()
                .zip(rec.iter().map(str::to_string))
                .collect()
        })
        .collect()
}

// --- Prometheus ------------------------------------------------------------

/// `promtool check metrics` must accept `body`. A missing promtool fails the
/// test: the check is part of the contract.
pub fn promtool_check(body: &str, what: &str) {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::NotFound => panic!(
            "promtool not found: install Debian's prometheus package \
             (apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends prometheus) \
             or run scripts/test, which does"
        ),
        Err(e) => panic!("run promtool: {e}"),
    };
    let mut stdin = child.stdin.take().unwrap();
    let body_owned = body.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(body_owned.as_bytes()));
    let out = child.wait_with_output().expect("wait for promtool");
    writer.join().unwrap().expect("write to promtool");
    assert!(
        out.status.success(),
        "{what}: promtool check metrics failed ({}):\n{}{}\n--- page ---\n{body}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One sample of a Prometheus page.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric name.
    pub name: String,
    /// Labels in order, values unescaped.
    pub labels: Vec<(String, String)>,
    /// The value as printed.
    pub value: String,
}

impl Sample {
    /// The value of label `k`.
    pub fn label(&self, k: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }
}

/// Samples of a text-format page (comments skipped), label values unescaped.
pub fn parse_prom(body: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in body.split('\n') {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut chars = line.chars().peekable();
        let mut name = String::new();
        while let Some(&c) = chars.peek() {
            if c == '{' || c == ' ' {
                break;
            }
            name.push(c);
            chars.next();
        }
        let mut labels = Vec::new();
        if chars.peek() == Some(&'{') {
            chars.next();
            loop {
                if chars.peek() == Some(&'}') {
                    chars.next();
                    break;
                }
                let mut key = String::new();
                for c in chars.by_ref() {
                    if c == '=' {
                        break;
                    }
                    key.push(c);
                }
                assert_eq!(chars.next(), Some('"'), "label {key} in {line:?}");
                let mut value = String::new();
                loop {
                    match chars
                        .next()
                        .unwrap_or_else(|| panic!("unterminated {line:?}"))
                    {
                        '"' => break,
                        '\\' => match chars.next() {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            other => panic!("bad escape {other:?} in {line:?}"),
                        },
                        c => value.push(c),
                    }
                }
                labels.push((key, value));
                match chars.next() {
                    Some(',') => {}
                    Some('}') => break,
                    other => panic!("unexpected {other:?} after a label in {line:?}"),
                }
            }
        }
        assert_eq!(chars.next(), Some(' '), "no space before value: {line:?}");
        let value: String = chars.collect();
        assert!(
            !value.contains(' '),
            "timestamps are not expected: {line:?}"
        );
        out.push(Sample {
            name,
            labels,
            value,
        });
    }
    out
}

/// The labels every `nginx_upstream_server_*` series starts with.
pub const PEER_LABELS: [&str; 6] = ["index", "upstream_type", "upstream", "name", "type", "port"];

/// The label that follows [`PEER_LABELS`] when the `server` line is not
/// the peer's address itself.
pub const SERVER_LABEL: &str = "server";

/// A Prometheus page (without [`promtool_check`]): unique series, the peer
/// labels on every peer series, one rise and fall per row, the counts.
pub fn parse_prom_page(body: &str, what: &str) -> Page {
    let samples = parse_prom(body);
    // Unique series (an http and a stream upstream may share a name, a
    // server may appear twice).
    let mut seen = HashSet::new();
    for s in &samples {
        let mut key = s.labels.clone();
        key.sort();
        assert!(
            seen.insert((s.name.clone(), key)),
            "{what}: duplicate series {s:?}"
        );
        if s.name.starts_with("nginx_upstream_server_") {
            let names: Vec<&str> = s.labels.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(
                names.get(..PEER_LABELS.len()),
                Some(&PEER_LABELS[..]),
                "{what}: labels of {s:?}"
            );
            assert_eq!(
                names.get(PEER_LABELS.len()) == Some(&SERVER_LABEL),
                s.label("server")
                    .is_some_and(|v| Some(v) != s.label("name")),
                "{what}: server label only when it is not the address: {s:?}"
            );
            assert!(s.label("status").is_none(), "{what}: status label: {s:?}");
        }
    }
    let count = |n: &str| {
        let v: Vec<&Sample> = samples.iter().filter(|s| s.name == n).collect();
        assert_eq!(v.len(), 1, "{what}: {n} samples: {v:?}");
        v[0].value
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("{what}: {n} = {}", v[0].value))
    };
    let rows = samples
        .iter()
        .filter(|s| s.name == "nginx_upstream_server_active")
        .map(|s| Row {
            group: s.label("upstream_type").unwrap().to_string(),
            index: s.label("index").unwrap().parse().unwrap(),
            upstream: s.label("upstream").unwrap().to_string(),
            name: s.label("name").unwrap().to_string(),
            up: match s.value.as_str() {
                "1" => true,
                "0" => false,
                v => panic!("{what}: active = {v}"),
            },
        })
        .collect::<Vec<_>>();
    // The full page (`?histogram=on`) has rise and fall; the default
    // page neither.
    for family in ["nginx_upstream_server_rise", "nginx_upstream_server_fall"] {
        let n = samples.iter().filter(|s| s.name == family).count();
        assert!(
            n == 0 || n == rows.len(),
            "{what}: {n} {family} for {} printed rows",
            rows.len()
        );
    }
    Page {
        rows,
        totals: Some((
            count("nginx_upstream_count_total"),
            count("nginx_upstream_count_up"),
            count("nginx_upstream_count_down"),
        )),
        groups: None,
        generation: Some(count("nginx_upstream_count_generation")),
    }
}

// --- HTML --------------------------------------------------------------------

fn unescape_html(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let end = rest
            .find(';')
            .unwrap_or_else(|| panic!("bare & in HTML text {s:?}"));
        let ent = &rest[1..end];
        let c = match ent {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "ndash" => '\u{2013}',
            "middot" => '\u{b7}',
            _ if ent.starts_with("#x") => {
                char::from_u32(u32::from_str_radix(&ent[2..], 16).unwrap()).unwrap()
            }
            _ if ent.starts_with('#') => char::from_u32(ent[1..].parse().unwrap()).unwrap(),
            _ => panic!("unknown entity &{ent}; in {s:?}"),
        };
        out.push(c);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

fn strip_tags(s: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

/// Text of each `<tag ...>…</tag>` in `s`, in order (tags inside stripped,
/// entities decoded).
fn elements(s: &str, tag: &str) -> Vec<String> {
    let open = format!("<{tag}");
    let close = format!("</{tag}>");
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find(&open) {
        rest = &rest[i..];
        // `<th` must not match `<thead`.
        if !matches!(rest.as_bytes().get(open.len()), Some(b'>' | b' ')) {
            rest = &rest[open.len()..];
            continue;
        }
        let gt = rest.find('>').expect("unterminated tag");
        let end = rest.find(&close).expect("unclosed element");
        out.push(unescape_html(&strip_tags(&rest[gt + 1..end])));
        rest = &rest[end + close.len()..];
    }
    out
}

fn numbers(s: &str) -> Vec<u64> {
    s.split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .map(|p| p.parse().unwrap())
        .collect()
}

/// Text is escaped, so every `<` starts one of the page's own tags: only
/// known elements, no scripts, no event handlers, no external assets.
fn check_html_tags(body: &str, what: &str) {
    const ALLOWED: [&str; 21] = [
        "!DOCTYPE", "html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "nav", "a",
        "strong", "span", "table", "thead", "tbody", "tr", "th", "td", "br",
    ];
    let mut rest = body;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let end = rest
            .find('>')
            .unwrap_or_else(|| panic!("{what}: unterminated tag"));
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        let name = tag.trim_start_matches('/');
        let name = name.split([' ', '\n']).next().unwrap();
        assert!(ALLOWED.contains(&name), "{what}: unexpected tag <{tag}>");
        let lower = tag.to_ascii_lowercase();
        for bad in [" on", " src=", "://", "javascript:"] {
            assert!(!lower.contains(bad), "{what}: tag <{tag}> contains {bad:?}");
        }
    }
}

/// An HTML page: only the page's own tags (inert), per-group headings
/// with their counts, one table row per peer, down rows highlighted.
pub fn parse_html(body: &str, what: &str) -> Page {
    assert!(body.starts_with("<!DOCTYPE html>"), "{what}: {body}");
    assert!(body.trim_end().ends_with("</html>"), "{what}");
    check_html_tags(body, what);
    let mut rows = Vec::new();
    let mut groups = [(0, 0, 0); 2];
    for (gi, kind) in [Kind::Http, Kind::Stream].into_iter().enumerate() {
        let h2 = format!("<h2 id=\"{}\">", kind.key());
        let start = body
            .find(&h2)
            .unwrap_or_else(|| panic!("{what}: no {h2} heading"));
        let section = &body[start + h2.len()..];
        let heading_end = section.find("</h2>").unwrap();
        let heading = unescape_html(&strip_tags(&section[..heading_end]));
        let nums = numbers(&heading);
        assert_eq!(nums.len(), 3, "{what}: heading {heading:?}");
        groups[gi] = (nums[0], nums[1], nums[2]);
        let section = &section[heading_end..];
        let section = &section[..section
            .find("<h2")
            .or_else(|| section.find("</body>"))
            .unwrap()];
        let Some(tbody_start) = section.find("<tbody>") else {
            assert!(!section.contains("<tr"), "{what}: rows without a tbody");
            continue;
        };
        let cols = elements(section, "th");
        let col = |name: &str| {
            cols.iter()
                .position(|c| c == name)
                .unwrap_or_else(|| panic!("{what}: no {name} column in {cols:?}"))
        };
        let (ci, cu, cs, cst) = (col("#"), col("upstream"), col("server"), col("status"));
        let tbody = &section[tbody_start..section.find("</tbody>").unwrap()];
        for tr in tbody.split("<tr").skip(1) {
            let cells = elements(&format!("<tr{tr}"), "td");
            assert_eq!(cells.len(), cols.len(), "{what}: row {tr}");
            let up = status_is_up(&cells[cst]);
            let highlighted = tr.starts_with(" class=\"down\"");
            assert_eq!(
                highlighted, !up,
                "{what}: down rows and only they are highlighted: {tr}"
            );
            rows.push(Row {
                group: kind.key().to_string(),
                index: cells[ci].parse().unwrap(),
                upstream: cells[cu].clone(),
                name: cells[cs].clone(),
                up,
            });
        }
    }
    let all = (
        groups[0].0 + groups[1].0,
        groups[0].1 + groups[1].1,
        groups[0].2 + groups[1].2,
    );
    let summary = &body[body.find("<p>").unwrap()..];
    let summary = &summary[..summary.find("</p>").unwrap()];
    let generation = summary
        .strip_prefix("<p>Generation ")
        .and_then(|g| numbers(g).first().copied())
        .unwrap_or_else(|| panic!("{what}: no generation in {summary:?}"));
    Page {
        rows,
        totals: Some(all),
        groups: Some(groups),
        generation: Some(generation),
    }
}
