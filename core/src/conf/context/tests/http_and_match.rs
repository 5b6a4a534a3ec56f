use super::*;

// ---------------------------------------------------------------------------
// check_http_* and check_match
// ---------------------------------------------------------------------------

pub(super) fn http(send: bool, request: bool, header: bool, expect_alive: bool) -> HttpDirectives {
    HttpDirectives {
        send,
        request,
        header,
        expect_alive,
        expect_body: false,
        fastcgi_param: false,
        ..HttpDirectives::default()
    }
}

pub(super) fn with_http<'a>(mut u: UpstreamFacts<'a>, h: HttpDirectives) -> UpstreamFacts<'a> {
    u.http = h;
    u
}

pub(super) fn block(name: &str, lines: &[&str]) -> MatchBlock {
    MatchBlock {
        name: name.as_bytes().to_vec(),
        tests: lines
            .iter()
            .map(|l| {
                let words: Vec<&[u8]> = l.split(' ').map(str::as_bytes).collect();
                crate::matcher::parse_test(&words).unwrap()
            })
            .collect(),
    }
}

pub(super) fn finish_with(u: &[UpstreamFacts<'_>], blocks: &[MatchBlock]) -> Finished {
    finish_context(Group::Http, u, blocks, None, required)
}

pub(super) fn error_of(f: &Finished) -> (Directive, &str) {
    let d = f.result.as_ref().unwrap_err();
    (d.at, d.error.0.as_str())
}

#[test]
fn http_directives_require_a_type_that_takes_them() {
    let tcp = check("interval=1000");
    let udp = check("type=udp");
    let web = check("type=http");
    let mysql = check("type=mysql");
    let fcgi = check("type=fastcgi");
    let peers = || vec![peer("127.0.0.1:80", 80)];
    let all = |send, request, header, expect_alive, expect_body, fastcgi_param| HttpDirectives {
        send,
        request,
        header,
        expect_alive,
        expect_body,
        fastcgi_param,
        ..HttpDirectives::default()
    };
    // (directives, at, name, what the message asks for, types refused)
    let send_types = "type=http (the request), type=tcp (bytes sent, nothing read) or \
                      type=udp (the datagram)";
    type Case<'a> = (
        HttpDirectives,
        Directive,
        &'a str,
        &'a str,
        Vec<Option<&'a CheckConf>>,
    );
    let cases: [Case; 6] = [
        (
            all(true, false, false, false, false, false),
            Directive::HttpSend(1),
            "check_http_send",
            send_types,
            vec![Some(&mysql), Some(&fcgi), None],
        ),
        (
            all(false, true, false, false, false, false),
            Directive::HttpRequest(1),
            "check_http_request",
            "type=http",
            vec![Some(&tcp), Some(&udp), Some(&fcgi), None],
        ),
        (
            all(false, false, true, false, false, false),
            Directive::HttpHeader(1),
            "check_http_header",
            "type=http",
            vec![Some(&tcp), Some(&udp), None],
        ),
        (
            all(false, false, false, true, false, false),
            Directive::HttpExpectAlive(1),
            "check_http_expect_alive",
            "type=http or type=fastcgi",
            vec![Some(&tcp), Some(&udp), Some(&mysql), None],
        ),
        (
            all(false, false, false, false, true, false),
            Directive::HttpExpectBody(1),
            "check_http_expect_body",
            "type=http",
            vec![Some(&tcp), Some(&fcgi), None],
        ),
        (
            all(false, false, false, false, false, true),
            Directive::FastcgiParam(1),
            "check_fastcgi_param",
            "type=fastcgi",
            vec![Some(&tcp), Some(&web), None],
        ),
    ];
    for (h, at, directive, what, refused) in cases {
        for c in refused {
            let u = [
                ups("ok", Some(&web), None, peers()),
                with_http(ups("u", c, None, peers()), h),
            ];
            let f = finish_with(&u, &[]);
            // As the C modules: without check, and expect_alive where no
            // status is read, the directive does nothing and nginx -t says so.
            let ignored = match c {
                None => Some("it has no check".to_string()),
                Some(c) if directive == "check_http_expect_alive" => Some(format!(
                    "a type={} check reads no HTTP status",
                    c.check_type.as_str()
                )),
                Some(_) => None,
            };
            if let Some(why) = ignored {
                assert!(f.result.is_ok(), "{h:?} {c:?}");
                let want = format!("\"{directive}\" has no effect in upstream \"u\": {why}");
                assert_eq!(messages(&f.warnings), [(at, want.as_str())], "{h:?} {c:?}");
                continue;
            }
            let has = format!("type={}", c.map_or("", |c| c.check_type.as_str()));
            let want = format!(
                "\"{directive}\" requires \"check ... {what}\" in upstream \"u\", which has {has}"
            );
            assert_eq!(error_of(&f), (at, want.as_str()), "{h:?} {c:?}");
        }
    }
    // A check_http_send beside a line without type= was meant for http.
    let bare = check("interval=1000");
    let mut h = all(true, false, false, true, false, false);
    h.send = true;
    let f = finish_with(&[with_http(ups("u", Some(&bare), None, peers()), h)], &[]);
    assert!(f.result.is_ok());
    assert_eq!(
        messages(&f.warnings),
        [(
            Directive::HttpExpectAlive(0),
            "\"check_http_expect_alive\" has no effect in upstream \"u\": a type=tcp check reads \
             no HTTP status (did you mean check ... type=http?)"
        )]
    );
    // type=tcp written out: no hint.
    let mut u = with_http(ups("u", Some(&bare), None, peers()), h);
    u.written.check_type = true;
    let f = finish_with(&[u], &[]);
    assert!(!f.warnings[0].error.0.contains("did you mean"));
    // The first in the fixed order is named.
    let u = [with_http(
        ups("u", Some(&tcp), None, peers()),
        all(false, true, true, true, false, false),
    )];
    assert_eq!(error_of(&finish_with(&u, &[])).0, Directive::HttpRequest(0));
    // What each type takes is fine.
    for (c, h) in [
        (&web, all(true, false, false, true, true, false)),
        (&web, all(false, true, true, true, false, false)),
        (&tcp, all(true, false, false, false, false, false)),
        (&udp, all(true, false, false, false, false, false)),
        (&fcgi, all(false, false, false, true, false, true)),
    ] {
        let u = [with_http(ups("u", Some(c), None, peers()), h)];
        let f = finish_with(&u, &[]);
        assert!(f.result.is_ok(), "{h:?} {c:?}: {:?}", f.result);
        assert_eq!(f.warnings, []);
    }
}

