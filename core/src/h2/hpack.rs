//! HPACK (RFC 7541): the decoder of the server's header blocks and the
//! stateless encoder of our own.
//!
//! # Why our own and not a crate
//!
//! The crates looked at (2024-2025): `loona-hpack` 0.4 (and its earlier
//! name `fluke-hpack` 0.3, the same code), `hpack` 0.3 and `httlib-hpack`
//! 0.1. None fits a decoder that runs on nginx's event loop against
//! hostile servers:
//!
//! - `loona-hpack` builds its Huffman decoding table (nested `HashMap`s of
//!   257 entries) anew for every Huffman string and then looks up every
//!   input bit in it: a 16 KB block of empty Huffman strings costs millions
//!   of hash insertions. Its callback cannot stop decoding at a byte limit,
//!   it accepts a table-size update in the middle of a block but refuses
//!   one at the end, and it would bring `thiserror` and `tracing` (with
//!   their proc-macro crates) into a crate that has no dependency;
//! - `hpack` 0.3 is unmaintained since 2016 and its integer decoder
//!   overflows on long continuations;
//! - `httlib-hpack` 0.1 indexes past the end of its input on a truncated
//!   integer (a panic) and is unmaintained since 2021.
//!
//! So the decoder is written here against RFC 7541: static table
//! (Appendix A), dynamic table with eviction, integers with a bound, and
//! the canonical Huffman decoder of [`super::huffman`]. It is tested with
//! every example of Appendix C and fuzzed against an encoder that uses
//! every representation.
//!
//! # Limits
//!
//! - A dynamic-table size update above the cap we advertised
//!   (`SETTINGS_HEADER_TABLE_SIZE`, see [`Decoder::new`]) is refused, and
//!   so is one after the first field of a block (section 4.2 wants them at
//!   its start).
//! - The decoded list is measured as `SETTINGS_MAX_HEADER_LIST_SIZE`
//!   measures it (name + value + 32 per field) and decoding stops with
//!   [`HpackError::ListTooLarge`] as soon as it passes the caller's
//!   limit: a small block that names a 4 KB table entry a thousand times
//!   costs no more than the limit.
//! - Integers longer than 5 continuation octets or above `u32::MAX` are
//!   refused; a string longer than what is left of the block is
//!   [`HpackError::Truncated`] before any allocation.
//!
//! The decoder's memory is its table: one ring of at most twice the cap
//! (4096) for the entries' octets and a list of at most cap / 32 entries;
//! and, once per thread for all decoders, 16 short Huffman strings
//! decoded lately with what they decoded to (servers code the same
//! values in every response, and every connection's `date` is the same
//! within a second).

use std::collections::VecDeque;

use super::huffman;

/// Per-entry overhead of the table size (section 4.1).
pub const ENTRY_OVERHEAD: usize = 32;

/// The static table (Appendix A), index 1 at position 0.
pub const STATIC_TABLE: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// Why a header block could not be decoded. Every one is a connection
/// error of type COMPRESSION_ERROR (RFC 9113 section 4.3), except
/// [`HpackError::ListTooLarge`], our own limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HpackError {
    /// The block ends inside a representation.
    Truncated,
    /// An integer of more than 5 continuation octets or above `u32::MAX`.
    IntegerOverflow,
    /// An index of 0 or past the end of the tables.
    BadIndex(u32),
    /// A Huffman string with EOS or bad padding.
    BadHuffman,
    /// A dynamic-table size update above the cap we advertised.
    SizeUpdateTooLarge {
        /// The size asked for.
        size: u32,
        /// Our cap.
        max: usize,
    },
    /// A dynamic-table size update after a field of the block.
    SizeUpdateNotFirst,
    /// The decoded list passed the caller's limit.
    ListTooLarge {
        /// The limit, in RFC 9113 header-list bytes.
        max: usize,
    },
}

