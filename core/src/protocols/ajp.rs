//! AJP13's CPing / CPong (the Apache Tomcat Connector's protocol,
//! "AJP13 packets"): a CPing is the packet of one byte, code 10, sent from
//! the web server (magic `0x12 0x34`); the container answers a CPong, code
//! 9, in a packet from the container (magic `A B`).

use super::{Answer, Verdict};
use crate::reason::Reason;

/// The CPing request: magic, length 1, code 10.
pub const CPING: [u8; 5] = [0x12, 0x34, 0x00, 0x01, 0x0a];
/// The CPong reply: magic `AB`, length 1, code 9.
pub const CPONG: [u8; 5] = [0x41, 0x42, 0x00, 0x01, 0x09];

/// The answer to a CPing: the five bytes of a CPong, or anything else.
#[derive(Default, Debug)]
pub struct CPong {
    got: usize,
}

impl Answer for CPong {
    fn feed(&mut self, bytes: &[u8]) -> Verdict {
        for &b in bytes {
            if self.got >= CPONG.len() {
                break;
            }
            if b != CPONG[self.got] {
                return Verdict::Down(
                    Reason::Mismatch,
                    format!(
                        "not an AJP CPong (byte {} is 0x{b:02x}, want 0x{:02x})",
                        self.got, CPONG[self.got]
                    ),
                );
            }
            self.got += 1;
        }
        if self.got == CPONG.len() {
            Verdict::Up
        } else {
            Verdict::NeedMore
        }
    }

    fn eof(&mut self) -> Verdict {
        match self.got {
            n if n == CPONG.len() => Verdict::Up,
            n => Verdict::Down(
                Reason::Closed,
                format!("closed after {n} bytes of the CPong"),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cpong_is_up_in_any_split() {
        for cut in 0..=CPONG.len() {
            let mut a = CPong::default();
            let first = a.feed(&CPONG[..cut]);
            let v = if cut == CPONG.len() {
                first
            } else {
                assert_eq!(first, Verdict::NeedMore);
                a.feed(&CPONG[cut..])
            };
            assert_eq!(v, Verdict::Up);
        }
    }

    #[test]
    fn anything_else_is_a_mismatch_or_closed() {
        let mut a = CPong::default();
        assert!(matches!(
            a.feed(b"HTTP/1.1 400"),
            Verdict::Down(Reason::Mismatch, _)
        ));
        let mut a = CPong::default();
        assert_eq!(a.feed(&CPONG[..3]), Verdict::NeedMore);
        assert!(matches!(a.eof(), Verdict::Down(Reason::Closed, _)));
        // The CPing itself echoed back is no CPong.
        let mut a = CPong::default();
        assert!(matches!(a.feed(&CPING), Verdict::Down(Reason::Mismatch, _)));
    }

    proptest! {
        #[test]
        fn bytes_other_than_the_cpong_never_pass(b in proptest::collection::vec(any::<u8>(), 5..20)) {
            let mut a = CPong::default();
            let v = a.feed(&b);
            prop_assert_eq!(v == Verdict::Up, b[..5] == CPONG);
        }
    }
}
