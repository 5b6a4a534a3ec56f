use super::*;

#[test]
fn http_type() {
    let c = ok("type=http");
    assert_eq!(c.check_type, CheckType::Http);
    assert_eq!(c.match_block, None);
    assert!(!c.keeps_connection());
    let base = ok("type=tcp");
    assert_eq!(
        c,
        CheckConf {
            check_type: CheckType::Http,
            ..base
        },
        "the same defaults as tcp"
    );
}

#[test]
fn reuse_and_keepalive_are_allowed_with_http() {
    let c = ok("type=http interval=1000 reuse=on");
    assert_eq!((c.reuse, c.rehandshake_ms), (Reuse::On, Some(30_000)));
    let c = ok("keepalive=on type=http");
    assert_eq!(c.keepalive, ka(5, 1, 3));
    let c = ok("type=http interval=1500 reuse=2s keepalive=on");
    assert_eq!(
        c,
        ok("type=tcp interval=1500 reuse=2s keepalive=on").with_type(CheckType::Http)
    );
    // The rules that involve interval apply as for tcp.
    assert_eq!(
        err("type=http interval=1000 reuse=1s"),
        "invalid parameter \"reuse=1s\": \
         reuse period (1000 ms) must be greater than interval (1000 ms)"
    );
}

#[test]
fn match_names_a_block_for_any_type() {
    for ty in ["tcp", "udp", "http"] {
        let c = ok(&format!("type={ty} match=ok_200"));
        assert_eq!(c.match_block.as_deref(), Some(&b"ok_200"[..]), "type={ty}");
    }
    assert_eq!(ok("match=m").check_type, CheckType::Tcp);
    // The name is taken as written (nginx has unquoted it).
    let c = parse_check(&[b"match=a=b", b"type=http"]).unwrap();
    assert_eq!(c.match_block.as_deref(), Some(&b"a=b"[..]));
    let c = parse_check(&[b"match=\xff"]).unwrap();
    assert_eq!(c.match_block.as_deref(), Some(&b"\xff"[..]));
    // A bad name is named as written.
    assert_eq!(
        err("type=http match="),
        "invalid parameter \"match=\": match must name a check_match block (match=NAME)"
    );
}

#[test]
fn off_values_are_allowed_with_udp() {
    let c = ok("type=udp reuse=off keepalive=off");
    assert_eq!(c.reuse, Reuse::Off);
    assert_eq!(c.keepalive, None);
    assert_eq!(c.rehandshake_ms, None);
    assert!(!c.keeps_connection());
}

#[test]
fn reuse_values() {
    let c = ok("reuse=off");
    assert_eq!((c.reuse, c.rehandshake_ms), (Reuse::Off, None));
    // reuse=on: max(30s, 2 * interval)
    assert_eq!(ok("reuse=on").rehandshake_ms, Some(30_000));
    assert_eq!(ok("interval=15000 reuse=on").rehandshake_ms, Some(30_000));
    assert_eq!(ok("interval=15001 reuse=on").rehandshake_ms, Some(30_002));
    assert_eq!(ok("interval=1d reuse=on").rehandshake_ms, Some(172_800_000));
    // A time value is seconds syntax.
    for (value, ms) in [
        ("6", 6_000),
        ("6s", 6_000),
        ("5m", 300_000),
        ("1h", 3_600_000),
        ("1m30", 90_000),
        ("1d", 86_400_000),
        ("1w", PERIOD_MAX_MS),
        ("7d", PERIOD_MAX_MS),
    ] {
        let c = ok(&format!("reuse={value}"));
        assert_eq!(c.reuse, Reuse::Period { ms }, "reuse={value}");
        assert_eq!(c.rehandshake_ms, Some(ms), "reuse={value}");
        assert_eq!(c.keepalive, None);
        assert!(c.keeps_connection());
    }
    assert_eq!(
        ok("interval=5000 reuse=5001").rehandshake_ms,
        Some(5_001_000)
    );
    assert_eq!(ok("interval=4999 reuse=5").rehandshake_ms, Some(5_000));
}

#[test]
fn keepalive_field_forms() {
    let period = |line: &str| ok(line).rehandshake_ms;
    let kernel = |line: &str| ok(line).keepalive;

    // off disables; off: enables without an age limit.
    assert_eq!(kernel("keepalive=off"), None);
    assert_eq!(period("keepalive=off"), None);
    assert_eq!(kernel("keepalive=off:"), ka(5, 1, 3));
    assert_eq!(period("keepalive=off:"), Some(u64::MAX));
    // `:` and `on:` equal `on`.
    for v in ["on", ":", "on:", "::", ":::", "on:::"] {
        assert_eq!(
            ok(&format!("keepalive={v}")),
            ok("keepalive=on"),
            "keepalive={v}"
        );
    }
    // Explicit fields.
    assert_eq!(kernel("keepalive=60"), ka(5, 1, 3));
    assert_eq!(period("keepalive=60"), Some(60_000));
    assert_eq!(kernel("keepalive=off:10"), ka(10, 1, 3));
    assert_eq!(kernel("keepalive=off:10:2"), ka(10, 2, 3));
    assert_eq!(kernel("keepalive=off:10:2:9"), ka(10, 2, 9));
    assert_eq!(kernel("keepalive=off:::9"), ka(5, 1, 9));
    assert_eq!(kernel("keepalive=off::5"), ka(5, 5, 3));
    assert_eq!(kernel("keepalive=off:1m:30s:127"), ka(60, 30, 127));
    assert_eq!(kernel("keepalive=off:32767:32767:1"), ka(32_767, 32_767, 1));
    assert_eq!(kernel("keepalive=on:29"), ka(29, 1, 3));
    assert_eq!(kernel("keepalive=:29s"), ka(29, 1, 3));
    // idle must be below the effective period; 30 is not below 30 s.
    assert!(parse("keepalive=on:30").is_err());
}

