//! Configuration: the module's configuration structs and the directive
//! handlers of http and stream (the `check_ssl_*` ones are in `crate::tls`,
//! `check_match` in `crate::match_block`, `vnswrr` in `crate::vnswrr`).
//! Each handler parses its arguments with `healthcheck_core::conf` and
//! stores the value with where it was written; the rules across
//! directives run when the context is complete (`crate::finish`).
//!
//! These structs are the bottom of the module graph: they name no view of
//! nginx's upstreams and no runtime state (docs/design.md, Module layers).

use core::any::Any;
use core::ffi::{c_char, c_void};
use core::ptr;
use std::rc::Rc;

use healthcheck_core::conf::{
    self as cc, CheckConf, ConfError, FailOpen, StatusClasses, VnswrrConf,
};
use healthcheck_core::http::request::HttpRequest;
use healthcheck_core::status::Group;
use ngx::ffi::{
    ngx_command_t, ngx_conf_t, ngx_open_file_t, ngx_shm_zone_t, ngx_syslog_peer_t, NGX_HTTP_MODULE,
    NGX_LOG_WARN,
};

use crate::directive::{one, run, Repeat, Setting};
use crate::enforce::Wrapped;
use crate::ffi::log_at;
use crate::match_block::{CompiledMatch, MatchBlocks};

/// Main configuration of the http or the stream context.
pub struct MainConf {
    /// `check_shm_size`.
    pub shm_size: Setting<u64>,
    /// The context's zone, once registered.
    pub zone: *mut ngx_shm_zone_t,
    /// The context's `check_match` blocks (`crate::match_block` fills it
    /// through the command's offset).
    pub matches: MatchBlocks,
    /// `check_state_file`: the full path.
    pub state_file: Setting<Vec<u8>>,
    /// The context's upstreams that may want the migration notice
    /// (`crate::finish`).
    pub migration: cc::migration::Candidates,
    /// http: a `check_status` (under any of its names) is in the context.
    pub check_status: bool,
    /// The names of the context's upstreams that have `check`.
    pub checked: Vec<Vec<u8>>,
    /// http: the `healthcheck_gate` upstreams no context has been seen to
    /// check yet, and where each was written (`crate::finish`).
    pub gates: Vec<(Vec<u8>, crate::ffi::ConfLoc)>,
    /// `check_log` of the http or stream block (written into the block's
    /// own `UpsConf`, copied here when the block is complete).
    pub event_log: Option<EventSink>,
    /// `check_max_inflight` of the http or stream block (as `event_log`).
    pub max_inflight: Option<u32>,
    /// `check_max_connections`.
    pub max_connections: Setting<cc::ConnLimit>,
    /// The context's checked peers whose check keeps its connection, and
    /// where the first such `check` was written (`crate::finish`).
    pub kept_peers: (usize, crate::ffi::ConfLoc),
}

impl Default for MainConf {
    fn default() -> Self {
        Self {
            shm_size: Setting::default(),
            zone: ptr::null_mut(),
            matches: MatchBlocks::default(),
            state_file: Setting::default(),
            migration: Default::default(),
            check_status: false,
            checked: Vec::new(),
            gates: Vec::new(),
            event_log: None,
            max_inflight: None,
            max_connections: Setting::default(),
            kept_peers: (0, crate::ffi::ConfLoc::default()),
        }
    }
}

/// The `check_http_*` and `check_buffer_size` directives of an upstream.
#[derive(Default)]
pub struct HttpConf {
    /// `check_http_send`: the whole request.
    pub send: Setting<Vec<u8>>,
    /// The request `check_http_request` and `check_http_header` build.
    pub request: HttpRequest,
    /// Where `check_http_request` was written.
    pub request_line: Setting<()>,
    /// Where the first `check_http_header` was written.
    pub header_line: Setting<()>,
    /// `check_http_expect_alive`.
    pub expect_alive: Setting<StatusClasses>,
    /// `check_buffer_size`.
    pub buffer_size: Setting<usize>,
    /// `check_http_expect_body`: its body test, the regex compiled.
    pub expect_body: Setting<Rc<CompiledMatch>>,
    /// `check_fastcgi_param` pairs, in order (where the first was written).
    pub fastcgi_params: Setting<Vec<(Vec<u8>, Vec<u8>)>>,
    /// `check_grpc_service`.
    pub grpc_service: Setting<Vec<u8>>,
    /// `check_grpc_status`: the extra codes that pass.
    pub grpc_status: Setting<Vec<u32>>,
    /// `check_http_version`.
    pub http_version: Setting<cc::HttpVersion>,
}

