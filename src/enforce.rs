//! How checks reach nginx's balancers in this nginx, decided once per
//! configuration (docs/stock-mode.md): through the patch's hook when the
//! running nginx carries it (its symbols are there), else in stock mode,
//! where the module keeps the peers' own `down` flag in step with the
//! checks. Also the type that remembers an upstream's own `peer.init` when
//! the module wraps it (`crate::selection`).

use core::ffi::CStr;
use core::sync::atomic::{AtomicBool, Ordering};

use healthcheck_core::status::Group;
use ngx::ffi::{
    ngx_http_upstream_init_peer_pt, ngx_log_t, ngx_stream_upstream_init_peer_pt, NGX_LOG_NOTICE,
};

use crate::ffi::{self, find_global};

/// The globals the patched core exports (patches/README.md).
pub const HOOK_SYMBOLS: [&CStr; 2] = [
    c"ngx_http_upstream_check_peer_down_hook",
    c"ngx_stream_upstream_check_peer_down_hook",
];

/// Whether the running nginx carries the patch for `group`.
pub fn hook_present(group: Group) -> bool {
    find_global(HOOK_SYMBOLS[group as usize]).is_some()
}

/// Whether each context (http, stream) runs in stock mode.
static STOCK: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];

/// The notice of stock mode is logged once per process.
static NOTICE: AtomicBool = AtomicBool::new(false);

/// Decide how `group` enforces checks in this nginx (preconfiguration):
/// with the patch's hook when its symbols are there, else in stock mode
/// (logged once).
pub fn detect(group: Group, log: *mut ngx_log_t) {
    let stock = !hook_present(group);
    STOCK[group as usize].store(stock, Ordering::Relaxed);
    if stock && !NOTICE.swap(true, Ordering::Relaxed) {
        ffi::log(
            NGX_LOG_NOTICE,
            log,
            format_args!(
                "ngx_healthcheck_module: nginx has no balancer hook patch, enforcing checks \
                 through the peers' \"down\" flag"
            ),
        );
    }
}

/// Whether `group` runs in stock mode.
pub fn stock(group: Group) -> bool {
    STOCK[group as usize].load(Ordering::Relaxed)
}

/// The upstream's own `peer.init`, which the module's calls.
#[derive(Clone, Copy)]
pub enum Wrapped {
    Http(ngx_http_upstream_init_peer_pt),
    Stream(ngx_stream_upstream_init_peer_pt),
}
