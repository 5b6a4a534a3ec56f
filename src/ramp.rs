//! Which key a request of a `slow_start` upstream carries into selection
//! (docs/transitions.md): hash balancers admit a growing share of their
//! keys, so for `hash KEY` the draw is a hash of the request's key and for
//! `ip_hash` of the client's address; every other balancer (round robin,
//! `least_conn`, `random`, `vnswrr`) takes the worker's sequence. A
//! request keeps its draw through the balancer's retries, so `random`,
//! drawing again past a held-back peer, still meets it held back.

use core::ffi::{c_void, CStr};
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use core::{mem, ptr, slice};
use std::sync::OnceLock;

use healthcheck_core::status::Group;
use ngx::ffi::{
    ngx_array_t, ngx_command_t, ngx_conf_t, ngx_http_complex_value, ngx_http_complex_value_t,
    ngx_http_conf_ctx_t, ngx_http_request_t, ngx_http_upstream_module,
    ngx_http_upstream_srv_conf_t, ngx_module_t, ngx_str_t, ngx_stream_complex_value_t,
    ngx_stream_session_t, ngx_stream_upstream_srv_conf_t, NGX_OK,
};

use crate::ffi::find_global;
use crate::stream_link::ngx_stream_complex_value;

/// Where a request's key comes from.
#[derive(Clone, Copy, Debug, Default)]
pub enum Key {
    /// The worker's sequence (weighted balancers).
    #[default]
    Sequence,
    /// The upstream's `hash` key (its first srv conf field, a complex value).
    Http(*mut ngx_http_complex_value_t),
    Stream(*mut ngx_stream_complex_value_t),
    /// `ip_hash`: the client's address.
    ClientAddress,
}

impl Key {
    /// Whether the draw comes from the request (a hash balancer's key).
    pub fn keyed(self) -> bool {
        !matches!(self, Key::Sequence)
    }
}

/// The `hash` module's srv conf of the upstream `srv`, when its `hash`
/// directive set a key. Both contexts' hash modules keep the key as the
/// first field of their srv conf.
///
/// # Safety
/// `srv_conf` is an upstream's srv conf array of the context of `module`.
unsafe fn hash_key(srv_conf: *mut *mut c_void, module: &CStr) -> Option<*mut c_void> {
    let m = find_global(module)?.cast::<ngx_module_t>();
    // SAFETY: the module's own global; its ctx_index is its srv conf's.
    let conf = unsafe { *srv_conf.add((*m).ctx_index) };
    // SAFETY: the key's value is the first field of the conf (see above);
    // `len` is 0 unless `hash` set it.
    let set = !conf.is_null() && unsafe { (*conf.cast::<ngx_str_t>()).len } > 0;
    set.then_some(conf)
}

/// `ip_hash`'s `init_upstream` (see [`learn_init`]).
fn ip_hash_init() -> Option<usize> {
    static INIT: OnceLock<usize> = OnceLock::new();
    let addr = *INIT.get_or_init(|| learn_init(c"ngx_http_upstream_ip_hash_module"));
    (addr != 0).then_some(addr)
}

