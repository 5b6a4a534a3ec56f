use super::*;

// ---------------------------------------------------------------- json

pub(super) fn json_of(format_rows: &[PeerRow], filter: Option<Filter>) -> Value {
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
        "tls_resumed": null, "period_ms": 5000, "grpc_status": null, "shared_with": [],
        "ejections": 0, "ejected_until": null, "outlier": null, "slow_start_ms": null,
        "effective_weight": 1.0, "connections": null, "sessions_shut": 0});
    let down1 = json!({"index": 1, "upstream": "web", "name": "127.0.0.1:8082", "status": "down",
        "rise": 0, "fall": 4, "type": "tcp", "port": 0, "last_delay_ms": -1, "avg_delay_ms": -1,
        "min_delay_ms": -1, "max_delay_ms": -1, "checks": 9, "fails_total": 4,
        "last_failure_reason": "refused", "http_status": null, "last_change": 1_700_000_000_123u64,
        "down_since": 1_700_000_000_123u64, "server": "127.0.0.1:8082", "backup": false,
        "weight": 1, "admin": null, "tls_resumed": null, "period_ms": 5000, "grpc_status": null, "shared_with": [],
        "ejections": 0, "ejected_until": null, "outlier": null, "slow_start_ms": null,
        "effective_weight": 1.0, "connections": null, "sessions_shut": 0});
    let mut s0 = up0.clone();
    s0["type"] = json!("udp");
    s0["port"] = json!(5353);
    // The summaries count every peer of the upstream, whatever the filter.
    let upstreams = json!([
        {"group": "http", "name": "web", "peers": 2, "up": 1, "down": 1, "disabled": 0,
         "selectable": 1, "fail_open": false, "ejected": 0, "checking": 0, "draining": 0},
        {"group": "stream", "name": "web", "peers": 1, "up": 1, "down": 0, "disabled": 0,
         "selectable": 1, "fail_open": false, "ejected": 0, "checking": 0, "draining": 0}]);
    assert_eq!(
        v,
        json!({"servers": {"total": 3, "up": 2, "down": 1, "generation": 3, "dropped_events": 0, "check_connections": 0,
            "http": [up0.clone(), down1.clone()], "stream": [s0.clone()]},
            "upstreams": upstreams})
    );
    assert_eq!(
        json_of(&sample(), Some(Filter::Up)),
        json!({"servers": {"total": 2, "up": 2, "down": 0, "generation": 3, "dropped_events": 0, "check_connections": 0,
            "http": [up0], "stream": [s0]}, "upstreams": upstreams})
    );
    assert_eq!(
        json_of(&sample(), Some(Filter::Down)),
        json!({"servers": {"total": 1, "up": 0, "down": 1, "generation": 3, "dropped_events": 0, "check_connections": 0,
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
        "{\"servers\": {\n  \"total\": 3, \"up\": 2, \"down\": 1, \"generation\": 3, \"dropped_events\": 0, \"check_connections\": 0,\n"
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
            json!({"servers": {"total": 0, "up": 0, "down": 0, "generation": 3, "dropped_events": 0, "check_connections": 0, "http": [], "stream": []},
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

/// `shared_with` lists the other rows of a shared probe, their upstream
/// names escaped as every string.
#[test]
fn json_shared_with() {
    let shared = [
        crate::status::SharedRow {
            group: Group::Stream,
            upstream: b"db\"\n\xff".to_vec(),
            index: 7,
        },
        crate::status::SharedRow {
            group: Group::Http,
            upstream: b"api".to_vec(),
            index: 0,
        },
    ];
    let mut row = super::row(Group::Http, 3, b"web", b"127.0.0.1:8081", true);
    row.shared_with = &shared;
    let v = json_of(&[row], None);
    assert_eq!(
        v["servers"]["http"][0]["shared_with"],
        json!([
            {"upstream_type": "stream", "upstream": "db\"\n\u{fffd}", "index": 7},
            {"upstream_type": "http", "upstream": "api", "index": 0}
        ])
    );
}
