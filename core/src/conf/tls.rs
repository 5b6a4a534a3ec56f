//! The `check_ssl_*` directives (docs/tls.md): their values, with
//! nginx's own wording where nginx has a directive of the same shape
//! (`proxy_ssl_*`). The rules between them are in `context`.

use super::time::{parse_decimal, NumError};
use super::{printable, ConfError};

/// `check_ssl_protocols` bits: the values of nginx's `NGX_SSL_*` (the glue
/// asserts they agree).
pub mod protocol {
    pub const SSLV2: u32 = 0x0002;
    pub const SSLV3: u32 = 0x0004;
    pub const TLSV1: u32 = 0x0008;
    pub const TLSV1_1: u32 = 0x0010;
    pub const TLSV1_2: u32 = 0x0020;
    pub const TLSV1_3: u32 = 0x0040;
    /// The default, as `proxy_ssl_protocols`'.
    pub const DEFAULT: u32 = TLSV1_2 | TLSV1_3;
}

/// Largest `check_ssl_verify_depth`.
pub const VERIFY_DEPTH_MAX: u32 = 100;

fn one<'a>(directive: &str, args: &[&'a [u8]]) -> Result<&'a [u8], ConfError> {
    match args {
        [a] => Ok(a),
        _ => Err(ConfError(format!(
            "invalid number of arguments in \"{directive}\" directive"
        ))),
    }
}

/// `on` / `off`, as nginx's flag directives say it.
pub fn parse_flag(directive: &str, args: &[&[u8]]) -> Result<bool, ConfError> {
    match one(directive, args)? {
        b"on" => Ok(true),
        b"off" => Ok(false),
        other => Err(ConfError(format!(
            "invalid value \"{}\" in \"{directive}\" directive, it must be \"on\" or \"off\"",
            printable(other)
        ))),
    }
}

/// A name or a file path: one non-empty argument without NUL bytes.
pub fn parse_text(directive: &str, args: &[&[u8]]) -> Result<Vec<u8>, ConfError> {
    let a = one(directive, args)?;
    if a.is_empty() || a.contains(&0) {
        return Err(ConfError(format!(
            "invalid value \"{}\" in \"{directive}\" directive: it must not be empty",
            printable(a)
        )));
    }
    Ok(a.to_vec())
}

/// `check_ssl_verify_depth N`: 0 to [`VERIFY_DEPTH_MAX`].
pub fn parse_verify_depth(args: &[&[u8]]) -> Result<u32, ConfError> {
    const D: &str = "check_ssl_verify_depth";
    let a = one(D, args)?;
    match parse_decimal(a) {
        Ok(n) if n <= u64::from(VERIFY_DEPTH_MAX) => Ok(n as u32),
        Ok(_) | Err(NumError::Overflow) | Err(NumError::Malformed) => Err(ConfError(format!(
            "invalid value \"{}\" in \"{D}\" directive: it must be a number from 0 to \
             {VERIFY_DEPTH_MAX}",
            printable(a)
        ))),
    }
}

/// `check_ssl_verify_interval`'s default: 1 h, in ms.
pub const VERIFY_INTERVAL_DEFAULT_MS: u64 = 3_600_000;

/// `check_ssl_verify_interval TIME`: nginx time syntax (`500ms`, `10s`,
/// `1h`), from 1 ms to 7 days; in ms.
pub fn parse_verify_interval(args: &[&[u8]]) -> Result<u64, ConfError> {
    const D: &str = "check_ssl_verify_interval";
    let a = one(D, args)?;
    super::time::parse_period_ms(a).ok_or_else(|| {
        ConfError(format!(
            "invalid value \"{}\" in \"{D}\" directive: it must be a time from 1ms to 7d \
             (500ms, 30s, 1h)",
            printable(a)
        ))
    })
}

