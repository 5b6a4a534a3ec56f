//! The interface a probe kind implements (tcp, udp, http, ...), and what
//! it may use during a round. The engine owns the connection, its timers
//! and the recording; a kind sees the events and says whether the round
//! goes on or how it ended.

use std::time::Instant;

use healthcheck_core::conf::CheckConf;

use super::conn::Conn;
use super::outcome::Step;

/// What a probe kind does with the events of its round's connection.
pub trait ProbeKind {
    /// The connection is established (and its transport ready).
    fn on_connected(&mut self, cx: &Cx) -> Step;
    /// The round runs on a kept connection that was alive.
    fn on_reused(&mut self, cx: &Cx) -> Step {
        self.on_connected(cx)
    }
    fn on_readable(&mut self, cx: &Cx) -> Step;
    fn on_writable(&mut self, cx: &Cx) -> Step;
    /// A timer the kind armed on the connection fired.
    fn on_timeout(&mut self, cx: &Cx) -> Step;
    /// Whether a successful round's connection may serve later rounds.
    fn may_keep(&self) -> bool {
        false
    }
    /// The last HTTP status code the kind saw, for the status page.
    fn http_status(&self) -> Option<u16> {
        None
    }
    /// What the last failed round's answer said, for the log line of a
    /// peer going down (`MySQL error 1040: Too many connections`).
    fn detail(&self) -> Option<&str> {
        None
    }
    /// A round begins, before it connects: forget what the last one said
    /// (a round that fails to connect never reaches the kind).
    fn on_round_start(&mut self) {}
    /// The last `grpc-status` the kind saw, for the status page.
    fn grpc_status(&self) -> Option<u32> {
        None
    }
    /// Bytes that came on the idle kept connection `c`: `None` when the
    /// kind has no use for them (they are discarded, and too many close
    /// the connection), else whether the connection stays (HTTP/2 feeds
    /// them to its client and answers on `c`).
    fn idle_data(&mut self, _data: &[u8], _c: Conn) -> Option<bool> {
        None
    }
    /// Whether a kept connection with unread data may serve a round: for a
    /// plain TCP check data means alive; for a request/response check it
    /// is a leftover that must never reach the next round's verdict.
    fn reuse_with_pending_data(&self) -> bool {
        true
    }
}

/// What a probe kind may use during a round.
pub struct Cx<'a> {
    pub conn: Conn,
    pub conf: &'a CheckConf,
    pub round: &'a RoundClock,
    /// A good round's connection will be kept (if the kind allows it).
    pub keep: bool,
}

/// When the current round was due and started.
pub struct RoundClock {
    /// The round's lattice point (nginx ms).
    pub lattice: u64,
    /// When it was due: the lattice point plus its jitter delay.
    pub due: u64,
    /// Start on nginx's clock (scheduling).
    pub start_msec: u64,
    /// Start on a fresh monotonic clock (delays and durations).
    pub start: Instant,
}

impl RoundClock {
    /// A clock of a round not yet started.
    pub fn idle() -> RoundClock {
        RoundClock {
            lattice: 0,
            due: 0,
            start_msec: 0,
            start: crate::ffi::fresh_now(),
        }
    }

    pub fn elapsed_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
}

impl Cx<'_> {
    /// Replace the connection's timers with a read timer for what is left
    /// of the round's timeout (at least 1 ms): an exchange starts.
    pub fn time_rest_of_round(&self) {
        self.conn.del_timers();
        let spent = self.round.elapsed_ms();
        self.conn
            .read_timer(self.conf.timeout_ms.saturating_sub(spent).max(1));
    }
}
