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
    ngx_http_upstream_srv_conf_t, ngx_module_t, ngx_str_t, ngx_stream_upstream_srv_conf_t, NGX_OK,
};

use crate::enforce::Wrapped;
use crate::ffi::find_global;

/// Where a request's key comes from.
#[derive(Clone, Copy, Debug, Default)]
pub enum Key {
    /// The worker's sequence (weighted balancers).
    #[default]
    Sequence,
    /// The upstream's `hash` key (its first srv conf field, a complex value).
    Http(*mut ngx_http_complex_value_t),
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

/// What the balancers' directive handlers store, learned once (see
/// [`learn`]): the `init_upstream` of `ip_hash`, `hash` and `hash ...
/// consistent`, the keepalive module's, and where its conf keeps the
/// `init_upstream` it wraps (in words). 0: not in this nginx.
#[derive(Clone, Copy, Default)]
struct Learned {
    ip_hash: usize,
    hash: usize,
    chash: usize,
    keepalive: usize,
    keepalive_original: Option<usize>,
}

fn learned() -> Learned {
    static LEARNED: OnceLock<Learned> = OnceLock::new();
    *LEARNED.get_or_init(|| {
        const SENTINEL: usize = 0x5eed_5eed_5eed_5eed;
        let (keepalive, own) = learn(
            c"ngx_http_upstream_keepalive_module",
            &[c"keepalive", c"1"],
            SENTINEL,
        );
        Learned {
            ip_hash: learn(c"ngx_http_upstream_ip_hash_module", &[c"ip_hash"], 0).0,
            hash: learn(c"ngx_http_upstream_hash_module", &[c"hash", c"k"], 0).0,
            chash: learn(
                c"ngx_http_upstream_hash_module",
                &[c"hash", c"k", c"consistent"],
                0,
            )
            .0,
            keepalive,
            keepalive_original: own.iter().position(|&w| w == SENTINEL),
        }
    })
}

/// Run the directive `args[0]` of the http module `module` with `args` on
/// a scratch upstream conf whose `init_upstream` is `before` (0: none) and
/// a scratch conf of the module's own: returns the `init_upstream` it
/// left and the module's conf words. The handlers of `ip_hash`, `hash`
/// (with a constant key, which nginx compiles without the configuration)
/// and `keepalive` store their function, flags and arguments there and
/// nothing else; nginx keeps the functions themselves static.
/// The arguments are NUL-terminated, as nginx's are (handlers compare
/// them with `ngx_strcmp`).
fn learn(module: &CStr, args: &[&'static CStr], before: usize) -> (usize, [usize; 32]) {
    let mut own = [0usize; 32];
    let Some(m) = find_global(module) else {
        return (0, own);
    };
    // SAFETY: a module's command table ends with a null command. The
    // scratch structures are what these handlers read: the conf context's
    // srv conf array at the upstream module's index, and the arguments.
    unsafe {
        let mut cmd: *mut ngx_command_t = (*m.cast::<ngx_module_t>()).commands;
        while let Some(c) = cmd.as_ref() {
            if c.name.len == 0 {
                return (0, own);
            }
            if slice::from_raw_parts(c.name.data, c.name.len) == args[0].to_bytes() {
                break;
            }
            cmd = cmd.add(1);
        }
        let Some(set) = cmd.as_ref().and_then(|c| c.set) else {
            return (0, own);
        };
        let mut scratch: ngx_http_upstream_srv_conf_t = mem::zeroed();
        if before != 0 {
            scratch.peer.init_upstream =
                mem::transmute::<usize, ngx::ffi::ngx_http_upstream_init_pt>(before);
        }
        let index = ngx_http_upstream_module.ctx_index;
        let mut srv: Vec<*mut c_void> = vec![ptr::null_mut(); index + 1];
        srv[index] = (&raw mut scratch).cast();
        let mut ctx: ngx_http_conf_ctx_t = mem::zeroed();
        ctx.srv_conf = srv.as_mut_ptr();
        let mut words: Vec<ngx_str_t> = args
            .iter()
            .map(|a| ngx_str_t {
                len: a.to_bytes().len(),
                data: a.as_ptr().cast_mut().cast(),
            })
            .collect();
        let mut array: ngx_array_t = mem::zeroed();
        array.elts = words.as_mut_ptr().cast();
        array.nelts = words.len();
        array.size = mem::size_of::<ngx_str_t>();
        array.nalloc = words.len();
        let mut cf: ngx_conf_t = mem::zeroed();
        cf.ctx = (&raw mut ctx).cast();
        cf.args = &mut array;
        // A handler that refused would log: through the running cycle's
        // log (no file name without `conf_file`).
        cf.cycle = ngx::ffi::ngx_cycle;
        cf.log = (*ngx::ffi::ngx_cycle).log;
        set(&mut cf, cmd, own.as_mut_ptr().cast());
        let init = scratch.peer.init_upstream.map_or(0, |f| f as usize);
        (init, own)
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
                let l = learned();
                let mut init = us.peer.init_upstream.map_or(0, |f| f as usize);
                // `keepalive` wraps the balancer's: the one it keeps.
                if init != 0 && init == l.keepalive {
                    let ka = find_global(c"ngx_http_upstream_keepalive_module");
                    init = match (ka, l.keepalive_original) {
                        (Some(m), Some(at)) => {
                            let kcf = *us.srv_conf.add((*m.cast::<ngx_module_t>()).ctx_index);
                            kcf.cast::<usize>().add(at).read()
                        }
                        _ => 0,
                    };
                }
                if init == 0 {
                    return Key::Sequence;
                }
                // The key is set only when `hash` is the balancer (the
                // hash module leaves it uninitialised otherwise).
                if init == l.hash || init == l.chash {
                    if let Some(k) = hash_key(us.srv_conf, c"ngx_http_upstream_hash_module") {
                        return Key::Http(k.cast());
                    }
                }
                if init == l.ip_hash {
                    return Key::ClientAddress;
                }
                Key::Sequence
            }
            // Stream's hash conf is not learned here: stream sessions draw
            // from the sequence whatever the balancer (docs/transitions.md).
            Group::Stream => Key::Sequence,
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

/// An upstream whose only reason for the module's `peer.init` is
/// `slow_start` with a balancer that draws from the sequence, in patched
/// mode: the worker puts that `peer.init` in front of the balancer's only
/// while a ramp of the context is active, so that with none the upstream's
/// selection runs exactly as without `slow_start`. The hook notices a ramp
/// (a peer's return time is set) and installs it (`Context::ramp_active`).
#[derive(Clone, Copy)]
pub struct Lazy {
    /// The upstream's srv conf (`ngx_http_upstream_srv_conf_t` or
    /// `ngx_stream_upstream_srv_conf_t`, by the variant of `ours`).
    pub srv: *mut c_void,
    /// The module's `peer.init`.
    pub ours: Wrapped,
    /// The balancer's (or keepalive's) own.
    pub theirs: Wrapped,
}

impl Lazy {
    /// Put the module's `peer.init` in front (`on`) or take it away.
    ///
    /// # Safety
    /// `srv` is the upstream's srv conf, of the variant's context, in the
    /// running configuration; no selection of it is under way but the one
    /// in whose `peer.init` this may run (which already read the field).
    pub unsafe fn set(&self, on: bool) {
        let init = if on { self.ours } else { self.theirs };
        // SAFETY: per the contract.
        unsafe {
            match init {
                Wrapped::Http(f) => {
                    (*self.srv.cast::<ngx_http_upstream_srv_conf_t>()).peer.init = f
                }
                Wrapped::Stream(f) => {
                    (*self.srv.cast::<ngx_stream_upstream_srv_conf_t>())
                        .peer
                        .init = f
                }
            }
        }
    }
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
