//! Connections kept between rounds (`reuse` / `keepalive`), at the
//! transport level: the owning worker keeps the connection of a successful
//! round; the next round takes it if it may still serve (its age below the
//! rehandshake period and, with `reuse=on`, fewer than
//! `check_keepalive_requests` rounds) and is alive (nothing came while it
//! was idle, or a peek finds it open), else the round connects anew. While
//! idle, data from the server is read and given to the probe kind (HTTP/2
//! answers its PINGs and SETTINGS) or discarded (past [`IDLE_DATA_MAX`]
//! bytes the connection is closed); FIN, RST or a kernel keepalive timeout
//! closes it without counting a failure.

use core::ffi::c_void;

use healthcheck_core::conf::KernelKeepalive;
use healthcheck_core::schedule;
use ngx::ffi::ngx_event_handler_pt;

use super::conn::{Conn, Io, Peek};
use super::tls::Tls;

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

/// What decides whether a kept connection may serve a round.
pub struct Policy {
    /// The effective rehandshake period, ms.
    pub period_ms: u64,
    /// `check_keepalive_requests` with `reuse=on`.
    pub max_rounds: Option<u32>,
    /// The kind takes a connection with unread bytes (plain tcp).
    pub pending_data_ok: bool,
}

/// Take the kept connection for the round starting at `now`, if it may
/// serve it: the connection and what it served so far (this round
/// counted). Closes a connection that is too old, has served its rounds or
/// is gone.
pub fn take(
    kept: &mut Option<Kept>,
    now: u64,
    policy: &Policy,
    tls: Option<&mut Tls>,
) -> Option<(Conn, Served)> {
    let k = kept.as_ref()?;
    let age = now.saturating_sub(k.served.opened);
    if schedule::must_rehandshake(age, k.served.rounds, policy.period_ms, policy.max_rounds) {
        close(kept);
        return None;
    }
    let conn = k.conn;
    // Over TLS, nginx may have parked a handler of ours while OpenSSL
    // waited for the other direction; it would come back on the round's
    // events. Such a connection is not reused.
    if conn.tls_handler_parked() {
        close(kept);
        return None;
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
    if let Some(t) = tls {
        t.collect(conn);
    }
    match peek {
        Peek::WouldBlock => {}
        // (A TLS peek consumed the byte: only a plain socket keeps it.)
        Peek::Data if policy.pending_data_ok && !conn.is_tls() => {}
        // Gone, or holding bytes no request asked for: the same round
        // re-handshakes and the new connection's result counts.
        Peek::Data | Peek::Failed(_) => {
            close(kept);
            return None;
        }
    }
    let Kept { conn, mut served } = kept.take()?;
    conn.reusable(false);
    served.rounds = served.rounds.saturating_add(1);
    Some((conn, served))
}

/// Keep `c`, the connection of a successful round, as an idle connection
/// watched for data, FIN, RST and keepalive timeouts: its events go to
/// `handler` with `data`. `served` is what it served so far (`None`: this
/// round opened it, at `opened`; it gets the kernel `keepalive`, if any).
pub fn keep(
    kept: &mut Option<Kept>,
    c: Conn,
    served: Option<Served>,
    (opened, keepalive): (u64, Option<KernelKeepalive>),
    (data, handler): (*mut c_void, ngx_event_handler_pt),
    tls: Option<&mut Tls>,
    sink: IdleSink,
) {
    let served = served.unwrap_or_else(|| {
        if let Some(ka) = keepalive {
            c.set_keepalive(ka.idle_s, ka.intvl_s, ka.cnt);
        }
        Served {
            opened,
            rounds: 1,
            idle_bytes: 0,
        }
    });
    c.del_timers();
    c.attach(data, handler);
    // nginx may take it back when it runs out of connections (its idle
    // handler then sees `close`): checks never hold a client's connection.
    c.reusable(true);
    *kept = Some(Kept { conn: c, served });
    // Data that arrived while the round ran was seen by the round's
    // handler (edge-triggered events fire once): read it now. When the
    // round's last read ended in EAGAIN and no event came since, there is
    // nothing to read (anything later raises the idle handler).
    if c.read_ready() {
        drain_idle(kept, tls, c, sink);
    }
}

/// Close the kept connection, if any, with RST.
pub fn close(kept: &mut Option<Kept>) {
    if let Some(k) = kept.take() {
        k.conn.rst_close();
    }
}

/// What the probe kind does with bytes of an idle kept connection
/// (`ProbeKind::idle_data`).
pub type IdleSink<'a> = &'a mut dyn FnMut(&[u8], Conn) -> Option<bool>;

/// Read what arrived on the idle kept connection `c` and give it to
/// `sink`: bytes it has no use for are discarded (past [`IDLE_DATA_MAX`]
/// the connection is closed); close it when the sink says so, and on FIN,
/// RST or keepalive timeout.
pub fn drain_idle(kept: &mut Option<Kept>, mut tls: Option<&mut Tls>, c: Conn, sink: IdleSink) {
    if kept.as_ref().map(|k| k.conn) != Some(c) {
        return;
    }
    let mut buf = [0u8; 1024];
    loop {
        match c.recv(&mut buf) {
            Io::Done(n) if n > 0 => match sink(&buf[..n], c) {
                Some(true) => {}
                Some(false) => return close(kept),
                None => {
                    let too_much = kept.as_mut().is_some_and(|k| {
                        k.served.idle_bytes += n;
                        k.served.idle_bytes > IDLE_DATA_MAX
                    });
                    if too_much {
                        return close(kept);
                    }
                }
            },
            Io::Again => {
                if let Some(t) = tls.as_deref_mut() {
                    t.collect(c);
                }
                return;
            }
            // FIN, RST or keepalive timeout: the next round re-handshakes.
            Io::Done(_) | Io::Error(_) => return close(kept),
        }
    }
}
