//! Writing `check_log` (docs/operations.md, Event log): one line per
//! transition, by the worker that made it, to the file nginx opened (and
//! reopens on `nginx -s reopen`) or through nginx's syslog code. A line that
//! cannot be written at once is dropped and counted in the zone
//! (`dropped_events`): a worker never waits for the event log.
//!
//! File lines of one event-loop turn are gathered and written together by
//! an event posted to nginx's `ngx_posted_events`, which nginx runs at the
//! end of the same turn: a burst of transitions costs one `write()` per
//! turn, not one per line. `exit_process` writes what is left.

use core::cell::{RefCell, UnsafeCell};
use core::mem::MaybeUninit;
use core::ptr;

use healthcheck_core::events::{line, Event};
use healthcheck_core::zone::Header;
use ngx::ffi::{ngx_event_t, ngx_open_file_t, ngx_post_event, ngx_posted_events};

use crate::conf::{EventSink, SinkTo};
use crate::ffi;
use crate::shm::Zone;

/// Lines of one file waiting for the end of the turn.
struct Batch {
    file: *mut ngx_open_file_t,
    /// The zone that counts them if they cannot be written (its memory
    /// outlives the turn).
    header: *const Header,
    buf: Vec<u8>,
    lines: u32,
}

/// Written at once past this (a turn with thousands of transitions).
const BATCH_MAX: usize = 64 * 1024;

thread_local! {
    static BATCHES: RefCell<Vec<Batch>> = const { RefCell::new(Vec::new()) };
}

/// The posted event that writes the batches.
struct FlushEvent(UnsafeCell<MaybeUninit<ngx_event_t>>);
// SAFETY: nginx runs module code on one thread per process.
unsafe impl Sync for FlushEvent {}
static FLUSH: FlushEvent = FlushEvent(UnsafeCell::new(MaybeUninit::zeroed()));

unsafe extern "C" fn flush_handler(_ev: *mut ngx_event_t) {
    ffi::guard(ffi::cycle_log(), "check_log", (), flush);
}

/// Write every batch now.
pub fn flush() {
    let batches = BATCHES.with(|b| b.try_borrow_mut().map(|mut b| core::mem::take(&mut *b)));
    for b in batches.unwrap_or_default() {
        write_batch(&b);
    }
}

fn write_batch(b: &Batch) {
    // SAFETY: nginx's open file of the running cycle; its `fd` is
    // replaced by nginx itself on reopen, in this process.
    let fd = unsafe { (*b.file).fd };
    // SAFETY: a plain write of our buffer. nginx opened the file with
    // O_APPEND, so the lines of several workers never interleave.
    let n = unsafe { libc::write(fd, b.buf.as_ptr().cast(), b.buf.len()) };
    let written = usize::try_from(n).unwrap_or(0).min(b.buf.len());
    if written < b.buf.len() {
        // Lines not (wholly) written are dropped.
        let lost = b.buf[written..].iter().filter(|&&c| c == b'\n').count() as u32;
        // SAFETY: the zone's header, mapped for the cycle.
        if let Some(h) = unsafe { b.header.as_ref() } {
            h.dropped_events
                .fetch_add(lost.min(b.lines), core::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Queue `ev`'s line for `file`, and the flush at the end of the turn.
fn queue(
    file: *mut ngx_open_file_t,
    zone: &Zone,
    ev: &Event,
    format: healthcheck_core::events::Format,
) {
    let full = BATCHES.with(|cell| {
        let Ok(mut batches) = cell.try_borrow_mut() else {
            return None;
        };
        let i = match batches.iter().position(|b| b.file == file) {
            Some(i) => i,
            None => {
                batches.push(Batch {
                    file,
                    header: zone.header(),
                    buf: Vec::with_capacity(4096),
                    lines: 0,
                });
                batches.len() - 1
            }
        };
        let b = &mut batches[i];
        line(ev, format, &mut b.buf);
        b.lines += 1;
        (b.buf.len() >= BATCH_MAX).then(|| batches.swap_remove(i))
    });
    if let Some(b) = full {
        write_batch(&b);
        return;
    }
    let ev = FLUSH.0.get().cast::<ngx_event_t>();
    // SAFETY: our static event, zeroed, used only on this thread; nginx's
    // posted queue of the running process (the event is unlinked by nginx
    // before its handler runs).
    unsafe {
        (*ev).handler = Some(flush_handler);
        // The running cycle's log (a single process reloaded in place has a
        // new one).
        (*ev).log = ffi::cycle_log();
        ngx_post_event(ev, ptr::addr_of_mut!(ngx_posted_events));
    }
}

/// What a syslog header can take (priority, time, hostname, tag).
const SYSLOG_HEADER_MAX: usize = 8 + 16 + 256 + 64;
/// A syslog datagram's line is cut here, as nginx cuts its own.
const SYSLOG_LINE_MAX: usize = 4096;

/// Write `ev` to `sink`; count it in `zone` when it could not be.
pub fn emit(sink: &EventSink, zone: &Zone, ev: &Event) {
    let written = match sink.to {
        SinkTo::File(file) => {
            queue(file, zone, ev, sink.format);
            return;
        }
        SinkTo::Syslog(peer) => {
            let mut body = Vec::with_capacity(320);
            line(ev, sink.format, &mut body);
            body.pop();
            body.truncate(SYSLOG_LINE_MAX);
            let mut msg = vec![0u8; SYSLOG_HEADER_MAX + body.len()];
            // SAFETY: nginx's syslog peer of the running cycle; the header
            // fits in SYSLOG_HEADER_MAX (nginx bounds its hostname and tag).
            let end = unsafe { ngx::ffi::ngx_syslog_add_header(peer, msg.as_mut_ptr()) };
            let head = (end as usize).saturating_sub(msg.as_ptr() as usize);
            if head > SYSLOG_HEADER_MAX {
                false
            } else {
                msg.truncate(head);
                msg.extend_from_slice(&body);
                // SAFETY: as above; nginx sends one datagram without
                // blocking (the socket is non-blocking) and reconnects after
                // an error.
                unsafe { ngx::ffi::ngx_syslog_send(peer, msg.as_mut_ptr(), msg.len()) >= 0 }
            }
        }
    };
    if !written {
        zone.header().drop_event();
    }
}
