//! What a worker knows of its checked peers: for each context (http,
//! stream) the peers in status order, the map the selection hooks use, and
//! the shared zone. Built once per process (and per in-place reload) by
//! `process`, read through `process::with`.
//!
//! nginx runs every module callback of a process on one thread, so this
//! state needs no locks; `Cell` documents that single-threaded contract.

use core::cell::Cell;
use core::sync::atomic::Ordering;
use std::rc::Rc;

use healthcheck_core::events::{By, State};
use healthcheck_core::ptrmap::{Dense, PtrMap};
use healthcheck_core::reason::Reason;
use ngx::ffi::{
    ngx_atomic_t, ngx_log_t, ngx_rwlock_unlock, ngx_rwlock_wlock, ngx_uint_t, NGX_LOG_WARN,
};

use crate::drain::DrainBits;
use crate::ffi::{self, unix_ms};
use crate::match_block::CompiledMatch;
use crate::outlier;
use crate::ramp;
use crate::resolved::{ResolveUps, Resolved};
use crate::shm::{Slot, Zone};
use crate::target::{Target, UpstreamCheck};
use crate::upstream::UpstreamRef;
use healthcheck_core::outlier::Attempt;
use healthcheck_core::ramp::{self as core_ramp, Progress};
use healthcheck_core::status::Group;

/// The checked peers of one context.
#[derive(Default)]
pub struct Context {
    pub zone: Option<Zone>,
    pub targets: Vec<Target>,
    /// `rr peer address -> index`.
    pub map: PtrMap,
    /// The rr peer lists (primary and backup) of checked upstreams, to
    /// their index in `list_views`.
    lists: PtrMap,
    /// The list last asked about and its `list_views` index + 1, 0 = not
    /// checked (balancers ask about every peer of one list in a row).
    last_list: Cell<(usize, u32)>,
    list_views: Vec<ListView>,
    /// `check_state_file` of the context (full path).
    pub state_file: Option<Vec<u8>>,
    /// `check_max_inflight` of the context's block (or its default): the
    /// probes of upstreams without their own share it.
    pub max_inflight: u32,
    /// `check_max_connections` of the context's block (or its default).
    pub max_connections: healthcheck_core::conf::ConnLimit,
    /// Per checked upstream: what stock mode and `passive_fall` need.
    sels: Vec<Selection>,
    /// `srv conf address -> index in sels`.
    sel_map: PtrMap,
    /// The zone was planned for another peer list (slots, peers): a broken
    /// invariant, reported by `process::init`; the context checks nothing.
    pub mismatch: Option<(usize, usize)>,
    /// Checked upstreams with `resolve` servers and their addresses
    /// (`crate::resolved`).
    pub resolved: Resolved,
    /// nginx has its own drain (http, 1.29.6+): a drained peer gets
    /// nginx's `NGX_HTTP_UPSTREAM_DRAINING` bit in `peer->down`, so that
    /// `sticky` sessions still reach it.
    drains: bool,
    /// Peers this worker gave that bit.
    pub drain_bits: DrainBits,
    /// Per configured target: its `slow_start` length, ms, while its
    /// upstream has another peer to take what the ramp holds back (else
    /// 0: a ramp never leaves a request without a peer).
    ramp_len: Vec<Cell<u32>>,
    /// Per configured target: the weight of the other selectable peers of
    /// its upstream (`vnswrr`'s turns, `Progress::admits_turn`).
    ramp_others: Vec<Cell<u32>>,
    /// `Header::changes` when `ramp_len` was last worked out.
    ramp_seen: Cell<u64>,
    /// Unix ms until which some peer of the context may ramp, 0 = none
    /// does: while it is 0 the hook looks at no ramp.
    ramp_until: Cell<u64>,
    /// Its index in `FAST`.
    fast: usize,
    /// Upstreams whose `peer.init` the module puts in front only while a
    /// ramp is active (`ramp::Lazy`), and whether it is there now.
    lazy: Vec<ramp::Lazy>,
    armed: Cell<bool>,
}

/// The bit of `peer->down` stock mode sets: the value of the `down`
/// parameter (`NGX_HTTP_UPSTREAM_FAILED` in nginx 1.29.6+, where `down` is a
/// bit mask and `drain` another bit). Every balancer skips a peer with it,
/// 1.30's `sticky` too.
const DOWN_BIT: ngx_uint_t = 1;

