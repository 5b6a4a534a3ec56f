//! Connections kept between rounds (`reuse` / `keepalive`), at the
//! transport level: the owning worker keeps the connection of a successful
//! round; the next round takes it if it may still serve (its age below the
//! rehandshake period and, with `reuse=on`, fewer than
//! `check_keepalive_requests` rounds) and is alive (nothing came while it
//! was idle, or a peek finds it open), else the round connects anew. While
//! idle, data from the server is read and discarded (past
//! [`IDLE_DATA_MAX`] bytes the connection is closed); FIN, RST or a kernel
//! keepalive timeout closes it without counting a failure.

use ngx::ffi::ngx_event_t;

use super::conn::{Conn, Io, Peek};
use super::{Probe, ProbeKind};
use crate::ffi::guard;
use healthcheck_core::schedule;

/// Idle bytes a kept connection may receive before it is closed.
const IDLE_DATA_MAX: usize = 4096;

/// What a kept connection has done so far.
#[derive(Clone, Copy, Debug)]
pub struct Served {
    /// Start of the round that opened it (nginx ms).
    pub opened: u64,
    /// Rounds served, the opening one included.
    pub rounds: u32,
    /// Idle bytes read and discarded.
    pub idle_bytes: usize,
}

/// An idle kept connection.
pub struct Kept {
    pub conn: Conn,
    pub served: Served,
}

/// Take the kept connection for the round starting at `now`, if it may
/// serve it; it becomes the round's connection (`p.reused` set). Closes a
/// connection that is too old, has served its rounds or is gone.
pub fn take_for_round(p: &mut Probe, now: u64) -> bool {
    let Some(k) = p.kept.as_ref() else {
        return false;
    };
    let period = p.check.conf.rehandshake_ms.unwrap_or(0);
    let age = now.saturating_sub(k.served.opened);
    if schedule::must_rehandshake(age, k.served.rounds, period, p.max_rounds()) {
        close_kept(p);
        return false;
    }
    let conn = k.conn;
    // Over TLS, nginx may have parked a handler of ours while OpenSSL
    // waited for the other direction; it would come back on the round's
    // events. Such a connection is not reused.
    if conn.tls_handler_parked() {
        close_kept(p);
        return false;
    }
    // Anything that came while the connection was idle (data, FIN, RST, a
    // keepalive timeout) raised its read event: the idle handler read it,
    // or, when events are posted behind timers, the event is ready. With
    // no event since the last read met EAGAIN, the connection is as it was
    // (nginx's events are edge-triggered) and a peek would only cost a
    // system call.
    let peek = if conn.read_ready() {
        conn.peek()
    } else {
        Peek::WouldBlock
    };
    super::tls::collect_session(p, conn);
    match peek {
        Peek::WouldBlock => {}
        // (A TLS peek consumed the byte: only a plain socket keeps it.)
        Peek::Data if p.kind.reuse_with_pending_data() && !conn.is_tls() => {}
        // Gone, or holding bytes no request asked for: the same round
        // re-handshakes and the new connection's result counts.
        Peek::Data | Peek::Failed(_) => {
            close_kept(p);
            return false;
        }
    }
    let Some(Kept { conn, mut served }) = p.kept.take() else {
        return false;
    };
    served.rounds = served.rounds.saturating_add(1);
    p.reused = Some(served);
    p.attach(conn);
    true
}

/// Move the round's connection to `kept`: an idle connection watched for
/// data, FIN, RST and keepalive timeouts.
pub fn keep(p: &mut Probe) {
    let Some(c) = p.conn.take() else { return };
    let served = match p.reused.take() {
        Some(s) => s,
        None => {
            if let Some(ka) = p.check.conf.keepalive {
                c.set_keepalive(ka.idle_s, ka.intvl_s, ka.cnt);
            }
            Served {
                opened: p.round.start_msec,
                rounds: 1,
                idle_bytes: 0,
            }
        }
    };
    c.del_timers();
    c.attach(p.as_data(), Some(ngx_healthcheck_idle_handler));
    p.kept = Some(Kept { conn: c, served });
    // Data that arrived while the round ran was seen by the round's
    // handler (edge-triggered events fire once): read it now. When the
    // round's last read ended in EAGAIN and no event came since, there is
    // nothing to read (anything later raises the idle handler).
    if c.read_ready() {
        drain_idle(p, c);
    }
}

/// Close the kept connection, if any, with RST.
pub fn close_kept(p: &mut Probe) {
    if let Some(k) = p.kept.take() {
        k.conn.rst_close();
    }
}

unsafe extern "C" fn ngx_healthcheck_idle_handler(ev: *mut ngx_event_t) {
    // SAFETY: connection events carry their live connection in `data`; a
    // kept connection's data is its probe, which outlives it.
    let (c, write, log) = unsafe {
        let c = (*ev).data.cast::<ngx::ffi::ngx_connection_t>();
        (Conn::from_raw(c), (*ev).write() != 0, (*ev).log)
    };
    guard(log, "kept check connection", (), || {
        let Some(c) = c else { return };
        // SAFETY: see above.
        let Some(p) = (unsafe { c.data().cast::<Probe>().as_mut() }) else {
            return;
        };
        if c.closing() {
            // Shutdown: close at once.
            return close_kept(p);
        }
        if !write {
            drain_idle(p, c);
        }
    });
}

/// Read and discard what arrived on an idle kept connection; close it on
/// FIN, RST, keepalive timeout or too much data.
fn drain_idle(p: &mut Probe, c: Conn) {
    if p.kept.as_ref().map(|k| k.conn) != Some(c) {
        return;
    }
    let mut buf = [0u8; 1024];
    loop {
        match c.recv(&mut buf) {
            Io::Done(n) if n > 0 => {
                let too_much = p.kept.as_mut().is_some_and(|k| {
                    k.served.idle_bytes += n;
                    k.served.idle_bytes > IDLE_DATA_MAX
                });
                if too_much {
                    return close_kept(p);
                }
            }
            Io::Again => return super::tls::collect_session(p, c),
            // FIN, RST or keepalive timeout: the next round re-handshakes.
            Io::Done(_) | Io::Error(_) => return close_kept(p),
        }
    }
}
