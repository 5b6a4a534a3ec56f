//! One stream's response as the client collects it, and the rules of
//! RFC 9113 section 8 a response's header fields must follow.

use crate::matcher::HeadView;

/// The most interim (1xx) responses skipped before the final one, as for
/// HTTP/1.x ([`crate::http::response::MAX_INTERIM`]).
pub const MAX_INTERIM: u32 = crate::http::response::MAX_INTERIM;

/// A header or trailer field: `(name, value)`, the name lowercase.
pub type Field = (Vec<u8>, Vec<u8>);

/// What a stream received. Fields are kept as HPACK decoded them (names
/// lowercase, as RFC 9113 requires of every field accepted); the body
/// up to the client's `max_body_bytes`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Response {
    /// The final `:status` (100..=599, not 1xx), once its HEADERS came.
    pub status: Option<u16>,
    /// How many interim (1xx) responses were skipped.
    pub interim: u32,
    /// The final response's regular header fields, in order (no
    /// pseudo-header).
    pub headers: Vec<Field>,
    /// The body's first `max_body_bytes` bytes.
    pub body: Vec<u8>,
    /// The body's length in all (what was kept and what was not).
    pub body_len: u64,
    /// The trailer fields, when a trailer section came.
    pub trailers: Vec<Field>,
    /// A trailer section came (possibly empty).
    pub has_trailers: bool,
    /// The server ended the stream (END_STREAM): the response is
    /// complete.
    pub end_stream: bool,
    /// The server reset the stream with this error code (RST_STREAM).
    pub reset: Option<u32>,
    /// The server's GOAWAY said it did not process this stream (its id
    /// is above the GOAWAY's last stream id): safe to retry elsewhere.
    pub refused: bool,
}

impl Response {
    /// The response is complete: the server ended the stream.
    pub fn complete(&self) -> bool {
        self.end_stream
    }

    /// The stream is over, complete or not (ended, reset or refused).
    pub fn closed(&self) -> bool {
        self.end_stream || self.reset.is_some() || self.refused
    }

    /// Some of the body was not kept (it is longer than `max_body_bytes`).
    pub fn body_truncated(&self) -> bool {
        self.body_len > self.body.len() as u64
    }

    /// The head as the HTTP verdict ([`crate::matcher::http_verdict`])
    /// reads it, once the final HEADERS came.
    pub fn head(&self) -> Option<HeadView<'_>> {
        self.status.map(|status| HeadView {
            status,
            headers: &self.headers,
        })
    }

    /// The value of the first header field named `name` (lowercase).
    pub fn header(&self, name: &[u8]) -> Option<&[u8]> {
        find(&self.headers, name)
    }

    /// The value of the first trailer field named `name` (lowercase).
    pub fn trailer(&self, name: &[u8]) -> Option<&[u8]> {
        find(&self.trailers, name)
    }

    /// Heap bytes held, roughly.
    pub fn heap_bytes(&self) -> usize {
        let fields = |f: &[Field]| -> usize {
            f.iter()
                .map(|(n, v)| n.capacity() + v.capacity() + 48)
                .sum()
        };
        fields(&self.headers) + fields(&self.trailers) + self.body.capacity()
    }
}

fn find<'a>(fields: &'a [Field], name: &[u8]) -> Option<&'a [u8]> {
    fields
        .iter()
        .find(|(n, _)| n.as_slice() == name)
        .map(|(_, v)| v.as_slice())
}

/// Header fields that are connection-specific in HTTP/1.1 and make an
/// HTTP/2 message malformed (RFC 9113 section 8.2.2).
pub const CONNECTION_SPECIFIC: [&[u8]; 5] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"upgrade",
];

/// Checks a decoded field section of a response (RFC 9113 sections 8.2
/// and 8.3.2) and returns its `:status` (`None` for trailers, which may
/// have no pseudo-header). What is refused, with the words returned:
///
/// - a pseudo-header other than `:status`, a second `:status`, one after
///   a regular field, any in trailers, none in a head;
/// - a `:status` that is not three digits 100..=599;
/// - a name that is empty or has a byte 0x00-0x20, A-Z, 0x7f-0xff or `:`;
/// - a connection-specific field ([`CONNECTION_SPECIFIC`]);
/// - a value with NUL, CR or LF, or starting or ending with SP or HTAB.
pub fn check_fields(fields: &[Field], trailers: bool) -> Result<Option<u16>, &'static str> {
    let mut check = FieldCheck::new(trailers);
    for (n, v) in fields {
        check.field(n, v);
    }
    check.finish()
}

