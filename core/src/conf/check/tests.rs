//! Tests of the `check` directive: docs/directives.md's tables and examples, every
//! error message, and properties over generated argument lists.

use super::*;
use proptest::prelude::*;

/// Splits a directive's text (without `check` and `;`) into arguments.
fn parse(line: &str) -> Result<CheckConf, ConfError> {
    let args: Vec<&[u8]> = line.split_whitespace().map(str::as_bytes).collect();
    parse_check(&args)
}

fn ok(line: &str) -> CheckConf {
    parse(line).unwrap_or_else(|e| panic!("`check {line}` failed: {e}"))
}

fn err(line: &str) -> String {
    match parse(line) {
        Ok(conf) => panic!("`check {line}` parsed: {conf:?}"),
        Err(e) => e.to_string(),
    }
}

impl CheckConf {
    fn with_type(self, check_type: CheckType) -> CheckConf {
        CheckConf { check_type, ..self }
    }
}

fn ka(idle_s: u32, intvl_s: u32, cnt: u32) -> Option<KernelKeepalive> {
    Some(KernelKeepalive {
        idle_s,
        intvl_s,
        cnt,
    })
}

#[test]
fn defaults() {
    assert_eq!(
        ok("type=tcp"),
        CheckConf {
            interval_ms: 5_000,
            timeout_ms: 4_500,
            down_interval_ms: None,
            jitter_ms: 0,
            fall: 3,
            rise: 2,
            default_down: false,
            check_type: CheckType::Tcp,
            port: 0,
            reuse: Reuse::Off,
            keepalive: None,
            rehandshake_ms: None,
            match_block: None,
            passive_fall: 0,
        }
    );
    assert!(!ok("type=tcp").keeps_connection());
    assert_eq!(ok("type=udp").check_type, CheckType::Udp);
}

#[test]
fn passive_fall() {
    assert_eq!(ok("type=tcp").passive_fall, 0, "off by default");
    assert_eq!(ok("passive_fall=0").passive_fall, 0);
    assert_eq!(ok("passive_fall=5 type=http").passive_fall, 5);
    assert_eq!(ok("type=udp passive_fall=100000").passive_fall, 100_000);
    assert_eq!(
        err("passive_fall=100001"),
        "invalid parameter \"passive_fall=100001\": passive_fall must be from 0 to 100000"
    );
    assert_eq!(
        err("passive_fall=-1"),
        "invalid parameter \"passive_fall=-1\": passive_fall must be a plain decimal integer"
    );
    assert_eq!(
        err("passive_fall"),
        "invalid parameter \"passive_fall\": passive_fall requires a value (passive_fall=...)"
    );
    assert_eq!(
        err("passive_fall=2 passive_fall=3"),
        "invalid parameter \"passive_fall=3\": passive_fall is given twice"
    );
}

#[test]
fn empty_directive_is_an_error() {
    assert_eq!(
        parse_check(&[]).unwrap_err().to_string(),
        "invalid number of arguments in \"check\" directive"
    );
}

#[test]
fn default_timeout() {
    // min(5000, interval - interval / 10), integer division.
    for (interval, timeout) in [
        (100, 90),
        (101, 91),
        (109, 99),
        (1_000, 900),
        (1_500, 1_350),
        (3_000, 2_700),
        (5_000, 4_500),
        (5_555, 5_000),
        (5_556, 5_000),
        (20_000, 5_000),
        (86_400_000, 5_000),
    ] {
        assert_eq!(
            ok(&format!("interval={interval}")).timeout_ms,
            timeout,
            "interval={interval}"
        );
    }
    // An explicit timeout may exceed the default's 5000 cap.
    assert_eq!(ok("interval=20000 timeout=15000").timeout_ms, 15_000);
}

#[test]
fn millisecond_values() {
    let cases = [
        ("interval=100", 100),
        ("interval=3000", 3_000),
        ("interval=0003000", 3_000),
        ("interval=500ms", 500),
        ("interval=3s", 3_000),
        ("interval=1m30s", 90_000),
        ("interval=1s500ms", 1_500),
        ("interval=1h", 3_600_000),
        ("interval=1d", 86_400_000),
        ("interval=86400000", 86_400_000),
    ];
    for (line, interval) in cases {
        assert_eq!(ok(line).interval_ms, interval, "{line}");
    }
    assert_eq!(ok("timeout=1").timeout_ms, 1);
    assert_eq!(ok("timeout=2s").timeout_ms, 2_000);
    assert_eq!(ok("timeout=250ms").timeout_ms, 250);
}

