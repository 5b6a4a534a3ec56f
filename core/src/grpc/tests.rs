use super::*;
use crate::h2::Response;

fn fields(l: &[(&str, &str)]) -> Vec<Field> {
    l.iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

/// A message with this HealthCheckResponse payload.
fn framed(msg: &[u8]) -> Vec<u8> {
    let mut b = vec![0];
    b.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    b.extend_from_slice(msg);
    b
}

/// A complete 200 gRPC response with this body and grpc-status.
fn answer(body: &[u8], grpc_status: &str) -> Response {
    Response {
        status: Some(200),
        headers: fields(&[("content-type", "application/grpc")]),
        body: body.to_vec(),
        body_len: body.len() as u64,
        trailers: fields(&[("grpc-status", grpc_status)]),
        has_trailers: true,
        end_stream: true,
        ..Response::default()
    }
}

fn detail(v: &Verdict) -> (Reason, &str) {
    let (r, d) = v.result.as_ref().unwrap_err();
    (*r, d.as_str())
}

#[test]
fn request_pieces() {
    let h = request_headers(
        true,
        b"svc.example:50051",
        b"nginx-healthcheck/1",
        Some(4500),
    );
    assert_eq!(
        h,
        fields(&[
            (":method", "POST"),
            (":scheme", "https"),
            (":path", "/grpc.health.v1.Health/Check"),
            (":authority", "svc.example:50051"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("user-agent", "nginx-healthcheck/1"),
            ("grpc-timeout", "4500m"),
        ])
    );
    assert_eq!(request_headers(false, b"a", b"u", None).len(), 7);
    assert_eq!(request_body(b""), [0, 0, 0, 0, 0]);
    assert_eq!(
        request_body(b"web"),
        [0, 0, 0, 0, 5, 0x0a, 3, b'w', b'e', b'b']
    );
    let long = vec![b's'; 200];
    let b = request_body(&long);
    assert_eq!(&b[..8], &[0, 0, 0, 0, 203, 0x0a, 0xc8, 0x01]);
}

#[test]
fn timeouts() {
    assert_eq!(timeout_value(4500), "4500m");
    assert_eq!(timeout_value(0), "1m");
    assert_eq!(timeout_value(99_999_999), "99999999m");
    assert_eq!(timeout_value(100_000_000), "100000S");
    assert_eq!(timeout_value(100_000_001), "100001S");
    assert_eq!(timeout_value(99_999_999_000), "99999999S");
    assert_eq!(timeout_value(99_999_999_001), "1666667M");
    assert_eq!(timeout_value(u64::MAX), "99999999H");
    for ms in [1, 999, 123_456_789, 1 << 40, u64::MAX / 3] {
        let t = timeout_value(ms);
        let (digits, unit) = t.split_at(t.len() - 1);
        assert!(
            digits.len() <= 8 && digits.bytes().all(|b| b.is_ascii_digit()),
            "{t}"
        );
        let per = match unit {
            "m" => 1u128,
            "S" => 1000,
            "M" => 60_000,
            _ => 3_600_000,
        };
        let back = digits.parse::<u128>().unwrap() * per;
        assert!(back >= u128::from(ms) || t == "99999999H", "{ms} -> {t}");
    }
}

#[test]
fn status_codes() {
    assert_eq!(status_name(0), Some("OK"));
    assert_eq!(status_name(12), Some("UNIMPLEMENTED"));
    assert_eq!(status_name(14), Some("UNAVAILABLE"));
    assert_eq!(status_name(16), Some("UNAUTHENTICATED"));
    assert_eq!(status_name(17), None);
    assert_eq!(parse_grpc_status(b"0"), Some(0));
    assert_eq!(parse_grpc_status(b"014"), Some(14));
    assert_eq!(parse_grpc_status(b"4294967295"), Some(u32::MAX));
    for bad in [&b""[..], b"4294967296", b"-1", b" 1", b"1a", b"99999999999"] {
        assert_eq!(parse_grpc_status(bad), None, "{bad:?}");
    }
}

#[test]
fn grpc_message_decoding() {
    assert_eq!(decode_grpc_message(b"not%20found", 100), "not found");
    assert_eq!(decode_grpc_message(b"100%", 100), "100%");
    assert_eq!(decode_grpc_message(b"%zz%4", 100), "%zz%4");
    assert_eq!(decode_grpc_message(b"%E2%9C%93 ok", 100), "\u{2713} ok");
    assert_eq!(decode_grpc_message(b"a%0Ab", 100), "a\\x0ab");
    assert_eq!(decode_grpc_message(b"%FF", 100), "\\xff");
    assert_eq!(decode_grpc_message(&[b'x'; 1000], 10), "x".repeat(10));
    // C1 controls and line separators are escaped too.
    assert_eq!(
        decode_grpc_message(b"%C2%85a%E2%80%A8", 100),
        "\\xc2\\x85a\\xe2\\x80\\xa8"
    );
    assert_eq!(log_safe("caf\u{e9}\u{7f}".as_bytes()), "caf\u{e9}\\x7f");
}

#[test]
fn message_reader() {
    let mut r = MessageReader::new(10);
    let two = [framed(&[8, 1]), framed(b"")].concat();
    for b in &two {
        r.feed(std::slice::from_ref(b)).unwrap();
    }
    r.finish().unwrap();
    assert_eq!((r.messages(), r.first()), (2, Some(&[8u8, 1][..])));
    let mut r = MessageReader::new(10);
    r.feed(&[0, 0, 0]).unwrap();
    assert_eq!(r.finish(), Err(MessageError::Truncated));
    r.feed(&[0, 3, 1]).unwrap();
    assert_eq!(r.finish(), Err(MessageError::Truncated));
    let mut r = MessageReader::new(10);
    assert_eq!(r.feed(&[1, 0, 0, 0, 0]), Err(MessageError::Compressed));
    assert_eq!(r.feed(b""), Err(MessageError::Compressed));
    let mut r = MessageReader::new(10);
    assert_eq!(r.feed(&[2, 0, 0, 0, 0]), Err(MessageError::BadFlag(2)));
    let mut r = MessageReader::new(10);
    let e = r.feed(&[0, 0xff, 0xff, 0xff, 0xff]).unwrap_err();
    assert_eq!(e.to_string(), "message of 4294967295 bytes > max 10");
}

#[test]
fn health_response_decoding() {
    let d = decode_health_response;
    assert_eq!(d(&[]), Ok(ServingStatus::Unknown));
    assert_eq!(d(&[8, 1]), Ok(ServingStatus::Serving));
    assert_eq!(d(&[8, 2]), Ok(ServingStatus::NotServing));
    assert_eq!(d(&[8, 3]), Ok(ServingStatus::ServiceUnknown));
    assert_eq!(d(&[8, 9]), Ok(ServingStatus::Other(9)));
    // The last one wins; a negative enum is 10 bytes.
    assert_eq!(d(&[8, 2, 8, 1]), Ok(ServingStatus::Serving));
    let neg = [
        8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
    ];
    assert_eq!(d(&neg), Ok(ServingStatus::Other(-1)));
    // Unknown fields of every wire type, groups nested, are skipped.
    let unknown = [
        0x10, 0x96, 0x01, // field 2 varint
        0x19, 1, 2, 3, 4, 5, 6, 7, 8, // field 3 fixed64
        0x22, 2, b'h', b'i', // field 4 bytes
        0x2d, 1, 2, 3, 4, // field 5 fixed32
        0x33, 0x3b, 0x40, 5, 0x3c, 0x34, // group 6 { group 7 { field 8 } }
        8, 1,
    ];
    assert_eq!(d(&unknown), Ok(ServingStatus::Serving));
    // Malformed.
    assert_eq!(d(&[8]), Err(ProtoError::Truncated));
    assert_eq!(d(&[8, 0x80]), Err(ProtoError::Truncated));
    let long = [
        8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
    ];
    assert_eq!(d(&long), Err(ProtoError::BadVarint));
    assert_eq!(d(&[0x0a, 1, 1]), Err(ProtoError::WrongWireType));
    assert_eq!(d(&[0x00]), Err(ProtoError::BadFieldNumber));
    assert_eq!(d(&[0x16]), Err(ProtoError::BadWireType(6)));
    assert_eq!(d(&[0x14]), Err(ProtoError::BadWireType(4)));
    assert_eq!(d(&[0x22, 5, 1]), Err(ProtoError::Truncated));
    assert_eq!(d(&[0x19, 1, 2]), Err(ProtoError::Truncated));
    assert_eq!(d(&[0x33, 0x3c]), Err(ProtoError::BadGroup));
    assert_eq!(d(&[0x33]), Err(ProtoError::Truncated));
    let deep = vec![0x33; 40];
    assert_eq!(d(&deep), Err(ProtoError::BadGroup));
}

#[test]
fn verdicts() {
    let serving = framed(&[8, 1]);
    let v = verdict(&answer(&serving, "0"), &[]);
    assert_eq!((v.result.clone(), v.grpc_status), (Ok(()), Some(0)));
    assert_eq!(v.serving, Some(ServingStatus::Serving));
    let v = verdict(&answer(&framed(&[8, 2]), "0"), &[]);
    assert_eq!(detail(&v), (Reason::Status, "gRPC NOT_SERVING"));
    let v = verdict(&answer(&framed(&[8, 3]), "0"), &[]);
    assert_eq!(detail(&v), (Reason::Status, "gRPC SERVICE_UNKNOWN"));
    let v = verdict(&answer(&framed(&[]), "0"), &[]);
    assert_eq!(detail(&v), (Reason::Status, "gRPC UNKNOWN"));
    let v = verdict(&answer(&framed(&[8, 7]), "0"), &[]);
    assert_eq!(detail(&v), (Reason::Status, "gRPC status 7"));
    let mut r = answer(b"", "14");
    r.trailers
        .push((b"grpc-message".to_vec(), b"no%20backend".to_vec()));
    let v = verdict(&r, &[]);
    assert_eq!(detail(&v), (Reason::Status, "grpc-status 14 (UNAVAILABLE)"));
    assert_eq!(
        (v.grpc_status, v.message.as_deref()),
        (Some(14), Some("no backend"))
    );
    let v = verdict(&answer(b"", "12"), &[]);
    assert_eq!(
        detail(&v),
        (Reason::Status, "grpc-status 12 (UNIMPLEMENTED)")
    );
    assert_eq!(verdict(&answer(b"", "12"), &[12]).result, Ok(()));
    let v = verdict(&answer(b"", "40"), &[]);
    assert_eq!(detail(&v), (Reason::Status, "grpc-status 40"));
    let v = verdict(&answer(b"", "x"), &[]);
    assert_eq!(detail(&v), (Reason::Invalid, "invalid grpc-status \"x\""));
}

#[test]
fn trailers_only_responses() {
    let r = Response {
        status: Some(200),
        headers: fields(&[
            ("content-type", "application/grpc"),
            ("grpc-status", "5"),
            ("grpc-message", "unknown%20service"),
        ]),
        end_stream: true,
        ..Response::default()
    };
    let v = verdict(&r, &[]);
    assert_eq!(detail(&v), (Reason::Status, "grpc-status 5 (NOT_FOUND)"));
    assert_eq!(v.message.as_deref(), Some("unknown service"));
    // With trailers, the head's grpc-status does not count.
    let mut r2 = r.clone();
    r2.has_trailers = true;
    let v = verdict(&r2, &[]);
    assert_eq!(detail(&v), (Reason::Invalid, "no grpc-status"));
}

#[test]
fn invalid_answers() {
    let serving = framed(&[8, 1]);
    let inv = |r: &Response| {
        let v = verdict(r, &[]);
        let (reason, d) = detail(&v);
        assert_eq!(reason, Reason::Invalid);
        d.to_string()
    };
    let mut r = answer(&serving, "0");
    r.status = Some(503);
    assert_eq!(inv(&r), "HTTP 503");
    let html = Response {
        status: Some(200),
        headers: fields(&[("content-type", "text/html")]),
        body: b"<html>".to_vec(),
        body_len: 6,
        end_stream: true,
        ..Response::default()
    };
    assert_eq!(inv(&html), "no grpc-status (content-type text/html)");
    let mut r = html.clone();
    r.headers.clear();
    assert_eq!(inv(&r), "no grpc-status (no content-type)");
    let mut r = html;
    r.trailers = fields(&[("grpc-status", "0")]);
    r.has_trailers = true;
    assert_eq!(inv(&r), "content-type text/html");
    let mut r = answer(&serving, "0");
    r.end_stream = false;
    assert_eq!(inv(&r), "response incomplete");
    // The stream's own end is HTTP/2's: `protocol`.
    r.reset = Some(2);
    let v = verdict(&r, &[]);
    assert_eq!(
        detail(&v),
        (Reason::Protocol, "stream reset (INTERNAL_ERROR)")
    );
    let mut r = answer(&serving, "0");
    r.end_stream = false;
    r.refused = true;
    let v = verdict(&r, &[]);
    assert_eq!(detail(&v), (Reason::Protocol, "stream refused (GOAWAY)"));
    assert_eq!(inv(&answer(b"", "0")), "no message");
    assert_eq!(
        inv(&answer(&[serving.clone(), serving.clone()].concat(), "0")),
        "2 messages"
    );
    assert_eq!(inv(&answer(&serving[..6], "0")), "truncated message");
    let mut z = serving.clone();
    z[0] = 1;
    assert_eq!(inv(&answer(&z, "0")), "compressed message");
    assert_eq!(
        inv(&answer(&framed(&[0x0a, 1, 1]), "0")),
        "malformed HealthCheckResponse: status is not a varint"
    );
    let mut r = answer(&serving, "0");
    r.body_len += 1;
    assert_eq!(inv(&r), "body over 7 bytes");
    // grpc+proto and parameters are gRPC content types.
    for ct in [
        "application/grpc+proto",
        "application/grpc; charset=x",
        "Application/GRPC",
    ] {
        let mut r = answer(&serving, "0");
        r.headers = fields(&[("content-type", ct)]);
        assert_eq!(verdict(&r, &[]).result, Ok(()), "{ct}");
    }
    let mut r = answer(&serving, "0");
    r.headers = fields(&[("content-type", "application/grpcx")]);
    assert_eq!(inv(&r), "content-type application/grpcx");
}

/// A whole round through the HTTP/2 client: the request it sends, the
/// server's answer, the verdict, and what the connection holds.
#[test]
fn end_to_end_over_the_client() {
    use crate::h2::frame::{self, flag, kind};
    use crate::h2::{hpack, Client, Limits};
    let mut c = Client::new(Limits {
        max_header_list_bytes: 4096,
        max_body_bytes: 5 + MAX_MESSAGE,
        ..Limits::default()
    });
    let id = c
        .open_stream(
            &request_headers(false, b"10.0.0.1:50051", b"nginx-healthcheck", Some(1000)),
            &request_body(b""),
        )
        .unwrap();
    assert!(c.output().starts_with(frame::PREFACE));
    let mut server = Vec::new();
    frame::put_settings(&mut server, &[]);
    frame::put_settings_ack(&mut server);
    let head = hpack::encode_block(&fields(&[
        (":status", "200"),
        ("content-type", "application/grpc"),
    ]));
    frame::put_header(
        &mut server,
        head.len(),
        kind::HEADERS,
        flag::END_HEADERS,
        id,
    );
    server.extend(head);
    frame::put_data(&mut server, id, &framed(&[8, 1]), false);
    let trailers = hpack::encode_block(&fields(&[("grpc-status", "0")]));
    let flags = flag::END_HEADERS | flag::END_STREAM;
    frame::put_header(&mut server, trailers.len(), kind::HEADERS, flags, id);
    server.extend(trailers);
    c.feed(&server).unwrap();
    let held = c.heap_bytes();
    let r = c.take_response(id).unwrap();
    let v = verdict(&r, &[]);
    assert_eq!((v.result, v.grpc_status), (Ok(()), Some(0)));
    // The frame buffer grows only to the largest frame seen (16 KB at
    // most), the HPACK table holds what the server indexed (4 KB at most).
    assert!(held < 24 * 1024, "{held}");
    assert!(c.can_open_stream());
    assert_eq!(c.next_stream_id(), Some(3));
}
