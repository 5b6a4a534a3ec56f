//! Unit tests of the HTTP/2 client: HPACK against RFC 7541 Appendix C,
//! the frame reader's rules, the connection state machine, and the
//! request header list.

mod conn;
mod conn_errors;
mod frame;
mod hpack;
mod request;

use super::frame::{flag, kind, put_header};
use super::hpack::encode_block;
use super::response::Field;

/// Bytes from an RFC-style hex dump (spaces ignored).
pub(super) fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

pub(super) fn fields(list: &[(&str, &str)]) -> Vec<Field> {
    list.iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

/// A raw frame.
pub(super) fn raw(k: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    put_header(&mut v, payload.len(), k, flags, stream);
    v.extend_from_slice(payload);
    v
}

/// HEADERS with END_HEADERS carrying these fields as plain literals.
pub(super) fn headers(stream: u32, list: &[(&str, &str)], end_stream: bool) -> Vec<u8> {
    let es = if end_stream { flag::END_STREAM } else { 0 };
    raw(
        kind::HEADERS,
        flag::END_HEADERS | es,
        stream,
        &encode_block(&fields(list)),
    )
}

pub(super) fn data(stream: u32, body: &[u8], end_stream: bool) -> Vec<u8> {
    raw(
        kind::DATA,
        if end_stream { flag::END_STREAM } else { 0 },
        stream,
        body,
    )
}
