//! The probes of a context's resolved addresses (docs/resolved.md), kept in
//! step with the worker's view of them from a timer: a probe for every
//! address with a slot, none for addresses nginx dropped.

use core::mem;
use core::ptr::NonNull;
use core::sync::atomic::Ordering;
use std::collections::HashMap;
use std::rc::Rc;

use healthcheck_core::status::Group;
use ngx::ffi::{ngx_add_timer, ngx_del_timer, ngx_event_t, ngx_log_t};

use super::events::HANDLERS;
use super::inflight::Gates;
use super::probe::ProbeBox;
use crate::ffi::{exiting, guard};
use crate::shm::Zone;
use crate::target::Target;
use crate::worker::Context;

/// How the watch reaches its context from its timer: runs the function
/// with `group`'s context of the process, if any (`crate::process`).
pub type WithContext = fn(Group, &mut dyn FnMut(&Context));

/// How often a worker looks whether nginx changed its resolved peers
/// (one atomic load per resolve upstream), ms: a quarter of the shortest
/// interval of those upstreams, within these bounds. With a new address's
/// first round in the first half of its interval, it is checked within
/// one interval of nginx adding it.
const WATCH_MS: (u64, u64) = (20, 200);

fn watch_ms(ctx: &Context) -> u64 {
    ctx.resolved
        .ups
        .iter()
        .map(|r| r.check.conf.shortest_interval_ms() / 4)
        .min()
        .unwrap_or(WATCH_MS.1)
        .clamp(WATCH_MS.0, WATCH_MS.1)
}

/// The views are rebuilt this often even without a change (slots an
/// interrupted rebuild left are freed then), ms.
const WATCH_FORCE_MS: u64 = 5000;

/// The watch of one context. nginx holds a pointer to it (its timer's
/// `data`): it lives in a box of its own that only its `WatchBox` frees.
#[repr(C)]
struct Watch {
    /// As `Probe::ident`: nginx's debug log reads the timer's `data`.
    ident: [usize; 4],
    ev: ngx_event_t,
    proto: Group,
    zone: Zone,
    slot: (u32, u32),
    logs: (*mut ngx_log_t, *mut ngx_log_t),
    with_context: WithContext,
    /// The context's `check_max_inflight` gates.
    gates: Rc<Gates>,
    /// `(slot index, identity) -> probe`.
    probes: HashMap<(u32, u64), ProbeBox>,
    /// The view's version the probes were last matched with.
    version: u64,
    ticks: u32,
    /// [`watch_ms`].
    period: u64,
}

/// The owning handle of a live watch: dropping it stops its timer and
/// drops its probes.
pub struct WatchBox(NonNull<Watch>);

impl WatchBox {
    /// Start watching `ctx`'s resolved addresses (none without `resolve`
    /// upstreams): their probes now, and a timer.
    pub fn start(
        proto: Group,
        ctx: &Context,
        zone: Zone,
        slot: (u32, u32),
        logs: (*mut ngx_log_t, *mut ngx_log_t),
        with_context: WithContext,
        gates: Rc<Gates>,
    ) -> Option<WatchBox> {
        if ctx.resolved.ups.is_empty() {
            return None;
        }
        let mut w = Box::new(Watch {
            ident: [0, 0, 0, usize::MAX],
            // SAFETY: all-zero is nginx's initial state for an event.
            ev: unsafe { mem::zeroed() },
            proto,
            zone,
            slot,
            logs,
            with_context,
            gates,
            probes: HashMap::new(),
            version: u64::MAX,
            ticks: 0,
            period: watch_ms(ctx),
        });
        // The addresses nginx has now (after a reload: at once).
        ctx.resolved.refresh_all(true);
        w.reconcile(ctx);
        let raw = Box::into_raw(w);
        // SAFETY: just made; nginx's timer points to it until the WatchBox
        // is dropped.
        unsafe {
            (*raw).ev.data = raw.cast();
            (*raw).ev.handler = Some(ngx_healthcheck_watch_handler);
            (*raw).ev.log = logs.0;
            (*raw).ev.set_cancelable(1);
            ngx_add_timer(&mut (*raw).ev, (*raw).period as ngx::ffi::ngx_msec_t);
            Some(WatchBox(NonNull::new_unchecked(raw)))
        }
    }
}

impl Drop for WatchBox {
    fn drop(&mut self) {
        // SAFETY: made by `Box::into_raw` in `start`, freed once here; its
        // handler is not running (drops happen from other events or exit).
        let mut w = unsafe { Box::from_raw(self.0.as_ptr()) };
        if w.ev.timer_set() != 0 {
            // SAFETY: the watch's own timer.
            unsafe { ngx_del_timer(&mut w.ev) };
        }
        // Its probes stop and go with it.
        drop(w);
    }
}

impl Watch {
    /// Match the probes with the view: a probe for every resolved address
    /// with a slot, none for addresses nginx dropped.
    fn reconcile(&mut self, ctx: &Context) {
        let Ok(view) = ctx.resolved.view.try_borrow() else {
            return;
        };
        if view.version == self.version {
            return;
        }
        let want: HashMap<(u32, u64), &Target> = view
            .targets
            .iter()
            .flatten()
            .filter(|d| d.target.check.conf.active)
            .map(|d| ((d.target.index, d.identity), &d.target))
            .collect();
        // Addresses nginx dropped: their probes stop and go.
        self.probes.retain(|k, _| want.contains_key(k));
        for (k, t) in want {
            // The view may be older than the slot: the slot must still be
            // this address's (else the next rebuild sorts it out).
            let current = self
                .zone
                .slot(k.0 as usize)
                .is_some_and(|s| s.identity.load(Ordering::Acquire) == k.1);
            if current && !self.probes.contains_key(&k) {
                let gate = (self.gates.of(&t.check), self.gates.max_connections);
                let p = ProbeBox::spawn(
                    t, self.proto, self.zone, self.slot, self.logs, &HANDLERS, gate,
                );
                self.probes.insert(k, p);
            }
        }
        self.version = view.version;
    }
}

unsafe extern "C" fn ngx_healthcheck_watch_handler(ev: *mut ngx_event_t) {
    // SAFETY: `data` is the watch owning this event (set in `start`).
    let (w, log) = unsafe { ((*ev).data.cast::<Watch>(), (*ev).log) };
    // SAFETY: the watch outlives its timer.
    let Some(w) = (unsafe { w.as_mut() }) else {
        return;
    };
    if exiting() {
        return;
    }
    guard(log, "resolved peers", (), || {
        w.ticks = w.ticks.wrapping_add(1);
        // About every 5 s.
        let force = u64::from(w.ticks) % (WATCH_FORCE_MS / w.period.max(1)).max(1) == 0;
        (w.with_context)(w.proto, &mut |ctx| {
            ctx.resolved.refresh_all(force);
            w.reconcile(ctx);
        });
    });
    // Outside the guard: a bug in one look must not end the watching.
    // SAFETY: the watch's own timer.
    unsafe { ngx_add_timer(&mut w.ev, w.period as ngx::ffi::ngx_msec_t) };
}
