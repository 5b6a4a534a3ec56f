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
        outlier: None,
        written: Written::default(),
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
            initial: vec![],
            outlier: vec![],
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
fn keepalive_requests_above_one_keeps_an_http_checks_connection_unless_the_line_says() {
    let parsed = |line: &str| {
        let args: Vec<&[u8]> = line.split_whitespace().map(str::as_bytes).collect();
        crate::conf::parse_check_warned(&args).unwrap()
    };
    let web = parsed("type=http interval=1000");
    let kept = keepalive_reuse(&web.conf, web.written, Some(10)).expect("kept");
    assert_eq!(kept.reuse, Reuse::On);
    assert_eq!(kept.rehandshake_ms, kept.reuse_period_ms());
    // n = 1, no directive, a tcp check, or a line that says reuse=off or
    // keepalive=off: nothing changes.
    assert_eq!(keepalive_reuse(&web.conf, web.written, Some(1)), None);
    assert_eq!(keepalive_reuse(&web.conf, web.written, None), None);
    let tcp = parsed("type=tcp");
    assert_eq!(keepalive_reuse(&tcp.conf, tcp.written, Some(10)), None);
    for line in [
        "type=http reuse=off",
        "type=https keepalive=off",
        "type=http reuse=on",
    ] {
        let c = parsed(line);
        assert!(c.written.connection, "{line}");
        assert_eq!(
            keepalive_reuse(&c.conf, c.written, Some(10)),
            None,
            "{line}"
        );
    }
    // The rule sees it: no warning for the implied keep, one for reuse=off.
    let off = parsed("type=http reuse=off");
    let mut a = ups(
        "implied",
        Some(&web.conf),
        Some(10),
        vec![peer("127.0.0.1:1", 1)],
    );
    a.written = web.written;
    let mut b = ups(
        "off",
        Some(&off.conf),
        Some(10),
        vec![peer("127.0.0.1:1", 1)],
    );
    b.written = off.written;
    let f = finish(Group::Http, &[a, b], None);
    assert_eq!(
        messages(&f.warnings),
        [(
            Directive::KeepaliveRequests(1),
            "\"check_keepalive_requests\" has no effect in upstream \"off\": its check is not reuse=on"
        )]
    );
}

#[test]
fn keepalive_requests_1_is_the_c_modules_default_and_says_so() {
    let plain = check("interval=1000 type=http");
    let f = finish(
        Group::Http,
        &[ups("u", Some(&plain), Some(1), vec![])],
        None,
    );
    assert_eq!(
        f.warnings[0].error.to_string(),
        "\"check_keepalive_requests\" has no effect in upstream \"u\": 1 round per connection \
         is what its check does; remove it"
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
fn port_with_a_unix_server_warns_and_checks_it_on_its_own_address() {
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
        let g = group.as_str();
        assert_eq!(
            f.result.as_ref().unwrap().identities,
            [
                identity_hash(g, b"tcp", b"127.0.0.1:5", "tcp", 8080),
                identity_hash(g, b"u", b"127.0.0.1:5", "tcp", 8080),
                identity_hash(g, b"u", b"unix:/tmp/x.sock", "tcp", 0),
                identity_hash(g, b"u", b"unix:/tmp/y.sock", "tcp", 0),
                identity_hash(g, b"later", b"unix:/tmp/z.sock", "tcp", 0),
            ],
            "the IP peers are checked on port 8080, the unix ones on their own address"
        );
        assert_eq!(
            messages(&f.warnings),
            [
                (
                    Directive::Check(1),
                    "\"check\" ignores \"port=8080\" for the unix-socket server \
                     \"unix:/tmp/x.sock\" of upstream \"u\": it has no port and is checked \
                     on its own address"
                ),
                (
                    Directive::Check(1),
                    "\"check\" ignores \"port=8080\" for the unix-socket server \
                     \"unix:/tmp/y.sock\" of upstream \"u\": it has no port and is checked \
                     on its own address"
                ),
                (
                    Directive::Check(2),
                    "\"check\" ignores \"port=8080\" for the unix-socket server \
                     \"unix:/tmp/z.sock\" of upstream \"later\": it has no port and is \
                     checked on its own address"
                ),
            ]
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
    let mut bad = ups("u", Some(&port), Some(2), vec![unix("unix:/tmp/x.sock")]);
    bad.http.fastcgi_param = true;
    let u = [
        ups("w", None, Some(3), vec![]),
        bad,
        ups("k", None, Some(3), vec![]),
    ];
    let f = finish(Group::Http, &u, Some(1));
    assert_eq!(
        f.warnings.iter().map(|d| d.at).collect::<Vec<_>>(),
        [
            Directive::KeepaliveRequests(0),
            Directive::KeepaliveRequests(1),
            Directive::Check(1),
        ],
        "an upstream's own warnings come before its error"
    );
    assert_eq!(
        f.result.unwrap_err().at,
        Directive::FastcgiParam(1),
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
        z.initial.iter().map(|i| i.down()).collect::<Vec<_>>(),
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
        outlier: None,
        written: Written::default(),
    }];
    let f = finish(Group::Http, &u, None);
    assert!(f.warnings[0].error.0.contains("upstream \"up\u{fffd}\":"));
    let w = &f.warnings[1].error.0;
    assert!(w.contains("of upstream \"up\u{fffd}\":"), "{w}");
    assert!(w.contains("server \"unix:/tmp/\u{fffd}.sock\" of"), "{w}");
}

mod http_and_match;
mod properties;
use http_and_match::*;
