//! The shared zone's data model: a header and one fixed-size slot per
//! checked peer, made only of atomics and integers so that any process can
//! map it, and round recording and consistent reading on top.
//!
//! The module (src/shm.rs) allocates the zone and views its memory as these
//! types; everything that decides what a slot holds lives here, testable
//! without nginx. One writer at a time updates a slot's statistics (the
//! worker holding the round's lease); the status page and the selection
//! hooks read without locks.

use core::mem::size_of;
use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::collections::{HashMap, VecDeque};

use crate::health::{Health, Transition};
use crate::outlier::Counters;
use crate::reason::{Reason, REASONS};
use crate::status::{duration_bucket, DURATION_SLOTS};

/// "ngx_hck1": written first into a zone this module initialised.
pub const MAGIC: u64 = 0x6e67_785f_6863_6b31;
/// Bumped whenever the layout of [`Header`] or [`Slot`] changes.
pub const LAYOUT_VERSION: u32 = 7;

/// Zone header.
#[repr(C)]
pub struct Header {
    pub magic: u64,
    pub version: u32,
    /// Every slot: the configured peers' first, then the room for
    /// addresses of `resolve` servers (`nslots - nstatic`, each with a
    /// [`DynMeta`] after the slots).
    pub nslots: u32,
    /// Slots of configured peers, one per peer in configuration order.
    pub nstatic: u32,
    /// One [`Counters`] per slot after the room's metas when 1
    /// (`check_outlier` in some upstream of the context), none when 0.
    pub outliers: u32,
    pub _pad: u32,
    /// `check_log` lines not written (a full disk, a syslog server gone):
    /// the status page's `dropped_events`.
    pub dropped_events: AtomicU32,
    /// Configuration loads that created this zone's lineage: 1 at start.
    pub generation: AtomicU64,
    /// Bumped after every change of a peer's health or admin state: a
    /// worker that applies state to nginx's own peers (stock mode) compares
    /// it with what it applied last.
    pub changes: AtomicU64,
}

impl Header {
    /// Publish that some peer's health or admin state changed.
    #[inline]
    pub fn note_change(&self) {
        self.changes.fetch_add(1, Ordering::Release);
    }

    /// Count a `check_log` line that could not be written.
    #[inline]
    pub fn drop_event(&self) {
        self.dropped_events.fetch_add(1, Ordering::Relaxed);
    }

    /// The change counter, to compare with the value last applied.
    #[inline]
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }
}

/// `Slot::admin` bits.
pub mod admin {
    /// Kept out of selection by an operator until enabled again.
    pub const DISABLED: u32 = 1;
    /// Ejected by `check_outlier` until its ejection time is over (not
    /// saved in the state file).
    pub const EJECTED: u32 = 2;
    /// `check ... mandatory`: its state is unknown; it takes no traffic
    /// and its first round decides (not saved in the state file).
    pub const CHECKING: u32 = 4;
    /// Its upstream is failing open (`check_fail_open`): not an operator's
    /// bit, but kept in this word so that selection reads one word.
    pub const FAIL_OPEN: u32 = 8;
    /// Drained by an operator: no new sessions until enabled.
    pub const DRAINING: u32 = 16;
}

/// How a peer seen for the first time starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Initial {
    Up,
    /// `default_down=true`: down until `rise` rounds pass.
    Down,
    /// `mandatory`: `checking` until its first round.
    Checking,
}

impl Initial {
    /// A check's: `mandatory` first, then `default_down`.
    pub fn of(default_down: bool, mandatory: bool) -> Initial {
        match (mandatory, default_down) {
            (true, _) => Initial::Checking,
            (false, true) => Initial::Down,
            (false, false) => Initial::Up,
        }
    }

    /// Whether the peer starts out of selection.
    pub fn down(self) -> bool {
        self != Initial::Up
    }
}

impl From<bool> for Initial {
    /// `default_down` alone.
    fn from(default_down: bool) -> Initial {
        Initial::of(default_down, false)
    }
}

