//! Probes: one timer per checked peer per worker, rounds run on the nginx
//! event loop with non-blocking sockets (SPEC §3).
//!
//! A TCP round connects within `timeout`, then peeks one byte. Data or
//! "would block" is a success; refused, reset, timed out, closed by the
//! peer or a socket error is a failure. After a connect whose peek would
//! block, the round watches the socket for a short settle window (at most
//! a quarter of the timeout and 100 ms) so that a server that accepts and
//! at once closes or resets is seen failing; the delay recorded is the
//! connect-and-peek time, not the settle window. A round ends with RST, so
//! checks leave no TIME_WAIT: the socket is disconnected in place
//! (`connect(AF_UNSPEC)`, which resets an open connection and releases the
//! port) and kept as a spare for a later round of this worker, or closed
//! with `SO_LINGER` 0. A spare spares the next round socket(), ioctl(),
//! epoll_ctl() and close(): a fifth of a round's CPU (see `Spares`).
//!
//! With `reuse` or `keepalive`, the peer's owning worker keeps the
//! connection of a successful round. The next rounds peek it (a failed peek
//! re-handshakes within the same round); it is re-made when its age reaches
//! the rehandshake period or, with `reuse=on`, after
//! `check_keepalive_requests` rounds. While idle, data from the server is
//! read and discarded (past 4 KB the connection is closed); FIN, RST or a
//! kernel keepalive timeout closes it without counting a failure.
//!
//! Timers that may fire a little late (the look at the schedule that
//! starts a round, the end of a settle window) are aligned to a grid of
//! `interval / 50`, at most 20 ms, on nginx's monotonic clock, so that the
//! rounds of many peers share a worker wake-up: a wake-up of an idle worker
//! costs more CPU than the round's own socket calls. A round thus starts up
//! to one grid step after it is due (the fixed-rate schedule keeps the due
//! time, so nothing drifts) and a settle window lasts up to one step
//! longer, never past the round's timeout. Connect timeouts and UDP
//! deadlines are not aligned.
//!
//! A UDP round sends one `NGX_UDP_CHECKER` datagram on its own connected
//! socket and fails only if `ECONNREFUSED` (an ICMP port unreachable) is
//! seen before the deadline; a reply, silence until the deadline or any
//! other error is a success.

use core::ffi::{c_int, c_void};
use core::mem::{self, size_of};
use core::ptr;
use core::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use healthcheck_core::conf::{CheckConf, CheckType, Reuse};
use healthcheck_core::health::{Health, Transition};
use healthcheck_core::schedule::{self, Decision};
use healthcheck_core::status::duration_bucket;
use ngx::ffi::{
    getsockopt, linger, ngx_add_timer, ngx_close_connection,
    ngx_connection_log_error_e_NGX_ERROR_ERR, ngx_connection_t, ngx_current_msec, ngx_del_timer,
    ngx_delete_posted_event, ngx_event_connect_peer, ngx_event_get_peer, ngx_event_t, ngx_exiting,
    ngx_int_t, ngx_log_t, ngx_msec_t, ngx_peer_connection_t, ngx_quit, ngx_random,
    ngx_reusable_connection, ngx_socket_errno, ngx_str_t, ngx_terminate, recv, setsockopt,
    sockaddr_in, sockaddr_in6, sockaddr_storage, socklen_t, AF_INET, AF_INET6, EADDRNOTAVAIL,
    EAGAIN, ECONNREFUSED, ECONNRESET, EHOSTUNREACH, EINPROGRESS, EINTR, EMFILE, ENETUNREACH,
    ENFILE, ENOBUFS, ENOMEM, EPIPE, ETIMEDOUT, MSG_PEEK, NGX_AGAIN, NGX_DECLINED, NGX_LOG_DEBUG,
    NGX_LOG_NOTICE, NGX_LOG_WARN, NGX_OK, SOL_SOCKET, SO_ERROR, SO_LINGER,
};

use ngx::ffi::{
    __socket_type_SOCK_DGRAM as SOCK_DGRAM, ngx_set_socket_errno, send, IPPROTO_TCP, NGX_ERROR,
    SO_KEEPALIVE, TCP_KEEPCNT, TCP_KEEPIDLE, TCP_KEEPINTVL,
};

use crate::shm::{Slot, Zone};
use crate::upstream::Proto;
use crate::worker::{Context, Target};

extern "C" {
    // glibc's prototypes take a transparent union; a pointer is its ABI.
    #[link_name = "connect"]
    fn sys_connect(fd: c_int, addr: *const c_void, len: socklen_t) -> c_int;
    fn getpeername(fd: c_int, addr: *mut c_void, len: *mut socklen_t) -> c_int;
}

/// Why a round failed; the index is the slot's reason counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Refused = 0,
    Timeout = 1,
    Reset = 2,
    Closed = 3,
    Unreachable = 4,
    Error = 5,
}

impl Reason {
    fn describe(self) -> &'static str {
        match self {
            Reason::Refused => "connection refused",
            Reason::Timeout => "timed out",
            Reason::Reset => "connection reset by peer",
            Reason::Closed => "connection closed by peer",
            Reason::Unreachable => "port unreachable",
            Reason::Error => "socket error",
        }
    }

    fn from_errno(err: c_int) -> Self {
        match err as u32 {
            ECONNREFUSED => Reason::Refused,
            ETIMEDOUT => Reason::Timeout,
            ECONNRESET | EPIPE => Reason::Reset,
            EHOSTUNREACH | ENETUNREACH => Reason::Unreachable,
            _ => Reason::Error,
        }
    }
}

/// Errors of this host, not of the peer: neither success nor failure.
fn is_local_error(err: c_int) -> bool {
    matches!(
        err as u32,
        EMFILE | ENFILE | ENOBUFS | ENOMEM | EADDRNOTAVAIL
    )
}

