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
    /// The context's `check_match` blocks, their regexes compiled, in
    /// configuration order (`crate::match_block`).
    pub matches: Vec<std::rc::Rc<crate::match_block::CompiledMatch>>,
    pub matches_loc: Vec<ConfLoc>,
    /// `check_state_file`: the full path.
    pub state_file: Option<Vec<u8>>,
}

impl Default for MainConf {
    fn default() -> Self {
        Self {
            shm_size: None,
            shm_size_loc: ConfLoc::default(),
            zone: ptr::null_mut(),
            matches: Vec::new(),
            matches_loc: Vec::new(),
            state_file: None,
        }
    }
}

/// The `check_http_*` and `check_buffer_size` directives of an upstream.
#[derive(Default)]
pub struct HttpConf {
    /// `check_http_send`: the whole request.
    pub send: Option<Vec<u8>>,
    pub send_loc: ConfLoc,
    /// `check_http_request`: method and URI.
    pub request: Option<(Vec<u8>, Vec<u8>)>,
    pub request_loc: ConfLoc,
    /// `check_http_header` lines, in order.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub header_loc: ConfLoc,
    /// `check_http_expect_alive`.
    pub expect_alive: Option<cc::StatusClasses>,
    pub expect_alive_loc: ConfLoc,
    /// `check_buffer_size`.
    pub buffer_size: Option<usize>,
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
    pub http: HttpConf,
    /// The `check_ssl_*` directives and the SSL context (`crate::tls`).
    pub tls: crate::tls::TlsConf,
    /// `check_fail_open`.
    pub fail_open: Option<cc::FailOpen>,
    pub fail_open_loc: ConfLoc,
    /// The upstream's own `peer.init`, when the module wrapped it
    /// (`crate::selection`).
    pub wrapped: Option<crate::selection::Wrapped>,
    /// The per-upstream state of the balancer the module installed: the
    /// `vnswrr` balancer's, which builds it in its `init_upstream` and
    /// alone knows its type (`crate::vnswrr`).
    pub balancer: Option<Box<dyn Any>>,
}

