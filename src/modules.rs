//! The module's `ngx_module_t` statics, reached from one place.
//!
//! nginx code names its own module everywhere
//! (`ngx_http_conf_get_module_srv_conf(us, ngx_http_upstream_check_module)`).
//! Here the statics live with the command tables in lib.rs, the top of the
//! module graph, so every other file reaches them through this module, the
//! one that every layer may use (docs/design.md, Module layers): our
//! `ctx_index` in each context, and our configuration structs in the
//! `main_conf`, `srv_conf` and `loc_conf` arrays nginx keeps.

use core::ffi::c_void;
use core::ptr;

use healthcheck_core::status::Group;
use ngx::ffi::{ngx_cycle_t, ngx_http_conf_ctx_t, ngx_module_t, ngx_stream_conf_ctx_t};

/// Our module of `group` (the http or the stream one).
pub fn module(group: Group) -> *mut ngx_module_t {
    match group {
        Group::Http => ptr::addr_of_mut!(crate::ngx_http_upstream_check_module),
        Group::Stream => ptr::addr_of_mut!(crate::ngx_stream_upstream_check_module),
    }
}

/// Our module's index in `group`'s per-module configuration arrays.
pub fn ctx_index(group: Group) -> usize {
    // SAFETY: the statics are nginx's to write (when it loads the module,
    // before any configuration is read); reading the index is a plain load.
    unsafe { (*module(group)).ctx_index }
}

/// Our entry of an upstream's `srv_conf` array (`T` is our srv conf type).
///
/// # Safety
/// `srv_conf` is the `srv_conf` array of an upstream of `group`, or NULL.
pub unsafe fn srv_conf<T>(srv_conf: *mut *mut c_void, group: Group) -> *mut T {
    if srv_conf.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: the array has an entry per module of the context.
    unsafe { (*srv_conf.add(ctx_index(group))).cast() }
}

/// Our entry of a location's `loc_conf` array (`T` is our loc conf type).
///
/// # Safety
/// `loc_conf` is an http location's `loc_conf` array.
pub unsafe fn loc_conf<T>(loc_conf: *mut *mut c_void) -> *mut T {
    // SAFETY: the array has an entry per http module.
    unsafe { (*loc_conf.add(ctx_index(Group::Http))).cast() }
}

/// The `main_conf` array of `group`'s configuration in `cycle`: NULL
/// before that block is parsed, without the block, or without stream.
///
/// # Safety
/// `cycle` is a cycle whose `conf_ctx` nginx made (a running cycle, or the
/// one being configured).
pub unsafe fn main_conf_array(cycle: &ngx_cycle_t, group: Group) -> *mut *mut c_void {
    let index = match group {
        Group::Http => {
            // SAFETY: nginx's static, set when the binary's modules load.
            unsafe { ngx::ffi::ngx_http_module.index }
        }
        // nginx's stream module may be a module not loaded (docs/stock-mode.md).
        Group::Stream => match crate::stream_link::stream_module() {
            Some(m) => m.index,
            None => return ptr::null_mut(),
        },
    };
    // SAFETY: conf_ctx has one entry per core module, NULL until its block
    // is parsed; the http and stream entries point to their conf ctx.
    unsafe {
        let ctx = (*cycle.conf_ctx.add(index)).cast::<c_void>();
        if ctx.is_null() {
            return ptr::null_mut();
        }
        match group {
            Group::Http => (*ctx.cast::<ngx_http_conf_ctx_t>()).main_conf,
            Group::Stream => (*ctx.cast::<ngx_stream_conf_ctx_t>()).main_conf,
        }
    }
}

/// Our main conf of `group` in `cycle` (`T` is our main conf type), NULL
/// where [`main_conf_array`] is.
///
/// # Safety
/// As for [`main_conf_array`].
pub unsafe fn main_conf<T>(cycle: &ngx_cycle_t, group: Group) -> *mut T {
    // SAFETY: per the contract.
    let array = unsafe { main_conf_array(cycle, group) };
    if array.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: the array has an entry per module of the context.
    unsafe { (*array.add(ctx_index(group))).cast() }
}
