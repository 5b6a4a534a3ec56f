//! Configuration: the module's configuration structs, the directive
//! handlers (shared by http and stream; `vnswrr`'s is in `crate::vnswrr`)
//! and the per-context finishing step, which runs the cross-directive rules
//! of `healthcheck_core::conf::finish_context` and registers the shared zone
//! they lay out.
//!
//! Data flows one way: conf depends on no other view of nginx's upstreams;
//! `crate::upstream` and `crate::vnswrr` read and fill these structs.

use core::any::Any;
use core::ffi::{c_char, c_void};
use core::ptr;

use healthcheck_core::conf::{self as cc, CheckConf, VnswrrConf};
use healthcheck_core::status::Group;
use ngx::core::{NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::ffi::{
    ngx_command_t, ngx_conf_t, ngx_module_t, ngx_pagesize, ngx_shared_memory_add, ngx_shm_zone_t,
    ngx_str_t, NGX_LOG_EMERG, NGX_LOG_WARN,
};

use crate::ffi::{conf_args, guard, log_at, ConfLoc};
use crate::shm::{self, ZonePlan};

/// Main configuration of the http or the stream context.
pub struct MainConf {
    /// `check_shm_size`, when given.
    pub shm_size: Option<u64>,
    pub shm_size_loc: ConfLoc,
    pub zone: *mut ngx_shm_zone_t,
}

impl Default for MainConf {
    fn default() -> Self {
        Self {
            shm_size: None,
            shm_size_loc: ConfLoc::default(),
            zone: ptr::null_mut(),
        }
    }
}

/// Per-upstream configuration (created for every server block too, where
/// it stays empty).
#[derive(Default)]
pub struct UpsConf {
    pub check: Option<CheckConf>,
    pub check_loc: ConfLoc,
    pub keepalive_requests: Option<u32>,
    pub keepalive_requests_loc: ConfLoc,
    pub vnswrr: Option<VnswrrConf>,
    /// The per-upstream state of the balancer the module installed: the
    /// `vnswrr` balancer's, which builds it in its `init_upstream` and
    /// alone knows its type (`crate::vnswrr`).
    pub balancer: Option<Box<dyn Any>>,
}

/// Per-location configuration of the http context.
#[derive(Default)]
pub struct LocConf {
    pub status: Option<cc::StatusConf>,
}

fn emerg(cf: *mut ngx_conf_t, msg: &str) -> *mut c_char {
    ngx::ngx_conf_log_error!(NGX_LOG_EMERG, cf, "{}", msg);
    NGX_CONF_ERROR
}

/// Common prologue of a directive handler: turn the raw pointers into
/// references, refuse a duplicate (`is_set`), and run `f` under the panic
/// guard with the directive's arguments; an `Err` message is logged as
/// `[emerg]` (an empty one fails silently).
///
/// # Safety
/// nginx's directive-handler contract: `cf` valid, `conf` points to a `T`.
pub(crate) unsafe fn directive<T>(
    cf: *mut ngx_conf_t,
    conf: *mut c_void,
    is_set: impl FnOnce(&T) -> bool,
    f: impl FnOnce(&ngx_conf_t, &mut T, &[&[u8]]) -> Result<(), String>,
) -> *mut c_char {
    // SAFETY: nginx passes the configuration being parsed.
    let cfr = unsafe { &*cf };
    // SAFETY: the command's `conf` offset selects our struct of type `T`.
    let Some(conf) = (unsafe { conf.cast::<T>().as_mut() }) else {
        return NGX_CONF_ERROR;
    };
    if is_set(conf) {
        return DUPLICATE;
    }
    // SAFETY: called from a directive handler.
    let args = unsafe { conf_args(cfr) };
    let rest = args.get(1..).unwrap_or_default();
    let r = guard(
        cfr.log,
        "configuration",
        Err(String::from("internal error")),
        || f(cfr, conf, rest),
    );
    match r {
        Ok(()) => NGX_CONF_OK,
        Err(msg) if msg.is_empty() => NGX_CONF_ERROR,
        Err(msg) => emerg(cf, &msg),
    }
}

const DUPLICATE: *mut c_char = c"is duplicate".as_ptr().cast_mut();

/// `check ...;` in an upstream block.
pub unsafe extern "C" fn ngx_upstream_check(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        directive::<UpsConf>(
            cf,
            conf,
            |c| c.check.is_some(),
            |cf, c, args| {
                c.check = Some(cc::parse_check(args).map_err(|e| e.to_string())?);
                // SAFETY: inside a directive handler.
                c.check_loc = ConfLoc::here(cf);
                Ok(())
            },
        )
    }
}

/// `check_keepalive_requests n;` in an upstream block.
pub unsafe extern "C" fn ngx_upstream_check_keepalive_requests(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        directive::<UpsConf>(
            cf,
            conf,
            |c| c.keepalive_requests.is_some(),
            |cf, c, args| {
                let v = args.first().copied().unwrap_or_default();
                c.keepalive_requests =
                    Some(cc::parse_keepalive_requests(v).map_err(|e| e.to_string())?);
                c.keepalive_requests_loc = ConfLoc::here(cf);
                Ok(())
            },
        )
    }
}

