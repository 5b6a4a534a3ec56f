//! The Huffman code of HPACK (RFC 7541 section 5.2 and Appendix B).
//!
//! [`CODES`] is the table of Appendix B: for each symbol (the 256 octets,
//! then EOS at index 256) its code, right-aligned, and its length in bits.
//! The code is canonical (codes of one length are consecutive and
//! ascending with the symbol, each length starting where the previous one
//! ended, shifted left), which a unit test checks: the tables of the
//! decoder are derived from it at compile time (for each length, the
//! first code and the symbols of that length in order; the one or two
//! short codes at the start of every 12-bit string). It allocates
//! nothing but its output, and its cost is linear in its input whatever
//! the input is.

/// Appendix B: `(code, length in bits)` of each symbol; index 256 is EOS.
pub const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13),
    (0x7fffd8, 23),
    (0xfffffe2, 28),
    (0xfffffe3, 28),
    (0xfffffe4, 28),
    (0xfffffe5, 28),
    (0xfffffe6, 28),
    (0xfffffe7, 28),
    (0xfffffe8, 28),
    (0xffffea, 24),
    (0x3ffffffc, 30),
    (0xfffffe9, 28),
    (0xfffffea, 28),
    (0x3ffffffd, 30),
    (0xfffffeb, 28),
    (0xfffffec, 28),
    (0xfffffed, 28),
    (0xfffffee, 28),
    (0xfffffef, 28),
    (0xffffff0, 28),
    (0xffffff1, 28),
    (0xffffff2, 28),
    (0x3ffffffe, 30),
    (0xffffff3, 28),
    (0xffffff4, 28),
    (0xffffff5, 28),
    (0xffffff6, 28),
    (0xffffff7, 28),
    (0xffffff8, 28),
    (0xffffff9, 28),
    (0xffffffa, 28),
    (0xffffffb, 28),
    (0x14, 6),
    (0x3f8, 10),
    (0x3f9, 10),
    (0xffa, 12),
    (0x1ff9, 13),
    (0x15, 6),
    (0xf8, 8),
    (0x7fa, 11),
    (0x3fa, 10),
    (0x3fb, 10),
    (0xf9, 8),
    (0x7fb, 11),
    (0xfa, 8),
    (0x16, 6),
    (0x17, 6),
    (0x18, 6),
    (0x0, 5),
    (0x1, 5),
    (0x2, 5),
    (0x19, 6),
    (0x1a, 6),
    (0x1b, 6),
    (0x1c, 6),
    (0x1d, 6),
    (0x1e, 6),
    (0x1f, 6),
    (0x5c, 7),
    (0xfb, 8),
    (0x7ffc, 15),
    (0x20, 6),
    (0xffb, 12),
    (0x3fc, 10),
    (0x1ffa, 13),
    (0x21, 6),
    (0x5d, 7),
    (0x5e, 7),
    (0x5f, 7),
    (0x60, 7),
    (0x61, 7),
    (0x62, 7),
    (0x63, 7),
    (0x64, 7),
    (0x65, 7),
    (0x66, 7),
    (0x67, 7),
    (0x68, 7),
    (0x69, 7),
    (0x6a, 7),
    (0x6b, 7),
    (0x6c, 7),
    (0x6d, 7),
    (0x6e, 7),
    (0x6f, 7),
    (0x70, 7),
    (0x71, 7),
    (0x72, 7),
    (0xfc, 8),
    (0x73, 7),
    (0xfd, 8),
    (0x1ffb, 13),
    (0x7fff0, 19),
    (0x1ffc, 13),
    (0x3ffc, 14),
    (0x22, 6),
    (0x7ffd, 15),
    (0x3, 5),
    (0x23, 6),
    (0x4, 5),
    (0x24, 6),
    (0x5, 5),
    (0x25, 6),
    (0x26, 6),
    (0x27, 6),
    (0x6, 5),
    (0x74, 7),
    (0x75, 7),
    (0x28, 6),
    (0x29, 6),
    (0x2a, 6),
    (0x7, 5),
    (0x2b, 6),
    (0x76, 7),
    (0x2c, 6),
    (0x8, 5),
    (0x9, 5),
    (0x2d, 6),
    (0x77, 7),
    (0x78, 7),
    (0x79, 7),
    (0x7a, 7),
    (0x7b, 7),
    (0x7ffe, 15),
    (0x7fc, 11),
    (0x3ffd, 14),
    (0x1ffd, 13),
    (0xffffffc, 28),
    (0xfffe6, 20),
    (0x3fffd2, 22),
    (0xfffe7, 20),
    (0xfffe8, 20),
    (0x3fffd3, 22),
    (0x3fffd4, 22),
    (0x3fffd5, 22),
    (0x7fffd9, 23),
    (0x3fffd6, 22),
    (0x7fffda, 23),
    (0x7fffdb, 23),
    (0x7fffdc, 23),
    (0x7fffdd, 23),
    (0x7fffde, 23),
    (0xffffeb, 24),
    (0x7fffdf, 23),
    (0xffffec, 24),
    (0xffffed, 24),
    (0x3fffd7, 22),
    (0x7fffe0, 23),
    (0xffffee, 24),
    (0x7fffe1, 23),
    (0x7fffe2, 23),
    (0x7fffe3, 23),
    (0x7fffe4, 23),
    (0x1fffdc, 21),
    (0x3fffd8, 22),
    (0x7fffe5, 23),
    (0x3fffd9, 22),
    (0x7fffe6, 23),
    (0x7fffe7, 23),
    (0xffffef, 24),
    (0x3fffda, 22),
    (0x1fffdd, 21),
    (0xfffe9, 20),
    (0x3fffdb, 22),
    (0x3fffdc, 22),
    (0x7fffe8, 23),
    (0x7fffe9, 23),
    (0x1fffde, 21),
    (0x7fffea, 23),
    (0x3fffdd, 22),
    (0x3fffde, 22),
    (0xfffff0, 24),
    (0x1fffdf, 21),
    (0x3fffdf, 22),
    (0x7fffeb, 23),
    (0x7fffec, 23),
    (0x1fffe0, 21),
    (0x1fffe1, 21),
    (0x3fffe0, 22),
    (0x1fffe2, 21),
    (0x7fffed, 23),
    (0x3fffe1, 22),
    (0x7fffee, 23),
    (0x7fffef, 23),
    (0xfffea, 20),
    (0x3fffe2, 22),
    (0x3fffe3, 22),
    (0x3fffe4, 22),
    (0x7ffff0, 23),
    (0x3fffe5, 22),
    (0x3fffe6, 22),
    (0x7ffff1, 23),
    (0x3ffffe0, 26),
    (0x3ffffe1, 26),
    (0xfffeb, 20),
    (0x7fff1, 19),
    (0x3fffe7, 22),
    (0x7ffff2, 23),
    (0x3fffe8, 22),
    (0x1ffffec, 25),
    (0x3ffffe2, 26),
    (0x3ffffe3, 26),
    (0x3ffffe4, 26),
    (0x7ffffde, 27),
    (0x7ffffdf, 27),
    (0x3ffffe5, 26),
    (0xfffff1, 24),
    (0x1ffffed, 25),
    (0x7fff2, 19),
    (0x1fffe3, 21),
    (0x3ffffe6, 26),
    (0x7ffffe0, 27),
    (0x7ffffe1, 27),
    (0x3ffffe7, 26),
    (0x7ffffe2, 27),
    (0xfffff2, 24),
    (0x1fffe4, 21),
    (0x1fffe5, 21),
    (0x3ffffe8, 26),
    (0x3ffffe9, 26),
    (0xffffffd, 28),
    (0x7ffffe3, 27),
    (0x7ffffe4, 27),
    (0x7ffffe5, 27),
    (0xfffec, 20),
    (0xfffff3, 24),
    (0xfffed, 20),
    (0x1fffe6, 21),
    (0x3fffe9, 22),
    (0x1fffe7, 21),
    (0x1fffe8, 21),
    (0x7ffff3, 23),
    (0x3fffea, 22),
    (0x3fffeb, 22),
    (0x1ffffee, 25),
    (0x1ffffef, 25),
    (0xfffff4, 24),
    (0xfffff5, 24),
    (0x3ffffea, 26),
    (0x7ffff4, 23),
    (0x3ffffeb, 26),
    (0x7ffffe6, 27),
    (0x3ffffec, 26),
    (0x3ffffed, 26),
    (0x7ffffe7, 27),
    (0x7ffffe8, 27),
    (0x7ffffe9, 27),
    (0x7ffffea, 27),
    (0x7ffffeb, 27),
    (0xffffffe, 28),
    (0x7ffffec, 27),
    (0x7ffffed, 27),
    (0x7ffffee, 27),
    (0x7ffffef, 27),
    (0x7fffff0, 27),
    (0x3ffffee, 26),
    (0x3fffffff, 30),
];