/// Per-location configuration of the http context.
#[derive(Default)]
pub struct LocConf {
    pub status: Option<cc::StatusConf>,
    /// `healthcheck_admin`.
    pub admin: bool,
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

/// `check_fail_open off|on|N%;` in an upstream block.
pub unsafe extern "C" fn ngx_upstream_check_fail_open(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        directive::<UpsConf>(
            cf,
            conf,
            |c| c.fail_open.is_some(),
            |cf, c, args| {
                c.fail_open = Some(cc::parse_fail_open(args).map_err(|e| e.to_string())?);
                c.fail_open_loc = ConfLoc::here(cf);
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

/// `check_state_file PATH;` in http or stream.
pub unsafe extern "C" fn ngx_upstream_check_state_file(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        directive::<MainConf>(
            cf,
            conf,
            |c| c.state_file.is_some(),
            |cf, c, args| {
                let v = args.first().copied().unwrap_or_default();
                let prefix = prefix_of(cf);
                let path = cc::parse_state_file(v, prefix).map_err(|e| e.to_string())?;
                // Each context writes its own file: refuse the path the
                // other context (parsed before this one) already has.
                // SAFETY: a directive handler's configuration.
                if let Some(other) = other_state_file(cf) {
                    if other.1 == path.as_slice() {
                        return Err(format!(
                            "invalid value \"{}\" in \"check_state_file\" directive: the {} \
                             context uses this file already; give http and stream their own",
                            String::from_utf8_lossy(v),
                            other.0.as_str()
                        ));
                    }
                }
                c.state_file = Some(path);
                Ok(())
            },
        )
    }
}

/// The other context's `check_state_file` (stream's when parsing http,
/// http's when parsing stream), if its block was parsed already.
///
/// # Safety
/// `cf` is the configuration being parsed, inside the http or stream block.
unsafe fn other_state_file(cf: &ngx_conf_t) -> Option<(Group, &[u8])> {
    use ngx::ffi::{ngx_http_conf_ctx_t, ngx_http_module, ngx_stream_conf_ctx_t, NGX_HTTP_MODULE};
    let other = if cf.module_type == NGX_HTTP_MODULE as usize {
        Group::Stream
    } else {
        Group::Http
    };
    // SAFETY: the cycle's conf_ctx has one entry per core module, NULL
    // until its block is parsed; the block's ctx holds its main_conf
    // array, where our module's entry is our `MainConf`.
    unsafe {
        let cycle = cf.cycle.as_ref()?;
        let (index, ctx_index) = match other {
            Group::Http => (
                ngx_http_module.index,
                (*ptr::addr_of!(crate::ngx_http_upstream_check_module)).ctx_index,
            ),
            // nginx's stream module may be a module not loaded (README:
            // Installing into the nginx you already have).
            Group::Stream => (
                crate::stream_link::stream_module()?.index,
                (*ptr::addr_of!(crate::ngx_stream_upstream_check_module)).ctx_index,
            ),
        };
        let ctx = (*cycle.conf_ctx.add(index)).cast::<c_void>();
        if ctx.is_null() {
            return None;
        }
        let main_conf = match other {
            Group::Http => (*ctx.cast::<ngx_http_conf_ctx_t>()).main_conf,
            Group::Stream => (*ctx.cast::<ngx_stream_conf_ctx_t>()).main_conf,
        };
        if main_conf.is_null() {
            return None;
        }
        let mcf = (*main_conf.add(ctx_index)).cast::<MainConf>();
        mcf.as_ref()?.state_file.as_deref().map(|p| (other, p))
    }
}

/// nginx's prefix (`-p`), which relative paths are under.
fn prefix_of(cf: &ngx_conf_t) -> &[u8] {
    // SAFETY: a configuration being parsed belongs to a live cycle whose
    // prefix is set before any directive.
    unsafe {
        cf.cycle
            .as_ref()
            .map_or(&[][..], |c| crate::ffi::str_bytes(&c.prefix))
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
                if c.admin {
                    return Err(ONE_HANDLER.into());
                }
                c.status = Some(cc::parse_status_directive(args).map_err(|e| e.to_string())?);
                Ok(())
            },
        )
    }
}

const ONE_HANDLER: &str =
    "\"healthcheck_status\" and \"healthcheck_admin\" cannot share a location";

/// `healthcheck_admin;` in a location.
///
/// # Safety
/// nginx's directive contract; `conf` points to our `LocConf`.
pub unsafe fn set_admin(cf: *mut ngx_conf_t, conf: *mut c_void) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        directive::<LocConf>(
            cf,
            conf,
            |c| c.admin,
            |_, c, _| {
                if c.status.is_some() {
                    return Err(ONE_HANDLER.into());
                }
                c.admin = true;
                Ok(())
            },
        )
    }
}

/// A directive of `HttpConf` given at most once: parse its arguments with
/// `parse` and store the value with its position.
///
/// # Safety
/// nginx's directive contract (`conf` is our `UpsConf`).
unsafe fn http_directive(
    cf: *mut ngx_conf_t,
    conf: *mut c_void,
    is_set: impl FnOnce(&HttpConf) -> bool,
    set: impl FnOnce(&ngx_conf_t, &mut HttpConf, &[&[u8]]) -> Result<(), String>,
) -> *mut c_char {
    // SAFETY: per the contract.
    unsafe {
        directive::<UpsConf>(
            cf,
            conf,
            |c| is_set(&c.http),
            |cf, c, args| set(cf, &mut c.http, args),
        )
    }
}

/// `check_http_send "request";`
pub unsafe extern "C" fn ngx_upstream_check_http_send(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        http_directive(
            cf,
            conf,
            |h| h.send.is_some(),
            |cf, h, args| {
                let [arg] = args else {
                    return Err(
                        "invalid number of arguments in \"check_http_send\" directive".into(),
                    );
                };
                let send = cc::parse_http_send(arg).map_err(|e| e.to_string())?;
                // SAFETY: inside a directive handler.
                h.send_loc = ConfLoc::here(cf);
                if let Some(w) = send.warning {
                    // (valid log: the configuration's)
                    log_at(NGX_LOG_WARN, cf.log, &h.send_loc, &w.0);
                }
                h.send = Some(send.request);
                Ok(())
            },
        )
    }
}

