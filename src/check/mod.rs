//! The probe engine: one timer per checked peer per worker; rounds run on
//! the nginx event loop with non-blocking sockets (README: How checks work).
//!
//! - `mod.rs` (here): the probe, its schedule and lease, the event
//!   dispatch, and the interface a probe kind implements;
//! - `conn.rs`: the connection newtype (all I/O through `c->recv` and
//!   `c->send`); `connect.rs`: opening and closing a round's connection;
//!   `spares.rs`: sockets kept for later rounds; `kept.rs`: connections
//!   kept between rounds (`reuse` / `keepalive`);
//! - `round.rs`: the end of a round: recording, logging, rescheduling;
//! - `tcp.rs`, `udp.rs`: the probe kinds.
//!
//! A round: the timer looks at the peer's schedule in the shared slot;
//! when the round is due and this worker wins the lease it takes a kept
//! connection or opens one (connect timeout on the write event), lets the
//! transport finish its handshake (plain: none), then hands every event to
//! the probe kind until it says `Done`. Timers that may fire a little late
//! (the look at the schedule, the end of a settle window) are aligned to a
//! grid of `interval / 50` (of the shorter of `interval` and
//! `down_interval`), at most 20 ms, so that the rounds of many peers share
//! a worker wake-up (`healthcheck_core::timing`); a round thus starts up to
//! one grid step after it is due (the fixed-rate schedule keeps its lattice
//! point, so nothing drifts; `healthcheck_core::schedule`). Connect
//! timeouts and UDP deadlines are not aligned. A round ends with RST, so
//! checks leave no TIME_WAIT.

mod conn;
mod connect;
mod http;
mod kept;
mod round;
mod spares;
mod tcp;
mod tls;
mod udp;

use core::ffi::c_void;
use core::mem::{self, offset_of, size_of};
use core::ptr::NonNull;
use core::sync::atomic::Ordering;
use std::rc::Rc;
use std::time::Instant;

use healthcheck_core::conf::{CheckConf, CheckType, Reuse};
use healthcheck_core::http::request::{build_request, host_of_server};
use healthcheck_core::schedule::{self, Decision};
use healthcheck_core::timing;
use healthcheck_core::zone::Slot;
use ngx::ffi::{
    ngx_add_timer, ngx_connection_t, ngx_del_timer, ngx_event_t, ngx_log_t, ngx_peer_connection_t,
    ngx_random, ngx_str_t,
};

use self::conn::Conn;
use self::connect::{Expired, Opened};
use self::round::{Outcome, Step};
use self::spares::SPARES;
use crate::ffi::{exiting, guard, monotonic_ms, str_bytes};
use crate::shm::Zone;
use crate::worker::{Context, Target, UpstreamCheck};
use healthcheck_core::status::Group;

/// What a probe kind does with the events of its round's connection.
/// Each handler returns whether the round goes on or how it ended; the
/// engine owns the connection, its timers and the recording.
trait ProbeKind {
    /// The connection is established (and its transport ready).
    fn on_connected(&mut self, cx: &Cx) -> Step;
    /// The round runs on a kept connection that was alive.
    fn on_reused(&mut self, cx: &Cx) -> Step {
        self.on_connected(cx)
    }
    fn on_readable(&mut self, cx: &Cx) -> Step;
    fn on_writable(&mut self, cx: &Cx) -> Step;
    /// A timer the kind armed on the connection fired.
    fn on_timeout(&mut self, cx: &Cx) -> Step;
    /// Whether a successful round's connection may serve later rounds.
    fn may_keep(&self) -> bool {
        false
    }
    /// The last HTTP status code the kind saw, for the status page.
    fn http_status(&self) -> Option<u16> {
        None
    }
    /// Whether a kept connection with unread data may serve a round: for a
    /// plain TCP check data means alive; for a request/response check it
    /// is a leftover that must never reach the next round's verdict.
    fn reuse_with_pending_data(&self) -> bool {
        true
    }
}

/// The probe kinds, dispatched by `match` (no boxing).
enum Kind {
    Tcp(tcp::Tcp),
    Udp(udp::Udp),
    Http(http::Http),
}

