//! The module's part in each selection of a checked upstream besides the
//! patch's hook (docs/stock-mode.md; docs/directives.md, check: passive_fall,
//! and check_outlier).
//!
//! - **Stock mode.** In an nginx without the patch the balancers look at
//!   nothing but `peer->down`, so the module keeps that flag in step with
//!   the checks: before each selection of a checked upstream the worker
//!   applies every state change published since it last looked (one atomic
//!   load when nothing changed; `worker::Context::apply`).
//! - **Passive failures and outliers.** With `passive_fall` or
//!   `check_outlier`, the module sees how nginx ends each attempt
//!   (`peer.free`, and the upstream's state: status, times) and counts it.
//!
//! Both wrap the upstream's `peer.init` at configuration time, as nginx's
//! keepalive module does: ours runs first, then the balancer's own. For
//! `passive_fall` and `check_outlier` the request's peer callbacks are
//! wrapped too, with the balancer's callbacks and data kept in a small
//! struct in the request's pool.

use core::ffi::c_void;

use ngx::ffi::{ngx_current_msec, ngx_http_upstream_t, ngx_msec_t, ngx_stream_upstream_t};
use ngx::ffi::{
    ngx_event_free_peer_pt, ngx_event_get_peer_pt, ngx_event_notify_peer_pt,
    ngx_event_save_peer_session_pt, ngx_event_set_peer_session_pt, ngx_http_request_t,
    ngx_http_upstream_srv_conf_t, ngx_int_t, ngx_peer_connection_t, ngx_pool_t,
    ngx_stream_session_t, ngx_stream_upstream_srv_conf_t, ngx_uint_t, NGX_ERROR, NGX_OK,
};

use crate::conf::UpsConf;
use crate::enforce::{stock, Wrapped};
use crate::ffi::guard;
use crate::process;
use crate::ramp::Fast;
use crate::sessions::{Owner, Registration};
use crate::upstream::UpstreamRef;
use healthcheck_core::outlier::Attempt;
use healthcheck_core::status::Group;

/// Wrap `peer.init` of every checked upstream that needs it: all of them
/// in stock mode, those with `passive_fall` otherwise. Runs at the end of
/// the context's configuration, after nginx's upstream module set each
/// upstream's balancer up.
///
/// # Safety
/// `ups` are the context's upstreams of the configuration being finished.
pub unsafe fn wrap(proto: Group, ups: &[UpstreamRef]) {
    let stock = stock(proto);
    for u in ups {
        let conf = u.conf;
        // SAFETY: our srv conf of the block, in the configuration pool.
        let Some(c) = (unsafe { conf.as_mut() }) else {
            continue;
        };
        let Some(check) = c.check.get() else { continue };
        let counted = check.passive_fall > 0 || c.outlier.is_set();
        let ramps = check.slow_start_ms > 0;
        let counted = counted || c.shuts_sessions();
        if !stock && !counted && !ramps && u.resolve_lines == 0 || c.wrapped.is_some() {
            continue;
        }
        if ramps {
            // SAFETY: the block's srv conf of `proto`, its balancer set up.
            c.ramp_key = unsafe { crate::ramp::of_upstream(proto, u.srv) };
        }
        // SAFETY: `srv` is the block's srv conf of `proto`'s upstream
        // module; nginx set `peer.init` in its init_main_conf.
        let (theirs, ours) = unsafe {
            match proto {
                Group::Http => {
                    let us = &mut *u.srv.cast::<ngx_http_upstream_srv_conf_t>();
                    (
                        Wrapped::Http(us.peer.init),
                        Wrapped::Http(Some(http_init_peer)),
                    )
                }
                Group::Stream => {
                    let us = &mut *u.srv.cast::<ngx_stream_upstream_srv_conf_t>();
                    (
                        Wrapped::Stream(us.peer.init),
                        Wrapped::Stream(Some(stream_init_peer)),
                    )
                }
            }
        };
        c.wrapped = Some(theirs);
        let lazy = crate::ramp::Lazy {
            srv: u.srv,
            ours,
            theirs,
        };
        // Only `slow_start`, drawing from the sequence: the worker puts
        // ours in front while a ramp is active (`crate::ramp::Lazy`).
        let only_ramps = !stock && !counted && u.resolve_lines == 0 && !c.ramp_key.keyed();
        if only_ramps {
            c.lazy = Some(lazy);
        } else {
            // SAFETY: as above; the configuration is being finished.
            unsafe { lazy.set(true) };
        }
    }
}

