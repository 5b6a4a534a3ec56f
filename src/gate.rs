//! The `healthcheck_gate` content handler (docs/directives.md,
//! healthcheck_gate): 200 while at least `min` peers of the upstream are
//! selectable (not disabled, and up or failing open), else 503, with a
//! one-line body; for a load balancer or a readiness probe in front of
//! nginx. The upstream is looked for among the http upstreams, then the
//! stream ones; the arguments and the verdict are core's
//! (`healthcheck_core::gate`).

use ngx::ffi::{
    ngx_http_discard_request_body, ngx_http_request_t, ngx_int_t, NGX_HTTP_GET, NGX_HTTP_HEAD,
    NGX_HTTP_INTERNAL_SERVER_ERROR, NGX_OK,
};

use healthcheck_core::gate::{GateConf, Tally};
use healthcheck_core::status::Group;

use crate::ffi::guard;
use crate::process;
use crate::status::{add_header, send, Row};
use crate::worker::Worker;

const TEXT: &str = "text/plain; charset=utf-8";

/// The location content handler.
///
/// # Safety
/// Called by nginx with a live request.
pub unsafe extern "C" fn ngx_http_healthcheck_gate_handler(
    r: *mut ngx_http_request_t,
) -> ngx_int_t {
    // SAFETY: nginx passes a live request.
    let Some(r) = (unsafe { r.as_mut() }) else {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    };
    // SAFETY: the connection of a live request is valid.
    let log = unsafe { (*r.connection).log };
    guard(
        log,
        "gate handler",
        NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t,
        || {
            // SAFETY: live request.
            unsafe { handle(r) }
        },
    )
}

/// # Safety
/// `r` is a live request.
unsafe fn handle(r: &mut ngx_http_request_t) -> ngx_int_t {
    // SAFETY: live request.
    if unsafe { ngx_http_discard_request_body(r) } != NGX_OK as ngx_int_t {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    }
    if r.method != NGX_HTTP_GET as usize && r.method != NGX_HTTP_HEAD as usize {
        // SAFETY: live request, static strings.
        return unsafe {
            add_header(r, "Allow", "GET, HEAD");
            send(
                r,
                405,
                TEXT,
                b"405 method not allowed: use GET or HEAD\n".to_vec(),
            )
        };
    }
    // SAFETY: loc_conf holds one entry per http module; ours was made by
    // create_loc_conf.
    let gate = unsafe {
        crate::modules::loc_conf::<crate::conf::LocConf>(r.loc_conf)
            .as_ref()
            .and_then(|c| c.gate.clone())
    };
    let Some(gate) = gate else {
        return ngx::ffi::NGX_DECLINED as ngx_int_t;
    };
    let tally = process::with(|w| tally(w, &gate)).unwrap_or_default();
    let (open, body) = gate.verdict(tally);
    // SAFETY: live request.
    unsafe { send(r, if open { 200 } else { 503 }, TEXT, body.into_bytes()) }
}

/// The upstream's checked peers and the selectable ones: its http
/// upstream of that name, else its stream one.
fn tally(w: &Worker, gate: &GateConf) -> Tally {
    let mut names = Vec::new();
    for group in [Group::Http, Group::Stream] {
        let context = w.context(group);
        let mut t = Tally::default();
        context.each_target(|target| {
            if target.upstream_bytes() != gate.upstream.as_slice() {
                return;
            }
            names.clear();
            let row = Row::copy(group, context, target, &mut names);
            let p = row.peer(&names);
            t.peers += 1;
            t.selectable += u64::from(!p.disabled && !p.draining && (p.up || p.fail_open));
        });
        if t.peers > 0 {
            return t;
        }
    }
    Tally::default()
}