#[test]
fn check_http_send_excludes_the_built_request() {
    let web = check("type=http");
    for (h, other) in [
        (http(true, true, false, false), "check_http_request"),
        (http(true, false, true, false), "check_http_header"),
        (http(true, true, true, true), "check_http_request"),
    ] {
        let u = [with_http(ups("web", Some(&web), None, vec![]), h)];
        let want = format!(
            "\"check_http_send\" and \"{other}\" cannot both be used in upstream \"web\": \
             check_http_send is the whole request"
        );
        assert_eq!(
            error_of(&finish_with(&u, &[])),
            (Directive::HttpSend(0), want.as_str())
        );
    }
}

#[test]
fn match_names_a_block_of_the_context() {
    let web = check("type=http match=ok");
    let other = check("type=http match=nope");
    let blocks = [
        block("ok", &["status 200"]),
        block("redis", &["send PING", "expect +PONG"]),
    ];
    let u = [ups("a", Some(&web), None, vec![peer("a:1", 1)])];
    let f = finish_with(&u, &blocks);
    assert!(f.result.is_ok());
    let u = [
        ups("a", Some(&web), None, vec![]),
        ups("b", Some(&other), None, vec![]),
    ];
    assert_eq!(
        error_of(&finish_with(&u, &blocks)),
        (
            Directive::Check(1),
            "unknown check_match \"nope\" in upstream \"b\""
        )
    );
    assert_eq!(
        error_of(&finish_with(&u[..1], &[])),
        (
            Directive::Check(0),
            "unknown check_match \"ok\" in upstream \"a\""
        )
    );
}

