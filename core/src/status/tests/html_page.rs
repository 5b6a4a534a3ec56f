use super::*;

// ---------------------------------------------------------------- html

pub(super) fn html_of(rows: &[PeerRow], filter: Option<Filter>) -> String {
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
    assert!(page.contains("<th>last failure</th><th>HTTP</th><th>gRPC</th><th>last change</th>"));
    assert_eq!(page.matches("<th>HTTP</th>").count(), 2, "one per table");
    let line = |name: &str| page.lines().find(|l| l.contains(name)).unwrap().to_string();
    assert!(line("10.0.0.1:80")
        .contains(">refused</td><td class=\"n\">503</td><td class=\"n\"></td><td><span"));
    assert!(line("10.0.0.2:80")
        .contains(">&ndash;</td><td class=\"n\"></td><td class=\"n\"></td><td>never</td>"));
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
