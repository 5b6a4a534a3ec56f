//! The first packet a MySQL or MariaDB server sends on a new connection
//! (MySQL client/server protocol, "Connection Phase"): an initial
//! handshake packet, protocol version 10, when it accepts the connection;
//! an error packet (`0xff`, error code, message) when it refuses it (too
//! many connections, a host blocked after too many failed connects). The
//! check sends nothing, reads that packet and closes.
//!
//! A packet is a 3-byte little-endian payload length, a sequence id, then
//! the payload.

use super::{Answer, Verdict};
use crate::reason::Reason;

/// Longest error message quoted in the log line.
const MESSAGE_MAX: usize = 200;

/// The greeting of one round.
#[derive(Debug)]
pub struct Greeting {
    buf: Vec<u8>,
    /// Bytes of a packet kept at most (`check_buffer_size`, at least 16).
    max: usize,
}

impl Greeting {
    /// A decoder that keeps at most `max` bytes of the packet.
    pub fn new(max: usize) -> Greeting {
        Greeting {
            buf: Vec::new(),
            max: max.max(16),
        }
    }

    fn judge(&self, complete: bool) -> Verdict {
        let b = &self.buf;
        if b.len() < 5 {
            return if complete {
                Verdict::Down(
                    Reason::Closed,
                    format!("closed after {} bytes of the greeting", b.len()),
                )
            } else {
                Verdict::NeedMore
            };
        }
        let len = usize::from(b[0]) | usize::from(b[1]) << 8 | usize::from(b[2]) << 16;
        let payload = &b[4..];
        match payload[0] {
            0x0a => Verdict::Up,
            0xff => {
                // Wait for the whole packet, or as much as is kept.
                let whole = payload.len() >= len || b.len() >= self.max;
                if !whole && !complete {
                    return Verdict::NeedMore;
                }
                Verdict::Down(
                    Reason::Status,
                    error_text(&payload[..payload.len().min(len)]),
                )
            }
            v if len == 0 => Verdict::Down(
                Reason::Invalid,
                format!("an empty MySQL packet (first byte 0x{v:02x})"),
            ),
            v => Verdict::Down(
                Reason::Invalid,
                format!("not a MySQL handshake packet (protocol version {v})"),
            ),
        }
    }
}

/// `MySQL error 1040: Too many connections`, from an error packet's
/// payload (its `0xff` first).
fn error_text(p: &[u8]) -> String {
    if p.len() < 3 {
        return "MySQL error packet".into();
    }
    let code = u16::from(p[1]) | u16::from(p[2]) << 8;
    let mut msg = &p[3..];
    // Protocol 4.1: '#' and a five-byte SQL state before the message.
    if msg.first() == Some(&b'#') && msg.len() >= 6 {
        msg = &msg[6..];
    }
    let msg = &msg[..msg.len().min(MESSAGE_MAX)];
    let text: String = String::from_utf8_lossy(msg)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!("MySQL error {code}: {}", text.trim())
}

impl Answer for Greeting {
    fn feed(&mut self, bytes: &[u8]) -> Verdict {
        let room = self.max.saturating_sub(self.buf.len());
        self.buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.judge(false)
    }

    fn eof(&mut self) -> Verdict {
        self.judge(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A MariaDB 10.11 greeting's first bytes.
    fn handshake() -> Vec<u8> {
        let mut p = vec![0x0a];
        p.extend_from_slice(b"5.5.5-10.11.6-MariaDB-0+deb12u1\0");
        p.extend_from_slice(&[1, 0, 0, 0]);
        p.extend_from_slice(b"abcdefgh\0");
        packet(0, &p)
    }

    fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
        let n = payload.len();
        let mut v = vec![n as u8, (n >> 8) as u8, (n >> 16) as u8, seq];
        v.extend_from_slice(payload);
        v
    }

    fn error(code: u16, state: Option<&[u8; 5]>, msg: &str) -> Vec<u8> {
        let mut p = vec![0xff, code as u8, (code >> 8) as u8];
        if let Some(s) = state {
            p.push(b'#');
            p.extend_from_slice(s);
        }
        p.extend_from_slice(msg.as_bytes());
        packet(0, &p)
    }

    fn run(bytes: &[u8], cuts: &[usize], eof: bool) -> Verdict {
        let mut g = Greeting::new(16 * 1024);
        let mut last = 0;
        for &c in cuts.iter().chain([bytes.len()].iter()) {
            let c = c.clamp(last, bytes.len());
            let v = g.feed(&bytes[last..c]);
            last = c;
            if v != Verdict::NeedMore {
                return v;
            }
        }
        if eof {
            g.eof()
        } else {
            Verdict::NeedMore
        }
    }

    #[test]
    fn a_handshake_is_up() {
        assert_eq!(run(&handshake(), &[], false), Verdict::Up);
        assert_eq!(run(&handshake(), &[1, 2, 3, 4], false), Verdict::Up);
    }

    #[test]
    fn an_error_packet_is_status_with_the_message() {
        let e = error(1040, Some(b"08004"), "Too many connections");
        assert_eq!(
            run(&e, &[], false),
            Verdict::Down(
                Reason::Status,
                "MySQL error 1040: Too many connections".into()
            )
        );
        // MariaDB's blocked host, before 4.1 framing (no SQL state).
        let e = error(
            1129,
            None,
            "Host '127.0.0.1' is blocked because of many connection errors",
        );
        assert!(
            matches!(run(&e, &[7], false), Verdict::Down(Reason::Status, m) if m.starts_with("MySQL error 1129: Host"))
        );
    }

    #[test]
    fn an_error_packet_waits_for_its_message() {
        let e = error(1040, Some(b"08004"), "Too many connections");
        assert_eq!(run(&e[..8], &[], false), Verdict::NeedMore);
    }

    #[test]
    fn other_first_bytes_are_invalid_and_short_answers_closed() {
        assert!(matches!(
            run(b"HTTP/1.1 400 Bad\r\n", &[], false),
            Verdict::Down(Reason::Invalid, _)
        ));
        assert!(
            matches!(run(&packet(0, &[9, 1, 2]), &[], false), Verdict::Down(Reason::Invalid, m) if m.contains("protocol version 9"))
        );
        assert!(matches!(
            run(b"\x01\x00", &[], true),
            Verdict::Down(Reason::Closed, _)
        ));
        assert_eq!(run(b"\x01\x00", &[], false), Verdict::NeedMore);
    }

    proptest! {
        #[test]
        fn the_verdict_does_not_depend_on_the_split(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            cuts in proptest::collection::vec(0usize..64, 0..6),
        ) {
            let mut cuts = cuts;
            cuts.sort_unstable();
            prop_assert_eq!(run(&bytes, &cuts, true), run(&bytes, &[], true));
        }

        #[test]
        fn memory_stays_bounded(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..40)) {
            let mut g = Greeting::new(100);
            for c in &chunks {
                let _ = g.feed(c);
            }
            prop_assert!(g.buf.len() <= 100);
        }
    }
}