/// Our srv conf of an upstream.
///
/// # Safety
/// `srv_conf` is an upstream's srv_conf array of `proto`.
unsafe fn ups_conf<'a>(srv_conf: *mut *mut c_void, proto: Group) -> Option<&'a UpsConf> {
    // SAFETY: per the contract; our create_srv_conf made the entry.
    unsafe { crate::modules::srv_conf::<UpsConf>(srv_conf, proto).as_ref() }
}

/// What happens before the balancer's own `peer.init`: stock mode applies
/// the state changes. After it, `passive_fall` and `check_outlier` watch
/// the attempts.
fn before(proto: Group, srv: usize, conf: &UpsConf) -> bool {
    if stock(proto) {
        process::with(|w| w.context(proto).apply(srv));
    } else {
        // Resolved peers: the view the hook reads (docs/resolved.md).
        process::with(|w| w.context(proto).refresh_srv(srv));
    }
    conf.check.get().is_some_and(|c| c.passive_fall > 0)
        || conf.outlier.is_set()
        || conf.shuts_sessions()
}

/// `slow_start`, before the balancer's own `peer.init` for upstream
/// `srv`: the request's time and draw while a ramp is active (`key`: a
/// hash balancer's key, asked only then), and in stock mode the ramping
/// peers' `down` bits.
fn ramp<'a>(proto: Group, srv: usize, conf: &UpsConf, key: impl FnOnce() -> Option<&'a [u8]>) {
    if !conf.ramps() {
        return;
    }
    let stock = stock(proto);
    let ready = match crate::ramp::ramp_fast(proto) {
        Fast::Idle => false,
        Fast::Ready => true,
        Fast::Slow => process::with(|w| w.context(proto).ramp_active(stock)).unwrap_or(false),
    };
    if ready && (stock || conf.ramp_key.keyed()) {
        let key = key();
        process::with(|w| w.context(proto).ramp_draw(srv, key, stock));
    }
}

unsafe extern "C" fn http_init_peer(
    r: *mut ngx_http_request_t,
    us: *mut ngx_http_upstream_srv_conf_t,
) -> ngx_int_t {
    // SAFETY: nginx passes a live request with its connection.
    let log = unsafe { (*(*r).connection).log };
    guard(log, "upstream peer init", NGX_ERROR as ngx_int_t, || {
        // SAFETY: `us` is the upstream being selected from.
        let Some(conf) = (unsafe { ups_conf((*us).srv_conf, Group::Http) }) else {
            return NGX_ERROR as ngx_int_t;
        };
        let Some(Wrapped::Http(Some(init))) = conf.wrapped else {
            return NGX_ERROR as ngx_int_t;
        };
        let watch = before(Group::Http, us as usize, conf);
        // SAFETY: the request being balanced, of this upstream.
        ramp(Group::Http, us as usize, conf, || unsafe {
            crate::ramp::http_key(conf.ramp_key, r)
        });
        // SAFETY: the balancer's own init, with nginx's arguments.
        let rc = unsafe { init(r, us) };
        if rc != NGX_OK as ngx_int_t || !watch {
            return rc;
        }
        // SAFETY: after a successful init the request has its upstream,
        // whose `peer` the balancer just filled in.
        unsafe {
            watch_attempts(
                &mut (*(*r).upstream).peer,
                (*r).pool,
                Group::Http,
                us.cast(),
                (*r).upstream.cast(),
                conf.shuts_sessions().then_some(r as usize),
            )
        }
    })
}

unsafe extern "C" fn stream_init_peer(
    s: *mut ngx_stream_session_t,
    us: *mut ngx_stream_upstream_srv_conf_t,
) -> ngx_int_t {
    // SAFETY: nginx passes a live session with its connection.
    let (log, pool) = unsafe { ((*(*s).connection).log, (*(*s).connection).pool) };
    guard(log, "upstream peer init", NGX_ERROR as ngx_int_t, || {
        // SAFETY: `us` is the upstream being selected from.
        let Some(conf) = (unsafe { ups_conf((*us).srv_conf, Group::Stream) }) else {
            return NGX_ERROR as ngx_int_t;
        };
        let Some(Wrapped::Stream(Some(init))) = conf.wrapped else {
            return NGX_ERROR as ngx_int_t;
        };
        let watch = before(Group::Stream, us as usize, conf);
        // Stream sessions draw from the sequence (`crate::ramp`).
        ramp(Group::Stream, us as usize, conf, || None);
        // SAFETY: the balancer's own init, with nginx's arguments.
        let rc = unsafe { init(s, us) };
        if rc != NGX_OK as ngx_int_t || !watch {
            return rc;
        }
        // SAFETY: as for http: the session's upstream and its peer.
        unsafe {
            watch_attempts(
                &mut (*(*s).upstream).peer,
                pool,
                Group::Stream,
                us.cast(),
                (*s).upstream.cast(),
                conf.shuts_sessions().then_some(s as usize),
            )
        }
    })
}

