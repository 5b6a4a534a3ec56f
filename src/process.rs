//! Per-process state: the worker's view of its checked peers and its
//! probes, built in `init_process`, rebuilt when a single-process nginx
//! (`master_process off`) reloads in place, dropped in `exit_process`.
//!
//! Access is scoped: [`with`] lends the state to a closure and the state
//! cannot be replaced while a loan is out, so no reference into it outlives
//! a rebuild. nginx runs module code on one thread per process.

use core::cell::{Cell, UnsafeCell};
use core::ptr;

use ngx::ffi::{
    ngx_cycle_t, ngx_log_t, ngx_process, ngx_worker, NGX_LOG_ALERT, NGX_LOG_DEBUG, NGX_LOG_WARN,
    NGX_PROCESS_SINGLE,
};

use crate::check::Prober;
use crate::conf::MainConf;
use crate::ffi;
use crate::modules;
use crate::shm::Zone;
use crate::upstream;
use crate::worker::{Context, Worker};
use healthcheck_core::status::Group;

/// Everything a process holds.
struct State {
    /// Held for their `Drop` (which stops them). Probes hold shared
    /// handles to their settings and views of the zone, never references
    /// into `worker`.
    #[expect(dead_code, reason = "owned for Drop only")]
    probers: Vec<Prober>,
    /// `check_state_file` writers (worker 0 only); held for their `Drop`,
    /// which writes the file a last time. Dropped before the worker state
    /// they were built from.
    #[expect(dead_code, reason = "owned for Drop only")]
    writers: Vec<crate::statefile::StateWriter>,
    /// Worker 0's `check_outlier` timer; held for its `Drop`.
    #[expect(dead_code, reason = "owned for Drop only")]
    outliers: Option<crate::ejections::OutlierTimer>,
    /// The look at peers that went down (their idle keepalive
    /// connections close); held for its `Drop`.
    #[expect(dead_code, reason = "owned for Drop only")]
    closer: Option<crate::closer::IdleCloser>,
    worker: Worker,
}

struct Cellar {
    state: UnsafeCell<Option<State>>,
    /// Loans out through `with`.
    loans: Cell<u32>,
}

// SAFETY: nginx calls module code from a single thread per process.
unsafe impl Sync for Cellar {}

static STATE: Cellar = Cellar {
    state: UnsafeCell::new(None),
    loans: Cell::new(0),
};

/// Run `f` with the process's worker state; `None` before `init_process`
/// (the master, `nginx -t`, helper processes) or after exit.
pub fn with<R>(f: impl FnOnce(&Worker) -> R) -> Option<R> {
    struct Loan;
    impl Drop for Loan {
        fn drop(&mut self) {
            STATE.loans.set(STATE.loans.get() - 1);
        }
    }
    STATE.loans.set(STATE.loans.get() + 1);
    let _loan = Loan;
    // SAFETY: single-threaded; `replace` refuses to run while a loan is
    // out, so the state stays put for the closure's duration.
    let state = unsafe { (*STATE.state.get()).as_ref() };
    state.map(|s| f(&s.worker))
}

/// Replace the state (dropping the old one: its probes stop). Refused,
/// with an alert, while a loan from [`with`] is out.
fn replace(log: *mut ngx_log_t, new: Option<State>) -> bool {
    if STATE.loans.get() != 0 {
        ffi::log(
            NGX_LOG_ALERT,
            log,
            format_args!("ngx_healthcheck_module: state replaced while in use (ignored)"),
        );
        return false;
    }
    // SAFETY: single-threaded and no loan is out: nothing refers into the
    // old state.
    let old = unsafe { (*STATE.state.get()).take() };
    drop(old);
    // SAFETY: as above.
    unsafe { *STATE.state.get() = new };
    true
}

/// Whether the health check marks `peer` (an rr peer of `proto` in the rr
/// peer list `list`, 0 if unknown) down: what the selection hooks and the
/// module's own balancer ask before every selection.
///
/// On every selection of every balancer, so it reads the state without a
/// loan: `Context::peer_down` only loads atomics and looks up fixed tables,
/// and cannot reach `replace`.
#[inline]
pub fn peer_down(proto: Group, list: usize, peer: usize) -> bool {
    // SAFETY: single-threaded; the reference does not outlive this call,
    // during which nothing replaces the state (see above).
    let state = unsafe { (*STATE.state.get()).as_ref() };
    state.is_some_and(|s| s.worker.context(proto).peer_down(list, peer))
}

