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
            shared: true,
            active: true,
            mandatory: false,
            slow_start_ms: 0,
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

mod documented;
mod properties;
mod types_and_periods;

#[test]
fn mandatory_is_a_bare_word() {
    let c = parse_check(&[b"type=tcp", b"mandatory"]).unwrap();
    assert!(c.mandatory);
    assert_eq!(c.initial(), crate::zone::Initial::Checking);
    assert!(!parse_check(&[b"type=tcp"]).unwrap().mandatory);
    let e = parse_check(&[b"mandatory", b"mandatory"]).unwrap_err().0;
    assert!(e.contains("mandatory is given twice"), "{e}");
    let e = parse_check(&[b"mandatory=on"]).unwrap_err().0;
    assert!(
        e.contains("\"mandatory=on\"") && e.contains("mandatory takes no value"),
        "{e}"
    );
}