/// The longest code, in bits (EOS and a few rare octets).
const MAX_LEN: usize = 30;

/// For each length, the first (smallest) code of that length, how many
/// codes have it, and where its symbols start in `sorted`.
struct Canonical {
    first: [u32; MAX_LEN + 1],
    count: [u16; MAX_LEN + 1],
    offset: [u16; MAX_LEN + 1],
    sorted: [u16; 257],
}

const fn canonical() -> Canonical {
    let mut c = Canonical {
        first: [0; MAX_LEN + 1],
        count: [0; MAX_LEN + 1],
        offset: [0; MAX_LEN + 1],
        sorted: [0; 257],
    };
    let mut at = 0;
    let mut len = 1;
    while len <= MAX_LEN {
        c.offset[len] = at as u16;
        let mut sym = 0;
        while sym < 257 {
            if CODES[sym].1 as usize == len {
                if c.count[len] == 0 {
                    c.first[len] = CODES[sym].0;
                }
                c.count[len] += 1;
                c.sorted[at] = sym as u16;
                at += 1;
            }
            sym += 1;
        }
        len += 1;
    }
    c
}

static CANONICAL: Canonical = canonical();

/// Why a Huffman string is refused (RFC 7541 section 5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HuffmanError {
    /// The string holds the EOS symbol.
    Eos,
    /// The padding is longer than 7 bits or is not the most significant
    /// bits of EOS (all ones).
    Padding,
}

