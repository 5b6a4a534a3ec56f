//! Tests of `check_match`: every test form and message, block rules,
//! evaluation of responses and of expect, and properties.

use super::*;
use proptest::prelude::*;

/// Splits a test line (without `;`) on spaces into words.
fn words(line: &str) -> Vec<&[u8]> {
    line.split(' ').map(str::as_bytes).collect()
}

fn test(line: &str) -> Test {
    parse_test(&words(line)).unwrap_or_else(|e| panic!("`{line}` failed: {e}"))
}

fn err(line: &str) -> String {
    match parse_test(&words(line)) {
        Ok(t) => panic!("`{line}` parsed: {t:?}"),
        Err(e) => e.to_string(),
    }
}

fn block(name: &str, lines: &[&str]) -> MatchBlock {
    MatchBlock {
        name: name.as_bytes().to_vec(),
        tests: lines.iter().map(|l| test(l)).collect(),
    }
}

fn rx(source: &str, caseless: bool) -> Regex {
    Regex {
        source: source.as_bytes().to_vec(),
        caseless,
    }
}

/// The test stand-in for nginx's PCRE: the `regex` crate over the
/// block's expressions, by id.
struct Compiled(Vec<regex::bytes::Regex>);

impl Compiled {
    fn new(b: &MatchBlock) -> Compiled {
        Compiled(
            b.regexes()
                .enumerate()
                .map(|(i, (id, source, caseless))| {
                    assert_eq!(i, id, "ids count from 0 in order");
                    regex::bytes::RegexBuilder::new(std::str::from_utf8(source).unwrap())
                        .case_insensitive(caseless)
                        .build()
                        .unwrap()
                })
                .collect(),
        )
    }
}

impl RegexSet for Compiled {
    fn is_match(&self, id: usize, subject: &[u8]) -> bool {
        self.0[id].is_match(subject)
    }
}