impl std::fmt::Display for HpackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HpackError::Truncated => write!(f, "HPACK block truncated"),
            HpackError::IntegerOverflow => write!(f, "HPACK integer overflow"),
            HpackError::BadIndex(i) => write!(f, "HPACK index {i} out of range"),
            HpackError::BadHuffman => write!(f, "HPACK invalid Huffman string"),
            HpackError::SizeUpdateTooLarge { size, max } => {
                write!(f, "HPACK table size update {size} > {max}")
            }
            HpackError::SizeUpdateNotFirst => {
                write!(f, "HPACK table size update after a header field")
            }
            HpackError::ListTooLarge { max } => {
                write!(f, "decoded header list over {max} bytes")
            }
        }
    }
}

/// The dynamic table: the entries' octets (name then value) in one ring,
/// newest entry first in `entries`. An entry never wraps: one that would
/// pass the ring's end starts at its beginning, the octets skipped left
/// unused until the entries before them are evicted. A ring twice the
/// size of what is live (and never more than twice the table's maximum)
/// always has room for the next entry, so a kept connection whose server
/// indexes its `date` every response inserts without allocating.
#[derive(Clone, Debug, Default)]
struct Table {
    ring: Vec<u8>,
    /// `(start, name length, value length)`, newest first; `start` counts
    /// octets written since the ring was last laid out afresh (its
    /// position is `start % ring.len()`).
    entries: VecDeque<(u64, u32, u32)>,
    /// Where the next entry would start (the same count).
    head: u64,
    /// The RFC size of the entries (lengths + 32 each).
    size: usize,
    /// The current maximum size (the last size update, or the cap).
    max: usize,
}

impl Table {
    fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        let &(start, n, v) = self.entries.get(i)?;
        let at = self.position(start);
        let (n, v) = (n as usize, v as usize);
        Some((&self.ring[at..at + n], &self.ring[at + n..at + n + v]))
    }

    fn position(&self, start: u64) -> usize {
        match self.ring.len() as u64 {
            0 => 0,
            len => (start % len) as usize,
        }
    }

    fn evict_to(&mut self, max: usize) {
        while self.size > max {
            match self.entries.pop_back() {
                Some((_, n, v)) => self.size -= n as usize + v as usize + ENTRY_OVERHEAD,
                None => self.size = 0,
            }
        }
    }

    /// Section 4.4: an entry larger than the maximum empties the table.
    fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max {
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max - size);
        if self.entries.is_empty() {
            self.head = 0;
        }
        let len = name.len() + value.len();
        let start = match self.room(len) {
            Some(start) => start,
            None => {
                self.lay_out(len);
                self.head
            }
        };
        let at = self.position(start);
        self.ring[at..at + name.len()].copy_from_slice(name);
        self.ring[at + name.len()..at + len].copy_from_slice(value);
        // Both fit in u32: an entry is at most the maximum, a u32.
        self.entries
            .push_front((start, name.len() as u32, value.len() as u32));
        self.head = start + len as u64;
        self.size += size;
    }

    /// Where an entry of `len` octets fits without wrapping, if it does.
    fn room(&self, len: usize) -> Option<u64> {
        let ring = self.ring.len() as u64;
        let oldest = self.entries.back().map_or(self.head, |e| e.0);
        let at = self.head % ring.max(1);
        // Past the end: skip to the ring's beginning.
        let start = if at + len as u64 > ring {
            self.head + (ring - at)
        } else {
            self.head
        };
        (ring > 0 && start + len as u64 - oldest <= ring).then_some(start)
    }

    /// A new ring with room for `len` more octets, the live entries
    /// copied to its beginning, oldest first.
    fn lay_out(&mut self, len: usize) {
        let old = core::mem::take(&mut self.ring);
        let old_len = (old.len() as u64).max(1);
        let live: usize = self.entries.iter().map(|e| (e.1 + e.2) as usize).sum();
        let want = (2 * (live + len)).max(2 * old.len()).max(64);
        // Never more than twice the maximum (which live + len is within).
        let cap = want.min(2 * self.max).max(live + len);
        let mut ring = vec![0u8; cap];
        let mut head = 0usize;
        for e in self.entries.iter_mut().rev() {
            let at = (e.0 % old_len) as usize;
            let n = (e.1 + e.2) as usize;
            ring[head..head + n].copy_from_slice(&old[at..at + n]);
            e.0 = head as u64;
            head += n;
        }
        self.ring = ring;
        self.head = head as u64;
    }
}

