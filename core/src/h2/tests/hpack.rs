//! HPACK: every example of RFC 7541 Appendix C, Huffman, limits, errors.

use super::hex;
use crate::h2::hpack::{encode_block, encode_int, Decoder, HpackError, STATIC_TABLE};
use crate::h2::huffman::{self, HuffmanError, CODES};

type List = Vec<(String, String)>;

fn decode(d: &mut Decoder, block: &[u8]) -> Result<List, HpackError> {
    let mut out = Vec::new();
    d.decode(block, 1 << 20, |n, v| {
        out.push((
            String::from_utf8(n.to_vec()).unwrap(),
            String::from_utf8(v.to_vec()).unwrap(),
        ))
    })?;
    Ok(out)
}

fn list(l: &[(&str, &str)]) -> List {
    l.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

#[test]
fn huffman_code_is_canonical_and_complete() {
    // The decoder relies on it: codes of one length are consecutive,
    // ascending with the symbol, each length starting where the previous
    // ended, shifted (RFC 7541 Appendix B is generated so).
    let mut code: u64 = 0;
    let mut kraft: u64 = 0;
    for len in 1..=30u8 {
        code <<= 1;
        for (sym, &(c, l)) in CODES.iter().enumerate() {
            if l == len {
                assert_eq!(u64::from(c), code, "symbol {sym}");
                code += 1;
                kraft += 1 << (30 - len);
            }
        }
    }
    assert_eq!(kraft, 1 << 30, "a complete prefix code");
    // A few entries as Appendix B prints them.
    assert_eq!(CODES[0], (0x1ff8, 13));
    assert_eq!(CODES[b'0' as usize], (0x0, 5));
    assert_eq!(CODES[b'a' as usize], (0x3, 5));
    assert_eq!(CODES[256], (0x3fffffff, 30));
}

#[test]
fn huffman_round_trips_every_octet() {
    let all: Vec<u8> = (0..=255).collect();
    let mut enc = Vec::new();
    huffman::encode(&all, &mut enc);
    assert_eq!(enc.len(), huffman::encoded_len(&all));
    let mut dec = Vec::new();
    huffman::decode(&enc, &mut dec).unwrap();
    assert_eq!(dec, all);
}

#[test]
fn huffman_refuses_bad_padding_and_eos() {
    let mut out = Vec::new();
    // "a" is 00011, padded with 111: 0x1f. Padded with zeros: refused.
    assert_eq!(huffman::decode(&[0x1f], &mut out), Ok(()));
    assert_eq!(out, b"a");
    assert_eq!(
        huffman::decode(&[0x18], &mut out),
        Err(HuffmanError::Padding)
    );
    // A whole octet of padding (8 ones) is too long.
    assert_eq!(
        huffman::decode(&[0x1f, 0xff], &mut out),
        Err(HuffmanError::Padding)
    );
    // EOS itself (30 ones) in the string.
    assert_eq!(
        huffman::decode(&[0xff, 0xff, 0xff, 0xff], &mut out),
        Err(HuffmanError::Eos)
    );
    assert_eq!(huffman::decode(&[], &mut out), Ok(()));
}

#[test]
fn appendix_c1_integers() {
    let mut v = Vec::new();
    encode_int(&mut v, 0, 5, 10);
    assert_eq!(v, [0x0a]);
    v.clear();
    encode_int(&mut v, 0, 5, 1337);
    assert_eq!(v, [0x1f, 0x9a, 0x0a]);
    v.clear();
    encode_int(&mut v, 0, 8, 42);
    assert_eq!(v, [0x2a]);
}

#[test]
fn appendix_c2_single_fields() {
    // C.2.1: literal with indexing.
    let mut d = Decoder::new(4096);
    let b = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
    assert_eq!(
        decode(&mut d, &b),
        Ok(list(&[("custom-key", "custom-header")]))
    );
    assert_eq!((d.table_size(), d.table_len()), (55, 1));
    // C.2.2: literal without indexing.
    let mut d = Decoder::new(4096);
    let b = hex("040c 2f73 616d 706c 652f 7061 7468");
    assert_eq!(decode(&mut d, &b), Ok(list(&[(":path", "/sample/path")])));
    assert_eq!(d.table_len(), 0);
    // C.2.3: literal never indexed.
    let mut d = Decoder::new(4096);
    let b = hex("1008 7061 7373 776f 7264 0673 6563 7265 74");
    assert_eq!(decode(&mut d, &b), Ok(list(&[("password", "secret")])));
    assert_eq!(d.table_len(), 0);
    // C.2.4: indexed.
    let mut d = Decoder::new(4096);
    assert_eq!(decode(&mut d, &hex("82")), Ok(list(&[(":method", "GET")])));
}

fn requests(blocks: [&str; 3]) {
    let mut d = Decoder::new(4096);
    let first = list(&[
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ]);
    assert_eq!(decode(&mut d, &hex(blocks[0])), Ok(first.clone()));
    assert_eq!(d.table_size(), 57);
    let mut second = first;
    second.push(("cache-control".into(), "no-cache".into()));
    assert_eq!(decode(&mut d, &hex(blocks[1])), Ok(second));
    assert_eq!(d.table_size(), 110);
    let third = list(&[
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ]);
    assert_eq!(decode(&mut d, &hex(blocks[2])), Ok(third));
    assert_eq!((d.table_size(), d.table_len()), (164, 3));
}

#[test]
fn appendix_c3_requests_without_huffman() {
    requests([
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ]);
}

#[test]
fn appendix_c4_requests_with_huffman() {
    requests([
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ]);
}

fn responses(blocks: [&str; 3]) {
    // The examples use a 256-byte table: a size update would say so; the
    // decoder is given that cap and starts there.
    let mut d = Decoder::new(256);
    let date1 = "Mon, 21 Oct 2013 20:13:21 GMT";
    let loc = "https://www.example.com";
    let first = list(&[
        (":status", "302"),
        ("cache-control", "private"),
        ("date", date1),
        ("location", loc),
    ]);
    assert_eq!(decode(&mut d, &hex(blocks[0])), Ok(first));
    assert_eq!((d.table_size(), d.table_len()), (222, 4));
    let second = list(&[
        (":status", "307"),
        ("cache-control", "private"),
        ("date", date1),
        ("location", loc),
    ]);
    assert_eq!(decode(&mut d, &hex(blocks[1])), Ok(second));
    assert_eq!((d.table_size(), d.table_len()), (222, 4));
    let cookie = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";
    let third = list(&[
        (":status", "200"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
        ("location", loc),
        ("content-encoding", "gzip"),
        ("set-cookie", cookie),
    ]);
    assert_eq!(decode(&mut d, &hex(blocks[2])), Ok(third));
    assert_eq!((d.table_size(), d.table_len()), (215, 3));
}

#[test]
fn appendix_c5_responses_without_huffman() {
    responses([
        "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 \
         2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 \
         6c65 2e63 6f6d",
        "4803 3330 37c1 c0bf",
        "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d \
         54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 \
         5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e \
         3d31",
    ]);
}

#[test]
fn appendix_c6_responses_with_huffman() {
    responses([
        "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 \
         2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
        "4883 640e ffc1 c0bf",
        "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab \
         77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f \
         9587 3160 65c0 03ed 4ee5 b106 3d50 07",
    ]);
}

#[test]
fn size_updates() {
    let mut d = Decoder::new(4096);
    // 0x3f 0xe1 0x1f = 4096: allowed; 4097 refused.
    assert_eq!(
        decode(&mut d, &hex("3fe1 1f82")),
        Ok(list(&[(":method", "GET")]))
    );
    assert_eq!(
        decode(&mut d, &hex("3fe2 1f")),
        Err(HpackError::SizeUpdateTooLarge {
            size: 4097,
            max: 4096
        })
    );
    // 65536 (the error message of the brief).
    let e = decode(&mut Decoder::new(4096), &hex("3fe1 ff03")).unwrap_err();
    assert_eq!(e.to_string(), "HPACK table size update 65536 > 4096");
    // After a field: refused. Two at the start, and one alone: fine.
    assert_eq!(
        decode(&mut d, &hex("8220")),
        Err(HpackError::SizeUpdateNotFirst)
    );
    assert_eq!(
        decode(&mut Decoder::new(4096), &hex("2030 82")).map(|l| l.len()),
        Ok(1)
    );
    assert_eq!(decode(&mut Decoder::new(4096), &hex("20")), Ok(vec![]));
    // A size update to 0 empties the table.
    let mut d = Decoder::new(4096);
    decode(
        &mut d,
        &hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"),
    )
    .unwrap();
    assert_eq!(d.table_len(), 1);
    assert_eq!(decode(&mut d, &hex("20")), Ok(vec![]));
    assert_eq!((d.table_len(), d.table_size()), (0, 0));
    assert_eq!(decode(&mut d, &hex("be")), Err(HpackError::BadIndex(62)));
}

#[test]
fn lowering_the_cap_evicts() {
    let mut d = Decoder::new(4096);
    decode(
        &mut d,
        &hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"),
    )
    .unwrap();
    d.set_cap(40);
    assert_eq!(d.table_len(), 0);
    assert_eq!(
        decode(&mut d, &hex("3f0a")),
        Err(HpackError::SizeUpdateTooLarge { size: 41, max: 40 })
    );
}

#[test]
fn an_entry_larger_than_the_table_empties_it() {
    let mut d = Decoder::new(64);
    let mut b = vec![0x40];
    crate::h2::hpack::encode_str(&mut b, b"n");
    crate::h2::hpack::encode_str(&mut b, &[b'v'; 40]);
    assert_eq!(decode(&mut d, &b).map(|l| l.len()), Ok(1));
    assert_eq!(d.table_len(), 0);
}

#[test]
fn malformed_blocks() {
    let bad = |b: &[u8]| decode(&mut Decoder::new(4096), b).unwrap_err();
    assert_eq!(bad(&[0x80]), HpackError::BadIndex(0));
    assert_eq!(bad(&[0xff, 0x00]), HpackError::BadIndex(127));
    assert_eq!(bad(&[0xbe]), HpackError::BadIndex(62));
    assert_eq!(bad(&[0xff]), HpackError::Truncated);
    assert_eq!(bad(&[0xff, 0x80]), HpackError::Truncated);
    assert_eq!(
        bad(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x0f]),
        HpackError::IntegerOverflow
    );
    assert_eq!(
        bad(&[0xff, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),
        HpackError::IntegerOverflow
    );
    assert_eq!(bad(&[0x00, 0x05, b'a']), HpackError::Truncated);
    assert_eq!(bad(&[0x00, 0x01, b'a']), HpackError::Truncated);
    assert_eq!(bad(&[0x00, 0x81, 0x00, 0x00]), HpackError::BadHuffman);
    assert_eq!(bad(&[0x40]), HpackError::Truncated);
    // A long string length never allocates: refused as truncated.
    assert_eq!(
        bad(&[0x00, 0x7f, 0xff, 0xff, 0xff, 0x0f]),
        HpackError::Truncated
    );
}

#[test]
fn hpack_bomb_stops_at_the_limit() {
    // One 4 KB entry, then 16 K indexed references to it: 64 MB decoded
    // from 16 KB. Stops at the limit, having called back only under it.
    let mut block = vec![0x40];
    crate::h2::hpack::encode_str(&mut block, b"x");
    crate::h2::hpack::encode_str(&mut block, &[b'y'; 4000]);
    block.extend_from_slice(&[0xbe; 16_384]);
    let mut d = Decoder::new(4096);
    let mut seen = 0usize;
    let r = d.decode(&block, 16_384, |n, v| seen += n.len() + v.len() + 32);
    assert_eq!(r, Err(HpackError::ListTooLarge { max: 16_384 }));
    assert!(seen <= 16_384);
    assert_eq!(
        r.unwrap_err().to_string(),
        "decoded header list over 16384 bytes"
    );
}

#[test]
fn our_encoding_decodes_and_leaves_no_state() {
    let f = super::fields(&[(":method", "POST"), ("te", "trailers"), ("x", "")]);
    let block = encode_block(&f);
    let mut d = Decoder::new(4096);
    let got: Vec<_> = decode(&mut d, &block)
        .unwrap()
        .into_iter()
        .map(|(n, v)| (n.into_bytes(), v.into_bytes()))
        .collect();
    assert_eq!(got, f);
    assert_eq!(d.table_len(), 0);
    // A long name takes a multi-octet length.
    let long = vec![(vec![b'n'; 300], vec![b'v'; 70_000])];
    let mut out = Vec::new();
    Decoder::new(0)
        .decode(&encode_block(&long), 1 << 20, |n, v| {
            out.push((n.to_vec(), v.to_vec()))
        })
        .unwrap();
    assert_eq!(out, long);
}

/// A block as nginx sends it every response: literals with incremental
/// indexing and static names, Huffman-coded values; `date` changes.
fn nginx_block(date: &str) -> Vec<u8> {
    let mut b = vec![0x88];
    for (index, value) in [(54u8, "nginx/1.28.3"), (33, date), (31, "text/plain")] {
        b.push(0x40 | index);
        let mut v = Vec::new();
        huffman::encode(value.as_bytes(), &mut v);
        encode_int(&mut b, 0x80, 7, v.len());
        b.extend_from_slice(&v);
    }
    b
}

/// The remembered Huffman strings (shared by the decoders of a thread)
/// give what decoding gives: the same values block after block while one
/// of them changes every time, on one connection and on another, and a
/// bad string after a good one of the same length is still refused.
#[test]
fn remembered_huffman_strings_decode_the_same() {
    let mut d = Decoder::new(4096);
    for s in 0..20 {
        let date = format!("Fri, 04 Dec 2026 01:30:{s:02} GMT");
        let want = list(&[
            (":status", "200"),
            ("server", "nginx/1.28.3"),
            ("date", &date),
            ("content-type", "text/plain"),
        ]);
        assert_eq!(
            decode(&mut d, &nginx_block(&date)).unwrap(),
            want,
            "block {s}"
        );
        let mut other = Decoder::new(4096);
        assert_eq!(
            decode(&mut other, &nginx_block(&date)).unwrap(),
            want,
            "block {s} on another connection"
        );
    }
    // "text/plain" coded, then the same length with EOS in it.
    let mut v = Vec::new();
    huffman::encode(b"text/plain", &mut v);
    let mut bad = vec![0x0f, 0x10];
    encode_int(&mut bad, 0x80, 7, v.len());
    bad.extend(std::iter::repeat(0xff).take(v.len()));
    assert_eq!(decode(&mut d, &bad), Err(HpackError::BadHuffman));
}

#[test]
fn static_table_is_appendix_a() {
    assert_eq!(STATIC_TABLE.len(), 61);
    assert_eq!(STATIC_TABLE[0], (":authority", ""));
    assert_eq!(STATIC_TABLE[7], (":status", "200"));
    assert_eq!(STATIC_TABLE[15], ("accept-encoding", "gzip, deflate"));
    assert_eq!(STATIC_TABLE[60], ("www-authenticate", ""));
}

proptest::proptest! {
    /// The table-driven decoder says what the bit-by-bit one said, for
    /// any bytes (mostly not Huffman at all), for encoded strings with
    /// any tail, and for encoded header-like text (the short codes, two
    /// a lookup), appended after what the output already holds.
    #[test]
    fn huffman_decode_agrees_with_the_bitwise_decoder(
        raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        text in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ascii in "[ -~]{0,80}",
        cut in 0usize..8,
        prefix in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4),
    ) {
        use crate::h2::huffman::{decode, decode_bitwise, encode};
        let mut encoded = Vec::new();
        encode(&text, &mut encoded);
        let shorter = encoded.len().saturating_sub(cut);
        let mut header = Vec::new();
        encode(ascii.as_bytes(), &mut header);
        let header_shorter = header.len().saturating_sub(cut);
        for input in [&raw[..], &encoded[..], &encoded[..shorter], &header[..], &header[..header_shorter]] {
            let (mut a, mut b) = (prefix.clone(), prefix.clone());
            let (ra, rb) = (decode(input, &mut a), decode_bitwise(input, &mut b));
            proptest::prop_assert_eq!(ra, rb, "{:?}", input);
            if ra.is_ok() {
                proptest::prop_assert_eq!(&a, &b);
            }
        }
        let mut back = Vec::new();
        proptest::prop_assert!(decode(&encoded, &mut back).is_ok());
        proptest::prop_assert_eq!(back, text);
        let mut back = prefix.clone();
        proptest::prop_assert!(decode(&header, &mut back).is_ok());
        proptest::prop_assert_eq!(&back[prefix.len()..], ascii.as_bytes());
    }
}

/// One step of [`the_table_keeps_what_a_model_keeps`]: insert a literal
/// of these name and value lengths (with incremental indexing), or send
/// a size update.
#[derive(Clone, Debug)]
enum Step {
    Insert(usize, usize),
    Resize(usize),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        8 => (0usize..200, 0usize..600).prop_map(|(n, v)| Step::Insert(n, v)),
        1 => (0usize..=4096).prop_map(Step::Resize),
    ]
}

