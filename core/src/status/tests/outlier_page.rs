use super::*;
use crate::outlier::{Rule, View};

// ---------------------------------------------------------------- check_outlier

/// `META.now_ms` + 25 s: 2023-11-14 22:16:57.123 UTC.
const UNTIL: u64 = 1_700_000_217_123;

/// Counted, never ejected.
const COUNTED: View = View {
    ejections: 0,
    ejected_at_ms: None,
    ejected_until_ms: None,
    requests: 120,
    failures: 3,
    mean_ms: Some(42),
    requests_total: 1000,
    failures_total: 17,
    rule: None,
};

/// Ejected now, for 25 s more, by five 5xx in a row; no request in the
/// last interval.
const EJECTED: View = View {
    ejections: 2,
    ejected_at_ms: Some(1_700_000_187_123),
    ejected_until_ms: Some(UNTIL),
    requests: 0,
    failures: 0,
    mean_ms: None,
    requests_total: 500,
    failures_total: 80,
    rule: Some(Rule::Consecutive5xx(5)),
};

/// http `web`: a counted peer, an ejected one; http `api`: a peer without
/// `check_outlier`; stream `db`: back from an ejection (a failure-rate
/// one), its view still holding an end time the row does not show.
fn outlier_rows() -> Vec<PeerRow<'static>> {
    vec![
        PeerRow {
            outlier: Some(COUNTED),
            ..row(Group::Http, 0, b"web", b"10.0.0.1:80", true)
        },
        PeerRow {
            ejected: true,
            checking: false,
            last_failure_reason: Some("outlier"),
            outlier: Some(EJECTED),
            ..row(Group::Http, 1, b"web", b"10.0.0.2:80", false)
        },
        row(Group::Http, 2, b"api", b"10.0.0.3:80", true),
        PeerRow {
            outlier: Some(View {
                ejections: 1,
                ejected_until_ms: Some(UNTIL),
                rule: Some(Rule::FailureRate {
                    percent: 34,
                    interval_ms: 10_000,
                    requests: 120,
                }),
                ..COUNTED
            }),
            ..row(Group::Stream, 0, b"db", b"10.0.0.4:5432", true)
        },
    ]
}

fn line_of<'p>(page: &'p str, name: &str) -> &'p str {
    page.lines()
        .find(|l| l.contains(name))
        .unwrap_or_else(|| panic!("no line with {name}:\n{page}"))
}

#[test]
fn json_outlier_fields() {
    let rows = outlier_rows();
    let body = String::from_utf8(out(Format::Json, None, &rows)).unwrap();
    assert!(line_of(&body, "10.0.0.1:80").contains(
        "\"shared_with\": [], \"ejections\": 0, \"ejected_until\": null, \"outlier\": \
{\"requests\": 120, \"failures\": 3, \"mean_response_ms\": 42, \"requests_total\": 1000, \
\"failures_total\": 17, \"rule\": null, \"detail\": null}, \"slow_start_ms\": null"
    ));
    assert!(line_of(&body, "10.0.0.2:80").contains(
        "\"shared_with\": [], \"ejections\": 2, \"ejected_until\": 1700000217123, \"outlier\": \
{\"requests\": 0, \"failures\": 0, \"mean_response_ms\": null, \"requests_total\": 500, \
\"failures_total\": 80, \"rule\": \"consecutive_5xx\", \"detail\": \"5xx 5 in a row\"}, \"slow_start_ms\""
    ));
    assert!(line_of(&body, "10.0.0.3:80").contains(
        "\"shared_with\": [], \"ejections\": 0, \"ejected_until\": null, \"outlier\": null, \"slow_start_ms\""
    ));
    assert!(line_of(&body, "10.0.0.4:5432").contains(
        "\"ejections\": 1, \"ejected_until\": null, \"outlier\": {\"requests\": 120, \
\"failures\": 3, \"mean_response_ms\": 42, \"requests_total\": 1000, \"failures_total\": 17, \
\"rule\": \"failure_percentage\", \"detail\": \"failure rate 34% over 10 s (120 requests)\"}, \"slow_start_ms\""
    ));
    assert!(body.contains(
        "\n  {\"group\": \"http\", \"name\": \"web\", \"peers\": 2, \"up\": 1, \"down\": 1, \
\"disabled\": 0, \"selectable\": 1, \"fail_open\": false, \"ejected\": 1, \"checking\": 0, \"draining\": 0},\n  \
{\"group\": \"http\", \"name\": \"api\", \"peers\": 1, \"up\": 1, \"down\": 0, \
\"disabled\": 0, \"selectable\": 1, \"fail_open\": false, \"ejected\": 0, \"checking\": 0, \"draining\": 0},\n"
    ));
    // Only appended: the existing fields keep their order, the new ones
    // come after shared_with.
    let v = json_of(&rows, None);
    assert_eq!(v["servers"]["http"][1].as_object().unwrap().len(), 33);
    let line = line_of(&body, "10.0.0.2:80");
    let pos: Vec<usize> = [
        "grpc_status",
        "shared_with",
        "ejections",
        "ejected_until",
        "outlier",
    ]
    .iter()
    .map(|k| line.find(&format!("\"{k}\":")).unwrap())
    .collect();
    assert!(pos.windows(2).all(|w| w[0] < w[1]), "{line}");
    assert_eq!(v["servers"]["http"][1]["status"], json!("down"));
    assert_eq!(
        v["servers"]["http"][1]["last_failure_reason"],
        json!("outlier")
    );

    // A detail is a JSON string like any other.
    let odd = [PeerRow {
        outlier: Some(View {
            rule: Some(Rule::SuccessRate {
                rate: 612,
                threshold: 880,
                mean: 970,
                stdev: 47,
            }),
            ..COUNTED
        }),
        ..row(Group::Http, 0, b"w\"eb", b"10.0.0.1:80", true)
    }];
    let v = json_of(&odd, None);
    assert_eq!(
        v["servers"]["http"][0]["outlier"]["detail"],
        json!("success rate 61% < 88% (mean 97%, stdev 4.7%)")
    );
    assert_eq!(
        v["servers"]["http"][0]["outlier"]["rule"],
        json!("success_rate")
    );
    // The admin answer carries the same row.
    let mut answer = Vec::new();
    json::admin_answer("enable", &[(rows[1], false)], &mut answer);
    let a: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(a["peers"][0]["outlier"], json!(v_outlier_ejected()));
    assert_eq!(a["peers"][0]["ejected_until"], json!(UNTIL));
}