/// Bits of [`PAIRS`]' index.
const PAIR_BITS: u32 = 12;

/// For each 12-bit string: the octets of the codes it starts with, one or
/// two (`n`, 0 when the first code is longer), the bits they take, and
/// the bits of the first alone.
#[derive(Clone, Copy)]
struct Pair {
    first: u8,
    second: u8,
    n: u8,
    bits: u8,
    first_bits: u8,
}

static PAIRS: [Pair; 1 << PAIR_BITS] = pairs();

/// The code of at most `max` bits that starts the 12-bit `bits`
/// (left-aligned), by the canonical table.
const fn code_at(bits: u32, max: u32) -> Option<(u8, u8)> {
    let c = &CANONICAL;
    let mut len = 1;
    while len as u32 <= max {
        let code = bits >> (PAIR_BITS - len as u32);
        let n = c.count[len] as u32;
        if n != 0 && code >= c.first[len] && code - c.first[len] < n {
            let sym = c.sorted[c.offset[len] as usize + (code - c.first[len]) as usize];
            return Some((sym as u8, len as u8));
        }
        len += 1;
    }
    None
}

const fn pairs() -> [Pair; 1 << PAIR_BITS] {
    let none = Pair {
        first: 0,
        second: 0,
        n: 0,
        bits: 0,
        first_bits: 0,
    };
    let mut t = [none; 1 << PAIR_BITS];
    let mut i = 0;
    while i < 1 << PAIR_BITS {
        if let Some((s1, l1)) = code_at(i as u32, PAIR_BITS) {
            let rest = PAIR_BITS - l1 as u32;
            let tail = ((i as u32) << l1) & ((1 << PAIR_BITS) - 1);
            t[i] = match code_at(tail, rest) {
                Some((s2, l2)) => Pair {
                    first: s1,
                    second: s2,
                    n: 2,
                    bits: l1 + l2,
                    first_bits: l1,
                },
                None => Pair {
                    first: s1,
                    second: 0,
                    n: 1,
                    bits: l1,
                    first_bits: l1,
                },
            };
        }
        i += 1;
    }
    t
}

/// The code longer than [`PAIR_BITS`] that starts the 30-bit `window`
/// (left-aligned), where [`PAIRS`] has none: its symbol and length.
/// Every 30-bit string starts with a code.
fn lookup(window: u32) -> Option<(u16, u32)> {
    let c = &CANONICAL;
    for len in PAIR_BITS as usize + 1..=MAX_LEN {
        let code = window >> (MAX_LEN - len);
        let n = u32::from(c.count[len]);
        if n != 0 && code >= c.first[len] && code - c.first[len] < n {
            let sym = c.sorted[usize::from(c.offset[len]) + (code - c.first[len]) as usize];
            return Some((sym, len as u32));
        }
    }
    None
}

/// What is left when no complete code is: at most 7 bits, all ones (a
/// prefix of EOS). `bits` holds the `n` bits left-aligned.
fn padding(bits: u64, n: u32) -> Result<(), HuffmanError> {
    if n == 0 {
        return Ok(());
    }
    if n > 7 || bits >> (64 - n) != (1u64 << n) - 1 {
        return Err(HuffmanError::Padding);
    }
    Ok(())
}

