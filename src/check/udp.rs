//! The UDP probe: one `NGX_UDP_CHECKER` datagram on its own connected
//! socket. The round fails only if `ECONNREFUSED` (an ICMP port
//! unreachable) is seen before the deadline; a reply, silence until the
//! deadline or any other error is a success (README: How checks work).

use super::conn::Io;
use super::round::{Outcome, Step};
use super::{Cx, ProbeKind};
use healthcheck_core::reason::Reason;

/// The probe's payload.
const UDP_PAYLOAD: &[u8] = b"NGX_UDP_CHECKER";
/// Immediate send retries on EAGAIN before waiting for writability.
const SEND_RETRIES: u32 = 4;

/// A UDP round's state.
#[derive(Default)]
pub struct Udp {
    /// Sent; waiting for a reply, an ICMP error or the deadline.
    sent: bool,
}

fn up(cx: &Cx) -> Step {
    Step::Done(Outcome::Up {
        delay_ms: cx.round.elapsed_ms(),
    })
}

impl Udp {
    fn send(&mut self, cx: &Cx) -> Step {
        for _ in 0..SEND_RETRIES {
            match cx.conn.send(UDP_PAYLOAD) {
                Io::Done(_) => {
                    self.sent = true;
                    return self.receive(cx);
                }
                Io::Again => continue,
                Io::Error(libc::ECONNREFUSED) => {
                    return Step::Done(Outcome::Down(Reason::Unreachable))
                }
                // Any other error is no confirmed failure.
                Io::Error(_) => return up(cx),
            }
        }
        // Still EAGAIN: the write event retries, within the same deadline.
        Step::Pending
    }

    fn receive(&mut self, cx: &Cx) -> Step {
        let mut buf = [0u8; 64];
        match cx.conn.recv(&mut buf) {
            Io::Done(_) => up(cx),
            Io::Again => Step::Pending,
            Io::Error(libc::ECONNREFUSED) => Step::Done(Outcome::Down(Reason::Unreachable)),
            Io::Error(_) => up(cx),
        }
    }

    fn next(&mut self, cx: &Cx) -> Step {
        if self.sent {
            self.receive(cx)
        } else {
            self.send(cx)
        }
    }
}

impl ProbeKind for Udp {
    fn on_connected(&mut self, cx: &Cx) -> Step {
        self.sent = false;
        // One budget for the whole round.
        cx.conn.read_timer(cx.conf.timeout_ms);
        self.send(cx)
    }

    fn on_readable(&mut self, cx: &Cx) -> Step {
        self.next(cx)
    }

    fn on_writable(&mut self, cx: &Cx) -> Step {
        self.next(cx)
    }

    /// Silence until the deadline: no confirmed failure.
    fn on_timeout(&mut self, cx: &Cx) -> Step {
        Step::Done(Outcome::Up {
            delay_ms: cx.conf.timeout_ms,
        })
    }
}
