use super::*;

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

pub(super) fn progress(lines: &[&str], received: &[u8], complete: bool) -> ExpectProgress {
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
