use super::*;

// ---- properties ----------------------------------------------------------

/// One argument per parameter: mostly plausible values, some wrong ones.
pub(super) fn argument(name: &'static str) -> BoxedStrategy<String> {
    let values: BoxedStrategy<String> = match name {
        "interval" => prop_oneof![
            (100u64..20_000).prop_map(|n| n.to_string()),
            (1u64..30).prop_map(|n| format!("{n}s")),
            (50u64..3_000).prop_map(|n| format!("{n}ms")),
            Just("1m".to_string()),
            Just("1d".to_string()),
            Just("99".to_string()),
        ]
        .boxed(),
        "timeout" => prop_oneof![
            (0u64..25_000).prop_map(|n| n.to_string()),
            (1u64..30).prop_map(|n| format!("{n}s")),
        ]
        .boxed(),
        "down_interval" => prop_oneof![
            (100u64..20_000).prop_map(|n| n.to_string()),
            (1u64..30).prop_map(|n| format!("{n}s")),
            Just("99".to_string()),
        ]
        .boxed(),
        "jitter" => prop_oneof![
            (0u64..20_000).prop_map(|n| n.to_string()),
            (0u64..3_000).prop_map(|n| format!("{n}ms")),
        ]
        .boxed(),
        "fall" | "rise" => (0u32..12).prop_map(|n| n.to_string()).boxed(),
        "default_down" => prop_oneof![Just("true"), Just("false")]
            .prop_map(String::from)
            .boxed(),
        "type" => prop_oneof![Just("tcp"), Just("tcp"), Just("udp"), Just("http")]
            .prop_map(String::from)
            .boxed(),
        "match" => prop_oneof![Just("m"), Just("ok_200"), Just("")]
            .prop_map(String::from)
            .boxed(),
        "port" => (0u32..70_000).prop_map(|n| n.to_string()).boxed(),
        "passive_fall" => (0u32..12).prop_map(|n| n.to_string()).boxed(),
        "reuse" => prop_oneof![
            Just("off".to_string()),
            Just("on".to_string()),
            (0u64..120).prop_map(|n| n.to_string()),
            (0u64..5).prop_map(|n| format!("{n}m")),
        ]
        .boxed(),
        _ => {
            let secs = || {
                prop_oneof![
                    Just(String::new()),
                    (0u64..70).prop_map(|n| n.to_string()),
                    (0u64..70).prop_map(|n| format!("{n}s")),
                ]
            };
            let first = prop_oneof![
                Just(String::new()),
                Just("on".to_string()),
                Just("off".to_string()),
                (0u64..120).prop_map(|n| n.to_string()),
            ];
            prop_oneof![
                Just("off".to_string()),
                Just("on".to_string()),
                (first, secs(), secs(), 0u32..130, 1usize..=4).prop_map(|(a, b, c, d, n)| {
                    let fields = [a, b, c, d.to_string()];
                    fields[..n].join(":")
                }),
            ]
            .boxed()
        }
    };
    values.prop_map(move |v| format!("{name}={v}")).boxed()
}

/// A set of distinct parameters in canonical order.
pub(super) fn arguments() -> impl Strategy<Value = Vec<String>> {
    let all: Vec<BoxedStrategy<Option<String>>> = PARAMETERS
        .iter()
        .map(|&name| proptest::option::weighted(0.5, argument(name)).boxed())
        .collect();
    all.prop_map(|args| {
        let mut args: Vec<String> = args.into_iter().flatten().collect();
        if args.is_empty() {
            args.push("type=tcp".into());
        }
        args
    })
}

/// Whether the first pass rejects `arg` (malformed or out of range),
/// whatever the other arguments are.
pub(super) fn wrong_on_its_own(arg: &str) -> bool {
    Params::default().add(arg.as_bytes()).is_err()
}

pub(super) fn parse_strings(args: &[String]) -> Result<CheckConf, ConfError> {
    let args: Vec<&[u8]> = args.iter().map(String::as_bytes).collect();
    parse_check(&args)
}