/// The most capacity a scratch buffer keeps from one block to the next.
const SCRATCH_KEPT: usize = 4096;

/// The decoder of one connection's header blocks.
#[derive(Clone, Debug)]
pub struct Decoder {
    table: Table,
    /// Our `SETTINGS_HEADER_TABLE_SIZE`: no size update may pass it.
    cap: usize,
    /// A literal's name and value as decoded, kept from block to block
    /// (a kept connection decodes every round's block into them).
    scratch: (Vec<u8>, Vec<u8>),
}

/// Short Huffman strings decoded lately and what they decoded to, shared
/// by every decoder of a thread (an nginx worker is one): servers code
/// the same values in every response, `server` and `content-type`
/// without referring to their table and `date` the same on every
/// connection within a second, so a worker with a thousand kept
/// connections decodes each once. Huffman decoding is a function of the
/// octets alone, so what one connection decoded serves another. Two
/// strings of [`MEMO_MAX`] octets in each of [`MEMO_SETS`] sets chosen by
/// a hash of the octets, the older of the two replaced; fixed size, no
/// allocation; an error is never remembered.
struct Memo {
    slots: [Slot; MEMO_SETS * 2],
    /// Per set, the way to replace next.
    older: [u8; MEMO_SETS],
}

#[derive(Clone, Copy)]
struct Slot {
    /// 0: empty (an empty string is never remembered).
    raw_len: u8,
    out_len: u8,
    raw: [u8; MEMO_MAX],
    out: [u8; MEMO_OUT],
}

const MEMO_SETS: usize = 8;

/// The longest encoded string remembered.
const MEMO_MAX: usize = 64;

/// The longest decoded string remembered (64 octets of 5-bit codes).
const MEMO_OUT: usize = MEMO_MAX * 8 / 5;

thread_local! {
    static MEMO: core::cell::RefCell<Memo> = const {
        core::cell::RefCell::new(Memo {
            slots: [Slot { raw_len: 0, out_len: 0, raw: [0; MEMO_MAX], out: [0; MEMO_OUT] }; MEMO_SETS * 2],
            older: [0; MEMO_SETS],
        })
    };
}

impl Memo {
    /// The set of a string: its length and its first and last 8 octets.
    fn set(raw: &[u8]) -> usize {
        let word = |s: &[u8]| {
            let mut w = [0u8; 8];
            let n = s.len().min(8);
            w[..n].copy_from_slice(&s[..n]);
            u64::from_le_bytes(w)
        };
        let h = raw.len() as u64
            ^ word(raw)
            ^ word(&raw[raw.len().saturating_sub(8)..]).rotate_left(29);
        (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 61) as usize
    }

    fn decode(&mut self, raw: &[u8], out: &mut Vec<u8>) -> Result<(), huffman::HuffmanError> {
        if raw.is_empty() || raw.len() > MEMO_MAX {
            return huffman::decode(raw, out);
        }
        let set = Memo::set(raw);
        for way in 0..2 {
            let s = &self.slots[set * 2 + way];
            if usize::from(s.raw_len) == raw.len() && s.raw[..raw.len()] == *raw {
                out.extend_from_slice(&s.out[..usize::from(s.out_len)]);
                self.older[set] = 1 - way as u8;
                return Ok(());
            }
        }
        let start = out.len();
        huffman::decode(raw, out)?;
        let decoded = &out[start..];
        if decoded.len() <= MEMO_OUT {
            let way = usize::from(self.older[set]);
            let s = &mut self.slots[set * 2 + way];
            // Both fit in u8: at most MEMO_MAX and MEMO_OUT.
            s.raw_len = raw.len() as u8;
            s.raw[..raw.len()].copy_from_slice(raw);
            s.out_len = decoded.len() as u8;
            s.out[..decoded.len()].copy_from_slice(decoded);
            self.older[set] = 1 - way as u8;
        }
        Ok(())
    }
}

