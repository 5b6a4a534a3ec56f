//! The `healthcheck_status` content handler: copy a snapshot of every peer
//! out of the shared zones, render it with `healthcheck_core`, and send it.
//! No lock is taken: each slot is read under its sequence counter.
//!
//! A big page (10 000 peers) is built over several event-loop turns, about
//! [`STEP_BUDGET`] of work per turn, so the worker keeps serving proxied
//! requests and probes in between: the handler does the first step, then
//! returns `NGX_DONE` holding the request (`count` + 1) and continues from
//! an event posted to `ngx_posted_next_events` (run on the next turn, after
//! the I/O that arrived meanwhile). Rows are copied first (totals and rows
//! then come from the same copy), then rendered pass by pass; the response
//! goes out once the body is complete (it has a Content-Length). A small
//! page is sent from the handler directly.

use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use healthcheck_core::conf::StatusConf;
use healthcheck_core::status::{self as st, Counts, Format, Group, Meta, PeerRow, Query, Renderer};
use ngx::ffi::{
    ngx_add_timer, ngx_buf_t, ngx_chain_t, ngx_cycle_t, ngx_del_timer, ngx_delete_posted_event,
    ngx_event_t, ngx_http_cleanup_add, ngx_http_cleanup_t, ngx_http_discard_request_body,
    ngx_http_finalize_request, ngx_http_output_filter, ngx_http_request_t,
    ngx_http_run_posted_requests, ngx_http_send_header, ngx_http_send_special, ngx_int_t,
    ngx_list_push, ngx_msec_t, ngx_pcalloc, ngx_pool_cleanup_add, ngx_post_event,
    ngx_posted_next_events, ngx_str_t, ngx_table_elt_t, NGX_DECLINED, NGX_DONE, NGX_ERROR,
    NGX_HTTP_GET, NGX_HTTP_HEAD, NGX_HTTP_INTERNAL_SERVER_ERROR, NGX_HTTP_LAST, NGX_LOG_ALERT,
    NGX_LOG_DEBUG, NGX_OK,
};

use crate::ffi::{guard, str_bytes, unix_ms};
use crate::process;
use crate::worker::Worker;

mod row;

pub(crate) use self::row::{shared_rows, Row};

/// Work done per event-loop turn before yielding to other events: a
/// 10 000-peer page takes ~20 turns, and a proxied request waits at most
/// about this long behind it.
const STEP_BUDGET: Duration = Duration::from_micros(250);

/// Rows handled between two looks at the clock.
const BATCH: usize = 32;

/// Where a page in progress is.
#[derive(Clone, Copy)]
enum Phase {
    /// Copying slots: context (0 http, 1 stream), next target.
    Copy(usize, usize),
    /// Rendering: pass, next row.
    Render(usize, usize),
    Done,
}

/// A page being built over several event-loop turns.
struct Job {
    format: Format,
    query: Query,
    /// The cycle the copied rows belong to (an in-place reload restarts).
    cycle: *const ngx_cycle_t,
    phase: Phase,
    rows: Vec<Row>,
    names: Vec<u8>,
    page: Option<Renderer>,
    body: Vec<u8>,
}

impl Job {
    fn new(format: Format, query: Query) -> Job {
        Job {
            format,
            query,
            cycle: ptr::null(),
            phase: Phase::Copy(0, 0),
            rows: Vec::new(),
            names: Vec::new(),
            page: None,
            body: Vec::new(),
        }
    }

    /// Work for about [`STEP_BUDGET`]; true once the body is complete.
    fn step(&mut self) -> bool {
        let start = Instant::now();
        loop {
            match self.phase {
                Phase::Copy(ctx, pos) => self.copy(ctx, pos),
                Phase::Render(pass, pos) => self.render(pass, pos),
                Phase::Done => return true,
            }
            if matches!(self.phase, Phase::Done) {
                return true;
            }
            if start.elapsed() >= STEP_BUDGET {
                return false;
            }
        }
    }

    /// Copy up to [`BATCH`] slots of context `ctx` from target `pos`.
    fn copy(&mut self, ctx: usize, pos: usize) {
        // SAFETY: nginx's current cycle.
        let cycle = unsafe { *ptr::addr_of!(ngx::ffi::ngx_cycle) }.cast_const();
        if !ptr::eq(cycle, self.cycle) {
            // First step, or reloaded in place (single process) meanwhile.
            self.cycle = cycle;
            self.rows.clear();
            self.names.clear();
            if (ctx, pos) != (0, 0) {
                self.phase = Phase::Copy(0, 0);
                return;
            }
        }
        let next = process::with(|w| self.copy_from(w, ctx, pos));
        match next {
            Some(Ok(phase)) => self.phase = phase,
            Some(Err(zones)) => self.start_render(zones),
            None => self.start_render((0, 0)),
        }
    }