/// What the hook needs of a checked rr peer list.
struct ListView {
    /// 1, or its resolve upstream's index + 2.
    value: u32,
    /// Its peers' slots by address, when nginx allocated them as one
    /// array (no `zone`, no `resolve`); else `map` answers.
    dense: Dense,
}

impl ListView {
    /// A list the hook was not told: peers are looked up by address.
    const UNKNOWN: ListView = ListView {
        value: 1,
        dense: Dense::NONE,
    };
}

/// What selection needs of one checked upstream.
struct Selection {
    /// Each peer list's write lock (NULL: the worker's own list).
    locks: Vec<*mut ngx_atomic_t>,
    /// Its checked peers: slot index, `down` field, list index.
    peers: Vec<(u32, *mut ngx_uint_t, u32)>,
    /// `Header::changes` when stock mode last applied the state, and the
    /// resolved peers' change counter then (0 without `resolve`).
    applied: Cell<(u64, u64)>,
    /// `peer sockaddr address -> slot index` (the attempt's `pc->sockaddr`
    /// is the selected peer's).
    by_addr: PtrMap,
    check: Rc<UpstreamCheck>,
    /// Its index in `Context::resolve`, with `resolve` servers.
    resolve: Option<u32>,
    /// `slow_start`, ms (0 = none).
    slow_start: u32,
    /// Stock mode: indices in `peers` of those ramping now.
    ramping: core::cell::RefCell<Vec<usize>>,
}

impl Context {
    /// The `resolve` index of the upstream whose srv conf is `srv`.
    pub fn resolve_index(&self, srv: usize) -> Option<usize> {
        let i = self.sel_map.get(srv)?;
        self.sels.get(i as usize)?.resolve.map(|r| r as usize)
    }

    /// Upstream and peer name of the target with slot `index`, static or
    /// resolved.
    pub fn target_name(&self, index: u32) -> Option<(String, String)> {
        self.with_target(index, |t| {
            (
                String::from_utf8_lossy(t.upstream_bytes()).into_owned(),
                String::from_utf8_lossy(t.peer.name_bytes()).into_owned(),
            )
        })
    }

    /// `f` of the target with slot `index`, static or resolved.
    pub fn with_target<R>(&self, index: u32, f: impl FnOnce(&Target) -> R) -> Option<R> {
        if let Some(t) = self.targets.get(index as usize) {
            return Some(f(t));
        }
        let view = self.resolved.view.try_borrow().ok()?;
        let found = view
            .targets
            .iter()
            .flatten()
            .find(|d| d.target.index == index)
            .map(|d| f(&d.target));
        found
    }

