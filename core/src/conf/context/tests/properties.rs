use super::*;

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

pub(super) const CHECKS: [&str; 6] = [
    "interval=1000",
    "interval=1000 reuse=on",
    "interval=1000 port=8080",
    "interval=1000 reuse=on port=80",
    "type=udp default_down=true",
    "interval=1000 reuse=2s",
];

/// (check line index or none, keepalive_requests, peers as (unix, port)).
pub(super) type Spec = (Option<usize>, Option<u32>, Vec<(bool, u16)>);

pub(super) fn spec() -> impl Strategy<Value = Spec> {
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
        outlier: None,
        written: Written::default(),
            })
            .collect();
        let f = finish_context(group, &facts, &[], shm, required);

        // `port=` with a unix server: a warning per such server, after the
        // keepalive_requests one of the upstream.
        let bad: Option<usize> = None;
        let mut warned: Vec<Directive> = Vec::new();
        for (i, u) in facts.iter().enumerate() {
            if u.keepalive_requests.is_some() && u.check.map(|c| c.reuse) != Some(Reuse::On) {
                warned.push(Directive::KeepaliveRequests(i));
            }
            if u.check.is_some_and(|c| c.port != 0) {
                warned.extend(u.peers.iter().filter(|p| p.unix).map(|_| Directive::Check(i)));
            }
        }
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
                prop_assert_eq!(z.initial.len(), n);
                // Slots follow the facts: upstream by upstream, peer by peer.
                let mut at = 0;
                for u in &checked {
                    let c = u.check.unwrap();
                    for p in &u.peers {
                        prop_assert_eq!(z.initial[at], c.initial());
                        let port = if c.port == 0 || p.unix { p.port } else { c.port };
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
            at: d.at.of_upstream(|i| kept[i]),
            error: d.error.clone(),
        };
        prop_assert_eq!(g.warnings.iter().map(reindex).collect::<Vec<_>>(), f.warnings);
        prop_assert_eq!(g.result.map_err(|d| reindex(&d)), f.result);
    }
}

/// An upstream for the http rules: (check line index or none, the four
/// directive flags).
pub(super) type HttpSpec = (Option<usize>, (bool, bool, bool, bool));

pub(super) const HTTP_CHECKS: [&str; 7] = [
    "type=tcp",
    "type=udp",
    "type=http",
    "type=http match=web",
    "type=http match=raw",
    "type=tcp match=raw",
    "type=http match=missing",
];

/// The oracle of rules 4 to 7 for one upstream: its warnings (those found
/// before an error included) and its error.
pub(super) fn http_oracle(
    i: usize,
    c: Option<&CheckConf>,
    h: HttpDirectives,
    web_ok: bool,
) -> (Vec<Directive>, Result<(), Directive>) {
    let mut warned = Vec::new();
    let r = http_oracle_into(i, c, h, web_ok, &mut warned);
    (warned, r)
}

fn http_oracle_into(
    i: usize,
    c: Option<&CheckConf>,
    h: HttpDirectives,
    web_ok: bool,
    warned: &mut Vec<Directive>,
) -> Result<(), Directive> {
    let Some(conf) = c else {
        // Without check nothing applies: each directive has no effect.
        let given = [
            (h.send, Directive::HttpSend(i)),
            (h.request, Directive::HttpRequest(i)),
            (h.header, Directive::HttpHeader(i)),
            (h.expect_alive, Directive::HttpExpectAlive(i)),
        ];
        warned.extend(given.iter().filter(|g| g.0).map(|g| g.1));
        return Ok(());
    };
    let t = Some(conf.check_type);
    let is_http = t == Some(CheckType::Http);
    // check_http_send is also the bytes of tcp and the datagram of udp.
    if h.send && !matches!(t, Some(CheckType::Http | CheckType::Tcp | CheckType::Udp)) {
        return Err(Directive::HttpSend(i));
    }
    if !is_http {
        if h.request {
            return Err(Directive::HttpRequest(i));
        }
        if h.header {
            return Err(Directive::HttpHeader(i));
        }
        if h.expect_alive {
            // No HTTP status to judge: no effect.
            warned.push(Directive::HttpExpectAlive(i));
        }
    }
    if h.send && (h.request || h.header) {
        return Err(Directive::HttpSend(i));
    }
    // ... and never with a block that sends ("web" sends when it is no
    // http block).
    let sends = match c.and_then(|c| c.match_block.as_deref()) {
        Some(b"raw") => true,
        Some(b"web") => !web_ok,
        _ => false,
    };
    if h.send && sends {
        return Err(Directive::HttpSend(i));
    }
    let Some(m) = c.and_then(|c| c.match_block.as_deref()) else {
        return Ok(());
    };
    let fits = match (m, c.unwrap().check_type) {
        (b"web", CheckType::Http) => web_ok,
        (b"raw", CheckType::Tcp | CheckType::Udp) => true,
        _ => false,
    };
    if !fits {
        return Err(Directive::Check(i));
    }
    if is_http && h.expect_alive {
        warned.push(Directive::HttpExpectAlive(i));
    }
    Ok(())
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
        outlier: None,
        written: Written::default(),
            })
            .collect();
        let f = finish_context(Group::Stream, &facts, &blocks, None, required);
        let mut warned = Vec::new();
        let mut error = None;
        for (i, u) in facts.iter().enumerate() {
            let (w, r) = http_oracle(i, u.check, u.http, web_ok);
            warned.extend(w);
            if let Err(d) = r {
                error = Some(d);
                break;
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
