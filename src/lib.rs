//! ngx_healthcheck_module: active health checks for http and stream
//! upstreams, a status page, and the vnswrr balancer, in one nginx dynamic
//! module. This file holds only the nginx module tables, the top of the
//! module graph (docs/design.md, Module layers); the callbacks they name
//! live in `entry` (module lifecycle), `conf`, `tls` and `match_block`
//! (directives), `status`, `admin` and `vnswrr`; other files reach the
//! module statics through `modules`.
#![allow(non_upper_case_globals)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod admin;
mod check;
mod closer;
mod conf;
mod directive;
mod drain;
mod ejections;
mod enforce;
mod entry;
mod events;
mod ffi;
mod finish;
mod gate;
mod hooks;
mod match_block;
mod modules;
mod outlier;
mod pool;
mod process;
mod ramp;
mod regex;
mod resolved;
mod selection;
mod sessions;
mod sharing;
mod shm;
mod statefile;
mod status;
mod stream_link;
mod target;
mod tls;
mod upstream;
mod vnswrr;
mod worker;

use core::ffi::{c_char, c_void};
use core::ptr;

use ngx::ffi::{
    ngx_command_t, ngx_conf_t, ngx_http_module_t, ngx_module_t, ngx_stream_module_t, ngx_uint_t,
    NGX_CONF_1MORE, NGX_CONF_ANY, NGX_CONF_BLOCK, NGX_CONF_NOARGS, NGX_CONF_TAKE1, NGX_CONF_TAKE12,
    NGX_CONF_TAKE2, NGX_HTTP_LOC_CONF, NGX_HTTP_LOC_CONF_OFFSET, NGX_HTTP_MAIN_CONF,
    NGX_HTTP_MAIN_CONF_OFFSET, NGX_HTTP_MODULE, NGX_HTTP_SRV_CONF, NGX_HTTP_SRV_CONF_OFFSET,
    NGX_HTTP_UPS_CONF, NGX_STREAM_MAIN_CONF, NGX_STREAM_MAIN_CONF_OFFSET, NGX_STREAM_MODULE,
    NGX_STREAM_SRV_CONF, NGX_STREAM_SRV_CONF_OFFSET, NGX_STREAM_UPS_CONF,
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

/// Where a directive is written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// `upstream {}` of http and stream.
    Upstream,
    /// The `http {}` and `stream {}` blocks.
    Main,
    /// An upstream, or the `http {}` and `stream {}` blocks (stored in
    /// the block's own srv conf, see `entry`).
    MainOrUpstream,
    /// An http `location`.
    Location,
    /// An http `server` or `location` (the status pages).
    ServerOrLocation,
    /// A stream `server` (only a refusal: a status page is http's).
    StreamServer,
}

type Handler =
    unsafe extern "C" fn(*mut ngx_conf_t, *mut ngx_command_t, *mut c_void) -> *mut c_char;

/// One directive of the module, in both contexts where it exists.
struct Directive {
    name: ngx::ffi::ngx_str_t,
    place: Place,
    /// The `NGX_CONF_*` argument flags.
    args: u32,
    set: Handler,
    /// Where our struct's field is in the conf nginx passes.
    offset: usize,
    /// Registered in stream too (every upstream and main directive is).
    stream: bool,
    /// Registered in http (all but a stream server's refusal).
    http: bool,
}

const fn ups(name: ngx::ffi::ngx_str_t, args: u32, set: Handler) -> Directive {
    Directive {
        name,
        place: Place::Upstream,
        args,
        set,
        offset: 0,
        stream: true,
        http: true,
    }
}

/// A directive of the C modules with no directive of its name here, in
/// upstream blocks: refused with what to write instead.
const fn refused(name: ngx::ffi::ngx_str_t, args: u32) -> Directive {
    ups(name, args, conf::ngx_upstream_check_refused)
}

/// A status directive written in a stream server: refused with what to
/// write instead.
const fn stream_refused(name: ngx::ffi::ngx_str_t) -> Directive {
    Directive {
        place: Place::StreamServer,
        http: false,
        ..refused(name, NGX_CONF_ANY)
    }
}

/// `check_status` under one of its names.
const fn check_status(name: ngx::ffi::ngx_str_t) -> Directive {
    Directive {
        place: Place::ServerOrLocation,
        stream: false,
        ..ups(
            name,
            NGX_CONF_NOARGS | NGX_CONF_TAKE1,
            ngx_http_check_status,
        )
    }
}

