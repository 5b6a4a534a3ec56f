use super::*;
use proptest::prelude::*;

fn record(kind: u8, id: u16, content: &[u8], pad: usize) -> Vec<u8> {
    let mut v = vec![
        1,
        kind,
        (id >> 8) as u8,
        id as u8,
        (content.len() >> 8) as u8,
        content.len() as u8,
        pad as u8,
        0,
    ];
    v.extend_from_slice(content);
    v.resize(v.len() + pad, 0xee);
    v
}

fn end(protocol: u8) -> Vec<u8> {
    record(END_REQUEST, 1, &[0, 0, 0, 0, protocol, 0, 0, 0], 0)
}

/// A php-fpm answer: STDERR notice, STDOUT head and body, END_REQUEST.
fn answer(head: &str, body: &str) -> Vec<u8> {
    let mut v = record(STDERR, 1, b"PHP Notice: something\n", 2);
    let mut out = head.as_bytes().to_vec();
    out.extend_from_slice(body.as_bytes());
    v.extend(record(STDOUT, 1, &out, 5));
    v.extend(record(STDOUT, 1, b"", 0));
    v.extend(end(0));
    v
}

fn run(bytes: &[u8], cuts: &[usize], alive: StatusClasses) -> (Verdict, Option<u16>) {
    let mut r = Response::new(alive, 16 * 1024);
    let mut last = 0;
    for &c in cuts.iter().chain([bytes.len()].iter()) {
        let c = c.clamp(last, bytes.len());
        let v = r.feed(&bytes[last..c]);
        last = c;
        if v != Verdict::NeedMore {
            return (v, r.status());
        }
    }
    (r.eof(), r.status())
}

const OK: StatusClasses = StatusClasses::DEFAULT;

#[test]
fn the_request_is_begin_params_and_empty_stdin() {
    let params: Vec<(Vec<u8>, Vec<u8>)> = DEFAULT_PARAMS
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
    let r = request(&params);
    // BEGIN_REQUEST: version 1, type 1, id 1, 8 bytes, responder, no keep-conn.
    assert_eq!(&r[..8], &[1, 1, 0, 1, 0, 8, 0, 0]);
    assert_eq!(&r[8..16], &[0, 1, 0, 0, 0, 0, 0, 0]);
    // PARAMS with the pairs, padded to 8.
    assert_eq!(r[16 + 1], PARAMS);
    let len = usize::from(r[16 + 4]) << 8 | usize::from(r[16 + 5]);
    let pad = usize::from(r[16 + 6]);
    assert_eq!((len + pad) % 8, 0);
    let body = &r[24..24 + len];
    assert_eq!(body[0] as usize, "REQUEST_METHOD".len());
    assert_eq!(body[1] as usize, "GET".len());
    assert_eq!(&body[2..16], b"REQUEST_METHOD");
    // Then an empty PARAMS and an empty STDIN.
    let tail = &r[24 + len + pad..];
    assert_eq!(
        tail,
        &[1, PARAMS, 0, 1, 0, 0, 0, 0, 1, STDIN, 0, 1, 0, 0, 0, 0]
    );
}

#[test]
fn long_names_and_values_use_four_byte_lengths() {
    let v = vec![b'x'; 300];
    let r = request(&[(b"SCRIPT_FILENAME".to_vec(), v)]);
    let body = &r[24..];
    assert_eq!(body[0], 15);
    assert_eq!(&body[1..5], &(300u32 | 0x8000_0000).to_be_bytes());
}

#[test]
fn a_big_parameter_block_is_split_into_records() {
    let big = vec![b'v'; 70_000];
    let r = request(&[(b"X".to_vec(), big)]);
    // Two PARAMS records with content, then the empty one and STDIN.
    let mut at = 16;
    let mut contents = Vec::new();
    while at < r.len() {
        let len = usize::from(r[at + 4]) << 8 | usize::from(r[at + 5]);
        contents.push((r[at + 1], len));
        at += 8 + len + usize::from(r[at + 6]);
    }
    assert_eq!(contents.len(), 4, "{contents:?}");
    assert!(contents[0].1 <= 0xffff && contents[1].1 > 0);
    assert_eq!(&contents[2..], &[(PARAMS, 0), (STDIN, 0)]);
}

