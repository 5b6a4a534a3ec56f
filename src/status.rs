//! The `healthcheck_status` content handler: copy a consistent snapshot of
//! every peer out of the shared zones, render it with `healthcheck_core`,
//! and send it. No lock is taken: each slot is read under its sequence
//! counter.

use core::ptr;
use core::sync::atomic::Ordering;

use healthcheck_core::conf::StatusFormat;
use healthcheck_core::status::{self as st, Format, Group, Meta, PeerRow, DURATION_SLOTS};
use ngx::ffi::{
    ngx_chain_t, ngx_create_temp_buf, ngx_http_discard_request_body, ngx_http_output_filter,
    ngx_http_request_t, ngx_http_send_header, ngx_int_t, ngx_list_push, ngx_str_t, ngx_table_elt_t,
    ngx_time, NGX_DECLINED, NGX_ERROR, NGX_HTTP_GET, NGX_HTTP_HEAD, NGX_HTTP_INTERNAL_SERVER_ERROR,
    NGX_OK,
};

use crate::ffi::{guard, str_bytes};
use crate::shm::{Slot, REASON_NAMES};
use crate::upstream::Proto;
use crate::worker::{Context, WORKER};

fn format_of(f: StatusFormat) -> Format {
    match f {
        StatusFormat::Html => Format::Html,
        StatusFormat::Csv => Format::Csv,
        StatusFormat::Json => Format::Json,
        StatusFormat::Prometheus => Format::Prometheus,
    }
}

/// A consistent copy of one slot.
#[derive(Default)]
struct Snapshot {
    up: bool,
    rise: u32,
    fall: u32,
    checks: u64,
    fails_total: u64,
    last_delay: u32,
    min_delay: u32,
    max_delay: u32,
    last_reason: u32,
    delay_sum: u64,
    delay_count: u64,
    last_change: u64,
    down_since: u64,
    duration_sum: u64,
    failures: [u64; REASON_NAMES.len()],
    buckets: [u64; DURATION_SLOTS],
}

fn snapshot(s: &Slot) -> Snapshot {
    let r = Ordering::Relaxed;
    let mut snap = Snapshot::default();
    // A writer that died mid-update leaves `seq` odd for good: after a few
    // tries take what is there rather than spin.
    for _ in 0..64 {
        let before = s.seq.load(Ordering::Acquire);
        snap = Snapshot {
            up: s.up.load(r) != 0,
            rise: s.rise.load(r),
            fall: s.fall.load(r),
            checks: s.checks.load(r),
            fails_total: s.fails_total.load(r),
            last_delay: s.last_delay.load(r),
            min_delay: s.min_delay.load(r),
            max_delay: s.max_delay.load(r),
            last_reason: s.last_reason.load(r),
            delay_sum: s.delay_sum.load(r),
            delay_count: s.delay_count.load(r),
            last_change: s.last_change.load(r),
            down_since: s.down_since.load(r),
            duration_sum: s.duration_sum.load(r),
            failures: core::array::from_fn(|i| u64::from(s.failures[i].load(r))),
            buckets: core::array::from_fn(|i| {
                s.duration_buckets
                    .get(i)
                    .map_or(0, |b| u64::from(b.load(r)))
            }),
        };
        core::sync::atomic::fence(Ordering::Acquire);
        if before & 1 == 0 && s.seq.load(Ordering::Relaxed) == before {
            break;
        }
    }
    snap
}

fn delay(v: u32) -> i64 {
    if v == u32::MAX {
        -1
    } else {
        i64::from(v)
    }
}

