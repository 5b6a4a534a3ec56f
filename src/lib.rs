//! ngx_healthcheck_module: active TCP/UDP health checks for http and stream
//! upstreams, a status page, and the vnswrr balancer, in one nginx dynamic
//! module. This file holds only the nginx module tables; the callbacks they
//! name live in `entry` (module lifecycle), `conf` (directives), `status`
//! and `vnswrr`.
#![allow(non_upper_case_globals)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod admin;
mod check;
mod conf;
mod entry;
mod ffi;
mod hooks;
mod match_block;
mod pool;
mod process;
mod regex;
mod resolved;
mod selection;
mod shm;
mod statefile;
mod status;
mod stream_link;
mod tls;
mod upstream;
mod vnswrr;
mod worker;

use core::ffi::{c_char, c_void};
use core::ptr;

use ngx::ffi::{
    ngx_command_t, ngx_conf_t, ngx_http_module_t, ngx_module_t, ngx_stream_module_t, ngx_uint_t,
    NGX_CONF_1MORE, NGX_CONF_BLOCK, NGX_CONF_NOARGS, NGX_CONF_TAKE1, NGX_CONF_TAKE12,
    NGX_CONF_TAKE2, NGX_HTTP_LOC_CONF, NGX_HTTP_LOC_CONF_OFFSET, NGX_HTTP_MAIN_CONF,
    NGX_HTTP_MAIN_CONF_OFFSET, NGX_HTTP_MODULE, NGX_HTTP_SRV_CONF_OFFSET, NGX_HTTP_UPS_CONF,
    NGX_STREAM_MAIN_CONF, NGX_STREAM_MAIN_CONF_OFFSET, NGX_STREAM_MODULE,
    NGX_STREAM_SRV_CONF_OFFSET, NGX_STREAM_UPS_CONF,
};
use ngx::ngx_string;

use crate::entry::*;

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
    conf: usize,
) -> ngx_command_t {
    ngx_command_t {
        name,
        type_: type_ as ngx_uint_t,
        set: Some(set),
        conf: conf as ngx_uint_t,
        offset: 0,
        post: ptr::null_mut(),
    }
}

static mut HTTP_COMMANDS: [ngx_command_t; 25] = [
    command(
        ngx_string!("check_http_send"),
        NGX_HTTP_UPS_CONF | NGX_CONF_TAKE1,
        conf::ngx_upstream_check_http_send,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_http_expect_alive"),
        NGX_HTTP_UPS_CONF | NGX_CONF_1MORE,
        conf::ngx_upstream_check_http_expect_alive,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_http_request"),
        NGX_HTTP_UPS_CONF | NGX_CONF_TAKE12,
        conf::ngx_upstream_check_http_request,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_http_header"),
        NGX_HTTP_UPS_CONF | NGX_CONF_TAKE2,
        conf::ngx_upstream_check_http_header,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_buffer_size"),
        NGX_HTTP_UPS_CONF | NGX_CONF_TAKE1,
        conf::ngx_upstream_check_buffer_size,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_match"),
        NGX_HTTP_MAIN_CONF | NGX_CONF_BLOCK | NGX_CONF_TAKE1,
        match_block::ngx_upstream_check_match,
        NGX_HTTP_MAIN_CONF_OFFSET,
    ),
    command(
        ngx_string!("check"),
        NGX_HTTP_UPS_CONF | NGX_CONF_1MORE,
        conf::ngx_upstream_check,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_keepalive_requests"),
        NGX_HTTP_UPS_CONF | NGX_CONF_TAKE1,
        conf::ngx_upstream_check_keepalive_requests,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_fail_open"),
        NGX_HTTP_UPS_CONF | NGX_CONF_TAKE1,
        conf::ngx_upstream_check_fail_open,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_server_name"),
        NGX_HTTP_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_server_name,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_name"),
        NGX_HTTP_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_name,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_verify"),
        NGX_HTTP_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_verify,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_trusted_certificate"),
        NGX_HTTP_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_trusted_certificate,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_verify_depth"),
        NGX_HTTP_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_verify_depth,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_certificate"),
        NGX_HTTP_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_certificate,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_certificate_key"),
        NGX_HTTP_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_certificate_key,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_protocols"),
        NGX_HTTP_UPS_CONF | NGX_CONF_1MORE,
        tls::ngx_upstream_check_ssl_protocols,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_ciphers"),
        NGX_HTTP_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_ciphers,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_session_reuse"),
        NGX_HTTP_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_session_reuse,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_shm_size"),
        NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
        conf::ngx_upstream_check_shm_size,
        NGX_HTTP_MAIN_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_state_file"),
        NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
        conf::ngx_upstream_check_state_file,
        NGX_HTTP_MAIN_CONF_OFFSET,
    ),
    command(
        ngx_string!("healthcheck_status"),
        NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS | NGX_CONF_TAKE12,
        ngx_http_healthcheck_status,
        NGX_HTTP_LOC_CONF_OFFSET,
    ),
    command(
        ngx_string!("healthcheck_admin"),
        NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS,
        ngx_http_healthcheck_admin,
        NGX_HTTP_LOC_CONF_OFFSET,
    ),
    command(
        ngx_string!("vnswrr"),
        NGX_HTTP_UPS_CONF | NGX_CONF_NOARGS | NGX_CONF_TAKE1,
        vnswrr::ngx_upstream_vnswrr,
        NGX_HTTP_SRV_CONF_OFFSET,
    ),
    ngx_command_t::empty(),
];