#[test]
fn integer_values() {
    let c = ok("fall=1 rise=100000 port=65535");
    assert_eq!((c.fall, c.rise, c.port), (1, 100_000, 65_535));
    let c = ok("fall=007 rise=1 port=1");
    assert_eq!((c.fall, c.rise, c.port), (7, 1, 1));
    assert!(ok("default_down=true").default_down);
    assert!(!ok("default_down=false").default_down);
}

/// The computed values docs/directives.md lists (docs/directives.md, check).
#[test]
fn spec_table_of_computed_values() {
    let c = ok("interval=1000 timeout=900 reuse=30s keepalive=30s:5s:1s:3");
    assert_eq!(c.timeout_ms, 900);
    assert_eq!(c.rehandshake_ms, Some(30_000));
    assert_eq!(c.keepalive, ka(5, 1, 3));
    assert_eq!(c.reuse, Reuse::Period { ms: 30_000 });

    let c = ok("interval=1000 reuse=30s keepalive=off:5s:1s:3");
    assert_eq!(c.timeout_ms, 900);
    assert_eq!(c.rehandshake_ms, Some(30_000));
    assert_eq!(c.keepalive, ka(5, 1, 3));

    let c = ok("interval=1500 reuse=2s keepalive=on");
    assert_eq!(c.timeout_ms, 1_350);
    assert_eq!(c.rehandshake_ms, Some(2_000));
    assert_eq!(c.keepalive, ka(1, 1, 3));

    let c = ok("keepalive=on");
    assert_eq!(c.interval_ms, 5_000);
    assert_eq!(c.timeout_ms, 4_500);
    assert_eq!(c.rehandshake_ms, Some(30_000));
    assert_eq!(c.keepalive, ka(5, 1, 3));
    assert_eq!(c.reuse, Reuse::Off);
    assert!(c.keeps_connection());

    let c = ok("interval=20000 reuse=on");
    assert_eq!(c.timeout_ms, 5_000);
    assert_eq!(c.rehandshake_ms, Some(40_000));
    assert_eq!(c.keepalive, None);
    assert_eq!(c.reuse, Reuse::On);
    assert_eq!(c.reuse_period_ms(), Some(40_000));

    assert_eq!(
        err("interval=500 reuse=1s keepalive=on"),
        "invalid parameter \"keepalive=on\": \
         no positive keepalive idle fits below the rehandshake period of 1000 ms"
    );
}

/// Examples that must parse (docs/directives.md's among them).
#[test]
fn spec_examples_that_parse() {
    let c = ok("interval=3000 rise=2 fall=5 timeout=1000 default_down=true type=tcp");
    assert_eq!(
        c,
        CheckConf {
            interval_ms: 3_000,
            timeout_ms: 1_000,
            down_interval_ms: None,
            jitter_ms: 0,
            fall: 5,
            rise: 2,
            default_down: true,
            check_type: CheckType::Tcp,
            port: 0,
            reuse: Reuse::Off,
            keepalive: None,
            rehandshake_ms: None,
            match_block: None,
            passive_fall: 0,
        }
    );

    ok("interval=1000 timeout=900 type=tcp reuse=30s keepalive=30s:5s:1s:3");
    ok("interval=1000 type=tcp reuse=30s keepalive=off:5s:1s:3");

    let c = ok("interval=1500 type=tcp reuse=2s keepalive=on");
    assert_eq!(c.keepalive, ka(1, 1, 3), "idle shrinks to 1s");

    let c = ok("type=udp interval=3000 rise=2 fall=5 timeout=1000 default_down=true");
    assert_eq!(c.check_type, CheckType::Udp);
    assert_eq!(c.rehandshake_ms, None);

    let c = ok("interval=3000 rise=2 fall=5 timeout=1000 default_down=true type=tcp reuse=on");
    assert_eq!(c.reuse, Reuse::On);
    assert_eq!(c.rehandshake_ms, Some(30_000));

    let c = ok("interval=500 reuse=1s");
    assert_eq!(c.reuse, Reuse::Period { ms: 1_000 });
    assert_eq!(c.rehandshake_ms, Some(1_000));
    assert_eq!(c.keepalive, None);
}