proptest::proptest! {
    /// The ring holding the dynamic table gives back, at every index,
    /// what a plain list of entries evicted by RFC 7541 section 4.4 holds,
    /// through inserts of every size (some larger than the table) and
    /// size updates; and its memory stays within twice the cap.
    #[test]
    fn the_table_keeps_what_a_model_keeps(steps in proptest::collection::vec(step(), 1..120)) {
        use std::collections::VecDeque;
        let mut d = Decoder::new(4096);
        let mut model: VecDeque<(String, String)> = VecDeque::new();
        let (mut max, mut serial) = (4096usize, 0u32);
        let size = |m: &VecDeque<(String, String)>| m.iter().map(|(n, v)| n.len() + v.len() + 32).sum::<usize>();
        for s in steps {
            let mut block = Vec::new();
            match s {
                Step::Insert(n, v) => {
                    serial += 1;
                    let text = |len: usize, c: char| format!("{c}{serial}-").chars().cycle().take(len).collect::<String>();
                    let (name, value) = (text(n, 'n'), text(v, 'v'));
                    block.push(0x40);
                    crate::h2::hpack::encode_str(&mut block, name.as_bytes());
                    crate::h2::hpack::encode_str(&mut block, value.as_bytes());
                    if name.len() + value.len() + 32 > max {
                        model.clear();
                    } else {
                        model.push_front((name, value));
                        while size(&model) > max {
                            model.pop_back();
                        }
                    }
                }
                Step::Resize(m) => {
                    encode_int(&mut block, 0x20, 5, m);
                    max = m;
                    while size(&model) > max {
                        model.pop_back();
                    }
                }
            }
            decode(&mut d, &block).unwrap();
            proptest::prop_assert_eq!((d.table_len(), d.table_size()), (model.len(), size(&model)));
            let mut all = Vec::new();
            for i in 0..model.len() {
                encode_int(&mut all, 0x80, 7, 62 + i);
            }
            let got = decode(&mut d, &all).unwrap();
            let want: List = model.iter().cloned().collect();
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert!(d.heap_bytes() <= 2 * 4096 + 4096 / 32 * 16 + 4096, "{}", d.heap_bytes());
        }
    }
}

proptest::proptest! {
    /// Strings from a pool larger than what is remembered, picked in any
    /// order by three connections, decode to what they encode (hash sets
    /// shared and replaced as they go).
    #[test]
    fn remembered_strings_survive_any_order(
        pool in proptest::collection::vec("[ -~]{1,90}", 1..40),
        picks in proptest::collection::vec((0usize..40, 0usize..3), 1..200),
    ) {
        let mut decoders = [Decoder::new(4096), Decoder::new(4096), Decoder::new(4096)];
        for (i, d) in picks {
            let text = &pool[i % pool.len()];
            let mut v = Vec::new();
            huffman::encode(text.as_bytes(), &mut v);
            let mut block = vec![0x0f, 0x10];
            encode_int(&mut block, 0x80, 7, v.len());
            block.extend_from_slice(&v);
            let got = decode(&mut decoders[d], &block).unwrap();
            proptest::prop_assert_eq!(got, list(&[("content-type", text)]));
        }
    }
}