    /// Build from the context's upstreams, in the order the zone was planned.
    pub fn new(
        group: Group,
        zone: Option<Zone>,
        upstreams: &[UpstreamRef],
        matches: &[Rc<CompiledMatch>],
        block_log: Option<crate::conf::EventSink>,
    ) -> Self {
        let mut targets = Vec::new();
        let mut sels = Vec::new();
        let mut sel_map = Vec::new();
        let mut resolve = Vec::new();
        let mut list_values = Vec::new();
        let mut list_views = Vec::new();
        let mut lazy = Vec::new();
        for u in upstreams {
            let base = targets.len() as u32;
            let Some(check) = UpstreamCheck::new(u, base, matches, (group, block_log)) else {
                continue;
            };
            let check = Rc::new(check);
            lazy.extend(u.conf().lazy);
            let has_resolve = u.resolve_lines > 0 && !u.config.is_null();
            let resolve_index = has_resolve.then_some(resolve.len() as u32);
            if has_resolve {
                resolve.push(ResolveUps {
                    tag: healthcheck_core::identity::upstream_tag(group.as_str(), u.name_bytes()),
                    lists: u.lists.clone(),
                    locks: u.locks.clone(),
                    config: u.config,
                    upstream: u.name,
                    check: Rc::clone(&check),
                    static_members: check.members.borrow().clone(),
                });
            }
            // Each checked list: 1, or its resolve upstream's index + 2.
            let list_value = resolve_index.map_or(1, |r| r + 2);
            for (&l, dense) in u.lists.iter().zip(u.arrays(group, base)) {
                list_values.push((l as usize, list_views.len() as u32));
                list_views.push(ListView {
                    value: list_value,
                    dense,
                });
            }
            sel_map.push((u.srv as usize, sels.len() as u32));
            sels.push(Selection {
                locks: u.locks.clone(),
                peers: (base..)
                    .zip(&u.peers)
                    .map(|(i, p)| (i, p.down, p.list))
                    .collect(),
                applied: Cell::new((u64::MAX, u64::MAX)),
                by_addr: PtrMap::new(
                    (base..)
                        .zip(&u.peers)
                        .map(|(i, p)| (p.sockaddr as usize, i)),
                ),
                slow_start: u32::try_from(check.conf.slow_start_ms).unwrap_or(u32::MAX),
                ramping: Default::default(),
                check: Rc::clone(&check),
                resolve: resolve_index,
            });
            for p in &u.peers {
                targets.push(Target {
                    index: targets.len() as u32,
                    upstream: u.name,
                    peer: *p,
                    check: Rc::clone(&check),
                });
            }
        }
        // A zone planned for a different peer list must never be indexed
        // with this one (a broken invariant, but never a wrong peer).
        let mismatch = zone
            .as_ref()
            .filter(|z| z.room_start() != targets.len())
            .map(|z| (z.room_start(), targets.len()));
        let zone = zone.filter(|z| z.room_start() == targets.len());
        let map = PtrMap::new(targets.iter().map(|t| (t.peer.peer as usize, t.index)));
        let lists = PtrMap::new(list_values);
        let resolved = Resolved::new(group, zone, resolve);

        Self {
            drains: group == Group::Http && ngx::ffi::nginx_version >= 1_029_006,
            drain_bits: Default::default(),
            ramp_len: (0..targets.len()).map(|_| Cell::new(0)).collect(),
            ramp_others: (0..targets.len()).map(|_| Cell::new(0)).collect(),
            ramp_seen: Cell::new(u64::MAX),
            ramp_until: Cell::new(0),
            fast: crate::ramp::fast_reset(group, zone.as_ref().map(|z| &z.header().changes)),
            lazy,
            armed: Cell::new(false),
            zone,
            targets,
            map,
            lists,
            last_list: Cell::new((0, 0)),
            list_views,
            state_file: None,
            max_inflight: healthcheck_core::conf::MAX_INFLIGHT_DEFAULT,
            max_connections: Default::default(),
            sels,
            sel_map: PtrMap::new(sel_map),
            mismatch,
            resolved,
        }
    }

    /// Stock mode: make nginx's `peer->down` of the upstream `srv` say what
    /// the checks say, if any state changed since this worker last did.
    /// One atomic load when nothing changed.
    ///
    /// In a `zone` upstream the peers are shared by the workers: each list
    /// is written under its write lock, and the state is read inside the
    /// lock, so a worker with an older view can never overwrite a newer
    /// one (any later change moves the counter again).
    pub fn apply(&self, srv: usize) {
        let (Some(zone), Some(i)) = (self.zone.as_ref(), self.sel_map.get(srv)) else {
            return;
        };
        let Some(sel) = self.sels.get(i as usize) else {
            return;
        };
        // Resolved peers: the view first (it reads the lists under their
        // read locks, so before any write lock here).
        let resolve = self.resolve_index(srv);
        if let Some(r) = resolve {
            self.resolved.refresh(r, false);
        }
        let changes = zone.header().changes();
        let counter = resolve
            .and_then(|r| self.resolved.ups.get(r))
            .map_or(0, ResolveUps::counter);
        if sel.applied.get() == (changes, counter) {
            return;
        }
        let mut current = true;
        for (list, &lock) in sel.locks.iter().enumerate() {
            if !lock.is_null() {
                // SAFETY: the rwlock of a list in the upstream's zone.
                unsafe { ngx_rwlock_wlock(lock) };
            }
            for &(slot, down, _) in sel.peers.iter().filter(|p| p.2 as usize == list) {
                let s = zone.slot(slot as usize);
                // nginx's own drain keeps sticky sessions on a drained peer.
                let drained =
                    self.drains && s.is_some_and(|s| s.draining() && !s.vetoed_but_draining());
                let veto = ngx_uint_t::from(!drained && s.is_some_and(Slot::vetoed));
                if drained || self.drain_bits.has(down as usize) {
                    // SAFETY: as below.
                    unsafe { self.drain_bits.stock(down, slot, drained) };
                }
                // SAFETY: the peer's `down` field, in this worker's memory
                // or in the zone under the list's write lock; a peer that is
                // down in the configuration is not in `peers`, so the bit
                // is the module's; other bits (1.30's `drain`) stay.
                unsafe {
                    let want = (*down & !DOWN_BIT) | (veto * DOWN_BIT);
                    if *down != want {
                        *down = want;
                    }
                }
            }
            if let Some(r) = resolve {
                // SAFETY: the list's write lock is held (above).
                current &= unsafe { self.resolved.apply(r, list as u32, DOWN_BIT) };
            }
            if !lock.is_null() {
                // SAFETY: locked above.
                unsafe { ngx_rwlock_unlock(lock) };
            }
        }
        // A view behind nginx's lists is applied again next time.
        sel.applied
            .set((changes, if current { counter } else { u64::MAX }));
    }

