//! One peer's probe in a worker, and its lifecycle: made and armed by
//! [`ProbeBox::spawn`], stopped and freed when its `ProbeBox` is dropped.
//! nginx holds pointers to the probe (its timer's and connections' `data`),
//! so it lives in a box of its own that only its `ProbeBox` frees.
//!
//! The probe's fields are its own: the round driver (`round`), the event
//! handlers (`events`) and the watch of resolved addresses (`watch`) use
//! its methods; the transport pieces (`connect`, `kept`, `tls`) are given
//! the fields they work on.

use core::ffi::c_void;
use core::mem::{self, offset_of, size_of};
use core::ptr::NonNull;
use core::sync::atomic::Ordering;
use std::rc::Rc;

use healthcheck_core::conf::{CheckConf, Reuse};
use healthcheck_core::http::request::host_of_server;
use healthcheck_core::schedule;
use healthcheck_core::status::Group;
use healthcheck_core::timing;
use healthcheck_core::zone::Slot;
use ngx::ffi::{
    ngx_add_timer, ngx_connection_handler_pt, ngx_connection_t, ngx_del_timer,
    ngx_event_handler_pt, ngx_event_t, ngx_log_t, ngx_peer_connection_t,
};

use super::conn::Conn;
use super::connect::{self, Expired, Opened};
use super::inflight::{Gate, Wait, HELD};
use super::kept::{self, Kept, Served};
use super::kind::{Cx, ProbeKind, RoundClock};
use super::kinds::Kind;
use super::outcome::Step;
use super::peer::{Follower, Peer};
use super::tls::{Handshake, Tls};
use crate::ffi::monotonic_ms;
use crate::shm::Zone;
use crate::target::{Target, UpstreamCheck};

/// The handlers nginx calls for a probe's events, given by the layer that
/// defines them (`events`).
pub struct Handlers {
    /// The probe's timer: a look at the schedule.
    pub timer: ngx_event_handler_pt,
    /// Events of the round's connection.
    pub conn: ngx_event_handler_pt,
    /// Events of the idle kept connection.
    pub idle: ngx_event_handler_pt,
    /// nginx's SSL layer finished a handshake it was driving.
    pub handshaked: ngx_connection_handler_pt,
}

/// Where the round is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Phase {
    Idle,
    Connecting,
    /// The TLS handshake runs (nginx's SSL layer has the events).
    Handshaking,
    /// Connected: events go to the probe kind.
    Active,
    /// The round waits for a place to connect (`check_max_inflight`).
    Queued,
}

/// One peer's probe in this worker.
#[repr(C)]
pub struct Probe {
    /// Must stay first: the timer's `data` points here, and nginx's debug
    /// log reads it as a connection whose `fd` (4th word) is -1.
    ident: [usize; 4],
    ev: ngx_event_t,
    pc: ngx_peer_connection_t,
    peer: Peer,
    /// The upstream's check settings, shared by its probes.
    check: Rc<UpstreamCheck>,
    zone: Zone,
    /// The cycle's log, for the module's own messages.
    log: *mut ngx_log_t,
    /// A quieter copy for the probe connections (see `process`).
    conn_log: *mut ngx_log_t,
    handlers: &'static Handlers,
    phase: Phase,
    /// The TLS transport (`type=https`, `type=tls`); plain without.
    tls: Option<Tls>,
    kind: Kind,
    /// The round's connection.
    conn: Option<Conn>,
    /// Keep the connection of a successful round (the owner, with reuse or
    /// keepalive).
    keep: bool,
    /// The idle connection kept between rounds.
    kept: Option<Kept>,
    /// The round runs on the kept connection; what it had served.
    reused: Option<Served>,
    round: RoundClock,
    /// The gate of `check_max_inflight`, and whether the round holds one
    /// of its places (from its connect to the end of its handshake).
    gate: Rc<Gate>,
    gated: bool,
    /// Connections the probe holds now (its round's, its kept one), as
    /// counted in [`HELD`], and how many the worker's checks may hold
    /// (`check_max_connections`) before a round's connection is not kept.
    holds: u8,
    max_connections: usize,
    /// The rows of other upstreams this probe's rounds are recorded in.
    followers: Vec<Follower>,
}

