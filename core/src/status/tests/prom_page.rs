use super::*;

// ---------------------------------------------------------------- prometheus

#[derive(Debug)]
pub(super) struct Sample {
    pub(super) name: String,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) value: f64,
}

pub(super) fn metric_name_ok(n: &str) -> bool {
    let mut c = n.chars();
    matches!(c.next(), Some('a'..='z' | 'A'..='Z' | '_' | ':'))
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

pub(super) fn label_name_ok(n: &str) -> bool {
    let mut c = n.chars();
    matches!(c.next(), Some('a'..='z' | 'A'..='Z' | '_'))
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A strict reader for the subset of text format 0.0.4 we emit.
pub(super) fn validate_prom(body: &[u8]) -> Result<Vec<Sample>, String> {
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

pub(super) fn prom_of(rows: &[PeerRow], filter: Option<Filter>) -> Vec<Sample> {
    let body = out(Format::Prometheus, filter, rows);
    validate_prom(&body).unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(&body)))
}

/// The full page's (`?histogram=on`) body.
pub(super) fn prom_full_body(rows: &[PeerRow], filter: Option<Filter>) -> String {
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
pub(super) fn prom_full_of(rows: &[PeerRow], filter: Option<Filter>) -> Vec<Sample> {
    let body = prom_full_body(rows, filter);
    validate_prom(body.as_bytes()).unwrap_or_else(|e| panic!("{e}\n{body}"))
}

/// Families in the order of their `# TYPE` lines.
pub(super) fn prom_families(body: &str) -> Vec<&str> {
    body.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect()
}

pub(super) const HTTP_STATUS: &str = "nginx_upstream_server_http_status";

pub(super) fn value_of(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
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
    assert_eq!(per_peer(&full, "http").len(), 9 + 3 + 15 + 4);
    assert_eq!(per_peer(&full, "stream").len(), 4 + 3 + 15 + 4);
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
        at("nginx_upstream_server_effective_weight"),
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