/// `vnswrr`'s question about `peer` (`Context::peer_verdict`): out by
/// its state, held back by a ramp for this request, or open.
pub fn peer_verdict(proto: Group, list: usize, peer: usize) -> Option<bool> {
    // SAFETY: as in `peer_down`.
    let state = unsafe { (*STATE.state.get()).as_ref() };
    state.and_then(|s| s.worker.context(proto).peer_verdict(list, peer))
}

/// Build the state of a worker (or single) process and start its probes.
///
/// # Safety
/// `init_process` of a worker or single process; `cycle` is the running
/// cycle, its configuration complete.
pub unsafe fn init(cycle: &ngx_cycle_t) {
    // SAFETY: per the contract.
    let worker = unsafe { build_worker(cycle) };
    let probers = if cycle.connections.is_null() {
        // A single-process nginx reloaded in place: the new cycle has no
        // connections at all (nginx itself cannot proxy either), so no
        // probe could run. State and status stay available.
        ffi::log(
            NGX_LOG_WARN,
            cycle.log,
            format_args!(
                "health checks stopped: nginx with \"master_process off\" was reloaded in place \
                 and has no connections for probes; restart nginx"
            ),
        );
        Vec::new()
    } else {
        // SAFETY: per the contract.
        unsafe { start_probes(cycle, &worker) }
    };
    for (proto, ctx) in [(Group::Http, &worker.http), (Group::Stream, &worker.stream)] {
        if let Some((slots, peers)) = ctx.mismatch {
            ffi::log(
                NGX_LOG_ALERT,
                cycle.log,
                format_args!(
                    "ngx_healthcheck_module: the {} zone has {slots} slots for {peers} checked \
                     peers: this worker checks none of them (a bug: please report it)",
                    proto.as_str()
                ),
            );
        }
    }
    worker.http.settle_fail_open(cycle.log);
    worker.stream.settle_fail_open(cycle.log);
    // SAFETY: per the contract.
    let first = unsafe { worker_slot(cycle) }.0 == 0;
    let outliers = first
        .then(|| {
            crate::ejections::OutlierTimer::start(
                [&worker.http, &worker.stream],
                with_context,
                cycle.log,
            )
        })
        .flatten();
    let closer = crate::closer::IdleCloser::start(
        [&worker.http, &worker.stream],
        first,
        with_context,
        cycle.log,
    );
    let writers = if first {
        [Group::Http, Group::Stream]
            .into_iter()
            .filter_map(|g| {
                let ctx = worker.context(g);
                let path = ctx.state_file.as_deref()?;
                crate::statefile::StateWriter::start(g, ctx, path, cycle.log)
            })
            .collect()
    } else {
        Vec::new()
    };
    replace(
        cycle.log,
        Some(State {
            probers,
            writers,
            outliers,
            closer,
            worker,
        }),
    );
}

/// A single-process nginx re-read its configuration in place: a new cycle
/// with new zones, and no `init_process`. Called from `init_module` of the
/// new cycle; a process without state (the master, `nginx -t`, the first
/// start) has nothing to rebuild.
///
/// # Safety
/// `init_module`; `cycle` is the new cycle, its zones initialised.
pub unsafe fn reload_in_place(cycle: &ngx_cycle_t) {
    // SAFETY: set by nginx before any module callback.
    let single = unsafe { ngx_process } as u32 == NGX_PROCESS_SINGLE;
    // SAFETY: single-threaded read of whether a state exists.
    let built = unsafe { (*STATE.state.get()).is_some() };
    if !single || !built {
        return;
    }
    // Old probes stop (their connections belong to the old cycle, still
    // running); the new state has none (see `init`).
    replace(cycle.log, None);
    // SAFETY: per the contract.
    unsafe { init(cycle) };
}

/// Drop the state: probes stop, connections close, timers go.
pub fn exit(log: *mut ngx_log_t) {
    replace(log, None);
}

/// Run `f` with `group`'s context of the process's worker state, if any
/// (what the probe engine's timers are given to reach it).
pub fn with_context(group: Group, f: &mut dyn FnMut(&Context)) {
    with(|w| f(w.context(group)));
}