/// A resource this host ran out of.
#[derive(Clone, Copy)]
enum Local {
    /// `socket()`/`connect()` failed with this errno.
    Errno(c_int),
    /// nginx had no free connection (`worker_connections`).
    NoConnection,
}

/// The end of a round.
enum Outcome {
    Up {
        delay_ms: u64,
    },
    Down(Reason),
    /// A local resource problem; counters stay as they are.
    Local(Local),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Connecting,
    Settling,
    /// UDP: the datagram could not be sent yet (EAGAIN).
    Sending,
    /// UDP: sent; waiting for a reply, an ICMP error or the deadline.
    Waiting,
}

/// The UDP probe's payload (SPEC §3).
const UDP_PAYLOAD: &[u8] = b"NGX_UDP_CHECKER";
/// Idle bytes a kept connection may receive before it is closed.
const IDLE_DATA_MAX: usize = 4096;
/// Immediate send retries on EAGAIN/EINTR before waiting for writability.
const SEND_RETRIES: u32 = 4;

/// A connection kept between rounds (`reuse` / `keepalive`).
struct Kept {
    c: *mut ngx_connection_t,
    /// Start of the round that opened it (nginx ms).
    opened: u64,
    /// Rounds served, the opening one included.
    served: u32,
    /// Idle bytes read and discarded.
    idle_bytes: usize,
}

/// One peer's probe in this worker. Boxed: nginx holds pointers to it.
#[repr(C)]
pub struct Probe {
    /// Must stay first: the timer's `data` points here, and nginx's debug
    /// log reads it as a connection whose `fd` (4th word) is -1.
    ident: [usize; 4],
    ev: ngx_event_t,
    pc: ngx_peer_connection_t,
    addr: Box<[u8]>,
    name: ngx_str_t,
    upstream: ngx_str_t,
    proto: Proto,
    index: u32,
    check: CheckConf,
    zone: Zone,
    owner: bool,
    worker: u32,
    /// The cycle's log, for the module's own messages.
    log: *mut ngx_log_t,
    /// A quieter copy for the probe connections (see `start_probes`).
    conn_log: *mut ngx_log_t,
    phase: Phase,
    /// Keep the connection of a successful round (owner with reuse or
    /// keepalive); `max_rounds` is check_keepalive_requests for reuse=on.
    keep: bool,
    max_rounds: Option<u32>,
    kept: Option<Kept>,
    /// When the current round was due (nginx ms).
    due: u64,
    /// Start of the current round: nginx's clock (scheduling) and a fresh
    /// monotonic clock (delay).
    start_msec: u64,
    start: Instant,
    delay_ms: u64,
}

/// A copy of the peer's address, with the check port when `port=` is set.
fn check_address(t: &Target) -> Box<[u8]> {
    let len = t.peer.socklen as usize;
    // SAFETY: rr peers hold a valid sockaddr of `socklen` bytes.
    let mut addr: Box<[u8]> =
        unsafe { core::slice::from_raw_parts(t.peer.sockaddr.cast::<u8>(), len) }.into();
    if t.check.port != 0 {
        let port = t.check.port.to_be();
        // SAFETY: the family says which struct the bytes hold; the buffer
        // has the matching length.
        unsafe {
            let family = family(&addr);
            if family == AF_INET && len >= size_of::<sockaddr_in>() {
                (*addr.as_mut_ptr().cast::<sockaddr_in>()).sin_port = port;
            } else if family == AF_INET6 && len >= size_of::<sockaddr_in6>() {
                (*addr.as_mut_ptr().cast::<sockaddr_in6>()).sin6_port = port;
            }
        }
    }
    addr
}

/// Probes of one worker.
pub struct Prober {
    /// Boxed: nginx keeps pointers to each probe's events.
    #[allow(clippy::vec_box)]
    probes: Vec<Box<Probe>>,
}

impl Prober {
    /// Create the probes of a context and arm their timers.
    ///
    /// # Safety
    /// Worker process, after the configuration is complete; `log` outlives
    /// the prober.
    pub unsafe fn start(
        proto: Proto,
        ctx: &Context,
        (worker, workers): (u32, u32),
        log: *mut ngx_log_t,
        conn_log: *mut ngx_log_t,
    ) -> Self {
        let Some(zone) = ctx.zone else {
            return Self { probes: Vec::new() };
        };
        let mut probes = Vec::with_capacity(ctx.targets.len());
        for t in &ctx.targets {
            let owner = schedule::owner(t.index, workers) == worker;
            let mut p = Box::new(Probe {
                ident: [0, 0, 0, usize::MAX],
                // SAFETY: all-zero is nginx's initial state for these structs.
                ev: unsafe { mem::zeroed() },
                // SAFETY: as above.
                pc: unsafe { mem::zeroed() },
                addr: check_address(t),
                name: t.peer.name,
                upstream: t.upstream,
                proto,
                index: t.index,
                check: t.check.clone(),
                zone,
                owner,
                worker,
                log,
                conn_log,
                phase: Phase::Idle,
                keep: t.check.keeps_connection() && owner,
                max_rounds: (t.check.reuse == Reuse::On).then_some(t.keepalive_requests),
                kept: None,
                due: 0,
                start_msec: 0,
                start: Instant::now(),
                delay_ms: 0,
            });
            let data: *mut Probe = &mut *p;
            p.ev.data = data.cast();
            p.ev.handler = Some(ngx_healthcheck_timer_handler);
            p.ev.log = log;
            p.ev.set_cancelable(1);
            // First decision almost at once: it draws the random offset.
            // SAFETY: a fresh event with a valid handler.
            unsafe { ngx_add_timer(&mut p.ev, 1) };
            probes.push(p);
        }
        Self { probes }
    }

