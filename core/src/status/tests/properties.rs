use super::*;

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
pub(super) struct OwnedRow {
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
    ejected: bool,
    outlier: Option<crate::outlier::View>,
}

/// A `check_outlier` view, with any rule [`crate::outlier::Rule::decode`]
/// gives (or none).
fn outlier_view() -> impl Strategy<Value = crate::outlier::View> {
    (
        (any::<u64>(), prop::option::of(any::<u64>())),
        (any::<u64>(), any::<u64>(), prop::option::of(any::<u64>())),
        (any::<u64>(), any::<u64>()),
        (0u32..7, prop::array::uniform4(any::<u32>())),
    )
        .prop_map(
            |(
                (ejections, until),
                (requests, failures, mean_ms),
                (requests_total, failures_total),
                (kind, values),
            )| crate::outlier::View {
                ejections,
                ejected_at_ms: until.map(|t| t / 2),
                ejected_until_ms: until,
                requests,
                failures,
                mean_ms,
                requests_total,
                failures_total,
                rule: crate::outlier::Rule::decode(kind, values),
            },
        )
}

pub(super) fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            4 => any::<u8>(),
            2 => prop::sample::select(b"\"\\,\n\r\t=+-@<>&'{}%".to_vec()),
            1 => Just(0xffu8),
        ],
        0..40,
    )
}

pub(super) fn owned_row() -> impl Strategy<Value = OwnedRow> {
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
        (any::<bool>(), prop::option::of(outlier_view())),
    )
        .prop_map(
            |(
                (stream, upstream, name, up, rise, fall, check_type, port),
                (delays, checks, fails, (reason, http_status), lc, ds, slots, sum),
                (ejected, outlier),
            )| {
                // As the row builder does: an ejected peer is down.
                let ejected = ejected && outlier.is_some();
                OwnedRow {
                    stream,
                    upstream,
                    name,
                    up: up && !ejected,
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
                    ejected,
                    outlier,
                }
            },
        )
}

pub(super) fn borrow(owned: &[OwnedRow]) -> Vec<PeerRow<'_>> {
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
                grpc_status: matches!(o.check_type, "grpc" | "grpcs")
                    .then_some(o.checks as u32 % 17),
                period_ms: 5000,
                shared_with: &[],
                ejected: o.ejected,
                checking: false,
                outlier: o.outlier,
                draining: false,
                slow_start_ms: None,
                effective_weight_x100: 100,
                connections: None,
                sessions_shut: 0,
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
            prop_assert_eq!(&g["ejections"], &json!(r.outlier.map_or(0, |o| o.ejections)));
            let until = r.outlier.and_then(|o| o.ejected_until_ms).filter(|_| r.ejected);
            prop_assert_eq!(&g["ejected_until"], &json!(until));
            match &r.outlier {
                None => prop_assert_eq!(&g["outlier"], &Value::Null),
                Some(o) => {
                    let want = json!({
                        "requests": o.requests,
                        "failures": o.failures,
                        "mean_response_ms": o.mean_ms,
                        "requests_total": o.requests_total,
                        "failures_total": o.failures_total,
                        "rule": o.rule.map(|r| r.name()),
                        "detail": o.rule.map(|r| r.detail()),
                    });
                    prop_assert_eq!(&g["outlier"], &want);
                }
            }
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
            let ejected = s.iter().find(|s| {
                s.name == "nginx_upstream_server_ejected"
                    && s.labels["upstream_type"] == r.group.as_str()
                    && s.labels["index"] == r.index.to_string()
            });
            let want = r.outlier.map(|_| if r.ejected { 1.0 } else { 0.0 });
            prop_assert_eq!(ejected.map(|s| s.value), want);
        }

        let page = html_of(&rows, filter);
        prop_assert!(!page.contains("<script"));
        prop_assert_eq!(page.matches("<tr class=\"down\">").count() as u64, want.down());
        // Names may hold line breaks: go by `<tr`, which text cannot hold.
        for l in page.split("<tr").skip(1) {
            let l = l.split("</tr>").next().unwrap_or("");
            if l.starts_with("><th>") {
                continue;
            }
            let columns = if l.starts_with(" class=\"upstream") {
                html::UPSTREAM_COLUMNS.len()
            } else {
                html::COLUMNS.len()
            };
            prop_assert_eq!(l.matches("<td").count(), columns, "{}", l);
        }
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
