use super::*;

fn c_page(format: Format, filter: Option<Filter>, rows: &[PeerRow]) -> String {
    let query = Query {
        format: Some(format),
        filter,
        c_shapes: true,
        ..Query::default()
    };
    let mut out = Vec::new();
    render_with(format, &query, &META, rows, &mut out);
    String::from_utf8(out).expect("UTF-8")
}

#[test]
fn json_is_yaoweibins_shape_exactly() {
    let body = c_page(Format::Json, None, &sample());
    assert_eq!(
        body,
        "{\"servers\": {\n  \"total\": 3,\n  \"generation\": 3,\n  \"server\": [\n    \
         {\"index\": 0, \"upstream\": \"web\", \"name\": \"127.0.0.1:8081\", \"status\": \"up\", \
         \"rise\": 2, \"fall\": 0, \"type\": \"tcp\", \"port\": 0},\n    \
         {\"index\": 1, \"upstream\": \"web\", \"name\": \"127.0.0.1:8082\", \"status\": \"down\", \
         \"rise\": 0, \"fall\": 4, \"type\": \"tcp\", \"port\": 0},\n    \
         {\"index\": 2, \"upstream\": \"web\", \"name\": \"127.0.0.1:8081\", \"status\": \"up\", \
         \"rise\": 2, \"fall\": 0, \"type\": \"udp\", \"port\": 5353}\n  ]\n}}\n"
    );
}

#[test]
fn json_stays_valid_under_every_filter_and_keeps_the_index() {
    for filter in [None, Some(Filter::Up), Some(Filter::Down)] {
        let body = c_page(Format::Json, filter, &sample());
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{filter:?}: {e}"));
        let servers = &v["servers"];
        let rows = servers["server"].as_array().unwrap();
        assert_eq!(servers["total"].as_u64(), Some(rows.len() as u64));
        for r in rows {
            let status = r["status"].as_str().unwrap();
            assert!(filter.is_none_or(|f| f.as_str() == status));
        }
        if filter == Some(Filter::Down) {
            // The index is the row's place among all peers.
            assert_eq!(rows[0]["index"], json!(1));
        }
    }
    let empty = c_page(Format::Json, None, &[]);
    assert_eq!(
        serde_json::from_str::<Value>(&empty).unwrap()["servers"]["server"],
        json!([])
    );
}

#[test]
fn csv_has_no_header_and_eight_columns() {
    let body = c_page(Format::Csv, None, &sample());
    assert_eq!(
        body,
        "0,web,127.0.0.1:8081,up,2,0,tcp,0\n\
         1,web,127.0.0.1:8082,down,0,4,tcp,0\n\
         2,web,127.0.0.1:8081,up,2,0,udp,5353\n"
    );
    assert_eq!(
        c_page(Format::Csv, Some(Filter::Up), &sample()),
        "0,web,127.0.0.1:8081,up,2,0,tcp,0\n2,web,127.0.0.1:8081,up,2,0,udp,5353\n"
    );
    // Names are quoted where CSV needs it (the C modules did not).
    let hostile = [row(Group::Http, 0, b"a,b", b"x\"y", true)];
    assert_eq!(
        c_page(Format::Csv, None, &hostile),
        "0,\"a,b\",\"x\"\"y\",up,2,0,tcp,0\n"
    );
}

#[test]
fn html_has_the_server_number_line_and_red_down_rows() {
    let body = c_page(Format::Html, None, &sample());
    assert!(body.contains("<title>Nginx http upstream check status</title>"));
    assert!(body.contains("<h2>Check upstream server number: 3, generation: 3</h2>"));
    for th in [
        "Index",
        "Upstream",
        "Name",
        "Status",
        "Rise counts",
        "Fall counts",
        "Check type",
        "Check port",
    ] {
        assert!(body.contains(&format!("    <th>{th}</th>\n")), "{th}");
    }
    assert_eq!(body.matches("<tr bgcolor=\"#FF0000\">").count(), 1);
    assert_eq!(body.matches("  <tr>\n").count(), 2);
    let up = c_page(Format::Html, Some(Filter::Up), &sample());
    assert!(up.contains("Check upstream server number: 2,"));
    let hostile = [row(Group::Http, 0, b"<script>", b"a&b", false)];
    let h = c_page(Format::Html, None, &hostile);
    assert!(h.contains("<td>&lt;script&gt;</td>") && h.contains("<td>a&amp;b</td>"));
    assert!(h.ends_with("</table>\n</body>\n</html>\n"));
}

#[test]
fn an_unchecked_address_is_up_and_prometheus_keeps_our_page() {
    let mut rows = sample();
    rows[1].unchecked = true;
    rows[1].up = true;
    let body = c_page(Format::Json, None, &rows);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["servers"]["server"][1]["status"], json!("up"));
    let prom = c_page(Format::Prometheus, None, &sample());
    assert!(prom.contains("nginx_upstream_count_total 3"));
}
