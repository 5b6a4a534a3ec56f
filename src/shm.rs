//! The shared zone: one per context (http, stream), holding a header and one
//! fixed-size slot per checked peer.
//!
//! Only plain data lives here: atomics and integers, no pointers. Every
//! field is an atomic so that workers, the status page and the selection
//! hooks read it without locks; a dead worker can never leave a lock held.
//!
//! The zone is created with `noreuse`, so every configuration load maps a
//! fresh zone and `init` receives the previous zone's data: state is carried
//! across reloads by peer identity, whatever the new size or peer order.

use core::ffi::c_void;
use core::mem::size_of;
use core::ptr::{self, NonNull};
use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::collections::{HashMap, VecDeque};

use ngx::ffi::{ngx_int_t, ngx_shm_zone_t, ngx_slab_alloc, ngx_slab_pool_t, NGX_ERROR, NGX_OK};

const MAGIC: u64 = 0x6e67_785f_6863_6b31; // "ngx_hck1"
const LAYOUT_VERSION: u32 = 1;

/// Number of histogram buckets for check durations (the last is +Inf).
pub const DURATION_BUCKETS: usize = 13;
/// Failure reasons counted per peer; `Slot::last_reason` stores index + 1.
pub const REASON_NAMES: [&str; 6] = [
    "refused",
    "timeout",
    "reset",
    "closed",
    "icmp-unreachable",
    "error",
];
const REASONS: usize = REASON_NAMES.len();

/// Zone header.
#[repr(C)]
pub struct Header {
    pub magic: u64,
    pub version: u32,
    pub nslots: u32,
    /// Configuration loads that created this zone's lineage: 1 at start.
    pub generation: AtomicU64,
}

/// Per-peer state. Written by the worker running the peer's round, read by
/// everyone. `seq` is a sequence lock for the status page: odd while a
/// writer updates the statistics.
#[repr(C)]
pub struct Slot {
    /// Identity of the peer (see `identity_hash`), for reload matching.
    pub identity: AtomicU64,
    pub seq: AtomicU32,
    /// 1 = up, 0 = down. Read by the selection hooks.
    pub up: AtomicU32,
    pub rise: AtomicU32,
    pub fall: AtomicU32,
    /// Round claim: `(worker slot + 1) << 48 | expiry (monotonic ms)`, 0 = free.
    pub lease: AtomicU64,
    /// Monotonic ms at which the next round is due.
    pub next_due: AtomicU64,
    /// Monotonic ms at which the last round started.
    pub last_start: AtomicU64,
    pub checks: AtomicU64,
    pub fails_total: AtomicU64,
    /// Delay statistics of successful rounds, ms; `u32::MAX` = none yet.
    pub last_delay: AtomicU32,
    pub min_delay: AtomicU32,
    pub max_delay: AtomicU32,
    pub last_reason: AtomicU32,
    pub delay_sum: AtomicU64,
    pub delay_count: AtomicU64,
    /// Unix ms of the last up/down flip, 0 = never.
    pub last_change: AtomicU64,
    /// Unix ms since the peer is down, 0 = up.
    pub down_since: AtomicU64,
    pub duration_sum: AtomicU64,
    pub failures: [AtomicU32; REASONS],
    pub duration_buckets: [AtomicU32; DURATION_BUCKETS],
}

impl Slot {
    /// Start an update of the statistics (one writer at a time: the
    /// worker holding the round's lease). The counter is made odd whatever
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
}

/// Bytes of shared memory per checked peer.
pub const SLOT_SIZE: usize = size_of::<Slot>();
const _: () = assert!(SLOT_SIZE <= 256, "a peer's slot must stay within 256 bytes");

/// Bytes of zone memory `nslots` peers need, slab bookkeeping included,
/// rounded up to whole pages.
pub fn required_size(nslots: usize, page: usize) -> usize {
    let data = size_of::<Header>() + nslots.max(1) * SLOT_SIZE;
    let data_pages = data.div_ceil(page);
    // ngx_slab_init: the pool header and per-size statistics, one page
    // descriptor per page, and up to one page lost to alignment.
    let bookkeeping = size_of::<ngx_slab_pool_t>() + 64 * 32;
    let per_page = size_of::<ngx::ffi::ngx_slab_page_t>();
    let pages = data_pages + 2;
    let total = bookkeeping + pages * (page + per_page) + page;
    total.div_ceil(page) * page
}