/// Per-peer state. `seq` is a sequence lock for readers: odd while a
/// writer updates the statistics.
#[repr(C)]
#[derive(Default)]
pub struct Slot {
    /// Identity of the peer (`identity::identity_hash`), for reload matching.
    pub identity: AtomicU64,
    pub seq: AtomicU32,
    /// 1 = up, 0 = down. Read by the selection hooks.
    pub up: AtomicU32,
    pub rise: AtomicU32,
    pub fall: AtomicU32,
    /// Round claim: `schedule::lease`, 0 = free.
    pub lease: AtomicU64,
    /// Monotonic ms of the next round's lattice point; it is due at that
    /// point plus its jitter delay (`schedule::due_at`). 0 = none yet.
    pub next_due: AtomicU64,
    /// Monotonic ms at which the last round started.
    pub last_start: AtomicU64,
    pub checks: AtomicU64,
    pub fails_total: AtomicU64,
    /// Delay statistics of successful rounds, ms; `u32::MAX` = none yet.
    pub last_delay: AtomicU32,
    pub min_delay: AtomicU32,
    pub max_delay: AtomicU32,
    /// `Reason::stored` of the last failure, 0 = none.
    pub last_reason: AtomicU32,
    pub delay_sum: AtomicU64,
    /// Unix ms of the last up/down flip, 0 = never.
    pub last_change: AtomicU64,
    /// Unix ms since the peer is down, 0 = up.
    pub down_since: AtomicU64,
    pub duration_sum: AtomicU64,
    /// Duration of the last round, ms (saturating), 0 before the first.
    pub last_duration: AtomicU32,
    /// The last status codes seen: the HTTP status in the low 16 bits
    /// (0 = none), the `grpc-status` plus one in the high 16 bits (0 =
    /// none; codes past 65534 are kept as 65534). One word, so that a
    /// peer's slot stays within 256 bytes.
    pub codes: AtomicU32,
    /// `admin::*` bits set by an operator.
    pub admin: AtomicU32,
    /// Consecutive proxied attempts nginx reported as failed (`passive_fall`).
    pub passive: AtomicU32,
    /// The low 32 bits of the unix ms at which the peer last returned to
    /// service (down -> up by its checks, an operator's `up` or `enable`,
    /// the end of an ejection), 0 = not since it was configured: the start
    /// of its `slow_start` ramp ([`crate::ramp`]).
    pub up_since: AtomicU32,
    /// Proxied connections ended because the peer went down
    /// (`check_shutdown_sessions`).
    pub sessions_shut: AtomicU32,
    /// Open proxied connections to the peer, as the workers last counted
    /// them (kept while it is draining).
    pub conns: AtomicU32,
    /// TLS checks: rounds whose handshake resumed a session.
    pub tls_resumed: AtomicU32,
    pub failures: [AtomicU32; REASONS],
    pub duration_buckets: [AtomicU32; DURATION_SLOTS],
}

/// Bytes of shared memory per checked peer.
pub const SLOT_SIZE: usize = size_of::<Slot>();
// A peer costs its slot and a few bytes of the zone's other tables: the
// slot stays within 248 so that a peer stays within 256 bytes
// (docs/directives.md, check_shm_size).
const _: () = assert!(SLOT_SIZE <= 248, "a peer's slot must stay within 248 bytes");

/// Who holds a slot of the room for resolved addresses (the slot at the
/// same position of that room).
#[repr(C)]
#[derive(Default)]
pub struct DynMeta {
    /// The holder's upstream (`identity::upstream_tag`); 0 = free.
    pub tag: AtomicU64,
    /// Monotonic ms when it was last freed, 0 = never (a freed slot is not
    /// handed out again until rounds that were in flight for it are over).
    pub freed_at: AtomicU64,
}