// nginx's debug log reads a timer's `data` as an `ngx_connection_t` and
// prints its `fd`: the probe's first words must look like one whose fd is
// -1 (the convention of nginx's resolver and event timers).
const _: () = {
    assert!(offset_of!(Probe, ident) == 0);
    assert!(offset_of!(ngx_connection_t, fd) == 3 * size_of::<usize>());
    assert!(size_of::<[usize; 4]>() >= offset_of!(ngx_connection_t, fd) + size_of::<i32>());
};

/// The owning handle of a live probe: dropping it stops the probe (timer,
/// round, kept connection) and frees it.
pub struct ProbeBox(NonNull<Probe>);

impl ProbeBox {
    /// Make the probe of `t` and arm its first look at the schedule.
    pub fn spawn(
        t: &Target,
        proto: Group,
        zone: Zone,
        slot: (u32, u32),
        (log, conn_log): (*mut ngx_log_t, *mut ngx_log_t),
        handlers: &'static Handlers,
        (gate, max_connections): (Rc<Gate>, usize),
    ) -> ProbeBox {
        let peer = Peer::new(t, proto, &zone, slot);
        let keep = t.check.conf.keeps_connection() && peer.owner;
        let probe = Probe {
            ident: [0, 0, 0, usize::MAX],
            // SAFETY: all-zero is nginx's initial state for these structs.
            ev: unsafe { mem::zeroed() },
            // SAFETY: as above.
            pc: unsafe { mem::zeroed() },
            peer,
            check: Rc::clone(&t.check),
            zone,
            log,
            conn_log,
            handlers,
            phase: Phase::Idle,
            tls: t.check.tls.as_ref().map(|c| {
                let host = tls_host(t);
                let name = c.name.as_deref();
                Tls::new(
                    c.ssl,
                    healthcheck_core::tls::sni(c.server_name, name, &host),
                    c.verify
                        .then(|| healthcheck_core::tls::verify_name(name, &host)),
                    (c.session_reuse, c.verify_interval_ms),
                    t.check.is_h2(),
                )
            }),
            kind: Kind::new(t, keep),
            conn: None,
            keep,
            kept: None,
            reused: None,
            round: RoundClock::idle(),
            gate,
            gated: false,
            holds: 0,
            max_connections,
            followers: Vec::new(),
        };
        let raw = Box::into_raw(Box::new(probe));
        // SAFETY: `raw` is the only reference to the new probe; nginx keeps
        // the timer's pointer to it until the ProbeBox stops it.
        unsafe {
            (*raw).ev.data = raw.cast();
            (*raw).ev.handler = handlers.timer;
            (*raw).ev.log = log;
            (*raw).ev.set_cancelable(1);
            // First decision almost at once: it draws the random offset.
            ngx_add_timer(&mut (*raw).ev, 1);
            ProbeBox(NonNull::new_unchecked(raw))
        }
    }

    /// The probe records its rounds in `followers` too.
    pub fn with_followers(self, followers: Vec<Follower>) -> ProbeBox {
        // SAFETY: a live probe; no handler of it runs while this one does.
        unsafe { (*self.0.as_ptr()).followers = followers };
        self
    }

    /// Stop the probe without freeing it (its handlers may run no more).
    pub fn halt(&self) {
        // SAFETY: a live probe; no handler of it is running (callers run
        // from another event or at process exit).
        unsafe { (*self.0.as_ptr()).halt() }
    }
}