/// Every rule an accepted configuration must satisfy.
pub(super) fn assert_invariants(c: &CheckConf) -> Result<(), TestCaseError> {
    prop_assert!((INTERVAL_MIN_MS..=INTERVAL_MAX_MS).contains(&c.interval_ms));
    prop_assert!(c.timeout_ms >= 1);
    prop_assert!(c.period_ms(true) == c.interval_ms.max(c.timeout_ms));
    prop_assert!(c.timeout_ms <= TIMEOUT_MAX_MS);
    // Every interval in force bounds the jitter; the round's budget may
    // pass it (with a warning), which stretches the period.
    if let Some(d) = c.down_interval_ms {
        prop_assert!((INTERVAL_MIN_MS..=INTERVAL_MAX_MS).contains(&d));
    }
    for up in [true, false] {
        prop_assert!(c.jitter_ms < c.interval_for(up));
        prop_assert!(c.period_ms(up) >= c.interval_for(up).max(c.timeout_ms));
    }
    prop_assert!((1..=RISE_FALL_MAX).contains(&c.fall));
    prop_assert!((1..=RISE_FALL_MAX).contains(&c.rise));
    prop_assert_eq!(c.rehandshake_ms.is_some(), c.keeps_connection());
    prop_assert!(c.match_block.as_ref().map_or(true, |m| !m.is_empty()));
    if c.check_type == CheckType::Udp {
        prop_assert_eq!(c.reuse, Reuse::Off);
        prop_assert_eq!(c.keepalive, None);
    }
    if let Reuse::Period { ms } = c.reuse {
        prop_assert!(ms > c.interval_ms && ms <= PERIOD_MAX_MS);
    }
    if let Some(reuse) = c.reuse_period_ms() {
        prop_assert!(c.rehandshake_ms.is_some_and(|p| p <= reuse));
    }
    if let Some(p) = c.rehandshake_ms {
        prop_assert!(p > c.interval_ms);
        prop_assert!(p == u64::MAX || p <= PERIOD_MAX_MS);
    }
    if let Some(k) = c.keepalive {
        prop_assert!((1..=KEEPALIVE_IDLE_MAX_S).contains(&k.idle_s));
        prop_assert!(k.intvl_s >= 1 && k.intvl_s <= k.idle_s);
        prop_assert!((1..=KEEPALIVE_CNT_MAX).contains(&k.cnt));
        let p = c.rehandshake_ms.unwrap_or(0);
        prop_assert!(u64::from(k.idle_s) * 1000 < p);
    }
    Ok(())
}

