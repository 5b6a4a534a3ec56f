//! The `healthcheck_admin` content handler (docs/directives.md, healthcheck_admin):
//! `POST ?upstream=&peer=|server=&action=[&group=]` disables, enables, or
//! sets the health of the peers it names, in the shared zone, and answers
//! their rows as JSON.
//!
//! The request is parsed by `healthcheck_core::admin`; this file finds the
//! peers in the worker's view, changes their slots (`Slot::set_disabled`,
//! `Slot::set_health`), publishes the change (`Header::note_change`, which
//! stock mode watches), logs it at `notice` with the client address and
//! renders the answer with `healthcheck_core::status::json`. Selection
//! asks `Slot::vetoed` on every pick, in every worker, so a change applies
//! from the next request on.

use ngx::ffi::{
    ngx_http_discard_request_body, ngx_http_request_t, ngx_int_t, NGX_HTTP_INTERNAL_SERVER_ERROR,
    NGX_HTTP_POST, NGX_LOG_NOTICE, NGX_OK,
};

use core::sync::atomic::Ordering;

use healthcheck_core::admin::{parse_admin_query, Action, AdminRequest, Select};
use healthcheck_core::events::{By, State};
use healthcheck_core::status::{json, Group};

use crate::ffi::{self, guard, str_bytes, unix_ms};
use crate::process;
use crate::status::{add_header, send, Row};
use crate::worker::Worker;

const TEXT: &str = "text/plain; charset=utf-8";

/// The location content handler.
///
/// # Safety
/// Called by nginx with a live request.
pub unsafe extern "C" fn ngx_http_healthcheck_admin_handler(
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
        "admin handler",
        NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t,
        || {
            // SAFETY: live request.
            unsafe { handle(r) }
        },
    )
}

/// What the action did to one peer.
struct Applied {
    row: Row,
    changed: bool,
}

/// Why a request names no peer.
enum Refusal {
    /// No checked upstream of that name.
    Upstream,
    /// The upstream has no such peer.
    Peer,
    /// The shared state is missing (a broken invariant).
    State,
}

/// # Safety
/// `r` is a live request.
unsafe fn handle(r: &mut ngx_http_request_t) -> ngx_int_t {
    // SAFETY: live request.
    if unsafe { ngx_http_discard_request_body(r) } != NGX_OK as ngx_int_t {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    }
    if r.method != NGX_HTTP_POST as usize {
        // SAFETY: live request, static strings.
        return unsafe {
            add_header(r, "Allow", "POST");
            send(r, 405, TEXT, b"405 method not allowed: use POST\n".to_vec())
        };
    }
    // SAFETY: args point into the request buffer.
    let args = unsafe { str_bytes(&r.args) };
    let req = match parse_admin_query(args) {
        Ok(req) => req,
        Err(reason) => {
            let mut body = reason.into_bytes();
            body.push(b'\n');
            // SAFETY: live request.
            return unsafe { send(r, 400, TEXT, body) };
        }
    };
    // SAFETY: the connection of a live request; its address text lives in
    // the connection's pool.
    let (log, client) = unsafe {
        let c = &*r.connection;
        (
            c.log,
            String::from_utf8_lossy(str_bytes(&c.addr_text)).into_owned(),
        )
    };
    let mut names = Vec::new();
    let done = process::with(|w| apply(w, &req, &mut names, log, &client));
    let applied = match done {
        Some(Ok(applied)) => applied,
        Some(Err(why)) => {
            let what = match &req.select {
                Select::Peer(p) => format!("peer \"{}\"", String::from_utf8_lossy(p)),
                Select::Server(s) => format!("server \"{}\"", String::from_utf8_lossy(s)),
            };
            let upstream = String::from_utf8_lossy(&req.upstream);
            let (status, msg) = match why {
                Refusal::Upstream => (404, format!("no checked upstream \"{upstream}\"")),
                Refusal::Peer => (404, format!("upstream \"{upstream}\" has no {what}")),
                Refusal::State => (503, "health check state is not available".to_string()),
            };
            let mut body = msg.into_bytes();
            body.push(b'\n');
            // SAFETY: live request.
            return unsafe { send(r, status, TEXT, body) };
        }
        // No worker state (not a worker process): nothing to act on.
        None => {
            // SAFETY: live request.
            return unsafe {
                send(
                    r,
                    503,
                    TEXT,
                    b"health check state is not available\n".to_vec(),
                )
            };
        }
    };
    let rows: Vec<_> = applied
        .iter()
        .map(|a| (a.row.peer(&names), a.changed))
        .collect();
    let mut body = Vec::new();
    json::admin_answer(req.action.as_str(), &rows, &mut body);
    // SAFETY: live request.
    unsafe { send(r, 200, "application/json", body) }
}

