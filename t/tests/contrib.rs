//! What operators wire up (docs/operations.md, Alerts and dashboard):
//! `contrib/prometheus/alerts.yml` passes `promtool check rules` and its
//! unit tests (`alerts_test.yml`, `promtool test rules`), every query of
//! `contrib/grafana/dashboard.json` is valid PromQL, and every metric and
//! label they use exists in a real default Prometheus page.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use healthcheck_t::page::parse_prom;
use healthcheck_t::paths::workspace_root;
use healthcheck_t::{free_port, http_get, poll_status_json, Backend, Kind, Mode, Nginx};
use serde_json::Value;

fn contrib(path: &str) -> PathBuf {
    workspace_root().join("contrib").join(path)
}

/// Run promtool; panic with its output unless it succeeds.
fn promtool(args: &[&str], file: &Path) -> String {
    let out = Command::new("promtool")
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| {
            panic!("run promtool ({e}): install Debian's prometheus package (scripts/test does)")
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool {args:?} {}:\n{text}",
        file.display()
    );
    text
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let rules = contrib("prometheus/alerts.yml");
    let out = promtool(&["check", "rules"], &rules);
    assert!(out.contains("SUCCESS: 5 rules found"), "{out}");
    // The unit tests fire each alert on its series, and not before.
    let out = promtool(&["test", "rules"], &contrib("prometheus/alerts_test.yml"));
    assert!(out.contains("SUCCESS"), "{out}");
}

/// Every `expr` of the dashboard, with Grafana's variables as Prometheus
/// would get them.
fn dashboard_queries() -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(e)) = m.get("expr") {
                    out.push(e.clone());
                }
                m.values().for_each(|v| walk(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let text = fs::read_to_string(contrib("grafana/dashboard.json")).unwrap();
    let v: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert!(
        v["panels"].as_array().is_some_and(|p| p.len() >= 6),
        "panels"
    );
    let mut out = Vec::new();
    walk(&v, &mut out);
    out.into_iter()
        .map(|e| {
            e.replace("$__rate_interval", "1m")
                .replace("$job", ".*")
                .replace("$instance", ".*")
        })
        .collect()
}

#[test]
fn dashboard_queries_are_valid_promql() {
    let queries = dashboard_queries();
    assert!(queries.len() >= 8, "{queries:?}");
    // promtool checks rules, not bare queries: one recording rule each.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, q) in queries.iter().enumerate() {
        let quoted = serde_json::to_string(q).unwrap();
        rules.push_str(&format!(
            "      - record: dashboard:query_{i}\n        expr: {quoted}\n"
        ));
    }
    let dir = std::env::temp_dir().join(format!("hc-contrib-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join("dashboard-rules.yml");
    fs::write(&file, rules).unwrap();
    let out = promtool(&["check", "rules"], &file);
    let _ = fs::remove_dir_all(&dir);
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", queries.len())),
        "{out}"
    );
}

/// `nginx_*` metric names in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let bytes = text.as_bytes();
    let mut out = BTreeSet::new();
    let mut i = 0;
    while let Some(at) = text[i..].find("nginx_") {
        let start = i + at;
        let before_ok =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        if before_ok {
            out.insert(text[start..end].to_string());
        }
        i = end;
    }
    out
}

#[test]
fn every_metric_and_label_used_is_on_the_default_page() {
    let b = Backend::start();
    let refusing = Backend::with_mode(Mode::Refuse);
    let (port, sport) = (free_port(), free_port());
    let ng = Nginx::start(&format!(
        "http {{
    access_log off;
    upstream web {{ server {a}; server {r}; check interval=200 rise=1 fall=1 timeout=150; }}
    server {{
        listen 127.0.0.1:{port};
        location /status {{ healthcheck_status prometheus; }}
    }}
}}
stream {{
    upstream tcp {{ server {a}; check interval=200 rise=1 fall=1 timeout=150; }}
    server {{ listen 127.0.0.1:{sport}; proxy_pass tcp; }}
}}",
        a = b.addr(),
        r = refusing.addr(),
    ));
    poll_status_json(port, std::time::Duration::from_secs(10), "checked", |s| {
        s.is_down(Kind::Http, "web", &refusing.addr())
    });
    let page = http_get(port, "/status").unwrap().text();
    let samples = parse_prom(&page);
    let on_page: BTreeSet<String> = samples.iter().map(|s| s.name.clone()).collect();
    let labels: BTreeSet<String> = samples
        .iter()
        .flat_map(|s| s.labels.iter().map(|(k, _)| k.clone()))
        .collect();

    let alerts = fs::read_to_string(contrib("prometheus/alerts.yml")).unwrap();
    let dashboard = fs::read_to_string(contrib("grafana/dashboard.json")).unwrap();
    for (what, text) in [("alerts.yml", &alerts), ("dashboard.json", &dashboard)] {
        let used = metric_names(text);
        assert!(used.len() >= 3, "{what}: {used:?}");
        let missing: Vec<&String> = used.difference(&on_page).collect();
        assert!(
            missing.is_empty(),
            "{what} uses {missing:?}, not on the page:\n{page}"
        );
    }
    // Labels the rules and panels name, but those Prometheus adds itself.
    let mut named = BTreeSet::new();
    for text in [&alerts, &dashboard] {
        for part in text.split("$labels.").skip(1) {
            named.insert(
                part.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                    .next()
                    .unwrap()
                    .to_string(),
            );
        }
        for part in text.split("{{").skip(1) {
            let l = part.split("}}").next().unwrap().trim();
            if l.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !l.is_empty() {
                named.insert(l.to_string());
            }
        }
        for part in text.split("by (").skip(1) {
            for l in part.split(')').next().unwrap().split(',') {
                named.insert(l.trim().to_string());
            }
        }
    }
    // Added by Prometheus, and Go template words (`{{ end }}`).
    for l in ["instance", "job", "end", "else"] {
        named.remove(l);
    }
    let missing: Vec<&String> = named.difference(&labels).collect();
    assert!(
        missing.is_empty(),
        "labels {missing:?} are on no series of the page"
    );
    drop(ng);
}