/// A view of a zone's data.
#[derive(Clone, Copy)]
pub struct Zone {
    header: NonNull<Header>,
}

impl Zone {
    /// The zone's data, if it was initialised by this module.
    ///
    /// # Safety
    /// `zone` must be a zone registered by this module.
    pub unsafe fn from_shm_zone(zone: *const ngx_shm_zone_t) -> Option<Self> {
        // SAFETY: `data` is either NULL or what `init_zone` stored.
        let data = unsafe { zone.as_ref()?.data };
        let header = NonNull::new(data.cast::<Header>())?;
        // SAFETY: `init_zone` wrote a whole header there.
        let h = unsafe { header.as_ref() };
        (h.magic == MAGIC && h.version == LAYOUT_VERSION).then_some(Self { header })
    }

    pub fn header(&self) -> &Header {
        // SAFETY: checked in `from_shm_zone`; shared memory outlives workers.
        unsafe { self.header.as_ref() }
    }

    pub fn slots(&self) -> &[Slot] {
        let n = self.header().nslots as usize;
        // SAFETY: `init_zone` allocated `nslots` slots right after the header.
        unsafe {
            let first = self.header.as_ptr().add(1).cast::<Slot>();
            core::slice::from_raw_parts(first, n)
        }
    }

    pub fn slot(&self, i: usize) -> Option<&Slot> {
        self.slots().get(i)
    }
}

/// What the module needs to fill a fresh zone: per-slot identity and
/// initial state, computed at configuration time.
pub struct ZonePlan {
    pub identities: Vec<u64>,
    pub default_down: Vec<bool>,
}

/// `ngx_shm_zone_t.init`: create the header and slots in a fresh zone and
/// carry over the state of peers whose identity existed in `old`.
///
/// # Safety
/// Called by nginx with a zone registered by this module; `zone->data`
/// holds the `ZonePlan` (allocated in the configuration pool).
pub unsafe extern "C" fn init_zone(zone: *mut ngx_shm_zone_t, old: *mut c_void) -> ngx_int_t {
    // SAFETY: nginx passes a valid zone; see the function's contract.
    let zone = unsafe { &mut *zone };
    let plan = zone.data.cast::<ZonePlan>();
    // SAFETY: `register_zone` stored a pool-allocated plan in `data`.
    let Some(plan) = (unsafe { plan.as_ref() }) else {
        return NGX_ERROR as ngx_int_t;
    };
    let shpool = zone.shm.addr.cast::<ngx_slab_pool_t>();
    let n = plan.identities.len();
    let bytes = size_of::<Header>() + n.max(1) * SLOT_SIZE;
    // SAFETY: nginx initialised the slab pool at the start of the zone.
    let mem = unsafe { ngx_slab_alloc(shpool, bytes) };
    if mem.is_null() {
        return NGX_ERROR as ngx_int_t;
    }
    // SAFETY: `mem` is `bytes` bytes of fresh shared memory; all-zero bytes
    // are a valid value for every atomic and integer of the layout.
    unsafe { ptr::write_bytes(mem.cast::<u8>(), 0, bytes) };
    let header = mem.cast::<Header>();
    // SAFETY: just allocated and zeroed.
    let h = unsafe { &mut *header };
    h.magic = MAGIC;
    h.version = LAYOUT_VERSION;
    h.nslots = n as u32;
    let new = Zone {
        // SAFETY: not NULL (checked above).
        header: unsafe { NonNull::new_unchecked(header) },
    };
    // nginx 1.28 hands a `noreuse` zone the old zone's data; 1.26 does
    // not: find it by name among the running cycle's zones.
    // SAFETY: during a reload `ngx_cycle` is still the running cycle.
    let old = if old.is_null() {
        unsafe { running_zone_data(&zone.shm.name) }
    } else {
        old
    };
    let old = if old.is_null() {
        None
    } else {
        // SAFETY: `old` is the previous zone's `data`, still mapped while the
        // new cycle initialises; `from_shm_zone` validates its magic.
        let fake = ngx_shm_zone_t {
            data: old,
            // SAFETY: only `data` is read.
            ..unsafe { core::mem::zeroed() }
        };
        unsafe { Zone::from_shm_zone(&fake) }
    };
    // One generation for the whole configuration: both contexts' zones of
    // the running cycle count, so http and stream always agree.
    // SAFETY: during a reload `ngx_cycle` is still the running cycle.
    let previous = unsafe { previous_generation() };
    let generation = old
        .map_or(0, |o| o.header().generation.load(Ordering::Acquire))
        .max(previous)
        + 1;
    h.generation.store(generation, Ordering::Release);

    // Old slots by identity; a repeated identity (the same server listed
    // twice) matches its occurrences in order.
    let mut by_identity: HashMap<u64, VecDeque<&Slot>> = HashMap::new();
    for s in old.iter().flat_map(|o| o.slots()) {
        let id = s.identity.load(Ordering::Relaxed);
        by_identity.entry(id).or_default().push_back(s);
    }
    for (i, slot) in new.slots().iter().enumerate() {
        let id = plan.identities[i];
        slot.identity.store(id, Ordering::Relaxed);
        slot.last_delay.store(u32::MAX, Ordering::Relaxed);
        slot.min_delay.store(u32::MAX, Ordering::Relaxed);
        slot.max_delay.store(u32::MAX, Ordering::Relaxed);
        let inherited = by_identity.get_mut(&id).and_then(VecDeque::pop_front);
        match inherited {
            Some(prev) => copy_state(prev, slot),
            None => {
                let up = !plan.default_down[i];
                slot.up.store(up as u32, Ordering::Relaxed);
            }
        }
    }
    zone.data = mem;
    NGX_OK as ngx_int_t
}