impl Kind {
    /// The probe kind of `t`'s check; `keep` says whether this probe keeps
    /// its connections (the request says so).
    fn new(t: &Target, keep: bool) -> Kind {
        let check = &t.check;
        let matcher = check.matcher.clone();
        match check.conf.check_type {
            // type=tls: the handshake is the transport's; then as tcp.
            CheckType::Tcp | CheckType::Tls => Kind::Tcp(tcp::Tcp::new(matcher, check.buffer_size)),
            CheckType::Udp => Kind::Udp(udp::Udp::new(matcher)),
            CheckType::Http | CheckType::Https => {
                let Some(h) = check.http.as_ref() else {
                    return Kind::Tcp(tcp::Tcp::default());
                };
                let request: Rc<[u8]> = match &h.send {
                    Some(raw) => raw.as_slice().into(),
                    None => {
                        let (host, _) = host_of_server(t.peer.server_bytes());
                        let port = match check.conf.port {
                            0 => t.peer.port(),
                            p => p,
                        };
                        let default_port = match check.conf.check_type {
                            CheckType::Https => 443,
                            _ => 80,
                        };
                        build_request(&h.request, host, port, default_port, keep).into()
                    }
                };
                Kind::Http(http::Http::new(
                    request,
                    h.expect_alive,
                    check.buffer_size,
                    matcher,
                ))
            }
        }
    }

    fn datagram(&self) -> bool {
        matches!(self, Kind::Udp(_))
    }
}

/// Every call goes to the variant's own implementation.
macro_rules! dispatch {
    ($self:ident, $k:ident => $call:expr) => {
        match $self {
            Kind::Tcp($k) => $call,
            Kind::Udp($k) => $call,
            Kind::Http($k) => $call,
        }
    };
}

impl ProbeKind for Kind {
    fn on_connected(&mut self, cx: &Cx) -> Step {
        dispatch!(self, k => k.on_connected(cx))
    }
    fn on_reused(&mut self, cx: &Cx) -> Step {
        dispatch!(self, k => k.on_reused(cx))
    }
    fn on_readable(&mut self, cx: &Cx) -> Step {
        dispatch!(self, k => k.on_readable(cx))
    }
    fn on_writable(&mut self, cx: &Cx) -> Step {
        dispatch!(self, k => k.on_writable(cx))
    }
    fn on_timeout(&mut self, cx: &Cx) -> Step {
        dispatch!(self, k => k.on_timeout(cx))
    }
    fn may_keep(&self) -> bool {
        dispatch!(self, k => k.may_keep())
    }
    fn http_status(&self) -> Option<u16> {
        dispatch!(self, k => k.http_status())
    }
    fn reuse_with_pending_data(&self) -> bool {
        dispatch!(self, k => k.reuse_with_pending_data())
    }
}

/// What a probe kind may use during a round.
struct Cx<'a> {
    conn: Conn,
    conf: &'a CheckConf,
    round: &'a RoundClock,
    /// A good round's connection will be kept (if the kind allows it).
    keep: bool,
}

/// When the current round was due and started.
struct RoundClock {
    /// The round's lattice point (nginx ms).
    lattice: u64,
    /// When it was due: the lattice point plus its jitter delay.
    due: u64,
    /// Start on nginx's clock (scheduling).
    start_msec: u64,
    /// Start on a fresh monotonic clock (delays and durations).
    start: Instant,
}

impl RoundClock {
    fn elapsed_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
}

/// Where the round is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Idle,
    Connecting,
    /// The TLS handshake runs (nginx's SSL layer has the events).
    Handshaking,
    /// Connected: events go to the probe kind.
    Active,
}

/// The peer a probe checks.
struct Peer {
    /// The address to connect to (the check port when `port=` is set).
    addr: Box<[u8]>,
    /// Points into `name_buf` (the probe owns its copy: a resolved peer's
    /// name lives in nginx's zone only while nginx has the address).
    name: ngx_str_t,
    name_buf: Box<[u8]>,
    upstream: ngx_str_t,
    proto: Group,
    /// Slot index in the zone.
    index: u32,
    /// The slot's identity when the probe was made: a slot of the room for
    /// resolved addresses that another address took is not this probe's.
    identity: u64,
    /// A resolved address's probe (its slot is in the room).
    resolved: bool,
    /// This worker owns the peer's rounds.
    owner: bool,
    /// This worker's slot.
    worker: u32,
}

