//! `\xHH` in strings that hold raw bytes (`check_http_send`, the `send`
//! and `expect` tests of `check_match`).
//!
//! nginx's configuration parser already turns `\"`, `\'`, `\\`, `\t`, `\r`
//! and `\n` into bytes (and keeps any other backslash as written), so
//! [`unescape`] only adds `\xHH` for the other bytes. Since nginx has
//! consumed `\\` before we see the argument, a literal backslash followed by
//! `x` is written `\x5cx`.

/// Decodes every `\xHH` (a backslash, `x`, exactly two hex digits of
/// either case) of `arg` into that byte, and copies every other byte as it
/// is (a backslash not followed by `x` included).
///
/// An `\x` without two hex digits after it is an error; the message says
/// where, for the caller to put after the argument it quotes.
pub fn unescape(arg: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(arg.len());
    let mut i = 0;
    while let Some(&b) = arg.get(i) {
        if b == b'\\' && arg.get(i + 1) == Some(&b'x') {
            let digit = |k: usize| arg.get(i + k).and_then(|&c| (c as char).to_digit(16));
            match (digit(2), digit(3)) {
                (Some(hi), Some(lo)) => {
                    // Two hex digits: at most 0xff.
                    out.push(u8::try_from(hi << 4 | lo).unwrap_or(u8::MAX));
                    i += 4;
                    continue;
                }
                _ => {
                    return Err(format!(
                        "\\x at byte {i} must be followed by two hex digits (\\x0d, \\xff)"
                    ))
                }
            }
        }
        out.push(b);
        i += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decodes_hex_escapes() {
        assert_eq!(unescape(b"").unwrap(), b"");
        assert_eq!(unescape(b"abc").unwrap(), b"abc");
        assert_eq!(unescape(b"\\x41").unwrap(), b"A");
        assert_eq!(unescape(b"\\x0d\\x0A").unwrap(), b"\r\n");
        assert_eq!(unescape(b"a\\x00b").unwrap(), b"a\0b");
        assert_eq!(unescape(b"\\xff\\xFF\\xfF").unwrap(), b"\xff\xff\xff");
        assert_eq!(unescape(b"\\x414").unwrap(), b"A4", "exactly two digits");
        assert_eq!(unescape(b"\\x5cx41").unwrap(), b"\\x41");
    }

    #[test]
    fn leaves_other_bytes_alone() {
        assert_eq!(unescape(b"\\d+\\s").unwrap(), b"\\d+\\s");
        assert_eq!(unescape(b"\\").unwrap(), b"\\");
        assert_eq!(unescape(b"\\\\").unwrap(), b"\\\\");
        assert_eq!(unescape(b"\\X41").unwrap(), b"\\X41", "only lowercase x");
        assert_eq!(unescape(b"\r\n\t\xff").unwrap(), b"\r\n\t\xff");
        // The backslash before an escape is a plain byte: `\\x41` (nginx
        // passes one backslash per `\\`) is a backslash, then `A`.
        assert_eq!(unescape(b"\\\\x41").unwrap(), b"\\A");
    }

    #[test]
    fn errors_say_where() {
        let e = |s: &[u8]| unescape(s).unwrap_err();
        assert_eq!(
            e(b"\\x"),
            "\\x at byte 0 must be followed by two hex digits (\\x0d, \\xff)"
        );
        assert_eq!(
            e(b"ab\\x4"),
            "\\x at byte 2 must be followed by two hex digits (\\x0d, \\xff)"
        );
        for bad in [
            &b"\\xg0"[..],
            b"\\x0g",
            b"\\x 1",
            b"\\x-1",
            b"\\x+1",
            b"\\x\xff0",
        ] {
            assert!(e(bad).starts_with("\\x at byte 0 "), "{bad:?}");
        }
        assert!(e(b"\\x41\\xzz").starts_with("\\x at byte 4 "));
    }

    proptest! {
        #[test]
        fn every_byte_round_trips(b: u8, upper: bool) {
            let text = if upper { format!("\\x{b:02X}") } else { format!("\\x{b:02x}") };
            prop_assert_eq!(unescape(text.as_bytes()).unwrap(), vec![b]);
        }

        #[test]
        fn escaping_everything_round_trips(v in proptest::collection::vec(any::<u8>(), 0..64)) {
            let text: String = v.iter().map(|b| format!("\\x{b:02x}")).collect();
            prop_assert_eq!(unescape(text.as_bytes()).unwrap(), v);
        }

        #[test]
        fn without_backslash_x_it_is_the_identity(v in proptest::collection::vec(any::<u8>(), 0..64)) {
            let v: Vec<u8> = v.into_iter().filter(|&b| b != b'x').collect();
            prop_assert_eq!(unescape(&v).unwrap(), v);
        }

        #[test]
        fn never_panics(v in proptest::collection::vec(prop_oneof![any::<u8>(), Just(b'\\'), Just(b'x')], 0..32)) {
            if let Ok(out) = unescape(&v) {
                prop_assert!(out.len() <= v.len());
            }
        }
    }
}
