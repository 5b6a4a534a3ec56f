use proptest::prelude::*;

use super::*;

fn event<'a>(upstream: &'a [u8], peer: Option<(&'a [u8], &'a [u8])>) -> Event<'a> {
    Event {
        time_ms: 1_764_642_664_123,
        upstream,
        upstream_type: "http",
        peer,
        from: State::Up,
        to: State::Down,
        by: By::Check,
        reason: Some("timeout"),
        detail: Some("timed out"),
        checks: Some(42),
    }
}

const KEYS: [&str; 11] = [
    "time",
    "upstream",
    "upstream_type",
    "name",
    "server",
    "from",
    "to",
    "by",
    "reason",
    "detail",
    "checks",
];

#[test]
fn time_is_rfc3339_with_ms() {
    assert_eq!(&rfc3339_ms(0), b"1970-01-01T00:00:00.000Z");
    assert_eq!(&rfc3339_ms(1_764_642_664_123), b"2025-12-02T02:31:04.123Z");
    assert_eq!(&rfc3339_ms(951_782_400_000), b"2000-02-29T00:00:00.000Z");
    assert_eq!(&rfc3339_ms(4_102_444_799_999), b"2099-12-31T23:59:59.999Z");
}

#[test]
fn json_line_has_the_fields_in_order() {
    let mut out = Vec::new();
    line(
        &event(b"web", Some((b"127.0.0.1:81", b"a.example:81"))),
        Format::Json,
        &mut out,
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "{\"time\": \"2025-12-02T02:31:04.123Z\", \"upstream\": \"web\", \"upstream_type\": \"http\", \
         \"name\": \"127.0.0.1:81\", \"server\": \"a.example:81\", \"from\": \"up\", \"to\": \"down\", \
         \"by\": \"check\", \"reason\": \"timeout\", \"detail\": \"timed out\", \"checks\": 42}\n"
    );
}

#[test]
fn upstream_events_have_null_peer_fields() {
    let mut ev = event(b"web", None);
    (ev.from, ev.to, ev.by, ev.reason, ev.detail, ev.checks) = (
        State::Enforced,
        State::FailOpen,
        By::FailOpen,
        None,
        Some("weight 0 of 2 up"),
        None,
    );
    let mut out = Vec::new();
    line(&ev, Format::Json, &mut out);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["name"], serde_json::Value::Null);
    assert_eq!(v["server"], serde_json::Value::Null);
    assert_eq!(v["checks"], serde_json::Value::Null);
    assert_eq!(v["reason"], serde_json::Value::Null);
    assert_eq!(v["to"], "fail-open");
    assert_eq!(v["by"], "fail-open");
    let mut text_out = Vec::new();
    line(&ev, Format::Text, &mut text_out);
    assert_eq!(
        String::from_utf8(text_out).unwrap(),
        "2025-12-02T02:31:04.123Z http upstream web enforced -> fail-open by fail-open: weight 0 of 2 up\n"
    );
}

#[test]
fn text_line() {
    let mut out = Vec::new();
    line(
        &event(b"web", Some((b"127.0.0.1:81", b"a:81"))),
        Format::Text,
        &mut out,
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "2025-12-02T02:31:04.123Z http upstream web peer 127.0.0.1:81 (a:81) up -> down by check: \
         timeout, timed out (checks 42)\n"
    );
}

#[test]
fn directive_arguments() {
    assert_eq!(
        parse_directive(&[b"logs/events.log"]).unwrap(),
        (Target::File(b"logs/events.log"), Format::Json)
    );
    assert_eq!(
        parse_directive(&[b"syslog:server=127.0.0.1:514", b"text"]).unwrap(),
        (Target::Syslog, Format::Text)
    );
    assert_eq!(
        parse_directive(&[b"x", b"xml"]).unwrap_err().0,
        "invalid format \"xml\" in \"check_log\" directive: write json or text"
    );
    assert!(parse_directive(&[b"off"])
        .unwrap_err()
        .0
        .contains("leave the directive out"));
    assert!(parse_directive(&[]).is_err());
}

proptest! {
    /// Any bytes in any field: one line, valid JSON, exactly the keys.
    #[test]
    fn any_bytes_make_one_json_line(
        ups in proptest::collection::vec(any::<u8>(), 0..40),
        name in proptest::collection::vec(any::<u8>(), 0..40),
        server in proptest::collection::vec(any::<u8>(), 0..40),
        detail in ".{0,40}",
        t in 0u64..4_102_444_800_000,
    ) {
        let mut ev = event(&ups, Some((&name, &server)));
        ev.detail = Some(&detail);
        ev.time_ms = t;
        let mut out = Vec::new();
        line(&ev, Format::Json, &mut out);
        prop_assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
        prop_assert_eq!(out.last(), Some(&b'\n'));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want = KEYS.to_vec();
        want.sort_unstable();
        let mut got = keys.clone();
        got.sort_unstable();
        prop_assert_eq!(got, want);
        let mut text_out = Vec::new();
        line(&ev, Format::Text, &mut text_out);
        prop_assert_eq!(text_out.iter().filter(|&&b| b == b'\n').count(), 1);
    }
}