/// [`check_fields`] one field at a time, as a block decodes: the first
/// rule broken is kept and said by [`FieldCheck::finish`].
#[derive(Debug)]
pub struct FieldCheck {
    trailers: bool,
    regular: bool,
    status: Option<u16>,
    error: Option<&'static str>,
}

impl FieldCheck {
    /// A check of a head (`trailers` false) or a trailer section.
    pub fn new(trailers: bool) -> FieldCheck {
        FieldCheck {
            trailers,
            regular: false,
            status: None,
            error: None,
        }
    }

    /// Checks the next field; false once a rule is broken (by it or an
    /// earlier one).
    pub fn field(&mut self, n: &[u8], v: &[u8]) -> bool {
        if self.error.is_some() {
            return false;
        }
        match self.check(n, v) {
            Ok(()) => true,
            Err(e) => {
                self.error = Some(e);
                false
            }
        }
    }

    fn check(&mut self, n: &[u8], v: &[u8]) -> Result<(), &'static str> {
        if n.first() == Some(&b':') {
            if self.trailers {
                return Err("pseudo-header in trailers");
            }
            if self.regular {
                return Err("pseudo-header after a regular field");
            }
            if n != b":status" {
                return Err("pseudo-header other than :status");
            }
            if self.status.is_some() {
                return Err("duplicate :status");
            }
            self.status = Some(parse_status(v).ok_or("invalid :status")?);
        } else {
            self.regular = true;
            if n.is_empty() || n.iter().any(|&b| BAD_IN_NAME[usize::from(b)]) {
                return Err("invalid field name");
            }
            // Their lengths first: most names are none of them.
            if matches!(n.len(), 7 | 10 | 16 | 17) && CONNECTION_SPECIFIC.contains(&n) {
                return Err("connection-specific header field");
            }
        }
        let ws = |b: Option<&u8>| matches!(b, Some(b' ' | b'\t'));
        if !value_octets_ok(v) || ws(v.first()) || ws(v.last()) {
            return Err("invalid field value");
        }
        Ok(())
    }

    /// The section's `:status` (`None` for trailers), or the first rule
    /// broken.
    pub fn finish(self) -> Result<Option<u16>, &'static str> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if !self.trailers && self.status.is_none() {
            return Err("missing :status");
        }
        Ok(self.status)
    }
}

/// The octets a field name may not hold: 0x00-0x20, A-Z, 0x7f-0xff and
/// `:` (RFC 9113 section 8.2.1, names lowercase).
static BAD_IN_NAME: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c <= 0x20 || c.is_ascii_uppercase() || c >= 0x7f || c == b':';
        b += 1;
    }
    t
};

/// A value holds no NUL, CR or LF: eight octets at a time (a word has
/// one of them where `word ^ that` has a zero octet), the rest by table.
fn value_octets_ok(v: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_in = |x: u64| x.wrapping_sub(ONES) & !x & HIGH != 0;
    let mut words = v.chunks_exact(8);
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        if zero_in(w) || zero_in(w ^ (ONES * 0x0d)) || zero_in(w ^ (ONES * 0x0a)) {
            return false;
        }
    }
    !words
        .remainder()
        .iter()
        .any(|&b| BAD_IN_VALUE[usize::from(b)])
}

/// The octets a field value may not hold: NUL, CR and LF.
static BAD_IN_VALUE: [bool; 256] = {
    let mut t = [false; 256];
    t[0] = true;
    t[b'\r' as usize] = true;
    t[b'\n' as usize] = true;
    t
};

fn parse_status(v: &[u8]) -> Option<u16> {
    if v.len() != 3 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let s = v.iter().fold(0u16, |n, &d| n * 10 + u16::from(d - b'0'));
    (100..=599).contains(&s).then_some(s)
}
