//! nginx's value syntaxes: time (`ngx_parse_time`), size
//! (`ngx_parse_size`) and plain decimal integers (`ngx_atoi`).
//!
//! Results are capped at `i64::MAX`, nginx's `NGX_MAX_INT_T_VALUE` on the
//! 64-bit platforms the module supports.

/// Why a number did not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NumError {
    /// Not in the expected syntax.
    Malformed,
    /// Well formed, but larger than `i64::MAX`.
    Overflow,
}

/// nginx's `NGX_MAX_INT_T_VALUE` on 64-bit platforms.
const NGX_INT_MAX: u64 = i64::MAX as u64;

/// Where a time string's parser stands: units must appear from the
/// largest to the smallest, each at most once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Start,
    Year,
    Month,
    Week,
    Day,
    Hour,
    Minute,
    Second,
    Milli,
    /// After a space that directly followed digits: nothing else may
    /// carry a unit.
    Last,
}

/// nginx time syntax with `ngx_parse_time` semantics.
///
/// With `seconds == false` the result is in milliseconds; units `ms`,
/// `s`, `m`, `h`, `d`, `w` may be combined from largest to smallest
/// (`1m30s`), and a number without a unit counts as seconds (`"3"` is
/// 3000). As in nginx, `M` (months) and `y` (years) are rejected in
/// millisecond mode. With `seconds == true` the result is in seconds,
/// `y`, `M`, `w`, `d`, `h`, `m`, `s` are accepted, `ms` is rejected and a
/// bare number is seconds.
///
/// Returns `None` on malformed input or when the value exceeds `i64::MAX`.
pub fn parse_time(v: &[u8], seconds: bool) -> Option<u64> {
    parse_time_checked(v, seconds).ok()
}

/// A period in nginx's time syntax (ms allowed) from 1 ms to 7 days
/// ([`super::PERIOD_MAX_MS`]), in ms: `check_keepalive_time`,
/// `check_ssl_verify_interval`.
pub(crate) fn parse_period_ms(v: &[u8]) -> Option<u64> {
    parse_time(v, false).filter(|ms| (1..=super::PERIOD_MAX_MS).contains(ms))
}

/// [`parse_time`] telling malformed input from overflow.
pub(crate) fn parse_time_checked(v: &[u8], seconds: bool) -> Result<u64, NumError> {
    // Millisecond mode starts past `Month`, which rules out `y` and `M`
    // (their millisecond values overflow a 32-bit ngx_int_t).
    let mut step = if seconds { Step::Start } else { Step::Month };
    let ms_per_unit = if seconds { 1 } else { 1000 };
    let mut total: u64 = 0;
    let mut value: u64 = 0;
    let mut seen_digit = false;
    let mut i = 0;

    while let Some(&c) = v.get(i) {
        i += 1;

        if c.is_ascii_digit() {
            value = value
                .checked_mul(10)
                .and_then(|x| x.checked_add(u64::from(c - b'0')))
                .filter(|&x| x <= NGX_INT_MAX)
                .ok_or(NumError::Overflow)?;
            seen_digit = true;
            continue;
        }

        // (unit, its length in seconds)
        let (unit, unit_s) = match c {
            b'y' => (Step::Year, 365 * 86_400),
            b'M' => (Step::Month, 30 * 86_400),
            b'w' => (Step::Week, 7 * 86_400),
            b'd' => (Step::Day, 86_400),
            b'h' => (Step::Hour, 3_600),
            b'm' if v.get(i) == Some(&b's') => {
                if seconds {
                    return Err(NumError::Malformed);
                }
                i += 1;
                (Step::Milli, 0)
            }
            b'm' => (Step::Minute, 60),
            b's' => (Step::Second, 1),
            // A space right after digits closes the value as seconds.
            b' ' => (Step::Last, 1),
            _ => return Err(NumError::Malformed),
        };

        let must_precede = if unit == Step::Last {
            Step::Second
        } else {
            unit
        };
        if step >= must_precede {
            return Err(NumError::Malformed);
        }
        step = unit;

        let scale = if unit == Step::Milli {
            1
        } else {
            unit_s * ms_per_unit
        };
        total = value
            .checked_mul(scale)
            .and_then(|x| x.checked_add(total))
            .filter(|&x| x <= NGX_INT_MAX)
            .ok_or(NumError::Overflow)?;
        value = 0;

        while v.get(i) == Some(&b' ') {
            i += 1;
        }
    }

    if !seen_digit {
        return Err(NumError::Malformed);
    }

    // Trailing digits without a unit are seconds.
    value
        .checked_mul(ms_per_unit)
        .and_then(|x| x.checked_add(total))
        .filter(|&x| x <= NGX_INT_MAX)
        .ok_or(NumError::Overflow)
}

