//! Allocation-free number formatting and UTF-8 helpers shared by the formats.

/// U+FFFD REPLACEMENT CHARACTER in UTF-8.
pub(super) const REPLACEMENT: &[u8] = "\u{fffd}".as_bytes();

/// Append `v` in decimal.
pub(crate) fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Append `v` in decimal, with a leading `-` when negative.
pub(super) fn push_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    push_u64(out, v.unsigned_abs());
}

/// Append `ms` as seconds: `1` -> `0.001`, `2500` -> `2.5`, `10000` -> `10`.
pub(super) fn push_ms_as_seconds(out: &mut Vec<u8>, ms: u64) {
    push_u64(out, ms / 1000);
    let frac = ms % 1000;
    if frac != 0 {
        let digits = [
            b'0' + (frac / 100) as u8,
            b'0' + (frac / 10 % 10) as u8,
            b'0' + (frac % 10) as u8,
        ];
        let len = if digits[2] != b'0' {
            3
        } else if digits[1] != b'0' {
            2
        } else {
            1
        };
        out.push(b'.');
        out.extend_from_slice(&digits[..len]);
    }
}

/// Call `valid(out, run)` for each valid UTF-8 run of `s` and append
/// `replacement` once for each maximal invalid sequence, exactly where
/// [`String::from_utf8_lossy`] puts its U+FFFD.
#[inline]
pub(super) fn lossy_runs(
    out: &mut Vec<u8>,
    s: &[u8],
    replacement: &[u8],
    mut valid: impl FnMut(&mut Vec<u8>, &[u8]),
) {
    for chunk in s.utf8_chunks() {
        let v = chunk.valid();
        if !v.is_empty() {
            valid(out, v.as_bytes());
        }
        if !chunk.invalid().is_empty() {
            out.extend_from_slice(replacement);
        }
    }
}

/// Format unix ms as `YYYY-MM-DD HH:MM:SS UTC` (proleptic Gregorian).
pub(super) fn push_utc(out: &mut Vec<u8>, unix_ms: u64) {
    let secs = unix_ms / 1000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    push_u64(out, y);
    out.push(b'-');
    push_2(out, m);
    out.push(b'-');
    push_2(out, d);
    out.push(b' ');
    push_2(out, rem / 3600);
    out.push(b':');
    push_2(out, rem / 60 % 60);
    out.push(b':');
    push_2(out, rem % 60);
    out.extend_from_slice(b" UTC");
}

fn push_2(out: &mut Vec<u8>, v: u64) {
    if v < 10 {
        out.push(b'0');
    }
    push_u64(out, v);
}

/// Days since 1970-01-01 to (year, month, day). Counts in 400-year eras of
/// 146 097 days whose years start on March 1st, so leap days fall last.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z / 146_097;
    let doe = z % 146_097; // day of era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // 0..=365, from March 1st
    let mp = (5 * doy + 2) / 153; // 0 = March .. 11 = February
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// Append a duration in ms as a short human age: `850ms`, `42s`, `3m 12s`,
/// `5h 02m`, `3d 04h`.
pub(super) fn push_age(out: &mut Vec<u8>, ms: u64) {
    let s = ms / 1000;
    if s == 0 {
        push_u64(out, ms);
        out.extend_from_slice(b"ms");
    } else if s < 60 {
        push_u64(out, s);
        out.push(b's');
    } else if s < 3600 {
        push_u64(out, s / 60);
        out.extend_from_slice(b"m ");
        push_2(out, s % 60);
        out.push(b's');
    } else if s < 86_400 {
        push_u64(out, s / 3600);
        out.extend_from_slice(b"h ");
        push_2(out, s / 60 % 60);
        out.push(b'm');
    } else {
        push_u64(out, s / 86_400);
        out.extend_from_slice(b"d ");
        push_2(out, s / 3600 % 24);
        out.push(b'h');
    }
}

/// Append `v / 100` with two decimals (`2.50`, `0.07`).
pub fn push_hundredths(out: &mut Vec<u8>, v: u64) {
    push_u64(out, v / 100);
    out.push(b'.');
    out.push(b'0' + (v % 100 / 10) as u8);
    out.push(b'0' + (v % 10) as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut v = Vec::new();
        f(&mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn numbers() {
        assert_eq!(s(|o| push_u64(o, 0)), "0");
        assert_eq!(s(|o| push_u64(o, u64::MAX)), u64::MAX.to_string());
        assert_eq!(s(|o| push_i64(o, -1)), "-1");
        assert_eq!(s(|o| push_i64(o, i64::MIN)), i64::MIN.to_string());
        assert_eq!(s(|o| push_i64(o, 1234)), "1234");
        for (ms, want) in [
            (0, "0"),
            (1, "0.001"),
            (10, "0.01"),
            (25, "0.025"),
            (100, "0.1"),
            (2500, "2.5"),
            (10000, "10"),
            (1_700_000_000_123, "1700000000.123"),
            (u64::MAX, "18446744073709551.615"),
        ] {
            assert_eq!(s(|o| push_ms_as_seconds(o, ms)), want, "{ms}");
        }
    }

    #[test]
    fn dates() {
        assert_eq!(s(|o| push_utc(o, 0)), "1970-01-01 00:00:00 UTC");
        assert_eq!(
            s(|o| push_utc(o, 951_782_400_000)),
            "2000-02-29 00:00:00 UTC"
        );
        assert_eq!(
            s(|o| push_utc(o, 1_709_251_199_999)),
            "2024-02-29 23:59:59 UTC"
        );
        assert_eq!(
            s(|o| push_utc(o, 1_735_689_600_000)),
            "2025-01-01 00:00:00 UTC"
        );
        assert_eq!(
            s(|o| push_utc(o, 4_102_444_800_000)),
            "2100-01-01 00:00:00 UTC"
        );
        // Day by day against a naive walk for 1970..2101.
        let (mut y, mut m, mut d) = (1970u64, 1u64, 1u64);
        for days in 0..47_847u64 {
            assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
            let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
            let len = [
                31,
                if leap { 29 } else { 28 },
                31,
                30,
                31,
                30,
                31,
                31,
                30,
                31,
                30,
                31,
            ][m as usize - 1];
            d += 1;
            if d > len {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
    }

    #[test]
    fn ages() {
        assert_eq!(s(|o| push_age(o, 850)), "850ms");
        assert_eq!(s(|o| push_age(o, 42_000)), "42s");
        assert_eq!(s(|o| push_age(o, 192_000)), "3m 12s");
        assert_eq!(s(|o| push_age(o, 5 * 3_600_000 + 120_000)), "5h 02m");
        assert_eq!(s(|o| push_age(o, 3 * 86_400_000 + 4 * 3_600_000)), "3d 04h");
    }
}
