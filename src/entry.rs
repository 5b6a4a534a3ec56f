//! The module's nginx-level callbacks: configuration structs, the patch
//! check, the end of each context's configuration, and the process
//! lifecycle. Each turns nginx's raw pointers into references, calls one
//! safe function under the panic guard, and maps the result to an nginx
//! status; the tables in lib.rs point here.

use core::ffi::{c_char, c_void};
use core::ptr;

use ngx::core::{NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::ffi::{
    ngx_command_t, ngx_conf_t, ngx_cycle_t, ngx_http_conf_ctx_t, ngx_http_core_loc_conf_t,
    ngx_http_core_module, ngx_int_t, ngx_process, NGX_ERROR, NGX_OK, NGX_PROCESS_SINGLE,
    NGX_PROCESS_WORKER,
};

use crate::conf::{self, LocConf, MainConf, UpsConf};
use crate::enforce;
use crate::ffi;
use crate::finish;
use crate::hooks;
use crate::pool;
use crate::process;
use crate::selection;
use crate::status;
use crate::upstream;
use healthcheck_core::status::Group;

/// A default `T` in the configuration pool; NULL (nginx's "no memory")
/// when the pool has none.
///
/// # Safety
/// `cf` is the `ngx_conf_t` nginx passed to a create-conf callback.
unsafe fn create_conf<T: Default>(cf: *mut ngx_conf_t) -> *mut c_void {
    // SAFETY: nginx passes a valid cf with its pool.
    let log = unsafe { (*cf).log };
    ffi::guard(log, "configuration", ptr::null_mut(), || {
        // SAFETY: as above.
        unsafe { pool::alloc((*cf).pool, T::default()) }
            .map_or(ptr::null_mut(), |p| p.as_ptr().cast())
    })
}

pub unsafe extern "C" fn create_main_conf(cf: *mut ngx_conf_t) -> *mut c_void {
    // SAFETY: nginx's create_main_conf contract.
    unsafe { create_conf::<MainConf>(cf) }
}

pub unsafe extern "C" fn create_srv_conf(cf: *mut ngx_conf_t) -> *mut c_void {
    // SAFETY: nginx's create_srv_conf contract.
    unsafe { create_conf::<UpsConf>(cf) }
}

pub unsafe extern "C" fn create_loc_conf(cf: *mut ngx_conf_t) -> *mut c_void {
    // SAFETY: nginx's create_loc_conf contract.
    unsafe { create_conf::<LocConf>(cf) }
}

/// How checks reach the balancers in this nginx: the patch's hook, or
/// stock mode (`crate::enforce`).
fn preconfiguration(cf: *mut ngx_conf_t, proto: Group) -> ngx_int_t {
    // SAFETY: nginx passes the configuration being parsed.
    enforce::detect(proto, unsafe { (*cf).log });
    NGX_OK as ngx_int_t
}

pub unsafe extern "C" fn ngx_http_upstream_check_preconf(cf: *mut ngx_conf_t) -> ngx_int_t {
    // SAFETY: nginx passes the configuration being parsed.
    let log = unsafe { (*cf).log };
    ffi::guard(log, "preconfiguration", NGX_ERROR as ngx_int_t, || {
        preconfiguration(cf, Group::Http)
    })
}

pub unsafe extern "C" fn ngx_stream_upstream_check_preconf(cf: *mut ngx_conf_t) -> ngx_int_t {
    // SAFETY: nginx passes the configuration being parsed.
    let log = unsafe { (*cf).log };
    // A stream configuration: stream is loaded, maybe from another .so.
    crate::stream_link::refresh();
    ffi::guard(log, "preconfiguration", NGX_ERROR as ngx_int_t, || {
        preconfiguration(cf, Group::Stream)
    })
}

/// # Safety
/// nginx's init_main_conf contract for the context `proto`.
unsafe fn init_main(cf: *mut ngx_conf_t, conf: *mut c_void, proto: Group) -> *mut c_char {
    // SAFETY: nginx passes the context's cf.
    let log = unsafe { (*cf).log };
    let r = ffi::guard(log, "configuration", Err(()), || {
        // SAFETY: nginx passes our main conf.
        let mcf = unsafe { &mut *conf.cast::<MainConf>() };
        // SAFETY: cf->ctx is the context's conf ctx; main_conf is its
        // first field in both ngx_http_conf_ctx_t and ngx_stream_conf_ctx_t
        // (asserted below).
        let main_conf = unsafe { *(*cf).ctx.cast::<*mut *mut c_void>() };
        // SAFETY: see above.
        let ups = unsafe { upstream::of_context(proto, main_conf) };
        // SAFETY: srv_conf is the second field of both conf ctx structs
        // (asserted below): the block's own srv confs, where `check_log`
        // written in the block itself went.
        let block = unsafe {
            crate::modules::srv_conf::<UpsConf>(*(*cf).ctx.cast::<*mut *mut c_void>().add(1), proto)
                .as_ref()
        };
        mcf.event_log = block.and_then(|b| b.event_log.get().copied());
        mcf.max_inflight = block.and_then(|b| b.max_inflight.get().copied());
        // SAFETY: cf is the context being finished.
        unsafe { finish::context(cf, proto, mcf, &ups) }?;
        // SAFETY: as above; the rules between the directives held. Our
        // srv confs live in the configuration pool, one per upstream.
        let tls_confs = ups
            .iter()
            .filter_map(|u| unsafe { u.conf.as_mut() })
            .filter_map(|c| {
                c.check
                    .get()
                    .is_some_and(|k| k.check_type.is_tls())
                    .then_some(&mut c.tls)
            });
        // SAFETY: as above.
        unsafe { crate::tls::build_contexts(cf, tls_confs) }?;
        // SAFETY: the context's upstreams, their balancers set up.
        unsafe { selection::wrap(proto, &ups) };
        Ok(())
    });
    match r {
        Ok(()) => NGX_CONF_OK,
        Err(()) => NGX_CONF_ERROR,
    }
}

const _: () = {
    assert!(core::mem::offset_of!(ngx::ffi::ngx_http_conf_ctx_t, main_conf) == 0);
    assert!(core::mem::offset_of!(ngx::ffi::ngx_stream_conf_ctx_t, main_conf) == 0);
    const PTR: usize = core::mem::size_of::<*mut c_void>();
    assert!(core::mem::offset_of!(ngx::ffi::ngx_http_conf_ctx_t, srv_conf) == PTR);
    assert!(core::mem::offset_of!(ngx::ffi::ngx_stream_conf_ctx_t, srv_conf) == PTR);
};

pub unsafe extern "C" fn ngx_http_upstream_check_init_main_conf(
    cf: *mut ngx_conf_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's init_main_conf contract.
    unsafe { init_main(cf, conf, Group::Http) }
}

pub unsafe extern "C" fn ngx_stream_upstream_check_init_main_conf(
    cf: *mut ngx_conf_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's init_main_conf contract.
    unsafe { init_main(cf, conf, Group::Stream) }
}

/// A location directive that makes the module the location's content
/// handler: `set` stores the directive's value, then `handler` serves
/// the location.
///
/// # Safety
/// nginx's directive contract, in a location of the http context.
unsafe fn location_handler(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
    what: &str,
    set: unsafe fn(*mut ngx_conf_t, *mut ngx_command_t, *mut c_void) -> *mut c_char,
    handler: ngx::ffi::ngx_http_handler_pt,
) -> *mut c_char {
    // SAFETY: nginx passes the configuration being parsed.
    let log = unsafe { (*cf).log };
    ffi::guard(log, what, NGX_CONF_ERROR, || {
        // SAFETY: nginx's directive contract.
        let rv = unsafe { set(cf, cmd, conf) };
        if rv != NGX_CONF_OK {
            return rv;
        }
        // SAFETY: in a location, cf->ctx is an ngx_http_conf_ctx_t whose
        // loc_conf array holds the core module's location conf.
        unsafe {
            let ctx = (*cf).ctx.cast::<ngx_http_conf_ctx_t>();
            let clcf = (*(*ctx).loc_conf.add(ngx_http_core_module.ctx_index))
                .cast::<ngx_http_core_loc_conf_t>();
            (*clcf).handler = handler;
        }
        NGX_CONF_OK
    })
}

pub unsafe extern "C" fn ngx_http_healthcheck_status(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        location_handler(
            cf,
            cmd,
            conf,
            "healthcheck_status",
            conf::set_status,
            Some(status::ngx_http_healthcheck_status_handler),
        )
    }
}

