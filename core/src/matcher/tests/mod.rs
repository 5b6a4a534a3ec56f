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

mod evaluation;
mod properties;