/// Bytes of zone data for `nslots` slots of which the last `ndyn` are
/// room for resolved addresses: header, slots, then one [`DynMeta`] per
/// slot of that room, then (with `outliers`) one [`Counters`] per slot.
pub const fn data_bytes(nslots: usize, ndyn: usize, outliers: bool) -> usize {
    let n = if nslots == 0 { 1 } else { nslots };
    let counters = if outliers {
        n * size_of::<Counters>()
    } else {
        0
    };
    size_of::<Header>() + n * SLOT_SIZE + ndyn * size_of::<DynMeta>() + counters
}

/// Bytes of shared memory `check_outlier` adds per peer.
pub const OUTLIER_SIZE: usize = size_of::<Counters>();

/// What a round found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoundResult {
    /// Healthy, with the delay to report (ms).
    Up { delay_ms: u64 },
    /// Failed, and why.
    Down(Reason),
}

/// A state change a round caused, for the log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flip {
    pub transition: Transition,
    /// The peer's health after the round.
    pub health: Health,
    /// The round was the first of a `checking` peer (`mandatory`).
    pub first: bool,
}

/// A consistent copy of one slot's statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub up: bool,
    pub rise: u32,
    pub fall: u32,
    pub checks: u64,
    pub fails_total: u64,
    pub last_delay: u32,
    pub min_delay: u32,
    pub max_delay: u32,
    pub last_reason: u32,
    pub delay_sum: u64,
    /// Rounds that passed (each round passes or fails).
    pub delay_count: u64,
    pub last_change: u64,
    pub down_since: u64,
    pub duration_sum: u64,
    pub last_duration: u32,
    pub http_status: u32,
    pub tls_resumed: u64,
    /// The last `grpc-status` plus one, 0 = none.
    pub grpc_status: u32,
    /// `admin::*` bits.
    pub admin: u32,
    /// 1 while the peer's upstream fails open.
    pub fail_open: u32,
    pub up_since: u32,
    pub sessions_shut: u32,
    pub conns: u32,
    pub failures: [u64; REASONS],
    pub buckets: [u64; DURATION_SLOTS],
}

impl Snapshot {
    /// The last failure's reason, if any.
    pub fn last_reason(&self) -> Option<Reason> {
        Reason::from_stored(self.last_reason)
    }

    /// Whether an operator disabled the peer.
    pub fn disabled(&self) -> bool {
        self.admin & admin::DISABLED != 0
    }

    /// The last HTTP status code seen, if any.
    pub fn http_status(&self) -> Option<u16> {
        u16::try_from(self.http_status).ok().filter(|&s| s != 0)
    }

    /// The last `grpc-status` seen, if any.
    pub fn grpc_status(&self) -> Option<u32> {
        self.grpc_status.checked_sub(1)
    }
}

/// Calls `$m!` with the slot fields that make up a peer's state and
/// statistics (what a reload carries over; not identity, lease, schedule
/// or the passive count), arrays aside.
macro_rules! state_fields {
    ($m:ident) => {
        $m!(
            up,
            rise,
            fall,
            checks,
            fails_total,
            last_delay,
            min_delay,
            max_delay,
            last_reason,
            delay_sum,
            last_change,
            down_since,
            duration_sum,
            last_duration,
            codes,
            admin,
            up_since,
            sessions_shut,
            tls_resumed
        )
    };
}

/// Tries of [`Slot::snapshot`] before it takes a possibly torn copy.
const READ_TRIES: usize = 64;

impl Slot {
    /// A slot for a peer seen for the first time: no delays yet, up,
    /// down or checking as `initial` says.
    pub fn init_new(&self, identity: u64, initial: impl Into<Initial>) {
        let initial = initial.into();
        self.init_delays(identity);
        self.up.store(u32::from(!initial.down()), Ordering::Relaxed);
        if initial == Initial::Checking {
            self.admin.fetch_or(admin::CHECKING, Ordering::Relaxed);
        }
    }

    /// Whether its first round is still to decide (`mandatory`).
    #[inline]
    pub fn checking(&self) -> bool {
        self.admin.load(Ordering::Relaxed) & admin::CHECKING != 0
    }