/// A plain decimal integer: one or more ASCII digits, no sign, no prefix,
/// no spaces.
pub(crate) fn parse_decimal(v: &[u8]) -> Result<u64, NumError> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return Err(NumError::Malformed);
    }
    v.iter()
        .try_fold(0u64, |acc, &d| {
            acc.checked_mul(10)?
                .checked_add(u64::from(d - b'0'))
                .filter(|&x| x <= NGX_INT_MAX)
        })
        .ok_or(NumError::Overflow)
}

/// nginx size syntax (`ngx_parse_size`): a decimal number of bytes,
/// optionally followed by `k`/`K`, `m`/`M` or `g`/`G` (powers of 1024).
pub(crate) fn parse_size(v: &[u8]) -> Result<u64, NumError> {
    let (digits, scale) = match v.split_last() {
        Some((b'k' | b'K', rest)) => (rest, 1 << 10),
        Some((b'm' | b'M', rest)) => (rest, 1 << 20),
        Some((b'g' | b'G', rest)) => (rest, 1 << 30),
        _ => (v, 1),
    };
    parse_decimal(digits)?
        .checked_mul(scale)
        .filter(|&x| x <= NGX_INT_MAX)
        .ok_or(NumError::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(v: &str) -> Option<u64> {
        parse_time(v.as_bytes(), false)
    }

    fn sec(v: &str) -> Option<u64> {
        parse_time(v.as_bytes(), true)
    }

    #[test]
    fn milliseconds_mode() {
        let cases: &[(&str, Option<u64>)] = &[
            ("500ms", Some(500)),
            ("3s", Some(3_000)),
            ("3", Some(3_000)),
            ("0", Some(0)),
            ("0ms", Some(0)),
            ("1m", Some(60_000)),
            ("1m30s", Some(90_000)),
            ("1m30", Some(90_000)),
            ("1h", Some(3_600_000)),
            ("1d", Some(86_400_000)),
            ("1w", Some(604_800_000)),
            ("1d2h3m4s5ms", Some(93_784_005)),
            ("1m 30s", Some(90_000)),
            ("1s500ms", Some(1_500)),
            ("1hm", Some(3_600_000)),
            ("5 ", Some(5_000)),
            ("1M", None),
            ("1y", None),
            ("1s1m", None),
            ("1s1s", None),
            ("1ms1s", None),
            ("1ms1ms", None),
            ("5 s", None),
            ("s", None),
            ("ms", None),
            ("", None),
            ("-1", None),
            ("+1", None),
            ("0x10", None),
            ("1.5s", None),
            ("1S", None),
            ("1sec", None),
            ("abc", None),
        ];
        for &(input, want) in cases {
            assert_eq!(ms(input), want, "parse_time({input:?}, false)");
        }
    }

    #[test]
    fn seconds_mode() {
        let cases: &[(&str, Option<u64>)] = &[
            ("30", Some(30)),
            ("30s", Some(30)),
            ("5m", Some(300)),
            ("1h", Some(3_600)),
            ("1d", Some(86_400)),
            ("1w", Some(604_800)),
            ("1M", Some(2_592_000)),
            ("1y", Some(31_536_000)),
            (
                "1y2M3w4d5h6m7s",
                Some(31_536_000 + 5_184_000 + 1_814_400 + 345_600 + 18_000 + 367),
            ),
            ("1m30", Some(90)),
            ("500ms", None),
            ("1ms", None),
            ("1M1y", None),
            ("", None),
            ("on", None),
        ];
        for &(input, want) in cases {
            assert_eq!(sec(input), want, "parse_time({input:?}, true)");
        }
    }

    #[test]
    fn overflow_is_rejected_not_wrapped() {
        assert_eq!(sec("9223372036854775807"), Some(i64::MAX as u64));
        assert_eq!(sec("9223372036854775808"), None);
        assert_eq!(ms("9223372036854775807ms"), Some(i64::MAX as u64));
        assert_eq!(ms("9223372036854775807"), None);
        assert_eq!(ms("99999999999999999999"), None);
        assert_eq!(ms("9223372036854775s"), Some(9_223_372_036_854_775_000));
        assert_eq!(ms("9223372036854776s"), None);
        assert_eq!(ms("9223372036854775s808ms"), None);
        assert_eq!(ms("9223372036854775807ms1"), None);
        assert_eq!(
            parse_time_checked(b"99999999999999999999", false),
            Err(NumError::Overflow)
        );
        assert_eq!(parse_time_checked(b"1x", false), Err(NumError::Malformed));
    }

    #[test]
    fn decimal() {
        assert_eq!(parse_decimal(b"0"), Ok(0));
        assert_eq!(parse_decimal(b"0042"), Ok(42));
        assert_eq!(parse_decimal(b"9223372036854775807"), Ok(i64::MAX as u64));
        assert_eq!(
            parse_decimal(b"9223372036854775808"),
            Err(NumError::Overflow)
        );
        assert_eq!(
            parse_decimal(b"99999999999999999999999"),
            Err(NumError::Overflow)
        );
        for bad in [
            &b""[..],
            b"-1",
            b"+1",
            b"0x10",
            b" 1",
            b"1 ",
            b"1_000",
            b"1e3",
        ] {
            assert_eq!(parse_decimal(bad), Err(NumError::Malformed), "{bad:?}");
        }
    }

    #[test]
    fn size() {
        assert_eq!(parse_size(b"1"), Ok(1));
        assert_eq!(parse_size(b"512k"), Ok(512 * 1024));
        assert_eq!(parse_size(b"512K"), Ok(512 * 1024));
        assert_eq!(parse_size(b"10m"), Ok(10 << 20));
        assert_eq!(parse_size(b"10M"), Ok(10 << 20));
        assert_eq!(parse_size(b"4g"), Ok(4 << 30));
        assert_eq!(parse_size(b"4G"), Ok(4 << 30));
        assert_eq!(parse_size(b"0"), Ok(0));
        for bad in [
            &b""[..],
            b"k",
            b"abc",
            b"1.5m",
            b"-1m",
            b"1t",
            b"1kb",
            b"1 m",
        ] {
            assert_eq!(parse_size(bad), Err(NumError::Malformed), "{bad:?}");
        }
        assert_eq!(parse_size(b"99999999999g"), Err(NumError::Overflow));
    }

    proptest! {
        #[test]
        fn never_panics(v in proptest::collection::vec(any::<u8>(), 0..32), seconds: bool) {
            let _ = parse_time(&v, seconds);
            let _ = parse_size(&v);
            let _ = parse_decimal(&v);
        }

        #[test]
        fn never_panics_on_time_alphabet(v in "[0-9 smhdwMy]{0,24}", seconds: bool) {
            let _ = parse_time(v.as_bytes(), seconds);
        }

        #[test]
        fn single_units(n in 0u64..1_000_000) {
            prop_assert_eq!(ms(&format!("{n}ms")), Some(n));
            prop_assert_eq!(ms(&format!("{n}s")), Some(n * 1_000));
            prop_assert_eq!(ms(&format!("{n}")), Some(n * 1_000));
            prop_assert_eq!(ms(&format!("{n}m")), Some(n * 60_000));
            prop_assert_eq!(sec(&format!("{n}")), Some(n));
            prop_assert_eq!(sec(&format!("{n}s")), Some(n));
            prop_assert_eq!(sec(&format!("{n}h")), Some(n * 3_600));
            prop_assert_eq!(sec(&format!("{n}ms")), None);
        }

        #[test]
        fn combined_units_add_up(d in 0u64..1000, h in 0u64..1000, m in 0u64..1000, s in 0u64..1000, l in 0u64..1000) {
            let text = format!("{d}d{h}h{m}m{s}s{l}ms");
            let want = (((d * 24 + h) * 60 + m) * 60 + s) * 1000 + l;
            prop_assert_eq!(ms(&text), Some(want));
        }

        #[test]
        fn seconds_mode_is_milliseconds_mode_over_1000(v in "[0-9]{1,6}(w[0-9]{1,4})?(d[0-9]{1,4})?(h[0-9]{1,4})?(m[0-9]{1,4})?s?") {
            let s = sec(&v);
            prop_assert_eq!(ms(&v), s.map(|s| s * 1000));
        }

        #[test]
        fn decimal_round_trips(n in 0u64..=i64::MAX as u64) {
            prop_assert_eq!(parse_decimal(n.to_string().as_bytes()), Ok(n));
        }
    }
}
