//! Addresses nginx resolves at run time for `server NAME resolve` lines
//! (nginx 1.27.3+, `zone` upstreams; docs/resolved.md).
//!
//! nginx keeps such an upstream's peers in its zone, adds and removes the
//! addresses of each name as its resolver answers, and bumps the lists'
//! change counter (`peers->config`) each time. Each worker keeps a view of
//! those addresses per upstream, rebuilt whenever the counter moved: before
//! a selection of that upstream, before a status page, and from a timer
//! (the probes' side, `check::Prober`). Every rebuild takes, under the
//! zone's lock, a slot of the zone's room for each address (the one the
//! address already has, else a free one, `healthcheck_core::room`) and
//! frees the slots of addresses nginx no longer has.
//!
//! The view's peer pointers are only used while the counter still says
//! what it said when they were read: nginx may free a removed peer and give
//! its memory to a new one.

use core::cell::RefCell;
use core::ffi::c_void;
use core::sync::atomic::Ordering::Relaxed;
use core::sync::atomic::{AtomicUsize, Ordering};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use healthcheck_core::events::{By, State};
use healthcheck_core::identity::resolved_identity;
use healthcheck_core::outlier::Counters;
use healthcheck_core::room::{self, Claim};
use ngx::ffi::{ngx_atomic_t, ngx_str_t, ngx_uint_t, sockaddr, socklen_t, NGX_LOG_WARN};

use healthcheck_core::status::Group;

use crate::ffi::{self, monotonic_ms, str_bytes};
use crate::shm::Zone;
use crate::target::{Target, UpstreamCheck};
use crate::upstream::{self, PeerRef};

/// A checked upstream with `resolve` servers.
pub struct ResolveUps {
    /// `identity::upstream_tag`: whose slots of the room are whose.
    pub tag: u64,
    pub lists: Vec<*const c_void>,
    pub locks: Vec<*mut ngx_atomic_t>,
    /// `peers->config` of its lists.
    pub config: *const ngx_uint_t,
    pub upstream: ngx_str_t,
    pub check: Rc<UpstreamCheck>,
    /// Its configured peers' (slot, weight), for the fail-open share.
    pub static_members: Vec<(u32, u32)>,
}

impl ResolveUps {
    /// The lists' change counter now.
    pub fn counter(&self) -> u64 {
        // SAFETY: `config` points at an ngx_uint_t in the upstream's zone,
        // written by nginx under a list's write lock; read atomically.
        unsafe { (*self.config.cast::<AtomicUsize>()).load(Ordering::Acquire) as u64 }
    }

    fn upstream_bytes(&self) -> &[u8] {
        // SAFETY: the upstream's name lives in the cycle pool.
        unsafe { str_bytes(&self.upstream) }
    }
}

/// A resolved address with a slot: a target like a configured peer, whose
/// names and address the view owns.
pub struct DynTarget {
    pub target: Target,
    pub identity: u64,
    /// Its `peer->sockaddr` (a proxied attempt's `pc->sockaddr`).
    sockaddr_ptr: usize,
    // The storage `target.peer`'s names and address point into.
    _name: Box<[u8]>,
    _server: Box<[u8]>,
    _sockaddr: Box<[u8]>,
}

/// A resolved address that found no room: selected as nginx alone would.
pub struct Unchecked {
    pub name: Box<[u8]>,
    pub server: Box<[u8]>,
    pub backup: bool,
    pub weight: u32,
}

/// What a worker knows of its resolve upstreams' addresses.
#[derive(Default)]
pub struct View {
    /// Per resolve upstream: the change counter the view was built at
    /// (`u64::MAX`: never).
    pub seen: Vec<u64>,
    pub targets: Vec<Vec<DynTarget>>,
    pub unchecked: Vec<Vec<Unchecked>>,
    /// `rr peer -> (resolve upstream, position in its targets)`.
    by_peer: HashMap<usize, (u32, u32)>,
    /// `peer sockaddr -> (resolve upstream, slot)`.
    by_addr: HashMap<usize, (u32, u32)>,
    /// Bumped on every rebuild that changed something.
    pub version: u64,
    /// Per resolve upstream: when this worker last warned of unchecked
    /// addresses (monotonic ms, 0 = never).
    last_warn: Vec<u64>,
}

