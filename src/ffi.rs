//! Small, audited wrappers around raw nginx data: configuration arguments,
//! `ngx_str_t`, dynamic symbol lookup, and the guard that keeps panics from
//! reaching nginx.

use core::ffi::{c_void, CStr};
use core::ptr;
use std::panic::{catch_unwind, AssertUnwindSafe};

use ngx::ffi::{
    ngx_conf_t, ngx_current_msec, ngx_exiting, ngx_log_t, ngx_quit, ngx_str_t, ngx_terminate,
    ngx_uint_t, NGX_LOG_ALERT,
};

/// The bytes of an `ngx_str_t`; empty for a NULL or zero-length string.
///
/// # Safety
/// `s.data` must point to `s.len` readable bytes that outlive `'a`.
pub unsafe fn str_bytes<'a>(s: &ngx_str_t) -> &'a [u8] {
    if s.len == 0 || s.data.is_null() {
        return &[];
    }
    // SAFETY: guaranteed by the caller.
    unsafe { core::slice::from_raw_parts(s.data, s.len) }
}

/// The arguments of the directive being parsed, directive name first.
///
/// # Safety
/// `cf` must be the `ngx_conf_t` nginx passed to a directive handler.
pub unsafe fn conf_args<'a>(cf: &ngx_conf_t) -> Vec<&'a [u8]> {
    // SAFETY: during a directive handler `cf->args` is a valid array of
    // `ngx_str_t` whose strings live in the configuration pool.
    unsafe {
        let Some(args) = cf.args.as_ref() else {
            return Vec::new();
        };
        let elts = args.elts as *const ngx_str_t;
        if elts.is_null() {
            return Vec::new();
        }
        core::slice::from_raw_parts(elts, args.nelts)
            .iter()
            .map(|s| str_bytes(s))
            .collect()
    }
}

/// Where a directive appeared, for messages emitted after parsing
/// (cross-directive checks run once the whole block is known).
#[derive(Clone, Copy, Debug)]
pub struct ConfLoc {
    file: ngx_str_t,
    line: ngx_uint_t,
}

impl Default for ConfLoc {
    fn default() -> Self {
        Self {
            file: ngx_str_t {
                len: 0,
                data: ptr::null_mut(),
            },
            line: 0,
        }
    }
}

impl ConfLoc {
    /// The position of the directive `cf` is parsing now.
    ///
    /// # Safety
    /// `cf` must be the `ngx_conf_t` nginx passed to a directive handler.
    pub unsafe fn here(cf: &ngx_conf_t) -> Self {
        // SAFETY: conf_file is valid while a file is being parsed; its name
        // lives in the cycle pool for the whole configuration phase.
        match unsafe { cf.conf_file.as_ref() } {
            Some(f) => Self {
                file: f.file.name,
                line: f.line,
            },
            None => Self::default(),
        }
    }
}

impl ConfLoc {
    /// `FILE:LINE`, or empty for no position.
    pub fn position(&self) -> String {
        let s = self.to_string();
        s.strip_prefix(" in ").unwrap_or(&s).to_string()
    }
}

impl core::fmt::Display for ConfLoc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // SAFETY: the name lives in the cycle pool (see `here`).
        let name = unsafe { str_bytes(&self.file) };
        if name.is_empty() {
            // Not a directive's (a message about the whole configuration).
            return Ok(());
        }
        write!(f, " in {}:{}", String::from_utf8_lossy(name), self.line)
    }
}

/// Log a configuration message at a remembered position, as
/// `ngx_conf_log_error` would have done while the directive was parsed.
///
/// # Safety
/// `log` must be a valid nginx log.
pub unsafe fn log_at(level: u32, log: *mut ngx_log_t, loc: &ConfLoc, msg: &str) {
    ngx::ngx_log_error!(level, log, "{}{}", msg, loc);
}