impl Peer {
    fn family(&self) -> i32 {
        if self.addr.len() < size_of::<libc::sockaddr>() {
            return 0;
        }
        // SAFETY: the buffer holds at least a sockaddr header; read
        // unaligned (a boxed byte slice).
        let sa = unsafe { self.addr.as_ptr().cast::<libc::sockaddr>().read_unaligned() };
        i32::from(sa.sa_family)
    }

    fn name(&self) -> String {
        String::from_utf8_lossy(&self.name_buf).into_owned()
    }

    fn upstream_name(&self) -> String {
        // SAFETY: as above.
        String::from_utf8_lossy(unsafe { str_bytes(&self.upstream) }).into_owned()
    }
}

/// One peer's probe in this worker. nginx holds pointers to it (its timer's
/// and connections' `data`): created with `Box::into_raw`, used only
/// through that pointer, freed by its `Prober`.
#[repr(C)]
pub struct Probe {
    /// Must stay first: the timer's `data` points here, and nginx's debug
    /// log reads it as a connection whose `fd` (4th word) is -1.
    ident: [usize; 4],
    ev: ngx_event_t,
    pc: ngx_peer_connection_t,
    peer: Peer,
    /// The upstream's check settings, shared by its probes.
    check: Rc<UpstreamCheck>,
    zone: Zone,
    /// The cycle's log, for the module's own messages.
    log: *mut ngx_log_t,
    /// A quieter copy for the probe connections (see `process`).
    conn_log: *mut ngx_log_t,
    phase: Phase,
    /// The TLS transport (`type=https`, `type=tls`); plain without.
    tls: Option<tls::Tls>,
    kind: Kind,
    /// The round's connection.
    conn: Option<Conn>,
    /// Keep the connection of a successful round (the owner, with reuse or
    /// keepalive).
    keep: bool,
    /// The idle connection kept between rounds.
    kept: Option<kept::Kept>,
    /// The round runs on the kept connection; what it had served.
    reused: Option<kept::Served>,
    round: RoundClock,
}

// nginx's debug log reads a timer's `data` as an `ngx_connection_t` and
// prints its `fd`: the probe's first words must look like one whose fd is
// -1 (the convention of nginx's resolver and event timers).
const _: () = {
    assert!(offset_of!(Probe, ident) == 0);
    assert!(offset_of!(ngx_connection_t, fd) == 3 * size_of::<usize>());
    assert!(size_of::<[usize; 4]>() >= offset_of!(ngx_connection_t, fd) + size_of::<i32>());
};

impl Probe {
    fn new(t: &Target, proto: Group, zone: Zone, (worker, workers): (u32, u32)) -> Probe {
        let owner = schedule::owner(t.index, workers) == worker;
        let conf = &t.check.conf;
        let keep = conf.keeps_connection() && owner;
        let name_buf: Box<[u8]> = t.peer.name_bytes().into();
        let identity = zone
            .slot(t.index as usize)
            .map_or(0, |s| s.identity.load(Ordering::Acquire));
        Probe {
            ident: [0, 0, 0, usize::MAX],
            // SAFETY: all-zero is nginx's initial state for these structs.
            ev: unsafe { mem::zeroed() },
            // SAFETY: as above.
            pc: unsafe { mem::zeroed() },
            peer: Peer {
                addr: check_address(t),
                name: ngx_str_t {
                    len: name_buf.len(),
                    data: name_buf.as_ptr().cast_mut(),
                },
                name_buf,
                upstream: t.upstream,
                proto,
                index: t.index,
                identity,
                resolved: t.index as usize >= zone.room_start(),
                owner,
                worker,
            },
            check: Rc::clone(&t.check),
            zone,
            log: core::ptr::null_mut(),
            conn_log: core::ptr::null_mut(),
            phase: Phase::Idle,
            tls: t.check.tls.as_ref().map(|c| {
                let host = tls_host(t);
                let name = c.name.as_deref();
                tls::Tls::new(
                    c.ssl,
                    healthcheck_core::tls::sni(c.server_name, name, &host),
                    c.verify
                        .then(|| healthcheck_core::tls::verify_name(name, &host)),
                    c.session_reuse,
                )
            }),
            kind: Kind::new(t, keep),
            conn: None,
            keep,
            kept: None,
            reused: None,
            round: RoundClock {
                lattice: 0,
                due: 0,
                start_msec: 0,
                start: Instant::now(),
            },
        }
    }

