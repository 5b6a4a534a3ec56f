//! Tests of the cross-directive rules: every rule and message, their
//! order, the zone layout, and properties over generated contexts.

use proptest::prelude::*;

use super::*;
use crate::conf::{parse_check, CheckType};

fn check(line: &str) -> CheckConf {
    let args: Vec<&[u8]> = line.split_whitespace().map(str::as_bytes).collect();
    parse_check(&args).unwrap()
}

fn peer(name: &str, port: u16) -> PeerFacts<'_> {
    PeerFacts {
        name: name.as_bytes(),
        port,
        unix: false,
    }
}

fn unix(name: &str) -> PeerFacts<'_> {
    PeerFacts {
        name: name.as_bytes(),
        port: 0,
        unix: true,
    }
}

fn ups<'a>(
    name: &'a str,
    check: Option<&'a CheckConf>,
    keepalive_requests: Option<u32>,
    peers: Vec<PeerFacts<'a>>,
) -> UpstreamFacts<'a> {
    UpstreamFacts {
        name: name.as_bytes(),
        check,
        keepalive_requests,
        peers,
        http: HttpDirectives::default(),
        fail_open: false,
        tls: TlsDirectives::default(),
        resolve_lines: 0,
    }
}

/// A stand-in for the zone's size rule: a page per peer and two more.
fn required(n: usize, dynamic: usize) -> usize {
    4096 * (n + dynamic + 2)
}

fn required_static(n: usize) -> usize {
    required(n, 0)
}

