//! The patch's selection hooks (patches/README.md).
//!
//! The patched nginx exports two NULL-default function pointers that every
//! balancer consults next to `peer->down`. They are found with `dlsym`
//! rather than linked, so that this module also loads into an unpatched
//! nginx (stock mode, `crate::enforce`), and set only in processes that
//! serve traffic.

use core::ffi::c_void;
use core::ptr;

use ngx::ffi::ngx_uint_t;

use crate::enforce::HOOK_SYMBOLS;
use crate::ffi::{find_global, guard};
use crate::process;
use healthcheck_core::status::Group;

/// The hook's C type; peers and peer are the balancer's rr structures.
type Hook = Option<unsafe extern "C" fn(*mut c_void, *mut c_void) -> ngx_uint_t>;

fn slot(proto: Group) -> Option<*mut Hook> {
    find_global(HOOK_SYMBOLS[proto as usize]).map(|p| p.cast::<Hook>())
}

/// Point the hooks at this module (worker processes only).
pub fn install() {
    if let Some(p) = slot(Group::Http) {
        // SAFETY: the patched core defines this global with exactly the
        // `Hook` type; nginx is single-threaded per process.
        unsafe { p.write(Some(ngx_http_upstream_check_peer_down)) };
    }
    if let Some(p) = slot(Group::Stream) {
        // SAFETY: as above.
        unsafe { p.write(Some(ngx_stream_upstream_check_peer_down)) };
    }
}

/// Reset the hooks to NULL (process exit).
pub fn uninstall() {
    for proto in [Group::Http, Group::Stream] {
        if let Some(p) = slot(proto) {
            // SAFETY: as in `install`.
            unsafe { p.write(None) };
        }
    }
}

unsafe extern "C" fn ngx_http_upstream_check_peer_down(
    peers: *mut c_void,
    peer: *mut c_void,
) -> ngx_uint_t {
    // `peer_down` reads atomics and a fixed table with bounds-checked
    // lookups; the guard is there all the same (docs/design.md, Panics).
    guard(ptr::null_mut(), "selection hook", 0, || {
        process::peer_down(Group::Http, peers as usize, peer as usize) as ngx_uint_t
    })
}

unsafe extern "C" fn ngx_stream_upstream_check_peer_down(
    peers: *mut c_void,
    peer: *mut c_void,
) -> ngx_uint_t {
    guard(ptr::null_mut(), "selection hook", 0, || {
        process::peer_down(Group::Stream, peers as usize, peer as usize) as ngx_uint_t
    })
}
