//! The TCP probe: connect within `timeout`, then peek one byte. Data or
//! "would block" is a success; refused, reset, timed out, closed by the
//! peer or a socket error is a failure. After a connect whose peek would
//! block, the round watches the connection for a short settle window (at
//! most a quarter of the timeout and 100 ms, never past the timeout; not
//! aligned to the timer grid, so that a grid point's rounds end over the
//! turns they started in) so that a server that accepts and at once closes
//! or resets is seen failing; the delay recorded is the connect-and-peek
//! time, not the settle window.

//!
//! With a `check_match` block that has `send` and/or `expect`, the round
//! talks instead of peeking: it writes the `send` bytes, then reads until
//! what arrived satisfies `expect` (up), can no longer satisfy it
//! (`mismatch`), exceeds `check_buffer_size` (`invalid`), the peer closes
//! (`closed`) or the timeout (`timeout`). Such a round's connection is not
//! kept.

use std::rc::Rc;

use healthcheck_core::matcher::{ExpectProgress, Test};
use healthcheck_core::reason::Reason;
use healthcheck_core::timing;

use super::conn::{reason_of, Io, Peek};
use super::kind::{Cx, ProbeKind};
use super::outcome::{Outcome, Step};
use crate::ffi::monotonic_ms;
use crate::match_block::CompiledMatch;

/// A TCP round's state.
#[derive(Default)]
pub struct Tcp {
    /// Connect-and-peek time of this round (ms).
    delay_ms: u64,
    /// send/expect of the `check_match` block, if it has either.
    talk: Option<Talk>,
}

/// A send/expect exchange.
struct Talk {
    m: Rc<CompiledMatch>,
    /// The block has an `expect` test.
    expect: bool,
    /// Bytes of `send` written this round.
    sent: usize,
    received: Vec<u8>,
    /// `check_buffer_size`.
    limit: usize,
}

impl Tcp {
    /// A TCP probe; with `matcher`'s send/expect, a talking one.
    pub fn new(matcher: Option<Rc<CompiledMatch>>, limit: usize) -> Tcp {
        let talk = matcher.and_then(|m| {
            let expect = m.block.tests.iter().any(|t| matches!(t, Test::Expect(_)));
            (expect || m.block.send().is_some()).then(|| Talk {
                m,
                expect,
                sent: 0,
                received: Vec::new(),
                limit,
            })
        });
        Tcp { delay_ms: 0, talk }
    }
}

impl Talk {
    fn start(&mut self, cx: &Cx) -> Step {
        self.sent = 0;
        self.received.clear();
        cx.time_rest_of_round();
        self.send(cx)
    }

    fn send(&mut self, cx: &Cx) -> Step {
        let m = Rc::clone(&self.m);
        let bytes = m.block.send().unwrap_or_default();
        while self.sent < bytes.len() {
            match cx.conn.send(&bytes[self.sent..]) {
                Io::Done(n) if n > 0 => self.sent += n,
                Io::Done(_) | Io::Again => return Step::Pending,
                Io::Error(e) => return Step::Done(Outcome::Down(reason_of(e))),
            }
        }
        if !self.expect {
            return Step::Done(Outcome::Up {
                delay_ms: cx.round.elapsed_ms(),
            });
        }
        self.read(cx)
    }

    fn read(&mut self, cx: &Cx) -> Step {
        let mut buf = [0u8; 4096];
        loop {
            let complete = match cx.conn.recv(&mut buf) {
                Io::Done(0) => true,
                Io::Done(n) => {
                    if self.received.len() + n > self.limit {
                        return Step::Done(Outcome::Down(Reason::Invalid));
                    }
                    self.received.extend_from_slice(&buf[..n]);
                    false
                }
                Io::Again => return Step::Pending,
                Io::Error(e) => return Step::Done(Outcome::Down(reason_of(e))),
            };
            let m = &self.m;
            match m
                .block
                .expect_progress(&self.received, &m.regexes, complete)
            {
                ExpectProgress::Matched => {
                    return Step::Done(Outcome::Up {
                        delay_ms: cx.round.elapsed_ms(),
                    })
                }
                ExpectProgress::Failed if complete => {
                    return Step::Done(Outcome::Down(Reason::Closed))
                }
                ExpectProgress::Failed => return Step::Done(Outcome::Down(Reason::Mismatch)),
                ExpectProgress::NeedMore if complete => {
                    return Step::Done(Outcome::Down(Reason::Closed))
                }
                ExpectProgress::NeedMore => {}
            }
        }
    }
}

impl Tcp {
    fn up(&self) -> Step {
        Step::Done(Outcome::Up {
            delay_ms: self.delay_ms,
        })
    }

    fn peek(&self, cx: &Cx) -> Step {
        match cx.conn.peek() {
            Peek::Data => self.up(),
            Peek::WouldBlock => Step::Pending,
            Peek::Failed(r) => Step::Done(Outcome::Down(r)),
        }
    }
}

impl ProbeKind for Tcp {
    fn on_connected(&mut self, cx: &Cx) -> Step {
        self.delay_ms = cx.round.elapsed_ms();
        if let Some(t) = self.talk.as_mut() {
            return t.start(cx);
        }
        match cx.conn.peek() {
            Peek::Data => return self.up(),
            Peek::Failed(r) => return Step::Done(Outcome::Down(r)),
            Peek::WouldBlock => {}
        }
        let now = monotonic_ms();
        let timeout = cx.conf.timeout_ms;
        let spent = now.saturating_sub(cx.round.start_msec);
        let settle = timing::settle_window(timeout, spent);
        if settle == 0 {
            return self.up();
        }
        cx.conn.del_timers();
        cx.conn.read_timer(settle);
        Step::Pending
    }

    /// A kept connection was alive (its peek by the kept-connection code):
    /// healthy at once.
    fn on_reused(&mut self, cx: &Cx) -> Step {
        self.delay_ms = cx.round.elapsed_ms();
        if let Some(t) = self.talk.as_mut() {
            return t.start(cx);
        }
        self.up()
    }

    fn on_readable(&mut self, cx: &Cx) -> Step {
        match self.talk.as_mut() {
            Some(t) if t.sent < t.m.block.send().map_or(0, <[u8]>::len) => t.send(cx),
            Some(t) => t.read(cx),
            None => self.peek(cx),
        }
    }

    fn on_writable(&mut self, cx: &Cx) -> Step {
        match self.talk.as_mut() {
            Some(t) => t.send(cx),
            None => self.peek(cx),
        }
    }

    /// Nothing arrived during the settle window: healthy; a send/expect
    /// exchange that did not finish in time: `timeout`.
    fn on_timeout(&mut self, _cx: &Cx) -> Step {
        if self.talk.is_some() {
            return Step::Done(Outcome::Down(Reason::Timeout));
        }
        self.up()
    }

    fn may_keep(&self) -> bool {
        self.talk.is_none()
    }
}