    /// Every field back to zero (a slot of the room for resolved
    /// addresses, handed to a new address).
    pub fn reset(&self) {
        let r = Ordering::Relaxed;
        macro_rules! zero {
            ($($f:ident),*) => { $( self.$f.store(0, r); )* };
        }
        zero!(identity, lease, next_due, last_start, passive);
        state_fields!(zero);
        for a in &self.failures {
            a.store(0, r);
        }
        for a in &self.duration_buckets {
            a.store(0, r);
        }
        // An even count, past any reader's copy.
        let seq = self.seq.load(r);
        self.seq.store((seq | 1).wrapping_add(1), Ordering::Release);
    }

    /// A slot that carries over `from`'s state (same peer, new zone).
    pub fn init_inherited(&self, identity: u64, from: &Slot) {
        self.init_delays(identity);
        self.copy_state(from);
    }

    fn init_delays(&self, identity: u64) {
        let r = Ordering::Relaxed;
        self.identity.store(identity, r);
        self.last_delay.store(u32::MAX, r);
        self.min_delay.store(u32::MAX, r);
        self.max_delay.store(u32::MAX, r);
    }

    /// Start an update of the statistics. The counter is made odd whatever
    /// it was, so a writer that died mid-update cannot invert its parity.
    pub fn write_begin(&self) -> u32 {
        let odd = self.seq.load(Ordering::Relaxed) | 1;
        self.seq.store(odd, Ordering::Relaxed);
        fence(Ordering::Release);
        odd
    }

    /// End the update started by `write_begin`.
    pub fn write_end(&self, odd: u32) {
        self.seq.store(odd.wrapping_add(1), Ordering::Release);
    }

    /// Whether selection must skip this peer: disabled by an operator, or
    /// down by its check or ejected while its upstream is not failing open.
    #[inline]
    pub fn vetoed(&self) -> bool {
        let r = Ordering::Relaxed;
        let admin = self.admin.load(r);
        admin & (admin::DISABLED | admin::DRAINING) != 0
            || ((self.up.load(r) == 0 || admin & admin::EJECTED != 0)
                && admin & admin::FAIL_OPEN == 0)
    }

    /// [`Slot::vetoed`] but for an operator's drain: whether selection
    /// must skip the peer even for a `sticky` session.
    #[inline]
    pub fn vetoed_but_draining(&self) -> bool {
        let r = Ordering::Relaxed;
        let admin = self.admin.load(r);
        admin & admin::DISABLED != 0
            || ((self.up.load(r) == 0 || admin & admin::EJECTED != 0)
                && admin & admin::FAIL_OPEN == 0)
    }

    /// Whether `check_outlier` ejected the peer.
    #[inline]
    pub fn ejected(&self) -> bool {
        self.admin.load(Ordering::Relaxed) & admin::EJECTED != 0
    }

    /// Up by its check, not ejected and not draining: what fail-open
    /// counts.
    #[inline]
    pub fn serving(&self) -> bool {
        let admin = self.admin.load(Ordering::Relaxed);
        self.up.load(Ordering::Relaxed) != 0 && admin & (admin::EJECTED | admin::DRAINING) == 0
    }

    /// Set or clear `admin::EJECTED`; returns whether it changed.
    pub fn set_ejected(&self, ejected: bool) -> bool {
        self.set_bit(admin::EJECTED, ejected)
    }

    /// Set or clear one `admin::*` bit; returns whether it changed.
    fn set_bit(&self, bit: u32, on: bool) -> bool {
        let before = if on {
            self.admin.fetch_or(bit, Ordering::AcqRel)
        } else {
            self.admin.fetch_and(!bit, Ordering::AcqRel)
        };
        (before & bit != 0) != on
    }

    /// Whether its upstream is failing open (`check_fail_open`).
    #[inline]
    pub fn fail_open(&self) -> bool {
        self.admin.load(Ordering::Acquire) & admin::FAIL_OPEN != 0
    }