impl View {
    pub fn new(n: usize) -> Self {
        Self {
            seen: vec![u64::MAX; n],
            targets: (0..n).map(|_| Vec::new()).collect(),
            unchecked: (0..n).map(|_| Vec::new()).collect(),
            last_warn: vec![0; n],
            ..Self::default()
        }
    }
}

/// How long a freed slot of the room waits before another address gets
/// it: longer than any round in flight can last.
fn quarantine_ms(checks: &[ResolveUps]) -> u64 {
    checks
        .iter()
        .map(|r| 2 * r.check.conf.timeout_ms)
        .max()
        .unwrap_or(0)
        + 1000
}

/// A context's resolve upstreams and the worker's view of their addresses.
pub struct Resolved {
    group: Group,
    zone: Option<Zone>,
    /// The checked upstreams with `resolve` servers.
    pub ups: Vec<ResolveUps>,
    /// Their addresses as this worker knows them.
    pub view: RefCell<View>,
    /// [`quarantine_ms`] of the upstreams.
    quarantine_ms: u64,
}

impl Default for Resolved {
    fn default() -> Self {
        Self::new(Group::Http, None, Vec::new())
    }
}

/// One [`warn`](NGX_LOG_WARN) per upstream per minute (worker 0 only).
const WARN_EVERY_MS: u64 = 60_000;

impl Resolved {
    pub fn new(group: Group, zone: Option<Zone>, ups: Vec<ResolveUps>) -> Self {
        Self {
            group,
            zone,
            quarantine_ms: quarantine_ms(&ups),
            view: RefCell::new(View::new(ups.len())),
            ups,
        }
    }

