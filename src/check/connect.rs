//! Opening a round's connection: a spare socket (TCP) or nginx's
//! `ngx_event_connect_peer`, the connect timeout, and closing the round's
//! connection again.

use core::ffi::c_int;
use core::mem;
use core::ptr;

use ngx::ffi::{
    ngx_connection_log_error_e_NGX_ERROR_ERR, ngx_event_connect_peer, ngx_event_get_peer,
    ngx_int_t, ngx_set_socket_errno, ngx_socket_errno, NGX_AGAIN, NGX_DECLINED, NGX_OK,
};

use super::conn::{is_local_error, reason_of, Conn};
use super::round::{Local, Outcome};
use super::spares::SPARES;
use super::{Phase, Probe};
use healthcheck_core::reason::Reason;

/// How a connect attempt went.
pub enum Opened {
    /// Connected already (`NGX_OK`).
    Connected,
    /// Under way (`NGX_AGAIN`): the write event tells.
    InProgress,
    /// The round is over before it began.
    Ended(Outcome),
}

/// Open the round's socket (`datagram`: UDP) and make it the round's
/// connection.
pub fn open(p: &mut Probe, datagram: bool) -> Opened {
    if !datagram {
        if let Some(c) = SPARES.take(p.peer.family()) {
            if let Some(opened) = connect_spare(p, c) {
                return opened;
            }
            // The spare was unusable (closed): a new socket, below.
        }
    }
    // SAFETY: all-zero is the initial state of a peer connection.
    p.pc = unsafe { mem::zeroed() };
    p.pc.sockaddr = p.peer.addr.as_mut_ptr().cast();
    p.pc.socklen = p.peer.addr.len() as ngx::ffi::socklen_t;
    p.pc.name = &mut p.peer.name;
    p.pc.get = Some(ngx_event_get_peer);
    p.pc.log = p.conn_log;
    p.pc.type_ = if datagram { libc::SOCK_DGRAM } else { 0 };
    p.pc.set_log_error(ngx_connection_log_error_e_NGX_ERROR_ERR);

    // SAFETY: the running cycle.
    let free = unsafe { (*ptr::addr_of!(ngx::ffi::ngx_cycle)).as_ref() }
        .map_or(1, |c| c.free_connection_n);
    let (rc, err) = if free == 0 {
        // ngx_get_connection would fail (and log an alert every time).
        (ngx::ffi::NGX_ERROR as ngx_int_t, 0)
    } else {
        ngx_set_socket_errno(0);
        // SAFETY: a fully initialised peer connection.
        let rc = unsafe { ngx_event_connect_peer(&mut p.pc) };
        (rc, ngx_socket_errno())
    };
    if rc != NGX_OK as ngx_int_t && rc != NGX_AGAIN as ngx_int_t {
        // nginx already closed the socket, if it made one.
        p.pc.connection = ptr::null_mut();
        return Opened::Ended(connect_failed(datagram, rc, err, p.round.elapsed_ms()));
    }
    // SAFETY: ngx_event_connect_peer made a live connection; it is ours.
    let Some(c) = (unsafe { Conn::from_raw(p.pc.connection) }) else {
        return Opened::Ended(Outcome::Local(Local::NoConnection));
    };
    p.pc.connection = ptr::null_mut();
    p.attach(c);
    if rc == NGX_OK as ngx_int_t {
        Opened::Connected
    } else {
        Opened::InProgress
    }
}

/// The outcome of a failed `ngx_event_connect_peer`.
fn connect_failed(datagram: bool, rc: ngx_int_t, err: c_int, elapsed_ms: u64) -> Outcome {
    if datagram {
        // Nothing was sent: no confirmed failure (README: How checks work,
        // UDP).
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
fn connect_spare(p: &mut Probe, c: Conn) -> Option<Opened> {
    let err = match c.connect(&p.peer.addr) {
        Ok(()) => {
            p.attach(c);
            return Some(Opened::Connected);
        }
        Err(libc::EINPROGRESS) => {
            p.attach(c);
            return Some(Opened::InProgress);
        }
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

/// The connect timer fired. It ran on nginx's cached clock, which lags
/// after a long event-loop turn (a busy worker): a probe started at the end
/// of a 700 ms turn had its timer armed 700 ms in the past, and its
/// connection may be established with the event still unread. So look at
/// the socket itself, and at a fresh clock, before calling it a timeout.
pub fn connect_timer_expired(p: &Probe, c: Conn) -> Expired {
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
    let spent = p.round.elapsed_ms();
    if spent < p.check.conf.timeout_ms {
        c.write_timer(p.check.conf.timeout_ms - spent);
        return Expired::Rearmed;
    }
    Expired::Failed(Outcome::Down(Reason::Timeout))
}

/// End the round's connection, if any, with RST: kept as a spare (a fresh
/// TCP socket), or closed.
pub fn close(p: &mut Probe) {
    p.phase = Phase::Idle;
    let reused = p.reused.take().is_some();
    let Some(c) = p.conn.take() else { return };
    if !reused && !p.kind.datagram() && SPARES.put(p.peer.family(), c) {
        return;
    }
    c.rst_close();
}