fn finish(group: Group, u: &[UpstreamFacts<'_>], shm: Option<u64>) -> Finished {
    finish_context(group, u, &[], shm, required)
}

fn messages(d: &[Diagnostic]) -> Vec<(Directive, &str)> {
    d.iter().map(|d| (d.at, d.error.0.as_str())).collect()
}

#[test]
fn an_empty_context_still_has_a_zone() {
    let f = finish(Group::Http, &[], None);
    assert_eq!(f.warnings, []);
    assert_eq!(
        f.result,
        Ok(ZoneLayout {
            identities: vec![],
            default_down: vec![],
            dynamic: 0,
            tags: vec![],
            size: required_static(0),
        })
    );
}

#[test]
fn keepalive_requests_without_reuse_on_warns() {
    let on = check("interval=1000 reuse=on");
    let off = check("interval=1000");
    let period = check("interval=1000 reuse=2s");
    let keepalive = check("interval=1000 keepalive=on");
    let u = [
        ups("none", None, Some(5), vec![]),
        ups("off", Some(&off), Some(5), vec![peer("127.0.0.1:1", 1)]),
        ups("on", Some(&on), Some(5), vec![peer("127.0.0.1:1", 1)]),
        ups(
            "period",
            Some(&period),
            Some(7),
            vec![peer("127.0.0.1:1", 1)],
        ),
        ups(
            "kept",
            Some(&keepalive),
            Some(1),
            vec![peer("127.0.0.1:1", 1)],
        ),
        ups("unset", Some(&off), None, vec![peer("127.0.0.1:1", 1)]),
    ];
    let f = finish(Group::Http, &u, None);
    let w = |n: &str| {
        format!(
            "\"check_keepalive_requests\" has no effect in upstream \"{n}\": \
             its check is not reuse=on"
        )
    };
    let want = [
        (Directive::KeepaliveRequests(0), w("none")),
        (Directive::KeepaliveRequests(1), w("off")),
        (Directive::KeepaliveRequests(3), w("period")),
        (Directive::KeepaliveRequests(4), w("kept")),
    ];
    let want: Vec<_> = want.iter().map(|(d, m)| (*d, m.as_str())).collect();
    assert_eq!(messages(&f.warnings), want);
    assert!(
        f.result.is_ok(),
        "a warning does not fail the configuration"
    );
}

#[test]
fn the_warning_message_is_nginx_t_s() {
    let f = finish(Group::Stream, &[ups("s", None, Some(5), vec![])], None);
    assert_eq!(
        f.warnings[0].error.to_string(),
        "\"check_keepalive_requests\" has no effect in upstream \"s\": its check is not reuse=on"
    );
}

#[test]
fn port_with_a_unix_server_fails_at_check() {
    let c = check("interval=1000 port=8080");
    let u = [
        ups("tcp", Some(&c), None, vec![peer("127.0.0.1:5", 5)]),
        ups(
            "u",
            Some(&c),
            None,
            vec![
                peer("127.0.0.1:5", 5),
                unix("unix:/tmp/x.sock"),
                unix("unix:/tmp/y.sock"),
            ],
        ),
        ups("later", Some(&c), None, vec![unix("unix:/tmp/z.sock")]),
    ];
    for group in [Group::Http, Group::Stream] {
        let f = finish(group, &u, None);
        assert_eq!(
            f.result,
            Err(Diagnostic {
                at: Directive::Check(1),
                error: ConfError(
                    "invalid parameter \"port=8080\": upstream \"u\" has the unix-socket server \
                     \"unix:/tmp/x.sock\", which has no port"
                        .into()
                ),
            }),
            "the first unix server of the first such upstream is named"
        );
    }
}

#[test]
fn unix_servers_are_fine_without_port() {
    let c = check("interval=1000");
    let u = [ups("u", Some(&c), None, vec![unix("unix:/tmp/x.sock")])];
    let f = finish(Group::Http, &u, None);
    let z = f.result.unwrap();
    assert_eq!(
        z.identities,
        [identity_hash("http", b"u", b"unix:/tmp/x.sock", "tcp", 0)]
    );
}

#[test]
fn tls_directive_rules() {
    let tls = check("type=tls");
    let https = check("type=https");
    let tcp = check("type=tcp");
    let with = |c: Option<&'static CheckConf>, t: TlsDirectives| {
        let mut u = ups("u", c, None, vec![peer("a", 1)]);
        u.tls = t;
        finish(Group::Http, &[u], None)
    };
    let t = |first, verify, trusted, certificate, key| TlsDirectives {
        first: Some(first),
        verify,
        trusted,
        certificate,
        key,
    };
    // Leak the checks for the 'static closure (a test).
    let (tls, https, tcp): (&'static _, &'static _, &'static _) = (
        Box::leak(Box::new(tls)),
        Box::leak(Box::new(https)),
        Box::leak(Box::new(tcp)),
    );
    assert!(
        with(Some(tls), t("check_ssl_name", false, false, false, false))
            .result
            .is_ok()
    );
    assert!(
        with(Some(https), t("check_ssl_verify", true, true, true, true))
            .result
            .is_ok()
    );
    assert!(with(Some(tcp), TlsDirectives::default()).result.is_ok());
    assert_eq!(
        error_of(&with(Some(tcp), t("check_ssl_name", false, false, false, false))),
        (
            Directive::Tls(0, "check_ssl_name"),
            "\"check_ssl_name\" requires \"check ... type=https\" or \"type=tls\" in upstream \"u\""
        )
    );
    assert_eq!(
        error_of(&with(None, t("check_ssl_verify", true, true, false, false))).0,
        Directive::Tls(0, "check_ssl_verify")
    );
    assert_eq!(
        error_of(&with(
            Some(tls),
            t("check_ssl_verify", true, false, false, false)
        )),
        (
            Directive::Tls(0, "check_ssl_verify"),
            "\"check_ssl_verify\" is on but upstream \"u\" has no \
             \"check_ssl_trusted_certificate\" to verify against"
        )
    );
    assert_eq!(
        error_of(&with(
            Some(https),
            t("check_ssl_certificate", false, false, true, false)
        )),
        (
            Directive::Tls(0, "check_ssl_certificate"),
            "\"check_ssl_certificate\" requires \"check_ssl_certificate_key\" in upstream \"u\""
        )
    );
    assert_eq!(
        error_of(&with(
            Some(https),
            t("check_ssl_certificate_key", false, false, false, true)
        )),
        (
            Directive::Tls(0, "check_ssl_certificate_key"),
            "\"check_ssl_certificate_key\" requires \"check_ssl_certificate\" in upstream \"u\""
        )
    );
}