/// The running cycle's log (NULL before nginx made a cycle).
pub fn cycle_log() -> *mut ngx_log_t {
    // SAFETY: `ngx_cycle` is NULL or the running cycle.
    unsafe { (*ptr::addr_of!(ngx::ffi::ngx_cycle)).as_ref() }.map_or(ptr::null_mut(), |c| c.log)
}

/// Run `f`, turning a panic into `fallback` and an `[alert]` so that a bug
/// never unwinds into nginx's C frames (docs/design.md, Panics and the FFI boundary). Every `extern "C"` entry point of the module runs its body
/// through this.
pub fn guard<T>(log: *mut ngx_log_t, what: &str, fallback: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            let log = if log.is_null() { cycle_log() } else { log };
            if !log.is_null() {
                ngx::ngx_log_error!(
                    NGX_LOG_ALERT,
                    log,
                    "ngx_healthcheck_module: internal error in {}",
                    what
                );
            }
            fallback
        }
    }
}

/// Address of a global exported by the running nginx binary, if any.
/// nginx links with `-Wl,-E`, so every global of the patched core is visible.
pub fn find_global(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: RTLD_DEFAULT (NULL on glibc and musl) searches the global
    // scope; `name` is NUL-terminated.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// Log `args` at `level` (an expression, unlike ngx's statement macros).
pub fn log(level: u32, log: *mut ngx_log_t, args: core::fmt::Arguments<'_>) {
    // SAFETY: NULL or a valid nginx log.
    let Some(l) = (unsafe { log.as_ref() }) else {
        return;
    };
    if (level as usize) > l.log_level {
        return;
    }
    let msg = args.to_string();
    // SAFETY: "%*s" takes a length and a pointer; msg outlives the call.
    unsafe {
        ngx::ffi::ngx_log_error_core(
            level as ngx_uint_t,
            log,
            0,
            c"%*s".as_ptr(),
            msg.len(),
            msg.as_ptr(),
        );
    }
}

/// nginx's cached monotonic clock, ms (updated once per event-loop turn).
pub fn monotonic_ms() -> u64 {
    // SAFETY: a plain global nginx updates on this thread.
    unsafe { ptr::read_volatile(ptr::addr_of!(ngx_current_msec)) as u64 }
}

/// A fresh reading of the monotonic clock, for durations that must be
/// right even when nginx's cached clock lags after a long event-loop turn:
/// a round's time and budget (docs/design.md, Guarantees and limits), the
/// status page's work per turn. Scheduling uses nginx's cached clock
/// ([`monotonic_ms`]), as nginx's timers do.
pub fn fresh_now() -> std::time::Instant {
    std::time::Instant::now()
}

/// nginx's cached wall clock, Unix ms.
pub fn unix_ms() -> u64 {
    // SAFETY: `ngx_cached_time` points at a valid time slot once nginx has
    // started (it is set before any module code runs).
    unsafe {
        let tp = *ptr::addr_of!(ngx::ffi::ngx_cached_time);
        tp.as_ref()
            .map_or(0, |t| t.sec as u64 * 1000 + t.msec as u64)
    }
}

/// Whether the process is shutting down (graceful or fast).
pub fn exiting() -> bool {
    // SAFETY: plain process flags.
    unsafe { ngx_exiting != 0 || ngx_quit != 0 || ngx_terminate != 0 }
}

/// `worker_processes` of `cycle` (at least 1; 1 while the core module's
/// conf is not complete).
///
/// # Safety
/// `cycle` is a cycle whose configuration has been read.
pub unsafe fn worker_processes(cycle: &ngx::ffi::ngx_cycle_t) -> usize {
    // SAFETY: the core module's conf is always present.
    unsafe {
        let ccf = (*cycle.conf_ctx.add(ngx::ffi::ngx_core_module.index))
            .cast::<ngx::ffi::ngx_core_conf_t>();
        ccf.as_ref()
            .map_or(1, |c| c.worker_processes.max(1) as usize)
    }
}