/// `check_status [format];` and its other names (`l4check_status`,
/// `stream_check_status`, `tcp_check_status`): the C modules' page.
pub unsafe extern "C" fn ngx_http_check_status(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        location_handler(
            cf,
            cmd,
            conf,
            "check_status",
            conf::set_check_status,
            Some(status::ngx_http_healthcheck_status_handler),
        )
    }
}

pub unsafe extern "C" fn ngx_http_healthcheck_admin(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        location_handler(
            cf,
            cmd,
            conf,
            "healthcheck_admin",
            conf::set_admin,
            Some(crate::admin::ngx_http_healthcheck_admin_handler),
        )
    }
}

pub unsafe extern "C" fn ngx_http_healthcheck_gate(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        location_handler(
            cf,
            cmd,
            conf,
            "healthcheck_gate",
            conf::set_gate,
            Some(crate::gate::ngx_http_healthcheck_gate_handler),
        )
    }
}

pub unsafe extern "C" fn ngx_http_upstream_check_init_module(cycle: *mut ngx_cycle_t) -> ngx_int_t {
    // SAFETY: nginx passes the cycle being initialised.
    let Some(cycle) = (unsafe { cycle.as_ref() }) else {
        return NGX_ERROR as ngx_int_t;
    };
    ffi::guard(cycle.log, "init_module", NGX_ERROR as ngx_int_t, || {
        // The stream functions of the cycle that now runs (a failed reload
        // may have looked up another ngx_stream_module.so's).
        crate::stream_link::refresh();
        // SAFETY: init_module: the cycle's configuration is complete.
        unsafe { crate::finish::configuration_read(cycle) };
        // SAFETY: init_module of `cycle`, its zones initialised.
        unsafe { process::reload_in_place(cycle) };
        NGX_OK as ngx_int_t
    })
}

pub unsafe extern "C" fn ngx_http_upstream_check_init_process(
    cycle: *mut ngx_cycle_t,
) -> ngx_int_t {
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
        crate::stream_link::refresh();
        // SAFETY: a worker or single process; the cycle's configuration is
        // complete.
        unsafe { process::init(cycle) };
        hooks::install();
        NGX_OK as ngx_int_t
    })
}

pub unsafe extern "C" fn ngx_http_upstream_check_exit_process(cycle: *mut ngx_cycle_t) {
    // SAFETY: nginx passes the running cycle.
    let log = unsafe { cycle.as_ref() }.map_or(ptr::null_mut(), |c| c.log);
    ffi::guard(log, "exit_process", (), || {
        crate::events::flush();
        hooks::uninstall();
        process::exit(log);
    });
}