fn v_outlier_ejected() -> Value {
    json!({"requests": 0, "failures": 0, "mean_response_ms": null, "requests_total": 500,
        "failures_total": 80, "rule": "consecutive_5xx", "detail": "5xx 5 in a row"})
}

#[test]
fn summaries_count_ejected_peers() {
    let mut rows = outlier_rows();
    // In an upstream that fails open, an ejected (down) peer stays
    // selectable.
    rows.push(PeerRow {
        ejected: true,
        checking: false,
        fail_open: true,
        outlier: Some(EJECTED),
        ..row(Group::Stream, 1, b"mq", b"10.0.0.5:5672", false)
    });
    let brief: Vec<_> = summarize(&rows)
        .iter()
        .map(|u| (u.name, u.down, u.ejected, u.selectable))
        .collect();
    assert_eq!(
        brief,
        [
            (&b"web"[..], 1, 1, 1),
            (&b"api"[..], 0, 0, 1),
            (&b"db"[..], 0, 0, 1),
            (&b"mq"[..], 1, 1, 1),
        ]
    );
}

#[test]
fn csv_outlier_columns() {
    let body = String::from_utf8(out(Format::Csv, None, &outlier_rows())).unwrap();
    let lines: Vec<&str> = body.lines().collect();
    assert!(lines[0].contains(
        ",period_ms,grpc_status,ejections,ejected_until,outlier_requests,outlier_failures,\
outlier_mean_ms,"
    ));
    assert!(lines[1].contains(",10.0.0.1:80,false,1,,5000,,0,,120,3,42"));
    assert!(lines[2].contains(
        ",down,9,4,outlier,1700000000123,1700000000123,,10.0.0.2:80,false,1,,5000,,\
2,1700000217123,0,0,"
    ));
    assert!(lines[3].contains(",10.0.0.3:80,false,1,,5000,,,,,,"));
    assert!(lines[4].contains(",10.0.0.4:5432,false,1,,5000,,1,,120,3,42"));
    assert_eq!(lines.len(), 5);
    for filter in FILTERS {
        check_csv(&outlier_rows(), filter);
    }
}

#[test]
fn html_outlier_cells() {
    let rows = outlier_rows();
    let page = html_of(&rows, None);
    assert!(page.contains(
        "<th>admin</th><th>ejections</th><th>ejected until</th><th>requests</th>\
<th>request failures</th><th>mean ms</th><th>slow start</th>"
    ));
    assert!(line_of(&page, "10.0.0.1:80").contains(
        "<td></td><td class=\"n\">0</td><td>&ndash;</td><td class=\"n\">120</td>\
<td class=\"n\">3</td><td class=\"n\">42</td><td>"
    ));
    assert!(line_of(&page, "10.0.0.2:80").contains(
        "<td></td><td class=\"n\">2</td><td><span class=\"bad\" \
title=\"2023-11-14 22:16:57 UTC\">in 25s</span></td><td class=\"n\">0</td>\
<td class=\"n\">0</td><td class=\"n\">&ndash;</td><td>"
    ));
    assert!(line_of(&page, "10.0.0.2:80").contains("<td>outlier</td>"));
    // Without check_outlier: empty cells.
    assert!(line_of(&page, "10.0.0.3:80").contains(
        "<td></td><td class=\"n\"></td><td></td><td class=\"n\"></td><td class=\"n\"></td>\
<td class=\"n\"></td><td>"
    ));
    // Back from its ejection: no end shown.
    assert!(line_of(&page, "10.0.0.4:5432").contains(
        "<td class=\"n\">1</td><td>&ndash;</td><td class=\"n\">120</td>\
<td class=\"n\">3</td><td class=\"n\">42</td><td>"
    ));
    // The upstreams table has the ejected count after disabled.
    assert!(page.contains("<th>down</th><th>disabled</th><th>ejected</th><th>selectable</th>"));
    assert!(page.contains(
        "<tr class=\"upstream\"><td>http</td><td class=\"w\">web</td><td class=\"n\">2</td>\
<td class=\"n\">1</td><td class=\"n\">1</td><td class=\"n\">0</td><td class=\"n\">1</td>\
<td class=\"n\">1</td><td>no</td></tr>\n"
    ));
    for l in page.lines().filter(|l| l.starts_with("<tr")) {
        let columns = if l.starts_with("<tr class=\"upstream") {
            html::UPSTREAM_COLUMNS.len()
        } else {
            html::COLUMNS.len()
        };
        assert_eq!(l.matches("<td").count(), columns, "{l}");
    }
    assert_eq!(html::COLUMNS.len(), 32);
    assert_eq!(html::UPSTREAM_COLUMNS.len(), 9);
}