    /// Rebuild the view of resolve upstream `i` if nginx changed its peers
    /// since (or always, with `force`). Returns whether anything changed.
    /// Never called with a list's write lock held by this process.
    pub fn refresh(&self, i: usize, force: bool) -> bool {
        let (Some(zone), Some(r)) = (self.zone.as_ref(), self.ups.get(i)) else {
            return false;
        };
        let Ok(mut view) = self.view.try_borrow_mut() else {
            return false;
        };
        for _ in 0..4 {
            let counter = r.counter();
            if !force && view.seen.get(i) == Some(&counter) {
                return false;
            }
            // SAFETY: the upstream's lists of the running cycle.
            let peers = unsafe { upstream::resolved_peers(self.group, &r.lists, &r.locks) };
            if r.counter() != counter {
                continue;
            }
            let conf = &r.check.conf;
            let mut made: Vec<DynTarget> = peers
                .into_iter()
                .map(|p| {
                    let name = p.name;
                    let server = p.server;
                    let sa = p.sockaddr;
                    let peer = PeerRef {
                        peer: p.peer,
                        name: ngx_str_t {
                            len: name.len(),
                            data: name.as_ptr().cast_mut(),
                        },
                        server: ngx_str_t {
                            len: server.len(),
                            data: server.as_ptr().cast_mut(),
                        },
                        sockaddr: sa.as_ptr().cast_mut().cast::<sockaddr>(),
                        socklen: sa.len() as socklen_t,
                        weight: p.weight,
                        backup: p.backup,
                        down: p.down,
                        list: p.list,
                        // `resolve` needs the upstream's zone.
                        shared: true,
                    };
                    let port = if conf.port == 0 {
                        peer.port()
                    } else {
                        conf.port
                    };
                    let identity = resolved_identity(
                        self.group.as_str(),
                        r.upstream_bytes(),
                        &server,
                        &name,
                        conf.check_type.as_str(),
                        port,
                    );
                    DynTarget {
                        target: Target {
                            index: u32::MAX,
                            upstream: r.upstream,
                            peer,
                            check: Rc::clone(&r.check),
                        },
                        identity,
                        sockaddr_ptr: p.sockaddr_ptr as usize,
                        _name: name,
                        _server: server,
                        _sockaddr: sa,
                    }
                })
                .collect();
            let now = monotonic_ms();
            let quarantine = self.quarantine_ms;
            let claimed = zone.locked(|| {
                // nginx changed the list meanwhile: read it again.
                if r.counter() != counter {
                    return None;
                }
                let (slots, metas) = zone.room();
                let keep: HashSet<u64> = made.iter().map(|d| d.identity).collect();
                let freed = room::sweep(slots, metas, r.tag, &keep, now);
                let ids: Vec<u64> = made.iter().map(|d| d.identity).collect();
                let claims =
                    room::claim_all(slots, metas, r.tag, &ids, conf.initial(), now, quarantine);
                // A slot handed to a new address starts with no outlier
                // counts either.
                for c in &claims {
                    if let Claim::New(j) = c {
                        if let Some(k) = zone.counters(zone.room_start() + j) {
                            k.copy_from(&Counters::default());
                        }
                    }
                }
                Some((claims, freed))
            });
            let Some((claims, freed)) = claimed else {
                continue;
            };
            let start = zone.room_start() as u32;
            // The old entries of this upstream go; the new ones come.
            // (Only this upstream's: nginx may have given a freed peer's
            // memory to another upstream of its zone, whose entry stays.)
            let v = &mut *view;
            let mine = i as u32;
            let check = &r.check;
            if check.events.is_some() {
                for d in &v.targets[i] {
                    let pos = d.target.index.wrapping_sub(start) as usize;
                    if !freed.contains(&pos) {
                        continue;
                    }
                    let up = zone
                        .slot(d.target.index as usize)
                        .is_some_and(|s| s.up.load(Relaxed) != 0);
                    resolve_event(check, zone, &d.target, (State::health(up), State::Absent));
                }
            }
            for d in &v.targets[i] {
                let peer = d.target.peer.peer as usize;
                if v.by_peer.get(&peer).is_some_and(|e| e.0 == mine) {
                    v.by_peer.remove(&peer);
                }
                if v.by_addr.get(&d.sockaddr_ptr).is_some_and(|e| e.0 == mine) {
                    v.by_addr.remove(&d.sockaddr_ptr);
                }
            }
            let mut unchecked = Vec::new();
            let mut targets = Vec::with_capacity(made.len());
            let mut fresh = !freed.is_empty();
            for (mut d, c) in made.drain(..).zip(&claims) {
                fresh |= matches!(c, Claim::New(_));
                let Some(pos) = c.position() else {
                    unchecked.push(Unchecked {
                        name: d._name,
                        server: d._server,
                        backup: d.target.peer.backup,
                        weight: d.target.peer.weight,
                    });
                    continue;
                };
                d.target.index = start + pos as u32;
                if matches!(c, Claim::New(_)) && check.events.is_some() {
                    let to = if conf.mandatory {
                        State::Checking
                    } else {
                        State::health(!conf.default_down)
                    };
                    resolve_event(check, zone, &d.target, (State::Absent, to));
                }
                view.by_peer.insert(
                    d.target.peer.peer as usize,
                    (i as u32, targets.len() as u32),
                );
                view.by_addr
                    .insert(d.sockaddr_ptr, (i as u32, d.target.index));
                targets.push(d);
            }
            if let Ok(mut members) = r.check.members.try_borrow_mut() {
                members.clear();
                members.extend_from_slice(&r.static_members);
                members.extend(
                    targets
                        .iter()
                        .map(|d| (d.target.index, d.target.peer.weight)),
                );
                members.sort_unstable();
                members.dedup_by_key(|m| m.0);
            }
            if !unchecked.is_empty() {
                self.warn_unchecked(&mut view, i, r, unchecked.len(), now);
            }
            // Peers joined or left: the upstream's up share moved, and new
            // slots must carry its fail-open flag.
            r.check.update_fail_open(zone, ffi::cycle_log());
            view.targets[i] = targets;
            view.unchecked[i] = unchecked;
            view.seen[i] = counter;
            view.version += 1;
            if fresh {
                // New slots start at default_down: stock mode applies it.
                zone.header().note_change();
            }
            return true;
        }
        false
    }

    fn warn_unchecked(&self, view: &mut View, i: usize, r: &ResolveUps, n: usize, now: u64) {
        // SAFETY: set by nginx before module code runs in a worker.
        if unsafe { ngx::ffi::ngx_worker } != 0 {
            return;
        }
        let last = view.last_warn[i];
        if last != 0 && now.saturating_sub(last) < WARN_EVERY_MS {
            return;
        }
        view.last_warn[i] = now.max(1);
        ffi::log(
            NGX_LOG_WARN,
            ffi::cycle_log(),
            format_args!(
                "upstream \"{}\": {n} resolved address{} found no room in the {} health check \
                 zone and {} selected unchecked (raise check_shm_size)",
                String::from_utf8_lossy(r.upstream_bytes()),
                if n == 1 { "" } else { "es" },
                self.group.as_str(),
                if n == 1 { "is" } else { "are" },
            ),
        );
    }

