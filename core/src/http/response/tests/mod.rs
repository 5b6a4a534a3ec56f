use super::*;
use proptest::collection::vec;
use proptest::prelude::*;

const CFG: Config = Config {
    max_head: 4096,
    body_keep: 64,
    head_request: false,
    final_101: false,
};

fn cfg(max_head: usize, body_keep: usize, head_request: bool) -> Config {
    Config {
        max_head,
        body_keep,
        head_request,
        final_101: false,
    }
}

#[test]
fn switching_protocols_is_final_only_when_the_check_accepts_it() {
    let upgrade = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                    Connection: Upgrade\r\n\r\n\x81\x05hello";
    let p = parse_with(CFG, upgrade);
    assert_eq!(p.state(), State::Invalid(Invalid::StatusLine));
    let c = Config {
        final_101: true,
        ..CFG
    };
    let p = parse_with(c, upgrade);
    assert_eq!(p.state(), State::Complete);
    assert_eq!(p.head().map(|h| h.status), Some(101));
    assert!(
        !p.reusable(),
        "after a 101 the connection is another protocol's"
    );
    // Other interim responses are still skipped.
    let p = parse_with(
        c,
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(p.head().map(|h| h.status), Some(200));
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

/// `text` parsed with `c` fed whole, and fed byte by byte.
fn whole_and_bytewise(c: Config, text: &[u8]) -> (Parser, Parser) {
    let whole = parse_with(c, text);
    let mut single = Parser::new(c);
    for b in text {
        single.feed(core::slice::from_ref(b));
    }
    (whole, single)
}

/// A response fed whole (where the parser takes the status line's start
/// and whole field lines at once) ends as one fed byte by byte: the same
/// state, head, fields and buffer capacity, for every
/// `max_head` from below the status line to past the head (the limit
/// inside each line and at each line's end), and for interim responses.
#[test]
fn whole_lines_as_bytewise() {
    let text: &[u8] = b"HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n\
        HTTP/1.0 200 OK\r\nServer: nginx/1.28.3\r\nDate: Thu, 03 Dec 2026 18:00:00 GMT\r\n\
        Content-Type:text/plain\r\nX-Bare-Lf: v\nX-Empty:\r\nX-Trail: a \t \r\n\
        Connection: keep-alive\r\nContent-Length: 3, 3\r\n\r\nok\n";
    for max in 1..text.len() + 2 {
        let (whole, single) = whole_and_bytewise(cfg(max, 8, false), text);
        assert_eq!(whole.state(), single.state(), "max_head {max}");
        assert_eq!(whole.held(), single.held(), "max_head {max}");
        assert_eq!(whole.head(), single.head(), "max_head {max}");
        assert_eq!(whole.reusable(), single.reusable(), "max_head {max}");
        assert_eq!(whole.body(), single.body(), "max_head {max}");
    }
    let p = parse_with(cfg(4096, 8, false), text);
    assert_eq!(p.state(), State::Complete);
    let head = p.head().expect("a head");
    assert_eq!((head.version, head.status), (0, 200));
    assert_eq!(head.header(b"x-trail"), Some(&b"a"[..]));
    assert_eq!(head.header(b"x-bare-lf"), Some(&b"v"[..]));
    assert!(p.reusable(), "HTTP/1.0 with keep-alive");
    assert_eq!(p.body(), b"ok\n");
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
        let (whole, single) = whole_and_bytewise(cfg(max, 8, false), text);
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

mod framing;
mod properties;

#[test]
fn the_byte_tables_are_the_grammar_they_stand_for() {
    for b in 0..=255u8 {
        let tchar = b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        assert_eq!(grammar::is_tchar(b), tchar, "tchar {b:#x}");
        let text = !grammar::is_ctl(b) && b != b'\r' && b != b'\n';
        assert_eq!(grammar::is_text(b), text, "text {b:#x}");
    }
}

#[test]
fn connection_tokens_and_framing_fields_are_found_in_any_case_and_list() {
    let p = parse_with(
        CFG,
        b"HTTP/1.0 200 OK\r\nCONNECTION: foo ,Keep-Alive\r\ncontent-LENGTH: 2\r\n\r\nok",
    );
    assert_eq!(p.state(), State::Complete);
    assert!(p.reusable());
    let p = parse_with(
        CFG,
        b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nconnection: x, CLOSE\r\nContent-Length: 2\r\n\r\nok",
    );
    assert_eq!(p.state(), State::Complete);
    assert!(!p.reusable());
    let p = parse_with(
        CFG,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\ncontent-length: 2\r\n\r\n",
    );
    assert_eq!(p.state(), State::Invalid(Invalid::Framing));
}