#[test]
fn status_header_decides() {
    let cases = [
        ("Content-Type: text/plain\r\n\r\n", 200, true),
        (
            "Status: 200 OK\r\nContent-Type: text/plain\r\n\r\n",
            200,
            true,
        ),
        ("status: 404 Not Found\r\n\r\n", 404, false),
        ("Status: 503\n\n", 503, false),
        ("Location: /elsewhere\r\n\r\n", 302, true),
        ("Status: 5O3\r\n\r\n", 0, false),
    ];
    for (head, code, up) in cases {
        let (v, status) = run(&answer(head, "pong"), &[], OK);
        assert_eq!(status, Some(code), "{head:?}");
        assert_eq!(v == Verdict::Up, up, "{head:?}: {v:?}");
        if !up {
            assert!(matches!(v, Verdict::Down(Reason::Status, _)), "{v:?}");
        }
    }
    // check_http_expect_alive http_4xx: a 404 passes.
    let only_4xx = StatusClasses::NONE.with(4);
    assert_eq!(
        run(&answer("Status: 404\r\n\r\n", ""), &[], only_4xx).0,
        Verdict::Up
    );
}

#[test]
fn protocol_status_and_empty_answers() {
    let (v, _) = run(&end(2), &[], OK);
    assert!(matches!(v, Verdict::Down(Reason::Status, m) if m.contains("overloaded")));
    let (v, _) = run(&end(0), &[], OK);
    assert!(matches!(v, Verdict::Down(Reason::Invalid, _)));
    // STDOUT without the empty line, then the end: all of it is head.
    let mut b = record(STDOUT, 1, b"Status: 500\r\n", 0);
    b.extend(end(0));
    assert!(matches!(
        run(&b, &[], OK).0,
        Verdict::Down(Reason::Status, _)
    ));
    // Closed before anything.
    assert!(matches!(
        run(b"", &[], OK).0,
        Verdict::Down(Reason::Closed, _)
    ));
}

#[test]
fn foreign_bytes_are_invalid_and_a_huge_head_too() {
    assert!(matches!(
        run(b"HTTP/1.1 200 OK\r\n\r\n", &[], OK).0,
        Verdict::Down(Reason::Invalid, _)
    ));
    let mut r = Response::new(OK, 64);
    let v = r.feed(&record(STDOUT, 1, &[b'a'; 100], 0));
    assert!(matches!(v, Verdict::Down(Reason::Invalid, _)), "{v:?}");
    // Management records (id 0) are passed over.
    let mut b = record(10, 0, b"\x04\x01FCGI_MPXS_CONNS1", 0);
    b.extend(answer("Status: 200\r\n\r\n", ""));
    assert_eq!(run(&b, &[], OK).0, Verdict::Up);
}

proptest! {
    #[test]
    fn the_verdict_does_not_depend_on_the_split(
        code in 100u16..600,
        body in "[a-z]{0,40}",
        cuts in proptest::collection::vec(0usize..200, 0..8),
    ) {
        let bytes = answer(&format!("Status: {code} X\r\nX-A: b\r\n\r\n"), &body);
        let whole = run(&bytes, &[], OK);
        let mut cuts = cuts;
        cuts.sort_unstable();
        prop_assert_eq!(&run(&bytes, &cuts, OK), &whole);
        let one: Vec<usize> = (0..bytes.len()).collect();
        prop_assert_eq!(&run(&bytes, &one, OK), &whole);
        prop_assert_eq!(whole.0 == Verdict::Up, (200..400).contains(&code));
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_stay_bounded(
        chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 0..30),
    ) {
        let mut r = Response::new(OK, 100);
        for c in &chunks {
            if r.feed(c) != Verdict::NeedMore {
                break;
            }
        }
        let _ = r.eof();
        prop_assert!(r.head.len() <= 100 && r.end.len() <= 8);
    }
}