/// The module's directives, each said once: the http and stream tables are
/// made from this list (docs/directives.md documents each).
const DIRECTIVES: [Directive; 51] = {
    use core::mem::offset_of;
    use NGX_CONF_1MORE as MORE;
    use NGX_CONF_TAKE1 as ONE;
    let tls = offset_of!(conf::UpsConf, tls);
    [
        ups(ngx_string!("check"), MORE, conf::ngx_upstream_check),
        ups(
            ngx_string!("check_buffer_size"),
            ONE,
            conf::ngx_upstream_check_buffer_size,
        ),
        ups(
            ngx_string!("check_fail_open"),
            ONE,
            conf::ngx_upstream_check_fail_open,
        ),
        ups(
            ngx_string!("check_shutdown_sessions"),
            ONE,
            conf::ngx_upstream_check_shutdown_sessions,
        ),
        ups(
            ngx_string!("check_fastcgi_param"),
            NGX_CONF_TAKE2,
            conf::ngx_upstream_check_fastcgi_param,
        ),
        ups(
            ngx_string!("check_grpc_service"),
            ONE,
            conf::ngx_upstream_check_grpc_service,
        ),
        ups(
            ngx_string!("check_grpc_status"),
            MORE,
            conf::ngx_upstream_check_grpc_status,
        ),
        ups(
            ngx_string!("check_http_expect_alive"),
            MORE,
            conf::ngx_upstream_check_http_expect_alive,
        ),
        ups(
            ngx_string!("check_http_expect_body"),
            NGX_CONF_TAKE12,
            conf::ngx_upstream_check_http_expect_body,
        ),
        ups(
            ngx_string!("check_http_version"),
            ONE,
            conf::ngx_upstream_check_http_version,
        ),
        ups(
            ngx_string!("check_http_header"),
            NGX_CONF_TAKE2,
            conf::ngx_upstream_check_http_header,
        ),
        ups(
            ngx_string!("check_http_request"),
            NGX_CONF_TAKE12,
            conf::ngx_upstream_check_http_request,
        ),
        ups(
            ngx_string!("check_http_send"),
            ONE,
            conf::ngx_upstream_check_http_send,
        ),
        Directive {
            place: Place::MainOrUpstream,
            ..ups(
                ngx_string!("check_log"),
                NGX_CONF_TAKE12,
                conf::ngx_upstream_check_log,
            )
        },
        Directive {
            place: Place::Main,
            ..ups(
                ngx_string!("check_max_connections"),
                ONE,
                conf::ngx_upstream_check_max_connections,
            )
        },
        Directive {
            place: Place::MainOrUpstream,
            ..ups(
                ngx_string!("check_max_inflight"),
                ONE,
                conf::ngx_upstream_check_max_inflight,
            )
        },
        ups(
            ngx_string!("check_outlier"),
            NGX_CONF_ANY,
            conf::ngx_upstream_check_outlier,
        ),
        ups(
            ngx_string!("check_keepalive_requests"),
            ONE,
            conf::ngx_upstream_check_keepalive_requests,
        ),
        ups(
            ngx_string!("check_keepalive_time"),
            ONE,
            conf::ngx_upstream_check_keepalive_time,
        ),
        Directive {
            name: ngx_string!("check_match"),
            place: Place::Main,
            args: NGX_CONF_BLOCK | NGX_CONF_TAKE1,
            set: match_block::ngx_upstream_check_match,
            offset: offset_of!(conf::MainConf, matches),
            stream: true,
            http: true,
        },
        Directive {
            place: Place::Main,
            ..ups(
                ngx_string!("check_shm_size"),
                ONE,
                conf::ngx_upstream_check_shm_size,
            )
        },
        Directive {
            offset: tls,
            ..ups(
                ngx_string!("check_ssl_certificate"),
                ONE,
                tls::ngx_upstream_check_ssl_certificate,
            )
        },
        Directive {
            offset: tls,
            ..ups(
                ngx_string!("check_ssl_certificate_key"),
                ONE,
                tls::ngx_upstream_check_ssl_certificate_key,
            )
        },
        Directive {
            offset: tls,
            ..ups(
                ngx_string!("check_ssl_ciphers"),
                ONE,
                tls::ngx_upstream_check_ssl_ciphers,
            )
        },
        Directive {
            offset: tls,
            ..ups(
                ngx_string!("check_ssl_name"),
                ONE,
                tls::ngx_upstream_check_ssl_name,
            )
        },
        Directive {
            offset: tls,
            ..ups(
                ngx_string!("check_ssl_protocols"),
                MORE,
                tls::ngx_upstream_check_ssl_protocols,
            )
        },
        Directive {
            offset: tls,
            ..ups(
                ngx_string!("check_ssl_server_name"),
                ONE,
                tls::ngx_upstream_check_ssl_server_name,
            )
        },
        Directive {
            offset: tls,
            ..ups(
                ngx_string!("check_ssl_session_reuse"),
                ONE,
                tls::ngx_upstream_check_ssl_session_reuse,
            )
        },
        Directive {
            offset: tls,
            ..ups(
                ngx_string!("check_ssl_trusted_certificate"),
                ONE,
                tls::ngx_upstream_check_ssl_trusted_certificate,
            )
        },
        Directive {
            offset: tls,
            ..ups(
                ngx_string!("check_ssl_verify"),
                ONE,
                tls::ngx_upstream_check_ssl_verify,
            )
        },
        Directive {
            offset: tls,
            ..ups(
                ngx_string!("check_ssl_verify_depth"),
                ONE,
                tls::ngx_upstream_check_ssl_verify_depth,
            )
        },
        Directive {
            offset: tls,
            ..ups(
                ngx_string!("check_ssl_verify_interval"),
                ONE,
                tls::ngx_upstream_check_ssl_verify_interval,
            )
        },
        Directive {
            place: Place::Main,
            ..ups(
                ngx_string!("check_state_file"),
                ONE,
                conf::ngx_upstream_check_state_file,
            )
        },
        Directive {
            place: Place::Location,
            stream: false,
            ..ups(
                ngx_string!("healthcheck_admin"),
                NGX_CONF_NOARGS,
                ngx_http_healthcheck_admin,
            )
        },
        Directive {
            place: Place::Location,
            stream: false,
            ..ups(
                ngx_string!("healthcheck_gate"),
                NGX_CONF_TAKE12,
                ngx_http_healthcheck_gate,
            )
        },
        // In a server too, as Akvicor's module allows.
        Directive {
            place: Place::ServerOrLocation,
            stream: false,
            ..ups(
                ngx_string!("healthcheck_status"),
                NGX_CONF_NOARGS | NGX_CONF_TAKE12,
                ngx_http_healthcheck_status,
            )
        },
        ups(
            ngx_string!("vnswrr"),
            NGX_CONF_NOARGS | ONE,
            vnswrr::ngx_upstream_vnswrr,
        ),
        // The C modules' status page, under each module's name.
        check_status(ngx_string!("check_status")),
        check_status(ngx_string!("l4check_status")),
        check_status(ngx_string!("stream_check_status")),
        check_status(ngx_string!("tcp_check_status")),
        // In a stream server: refused, naming the http location to write.
        stream_refused(ngx_string!("check_status")),
        stream_refused(ngx_string!("l4check_status")),
        stream_refused(ngx_string!("stream_check_status")),
        stream_refused(ngx_string!("tcp_check_status")),
        // The C modules' directives written another way here.
        refused(ngx_string!("check_send"), NGX_CONF_ANY),
        refused(ngx_string!("check_expect_response"), NGX_CONF_ANY),
        refused(ngx_string!("check_backend_expect_alive"), NGX_CONF_ANY),
        refused(ngx_string!("check_smtp_send"), NGX_CONF_ANY),
        refused(ngx_string!("check_smtp_expect_alive"), NGX_CONF_ANY),
        refused(ngx_string!("check_fastcgi_params"), NGX_CONF_ANY),
    ]
};

