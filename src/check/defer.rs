//! Bounded turns (docs/design.md, Bounded turns): at most
//! [`EVENTS_PER_MS`] events of the rounds' connections are handled in one
//! millisecond of nginx's clock; the rest wait, in the order they came, in
//! a queue of this process and are handled from a 1 ms timer. A server
//! that dies closes every connection it holds at once (hundreds, with
//! thousands of peers), and nginx hands all of them to one turn of its
//! event loop; handled there, their rounds' ends would make that turn as
//! long as the starts `check_max_inflight` bounds. Once events wait, new
//! ones queue behind them; milliseconds waited are caught up on as the
//! starts' are (a worker whose turns are long keeps its rate).
//!
//! The queue holds nginx events posted to it with nginx's own
//! `ngx_post_event`: a connection closed while its event waits is taken out
//! by `ngx_close_connection` (and by `Conn::clear_events` for a spare), as
//! from nginx's own posted queues, so nothing in the queue outlives its
//! connection. An event runs its handler as it is when it leaves the queue.
//! The wait is part of the round (its timeout runs on).

use core::cell::UnsafeCell;
use core::ptr::{self, addr_of_mut};

use healthcheck_core::inflight::EventBudget;
use ngx::ffi::{
    ngx_add_timer, ngx_cycle, ngx_delete_posted_event, ngx_event_t, ngx_post_event, ngx_queue_t,
};

use crate::ffi::{exiting, guard, monotonic_ms};

/// Events of the rounds' connections handled in one millisecond: 32,000 a
/// second, three or four a round, far above what thousands of peers need.
pub const EVENTS_PER_MS: u64 = 32;

#[repr(C)]
struct Deferred {
    /// As `Probe::ident`: nginx's debug log reads the timer's `data`.
    ident: [usize; 4],
    /// Head of the queue (a sentinel; initialised on first use, as the
    /// process's static it does not move).
    queue: ngx_queue_t,
    /// The 1 ms timer that drains it.
    ev: ngx_event_t,
    budget: EventBudget,
    /// The timer's drain is running the events' handlers.
    draining: bool,
    ready: bool,
}

struct Cell(UnsafeCell<Deferred>);

// SAFETY: nginx runs module code on one thread per process.
unsafe impl Sync for Cell {}

static DEFERRED: Cell = Cell(UnsafeCell::new(Deferred {
    ident: [0, 0, 0, usize::MAX],
    queue: ngx_queue_t {
        prev: ptr::null_mut(),
        next: ptr::null_mut(),
    },
    // SAFETY: all-zero is nginx's initial state for an event.
    ev: unsafe { core::mem::zeroed() },
    budget: EventBudget::new(EVENTS_PER_MS),
    draining: false,
    ready: false,
}));

/// This process's queue, set up on first use.
fn deferred() -> *mut Deferred {
    let d = DEFERRED.0.get();
    // SAFETY: one thread; the fields are only reached through this pointer
    // and never borrowed across a handler call.
    unsafe {
        if !(*d).ready {
            let q = addr_of_mut!((*d).queue);
            (*q).prev = q;
            (*q).next = q;
            let ev = addr_of_mut!((*d).ev);
            (*ev).data = d.cast();
            (*ev).handler = Some(ngx_healthcheck_deferred_handler);
            (*ev).set_cancelable(1);
            (*d).ready = true;
        }
    }
    d
}

/// Whether `ev` (a round connection's event, about to be handled) waits
/// instead: this millisecond's events are spent, or older ones wait. It
/// is then queued (its handler runs from the timer) and the caller
/// returns. Never for a connection nginx is taking back (`close` set):
/// nginx wants it closed by the handler it calls.
pub fn defer(ev: *mut ngx_event_t) -> bool {
    if exiting() {
        return false;
    }
    let d = deferred();
    // SAFETY: as in `deferred`; `ev` is a live event of a live connection
    // (the caller's), not posted anywhere else: nginx runs a posted event
    // only after taking it off its queue.
    unsafe {
        if (*d).draining {
            return false;
        }
        let q = addr_of_mut!((*d).queue);
        let waiting = first(q).is_some();
        if !waiting && (*d).budget.take(monotonic_ms(), false) {
            return false;
        }
        // Already waiting (its timer fired meanwhile): it keeps its place.
        ngx_post_event(ev, q);
        arm(d);
    }
    true
}

/// Arm the drain's timer, if it is not.
///
/// # Safety
/// `d` is [`deferred`]'s.
unsafe fn arm(d: *mut Deferred) {
    // SAFETY: the process's own timer event; its log is the running
    // cycle's (set anew: a cycle's log goes with it).
    unsafe {
        let timer = addr_of_mut!((*d).ev);
        if (*timer).timer_set() == 0 {
            (*timer).log = (*ngx_cycle).log;
            ngx_add_timer(timer, 1);
        }
    }
}

/// Clears `draining` however the drain ends.
struct Draining(*mut Deferred);

impl Drop for Draining {
    fn drop(&mut self) {
        // SAFETY: `deferred`'s, as it was set.
        unsafe { (*self.0).draining = false };
    }
}

/// The 1 ms timer: run the waiting events while the budget lasts.
unsafe extern "C" fn ngx_healthcheck_deferred_handler(timer: *mut ngx_event_t) {
    // SAFETY: nginx passes the live timer event; the log is the cycle's.
    let log = unsafe { (*timer).log };
    guard(log, "check deferred events", (), || {
        let d = deferred();
        // SAFETY: as in `deferred`. Each event is taken off the queue
        // before its handler runs; a handler may close connections, which
        // takes their events off the queue, so the head is read anew each
        // time.
        unsafe {
            let q = addr_of_mut!((*d).queue);
            (*d).draining = true;
            let drain = Draining(d);
            while let Some(ev) = first(q) {
                if !exiting() && !(*d).budget.take(monotonic_ms(), true) {
                    break;
                }
                ngx_delete_posted_event(ev);
                if let Some(h) = (*ev).handler {
                    h(ev);
                }
            }
            drop(drain);
            if first(q).is_some() {
                arm(d);
            }
        }
    });
}

/// The oldest waiting event, if any.
///
/// # Safety
/// `q` is [`deferred`]'s queue head, set up.
unsafe fn first(q: *mut ngx_queue_t) -> Option<*mut ngx_event_t> {
    // SAFETY: the queue links posted events by their `queue` field.
    unsafe {
        let link = (*q).next;
        (link != q).then(|| {
            link.cast::<u8>()
                .sub(core::mem::offset_of!(ngx_event_t, queue))
                .cast::<ngx_event_t>()
        })
    }
}