/// A Huffman string decoded through the thread's [`Memo`], or directly
/// when it cannot be had (never on nginx's event loop).
fn decode_huffman(raw: &[u8], out: &mut Vec<u8>) -> Result<(), huffman::HuffmanError> {
    let remembered = MEMO.try_with(|m| m.try_borrow_mut().ok().map(|mut m| m.decode(raw, out)));
    match remembered {
        Ok(Some(r)) => r,
        _ => huffman::decode(raw, out),
    }
}

impl Decoder {
    /// A decoder whose dynamic table may grow to `cap` octets (the
    /// `SETTINGS_HEADER_TABLE_SIZE` we advertise; 4096 is the protocol's
    /// initial value, which the peer may use before it has our SETTINGS).
    pub fn new(cap: usize) -> Decoder {
        Decoder {
            table: Table {
                max: cap,
                ..Table::default()
            },
            cap,
            scratch: (Vec::new(), Vec::new()),
        }
    }

    /// Lowers (or raises) the cap, as when the peer acknowledges a new
    /// `SETTINGS_HEADER_TABLE_SIZE`. Entries past a lower cap are evicted
    /// now, exactly as the size update the peer must then send would.
    pub fn set_cap(&mut self, cap: usize) {
        self.cap = cap;
        if self.table.max > cap {
            self.table.max = cap;
            self.table.evict_to(cap);
        }
    }

    /// The RFC size of the dynamic table's entries.
    pub fn table_size(&self) -> usize {
        self.table.size
    }

    /// The number of entries in the dynamic table.
    pub fn table_len(&self) -> usize {
        self.table.entries.len()
    }

    /// The heap bytes the table holds (payload and bookkeeping), roughly.
    pub fn heap_bytes(&self) -> usize {
        self.table.ring.capacity()
            + self.table.entries.capacity() * std::mem::size_of::<(u64, u32, u32)>()
    }

    /// Decodes one complete header block (HEADERS and its CONTINUATIONs
    /// concatenated), calling `field(name, value)` for every field in
    /// order. Stops with [`HpackError::ListTooLarge`] once the fields'
    /// `name + value + 32` pass `max_list`. On any error the table may be
    /// left half-updated: the connection cannot go on (RFC 9113 section
    /// 4.3).
    pub fn decode(
        &mut self,
        block: &[u8],
        max_list: usize,
        field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let (mut name_buf, mut value_buf) = core::mem::take(&mut self.scratch);
        let r = self.decode_with(block, max_list, field, &mut name_buf, &mut value_buf);
        // What a hostile block grew them to is not kept.
        if name_buf.capacity() <= SCRATCH_KEPT && value_buf.capacity() <= SCRATCH_KEPT {
            self.scratch = (name_buf, value_buf);
        }
        r
    }

    fn decode_with(
        &mut self,
        block: &[u8],
        max_list: usize,
        mut field: impl FnMut(&[u8], &[u8]),
        name_buf: &mut Vec<u8>,
        value_buf: &mut Vec<u8>,
    ) -> Result<(), HpackError> {
        let mut r = Reader { buf: block, at: 0 };
        let mut list = 0usize;
        let mut fields_seen = false;
        let add = |list: &mut usize, n: &[u8], v: &[u8]| {
            *list = list.saturating_add(n.len() + v.len() + ENTRY_OVERHEAD);
            if *list > max_list {
                return Err(HpackError::ListTooLarge { max: max_list });
            }
            Ok(())
        };
        while let Some(&first) = r.peek() {
            if first & 0x80 != 0 {
                // Indexed field (6.1).
                let i = r.int(7)?;
                let (n, v) = self.lookup(i)?;
                add(&mut list, n, v)?;
                field(n, v);
                fields_seen = true;
            } else if first & 0xe0 == 0x20 {
                // Dynamic table size update (6.3).
                if fields_seen {
                    return Err(HpackError::SizeUpdateNotFirst);
                }
                let size = r.int(5)?;
                if size as usize > self.cap {
                    return Err(HpackError::SizeUpdateTooLarge {
                        size,
                        max: self.cap,
                    });
                }
                self.table.max = size as usize;
                self.table.evict_to(size as usize);
            } else {
                // Literals: with incremental indexing (6.2.1, 01xxxxxx,
                // 6-bit index), without indexing (0000xxxx) and never
                // indexed (0001xxxx), both with a 4-bit index.
                let indexing = first & 0x40 != 0;
                let i = r.int(if indexing { 6 } else { 4 })?;
                name_buf.clear();
                if i == 0 {
                    r.string(name_buf, max_list)?;
                } else {
                    name_buf.extend_from_slice(self.lookup(i)?.0);
                }
                value_buf.clear();
                r.string(value_buf, max_list)?;
                add(&mut list, name_buf, value_buf)?;
                field(name_buf, value_buf);
                if indexing {
                    self.table.insert(name_buf, value_buf);
                }
                fields_seen = true;
            }
        }
        Ok(())
    }