    /// The copy step on the worker's state: the next phase, or `Err` with
    /// the zones. generation and dropped events once every slot is copied.
    fn copy_from(&mut self, w: &Worker, ctx: usize, pos: usize) -> Result<Phase, (u64, u64)> {
        if self.rows.is_empty() {
            // One allocation, not a doubling copy of megabytes mid-page.
            self.rows
                .reserve(w.http.targets.len() + w.stream.targets.len());
        }
        let (context, group) = match ctx {
            0 => (&w.http, Group::Http),
            _ => (&w.stream, Group::Stream),
        };
        let end = (pos + BATCH).min(context.targets.len());
        for t in context.targets.get(pos..end).unwrap_or_default() {
            let mut row = Row::copy(group, context, t, &mut self.names);
            row.shared = shared_rows(w, (group, t.index));
            self.rows.push(row);
        }
        if end < context.targets.len() {
            return Ok(Phase::Copy(ctx, end));
        }
        // Then the context's resolved addresses (their views brought up to
        // date: nginx may have changed them since the last look).
        context.resolved.refresh_all(false);
        if let Ok(view) = context.resolved.view.try_borrow() {
            for d in view.targets.iter().flatten() {
                let row = Row::copy(group, context, &d.target, &mut self.names);
                self.rows.push(row);
            }
        }
        let mut next = context.zone.as_ref().map_or(0, |z| z.slots().len() as u32);
        context.resolved.each_unchecked(|r, u| {
            let row = Row::unchecked(group, next, r, u, &mut self.names);
            next += 1;
            self.rows.push(row);
        });
        if ctx == 0 {
            Ok(Phase::Copy(1, 0))
        } else {
            let zones = || [&w.http.zone, &w.stream.zone].into_iter().flatten();
            Err((
                zones()
                    .map(|z| z.header().generation.load(Ordering::Acquire))
                    .max()
                    .unwrap_or(0),
                zones()
                    .map(|z| u64::from(z.header().dropped_events.load(Ordering::Relaxed)))
                    .sum(),
            ))
        }
    }

    /// Every slot is copied: write the head.
    fn start_render(&mut self, (generation, dropped_events): (u64, u64)) {
        let meta = Meta {
            generation,
            now_ms: unix_ms(),
            dropped_events,
            check_connections: crate::check::held_connections() as u64,
        };
        let mut counts = Counts::default();
        for r in &self.rows {
            counts.count(self.query.filter, r.group, r.snap.up);
        }
        let printed = counts.total() as usize;
        self.body
            .reserve(st::size_hint(self.format, printed, self.names.len()));
        // The summaries of every copied row (a 10 000-peer page: one pass
        // over the rows, a few hundred microseconds).
        let all: Vec<PeerRow> = self.rows.iter().map(|r| r.peer(&self.names)).collect();
        let upstreams = st::summarize(&all);
        self.page = Some(Renderer::new(
            self.format,
            &self.query,
            &meta,
            counts,
            &upstreams,
            &mut self.body,
        ));
        self.phase = Phase::Render(0, 0);
    }

    /// Render up to [`BATCH`] rows of pass `pass` from row `pos`.
    fn render(&mut self, pass: usize, pos: usize) {
        let Some(page) = self.page.as_mut() else {
            self.phase = Phase::Done;
            return;
        };
        let end = (pos + BATCH).min(self.rows.len());
        let batch: Vec<PeerRow> = self.rows[pos..end]
            .iter()
            .map(|r| r.peer(&self.names))
            .collect();
        page.rows(pass, &batch, &mut self.body);
        self.phase = if end < self.rows.len() {
            Phase::Render(pass, end)
        } else if pass + 1 < page.passes() {
            Phase::Render(pass + 1, 0)
        } else {
            if let Some(page) = self.page.take() {
                page.finish(&mut self.body);
            }
            Phase::Done
        };
    }
}

/// The Content-Type of the page `job` makes: `check_status`'s are the C
/// modules'.
fn content_type(job: &Job) -> &'static str {
    if job.query.c_shapes {
        st::c_shapes::content_type(job.format)
    } else {
        st::content_type(job.format)
    }
}