    /// Close every check connection and timer (process exit).
    pub fn stop(&mut self) {
        for p in &mut self.probes {
            if p.ev.timer_set() != 0 {
                // SAFETY: the timer belongs to this probe.
                unsafe { ngx_del_timer(&mut p.ev) };
            }
            close(p);
            close_kept(p);
        }
        SPARES.close_all();
    }
}

fn now_msec() -> u64 {
    // SAFETY: nginx's cached monotonic clock.
    unsafe { ngx_current_msec as u64 }
}

fn exiting() -> bool {
    // SAFETY: plain process flags.
    unsafe { ngx_exiting != 0 || ngx_quit != 0 || ngx_terminate != 0 }
}

fn slot(p: &Probe) -> Option<&Slot> {
    p.zone.slot(p.index as usize)
}

/// Longest delay of an aligned timer: `interval / 50`, 1 .. 20 ms.
fn grid_step(interval: u64) -> u64 {
    (interval / 50).clamp(1, 20)
}

/// Milliseconds from `now` to the first grid point at or after `at`.
fn aligned_delay(now: u64, at: u64, step: u64) -> ngx_msec_t {
    let at = at.max(now + 1);
    (at.div_ceil(step) * step - now) as ngx_msec_t
}

/// Look at the schedule again at `at` (aligned; at the earliest in 1 ms).
fn arm(p: &mut Probe, at: u64) {
    let delay = aligned_delay(now_msec(), at, grid_step(p.check.interval_ms));
    // SAFETY: the probe's own timer event.
    unsafe { ngx_add_timer(&mut p.ev, delay) };
}

unsafe extern "C" fn ngx_healthcheck_timer_handler(ev: *mut ngx_event_t) {
    if crate::refresh_if_reloaded() {
        return;
    }
    // SAFETY: `data` is the boxed probe owning this event.
    let Some(p) = (unsafe { (*ev).data.cast::<Probe>().as_mut() }) else {
        return;
    };
    let log = p.log;
    crate::ffi::guard(log, "check timer", (), || on_timer(p));
}