/// `check_shm_size size;` in http or stream.
pub unsafe extern "C" fn ngx_upstream_check_shm_size(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        directive::<MainConf>(
            cf,
            conf,
            |c| c.shm_size.is_some(),
            |cf, c, args| {
                let v = args.first().copied().unwrap_or_default();
                c.shm_size = Some(cc::parse_shm_size(v).map_err(|e| e.to_string())?);
                c.shm_size_loc = ConfLoc::here(cf);
                Ok(())
            },
        )
    }
}

/// `healthcheck_status [format];` in a location.
///
/// # Safety
/// nginx's directive contract; `conf` points to our `LocConf`.
pub unsafe fn set_status(cf: *mut ngx_conf_t, conf: *mut c_void) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        directive::<LocConf>(
            cf,
            conf,
            |c| c.status.is_some(),
            |_, c, args| {
                c.status = Some(cc::parse_status_directive(args).map_err(|e| e.to_string())?);
                Ok(())
            },
        )
    }
}

/// What finishing a context reads from one upstream block. The views of
/// `crate::upstream` implement it, so that configuration data flows one
/// way: upstream views read `UpsConf`; conf does not know the views.
pub trait UpstreamBlock {
    /// Our srv conf of the block.
    fn conf(&self) -> &UpsConf;
    /// The block's name.
    fn name_bytes(&self) -> &[u8];
    /// Its checked peers (collected only when it has `check`).
    fn peer_facts(&self) -> Vec<cc::PeerFacts<'_>>;
}

/// Finish a context: cross-directive validation (`cc::finish_context`),
/// zone sizing, zone registration. Runs in `init_main_conf`, after nginx
/// built the peers.
///
/// # Safety
/// `cf` is the configuration of the context being finished; `tag` is the
/// module owning `mcf`.
pub unsafe fn finish_context<U: UpstreamBlock>(
    cf: *mut ngx_conf_t,
    group: Group,
    mcf: &mut MainConf,
    upstreams: &[U],
    tag: *mut ngx_module_t,
) -> Result<(), ()> {
    // SAFETY: valid during configuration.
    let log = unsafe { (*cf).log };
    let facts: Vec<cc::UpstreamFacts<'_>> = upstreams
        .iter()
        .map(|u| {
            let c = u.conf();
            cc::UpstreamFacts {
                name: u.name_bytes(),
                check: c.check.as_ref(),
                keepalive_requests: c.keepalive_requests,
                peers: u.peer_facts(),
            }
        })
        .collect();
    // SAFETY: set by nginx at start.
    let page = unsafe { ngx_pagesize };
    let finished = cc::finish_context(group, &facts, mcf.shm_size, |n| shm::required_size(n, page));
    // Where each directive was written (the indices are the facts', so
    // the upstreams').
    let loc = |at: cc::Directive| {
        match at {
            cc::Directive::Check(i) => upstreams.get(i).map(|u| u.conf().check_loc),
            cc::Directive::KeepaliveRequests(i) => {
                upstreams.get(i).map(|u| u.conf().keepalive_requests_loc)
            }
            cc::Directive::ShmSize => Some(mcf.shm_size_loc),
        }
        .unwrap_or_default()
    };
    for w in &finished.warnings {
        // SAFETY: valid log.
        unsafe { log_at(NGX_LOG_WARN, log, &loc(w.at), &w.error.0) };
    }
    let layout = match finished.result {
        Ok(layout) => layout,
        Err(e) => {
            // SAFETY: valid log.
            unsafe { log_at(NGX_LOG_EMERG, log, &loc(e.at), &e.error.0) };
            return Err(());
        }
    };

    let zone_name = shm::ZONE_NAMES[group as usize];
    let mut name = ngx_str_t {
        len: zone_name.len(),
        data: zone_name.as_ptr().cast_mut(),
    };
    // SAFETY: valid cf; the name is static.
    let zone =
        unsafe { ngx_shared_memory_add(cf, &mut name as *mut ngx_str_t, layout.size, tag.cast()) };
    // SAFETY: NULL or a zone nginx owns.
    let Some(z) = (unsafe { zone.as_mut() }) else {
        return Err(());
    };
    let plan = ZonePlan {
        identities: layout.identities,
        default_down: layout.default_down,
    };
    // SAFETY: the configuration's pool lives as long as the zone's use of
    // the plan (the zone's `init` reads it while this cycle is set up).
    let Some(plan) = (unsafe { crate::pool::alloc((*cf).pool, plan) }) else {
        return Err(());
    };
    z.init = Some(shm::init_zone);
    z.data = plan.as_ptr().cast();
    // A fresh zone on every load; `init` receives the old zone's data.
    z.noreuse = 1;
    mcf.zone = zone;
    Ok(())
}
