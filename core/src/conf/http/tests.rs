//! Tests of the http check directives: every form and every message.

use super::*;
use proptest::prelude::*;

fn err<T: std::fmt::Debug>(r: Result<T, ConfError>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn http_send_keeps_bytes_and_decodes_hex() {
    let s = parse_http_send(b"GET /healthz HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(s.request, b"GET /healthz HTTP/1.0\r\n\r\n");
    assert_eq!(s.warning, None);
    let s = parse_http_send(b"\\x00\\x01ping\\x0d\\x0a").unwrap();
    assert_eq!(s.request, b"\0\x01ping\r\n");
    // Other backslashes stay (nginx decoded the escapes it knows).
    assert_eq!(parse_http_send(b"a\\qb").unwrap().request, b"a\\qb");
}

#[test]
fn http_send_errors() {
    assert_eq!(
        err(parse_http_send(b"")),
        "invalid value \"\" in \"check_http_send\" directive: the request must not be empty"
    );
    assert_eq!(
        err(parse_http_send(b"GET / HTTP/1.0\\x0")),
        "invalid value \"GET / HTTP/1.0\\x0\" in \"check_http_send\" directive: \
         \\x at byte 14 must be followed by two hex digits (\\x0d, \\xff)"
    );
    // The argument is printed as written, controls escaped.
    assert_eq!(
        err(parse_http_send(b"\r\n\\xg")),
        "invalid value \"\\x0d\\x0a\\xg\" in \"check_http_send\" directive: \
         \\x at byte 2 must be followed by two hex digits (\\x0d, \\xff)"
    );
}

#[test]
fn http11_without_host_warns() {
    let warned = |r: &[u8]| parse_http_send(r).unwrap().warning;
    let w = Some(ConfError(HOST_WARNING.into()));
    assert_eq!(
        HOST_WARNING,
        "check_http_send request is HTTP/1.1 without a Host header: backends will answer 400"
    );
    assert_eq!(warned(b"GET / HTTP/1.1\r\n\r\n"), w);
    // (A head that never ends is the first thing to say.)
    assert!(warned(b"GET / HTTP/1.1").is_some());
    assert_eq!(warned(b"HEAD /x?y HTTP/1.1\r\nAccept: */*\r\n\r\n"), w);
    assert_eq!(warned(b"GET / HTTP/1.1\nUser-Agent: x\n\n"), w);
    // A Host line after the end of the head does not count.
    assert_eq!(warned(b"GET / HTTP/1.1\r\n\r\nHost: a\r\n"), w);
    // Not a header named Host.
    assert_eq!(warned(b"GET / HTTP/1.1\r\nHostname: a\r\n\r\n"), w);
    assert_eq!(warned(b"GET / HTTP/1.1\r\nX-Host: a\r\n\r\n"), w);
    assert_eq!(warned(b"GET / HTTP/1.1\r\nHost : a\r\n\r\n"), w);

    for fine in [
        &b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nhost:a\r\n\r\n",
        b"GET / HTTP/1.1\r\nAccept: */*\r\nHOST: a\r\n\r\n",
        b"GET / HTTP/1.1\nHost: a\n\n",
        b"GET / HTTP/1.0\r\n\r\n",
        b"GET /\r\n",
        b"GET / HTTP/2\r\n\r\n",
        b"GET / HTTP/1.10\r\n\r\n",
        b"GET  / HTTP/1.1\r\n\r\n",
        b"get\x01 / HTTP/1.1\r\n\r\n",
        b"\r\nGET / HTTP/1.1\r\n\r\n",
        b"PING\r\n",
        b"\x16\x03\x01",
    ] {
        assert_eq!(warned(fine), None, "{:?}", String::from_utf8_lossy(fine));
    }
    // Decoded before it is looked at.
    assert_eq!(warned(b"GET / HTTP/1.1\\x0d\\x0a\\x0d\\x0a"), w);
}

#[test]
fn expect_alive() {
    let p = |args: &[&str]| {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        parse_http_expect_alive(&a)
    };
    assert_eq!(p(&["http_2xx", "http_3xx"]), Ok(StatusClasses::DEFAULT));
    assert_eq!(StatusClasses::default(), StatusClasses::DEFAULT);
    assert_eq!(StatusClasses::DEFAULT.bits(), 0b1100);
    let all = p(&["http_5xx", "http_1xx", "http_4xx", "http_3xx", "http_2xx"]).unwrap();
    assert_eq!(all.bits(), 0b11_1110);
    let two = p(&["http_2xx"]).unwrap();
    assert!(two.has(2) && !two.has(3) && !two.has(1));
    assert!(two.accepts(200) && two.accepts(299));
    assert!(!two.accepts(199) && !two.accepts(300) && !two.accepts(0));
    assert!(!all.accepts(600) && !all.accepts(99) && !all.accepts(999));
    assert!(all.accepts(100) && all.accepts(599));

    assert_eq!(
        err(p(&[])),
        "invalid number of arguments in \"check_http_expect_alive\" directive"
    );
    for bad in ["http_6xx", "http_0xx", "HTTP_6XX", "2xx", "http_2xx ", ""] {
        assert_eq!(
            err(p(&["http_2xx", bad])),
            format!(
                "invalid value \"{bad}\" in \"check_http_expect_alive\" directive: \
                 must be http_1xx, http_2xx, http_3xx, http_4xx or http_5xx"
            )
        );
    }
    // The C modules' spellings: any case; a class named twice is one.
    assert_eq!(p(&["HTTP_2XX", "http_3XX"]), Ok(StatusClasses::DEFAULT));
    assert_eq!(
        p(&["http_2xx", "http_4xx", "http_2xx"]),
        p(&["http_2xx", "http_4xx"])
    );
    // A repeated directive adds its classes (the handler unions them).
    let both = p(&["http_2xx"]).unwrap().union(p(&["http_4xx"]).unwrap());
    assert!(both.has(2) && both.has(4) && !both.has(3));
    assert_eq!(
        StatusClasses::DEFAULT.ranges(),
        vec![(200, 299), (300, 399)]
    );
}

#[test]
fn status_classes_ignore_other_classes() {
    assert_eq!(StatusClasses::NONE.with(0), StatusClasses::NONE);
    assert_eq!(StatusClasses::NONE.with(6), StatusClasses::NONE);
    assert!(!StatusClasses::NONE.with(7).has(7));
    assert!(!StatusClasses::DEFAULT.has(0));
}

#[test]
fn http_request() {
    let p = |args: &[&[u8]]| parse_http_request(args);
    let v = |m: &str, u: &str| Ok((m.as_bytes().to_vec(), u.as_bytes().to_vec()));
    assert_eq!(p(&[b"/"]), v("GET", "/"));
    assert_eq!(p(&[b"/healthz?full=1"]), v("GET", "/healthz?full=1"));
    assert_eq!(p(&[b"HEAD", b"/x"]), v("HEAD", "/x"));
    assert_eq!(p(&[b"OPTIONS", b"/%20a"]), v("OPTIONS", "/%20a"));
    assert_eq!(p(&[b"POST", b"//a/b#c"]), v("POST", "//a/b#c"));

    assert_eq!(
        err(p(&[])),
        "invalid number of arguments in \"check_http_request\" directive"
    );
    assert_eq!(
        err(p(&[b"GET", b"/", b"HTTP/1.0"])),
        "invalid number of arguments in \"check_http_request\" directive"
    );
    for bad in [
        &b"get"[..],
        b"Get",
        b"",
        b"GET1",
        b"M-SEARCH",
        b"G\xc3\x89T",
    ] {
        assert_eq!(
            err(p(&[bad, b"/"])),
            format!(
                "invalid value \"{}\" in \"check_http_request\" directive: \
                 the method must be uppercase letters (GET, HEAD)",
                printable(bad)
            )
        );
    }
    for bad in [
        &b"healthz"[..],
        b"",
        b"*",
        b"HEAD",
        b"http://a/",
        b"/a b",
        b"/a\tb",
        b"/a\r\nHost: x",
        b"/\x00",
        b"/\x7f",
        b"/\xc3\xa9",
    ] {
        assert_eq!(
            err(p(&[bad])),
            format!(
                "invalid value \"{}\" in \"check_http_request\" directive: \
                 the URI must start with \"/\" and be printable ASCII without spaces \
                 (percent-encode the rest)",
                printable(bad)
            )
        );
    }
    // The method is checked first.
    assert!(err(p(&[b"get", b"x"])).contains("\"get\""));
}

#[test]
fn http_header() {
    let p = |args: &[&[u8]]| parse_http_header(args);
    let v = |n: &str, x: &str| Ok((n.as_bytes().to_vec(), x.as_bytes().to_vec()));
    assert_eq!(p(&[b"X-Probe", b"1"]), v("X-Probe", "1"));
    assert_eq!(
        p(&[b"Host", b"backend.example"]),
        v("Host", "backend.example")
    );
    assert_eq!(p(&[b"x!#$%&'*+-.^_`|~9", b""]), v("x!#$%&'*+-.^_`|~9", ""));
    assert_eq!(
        p(&[b"A", b" spaced \t value "]),
        v("A", " spaced \t value ")
    );
    assert_eq!(
        p(&[b"A", "\u{e9}\x7f".as_bytes()]),
        v("A", "\u{e9}\x7f"),
        "obs-text and DEL are left to the backend"
    );

    for args in [&[][..], &[&b"A"[..]], &[b"A", b"b", b"c"]] {
        assert_eq!(
            err(p(args)),
            "invalid number of arguments in \"check_http_header\" directive"
        );
    }
    for bad in [
        &b""[..],
        b"X Probe",
        b"X:Probe",
        b"X-Probe:",
        b"(x)",
        b"\xc3\xa9",
        b"a\r\n",
    ] {
        assert_eq!(
            err(p(&[bad, b"v"])),
            format!(
                "invalid value \"{}\" in \"check_http_header\" directive: \
                 a header name is a token (letters, digits and !#$%&'*+-.^_`|~)",
                printable(bad)
            )
        );
    }
    for bad in [&b"a\rb"[..], b"a\nb", b"\0", b"v\r\nX-Evil: 1"] {
        assert_eq!(
            err(p(&[b"X", bad])),
            format!(
                "invalid value \"{}\" in \"check_http_header\" directive: \
                 a header value must not contain CR, LF or NUL",
                printable(bad)
            )
        );
    }
}

#[test]
fn buffer_size() {
    assert_eq!(BUFFER_SIZE_DEFAULT, 16 * 1024);
    assert_eq!(parse_buffer_size(b"1k"), Ok(1024));
    assert_eq!(parse_buffer_size(b"1024"), Ok(1024));
    assert_eq!(parse_buffer_size(b"16k"), Ok(16 * 1024));
    assert_eq!(parse_buffer_size(b"16K"), Ok(16 * 1024));
    assert_eq!(parse_buffer_size(b"1m"), Ok(1 << 20));
    assert_eq!(parse_buffer_size(b"1024k"), Ok(1 << 20));
    for bad in [
        &b"1023"[..],
        b"0",
        b"0k",
        b"1025k",
        b"2m",
        b"1g",
        b"99999999999999999999",
    ] {
        assert_eq!(
            err(parse_buffer_size(bad)),
            format!(
                "invalid value \"{}\" in \"check_buffer_size\" directive: \
                 size must be from 1k to 1m",
                printable(bad)
            )
        );
    }
    for bad in [&b""[..], b"k", b"16kb", b"1.5k", b"-1k", b"16 k", b"\xff"] {
        assert_eq!(
            err(parse_buffer_size(bad)),
            format!(
                "invalid value \"{}\" in \"check_buffer_size\" directive: \
                 size must be a number of bytes, optionally with a unit k or m (16k)",
                printable(bad)
            )
        );
    }
}

#[test]
fn tokens() {
    assert!(is_token(b"GET"));
    assert!(is_token(b"X-Forwarded-For"));
    assert!(!is_token(b""));
    assert!(!is_token(b"a b"));
    assert!(!is_token(b"a\"b"));
    for b in 0..=255u8 {
        let want = b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        assert_eq!(is_tchar(b), want, "{b:#x}");
    }
}

proptest! {
    #[test]
    fn never_panic(args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..24), 0..4)) {
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        if let Ok((m, u)) = parse_http_request(&args) {
            prop_assert!(m.iter().all(u8::is_ascii_uppercase) && !m.is_empty());
            prop_assert!(u.starts_with(b"/") && u.iter().all(u8::is_ascii_graphic));
        }
        if let Ok((n, v)) = parse_http_header(&args) {
            prop_assert!(is_token(&n));
            prop_assert!(!v.iter().any(|&b| matches!(b, b'\r' | b'\n' | 0)));
        }
        if let Ok(set) = parse_http_expect_alive(&args) {
            prop_assert!(set.bits() != 0 && set.bits() & !0b11_1110 == 0);
        }
        if let Some(first) = args.first() {
            if let Ok(n) = parse_buffer_size(first) {
                prop_assert!((BUFFER_SIZE_MIN..=BUFFER_SIZE_MAX).contains(&n));
            }
            if let Ok(s) = parse_http_send(first) {
                prop_assert!(!s.request.is_empty());
            }
        }
    }

    #[test]
    fn http11_request_lines_warn_unless_host(
        method in "[A-Z]{1,7}",
        // (no backslashes: `\x` would be an escape)
        target in "/[!-\\[\\]-~]{0,20}",
        headers in proptest::collection::vec(("[A-Za-z-]{1,10}", "[ -\\[\\]-~]{0,10}"), 0..4),
        host: bool,
    ) {
        let mut r = format!("{method} {target} HTTP/1.1\r\n");
        for (n, v) in &headers {
            r.push_str(&format!("{n}: {v}\r\n"));
        }
        if host {
            r.push_str("hOsT: a\r\n");
        }
        r.push_str("\r\n");
        let named_host = headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host"));
        let s = parse_http_send(r.as_bytes()).unwrap();
        prop_assert_eq!(s.warning.is_some(), !host && !named_host);
        let old = r.replacen("HTTP/1.1", "HTTP/1.0", 1);
        prop_assert_eq!(parse_http_send(old.as_bytes()).unwrap().warning, None);
    }

    #[test]
    fn buffer_sizes_in_k(n in 0u64..2048) {
        let got = parse_buffer_size(format!("{n}k").as_bytes());
        prop_assert_eq!(got.is_ok(), (1..=1024).contains(&n));
    }
}