proptest! {
    #[test]
    fn never_panics_on_arbitrary_bytes(
        args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..24), 0..6)
    ) {
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        if let Ok(c) = parse_check(&args) {
            assert_invariants(&c)?;
        }
    }

    #[test]
    fn never_panics_on_near_miss_text(
        args in proptest::collection::vec(
            "(interval|timeout|down_interval|jitter|fall|rise|port|reuse|keepalive|type|default_down|match)=[0-9a-z:]{0,12}",
            1..6,
        )
    ) {
        if let Ok(c) = parse_strings(&args) {
            assert_invariants(&c)?;
        }
    }

    #[test]
    fn accepted_configurations_satisfy_invariants(args in arguments()) {
        if let Ok(c) = parse_strings(&args) {
            assert_invariants(&c)?;
        }
    }

    #[test]
    fn order_never_matters(
        (args, shuffled) in arguments().prop_flat_map(|a| (Just(a.clone()), Just(a).prop_shuffle()))
    ) {
        let a = parse_strings(&args);
        let b = parse_strings(&shuffled);
        match (&a, &b) {
            (Ok(x), Ok(y)) => prop_assert_eq!(x, y),
            (Err(_), Err(_)) => {}
            _ => prop_assert!(false, "{:?} -> {:?} but {:?} -> {:?}", args, a, shuffled, b),
        }
        // With at most one argument wrong on its own, even the message is
        // the same: cross-parameter checks run in a fixed order.
        let own_errors = args.iter().filter(|arg| wrong_on_its_own(arg)).count();
        if own_errors <= 1 {
            prop_assert_eq!(a, b);
        }
    }

    #[test]
    fn duplicating_any_argument_is_an_error(args in arguments(), pick: prop::sample::Index) {
        let mut args = args;
        let dup = args[pick.index(args.len())].clone();
        args.push(dup.clone());
        let name = dup.split('=').next().unwrap_or_default().to_string();
        let e = parse_strings(&args).unwrap_err().to_string();
        // Unless an earlier argument is wrong on its own, the repeat is named.
        if !args.iter().any(|a| wrong_on_its_own(a)) {
            prop_assert_eq!(e, format!("invalid parameter \"{dup}\": {name} is given twice"));
        }
    }

    #[test]
    fn http_parses_as_tcp_but_for_the_type(args in arguments()) {
        // Any list without a type=: type=http and type=tcp accept the same
        // lists with the same values (and the same message when wrong).
        let args: Vec<String> = args.into_iter().filter(|a| !a.starts_with("type=")).collect();
        let with = |ty: &str| {
            let mut a = args.clone();
            a.push(format!("type={ty}"));
            parse_strings(&a)
        };
        let (http, tcp) = (with("http"), with("tcp"));
        prop_assert_eq!(http, tcp.map(|c| c.with_type(CheckType::Http)));
    }

    #[test]
    fn omitted_timeout_fits_the_shorter_interval(
        interval in INTERVAL_MIN_MS..=INTERVAL_MAX_MS,
        down in INTERVAL_MIN_MS..=INTERVAL_MAX_MS,
    ) {
        let c = parse_strings(&[format!("interval={interval}"), format!("down_interval={down}")])
            .unwrap();
        let shortest = interval.min(down);
        prop_assert_eq!(c.timeout_ms, (shortest - shortest / 10).min(5_000));
        prop_assert_eq!(c.interval_for(true), interval);
        prop_assert_eq!(c.interval_for(false), down);
        assert_invariants(&c)?;
    }

    #[test]
    fn jitter_is_accepted_exactly_below_every_interval(
        interval in INTERVAL_MIN_MS..200_000,
        down in proptest::option::of(INTERVAL_MIN_MS..200_000),
        jitter in 0u64..200_000,
    ) {
        let mut args = vec![format!("interval={interval}"), format!("jitter={jitter}")];
        args.extend(down.map(|d| format!("down_interval={d}")));
        let limit = interval.min(down.unwrap_or(u64::MAX));
        match parse_strings(&args) {
            Ok(c) => {
                prop_assert!(jitter < limit);
                prop_assert_eq!(c.jitter_ms, jitter);
                assert_invariants(&c)?;
            }
            Err(e) => {
                prop_assert!(jitter >= limit, "{}", e);
                let name = if jitter >= interval { "interval" } else { "down_interval" };
                prop_assert_eq!(
                    e.to_string(),
                    format!(
                        "invalid parameter \"jitter={jitter}\": jitter must be less than \
                         {name} ({} ms)",
                        if name == "interval" { interval } else { limit }
                    )
                );
            }
        }
    }

    #[test]
    fn omitted_timeout_follows_the_formula(interval in INTERVAL_MIN_MS..=INTERVAL_MAX_MS) {
        let c = parse_strings(&[format!("interval={interval}")]).unwrap();
        prop_assert_eq!(c.timeout_ms, (interval - interval / 10).min(5_000));
        prop_assert!(c.timeout_ms < c.interval_ms);
    }

    #[test]
    fn keepalive_on_always_fits_without_reuse(interval in INTERVAL_MIN_MS..=INTERVAL_MAX_MS) {
        // The default period max(30s, 2 * interval) always leaves room for
        // ceil(interval in s) or at least 1 s.
        let c = parse_strings(&[format!("interval={interval}"), "keepalive=on".into()]).unwrap();
        assert_invariants(&c)?;
        let want = interval.div_ceil(1000).min(u64::from(KEEPALIVE_IDLE_MAX_S));
        let below = (c.rehandshake_ms.unwrap() - 1) / 1000;
        prop_assert_eq!(u64::from(c.keepalive.unwrap().idle_s), want.min(below));
    }
}