const OUTLIER_FAMILIES: [&str; 4] = [
    "nginx_upstream_server_ejections_total",
    "nginx_upstream_server_ejected",
    "nginx_upstream_server_outlier_requests_total",
    "nginx_upstream_server_outlier_failures_total",
];

#[test]
fn prom_outlier_families_on_the_full_page() {
    let rows = outlier_rows();
    // The default page: none of them.
    for filter in FILTERS {
        let lean = String::from_utf8(out(Format::Prometheus, filter, &rows)).unwrap();
        validate_prom(lean.as_bytes()).unwrap();
        for f in OUTLIER_FAMILIES {
            assert!(!lean.contains(f), "{f} on the default page:\n{lean}");
        }
    }
    let body = prom_full_body(&rows, None);
    prom_full_of(&rows, None);
    let labels = |i: &str, g: &str, u: &str, n: &str| {
        format!("{{index=\"{i}\",upstream_type=\"{g}\",upstream=\"{u}\",name=\"{n}\",type=\"tcp\",port=\"0\"}}")
    };
    let web0 = labels("0", "http", "web", "10.0.0.1:80");
    let web1 = labels("1", "http", "web", "10.0.0.2:80");
    let db0 = labels("0", "stream", "db", "10.0.0.4:5432");
    let want = format!(
        "# HELP nginx_upstream_server_ejections_total Times check_outlier ejected the peer.\n\
# TYPE nginx_upstream_server_ejections_total counter\n\
nginx_upstream_server_ejections_total{web0} 0\n\
nginx_upstream_server_ejections_total{web1} 2\n\
nginx_upstream_server_ejections_total{db0} 1\n\
# HELP nginx_upstream_server_ejected 1 while check_outlier ejects the peer, else 0.\n\
# TYPE nginx_upstream_server_ejected gauge\n\
nginx_upstream_server_ejected{web0} 0\n\
nginx_upstream_server_ejected{web1} 1\n\
nginx_upstream_server_ejected{db0} 0\n\
# HELP nginx_upstream_server_outlier_requests_total Proxied attempts to the peer that \
check_outlier counted.\n\
# TYPE nginx_upstream_server_outlier_requests_total counter\n\
nginx_upstream_server_outlier_requests_total{web0} 1000\n\
nginx_upstream_server_outlier_requests_total{web1} 500\n\
nginx_upstream_server_outlier_requests_total{db0} 1000\n\
# HELP nginx_upstream_server_outlier_failures_total Proxied attempts to the peer that \
check_outlier counted as failures (5xx, errors, timeouts, invalid or slow answers).\n\
# TYPE nginx_upstream_server_outlier_failures_total counter\n\
nginx_upstream_server_outlier_failures_total{web0} 17\n\
nginx_upstream_server_outlier_failures_total{web1} 80\n\
nginx_upstream_server_outlier_failures_total{db0} 17\n\
# HELP nginx_upstream_server_effective_weight "
    );
    assert!(body.contains(&want), "{body}");
    // After the last per-peer family before them, before the histogram.
    let families = prom_families(&body);
    let at = |name: &str| families.iter().position(|f| *f == name).unwrap();
    assert_eq!(
        at(OUTLIER_FAMILIES[0]),
        at("nginx_upstream_server_check_last_duration_seconds") + 1
    );
    // A page with no printed check_outlier peer has no such family.
    let none = prom_full_body(&rows[2..3], None);
    validate_prom(none.as_bytes()).unwrap();
    for f in OUTLIER_FAMILIES {
        assert!(!none.contains(f), "{none}");
    }
    // Only the printed peers: the down page has the ejected one alone.
    let down = prom_full_of(&rows, Some(Filter::Down));
    let ejected: Vec<f64> = down
        .iter()
        .filter(|s| s.name == "nginx_upstream_server_ejected")
        .map(|s| s.value)
        .collect();
    assert_eq!(ejected, [1.0]);
    // No per-upstream family: those stay the same on every page.
    assert!(!body.contains("nginx_upstream_peers_ejected"));
}