/// An http balancer's `init_upstream`, learned by running its directive's
/// handler (public through its module's command table) without arguments
/// on a scratch upstream conf: `ip_hash` only stores its function and
/// flags there. nginx keeps the function itself static. 0 when the module
/// is not in this nginx.
fn learn_init(module: &CStr) -> usize {
    let Some(m) = find_global(module) else {
        return 0;
    };
    // SAFETY: a module's command table ends with a null command; the first
    // is the balancer's directive. The scratch structures are what the
    // handler reads: the conf context's srv conf array at the upstream
    // module's index, and the arguments (the directive's name alone).
    unsafe {
        let cmd: *mut ngx_command_t = (*m.cast::<ngx_module_t>()).commands;
        let Some(set) = cmd.as_ref().and_then(|c| c.set) else {
            return 0;
        };
        let mut scratch: ngx_http_upstream_srv_conf_t = mem::zeroed();
        let index = ngx_http_upstream_module.ctx_index;
        let mut srv: Vec<*mut c_void> = vec![ptr::null_mut(); index + 1];
        srv[index] = (&raw mut scratch).cast();
        let mut ctx: ngx_http_conf_ctx_t = mem::zeroed();
        ctx.srv_conf = srv.as_mut_ptr();
        let mut name = (*cmd).name;
        let mut args: ngx_array_t = mem::zeroed();
        args.elts = (&raw mut name).cast();
        args.nelts = 1;
        args.size = mem::size_of::<ngx_str_t>();
        args.nalloc = 1;
        let mut cf: ngx_conf_t = mem::zeroed();
        cf.ctx = (&raw mut ctx).cast();
        cf.args = &mut args;
        // Room for the module's own srv conf, never written without
        // arguments.
        let mut own = [0usize; 16];
        set(&mut cf, cmd, own.as_mut_ptr().cast());
        scratch.peer.init_upstream.map_or(0, |f| f as usize)
    }
}

/// The key of the upstream whose srv conf is `srv` (configuration time).
///
/// # Safety
/// `srv` is an upstream's srv conf of `proto`, its balancer set up.
pub unsafe fn of_upstream(proto: Group, srv: *mut c_void) -> Key {
    // SAFETY: per the contract.
    unsafe {
        match proto {
            Group::Http => {
                let us = &*srv.cast::<ngx_http_upstream_srv_conf_t>();
                if let Some(k) = hash_key(us.srv_conf, c"ngx_http_upstream_hash_module") {
                    return Key::Http(k.cast());
                }
                let init = us.peer.init_upstream.map(|f| f as usize);
                if init.is_some() && init == ip_hash_init() {
                    return Key::ClientAddress;
                }
                Key::Sequence
            }
            Group::Stream => {
                let us = &*srv.cast::<ngx_stream_upstream_srv_conf_t>();
                match hash_key(us.srv_conf, c"ngx_stream_upstream_hash_module") {
                    Some(k) => Key::Stream(k.cast()),
                    None => Key::Sequence,
                }
            }
        }
    }
}

/// The request's key bytes, in its pool (`None`: the sequence).
///
/// # Safety
/// `r` is a live request of an upstream whose key is `key`.
pub unsafe fn http_key<'a>(key: Key, r: *mut ngx_http_request_t) -> Option<&'a [u8]> {
    // SAFETY: per the contract; the value lives in the request's pool.
    unsafe {
        match key {
            Key::Http(cv) => {
                let mut v: ngx_str_t = mem::zeroed();
                (ngx_http_complex_value(r, cv, &mut v) == NGX_OK as isize).then(|| bytes(&v))
            }
            Key::ClientAddress => Some(bytes(&(*(*r).connection).addr_text)),
            _ => None,
        }
    }
}

/// The session's key bytes (`None`: the sequence).
///
/// # Safety
/// `s` is a live session of an upstream whose key is `key`.
pub unsafe fn stream_key<'a>(key: Key, s: *mut ngx_stream_session_t) -> Option<&'a [u8]> {
    // SAFETY: per the contract.
    unsafe {
        match key {
            Key::Stream(cv) => {
                let mut v: ngx_str_t = mem::zeroed();
                (ngx_stream_complex_value(s, cv, &mut v) == NGX_OK as isize).then(|| bytes(&v))
            }
            _ => None,
        }
    }
}

/// # Safety
/// `s` holds `len` readable bytes at `data` (or is empty).
unsafe fn bytes<'a>(s: &ngx_str_t) -> &'a [u8] {
    if s.data.is_null() || s.len == 0 {
        return &[];
    }
    // SAFETY: per the contract.
    unsafe { slice::from_raw_parts(s.data, s.len) }
}

