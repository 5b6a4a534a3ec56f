//! Why a check round failed: one list for the module, the status page, the
//! tests and the fuzzer. The position in [`Reason::ALL`] is the index of the
//! peer's per-reason counter in shared memory, and `index + 1` is what the
//! slot stores as its last failure reason (0 = none).

/// Why a round failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The peer refused the connection (RST to the SYN).
    Refused = 0,
    /// No answer within `timeout`.
    Timeout = 1,
    /// The peer reset an established connection.
    Reset = 2,
    /// The peer closed the connection (FIN) before the round ended.
    Closed = 3,
    /// ICMP port or host unreachable.
    Unreachable = 4,
    /// Any other socket error.
    Error = 5,
    /// HTTP: the status code is not accepted.
    Status = 6,
    /// A header, body or expect test failed.
    Mismatch = 7,
    /// A malformed, oversized or wrongly framed response.
    Invalid = 8,
    /// `passive_fall` consecutive proxied attempts failed (not a check
    /// round: nginx's own attempts, docs/operations.md, Passive failures).
    Passive = 9,
    /// The TLS handshake failed: an alert, no TLS at all, a protocol or
    /// cipher mismatch.
    Tls = 10,
    /// The peer's certificate did not verify (chain or name).
    TlsVerify = 11,
    /// HTTP/2 (`grpc`, `grpcs`, `check_http_version 2`): no SETTINGS in
    /// time, a GOAWAY or RST_STREAM for the round's stream, a bad or
    /// oversized frame, a header block or control frames past their
    /// bounds, or ALPN not `h2`.
    Protocol = 12,
}

/// Number of reasons (the length of a slot's per-reason counters).
pub const REASONS: usize = Reason::ALL.len();

impl Reason {
    /// Every reason, in counter order.
    pub const ALL: [Reason; 13] = [
        Reason::Refused,
        Reason::Timeout,
        Reason::Reset,
        Reason::Closed,
        Reason::Unreachable,
        Reason::Error,
        Reason::Status,
        Reason::Mismatch,
        Reason::Invalid,
        Reason::Passive,
        Reason::Tls,
        Reason::TlsVerify,
        Reason::Protocol,
    ];

    /// The reasons of the connection itself, which every TCP-based check
    /// can produce.
    pub const CONNECTION: [Reason; 6] = [
        Reason::Refused,
        Reason::Timeout,
        Reason::Reset,
        Reason::Closed,
        Reason::Unreachable,
        Reason::Error,
    ];

    /// The name on the status page (JSON, CSV, HTML, Prometheus label).
    pub const fn name(self) -> &'static str {
        match self {
            Reason::Refused => "refused",
            Reason::Timeout => "timeout",
            Reason::Reset => "reset",
            Reason::Closed => "closed",
            Reason::Unreachable => "icmp-unreachable",
            Reason::Error => "error",
            Reason::Status => "status",
            Reason::Mismatch => "mismatch",
            Reason::Invalid => "invalid",
            Reason::Passive => "passive",
            Reason::Tls => "tls",
            Reason::TlsVerify => "tls-verify",
            Reason::Protocol => "protocol",
        }
    }

    /// The words of the error-log line of a peer that went down.
    pub const fn describe(self) -> &'static str {
        match self {
            Reason::Refused => "connection refused",
            Reason::Timeout => "timed out",
            Reason::Reset => "connection reset by peer",
            Reason::Closed => "connection closed by peer",
            Reason::Unreachable => "port unreachable",
            Reason::Error => "socket error",
            Reason::Status => "status not accepted",
            Reason::Mismatch => "response did not match",
            Reason::Invalid => "invalid response",
            Reason::Passive => "proxied attempts failed",
            Reason::Tls => "TLS handshake failed",
            Reason::TlsVerify => "certificate verification failed",
            Reason::Protocol => "HTTP/2 protocol error",
        }
    }

    /// The counter index.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The reason at counter index `i`.
    pub fn from_index(i: usize) -> Option<Reason> {
        Reason::ALL.get(i).copied()
    }

    /// What a slot stores as its last failure reason: index + 1.
    pub const fn stored(self) -> u32 {
        self as u32 + 1
    }

    /// The reason a slot's stored value names (0 = none, or out of range).
    pub fn from_stored(v: u32) -> Option<Reason> {
        (v as usize).checked_sub(1).and_then(Reason::from_index)
    }
}

/// The status-page names of every reason, in counter order.
pub const NAMES: [&str; REASONS] = {
    let mut names = [""; REASONS];
    let mut i = 0;
    while i < REASONS {
        names[i] = Reason::ALL[i].name();
        i += 1;
    }
    names
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_follow_the_list() {
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
            assert_eq!(Reason::from_index(i), Some(*r));
            assert_eq!(Reason::from_stored(r.stored()), Some(*r));
            assert_eq!(NAMES[i], r.name());
        }
        assert_eq!(Reason::from_stored(0), None);
        assert_eq!(Reason::from_stored(REASONS as u32 + 1), None);
        assert_eq!(Reason::from_index(REASONS), None);
    }

    #[test]
    fn names_are_unique_and_label_safe() {
        for (i, a) in NAMES.iter().enumerate() {
            assert!(
                a.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'),
                "{a}"
            );
            for b in &NAMES[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }
}