/// Collect both contexts of `cycle`.
///
/// # Safety
/// `cycle` is a cycle whose configuration is complete.
unsafe fn build_worker(cycle: &ngx_cycle_t) -> Worker {
    let mut w = Worker::default();
    for group in [Group::Http, Group::Stream] {
        // SAFETY: per the contract.
        let main_conf = unsafe { modules::main_conf_array(cycle, group) };
        if main_conf.is_null() {
            continue;
        }
        // SAFETY: the context's main_conf array, its configuration complete.
        let ups = unsafe { upstream::of_context(group, main_conf) };
        // SAFETY: our main conf of the context (made by create_main_conf).
        let mcf = unsafe { modules::main_conf::<MainConf>(cycle, group).as_ref() };
        // SAFETY: our zone (if any) was initialised by nginx.
        let zone = mcf.and_then(|m| unsafe { Zone::from_shm_zone(m.zone) });
        let matches = mcf.map_or(&[][..], |m| &m.matches.matches[..]);
        let mut ctx = Context::new(group, zone, &ups, matches, mcf.and_then(|m| m.event_log));
        ctx.state_file = mcf.and_then(|m| m.state_file.get().cloned());
        if let Some(n) = mcf.and_then(|m| m.max_inflight) {
            ctx.max_inflight = n;
        }
        if let Some(l) = mcf.and_then(|m| m.max_connections.get().copied()) {
            ctx.max_connections = l;
        }
        match group {
            Group::Http => w.http = ctx,
            Group::Stream => w.stream = ctx,
        }
    }
    // The configured rows of each context with a zone (resolved addresses
    // are not in `targets`).
    fn rows(c: &Context) -> &[crate::target::Target] {
        match c.zone {
            Some(_) => &c.targets,
            None => &[],
        }
    }
    w.sharing = crate::sharing::Sharing::build([
        (Group::Http, rows(&w.http)),
        (Group::Stream, rows(&w.stream)),
    ]);
    w
}

/// This worker's slot and the number of workers.
///
/// # Safety
/// `cycle` is the running cycle.
unsafe fn worker_slot(cycle: &ngx_cycle_t) -> (u32, u32) {
    // SAFETY: set by nginx before init_process.
    if unsafe { ngx_process } as u32 == NGX_PROCESS_SINGLE {
        return (0, 1);
    }
    // SAFETY: per the contract.
    let workers = unsafe { crate::ffi::worker_processes(cycle) };
    // SAFETY: set by nginx for worker processes.
    (unsafe { ngx_worker } as u32, workers as u32)
}

/// The log probe connections use: a copy of the cycle's log whose level
/// hides nginx's own per-connection "connect() failed" errors (the module
/// reports state changes itself) unless debug logging is on. Static
/// storage, written once per cycle: it is never freed, and no probe of an
/// earlier cycle is left when a single process's in-place reload writes
/// the new cycle's copy (`reload_in_place` drops them first).
fn conn_log(cycle: &ngx_cycle_t) -> *mut ngx_log_t {
    use core::mem::MaybeUninit;
    use core::sync::atomic::{AtomicPtr, Ordering::Relaxed};
    struct LogCell(UnsafeCell<MaybeUninit<ngx_log_t>>);
    // SAFETY: nginx runs module code on one thread per process.
    unsafe impl Sync for LogCell {}
    static CONN_LOG: LogCell = LogCell(UnsafeCell::new(MaybeUninit::uninit()));
    // The cycle it was copied from: the copy points at that cycle's log
    // file, which a single process's in-place reload frees with the old
    // cycle, so a new cycle gets a new copy.
    static FROM: AtomicPtr<ngx_cycle_t> = AtomicPtr::new(ptr::null_mut());
    let made = CONN_LOG.0.get().cast::<ngx_log_t>();
    if FROM.load(Relaxed) == ptr::from_ref(cycle).cast_mut() {
        return made;
    }
    FROM.store(ptr::from_ref(cycle).cast_mut(), Relaxed);
    // SAFETY: the cycle's log is valid.
    let mut l = unsafe { *cycle.log };
    if l.log_level < NGX_LOG_DEBUG as usize {
        l.log_level = l.log_level.min(NGX_LOG_ALERT as usize);
    }
    // SAFETY: the static's storage; single-threaded, and nothing reads it
    // while it is written (see above).
    unsafe { made.write(l) };
    made
}

/// Arm the probe timers of both contexts.
///
/// # Safety
/// Worker process; `cycle` is the running cycle.
unsafe fn start_probes(cycle: &ngx_cycle_t, w: &Worker) -> Vec<Prober> {
    // SAFETY: per the contract.
    let slot = unsafe { worker_slot(cycle) };
    let conn_log = conn_log(cycle);
    [Group::Http, Group::Stream]
        .into_iter()
        // SAFETY: per the contract; both logs live for the process.
        .map(|proto| unsafe { Prober::start(proto, w, slot, (cycle.log, conn_log), with_context) })
        .collect()
}
