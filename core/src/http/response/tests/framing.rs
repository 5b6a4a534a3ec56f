use super::*;

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