/// Whether `d` is registered in stream (`stream`) or http.
const fn registered(d: &Directive, stream: bool) -> bool {
    if stream {
        d.stream
    } else {
        d.http
    }
}

/// How many directives http (`stream` false) or stream has.
const fn count(stream: bool) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < DIRECTIVES.len() {
        if registered(&DIRECTIVES[i], stream) {
            n += 1;
        }
        i += 1;
    }
    n
}

/// The command table of http (`stream` false) or stream, with nginx's
/// empty entry last.
const fn commands<const N: usize>(stream: bool) -> [ngx_command_t; N] {
    let mut out = [ngx_command_t::empty(); N];
    let mut n = 0;
    let mut i = 0;
    while i < DIRECTIVES.len() {
        let d = &DIRECTIVES[i];
        i += 1;
        if !registered(d, stream) {
            continue;
        }
        let (place, conf) = match (d.place, stream) {
            (Place::Upstream, false) => (NGX_HTTP_UPS_CONF, NGX_HTTP_SRV_CONF_OFFSET),
            (Place::Upstream, true) => (NGX_STREAM_UPS_CONF, NGX_STREAM_SRV_CONF_OFFSET),
            (Place::Main, false) => (NGX_HTTP_MAIN_CONF, NGX_HTTP_MAIN_CONF_OFFSET),
            (Place::MainOrUpstream, false) => (
                NGX_HTTP_MAIN_CONF | NGX_HTTP_UPS_CONF,
                NGX_HTTP_SRV_CONF_OFFSET,
            ),
            (Place::MainOrUpstream, true) => (
                NGX_STREAM_MAIN_CONF | NGX_STREAM_UPS_CONF,
                NGX_STREAM_SRV_CONF_OFFSET,
            ),
            (Place::Main, true) => (NGX_STREAM_MAIN_CONF, NGX_STREAM_MAIN_CONF_OFFSET),
            (Place::Location, _) => (NGX_HTTP_LOC_CONF, NGX_HTTP_LOC_CONF_OFFSET),
            (Place::ServerOrLocation, _) => (
                NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF,
                NGX_HTTP_LOC_CONF_OFFSET,
            ),
            (Place::StreamServer, _) => (NGX_STREAM_SRV_CONF, NGX_STREAM_SRV_CONF_OFFSET),
        };
        out[n] = ngx_command_t {
            name: d.name,
            type_: (place | d.args) as ngx_uint_t,
            set: Some(d.set),
            conf: conf as ngx_uint_t,
            offset: d.offset as ngx_uint_t,
            post: ptr::null_mut(),
        };
        n += 1;
    }
    out
}

const HTTP_N: usize = count(false) + 1;
const STREAM_N: usize = count(true) + 1;

static mut HTTP_COMMANDS: [ngx_command_t; HTTP_N] = commands::<HTTP_N>(false);
static mut STREAM_COMMANDS: [ngx_command_t; STREAM_N] = commands::<STREAM_N>(true);

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
