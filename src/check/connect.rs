//! Opening a round's connection: a spare socket (TCP) or nginx's
//! `ngx_event_connect_peer`, the connect timeout, and closing the round's
//! connection again.

use core::ffi::c_int;
use core::mem;
use core::ptr;

use ngx::ffi::{
    ngx_connection_log_error_e_NGX_ERROR_ERR, ngx_event_connect_peer, ngx_event_get_peer,
    ngx_int_t, ngx_log_t, ngx_peer_connection_t, ngx_set_socket_errno, ngx_socket_errno, NGX_AGAIN,
    NGX_DECLINED, NGX_OK,
};

use super::conn::{is_local_error, reason_of, Conn};
use super::outcome::{Local, Outcome};
use super::peer::Peer;
use super::spares::SPARES;
use healthcheck_core::reason::Reason;

/// How a connect attempt went.
pub enum Opened {
    /// Connected already (`NGX_OK`).
    Connected(Conn),
    /// Under way (`NGX_AGAIN`): the write event tells.
    InProgress(Conn),
    /// The round is over before it began.
    Ended(Outcome),
}

/// Open a socket to `peer` (`datagram`: UDP) with nginx's peer connection
/// `pc`, logging to `log`; `elapsed_ms` is the round's time so far. The
/// connection returned is the caller's.
pub fn open(
    pc: &mut ngx_peer_connection_t,
    peer: &mut Peer,
    log: *mut ngx_log_t,
    datagram: bool,
    elapsed_ms: u64,
) -> Opened {
    if !datagram {
        if let Some(c) = SPARES.take(peer.family()) {
            if let Some(opened) = connect_spare(peer, c) {
                return opened;
            }
            // The spare was unusable (closed): a new socket, below.
        }
    }
    // SAFETY: all-zero is the initial state of a peer connection.
    *pc = unsafe { mem::zeroed() };
    pc.sockaddr = peer.addr.as_mut_ptr().cast();
    pc.socklen = peer.addr.len() as ngx::ffi::socklen_t;
    pc.name = &mut peer.name;
    pc.get = Some(ngx_event_get_peer);
    pc.log = log;
    pc.type_ = if datagram { libc::SOCK_DGRAM } else { 0 };
    pc.set_log_error(ngx_connection_log_error_e_NGX_ERROR_ERR);

    // SAFETY: the running cycle.
    let free = unsafe { (*ptr::addr_of!(ngx::ffi::ngx_cycle)).as_ref() }
        .map_or(1, |c| c.free_connection_n);
    let (rc, err) = if free == 0 {
        // ngx_get_connection would fail (and log an alert every time).
        (ngx::ffi::NGX_ERROR as ngx_int_t, 0)
    } else {
        ngx_set_socket_errno(0);
        // SAFETY: a fully initialised peer connection.
        let rc = unsafe { ngx_event_connect_peer(pc) };
        (rc, ngx_socket_errno())
    };
    if rc != NGX_OK as ngx_int_t && rc != NGX_AGAIN as ngx_int_t {
        // nginx already closed the socket, if it made one.
        pc.connection = ptr::null_mut();
        return Opened::Ended(connect_failed(datagram, rc, err, elapsed_ms));
    }
    // SAFETY: ngx_event_connect_peer made a live connection; it is ours.
    let Some(c) = (unsafe { Conn::from_raw(pc.connection) }) else {
        return Opened::Ended(Outcome::Local(Local::NoConnection));
    };
    pc.connection = ptr::null_mut();
    if rc == NGX_OK as ngx_int_t {
        Opened::Connected(c)
    } else {
        Opened::InProgress(c)
    }
}

/// The outcome of a failed `ngx_event_connect_peer`.
fn connect_failed(datagram: bool, rc: ngx_int_t, err: c_int, elapsed_ms: u64) -> Outcome {
    if datagram {
        // Nothing was sent: no confirmed failure (docs/design.md, How
        // checks work: UDP).
        Outcome::Up {
            delay_ms: elapsed_ms,
        }
    } else if rc != NGX_DECLINED as ngx_int_t {
        // socket() failed (errno set) or no free connection (errno
        // untouched: reset before the call).
        Outcome::Local(if err == 0 {
            Local::NoConnection
        } else {
            Local::Errno(err)
        })
    } else if is_local_error(err) {
        Outcome::Local(Local::Errno(err))
    } else {
        Outcome::Down(reason_of(err))
    }
}

/// Connect a spare socket to the peer: the same outcomes as
/// `ngx_event_connect_peer`, without a new socket. `None` when the spare
/// itself was the problem (an errno no peer causes, such as `EISCONN`): it
/// is closed and the round goes on with a new socket.
fn connect_spare(peer: &Peer, c: Conn) -> Option<Opened> {
    let err = match c.connect(&peer.addr) {
        Ok(()) => return Some(Opened::Connected(c)),
        Err(libc::EINPROGRESS) => return Some(Opened::InProgress(c)),
        Err(err) => err,
    };
    // The spare is ours alone; it holds no connection (CLOSE state).
    c.close();
    if is_local_error(err) {
        return Some(Opened::Ended(Outcome::Local(Local::Errno(err))));
    }
    match reason_of(err) {
        Reason::Error => None,
        r => Some(Opened::Ended(Outcome::Down(r))),
    }
}

/// What a connect timeout turned out to be.
pub enum Expired {
    Connected,
    Failed(Outcome),
    /// Not yet: the timer was re-armed for the rest of the timeout.
    Rearmed,
}

/// The connect timer of `c` fired, `spent` ms into a round of `timeout` ms.
/// It ran on nginx's cached clock, which lags after a long event-loop turn
/// (a busy worker): a probe started at the end of a 700 ms turn had its
/// timer armed 700 ms in the past, and its connection may be established
/// with the event still unread. So look at the socket itself, and at a
/// fresh clock (`spent`), before calling it a timeout.
pub fn connect_timer_expired(c: Conn, spent: u64, timeout: u64) -> Expired {
    let err = c.so_error();
    if err != 0 {
        return Expired::Failed(Outcome::Down(reason_of(err)));
    }
    // Not a timeout after all: nginx leaves the flag set, and the next
    // event (the TLS handshake's handler, a kind's write event) must not
    // read it as one.
    c.clear_timedout();
    if c.is_connected() {
        return Expired::Connected;
    }
    if spent < timeout {
        c.write_timer(timeout - spent);
        return Expired::Rearmed;
    }
    Expired::Failed(Outcome::Down(Reason::Timeout))
}

/// End a round's connection with RST: kept as a spare (a fresh TCP socket
/// of address family `family`), or closed. A connection that served
/// earlier rounds (`reused`) or a datagram socket is closed.
pub fn close(c: Conn, reused: bool, datagram: bool, family: i32) {
    if !reused && !datagram && SPARES.put(family, c) {
        return;
    }
    c.rst_close();
}