#[test]
fn a_block_must_fit_the_check_type() {
    let blocks = [
        block("ok", &["status 200", "body ~ up"]),
        block("redis", &["send PING", "expect +PONG"]),
    ];
    for (line, want) in [
        (
            "type=tcp match=ok",
            "check_match \"ok\" cannot be used by the type=tcp check of upstream \"u\": \
             its \"status\" test needs type=http",
        ),
        (
            "type=udp match=ok",
            "check_match \"ok\" cannot be used by the type=udp check of upstream \"u\": \
             its \"status\" test needs type=http",
        ),
        (
            "type=http match=redis",
            "check_match \"redis\" cannot be used by the type=http check of upstream \"u\": \
             its \"send\" test needs type=tcp or type=udp",
        ),
    ] {
        let c = check(line);
        let u = [ups("u", Some(&c), None, vec![])];
        assert_eq!(
            error_of(&finish_with(&u, &blocks)),
            (Directive::Check(0), want),
            "{line}"
        );
    }
    for line in [
        "type=tcp match=redis",
        "type=udp match=redis",
        "type=http match=ok",
    ] {
        let c = check(line);
        let u = [ups("u", Some(&c), None, vec![])];
        assert!(finish_with(&u, &blocks).result.is_ok(), "{line}");
    }
}

#[test]
fn blocks_are_checked_on_their_own_first() {
    let c = check("type=http match=a");
    let u = [ups("u", Some(&c), Some(1), vec![])];
    for (blocks, at, want) in [
        (
            vec![
                block("a", &["status 200"]),
                block("b", &["status 200"]),
                block("a", &["header X"]),
            ],
            Directive::Match(2),
            "duplicate check_match \"a\"",
        ),
        (
            vec![block("a", &["status 200"]), block("e", &[])],
            Directive::Match(1),
            "check_match \"e\" has no tests",
        ),
        (
            vec![
                block("s", &["send a", "send b"]),
                block("a", &["status 200"]),
            ],
            Directive::Match(0),
            "check_match \"s\" has more than one \"send\" test",
        ),
        (
            vec![
                block("a", &["status 200"]),
                block("x", &["expect a", "expect b"]),
            ],
            Directive::Match(1),
            "check_match \"x\" has more than one \"expect\" test",
        ),
    ] {
        let f = finish_with(&u, &blocks);
        assert_eq!(error_of(&f), (at, want));
        assert_eq!(f.warnings, [], "before any upstream");
    }
    // An unused block is still checked; a used one only when it is valid.
    let unused = [block("a", &["status 200"]), block("unused", &[])];
    assert_eq!(error_of(&finish_with(&u, &unused)).0, Directive::Match(1));
}

#[test]
fn expect_alive_with_match_warns() {
    let c = check("type=http match=ok");
    let plain = check("type=http");
    let blocks = [block("ok", &["header X-Up"])];
    let u = [
        with_http(
            ups("a", Some(&c), None, vec![]),
            http(false, false, false, true),
        ),
        with_http(
            ups("b", Some(&plain), None, vec![]),
            http(false, false, false, true),
        ),
        ups("c", Some(&c), None, vec![]),
    ];
    let f = finish_with(&u, &blocks);
    assert!(f.result.is_ok());
    assert_eq!(
        messages(&f.warnings),
        [(
            Directive::HttpExpectAlive(0),
            "\"check_http_expect_alive\" has no effect in upstream \"a\": \
             its check uses check_match \"ok\""
        )]
    );
}

#[test]
fn the_c_modules_directives_do_not_mix_with_match() {
    let blocks = [block("ok", &["expect ~ ^\\+OK"])];
    let body_block = [block("ok", &["body ~ up"])];
    let tcp = check("type=tcp match=ok");
    let udp = check("type=udp match=ok");
    let web = check("type=http match=ok");
    let send = |c| {
        with_http(
            ups("u", Some(c), None, vec![]),
            http(true, false, false, false),
        )
    };
    for (c, t) in [(&tcp, "tcp"), (&udp, "udp")] {
        assert_eq!(
            error_of(&finish_with(&[send(c)], &blocks)),
            (
                Directive::HttpSend(0),
                format!(
                    "\"check_http_send\" and \"check ... match=ok\" both say what the type={t} \
                     check of upstream \"u\" does: write send \"...\" in check_match \"ok\" instead"
                )
                .as_str()
            )
        );
    }
    let mut h = http(false, false, false, false);
    h.expect_body = true;
    let u = [with_http(ups("u", Some(&web), None, vec![]), h)];
    assert_eq!(
        error_of(&finish_with(&u, &body_block)),
        (
            Directive::HttpExpectBody(0),
            "\"check_http_expect_body\" and \"check ... match=ok\" both judge the responses of \
             upstream \"u\": write the body test in check_match \"ok\" instead"
        )
    );
    // Without match= each is the round's own test.
    let plain = check("type=tcp");
    assert!(finish_with(&[send(&plain)], &[]).result.is_ok());
    let plain_web = check("type=http");
    let u = [with_http(ups("u", Some(&plain_web), None, vec![]), h)];
    assert!(finish_with(&u, &[]).result.is_ok());
}

