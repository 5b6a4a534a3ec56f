use super::*;

// ---------------------------------------------------------------- csv

pub(super) fn csv_records(body: &[u8]) -> (::csv::StringRecord, Vec<::csv::StringRecord>) {
    let mut rd = ::csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(body);
    let header = rd.headers().unwrap().clone();
    let recs = rd.records().collect::<Result<Vec<_>, _>>().unwrap();
    (header, recs)
}

pub(super) fn inert(b: &[u8]) -> String {
    let s = lossy(b);
    match s.as_bytes().first() {
        Some(b'=' | b'+' | b'-' | b'@' | b'\t' | b'\r') => format!("'{s}"),
        _ => s,
    }
}

pub(super) fn expected_csv(r: &PeerRow) -> Vec<String> {
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
        r.period_ms.to_string(),
        opt(r.grpc_status.map(u64::from)),
        opt(r.outlier.map(|o| o.ejections)),
        opt(r
            .ejected
            .then(|| r.outlier.and_then(|o| o.ejected_until_ms))
            .flatten()),
        opt(r.outlier.map(|o| o.requests)),
        opt(r.outlier.map(|o| o.failures)),
        opt(r.outlier.and_then(|o| o.mean_ms)),
        opt(r.slow_start_ms.map(u64::from)),
        format!(
            "{}.{:02}",
            r.effective_weight_x100 / 100,
            r.effective_weight_x100 % 100
        ),
        opt(r.connections.map(u64::from)),
        r.sessions_shut.to_string(),
    ]
}

pub(super) fn check_csv(rows: &[PeerRow], filter: Option<Filter>) -> usize {
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
server,backup,weight,admin,period_ms,grpc_status,\
ejections,ejected_until,outlier_requests,outlier_failures,outlier_mean_ms,\
slow_start_ms,effective_weight,connections,sessions_shut\n\
0,http,web,127.0.0.1:8081,2,0,tcp,0,1,1,1,2,up,9,4,,,,,127.0.0.1:8081,false,1,,5000,,,,,,,,1.00,,0\n\
1,http,web,127.0.0.1:8082,0,4,tcp,0,-1,-1,-1,-1,down,9,4,refused,1700000000123,1700000000123,,\
127.0.0.1:8082,false,1,,5000,,,,,,,,1.00,,0\n\
0,stream,web,127.0.0.1:8081,2,0,udp,5353,1,1,1,2,up,9,4,,,,,127.0.0.1:8081,false,1,,5000,,,,,,,,1.00,,0\n"
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
        format!(
            "{old},http_status,server,backup,weight,admin,period_ms,grpc_status,\
ejections,ejected_until,outlier_requests,outlier_failures,outlier_mean_ms,\
slow_start_ms,effective_weight,connections,sessions_shut"
        )
    );
    let mut rows = http_rows();
    rows[1].server = b"web.test:80";
    rows[1].backup = true;
    rows[1].weight = 7;
    rows[1].disabled = true;
    let body = out(Format::Csv, None, &rows);
    let (header, recs) = csv_records(&body);
    assert_eq!(header.len(), 34);
    assert_eq!(&header[18], "http_status");
    let status: Vec<&str> = recs.iter().map(|r| &r[18]).collect();
    assert_eq!(status, ["503", "", "", "200", ""]);
    // The columns before it are where they were.
    assert_eq!(&recs[0][15], "refused");
    assert_eq!(&recs[0][17], "1700000000123");
    let added: Vec<&str> = recs[1].iter().skip(19).collect();
    assert_eq!(
        added,
        [
            "web.test:80",
            "true",
            "7",
            "disabled",
            "5000",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "1.00",
            "",
            "0"
        ]
    );
    let text = String::from_utf8(body).unwrap();
    assert!(text
        .lines()
        .nth(1)
        .unwrap()
        .ends_with(",1700000000123,1700000000123,503,10.0.0.1:80,false,1,,5000,,,,,,,,1.00,,0"));
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
