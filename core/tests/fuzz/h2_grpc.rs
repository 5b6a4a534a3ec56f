//! The gRPC health codec: messages in any split, protobuf with unknown
//! fields, verdicts on any response, grpc-timeout values.

use super::pieces;
use healthcheck_core::grpc::proto::put_varint;
use healthcheck_core::grpc::{self, MessageReader, ServingStatus};
use healthcheck_core::h2::Response;
use healthcheck_core::reason::Reason;
use proptest::collection::vec;
use proptest::prelude::*;

/// An unknown field (number 2..40) of a random wire type, groups nested.
fn unknown_field(depth: u32) -> BoxedStrategy<Vec<u8>> {
    let tag = |field: u32, wire: u32| {
        let mut v = Vec::new();
        put_varint(&mut v, u64::from(field << 3 | wire));
        v
    };
    let leaf =
        (2u32..40, 0u8..4, any::<u64>(), vec(any::<u8>(), 0..10)).prop_map(move |(f, w, n, b)| {
            match w {
                0 => {
                    let mut v = tag(f, 0);
                    put_varint(&mut v, n);
                    v
                }
                1 => [tag(f, 1), n.to_le_bytes().to_vec()].concat(),
                2 => {
                    let mut v = tag(f, 2);
                    put_varint(&mut v, b.len() as u64);
                    v.extend(b);
                    v
                }
                _ => [tag(f, 5), (n as u32).to_le_bytes().to_vec()].concat(),
            }
        });
    if depth == 0 {
        return leaf.boxed();
    }
    prop_oneof![
        3 => leaf,
        1 => (2u32..40, vec(unknown_field(depth - 1), 0..3)).prop_map(move |(f, inner)| {
            let mut v = tag(f, 3);
            v.extend(inner.concat());
            v.extend(tag(f, 4));
            v
        }),
    ]
    .boxed()
}

/// Neither a control character nor a line or paragraph separator.
fn one_line(c: char) -> bool {
    !c.is_control() && !matches!(c, '\u{2028}' | '\u{2029}')
}

fn framed(msg: &[u8], flag: u8) -> Vec<u8> {
    let mut v = vec![flag];
    v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    v.extend_from_slice(msg);
    v
}

fn read(body: &[u8], cuts: &[usize], max: usize) -> (Result<(), String>, u32, Option<Vec<u8>>) {
    let mut r = MessageReader::new(max);
    let mut res = Ok(());
    for p in pieces(body, cuts) {
        if let Err(e) = r.feed(p) {
            res = Err(e.to_string());
            break;
        }
    }
    let res = res.and_then(|()| r.finish().map_err(|e| e.to_string()));
    (res, r.messages(), r.first().map(<[u8]>::to_vec))
}

fn field_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just("%C2%85\u{85}\u{2028}%E2%80%A9\u{e9}".as_bytes().to_vec()),
        vec(any::<u8>(), 0..8),
        (0u32..20).prop_map(|n| n.to_string().into_bytes()),
        Just(b"application/grpc".to_vec()),
        Just(b"text/html".to_vec()),
    ]
}

fn fields() -> impl Strategy<Value = Vec<(Vec<u8>, Vec<u8>)>> {
    let name = prop_oneof![
        Just(b"grpc-status".to_vec()),
        Just(b"grpc-message".to_vec()),
        Just(b"content-type".to_vec()),
        vec(any::<u8>(), 0..4),
    ];
    vec((name, field_value()), 0..4)
}

fn response() -> impl Strategy<Value = Response> {
    (
        prop::option::of(prop_oneof![Just(200u16), 100u16..600]),
        fields(),
        prop_oneof![
            vec(any::<u8>(), 0..20),
            (0i32..5).prop_map(|s| framed(&[8, s as u8], 0)),
        ],
        fields(),
        (
            any::<bool>(),
            any::<bool>(),
            prop::option::of(0u32..20),
            any::<bool>(),
        ),
        0u64..3,
    )
        .prop_map(
            |(status, headers, body, trailers, (ht, end, reset, refused), more)| Response {
                status,
                headers,
                body_len: body.len() as u64 + more,
                body,
                trailers,
                has_trailers: ht,
                end_stream: end,
                reset,
                refused,
                ..Response::default()
            },
        )
}

