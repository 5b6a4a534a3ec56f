//! Tests of the cross-directive rules: every rule and message, their
//! order, the zone layout, and properties over generated contexts.

use proptest::prelude::*;

use super::*;
use crate::conf::parse_check;

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
    }
}

/// A stand-in for the zone's size rule: a page per peer and two more.
fn required(n: usize) -> usize {
    4096 * (n + 2)
}

fn finish(group: Group, u: &[UpstreamFacts<'_>], shm: Option<u64>) -> Finished {
    finish_context(group, u, shm, required)
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
            size: required(0),
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
fn unchecked_upstreams_are_not_checked_nor_counted() {
    // The glue collects peers only with `check`; whatever it passes for an
    // unchecked upstream is not looked at.
    let u = [ups(
        "u",
        None,
        None,
        vec![unix("unix:/tmp/x.sock"), peer("a", 1)],
    )];
    let f = finish(Group::Http, &u, Some(required(0) as u64));
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
    assert_eq!(z.size, required(8));
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
    let need = required(2);
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
    let f = finish_context(Group::Http, &u, Some(1024), |n| {
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
    let f = finish_context(Group::Stream, &[], Some(20479), |_| 20480);
    assert_eq!(
        f.result.unwrap_err().error.to_string(),
        "\"check_shm_size\" 20479 is too small for 0 checked stream peers: \
         at least 20480 bytes (20k) are needed"
    );
    // the kilobytes round up
    let f = finish_context(Group::Stream, &[], Some(1), |_| 20481);
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
    }];
    let f = finish(Group::Http, &u, None);
    assert!(f.warnings[0].error.0.contains("upstream \"up\u{fffd}\":"));
    let e = f.result.unwrap_err().error.0;
    assert!(e.contains("upstream \"up\u{fffd}\" has"), "{e}");
    assert!(e.contains("server \"unix:/tmp/\u{fffd}.sock\","), "{e}");
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
            })
            .collect();
        let f = finish_context(group, &facts, shm, required);

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
                prop_assert!(shm.is_some_and(|s| (s as usize) < required(n)));
            }
            (Ok(z), None) => {
                prop_assert!(shm.map_or(true, |s| s as usize >= required(n)));
                prop_assert_eq!(z.size, shm.map_or(required(n), |s| s as usize));
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
        let g = finish_context(group, &fewer, shm, required);
        let reindex = |d: &Diagnostic| Diagnostic {
            at: match d.at {
                Directive::Check(i) => Directive::Check(kept[i]),
                Directive::KeepaliveRequests(i) => Directive::KeepaliveRequests(kept[i]),
                Directive::ShmSize => Directive::ShmSize,
            },
            error: d.error.clone(),
        };
        prop_assert_eq!(g.warnings.iter().map(reindex).collect::<Vec<_>>(), f.warnings);
        prop_assert_eq!(g.result.map_err(|d| reindex(&d)), f.result);
    }
}
