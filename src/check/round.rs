//! The round driver: when a round is due and this worker may run it, how
//! it goes from connect through the transport's handshake to the probe
//! kind, and how it ends (recorded, the lease freed, the next look at the
//! schedule armed). Everything here works through the probe's methods;
//! `events` calls in with nginx's events.

use core::sync::atomic::Ordering;

use healthcheck_core::schedule::{self, Decision};
use healthcheck_core::zone::RoundResult;
use ngx::ffi::ngx_random;

use super::conn::{reason_of, Conn};
use super::connect::{Expired, Opened};
use super::inflight::Wait;
use super::kind::{ProbeKind, RoundClock};
use super::outcome::{Local, Outcome, Step};
use super::probe::{Phase, Probe};
use super::record;
use super::tls::Handshake;
use crate::ffi::{exiting, monotonic_ms};

/// The probe's timer fired: run the round if it is due and this worker
/// wins the lease, else look again when it will be.
pub fn on_timer(p: &mut Probe) {
    if exiting() {
        return;
    }
    let Some(s) = p.slot() else { return };
    let now = monotonic_ms();
    let interval = p.interval_now(s);
    let conf = p.conf();
    // The slot holds the next round's lattice point (0: none yet).
    let mut lattice = s.next_due.load(Ordering::Acquire);
    if lattice == 0 {
        // Within the shorter interval, so that a peer starting down
        // (`default_down`) is not left waiting a long `down_interval`.
        // (A resolved address: in the first half, so that it is checked
        // within one interval of nginx adding it; see `watch`.)
        let spread = match p.peer().resolved {
            true => (conf.shortest_interval_ms() / 2).max(1),
            false => conf.shortest_interval_ms(),
        };
        let first = schedule::first_due(now, spread, ngx_random() as u64).max(1);
        lattice = match s
            .next_due
            .compare_exchange(0, first, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => first,
            Err(other) => other,
        };
    }
    let due = schedule::due_at(lattice, p.jitter_seed(s), conf.jitter_ms);
    match schedule::decide(now, due, p.peer().owner, interval) {
        Decision::WaitUntil(at) => p.arm(at),
        Decision::Run => {
            let held = s.lease.load(Ordering::Acquire);
            let mine = schedule::lease(
                p.peer().worker,
                schedule::lease_expiry(now, conf.timeout_ms, interval),
            );
            if !schedule::lease_claimable(held, now, p.peer().worker)
                || s.lease
                    .compare_exchange(held, mine, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
            {
                // Another worker runs this round; look again an interval on.
                p.arm(now + interval);
                return;
            }
            p.begin_round(RoundClock {
                lattice,
                due,
                start_msec: now,
                start: crate::ffi::fresh_now(),
            });
            if p.may_start() {
                start(p, now);
            } else {
                record::debug(p, "queued");
            }
        }
    }
}

/// The round starts: on the kept connection if it may serve, else on a
/// new one.
fn start(p: &mut Probe, now: u64) {
    record::debug(p, "start");
    p.kind_round_start();
    if p.has_kept() && p.take_kept(now) {
        p.set_phase(Phase::Active);
        let step = p.with_kind(|k, cx| k.on_reused(cx));
        return apply(p, step);
    }
    open_gated(p);
}

/// Open the round's connection; a TLS round when `check_max_inflight` has
/// a place for its handshake, else it waits in the gate's queue for
/// [`resume`]. (A plain connect costs the worker nothing until it
/// completes, and under load it completes only a turn later: a place per
/// connect would cap the rounds at N a turn.)
fn open_gated(p: &mut Probe) {
    if !p.is_tls() || p.enter_gate() {
        open(p);
    } else {
        record::debug(p, "queued");
    }
}

/// The gate let a waiting round go on: it starts or opens its connection
/// now (its timeout counts from here), if its lease is still this
/// worker's to hold.
pub fn resume(p: &mut Probe, w: Wait) {
    p.left_queue(w);
    let Some(s) = p.slot() else {
        return p.set_phase(Phase::Idle);
    };
    let now = monotonic_ms();
    let interval = p.interval_now(s);
    let held = s.lease.load(Ordering::Acquire);
    let mine = schedule::lease(
        p.peer().worker,
        schedule::lease_expiry(now, p.conf().timeout_ms, interval),
    );
    if !schedule::lease_claimable(held, now, p.peer().worker)
        || s.lease
            .compare_exchange(held, mine, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        // Another worker took the round over while this one waited.
        p.set_phase(Phase::Idle);
        return p.arm(now + interval);
    }
    p.restart_clock(now);
    record::debug(p, "dequeued");
    match w {
        Wait::Start => start(p, now),
        Wait::Open => open(p),
    }
}

/// Connect the round's new connection (within what is left of the round).
fn open(p: &mut Probe) {
    match p.open() {
        Opened::Ended(outcome) => finish(p, outcome),
        Opened::Connected(_) => connected(p),
        Opened::InProgress(c) => {
            p.set_phase(Phase::Connecting);
            let left = p.conf().timeout_ms.saturating_sub(p.round().elapsed_ms());
            c.write_timer(left.max(1));
        }
    }
}

/// The socket is connected: the transport's handshake, then the kind.
fn connected(p: &mut Probe) {
    if p.is_tls() {
        p.set_phase(Phase::Handshaking);
        let h = p.start_tls();
        return after_handshake(p, h);
    }
    p.set_phase(Phase::Active);
    let step = p.with_kind(|k, cx| k.on_connected(cx));
    apply(p, step);
}

/// Where the TLS handshake got to: the kind runs once it is done.
pub fn after_handshake(p: &mut Probe, h: Handshake) {
    match h {
        Handshake::Pending => {}
        Handshake::Failed(outcome) => finish(p, outcome),
        Handshake::Done => {
            p.reattach();
            p.set_phase(Phase::Active);
            let step = p.with_kind(|k, cx| k.on_connected(cx));
            apply(p, step);
        }
    }
}

fn apply(p: &mut Probe, step: Option<Step>) {
    match step {
        Some(Step::Pending) => {}
        Some(Step::Done(outcome)) => finish(p, outcome),
        // The kept connection can serve no more: the round goes on, on a
        // new one (whose result counts).
        Some(Step::Reconnect) => {
            p.close_round_conn();
            open_gated(p);
        }
        // No connection: a broken invariant; end the round without a verdict.
        None => finish(p, Outcome::Local(Local::NoConnection)),
    }
}

/// An event of the round's connection `c`.
pub fn on_conn_event(p: &mut Probe, c: Conn, timedout: bool, write: bool) {
    match p.phase() {
        // nginx's SSL layer has the events until it calls back.
        Phase::Idle | Phase::Handshaking | Phase::Queued => {}
        Phase::Connecting if timedout => match p.connect_expired(c) {
            Expired::Connected => connected(p),
            Expired::Failed(outcome) => finish(p, outcome),
            Expired::Rearmed => {}
        },
        Phase::Connecting => {
            let err = c.so_error();
            if err != 0 {
                return finish(p, Outcome::Down(reason_of(err)));
            }
            connected(p);
        }
        Phase::Active => {
            let step = p.with_kind(|k, cx| {
                if timedout {
                    k.on_timeout(cx)
                } else if write {
                    k.on_writable(cx)
                } else {
                    k.on_readable(cx)
                }
            });
            apply(p, step);
        }
    }
}

/// End the round: keep or close its connection, record the outcome, free
/// the lease and look at the schedule again when the next round is due.
pub fn finish(p: &mut Probe, outcome: Outcome) {
    p.end_connection(matches!(outcome, Outcome::Up { .. }));
    let Some(s) = p.slot() else { return };
    match outcome {
        Outcome::Local(err) => record::local_error(p, err),
        Outcome::Up { delay_ms } => record::record(p, RoundResult::Up { delay_ms }),
        Outcome::Down(r) => record::record(p, RoundResult::Down(r)),
    }
    // The interval in force after this round's verdict: `down_interval`
    // for a peer it left down. The lattice goes on from this round's point
    // with that spacing (docs/design.md, How rounds are scheduled).
    let interval = p.interval_now(s);
    let round = p.round();
    s.last_start.store(round.start_msec, Ordering::Relaxed);
    let next = schedule::next_lattice(round.lattice, round.due, round.start_msec, interval);
    s.next_due.store(next, Ordering::Release);
    s.lease.store(0, Ordering::Release);
    if !exiting() {
        let due = schedule::due_at(next, p.jitter_seed(s), p.conf().jitter_ms);
        let at = if p.peer().owner { due } else { due + interval };
        p.arm(at);
    }
}

/// The worker is shutting down (nginx closes idle connections, ours are
/// marked idle): drop the round without counting it and free its lease.
pub fn cancel(p: &mut Probe) {
    p.close_round_conn();
    p.release_lease();
}

/// A handler of this probe panicked (a bug, logged by the guard): drop the
/// round without a verdict and look at the schedule again an interval on,
/// so that the bug costs a round, not the peer's checks.
pub fn recover(p: &mut Probe) {
    let log = p.log();
    crate::ffi::guard(log, "check recovery", (), || {
        cancel(p);
        p.disarm();
        if !exiting() {
            let interval = p.slot().map_or(p.conf().interval_ms, |s| p.interval_now(s));
            p.arm(monotonic_ms() + interval);
        }
    });
}