#[test]
fn http_checks_have_their_own_identity() {
    let web = check("type=http");
    let tcp = check("type=tcp");
    let p = || vec![peer("10.0.0.1:80", 80)];
    let a = finish_with(&[ups("u", Some(&web), None, p())], &[])
        .result
        .unwrap();
    let b = finish_with(&[ups("u", Some(&tcp), None, p())], &[])
        .result
        .unwrap();
    assert_eq!(
        a.identities,
        [identity_hash("http", b"u", b"10.0.0.1:80", "http", 80)]
    );
    assert_ne!(a.identities, b.identities);
}

#[test]
fn http_rules_come_after_port_and_before_the_size() {
    let c = check("type=mysql port=80");
    let u = [with_http(
        ups("u", Some(&c), Some(1), vec![unix("unix:/x.sock")]),
        http(true, false, false, false),
    )];
    let f = finish_context(Group::Http, &u, &[], Some(1), required);
    assert_eq!(
        f.warnings.iter().map(|w| w.at).collect::<Vec<_>>(),
        [Directive::KeepaliveRequests(0), Directive::Check(0)],
        "the keepalive_requests warning, then port's"
    );
    assert_eq!(f.result.unwrap_err().at, Directive::HttpSend(0));
    let c = check("type=mysql");
    let u = [with_http(
        ups("u", Some(&c), None, vec![]),
        http(true, false, false, false),
    )];
    let f = finish_context(Group::Http, &u, &[], Some(1), required);
    assert_eq!(
        f.result.unwrap_err().at,
        Directive::HttpSend(0),
        "before the size"
    );
}

#[test]
fn grpc_and_http_version_directives_need_their_types() {
    let grpc = check("type=grpc");
    let grpcs = check("type=grpcs");
    let web = check("type=http");
    let tcp = check("type=tcp");
    let with = |c, f: fn(&mut HttpDirectives)| {
        let mut h = HttpDirectives::default();
        f(&mut h);
        with_http(ups("u", Some(c), None, vec![]), h)
    };
    let service: fn(&mut HttpDirectives) = |h| h.grpc_service = true;
    let status: fn(&mut HttpDirectives) = |h| h.grpc_status = true;
    let version: fn(&mut HttpDirectives) = |h| {
        h.http_version = true;
        h.http2 = true;
    };
    for c in [&grpc, &grpcs] {
        assert!(finish_with(&[with(c, service)], &[]).result.is_ok());
        assert!(finish_with(&[with(c, status)], &[]).result.is_ok());
    }
    assert_eq!(
        error_of(&finish_with(&[with(&web, service)], &[])),
        (
            Directive::GrpcService(0),
            "\"check_grpc_service\" requires \"check ... type=grpc or type=grpcs\" in upstream \
             \"u\", which has type=http"
        )
    );
    assert_eq!(
        error_of(&finish_with(&[with(&tcp, status)], &[])).0,
        Directive::GrpcStatus(0)
    );
    assert!(finish_with(&[with(&web, version)], &[]).result.is_ok());
    assert_eq!(
        error_of(&finish_with(&[with(&grpc, version)], &[])),
        (
            Directive::HttpVersion(0),
            "\"check_http_version\" requires \"check ... type=http or type=https\" in upstream \
             \"u\", which has type=grpc"
        )
    );
    let both: fn(&mut HttpDirectives) = |h| {
        h.http_version = true;
        h.http2 = true;
        h.send = true;
    };
    assert_eq!(
        error_of(&finish_with(&[with(&web, both)], &[])),
        (
            Directive::HttpVersion(0),
            "\"check_http_version 2\" and \"check_http_send\" cannot both be used in upstream \
             \"u\": check_http_send is HTTP/1 bytes; build the request with check_http_request \
             and check_http_header"
        )
    );
    // check_http_version 1.1 with check_http_send is fine.
    let one: fn(&mut HttpDirectives) = |h| {
        h.http_version = true;
        h.send = true;
    };
    assert!(finish_with(&[with(&web, one)], &[]).result.is_ok());
}