    /// The slot of the peer at `sockaddr` of the upstream `srv`, static or
    /// resolved.
    pub fn slot_of(&self, srv: usize, sockaddr: usize) -> Option<u32> {
        let sel = self.sels.get(self.sel_map.get(srv)? as usize)?;
        sel.by_addr
            .get(sockaddr)
            .or_else(|| self.resolved.slot_by_addr(sel.resolve? as usize, sockaddr))
    }

    /// nginx ended a proxied attempt to the peer at `sockaddr` of the
    /// upstream `srv`: `failed` as nginx reported it (`passive_fall`),
    /// `attempt` as its upstream state tells (`check_outlier`).
    pub fn attempt_ended(
        &self,
        srv: usize,
        sockaddr: usize,
        failed: bool,
        attempt: Attempt,
        log: *mut ngx_log_t,
    ) {
        let (Some(zone), Some(i)) = (self.zone.as_ref(), self.sel_map.get(srv)) else {
            return;
        };
        let Some(sel) = self.sels.get(i as usize) else {
            return;
        };
        let index = sel
            .by_addr
            .get(sockaddr)
            .or_else(|| self.resolved.slot_by_addr(sel.resolve? as usize, sockaddr));
        let (Some(index), fall) = (index, sel.check.conf.passive_fall) else {
            return;
        };
        let Some(slot) = zone.slot(index as usize) else {
            return;
        };
        if sel.check.outlier.is_some() {
            self.judge(zone, |judge| judge.attempt(&sel.check, index, attempt, log));
        }
        if !failed {
            slot.passive_success();
            return;
        }
        if fall == 0 {
            return;
        }
        if slot.passive_failure(fall, unix_ms()).is_none() {
            return;
        }
        zone.header().note_change();
        if sel.check.events.is_some() {
            self.with_target(index, |t| {
                let detail = format!("{fall} failed proxied attempts (passive_fall={fall})");
                let names = (t.peer.name_bytes(), t.peer.server_bytes());
                let mut ev = t
                    .check
                    .event(Some(names), (State::Up, State::Down), By::Passive);
                ev.reason = Some(Reason::Passive.name());
                ev.detail = Some(&detail);
                ev.checks = Some(slot.checks.load(Ordering::Relaxed));
                t.check.emit(zone, &ev);
            });
        }
        if let Some(t) = self.target_name(index) {
            ffi::log(
                NGX_LOG_WARN,
                log,
                format_args!(
                    "upstream {} peer {} is down after {fall} failed proxied attempts \
                     (passive_fall={fall}); check rounds bring it back",
                    t.0, t.1,
                ),
            );
        }
        sel.check.update_fail_open(zone, log);
    }

    /// `f` with the context as `check_outlier` needs it.
    fn judge<R>(&self, zone: &Zone, f: impl FnOnce(&outlier::Judge) -> R) -> R {
        let with_target = |i: u32, g: &mut dyn FnMut(&Target)| {
            self.with_target(i, |t| g(t));
        };
        f(&outlier::Judge {
            zone,
            with_target: &with_target,
        })
    }

    /// Worker 0's look at the upstreams with `check_outlier`
    /// (`crate::ejections`).
    pub fn outlier_tick(&self, now: u64, starts: &mut Vec<u64>, log: *mut ngx_log_t) {
        let Some(zone) = self.zone.as_ref() else {
            return;
        };
        let checks: Vec<&UpstreamCheck> = self.sels.iter().map(|s| &*s.check).collect();
        self.judge(zone, |judge| judge.tick(&checks, now, starts, log));
    }

    /// The period worker 0's outlier timer needs, ms; `None` without
    /// `check_outlier`.
    pub fn outlier_period(&self) -> Option<u64> {
        outlier::period(self.sels.iter().map(|s| &*s.check))
    }

