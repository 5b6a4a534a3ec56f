//! `check_shutdown_sessions on` (docs/transitions.md, Sessions of a down
//! peer): each worker knows which of its proxied requests and stream
//! sessions are connected to which checked peer, and when a peer goes
//! down it ends them.
//!
//! - An attempt is registered when the balancer gives it its peer
//!   (`crate::selection`'s `get`) and unregistered when nginx frees the
//!   peer, or when the request's pool goes (a cleanup, so an entry never
//!   outlives its request).
//! - An http request is finalized with `NGX_HTTP_CLOSE`, as nginx ends a
//!   request it gives up on: its upstream is finalized (the peer freed,
//!   the connection closed) and the client's connection closed (an HTTP/2
//!   stream alone is reset).
//! - A stream session's upstream socket is shut down: nginx's proxy reads
//!   the end of the upstream and ends the session itself.

use core::cell::{Cell, RefCell};
use std::collections::HashMap;

use healthcheck_core::status::Group;
use ngx::ffi::{
    ngx_http_finalize_request, ngx_http_request_t, ngx_log_t, ngx_stream_session_t, NGX_HTTP_CLOSE,
    NGX_LOG_INFO,
};

use crate::ffi;

/// A registered attempt: its request (http) or session (stream).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Owner {
    pub proto: Group,
    pub ptr: usize,
}

thread_local! {
    /// `(context, slot) -> owners` of this worker.
    static OPEN: RefCell<HashMap<(Group, u32), Vec<usize>>> = RefCell::new(HashMap::new());
}

/// One request's (session's) registration, in its pool: dropped with the
/// pool, it unregisters what is still registered.
pub struct Registration {
    owner: Owner,
    slot: Cell<Option<u32>>,
}

impl Registration {
    pub fn new(owner: Owner) -> Registration {
        Registration {
            owner,
            slot: Cell::new(None),
        }
    }

    /// The attempt now goes to the peer with `slot`.
    pub fn connect(&self, slot: u32) {
        self.end();
        OPEN.with_borrow_mut(|m| {
            m.entry((self.owner.proto, slot))
                .or_default()
                .push(self.owner.ptr)
        });
        self.slot.set(Some(slot));
    }

    /// The attempt ended (nginx freed the peer).
    pub fn end(&self) {
        let Some(slot) = self.slot.take() else {
            return;
        };
        // Not while `shut` walks the map (it takes the list out first).
        let _ = OPEN.try_with(|open| {
            if let Ok(mut m) = open.try_borrow_mut() {
                if let Some(v) = m.get_mut(&(self.owner.proto, slot)) {
                    v.retain(|&p| p != self.owner.ptr);
                    if v.is_empty() {
                        m.remove(&(self.owner.proto, slot));
                    }
                }
            }
        });
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.end();
    }
}

/// End every proxied connection of this worker to the peer with `slot`
/// (`what` names it in the log); returns how many.
pub fn shut(proto: Group, slot: u32, what: &str, log: *mut ngx_log_t) -> usize {
    let owners = OPEN.with_borrow_mut(|m| m.remove(&(proto, slot)).unwrap_or_default());
    let mut n = 0;
    for ptr in owners {
        // SAFETY: a registered owner is live (its pool's cleanup
        // unregisters it), and was taken out of the map above, so the
        // request's cleanups find nothing to remove.
        unsafe {
            match proto {
                Group::Http => {
                    let r = ptr as *mut ngx_http_request_t;
                    let c = (*r).connection;
                    ffi::log(
                        NGX_LOG_INFO,
                        if c.is_null() { log } else { (*c).log },
                        format_args!(
                            "{what} is down: ending a proxied request to it \
                             (check_shutdown_sessions)"
                        ),
                    );
                    ngx_http_finalize_request(r, NGX_HTTP_CLOSE as isize);
                }
                Group::Stream => {
                    let s = ptr as *mut ngx_stream_session_t;
                    let u = (*s).upstream;
                    let pc = if u.is_null() {
                        core::ptr::null_mut()
                    } else {
                        (*u).peer.connection
                    };
                    if pc.is_null() || (*pc).fd == -1 {
                        continue;
                    }
                    ffi::log(
                        NGX_LOG_INFO,
                        (*(*s).connection).log,
                        format_args!(
                            "{what} is down: ending a proxied session to it \
                             (check_shutdown_sessions)"
                        ),
                    );
                    libc::shutdown((*pc).fd, libc::SHUT_RDWR);
                }
            }
        }
        n += 1;
    }
    n
}
