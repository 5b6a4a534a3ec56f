//! Names a TLS check sends and verifies (docs/tls.md): the SNI of
//! the ClientHello and the name the peer's certificate must match, from
//! `check_ssl_name`, the `Host` of an https request or the `server` line.

/// Whether `host` is an IP address literal (`127.0.0.1`, `::1`,
/// `[::1]`): no SNI is sent for one (RFC 6066 allows only host names).
pub fn is_ip_literal(host: &[u8]) -> bool {
    let inner = host
        .strip_prefix(b"[")
        .and_then(|h| h.strip_suffix(b"]"))
        .unwrap_or(host);
    let Ok(text) = core::str::from_utf8(inner) else {
        return false;
    };
    text.parse::<std::net::IpAddr>().is_ok()
}

/// The host part of a `Host` header value (`example.com:8443` ->
/// `example.com`, `[::1]:443` -> `[::1]`).
pub fn host_of_header(value: &[u8]) -> &[u8] {
    crate::http::request::host_of_server(value).0
}

/// The name the check verifies the certificate against: `check_ssl_name`
/// when given, else `host` (the request's `Host` for https, the server's
/// host for tls).
pub fn verify_name<'a>(explicit: Option<&'a [u8]>, host: &'a [u8]) -> &'a [u8] {
    explicit.unwrap_or(host)
}

/// The SNI the ClientHello carries, if any: the verify name, unless
/// `check_ssl_server_name off` or the name is an IP literal.
pub fn sni<'a>(send: bool, explicit: Option<&'a [u8]>, host: &'a [u8]) -> Option<&'a [u8]> {
    let name = verify_name(explicit, host);
    (send && !name.is_empty() && !is_ip_literal(name)).then_some(name)
}

/// The message of one nginx error log line, without the time, level,
/// process and connection prefix, at most `max` bytes of it, trailing
/// white space removed: what a TLS check's log line quotes of nginx's own
/// message about a failed handshake.
///
/// `2026/12/01 10:00:00 [info] 12#12: *3 SSL_do_handshake() failed (...)`
/// gives `SSL_do_handshake() failed (...)`.
pub fn logged_message(line: &[u8], max: usize) -> String {
    let text = line
        .windows(2)
        .position(|w| w == b": ")
        .map_or(line, |at| &line[at + 2..]);
    let text = match text.strip_prefix(b"*") {
        Some(rest) => rest
            .iter()
            .position(|&b| b == b' ')
            .map_or(rest, |at| &rest[at + 1..]),
        None => text,
    };
    String::from_utf8_lossy(&text[..text.len().min(max)])
        .trim_end()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ip_literals() {
        for ip in [
            &b"127.0.0.1"[..],
            b"::1",
            b"[::1]",
            b"10.1.2.3",
            b"[2001:db8::5]",
            b"::",
        ] {
            assert!(is_ip_literal(ip), "{}", String::from_utf8_lossy(ip));
        }
        for name in [
            &b"example.com"[..],
            b"localhost",
            b"127.0.0.1.nip.io",
            b"[::1",
            b"",
            b"1.2.3",
        ] {
            assert!(!is_ip_literal(name), "{}", String::from_utf8_lossy(name));
        }
    }

    #[test]
    fn sni_rules() {
        assert_eq!(sni(true, None, b"backend.test"), Some(&b"backend.test"[..]));
        assert_eq!(sni(true, None, b"127.0.0.1"), None, "no SNI for an IP");
        assert_eq!(sni(true, None, b"[::1]"), None);
        assert_eq!(
            sni(true, Some(b"api.test"), b"127.0.0.1"),
            Some(&b"api.test"[..]),
            "check_ssl_name names a host"
        );
        assert_eq!(
            sni(false, Some(b"api.test"), b"x.test"),
            None,
            "server_name off"
        );
        assert_eq!(verify_name(Some(b"api.test"), b"127.0.0.1"), b"api.test");
        assert_eq!(verify_name(None, b"127.0.0.1"), b"127.0.0.1");
        assert_eq!(host_of_header(b"example.com:8443"), b"example.com");
        assert_eq!(host_of_header(b"[::1]:443"), b"[::1]");
    }

    #[test]
    fn logged_message_drops_nginx_prefix() {
        let line = b"2026/12/01 10:00:00 [info] 12#12: *3 SSL_do_handshake() failed (SSL: x)\n";
        assert_eq!(
            logged_message(line, 512),
            "SSL_do_handshake() failed (SSL: x)"
        );
        assert_eq!(
            logged_message(b"2026/12/01 10:00:00 [crit] 1#1: no connection", 512),
            "no connection"
        );
        assert_eq!(logged_message(b"plain", 3), "pla");
    }

    proptest! {
        #[test]
        fn dotted_quads_are_literals(a: u8, b: u8, c: u8, d: u8) {
            let ip = format!("{a}.{b}.{c}.{d}");
            prop_assert!(is_ip_literal(ip.as_bytes()));
            prop_assert_eq!(sni(true, None, ip.as_bytes()), None);
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40), max in 0usize..50) {
            prop_assert!(logged_message(&bytes, max).len() <= 3 * max);
            let _ = is_ip_literal(&bytes);
            let _ = sni(true, None, &bytes);
            let _ = host_of_header(&bytes);
        }
    }
}