    /// Bring every upstream's fail-open state in line with its peers'
    /// health (at process start: the zone may come from a reload).
    pub fn settle_fail_open(&self, log: *mut ngx_log_t) {
        if let Some(zone) = &self.zone {
            for sel in &self.sels {
                sel.check.update_fail_open(zone, log);
            }
        }
    }

    /// For `vnswrr`, whose ring caches a verdict that outlives the request
    /// but not one for this request alone: whether the peer at `addr` is
    /// out by its state (`Some(true)`), held back by its `slow_start` ramp
    /// for this request (`Some(false)`), or open (`None`).
    #[inline]
    pub fn peer_verdict(&self, list: usize, addr: usize) -> Option<bool> {
        let view = self.list_view(list)?;
        let zone = self.zone.as_ref()?;
        let i = view.dense.get(addr).or_else(|| self.map.get(addr))? as usize;
        let slot = zone.slot(i)?;
        if slot.vetoed() {
            return Some(true);
        }
        if slot.up_since.load(Ordering::Relaxed) == 0 || !self.ramp_ready(i, slot) {
            return None;
        }
        let len = self.ramp_len.get(i).map_or(0, Cell::get);
        (len != 0 && self.turn_held(i, slot, len)).then_some(false)
    }

    /// What the hooks need of the list `list` (0: unknown, looked up by
    /// address alone); `None`: a list of an upstream without `check`.
    #[inline(always)]
    fn list_view(&self, list: usize) -> Option<&ListView> {
        if list == 0 {
            return Some(&ListView::UNKNOWN);
        }
        let (last, mut k) = self.last_list.get();
        if last != list {
            k = self.lists.get(list).map_or(0, |k| k + 1);
            self.last_list.set((list, k));
        }
        self.list_views.get(k.checked_sub(1)? as usize)
    }

    /// Must selection skip the peer at `addr`: marked down by its check, an
    /// operator or an ejection, or held back from this request by its
    /// `slow_start` ramp? Unknown peers (not checked, or created at run
    /// time by `resolve`) are never down.
    ///
    /// `list` is the rr peer list the balancer is walking (0 = unknown): a
    /// list of an upstream without `check` answers "not down" after one
    /// comparison, so a round robin over thousands of unchecked servers
    /// pays almost nothing per server for the hook.
    #[inline]
    pub fn peer_down(&self, list: usize, addr: usize) -> bool {
        let Some(view) = self.list_view(list) else {
            return false;
        };
        let Some(zone) = self.zone.as_ref() else {
            return false;
        };
        let i = match view.dense.get(addr).or_else(|| self.map.get(addr)) {
            Some(i) => i,
            // A resolve upstream's list: a resolved peer, or none of ours.
            None if view.value >= 2 => return self.resolved.down(view.value as usize - 2, addr),
            None => return false,
        };
        let Some(slot) = zone.slot(i as usize) else {
            return false;
        };
        if slot.vetoed() {
            return !self.drains
                || !slot.draining()
                || slot.vetoed_but_draining()
                || self.drain_bits.hook(addr, i);
        }
        slot.up_since.load(Ordering::Relaxed) != 0 && self.ramp_holds(i as usize, slot)
    }

    /// The hook's question for a peer whose return time is set: does its
    /// ramp hold this request back?
    #[cold]
    #[inline(never)]
    fn ramp_holds(&self, i: usize, slot: &Slot) -> bool {
        self.ramp_ready(i, slot) && self.held_back(i, slot)
    }

    /// For a peer whose return time is set: is a ramp active? One not yet
    /// noticed is worked out now (its upstreams get `ramp::Lazy`'s
    /// `peer.init`, this request a draw). Without `slow_start` the return
    /// time is cleared, so that the hook stops looking.
    fn ramp_ready(&self, i: usize, slot: &Slot) -> bool {
        if self
            .targets
            .get(i)
            .is_some_and(|t| t.check.conf.slow_start_ms == 0)
        {
            let since = slot.up_since.load(Ordering::Relaxed);
            let _ = slot
                .up_since
                .compare_exchange(since, 0, Ordering::AcqRel, Ordering::Relaxed);
            return false;
        }
        if !self.armed.get() {
            self.ramp_active(false);
        }
        self.ramp_until.get() != 0
    }

    /// Whether nginx has a drain of its own here (`crate::drain`).
    pub fn drains(&self) -> bool {
        self.drains
    }