#[test]
fn fail_open_requires_check() {
    let c = check("type=tcp");
    let mut without = ups("u", None, None, vec![peer("a", 1)]);
    without.fail_open = true;
    let f = finish(Group::Http, &[without], None);
    assert_eq!(
        error_of(&f),
        (
            Directive::FailOpen(0),
            "\"check_fail_open\" requires \"check\" in upstream \"u\""
        )
    );
    let mut with = ups("u", Some(&c), None, vec![peer("a", 1)]);
    with.fail_open = true;
    assert!(finish(Group::Http, &[with], None).result.is_ok());
}

#[test]
fn unchecked_upstreams_are_not_checked_nor_counted() {
    // The glue collects peers only with `check`; whatever it passes for an
    // unchecked upstream is not looked at.
    let u = [ups(
        "u",
        None,
        None,
        vec![unix("unix:/tmp/x.sock"), peer("a", 1)],
    )];
    let f = finish(Group::Http, &u, Some(required_static(0) as u64));
    assert_eq!(f.result.unwrap().identities, Vec::<u64>::new());
}

#[test]
fn warnings_before_an_error_are_kept_and_later_ones_not_looked_for() {
    let port = check("interval=1000 port=80");
    let u = [
        ups("w", None, Some(3), vec![]),
        ups("u", Some(&port), Some(2), vec![unix("unix:/tmp/x.sock")]),
        ups("k", None, Some(3), vec![]),
    ];
    let f = finish(Group::Http, &u, Some(1));
    assert_eq!(
        f.warnings.iter().map(|d| d.at).collect::<Vec<_>>(),
        [
            Directive::KeepaliveRequests(0),
            Directive::KeepaliveRequests(1)
        ],
        "an upstream's own warning comes before its error"
    );
    assert_eq!(
        f.result.unwrap_err().at,
        Directive::Check(1),
        "before the size"
    );
}

#[test]
fn identities_use_the_effective_port() {
    let plain = check("interval=1000 default_down=false");
    let own = check("interval=1000 port=80 default_down=false");
    let other = check("interval=1000 port=81 default_down=true");
    let udp = check("interval=1000 type=udp default_down=true");
    let peers = || vec![peer("10.0.0.1:80", 80), peer("[::1]:80", 80)];
    let u = [
        ups("a", Some(&plain), None, peers()),
        ups("b", Some(&own), None, peers()),
        ups("c", Some(&other), None, peers()),
        ups("d", Some(&udp), None, peers()),
    ];
    let z = finish(Group::Stream, &u, None).result.unwrap();
    let id = |ups: &[u8], peer: &[u8], ty, port| identity_hash("stream", ups, peer, ty, port);
    assert_eq!(
        z.identities,
        [
            id(b"a", b"10.0.0.1:80", "tcp", 80),
            id(b"a", b"[::1]:80", "tcp", 80),
            id(b"b", b"10.0.0.1:80", "tcp", 80),
            id(b"b", b"[::1]:80", "tcp", 80),
            id(b"c", b"10.0.0.1:80", "tcp", 81),
            id(b"c", b"[::1]:80", "tcp", 81),
            id(b"d", b"10.0.0.1:80", "udp", 80),
            id(b"d", b"[::1]:80", "udp", 80),
        ]
    );
    assert_eq!(
        z.default_down,
        [false, false, false, false, true, true, true, true]
    );
    assert_eq!(z.size, required_static(8));
}

#[test]
fn identities_differ_between_http_and_stream() {
    let c = check("interval=1000");
    let u = [ups("u", Some(&c), None, vec![peer("127.0.0.1:1", 1)])];
    let h = finish(Group::Http, &u, None).result.unwrap();
    let s = finish(Group::Stream, &u, None).result.unwrap();
    assert_ne!(h.identities, s.identities);
}

#[test]
fn shm_size_is_the_given_size_when_it_is_enough() {
    let c = check("interval=1000");
    let u = [ups("u", Some(&c), None, vec![peer("a", 1), peer("b", 2)])];
    let need = required_static(2);
    for (shm, size) in [
        (None, need),
        (Some(need as u64), need),
        (Some(1 << 30), 1 << 30),
    ] {
        assert_eq!(finish(Group::Http, &u, shm).result.unwrap().size, size);
    }
}