#[test]
fn computed_idle() {
    let idle = |line: &str| ok(line).keepalive.map(|k| k.idle_s);
    // ceil(interval in s)
    assert_eq!(idle("interval=100 keepalive=on"), Some(1));
    assert_eq!(idle("interval=1000 keepalive=on"), Some(1));
    assert_eq!(idle("interval=1001 keepalive=on"), Some(2));
    assert_eq!(idle("interval=5000 keepalive=on"), Some(5));
    assert_eq!(idle("interval=20000 keepalive=off:"), Some(20));
    // ... capped at 32767 ...
    assert_eq!(idle("interval=1d keepalive=off:"), Some(32_767));
    assert_eq!(idle("interval=1d keepalive=on"), Some(32_767));
    // ... and strictly below the effective period, in whole seconds.
    assert_eq!(idle("interval=1500 reuse=2s keepalive=on"), Some(1));
    assert_eq!(idle("interval=1500 reuse=3 keepalive=on"), Some(2));
    assert_eq!(idle("interval=5000 reuse=6s keepalive=on"), Some(5));
    assert_eq!(idle("interval=5000 keepalive=6s"), Some(5));
    assert_eq!(idle("interval=9000 reuse=10 keepalive=off:"), Some(9));
    assert_eq!(idle("interval=9500 reuse=10 keepalive=off:"), Some(9));
    assert_eq!(idle("interval=900 reuse=1m keepalive=2"), Some(1));
}

#[test]
fn effective_period_is_the_smaller_one() {
    let period = |line: &str| ok(line).rehandshake_ms;
    assert_eq!(period("reuse=60 keepalive=30s:5s"), Some(30_000));
    assert_eq!(period("reuse=30 keepalive=60s:5s"), Some(30_000));
    assert_eq!(period("reuse=30 keepalive=off:5s"), Some(30_000));
    assert_eq!(period("reuse=on keepalive=off:"), Some(30_000));
    assert_eq!(period("reuse=off keepalive=off:"), Some(u64::MAX));
    assert_eq!(period("interval=20000 reuse=on keepalive=on"), Some(40_000));
    assert_eq!(period("interval=20000 reuse=on keepalive=50"), Some(40_000));
    assert_eq!(
        period("interval=20000 reuse=100 keepalive=on"),
        Some(40_000)
    );
    // The reuse period bounds an explicit keepalive idle too.
    assert!(parse("reuse=30 keepalive=60s:30s").is_err());
    assert!(parse("reuse=30 keepalive=60s:29s").is_ok());
}

#[test]
fn non_utf8_arguments_do_not_panic() {
    let e = parse_check(&[b"interval=\xff\xfe"]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid parameter \"interval=\\xff\\xfe\": \
         interval must be milliseconds or an nginx time (500ms, 3s)"
    );
    let e = parse_check(&[b"\xc3\x28=1"]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid parameter \"\\xc3(=1\": unknown parameter"
    );
    let e = parse_check(&["type=t\u{e9}p".as_bytes()]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid parameter \"type=t\u{e9}p\": unknown type \"t\u{e9}p\": did you mean \
         type=tcp? (types: tcp, udp, http, https, tls, ssl_hello, mysql, ajp, fastcgi, grpc, grpcs)"
    );
}