/// Zone names of the module (http and stream).
pub const ZONE_NAMES: [&str; 2] = ["ngx_healthcheck_http", "ngx_healthcheck_stream"];

/// The module's zones of the running cycle (none at first start, where
/// `ngx_cycle` is nginx's empty init cycle), with their names.
///
/// # Safety
/// Master process during configuration loading.
unsafe fn running_zones() -> Vec<(&'static [u8], Zone)> {
    let mut out = Vec::new();
    // SAFETY: ngx_cycle is valid; its shared_memory list is a valid (maybe
    // empty) ngx_list_t of ngx_shm_zone_t, alive while the cycle runs.
    unsafe {
        let Some(cycle) = (*ptr::addr_of!(ngx::ffi::ngx_cycle)).as_ref() else {
            return out;
        };
        let mut part: *const ngx::ffi::ngx_list_part_t = &cycle.shared_memory.part;
        while let Some(p) = part.as_ref() {
            if !p.elts.is_null() {
                let zones = core::slice::from_raw_parts(p.elts.cast::<ngx_shm_zone_t>(), p.nelts);
                for z in zones {
                    let name = crate::ffi::str_bytes(&z.shm.name);
                    if !ZONE_NAMES.iter().any(|n| n.as_bytes() == name) {
                        continue;
                    }
                    if let Some(zone) = Zone::from_shm_zone(z) {
                        out.push((name, zone));
                    }
                }
            }
            part = p.next;
        }
    }
    out
}

/// The highest generation among the module's running zones.
///
/// # Safety
/// As for [`running_zones`].
unsafe fn previous_generation() -> u64 {
    // SAFETY: per the contract.
    unsafe { running_zones() }
        .iter()
        .map(|(_, z)| z.header().generation.load(Ordering::Acquire))
        .max()
        .unwrap_or(0)
}

/// The data of the running zone called `name`, or NULL.
///
/// # Safety
/// As for [`running_zones`].
unsafe fn running_zone_data(name: &ngx::ffi::ngx_str_t) -> *mut c_void {
    // SAFETY: the name belongs to the zone being initialised.
    let name = unsafe { crate::ffi::str_bytes(name) };
    // SAFETY: per the contract.
    unsafe { running_zones() }
        .into_iter()
        .find(|(n, _)| *n == name)
        .map_or(ptr::null_mut(), |(_, z)| z.header.as_ptr().cast())
}

fn copy_state(from: &Slot, to: &Slot) {
    macro_rules! copy {
        ($($f:ident),*) => { $( to.$f.store(from.$f.load(Ordering::Relaxed), Ordering::Relaxed); )* };
    }
    copy!(
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
        delay_count,
        last_change,
        down_since,
        duration_sum
    );
    for (a, b) in from.failures.iter().zip(&to.failures) {
        b.store(a.load(Ordering::Relaxed), Ordering::Relaxed);
    }
    for (a, b) in from.duration_buckets.iter().zip(&to.duration_buckets) {
        b.store(a.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}
