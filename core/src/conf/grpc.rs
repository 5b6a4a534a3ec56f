//! The directives of HTTP/2 checks (docs/directives.md): `check_grpc_service`,
//! `check_grpc_status` and `check_http_version`.

use super::http::{invalid_count, invalid_value};
use super::ConfError;

/// The longest service name `check_grpc_service` takes.
pub const GRPC_SERVICE_MAX: usize = 1024;

/// `check_grpc_service NAME;`: the service whose health the check asks
/// for (`""`: the server's overall health). Printable ASCII without
/// spaces, at most [`GRPC_SERVICE_MAX`] bytes.
pub fn parse_grpc_service(args: &[&[u8]]) -> Result<Vec<u8>, ConfError> {
    const D: &str = "check_grpc_service";
    let [name] = *args else {
        return Err(invalid_count(D));
    };
    if name.len() > GRPC_SERVICE_MAX {
        return Err(invalid_value(
            D,
            name,
            &format!("a service name has at most {GRPC_SERVICE_MAX} bytes"),
        ));
    }
    if !name.iter().all(u8::is_ascii_graphic) {
        return Err(invalid_value(
            D,
            name,
            "a service name is printable ASCII without spaces (grpc.health.v1.Health)",
        ));
    }
    Ok(name.to_vec())
}

/// `check_grpc_status CODE ...;`: gRPC status codes that pass as they are,
/// besides `0` with a SERVING answer; each from 1 to 16
/// (`12`, UNIMPLEMENTED: a server without the Health service), in order,
/// each once.
pub fn parse_grpc_status(args: &[&[u8]]) -> Result<Vec<u32>, ConfError> {
    const D: &str = "check_grpc_status";
    if args.is_empty() {
        return Err(invalid_count(D));
    }
    let mut codes = Vec::with_capacity(args.len());
    for &a in args {
        let code = match a {
            [d] if d.is_ascii_digit() => u32::from(d - b'0'),
            [b'1', d] if d.is_ascii_digit() => 10 + u32::from(d - b'0'),
            _ => 99,
        };
        if code == 0 {
            return Err(invalid_value(
                D,
                a,
                "0 (OK) passes when the server answers SERVING; list the other codes that \
                 pass, from 1 to 16",
            ));
        }
        if code > 16 {
            return Err(invalid_value(
                D,
                a,
                "a gRPC status code is a number from 1 to 16 (12 is UNIMPLEMENTED)",
            ));
        }
        if codes.contains(&code) {
            return Err(invalid_value(D, a, "the code is given twice"));
        }
        codes.push(code);
    }
    Ok(codes)
}

/// The HTTP version of an http check's rounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HttpVersion {
    /// HTTP/1.1 (and the HTTP/1.0 of a `check_http_send` request).
    #[default]
    Http1,
    /// HTTP/2: h2c with prior knowledge for `type=http`, ALPN `h2` for
    /// `type=https`.
    Http2,
}

/// `check_http_version 1.1 | 2;`.
pub fn parse_http_version(args: &[&[u8]]) -> Result<HttpVersion, ConfError> {
    const D: &str = "check_http_version";
    match *args {
        [b"1.1"] => Ok(HttpVersion::Http1),
        [b"2"] => Ok(HttpVersion::Http2),
        [v] => Err(invalid_value(D, v, "the version is 1.1 or 2")),
        _ => Err(invalid_count(D)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_names() {
        assert_eq!(parse_grpc_service(&[b""]), Ok(Vec::new()));
        assert_eq!(parse_grpc_service(&[b"pkg.Svc"]), Ok(b"pkg.Svc".to_vec()));
        assert_eq!(
            parse_grpc_service(&[b"a b"]).unwrap_err().0,
            "invalid value \"a b\" in \"check_grpc_service\" directive: a service name is \
             printable ASCII without spaces (grpc.health.v1.Health)"
        );
        assert!(parse_grpc_service(&[&[b'a'; 1025][..]]).is_err());
        assert!(parse_grpc_service(&[b"a", b"b"]).is_err());
    }

    #[test]
    fn status_codes() {
        assert_eq!(parse_grpc_status(&[b"12"]), Ok(vec![12]));
        assert_eq!(
            parse_grpc_status(&[b"12", b"5", b"16"]),
            Ok(vec![12, 5, 16])
        );
        for bad in [&b"0"[..], b"17", b"012", b"-1", b"x", b"", b"100"] {
            assert!(parse_grpc_status(&[bad]).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_grpc_status(&[b"17"]).unwrap_err().0,
            "invalid value \"17\" in \"check_grpc_status\" directive: a gRPC status code is \
             a number from 1 to 16 (12 is UNIMPLEMENTED)"
        );
        assert!(parse_grpc_status(&[b"12", b"12"]).is_err());
        assert!(parse_grpc_status(&[]).is_err());
    }

    #[test]
    fn versions() {
        assert_eq!(parse_http_version(&[b"2"]), Ok(HttpVersion::Http2));
        assert_eq!(parse_http_version(&[b"1.1"]), Ok(HttpVersion::Http1));
        assert_eq!(
            parse_http_version(&[b"1.0"]).unwrap_err().0,
            "invalid value \"1.0\" in \"check_http_version\" directive: the version is 1.1 or 2"
        );
        assert!(parse_http_version(&[b"2", b"1.1"]).is_err());
    }
}