/// Add an output header.
///
/// # Safety
/// `r` is a live request; `key` and `value` are static.
pub(crate) unsafe fn add_header(
    r: &mut ngx_http_request_t,
    key: &'static str,
    value: &'static str,
) -> bool {
    // SAFETY: headers_out.headers is an initialised list in the request pool.
    let h = unsafe { ngx_list_push(&mut r.headers_out.headers) }.cast::<ngx_table_elt_t>();
    // SAFETY: NULL or a fresh element.
    let Some(h) = (unsafe { h.as_mut() }) else {
        return false;
    };
    h.hash = 1;
    h.key = ngx_str_t {
        len: key.len(),
        data: key.as_ptr().cast_mut(),
    };
    h.value = ngx_str_t {
        len: value.len(),
        data: value.as_ptr().cast_mut(),
    };
    h.lowcase_key = ptr::null_mut();
    // nginx 1.23.0 chained headers of one name through `next`.
    #[cfg(ngx_version_at_least = "1.23.0")]
    {
        h.next = ptr::null_mut();
    }
    true
}

/// Send a complete response whose body is `body` (moved into the request
/// pool: not copied) and return what nginx's output filter returned.
///
/// # Safety
/// `r` is a live request in a content phase handler (or resumed by our
/// own event).
pub(crate) unsafe fn send(
    r: &mut ngx_http_request_t,
    status: usize,
    content_type: &'static str,
    body: Vec<u8>,
) -> ngx_int_t {
    r.headers_out.status = status;
    r.headers_out.content_type = ngx_str_t {
        len: content_type.len(),
        data: content_type.as_ptr().cast_mut(),
    };
    r.headers_out.content_type_len = content_type.len();
    r.headers_out.content_type_lowcase = ptr::null_mut();
    r.headers_out.content_length_n = body.len() as i64;
    // SAFETY: live request, static strings.
    let ok = unsafe {
        add_header(
            r,
            "Cache-Control",
            "no-store, no-cache, must-revalidate, max-age=0",
        ) && add_header(r, "X-Content-Type-Options", "nosniff")
    };
    if !ok {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    }
    // `r->header_only` is not read or written here: nginx-sys 0.5.0's
    // accessors for the request's bit fields from `uri_changes` on are two
    // bits off nginx's layout from 1.29.3 on (the `port` field before
    // `count`), and `header_only()` reads `pipeline` there. nginx's header
    // filter sets `header_only` itself for HEAD; an empty body is nginx's
    // own last buffer.
    // SAFETY: live request.
    let rc = unsafe { ngx_http_send_header(r) };
    if rc == NGX_ERROR as ngx_int_t
        || rc > NGX_OK as ngx_int_t
        || r.method == NGX_HTTP_HEAD as usize
    {
        return rc;
    }
    if body.is_empty() {
        // SAFETY: live request, its header sent.
        return unsafe { ngx_http_send_special(r, NGX_HTTP_LAST as ngx::ffi::ngx_uint_t) };
    }
    // The body lives until the request pool goes: the write filter may
    // hold the buffer past this call.
    // SAFETY: the request pool is live.
    let cln = unsafe { ngx_pool_cleanup_add(r.pool, 0) };
    // SAFETY: NULL or a fresh cleanup record; a zeroed buffer from the pool.
    let (Some(cln), Some(buf)) = (unsafe { cln.as_mut() }, unsafe {
        ngx_pcalloc(r.pool, core::mem::size_of::<ngx_buf_t>())
            .cast::<ngx_buf_t>()
            .as_mut()
    }) else {
        return NGX_ERROR as ngx_int_t;
    };
    let body = Box::into_raw(Box::new(body));
    cln.data = body.cast();
    cln.handler = Some(drop_body);
    // SAFETY: `body` is ours until the pool's cleanup drops it.
    let (bytes, len) = unsafe { ((*body).as_mut_ptr(), (*body).len()) };
    buf.pos = bytes;
    buf.start = bytes;
    // SAFETY: within the body.
    buf.last = unsafe { bytes.add(len) };
    buf.end = buf.last;
    buf.set_memory(1);
    buf.set_last_buf(u32::from(ptr::eq(r.main, r)));
    buf.set_last_in_chain(1);
    let mut out = ngx_chain_t {
        buf,
        next: ptr::null_mut(),
    };
    // SAFETY: live request; the chain link on our stack is copied by the
    // filters before they return.
    unsafe { ngx_http_output_filter(r, &mut out) }
}

/// Pool cleanup: free a body handed to [`send`].
unsafe extern "C" fn drop_body(data: *mut c_void) {
    if !data.is_null() {
        guard(ptr::null_mut(), "status body", (), || {
            // SAFETY: made by `Box::into_raw` in `send`, dropped once.
            drop(unsafe { Box::from_raw(data.cast::<Vec<u8>>()) })
        });
    }
}

