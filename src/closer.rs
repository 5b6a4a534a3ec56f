//! Idle keepalive connections to a peer that went down (docs/operations.md,
//! Peers that go down): every worker looks, a few times a second, whether
//! some peer's state changed (one atomic load of the zone's change counter
//! when nothing did); for each peer selection now skips that it did not
//! before (down by its checks, `passive_fall`, an operator, an ejection;
//! not a drain, which lets what the peer serves finish),
//! it closes the idle connections of nginx's upstream keepalive cache to
//! that peer's address, as nginx closes idle connections at shutdown: the
//! connection is marked `close` and its read handler runs, which is the
//! keepalive module's own, so the cache lets the connection go. With
//! `check_shutdown_sessions on` it also ends the proxied connections in
//! use to such a peer (`crate::sessions`), counted in `sessions_shut`.
//!
//! On each look it also counts, for every peer an operator drains, its
//! open proxied connections (nginx's `peer->conns`) into the slot's
//! `conns`, each worker adding what changed since it last did (a `zone`
//! list's count is every worker's, so only worker 0 adds it), and takes
//! back nginx's drain bit from peers no longer draining.

use core::mem;
use core::ptr::NonNull;
use std::collections::{HashMap, HashSet};

use healthcheck_core::status::Group;
use ngx::ffi::{ngx_add_timer, ngx_del_timer, ngx_event_t, ngx_log_t};

use crate::ffi::{exiting, guard};
use crate::shm::Slot;
use crate::worker::Context;
use core::sync::atomic::Ordering::Relaxed;

/// How the timer reaches a context (`crate::process::with_context`).
pub type WithContext = fn(Group, &mut dyn FnMut(&Context));

/// How often a worker looks, ms.
const PERIOD_MS: u64 = 100;

#[repr(C)]
struct Inner {
    /// As `Probe::ident`: nginx's debug log reads the timer's `data`.
    ident: [usize; 4],
    ev: ngx_event_t,
    with_context: WithContext,
    /// Per context (http, stream): the zone's change counter when the
    /// worker last looked, and the slots selection skipped then.
    seen: [u64; 2],
    skipped: [HashSet<u32>; 2],
    /// Per context: what this worker added to each draining slot's
    /// `conns`.
    published: [HashMap<u32, u32>; 2],
    /// Whether this is worker 0 (it counts the connections of `zone`
    /// lists).
    first: bool,
}

/// The owning handle of a worker's look at peers that went down.
pub struct IdleCloser(NonNull<Inner>);

impl IdleCloser {
    /// Start looking at both contexts' peers.
    pub fn start(
        ctxs: [&Context; 2],
        first: bool,
        with_context: WithContext,
        log: *mut ngx_log_t,
    ) -> Option<Self> {
        if ctxs.iter().all(|c| c.zone.is_none()) {
            return None;
        }
        let mut seen = [0; 2];
        let mut skipped: [HashSet<u32>; 2] = Default::default();
        for (i, ctx) in ctxs.iter().enumerate() {
            let Some(zone) = ctx.zone else { continue };
            seen[i] = zone.header().changes();
            ctx.each_target(|t| {
                if zone
                    .slot(t.index as usize)
                    .is_some_and(Slot::vetoed_but_draining)
                {
                    skipped[i].insert(t.index);
                }
            });
        }
        let inner = Box::new(Inner {
            ident: [0, 0, 0, usize::MAX],
            // SAFETY: all-zero is nginx's initial state for an event.
            ev: unsafe { mem::zeroed() },
            with_context,
            seen,
            skipped,
            published: Default::default(),
            first,
        });
        let raw = Box::into_raw(inner);
        // SAFETY: just made; nginx's timer points to it until the handle is
        // dropped.
        unsafe {
            (*raw).ev.data = raw.cast();
            (*raw).ev.handler = Some(ngx_healthcheck_closer_timer);
            (*raw).ev.log = log;
            (*raw).ev.set_cancelable(1);
            ngx_add_timer(&mut (*raw).ev, PERIOD_MS as ngx::ffi::ngx_msec_t);
            Some(IdleCloser(NonNull::new_unchecked(raw)))
        }
    }
}