/// Examples that must fail `nginx -t`, with their messages.
#[test]
fn spec_examples_that_fail() {
    let cases = [
        (
            "interval=3000 timeout=5000",
            "invalid parameter \"timeout=5000\": timeout must be less than interval (3000 ms)",
        ),
        (
            "interval=500 reuse=1s keepalive=on",
            "invalid parameter \"keepalive=on\": \
             no positive keepalive idle fits below the rehandshake period of 1000 ms",
        ),
        (
            "interval=1000 reuse=1s",
            "invalid parameter \"reuse=1s\": \
             reuse period (1000 ms) must be greater than interval (1000 ms)",
        ),
        (
            "interval=1000 reuse=30s keepalive=30s:30s",
            "invalid parameter \"keepalive=30s:30s\": \
             keepalive idle (30 s) must be less than the rehandshake period (30000 ms)",
        ),
        (
            "interval=1000 keepalive=30s:5s:6s",
            "invalid parameter \"keepalive=30s:5s:6s\": \
             keepalive intvl (6 s) must not exceed idle (5 s)",
        ),
        (
            "interval=1500 reuse=2s keepalive=::2s",
            "invalid parameter \"keepalive=::2s\": \
             keepalive intvl (2 s) must not exceed the computed idle (1 s)",
        ),
        (
            "type=udp reuse=on",
            "invalid parameter \"reuse=on\": reuse requires type=tcp or type=http",
        ),
        (
            "type=fastcgi",
            "invalid parameter \"type=fastcgi\": \
             type must be tcp, udp, http, https or tls (ssl_hello is tls)",
        ),
    ];
    for (line, message) in cases {
        assert_eq!(err(line), message, "check {line}");
    }
}