/// The balancer's callbacks and data for one request, behind ours.
#[repr(C)]
#[derive(Clone, Copy)]
struct Attempts {
    data: *mut c_void,
    get: ngx_event_get_peer_pt,
    free: ngx_event_free_peer_pt,
    notify: ngx_event_notify_peer_pt,
    set_session: ngx_event_set_peer_session_pt,
    save_session: ngx_event_save_peer_session_pt,
    proto: Group,
    srv: usize,
    /// The request's `ngx_http_upstream_t` or the session's
    /// `ngx_stream_upstream_t`: its state says how the attempt ended.
    upstream: *mut c_void,
    /// `check_shutdown_sessions`: the request's registration (NULL
    /// without).
    registration: *const Registration,
}

/// Put our callbacks in front of the balancer's for this request.
///
/// # Safety
/// `pc` is the request's peer connection right after the balancer's
/// `peer.init`; `pool` is the request's (session's) pool; `upstream` is
/// the request's (session's) upstream, of `proto`.
unsafe fn watch_attempts(
    pc: &mut ngx_peer_connection_t,
    pool: *mut ngx_pool_t,
    proto: Group,
    srv: *mut c_void,
    upstream: *mut c_void,
    owner: Option<usize>,
) -> ngx_int_t {
    let registration = match owner {
        None => core::ptr::null(),
        Some(ptr) => {
            let reg = Registration::new(Owner { proto, ptr });
            // SAFETY: the request's (session's) pool; the registration is
            // dropped with it.
            match unsafe { crate::pool::alloc(pool, reg) } {
                Some(r) => r.as_ptr().cast_const(),
                None => return NGX_ERROR as ngx_int_t,
            }
        }
    };
    let a = Attempts {
        registration,
        data: pc.data,
        get: pc.get,
        free: pc.free,
        notify: pc.notify,
        set_session: pc.set_session,
        save_session: pc.save_session,
        proto,
        srv: srv as usize,
        upstream,
    };
    // SAFETY: the pool lives as long as the request; plain pointers, no
    // cleanup needed.
    let Some(a) = (unsafe { crate::pool::alloc_plain(pool, a) }) else {
        return NGX_ERROR as ngx_int_t;
    };
    pc.data = a.as_ptr().cast();
    pc.get = Some(attempt_get);
    pc.free = Some(attempt_free);
    if pc.notify.is_some() {
        pc.notify = Some(attempt_notify);
    }
    if pc.set_session.is_some() {
        pc.set_session = Some(attempt_set_session);
    }
    if pc.save_session.is_some() {
        pc.save_session = Some(attempt_save_session);
    }
    NGX_OK as ngx_int_t
}

/// # Safety
/// `data` is what `watch_attempts` stored in `pc.data`.
unsafe fn attempts<'a>(data: *mut c_void) -> &'a Attempts {
    // SAFETY: per the contract.
    unsafe { &*data.cast::<Attempts>() }
}

unsafe extern "C" fn attempt_get(pc: *mut ngx_peer_connection_t, data: *mut c_void) -> ngx_int_t {
    // SAFETY: nginx passes the data we stored.
    let a = unsafe { attempts(data) };
    let rc = match a.get {
        // SAFETY: the balancer's own callback with its own data.
        Some(get) => unsafe { get(pc, a.data) },
        None => NGX_ERROR as ngx_int_t,
    };
    // SAFETY: NULL or the registration in the request's pool.
    if let Some(reg) = unsafe { a.registration.as_ref() } {
        if rc == NGX_OK as ngx_int_t || rc == ngx::ffi::NGX_DONE as ngx_int_t {
            // SAFETY: the balancer set the peer's sockaddr.
            let sockaddr = unsafe { (*pc).sockaddr } as usize;
            let slot = process::with(|w| w.context(a.proto).slot_of(a.srv, sockaddr)).flatten();
            if let Some(slot) = slot {
                reg.connect(slot);
            }
        }
    }
    rc
}