/// `down_interval=` and `jitter=` (docs/directives.md, check; docs/design.md, How rounds are scheduled).
#[test]
fn schedule_parameters() {
    let c = ok("interval=1000 down_interval=5s jitter=250ms");
    assert_eq!(
        (c.interval_ms, c.down_interval_ms, c.jitter_ms),
        (1_000, Some(5_000), 250)
    );
    assert_eq!(
        (c.interval_for(true), c.interval_for(false)),
        (1_000, 5_000)
    );
    assert_eq!(c.shortest_interval_ms(), 1_000);
    assert_eq!(c.timeout_ms, 900, "the default timeout fits both intervals");

    let c = ok("type=tcp");
    assert_eq!((c.down_interval_ms, c.jitter_ms), (None, 0));
    assert_eq!(c.interval_for(false), 5_000, "no down_interval: interval");

    // A shorter down_interval bounds the default timeout.
    let c = ok("interval=10000 down_interval=1000");
    assert_eq!((c.timeout_ms, c.shortest_interval_ms()), (900, 1_000));
    assert_eq!(ok("down_interval=100").timeout_ms, 90);
    // The bounds of interval.
    assert_eq!(
        ok("down_interval=86400000").down_interval_ms,
        Some(86_400_000)
    );
    assert_eq!(ok("down_interval=1d").down_interval_ms, Some(86_400_000));
    assert_eq!(ok("jitter=0").jitter_ms, 0);
    assert_eq!(ok("jitter=4999").jitter_ms, 4_999);
    assert_eq!(ok("interval=2s jitter=1s").jitter_ms, 1_000);
    assert_eq!(
        ok("interval=1000 down_interval=20s jitter=999").jitter_ms,
        999
    );

    for (line, message) in [
        (
            "down_interval=99",
            "invalid parameter \"down_interval=99\": down_interval must be at least 100 ms",
        ),
        (
            "down_interval=0",
            "invalid parameter \"down_interval=0\": down_interval must be at least 100 ms",
        ),
        (
            "down_interval=86400001",
            "invalid parameter \"down_interval=86400001\": \
             down_interval must be at most 86400000 ms (24h)",
        ),
        (
            "down_interval=1m30",
            "invalid parameter \"down_interval=1m30\": \
             down_interval must be milliseconds or an nginx time (500ms, 3s)",
        ),
        (
            "down_interval=",
            "invalid parameter \"down_interval=\": \
             down_interval must be milliseconds or an nginx time (500ms, 3s)",
        ),
        (
            "down_interval",
            "invalid parameter \"down_interval\": \
             down_interval requires a value (down_interval=...)",
        ),
        (
            "jitter=-1",
            "invalid parameter \"jitter=-1\": \
             jitter must be milliseconds or an nginx time (500ms, 3s)",
        ),
        (
            "jitter=2d",
            "invalid parameter \"jitter=2d\": jitter must be at most 86400000 ms (24h)",
        ),
        (
            "jitter",
            "invalid parameter \"jitter\": jitter requires a value (jitter=...)",
        ),
        (
            "jitter=5000",
            "invalid parameter \"jitter=5000\": jitter must be less than interval (5000 ms)",
        ),
        (
            "interval=1000 jitter=1s",
            "invalid parameter \"jitter=1s\": jitter must be less than interval (1000 ms)",
        ),
        (
            "interval=1000 down_interval=500 jitter=500",
            "invalid parameter \"jitter=500\": \
             jitter must be less than down_interval (500 ms)",
        ),
        (
            "jitter=600 down_interval=600 interval=10s",
            "invalid parameter \"jitter=600\": \
             jitter must be less than down_interval (600 ms)",
        ),
        (
            "down_interval=1s down_interval=2s",
            "invalid parameter \"down_interval=2s\": down_interval is given twice",
        ),
        (
            "jitter=1 jitter=1",
            "invalid parameter \"jitter=1\": jitter is given twice",
        ),
    ] {
        assert_eq!(err(line), message, "check {line}");
    }
}

#[test]
fn per_argument_errors_come_before_cross_checks() {
    // Both the timeout (cross) and the port (own value) are wrong: the
    // value error is reported whatever the order.
    for line in ["timeout=9000 port=0", "port=0 timeout=9000"] {
        assert_eq!(
            err(line),
            "invalid parameter \"port=0\": port must be from 1 to 65535"
        );
    }
}

/// `check_keepalive_time` replaces the default period of `reuse=on` and
/// of keepalive's default field; a period written on the line wins.
#[test]
fn keepalive_time_sets_the_default_period() {
    let with = |line: &str, kt: u64| {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        crate::conf::parse_check_with(&args, Some(kt)).map(|c| c.conf)
    };
    let c = with("type=http interval=1000 reuse=on", 600_000).unwrap();
    assert_eq!(c.rehandshake_ms, Some(600_000));
    let c = with("type=tcp interval=1000 keepalive=on", 600_000).unwrap();
    assert_eq!(c.rehandshake_ms, Some(600_000));
    let c = with("type=tcp interval=1000 reuse=5s", 600_000).unwrap();
    assert_eq!(c.rehandshake_ms, Some(5_000));
    let c = with("type=tcp interval=1000 reuse=on keepalive=20s", 600_000).unwrap();
    assert_eq!(c.rehandshake_ms, Some(20_000));
    assert_eq!(
        with("type=tcp interval=1000", 600_000)
            .unwrap()
            .rehandshake_ms,
        None
    );
    // The kernel keepalive idle is computed below the new period.
    assert!(with("type=tcp interval=1000 keepalive=on:1:1:1", 500).is_err());
}

#[test]
fn shared_is_on_unless_off() {
    assert!(ok("type=http").shared);
    assert!(ok("shared=on").shared);
    assert!(!ok("shared=off type=tcp").shared);
    let args: Vec<&[u8]> = vec![b"shared=yes"];
    assert_eq!(
        crate::conf::parse_check(&args).unwrap_err().0,
        "invalid parameter \"shared=yes\": shared must be on or off"
    );
}