impl Drop for IdleCloser {
    fn drop(&mut self) {
        // SAFETY: made by `Box::into_raw` in `start`, freed once here.
        let mut inner = unsafe { Box::from_raw(self.0.as_ptr()) };
        if inner.ev.timer_set() != 0 {
            // SAFETY: the timer's own event.
            unsafe { ngx_del_timer(&mut inner.ev) };
        }
        // This worker's connections leave with it.
        let with = inner.with_context;
        for (i, group) in [Group::Http, Group::Stream].into_iter().enumerate() {
            let published = mem::take(&mut inner.published[i]);
            with(group, &mut |ctx| {
                let Some(zone) = ctx.zone else { return };
                for (&slot, &n) in &published {
                    if let Some(s) = zone.slot(slot as usize) {
                        s.conns.fetch_sub(n, Relaxed);
                    }
                }
            });
        }
    }
}

impl Inner {
    fn look(&mut self, group: Group, ctx: &Context, log: *mut ngx_log_t) {
        let Some(zone) = ctx.zone else {
            return;
        };
        let g = group as usize;
        self.count_draining(g, ctx, zone);
        if group == Group::Http && ctx.drains() {
            let peers = ctx.targets.iter().map(|t| (t.peer.peer as usize, t.index));
            ctx.drain_bits.sync(ctx.zone.as_ref(), peers);
        }
        let changes = zone.header().changes();
        if changes == self.seen[g] {
            return;
        }
        self.seen[g] = changes;
        let mut went: Vec<Vec<u8>> = Vec::new();
        let mut now = HashSet::new();
        let mut shut = Vec::new();
        ctx.each_target(|t| {
            if !zone
                .slot(t.index as usize)
                .is_some_and(Slot::vetoed_but_draining)
            {
                return;
            }
            now.insert(t.index);
            if !self.skipped[g].contains(&t.index) {
                shut.push(t.index);
            }
            if !self.skipped[g].contains(&t.index) && !t.peer.sockaddr.is_null() {
                // SAFETY: an rr peer's sockaddr of `socklen` bytes.
                let bytes = unsafe {
                    core::slice::from_raw_parts(
                        t.peer.sockaddr.cast::<u8>(),
                        t.peer.socklen as usize,
                    )
                };
                went.push(bytes.to_vec());
            }
        });
        self.skipped[g] = now;
        if group == Group::Http && !went.is_empty() {
            // SAFETY: in a worker, on the event loop.
            unsafe { close_idle(&went) };
        }
        for slot in shut {
            let Some(what) = ctx.target_name(slot) else {
                continue;
            };
            let what = format!("upstream {} peer {}", what.0, what.1);
            let n = crate::sessions::shut(group, slot, &what, log);
            if n > 0 {
                if let Some(s) = zone.slot(slot as usize) {
                    s.sessions_shut.fetch_add(n as u32, Relaxed);
                }
            }
        }
    }

    /// Add what changed of this worker's open connections to each
    /// draining peer into its slot's `conns`.
    fn count_draining(&mut self, g: usize, ctx: &Context, zone: crate::shm::Zone) {
        let published = &mut self.published[g];
        for t in &ctx.targets {
            let Some(s) = zone.slot(t.index as usize) else {
                continue;
            };
            let draining = s.draining();
            if !draining && !published.contains_key(&t.index) {
                continue;
            }
            let mine = if draining && (!t.peer.shared || self.first) {
                // SAFETY: a configured peer's rr struct, of this context;
                // `conns` is a plain counter nginx keeps.
                u32::try_from(unsafe { t.peer.conns(g == Group::Stream as usize) })
                    .unwrap_or(u32::MAX)
            } else {
                0
            };
            let before = published.get(&t.index).copied().unwrap_or(0);
            if mine > before {
                s.conns.fetch_add(mine - before, Relaxed);
            } else if mine < before {
                s.conns.fetch_sub(before - mine, Relaxed);
            }
            if draining {
                published.insert(t.index, mine);
            } else {
                published.remove(&t.index);
            }
        }
    }
}

