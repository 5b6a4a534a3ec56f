//! `check_max_inflight`: at most N TLS probes of a worker connecting or
//! handshaking at once, and at most N rounds starting in one millisecond
//! of nginx's clock, so one turn of the event loop (which has one reading
//! of the clock) starts at most N; rounds that waited through a long turn
//! (over 3 ms) catch up (docs/directives.md, check_max_inflight). A round past either
//! bound waits in a queue, in order: to start, or (a TLS round) to open its
//! connection. A freed place
//! lets the next one go from an event posted to nginx's `ngx_posted_events`
//! (a start never runs inside another probe's handler); a spent budget,
//! from the same event as a 1 ms timer. A queued round's timeout starts
//! when it leaves the queue: waiting is not a failure.
//!
//! One gate per http or stream block, shared by the probes of its
//! upstreams; an upstream with its own `check_max_inflight` has its own.

use core::cell::{Cell, RefCell, UnsafeCell};
use core::ffi::c_void;
use core::ptr::{self, NonNull};
use std::rc::Rc;

pub use healthcheck_core::inflight::Wait;
use healthcheck_core::inflight::{Limiter, Wake};
use ngx::ffi::{
    ngx_add_timer, ngx_del_timer, ngx_delete_posted_event, ngx_event_handler_pt, ngx_event_t,
    ngx_log_t, ngx_post_event, ngx_posted_events,
};

use crate::ffi::{exiting, monotonic_ms};
use crate::target::UpstreamCheck;

/// One limit and its queue (of probes, as the opaque pointers nginx's
/// events carry).
pub struct Gate {
    limits: RefCell<Limiter<NonNull<c_void>>>,
    /// Posted (or a 1 ms timer) when waiting rounds may go on; its `data`
    /// is the gate (an `Rc`'s allocation: it does not move).
    ev: UnsafeCell<ngx_event_t>,
}

impl Gate {
    /// A gate of `cap` places (0: no limit); `handler` starts the waiting
    /// rounds (it calls [`Gate::next`]).
    pub fn new(cap: u32, handler: ngx_event_handler_pt, log: *mut ngx_log_t) -> Rc<Gate> {
        let g = Rc::new(Gate {
            limits: RefCell::new(Limiter::new(cap)),
            // SAFETY: all-zero is nginx's initial state for an event.
            ev: UnsafeCell::new(unsafe { core::mem::zeroed() }),
        });
        // SAFETY: the gate's own event, not yet known to nginx.
        unsafe {
            let ev = &mut *g.ev.get();
            ev.data = Rc::as_ptr(&g).cast_mut().cast();
            ev.handler = handler;
            ev.log = log;
            ev.set_cancelable(1);
        }
        g
    }

    /// May a round start now (counted against this millisecond's budget)?
    /// False when the budget is spent or older rounds wait: the round then
    /// [`wait`](Gate::wait)s with [`Wait::Start`].
    pub fn start(&self) -> bool {
        self.limits.borrow_mut().start(monotonic_ms())
    }

    /// Take a place for a round about to connect; false when there is none
    /// (the round then waits with [`Wait::Open`]).
    pub fn enter(&self) -> bool {
        self.limits.borrow_mut().enter()
    }

    /// Queue `p` (after a refused [`start`](Gate::start) or
    /// [`enter`](Gate::enter)).
    pub fn wait(&self, p: NonNull<c_void>, w: Wait) {
        self.limits.borrow_mut().wait(p, w);
        self.wake();
    }

    /// A round gives its place back (connected, handshaken or ended).
    pub fn leave(&self) {
        self.limits.borrow_mut().leave();
        self.wake();
    }

    /// `p` stops waiting (its probe stops).
    pub fn forget(&self, p: NonNull<c_void>) {
        self.limits.borrow_mut().forget(p);
    }

    /// The next waiting round that may go on now, what it waited for
    /// given (a start counted, a place taken); None when the oldest must
    /// wait longer (the gate wakes again when it may) or the worker is
    /// exiting.
    pub fn next(&self) -> Option<(NonNull<c_void>, Wait)> {
        if exiting() {
            return None;
        }
        let next = self.limits.borrow_mut().next(monotonic_ms());
        if next.is_none() {
            self.wake();
        }
        next
    }

    /// Run the handler when the oldest waiting round may go on: at once
    /// (posted: later in this turn), in 1 ms (a spent budget), or when a
    /// place is given back ([`leave`](Gate::leave)).
    fn wake(&self) {
        let wake = self.limits.borrow_mut().wake(monotonic_ms());
        let ev = self.ev.get();
        // SAFETY: the gate's event; nginx's posted queue and timers of this
        // process. `Drop` removes it from both.
        unsafe {
            if (*ev).posted() != 0 {
                return;
            }
            match wake {
                Wake::Ready => {
                    if (*ev).timer_set() != 0 {
                        ngx_del_timer(ev);
                    }
                    ngx_post_event(ev, ptr::addr_of_mut!(ngx_posted_events));
                }
                Wake::NextMs if (*ev).timer_set() == 0 => ngx_add_timer(ev, 1),
                Wake::Idle | Wake::NextMs | Wake::OnLeave => {}
            }
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let ev = self.ev.get_mut();
        // SAFETY: posted or armed by `wake`, still queued.
        unsafe {
            if ev.posted() != 0 {
                ngx_delete_posted_event(ev);
            }
            if ev.timer_set() != 0 {
                ngx_del_timer(ev);
            }
        }
    }
}

/// How many connections this worker's checks hold: the rounds' own and
/// those kept between rounds (`check_max_connections`).
pub struct Held(Cell<usize>);

// SAFETY: nginx runs module code on one thread per process.
unsafe impl Sync for Held {}

/// This process's count.
pub static HELD: Held = Held(Cell::new(0));

impl Held {
    pub fn get(&self) -> usize {
        self.0.get()
    }

    /// A probe held `from` connections and holds `to` now.
    pub fn moved(&self, from: u8, to: u8) {
        let n = self.0.get() + usize::from(to);
        self.0.set(n.saturating_sub(usize::from(from)));
    }
}

/// The gates of one context in one worker: the block's, and those of the
/// upstreams with their own limit (keyed by the upstream's settings).
pub struct Gates {
    /// `check_max_connections` of the context, as a number.
    pub max_connections: usize,
    block: Rc<Gate>,
    own: RefCell<Vec<(Rc<UpstreamCheck>, Rc<Gate>)>>,
    handler: ngx_event_handler_pt,
    log: *mut ngx_log_t,
}

impl Gates {
    pub fn new(
        (block_cap, max_connections): (u32, usize),
        handler: ngx_event_handler_pt,
        log: *mut ngx_log_t,
    ) -> Gates {
        Gates {
            max_connections,
            block: Gate::new(block_cap, handler, log),
            own: RefCell::new(Vec::new()),
            handler,
            log,
        }
    }

    /// The gate of an upstream's probes.
    pub fn of(&self, check: &Rc<UpstreamCheck>) -> Rc<Gate> {
        let Some(cap) = check.max_inflight else {
            return Rc::clone(&self.block);
        };
        let mut own = self.own.borrow_mut();
        if let Some((_, g)) = own.iter().find(|(k, _)| Rc::ptr_eq(k, check)) {
            return Rc::clone(g);
        }
        let g = Gate::new(cap, self.handler, self.log);
        own.push((Rc::clone(check), Rc::clone(&g)));
        g
    }
}