    /// `slow_start`: whether the ramp of the peer with slot `i` keeps the
    /// request being balanced (its draw) off it.
    #[inline]
    fn held_back(&self, i: usize, slot: &Slot) -> bool {
        let len = self.ramp_len.get(i).map_or(0, Cell::get);
        if len == 0 {
            return false;
        }
        let since = slot.up_since.load(Ordering::Relaxed);
        since != 0 && {
            let (now, draw) = ramp::fast_request(self.fast);
            Progress::at(since, now, u64::from(len)).is_some_and(|p| !p.admits(draw))
        }
    }

    /// As [`Context::held_back`] for a balancer that gives a held-back
    /// turn to another draw (`Progress::admits_turn`).
    fn turn_held(&self, i: usize, slot: &Slot, len: u32) -> bool {
        let since = slot.up_since.load(Ordering::Relaxed);
        if since == 0 {
            return false;
        }
        let weight = self.targets.get(i).map_or(1, |t| t.peer.weight);
        let others = self.ramp_others.get(i).map_or(0, Cell::get);
        let (now, draw) = ramp::fast_request(self.fast);
        Progress::at(since, now, u64::from(len))
            .is_some_and(|p| !p.admits_turn(draw, weight, others))
    }

    /// Whether some peer of the context ramps now (after a state change,
    /// which peers may be held back is worked out again); puts `ramp::Lazy`
    /// upstreams' `peer.init` in front or takes it away. Asked by the
    /// module's `peer.init` when `crate::ramp::ramp_fast` says so, and by
    /// the hook when it meets a return time with no ramp active.
    #[inline(never)] // its own symbol: scripts/bench-vnswrr counts it
    pub fn ramp_active(&self, stock: bool) -> bool {
        let Some(zone) = self.zone.as_ref() else {
            return false;
        };
        let changes = zone.header().changes();
        let now = unix_ms();
        let until = self.ramp_until.get();
        let over = until != 0 && now >= until;
        if over && stock {
            // Every ramp is over; stock mode leaves each peer's bit as the
            // checks say.
            for sel in self.sels.iter().filter(|s| s.slow_start > 0) {
                self.ramp_flags(zone, sel);
            }
        }
        // After a change, or when the ramps are over (their return times
        // are cleared then, so that the hook stops looking).
        if over || self.ramp_seen.get() != changes {
            self.ramp_seen.set(changes);
            ramp::fast_seen(self.fast, changes);
            self.work_out_ramps(zone);
        }
        let until = self.ramp_until.get();
        ramp::fast_until(self.fast, until);
        let active = until > now;
        if self.armed.replace(active) != active {
            for l in &self.lazy {
                // SAFETY: the upstreams of this context's configuration;
                // this runs in the hook or in the module's `peer.init`,
                // before the balancer's own.
                unsafe { l.set(active) };
            }
        }
        if active {
            // The sequence's draw; a keyed balancer's comes in `ramp_draw`.
            ramp::fast_prepare(self.fast, now);
        }
        active
    }

    /// While a ramp is active ([`Context::ramp_active`], which drew from
    /// the worker's sequence), for a hash balancer or in stock mode: the
    /// request's draw from its hash key (`None`: the sequence's stays), and
    /// in stock mode the ramping peers' `down` bits for this request.
    #[inline(never)] // its own symbol: scripts/bench-vnswrr counts it
    pub fn ramp_draw(&self, srv: usize, key: Option<&[u8]>, stock: bool) {
        if let Some(key) = key {
            ramp::fast_set_draw(self.fast, core_ramp::key_draw(key));
        }
        if !stock {
            return;
        }
        let (Some(zone), Some(i)) = (self.zone.as_ref(), self.sel_map.get(srv)) else {
            return;
        };
        if let Some(sel) = self.sels.get(i as usize) {
            self.ramp_flags(zone, sel);
        }
    }