#[test]
fn a_request_whose_head_never_ends_warns() {
    let warned = |r: &[u8]| parse_http_send(r).unwrap().warning.map(|w| w.0);
    let w = warned(b"GET / HTTP/1.0").unwrap();
    assert_eq!(
        w,
        "check_http_send request has no empty line after its head: the backend waits for the \
         rest and every round times out; end it with \\r\\n\\r\\n"
    );
    assert!(warned(b"HEAD /status HTTP/1.0\r\n").is_some());
    let doubled = warned(b"GET / HTTP/1.0\\r\\n\\r\\n").unwrap();
    assert!(
        doubled.ends_with("(the request holds a backslash and an r or n: write \\r, not \\\\r)"),
        "{doubled}"
    );
    assert_eq!(warned(b"GET / HTTP/1.0\r\n\r\n"), None);
    assert_eq!(warned(b"GET / HTTP/1.0\n\n"), None);
    // Not HTTP (a tcp check's bytes): no opinion.
    assert_eq!(warned(b"PING\r\n"), None);
    assert_eq!(warned(b"\x01\x02"), None);
}

#[test]
fn variables_are_sent_as_written_and_nginx_t_says_so() {
    let v = |r: &[u8]| parse_http_send(r).unwrap().variable.map(|w| w.0);
    assert_eq!(
        v(b"GET / HTTP/1.0\r\nHost: $host\r\n\r\n").as_deref(),
        Some(
            "check_http_send request holds \"$host\": nginx variables are not expanded in it; \
             it is sent as written"
        )
    );
    assert!(v(b"GET /${uri}x HTTP/1.0\r\n\r\n")
        .unwrap()
        .contains("\"$uri\""));
    assert_eq!(v(b"GET /price?$5 HTTP/1.0\r\n\r\n"), None);
    assert_eq!(v(b"GET / HTTP/1.0\r\n\r\n"), None);
}