impl Drop for ProbeBox {
    fn drop(&mut self) {
        self.halt();
        // SAFETY: made by `Box::into_raw` in `spawn`, freed once here;
        // nothing in nginx points to it after `halt`.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// The host a TLS check names by default: the `Host` header of an https
/// check (`check_http_header Host`), else the `server` line's host.
fn tls_host(t: &Target) -> Vec<u8> {
    let from_header = t.check.http.as_ref().and_then(|h| {
        h.request
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(b"host"))
            .map(|(_, v)| healthcheck_core::tls::host_of_header(v).to_vec())
    });
    from_header.unwrap_or_else(|| host_of_server(t.peer.server_bytes()).0.to_vec())
}

impl Probe {
    fn as_data(&mut self) -> *mut c_void {
        (self as *mut Probe).cast()
    }

    pub fn conf(&self) -> &CheckConf {
        &self.check.conf
    }

    pub fn check(&self) -> &Rc<UpstreamCheck> {
        &self.check
    }

    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    /// The rows of other upstreams that share this probe.
    pub fn followers(&self) -> &[Follower] {
        &self.followers
    }

    pub fn zone(&self) -> &Zone {
        &self.zone
    }

    /// The cycle's log.
    pub fn log(&self) -> *mut ngx_log_t {
        self.log
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn set_phase(&mut self, phase: Phase) {
        self.phase = phase;
        if self.gated && !matches!(phase, Phase::Connecting | Phase::Handshaking) {
            self.gated = false;
            self.gate.leave();
        }
    }

    /// Whether the round may start now (`check_max_inflight`'s budget of
    /// starts); if not, it waits in the gate's queue (`Queued`).
    pub fn may_start(&mut self) -> bool {
        if self.gate.start() {
            return true;
        }
        self.queue(Wait::Start);
        false
    }

    /// Take a place of the gate for the connection the round is about to
    /// open; without one the round waits in the gate's queue (`Queued`)
    /// and false.
    pub fn enter_gate(&mut self) -> bool {
        if self.gate.enter() {
            self.gated = true;
            return true;
        }
        self.queue(Wait::Open);
        false
    }

    fn queue(&mut self, w: Wait) {
        self.phase = Phase::Queued;
        let me = NonNull::from(&mut *self).cast();
        self.gate.wait(me, w);
    }

    /// The gate took the round out of its queue, what it waited for given.
    pub fn left_queue(&mut self, w: Wait) {
        self.gated = w == Wait::Open;
        self.phase = Phase::Idle;
    }

    /// The round waits in the gate's queue no more (the probe stops).
    fn leave_queue(&mut self) {
        if self.phase == Phase::Queued {
            let me = NonNull::from(&mut *self).cast();
            self.gate.forget(me);
            self.phase = Phase::Idle;
        }
    }

    /// A queued round restarts its clock when it leaves the queue (the
    /// wait is not part of its timeout).
    pub fn restart_clock(&mut self, now: u64) {
        self.round.start_msec = now;
        self.round.start = crate::ffi::fresh_now();
    }

    pub fn round(&self) -> &RoundClock {
        &self.round
    }

    /// The peer's slot, while it is still this peer's (a freed slot has
    /// identity 0: no probe's).
    pub fn slot(&self) -> Option<&Slot> {
        self.zone.slot(self.peer.index as usize).filter(|s| {
            self.peer.identity != 0 && s.identity.load(Ordering::Acquire) == self.peer.identity
        })
    }

    /// Free the round's lease on the peer's slot.
    pub fn release_lease(&self) {
        if let Some(s) = self.slot() {
            s.lease.store(0, Ordering::Release);
        }
    }

    /// The interval in force for the peer as its slot shows it now
    /// (`down_interval` while it is down).
    pub fn interval_now(&self, s: &Slot) -> u64 {
        self.check
            .conf
            .interval_for(s.up.load(Ordering::Acquire) != 0)
    }

    /// The seed of the peer's jitter delays, the same in every worker.
    pub fn jitter_seed(&self, s: &Slot) -> u64 {
        schedule::jitter_seed(s.identity.load(Ordering::Relaxed), self.peer.index)
    }

    /// Look at the schedule again at `at` (aligned; at the earliest in 1 ms).
    pub fn arm(&mut self, at: u64) {
        let step = timing::grid_step(self.check.conf.shortest_interval_ms());
        let delay = timing::aligned_delay(monotonic_ms(), at, step);
        // SAFETY: the probe's own timer event.
        unsafe { ngx_add_timer(&mut self.ev, delay as ngx::ffi::ngx_msec_t) };
    }

    /// Remove the probe's timer, if set.
    pub fn disarm(&mut self) {
        if self.ev.timer_set() != 0 {
            // SAFETY: the probe's own timer.
            unsafe { ngx_del_timer(&mut self.ev) };
        }
    }

    /// A round starts (its clock set).
    pub fn begin_round(&mut self, clock: RoundClock) {
        self.round = clock;
        if let Some(t) = self.tls.as_mut() {
            t.resumed = false;
        }
    }

    /// `check_keepalive_requests` when `reuse=on`.
    fn max_rounds(&self) -> Option<u32> {
        (self.check.conf.reuse == Reuse::On).then_some(self.check.keepalive_requests)
    }

    /// Make `c` the round's connection: its events come to this probe.
    fn attach(&mut self, c: Conn) {
        c.attach(self.as_data(), self.handlers.conn);
        self.conn = Some(c);
    }

    /// Whether `c` is the round's connection.
    pub fn is_round_conn(&self, c: Conn) -> bool {
        self.conn == Some(c)
    }

    /// Take the kept connection for the round starting at `now` if it may
    /// serve it (then the round runs on it).
    pub fn take_kept(&mut self, now: u64) -> bool {
        let mut period_ms = self.check.conf.rehandshake_ms.unwrap_or(0);
        if let Some(t) = self.tls.as_ref() {
            period_ms = t.verify_period(period_ms);
        }
        let policy = kept::Policy {
            period_ms,
            max_rounds: self.max_rounds(),
            pending_data_ok: self.kind.reuse_with_pending_data(),
        };
        let Some((c, served)) = kept::take(&mut self.kept, now, &policy, self.tls.as_mut()) else {
            return false;
        };
        self.reused = Some(served);
        self.attach(c);
        self.sync_holds();
        true
    }

    /// Count the connections the probe holds now in [`HELD`].
    fn sync_holds(&mut self) {
        let n = u8::from(self.conn.is_some()) + u8::from(self.kept.is_some());
        if n != self.holds {
            HELD.moved(self.holds, n);
            self.holds = n;
        }
    }

    /// Whether the probe holds a kept connection.
    pub fn has_kept(&self) -> bool {
        self.kept.is_some()
    }

    /// Open the round's connection.
    pub fn open(&mut self) -> Opened {
        let datagram = self.kind.datagram();
        let elapsed = self.round.elapsed_ms();
        let opened = connect::open(
            &mut self.pc,
            &mut self.peer,
            self.conn_log,
            datagram,
            elapsed,
        );
        if let Opened::Connected(c) | Opened::InProgress(c) = opened {
            self.attach(c);
        }
        self.sync_holds();
        opened
    }

    /// The round's connect timer fired.
    pub fn connect_expired(&self, c: Conn) -> Expired {
        connect::connect_timer_expired(c, self.round.elapsed_ms(), self.check.conf.timeout_ms)
    }

    /// Whether the round runs over TLS (its handshake is the transport's).
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Start the TLS handshake on the round's fresh connection.
    pub fn start_tls(&mut self) -> Handshake {
        let Some(c) = self.conn else {
            return Handshake::Failed(super::outcome::Outcome::Local(
                super::outcome::Local::NoConnection,
            ));
        };
        let budget = self
            .check
            .conf
            .timeout_ms
            .saturating_sub(self.round.elapsed_ms());
        let (log, keep, done) = (self.conn_log, self.keep, self.handlers.handshaked);
        match self.tls.as_mut() {
            Some(t) => t.start(c, log, keep, budget, done),
            None => Handshake::Done,
        }
    }

    /// nginx's SSL layer finished the handshake on `c`.
    pub fn tls_finished(&mut self, c: Conn) -> Handshake {
        match self.tls.as_mut() {
            Some(t) => t.finished(c),
            None => Handshake::Done,
        }
    }

    /// After the handshake the round's events come back to the probe
    /// (nginx's SSL layer had them).
    pub fn reattach(&mut self) {
        if let Some(c) = self.conn {
            self.attach(c);
        }
    }

    /// Run `f` on the probe kind with the round's context; `None` without a
    /// connection.
    pub fn with_kind(&mut self, f: impl FnOnce(&mut Kind, &Cx) -> Step) -> Option<Step> {
        let cx = Cx {
            conn: self.conn?,
            conf: &self.check.conf,
            round: &self.round,
            keep: self.keep,
        };
        Some(f(&mut self.kind, &cx))
    }

    /// The last HTTP status code the kind saw.
    pub fn http_status(&self) -> Option<u16> {
        self.kind.http_status()
    }

    /// The last `grpc-status` the kind saw.
    pub fn grpc_status(&self) -> Option<u32> {
        self.kind.grpc_status()
    }

    /// A round begins (`ProbeKind::on_round_start`).
    pub fn kind_round_start(&mut self) {
        self.kind.on_round_start();
    }

    /// What the kind says of the last failed round's answer.
    pub fn kind_detail(&self) -> Option<&str> {
        self.kind.detail()
    }

    /// The round's handshake resumed a TLS session.
    pub fn tls_resumed(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.resumed)
    }