    fn as_data(&mut self) -> *mut c_void {
        (self as *mut Probe).cast()
    }

    /// The peer's slot, while it is still this peer's (a freed slot has
    /// identity 0: no probe's).
    fn slot(&self) -> Option<&Slot> {
        self.zone.slot(self.peer.index as usize).filter(|s| {
            self.peer.identity != 0 && s.identity.load(Ordering::Acquire) == self.peer.identity
        })
    }

    /// `check_keepalive_requests` when `reuse=on`.
    fn max_rounds(&self) -> Option<u32> {
        (self.check.conf.reuse == Reuse::On).then_some(self.check.keepalive_requests)
    }

    /// Make `c` the round's connection: its events come to this probe.
    fn attach(&mut self, c: Conn) {
        c.attach(self.as_data(), Some(ngx_healthcheck_conn_handler));
        self.conn = Some(c);
    }

    /// The interval in force for the peer as its slot shows it now
    /// (`down_interval` while it is down).
    fn interval_now(&self, s: &Slot) -> u64 {
        self.check
            .conf
            .interval_for(s.up.load(Ordering::Acquire) != 0)
    }

    /// The seed of the peer's jitter delays, the same in every worker.
    fn jitter_seed(&self, s: &Slot) -> u64 {
        schedule::jitter_seed(s.identity.load(Ordering::Relaxed), self.peer.index)
    }

    /// Look at the schedule again at `at` (aligned; at the earliest in 1 ms).
    fn arm(&mut self, at: u64) {
        let step = timing::grid_step(self.check.conf.shortest_interval_ms());
        let delay = timing::aligned_delay(monotonic_ms(), at, step);
        // SAFETY: the probe's own timer event.
        unsafe { ngx_add_timer(&mut self.ev, delay as ngx::ffi::ngx_msec_t) };
    }

    /// Run `f` on the probe kind with the round's context; `None` without a
    /// connection.
    fn with_kind(&mut self, f: impl FnOnce(&mut Kind, &Cx) -> Step) -> Option<Step> {
        let cx = Cx {
            conn: self.conn?,
            conf: &self.check.conf,
            round: &self.round,
            keep: self.keep,
        };
        Some(f(&mut self.kind, &cx))
    }
}

/// A copy of the peer's address, with the check port when `port=` is set.
fn check_address(t: &Target) -> Box<[u8]> {
    let len = t.peer.socklen as usize;
    // SAFETY: rr peers hold a valid sockaddr of `socklen` bytes.
    let mut addr: Box<[u8]> =
        unsafe { core::slice::from_raw_parts(t.peer.sockaddr.cast::<u8>(), len) }.into();
    let port = t.check.conf.port;
    if port != 0 {
        let be = port.to_be_bytes();
        // sin_port and sin6_port both sit right after the 2-byte family.
        let family = if len >= size_of::<libc::sockaddr>() {
            // SAFETY: at least a sockaddr header; read unaligned.
            i32::from(unsafe { addr.as_ptr().cast::<libc::sockaddr>().read_unaligned() }.sa_family)
        } else {
            0
        };
        let fits = match family {
            libc::AF_INET => len >= size_of::<libc::sockaddr_in>(),
            libc::AF_INET6 => len >= size_of::<libc::sockaddr_in6>(),
            _ => false,
        };
        if fits {
            let at = offset_of!(libc::sockaddr_in, sin_port);
            debug_assert_eq!(at, offset_of!(libc::sockaddr_in6, sin6_port));
            addr[at..at + 2].copy_from_slice(&be);
        }
    }
    addr
}

/// Probes of one worker and one context.
pub struct Prober {
    probes: Vec<NonNull<Probe>>,
    /// The probes of resolved addresses, with their timer (contexts with
    /// `resolve` servers only).
    watch: Option<NonNull<Watch>>,
}

