//! Peer identity across configuration loads (docs/design.md, Reloads):
//! (http|stream, upstream name, peer address, check type, effective check
//! port). Two peers with the same identity in the old and new configuration
//! share status, counters and statistics.

/// A stable 64-bit FNV-1a hash of a peer's identity. Fields are separated
/// by their lengths, so no two different tuples hash from the same bytes.
pub fn identity_hash(
    group: &str,
    upstream: &[u8],
    peer: &[u8],
    check_type: &str,
    port: u16,
) -> u64 {
    let mut h = Fnv::new();
    for field in [group.as_bytes(), upstream, peer, check_type.as_bytes()] {
        h.write(&(field.len() as u64).to_le_bytes());
        h.write(field);
    }
    h.write(&port.to_le_bytes());
    h.0
}

/// The identity of an address nginx resolved for a `server NAME resolve`
/// line: as [`identity_hash`], with the server line's name as written
/// (two lines that resolve to the same address are two peers).
pub fn resolved_identity(
    group: &str,
    upstream: &[u8],
    server: &[u8],
    peer: &[u8],
    check_type: &str,
    port: u16,
) -> u64 {
    let mut h = Fnv::new();
    for field in [
        b"resolved".as_slice(),
        group.as_bytes(),
        upstream,
        server,
        peer,
        check_type.as_bytes(),
    ] {
        h.write(&(field.len() as u64).to_le_bytes());
        h.write(field);
    }
    h.write(&port.to_le_bytes());
    h.0.max(1)
}

/// The tag of an upstream in the zone's room for resolved addresses
/// (never 0, which marks a free slot).
pub fn upstream_tag(group: &str, upstream: &[u8]) -> u64 {
    let mut h = Fnv::new();
    for field in [b"upstream".as_slice(), group.as_bytes(), upstream] {
        h.write(&(field.len() as u64).to_le_bytes());
        h.write(field);
    }
    h.0.max(1)
}

struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolved_identities_count_the_server_line() {
        let a = resolved_identity("http", b"u", b"a.test:80", b"127.0.0.2:80", "tcp", 0);
        let b = resolved_identity("http", b"u", b"b.test:80", b"127.0.0.2:80", "tcp", 0);
        assert_ne!(a, b);
        assert_ne!(a, identity_hash("http", b"u", b"127.0.0.2:80", "tcp", 0));
        assert_ne!(a, 0);
        assert_ne!(upstream_tag("http", b"u"), upstream_tag("stream", b"u"));
        assert_ne!(upstream_tag("http", b"u"), 0);
    }

    #[test]
    fn fields_are_not_ambiguous() {
        let a = identity_hash("http", b"ab", b"c", "tcp", 0);
        let b = identity_hash("http", b"a", b"bc", "tcp", 0);
        assert_ne!(a, b);
    }

    #[test]
    fn every_field_counts() {
        let base = identity_hash("http", b"u", b"127.0.0.1:80", "tcp", 0);
        assert_eq!(base, identity_hash("http", b"u", b"127.0.0.1:80", "tcp", 0));
        assert_ne!(
            base,
            identity_hash("stream", b"u", b"127.0.0.1:80", "tcp", 0)
        );
        assert_ne!(base, identity_hash("http", b"v", b"127.0.0.1:80", "tcp", 0));
        assert_ne!(base, identity_hash("http", b"u", b"127.0.0.1:81", "tcp", 0));
        assert_ne!(base, identity_hash("http", b"u", b"127.0.0.1:80", "udp", 0));
        assert_ne!(
            base,
            identity_hash("http", b"u", b"127.0.0.1:80", "tcp", 81)
        );
    }
}