/// Per context (http, stream), what an upstream with `slow_start` asks
/// before each selection without reaching the worker's state
/// ([`ramp_fast`]): the zone's change counter and the value of it the
/// context last worked its ramps out at, until when a ramp may be active
/// (0 = none), and the request's time and draw, which the selection hook
/// reads. Written by the worker's context (`Context::ramp_active`) and by
/// [`ramp_fast`]; one process, one thread.
struct FastRamp {
    changes: AtomicPtr<AtomicU64>,
    seen: AtomicU64,
    until: AtomicU64,
    now: AtomicU64,
    draw: AtomicU32,
    requests: AtomicU32,
}

static FAST: [FastRamp; 2] = [const {
    FastRamp {
        changes: AtomicPtr::new(ptr::null_mut()),
        seen: AtomicU64::new(u64::MAX),
        until: AtomicU64::new(0),
        now: AtomicU64::new(0),
        draw: AtomicU32::new(0),
        requests: AtomicU32::new(0),
    }
}; 2];

/// A new context of `group`, with its zone's change counter: nothing
/// worked out yet. Returns its index for the other `fast_*` functions.
pub fn fast_reset(group: Group, changes: Option<&AtomicU64>) -> usize {
    let f = &FAST[group as usize];
    let changes = changes.map_or(ptr::null(), |c| c as *const AtomicU64);
    f.changes.store(changes.cast_mut(), Ordering::Relaxed);
    f.seen.store(u64::MAX, Ordering::Relaxed);
    f.until.store(0, Ordering::Relaxed);
    group as usize
}

/// The context worked its ramps out at change count `changes`.
pub fn fast_seen(index: usize, changes: u64) {
    FAST[index].seen.store(changes, Ordering::Relaxed);
}

/// Until when (unix ms) a ramp of the context may be active, 0 = none.
pub fn fast_until(index: usize, until: u64) {
    FAST[index].until.store(until, Ordering::Relaxed);
}

/// The request being balanced is at `now` and takes the next draw of the
/// worker's sequence.
pub fn fast_prepare(index: usize, now: u64) {
    let f = &FAST[index];
    f.now.store(now, Ordering::Relaxed);
    let n = f.requests.load(Ordering::Relaxed).wrapping_add(1);
    f.requests.store(n, Ordering::Relaxed);
    f.draw
        .store(healthcheck_core::ramp::sequence(n), Ordering::Relaxed);
}

/// The request's draw (a hash balancer's key replaces the sequence's).
pub fn fast_set_draw(index: usize, draw: u32) {
    FAST[index].draw.store(draw, Ordering::Relaxed);
}

/// The request's time and draw.
#[inline]
pub fn fast_request(index: usize) -> (u64, u32) {
    let f = &FAST[index];
    (
        f.now.load(Ordering::Relaxed),
        f.draw.load(Ordering::Relaxed),
    )
}

/// What [`ramp_fast`] found.
pub enum Fast {
    /// No ramp is active: nothing to do.
    Idle,
    /// A ramp is active and the request has its time and sequence draw.
    Ready,
    /// A state changed or a ramp ended: ask the context
    /// (`Context::ramp_active`).
    Slow,
}

/// Before an upstream with `slow_start` of `group` balances a request.
#[inline(never)] // its own symbol: scripts/bench-vnswrr counts it
pub fn ramp_fast(group: Group) -> Fast {
    let f = &FAST[group as usize];
    let changes = f.changes.load(Ordering::Relaxed);
    // SAFETY: NULL or the change counter of the context's zone, which
    // outlives the context that set it (set again by each new one).
    let changed = unsafe { changes.as_ref() }
        .is_some_and(|c| c.load(Ordering::Acquire) != f.seen.load(Ordering::Relaxed));
    if changed {
        return Fast::Slow;
    }
    let until = f.until.load(Ordering::Relaxed);
    if until == 0 {
        return Fast::Idle;
    }
    let now = crate::ffi::unix_ms();
    if now >= until {
        return Fast::Slow;
    }
    fast_prepare(group as usize, now);
    Fast::Ready
}
