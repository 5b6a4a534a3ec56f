//! The TCP probe: connect within `timeout`, then peek one byte. Data or
//! "would block" is a success; refused, reset, timed out, closed by the
//! peer or a socket error is a failure. After a connect whose peek would
//! block, the round watches the connection for a short settle window (at
//! most a quarter of the timeout and 100 ms, aligned to the timer grid but
//! never past the timeout) so that a server that accepts and at once closes
//! or resets is seen failing; the delay recorded is the connect-and-peek
//! time, not the settle window.

use healthcheck_core::timing;

use super::conn::Peek;
use super::round::{Outcome, Step};
use super::{Cx, ProbeKind};
use crate::ffi::monotonic_ms;

/// A TCP round's state.
#[derive(Default)]
pub struct Tcp {
    /// Connect-and-peek time of this round (ms).
    delay_ms: u64,
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
        let budget = timeout.saturating_sub(spent);
        let step = timing::grid_step(cx.conf.interval_ms);
        cx.conn.del_timers();
        cx.conn
            .read_timer(timing::settle_delay(now, settle, budget, step));
        Step::Pending
    }

    /// A kept connection was alive (its peek by the kept-connection code):
    /// healthy at once.
    fn on_reused(&mut self, cx: &Cx) -> Step {
        self.delay_ms = cx.round.elapsed_ms();
        self.up()
    }

    fn on_readable(&mut self, cx: &Cx) -> Step {
        self.peek(cx)
    }

    fn on_writable(&mut self, cx: &Cx) -> Step {
        self.peek(cx)
    }

    /// Nothing arrived during the settle window: healthy.
    fn on_timeout(&mut self, _cx: &Cx) -> Step {
        self.up()
    }

    fn may_keep(&self) -> bool {
        true
    }
}
