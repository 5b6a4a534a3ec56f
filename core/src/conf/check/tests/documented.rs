use super::*;

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
            shared: true,
            active: true,
            mandatory: false,
            slow_start_ms: 0,
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
            "type=pop3",
            "invalid parameter \"type=pop3\": type=pop3 is not a type here: write type=tcp \
             match=NAME with a block check_match NAME { expect \"+OK\"; } (docs/migrating.md)",
        ),
        (
            "type=HTTP",
            "invalid parameter \"type=HTTP\": unknown type \"HTTP\": did you mean type=http? \
             (types: tcp, udp, http, https, tls, ssl_hello, mysql, ajp, fastcgi, grpc, grpcs)",
        ),
        (
            "type=fastcgi reuse=on",
            "invalid parameter \"reuse=on\": type=fastcgi checks use a new connection each round",
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
            &["default_down=yes", "default_down=TRUE1", "default_down="],
            "default_down must be true or false",
        ),
        (
            &["reuse=maybe", "reuse=500ms", "reuse="],
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
        (&["unknown=1", "=1", "tcp", ""], "unknown parameter"),
        (
            &["Interval=1000", "intervall=1000", "interva=1"],
            "unknown parameter (did you mean interval=?)",
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

/// A `timeout` above its interval is accepted, as the C modules accept
/// it, with a `[warn]`: a round still in flight delays the next. Equal to
/// it, quietly (a round ends by the next one's start).
#[test]
fn timeout_above_interval_is_a_warning() {
    for (line, timeout, against) in [
        ("interval=3000 timeout=5000", 5000, "interval=3000"),
        ("timeout=6000", 6000, "interval=5000"),
        ("timeout=4s interval=3000", 4000, "interval=3000"),
        (
            "interval=3000 down_interval=1000 timeout=1500",
            1500,
            "down_interval=1000",
        ),
    ] {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let c = parse_check_warned(&args).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(c.conf.timeout_ms, timeout, "{line}");
        assert_eq!(c.warnings.len(), 1, "{line}");
        let w = &c.warnings[0].0;
        assert!(
            w.contains(&format!(
                "is above {against}: a round still in flight delays the next"
            )),
            "{line}: {w}"
        );
        assert_eq!(
            c.conf.period_ms(true),
            c.conf.interval_ms.max(timeout),
            "{line}"
        );
    }
    // Equal to an interval: the same warning, saying "equals".
    let c = parse_check_warned(&[b"interval=3000", b"timeout=3000"]).unwrap();
    assert_eq!(c.warnings.len(), 1);
    assert!(
        c.warnings[0]
            .0
            .contains("timeout=3000 equals interval=3000: a round still in flight delays the next"),
        "{}",
        c.warnings[0].0
    );
    // Below every interval: no warning.
    for quiet in [
        &[&b"interval=3000"[..], b"timeout=1000"][..],
        &[b"interval=3000", b"timeout=2999"],
    ] {
        assert!(
            parse_check_warned(quiet).unwrap().warnings.is_empty(),
            "{quiet:?}"
        );
    }
}

/// The C modules' spellings: `default_down` in any case.
#[test]
fn c_module_spellings() {
    assert!(ok("default_down=TRUE").default_down);
    assert!(!ok("default_down=False").default_down);
    assert_eq!(ok("type=ssl_hello").check_type, CheckType::Tls);
    for t in ["mysql", "ajp", "fastcgi"] {
        assert_eq!(ok(&format!("type={t}")).check_type.as_str(), t);
    }
    assert!(err("unique=true").contains("unique= is Tengine's"));
    assert!(err("log_level=warn").contains("log_level= is not a parameter here"));
    assert!(err("intervl=1000").contains("did you mean interval=?"));
    assert!(err("type=tlsv12_hello").contains("type=tls and check_ssl_protocols TLSv1.2"));
    for (t, near) in [
        ("TCP", "tcp"),
        ("SSL_HELLO", "ssl_hello"),
        ("htp", "http"),
        ("fastcg", "fastcgi"),
    ] {
        assert!(
            err(&format!("type={t}")).contains(&format!("did you mean type={near}?")),
            "{t}"
        );
    }
    assert!(err("type=").contains("the types are tcp, udp"));
    // Far from every name, but a protocol some type does the job of.
    assert!(err("type=ssl").contains("did you mean type=tls?"));
    assert!(err("type=mariadb").contains("did you mean type=mysql?"));
    assert!(err("type=php-fpm").contains("did you mean type=fastcgi?"));
    assert!(err("type=h2").contains("write type=http (or https) and check_http_version 2;"));
    // No type does it: the way to write it.
    assert!(err("type=redis").contains(
        "a protocol without a type of its own is written type=tcp (or type=udp) match=NAME"
    ));
    // Akvicor's spelling: reuse=ON.
    assert_eq!(ok("reuse=ON").reuse, Reuse::On);
    assert_eq!(ok("reuse=Off").reuse, Reuse::Off);
}

/// Parameters configurations give `check` that belong elsewhere say where.
#[test]
fn a_request_written_as_a_parameter_says_where_it_goes() {
    assert_eq!(
        err("type=http uri=/status"),
        "invalid parameter \"uri=/status\": the request is not a parameter of check: write \
         check_http_request GET /path; (or check_http_send \"GET /path HTTP/1.0\\r\\n\\r\\n\";) \
         and type=http"
    );
}