/// Per-upstream configuration (created for every server block too, where
/// it stays empty).
#[derive(Default)]
pub struct UpsConf {
    pub check: Setting<CheckConf>,
    /// Which parameters the `check` line writes out (where the C modules'
    /// defaults differ).
    pub written: cc::Written,
    pub keepalive_requests: Setting<u32>,
    /// `check_keepalive_time`, ms.
    pub keepalive_time: Setting<u64>,
    /// The `check` line's arguments, parsed again once the block is
    /// complete when `check_keepalive_time` is set (`crate::finish`).
    pub check_args: Vec<Vec<u8>>,
    pub vnswrr: Option<VnswrrConf>,
    pub http: HttpConf,
    /// The `check_ssl_*` directives and the SSL context (`crate::tls`
    /// fills them through the commands' offset).
    pub tls: crate::tls::TlsConf,
    /// `check_fail_open`.
    pub fail_open: Setting<FailOpen>,
    /// `check_outlier`.
    pub outlier: Setting<cc::OutlierConf>,
    /// `check_shutdown_sessions`.
    pub shutdown_sessions: Setting<bool>,
    /// `check_log` (in an upstream, or in the http or stream block).
    pub event_log: Setting<EventSink>,
    /// `check_max_inflight` (in an upstream, or in the http or stream block).
    pub max_inflight: Setting<u32>,
    /// The upstream's own `peer.init`, when the module wrapped it
    /// (`crate::selection`).
    pub wrapped: Option<Wrapped>,
    /// `slow_start`: where a request's key comes from (`crate::ramp`).
    pub ramp_key: crate::ramp::Key,
    /// `slow_start` alone wraps `peer.init`, and only while a ramp is
    /// active (`crate::ramp::Lazy`).
    pub lazy: Option<crate::ramp::Lazy>,
    /// The per-upstream state of the balancer the module installed: the
    /// `vnswrr` balancer's, which builds it in its `init_upstream` and
    /// alone knows its type (`crate::vnswrr`).
    pub balancer: Option<Box<dyn Any>>,
}

/// Where `check_log` writes, and how (docs/operations.md, Event log).
#[derive(Clone, Copy, Debug)]
pub struct EventSink {
    pub to: SinkTo,
    pub format: healthcheck_core::events::Format,
}

/// A file nginx opens (and reopens on `nginx -s reopen`), or a syslog
/// server through nginx's syslog code; both made at configuration time
/// and living as long as the cycle.
#[derive(Clone, Copy, Debug)]
pub enum SinkTo {
    File(*mut ngx_open_file_t),
    Syslog(*mut ngx_syslog_peer_t),
}

/// Per-location configuration of the http context.
#[derive(Default)]
pub struct LocConf {
    pub status: Option<cc::StatusConf>,
    /// `healthcheck_admin`.
    pub admin: bool,
    /// `healthcheck_gate`.
    pub gate: Option<healthcheck_core::gate::GateConf>,
    /// The directive that made this location (or server) a page of the
    /// module: one per location.
    pub handler: Option<&'static str>,
}

