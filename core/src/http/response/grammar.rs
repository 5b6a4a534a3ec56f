//! The byte grammar of response heads and the body's framing rules
//! (RFC 9112): what the parser in `super` asks byte by byte.

use super::{Field, Framing, Head, Invalid, Line};

/// The grammar of header and trailer field lines (control bytes already
/// refused).
pub(super) fn field_byte(line: Line, b: u8) -> Result<Field, Invalid> {
    Ok(match (line, b) {
        (Line::FieldStart, b'\r') => Field::Next(Line::EndLf),
        (Line::FieldStart | Line::EndLf, b'\n') => Field::SectionEnd,
        (Line::FieldStart | Line::Name, _) if is_tchar(b) => Field::Next(Line::Name),
        (Line::Name, b':') => Field::Next(Line::ValueStart),
        (Line::ValueStart, b' ' | b'\t') => Field::Next(Line::ValueStart),
        (Line::ValueStart | Line::Value, b'\r') => Field::Next(Line::FieldLf),
        (Line::ValueStart | Line::Value | Line::FieldLf, b'\n') => Field::LineEnd,
        (Line::ValueStart | Line::Value, _) => Field::Next(Line::Value),
        // obs-fold, space before the colon, a line without one, a lone CR.
        _ => return Err(Invalid::HeaderSyntax),
    })
}

/// The final response's framing (RFC 9112 section 6.3).
/// `fields`: what [`Fields::of`] found in `head`.
pub(super) fn framing(head: &Head, fields: Fields, head_request: bool) -> Result<Framing, Invalid> {
    if head_request || head.status == 204 || head.status == 304 {
        return Ok(Framing::None);
    }
    let has_length = fields.length_seen != Length::None;
    if fields.transfer_encoding {
        if has_length || head.version == 0 {
            return Err(Invalid::Framing);
        }
        let mut codings = head.list(b"transfer-encoding").filter(|c| !c.is_empty());
        let mut last = None;
        for coding in codings.by_ref() {
            if last.is_some_and(|l: &[u8]| l.eq_ignore_ascii_case(b"chunked")) {
                return Err(Invalid::Framing);
            }
            let name = trim(coding.split(|&b| b == b';').next().unwrap_or_default());
            if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
                return Err(Invalid::Framing);
            }
            last = Some(coding);
        }
        return match last {
            Some(l) if l.eq_ignore_ascii_case(b"chunked") => Ok(Framing::Chunked),
            _ => Err(Invalid::Framing),
        };
    }
    if has_length {
        return match fields.length_seen {
            Length::One => Ok(Framing::Length(fields.length)),
            Length::None | Length::Bad => Err(Invalid::Framing),
        };
    }
    Ok(Framing::UntilClose)
}

/// What the end of a head asks of its fields, noted field by field as
/// each line ends (a head's fields are looked at once, not once per
/// question, nor scanned again at its end).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Fields {
    /// A `Connection` list has `close`.
    pub close: bool,
    /// A `Connection` list has `keep-alive`.
    pub keep_alive: bool,
    pub transfer_encoding: bool,
    /// What the elements of every `Content-Length` list say, in order
    /// ([`Length::None`]: the head has no such field).
    pub length_seen: Length,
    /// Their length, if [`Length::One`] (two fields, not an enum of a u64:
    /// the parser stays small).
    pub length: u64,
}

/// What the `Content-Length` elements seen so far say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Length {
    /// None yet.
    #[default]
    None,
    /// All of them [`Fields::length`].
    One,
    /// One is no length (digits only, fitting u64; empty elements
    /// included), or two differ.
    Bad,
}

impl Fields {
    /// One field line (`value` trimmed of SP/HTAB).
    pub(super) fn note(&mut self, name: &[u8], value: &[u8]) {
        // The names' lengths differ: a name matches one at most.
        if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(trim) {
                self.close |= token.eq_ignore_ascii_case(b"close");
                self.keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"content-length") {
            for v in value.split(|&b| b == b',').map(trim) {
                self.length_seen = match (self.length_seen, parse_length(v)) {
                    (Length::None, Some(n)) => {
                        self.length = n;
                        Length::One
                    }
                    (Length::One, Some(n)) if self.length == n => Length::One,
                    _ => Length::Bad,
                };
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            self.transfer_encoding = true;
        }
    }
}

/// A Content-Length value: digits only, fitting u64.
fn parse_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(0u64, |n, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// How many of `avail` input bytes a body run of `left` bytes takes.
pub(super) fn run(left: u64, avail: usize) -> usize {
    usize::try_from(left).map_or(avail, |l| l.min(avail))
}

/// A control byte that may not appear in a head: all but HTAB, CR, LF
/// (CR and LF are line ends, checked by the grammar).
pub(super) fn is_ctl(b: u8) -> bool {
    (b < 0x20 && !matches!(b, b'\t' | b'\r' | b'\n')) || b == 0x7f
}

/// A 256-entry table of the bytes for which `$pred` (an expression of
/// `b`) holds, built at compile time.
macro_rules! byte_table {
    (|$b:ident| $pred:expr) => {{
        let mut t = [false; 256];
        let mut i = 0;
        while i < 256 {
            let $b = i as u8;
            t[i] = $pred;
            i += 1;
        }
        t
    }};
}

/// RFC 9110 tchar (a table: every byte of a field name asks).
pub(crate) fn is_tchar(b: u8) -> bool {
    TCHAR[usize::from(b)]
}

const TCHAR: [bool; 256] = byte_table!(|b| b.is_ascii_alphanumeric()
    || matches!(
        b,
        b'!' | b'#'
            | b'$'
            | b'%'
            | b'&'
            | b'\''
            | b'*'
            | b'+'
            | b'-'
            | b'.'
            | b'^'
            | b'_'
            | b'`'
            | b'|'
            | b'~'
    ));

/// A byte of a reason phrase or a field value that only extends it: not a
/// control byte (HTAB is allowed), not CR or LF (a table, as for tchar).
pub(super) fn is_text(b: u8) -> bool {
    TEXT[usize::from(b)]
}

const TEXT: [bool; 256] = byte_table!(|b| (b >= 0x20 && b != 0x7f) || b == b'\t');

pub(super) fn is_ows(b: &u8) -> bool {
    matches!(b, b' ' | b'\t')
}

pub(super) fn trim_end(v: &[u8]) -> &[u8] {
    let end = v.iter().rposition(|b| !is_ows(b)).map_or(0, |i| i + 1);
    &v[..end]
}

pub(super) fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| !is_ows(b)).unwrap_or(v.len());
    trim_end(&v[start..])
}