fn headers(list: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
    list.iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

/// Evaluates `lines` against a response.
fn eval(lines: &[&str], status: u16, hs: &[(&str, &str)], body: &str) -> Result<(), Reason> {
    let b = block("m", lines);
    let h = headers(hs);
    let head = HeadView {
        status,
        headers: &h,
    };
    b.evaluate_http(&head, body.as_bytes(), &Compiled::new(&b))
}

// ---- parsing ---------------------------------------------------------------

#[test]
fn status_forms() {
    let s = |negated, ranges: &[(u16, u16)]| Test::Status {
        negated,
        ranges: ranges.to_vec(),
    };
    assert_eq!(test("status 200"), s(false, &[(200, 200)]));
    assert_eq!(test("status 200 204"), s(false, &[(200, 200), (204, 204)]));
    assert_eq!(test("status 200-399"), s(false, &[(200, 399)]));
    assert_eq!(test("status ! 500"), s(true, &[(500, 500)]));
    assert_eq!(test("status ! 500-599"), s(true, &[(500, 599)]));
    assert_eq!(
        test("status 100 200-204 301-301 599"),
        s(false, &[(100, 100), (200, 204), (301, 301), (599, 599)])
    );
    assert_eq!(
        test("status ! 404 500-599"),
        s(true, &[(404, 404), (500, 599)])
    );
    assert_eq!(test("status 100-100"), s(false, &[(100, 100)]));
}

#[test]
fn status_errors() {
    let value =
        |v: &str, reason: &str| format!("invalid value \"{v}\" in \"status\" test: {reason}");
    let not_code = "must be a status code (200), a range (200-399), or \"!\" first";
    assert_eq!(
        err("status"),
        "invalid number of arguments in \"status\" test"
    );
    assert_eq!(
        err("status !"),
        "invalid number of arguments in \"status\" test"
    );
    for v in ["99", "600", "000", "0", "999"] {
        assert_eq!(
            err(&format!("status {v}")),
            value(v, "status codes are from 100 to 599")
        );
    }
    assert_eq!(
        err("status 200-600"),
        value("200-600", "status codes are from 100 to 599")
    );
    assert_eq!(
        err("status 50-200"),
        value("50-200", "status codes are from 100 to 599")
    );
    for v in [
        "2xx", "", "abc", "+200", "2000", "0200", "-", "200-", "-399", "200--399", "200-3-9",
        "!500", "20\t0", "\u{e9}",
    ] {
        let printed = v.replace('\t', "\\x09");
        assert_eq!(
            err(&format!("status {v}")),
            value(&printed, not_code),
            "status {v}"
        );
    }
    assert_eq!(
        err("status 399-200"),
        value(
            "399-200",
            "the low code of a range must not be above the high one"
        )
    );
    assert_eq!(err("status 200 !"), value("!", "\"!\" must come first"));
    assert_eq!(err("status ! ! 200"), value("!", "\"!\" must come first"));
    // The first bad value is named.
    assert_eq!(err("status 200 abc 700"), value("abc", not_code));
}

#[test]
fn status_099_is_out_of_range() {
    assert_eq!(
        err("status 099-100"),
        "invalid value \"099-100\" in \"status\" test: status codes are from 100 to 599"
    );
}

#[test]
fn header_forms() {
    let h = |name: &str, cond| Test::Header {
        name: name.as_bytes().to_vec(),
        cond,
    };
    assert_eq!(test("header X-Ok"), h("X-Ok", HeaderCond::Present));
    assert_eq!(test("header ! X-Ok"), h("X-Ok", HeaderCond::Absent));
    // The `!` after `header` is the negation; a name is any token.
    assert_eq!(test("header ! !"), h("!", HeaderCond::Absent));
    assert_eq!(
        test("header Content-Type = text/html"),
        h("Content-Type", HeaderCond::Equals(b"text/html".to_vec()))
    );
    assert_eq!(
        test("header X != down"),
        h("X", HeaderCond::NotEquals(b"down".to_vec()))
    );
    assert_eq!(
        test("header X ~ ^ok"),
        h("X", HeaderCond::Matches(rx("^ok", false)))
    );
    assert_eq!(
        test("header X ~* ^ok"),
        h("X", HeaderCond::Matches(rx("^ok", true)))
    );
    assert_eq!(
        test("header X !~ ^ok"),
        h("X", HeaderCond::NotMatches(rx("^ok", false)))
    );
    assert_eq!(
        test("header X !~* ^ok"),
        h("X", HeaderCond::NotMatches(rx("^ok", true)))
    );
    // An empty value is a value (nginx passes "" for a quoted empty word).
    assert_eq!(
        parse_test(&[b"header", b"X", b"=", b""]).unwrap(),
        h("X", HeaderCond::Equals(vec![]))
    );
    // Values and expressions are kept as written (no \xHH decoding).
    assert_eq!(
        parse_test(&[b"header", b"X", b"~", b"\\x41 b"]).unwrap(),
        h("X", HeaderCond::Matches(rx("\\x41 b", false)))
    );
    assert_eq!(
        parse_test(&[b"header", b"X", b"=", b"\\x41"]).unwrap(),
        h("X", HeaderCond::Equals(b"\\x41".to_vec()))
    );
}

#[test]
fn header_errors() {
    let value =
        |v: &str, reason: &str| format!("invalid value \"{v}\" in \"header\" test: {reason}");
    let count = "invalid number of arguments in \"header\" test";
    assert_eq!(err("header"), count);
    assert_eq!(err("header !"), count);
    assert_eq!(err("header X ="), count);
    assert_eq!(err("header X = a b"), count);
    assert_eq!(err("header ! X = a"), count);
    assert_eq!(
        err("header ! X Y"),
        value("!", "\"!\" takes a header name only (header ! NAME)")
    );
    for op in ["==", "=~", "!", "~~", "is", "!=*"] {
        assert_eq!(
            err(&format!("header X {op} a")),
            value(op, "the operator must be =, !=, ~, ~*, !~ or !~*")
        );
    }
    let token = "a header name is a token (letters, digits and !#$%&'*+-.^_`|~)";
    for name in ["X:", "(x)", "a/b", "\u{e9}"] {
        assert_eq!(err(&format!("header {name}")), value(name, token));
        assert_eq!(err(&format!("header ! {name}")), value(name, token));
        assert_eq!(err(&format!("header {name} = v")), value(name, token));
    }
    assert_eq!(
        parse_test(&[b"header", b""]).unwrap_err().to_string(),
        value("", token)
    );
    assert_eq!(
        parse_test(&[b"header", b"X", b"~", b""])
            .unwrap_err()
            .to_string(),
        value("", "the regular expression must not be empty")
    );
    assert_eq!(
        parse_test(&[b"header", b"X", b"!~*", b""])
            .unwrap_err()
            .to_string(),
        value("", "the regular expression must not be empty")
    );
}

#[test]
fn body_forms_and_errors() {
    let b = |source: &str, caseless, negated| Test::Body {
        regex: rx(source, caseless),
        negated,
    };
    assert_eq!(test("body ~ ok"), b("ok", false, false));
    assert_eq!(test("body ~* ok"), b("ok", true, false));
    assert_eq!(test("body !~ maintenance"), b("maintenance", false, true));
    assert_eq!(test("body !~* maintenance"), b("maintenance", true, true));
    let count = "invalid number of arguments in \"body\" test";
    assert_eq!(err("body"), count);
    assert_eq!(err("body ok"), count);
    assert_eq!(err("body ~ a b"), count);
    for op in ["=", "!=", "~~", "ok"] {
        assert_eq!(
            err(&format!("body {op} x")),
            format!(
                "invalid value \"{op}\" in \"body\" test: the operator must be ~, ~*, !~ or !~*"
            )
        );
    }
    assert_eq!(
        parse_test(&[b"body", b"~", b""]).unwrap_err().to_string(),
        "invalid value \"\" in \"body\" test: the regular expression must not be empty"
    );
}

#[test]
fn send_and_expect_forms() {
    assert_eq!(test("send PING"), Test::Send(b"PING".to_vec()));
    assert_eq!(
        parse_test(&[b"send", b"PING\\x0d\\x0a"]).unwrap(),
        Test::Send(b"PING\r\n".to_vec())
    );
    assert_eq!(
        parse_test(&[b"send", b"\\x00\\xff"]).unwrap(),
        Test::Send(vec![0, 0xff])
    );
    assert_eq!(
        test("expect +PONG"),
        Test::Expect(Expect::Prefix(b"+PONG".to_vec()))
    );
    assert_eq!(
        parse_test(&[b"expect", b"\\x16\\x03"]).unwrap(),
        Test::Expect(Expect::Prefix(vec![0x16, 3]))
    );
    assert_eq!(
        test("expect ~ ^\\+PONG"),
        Test::Expect(Expect::Regex(rx("^\\+PONG", false)))
    );
    assert_eq!(
        test("expect ~* pong"),
        Test::Expect(Expect::Regex(rx("pong", true)))
    );
    // A regex keeps \xHH for PCRE.
    assert_eq!(
        test("expect ~ \\x16"),
        Test::Expect(Expect::Regex(rx("\\x16", false)))
    );
    // One word is always a literal, even `~`.
    assert_eq!(
        test("expect ~"),
        Test::Expect(Expect::Prefix(b"~".to_vec()))
    );
}

#[test]
fn send_and_expect_errors() {
    assert_eq!(err("send"), "invalid number of arguments in \"send\" test");
    assert_eq!(
        err("send a b"),
        "invalid number of arguments in \"send\" test"
    );
    assert_eq!(
        err("expect"),
        "invalid number of arguments in \"expect\" test"
    );
    assert_eq!(
        err("expect ~ a b"),
        "invalid number of arguments in \"expect\" test"
    );
    assert_eq!(
        err("expect = a"),
        "invalid value \"=\" in \"expect\" test: the operator must be ~ or ~* \
         (a literal is one argument)"
    );
    assert_eq!(
        err("expect !~ a"),
        "invalid value \"!~\" in \"expect\" test: the operator must be ~ or ~* \
         (a literal is one argument)"
    );
    for t in ["send", "expect"] {
        assert_eq!(
            parse_test(&[t.as_bytes(), b""]).unwrap_err().to_string(),
            format!("invalid value \"\" in \"{t}\" test: the string must not be empty")
        );
        assert_eq!(
            parse_test(&[t.as_bytes(), b"ab\\xq1"])
                .unwrap_err()
                .to_string(),
            format!(
                "invalid value \"ab\\xq1\" in \"{t}\" test: \
                 \\x at byte 2 must be followed by two hex digits (\\x0d, \\xff)"
            )
        );
    }
    assert_eq!(
        parse_test(&[b"expect", b"~", b""]).unwrap_err().to_string(),
        "invalid value \"\" in \"expect\" test: the regular expression must not be empty"
    );
}

#[test]
fn unknown_and_empty_tests() {
    assert_eq!(
        err("Status 200"),
        "unknown test \"Status\" in check_match: the tests are status, header, body, send \
         and expect"
    );
    assert_eq!(
        parse_test(&[b"\x01x"]).unwrap_err().to_string(),
        "unknown test \"\\x01x\" in check_match: the tests are status, header, body, send \
         and expect"
    );
    assert_eq!(
        parse_test(&[]).unwrap_err().to_string(),
        "empty test in check_match"
    );
}

#[test]
fn test_names_and_regexes() {
    for (line, name, http) in [
        ("status 200", "status", true),
        ("header X", "header", true),
        ("body ~ x", "body", true),
        ("send x", "send", false),
        ("expect x", "expect", false),
    ] {
        let t = test(line);
        assert_eq!((t.name(), t.is_http()), (name, http));
        assert_eq!(t.fits(CheckType::Http), http);
        assert_eq!(t.fits(CheckType::Tcp), !http);
        assert_eq!(t.fits(CheckType::Udp), !http);
    }
    assert_eq!(test("header X ~ a").regex(), Some(&rx("a", false)));
    assert_eq!(test("header X !~* a").regex(), Some(&rx("a", true)));
    assert_eq!(test("header X = a").regex(), None);
    assert_eq!(test("expect ~ a").regex(), Some(&rx("a", false)));
    assert_eq!(test("expect a").regex(), None);
}

// ---- blocks ----------------------------------------------------------------

#[test]
fn block_shape() {
    assert_eq!(block("m", &["status 200"]).check_shape(), Ok(()));
    assert_eq!(
        block("m", &[]).check_shape().unwrap_err().to_string(),
        "check_match \"m\" has no tests"
    );
    assert_eq!(
        block("m", &["send a", "expect b", "send c"])
            .check_shape()
            .unwrap_err()
            .to_string(),
        "check_match \"m\" has more than one \"send\" test"
    );
    assert_eq!(
        block("m", &["expect a", "expect ~ b"])
            .check_shape()
            .unwrap_err()
            .to_string(),
        "check_match \"m\" has more than one \"expect\" test"
    );
    // Several status, header and body tests are fine (all must pass).
    assert_eq!(
        block(
            "m",
            &[
                "status 200",
                "status ! 204",
                "header A",
                "header A = b",
                "body ~ x",
                "body !~ y"
            ]
        )
        .check_shape(),
        Ok(())
    );
}

#[test]
fn validate_by_type() {
    let http = block("ok", &["status 200-399", "header X-Up", "body ~ ok"]);
    assert_eq!(http.validate(CheckType::Http), Ok(()));
    assert_eq!(
        http.validate(CheckType::Tcp).unwrap_err().to_string(),
        "check_match \"ok\" cannot be used with type=tcp: its \"status\" test needs type=http"
    );
    assert_eq!(
        http.validate(CheckType::Udp).unwrap_err().to_string(),
        "check_match \"ok\" cannot be used with type=udp: its \"status\" test needs type=http"
    );
    let raw = block("redis", &["send PING\\x0d\\x0a", "expect +PONG"]);
    assert_eq!(raw.validate(CheckType::Tcp), Ok(()));
    assert_eq!(raw.validate(CheckType::Udp), Ok(()));
    assert_eq!(
        raw.validate(CheckType::Http).unwrap_err().to_string(),
        "check_match \"redis\" cannot be used with type=http: \
         its \"send\" test needs type=tcp or type=udp"
    );
    // The first test that does not fit is named.
    let mixed = block("x", &["header A", "expect b", "status 200"]);
    assert_eq!(mixed.misfit(CheckType::Http), Some(&mixed.tests[1]));
    assert_eq!(mixed.misfit(CheckType::Tcp), Some(&mixed.tests[0]));
    assert!(mixed
        .validate(CheckType::Tcp)
        .unwrap_err()
        .0
        .ends_with("its \"header\" test needs type=http"));
    // The shape comes first.
    assert_eq!(
        block("e", &[])
            .validate(CheckType::Http)
            .unwrap_err()
            .to_string(),
        "check_match \"e\" has no tests"
    );
    // The name is printed as nginx -t prints arguments.
    assert_eq!(
        MatchBlock {
            name: b"a\nb".to_vec(),
            tests: vec![]
        }
        .validate(CheckType::Tcp)
        .unwrap_err()
        .to_string(),
        "check_match \"a\\x0ab\" has no tests"
    );
}

#[test]
fn regex_ids_follow_the_tests() {
    let b = block(
        "m",
        &[
            "status 200",
            "header A ~ a",
            "header B = b",
            "body ~* c",
            "header C !~ d",
        ],
    );
    let r: Vec<(usize, &[u8], bool)> = b.regexes().collect();
    assert_eq!(
        r,
        [(0, &b"a"[..], false), (1, b"c", true), (2, b"d", false)]
    );
    let raw = block("r", &["send x", "expect ~ y"]);
    assert_eq!(raw.regexes().collect::<Vec<_>>(), [(0, &b"y"[..], false)]);
    assert_eq!(block("n", &["status 200"]).regexes().count(), 0);
}

#[test]
fn needs_body_and_send() {
    assert!(!block("m", &["status 200", "header A ~ a"]).needs_body());
    assert!(block("m", &["status 200", "body !~ down"]).needs_body());
    assert_eq!(
        block("m", &["expect x", "send \\x01y"]).send(),
        Some(&b"\x01y"[..])
    );
    assert_eq!(block("m", &["expect x"]).send(), None);
}

// ---- evaluate_http ---------------------------------------------------------

#[test]
fn status_tests() {
    assert_eq!(eval(&["status 200"], 200, &[], ""), Ok(()));
    assert_eq!(eval(&["status 200"], 204, &[], ""), Err(Reason::Status));
    assert_eq!(eval(&["status 200 204"], 204, &[], ""), Ok(()));
    assert_eq!(eval(&["status 200-399"], 399, &[], ""), Ok(()));
    assert_eq!(eval(&["status 200-399"], 400, &[], ""), Err(Reason::Status));
    assert_eq!(eval(&["status 200-399"], 199, &[], ""), Err(Reason::Status));
    assert_eq!(eval(&["status ! 500"], 200, &[], ""), Ok(()));
    assert_eq!(eval(&["status ! 500"], 500, &[], ""), Err(Reason::Status));
    assert_eq!(
        eval(&["status ! 500-599"], 503, &[], ""),
        Err(Reason::Status)
    );
    assert_eq!(eval(&["status ! 500-599"], 404, &[], ""), Ok(()));
    assert_eq!(
        eval(&["status ! 404 500-599"], 404, &[], ""),
        Err(Reason::Status)
    );
    // Every status test must pass.
    assert_eq!(
        eval(&["status 200-299", "status ! 204"], 204, &[], ""),
        Err(Reason::Status)
    );
    assert_eq!(
        eval(&["status 200-299", "status ! 204"], 200, &[], ""),
        Ok(())
    );
    // A status the parser let through outside 100-599.
    assert_eq!(eval(&["status ! 500-599"], 999, &[], ""), Ok(()));
    assert_eq!(eval(&["status 100-599"], 600, &[], ""), Err(Reason::Status));
}

#[test]
fn a_failing_status_wins_over_other_failures() {
    let lines = ["header X-Up", "body ~ ok", "status 200"];
    assert_eq!(eval(&lines, 500, &[], "down"), Err(Reason::Status));
    assert_eq!(eval(&lines, 200, &[], "down"), Err(Reason::Mismatch));
    assert_eq!(
        eval(&lines, 200, &[("x-up", "")], "down"),
        Err(Reason::Mismatch)
    );
    assert_eq!(eval(&lines, 200, &[("x-up", "")], "is ok"), Ok(()));
}

#[test]
fn header_presence() {
    let hs = [("Content-Type", "text/html"), ("X-A", "1"), ("x-a", "2")];
    assert_eq!(eval(&["header content-type"], 200, &hs, ""), Ok(()));
    assert_eq!(eval(&["header CONTENT-TYPE"], 200, &hs, ""), Ok(()));
    assert_eq!(eval(&["header X-B"], 200, &hs, ""), Err(Reason::Mismatch));
    assert_eq!(eval(&["header ! X-B"], 200, &hs, ""), Ok(()));
    assert_eq!(eval(&["header ! x-A"], 200, &hs, ""), Err(Reason::Mismatch));
    // A header with an empty value is present.
    assert_eq!(eval(&["header X-E"], 200, &[("X-E", "")], ""), Ok(()));
}

#[test]
fn header_equality_over_repeated_headers() {
    let hs = [("X-A", "1"), ("x-a", "2"), ("X-Other", "3")];
    assert_eq!(eval(&["header X-A = 1"], 200, &hs, ""), Ok(()));
    assert_eq!(
        eval(&["header X-A = 2"], 200, &hs, ""),
        Ok(()),
        "any of them"
    );
    assert_eq!(
        eval(&["header X-A = 3"], 200, &hs, ""),
        Err(Reason::Mismatch)
    );
    assert_eq!(eval(&["header X-A != 3"], 200, &hs, ""), Ok(()));
    assert_eq!(
        eval(&["header X-A != 2"], 200, &hs, ""),
        Err(Reason::Mismatch),
        "none may"
    );
    // Values are compared exactly: case and spaces count.
    assert_eq!(
        eval(&["header X = ok"], 200, &[("X", "OK")], ""),
        Err(Reason::Mismatch)
    );
    assert_eq!(
        eval(&["header X = ok"], 200, &[("X", "ok ")], ""),
        Err(Reason::Mismatch)
    );
    // An absent header: `=` fails, `!=` passes.
    assert_eq!(
        eval(&["header X = ok"], 200, &[], ""),
        Err(Reason::Mismatch)
    );
    assert_eq!(eval(&["header X != ok"], 200, &[], ""), Ok(()));
}

#[test]
fn header_regexes() {
    let hs = [
        ("Server", "nginx/1.27"),
        ("X-State", "draining"),
        ("x-state", "UP"),
    ];
    assert_eq!(eval(&["header server ~ ^nginx/"], 200, &hs, ""), Ok(()));
    assert_eq!(
        eval(&["header Server ~ ^NGINX"], 200, &hs, ""),
        Err(Reason::Mismatch)
    );
    assert_eq!(eval(&["header Server ~* ^NGINX"], 200, &hs, ""), Ok(()));
    assert_eq!(
        eval(&["header X-State ~ ^UP$"], 200, &hs, ""),
        Ok(()),
        "any of them"
    );
    assert_eq!(
        eval(&["header X-State !~ ^UP$"], 200, &hs, ""),
        Err(Reason::Mismatch)
    );
    assert_eq!(eval(&["header X-State !~ ^down"], 200, &hs, ""), Ok(()));
    assert_eq!(
        eval(&["header X-State !~* ^up"], 200, &hs, ""),
        Err(Reason::Mismatch)
    );
    assert_eq!(eval(&["header X-State !~* ^gone"], 200, &hs, ""), Ok(()));
    // Absent: `~` fails, `!~` passes.
    assert_eq!(
        eval(&["header X-None ~ ."], 200, &hs, ""),
        Err(Reason::Mismatch)
    );
    assert_eq!(eval(&["header X-None !~ ."], 200, &hs, ""), Ok(()));
}

#[test]
fn body_tests() {
    assert_eq!(eval(&["body ~ ok"], 200, &[], "all ok"), Ok(()));
    assert_eq!(
        eval(&["body ~ ^ok"], 200, &[], "all ok"),
        Err(Reason::Mismatch)
    );
    assert_eq!(
        eval(&["body ~ OK"], 200, &[], "all ok"),
        Err(Reason::Mismatch)
    );
    assert_eq!(eval(&["body ~* OK"], 200, &[], "all ok"), Ok(()));
    assert_eq!(eval(&["body !~ maintenance"], 200, &[], "all ok"), Ok(()));
    assert_eq!(
        eval(&["body !~ maintenance"], 200, &[], "maintenance mode"),
        Err(Reason::Mismatch)
    );
    assert_eq!(
        eval(&["body !~* MAINT"], 200, &[], "maintenance"),
        Err(Reason::Mismatch)
    );
    assert_eq!(eval(&["body ~ ^$"], 200, &[], ""), Ok(()));
}

#[test]
fn the_regex_set_is_asked_by_id() {
    // A set that records what it is asked.
    struct Log(std::cell::RefCell<Vec<(usize, Vec<u8>)>>);
    impl RegexSet for Log {
        fn is_match(&self, id: usize, subject: &[u8]) -> bool {
            self.0.borrow_mut().push((id, subject.to_vec()));
            true
        }
    }
    let b = block(
        "m",
        &["header A ~ a", "header B = b", "body ~ c", "header A !~ d"],
    );
    let h = headers(&[("A", "1"), ("B", "b"), ("a", "2")]);
    let log = Log(Default::default());
    let head = HeadView {
        status: 200,
        headers: &h,
    };
    assert_eq!(b.evaluate_http(&head, b"BODY", &log), Err(Reason::Mismatch));
    assert_eq!(
        log.0.into_inner(),
        [
            (0, b"1".to_vec()),
            (1, b"BODY".to_vec()),
            (2, b"1".to_vec()),
        ],
        "stops at the first value that decides, then at the first failing test"
    );
}

#[test]
fn send_and_expect_are_passed_over_by_http() {
    // validate() refuses them with type=http; evaluate does not judge them.
    assert_eq!(eval(&["send x", "expect y"], 500, &[], ""), Ok(()));
}

#[test]
fn head_view_values() {
    let h = headers(&[("A", "1"), ("b", "2"), ("a", "3")]);
    let head = HeadView {
        status: 200,
        headers: &h,
    };
    assert_eq!(head.values(b"a").collect::<Vec<_>>(), [&b"1"[..], b"3"]);
    assert_eq!(head.values(b"B").collect::<Vec<_>>(), [&b"2"[..]]);
    assert_eq!(head.values(b"c").count(), 0);
}

#[test]
fn verdict_without_a_block_is_the_status_class() {
    let none = Compiled(vec![]);
    let h = vec![];
    let head = |status| HeadView {
        status,
        headers: &h,
    };
    let d = StatusClasses::DEFAULT;
    for (status, ok) in [
        (200, true),
        (204, true),
        (301, true),
        (399, true),
        (199, false),
        (404, false),
        (500, false),
        (0, false),
        (600, false),
    ] {
        assert_eq!(status_alive(d, status), ok, "{status}");
        let want = if ok { Ok(()) } else { Err(Reason::Status) };
        assert_eq!(
            http_verdict(None, d, &head(status), b"", &none),
            want,
            "{status}"
        );
    }
    let only5 = StatusClasses::NONE.with(5);
    assert!(status_alive(only5, 503) && !status_alive(only5, 200));
    // With a block, the block decides (the classes are not looked at).
    let b = block("m", &["status 500"]);
    assert_eq!(http_verdict(Some(&b), d, &head(500), b"", &none), Ok(()));
    assert_eq!(
        http_verdict(Some(&b), d, &head(200), b"", &none),
        Err(Reason::Status)
    );
    let b = block("m", &["header X"]);
    assert_eq!(
        http_verdict(Some(&b), d, &head(500), b"", &none),
        Err(Reason::Mismatch)
    );
}

// ---- expect_progress -------------------------------------------------------

fn progress(lines: &[&str], received: &[u8], complete: bool) -> ExpectProgress {
    let b = block("m", lines);
    b.expect_progress(received, &Compiled::new(&b), complete)
}

#[test]
fn expect_literal() {
    use ExpectProgress::*;
    let e = ["send PING", "expect +PONG"];
    assert_eq!(progress(&e, b"", false), NeedMore);
    assert_eq!(progress(&e, b"+PO", false), NeedMore);
    assert_eq!(progress(&e, b"+PONG", false), Matched);
    assert_eq!(progress(&e, b"+PONG\r\n", false), Matched);
    assert_eq!(progress(&e, b"-ERR", false), Failed);
    assert_eq!(
        progress(&e, b"+PA", false),
        Failed,
        "as soon as it cannot match"
    );
    assert_eq!(progress(&e, b"+PONx", false), Failed);
    // Complete and short: it will never come.
    assert_eq!(progress(&e, b"+PO", true), Failed);
    assert_eq!(progress(&e, b"", true), Failed);
    assert_eq!(progress(&e, b"+PONG", true), Matched);
    // Binary, decoded.
    assert_eq!(
        progress(&["expect \\x00\\xff"], b"\x00\xff\x01", false),
        Matched
    );
    assert_eq!(progress(&["expect \\x00\\xff"], b"\x00", false), NeedMore);
    assert_eq!(progress(&["expect \\x00\\xff"], b"\x01", false), Failed);
}

#[test]
fn expect_regex() {
    use ExpectProgress::*;
    let e = ["expect ~ PONG\\r?$"];
    assert_eq!(progress(&e, b"", false), NeedMore);
    assert_eq!(progress(&e, b"+PON", false), NeedMore);
    assert_eq!(progress(&e, b"+PONG", false), Matched);
    assert_eq!(
        progress(&e, b"-ERR", false),
        NeedMore,
        "a regex waits for the end"
    );
    assert_eq!(progress(&e, b"-ERR", true), Failed);
    assert_eq!(progress(&e, b"xx PONG", true), Matched);
    assert_eq!(progress(&["expect ~* pong"], b"+PONG", false), Matched);
    // The id of the expect regex is found among the block's.
    let b = MatchBlock {
        name: b"m".to_vec(),
        tests: vec![
            Test::Header {
                name: b"A".to_vec(),
                cond: HeaderCond::Matches(rx("zzz", false)),
            },
            test("expect ~ ok"),
        ],
    };
    assert_eq!(b.expect_progress(b"ok", &Compiled::new(&b), false), Matched);
}

#[test]
fn no_expect_matches_at_once() {
    assert_eq!(
        progress(&["send PING"], b"", false),
        ExpectProgress::Matched
    );
    assert_eq!(
        progress(&["status 200"], b"junk", true),
        ExpectProgress::Matched
    );
}

// ---- properties ------------------------------------------------------------

fn word() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..12),
        prop::sample::select(vec![
            "status", "header", "body", "send", "expect", "!", "=", "!=", "~", "~*", "!~", "!~*",
            "200", "599", "600", "99", "200-399", "399-200", "-", "X-A", "\\x41", "\\x", "",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        "[0-9]{1,4}(-[0-9]{1,4})?".prop_map(String::into_bytes),
    ]
}