    /// Why the last TLS round failed, in OpenSSL's words, if known.
    pub fn tls_detail(&self) -> Option<&str> {
        self.tls.as_ref().and_then(|t| t.detail.as_deref())
    }

    /// The round is over: keep its connection (a good round, when the
    /// probe and the kind keep connections) or close it.
    pub fn end_connection(&mut self, good: bool) {
        if let (Some(c), Some(t)) = (self.conn, self.tls.as_mut()) {
            // A session ticket the round's reads brought.
            t.collect(c);
        }
        // A connection new this round is kept while the worker's checks
        // hold no more than `check_max_connections` (this one counted);
        // past that, the peer is checked on a new connection each round.
        let room = self.reused.is_some() || HELD.get() <= self.max_connections;
        if self.keep && good && room && self.kind.may_keep() {
            if let Some(c) = self.conn.take() {
                let served = self.reused.take();
                let opened = (self.round.start_msec, self.check.conf.keepalive);
                let idle = (self.as_data(), self.handlers.idle);
                let kind = &mut self.kind;
                let mut sink = |data: &[u8], c: Conn| kind.idle_data(data, c);
                kept::keep(
                    &mut self.kept,
                    c,
                    served,
                    opened,
                    idle,
                    self.tls.as_mut(),
                    &mut sink,
                );
            }
        }
        self.close_round_conn();
    }

    /// Close the round's connection, if any (a spare keeps its socket).
    pub fn close_round_conn(&mut self) {
        self.leave_queue();
        self.set_phase(Phase::Idle);
        let reused = self.reused.take().is_some();
        if let Some(c) = self.conn.take() {
            connect::close(c, reused, self.kind.datagram(), self.peer.family());
        }
        self.sync_holds();
    }

    /// An event of the idle kept connection `c` (not `closing`): read what
    /// came.
    pub fn idle_readable(&mut self, c: Conn) {
        let kind = &mut self.kind;
        let mut sink = |data: &[u8], c: Conn| kind.idle_data(data, c);
        kept::drain_idle(&mut self.kept, self.tls.as_mut(), c, &mut sink);
        self.sync_holds();
    }

    /// Close the kept connection, if any.
    pub fn close_kept(&mut self) {
        kept::close(&mut self.kept);
        self.sync_holds();
    }

    /// Stop the probe: its timer, its round's connection (and lease), its
    /// kept one.
    fn halt(&mut self) {
        self.disarm();
        if self.conn.is_some() || self.phase == Phase::Queued {
            // A round in flight: its lease goes with it.
            self.release_lease();
        }
        self.close_round_conn();
        self.close_kept();
    }
}