/// Make a probe for `t` and arm its first look at the schedule.
fn spawn(
    t: &Target,
    proto: Group,
    zone: Zone,
    slot: (u32, u32),
    log: *mut ngx_log_t,
    conn_log: *mut ngx_log_t,
) -> NonNull<Probe> {
    let mut probe = Probe::new(t, proto, zone, slot);
    probe.log = log;
    probe.conn_log = conn_log;
    let p = NonNull::from(Box::leak(Box::new(probe)));
    // SAFETY: `p` is the only reference to the new probe.
    unsafe {
        let raw = p.as_ptr();
        (*raw).ev.data = raw.cast();
        (*raw).ev.handler = Some(ngx_healthcheck_timer_handler);
        (*raw).ev.log = log;
        (*raw).ev.set_cancelable(1);
        // First decision almost at once: it draws the random offset.
        ngx_add_timer(&mut (*raw).ev, 1);
    }
    p
}

/// Stop a probe: its timer, its round's connection, its kept one.
fn halt(p: NonNull<Probe>) {
    // SAFETY: a live probe; no handler of it is running (callers run from
    // another event or process exit).
    let p = unsafe { &mut *p.as_ptr() };
    if p.ev.timer_set() != 0 {
        // SAFETY: the timer belongs to this probe.
        unsafe { ngx_del_timer(&mut p.ev) };
    }
    if p.conn.is_some() {
        // A round in flight: its lease goes with it.
        if let Some(s) = p.slot() {
            s.lease.store(0, Ordering::Release);
        }
    }
    connect::close(p);
    kept::close_kept(p);
}

/// How often a worker looks whether nginx changed its resolved peers
/// (one atomic load per resolve upstream), ms: a quarter of the shortest
/// interval of those upstreams, within these bounds. With a new address's
/// first round in the first half of its interval, it is checked within
/// one interval of nginx adding it.
const WATCH_MS: (u64, u64) = (20, 200);

fn watch_ms(ctx: &Context) -> u64 {
    ctx.resolve
        .iter()
        .map(|r| r.check.conf.shortest_interval_ms() / 4)
        .min()
        .unwrap_or(WATCH_MS.1)
        .clamp(WATCH_MS.0, WATCH_MS.1)
}
/// The views are rebuilt this often even without a change (slots an
/// interrupted rebuild left are freed then), ms.
const WATCH_FORCE_MS: u64 = 5000;

/// The probes of a context's resolved addresses, kept in step with the
/// worker's view of them from a timer. nginx holds a pointer to it (its
/// timer's `data`): made with `Box::into_raw`, freed by its `Prober`.
#[repr(C)]
struct Watch {
    /// As `Probe::ident`: nginx's debug log reads the timer's `data`.
    ident: [usize; 4],
    ev: ngx_event_t,
    proto: Group,
    zone: Zone,
    slot: (u32, u32),
    log: *mut ngx_log_t,
    conn_log: *mut ngx_log_t,
    /// `(slot index, identity) -> probe`.
    probes: std::collections::HashMap<(u32, u64), NonNull<Probe>>,
    /// The view's version the probes were last matched with.
    version: u64,
    ticks: u32,
    /// [`watch_ms`].
    period: u64,
}

impl Watch {
    /// Match the probes with the view: a probe for every resolved address
    /// with a slot, none for addresses nginx dropped.
    fn reconcile(&mut self, ctx: &Context) {
        let Ok(view) = ctx.view.try_borrow() else {
            return;
        };
        if view.version == self.version {
            return;
        }
        let want: std::collections::HashMap<(u32, u64), &Target> = view
            .targets
            .iter()
            .flatten()
            .map(|d| ((d.target.index, d.identity), &d.target))
            .collect();
        let gone: Vec<(u32, u64)> = self
            .probes
            .keys()
            .filter(|k| !want.contains_key(k))
            .copied()
            .collect();
        for k in gone {
            if let Some(p) = self.probes.remove(&k) {
                halt(p);
                // SAFETY: made by `spawn`, stopped above; nothing in nginx
                // points to it any more.
                drop(unsafe { Box::from_raw(p.as_ptr()) });
            }
        }
        for (k, t) in want {
            // The view may be older than the slot: the slot must still be
            // this address's (else the next rebuild sorts it out).
            let current = self
                .zone
                .slot(k.0 as usize)
                .is_some_and(|s| s.identity.load(Ordering::Acquire) == k.1);
            if current && !self.probes.contains_key(&k) {
                let p = spawn(t, self.proto, self.zone, self.slot, self.log, self.conn_log);
                self.probes.insert(k, p);
            }
        }
        self.version = view.version;
    }
}

