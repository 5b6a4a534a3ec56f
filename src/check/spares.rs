//! Spare sockets: TCP sockets of finished rounds, disconnected in place and
//! kept for later rounds of this worker, to any peer of the same address
//! family (docs/design.md, How checks work: spare sockets).
//!
//! `connect(AF_UNSPEC)` on a TCP socket resets an open connection (RST, no
//! TIME_WAIT, like `SO_LINGER` 0), aborts a pending connect, releases the
//! local port and leaves the socket ready for another `connect()`; the
//! socket stays non-blocking and registered with epoll. A round on a spare
//! is connect, peek and disconnect: no socket(), ioctl(), epoll_ctl(),
//! setsockopt() or close(), about a fifth of a round's CPU on loopback
//! (`scripts/bench-overhead`).
//!
//! A spare keeps its nginx connection, marked idle and reusable: a worker
//! that runs out of `worker_connections` takes spares back (nginx calls the
//! handler with `close` set), as does shutdown. The pool holds at most
//! [`SPARES_MAX`] sockets and 1/[`SPARE_SHARE`] of `worker_connections`; a
//! worker keeps about as many as it has rounds in flight at once. A socket
//! with nginx's SSL layer attached is never kept.

use core::cell::UnsafeCell;
use core::ptr;

use ngx::ffi::ngx_event_t;

use super::conn::Conn;
use crate::ffi::{exiting, guard};

/// Most spare sockets a worker keeps.
const SPARES_MAX: usize = 256;
/// At most this share of `worker_connections` (1/SPARE_SHARE).
const SPARE_SHARE: usize = 8;

/// The pool: (address family, connection).
pub struct Spares(UnsafeCell<Vec<(i32, Conn)>>);

// SAFETY: nginx runs module code on one thread per process.
unsafe impl Sync for Spares {}

/// This process's pool.
pub static SPARES: Spares = Spares(UnsafeCell::new(Vec::new()));

impl Spares {
    /// Run `f` on the list. No nginx call may happen inside: nginx may call
    /// back into `forget` (a spare's handler).
    fn with<R>(&self, f: impl FnOnce(&mut Vec<(i32, Conn)>) -> R) -> R {
        // SAFETY: single-threaded, and `f` never re-enters (see above).
        f(unsafe { &mut *self.0.get() })
    }

    /// A spare of this family, with clean events, ready for connect().
    pub fn take(&self, family: i32) -> Option<Conn> {
        let c = self.with(|v| {
            let i = v.iter().rposition(|&(f, _)| f == family)?;
            Some(v.swap_remove(i).1)
        })?;
        c.reusable(false);
        c.clear_events();
        Some(c)
    }

    /// Disconnect the round's socket and keep it; `false` (the socket
    /// untouched) when it must be closed instead.
    pub fn put(&self, family: i32, c: Conn) -> bool {
        if family != libc::AF_INET && family != libc::AF_INET6 {
            return false;
        }
        // SAFETY: the running cycle.
        let Some(cycle) = (unsafe { (*ptr::addr_of!(ngx::ffi::ngx_cycle)).as_ref() }) else {
            return false;
        };
        let room = SPARES_MAX.min(cycle.connection_n / SPARE_SHARE);
        if exiting() || c.closing() || c.has_tls_state() || self.with(|v| v.len()) >= room {
            return false;
        }
        if !c.disconnect() {
            return false;
        }
        c.clear_events();
        c.attach(ptr::null_mut(), Some(ngx_healthcheck_spare_handler));
        c.reusable(true);
        self.with(|v| v.push((family, c)));
        true
    }

    /// Drop `c` from the pool (it is being closed).
    fn forget(&self, c: Conn) {
        self.with(|v| v.retain(|&(_, s)| s != c));
    }

    /// Close every spare (process exit, reload).
    pub fn close_all(&self) {
        let all = self.with(core::mem::take);
        for (_, c) in all {
            c.close();
        }
    }
}

/// Events of a spare: the disconnect's own HUP (nothing to do), or nginx
/// taking the connection back (`close`: shutdown, or out of
/// `worker_connections`).
unsafe extern "C" fn ngx_healthcheck_spare_handler(ev: *mut ngx_event_t) {
    // SAFETY: connection events carry their live connection in `data`; a
    // spare's connection belongs to the pool.
    let (c, log) = unsafe {
        let c = (*ev).data.cast::<ngx::ffi::ngx_connection_t>();
        (Conn::from_raw(c), (*ev).log)
    };
    guard(log, "spare check socket", (), || {
        let Some(c) = c else { return };
        if c.closing() || exiting() {
            SPARES.forget(c);
            c.close();
        }
    });
}
