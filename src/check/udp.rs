//! The UDP probe: one `NGX_UDP_CHECKER` datagram on its own connected
//! socket. The round fails only if `ECONNREFUSED` (an ICMP port
//! unreachable) is seen before the deadline; a reply, silence until the
//! deadline or any other error is a success (docs/design.md, How checks work).
//!
//! With a `check_match` block, its `send` bytes are the datagram, and with
//! an `expect` test the round succeeds only on a reply datagram that
//! satisfies it: no reply by the deadline is `timeout`, another reply
//! `mismatch`.

use std::rc::Rc;

use super::conn::{reason_of, Io};
use super::kind::{Cx, ProbeKind};
use super::outcome::{Outcome, Step};
use crate::match_block::CompiledMatch;
use healthcheck_core::matcher::{ExpectProgress, Test};
use healthcheck_core::reason::Reason;

/// The probe's payload.
const UDP_PAYLOAD: &[u8] = b"NGX_UDP_CHECKER";
/// Immediate send retries on EAGAIN before waiting for writability.
const SEND_RETRIES: u32 = 4;

/// Bytes of a reply datagram `expect` sees (a longer one is cut there).
const REPLY_MAX: usize = 4096;

/// A UDP round's state.
#[derive(Default)]
pub struct Udp {
    /// Sent; waiting for a reply, an ICMP error or the deadline.
    sent: bool,
    /// The `check_match` block with send and/or expect.
    matcher: Option<Rc<CompiledMatch>>,
    /// It has an `expect` test.
    expect: bool,
}

impl Udp {
    /// A UDP probe; `matcher`'s send and expect, if it has them.
    pub fn new(matcher: Option<Rc<CompiledMatch>>) -> Udp {
        let expect = matcher
            .as_ref()
            .is_some_and(|m| m.block.tests.iter().any(|t| matches!(t, Test::Expect(_))));
        Udp {
            sent: false,
            matcher,
            expect,
        }
    }
}

fn up(cx: &Cx) -> Step {
    Step::Done(Outcome::Up {
        delay_ms: cx.round.elapsed_ms(),
    })
}

impl Udp {
    fn send(&mut self, cx: &Cx) -> Step {
        let m = self.matcher.clone();
        let payload = m
            .as_ref()
            .and_then(|m| m.block.send())
            .unwrap_or(UDP_PAYLOAD);
        for _ in 0..SEND_RETRIES {
            match cx.conn.send(payload) {
                Io::Done(_) => {
                    self.sent = true;
                    return self.receive(cx);
                }
                Io::Again => continue,
                Io::Error(libc::ECONNREFUSED) => {
                    return Step::Done(Outcome::Down(Reason::Unreachable))
                }
                // Any other error is no confirmed failure (with expect: no
                // reply can come).
                Io::Error(e) if self.expect => return Step::Done(Outcome::Down(reason_of(e))),
                Io::Error(_) => return up(cx),
            }
        }
        // Still EAGAIN: the write event retries, within the same deadline.
        Step::Pending
    }

    fn receive(&mut self, cx: &Cx) -> Step {
        if !self.expect {
            let mut buf = [0u8; 64];
            return match cx.conn.recv(&mut buf) {
                Io::Done(_) => up(cx),
                Io::Again => Step::Pending,
                Io::Error(libc::ECONNREFUSED) => Step::Done(Outcome::Down(Reason::Unreachable)),
                Io::Error(_) => up(cx),
            };
        }
        let mut buf = [0u8; REPLY_MAX];
        match cx.conn.recv(&mut buf) {
            Io::Done(n) => {
                let Some(m) = self.matcher.as_ref() else {
                    return up(cx);
                };
                match m.block.expect_progress(&buf[..n], &m.regexes, true) {
                    ExpectProgress::Matched => up(cx),
                    _ => Step::Done(Outcome::Down(Reason::Mismatch)),
                }
            }
            Io::Again => Step::Pending,
            Io::Error(libc::ECONNREFUSED) => Step::Done(Outcome::Down(Reason::Unreachable)),
            Io::Error(e) => Step::Done(Outcome::Down(reason_of(e))),
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

    /// Silence until the deadline: no confirmed failure, unless a reply
    /// was expected.
    fn on_timeout(&mut self, cx: &Cx) -> Step {
        if self.expect {
            return Step::Done(Outcome::Down(Reason::Timeout));
        }
        Step::Done(Outcome::Up {
            delay_ms: cx.conf.timeout_ms,
        })
    }
}
