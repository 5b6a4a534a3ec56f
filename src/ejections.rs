//! Worker 0's `check_outlier` timer (docs/outliers.md): every few hundred
//! ms it ends the ejections whose time is over and judges the intervals
//! that are over (`crate::outlier`).

use core::mem;
use core::ptr::NonNull;

use healthcheck_core::status::Group;
use ngx::ffi::{ngx_add_timer, ngx_del_timer, ngx_event_t, ngx_log_t};

use crate::ffi::{exiting, guard, unix_ms};
use crate::worker::Context;

/// How the timer reaches a context: runs the function with `group`'s
/// context of the process, if any (`crate::process::with_context`).
pub type WithContext = fn(Group, &mut dyn FnMut(&Context));

/// Worker 0's outlier timer. nginx holds a pointer to it (its event's
/// `data`): it lives in a box that only its `OutlierTimer` frees.
#[repr(C)]
struct Inner {
    /// As `Probe::ident`: nginx's debug log reads the timer's `data`.
    ident: [usize; 4],
    ev: ngx_event_t,
    with_context: WithContext,
    /// Per context, each upstream's interval start.
    starts: [Vec<u64>; 2],
    period: u64,
}

/// The owning handle of worker 0's outlier timer.
pub struct OutlierTimer(NonNull<Inner>);

impl OutlierTimer {
    /// Start the timer if some upstream of `contexts` has `check_outlier`.
    pub fn start(
        contexts: [&Context; 2],
        with_context: WithContext,
        log: *mut ngx_log_t,
    ) -> Option<OutlierTimer> {
        let period = contexts.iter().filter_map(|c| c.outlier_period()).min()?;
        let inner = Box::new(Inner {
            ident: [0, 0, 0, usize::MAX],
            // SAFETY: all-zero is nginx's initial state for an event.
            ev: unsafe { mem::zeroed() },
            with_context,
            starts: [Vec::new(), Vec::new()],
            period,
        });
        let raw = Box::into_raw(inner);
        // SAFETY: just made; nginx's timer points to it until the handle is
        // dropped.
        unsafe {
            (*raw).ev.data = raw.cast();
            (*raw).ev.handler = Some(ngx_healthcheck_outlier_timer);
            (*raw).ev.log = log;
            (*raw).ev.set_cancelable(1);
            ngx_add_timer(&mut (*raw).ev, period as ngx::ffi::ngx_msec_t);
            Some(OutlierTimer(NonNull::new_unchecked(raw)))
        }
    }
}

impl Drop for OutlierTimer {
    fn drop(&mut self) {
        // SAFETY: made by `Box::into_raw` in `start`, freed once here.
        let mut inner = unsafe { Box::from_raw(self.0.as_ptr()) };
        if inner.ev.timer_set() != 0 {
            // SAFETY: the timer's own event.
            unsafe { ngx_del_timer(&mut inner.ev) };
        }
    }
}

unsafe extern "C" fn ngx_healthcheck_outlier_timer(ev: *mut ngx_event_t) {
    // SAFETY: `data` is the timer owning this event (set in `start`).
    let (t, log) = unsafe { ((*ev).data.cast::<Inner>(), (*ev).log) };
    // SAFETY: the timer outlives its event (Drop deletes it first).
    let Some(t) = (unsafe { t.as_mut() }) else {
        return;
    };
    if exiting() {
        return;
    }
    guard(log, "check_outlier", (), || {
        let now = unix_ms();
        for (g, starts) in [Group::Http, Group::Stream].into_iter().zip(&mut t.starts) {
            (t.with_context)(g, &mut |ctx| ctx.outlier_tick(now, starts, log));
        }
    });
    // SAFETY: the timer's own event, not armed (it just fired).
    unsafe { ngx_add_timer(&mut t.ev, t.period as ngx::ffi::ngx_msec_t) };
}