    /// Set or clear `admin::FAIL_OPEN`; returns whether it changed.
    pub fn set_fail_open(&self, on: bool) -> bool {
        self.set_bit(admin::FAIL_OPEN, on)
    }

    /// Whether an operator drained the peer.
    #[inline]
    pub fn draining(&self) -> bool {
        self.admin.load(Ordering::Relaxed) & admin::DRAINING != 0
    }

    /// Set or clear `admin::DRAINING`; returns whether it changed.
    pub fn set_draining(&self, on: bool) -> bool {
        self.set_bit(admin::DRAINING, on)
    }

    /// The peer returned to service now: its `slow_start` ramp starts.
    pub fn returned(&self, now_unix_ms: u64) {
        self.up_since
            .store(crate::ramp::stamp(now_unix_ms), Ordering::Release);
    }

    /// The peer's health as stored.
    pub fn health(&self) -> Health {
        let r = Ordering::Relaxed;
        Health {
            up: self.up.load(r) != 0,
            rise: self.rise.load(r),
            fall: self.fall.load(r),
        }
    }

    /// Record one round: counters, delays, the duration histogram and the
    /// rise/fall state. `duration_ms` is the whole round, `now_unix_ms` the
    /// wall clock for the time of a flip, `http_status` the status code the
    /// round saw (kept until a later round sees another). Returns the flip,
    /// if the round caused one.
    pub fn record(
        &self,
        result: RoundResult,
        duration_ms: u64,
        (rise, fall): (u32, u32),
        now_unix_ms: u64,
        http_status: Option<u16>,
    ) -> Option<Flip> {
        let r = Ordering::Relaxed;
        let mut h = self.health();
        // `mandatory`: the first round decides (a pass is up at once).
        let checking = self.checking();
        let rise = if checking { 1 } else { rise };
        let ok = matches!(result, RoundResult::Up { .. });
        let mut transition = h.record(ok, rise, fall);
        if checking {
            self.admin.fetch_and(!admin::CHECKING, Ordering::AcqRel);
            // Known down now: a flip from `checking`.
            if !ok && transition.is_none() {
                transition = Some(Transition::WentDown);
            }
        }

        let seq = self.write_begin();
        self.checks.fetch_add(1, r);
        match result {
            RoundResult::Up { delay_ms } => {
                let d = delay_ms.min(u64::from(u32::MAX - 1)) as u32;
                self.last_delay.store(d, r);
                let min = self.min_delay.load(r);
                if min == u32::MAX || d < min {
                    self.min_delay.store(d, r);
                }
                let max = self.max_delay.load(r);
                if max == u32::MAX || d > max {
                    self.max_delay.store(d, r);
                }
                self.delay_sum.fetch_add(u64::from(d), r);
            }
            RoundResult::Down(reason) => {
                self.fails_total.fetch_add(1, r);
                self.failures[reason.index()].fetch_add(1, r);
                self.last_reason.store(reason.stored(), r);
            }
        }
        if let Some(b) = self.duration_buckets.get(duration_bucket(duration_ms)) {
            b.fetch_add(1, r);
        }
        self.duration_sum.fetch_add(duration_ms, r);
        self.last_duration
            .store(duration_ms.min(u64::from(u32::MAX)) as u32, r);
        if let Some(code) = http_status {
            let codes = self.codes.load(r);
            self.codes.store((codes & !0xffff) | u32::from(code), r);
        }
        self.rise.store(h.rise, r);
        self.fall.store(h.fall, r);
        if transition.is_some() {
            // Back in service after it was down (not its first verdict, nor
            // the way up from `default_down` at start): a ramp starts.
            if h.up && !checking && self.last_change.load(r) != 0 {
                self.returned(now_unix_ms);
            }
            // A peer that comes back starts its passive count afresh.
            self.passive.store(0, r);
            self.up.store(u32::from(h.up), Ordering::Release);
            self.last_change.store(now_unix_ms, r);
            self.down_since.store(if h.up { 0 } else { now_unix_ms }, r);
        }
        self.write_end(seq);
        transition.map(|transition| Flip {
            transition,
            health: h,
            first: checking,
        })
    }