struct Owned {
    snap: Snapshot,
    reasons: [(&'static str, u64); REASON_NAMES.len()],
}

fn collect(ctx: &Context) -> Vec<Owned> {
    ctx.targets
        .iter()
        .map(|t| {
            let snap = ctx
                .zone
                .as_ref()
                .and_then(|z| z.slot(t.index as usize))
                .map(snapshot)
                .unwrap_or_default();
            let reasons = core::array::from_fn(|i| (REASON_NAMES[i], snap.failures[i]));
            Owned { snap, reasons }
        })
        .collect()
}

fn rows<'a>(proto: Proto, ctx: &'a Context, owned: &'a [Owned], out: &mut Vec<PeerRow<'a>>) {
    let group = match proto {
        Proto::Http => Group::Http,
        Proto::Stream => Group::Stream,
    };
    for (t, o) in ctx.targets.iter().zip(owned) {
        let s = &o.snap;
        out.push(PeerRow {
            group,
            index: t.index,
            upstream: t.upstream_bytes(),
            name: t.peer.name_bytes(),
            up: s.up,
            rise: s.rise,
            fall: s.fall,
            check_type: t.check.check_type.as_str(),
            port: t.check.port,
            last_delay_ms: delay(s.last_delay),
            avg_delay_ms: s
                .delay_sum
                .checked_div(s.delay_count)
                .map_or(-1, |a| a as i64),
            min_delay_ms: delay(s.min_delay),
            max_delay_ms: delay(s.max_delay),
            checks: s.checks,
            fails_total: s.fails_total,
            failures_by_reason: &o.reasons,
            last_failure_reason: (s.last_reason as usize)
                .checked_sub(1)
                .and_then(|i| REASON_NAMES.get(i).copied()),
            last_change_ms: s.last_change,
            down_since_ms: (!s.up && s.down_since != 0).then_some(s.down_since),
            duration_buckets: &s.buckets,
            duration_sum_ms: s.duration_sum,
            duration_count: s.buckets.iter().sum(),
        });
    }
}

fn unix_ms() -> u64 {
    // SAFETY: nginx's cached time, valid in any process after start.
    unsafe {
        let tp = *ptr::addr_of!(ngx::ffi::ngx_cached_time);
        tp.as_ref().map_or(ngx_time() as u64 * 1000, |t| {
            t.sec as u64 * 1000 + t.msec as u64
        })
    }
}

/// Render the page for `query` into a body.
fn render(default: StatusFormat, args: &[u8]) -> Result<(Format, Vec<u8>), String> {
    crate::refresh_if_reloaded();
    let query = st::parse_query(args)?;
    let format = query.format.unwrap_or(format_of(default));
    let mut body = Vec::new();
    let Some(w) = WORKER.get() else {
        st::render_with(
            format,
            &query,
            &Meta {
                generation: 0,
                now_ms: unix_ms(),
            },
            &[],
            &mut body,
        );
        return Ok((format, body));
    };
    let http = collect(&w.http);
    let stream = collect(&w.stream);
    let mut all = Vec::with_capacity(http.len() + stream.len());
    rows(Proto::Http, &w.http, &http, &mut all);
    rows(Proto::Stream, &w.stream, &stream, &mut all);
    let generation = [w.http.zone, w.stream.zone]
        .iter()
        .flatten()
        .map(|z| z.header().generation.load(Ordering::Acquire))
        .max()
        .unwrap_or(0);
    let meta = Meta {
        generation,
        now_ms: unix_ms(),
    };
    st::render_with(format, &query, &meta, &all, &mut body);
    Ok((format, body))
}

/// Add an output header.
///
/// # Safety
/// `r` is a live request; `key` and `value` are static.
unsafe fn add_header(r: &mut ngx_http_request_t, key: &'static str, value: &'static str) -> bool {
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
    h.next = ptr::null_mut();
    true
}

/// Send a complete response.
///
/// # Safety
/// `r` is a live request in a content phase handler.
unsafe fn send(
    r: &mut ngx_http_request_t,
    status: usize,
    content_type: &'static str,
    body: &[u8],
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
    if r.method == NGX_HTTP_HEAD as usize || body.is_empty() {
        r.set_header_only(1);
    }
    // SAFETY: live request.
    let rc = unsafe { ngx_http_send_header(r) };
    if rc == NGX_ERROR as ngx_int_t || rc > NGX_OK as ngx_int_t || r.header_only() != 0 {
        return rc;
    }
    // SAFETY: the request pool outlives the response.
    let b = unsafe { ngx_create_temp_buf(r.pool, body.len()) };
    // SAFETY: NULL or a buffer of `body.len()` bytes.
    let Some(buf) = (unsafe { b.as_mut() }) else {
        return NGX_ERROR as ngx_int_t;
    };
    // SAFETY: `buf.pos` has room for the body.
    unsafe {
        ptr::copy_nonoverlapping(body.as_ptr(), buf.pos, body.len());
        buf.last = buf.pos.add(body.len());
    }
    buf.set_last_buf(u32::from(ptr::eq(r.main, r)));
    buf.set_last_in_chain(1);
    let mut out = ngx_chain_t {
        buf: b,
        next: ptr::null_mut(),
    };
    // SAFETY: live request, chain on our stack is consumed synchronously.
    unsafe { ngx_http_output_filter(r, &mut out) }
}

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
                b"405 method not allowed: use GET or HEAD\n",
            )
        };
    }
    // SAFETY: live request.
    if unsafe { ngx_http_discard_request_body(r) } != NGX_OK as ngx_int_t {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    }
    // SAFETY: the location's conf of this module, set by `healthcheck_status`.
    let Some(default) = (unsafe { crate::status_format(r) }) else {
        return NGX_DECLINED as ngx_int_t;
    };
    // SAFETY: args point into the request buffer.
    let args = unsafe { str_bytes(&r.args) };
    match render(default, args) {
        // SAFETY: live request.
        Ok((format, body)) => unsafe { send(r, 200, st::content_type(format), &body) },
        Err(reason) => {
            let mut body = reason.into_bytes();
            body.push(b'\n');
            // SAFETY: live request.
            unsafe { send(r, 400, "text/plain; charset=utf-8", &body) }
        }
    }
}