fn on_timer(p: &mut Probe) {
    if exiting() {
        return;
    }
    let Some(s) = slot(p) else { return };
    let now = now_msec();
    let interval = p.check.interval_ms;
    let mut due = s.next_due.load(Ordering::Acquire);
    if due == 0 {
        let first = schedule::first_due(now, interval, ngx_random() as u64).max(1);
        due = match s
            .next_due
            .compare_exchange(0, first, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => first,
            Err(other) => other,
        };
    }
    match schedule::decide(now, due, p.owner, interval) {
        Decision::WaitUntil(at) => arm(p, at),
        Decision::Run => {
            let held = s.lease.load(Ordering::Acquire);
            let mine = schedule::lease(
                p.worker,
                schedule::lease_expiry(now, p.check.timeout_ms, interval),
            );
            if !schedule::lease_claimable(held, now, p.worker)
                || s.lease
                    .compare_exchange(held, mine, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
            {
                // Another worker runs this round; look again an interval on.
                arm(p, now + interval);
                return;
            }
            p.due = due;
            start_round(p, now);
        }
    }
}

fn start_round(p: &mut Probe, now: u64) {
    p.start_msec = now;
    p.start = Instant::now();
    debug(p, "start");
    match p.check.check_type {
        CheckType::Tcp => {
            if p.kept.is_some() && reuse_kept(p, now) {
                return;
            }
            start_tcp(p)
        }
        CheckType::Udp => start_udp(p),
    }
}

/// Run the round on the kept connection if it may serve it; `false` when
/// the round must (re-)handshake instead.
fn reuse_kept(p: &mut Probe, now: u64) -> bool {
    let Some(k) = p.kept.as_ref() else {
        return false;
    };
    let period = p.check.rehandshake_ms.unwrap_or(0);
    if schedule::must_rehandshake(now.saturating_sub(k.opened), k.served, period, p.max_rounds) {
        close_kept(p);
        return false;
    }
    match peek(k.c) {
        Peek::Data | Peek::WouldBlock => {
            if let Some(k) = p.kept.as_mut() {
                k.served = k.served.saturating_add(1);
            }
            let delay_ms = p.start.elapsed().as_millis() as u64;
            finish(p, Outcome::Up { delay_ms });
            true
        }
        // The kept connection is gone: the same round re-handshakes and
        // the new connection's result counts.
        Peek::Failed(_) => {
            close_kept(p);
            false
        }
    }
}

/// The connect timer fired. It ran on nginx's cached clock, which lags
/// after a long event-loop turn (a busy worker): a probe started at the end
/// of a 700 ms turn had its timer armed 700 ms in the past, and its
/// connection may be established with the event still unread. So look at
/// the socket itself, and at a fresh clock, before calling it a timeout.
fn connect_timer_expired(p: &mut Probe, c: *mut ngx_connection_t) {
    // SAFETY: live connection.
    let err = unsafe { so_error(c) };
    if err != 0 {
        return finish(p, Outcome::Down(Reason::from_errno(err)));
    }
    // SAFETY: live connection.
    if unsafe { is_connected(c) } {
        return connected(p, c);
    }
    let spent = p.start.elapsed().as_millis() as u64;
    if spent < p.check.timeout_ms {
        // SAFETY: the connection's own write event, its timer just fired.
        unsafe { ngx_add_timer((*c).write, (p.check.timeout_ms - spent) as ngx_msec_t) };
        return;
    }
    finish(p, Outcome::Down(Reason::Timeout))
}

/// Whether a connecting socket is established (has a peer).
///
/// # Safety
/// `c` is a live connection.
unsafe fn is_connected(c: *mut ngx_connection_t) -> bool {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut sa: sockaddr_storage = unsafe { mem::zeroed() };
    let mut len = size_of::<sockaddr_storage>() as socklen_t;
    // SAFETY: valid fd and buffers.
    unsafe { getpeername((*c).fd, ptr::addr_of_mut!(sa).cast(), &mut len) == 0 }
}

fn start_tcp(p: &mut Probe) {
    let Some(rc) = connect(p, 0) else { return };
    let c = p.pc.connection;
    p.phase = Phase::Connecting;
    if rc == NGX_OK as ngx_int_t {
        return connected(p, c);
    }
    // SAFETY: the connection's own write event.
    unsafe { ngx_add_timer((*c).write, p.check.timeout_ms as ngx_msec_t) };
}

/// Open the round's socket (`type_` 0 = TCP, or SOCK_DGRAM). Returns
/// nginx's `NGX_OK`/`NGX_AGAIN` with `pc.connection` live, or `None` when
/// the round already ended.
fn connect(p: &mut Probe, type_: c_int) -> Option<ngx_int_t> {
    // SAFETY: all-zero is the initial state of a peer connection.
    p.pc = unsafe { mem::zeroed() };
    p.pc.sockaddr = p.addr.as_mut_ptr().cast();
    p.pc.socklen = p.addr.len() as socklen_t;
    p.pc.name = &mut p.name;
    p.pc.get = Some(ngx_event_get_peer);
    p.pc.log = p.conn_log;
    p.pc.type_ = type_;
    p.pc.set_log_error(ngx_connection_log_error_e_NGX_ERROR_ERR);

    let udp = type_ == SOCK_DGRAM as c_int;
    if !udp {
        if let Some(c) = SPARES.take(family(&p.addr)) {
            if let Some(rc) = connect_spare(p, c) {
                return rc;
            }
            // The spare was unusable (closed): a new socket, below.
        }
    }
    // SAFETY: the running cycle.
    let free = unsafe { (*ptr::addr_of!(ngx::ffi::ngx_cycle)).as_ref() }
        .map_or(1, |c| c.free_connection_n);
    let (rc, err) = if free == 0 {
        // ngx_get_connection would fail (and log an alert every time).
        (NGX_ERROR as ngx_int_t, 0)
    } else {
        ngx_set_socket_errno(0);
        // SAFETY: a fully initialised peer connection.
        let rc = unsafe { ngx_event_connect_peer(&mut p.pc) };
        (rc, ngx_socket_errno())
    };
    if rc != NGX_OK as ngx_int_t && rc != NGX_AGAIN as ngx_int_t {
        // nginx already closed the socket, if it made one.
        p.pc.connection = ptr::null_mut();
        let outcome = if udp {
            // Nothing was sent: no confirmed failure (SPEC §3, UDP).
            Outcome::Up {
                delay_ms: p.start.elapsed().as_millis() as u64,
            }
        } else if rc != NGX_DECLINED as ngx_int_t {
            // socket() failed (errno set) or no free connection (errno
            // untouched: reset above).
            Outcome::Local(if err == 0 {
                Local::NoConnection
            } else {
                Local::Errno(err)
            })
        } else if is_local_error(err) {
            Outcome::Local(Local::Errno(err))
        } else {
            Outcome::Down(Reason::from_errno(err))
        };
        finish(p, outcome);
        return None;
    }
    attach(p, p.pc.connection);
    Some(rc)
}

/// Make `c` the round's connection: its events come to this probe.
fn attach(p: &mut Probe, c: *mut ngx_connection_t) {
    p.pc.connection = c;
    let data: *mut Probe = p;
    // SAFETY: a live connection, not used by anything else.
    unsafe {
        (*c).data = data.cast();
        (*(*c).read).handler = Some(ngx_healthcheck_conn_handler);
        (*(*c).write).handler = Some(ngx_healthcheck_conn_handler);
        (*(*c).read).set_cancelable(1);
        (*(*c).write).set_cancelable(1);
        // A shutting-down worker closes idle connections at once: nginx
        // sets `close` and calls the read handler, which drops the round.
        (*c).set_idle(1);
    }
}

/// Connect a spare socket (see `Spares`) to the peer: the same outcomes as
/// `ngx_event_connect_peer`, without a new socket. `None` when the spare
/// itself was the problem (an errno no peer causes, such as `EISCONN`): it
/// is closed and the round goes on with a new socket.
fn connect_spare(p: &mut Probe, c: *mut ngx_connection_t) -> Option<Option<ngx_int_t>> {
    // SAFETY: a live socket; the address buffer holds `len` bytes.
    let rc = unsafe { sys_connect((*c).fd, p.addr.as_ptr().cast(), p.addr.len() as socklen_t) };
    let err = if rc == -1 { ngx_socket_errno() } else { 0 };
    if rc == 0 || err as u32 == EINPROGRESS {
        attach(p, c);
        return Some(Some(if rc == 0 {
            NGX_OK as ngx_int_t
        } else {
            NGX_AGAIN as ngx_int_t
        }));
    }
    // SAFETY: the spare is ours alone; it holds no connection (CLOSE state).
    unsafe { ngx_close_connection(c) };
    let outcome = if is_local_error(err) {
        Outcome::Local(Local::Errno(err))
    } else {
        match Reason::from_errno(err) {
            Reason::Error => return None,
            r => Outcome::Down(r),
        }
    };
    finish(p, outcome);
    Some(None)
}

unsafe extern "C" fn ngx_healthcheck_conn_handler(ev: *mut ngx_event_t) {
    if crate::refresh_if_reloaded() {
        return;
    }
    // SAFETY: connection events carry their connection in `data`, whose
    // `data` is the probe (set in start_tcp).
    let (c, p) = unsafe {
        let c = (*ev).data.cast::<ngx_connection_t>();
        (c, (*c).data.cast::<Probe>())
    };
    // SAFETY: the probe outlives its connection.
    let Some(p) = (unsafe { p.as_mut() }) else {
        return;
    };
    let log = p.log;
    // SAFETY: a live event of a live connection.
    let (timedout, closing) = unsafe { ((*ev).timedout() != 0, (*c).close() != 0) };
    crate::ffi::guard(log, "check connection", (), || {
        if closing {
            cancel(p)
        } else {
            on_conn_event(p, c, timedout)
        }
    });
}

/// The worker is shutting down (nginx closes idle connections, ours are
/// marked idle): drop the round without counting it and free its lease.
fn cancel(p: &mut Probe) {
    close(p);
    if let Some(s) = slot(p) {
        s.lease.store(0, Ordering::Release);
    }
}

fn on_conn_event(p: &mut Probe, c: *mut ngx_connection_t, timedout: bool) {
    let up = Outcome::Up {
        delay_ms: p.delay_ms,
    };
    match p.phase {
        Phase::Idle => {}
        Phase::Connecting if timedout => connect_timer_expired(p, c),
        Phase::Connecting => {
            // SAFETY: live connection.
            let err = unsafe { so_error(c) };
            if err != 0 {
                return finish(p, Outcome::Down(Reason::from_errno(err)));
            }
            connected(p, c);
        }
        // Nothing arrived during the settle window: healthy.
        Phase::Settling if timedout => finish(p, up),
        Phase::Settling => match peek(c) {
            Peek::Data => finish(p, up),
            Peek::WouldBlock => {}
            Peek::Failed(r) => finish(p, Outcome::Down(r)),
        },
        // Silence until the deadline: no confirmed failure.
        Phase::Sending | Phase::Waiting if timedout => {
            let delay_ms = p.check.timeout_ms;
            finish(p, Outcome::Up { delay_ms })
        }
        Phase::Sending => udp_send(p, c),
        Phase::Waiting => udp_receive(p, c),
    }
}

/// `SO_ERROR` of the connection's socket (0 = connected).
///
/// # Safety
/// `c` is a live connection.
unsafe fn so_error(c: *mut ngx_connection_t) -> c_int {
    let mut err: c_int = 0;
    let mut len = size_of::<c_int>() as socklen_t;
    // SAFETY: valid fd and buffers.
    let rc = unsafe {
        getsockopt(
            (*c).fd,
            SOL_SOCKET as c_int,
            SO_ERROR as c_int,
            ptr::addr_of_mut!(err).cast(),
            &mut len,
        )
    };
    if rc == -1 {
        ngx_socket_errno()
    } else {
        err
    }
}

enum Peek {
    Data,
    WouldBlock,
    Failed(Reason),
}

fn peek(c: *mut ngx_connection_t) -> Peek {
    let mut b = 0u8;
    loop {
        // SAFETY: live connection fd, one-byte buffer.
        let n = unsafe {
            recv(
                (*c).fd,
                ptr::addr_of_mut!(b).cast::<c_void>(),
                1,
                MSG_PEEK as c_int,
            )
        };
        if n > 0 {
            return Peek::Data;
        }
        if n == 0 {
            return Peek::Failed(Reason::Closed);
        }
        let err = ngx_socket_errno();
        match err as u32 {
            EAGAIN => return Peek::WouldBlock,
            EINTR => continue,
            _ => return Peek::Failed(Reason::from_errno(err)),
        }
    }
}

fn connected(p: &mut Probe, c: *mut ngx_connection_t) {
    p.delay_ms = p.start.elapsed().as_millis() as u64;
    match peek(c) {
        Peek::Data => finish(
            p,
            Outcome::Up {
                delay_ms: p.delay_ms,
            },
        ),
        Peek::Failed(r) => finish(p, Outcome::Down(r)),
        Peek::WouldBlock => {
            let budget = p
                .check
                .timeout_ms
                .saturating_sub(now_msec().saturating_sub(p.start_msec));
            let settle = budget.min(p.check.timeout_ms / 4).min(100);
            if settle == 0 {
                return finish(
                    p,
                    Outcome::Up {
                        delay_ms: p.delay_ms,
                    },
                );
            }
            p.phase = Phase::Settling;
            // Aligned, unless that would end the round past its timeout.
            let now = now_msec();
            let aligned = aligned_delay(now, now + settle, grid_step(p.check.interval_ms));
            let delay = if aligned as u64 <= budget {
                aligned
            } else {
                settle as ngx_msec_t
            };
            // SAFETY: live connection; its write timer is done with.
            unsafe {
                if (*(*c).write).timer_set() != 0 {
                    ngx_del_timer((*c).write);
                }
                ngx_add_timer((*c).read, delay);
            }
        }
    }
}

/// End the round's connection, if any, with RST: kept as a spare (TCP),
/// or closed.
fn close(p: &mut Probe) {
    let c = mem::replace(&mut p.pc.connection, ptr::null_mut());
    p.phase = Phase::Idle;
    if c.is_null() {
        return;
    }
    if p.check.check_type == CheckType::Tcp && SPARES.put(family(&p.addr), c) {
        return;
    }
    rst_close(c);
}

/// Close a connection without TIME_WAIT (`SO_LINGER` 0 sends RST).
fn rst_close(c: *mut ngx_connection_t) {
    if c.is_null() {
        return;
    }
    let l = linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: live connection; closing removes its timers and events.
    unsafe {
        setsockopt(
            (*c).fd,
            SOL_SOCKET as c_int,
            SO_LINGER as c_int,
            ptr::addr_of!(l).cast(),
            size_of::<linger>() as socklen_t,
        );
        ngx_close_connection(c);
    }
}

fn unix_ms() -> u64 {
    let t = ngx::ffi::ngx_timeofday();
    t.sec as u64 * 1000 + t.msec as u64
}

fn finish(p: &mut Probe, outcome: Outcome) {
    if p.keep
        && p.kept.is_none()
        && matches!(outcome, Outcome::Up { .. })
        && p.check.check_type == CheckType::Tcp
    {
        keep(p);
    }
    close(p);
    let committed = now_msec();
    let Some(s) = slot(p) else { return };
    match outcome {
        Outcome::Local(err) => local_error(p, err),
        Outcome::Up { delay_ms } => record(p, s, Ok(delay_ms)),
        Outcome::Down(r) => record(p, s, Err(r)),
    }
    s.last_start.store(p.start_msec, Ordering::Relaxed);
    let due = schedule::next_due(p.due, p.start_msec, committed, p.check.interval_ms);
    s.next_due.store(due, Ordering::Release);
    s.lease.store(0, Ordering::Release);
    if !exiting() {
        arm(
            p,
            if p.owner {
                due
            } else {
                due + p.check.interval_ms
            },
        );
    }
}

fn record(p: &Probe, s: &Slot, result: Result<u64, Reason>) {
    let r = Ordering::Relaxed;
    let duration = p.start.elapsed().as_millis() as u64;
    let mut h = Health {
        up: s.up.load(r) != 0,
        rise: s.rise.load(r),
        fall: s.fall.load(r),
    };
    let flip = h.record(result.is_ok(), p.check.rise, p.check.fall);

    let seq = s.write_begin();
    s.checks.fetch_add(1, r);
    match result {
        Ok(delay) => {
            let d = delay.min(u64::from(u32::MAX - 1)) as u32;
            s.last_delay.store(d, r);
            let min = s.min_delay.load(r);
            if min == u32::MAX || d < min {
                s.min_delay.store(d, r);
            }
            let max = s.max_delay.load(r);
            if max == u32::MAX || d > max {
                s.max_delay.store(d, r);
            }
            s.delay_sum.fetch_add(u64::from(d), r);
            s.delay_count.fetch_add(1, r);
        }
        Err(reason) => {
            s.fails_total.fetch_add(1, r);
            s.failures[reason as usize].fetch_add(1, r);
            s.last_reason.store(reason as u32 + 1, r);
        }
    }
    if let Some(b) = s.duration_buckets.get(duration_bucket(duration)) {
        b.fetch_add(1, r);
    }
    s.duration_sum.fetch_add(duration, r);
    s.rise.store(h.rise, r);
    s.fall.store(h.fall, r);
    if let Some(t) = flip {
        let now = unix_ms();
        s.up.store(h.up as u32, Ordering::Release);
        s.last_change.store(now, r);
        s.down_since.store(if h.up { 0 } else { now }, r);
        log_flip(p, t, &h, result.err());
    }
    s.write_end(seq);
    debug(p, if result.is_ok() { "success" } else { "failure" });
}

fn log_flip(p: &Probe, t: Transition, h: &Health, reason: Option<Reason>) {
    // SAFETY: names live in the cycle pool.
    let (ups, name) = unsafe {
        (
            crate::ffi::str_bytes(&p.upstream),
            crate::ffi::str_bytes(&p.name),
        )
    };
    let (ups, name) = (String::from_utf8_lossy(ups), String::from_utf8_lossy(name));
    match t {
        Transition::WentDown => crate::ffi::log(
            NGX_LOG_WARN,
            p.log,
            format_args!(
                "upstream {} peer {} is down after {} failures: {} ({} {} check)",
                ups,
                name,
                h.fall,
                reason.map_or("failed", Reason::describe),
                p.proto.as_str(),
                p.check.check_type.as_str()
            ),
        ),
        Transition::WentUp => crate::ffi::log(
            NGX_LOG_NOTICE,
            p.log,
            format_args!(
                "upstream {} peer {} is up after {} successes ({} {} check)",
                ups,
                name,
                h.rise,
                p.proto.as_str(),
                p.check.check_type.as_str()
            ),
        ),
    }
}

/// Local errors are logged at most once per 10 s per worker.
static LAST_LOCAL_LOG: AtomicU64 = AtomicU64::new(0);
static SUPPRESSED: AtomicU64 = AtomicU64::new(0);

fn local_error(p: &Probe, cause: Local) {
    let now = now_msec();
    let last = LAST_LOCAL_LOG.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last) < 10_000 {
        SUPPRESSED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    LAST_LOCAL_LOG.store(now.max(1), Ordering::Relaxed);
    let skipped = SUPPRESSED.swap(0, Ordering::Relaxed);
    let why = match cause {
        Local::Errno(err) => format!(
            "local error {} ({})",
            err,
            std::io::Error::from_raw_os_error(err)
        ),
        Local::NoConnection => String::from(
            "local error: no free nginx connection (worker_connections are not enough)",
        ),
    };
    // SAFETY: names live in the cycle pool.
    let name = unsafe { crate::ffi::str_bytes(&p.name) };
    crate::ffi::log(
        NGX_LOG_WARN,
        p.log,
        format_args!(
            "health check of peer {} not run: {}; counters unchanged ({} similar messages suppressed)",
            String::from_utf8_lossy(name),
            why,
            skipped
        ),
    );
}

fn debug(p: &Probe, what: &str) {
    // SAFETY: a valid log.
    if unsafe { (*p.log).log_level } < NGX_LOG_DEBUG as usize {
        return;
    }
    // SAFETY: names live in the cycle pool.
    let name = unsafe { crate::ffi::str_bytes(&p.name) };
    ngx::ngx_log_error!(
        NGX_LOG_DEBUG,
        p.log,
        "healthcheck {} peer {} #{}: round {} after {} ms",
        p.proto.as_str(),
        String::from_utf8_lossy(name),
        p.index,
        what,
        p.start.elapsed().as_millis()
    );
}

/// Move the round's connection to `kept`: an idle connection watched for
/// data, FIN, RST and keepalive timeouts.
fn keep(p: &mut Probe) {
    let c = mem::replace(&mut p.pc.connection, ptr::null_mut());
    if c.is_null() {
        return;
    }
    let data: *mut Probe = p;
    // SAFETY: live connection owned by this probe.
    unsafe {
        for ev in [(*c).read, (*c).write] {
            if (*ev).timer_set() != 0 {
                ngx_del_timer(ev);
            }
            (*ev).handler = Some(ngx_healthcheck_idle_handler);
        }
        (*c).data = data.cast();
        if let Some(ka) = p.check.keepalive {
            set_keepalive(c, ka.idle_s, ka.intvl_s, ka.cnt);
        }
    }
    p.kept = Some(Kept {
        c,
        opened: p.start_msec,
        served: 1,
        idle_bytes: 0,
    });
    // Data that arrived while the round ran was seen by the round's
    // handler (edge-triggered events fire once): read it now.
    drain_idle(p, c);
}

/// # Safety
/// `c` is a live TCP connection.
unsafe fn set_keepalive(c: *mut ngx_connection_t, idle: u32, intvl: u32, cnt: u32) {
    let set = |level: u32, name: u32, v: c_int| {
        // SAFETY: live fd, an int option value.
        unsafe {
            setsockopt(
                (*c).fd,
                level as c_int,
                name as c_int,
                ptr::addr_of!(v).cast(),
                size_of::<c_int>() as socklen_t,
            )
        }
    };
    set(SOL_SOCKET, SO_KEEPALIVE, 1);
    set(IPPROTO_TCP, TCP_KEEPIDLE, idle as c_int);
    set(IPPROTO_TCP, TCP_KEEPINTVL, intvl as c_int);
    set(IPPROTO_TCP, TCP_KEEPCNT, cnt as c_int);
}

/// Close the kept connection, if any, with RST.
fn close_kept(p: &mut Probe) {
    if let Some(k) = p.kept.take() {
        rst_close(k.c);
    }
}

unsafe extern "C" fn ngx_healthcheck_idle_handler(ev: *mut ngx_event_t) {
    if crate::refresh_if_reloaded() {
        return;
    }
    // SAFETY: as in ngx_healthcheck_conn_handler.
    let (c, p, write) = unsafe {
        let c = (*ev).data.cast::<ngx_connection_t>();
        (c, (*c).data.cast::<Probe>(), (*ev).write() != 0)
    };
    // SAFETY: the probe outlives its kept connection.
    let Some(p) = (unsafe { p.as_mut() }) else {
        return;
    };
    // SAFETY: live connection.
    if unsafe { (*c).close() } != 0 {
        // Shutdown: close at once (SPEC §3).
        return close_kept(p);
    }
    if write {
        return;
    }
    let log = p.log;
    crate::ffi::guard(log, "kept check connection", (), || drain_idle(p, c));
}

/// Read and discard what arrived on an idle kept connection; close it on
/// FIN, RST, keepalive timeout or too much data.
fn drain_idle(p: &mut Probe, c: *mut ngx_connection_t) {
    if p.kept.as_ref().map(|k| k.c) != Some(c) {
        return;
    }
    let mut buf = [0u8; 1024];
    loop {
        // SAFETY: live fd and buffer.
        let n = unsafe { recv((*c).fd, buf.as_mut_ptr().cast::<c_void>(), buf.len(), 0) };
        if n > 0 {
            let too_much = p.kept.as_mut().is_some_and(|k| {
                k.idle_bytes += n as usize;
                k.idle_bytes > IDLE_DATA_MAX
            });
            if too_much {
                return close_kept(p);
            }
            continue;
        }
        if n < 0 {
            match ngx_socket_errno() as u32 {
                EAGAIN => return,
                EINTR => continue,
                _ => {}
            }
        }
        // FIN, RST or keepalive timeout: the next round re-handshakes.
        return close_kept(p);
    }
}

fn start_udp(p: &mut Probe) {
    if connect(p, SOCK_DGRAM as c_int).is_none() {
        return;
    }
    let c = p.pc.connection;
    p.phase = Phase::Sending;
    // SAFETY: the connection's own read event; one budget for the round.
    unsafe { ngx_add_timer((*c).read, p.check.timeout_ms as ngx_msec_t) };
    udp_send(p, c);
}

fn udp_send(p: &mut Probe, c: *mut ngx_connection_t) {
    for _ in 0..SEND_RETRIES {
        // SAFETY: live fd, static payload.
        let n = unsafe { send((*c).fd, UDP_PAYLOAD.as_ptr().cast(), UDP_PAYLOAD.len(), 0) };
        if n >= 0 {
            p.phase = Phase::Waiting;
            return udp_receive(p, c);
        }
        let err = ngx_socket_errno();
        match err as u32 {
            EAGAIN | EINTR => continue,
            ECONNREFUSED => return finish(p, Outcome::Down(Reason::Unreachable)),
            // Any other error is no confirmed failure.
            _ => return udp_up(p),
        }
    }
    // Still EAGAIN: the write event retries, within the same deadline.
}

fn udp_receive(p: &mut Probe, c: *mut ngx_connection_t) {
    let mut buf = [0u8; 64];
    loop {
        // SAFETY: live fd and buffer.
        let n = unsafe { recv((*c).fd, buf.as_mut_ptr().cast::<c_void>(), buf.len(), 0) };
        if n >= 0 {
            return udp_up(p);
        }
        let err = ngx_socket_errno();
        match err as u32 {
            EAGAIN => return,
            EINTR => continue,
            ECONNREFUSED => return finish(p, Outcome::Down(Reason::Unreachable)),
            _ => return udp_up(p),
        }
    }
}

fn udp_up(p: &mut Probe) {
    let delay_ms = p.start.elapsed().as_millis() as u64;
    finish(p, Outcome::Up { delay_ms });
}

/// Address family of a peer address.
fn family(addr: &[u8]) -> u32 {
    if addr.len() < size_of::<ngx::ffi::sockaddr>() {
        return 0;
    }
    // SAFETY: the buffer holds at least a sockaddr header.
    u32::from(unsafe { (*addr.as_ptr().cast::<ngx::ffi::sockaddr>()).sa_family })
}

/// Most spare sockets a worker keeps, and at most this share of its
/// `worker_connections` (1/SPARE_SHARE).
const SPARES_MAX: usize = 256;
const SPARE_SHARE: usize = 8;

/// TCP sockets of finished rounds, disconnected in place and kept for later
/// rounds of this worker, any peer of the same address family.
///
/// `connect(AF_UNSPEC)` on a TCP socket resets an open connection (RST, no
/// TIME_WAIT, like `SO_LINGER` 0), aborts a pending connect, releases the
/// local port and leaves the socket ready for another `connect()`; the
/// socket stays non-blocking and registered with epoll. A round on a spare
/// is connect, peek and disconnect: no socket(), ioctl(), epoll_ctl(),
/// setsockopt() or close(), about a fifth of a round's CPU on loopback
/// (`scripts/bench-overhead`).
///
/// A spare keeps its nginx connection, marked idle and reusable: a worker
/// that runs out of `worker_connections` takes spares back (nginx calls the
/// handler with `close` set), as does shutdown. The pool holds at most
/// `SPARES_MAX` sockets and 1/`SPARE_SHARE` of `worker_connections`; a
/// worker keeps about as many as it has rounds in flight at once.
struct Spares(core::cell::UnsafeCell<Vec<(u32, *mut ngx_connection_t)>>);
// SAFETY: nginx runs module code on one thread per process.
unsafe impl Sync for Spares {}
static SPARES: Spares = Spares(core::cell::UnsafeCell::new(Vec::new()));

impl Spares {
    /// Run `f` on the list. No nginx call may happen inside: nginx may call
    /// back into `forget` (a spare's handler).
    fn with<R>(&self, f: impl FnOnce(&mut Vec<(u32, *mut ngx_connection_t)>) -> R) -> R {
        // SAFETY: single-threaded, and `f` never re-enters (see above).
        f(unsafe { &mut *self.0.get() })
    }

    /// A spare of this family, with clean events, ready for connect().
    fn take(&self, family: u32) -> Option<*mut ngx_connection_t> {
        let c = self.with(|v| {
            let i = v.iter().rposition(|&(f, _)| f == family)?;
            Some(v.swap_remove(i).1)
        })?;
        // SAFETY: a live spare connection, now out of the pool.
        unsafe {
            ngx_reusable_connection(c, 0);
            for ev in [(*c).read, (*c).write] {
                clear_event(ev);
            }
        }
        Some(c)
    }

    /// Disconnect the round's socket and keep it; `false` (the socket
    /// untouched) when it must be closed instead.
    fn put(&self, family: u32, c: *mut ngx_connection_t) -> bool {
        if family != AF_INET && family != AF_INET6 {
            return false;
        }
        // SAFETY: the running cycle.
        let Some(cycle) = (unsafe { (*ptr::addr_of!(ngx::ffi::ngx_cycle)).as_ref() }) else {
            return false;
        };
        let room = SPARES_MAX.min(cycle.connection_n / SPARE_SHARE);
        // SAFETY: a live connection.
        if exiting() || unsafe { (*c).close() } != 0 || self.with(|v| v.len()) >= room {
            return false;
        }
        let unspec = ngx::ffi::sockaddr {
            sa_family: 0, // AF_UNSPEC
            sa_data: [0; 14],
        };
        // SAFETY: a live socket and a sockaddr of the given size.
        let rc = unsafe {
            sys_connect(
                (*c).fd,
                ptr::addr_of!(unspec).cast(),
                size_of::<ngx::ffi::sockaddr>() as socklen_t,
            )
        };
        if rc != 0 {
            return false;
        }
        // SAFETY: a live connection, now owned by the pool.
        unsafe {
            for ev in [(*c).read, (*c).write] {
                clear_event(ev);
                (*ev).handler = Some(ngx_healthcheck_spare_handler);
            }
            (*c).data = ptr::null_mut();
            (*c).set_idle(1);
            ngx_reusable_connection(c, 1);
        }
        self.with(|v| v.push((family, c)));
        true
    }

    /// Drop `c` from the pool (it is being closed).
    fn forget(&self, c: *mut ngx_connection_t) {
        self.with(|v| v.retain(|&(_, s)| s != c));
    }

    /// Close every spare (process exit, reload).
    fn close_all(&self) {
        let all = self.with(mem::take);
        for (_, c) in all {
            // SAFETY: live spares, out of the pool.
            unsafe { ngx_close_connection(c) };
        }
    }
}

/// No timer, not posted, no stale flags: a spare starts like a new
/// connection's event (a stale `timedout` would end the next round early).
///
/// # Safety
/// `ev` is a live event of a connection of the pool or just taken from it.
unsafe fn clear_event(ev: *mut ngx_event_t) {
    // SAFETY: per the contract.
    unsafe {
        if (*ev).timer_set() != 0 {
            ngx_del_timer(ev);
        }
        if (*ev).posted() != 0 {
            ngx_delete_posted_event(ev);
        }
        (*ev).set_timedout(0);
        (*ev).set_ready(0);
        (*ev).set_eof(0);
        (*ev).set_error(0);
        (*ev).set_pending_eof(0);
    }
}

/// Events of a spare: the disconnect's own HUP (nothing to do), or nginx
/// taking the connection back (`close`: shutdown, or out of
/// `worker_connections`).
unsafe extern "C" fn ngx_healthcheck_spare_handler(ev: *mut ngx_event_t) {
    // SAFETY: connection events carry their connection in `data`.
    let c = unsafe { (*ev).data.cast::<ngx_connection_t>() };
    // SAFETY: a live spare connection.
    let (closing, log) = unsafe { ((*c).close() != 0, (*c).log) };
    if closing || exiting() {
        crate::ffi::guard(log, "spare check socket", (), || SPARES.forget(c));
        // SAFETY: out of the pool; nothing else refers to it.
        unsafe { ngx_close_connection(c) };
    }
}
