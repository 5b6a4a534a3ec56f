//! ngx_healthcheck_module: active TCP/UDP health checks for http and stream
//! upstreams, a status page, and the vnswrr balancer, in one nginx dynamic
//! module. This file holds only the nginx module tables and the callbacks
//! that connect them to the rest of the crate.
#![allow(non_upper_case_globals)]

mod check;
mod conf;
mod ffi;
mod hooks;
mod shm;
mod status;
mod upstream;
mod vnswrr;
mod worker;

use core::ffi::{c_char, c_void};
use core::ptr;
use core::sync::atomic::{AtomicPtr, Ordering};

use ngx::core::{Pool, NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::ffi::{
    ngx_command_t, ngx_conf_t, ngx_core_conf_t, ngx_core_module, ngx_cycle_t, ngx_http_conf_ctx_t,
    ngx_http_core_loc_conf_t, ngx_http_core_module, ngx_http_module, ngx_http_module_t,
    ngx_http_request_t, ngx_http_upstream_main_conf_t, ngx_http_upstream_module, ngx_int_t,
    ngx_module_t, ngx_process, ngx_stream_conf_ctx_t, ngx_stream_module, ngx_stream_module_t,
    ngx_stream_upstream_main_conf_t, ngx_stream_upstream_module, ngx_uint_t, ngx_worker,
    NGX_CONF_1MORE, NGX_CONF_NOARGS, NGX_CONF_TAKE1, NGX_ERROR, NGX_HTTP_LOC_CONF,
    NGX_HTTP_MAIN_CONF, NGX_HTTP_MODULE, NGX_HTTP_UPS_CONF, NGX_LOG_ALERT, NGX_LOG_DEBUG,
    NGX_LOG_EMERG, NGX_LOG_WARN, NGX_OK, NGX_PROCESS_SINGLE, NGX_PROCESS_WORKER,
    NGX_STREAM_MAIN_CONF, NGX_STREAM_MODULE, NGX_STREAM_UPS_CONF,
};
use ngx::ngx_string;

use crate::conf::{LocConf, MainConf, UpsConf};
use crate::upstream::Proto;
use crate::worker::{Context, Worker, WORKER};

// nginx's conf-offset macros (offsetof into ngx_http_conf_ctx_t etc.).
const MAIN_CONF_OFFSET: ngx_uint_t = 0;
const SRV_CONF_OFFSET: ngx_uint_t = core::mem::size_of::<*mut c_void>() as ngx_uint_t;
const LOC_CONF_OFFSET: ngx_uint_t = 2 * core::mem::size_of::<*mut c_void>() as ngx_uint_t;

fn alloc<T: Default>(cf: *mut ngx_conf_t) -> *mut c_void {
    // SAFETY: nginx passes a valid cf with its pool.
    unsafe { Pool::from_ngx_pool((*cf).pool) }
        .allocate(T::default())
        .cast()
}

unsafe extern "C" fn create_main_conf(cf: *mut ngx_conf_t) -> *mut c_void {
    alloc::<MainConf>(cf)
}

unsafe extern "C" fn create_srv_conf(cf: *mut ngx_conf_t) -> *mut c_void {
    alloc::<UpsConf>(cf)
}

unsafe extern "C" fn create_loc_conf(cf: *mut ngx_conf_t) -> *mut c_void {
    alloc::<LocConf>(cf)
}

/// Refuse to run in an nginx without the patch: checks that silently never
/// affect balancing would be worse than no checks.
fn preconfiguration(cf: *mut ngx_conf_t, proto: Proto) -> ngx_int_t {
    match hooks::require_patch(proto) {
        Ok(()) => NGX_OK as ngx_int_t,
        Err(msg) => {
            ngx::ngx_conf_log_error!(NGX_LOG_EMERG, cf, "{}", msg);
            NGX_ERROR as ngx_int_t
        }
    }
}

unsafe extern "C" fn ngx_http_upstream_check_preconf(cf: *mut ngx_conf_t) -> ngx_int_t {
    preconfiguration(cf, Proto::Http)
}

unsafe extern "C" fn ngx_stream_upstream_check_preconf(cf: *mut ngx_conf_t) -> ngx_int_t {
    preconfiguration(cf, Proto::Stream)
}

/// Upstreams of a context, read from a conf ctx's `main_conf` array.
///
/// # Safety
/// `main_conf` is the context's main_conf array, or NULL.
unsafe fn upstreams_of(proto: Proto, main_conf: *mut *mut c_void) -> Vec<upstream::UpstreamRef> {
    if main_conf.is_null() {
        return Vec::new();
    }
    // SAFETY: the arrays hold one entry per module of the context.
    unsafe {
        match proto {
            Proto::Http => {
                let umcf = *main_conf.add(ngx_http_upstream_module.ctx_index);
                upstream::http_upstreams(
                    umcf.cast::<ngx_http_upstream_main_conf_t>(),
                    &*ptr::addr_of!(ngx_http_upstream_check_module),
                )
            }
            Proto::Stream => {
                let umcf = *main_conf.add(ngx_stream_upstream_module.ctx_index);
                upstream::stream_upstreams(
                    umcf.cast::<ngx_stream_upstream_main_conf_t>(),
                    &*ptr::addr_of!(ngx_stream_upstream_check_module),
                )
            }
        }
    }
}

unsafe fn init_main(
    cf: *mut ngx_conf_t,
    conf: *mut c_void,
    proto: Proto,
    tag: *mut ngx_module_t,
) -> *mut c_char {
    // SAFETY: nginx passes our main conf and the context's cf.
    let mcf = unsafe { &mut *conf.cast::<MainConf>() };
    // SAFETY: cf->ctx is the context's conf ctx; main_conf is its first field
    // in both ngx_http_conf_ctx_t and ngx_stream_conf_ctx_t.
    let main_conf = unsafe { *(*cf).ctx.cast::<*mut *mut c_void>() };
    // SAFETY: see above.
    let ups = unsafe { upstreams_of(proto, main_conf) };
    // SAFETY: cf is the context being finished; tag is our module.
    let r = ffi::guard(unsafe { (*cf).log }, "configuration", Err(()), || unsafe {
        conf::finish_context(cf, proto, mcf, &ups, tag)
    });
    match r {
        Ok(()) => NGX_CONF_OK,
        Err(()) => NGX_CONF_ERROR,
    }
}

unsafe extern "C" fn ngx_http_upstream_check_init_main_conf(
    cf: *mut ngx_conf_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's init_main_conf contract.
    unsafe {
        init_main(
            cf,
            conf,
            Proto::Http,
            ptr::addr_of_mut!(ngx_http_upstream_check_module),
        )
    }
}

unsafe extern "C" fn ngx_stream_upstream_check_init_main_conf(
    cf: *mut ngx_conf_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's init_main_conf contract.
    unsafe {
        init_main(
            cf,
            conf,
            Proto::Stream,
            ptr::addr_of_mut!(ngx_stream_upstream_check_module),
        )
    }
}

unsafe extern "C" fn ngx_http_healthcheck_status(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    let rv = unsafe { conf::set_status(cf, conf) };
    if rv != NGX_CONF_OK {
        return rv;
    }
    // SAFETY: in a location, cf->ctx is an ngx_http_conf_ctx_t whose
    // loc_conf array holds the core module's location conf.
    unsafe {
        let ctx = (*cf).ctx.cast::<ngx_http_conf_ctx_t>();
        let clcf = (*(*ctx).loc_conf.add(ngx_http_core_module.ctx_index))
            .cast::<ngx_http_core_loc_conf_t>();
        (*clcf).handler = Some(status::ngx_http_healthcheck_status_handler);
    }
    NGX_CONF_OK
}

/// The `healthcheck_status` format of the request's location.
///
/// # Safety
/// `r` is a live request.
unsafe fn status_format(r: &ngx_http_request_t) -> Option<healthcheck_core::status::Format> {
    // SAFETY: loc_conf holds one entry per http module.
    let lcf =
        unsafe { *r.loc_conf.add(ngx_http_upstream_check_module.ctx_index) }.cast::<LocConf>();
    // SAFETY: our loc conf, allocated by create_loc_conf.
    unsafe { lcf.as_ref() }.and_then(|c| c.status)
}

unsafe extern "C" fn ngx_http_upstream_check_init_process(cycle: *mut ngx_cycle_t) -> ngx_int_t {
    // Workers only: never the master, `nginx -t`, cache manager or loader.
    // SAFETY: set by nginx before init_process.
    let process = unsafe { ngx_process } as u32;
    if process != NGX_PROCESS_WORKER && process != NGX_PROCESS_SINGLE {
        return NGX_OK as ngx_int_t;
    }
    // SAFETY: nginx passes the running cycle.
    let Some(cycle) = (unsafe { cycle.as_ref() }) else {
        return NGX_ERROR as ngx_int_t;
    };
    ffi::guard(cycle.log, "init_process", NGX_ERROR as ngx_int_t, || {
        // SAFETY: worker process; the cycle's configuration is complete.
        unsafe { start_state(cycle) };
        NGX_OK as ngx_int_t
    })
}

/// The cycle this process's state was built for.
static BUILT_FOR: AtomicPtr<ngx_cycle_t> = AtomicPtr::new(ptr::null_mut());

/// Build the process's peer table, set the hooks and arm the probes.
///
/// # Safety
/// Worker (or single) process; `cycle` is the running cycle; no reference
/// into WORKER or PROBERS is alive.
unsafe fn start_state(cycle: &ngx_cycle_t) {
    // SAFETY: per the contract.
    unsafe {
        WORKER.set(Some(build_worker(cycle)));
        hooks::install();
    }
    BUILT_FOR.store(ptr::from_ref(cycle).cast_mut(), Ordering::Release);
    if cycle.connections.is_null() {
        // nginx reloaded a single-process instance in place: the new cycle
        // has no connections at all (nginx itself cannot proxy either), so
        // no probe could run. State and status stay available.
        ffi::log(
            NGX_LOG_WARN,
            cycle.log,
            format_args!(
                "health checks stopped: nginx with \"master_process off\" was reloaded in place \
                 and has no connections for probes; restart nginx"
            ),
        );
        return;
    }
    // SAFETY: per the contract.
    unsafe { start_probes(cycle) };
}

/// A single-process nginx (`master_process off`) reloads in place: a new
/// cycle, new zones, and no `init_process`. Every entry point of the module
/// calls this first; when the cycle changed, the old probes are stopped and
/// the state is rebuilt for the new cycle. Returns `true` when it rebuilt:
/// the caller (possibly an old probe's handler) must then return at once.
pub(crate) fn refresh_if_reloaded() -> bool {
    let built = BUILT_FOR.load(Ordering::Acquire);
    // SAFETY: nginx's current cycle.
    let current = unsafe { *ptr::addr_of!(ngx::ffi::ngx_cycle) };
    if built.is_null() || current.is_null() || ptr::eq(built, current) {
        return false;
    }
    // SAFETY: single-threaded; the callers hold no reference into the
    // state. The old probers are stopped (their connections and timers
    // gone) and then leaked, because the caller may be running inside one
    // of their handlers; this happens once per in-place reload.
    unsafe {
        if let Some(mut old) = (*PROBERS.0.get()).take() {
            for p in old.iter_mut() {
                p.stop();
            }
            core::mem::forget(old);
        }
        start_state(&*current);
    }
    true
}

/// Collect both contexts of the running cycle.
///
/// # Safety
/// `cycle` is the running cycle.
unsafe fn build_worker(cycle: &ngx_cycle_t) -> Worker {
    let mut w = Worker::default();
    for proto in [Proto::Http, Proto::Stream] {
        let (index, ctx_index) = match proto {
            // SAFETY: module indices are set once modules are loaded.
            Proto::Http => unsafe {
                (
                    ngx_http_module.index,
                    ngx_http_upstream_check_module.ctx_index,
                )
            },
            Proto::Stream => unsafe {
                (
                    ngx_stream_module.index,
                    ngx_stream_upstream_check_module.ctx_index,
                )
            },
        };
        // SAFETY: conf_ctx has one entry per core module; the http and
        // stream entries point to their conf ctx (or are NULL).
        let main_conf = unsafe {
            let ctx = *cycle.conf_ctx.add(index);
            if ctx.is_null() {
                continue;
            }
            match proto {
                Proto::Http => (*ctx.cast::<ngx_http_conf_ctx_t>()).main_conf,
                Proto::Stream => (*ctx.cast::<ngx_stream_conf_ctx_t>()).main_conf,
            }
        };
        // SAFETY: as above.
        let (ups, mcf) = unsafe {
            (
                upstreams_of(proto, main_conf),
                (*main_conf.add(ctx_index)).cast::<MainConf>(),
            )
        };
        // SAFETY: our main conf; the zone (if any) was initialised by nginx.
        let zone = unsafe { mcf.as_ref().and_then(|m| shm::Zone::from_shm_zone(m.zone)) };
        let ctx = Context::new(zone, &ups);
        match proto {
            Proto::Http => w.http = ctx,
            Proto::Stream => w.stream = ctx,
        }
    }
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
    // SAFETY: the core module's conf is always present.
    let workers = unsafe {
        let ccf = (*cycle.conf_ctx.add(ngx_core_module.index)).cast::<ngx_core_conf_t>();
        ccf.as_ref().map_or(1, |c| c.worker_processes.max(1))
    };
    // SAFETY: set by nginx for worker processes.
    (unsafe { ngx_worker } as u32, workers as u32)
}

/// Arm the probe timers of both contexts.
///
/// # Safety
/// Worker process; WORKER is set.
unsafe fn start_probes(cycle: &ngx_cycle_t) {
    let Some(w) = WORKER.get() else { return };
    // SAFETY: per the contract.
    let (slot, workers) = unsafe { worker_slot(cycle) };
    // Probes log through a copy of the cycle's log whose level hides
    // nginx's own per-connection "connect() failed" errors (the module
    // reports state changes itself) unless debug logging is on.
    // SAFETY: the cycle log is valid; the copy lives as long as the process.
    let conn_log = unsafe {
        let mut l = *cycle.log;
        if l.log_level < NGX_LOG_DEBUG as usize {
            l.log_level = l.log_level.min(NGX_LOG_ALERT as usize);
        }
        Box::into_raw(Box::new(l))
    };
    // SAFETY: per the contract; both logs live for the process.
    let probers = unsafe {
        [
            check::Prober::start(Proto::Http, &w.http, (slot, workers), cycle.log, conn_log),
            check::Prober::start(
                Proto::Stream,
                &w.stream,
                (slot, workers),
                cycle.log,
                conn_log,
            ),
        ]
    };
    // SAFETY: single-threaded; nothing borrows PROBERS now.
    unsafe { *PROBERS.0.get() = Some(probers) };
}

/// The probes of this process (set in init_process).
struct Probers(core::cell::UnsafeCell<Option<[check::Prober; 2]>>);
// SAFETY: nginx runs module code on one thread per process.
unsafe impl Sync for Probers {}
static PROBERS: Probers = Probers(core::cell::UnsafeCell::new(None));

unsafe extern "C" fn ngx_http_upstream_check_exit_process(_cycle: *mut ngx_cycle_t) {
    // SAFETY: single-threaded; nothing borrows PROBERS during exit.
    if let Some(probers) = unsafe { (*PROBERS.0.get()).as_mut() } {
        for p in probers.iter_mut() {
            p.stop();
        }
    }
    hooks::uninstall();
    // SAFETY: nginx is tearing the process down; no reference is alive.
    unsafe { WORKER.set(None) };
}

// ---------------------------------------------------------------------------
// http module
// ---------------------------------------------------------------------------

static HTTP_CTX: ngx_http_module_t = ngx_http_module_t {
    preconfiguration: Some(ngx_http_upstream_check_preconf),
    postconfiguration: None,
    create_main_conf: Some(create_main_conf),
    init_main_conf: Some(ngx_http_upstream_check_init_main_conf),
    create_srv_conf: Some(create_srv_conf),
    merge_srv_conf: None,
    create_loc_conf: Some(create_loc_conf),
    merge_loc_conf: None,
};

const fn command(
    name: ngx::ffi::ngx_str_t,
    type_: u32,
    set: unsafe extern "C" fn(*mut ngx_conf_t, *mut ngx_command_t, *mut c_void) -> *mut c_char,
    conf: ngx_uint_t,
) -> ngx_command_t {
    ngx_command_t {
        name,
        type_: type_ as ngx_uint_t,
        set: Some(set),
        conf,
        offset: 0,
        post: ptr::null_mut(),
    }
}

static mut HTTP_COMMANDS: [ngx_command_t; 6] = [
    command(
        ngx_string!("check"),
        NGX_HTTP_UPS_CONF | NGX_CONF_1MORE,
        conf::ngx_upstream_check,
        SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_keepalive_requests"),
        NGX_HTTP_UPS_CONF | NGX_CONF_TAKE1,
        conf::ngx_upstream_check_keepalive_requests,
        SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_shm_size"),
        NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
        conf::ngx_upstream_check_shm_size,
        MAIN_CONF_OFFSET,
    ),
    command(
        ngx_string!("healthcheck_status"),
        NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS | NGX_CONF_TAKE1,
        ngx_http_healthcheck_status,
        LOC_CONF_OFFSET,
    ),
    command(
        ngx_string!("vnswrr"),
        NGX_HTTP_UPS_CONF | NGX_CONF_NOARGS | NGX_CONF_TAKE1,
        vnswrr::ngx_upstream_vnswrr,
        SRV_CONF_OFFSET,
    ),
    ngx_command_t::empty(),
];

#[used]
pub static mut ngx_http_upstream_check_module: ngx_module_t = ngx_module_t {
    ctx: ptr::addr_of!(HTTP_CTX) as *mut c_void,
    // SAFETY: a static array; nginx only reads it.
    commands: unsafe { ptr::addr_of_mut!(HTTP_COMMANDS[0]) },
    type_: NGX_HTTP_MODULE as ngx_uint_t,
    init_process: Some(ngx_http_upstream_check_init_process),
    exit_process: Some(ngx_http_upstream_check_exit_process),
    ..ngx_module_t::default()
};

// ---------------------------------------------------------------------------
// stream module (ngx 0.5 has no stream traits: plain tables)
// ---------------------------------------------------------------------------

static STREAM_CTX: ngx_stream_module_t = ngx_stream_module_t {
    preconfiguration: Some(ngx_stream_upstream_check_preconf),
    postconfiguration: None,
    create_main_conf: Some(create_main_conf),
    init_main_conf: Some(ngx_stream_upstream_check_init_main_conf),
    create_srv_conf: Some(create_srv_conf),
    merge_srv_conf: None,
};

static mut STREAM_COMMANDS: [ngx_command_t; 5] = [
    command(
        ngx_string!("check"),
        NGX_STREAM_UPS_CONF | NGX_CONF_1MORE,
        conf::ngx_upstream_check,
        SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_keepalive_requests"),
        NGX_STREAM_UPS_CONF | NGX_CONF_TAKE1,
        conf::ngx_upstream_check_keepalive_requests,
        SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_shm_size"),
        NGX_STREAM_MAIN_CONF | NGX_CONF_TAKE1,
        conf::ngx_upstream_check_shm_size,
        MAIN_CONF_OFFSET,
    ),
    command(
        ngx_string!("vnswrr"),
        NGX_STREAM_UPS_CONF | NGX_CONF_NOARGS | NGX_CONF_TAKE1,
        vnswrr::ngx_upstream_vnswrr,
        SRV_CONF_OFFSET,
    ),
    ngx_command_t::empty(),
];

#[used]
pub static mut ngx_stream_upstream_check_module: ngx_module_t = ngx_module_t {
    ctx: ptr::addr_of!(STREAM_CTX) as *mut c_void,
    // SAFETY: a static array; nginx only reads it.
    commands: unsafe { ptr::addr_of_mut!(STREAM_COMMANDS[0]) },
    type_: NGX_STREAM_MODULE as ngx_uint_t,
    ..ngx_module_t::default()
};

// ---------------------------------------------------------------------------
// The tables ngx_load_module() reads from the .so. Written by hand: ngx
// 0.5.1's `ngx_modules!` does not compile for more than one module.
// ---------------------------------------------------------------------------

#[no_mangle]
pub static mut ngx_modules: [*const ngx_module_t; 3] = [
    ptr::addr_of!(ngx_http_upstream_check_module),
    ptr::addr_of!(ngx_stream_upstream_check_module),
    ptr::null(),
];

#[no_mangle]
pub static mut ngx_module_names: [*const c_char; 3] = [
    c"ngx_http_upstream_check_module".as_ptr(),
    c"ngx_stream_upstream_check_module".as_ptr(),
    ptr::null(),
];

#[no_mangle]
pub static mut ngx_module_order: [*const c_char; 1] = [ptr::null()];
