//! The probe's event handlers: what nginx calls for its timer, its round's
//! connection, its idle kept connection and a finished TLS handshake. Each
//! turns nginx's pointers into the probe, runs the round driver under the
//! panic guard, and recovers the probe if a handler panicked.

use ngx::ffi::{ngx_connection_t, ngx_event_handler_pt, ngx_event_t};

use super::conn::Conn;
use super::defer;
use super::inflight::Gate;
use super::probe::{Handlers, Probe};
use super::round;
use crate::ffi::guard;

/// The handlers every probe is given.
pub static HANDLERS: Handlers = Handlers {
    timer: Some(ngx_healthcheck_timer_handler),
    conn: Some(ngx_healthcheck_conn_handler),
    idle: Some(ngx_healthcheck_idle_handler),
    handshaked: Some(ngx_healthcheck_tls_handshaked),
};

/// The handler of the `check_max_inflight` gates' posted event.
pub const GATE_HANDLER: ngx_event_handler_pt = Some(ngx_healthcheck_gate_handler);

/// A place of a gate freed up: start the rounds waiting for one.
unsafe extern "C" fn ngx_healthcheck_gate_handler(ev: *mut ngx_event_t) {
    // SAFETY: `data` is the gate owning this event (set by `Gate::new`);
    // a gate unposts its event when it is dropped.
    let (g, log) = unsafe { ((*ev).data.cast::<Gate>(), (*ev).log) };
    // SAFETY: as above.
    let Some(g) = (unsafe { g.as_ref() }) else {
        return;
    };
    while let Some((p, w)) = g.next() {
        // SAFETY: a queued probe is live: it leaves the queue when it stops.
        let p = unsafe { &mut *p.as_ptr().cast::<Probe>() };
        if !guard(log, "check gate", false, || {
            round::resume(p, w);
            true
        }) {
            round::recover(p);
        }
    }
}

unsafe extern "C" fn ngx_healthcheck_timer_handler(ev: *mut ngx_event_t) {
    // SAFETY: `data` is the probe owning this event (set by its spawn).
    let (p, log) = unsafe { ((*ev).data.cast::<Probe>(), (*ev).log) };
    // SAFETY: the probe outlives its timer.
    let Some(p) = (unsafe { p.as_mut() }) else {
        return;
    };
    if !guard(log, "check timer", false, || {
        round::on_timer(p);
        true
    }) {
        round::recover(p);
    }
}

/// The live connection of a connection event, and its probe.
///
/// # Safety
/// `ev` is an event of a connection whose `data` is a live probe.
unsafe fn probe_of<'a>(ev: *mut ngx_event_t) -> Option<(Conn, &'a mut Probe)> {
    // SAFETY: connection events carry their live connection in `data`,
    // whose `data` is the probe (set when the probe attached it); the
    // probe outlives its connections.
    unsafe {
        let c = (*ev).data.cast::<ngx_connection_t>();
        let conn = Conn::from_raw(c)?;
        let p = (*c).data.cast::<Probe>().as_mut()?;
        Some((conn, p))
    }
}

unsafe extern "C" fn ngx_healthcheck_conn_handler(ev: *mut ngx_event_t) {
    // SAFETY: nginx passes a live event; a connection event's `data` is
    // its connection.
    let taken_back = unsafe {
        let c = (*ev).data.cast::<ngx_connection_t>();
        !c.is_null() && (*c).close() != 0
    };
    // This millisecond's events spent: later, from the queue.
    if !taken_back && defer::defer(ev) {
        return;
    }
    // SAFETY: nginx passes a live event.
    let (log, timedout, write) = unsafe { ((*ev).log, (*ev).timedout() != 0, (*ev).write() != 0) };
    // SAFETY: the round's connection events carry the probe.
    let Some((c, p)) = (unsafe { probe_of(ev) }) else {
        return;
    };
    if !guard(log, "check connection", false, || {
        if p.is_round_conn(c) {
            if c.closing() {
                round::cancel(p);
            } else {
                round::on_conn_event(p, c, timedout, write);
            }
        }
        true
    }) {
        round::recover(p);
    }
}

unsafe extern "C" fn ngx_healthcheck_idle_handler(ev: *mut ngx_event_t) {
    // SAFETY: nginx passes a live event.
    let (log, write) = unsafe { ((*ev).log, (*ev).write() != 0) };
    // SAFETY: a kept connection's events carry its probe.
    let Some((c, p)) = (unsafe { probe_of(ev) }) else {
        return;
    };
    guard(log, "kept check connection", (), || {
        if c.closing() {
            // Shutdown: close at once.
            return p.close_kept();
        }
        if !write {
            p.idle_readable(c);
        }
    });
}

unsafe extern "C" fn ngx_healthcheck_tls_handshaked(c: *mut ngx_connection_t) {
    // SAFETY: nginx calls back with the live connection whose data is the
    // probe; the probe outlives its connections.
    let (conn, p, log) = unsafe { (Conn::from_raw(c), (*c).data.cast::<Probe>(), (*c).log) };
    // SAFETY: as above.
    let (Some(conn), Some(p)) = (conn, unsafe { p.as_mut() }) else {
        return;
    };
    if !guard(log, "check TLS handshake", false, || {
        if p.is_round_conn(conn) {
            let result = p.tls_finished(conn);
            round::after_handshake(p, result);
        }
        true
    }) {
        round::recover(p);
    }
}