unsafe extern "C" fn attempt_free(
    pc: *mut ngx_peer_connection_t,
    data: *mut c_void,
    state: ngx_uint_t,
) {
    // SAFETY: nginx passes the data we stored and its peer connection.
    let (a, sockaddr, log) = unsafe { (attempts(data), (*pc).sockaddr, (*pc).log) };
    let failed = state & ngx::ffi::NGX_PEER_FAILED as ngx_uint_t != 0;
    // Read before the balancer's `free` (the keepalive module may take
    // the connection).
    // SAFETY: `pc` is the attempt's peer connection, `a.upstream` its
    // request's (session's) upstream.
    let attempt = unsafe { ended(a.proto, a.upstream, &*pc, failed) };
    // SAFETY: NULL or the registration in the request's pool.
    if let Some(reg) = unsafe { a.registration.as_ref() } {
        reg.end();
    }
    if let Some(free) = a.free {
        // SAFETY: the balancer's own callback with its own data.
        unsafe { free(pc, a.data, state) };
    }
    guard(log, "passive_fall", (), || {
        process::with(|w| {
            w.context(a.proto)
                .attempt_ended(a.srv, sockaddr as usize, failed, attempt, log)
        });
    });
}

/// How the attempt ended, from nginx's upstream state: the HTTP status,
/// whether it failed (nginx said so, or, in stream, the connection to the
/// peer saw an error or a timeout), and its time (http: the response
/// time so far; stream: the connect time).
///
/// # Safety
/// `upstream` is the request's `ngx_http_upstream_t` or the session's
/// `ngx_stream_upstream_t` (per `proto`), `pc` its peer connection.
unsafe fn ended(
    proto: Group,
    upstream: *mut c_void,
    pc: &ngx_peer_connection_t,
    failed: bool,
) -> Attempt {
    const UNSET: ngx_msec_t = ngx_msec_t::MAX;
    // SAFETY: nginx's cached clock.
    let now = unsafe { ngx_current_msec };
    let mut a = Attempt {
        status: 0,
        failed,
        time_ms: None,
    };
    match proto {
        Group::Http => {
            // SAFETY: per the contract; the state is the attempt's own
            // (pushed when it connected) or NULL.
            unsafe {
                let u = &*upstream.cast::<ngx_http_upstream_t>();
                if let Some(st) = u.state.as_ref() {
                    a.status = u16::try_from(st.status).unwrap_or(0);
                    a.time_ms = Some(if st.response_time != UNSET {
                        st.response_time as u64
                    } else {
                        now.wrapping_sub(u.start_time) as u64
                    });
                }
            }
        }
        Group::Stream => {
            // SAFETY: as above.
            unsafe {
                let u = &*upstream.cast::<ngx_stream_upstream_t>();
                if let Some(st) = u.state.as_ref() {
                    a.time_ms = (st.connect_time != UNSET).then_some(st.connect_time as u64);
                }
                if let Some(c) = pc.connection.as_ref() {
                    let (r, w) = (&*c.read, &*c.write);
                    a.failed |= r.error() != 0 || w.error() != 0 || r.timedout() != 0;
                }
            }
        }
    }
    a
}

unsafe extern "C" fn attempt_notify(
    pc: *mut ngx_peer_connection_t,
    data: *mut c_void,
    type_: ngx_uint_t,
) {
    // SAFETY: nginx passes the data we stored.
    let a = unsafe { attempts(data) };
    if let Some(notify) = a.notify {
        // SAFETY: the balancer's own callback with its own data.
        unsafe { notify(pc, a.data, type_) };
    }
}

unsafe extern "C" fn attempt_set_session(
    pc: *mut ngx_peer_connection_t,
    data: *mut c_void,
) -> ngx_int_t {
    // SAFETY: nginx passes the data we stored.
    let a = unsafe { attempts(data) };
    match a.set_session {
        // SAFETY: the balancer's own callback with its own data.
        Some(set) => unsafe { set(pc, a.data) },
        None => NGX_OK as ngx_int_t,
    }
}

unsafe extern "C" fn attempt_save_session(pc: *mut ngx_peer_connection_t, data: *mut c_void) {
    // SAFETY: nginx passes the data we stored.
    let a = unsafe { attempts(data) };
    if let Some(save) = a.save_session {
        // SAFETY: the balancer's own callback with its own data.
        unsafe { save(pc, a.data) };
    }
}