/// `check_http_expect_alive http_2xx ...;`
pub unsafe extern "C" fn ngx_upstream_check_http_expect_alive(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        http_directive(
            cf,
            conf,
            |h| h.expect_alive.is_some(),
            |cf, h, args| {
                h.expect_alive =
                    Some(cc::parse_http_expect_alive(args).map_err(|e| e.to_string())?);
                // SAFETY: inside a directive handler.
                h.expect_alive_loc = ConfLoc::here(cf);
                Ok(())
            },
        )
    }
}

/// `check_http_request [METHOD] URI;`
pub unsafe extern "C" fn ngx_upstream_check_http_request(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        http_directive(
            cf,
            conf,
            |h| h.request.is_some(),
            |cf, h, args| {
                h.request = Some(cc::parse_http_request(args).map_err(|e| e.to_string())?);
                // SAFETY: inside a directive handler.
                h.request_loc = ConfLoc::here(cf);
                Ok(())
            },
        )
    }
}

/// `check_http_header NAME VALUE;` (repeatable).
pub unsafe extern "C" fn ngx_upstream_check_http_header(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        http_directive(
            cf,
            conf,
            |_| false,
            |cf, h, args| {
                let (name, value) = cc::parse_http_header(args).map_err(|e| e.to_string())?;
                if h.headers.is_empty() {
                    // SAFETY: inside a directive handler.
                    h.header_loc = ConfLoc::here(cf);
                }
                match h
                    .headers
                    .iter_mut()
                    .find(|(n, _)| n.eq_ignore_ascii_case(&name))
                {
                    Some(slot) => slot.1 = value,
                    None => h.headers.push((name, value)),
                }
                Ok(())
            },
        )
    }
}

/// `check_buffer_size SIZE;`
pub unsafe extern "C" fn ngx_upstream_check_buffer_size(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        http_directive(
            cf,
            conf,
            |h| h.buffer_size.is_some(),
            |_, h, args| {
                let [arg] = args else {
                    return Err(
                        "invalid number of arguments in \"check_buffer_size\" directive".into(),
                    );
                };
                h.buffer_size = Some(cc::parse_buffer_size(arg).map_err(|e| e.to_string())?);
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
    /// Its `server ... resolve` lines.
    fn resolve_lines(&self) -> usize;
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
                http: cc::HttpDirectives {
                    send: c.http.send.is_some(),
                    request: c.http.request.is_some(),
                    header: !c.http.headers.is_empty(),
                    expect_alive: c.http.expect_alive.is_some(),
                },
                fail_open: c.fail_open.is_some(),
                tls: c.tls.facts(),
                resolve_lines: u.resolve_lines(),
            }
        })
        .collect();
    // SAFETY: set by nginx at start.
    let page = unsafe { ngx_pagesize };
    let blocks: Vec<healthcheck_core::matcher::MatchBlock> =
        mcf.matches.iter().map(|m| m.block.clone()).collect();
    let finished = cc::finish_context(group, &facts, &blocks, mcf.shm_size, |n, d| {
        shm::required_size(n, d, page)
    });
    // Where each directive was written (the indices are the facts', so
    // the upstreams').
    let loc = |at: cc::Directive| {
        match at {
            cc::Directive::Check(i) => upstreams.get(i).map(|u| u.conf().check_loc),
            cc::Directive::KeepaliveRequests(i) => {
                upstreams.get(i).map(|u| u.conf().keepalive_requests_loc)
            }
            cc::Directive::ShmSize => Some(mcf.shm_size_loc),
            cc::Directive::HttpSend(i) => upstreams.get(i).map(|u| u.conf().http.send_loc),
            cc::Directive::HttpRequest(i) => upstreams.get(i).map(|u| u.conf().http.request_loc),
            cc::Directive::HttpHeader(i) => upstreams.get(i).map(|u| u.conf().http.header_loc),
            cc::Directive::HttpExpectAlive(i) => {
                upstreams.get(i).map(|u| u.conf().http.expect_alive_loc)
            }
            cc::Directive::Match(j) => mcf.matches_loc.get(j).copied(),
            cc::Directive::FailOpen(i) => upstreams.get(i).map(|u| u.conf().fail_open_loc),
            cc::Directive::Tls(i, d) => upstreams.get(i).and_then(|u| u.conf().tls.loc(d)),
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
        dynamic: layout.dynamic,
        tags: layout.tags,
        group,
        state_file: mcf.state_file.clone(),
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