/// A page in progress, tied to its request: the posted `step` event
/// resumes it on the next event-loop turn, the `guard` timer keeps a
/// gracefully exiting worker alive until it is sent (nginx waits for
/// timers, not for posted events), and the request cleanup frees it if the
/// request goes first.
struct Pending {
    r: *mut ngx_http_request_t,
    job: Job,
    step: ngx_event_t,
    guard: ngx_event_t,
    cln: *mut ngx_http_cleanup_t,
    /// Event-loop turns so far (for the debug log).
    turns: u32,
}

/// Longest a page may take before the guard timer stops keeping a
/// shutting-down worker alive for it.
const GUARD_MS: ngx_msec_t = 60_000;

/// The location content handler.
///
/// # Safety
/// Called by nginx with a live request.
pub unsafe extern "C" fn ngx_http_healthcheck_status_handler(
    r: *mut ngx_http_request_t,
) -> ngx_int_t {
    // SAFETY: nginx passes a live request.
    let Some(r) = (unsafe { r.as_mut() }) else {
        return NGX_ERROR as ngx_int_t;
    };
    // SAFETY: the connection of a live request is valid.
    let log = unsafe { (*r.connection).log };
    guard(
        log,
        "status handler",
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
    if r.method != NGX_HTTP_GET as usize && r.method != NGX_HTTP_HEAD as usize {
        // SAFETY: live request.
        if unsafe { ngx_http_discard_request_body(r) } != NGX_OK as ngx_int_t {
            return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
        }
        // SAFETY: live request, static strings.
        return unsafe {
            add_header(r, "Allow", "GET, HEAD");
            send(
                r,
                405,
                "text/plain; charset=utf-8",
                b"405 method not allowed: use GET or HEAD\n".to_vec(),
            )
        };
    }
    // SAFETY: live request.
    if unsafe { ngx_http_discard_request_body(r) } != NGX_OK as ngx_int_t {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    }
    // SAFETY: the location's conf of this module, set by `healthcheck_status`.
    let Some(default) = (unsafe { status_format(r) }) else {
        return NGX_DECLINED as ngx_int_t;
    };
    // SAFETY: args point into the request buffer.
    let args = unsafe { str_bytes(&r.args) };
    let mut query = match st::parse_query(args) {
        Ok(q) => q,
        Err(reason) => {
            let mut body = reason.into_bytes();
            body.push(b'\n');
            // SAFETY: live request.
            return unsafe { send(r, 400, "text/plain; charset=utf-8", body) };
        }
    };
    let format = query.format.unwrap_or(default.format);
    query.histogram = Some(query.histogram.unwrap_or(default.histogram));
    query.c_shapes = default.c_shapes;
    let mut job = Job::new(format, query);
    if job.step() {
        // Small page: done in this turn.
        // SAFETY: live request.
        return unsafe { send(r, 200, content_type(&job), job.body) };
    }
    // SAFETY: live request.
    unsafe { suspend(r, job) }
}

/// The `healthcheck_status` format of the request's location.
///
/// # Safety
/// `r` is a live request.
unsafe fn status_format(r: &ngx_http_request_t) -> Option<StatusConf> {
    // SAFETY: loc_conf holds one entry per http module.
    let lcf = unsafe { crate::modules::loc_conf::<crate::conf::LocConf>(r.loc_conf) };
    // SAFETY: our loc conf, allocated by create_loc_conf.
    unsafe { lcf.as_ref() }.and_then(|c| c.status)
}

/// Continue `job` on the next event-loop turns; the request stays open
/// (`count` + 1, released by `ngx_http_finalize_request` when sent).
///
/// # Safety
/// `r` is a live request in its content handler.
unsafe fn suspend(r: &mut ngx_http_request_t, job: Job) -> ngx_int_t {
    // SAFETY: live request.
    let cln = unsafe { ngx_http_cleanup_add(r, 0) };
    if cln.is_null() {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    }
    // SAFETY: the connection of a live request is valid.
    let log = unsafe { (*r.connection).log };
    // Made with `Box::into_raw` and used only through that pointer: nginx
    // holds it (events' data, the cleanup's data) until `release`.
    let p = Box::into_raw(Box::new(Pending {
        r,
        job,
        // SAFETY: ngx_event_t is plain data; all zero is its initial state.
        step: unsafe { core::mem::zeroed() },
        // SAFETY: as above.
        guard: unsafe { core::mem::zeroed() },
        cln,
        turns: 1,
    }));
    // SAFETY: `p` is live until `release`; `cln` is a fresh cleanup record,
    // `r.main` the live main request; the events are registered once.
    unsafe {
        for (ev, handler) in [
            (
                ptr::addr_of_mut!((*p).step),
                step_handler as unsafe extern "C" fn(*mut ngx_event_t),
            ),
            (ptr::addr_of_mut!((*p).guard), guard_handler),
        ] {
            (*ev).data = p.cast();
            (*ev).handler = Some(handler);
            (*ev).log = log;
        }
        (*cln).handler = Some(cleanup_handler);
        (*cln).data = p.cast();
        let main = &mut *r.main;
        main.set_count(main.count() + 1);
        ngx_add_timer(ptr::addr_of_mut!((*p).guard), GUARD_MS);
        ngx_post_event(
            ptr::addr_of_mut!((*p).step),
            ptr::addr_of_mut!(ngx_posted_next_events),
        );
    }
    ngx::ngx_log_error!(
        NGX_LOG_DEBUG,
        log,
        "healthcheck_status: page in progress, turn 1"
    );
    NGX_DONE as ngx_int_t
}

/// Unlink a pending page from nginx (events, cleanup) and take it back.
///
/// # Safety
/// `p` came from `suspend` and was not released.
unsafe fn release(p: *mut Pending) -> Box<Pending> {
    // SAFETY: guaranteed by the caller.
    let mut p = unsafe { Box::from_raw(p) };
    if p.step.posted() != 0 {
        // SAFETY: posted by us, still queued.
        unsafe { ngx_delete_posted_event(&mut p.step) };
    }
    if p.guard.timer_set() != 0 {
        // SAFETY: our timer, still set.
        unsafe { ngx_del_timer(&mut p.guard) };
    }
    // SAFETY: the cleanup record lives in the request pool, which outlives
    // the pending page (the request is not freed before its cleanups run).
    unsafe {
        if let Some(cln) = p.cln.as_mut() {
            cln.handler = None;
            cln.data = ptr::null_mut();
        }
    }
    p
}

/// The request went away first (client error, termination): drop the page.
unsafe extern "C" fn cleanup_handler(data: *mut c_void) {
    if data.is_null() {
        return;
    }
    guard(ptr::null_mut(), "status page cleanup", (), || {
        // SAFETY: set by `suspend`; cleanups run once, and `release`
        // clears the record when the page completes first.
        let p = unsafe { release(data.cast()) };
        drop(p);
    });
}

/// The guard timer fired: a page took a minute. Nothing to do but keep the
/// step going (the worker may now exit if it is shutting down).
unsafe extern "C" fn guard_handler(_ev: *mut ngx_event_t) {}

/// Next turn of a page in progress.
unsafe extern "C" fn step_handler(ev: *mut ngx_event_t) {
    // SAFETY: our event, its data is the pending page.
    let (p, log) = unsafe { ((*ev).data.cast::<Pending>(), (*ev).log) };
    guard(log, "status page", (), || {
        // SAFETY: `p` is live while its step event is posted.
        unsafe { resume(p) }
    });
}

/// # Safety
/// `p` is live (its step event just fired).
unsafe fn resume(p: *mut Pending) {
    // SAFETY: guaranteed by the caller.
    let pending = unsafe { &mut *p };
    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pending.job.step()));
    pending.turns += 1;
    if let Ok(false) = done {
        // SAFETY: our event, not posted (it just ran).
        unsafe { ngx_post_event(&mut pending.step, ptr::addr_of_mut!(ngx_posted_next_events)) };
        ngx::ngx_log_error!(
            NGX_LOG_DEBUG,
            pending.step.log,
            "healthcheck_status: page in progress, turn {}",
            pending.turns
        );
        return;
    }
    // SAFETY: `p` is live and released once, here.
    let p = unsafe { release(p) };
    let r = p.r;
    // SAFETY: the request is live: our count keeps it, our cleanup would
    // have released `p` before it went.
    unsafe {
        let c = (*r).connection;
        let rc = match done {
            Ok(_) => {
                let Pending { job, turns, .. } = *p;
                ngx::ngx_log_error!(
                    NGX_LOG_DEBUG,
                    (*c).log,
                    "healthcheck_status: page of {} bytes done in {} turns",
                    job.body.len(),
                    turns
                );
                send(&mut *r, 200, content_type(&job), job.body)
            }
            Err(_) => {
                ngx::ngx_log_error!(
                    NGX_LOG_ALERT,
                    (*c).log,
                    "ngx_healthcheck_module: internal error in status page"
                );
                NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t
            }
        };
        ngx_http_finalize_request(r, rc);
        ngx_http_run_posted_requests(c);
    }
}