#[used]
pub static mut ngx_http_upstream_check_module: ngx_module_t = ngx_module_t {
    ctx: ptr::addr_of!(HTTP_CTX) as *mut c_void,
    // SAFETY: a static array; nginx only reads it.
    commands: unsafe { ptr::addr_of_mut!(HTTP_COMMANDS[0]) },
    type_: NGX_HTTP_MODULE as ngx_uint_t,
    init_module: Some(ngx_http_upstream_check_init_module),
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

static mut STREAM_COMMANDS: [ngx_command_t; 23] = [
    command(
        ngx_string!("check_http_send"),
        NGX_STREAM_UPS_CONF | NGX_CONF_TAKE1,
        conf::ngx_upstream_check_http_send,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_http_expect_alive"),
        NGX_STREAM_UPS_CONF | NGX_CONF_1MORE,
        conf::ngx_upstream_check_http_expect_alive,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_http_request"),
        NGX_STREAM_UPS_CONF | NGX_CONF_TAKE12,
        conf::ngx_upstream_check_http_request,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_http_header"),
        NGX_STREAM_UPS_CONF | NGX_CONF_TAKE2,
        conf::ngx_upstream_check_http_header,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_buffer_size"),
        NGX_STREAM_UPS_CONF | NGX_CONF_TAKE1,
        conf::ngx_upstream_check_buffer_size,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_match"),
        NGX_STREAM_MAIN_CONF | NGX_CONF_BLOCK | NGX_CONF_TAKE1,
        match_block::ngx_upstream_check_match,
        NGX_STREAM_MAIN_CONF_OFFSET,
    ),
    command(
        ngx_string!("check"),
        NGX_STREAM_UPS_CONF | NGX_CONF_1MORE,
        conf::ngx_upstream_check,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_keepalive_requests"),
        NGX_STREAM_UPS_CONF | NGX_CONF_TAKE1,
        conf::ngx_upstream_check_keepalive_requests,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_fail_open"),
        NGX_STREAM_UPS_CONF | NGX_CONF_TAKE1,
        conf::ngx_upstream_check_fail_open,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_server_name"),
        NGX_STREAM_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_server_name,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_name"),
        NGX_STREAM_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_name,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_verify"),
        NGX_STREAM_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_verify,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_trusted_certificate"),
        NGX_STREAM_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_trusted_certificate,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_verify_depth"),
        NGX_STREAM_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_verify_depth,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_certificate"),
        NGX_STREAM_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_certificate,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_certificate_key"),
        NGX_STREAM_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_certificate_key,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_protocols"),
        NGX_STREAM_UPS_CONF | NGX_CONF_1MORE,
        tls::ngx_upstream_check_ssl_protocols,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_ciphers"),
        NGX_STREAM_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_ciphers,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_ssl_session_reuse"),
        NGX_STREAM_UPS_CONF | NGX_CONF_TAKE1,
        tls::ngx_upstream_check_ssl_session_reuse,
        NGX_STREAM_SRV_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_shm_size"),
        NGX_STREAM_MAIN_CONF | NGX_CONF_TAKE1,
        conf::ngx_upstream_check_shm_size,
        NGX_STREAM_MAIN_CONF_OFFSET,
    ),
    command(
        ngx_string!("check_state_file"),
        NGX_STREAM_MAIN_CONF | NGX_CONF_TAKE1,
        conf::ngx_upstream_check_state_file,
        NGX_STREAM_MAIN_CONF_OFFSET,
    ),
    command(
        ngx_string!("vnswrr"),
        NGX_STREAM_UPS_CONF | NGX_CONF_NOARGS | NGX_CONF_TAKE1,
        vnswrr::ngx_upstream_vnswrr,
        NGX_STREAM_SRV_CONF_OFFSET,
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