    /// Which peers a ramp may hold back: those of upstreams with
    /// `slow_start` where another peer is selectable; in stock mode, which
    /// peers ramp.
    fn work_out_ramps(&self, zone: &Zone) {
        let now = unix_ms();
        let mut until = 0;
        for sel in self.sels.iter().filter(|s| s.slow_start > 0) {
            let open: Vec<u32> = sel
                .peers
                .iter()
                .filter(|p| zone.slot(p.0 as usize).is_some_and(|s| !s.vetoed()))
                .map(|p| p.0)
                .collect();
            let weight = |i: u32| self.targets.get(i as usize).map_or(1, |t| t.peer.weight);
            let open_weight: u32 = open.iter().map(|&i| weight(i)).sum();
            let len = if open.len() >= 2 { sel.slow_start } else { 0 };
            let mut ramping = sel.ramping.borrow_mut();
            ramping.clear();
            for (k, p) in sel.peers.iter().enumerate() {
                if let Some(c) = self.ramp_len.get(p.0 as usize) {
                    c.set(len);
                }
                if let Some(c) = self.ramp_others.get(p.0 as usize) {
                    let own = if open.contains(&p.0) { weight(p.0) } else { 0 };
                    c.set(open_weight - own);
                }
                let since = zone
                    .slot(p.0 as usize)
                    .map_or(0, |s| s.up_since.load(Ordering::Relaxed));
                match Progress::at(since, now, u64::from(sel.slow_start)) {
                    // Held back only with another peer open; either way
                    // `until` covers it, so that its return time is
                    // cleared when it is over.
                    Some(p) => {
                        if len > 0 {
                            ramping.push(k);
                        }
                        until = until.max(now + u64::from(p.left_ms()));
                    }
                    // A ramp that is over: the hook need not look again
                    // (unless another return set it meanwhile).
                    None if since != 0 => {
                        if let Some(s) = zone.slot(p.0 as usize) {
                            let _ = s.up_since.compare_exchange(
                                since,
                                0,
                                Ordering::AcqRel,
                                Ordering::Relaxed,
                            );
                        }
                    }
                    None => {}
                }
            }
        }
        self.ramp_until.set(until);
    }

    /// Stock mode: the `down` bit of each ramping peer of `sel` says
    /// whether this request's draw is held back; a ramp that is over
    /// leaves the list with its bit as the checks say.
    fn ramp_flags(&self, zone: &Zone, sel: &Selection) {
        let Ok(mut ramping) = sel.ramping.try_borrow_mut() else {
            return;
        };
        if ramping.is_empty() {
            return;
        }
        let (now, draw) = (unix_ms(), ramp::fast_request(self.fast).1);
        ramping.retain(|&k| {
            let Some(&(slot, down, list)) = sel.peers.get(k) else {
                return false;
            };
            let Some(s) = zone.slot(slot as usize) else {
                return false;
            };
            let since = s.up_since.load(Ordering::Relaxed);
            let ramp = Progress::at(since, now, u64::from(sel.slow_start));
            let held = s.vetoed() || ramp.is_some_and(|p| !p.admits(draw));
            let lock = sel
                .locks
                .get(list as usize)
                .copied()
                .unwrap_or(core::ptr::null_mut());
            if !lock.is_null() {
                // SAFETY: the rwlock of a list in the upstream's zone.
                unsafe { ngx_rwlock_wlock(lock) };
            }
            // SAFETY: as in `apply`: the peer's `down` field, the module's
            // bit of it, under the list's write lock when it is shared.
            unsafe {
                *down = (*down & !DOWN_BIT) | (ngx_uint_t::from(held) * DOWN_BIT);
            }
            if !lock.is_null() {
                // SAFETY: locked above.
                unsafe { ngx_rwlock_unlock(lock) };
            }
            ramp.is_some()
        });
    }
}

impl Context {
    /// Bring the view of the upstream whose srv conf is `srv` up to date
    /// (before a selection: no list is locked).
    pub fn refresh_srv(&self, srv: usize) {
        if let Some(r) = self.resolve_index(srv) {
            self.resolved.refresh(r, false);
        }
    }

    /// Every target of the context: the configured peers', then the
    /// resolved addresses' (views brought up to date first).
    pub fn each_target(&self, mut f: impl FnMut(&Target)) {
        self.resolved.refresh_all(false);
        for t in &self.targets {
            f(t);
        }
        if let Ok(view) = self.resolved.view.try_borrow() {
            for d in view.targets.iter().flatten() {
                f(&d.target);
            }
        }
    }
}

/// Everything a worker knows.
#[derive(Default)]
pub struct Worker {
    pub http: Context,
    pub stream: Context,
    /// The rows that share a probe (`crate::sharing`).
    pub sharing: crate::sharing::Sharing,
}

impl Worker {
    pub fn context(&self, proto: Group) -> &Context {
        match proto {
            Group::Http => &self.http,
            Group::Stream => &self.stream,
        }
    }
}