/// Arguments that are wrong on their own, grouped by the reason printed
/// after `invalid parameter "<arg>": `.
#[test]
fn single_parameter_errors() {
    let groups: &[(&[&str], &str)] = &[
        (
            &["interval=99", "interval=0", "interval=99ms"],
            "interval must be at least 100 ms",
        ),
        (
            &[
                "interval=abc",
                "interval=-1",
                "interval=+100",
                "interval=0x10",
                "interval=",
                "interval=1m30",
                "interval=1M",
                "interval=1y",
                "interval=3S",
                "interval=1.5s",
            ],
            "interval must be milliseconds or an nginx time (500ms, 3s)",
        ),
        (
            &[
                "interval=99999999999999999999",
                "interval=86400001",
                "interval=2d",
            ],
            "interval must be at most 86400000 ms (24h)",
        ),
        (&["timeout=0", "timeout=0ms"], "timeout must be positive"),
        (
            &["timeout=abc", "timeout=-5"],
            "timeout must be milliseconds or an nginx time (500ms, 3s)",
        ),
        (
            &["timeout=2d", "timeout=99999999999999999999"],
            "timeout must be at most 86400000 ms (24h)",
        ),
        (
            &["rise=0", "rise=100001", "rise=99999999999999999999"],
            "rise must be from 1 to 100000",
        ),
        (
            &["rise=", "rise=+1", "rise=2s"],
            "rise must be a plain decimal integer",
        ),
        (&["fall=0"], "fall must be from 1 to 100000"),
        (
            &["fall=-1", "fall=0x3"],
            "fall must be a plain decimal integer",
        ),
        (&["port=0", "port=65536"], "port must be from 1 to 65535"),
        (
            &["port=", "port=http"],
            "port must be a plain decimal integer",
        ),
        (
            &["default_down=yes", "default_down=TRUE", "default_down="],
            "default_down must be true or false",
        ),
        (
            &[
                "type=HTTP",
                "type=TCP",
                "type=mysql",
                "type=SSL_HELLO",
                "type=",
            ],
            "type must be tcp, udp, http, https or tls (ssl_hello is tls)",
        ),
        (
            &["reuse=maybe", "reuse=500ms", "reuse=", "reuse=ON"],
            "reuse must be off, on or a time in seconds (30, 30s, 5m; ms is not accepted)",
        ),
        (
            &["reuse=8d", "reuse=99999999999999999999"],
            "reuse must be at most 7d (604800000 ms)",
        ),
        (
            &["keepalive="],
            "keepalive must be off, on or rehandshake[:idle[:intvl[:cnt]]]",
        ),
        (
            &["keepalive=a:b:c:d:e", "keepalive=::::"],
            "keepalive takes at most 4 fields (rehandshake:idle:intvl:cnt), not 5",
        ),
        (
            &["keepalive=abc", "keepalive=500ms", "keepalive=OFF"],
            "keepalive rehandshake must be on, off or a time in seconds \
             (30, 30s, 5m; ms is not accepted)",
        ),
        (
            &["keepalive=8d"],
            "keepalive rehandshake must be at most 7d (604800000 ms)",
        ),
        (
            &["keepalive=:on", "keepalive=off:off"],
            "keepalive idle cannot be on or off (only the first field can)",
        ),
        (
            &["keepalive=::off"],
            "keepalive intvl cannot be on or off (only the first field can)",
        ),
        (
            &["keepalive=:::on"],
            "keepalive cnt cannot be on or off (only the first field can)",
        ),
        (
            &["keepalive=:40000", "keepalive=:0", "keepalive=:10h"],
            "keepalive idle must be from 1 to 32767 seconds",
        ),
        (
            &["keepalive=:5ms", "keepalive=:x"],
            "keepalive idle must be a time in seconds (30, 30s, 5m; ms is not accepted)",
        ),
        (
            &["keepalive=::0"],
            "keepalive intvl must be from 1 to 32767 seconds",
        ),
        (
            &["keepalive=::x"],
            "keepalive intvl must be a time in seconds (30, 30s, 5m; ms is not accepted)",
        ),
        (
            &["keepalive=:::128", "keepalive=:::0"],
            "keepalive cnt must be from 1 to 127",
        ),
        (
            &["keepalive=:::3s", "keepalive=:::x"],
            "keepalive cnt must be a plain decimal integer",
        ),
        (
            &["keepalive=30s:40s"],
            "keepalive idle (40 s) must be less than the rehandshake period (30000 ms)",
        ),
        (
            &["keepalive=:5s:6s"],
            "keepalive intvl (6 s) must not exceed idle (5 s)",
        ),
        (
            &["keepalive=::6s"],
            "keepalive intvl (6 s) must not exceed the computed idle (5 s)",
        ),
        (
            &["unknown=1", "Interval=1000", "=1", "tcp", ""],
            "unknown parameter",
        ),
        (&["interval"], "interval requires a value (interval=...)"),
        (&["match"], "match requires a value (match=...)"),
        (
            &["match="],
            "match must name a check_match block (match=NAME)",
        ),
        (&["keepalive"], "keepalive requires a value (keepalive=...)"),
    ];
    for &(args, reason) in groups {
        for arg in args {
            let e = parse_check(&[arg.as_bytes()]).unwrap_err().to_string();
            assert_eq!(
                e,
                format!("invalid parameter \"{arg}\": {reason}"),
                "check {arg}"
            );
        }
    }
}

#[test]
fn repeated_parameters() {
    for (line, arg, name) in [
        ("interval=100 interval=200", "interval=200", "interval"),
        ("interval=200 interval=200", "interval=200", "interval"),
        ("fall=1 rise=1 fall=2", "fall=2", "fall"),
        ("rise=1 rise=x", "rise=x", "rise"),
        ("timeout=1 timeout=2", "timeout=2", "timeout"),
        ("type=tcp type=tcp", "type=tcp", "type"),
        ("port=1 port=2", "port=2", "port"),
        (
            "default_down=true default_down=true",
            "default_down=true",
            "default_down",
        ),
        ("reuse=off reuse=on", "reuse=on", "reuse"),
        ("keepalive=off keepalive=on", "keepalive=on", "keepalive"),
        ("match=a match=b", "match=b", "match"),
        ("type=http type=tcp", "type=tcp", "type"),
    ] {
        assert_eq!(
            err(line),
            format!("invalid parameter \"{arg}\": {name} is given twice"),
            "check {line}"
        );
    }
}

