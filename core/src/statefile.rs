//! The `check_state_file` format (docs/directives.md, check_state_file): each checked
//! peer's health and admin state, by identity, so that a restart or a
//! binary upgrade starts peers as they were.
//!
//! ```text
//! # nginx-healthcheck state v1
//! # group identity up admin last_change_ms down_since_ms upstream name server
//! peer http 9f3c0d1e2a4b5c6d 1 0 1700000000123 0 web 10.0.0.1:80 10.0.0.1:80
//! peer http 0123456789abcdef 0 1 1700000000456 1700000000456 web 10.0.0.2:80 b.test:80
//! end 2
//! ```
//!
//! One line per peer, fields separated by one space: the context, the
//! identity (`identity::identity_hash`, 16 lowercase hex digits), `up` (0
//! or 1), the `zone::admin` bits (decimal), the last change and the start
//! of the current down time (unix ms, 0 = none), then the upstream, the
//! peer's address and its `server` line, for people reading the file
//! (bytes outside `!`..`~` and `%` itself are written `%XX`; the reader
//! only checks they are tokens). The last line is `end N`, N the number of
//! peer lines: a file cut short has no such line and is refused whole.
//!
//! The reader trusts nothing: any line it does not understand, a wrong
//! count, a line over [`MAX_LINE`] bytes, another context's lines or
//! another format's first line make it refuse the whole file (an error
//! the caller logs); it keeps only entries whose identity the running
//! configuration has, at most as many per identity as the configuration
//! has peers with it, so its memory is bounded by the configuration, not
//! by the file. The caller bounds the bytes it reads ([`max_file_bytes`]).

use std::collections::{HashMap, VecDeque};

use crate::status::Group;

/// The first line.
pub const MAGIC: &str = "# nginx-healthcheck state v1";

/// Longest line the reader accepts (three names of up to 1 KiB, escaped).
pub const MAX_LINE: usize = 12 * 1024;

/// Most bytes worth reading for a configuration of `peers` checked peers:
/// more cannot be a file this module wrote for it.
pub const fn max_file_bytes(peers: usize) -> usize {
    let n = 4096usize.saturating_add(peers.saturating_mul(MAX_LINE));
    if n > 256 << 20 {
        256 << 20
    } else {
        n
    }
}

/// One peer's saved state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub identity: u64,
    pub up: bool,
    /// `zone::admin` bits.
    pub admin: u32,
    /// Unix ms of the last up/down change, 0 = never.
    pub last_change: u64,
    /// Unix ms since the peer is down, 0 = up.
    pub down_since: u64,
}

/// A peer as written: its state and its names.
#[derive(Clone, Copy, Debug)]
pub struct Named<'a> {
    pub entry: Entry,
    pub upstream: &'a [u8],
    pub name: &'a [u8],
    pub server: &'a [u8],
}

/// Append the whole file for `group`'s peers to `out`.
pub fn render<'a>(group: Group, peers: impl IntoIterator<Item = Named<'a>>, out: &mut Vec<u8>) {
    out.extend_from_slice(MAGIC.as_bytes());
    out.extend_from_slice(
        b"\n# group identity up admin last_change_ms down_since_ms upstream name server\n",
    );
    let mut n = 0u64;
    for p in peers {
        let e = p.entry;
        // Saved as it is shown: down_since only while down.
        let down_since = if e.up { 0 } else { e.down_since };
        let line = format!(
            "peer {} {:016x} {} {} {} {} ",
            group.as_str(),
            e.identity,
            u8::from(e.up),
            e.admin,
            e.last_change,
            down_since
        );
        out.extend_from_slice(line.as_bytes());
        token(out, p.upstream);
        out.push(b' ');
        token(out, p.name);
        out.push(b' ');
        token(out, p.server);
        out.push(b'\n');
        n += 1;
    }
    out.extend_from_slice(format!("end {n}\n").as_bytes());
}