    /// Rebuild every resolve upstream's view that needs it.
    pub fn refresh_all(&self, force: bool) {
        for i in 0..self.ups.len() {
            self.refresh(i, force);
        }
    }

    /// Whether selection must skip `peer`, a peer of resolve upstream `i`
    /// that is not a configured one. Called by the balancers with the
    /// list locked (so the view is not rebuilt here: the request's
    /// `peer.init` did that, `selection`): a peer the view knows, at the
    /// same address and with its slot still its own, is as its slot says;
    /// one the view does not know is new since (it starts at
    /// `default_down`) or, when the view is current, has no slot (never
    /// skipped).
    pub fn down(&self, i: usize, peer: usize) -> bool {
        let (Some(zone), Some(r)) = (self.zone.as_ref(), self.ups.get(i)) else {
            return false;
        };
        let Ok(view) = self.view.try_borrow() else {
            return false;
        };
        let known = view
            .by_peer
            .get(&peer)
            .filter(|e| e.0 as usize == i)
            .and_then(|&(u, k)| view.targets.get(u as usize)?.get(k as usize))
            .filter(|d| {
                // SAFETY: the balancer holds the peer's list locked; the
                // peer is live.
                let now = unsafe { upstream::peer_sockaddr(self.group, peer as *const c_void) };
                now == &*d._sockaddr
            });
        if let Some(d) = known {
            return zone
                .slot(d.target.index as usize)
                .filter(|s| s.identity.load(Ordering::Acquire) == d.identity)
                .map_or(
                    r.check.conf.initial().down(),
                    healthcheck_core::zone::Slot::vetoed,
                );
        }
        view.seen.get(i) != Some(&r.counter()) && r.check.conf.initial().down()
    }

    /// The slot of the resolved peer whose `sockaddr` field is `sockaddr`,
    /// in resolve upstream `i`, if the view is current.
    pub fn slot_by_addr(&self, i: usize, sockaddr: usize) -> Option<u32> {
        let r = self.ups.get(i)?;
        let view = self.view.try_borrow().ok()?;
        if view.seen.get(i) != Some(&r.counter()) {
            return None;
        }
        view.by_addr
            .get(&sockaddr)
            .filter(|e| e.0 as usize == i)
            .map(|e| e.1)
    }

    /// Stock mode, under the write lock of list `list` of resolve upstream
    /// `i`: set the module's bit of each resolved peer's `down` there as
    /// its slot says. False (nothing written) when the view is not current.
    ///
    /// # Safety
    /// The caller holds that list's write lock.
    pub unsafe fn apply(&self, i: usize, list: u32, down_bit: ngx_uint_t) -> bool {
        let (Some(zone), Some(r)) = (self.zone.as_ref(), self.ups.get(i)) else {
            return true;
        };
        let Ok(view) = self.view.try_borrow() else {
            return false;
        };
        if view.seen.get(i) != Some(&r.counter()) {
            return false;
        }
        for d in view.targets[i]
            .iter()
            .filter(|d| d.target.peer.list == list)
        {
            let veto = ngx_uint_t::from(
                zone.slot(d.target.index as usize)
                    .is_some_and(healthcheck_core::zone::Slot::vetoed),
            );
            let down = d.target.peer.down;
            // SAFETY: a peer of the list as it is now (the counter did not
            // move), written under its write lock (the caller's).
            unsafe {
                let want = (*down & !down_bit) | (veto * down_bit);
                if *down != want {
                    *down = want;
                }
            }
        }
        true
    }

    /// The resolved addresses without a slot, with their upstream's check.
    pub fn each_unchecked(&self, mut f: impl FnMut(&ResolveUps, &Unchecked)) {
        if let Ok(view) = self.view.try_borrow() {
            for (r, list) in self.ups.iter().zip(&view.unchecked) {
                for u in list {
                    f(r, u);
                }
            }
        }
    }
}

/// A resolved address added or removed, in `check_log` (written once: by
/// the process whose claim or sweep under the zone's lock found it).
fn resolve_event(check: &UpstreamCheck, zone: &Zone, t: &Target, states: (State, State)) {
    let names = (t.peer.name_bytes(), t.peer.server_bytes());
    let mut ev = check.event(Some(names), states, By::Resolve);
    ev.checks = zone.slot(t.index as usize).map(|s| s.checks.load(Relaxed));
    check.emit(zone, &ev);
}