/// Apply `req` to the peers it names in both contexts (or its group's).
fn apply(
    w: &Worker,
    req: &AdminRequest,
    names: &mut Vec<u8>,
    log: *mut ngx::ffi::ngx_log_t,
    client: &str,
) -> Result<Vec<Applied>, Refusal> {
    let mut known_upstream = false;
    let mut out = Vec::new();
    for group in [Group::Http, Group::Stream] {
        if req.group.is_some_and(|g| g != group) {
            continue;
        }
        let context = w.context(group);
        let mut result = Ok(());
        context.each_target(|t| {
            if result.is_err() || t.upstream_bytes() != req.upstream.as_slice() {
                return;
            }
            known_upstream = true;
            if !req.selects(
                group,
                t.upstream_bytes(),
                t.peer.name_bytes(),
                t.peer.server_bytes(),
            ) {
                return;
            }
            let Some((zone, slot)) = context
                .zone
                .as_ref()
                .and_then(|z| Some((z, z.slot(t.index as usize)?)))
            else {
                result = Err(Refusal::State);
                return;
            };
            let changed = match req.action {
                Action::Disable => slot.set_disabled(true),
                Action::Drain => slot.set_draining(true),
                Action::Enable => {
                    let enabled = slot.set_disabled(false) | slot.set_draining(false);
                    if enabled && slot.serving() {
                        slot.returned(unix_ms());
                    }
                    enabled
                }
                Action::Down => slot.set_health(false, unix_ms()),
                Action::Up => slot.set_health(true, unix_ms()),
            };
            if changed {
                zone.header().note_change();
                // An operator's word may leave no peer selectable, or one.
                t.check.update_fail_open(zone, log);
                let what = match req.action {
                    Action::Disable => "disabled",
                    Action::Drain => "drained",
                    Action::Enable => "enabled",
                    Action::Down => "set down",
                    Action::Up => "set up",
                };
                if t.check.events.is_some() {
                    let health = State::health(slot.up.load(Ordering::Relaxed) != 0);
                    let states = match req.action {
                        Action::Disable => (health, State::Disabled),
                        Action::Drain => (health, State::Draining),
                        Action::Enable => (State::Disabled, health),
                        Action::Down => (State::Up, State::Down),
                        Action::Up => (State::Down, State::Up),
                    };
                    let detail = format!("by client {client}");
                    let names = (t.peer.name_bytes(), t.peer.server_bytes());
                    let mut ev = t.check.event(Some(names), states, By::Admin);
                    ev.reason = Some(req.action.as_str());
                    ev.detail = Some(&detail);
                    ev.checks = Some(slot.checks.load(Ordering::Relaxed));
                    t.check.emit(zone, &ev);
                }
                ffi::log(
                    NGX_LOG_NOTICE,
                    log,
                    format_args!(
                        "healthcheck_admin: {} upstream \"{}\" peer {} (server \"{}\") {} by client {}",
                        group.as_str(),
                        String::from_utf8_lossy(t.upstream_bytes()),
                        String::from_utf8_lossy(t.peer.name_bytes()),
                        String::from_utf8_lossy(t.peer.server_bytes()),
                        what,
                        client
                    ),
                );
            }
            let mut row = Row::copy(group, context, t, names);
            row.shared = crate::status::shared_rows(w, (group, t.index));
            out.push(Applied { row, changed });
        });
        result?;
    }
    match (known_upstream, out.is_empty()) {
        (false, _) => Err(Refusal::Upstream),
        (true, true) => Err(Refusal::Peer),
        _ => Ok(out),
    }
}