unsafe extern "C" fn ngx_healthcheck_watch_handler(ev: *mut ngx_event_t) {
    // SAFETY: `data` is the watch owning this event (set in `start`).
    let (w, log) = unsafe { ((*ev).data.cast::<Watch>(), (*ev).log) };
    // SAFETY: the watch outlives its timer.
    let Some(w) = (unsafe { w.as_mut() }) else {
        return;
    };
    if exiting() {
        return;
    }
    guard(log, "resolved peers", (), || {
        w.ticks = w.ticks.wrapping_add(1);
        // About every 5 s.
        let force = u64::from(w.ticks) % (WATCH_FORCE_MS / w.period.max(1)).max(1) == 0;
        crate::process::with(|worker| {
            let ctx = worker.context(w.proto);
            ctx.refresh_all(force);
            w.reconcile(ctx);
        });
    });
    // Outside the guard: a bug in one look must not end the watching.
    // SAFETY: the watch's own timer.
    unsafe { ngx_add_timer(&mut w.ev, w.period as ngx::ffi::ngx_msec_t) };
}

impl Prober {
    /// Create the probes of a context and arm their timers.
    ///
    /// # Safety
    /// Worker process, after the configuration is complete; `log` and
    /// `conn_log` outlive the prober.
    pub unsafe fn start(
        proto: Group,
        ctx: &Context,
        slot: (u32, u32),
        log: *mut ngx_log_t,
        conn_log: *mut ngx_log_t,
    ) -> Self {
        let Some(zone) = ctx.zone else {
            return Self {
                probes: Vec::new(),
                watch: None,
            };
        };
        let probes = ctx
            .targets
            .iter()
            .map(|t| spawn(t, proto, zone, slot, log, conn_log))
            .collect();
        let watch = (!ctx.resolve.is_empty()).then(|| {
            let mut w = Box::new(Watch {
                ident: [0, 0, 0, usize::MAX],
                // SAFETY: all-zero is nginx's initial state for an event.
                ev: unsafe { mem::zeroed() },
                proto,
                zone,
                slot,
                log,
                conn_log,
                probes: std::collections::HashMap::new(),
                version: u64::MAX,
                ticks: 0,
                period: watch_ms(ctx),
            });
            // The addresses nginx has now (after a reload: at once).
            ctx.refresh_all(true);
            w.reconcile(ctx);
            let raw = Box::into_raw(w);
            // SAFETY: just made; nginx's timer points to it until `stop`.
            unsafe {
                (*raw).ev.data = raw.cast();
                (*raw).ev.handler = Some(ngx_healthcheck_watch_handler);
                (*raw).ev.log = log;
                (*raw).ev.set_cancelable(1);
                ngx_add_timer(&mut (*raw).ev, (*raw).period as ngx::ffi::ngx_msec_t);
                NonNull::new_unchecked(raw)
            }
        });
        Self { probes, watch }
    }

    /// Close every check connection and timer.
    pub fn stop(&mut self) {
        for &p in &self.probes {
            halt(p);
        }
        if let Some(w) = self.watch {
            // SAFETY: the live watch of this prober; its handler is not
            // running (see `halt`).
            let w = unsafe { &mut *w.as_ptr() };
            if w.ev.timer_set() != 0 {
                // SAFETY: the watch's own timer.
                unsafe { ngx_del_timer(&mut w.ev) };
            }
            for &p in w.probes.values() {
                halt(p);
            }
        }
        SPARES.close_all();
    }
}