/// Decodes the Huffman string `src`, appending the octets to `out`.
///
/// `out` grows by at most `src.len() * 8 / 5` octets (the shortest code
/// has 5 bits). On error `out` may hold part of the string.
///
/// The bits sit left-aligned in a 64-bit word, refilled 8 octets at a
/// time where the input allows; one lookup of their first 12 bits gives
/// the one or two codes there (every pair of the short codes headers are
/// made of), and the rare longer code goes by the canonical table. At
/// the end of the string the word is padded with ones: a code that ends
/// in the padding is not taken, and what no code covers is the padding.
pub fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    let start = out.len();
    // Room for every octet the string can hold, and one more: a pair's
    // second octet is written even when only the first is kept.
    out.resize(start + src.len() * 8 / 5 + 2, 0);
    let mut o = start;
    let mut bits: u64 = 0;
    let mut n: u32 = 0;
    let mut at = 0;
    let result = loop {
        if n <= 56 {
            if let Some(word) = src.get(at..at + 8) {
                let mut w = [0u8; 8];
                w.copy_from_slice(word);
                let w = u64::from_be_bytes(w);
                // The whole octets that fit: 1 to 8.
                let k = (64 - n) / 8;
                bits |= (w >> (64 - 8 * k)) << (64 - n - 8 * k);
                n += 8 * k;
                at += k as usize;
            } else {
                while n <= 56 {
                    let Some(&b) = src.get(at) else { break };
                    bits |= u64::from(b) << (56 - n);
                    n += 8;
                    at += 1;
                }
            }
        }
        if n == 0 {
            break Ok(());
        }
        // With fewer than 12 bits left the input is over (a refill leaves
        // more): the bits past its end are ones.
        let word = if n < PAIR_BITS {
            bits | (u64::MAX >> n)
        } else {
            bits
        };
        let p = PAIRS[(word >> (64 - PAIR_BITS)) as usize];
        if p.n != 0 {
            if u32::from(p.bits) <= n {
                out[o] = p.first;
                out[o + 1] = p.second;
                o += usize::from(p.n);
                bits <<= p.bits;
                n -= u32::from(p.bits);
                continue;
            }
            if u32::from(p.first_bits) <= n {
                out[o] = p.first;
                o += 1;
                bits <<= p.first_bits;
                n -= u32::from(p.first_bits);
                continue;
            }
            break padding(bits, n);
        }
        // The first code is longer than 12 bits: none fits in fewer.
        if n <= PAIR_BITS {
            break padding(bits, n);
        }
        let word = if n < MAX_LEN as u32 {
            bits | (u64::MAX >> n)
        } else {
            bits
        };
        match lookup((word >> (64 - MAX_LEN)) as u32) {
            Some((256, len)) if len <= n => break Err(HuffmanError::Eos),
            Some((sym, len)) if len <= n => {
                out[o] = sym as u8;
                o += 1;
                bits <<= len;
                n -= len;
            }
            _ => break padding(bits, n),
        }
    };
    out.truncate(o);
    result
}

/// The bit-by-bit decoder [`decode`] replaced: the oracle of its tests.
#[cfg(test)]
pub(crate) fn decode_bitwise(src: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    let c = &CANONICAL;
    let mut code: u32 = 0;
    let mut len: usize = 0;
    for &byte in src {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            let n = u32::from(c.count[len]);
            if n != 0 && code >= c.first[len] && code - c.first[len] < n {
                let sym = c.sorted[usize::from(c.offset[len]) + (code - c.first[len]) as usize];
                if sym == 256 {
                    return Err(HuffmanError::Eos);
                }
                out.push(sym as u8);
                code = 0;
                len = 0;
            } else if len == MAX_LEN {
                return Err(HuffmanError::Eos);
            }
        }
    }
    if len > 7 || code != (1u32 << len) - 1 {
        return Err(HuffmanError::Padding);
    }
    Ok(())
}

/// The length of `src` Huffman-encoded, in octets.
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src
        .iter()
        .map(|&b| usize::from(CODES[usize::from(b)].1))
        .sum();
    bits.div_ceil(8)
}

/// Appends `src` Huffman-encoded to `out`, padded with ones. The client
/// sends its own header values as plain literals; this serves tests and
/// fuzzing, which need Huffman strings to feed the decoder.
pub fn encode(src: &[u8], out: &mut Vec<u8>) {
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    for &b in src {
        let (code, len) = CODES[usize::from(b)];
        acc = (acc << len) | u64::from(code);
        bits += u32::from(len);
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
        acc &= (1u64 << bits) - 1;
    }
    if bits > 0 {
        let pad = 8 - bits;
        out.push(((acc << pad) | ((1u64 << pad) - 1)) as u8);
    }
}