/// `check_ssl_protocols NAME ...`: nginx's names, each at most once.
pub fn parse_protocols(args: &[&[u8]]) -> Result<u32, ConfError> {
    const D: &str = "check_ssl_protocols";
    if args.is_empty() {
        return Err(ConfError(format!(
            "invalid number of arguments in \"{D}\" directive"
        )));
    }
    let mut bits = 0;
    for &a in args {
        let bit = match a {
            b"SSLv2" => protocol::SSLV2,
            b"SSLv3" => protocol::SSLV3,
            b"TLSv1" => protocol::TLSV1,
            b"TLSv1.1" => protocol::TLSV1_1,
            b"TLSv1.2" => protocol::TLSV1_2,
            b"TLSv1.3" => protocol::TLSV1_3,
            _ => {
                return Err(ConfError(format!(
                    "invalid value \"{}\" in \"{D}\" directive: it must be SSLv2, SSLv3, TLSv1, \
                     TLSv1.1, TLSv1.2 or TLSv1.3",
                    printable(a)
                )))
            }
        };
        if bits & bit != 0 {
            return Err(ConfError(format!(
                "invalid value \"{}\" in \"{D}\" directive: given twice",
                printable(a)
            )));
        }
        bits |= bit;
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn err<T: std::fmt::Debug>(r: Result<T, ConfError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn flags() {
        assert_eq!(parse_flag("check_ssl_verify", &[b"on"]), Ok(true));
        assert_eq!(parse_flag("check_ssl_verify", &[b"off"]), Ok(false));
        assert_eq!(
            err(parse_flag("check_ssl_verify", &[b"yes"])),
            "invalid value \"yes\" in \"check_ssl_verify\" directive, it must be \"on\" or \"off\""
        );
        assert_eq!(
            err(parse_flag("check_ssl_verify", &[])),
            "invalid number of arguments in \"check_ssl_verify\" directive"
        );
    }

    #[test]
    fn texts_and_depth() {
        assert_eq!(
            parse_text("check_ssl_name", &[b"api.test"]),
            Ok(b"api.test".to_vec())
        );
        assert!(err(parse_text("check_ssl_name", &[b""])).contains("must not be empty"));
        assert!(err(parse_text("check_ssl_name", &[b"a\0b"])).contains("must not be empty"));
        assert_eq!(parse_verify_interval(&[b"1h"]), Ok(3_600_000));
        assert_eq!(parse_verify_interval(&[b"2s"]), Ok(2_000));
        assert_eq!(parse_verify_interval(&[b"500ms"]), Ok(500));
        for bad in [&b"0"[..], b"8d", b"-1s", b"soon", b""] {
            assert_eq!(
                err(parse_verify_interval(&[bad])),
                format!(
                    "invalid value \"{}\" in \"check_ssl_verify_interval\" directive: it must \
                     be a time from 1ms to 7d (500ms, 30s, 1h)",
                    String::from_utf8_lossy(bad)
                )
            );
        }
        assert_eq!(parse_verify_depth(&[b"0"]), Ok(0));
        assert_eq!(parse_verify_depth(&[b"100"]), Ok(100));
        assert_eq!(
            err(parse_verify_depth(&[b"101"])),
            "invalid value \"101\" in \"check_ssl_verify_depth\" directive: it must be a number \
             from 0 to 100"
        );
        assert!(err(parse_verify_depth(&[b"-1"])).starts_with("invalid value \"-1\""));
    }

    #[test]
    fn protocols() {
        assert_eq!(
            parse_protocols(&[b"TLSv1.2", b"TLSv1.3"]),
            Ok(protocol::DEFAULT)
        );
        assert_eq!(parse_protocols(&[b"TLSv1"]), Ok(protocol::TLSV1));
        assert_eq!(
            err(parse_protocols(&[b"TLSv1.4"])),
            "invalid value \"TLSv1.4\" in \"check_ssl_protocols\" directive: it must be SSLv2, \
             SSLv3, TLSv1, TLSv1.1, TLSv1.2 or TLSv1.3"
        );
        assert!(err(parse_protocols(&[b"TLSv1.2", b"TLSv1.2"])).ends_with("given twice"));
        assert!(err(parse_protocols(&[])).starts_with("invalid number of arguments"));
    }

    proptest! {
        #[test]
        fn never_panic(args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 0..4)) {
            let a: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            let _ = parse_flag("d", &a);
            let _ = parse_text("d", &a);
            let _ = parse_verify_depth(&a);
            let _ = parse_protocols(&a);
        }
    }
}