    /// A grpc round got `code` as its `grpc-status` (kept until a later
    /// round gets another; `u32::MAX` is not stored).
    pub fn record_grpc_status(&self, code: u32) {
        let seq = self.write_begin();
        let r = Ordering::Relaxed;
        let high = code.min(0xfffe) + 1;
        self.codes
            .store((self.codes.load(r) & 0xffff) | (high << 16), r);
        self.write_end(seq);
    }

    /// A proxied attempt to this peer failed (`passive_fall`, across all
    /// workers). The `fall`th failure in a row takes an up peer down with
    /// reason `passive`; only check rounds bring it back. Returns the flip
    /// to exactly one caller, however many fail at once.
    pub fn passive_failure(&self, fall: u32, now_unix_ms: u64) -> Option<Flip> {
        let r = Ordering::Relaxed;
        let n = self.passive.fetch_add(1, r).saturating_add(1);
        if n < fall || self.up.load(r) == 0 {
            return None;
        }
        // One caller wins the flip; the others see it down already.
        self.up.compare_exchange(1, 0, Ordering::AcqRel, r).ok()?;
        self.passive.store(0, r);
        let seq = self.write_begin();
        self.rise.store(0, r);
        self.last_change.store(now_unix_ms, r);
        self.down_since.store(now_unix_ms, r);
        self.last_reason.store(Reason::Passive.stored(), r);
        self.failures[Reason::Passive.index()].fetch_add(1, r);
        self.write_end(seq);
        Some(Flip {
            transition: Transition::WentDown,
            health: Health {
                up: false,
                rise: 0,
                fall: self.fall.load(r),
            },
            first: false,
        })
    }

    /// A proxied attempt to this peer succeeded: the passive count starts
    /// again (no write when it is 0 already, the common case).
    #[inline]
    pub fn passive_success(&self) {
        if self.passive.load(Ordering::Relaxed) != 0 {
            self.passive.store(0, Ordering::Relaxed);
        }
    }

    /// Set the health state now (an operator's `down` or `up`), as if
    /// `fall` or `rise` had just been reached: the consecutive counts start
    /// over, and a change is timed as a round's flip is (`last_change`,
    /// `down_since`). Later rounds go on from there and may flip it back.
    /// Returns whether the state changed.
    ///
    /// A round recorded at the same moment by the worker holding the
    /// peer's lease may overwrite the counts: the last writer wins, as
    /// between two rounds.
    pub fn set_health(&self, up: bool, now_unix_ms: u64) -> bool {
        let r = Ordering::Relaxed;
        // An operator's word decides as a first round would.
        self.admin.fetch_and(!admin::CHECKING, Ordering::AcqRel);
        let seq = self.write_begin();
        let changed = (self.up.load(r) != 0) != up;
        self.rise.store(0, r);
        self.fall.store(0, r);
        if changed {
            if up {
                self.returned(now_unix_ms);
            }
            self.up.store(u32::from(up), Ordering::Release);
            self.last_change.store(now_unix_ms, r);
            self.down_since.store(if up { 0 } else { now_unix_ms }, r);
        }
        self.write_end(seq);
        changed
    }

    /// Take a saved state (`check_state_file`) into a slot that
    /// [`fill`] just made new: health, admin bits and change times as
    /// saved, the consecutive counts from zero.
    pub fn restore(&self, saved: &crate::statefile::Entry) {
        let r = Ordering::Relaxed;
        self.up.store(u32::from(saved.up), r);
        self.admin.store(saved.admin & admin::DISABLED, r);
        self.last_change.store(saved.last_change, r);
        self.down_since
            .store(if saved.up { 0 } else { saved.down_since.max(1) }, r);
        self.rise.store(0, r);
        self.fall.store(0, r);
    }

    /// Set or clear `admin::DISABLED`; returns whether it changed.
    pub fn set_disabled(&self, disabled: bool) -> bool {
        self.set_bit(admin::DISABLED, disabled)
    }

