use super::*;
use proptest::collection::vec;
use proptest::prelude::*;

const CFG: Config = Config {
    max_head: 4096,
    body_keep: 64,
    head_request: false,
};

fn cfg(max_head: usize, body_keep: usize, head_request: bool) -> Config {
    Config {
        max_head,
        body_keep,
        head_request,
    }
}

/// Feeds `input` in one piece.
fn parse_with(c: Config, input: &[u8]) -> Parser {
    let mut p = Parser::new(c);
    p.feed(input);
    p
}

fn parse(input: &[u8]) -> Parser {
    parse_with(CFG, input)
}

fn state(input: &[u8]) -> State {
    parse(input).state()
}

fn invalid(input: &[u8]) -> Option<Invalid> {
    match parse(input).state() {
        State::Invalid(e) => Some(e),
        _ => None,
    }
}

/// The state after `input` and eof.
fn at_eof(input: &[u8]) -> State {
    parse(input).eof()
}

// --- status line --------------------------------------------------------------

#[test]
fn status_line_versions_and_reasons() {
    let p = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(p.state(), State::Complete);
    let h = p.head().unwrap();
    assert_eq!((h.version, h.status, h.reason()), (1, 200, &b"OK"[..]));

    let p = parse(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
    let h = p.head().unwrap();
    assert_eq!((h.version, h.status), (0, 503));
    assert_eq!(h.reason(), b"Service Unavailable");

    // Empty reason, with or without its SP; bare LF line ends.
    for text in [
        &b"HTTP/1.1 204 \r\n\r\n"[..],
        b"HTTP/1.1 204\r\n\r\n",
        b"HTTP/1.1 204\n\n",
        b"HTTP/1.1 204 \n\r\n",
    ] {
        let p = parse(text);
        assert_eq!(p.state(), State::Complete, "{text:?}");
        assert_eq!(p.head().unwrap().reason(), b"");
    }
    // A reason as received: spaces, HTAB, obs-text.
    let p = parse(b"HTTP/1.1 200  all \t\xc3\xa9 good \r\n\r\n");
    assert_eq!(p.head().unwrap().reason(), b" all \t\xc3\xa9 good ");
    assert_eq!(p.head().unwrap().status, 200);
}

#[test]
fn versions_other_than_1_0_and_1_1() {
    for text in [
        &b"<html>hello</html>"[..], // HTTP/0.9: no status line
        b"HTTP/2 200 OK\r\n\r\n",
        b"HTTP/2.0 200 OK\r\n\r\n",
        b"HTTP/1.2 200 OK\r\n\r\n",
        b"HTTP/0.9 200 OK\r\n\r\n",
        b"http/1.1 200 OK\r\n\r\n",
        b"Http/1.1 200 OK\r\n\r\n",
        b"HTTP/1.10 200 OK\r\n\r\n",
        b"HTTP/1.1.1 200 OK\r\n\r\n",
        b"HTTP/1.1200 OK\r\n\r\n", // read as a longer version
        b"\r\nHTTP/1.1 200 OK\r\n\r\n",
        b" HTTP/1.1 200 OK\r\n\r\n",
        b"\x00\x01\x02",
        b"\x16\x03\x01\x00", // a TLS record
        b"SSH-2.0-OpenSSH_9.6\r\n",
    ] {
        assert_eq!(invalid(text), Some(Invalid::Version), "{text:?}");
    }
    // Detected as soon as the first byte is wrong.
    assert_eq!(state(b"HTTP/1.2"), State::Invalid(Invalid::Version));
    assert_eq!(state(b"X"), State::Invalid(Invalid::Version));
    assert_eq!(state(b"HTTP/1."), State::NeedMore);
}

#[test]
fn status_codes_outside_100_to_599() {
    for text in [
        &b"HTTP/1.1 099 x\r\n\r\n"[..],
        b"HTTP/1.1 000 x\r\n\r\n",
        b"HTTP/1.1 600 x\r\n\r\n",
        b"HTTP/1.1 999 x\r\n\r\n",
        b"HTTP/1.1 20 x\r\n\r\n",
        b"HTTP/1.1 2000 x\r\n\r\n",
        b"HTTP/1.1 20x x\r\n\r\n",
        b"HTTP/1.1 -20 x\r\n\r\n",
        b"HTTP/1.1  200 x\r\n\r\n",
        b"HTTP/1.1\t200 x\r\n\r\n",
        b"HTTP/1.1\r\n\r\n",
        b"HTTP/1.1 \r\n\r\n",
        b"HTTP/1.1 200\tx\r\n\r\n",
        b"HTTP/1.1 200x\r\n\r\n",
        // 101: a health check never upgrades.
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
    ] {
        assert_eq!(invalid(text), Some(Invalid::StatusLine), "{text:?}");
    }
    for s in [100, 102, 199, 200, 299, 300, 404, 500, 599] {
        let text = format!("HTTP/1.1 {s} x\r\n\r\n");
        assert!(!matches!(state(text.as_bytes()), State::Invalid(_)), "{s}");
    }
}

// --- header fields ------------------------------------------------------------

#[test]
fn header_fields_as_received_values_trimmed() {
    let p = parse(
        b"HTTP/1.1 200 OK\r\n\
          X-Name:value\r\n\
          content-TYPE: \t text/plain; charset=utf-8 \t\r\n\
          Empty:\r\n\
          Blank:   \r\n\
          X-Name: second: with colon\r\n\
          Obs: \xe9t\xe9 \"quoted\" (comment)\r\n\
          Tab: a\tb\r\n\
          Content-Length: 0\r\n\r\n",
    );
    assert_eq!(p.state(), State::Complete);
    let h = p.head().unwrap();
    let got: Vec<(&[u8], &[u8])> = h.headers().collect();
    assert_eq!(
        got,
        [
            (&b"X-Name"[..], &b"value"[..]),
            (b"content-TYPE", b"text/plain; charset=utf-8"),
            (b"Empty", b""),
            (b"Blank", b""),
            (b"X-Name", b"second: with colon"),
            (b"Obs", b"\xe9t\xe9 \"quoted\" (comment)"),
            (b"Tab", b"a\tb"),
            (b"Content-Length", b"0"),
        ]
    );
    assert_eq!(h.headers().len(), 8);
    assert_eq!(h.header(b"x-name"), Some(&b"value"[..]));
    assert_eq!(
        h.header(b"Content-Type"),
        Some(&b"text/plain; charset=utf-8"[..])
    );
    assert_eq!(h.header(b"missing"), None);
    let all: Vec<&[u8]> = h.headers_named(b"X-NAME").collect();
    assert_eq!(all, [&b"value"[..], b"second: with colon"]);
    assert!(h.has_token(b"content-type", b"TEXT/PLAIN; CHARSET=UTF-8"));
}

#[test]
fn header_syntax_errors() {
    for line in [
        &b"Name : value"[..], // whitespace before the colon
        b"Name\t: value",
        b" folded: value", // a leading space
        b"NoColon",        // no colon at all
        b": value",        // empty name
        b"Na(me: value",   // not a token
        b"Na\"me: value",
        b"N\xe9me: value", // obs-text in a name
        b"Name: a\x00b",   // NUL
        b"Name: a\x01b",
        b"Name: a\x7fb", // DEL
        b"Name: a\x1bb",
        b"Na\x00me: value",
        b"Name: a\rb", // a lone CR
        b"Name\r",     // CR in a name
    ] {
        let mut text = b"HTTP/1.1 200 OK\r\nA: b\r\n".to_vec();
        text.extend_from_slice(line);
        text.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(invalid(&text), Some(Invalid::HeaderSyntax), "{line:?}");
    }
    // obs-fold: a continuation line.
    assert_eq!(
        invalid(b"HTTP/1.1 200 OK\r\nA: b\r\n  continued\r\n\r\n"),
        Some(Invalid::HeaderSyntax)
    );
    assert_eq!(
        invalid(b"HTTP/1.1 200 OK\r\nA: b\r\n\tcontinued\r\n\r\n"),
        Some(Invalid::HeaderSyntax)
    );
    // Control bytes and lone CRs in the status line.
    for text in [
        &b"HTTP/1.1 200 O\x00K\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\x7f\r\n\r\n",
        b"HTTP/1.1 200 OK\rX\r\n\r\n",
        b"HTTP/1.1 200\rX\n\n",
        b"HTTP/1.1\x00200 OK\r\n\r\n",
        b"HTTP/1.1 2\x0000 OK\r\n\r\n",
        // A lone CR where the head should end.
        b"HTTP/1.1 200 OK\r\nA: b\r\n\rX",
    ] {
        assert_eq!(invalid(text), Some(Invalid::HeaderSyntax), "{text:?}");
    }
    // A NUL in an interim response's head too.
    assert_eq!(
        invalid(b"HTTP/1.1 100 Continue\r\nX: \x00\r\n\r\nHTTP/1.1 200 OK\r\n\r\n"),
        Some(Invalid::HeaderSyntax)
    );
}

#[test]
fn head_too_large() {
    let head = b"HTTP/1.1 200 OK\r\nX-Pad: 0123456789\r\nContent-Length: 2\r\n\r\n";
    let n = head.len();
    let mut text = head.to_vec();
    text.extend_from_slice(b"ok");
    // Exactly max_head bytes of head: fine; one byte fewer allowed: too large.
    let p = parse_with(cfg(n, 8, false), &text);
    assert_eq!(p.state(), State::Complete);
    assert_eq!(p.body(), b"ok");
    let p = parse_with(cfg(n - 1, 8, false), &text);
    assert_eq!(p.state(), State::Invalid(Invalid::HeadTooLarge));
    assert!(p.head().is_none());

    // Detected at byte max_head + 1 of an endless header line, with at most
    // max_head bytes held.
    let mut p = Parser::new(cfg(1024, 0, false));
    let start = b"HTTP/1.1 200 OK\r\nX-Long: ";
    assert_eq!(p.feed(start), State::NeedMore);
    let mut fed = start.len();
    while fed < 1024 {
        assert_eq!(p.feed(b"a"), State::NeedMore);
        fed += 1;
    }
    assert_eq!(p.feed(b"a"), State::Invalid(Invalid::HeadTooLarge));
    assert!(p.held() <= 1024, "{}", p.held());

    // Counted per response: two interim heads and the final one, each
    // under the limit, together over it.
    let one = b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n";
    let mut text = one.repeat(2);
    text.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    let p = parse_with(cfg(one.len(), 0, false), &text);
    assert_eq!(p.state(), State::Complete);
    let p = parse_with(cfg(one.len() - 1, 0, false), &text);
    assert_eq!(p.state(), State::Invalid(Invalid::HeadTooLarge));

    // The trailer section is bounded the same way (on its own).
    let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    let trailer = b"X-Trailer: 0123456789012345678901234567890123456789\r\n\r\n";
    assert!(trailer.len() > head.len());
    let mut text = head.to_vec();
    text.extend_from_slice(b"0\r\n");
    text.extend_from_slice(trailer);
    let p = parse_with(cfg(trailer.len(), 0, false), &text);
    assert_eq!(p.state(), State::Complete);
    let p = parse_with(cfg(trailer.len() - 1, 0, false), &text);
    assert_eq!(p.state(), State::Invalid(Invalid::HeadTooLarge));
    assert!(p.head().is_some());
}

/// Runs of a name's, a value's and the reason phrase's bytes are taken at
/// once: the same head, the same limit and the same buffer capacity as
/// byte by byte, also when the limit falls inside a run.
#[test]
fn text_runs_as_bytewise() {
    let text: &[u8] = b"HTTP/1.1 200 A Fairly Long Reason Phrase\r\n\
        X-Some-Long-Header-Name: a value with spaces\t and a tab \r\n\
        Content-Length: 2\r\n\r\nok";
    for max in [20, 45, 60, 80, 100, text.len() - 3, text.len() - 2, 4096] {
        let whole = parse_with(cfg(max, 8, false), text);
        let mut single = Parser::new(cfg(max, 8, false));
        for b in text {
            single.feed(core::slice::from_ref(b));
        }
        assert_eq!(whole.state(), single.state(), "max_head {max}");
        assert_eq!(whole.held(), single.held(), "max_head {max}");
        let fields = |p: &Parser| {
            p.head().map(|h| {
                let f: Vec<(Vec<u8>, Vec<u8>)> =
                    h.headers().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
                (h.reason().to_vec(), f)
            })
        };
        assert_eq!(fields(&whole), fields(&single), "max_head {max}");
    }
    let p = parse_with(cfg(4096, 8, false), text);
    let h = p.head().unwrap();
    assert_eq!(h.reason(), b"A Fairly Long Reason Phrase");
    assert_eq!(
        h.header(b"x-some-long-header-name"),
        Some(&b"a value with spaces\t and a tab"[..])
    );
    assert_eq!(p.body(), b"ok");
}

// --- interim responses --------------------------------------------------------

#[test]
fn interim_responses_are_skipped() {
    let p = parse(
        b"HTTP/1.1 100 Continue\r\n\r\n\
          HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
    );
    assert_eq!(p.state(), State::Complete);
    let h = p.head().unwrap();
    assert_eq!(h.status, 200);
    assert_eq!(
        h.headers().collect::<Vec<_>>(),
        [(&b"Content-Length"[..], &b"2"[..])]
    );
    assert_eq!(p.body(), b"hi");
    assert!(p.reusable());

    // Interim headers (even Content-Length) are dropped; the head is only
    // there once the final one is complete.
    let mut p = Parser::new(CFG);
    assert_eq!(
        p.feed(b"HTTP/1.1 103 Early Hints\r\nContent-Length: 5\r\nLink: </x>\r\n\r\n"),
        State::NeedMore
    );
    assert!(p.head().is_none());
    assert_eq!(p.feed(b"HTTP/1.0 204 No Content\r\n\r\n"), State::Complete);
    let h = p.head().unwrap();
    assert_eq!((h.version, h.status, h.headers().len()), (0, 204, 0));
}

#[test]
fn at_most_eight_interim_responses() {
    let interim = b"HTTP/1.1 102 Processing\r\nX: y\r\n\r\n";
    let last = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    let mut text = interim.repeat(MAX_INTERIM as usize);
    text.extend_from_slice(last);
    assert_eq!(state(&text), State::Complete);

    let mut text = interim.repeat(MAX_INTERIM as usize + 1);
    text.extend_from_slice(last);
    assert_eq!(state(&text), State::Invalid(Invalid::TooManyInterim));
    // Known at the ninth's status code.
    let mut text = interim.repeat(MAX_INTERIM as usize);
    text.extend_from_slice(b"HTTP/1.1 100");
    assert_eq!(state(&text), State::Invalid(Invalid::TooManyInterim));
}

// --- framing ------------------------------------------------------------------

#[test]
fn head_request_with_content_length_completes_at_once() {
    let mut p = Parser::new(cfg(4096, 64, true));
    let s = p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 12345\r\n\r\n");
    assert_eq!(s, State::Complete);
    assert!(p.reusable());
    assert!(p.body_settled());
    assert_eq!(p.body(), b"");
    // Chunked or no framing at all: also no body.
    for text in [
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\n\r\n",
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n",
    ] {
        let p = parse_with(cfg(4096, 64, true), text);
        assert_eq!(p.state(), State::Complete, "{text:?}");
        assert!(p.reusable(), "{text:?}");
    }
}

#[test]
fn no_body_for_204_and_304() {
    for status in [204, 304] {
        for framing in [
            "Content-Length: 10\r\n",
            "Transfer-Encoding: chunked\r\n",
            "Content-Length: nonsense\r\n",
            "",
        ] {
            let text = format!("HTTP/1.1 {status} x\r\n{framing}\r\n");
            let mut p = parse(text.as_bytes());
            assert_eq!(p.state(), State::Complete, "{text}");
            assert!(p.reusable());
            // What follows is not a body.
            p.feed(b"0123456789");
            assert_eq!(p.trailing(), 10);
            assert!(!p.reusable());
        }
    }
}

#[test]
fn content_length_bodies() {
    let mut p = Parser::new(cfg(4096, 4, false));
    assert_eq!(
        p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"),
        State::Body
    );
    assert!(!p.body_settled());
    assert_eq!(p.feed(b"012"), State::Body);
    assert_eq!(p.body(), b"012");
    assert!(!p.body_settled());
    assert_eq!(p.feed(b"3456"), State::Body);
    assert_eq!(p.body(), b"0123");
    assert!(p.body_settled());
    assert!(!p.reusable());
    assert_eq!(p.feed(b"789"), State::Complete);
    assert_eq!(p.body_len(), 10);
    assert!(p.reusable());

    // Content-Length 0; identical duplicates; a list of identical values;
    // leading zeros; OWS around the value.
    for cl in [
        &b"Content-Length: 0\r\n"[..],
        b"Content-Length: 3\r\nContent-Length: 3\r\n",
        b"Content-Length: 3, 3\r\ncontent-length: 3\r\n",
        b"Content-Length: 003\r\n",
        b"CONTENT-LENGTH:\t3 \r\n",
    ] {
        let mut text = b"HTTP/1.1 200 OK\r\n".to_vec();
        text.extend_from_slice(cl);
        text.extend_from_slice(b"\r\nabc");
        let p = parse(&text);
        assert_eq!(p.state(), State::Complete, "{cl:?}");
        let want: &[u8] = if cl == b"Content-Length: 0\r\n" {
            b""
        } else {
            b"abc"
        };
        assert_eq!(p.body(), want);
        assert_eq!(p.trailing(), 3 - want.len() as u64);
    }

    // The largest length.
    let mut p = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551615\r\n\r\n");
    assert_eq!(p.feed(&[b'x'; 1000]), State::Body);
    assert_eq!(p.eof(), State::Invalid(Invalid::Truncated));
}

#[test]
fn framing_errors() {
    for framing in [
        &b"Content-Length: 3\r\nContent-Length: 4\r\n"[..],
        b"Content-Length: 3, 4\r\n",
        b"Content-Length: 3,\r\n",
        b"Content-Length: ,3\r\n",
        b"Content-Length: -1\r\n",
        b"Content-Length: +3\r\n",
        b"Content-Length: \r\n",
        b"Content-Length: 3a\r\n",
        b"Content-Length: 0x3\r\n",
        b"Content-Length: 3 3\r\n",
        b"Content-Length: 18446744073709551616\r\n",
        b"Content-Length: 99999999999999999999999\r\n",
        b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
        b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n",
        b"Transfer-Encoding: gzip\r\n",
        b"Transfer-Encoding: chunked, gzip\r\n",
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n",
        b"Transfer-Encoding: chunked, chunked\r\n",
        b"Transfer-Encoding: chunked;q=1\r\n",
        b"Transfer-Encoding: \r\n",
        b"Transfer-Encoding: ,\r\n",
        b"Transfer-Encoding: x y, chunked\r\n",
        b"Transfer-Encoding: chunkedx\r\n",
    ] {
        let mut text = b"HTTP/1.1 200 OK\r\n".to_vec();
        text.extend_from_slice(framing);
        text.extend_from_slice(b"\r\n");
        let p = parse(&text);
        assert_eq!(p.state(), State::Invalid(Invalid::Framing), "{framing:?}");
        // The head is complete, for the log line.
        assert_eq!(p.head().unwrap().status, 200);
    }
    // Transfer-Encoding in an HTTP/1.0 response (RFC 9112 section 6.1).
    assert_eq!(
        invalid(b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"),
        Some(Invalid::Framing)
    );
}

#[test]
fn transfer_codings_ending_in_chunked() {
    for te in [
        &b"Transfer-Encoding: chunked\r\n"[..],
        b"transfer-encoding: CHUNKED\r\n",
        b"Transfer-Encoding: gzip, chunked\r\n",
        b"Transfer-Encoding: gzip;level=1 , chunked\r\n",
        b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
        b"Transfer-Encoding: , chunked,\r\n",
    ] {
        let mut text = b"HTTP/1.1 200 OK\r\n".to_vec();
        text.extend_from_slice(te);
        text.extend_from_slice(b"\r\n3\r\nabc\r\n0\r\n\r\n");
        let p = parse(&text);
        assert_eq!(p.state(), State::Complete, "{te:?}");
        assert_eq!(p.body(), b"abc");
    }
}

#[test]
fn chunked_with_extensions_and_trailers() {
    let text = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
        5;name=value\r\nhello\r\n\
        1 ; a ; b=\"q u o t e d\"\r\n,\r\n\
        A\t;x\r\n worldwide\r\n\
        0;last\r\n\
        Expires: never\r\nX-Checksum: abc\r\n\
        \r\n";
    let mut p = Parser::new(cfg(4096, 100, false));
    assert_eq!(p.feed(text), State::Complete);
    assert_eq!(p.body(), b"hello, worldwide");
    assert_eq!(p.body_len(), 16);
    assert!(p.reusable());
    // Trailer fields are checked, not kept.
    assert_eq!(p.head().unwrap().header(b"expires"), None);

    // Bare LF line ends, uppercase hex, leading zeros up to 16 digits.
    let p =
        parse(b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n00000000000000A\nabcdefghij\n0\n\n");
    assert_eq!(p.state(), State::Complete);
    assert_eq!(p.body(), b"abcdefghij");
    let p = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0000000000000000\r\n\r\n");
    assert_eq!(p.state(), State::Complete);

    // A trailer field with bad syntax.
    assert_eq!(
        invalid(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nBad Name: x\r\n\r\n"),
        Some(Invalid::HeaderSyntax)
    );
    assert_eq!(
        invalid(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: \x00\r\n\r\n"),
        Some(Invalid::HeaderSyntax)
    );
}

#[test]
fn chunk_errors() {
    for body in [
        &b"\r\n"[..], // no size
        b";ext\r\n",
        b"g\r\n",
        b"-1\r\n",
        b"+1\r\n",
        b"0x1\r\n",
        b"1 2\r\nab\r\n",
        b"00000000000000001\r\nx\r\n0\r\n\r\n", // 17 digits
        b"10000000000000000\r\n",
        b"1\rx",         // a lone CR
        b"1;a\x00b\r\n", // a control byte in an extension
        b"1\r\nxyz",     // no line end after the data
        b"1\r\nx\rz",
        b"1\r\nx\n\n", // then an empty size line
        b"1\r\nx\r\n\x00",
    ] {
        let mut text = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        text.extend_from_slice(body);
        assert_eq!(invalid(&text), Some(Invalid::Chunk), "{body:?}");
    }
    // A chunk-size line longer than max_head (extensions).
    let mut text = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;".to_vec();
    text.extend_from_slice(&[b'e'; 100]);
    text.extend_from_slice(b"\r\nx\r\n0\r\n\r\n");
    assert_eq!(
        parse_with(cfg(104, 0, false), &text).state(),
        State::Complete
    );
    assert_eq!(
        parse_with(cfg(103, 0, false), &text).state(),
        State::Invalid(Invalid::Chunk)
    );
}

#[test]
fn a_huge_chunk_is_counted_not_stored() {
    let mut p = Parser::new(cfg(1024, 10, false));
    p.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n");
    let block = vec![b'z'; 64 * 1024];
    for _ in 0..320 {
        assert_eq!(p.feed(&block), State::Body);
    }
    assert_eq!(p.body_len(), 320 * 64 * 1024);
    assert_eq!(p.body(), b"zzzzzzzzzz");
    assert!(p.body_settled());
    assert!(p.held() <= 1024 + 10, "{}", p.held());
}

#[test]
fn an_endless_chunked_stream_costs_no_memory() {
    let mut p = Parser::new(cfg(1024, 0, false));
    p.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    let held = p.held();
    for i in 0..50_000u32 {
        let chunk = format!("{:x};i={i}\r\n{}\r\n", 40, "y".repeat(40));
        assert_eq!(p.feed(chunk.as_bytes()), State::Body);
    }
    assert_eq!(p.held(), held);
    assert!(p.held() <= 1024);
    assert_eq!(p.body_len(), 50_000 * 40);
}

#[test]
fn a_20_mb_body_costs_no_memory() {
    let mut p = Parser::new(cfg(1024, 100, false));
    p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 20971520\r\n\r\n");
    let block = vec![b'a'; 1 << 16];
    for _ in 0..320 - 1 {
        assert_eq!(p.feed(&block), State::Body);
    }
    assert_eq!(p.feed(&block), State::Complete);
    assert_eq!(p.body_len(), 20 << 20);
    assert_eq!(p.body().len(), 100);
    assert!(p.held() <= 1024 + 100);
}

#[test]
fn body_until_close() {
    let mut p = Parser::new(cfg(4096, 5, false));
    assert_eq!(p.feed(b"HTTP/1.1 200 OK\r\n\r\n"), State::Body);
    assert!(!p.body_settled());
    assert_eq!(p.feed(b"abc"), State::Body);
    assert_eq!(p.feed(b"defgh"), State::Body);
    assert!(p.body_settled());
    assert!(!p.reusable());
    assert_eq!(p.eof(), State::Complete);
    assert_eq!(p.body(), b"abcde");
    assert_eq!(p.body_len(), 8);
    assert_eq!(p.trailing(), 0);
    assert!(!p.reusable());
    // An empty body until close, keep-alive asked or not.
    for text in [
        &b"HTTP/1.1 200 OK\r\n\r\n"[..],
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n",
    ] {
        let mut p = parse(text);
        assert_eq!(p.eof(), State::Complete);
        assert!(!p.reusable());
    }
}

#[test]
fn eof_before_the_end_is_truncated() {
    for text in [
        &b""[..],
        b"HTTP/1.",
        b"HTTP/1.1 200 OK",
        b"HTTP/1.1 200 OK\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r",
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nab",
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: y\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r",
    ] {
        assert_eq!(at_eof(text), State::Invalid(Invalid::Truncated), "{text:?}");
    }
}

#[test]
fn after_complete_bytes_are_trailing() {
    let mut p = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n");
    assert_eq!(p.state(), State::Complete);
    assert_eq!(p.trailing(), 17);
    assert!(!p.reusable());
    assert_eq!(p.feed(b"\x00\x00"), State::Complete);
    assert_eq!(p.trailing(), 19);
    assert_eq!(p.eof(), State::Complete);
    assert_eq!(p.body(), b"ok");
}

#[test]
fn after_invalid_the_state_stays() {
    let mut p = parse(b"HTTP/1.1 999 x\r\n");
    assert_eq!(p.state(), State::Invalid(Invalid::StatusLine));
    assert_eq!(
        p.feed(b"\r\nHTTP/1.1 200 OK\r\n\r\n"),
        State::Invalid(Invalid::StatusLine)
    );
    assert_eq!(p.eof(), State::Invalid(Invalid::StatusLine));
    assert_eq!(p.trailing(), 0);
    assert!(!p.reusable());
    assert!(!p.body_settled());
    // Truncated stays too.
    let mut p = Parser::new(CFG);
    p.eof();
    assert_eq!(
        p.feed(b"HTTP/1.1 200 OK\r\n\r\n"),
        State::Invalid(Invalid::Truncated)
    );
}

// --- keep-alive ---------------------------------------------------------------

#[test]
fn keep_alive_decisions() {
    let cases: &[(&[u8], bool)] = &[
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false),
        (b"HTTP/1.1 200 OK\r\nConnection: CLOSE\r\nContent-Length: 0\r\n\r\n", false),
        (b"HTTP/1.1 200 OK\r\nConnection: Upgrade, Close\r\nContent-Length: 0\r\n\r\n", false),
        (b"HTTP/1.1 200 OK\r\nConnection: te\r\nConnection:close \r\nContent-Length: 0\r\n\r\n", false),
        (b"HTTP/1.1 200 OK\r\nConnection: closed\r\nContent-Length: 0\r\n\r\n", true),
        (b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", true),
        (b"HTTP/1.1 200 OK\r\nX-Connection: close\r\nContent-Length: 0\r\n\r\n", true),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", true),
        (b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n", true),
        (b"HTTP/1.0 200 OK\r\nconnection: foo, KEEP-ALIVE\r\nContent-Length: 0\r\n\r\n", true),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n", false),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alivex\r\nContent-Length: 0\r\n\r\n", false),
        // Chunked and no-body responses.
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true),
        (b"HTTP/1.1 204 No Content\r\n\r\n", true),
        (b"HTTP/1.0 304 Not Modified\r\n\r\n", false),
        // The final response decides, not an interim one.
        (b"HTTP/1.1 100 Continue\r\nConnection: close\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true),
    ];
    for &(text, want) in cases {
        let p = parse(text);
        assert_eq!(p.state(), State::Complete, "{text:?}");
        assert_eq!(p.reusable(), want, "{text:?}");
    }
    // Not reusable before the response is complete, after trailing bytes,
    // or once the peer closed.
    let mut p = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n");
    assert!(!p.reusable());
    p.feed(b"x");
    assert!(p.reusable());
    p.eof();
    assert!(!p.reusable());
    let mut p = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    p.feed(b"\r\n");
    assert!(!p.reusable());
}

#[test]
fn body_keep_zero_is_settled_at_once() {
    let mut p = Parser::new(cfg(4096, 0, false));
    assert!(!p.body_settled());
    assert_eq!(
        p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"),
        State::Body
    );
    assert!(p.body_settled());
    assert_eq!(p.body(), b"");
    assert_eq!(p.held(), p.head.text.capacity());
}

#[test]
fn invalid_names_are_distinct() {
    for (i, a) in Invalid::ALL.iter().enumerate() {
        assert!(!a.name().is_empty());
        assert!(a.name().bytes().all(|b| b.is_ascii_graphic() || b == b' '));
        for b in &Invalid::ALL[i + 1..] {
            assert_ne!(a.name(), b.name());
        }
    }
}

// --- property tests -----------------------------------------------------------

/// Generated header fields: names and values as sent.
type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// How the generated final response frames its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// HEAD, 204 or 304 (with a misleading Content-Length sometimes).
    None,
    Length,
    Chunked,
    Close,
}

/// One thing wrong with a generated response, and the error it must give.
#[derive(Clone, Debug)]
enum Fault {
    None,
    /// The first status line's version.
    Version(&'static str),
    /// The final status line's code (and what follows it).
    Status(&'static str),
    /// A line added to the final head.
    HeaderLine(&'static [u8]),
    /// Framing header lines replacing the right ones (`{n}`: the body
    /// length); `true`: the response is HTTP/1.0.
    Framing(&'static str, bool),
    /// A chunk-size line replaced.
    ChunkSize(usize, &'static str),
    /// The line end after a chunk's data replaced.
    ChunkEnd(usize, &'static str),
    /// The message cut at this fraction (per mille) of its length.
    Cut(u16),
    /// MAX_INTERIM + this many interim responses.
    Interim(usize),
}

#[derive(Clone, Debug)]
struct Spec {
    interim: Vec<(u16, Fields)>,
    version: u8,
    status: u16,
    reason: Vec<u8>,
    /// Extra header fields (never a framing or Connection field).
    headers: Fields,
    /// Connection field value.
    connection: Option<&'static str>,
    kind: Kind,
    body: Vec<u8>,
    /// Chunk boundaries, as cut points into `body`.
    cuts: Vec<usize>,
    ext: Vec<&'static str>,
    trailers: Fields,
    /// Line ends: 0 CRLF, 1 LF, 2 both.
    eol: u8,
    /// Spaces around values.
    ows: (&'static str, &'static str),
    garbage: Vec<u8>,
    /// Chooses max_head: 0 plenty, 1 the largest bounded region exactly, 2
    /// one less, 3 anything from 32.
    max_head: (u8, usize),
    body_keep: usize,
    fault: Fault,
}

/// What a rendered response must give.
#[derive(Clone, Debug, PartialEq)]
struct Expect {
    /// After the bytes, before eof.
    state: State,
    /// After eof.
    eof: State,
    /// For a valid response: head fields, body, trailing, reusable.
    valid: Option<Valid>,
}

#[derive(Clone, Debug, PartialEq)]
struct Valid {
    version: u8,
    status: u16,
    reason: Vec<u8>,
    headers: Fields,
    body: Vec<u8>,
    body_len: u64,
    trailing: u64,
    reusable: bool,
}

const CONNECTION: &[&str] = &[
    "close",
    "Close",
    "keep-alive",
    "Keep-Alive",
    "upgrade, close",
    "keep-alive, te",
    "te",
    " , CLOSE , ",
    "keep-alive,close",
    "closed",
];

fn tchar_name() -> impl Strategy<Value = Vec<u8>> {
    "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,12}"
        .prop_filter("not a framing or Connection field", |n| {
            !["content-length", "transfer-encoding", "connection"]
                .iter()
                .any(|f| n.eq_ignore_ascii_case(f))
        })
        .prop_map(String::into_bytes)
}

/// Field values: VCHAR, obs-text, SP and HTAB.
fn value() -> impl Strategy<Value = Vec<u8>> {
    vec(
        prop_oneof![
            8 => 0x21u8..=0x7e,
            1 => 0x80u8..=0xff,
            1 => Just(b' '),
            1 => Just(b'\t'),
        ],
        0..24,
    )
}

fn fields(max: usize) -> impl Strategy<Value = Fields> {
    vec((tchar_name(), value()), 0..max)
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        12 => Just(Fault::None),
        1 => prop::sample::select(vec![
            "HTTP/1.2", "HTTP/2.0", "http/1.1", "HTTP/0.9", "HTTP/1.10", "HTTP/11", "HTTP/1,1", "HTTP/", "HTTPS/1.1",
        ]).prop_map(Fault::Version),
        1 => prop::sample::select(vec!["600", "099", "101", "20x", "2000", " 200", "2", "\t200"])
            .prop_map(Fault::Status),
        1 => prop::sample::select(vec![
            &b"Bad Name: x"[..], b"X : y", b" fold", b"\tfold", b"NoColon", b": empty", b"X: \x00",
            b"X: a\x7fb", b"X: a\rb", b"Na\x01me: y", b"N@me: y",
        ]).prop_map(Fault::HeaderLine),
        1 => prop::sample::select(vec![
            ("Content-Length: {n}\r\nContent-Length: 1{n}", false),
            ("Content-Length: {n}, 1{n}", false),
            ("Content-Length: -{n}", false),
            ("Content-Length: +{n}", false),
            ("Content-Length: {n}x", false),
            ("Content-Length:", false),
            ("Content-Length: 99999999999999999999", false),
            ("Transfer-Encoding: chunked\r\nContent-Length: {n}", false),
            ("Transfer-Encoding: gzip", false),
            ("Transfer-Encoding: chunked, gzip", false),
            ("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked", false),
            ("Transfer-Encoding: ", false),
            ("Transfer-Encoding: chunked", true),
        ]).prop_map(|(t, v10)| Fault::Framing(t, v10)),
        1 => (any::<usize>(), prop::sample::select(vec!["", "g", "-1", "00000000000000001", "1 1", "\x00", ";x"]))
            .prop_map(|(i, t)| Fault::ChunkSize(i, t)),
        1 => (any::<usize>(), prop::sample::select(vec!["X", "\rX", "\n\n"]))
            .prop_map(|(i, t)| Fault::ChunkEnd(i, t)),
        2 => (0u16..1000).prop_map(Fault::Cut),
        1 => (1usize..3).prop_map(Fault::Interim),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    let interim = vec(
        (
            prop::sample::select(vec![100u16, 102, 103, 150, 199]),
            fields(3),
        ),
        0..=MAX_INTERIM as usize,
    );
    let status = prop_oneof![
        Just(200u16),
        200u16..=599,
        prop::sample::select(vec![201, 206, 301, 302, 404, 500, 503, 599]),
    ];
    let reason = vec(
        prop_oneof![8 => 0x20u8..=0x7e, 1 => 0x80u8..=0xff, 1 => Just(b'\t')],
        0..20,
    );
    let body = prop_oneof![vec(any::<u8>(), 0..64), vec(any::<u8>(), 0..2000)];
    let kind = prop::sample::select(vec![Kind::None, Kind::Length, Kind::Chunked, Kind::Close]);
    (
        (interim, 0u8..2, status, reason, fields(6)),
        (
            prop::option::of(prop::sample::select(CONNECTION)),
            kind,
            body,
            vec(any::<prop::sample::Index>(), 0..6),
            vec(
                prop::sample::select(vec![";a", ";a=b", " ; n=\"q v\"", ";x=1;y", "\t;e", ""]),
                1..4,
            ),
            fields(3),
        ),
        (
            0u8..3,
            prop::sample::select(vec![("", ""), (" ", ""), ("\t ", " \t"), ("", "  ")]),
            prop_oneof![3 => Just(vec![]), 1 => vec(any::<u8>(), 1..20)],
            (0u8..4, 32usize..600),
            prop::sample::select(vec![0usize, 1, 7, 64, 100_000]),
            fault(),
        ),
    )
        .prop_map(
            |(
                (interim, version, status, reason, headers),
                (connection, kind, body, cuts, ext, trailers),
                (eol, ows, garbage, max_head, body_keep, fault),
            )| {
                let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(body.len() + 1)).collect();
                cuts.sort_unstable();
                Spec {
                    interim,
                    version,
                    status,
                    reason,
                    headers,
                    connection,
                    kind,
                    body,
                    cuts,
                    ext,
                    trailers,
                    eol,
                    ows,
                    garbage,
                    max_head,
                    body_keep,
                    fault,
                }
            },
        )
}

struct Out {
    bytes: Vec<u8>,
    eol_count: usize,
    eol: u8,
}

impl Out {
    fn eol(&mut self) {
        self.eol_count += 1;
        let lf = match self.eol {
            0 => false,
            1 => true,
            _ => self.eol_count % 2 == 0,
        };
        self.bytes
            .extend_from_slice(if lf { &b"\n"[..] } else { b"\r\n" });
    }

    fn line(&mut self, text: &[u8]) {
        self.bytes.extend_from_slice(text);
        self.eol();
    }

    fn field(&mut self, name: &[u8], value: &[u8], ows: (&str, &str)) {
        self.bytes.extend_from_slice(name);
        self.bytes.push(b':');
        self.bytes.extend_from_slice(ows.0.as_bytes());
        self.bytes.extend_from_slice(value);
        self.bytes.extend_from_slice(ows.1.as_bytes());
        self.eol();
    }

    fn len(&self) -> usize {
        self.bytes.len()
    }
}

fn trimmed(v: &[u8]) -> Vec<u8> {
    trim(v).to_vec()
}

/// Renders a spec: the bytes, the config and what the parser must say.
fn render(s: &Spec) -> (Vec<u8>, Config, Expect) {
    let mut s = s.clone();
    // Make the spec coherent with its fault.
    let mut head_request = false;
    match s.fault {
        Fault::Framing(_, v10) => {
            s.kind = if v10 { Kind::Chunked } else { Kind::Length };
            if v10 {
                s.version = 0;
            }
        }
        Fault::ChunkSize(..) | Fault::ChunkEnd(..) => {
            s.kind = Kind::Chunked;
            if s.body.is_empty() {
                s.body = b"x".to_vec();
            }
        }
        Fault::Interim(n) => {
            s.interim.resize(MAX_INTERIM as usize + n, (100, vec![]));
        }
        _ => {}
    }
    match s.kind {
        Kind::None => {
            s.body.clear();
            match s.status % 3 {
                0 => s.status = 204,
                1 => s.status = 304,
                _ => head_request = true,
            }
        }
        _ if s.status == 204 || s.status == 304 => s.status = 200,
        _ => {}
    }
    if s.kind == Kind::Chunked && !matches!(s.fault, Fault::Framing(..)) {
        // Transfer-Encoding in HTTP/1.0 is a framing error.
        s.version = 1;
    }
    if s.kind == Kind::Close {
        s.body.extend_from_slice(&s.garbage);
        s.garbage.clear();
    }

    let mut out = Out {
        bytes: Vec::new(),
        eol_count: 0,
        eol: s.eol,
    };
    // Regions bounded by max_head, in order, and the error past it.
    let mut regions: Vec<(usize, Invalid)> = Vec::new();

    let version_text = |v: u8| if v == 0 { "HTTP/1.0" } else { "HTTP/1.1" };
    for (i, (status, fields)) in s.interim.iter().enumerate() {
        let start = out.len();
        let version = match (&s.fault, i) {
            (Fault::Version(v), 0) => v,
            _ => version_text(s.version),
        };
        out.line(format!("{version} {status} Interim").as_bytes());
        for (n, v) in fields {
            out.field(n, v, s.ows);
        }
        out.eol();
        regions.push((out.len() - start, Invalid::HeadTooLarge));
    }

    let start = out.len();
    let version = match &s.fault {
        Fault::Version(v) if s.interim.is_empty() => v,
        _ => version_text(s.version),
    };
    out.bytes.extend_from_slice(version.as_bytes());
    out.bytes.push(b' ');
    match &s.fault {
        Fault::Status(t) => out.bytes.extend_from_slice(t.as_bytes()),
        _ => out.bytes.extend_from_slice(s.status.to_string().as_bytes()),
    }
    if !s.reason.is_empty() || s.eol == 2 {
        out.bytes.push(b' ');
    }
    out.bytes.extend_from_slice(&s.reason);
    out.eol();
    let mut headers: Fields = Vec::new();
    let mut field = |out: &mut Out, n: &[u8], v: &[u8]| {
        out.field(n, v, s.ows);
        headers.push((n.to_vec(), trimmed(v)));
    };
    for (n, v) in &s.headers {
        field(&mut out, n, v);
    }
    if let Some(c) = s.connection {
        field(&mut out, b"Connection", c.as_bytes());
    }
    if let Fault::HeaderLine(l) = &s.fault {
        out.line(l);
    }
    match (&s.fault, s.kind) {
        (Fault::Framing(t, _), _) => {
            let t = t.replace("{n}", &s.body.len().to_string());
            for l in t.split("\r\n") {
                out.line(l.as_bytes());
            }
        }
        (_, Kind::Length) => field(
            &mut out,
            b"Content-Length",
            s.body.len().to_string().as_bytes(),
        ),
        (_, Kind::Chunked) => field(&mut out, b"Transfer-Encoding", b"chunked"),
        (_, Kind::None) if s.status % 2 == 0 => field(&mut out, b"Content-Length", b"10"),
        _ => {}
    }
    out.eol();
    regions.push((out.len() - start, Invalid::HeadTooLarge));
    let head_end = out.len();

    match s.kind {
        Kind::Length | Kind::Close => out.bytes.extend_from_slice(&s.body),
        Kind::Chunked => {
            let mut chunks = Vec::new();
            let mut from = 0;
            for &to in s.cuts.iter().chain([&s.body.len()]) {
                if to > from {
                    chunks.push((from, to));
                    from = to;
                }
            }
            let n = chunks.len();
            for (k, &(from, to)) in chunks.iter().enumerate() {
                let start = out.len();
                match &s.fault {
                    Fault::ChunkSize(i, t) if i % n == k => {
                        out.bytes.extend_from_slice(t.as_bytes())
                    }
                    _ => {
                        out.bytes
                            .extend_from_slice(format!("{:x}", to - from).as_bytes());
                        out.bytes
                            .extend_from_slice(s.ext[k % s.ext.len()].as_bytes());
                    }
                }
                out.eol();
                regions.push((out.len() - start, Invalid::Chunk));
                out.bytes.extend_from_slice(&s.body[from..to]);
                match &s.fault {
                    Fault::ChunkEnd(i, t) if i % n == k => {
                        out.bytes.extend_from_slice(t.as_bytes())
                    }
                    _ => out.eol(),
                }
            }
            let start = out.len();
            out.bytes.push(b'0');
            out.eol();
            regions.push((out.len() - start, Invalid::Chunk));
            let start = out.len();
            for (n, v) in &s.trailers {
                out.field(n, v, s.ows);
            }
            out.eol();
            regions.push((out.len() - start, Invalid::HeadTooLarge));
        }
        Kind::None => {}
    }
    let end = out.len();
    let mut bytes = out.bytes;
    bytes.extend_from_slice(&s.garbage);

    let largest = regions.iter().map(|r| r.0).max().unwrap_or(0);
    let max_head = match (&s.fault, s.max_head.0) {
        (Fault::None, 1) => largest,
        (Fault::None, 2) => largest - 1,
        (Fault::None, 3) => s.max_head.1,
        _ => 1 << 20,
    };
    let config = Config {
        max_head,
        body_keep: s.body_keep,
        head_request,
    };

    let fail = |e| Expect {
        state: State::Invalid(e),
        eof: State::Invalid(e),
        valid: None,
    };
    let expect = match &s.fault {
        Fault::Version(_) => fail(Invalid::Version),
        Fault::Status(_) => fail(Invalid::StatusLine),
        Fault::HeaderLine(_) => fail(Invalid::HeaderSyntax),
        Fault::Framing(..) => fail(Invalid::Framing),
        Fault::ChunkSize(..) | Fault::ChunkEnd(..) => fail(Invalid::Chunk),
        Fault::Interim(_) => fail(Invalid::TooManyInterim),
        Fault::Cut(pm) => {
            // Within the head, or anywhere but past the framing's end.
            let limit = if matches!(s.kind, Kind::Length | Kind::Chunked) {
                end
            } else {
                head_end
            };
            let at = limit * usize::from(*pm) / 1000;
            bytes.truncate(at);
            let state = if at < head_end {
                State::NeedMore
            } else {
                State::Body
            };
            Expect {
                state,
                eof: State::Invalid(Invalid::Truncated),
                valid: None,
            }
        }
        Fault::None => match regions.iter().find(|r| r.0 > max_head) {
            Some(&(_, e)) => fail(e),
            None => {
                let keep_alive = {
                    let tokens: Vec<String> = s
                        .connection
                        .unwrap_or("")
                        .split(',')
                        .map(|t| t.trim().to_ascii_lowercase())
                        .collect();
                    !tokens.iter().any(|t| t == "close")
                        && (s.version == 1 || tokens.iter().any(|t| t == "keep-alive"))
                };
                let done = if s.kind == Kind::Close {
                    State::Body
                } else {
                    State::Complete
                };
                Expect {
                    state: done,
                    eof: State::Complete,
                    valid: Some(Valid {
                        version: s.version,
                        status: s.status,
                        reason: s.reason.clone(),
                        headers,
                        body: s.body[..s.body.len().min(s.body_keep)].to_vec(),
                        body_len: s.body.len() as u64,
                        trailing: s.garbage.len() as u64,
                        reusable: keep_alive && s.kind != Kind::Close && s.garbage.is_empty(),
                    }),
                }
            }
        },
    };
    (bytes, config, expect)
}

/// Everything a caller can observe, before and after eof.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    state: State,
    head: Option<Head>,
    body: Vec<u8>,
    settled: bool,
    body_len: u64,
    trailing: u64,
    reusable: bool,
    eof: State,
    eof_reusable: bool,
    eof_settled: bool,
}

fn rank(s: State) -> u8 {
    match s {
        State::NeedMore => 0,
        State::Body => 1,
        State::Complete | State::Invalid(_) => 2,
    }
}

/// Feeds `pieces`, checking the memory bound and that the state only moves
/// forward, then eof.
fn observe<'a>(
    c: Config,
    pieces: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Seen, TestCaseError> {
    let mut p = Parser::new(c);
    let bound = c.max_head + c.body_keep;
    let mut last = p.state();
    for piece in pieces {
        let s = p.feed(piece);
        prop_assert_eq!(s, p.state());
        prop_assert!(p.held() <= bound, "held {} > {}", p.held(), bound);
        prop_assert!(p.body().len() <= c.body_keep);
        prop_assert!(rank(s) >= rank(last), "{:?} after {:?}", s, last);
        if rank(last) == 2 {
            prop_assert_eq!(s, last);
        }
        last = s;
    }
    let seen = Seen {
        state: p.state(),
        head: p.head().cloned(),
        body: p.body().to_vec(),
        settled: p.body_settled(),
        body_len: p.body_len(),
        trailing: p.trailing(),
        reusable: p.reusable(),
        eof: p.eof(),
        eof_reusable: p.reusable(),
        eof_settled: p.body_settled(),
    };
    prop_assert!(rank(seen.eof) == 2);
    prop_assert!(p.held() <= bound);
    Ok(seen)
}

/// The same bytes in one piece, one byte at a time and at `cuts`.
fn split_invariant(
    c: Config,
    bytes: &[u8],
    cuts: &[prop::sample::Index],
) -> Result<Seen, TestCaseError> {
    let whole = observe(c, [bytes])?;
    let single = observe(c, bytes.chunks(1))?;
    prop_assert_eq!(&single, &whole, "1-byte splits");
    let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
    at.sort_unstable();
    at.push(bytes.len());
    let mut from = 0;
    let pieces: Vec<&[u8]> = at
        .iter()
        .map(|&to| {
            let p = &bytes[from..to];
            from = to;
            p
        })
        .collect();
    let split = observe(c, pieces)?;
    prop_assert_eq!(&split, &whole, "split at {:?}", at);
    Ok(whole)
}

/// HTTP-ish tokens, to reach deep states from arbitrary input.
const PIECES: &[&[u8]] = &[
    b"HTTP/1.1 ",
    b"HTTP/1.0 ",
    b"200",
    b"100",
    b"204",
    b" OK",
    b"\r\n",
    b"\n",
    b"\r",
    b": ",
    b"X",
    b" ",
    b"\t",
    b"\x00",
    b"Content-Length: ",
    b"Transfer-Encoding: chunked",
    b"Connection: close",
    b"0",
    b"5",
    b"f",
    b";",
    b",",
    b"ffffffffffffffff",
    b"abc",
    b"\xff",
];

fn http_ish() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..200),
        vec(prop::sample::select(PIECES), 0..60).prop_map(|v| v.concat()),
    ]
}

proptest! {

    #[test]
    fn generated_responses_give_the_expected_verdict(s in spec(), cuts in vec(any::<prop::sample::Index>(), 0..8)) {
        let (bytes, c, expect) = render(&s);
        let seen = split_invariant(c, &bytes, &cuts)?;
        prop_assert_eq!(seen.state, expect.state, "{:?}", String::from_utf8_lossy(&bytes));
        prop_assert_eq!(seen.eof, expect.eof);
        if let Some(v) = expect.valid {
            let head = seen.head.as_ref().expect("a head");
            prop_assert_eq!(head.version, v.version);
            prop_assert_eq!(head.status, v.status);
            prop_assert_eq!(head.reason(), &v.reason[..]);
            let headers: Fields = head.headers().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
            prop_assert_eq!(headers, v.headers);
            prop_assert_eq!(&seen.body, &v.body);
            prop_assert_eq!(seen.body_len, v.body_len);
            prop_assert_eq!(seen.trailing, v.trailing);
            prop_assert_eq!(seen.reusable, v.reusable);
            prop_assert!(!seen.eof_reusable);
            prop_assert!(seen.eof_settled);
            prop_assert_eq!(seen.settled, expect.state == State::Complete || seen.body.len() == c.body_keep);
        }
    }

    #[test]
    fn arbitrary_bytes_split_invariant_and_bounded(
        bytes in http_ish(),
        max_head in prop_oneof![0usize..64, 64usize..2048],
        body_keep in 0usize..64,
        head_request: bool,
        cuts in vec(any::<prop::sample::Index>(), 0..8),
    ) {
        split_invariant(cfg(max_head, body_keep, head_request), &bytes, &cuts)?;
    }

    #[test]
    fn mutated_responses_split_invariant_and_bounded(
        s in spec(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..4),
        cuts in vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let (mut bytes, c, _) = render(&s);
        for (at, b, op) in edits {
            let i = at.index(bytes.len() + 1);
            match op {
                0 if i < bytes.len() => bytes[i] = b,
                1 if i < bytes.len() => { bytes.remove(i); }
                _ => bytes.insert(i, b),
            }
        }
        split_invariant(c, &bytes, &cuts)?;
    }
}

#[test]
fn the_parser_itself_is_small() {
    // The fixed part of the memory bound (Parser's docs).
    assert!(
        std::mem::size_of::<Parser>() <= 192,
        "{}",
        std::mem::size_of::<Parser>()
    );
}