impl Drop for Prober {
    /// Stop, then free the probes: nothing in nginx points to them then.
    fn drop(&mut self) {
        self.stop();
        for p in self.probes.drain(..) {
            // SAFETY: made by `Box::leak` in `spawn`, freed once here.
            drop(unsafe { Box::from_raw(p.as_ptr()) });
        }
        if let Some(w) = self.watch.take() {
            // SAFETY: made by `Box::into_raw` in `start`, freed once here.
            let mut w = unsafe { Box::from_raw(w.as_ptr()) };
            for (_, p) in w.probes.drain() {
                // SAFETY: made by `spawn`, stopped above.
                drop(unsafe { Box::from_raw(p.as_ptr()) });
            }
        }
    }
}

unsafe extern "C" fn ngx_healthcheck_timer_handler(ev: *mut ngx_event_t) {
    // SAFETY: `data` is the probe owning this event (set in `start`).
    let (p, log) = unsafe { ((*ev).data.cast::<Probe>(), (*ev).log) };
    // SAFETY: the probe outlives its timer.
    let Some(p) = (unsafe { p.as_mut() }) else {
        return;
    };
    if !guard(log, "check timer", false, || {
        on_timer(p);
        true
    }) {
        recover(p);
    }
}

/// A handler of this probe panicked (a bug, logged by the guard): drop the
/// round without a verdict and look at the schedule again an interval on,
/// so that the bug costs a round, not the peer's checks.
fn recover(p: &mut Probe) {
    let log = p.log;
    guard(log, "check recovery", (), || {
        connect::close(p);
        if let Some(s) = p.slot() {
            s.lease.store(0, Ordering::Release);
        }
        if p.ev.timer_set() != 0 {
            // SAFETY: the probe's own timer.
            unsafe { ngx_del_timer(&mut p.ev) };
        }
        if !exiting() {
            let interval = p
                .slot()
                .map_or(p.check.conf.interval_ms, |s| p.interval_now(s));
            p.arm(monotonic_ms() + interval);
        }
    });
}

fn on_timer(p: &mut Probe) {
    if exiting() {
        return;
    }
    let Some(s) = p.slot() else { return };
    let now = monotonic_ms();
    let interval = p.interval_now(s);
    // The slot holds the next round's lattice point (0: none yet).
    let mut lattice = s.next_due.load(Ordering::Acquire);
    if lattice == 0 {
        // Within the shorter interval, so that a peer starting down
        // (`default_down`) is not left waiting a long `down_interval`.
        // (A resolved address: in the first half, so that it is checked
        // within one interval of nginx adding it; see `watch_ms`.)
        let spread = match p.peer.resolved {
            true => (p.check.conf.shortest_interval_ms() / 2).max(1),
            false => p.check.conf.shortest_interval_ms(),
        };
        let first = schedule::first_due(now, spread, ngx_random() as u64).max(1);
        lattice = match s
            .next_due
            .compare_exchange(0, first, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => first,
            Err(other) => other,
        };
    }
    let due = schedule::due_at(lattice, p.jitter_seed(s), p.check.conf.jitter_ms);
    match schedule::decide(now, due, p.peer.owner, interval) {
        Decision::WaitUntil(at) => p.arm(at),
        Decision::Run => {
            let held = s.lease.load(Ordering::Acquire);
            let mine = schedule::lease(
                p.peer.worker,
                schedule::lease_expiry(now, p.check.conf.timeout_ms, interval),
            );
            if !schedule::lease_claimable(held, now, p.peer.worker)
                || s.lease
                    .compare_exchange(held, mine, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
            {
                // Another worker runs this round; look again an interval on.
                p.arm(now + interval);
                return;
            }
            p.round = RoundClock {
                lattice,
                due,
                start_msec: now,
                start: Instant::now(),
            };
            start_round(p, now);
        }
    }
}

fn start_round(p: &mut Probe, now: u64) {
    round::debug(p, "start");
    if let Some(t) = p.tls.as_mut() {
        t.resumed = false;
    }
    if p.kept.is_some() && kept::take_for_round(p, now) {
        p.phase = Phase::Active;
        let step = p.with_kind(|k, cx| k.on_reused(cx));
        return apply(p, step);
    }
    match connect::open(p, p.kind.datagram()) {
        Opened::Ended(outcome) => round::finish(p, outcome),
        Opened::Connected => connected(p),
        Opened::InProgress => {
            p.phase = Phase::Connecting;
            if let Some(c) = p.conn {
                c.write_timer(p.check.conf.timeout_ms);
            }
        }
    }
}

/// The socket is connected: the transport's handshake, then the kind.
fn connected(p: &mut Probe) {
    if p.tls.is_some() {
        p.phase = Phase::Handshaking;
        let h = tls::start(p);
        return after_handshake(p, h);
    }
    p.phase = Phase::Active;
    let step = p.with_kind(|k, cx| k.on_connected(cx));
    apply(p, step);
}

/// Where the TLS handshake got to: the kind runs once it is done.
fn after_handshake(p: &mut Probe, h: tls::Handshake) {
    match h {
        tls::Handshake::Pending => {}
        tls::Handshake::Failed(outcome) => round::finish(p, outcome),
        tls::Handshake::Done => {
            // nginx's SSL layer had the events during the handshake.
            if let Some(c) = p.conn {
                p.attach(c);
            }
            p.phase = Phase::Active;
            let step = p.with_kind(|k, cx| k.on_connected(cx));
            apply(p, step);
        }
    }
}

/// The host a TLS check names by default: the `Host` header of an https
/// check (`check_http_header Host`), else the `server` line's host.
fn tls_host(t: &Target) -> Vec<u8> {
    let from_header = t.check.http.as_ref().and_then(|h| {
        h.request
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(b"host"))
            .map(|(_, v)| healthcheck_core::tls::host_of_header(v).to_vec())
    });
    from_header.unwrap_or_else(|| host_of_server(t.peer.server_bytes()).0.to_vec())
}