    /// Whether an operator disabled the peer.
    pub fn disabled(&self) -> bool {
        self.admin.load(Ordering::Relaxed) & admin::DISABLED != 0
    }

    /// A consistent copy of the statistics. A writer that died mid-update
    /// leaves `seq` odd for good: after a few tries the copy is taken as it
    /// is rather than spinning.
    pub fn snapshot(&self) -> Snapshot {
        let r = Ordering::Relaxed;
        let mut snap = Snapshot::default();
        for _ in 0..READ_TRIES {
            let before = self.seq.load(Ordering::Acquire);
            snap = Snapshot {
                up: self.up.load(r) != 0,
                rise: self.rise.load(r),
                fall: self.fall.load(r),
                checks: self.checks.load(r),
                fails_total: self.fails_total.load(r),
                last_delay: self.last_delay.load(r),
                min_delay: self.min_delay.load(r),
                max_delay: self.max_delay.load(r),
                last_reason: self.last_reason.load(r),
                delay_sum: self.delay_sum.load(r),
                delay_count: 0,
                last_change: self.last_change.load(r),
                down_since: self.down_since.load(r),
                duration_sum: self.duration_sum.load(r),
                last_duration: self.last_duration.load(r),
                http_status: self.codes.load(r) & 0xffff,
                tls_resumed: u64::from(self.tls_resumed.load(r)),
                grpc_status: self.codes.load(r) >> 16,
                admin: self.admin.load(r),
                fail_open: u32::from(self.admin.load(r) & admin::FAIL_OPEN != 0),
                up_since: self.up_since.load(r),
                sessions_shut: self.sessions_shut.load(r),
                conns: self.conns.load(r),
                failures: core::array::from_fn(|i| u64::from(self.failures[i].load(r))),
                buckets: core::array::from_fn(|i| u64::from(self.duration_buckets[i].load(r))),
            };
            fence(Ordering::Acquire);
            if before & 1 == 0 && self.seq.load(Ordering::Relaxed) == before {
                break;
            }
        }
        snap.delay_count = snap.checks.saturating_sub(snap.fails_total);
        snap
    }

    /// Copy the state and statistics (not identity, lease or schedule).
    fn copy_state(&self, from: &Slot) {
        macro_rules! copy {
            ($($f:ident),*) => {
                $( self.$f.store(from.$f.load(Ordering::Relaxed), Ordering::Relaxed); )*
            };
        }
        state_fields!(copy);
        for (a, b) in from.failures.iter().zip(&self.failures) {
            b.store(a.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        for (a, b) in from.duration_buckets.iter().zip(&self.duration_buckets) {
            b.store(a.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

/// Fill the slots of a fresh zone: each takes over the state of the old
/// slot with its identity (a repeated identity, the same server listed
/// twice, matches its occurrences in order) or starts new.
/// `identities[i]` and `initial[i]` describe `new[i]`. Returns, for each
/// new slot, the index of the old slot it took over.
pub fn fill(
    new: &[Slot],
    old: &[Slot],
    identities: &[u64],
    initial: &[Initial],
) -> Vec<Option<usize>> {
    let mut by_identity: HashMap<u64, VecDeque<usize>> = HashMap::new();
    for (j, s) in old.iter().enumerate() {
        let id = s.identity.load(Ordering::Relaxed);
        by_identity.entry(id).or_default().push_back(j);
    }
    let mut from = Vec::with_capacity(new.len());
    for (i, slot) in new.iter().enumerate() {
        let id = identities.get(i).copied().unwrap_or(0);
        let prev = by_identity.get_mut(&id).and_then(VecDeque::pop_front);
        match prev.and_then(|j| old.get(j)) {
            Some(prev) => slot.init_inherited(id, prev),
            None => slot.init_new(id, initial.get(i).copied().unwrap_or(Initial::Up)),
        }
        from.push(prev);
    }
    from
}

#[cfg(test)]
mod tests;
