//! The probe engine: one timer per checked peer per worker; rounds run on
//! the nginx event loop with non-blocking sockets (docs/design.md, How
//! checks work).
//!
//! The files, from the bottom up:
//!
//! - `conn.rs`: the connection newtype (all I/O through `c->recv` and
//!   `c->send`, so TLS can sit underneath); `outcome.rs`: how a round ends;
//! - `kind.rs`: the interface a probe kind implements; `tcp.rs`, `udp.rs`,
//!   `http.rs`, `exchange.rs` (mysql, ajp, fastcgi): the kinds; `kinds.rs`:
//!   the enum that dispatches to them;
//! - `peer.rs`: the peer a probe checks; `spares.rs`: sockets kept for later
//!   rounds; `connect.rs`: opening and closing a round's connection;
//!   `tls.rs`: the TLS transport; `kept.rs`: connections kept between
//!   rounds (`reuse` / `keepalive`);
//! - `probe.rs`: the probe and its lifecycle (`ProbeBox`);
//! - `record.rs`: a verdict recorded in the slot, and the log lines;
//!   `round.rs`: the round driver; `events.rs`: nginx's event handlers;
//! - `watch.rs`: the probes of resolved addresses; here: `Prober`, the
//!   probes of one context in one worker.
//!
//! A round: the timer looks at the peer's schedule in the shared slot;
//! when the round is due and this worker wins the lease it takes a kept
//! connection or opens one (connect timeout on the write event), lets the
//! transport finish its handshake (plain: none), then hands every event to
//! the probe kind until it says `Done`. The timer that may fire a little
//! late (the look at the schedule) is aligned to a grid of `interval / 50`
//! (of the shorter of `interval` and `down_interval`), at most 20 ms, so
//! that the rounds of many peers share a worker wake-up
//! (`healthcheck_core::timing`); a round thus starts up to one grid step
//! after it is due (the fixed-rate schedule keeps its lattice point, so
//! nothing drifts; `healthcheck_core::schedule`). Connect timeouts, settle
//! windows and UDP deadlines are not aligned. A round ends with RST, so
//! checks leave no TIME_WAIT.

mod conn;
mod connect;
mod defer;
mod events;
mod exchange;
mod h2;
mod http;
mod inflight;
mod kept;
mod kind;
mod kinds;
mod outcome;
mod peer;
mod probe;
mod record;
mod round;
mod spares;
mod tcp;
mod tls;
mod udp;
mod watch;

use healthcheck_core::status::Group;
use ngx::ffi::ngx_log_t;

use std::rc::Rc;

use self::events::{GATE_HANDLER, HANDLERS};
use self::inflight::Gates;
use self::peer::Follower;
use self::probe::ProbeBox;
use self::spares::SPARES;
use self::watch::WatchBox;
pub use self::watch::WithContext;
use crate::worker::Worker;

/// Connections this worker's checks hold now (`check_max_connections`).
pub fn held_connections() -> usize {
    inflight::HELD.get()
}

/// The probes of one worker and one context.
pub struct Prober {
    probes: Vec<ProbeBox>,
    /// The `check_max_inflight` gates (after `probes`: dropped last).
    _gates: Option<Rc<Gates>>,
    /// The probes of resolved addresses, with their timer (contexts with
    /// `resolve` servers only).
    watch: Option<WatchBox>,
}

impl Prober {
    /// Create the probes of a context and arm their timers. `logs` are the
    /// cycle's log and the probes' connections' (both live for the
    /// process); `with_context` reaches the context from the watch's timer.
    ///
    /// # Safety
    /// Worker process, after the configuration is complete.
    pub unsafe fn start(
        proto: Group,
        w: &Worker,
        slot: (u32, u32),
        logs: (*mut ngx_log_t, *mut ngx_log_t),
        with_context: WithContext,
    ) -> Self {
        let ctx = w.context(proto);
        let Some(zone) = ctx.zone else {
            return Self {
                probes: Vec::new(),
                _gates: None,
                watch: None,
            };
        };
        // SAFETY: the running cycle, in a worker.
        let worker_connections = unsafe { (*ngx::ffi::ngx_cycle).connection_n } as u64;
        let limits = (
            ctx.max_inflight,
            ctx.max_connections.of(worker_connections) as usize,
        );
        let gates = Rc::new(Gates::new(limits, GATE_HANDLER, logs.0));
        let probes = ctx
            .targets
            .iter()
            // A row another row's probe checks has none of its own; a
            // traffic-only row (`check_outlier` alone) has none at all.
            .filter(|t| t.check.conf.active && w.sharing.leader((proto, t.index)).is_none())
            .map(|t| {
                let gate = (gates.of(&t.check), gates.max_connections);
                let followers = w
                    .sharing
                    .followers((proto, t.index))
                    .iter()
                    .filter_map(|&(g, i)| {
                        let c = w.context(g);
                        Some(Follower::new(c.targets.get(i as usize)?, g, c.zone?))
                    })
                    .collect();
                ProbeBox::spawn(t, proto, zone, slot, logs, &HANDLERS, gate)
                    .with_followers(followers)
            })
            .collect();
        let watch = WatchBox::start(
            proto,
            ctx,
            zone,
            slot,
            logs,
            with_context,
            Rc::clone(&gates),
        );
        Self {
            probes,
            _gates: Some(gates),
            watch,
        }
    }
}

impl Drop for Prober {
    /// Every probe stops (timers, connections) and is freed; the spare
    /// sockets close.
    fn drop(&mut self) {
        self.watch = None;
        self.probes.clear();
        SPARES.close_all();
    }
}