proptest! {
    #[test]
    fn parse_never_panics(first in word(), rest in proptest::collection::vec(word(), 0..5)) {
        let mut args: Vec<&[u8]> = vec![&first];
        args.extend(rest.iter().map(Vec::as_slice));
        match parse_test(&args) {
            Ok(Test::Status { ranges, .. }) => {
                prop_assert!(!ranges.is_empty());
                for (lo, hi) in ranges {
                    prop_assert!(STATUS_MIN <= lo && lo <= hi && hi <= STATUS_MAX);
                }
            }
            Ok(Test::Send(s)) | Ok(Test::Expect(Expect::Prefix(s))) => prop_assert!(!s.is_empty()),
            Ok(t) => {
                if let Some(r) = t.regex() {
                    prop_assert!(!r.source.is_empty());
                }
                if let Test::Header { name, .. } = &t {
                    prop_assert!(crate::conf::is_token(name));
                }
            }
            Err(e) => {
                prop_assert!(!e.0.is_empty());
                prop_assert!(!e.0.chars().any(|c| c.is_ascii_control()), "{}", e);
            }
        }
    }

    #[test]
    fn status_lists_match_their_ranges(
        ranges in proptest::collection::vec((100u16..=599, 0u16..50), 1..4),
        negated: bool,
        status in 0u16..1000,
    ) {
        let ranges: Vec<(u16, u16)> = ranges.into_iter().map(|(lo, w)| (lo, (lo + w).min(599))).collect();
        let mut line = String::from("status");
        if negated {
            line.push_str(" !");
        }
        for (lo, hi) in &ranges {
            if lo == hi { line.push_str(&format!(" {lo}")) } else { line.push_str(&format!(" {lo}-{hi}")) }
        }
        let listed = ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&status));
        let want = if listed != negated { Ok(()) } else { Err(Reason::Status) };
        prop_assert_eq!(eval(&[&line], status, &[], ""), want);
    }

    #[test]
    fn literal_expect_is_split_invariant(
        literal in proptest::collection::vec(any::<u8>(), 1..8),
        answer in proptest::collection::vec(any::<u8>(), 0..16),
        take_literal: bool,
    ) {
        // Half the time the answer starts with the literal.
        let answer = if take_literal { [literal.clone(), answer].concat() } else { answer };
        let b = MatchBlock { name: b"m".to_vec(), tests: vec![Test::Expect(Expect::Prefix(literal.clone()))] };
        let none = Compiled(vec![]);
        let mut seen_failed = false;
        let mut seen_matched = false;
        for n in 0..=answer.len() {
            let p = b.expect_progress(&answer[..n], &none, false);
            match p {
                ExpectProgress::Matched => {
                    prop_assert!(!seen_failed, "Failed then Matched at {}", n);
                    seen_matched = true;
                }
                ExpectProgress::Failed => {
                    prop_assert!(!seen_matched, "Matched then Failed at {}", n);
                    seen_failed = true;
                }
                ExpectProgress::NeedMore => prop_assert!(!seen_failed && !seen_matched),
            }
            // Complete: decided, and the same as the oracle.
            let done = b.expect_progress(&answer[..n], &none, true);
            let want = if answer[..n].starts_with(&literal) { ExpectProgress::Matched } else { ExpectProgress::Failed };
            prop_assert_eq!(done, want);
        }
        let last = b.expect_progress(&answer, &none, false);
        prop_assert_eq!(last == ExpectProgress::Matched, answer.starts_with(&literal));
    }
}