#[test]
fn shm_size_too_small_fails_at_check_shm_size() {
    let c = check("interval=1000");
    let u = [ups("u", Some(&c), None, vec![peer("a", 1), peer("b", 2)])];
    let f = finish_context(Group::Http, &u, &[], Some(1024), |n, _| {
        assert_eq!(n, 2, "sized for the checked peers");
        20480
    });
    assert_eq!(
        f.result,
        Err(Diagnostic {
            at: Directive::ShmSize,
            error: ConfError(
                "\"check_shm_size\" 1024 is too small for 2 checked http peers: \
                 at least 20480 bytes (20k) are needed"
                    .into()
            ),
        })
    );
    let f = finish_context(Group::Stream, &[], &[], Some(20479), |_, _| 20480);
    assert_eq!(
        f.result.unwrap_err().error.to_string(),
        "\"check_shm_size\" 20479 is too small for 0 checked stream peers: \
         at least 20480 bytes (20k) are needed"
    );
    // the kilobytes round up
    let f = finish_context(Group::Stream, &[], &[], Some(1), |_, _| 20481);
    assert!(f
        .result
        .unwrap_err()
        .error
        .0
        .ends_with("20481 bytes (21k) are needed"));
}

#[test]
fn names_are_printed_as_nginx_prints_them() {
    // Invalid UTF-8 is replaced (one U+FFFD per invalid sequence).
    let c = check("interval=1000 port=80");
    let u = [UpstreamFacts {
        name: b"up\xff",
        check: Some(&c),
        keepalive_requests: Some(1),
        peers: vec![PeerFacts {
            name: b"unix:/tmp/\xfe.sock",
            port: 0,
            unix: true,
        }],
        http: HttpDirectives::default(),
        fail_open: false,
        tls: TlsDirectives::default(),
        resolve_lines: 0,
    }];
    let f = finish(Group::Http, &u, None);
    assert!(f.warnings[0].error.0.contains("upstream \"up\u{fffd}\":"));
    let e = f.result.unwrap_err().error.0;
    assert!(e.contains("upstream \"up\u{fffd}\" has"), "{e}");
    assert!(e.contains("server \"unix:/tmp/\u{fffd}.sock\","), "{e}");
}

// ---------------------------------------------------------------------------
// check_http_* and check_match
// ---------------------------------------------------------------------------

fn http(send: bool, request: bool, header: bool, expect_alive: bool) -> HttpDirectives {
    HttpDirectives {
        send,
        request,
        header,
        expect_alive,
    }
}

fn with_http<'a>(mut u: UpstreamFacts<'a>, h: HttpDirectives) -> UpstreamFacts<'a> {
    u.http = h;
    u
}