proptest! {
    #![proptest_config(crate::cfg(256))]

    /// Messages read the same in any split, as the model says.
    #[test]
    fn grpc_messages_any_split(msgs in vec((vec(any::<u8>(), 0..40), 0u8..3), 0..4),
                               cut_at in any::<prop::sample::Index>(), cut: bool,
                               cuts in vec(1usize..10, 1..8), max in 0usize..50) {
        let mut body: Vec<u8> = msgs.iter().flat_map(|(m, f)| framed(m, *f)).collect();
        if cut && !body.is_empty() {
            body.truncate(cut_at.index(body.len()));
        }
        let whole = read(&body, &[body.len()], max);
        prop_assert_eq!(&read(&body, &cuts, max), &whole);
        prop_assert_eq!(&read(&body, &[1], max), &whole);
        // The model: the first bad flag or size wins, else truncation.
        let first_bad = msgs.iter().position(|(m, f)| *f != 0 || m.len() > max);
        if !cut {
            prop_assert_eq!(whole.0.is_ok(), first_bad.is_none());
            if first_bad.is_none() {
                prop_assert_eq!(whole.1 as usize, msgs.len());
                prop_assert_eq!(whole.2.as_deref(), msgs.first().map(|m| m.0.as_slice()));
            }
        }
    }

    /// A HealthCheckResponse with unknown fields around its status
    /// decodes to the status; any bytes decode without panic.
    #[test]
    fn grpc_health_response_unknown_fields(status in 0u64..6,
                                           before in vec(unknown_field(2), 0..4),
                                           after in vec(unknown_field(2), 0..4),
                                           junk in vec(any::<u8>(), 0..40)) {
        let mut m = before.concat();
        m.push(8);
        put_varint(&mut m, status);
        m.extend(after.concat());
        let want = ServingStatus::from_i32(status as i32);
        prop_assert_eq!(grpc::decode_health_response(&m), Ok(want));
        let _ = grpc::decode_health_response(&junk);
    }

    /// Any response: a verdict with a one-line printable detail; a pass
    /// only as the rules allow; the grpc-status seen when one parsed.
    #[test]
    fn grpc_verdict_any_response(r in response(), extra in vec(0u32..20, 0..3)) {
        let v = grpc::verdict(&r, &extra);
        match &v.result {
            Ok(()) => {
                prop_assert!(r.complete() && r.status == Some(200));
                let code = v.grpc_status.unwrap();
                prop_assert!(extra.contains(&code)
                    || (code == 0 && v.serving == Some(ServingStatus::Serving)));
            }
            Err((reason, detail)) => {
                prop_assert!(matches!(reason, Reason::Status | Reason::Invalid | Reason::Protocol));
                if *reason == Reason::Protocol {
                    prop_assert!(!r.complete() && (r.reset.is_some() || r.refused));
                }
                prop_assert!(!detail.is_empty());
                prop_assert!(detail.chars().all(one_line), "{:?}", detail);
                if *reason == Reason::Status {
                    prop_assert!(v.grpc_status.is_some());
                }
            }
        }
        if let Some(m) = &v.message {
            prop_assert!(m.chars().all(one_line), "{:?}", m);
        }
    }

    /// grpc-timeout: at most 8 digits and a unit; never shorter than
    /// asked unless capped at 99999999H.
    #[test]
    fn grpc_timeout_values(ms in prop_oneof![any::<u64>(), 0u64..200_000_000]) {
        let t = grpc::timeout_value(ms);
        let (digits, unit) = t.split_at(t.len() - 1);
        prop_assert!(!digits.is_empty() && digits.len() <= 8);
        prop_assert!(digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0'));
        let per: u128 = match unit {
            "m" => 1,
            "S" => 1000,
            "M" => 60_000,
            "H" => 3_600_000,
            _ => unreachable!("{t}"),
        };
        let back = digits.parse::<u128>().unwrap() * per;
        prop_assert!(back >= u128::from(ms) || t == "99999999H", "{} -> {}", ms, t);
    }
}