/// `bytes` as one token: `!`..`~` but `%` kept, everything else `%XX`; an
/// empty name (nginx has none, but a token must not be empty) is `-`.
fn token(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    if bytes.is_empty() {
        out.push(b'-');
        return;
    }
    for &b in bytes {
        if (b'!'..=b'~').contains(&b) && b != b'%' {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// Why a file was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// Empty, or its first line is not [`MAGIC`].
    Foreign,
    /// No `end` line: cut short (or still being written by something else).
    Truncated,
    /// Line `line` (1-based) is not what this module writes.
    Invalid { line: usize, why: &'static str },
    /// Lines of the other context (the file is another context's).
    OtherGroup { line: usize },
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Foreign => write!(f, "not a state file of this module"),
            Error::Truncated => write!(f, "truncated (no \"end\" line)"),
            Error::Invalid { line, why } => write!(f, "line {line}: {why}"),
            Error::OtherGroup { line } => {
                write!(f, "line {line}: a peer of the other context (http/stream)")
            }
        }
    }
}

/// What a valid file holds for the running configuration.
#[derive(Debug, Default)]
pub struct Restored {
    by_identity: HashMap<u64, VecDeque<Entry>>,
    /// Peer lines in the file.
    pub lines: usize,
    /// Entries kept (their identity is in the configuration).
    pub kept: usize,
}

impl Restored {
    /// The next saved entry for `identity` (a repeated identity, the same
    /// server listed twice, gets its entries in file order).
    pub fn take(&mut self, identity: u64) -> Option<Entry> {
        self.by_identity.get_mut(&identity)?.pop_front()
    }
}

/// Parse a file for `group`; keep the entries of identities in `wanted`
/// (identity -> how many peers of the configuration have it).
pub fn parse(bytes: &[u8], group: Group, wanted: &HashMap<u64, usize>) -> Result<Restored, Error> {
    let mut lines = bytes.split_inclusive(|&b| b == b'\n').enumerate();
    match lines.next() {
        Some((_, first)) if first == format!("{MAGIC}\n").as_bytes() => {}
        _ => return Err(Error::Foreign),
    }
    let mut out = Restored::default();
    let mut ended = false;
    for (i, raw) in lines {
        let line = i + 1;
        let invalid = |why| Error::Invalid { line, why };
        if ended {
            return Err(invalid("data after the \"end\" line"));
        }
        if raw.len() > MAX_LINE {
            return Err(invalid("line too long"));
        }
        let Some(text) = raw.strip_suffix(b"\n") else {
            return Err(Error::Truncated);
        };
        if text.first() == Some(&b'#') {
            continue;
        }
        let mut fields = text.split(|&b| b == b' ');
        match fields.next() {
            Some(b"peer") => {}
            Some(b"end") => {
                let n = fields.next().and_then(number).ok_or(invalid("bad count"))?;
                if fields.next().is_some() {
                    return Err(invalid("bad count"));
                }
                if n != out.lines as u64 {
                    return Err(invalid("the count does not match the peer lines"));
                }
                ended = true;
                continue;
            }
            _ => return Err(invalid("unknown line")),
        }
        let g = fields.next().ok_or(invalid("no context"))?;
        if g != group.as_str().as_bytes() {
            if g == b"http" || g == b"stream" {
                return Err(Error::OtherGroup { line });
            }
            return Err(invalid("unknown context"));
        }
        let identity = fields
            .next()
            .and_then(hex16)
            .ok_or(invalid("bad identity"))?;
        let up = match fields.next() {
            Some(b"0") => false,
            Some(b"1") => true,
            _ => return Err(invalid("bad up")),
        };
        let admin = fields
            .next()
            .and_then(number)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or(invalid("bad admin"))?;
        let last_change = fields.next().and_then(number).ok_or(invalid("bad time"))?;
        let down_since = fields.next().and_then(number).ok_or(invalid("bad time"))?;
        for _ in 0..3 {
            let name = fields.next().ok_or(invalid("missing name"))?;
            if name.is_empty() || !name.iter().all(|b| (b'!'..=b'~').contains(b)) {
                return Err(invalid("bad name"));
            }
        }
        if fields.next().is_some() {
            return Err(invalid("extra fields"));
        }
        if up && down_since != 0 {
            return Err(invalid("down_since on an up peer"));
        }
        out.lines += 1;
        let room = wanted.get(&identity).copied().unwrap_or(0);
        let kept = out.by_identity.entry(identity).or_default();
        if kept.len() < room {
            kept.push_back(Entry {
                identity,
                up,
                admin,
                last_change,
                down_since,
            });
            out.kept += 1;
        } else if kept.is_empty() {
            out.by_identity.remove(&identity);
        }
    }
    if ended {
        Ok(out)
    } else {
        Err(Error::Truncated)
    }
}

/// A decimal number of at most 20 digits that fits u64.
fn number(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// Exactly 16 lowercase hex digits.
fn hex16(s: &[u8]) -> Option<u64> {
    if s.len() != 16 {
        return None;
    }
    s.iter().try_fold(0u64, |n, &d| {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            _ => return None,
        };
        Some(n << 4 | u64::from(v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn e(identity: u64, up: bool, admin: u32) -> Entry {
        Entry {
            identity,
            up,
            admin,
            last_change: if up {
                0
            } else {
                1_700_000_000_000 + identity % 1000
            },
            down_since: if up {
                0
            } else {
                1_700_000_000_000 + identity % 1000
            },
        }
    }

    fn file(group: Group, entries: &[Entry]) -> Vec<u8> {
        let mut out = Vec::new();
        render(
            group,
            entries.iter().map(|&entry| Named {
                entry,
                upstream: b"web",
                name: b"10.0.0.1:80",
                server: b"b.test:80",
            }),
            &mut out,
        );
        out
    }

    fn all(entries: &[Entry]) -> HashMap<u64, usize> {
        let mut m = HashMap::new();
        for x in entries {
            *m.entry(x.identity).or_default() += 1;
        }
        m
    }

    #[test]
    fn round_trip() {
        let entries = [e(1, true, 0), e(u64::MAX, false, 1), e(1, false, 0)];
        let bytes = file(Group::Http, &entries);
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with("# nginx-healthcheck state v1\n"), "{text}");
        assert!(
            text.contains("\npeer http ffffffffffffffff 0 1 1700000000615 "),
            "{text}"
        );
        assert!(text.ends_with("\nend 3\n"), "{text}");
        let mut r = parse(&bytes, Group::Http, &all(&entries)).unwrap();
        assert_eq!((r.lines, r.kept), (3, 3));
        // A repeated identity gets its entries in order.
        assert_eq!(r.take(1), Some(entries[0]));
        assert_eq!(r.take(1), Some(entries[2]));
        assert_eq!(r.take(1), None);
        assert_eq!(r.take(u64::MAX), Some(entries[1]));
    }

    #[test]
    fn names_are_escaped_tokens() {
        let mut out = Vec::new();
        render(
            Group::Stream,
            [Named {
                entry: e(7, true, 0),
                upstream: b"a b%\n\xff",
                name: b"",
                server: b"x",
            }],
            &mut out,
        );
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(text.contains(" a%20b%25%0A%FF - x\n"), "{text}");
        assert_eq!(
            parse(&out, Group::Stream, &all(&[e(7, true, 0)]))
                .unwrap()
                .kept,
            1
        );
    }

    #[test]
    fn only_wanted_identities_are_kept() {
        let entries = [e(1, true, 0), e(2, true, 0), e(2, true, 1)];
        let bytes = file(Group::Http, &entries);
        let wanted = HashMap::from([(2, 1)]);
        let mut r = parse(&bytes, Group::Http, &wanted).unwrap();
        assert_eq!((r.lines, r.kept), (3, 1));
        assert_eq!(r.take(1), None);
        assert_eq!(r.take(2), Some(entries[1]));
        assert_eq!(r.take(2), None);
    }

    #[test]
    fn refused_files() {
        let ok = file(Group::Http, &[e(1, true, 0), e(2, false, 1)]);
        let wanted = all(&[e(1, true, 0)]);
        let p = |b: &[u8]| parse(b, Group::Http, &wanted).map(|r| r.kept);
        assert_eq!(p(b""), Err(Error::Foreign));
        assert_eq!(p(b"hello\n"), Err(Error::Foreign));
        assert_eq!(
            p(b"# nginx-healthcheck state v2\nend 0\n"),
            Err(Error::Foreign)
        );
        assert_eq!(p(b"\x7fELF\x02\x01\x01\0\0\0"), Err(Error::Foreign));
        // Cut anywhere short of the end: truncated or invalid, never read.
        for cut in MAGIC.len() + 1..ok.len() {
            let r = p(&ok[..cut]);
            assert!(
                matches!(r, Err(Error::Truncated) | Err(Error::Invalid { .. })),
                "cut at {cut}: {r:?}"
            );
        }
        assert_eq!(p(&ok), Ok(1));
        let text = String::from_utf8(ok.clone()).unwrap();
        let bad = |from: &str, to: &str| {
            assert!(text.contains(from), "{from}");
            p(text.replacen(from, to, 1).as_bytes())
        };
        let invalid = |r: Result<usize, Error>| matches!(r, Err(Error::Invalid { .. }));
        assert!(invalid(bad("end 2", "end 3")));
        assert!(invalid(bad("end 2", "end two")));
        assert!(invalid(bad("end 2\n", "end 2\npeer")));
        assert!(invalid(bad("end 2\n", "end 2\n\n")));
        assert!(invalid(bad(
            "peer http 0000000000000001",
            "peer http 000000000000001"
        )));
        assert!(invalid(bad(
            "peer http 0000000000000001",
            "peer http 000000000000000G"
        )));
        assert!(invalid(bad(
            "peer http 0000000000000001",
            "peer http 00000000000000A1"
        )));
        assert!(invalid(bad(
            "peer http 0000000000000001 1",
            "peer http 0000000000000001 2"
        )));
        assert!(invalid(bad("peer http", "peer tcp")));
        assert!(invalid(bad("peer http", "node http")));
        assert!(invalid(bad(" b.test:80\n", " b.test:80 x\n")));
        assert!(invalid(bad(" b.test:80\n", "\n")));
        assert!(invalid(bad(" b.test:80\n", " b.test:80\r\n")));
        assert!(invalid(bad(" 1 0 0 0 web", " 1 0 0 5 web")));
        assert!(invalid(bad(" 1 0 0 0 web", " 1 4294967296 0 0 web")));
        assert!(invalid(bad(
            " 1 0 0 0 web",
            " 1 0 99999999999999999999 0 web"
        )));
        assert_eq!(
            parse(&ok, Group::Stream, &wanted).map(|r| r.kept),
            Err(Error::OtherGroup { line: 3 })
        );
        let long = format!("{MAGIC}\n#{}\nend 0\n", "x".repeat(MAX_LINE));
        assert!(invalid(p(long.as_bytes())));
        assert_eq!(p(format!("{MAGIC}\nend 0\n").as_bytes()), Ok(0));
    }

    #[test]
    fn max_file_bytes_is_bounded() {
        assert_eq!(max_file_bytes(0), 4096);
        assert_eq!(max_file_bytes(1), 4096 + MAX_LINE);
        assert_eq!(max_file_bytes(usize::MAX), 256 << 20);
    }

    fn entry() -> impl Strategy<Value = Entry> {
        (
            any::<u64>(),
            any::<bool>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
        )
            .prop_map(|(identity, up, admin, last_change, down_since)| Entry {
                identity: identity % 8,
                up,
                admin,
                last_change,
                down_since: if up { 0 } else { down_since },
            })
    }

    proptest! {
        /// Whatever is written reads back, entry for entry, in order per
        /// identity, whatever the names.
        #[test]
        fn written_files_read_back(entries in prop::collection::vec(entry(), 0..40),
                                   names in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..20), 3),
                                   stream in any::<bool>()) {
            let group = if stream { Group::Stream } else { Group::Http };
            let mut out = Vec::new();
            render(group, entries.iter().map(|&entry| Named {
                entry, upstream: &names[0], name: &names[1], server: &names[2],
            }), &mut out);
            let mut r = parse(&out, group, &all(&entries)).unwrap();
            prop_assert_eq!((r.lines, r.kept), (entries.len(), entries.len()));
            for x in &entries {
                prop_assert_eq!(r.take(x.identity), Some(*x));
            }
        }
    }
}