fn apply(p: &mut Probe, step: Option<Step>) {
    match step {
        Some(Step::Pending) => {}
        Some(Step::Done(outcome)) => round::finish(p, outcome),
        // No connection: a broken invariant; end the round without a verdict.
        None => round::finish(p, Outcome::Local(round::Local::NoConnection)),
    }
}

unsafe extern "C" fn ngx_healthcheck_conn_handler(ev: *mut ngx_event_t) {
    // SAFETY: connection events carry their live connection in `data`,
    // whose `data` is the probe (set by `Probe::attach`); the probe
    // outlives its connections.
    let (c, p, log, timedout, write) = unsafe {
        let c = (*ev).data.cast::<ngx_connection_t>();
        (
            Conn::from_raw(c),
            (*c).data.cast::<Probe>(),
            (*ev).log,
            (*ev).timedout() != 0,
            (*ev).write() != 0,
        )
    };
    // SAFETY: see above.
    let (Some(c), Some(p)) = (c, unsafe { p.as_mut() }) else {
        return;
    };
    if !guard(log, "check connection", false, || {
        if p.conn == Some(c) {
            if c.closing() {
                cancel(p);
            } else {
                on_conn_event(p, c, timedout, write);
            }
        }
        true
    }) {
        recover(p);
    }
}

/// The worker is shutting down (nginx closes idle connections, ours are
/// marked idle): drop the round without counting it and free its lease.
fn cancel(p: &mut Probe) {
    connect::close(p);
    if let Some(s) = p.slot() {
        s.lease.store(0, Ordering::Release);
    }
}

fn on_conn_event(p: &mut Probe, c: Conn, timedout: bool, write: bool) {
    match p.phase {
        // nginx's SSL layer has the events until it calls back.
        Phase::Idle | Phase::Handshaking => {}
        Phase::Connecting if timedout => match connect::connect_timer_expired(p, c) {
            Expired::Connected => connected(p),
            Expired::Failed(outcome) => round::finish(p, outcome),
            Expired::Rearmed => {}
        },
        Phase::Connecting => {
            let err = c.so_error();
            if err != 0 {
                return round::finish(p, Outcome::Down(conn::reason_of(err)));
            }
            connected(p);
        }
        Phase::Active => {
            let step = p.with_kind(|k, cx| {
                if timedout {
                    k.on_timeout(cx)
                } else if write {
                    k.on_writable(cx)
                } else {
                    k.on_readable(cx)
                }
            });
            apply(p, step);
        }
    }
}