impl LocConf {
    /// Make the location `name`'s page, refusing a second page directive.
    fn claim(&mut self, name: &'static str) -> Result<(), ConfError> {
        match self.handler {
            None => {
                self.handler = Some(name);
                Ok(())
            }
            Some(earlier) if earlier == name => {
                Err(ConfError(format!("\"{name}\" directive is duplicate")))
            }
            // The admin endpoint named last, as nginx -t always said.
            Some(earlier) => {
                let (a, b) = if name == "healthcheck_admin" {
                    (earlier, name)
                } else {
                    (name, earlier)
                };
                Err(ConfError(format!(
                    "\"{a}\" and \"{b}\" cannot share a location"
                )))
            }
        }
    }
}

/// The page directives' names as registered (`LocConf::claim`).
fn page_name(args: &[&[u8]]) -> &'static str {
    const NAMES: [&str; 7] = [
        "healthcheck_status",
        "healthcheck_admin",
        "healthcheck_gate",
        "check_status",
        "l4check_status",
        "stream_check_status",
        "tcp_check_status",
    ];
    let written = args.first().copied().unwrap_or_default();
    NAMES
        .into_iter()
        .find(|n| n.as_bytes() == written)
        .unwrap_or("check_status")
}

/// Directive handlers whose body runs in [`run`] on the conf `$conf`; the
/// closure's names are the parsed configuration, the conf and the
/// arguments (and, if named, the raw `ngx_conf_t` pointer).
macro_rules! handlers {
    ($(
        $(#[$doc:meta])*
        $fn:ident: $conf:ty, |$cf:tt, $c:tt, $args:tt $(, $raw:ident)?| $body:block
    )*) => {$(
        $(#[$doc])*
        pub unsafe extern "C" fn $fn(
            cf: *mut ngx_conf_t,
            cmd: *mut ngx_command_t,
            conf: *mut c_void,
        ) -> *mut c_char {
            $(let $raw = cf;)?
            // SAFETY: nginx's directive contract.
            unsafe { run::<$conf>(cf, cmd, conf, |$cf, $c, $args| $body) }
        }
    )*};
}

/// Handlers that store one parsed value into a [`Setting`] of `$conf`
/// (through [`handlers`]).
macro_rules! setting_directives {
    ($(
        $(#[$doc:meta])*
        $fn:ident: $conf:ty, $name:literal, $($field:ident).+, $repeat:expr, |$cf:ident, $args:ident| $parse:expr;
    )*) => {
        handlers! {$(
            $(#[$doc])*
            $fn: $conf, |$cf, c, $args| {
                c.$($field).+.set($cf, $name, $repeat, || $parse)
            }
        )*}
    };
}

setting_directives! {
    /// `check_keepalive_requests n;` in an upstream block.
    ngx_upstream_check_keepalive_requests: UpsConf, "check_keepalive_requests",
        keepalive_requests, Repeat::Refuse,
        |_cf, args| cc::parse_keepalive_requests(one("check_keepalive_requests", args)?);
    /// `check_keepalive_time TIME;` in an upstream block.
    ngx_upstream_check_keepalive_time: UpsConf, "check_keepalive_time", keepalive_time,
        Repeat::Refuse,
        |_cf, args| cc::parse_keepalive_time(one("check_keepalive_time", args)?);
    /// `check_fail_open off|on|N%;` in an upstream block.
    ngx_upstream_check_fail_open: UpsConf, "check_fail_open", fail_open, Repeat::Refuse,
        |_cf, args| cc::parse_fail_open(args);
    /// `check_shutdown_sessions on|off;` in an upstream block.
    ngx_upstream_check_shutdown_sessions: UpsConf, "check_shutdown_sessions",
        shutdown_sessions, Repeat::Refuse,
        |_cf, args| cc::parse_shutdown_sessions(one("check_shutdown_sessions", args)?);
    /// `check_outlier [name=value ...];` in an upstream block.
    ngx_upstream_check_outlier: UpsConf, "check_outlier", outlier, Repeat::Refuse,
        |_cf, args| cc::parse_outlier(args);
    /// `check_shm_size size;` in http or stream.
    ngx_upstream_check_shm_size: MainConf, "check_shm_size", shm_size, Repeat::Refuse,
        |_cf, args| cc::parse_shm_size(one("check_shm_size", args)?);
    /// `check_state_file PATH;` in http or stream.
    ngx_upstream_check_state_file: MainConf, "check_state_file", state_file, Repeat::Refuse,
        |cf, args| state_file(cf, one("check_state_file", args)?);
    /// `check_log PATH|syslog:... [json|text];` in http, stream or an
    /// upstream.
    ngx_upstream_check_log: UpsConf, "check_log", event_log, Repeat::Refuse,
        |cf, args| event_sink(cf, args);
    /// `check_max_connections N|P%;` in http or stream.
    ngx_upstream_check_max_connections: MainConf, "check_max_connections", max_connections,
        Repeat::Refuse,
        |_cf, args| cc::parse_max_connections(one("check_max_connections", args)?);
    /// `check_max_inflight N;` in http, stream or an upstream.
    ngx_upstream_check_max_inflight: UpsConf, "check_max_inflight", max_inflight,
        Repeat::Refuse,
        |_cf, args| cc::parse_max_inflight(one("check_max_inflight", args)?);
    /// `check_buffer_size SIZE;`
    ngx_upstream_check_buffer_size: UpsConf, "check_buffer_size", http.buffer_size,
        Repeat::Refuse,
        |_cf, args| cc::parse_buffer_size(one("check_buffer_size", args)?);
    /// `check_grpc_service NAME;`
    ngx_upstream_check_grpc_service: UpsConf, "check_grpc_service", http.grpc_service,
        Repeat::Refuse,
        |_cf, args| cc::parse_grpc_service(args);
    /// `check_grpc_status CODE ...;`
    ngx_upstream_check_grpc_status: UpsConf, "check_grpc_status", http.grpc_status,
        Repeat::Refuse,
        |_cf, args| cc::parse_grpc_status(args);
    /// `check_http_version 1.1 | 2;`
    ngx_upstream_check_http_version: UpsConf, "check_http_version", http.http_version,
        Repeat::Refuse,
        |_cf, args| cc::parse_http_version(args);
}

handlers! {
    /// `check ...;` in an upstream block. A second one replaces the first with
    /// a `[warn]` (the C modules keep the last).
    ngx_upstream_check: UpsConf, |cf, c, args| {
        let checked = cc::parse_check_warned(args)?;
        c.check_args = args.iter().map(|a| a.to_vec()).collect();
        c.check
            .set(cf, "check", Repeat::Last, || Ok(checked.conf))?;
        c.written = checked.written;
        for w in checked.warnings {
            // SAFETY: the configuration's log.
            log_at(NGX_LOG_WARN, cf.log, &c.check.loc, &w.0);
        }
        Ok(())
    }

    /// `check_http_expect_alive http_2xx ...;`: a second one adds its classes
    /// to the first (as yaoweibin's module does).
    ngx_upstream_check_http_expect_alive: UpsConf, |cf, c, args| {
        let classes = cc::parse_http_expect_alive(args)?;
        let e = &mut c.http.expect_alive;
        match e.value.as_mut() {
            Some(earlier) => *earlier = earlier.union(classes),
            None => e.set(cf, "check_http_expect_alive", Repeat::Refuse, || {
                Ok(classes)
            })?,
        }
        Ok(())
    }

    /// `check_http_expect_body ~ "REGEX";` (zhouchangxun's module): a body test
    /// of the http check, its regex compiled with nginx's PCRE.
    ngx_upstream_check_http_expect_body: UpsConf, |cfr, c, args, cf| {
        let test = healthcheck_core::matcher::parse_expect_body(args)?;
        c.http
            .expect_body
            .set(cfr, "check_http_expect_body", Repeat::Refuse, || {
                crate::match_block::compile_one(cf, b"check_http_expect_body", test)
            })
    }

    /// `check_fastcgi_param NAME VALUE;` (repeatable): the parameters of a
    /// `type=fastcgi` check's request, in order.
    ngx_upstream_check_fastcgi_param: UpsConf, |cf, c, args| {
        let pair = cc::parse_fastcgi_param(args)?;
        let p = &mut c.http.fastcgi_params;
        match p.value.as_mut() {
            Some(list) => list.push(pair),
            None => p.set(cf, "check_fastcgi_param", Repeat::Refuse, || Ok(vec![pair]))?,
        }
        Ok(())
    }

    /// A directive of the C modules with no equivalent of the same name here:
    /// `nginx -t` says what to write instead (docs/migrating.md).
    ngx_upstream_check_refused: c_void, |cf, _, _| {
        // SAFETY: a directive handler's arguments; the first is its name.
        let args = crate::ffi::conf_args(cf);
        let name = args.first().copied().unwrap_or_default();
        Err(ConfError(cc::refused_directive(name)))
    }
}

/// `check_log`'s file (nginx opens it with its other log files) or its
/// syslog peer (nginx's syslog parameters, from the first argument).
fn event_sink(cf: &ngx_conf_t, args: &[&[u8]]) -> Result<EventSink, ConfError> {
    use healthcheck_core::events::{parse_directive, Target};
    let (target, format) = parse_directive(args)?;
    let to = match target {
        Target::File(path) => {
            // The argument lives in the configuration's pool, as long as
            // the cycle; nginx keeps the name (joined to the prefix).
            let mut name = ngx::ffi::ngx_str_t {
                len: path.len(),
                data: path.as_ptr().cast_mut(),
            };
            // SAFETY: the cycle being configured; nginx copies what it keeps.
            let file = unsafe { ngx::ffi::ngx_conf_open_file(cf.cycle, &mut name) };
            if file.is_null() {
                return Err(ConfError(String::new()));
            }
            SinkTo::File(file)
        }
        Target::Syslog => {
            // SAFETY: the configuration's pool; zeroed as nginx's own
            // error_log handler allocates its syslog peer.
            let peer = unsafe {
                ngx::ffi::ngx_pcalloc(cf.pool, core::mem::size_of::<ngx_syslog_peer_t>())
            }
            .cast::<ngx_syslog_peer_t>();
            if peer.is_null() {
                return Err(ConfError(String::new()));
            }
            // SAFETY: nginx parses the directive's first argument
            // (`syslog:...`) from `cf->args` and logs its own errors; it
            // only reads `cf`.
            let r =
                unsafe { ngx::ffi::ngx_syslog_process_conf(ptr::from_ref(cf).cast_mut(), peer) };
            if !r.is_null() {
                return Err(ConfError(String::new()));
            }
            SinkTo::Syslog(peer)
        }
    };
    Ok(EventSink { to, format })
}

/// `check_state_file`'s path, joined to the prefix; each context writes
/// its own file, so the path the other context (parsed before this one)
/// has already is refused.
fn state_file(cf: &ngx_conf_t, arg: &[u8]) -> Result<Vec<u8>, ConfError> {
    let path = cc::parse_state_file(arg, prefix_of(cf))?;
    let other = if cf.module_type == NGX_HTTP_MODULE as usize {
        Group::Stream
    } else {
        Group::Http
    };
    // SAFETY: a cycle being configured; our main conf of the other
    // context, if its block was parsed already.
    let theirs = unsafe {
        cf.cycle
            .as_ref()
            .and_then(|c| crate::modules::main_conf::<MainConf>(c, other).as_ref())
    };
    if theirs.and_then(|m| m.state_file.get()) == Some(&path) {
        return Err(ConfError(format!(
            "invalid value \"{}\" in \"check_state_file\" directive: the {} context uses this \
             file already; give http and stream their own",
            String::from_utf8_lossy(arg),
            other.as_str()
        )));
    }
    Ok(path)
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

handlers! {
    /// `check_http_send "request";`
    ngx_upstream_check_http_send: UpsConf, |cf, c, args| {
        let send = cc::parse_http_send(one("check_http_send", args)?)?;
        // A second one replaces the first (the C modules keep the last).
        c.http
            .send
            .set(cf, "check_http_send", Repeat::Last, || Ok(send.request))?;
        for w in send.warning.iter().chain(&send.variable) {
            // SAFETY: the configuration's log.
            log_at(NGX_LOG_WARN, cf.log, &c.http.send.loc, &w.0);
        }
        Ok(())
    }

    /// `check_http_request [METHOD] URI;`
    ngx_upstream_check_http_request: UpsConf, |cf, c, args| {
        let (method, uri) = cc::parse_http_request(args)?;
        c.http
            .request_line
            .set(cf, "check_http_request", Repeat::Refuse, || Ok(()))?;
        c.http.request.method = method;
        c.http.request.uri = uri;
        Ok(())
    }

    /// `check_http_header NAME VALUE;` (repeatable; a later one of a name
    /// replaces the earlier).
    ngx_upstream_check_http_header: UpsConf, |cf, c, args| {
        let (name, value) = cc::parse_http_header(args)?;
        if !c.http.header_line.is_set() {
            c.http
                .header_line
                .set(cf, "check_http_header", Repeat::Refuse, || Ok(()))?;
        }
        c.http.request.set_header(name, value);
        Ok(())
    }
}

/// `check_status [format];` (and `l4check_status`, `stream_check_status`,
/// `tcp_check_status`) in a server or location: the C modules' status
/// page.
///
/// # Safety
/// nginx's directive contract; `conf` points to our `LocConf`.
pub unsafe fn set_check_status(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        run::<LocConf>(cf, cmd, conf, |cf, c, args| {
            // SAFETY: a directive handler's arguments; the first is its name.
            let name = page_name(&crate::ffi::conf_args(cf));
            c.claim(name)?;
            c.status = Some(cc::parse_check_status(name, args)?);
            // The http block being parsed has its main conf (the cycle's
            // conf_ctx points to it from the block's start).
            let main = crate::modules::main_conf::<MainConf>(&*cf.cycle, Group::Http);
            if let Some(m) = main.as_mut() {
                m.check_status = true;
            }
            Ok(())
        })
    }
}

/// `healthcheck_status [format] [histogram=on|off];` in a location.
///
/// # Safety
/// nginx's directive contract; `conf` points to our `LocConf`.
pub unsafe fn set_status(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        run::<LocConf>(cf, cmd, conf, |_, c, args| {
            c.claim("healthcheck_status")?;
            c.status = Some(cc::parse_status_directive(args)?);
            Ok(())
        })
    }
}

/// `healthcheck_gate UPSTREAM [min=N|N%];` in a location.
///
/// # Safety
/// nginx's directive contract; `conf` points to our `LocConf`.
pub unsafe fn set_gate(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        run::<LocConf>(cf, cmd, conf, |cf, c, args| {
            c.claim("healthcheck_gate")?;
            let gate = healthcheck_core::gate::parse_gate(args)?;
            // Checked once every upstream is known (crate::finish).
            let main = crate::modules::main_conf::<MainConf>(&*cf.cycle, Group::Http);
            if let Some(m) = main.as_mut() {
                m.gates
                    .push((gate.upstream.clone(), crate::ffi::ConfLoc::here(cf)));
            }
            c.gate = Some(gate);
            Ok(())
        })
    }
}

/// `healthcheck_admin;` in a location.
///
/// # Safety
/// nginx's directive contract; `conf` points to our `LocConf`.
pub unsafe fn set_admin(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    unsafe {
        run::<LocConf>(cf, cmd, conf, |_, c, _| {
            c.claim("healthcheck_admin")?;
            c.admin = true;
            Ok(())
        })
    }
}

impl UpsConf {
    /// `check_shutdown_sessions on`.
    pub fn shuts_sessions(&self) -> bool {
        self.shutdown_sessions.get().copied().unwrap_or(false)
    }

    /// Whether the upstream's `check` has `slow_start`.
    pub fn ramps(&self) -> bool {
        self.check.get().is_some_and(|c| c.slow_start_ms > 0)
    }
}
