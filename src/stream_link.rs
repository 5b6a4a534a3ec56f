//! nginx's stream symbols, found at run time instead of linked.
//!
//! nginx has stream built in, built as a module of its own
//! (`--with-stream=dynamic`: Debian's `libnginx-mod-stream` installs
//! `ngx_stream_module.so`), or not at all. A direct reference to a stream
//! symbol would make `load_module` of this module fail with "undefined
//! symbol" in the last two cases, even for a configuration that checks http
//! upstreams only. So the stream symbols the module needs are looked up with
//! `dlsym` (README.md, Stream as a dynamic module): nginx `dlopen`s
//! modules `RTLD_GLOBAL`, so once `load_module .../ngx_stream_module.so;`
//! came before ours, its symbols are in the global scope like the binary's.
//! Without stream nginx never calls the module's stream callbacks (there is
//! no `stream {}` block), and [`module_indices`] says so to the process
//! setup.
//!
//! The module structs are looked up on each (rare, configuration- or
//! process-time) use. The three round-robin functions vnswrr calls per
//! stream session are cached: [`refresh`] looks them up again at the start
//! of every stream configuration (our stream preconfiguration) and when a
//! process starts, so a cached address always belongs to the
//! `ngx_stream_module.so` of the cycle that runs.

use core::ffi::{c_void, CStr};
use core::mem;
use core::sync::atomic::{AtomicPtr, Ordering};

use ngx::ffi::{
    ngx_conf_t, ngx_int_t, ngx_module_t, ngx_peer_connection_t, ngx_stream_session_t,
    ngx_stream_upstream_srv_conf_t, NGX_ERROR,
};

use crate::ffi::find_global;

const STREAM_MODULE: &CStr = c"ngx_stream_module";
const STREAM_UPSTREAM_MODULE: &CStr = c"ngx_stream_upstream_module";

type InitRr =
    unsafe extern "C" fn(*mut ngx_conf_t, *mut ngx_stream_upstream_srv_conf_t) -> ngx_int_t;
type InitRrPeer = unsafe extern "C" fn(
    *mut ngx_stream_session_t,
    *mut ngx_stream_upstream_srv_conf_t,
) -> ngx_int_t;
type GetRr = unsafe extern "C" fn(*mut ngx_peer_connection_t, *mut c_void) -> ngx_int_t;

/// A function of `ngx_stream_module.so` (or of the binary), cached.
struct Cached {
    name: &'static CStr,
    addr: AtomicPtr<c_void>,
}

impl Cached {
    const fn new(name: &'static CStr) -> Self {
        Self {
            name,
            addr: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    fn refresh(&self) {
        let p = find_global(self.name).unwrap_or(core::ptr::null_mut());
        self.addr.store(p, Ordering::Relaxed);
    }

    fn get(&self) -> Option<*mut c_void> {
        let p = self.addr.load(Ordering::Relaxed);
        (!p.is_null()).then_some(p)
    }
}

static INIT_RR: Cached = Cached::new(c"ngx_stream_upstream_init_round_robin");
static INIT_RR_PEER: Cached = Cached::new(c"ngx_stream_upstream_init_round_robin_peer");
static GET_RR: Cached = Cached::new(c"ngx_stream_upstream_get_round_robin_peer");

/// Look the cached functions up again (see the module docs for when).
pub fn refresh() {
    for f in [&INIT_RR, &INIT_RR_PEER, &GET_RR] {
        f.refresh();
    }
}

/// `ngx_stream_module`, the stream core module, when this nginx has stream.
pub fn stream_module() -> Option<&'static ngx_module_t> {
    // SAFETY: the symbol, where it exists, is nginx's `ngx_module_t`; it
    // lives as long as the cycle that loaded it, which outlives every
    // configuration- and process-time use here.
    find_global(STREAM_MODULE).map(|p| unsafe { &*p.cast::<ngx_module_t>() })
}

/// `ngx_stream_upstream_module`, when this nginx has stream.
pub fn stream_upstream_module() -> Option<&'static ngx_module_t> {
    // SAFETY: as in `stream_module`.
    find_global(STREAM_UPSTREAM_MODULE).map(|p| unsafe { &*p.cast::<ngx_module_t>() })
}

/// (`ngx_stream_module.index`, `ngx_stream_upstream_module.ctx_index`):
/// where the stream configuration sits in a cycle and where the upstream
/// module's main conf sits in it; `None` without stream.
pub fn module_indices() -> Option<(usize, usize)> {
    Some((stream_module()?.index, stream_upstream_module()?.ctx_index))
}

/// nginx's `ngx_stream_upstream_init_round_robin`; `NGX_ERROR` if stream
/// is absent (nginx never calls a stream `init_upstream` then).
///
/// # Safety
/// As for the C function.
pub unsafe fn ngx_stream_upstream_init_round_robin(
    cf: *mut ngx_conf_t,
    us: *mut ngx_stream_upstream_srv_conf_t,
) -> ngx_int_t {
    match INIT_RR.get() {
        // SAFETY: the address of nginx's function with this signature.
        Some(p) => unsafe { mem::transmute::<*mut c_void, InitRr>(p)(cf, us) },
        None => NGX_ERROR as ngx_int_t,
    }
}

/// nginx's `ngx_stream_upstream_init_round_robin_peer`.
///
/// # Safety
/// As for the C function.
pub unsafe fn ngx_stream_upstream_init_round_robin_peer(
    s: *mut ngx_stream_session_t,
    us: *mut ngx_stream_upstream_srv_conf_t,
) -> ngx_int_t {
    match INIT_RR_PEER.get() {
        // SAFETY: as above.
        Some(p) => unsafe { mem::transmute::<*mut c_void, InitRrPeer>(p)(s, us) },
        None => NGX_ERROR as ngx_int_t,
    }
}

/// nginx's `ngx_stream_upstream_get_round_robin_peer`.
///
/// # Safety
/// As for the C function.
pub unsafe fn ngx_stream_upstream_get_round_robin_peer(
    pc: *mut ngx_peer_connection_t,
    data: *mut c_void,
) -> ngx_int_t {
    match GET_RR.get() {
        // SAFETY: as above.
        Some(p) => unsafe { mem::transmute::<*mut c_void, GetRr>(p)(pc, data) },
        None => NGX_ERROR as ngx_int_t,
    }
}