#[test]
fn cross_parameter_errors_name_the_wrong_value() {
    let cases = [
        (
            "timeout=5000",
            "invalid parameter \"timeout=5000\": timeout must be less than interval (5000 ms)",
        ),
        (
            "timeout=5000 interval=5s",
            "invalid parameter \"timeout=5000\": timeout must be less than interval (5000 ms)",
        ),
        (
            "timeout=3s interval=3000",
            "invalid parameter \"timeout=3s\": timeout must be less than interval (3000 ms)",
        ),
        (
            "reuse=on type=udp",
            "invalid parameter \"reuse=on\": reuse requires type=tcp or type=http",
        ),
        (
            "type=udp reuse=on",
            "invalid parameter \"reuse=on\": reuse requires type=tcp or type=http",
        ),
        (
            "type=udp reuse=30s",
            "invalid parameter \"reuse=30s\": reuse requires type=tcp or type=http",
        ),
        (
            "keepalive=on type=udp",
            "invalid parameter \"keepalive=on\": keepalive requires type=tcp or type=http",
        ),
        (
            "type=udp keepalive=off:",
            "invalid parameter \"keepalive=off:\": keepalive requires type=tcp or type=http",
        ),
        (
            "interval=2000 reuse=1s",
            "invalid parameter \"reuse=1s\": \
             reuse period (1000 ms) must be greater than interval (2000 ms)",
        ),
        (
            "interval=2s reuse=0",
            "invalid parameter \"reuse=0\": \
             reuse period (0 ms) must be greater than interval (2000 ms)",
        ),
        (
            "interval=1000 keepalive=1s",
            "invalid parameter \"keepalive=1s\": \
             keepalive rehandshake period (1000 ms) must be greater than interval (1000 ms)",
        ),
        (
            "interval=1000 reuse=10s keepalive=off:10s",
            "invalid parameter \"keepalive=off:10s\": \
             keepalive idle (10 s) must be less than the rehandshake period (10000 ms)",
        ),
        (
            "interval=500 keepalive=1s",
            "invalid parameter \"keepalive=1s\": \
             no positive keepalive idle fits below the rehandshake period of 1000 ms",
        ),
    ];
    for (line, message) in cases {
        assert_eq!(err(line), message, "check {line}");
    }
}

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
        "invalid parameter \"type=t\u{e9}p\": \
         type must be tcp, udp, http, https or tls (ssl_hello is tls)"
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
            "interval=3000 down_interval=1000 timeout=1000",
            "invalid parameter \"timeout=1000\": \
             timeout must be less than down_interval (1000 ms)",
        ),
        (
            "interval=1000 down_interval=3000 timeout=1000",
            "invalid parameter \"timeout=1000\": timeout must be less than interval (1000 ms)",
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

// ---- properties ----------------------------------------------------------

/// One argument per parameter: mostly plausible values, some wrong ones.
fn argument(name: &'static str) -> BoxedStrategy<String> {
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
fn arguments() -> impl Strategy<Value = Vec<String>> {
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
fn wrong_on_its_own(arg: &str) -> bool {
    Params::default().add(arg.as_bytes()).is_err()
}

fn parse_strings(args: &[String]) -> Result<CheckConf, ConfError> {
    let args: Vec<&[u8]> = args.iter().map(String::as_bytes).collect();
    parse_check(&args)
}

/// Every rule an accepted configuration must satisfy.
fn assert_invariants(c: &CheckConf) -> Result<(), TestCaseError> {
    prop_assert!((INTERVAL_MIN_MS..=INTERVAL_MAX_MS).contains(&c.interval_ms));
    prop_assert!(c.timeout_ms >= 1 && c.timeout_ms < c.interval_ms);
    prop_assert!(c.timeout_ms <= TIMEOUT_MAX_MS);
    // Every interval in force bounds the round's budget and the jitter.
    if let Some(d) = c.down_interval_ms {
        prop_assert!((INTERVAL_MIN_MS..=INTERVAL_MAX_MS).contains(&d));
    }
    for up in [true, false] {
        prop_assert!(c.timeout_ms < c.interval_for(up));
        prop_assert!(c.jitter_ms < c.interval_for(up));
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