fn block(name: &str, lines: &[&str]) -> MatchBlock {
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

fn finish_with(u: &[UpstreamFacts<'_>], blocks: &[MatchBlock]) -> Finished {
    finish_context(Group::Http, u, blocks, None, required)
}

fn error_of(f: &Finished) -> (Directive, &str) {
    let d = f.result.as_ref().unwrap_err();
    (d.at, d.error.0.as_str())
}

#[test]
fn http_directives_require_type_http() {
    let tcp = check("interval=1000");
    let udp = check("type=udp");
    let web = check("type=http");
    let peers = || vec![peer("127.0.0.1:80", 80)];
    for (h, at, directive) in [
        (
            http(true, false, false, false),
            Directive::HttpSend(1),
            "check_http_send",
        ),
        (
            http(false, true, false, false),
            Directive::HttpRequest(1),
            "check_http_request",
        ),
        (
            http(false, false, true, false),
            Directive::HttpHeader(1),
            "check_http_header",
        ),
        (
            http(false, false, false, true),
            Directive::HttpExpectAlive(1),
            "check_http_expect_alive",
        ),
        // The first in the fixed order is named.
        (
            http(false, true, true, true),
            Directive::HttpRequest(1),
            "check_http_request",
        ),
        (
            http(true, true, false, false),
            Directive::HttpSend(1),
            "check_http_send",
        ),
    ] {
        for c in [Some(&tcp), Some(&udp), None] {
            let u = [
                ups("ok", Some(&web), None, peers()),
                with_http(ups("u", c, None, peers()), h),
            ];
            let f = finish_with(&u, &[]);
            let want =
                format!("\"{directive}\" requires \"check ... type=http\" in upstream \"u\"");
            assert_eq!(error_of(&f), (at, want.as_str()), "{h:?} {c:?}");
        }
    }
    // With type=http, all of them but the raw/built pairs are fine.
    for h in [
        http(true, false, false, true),
        http(false, true, true, true),
    ] {
        let u = [with_http(ups("u", Some(&web), None, peers()), h)];
        let f = finish_with(&u, &[]);
        assert!(f.result.is_ok(), "{h:?}");
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
    let c = check("type=tcp port=80");
    let u = [with_http(
        ups("u", Some(&c), Some(1), vec![unix("unix:/x.sock")]),
        http(true, false, false, false),
    )];
    let f = finish_context(Group::Http, &u, &[], Some(1), required);
    assert_eq!(f.warnings.len(), 1, "the keepalive_requests warning");
    assert_eq!(f.result.unwrap_err().at, Directive::Check(0), "port first");
    let c = check("type=tcp");
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

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

const CHECKS: [&str; 6] = [
    "interval=1000",
    "interval=1000 reuse=on",
    "interval=1000 port=8080",
    "interval=1000 reuse=on port=80",
    "type=udp default_down=true",
    "interval=1000 reuse=2s",
];

/// (check line index or none, keepalive_requests, peers as (unix, port)).
type Spec = (Option<usize>, Option<u32>, Vec<(bool, u16)>);

fn spec() -> impl Strategy<Value = Spec> {
    (
        proptest::option::of(0..CHECKS.len()),
        proptest::option::of(1u32..10),
        proptest::collection::vec((proptest::bool::weighted(0.1), 0u16..3), 0..5),
    )
}

proptest! {
    #[test]
    fn rules_hold_for_any_context(
        specs in proptest::collection::vec(spec(), 0..6),
        shm in proptest::option::of(0u64..40_000),
        stream: bool,
    ) {
        let group = if stream { Group::Stream } else { Group::Http };
        let checks: Vec<CheckConf> = CHECKS.iter().map(|l| check(l)).collect();
        let names: Vec<String> = (0..specs.len()).map(|i| format!("u{i}")).collect();
        let peer_names: Vec<Vec<String>> = specs
            .iter()
            .map(|(_, _, ps)| (0..ps.len()).map(|j| format!("p{j}")).collect())
            .collect();
        let facts: Vec<UpstreamFacts<'_>> = specs
            .iter()
            .enumerate()
            .map(|(i, (c, k, ps))| UpstreamFacts {
                name: names[i].as_bytes(),
                check: c.map(|c| &checks[c]),
                keepalive_requests: *k,
                peers: ps
                    .iter()
                    .enumerate()
                    .map(|(j, &(unix, port))| PeerFacts {
                        name: peer_names[i][j].as_bytes(),
                        port: if unix { 0 } else { port },
                        unix,
                    })
                    .collect(),
                http: HttpDirectives::default(),
                fail_open: false,
                tls: TlsDirectives::default(),
        resolve_lines: 0,
            })
            .collect();
        let f = finish_context(group, &facts, &[], shm, required);

        // The first upstream with `port=` and a unix server fails `check`.
        let bad = facts
            .iter()
            .position(|u| u.check.is_some_and(|c| c.port != 0) && u.peers.iter().any(|p| p.unix));
        let looked_at = bad.map_or(facts.len(), |b| b + 1);
        let warned: Vec<Directive> = (0..looked_at)
            .filter(|&i| {
                facts[i].keepalive_requests.is_some()
                    && facts[i].check.map(|c| c.reuse) != Some(Reuse::On)
            })
            .map(Directive::KeepaliveRequests)
            .collect();
        prop_assert_eq!(f.warnings.iter().map(|d| d.at).collect::<Vec<_>>(), warned);
        for d in f.warnings.iter().chain(f.result.as_ref().err()) {
            prop_assert!(!d.error.0.contains('\n'));
        }

        let checked: Vec<&UpstreamFacts<'_>> = facts.iter().filter(|u| u.check.is_some()).collect();
        let n: usize = checked.iter().map(|u| u.peers.len()).sum();
        match (&f.result, bad) {
            (Err(d), Some(b)) => prop_assert_eq!(d.at, Directive::Check(b)),
            (Ok(_), Some(_)) => prop_assert!(false, "port= with a unix server passed"),
            (Err(d), None) => {
                prop_assert_eq!(d.at, Directive::ShmSize);
                prop_assert!(shm.is_some_and(|s| (s as usize) < required_static(n)));
            }
            (Ok(z), None) => {
                prop_assert!(shm.map_or(true, |s| s as usize >= required_static(n)));
                prop_assert_eq!(z.size, shm.map_or(required_static(n), |s| s as usize));
                prop_assert_eq!(z.identities.len(), n);
                prop_assert_eq!(z.default_down.len(), n);
                // Slots follow the facts: upstream by upstream, peer by peer.
                let mut at = 0;
                for u in &checked {
                    let c = u.check.unwrap();
                    for p in &u.peers {
                        prop_assert_eq!(z.default_down[at], c.default_down);
                        let port = if c.port == 0 { p.port } else { c.port };
                        prop_assert_eq!(
                            z.identities[at],
                            identity_hash(group.as_str(), u.name, p.name, c.check_type.as_str(), port)
                        );
                        at += 1;
                    }
                }
            }
        }

        // Upstreams without `check` or `check_keepalive_requests` change
        // nothing but the indices.
        let kept: Vec<usize> = (0..facts.len())
            .filter(|&i| facts[i].check.is_some() || facts[i].keepalive_requests.is_some())
            .collect();
        let fewer: Vec<UpstreamFacts<'_>> = kept.iter().map(|&i| facts[i].clone()).collect();
        let g = finish_context(group, &fewer, &[], shm, required);
        let reindex = |d: &Diagnostic| Diagnostic {
            at: match d.at {
                Directive::Check(i) => Directive::Check(kept[i]),
                Directive::KeepaliveRequests(i) => Directive::KeepaliveRequests(kept[i]),
                Directive::HttpSend(i) => Directive::HttpSend(kept[i]),
                Directive::HttpRequest(i) => Directive::HttpRequest(kept[i]),
                Directive::HttpHeader(i) => Directive::HttpHeader(kept[i]),
                Directive::HttpExpectAlive(i) => Directive::HttpExpectAlive(kept[i]),
                Directive::ShmSize => Directive::ShmSize,
                Directive::Match(j) => Directive::Match(j),
                Directive::FailOpen(i) => Directive::FailOpen(kept[i]),
                Directive::Tls(i, d) => Directive::Tls(kept[i], d),
            },
            error: d.error.clone(),
        };
        prop_assert_eq!(g.warnings.iter().map(reindex).collect::<Vec<_>>(), f.warnings);
        prop_assert_eq!(g.result.map_err(|d| reindex(&d)), f.result);
    }
}

/// An upstream for the http rules: (check line index or none, the four
/// directive flags).
type HttpSpec = (Option<usize>, (bool, bool, bool, bool));

const HTTP_CHECKS: [&str; 7] = [
    "type=tcp",
    "type=udp",
    "type=http",
    "type=http match=web",
    "type=http match=raw",
    "type=tcp match=raw",
    "type=http match=missing",
];

/// The oracle of rules 4 to 7 for one upstream: its error, or its warning.
fn http_oracle(
    i: usize,
    c: Option<&CheckConf>,
    h: HttpDirectives,
    web_ok: bool,
) -> Result<Option<Directive>, Directive> {
    let is_http = c.is_some_and(|c| c.check_type == CheckType::Http);
    if !is_http {
        if h.send {
            return Err(Directive::HttpSend(i));
        }
        if h.request {
            return Err(Directive::HttpRequest(i));
        }
        if h.header {
            return Err(Directive::HttpHeader(i));
        }
        if h.expect_alive {
            return Err(Directive::HttpExpectAlive(i));
        }
    }
    if h.send && (h.request || h.header) {
        return Err(Directive::HttpSend(i));
    }
    let Some(m) = c.and_then(|c| c.match_block.as_deref()) else {
        return Ok(None);
    };
    let fits = match (m, c.unwrap().check_type) {
        (b"web", CheckType::Http) => web_ok,
        (b"raw", CheckType::Tcp | CheckType::Udp) => true,
        _ => false,
    };
    if !fits {
        return Err(Directive::Check(i));
    }
    Ok(h.expect_alive.then_some(Directive::HttpExpectAlive(i)))
}

proptest! {
    #[test]
    fn http_rules_hold_for_any_context(
        specs in proptest::collection::vec(
            (proptest::option::of(0..HTTP_CHECKS.len()), any::<(bool, bool, bool, bool)>()),
            0..6,
        ),
        web_ok: bool,
    ) {
        let specs: Vec<HttpSpec> = specs;
        let checks: Vec<CheckConf> = HTTP_CHECKS.iter().map(|l| check(l)).collect();
        let names: Vec<String> = (0..specs.len()).map(|i| format!("u{i}")).collect();
        let blocks = [
            block("web", &[if web_ok { "status 200" } else { "send x" }]),
            block("raw", &["send x", "expect y"]),
        ];
        let facts: Vec<UpstreamFacts<'_>> = specs
            .iter()
            .enumerate()
            .map(|(i, &(c, (send, request, header, expect_alive)))| UpstreamFacts {
                name: names[i].as_bytes(),
                check: c.map(|c| &checks[c]),
                keepalive_requests: None,
                peers: vec![peer("p:1", 1)],
                http: http(send, request, header, expect_alive),
                fail_open: false,
                tls: TlsDirectives::default(),
        resolve_lines: 0,
            })
            .collect();
        let f = finish_context(Group::Stream, &facts, &blocks, None, required);
        let mut warned = Vec::new();
        let mut error = None;
        for (i, u) in facts.iter().enumerate() {
            match http_oracle(i, u.check, u.http, web_ok) {
                Ok(w) => warned.extend(w),
                Err(d) => { error = Some(d); break; }
            }
        }
        prop_assert_eq!(f.warnings.iter().map(|d| d.at).collect::<Vec<_>>(), warned);
        prop_assert_eq!(f.result.as_ref().err().map(|d| d.at), error);
        for d in f.warnings.iter().chain(f.result.as_ref().err()) {
            prop_assert!(!d.error.0.contains('\n'));
            let named = facts.iter().any(|u| d.error.0.contains(&format!("upstream \"{}\"", String::from_utf8_lossy(u.name))));
            prop_assert!(named, "{}", d.error);
        }
    }
}

#[test]
fn resolve_lines_get_room_by_default_or_what_check_shm_size_leaves() {
    let c = check("interval=1000");
    let mut u = ups("u", Some(&c), None, vec![peer("a", 1)]);
    u.resolve_lines = 2;
    let z = finish(Group::Http, &[u.clone()], None).result.unwrap();
    assert_eq!(z.dynamic, 2 * RESOLVE_ROOM);
    assert_eq!(z.size, required(1, 2 * RESOLVE_ROOM));
    assert_eq!(z.tags, vec![crate::identity::upstream_tag("http", b"u")]);
    // check_shm_size: the rest of the zone, whatever it is.
    let z = finish(Group::Http, &[u.clone()], Some(4096 * 13))
        .result
        .unwrap();
    assert_eq!(z.dynamic, 10);
    let z = finish(Group::Http, &[u.clone()], Some(4096 * 3))
        .result
        .unwrap();
    assert_eq!(
        z.dynamic, 0,
        "no room left: every resolved address unchecked"
    );
    // Without resolve lines, no room.
    u.resolve_lines = 0;
    let z = finish(Group::Http, &[u], Some(4096 * 13)).result.unwrap();
    assert_eq!((z.dynamic, z.tags.len()), (0, 0));
}