    /// The field at index `i` of the static then dynamic table.
    fn lookup(&self, i: u32) -> Result<(&[u8], &[u8]), HpackError> {
        let idx = i as usize;
        if idx == 0 {
            return Err(HpackError::BadIndex(i));
        }
        if let Some((n, v)) = STATIC_TABLE.get(idx - 1) {
            return Ok((n.as_bytes(), v.as_bytes()));
        }
        self.table
            .get(idx - 1 - STATIC_TABLE.len())
            .ok_or(HpackError::BadIndex(i))
    }
}

/// A cursor over a block.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<&u8> {
        self.buf.get(self.at)
    }

    fn byte(&mut self) -> Result<u8, HpackError> {
        let b = *self.buf.get(self.at).ok_or(HpackError::Truncated)?;
        self.at += 1;
        Ok(b)
    }

    /// An integer with an N-bit prefix (5.1), at most `u32::MAX`.
    fn int(&mut self, prefix: u32) -> Result<u32, HpackError> {
        let mask = (1u32 << prefix) - 1;
        let mut value = u32::from(self.byte()?) & mask;
        if value < mask {
            return Ok(value);
        }
        let mut shift = 0u32;
        loop {
            let b = self.byte()?;
            if shift > 28 {
                return Err(HpackError::IntegerOverflow);
            }
            let add = u64::from(b & 0x7f) << shift;
            let v = u64::from(value) + add;
            value = u32::try_from(v).map_err(|_| HpackError::IntegerOverflow)?;
            if b & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
        }
    }

    /// A string literal (5.2), decoded into `out`. A string longer than
    /// the rest of the block is [`HpackError::Truncated`]; one whose
    /// decoded length alone passes `max` is [`HpackError::ListTooLarge`].
    fn string(&mut self, out: &mut Vec<u8>, max: usize) -> Result<(), HpackError> {
        let huff = self.peek().is_some_and(|b| b & 0x80 != 0);
        let len = self.int(7)? as usize;
        let rest = self.buf.len() - self.at;
        if len > rest {
            return Err(HpackError::Truncated);
        }
        let raw = &self.buf[self.at..self.at + len];
        self.at += len;
        if huff {
            decode_huffman(raw, out).map_err(|_| HpackError::BadHuffman)?;
        } else {
            out.extend_from_slice(raw);
        }
        if out.len() > max {
            return Err(HpackError::ListTooLarge { max });
        }
        Ok(())
    }
}

/// Appends an HPACK integer with an N-bit prefix; `flags` fills the bits
/// above the prefix of the first octet.
pub fn encode_int(out: &mut Vec<u8>, flags: u8, prefix: u32, mut value: usize) {
    let mask = (1usize << prefix) - 1;
    if value < mask {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | mask as u8);
    value -= mask;
    while value >= 0x80 {
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends a plain (not Huffman) string literal.
pub fn encode_str(out: &mut Vec<u8>, s: &[u8]) {
    encode_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// Encodes a header list as our requests send it: every field a "literal
/// without indexing" with a literal name and no Huffman coding (6.2.2),
/// which leaves the peer's decoder table untouched and needs no encoder
/// state.
pub fn encode_block(fields: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let size: usize = fields.iter().map(|(n, v)| n.len() + v.len() + 12).sum();
    let mut out = Vec::with_capacity(size);
    for (n, v) in fields {
        encode_field(&mut out, n, v);
    }
    out
}

/// Appends one field to a block as [`encode_block`] encodes it.
pub fn encode_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    encode_str(out, name);
    encode_str(out, value);
}