/// Close the idle upstream connections (the keepalive cache's) to any of
/// `addrs` (sockaddr bytes).
///
/// # Safety
/// A worker's event loop: the cycle's connections are this process's.
unsafe fn close_idle(addrs: &[Vec<u8>]) {
    // SAFETY: the running cycle of a worker.
    let cycle = unsafe { &*ngx::ffi::ngx_cycle };
    if cycle.connections.is_null() {
        return;
    }
    for i in 0..cycle.connection_n {
        // SAFETY: nginx allocated `connection_n` connections there. Each is
        // read through its pointer, never held across a handler (which may
        // close connections).
        let c = unsafe { cycle.connections.add(i) };
        // SAFETY: as above.
        let (fd, idle, listening, log) =
            unsafe { ((*c).fd, (*c).idle(), (*c).listening, (*c).log) };
        // Only the keepalive cache's: idle, opened to a peer (a client's
        // keepalive connection has its listening socket), with the cycle's
        // log, which the cache gives them (the module's own check
        // connections, idle too, have a log of their own).
        if fd == -1 || idle == 0 || !listening.is_null() || log != cycle.log {
            continue;
        }
        // nginx keeps no address in an upstream connection: ask the kernel.
        // SAFETY: all-zero is a valid sockaddr_storage; the length is its
        // size.
        let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let mut len = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: a live socket; `ss` has `len` bytes.
        let rc = unsafe { libc::getpeername(fd, (&raw mut ss).cast(), &mut len) };
        if rc != 0 || !addrs.iter().any(|a| same_peer(a, &ss)) {
            continue;
        }
        // SAFETY: an idle connection's read event, whose handler (the
        // keepalive module's) closes it when `close` is set, as
        // ngx_close_idle_connections does.
        unsafe {
            let rev = (*c).read;
            if let Some(handler) = rev.as_ref().and_then(|r| r.handler) {
                (*c).set_close(1);
                handler(rev);
            }
        }
    }
}

/// Whether the peer sockaddr bytes `peer` and the kernel's `ss` name the
/// same address and port (IPv4, IPv6; unix sockets have no peer name).
fn same_peer(peer: &[u8], ss: &libc::sockaddr_storage) -> bool {
    let family = i32::from(ss.ss_family);
    let ss: *const libc::sockaddr_storage = ss;
    match family {
        libc::AF_INET if peer.len() >= mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: `ss` holds an AF_INET address; sockaddr_storage is
            // large and aligned enough for it.
            let a = unsafe { &*ss.cast::<libc::sockaddr_in>() };
            // SAFETY: `peer` has at least a sockaddr_in's bytes (checked).
            let b = unsafe { core::ptr::read_unaligned(peer.as_ptr().cast::<libc::sockaddr_in>()) };
            i32::from(b.sin_family) == family
                && a.sin_port == b.sin_port
                && a.sin_addr.s_addr == b.sin_addr.s_addr
        }
        libc::AF_INET6 if peer.len() >= mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for AF_INET6.
            let a = unsafe { &*ss.cast::<libc::sockaddr_in6>() };
            // SAFETY: `peer` has at least a sockaddr_in6's bytes (checked).
            let b =
                unsafe { core::ptr::read_unaligned(peer.as_ptr().cast::<libc::sockaddr_in6>()) };
            i32::from(b.sin6_family) == family
                && a.sin6_port == b.sin6_port
                && a.sin6_addr.s6_addr == b.sin6_addr.s6_addr
        }
        _ => false,
    }
}

unsafe extern "C" fn ngx_healthcheck_closer_timer(ev: *mut ngx_event_t) {
    // SAFETY: `data` is the closer owning this event (set in `start`).
    let (t, log) = unsafe { ((*ev).data.cast::<Inner>(), (*ev).log) };
    // SAFETY: the closer outlives its event (Drop deletes it first).
    let Some(t) = (unsafe { t.as_mut() }) else {
        return;
    };
    if exiting() {
        return;
    }
    guard(log, "idle connections", (), || {
        let with = t.with_context;
        for group in [Group::Http, Group::Stream] {
            with(group, &mut |ctx| t.look(group, ctx, log));
        }
    });
    // SAFETY: the timer's own event, not armed (it just fired).
    unsafe { ngx_add_timer(&mut t.ev, PERIOD_MS as ngx::ffi::ngx_msec_t) };
}
