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
use core::sync::atomic::Ordering;

use ngx::ffi::{
    ngx_int_t, ngx_shm_zone_t, ngx_shmtx_lock, ngx_shmtx_unlock, ngx_slab_alloc, ngx_slab_pool_t,
    NGX_ERROR, NGX_OK,
};

use healthcheck_core::zone::{self, LAYOUT_VERSION, MAGIC};
pub use healthcheck_core::zone::{DynMeta, Header, Slot};

/// Bytes of zone memory `nslots` configured peers and `ndyn` slots for
/// resolved addresses need, slab bookkeeping included, rounded up to whole
/// pages.
pub fn required_size(nslots: usize, ndyn: usize, page: usize) -> usize {
    let data = zone::data_bytes(nslots + ndyn, ndyn);
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
    /// The zone's slab pool: its mutex is the zone's lock (nginx frees it
    /// when a worker dies holding it).
    pool: *mut ngx_slab_pool_t,
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
        // SAFETY: as above; `shm.addr` is the zone's slab pool.
        let pool = unsafe { (*zone).shm.addr.cast::<ngx_slab_pool_t>() };
        (h.magic == MAGIC && h.version == LAYOUT_VERSION).then_some(Self { header, pool })
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

    /// The index of the first slot of the room for resolved addresses.
    pub fn room_start(&self) -> usize {
        (self.header().nstatic as usize).min(self.slots().len())
    }

    /// The room for resolved addresses: its slots and their metas.
    pub fn room(&self) -> (&[Slot], &[DynMeta]) {
        let slots = &self.slots()[self.room_start()..];
        // SAFETY: `init_zone` placed one meta per slot of the room right
        // after the slots.
        let metas = unsafe {
            let first = self
                .header
                .as_ptr()
                .add(1)
                .cast::<Slot>()
                .add(self.slots().len())
                .cast::<DynMeta>();
            core::slice::from_raw_parts(first, slots.len())
        };
        (slots, metas)
    }

    /// Run `f` holding the zone's lock (the slab pool's mutex, shared by
    /// every process; nginx releases it if its holder dies).
    pub fn locked<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Unlock(*mut ngx_slab_pool_t);
        impl Drop for Unlock {
            fn drop(&mut self) {
                // SAFETY: locked below, by this process.
                unsafe { ngx_shmtx_unlock(&mut (*self.0).mutex) };
            }
        }
        // SAFETY: the pool of a live zone; its mutex was created by nginx.
        unsafe { ngx_shmtx_lock(&mut (*self.pool).mutex) };
        let _unlock = Unlock(self.pool);
        f()
    }
}

/// What the module needs to fill a fresh zone: per-slot identity and
/// initial state, computed at configuration time.
pub struct ZonePlan {
    pub identities: Vec<u64>,
    pub default_down: Vec<bool>,
    /// Slots for resolved addresses after the configured peers'.
    pub dynamic: usize,
    /// Tags of the upstreams with `resolve` servers (their old addresses
    /// carry over).
    pub tags: Vec<u64>,
    pub group: healthcheck_core::status::Group,
    /// `check_state_file`: read when the zone starts without a previous
    /// one (a start or a binary upgrade, not a reload).
    pub state_file: Option<Vec<u8>>,
}

/// `ngx_shm_zone_t.init`: create the header and slots in a fresh zone and
/// carry over the state of peers whose identity existed in `old`.
///
/// # Safety
/// Called by nginx with a zone registered by this module; `zone->data`
/// holds the `ZonePlan` (allocated in the configuration pool).
pub unsafe extern "C" fn init_zone(zone: *mut ngx_shm_zone_t, old: *mut c_void) -> ngx_int_t {
    // SAFETY: nginx passes a valid zone of the cycle being configured.
    let log = unsafe { zone.as_ref() }.map_or(ptr::null_mut(), |z| z.shm.log);
    crate::ffi::guard(log, "zone init", NGX_ERROR as ngx_int_t, || {
        // SAFETY: the function's contract.
        unsafe { init_zone_data(zone, old) }
    })
}

/// # Safety
/// As for [`init_zone`].
unsafe fn init_zone_data(zone: *mut ngx_shm_zone_t, old: *mut c_void) -> ngx_int_t {
    // SAFETY: nginx passes a valid zone; see the function's contract.
    let zone = unsafe { &mut *zone };
    let plan = zone.data.cast::<ZonePlan>();
    // SAFETY: `register_zone` stored a pool-allocated plan in `data`.
    let Some(plan) = (unsafe { plan.as_ref() }) else {
        return NGX_ERROR as ngx_int_t;
    };
    let shpool = zone.shm.addr.cast::<ngx_slab_pool_t>();
    let n = plan.identities.len();
    let total = n + plan.dynamic;
    let bytes = zone::data_bytes(total, plan.dynamic);
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
    h.nslots = total as u32;
    h.nstatic = n as u32;
    let new = Zone {
        // SAFETY: not NULL (checked above).
        header: unsafe { NonNull::new_unchecked(header) },
        pool: shpool,
    };
    // nginx 1.28 hands a `noreuse` zone the old zone's data; 1.26 does
    // not: find it by name among the running cycle's zones.
    let old = if old.is_null() {
        // SAFETY: during a reload `ngx_cycle` is still the running cycle.
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
            // SAFETY: only `data` and `shm.addr` are read (the lock is not
            // taken on the old zone).
            ..unsafe { core::mem::zeroed() }
        };
        // SAFETY: see above.
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

    let old_slots = old
        .as_ref()
        .map_or(&[][..], |o| &o.slots()[..o.room_start()]);
    zone::fill(
        &new.slots()[..n],
        old_slots,
        &plan.identities,
        &plan.default_down,
    );
    if let Some(o) = &old {
        // The old zone's resolved addresses: its other workers may still
        // claim there, but not after this cycle's workers start.
        let live = plan.tags.iter().copied().collect();
        healthcheck_core::room::carry(new.room(), o.room(), &live);
    }
    if let (None, Some(path)) = (old, plan.state_file.as_deref()) {
        crate::statefile::restore(zone.shm.log, path, plan.group, &new.slots()[..n]);
        // Saved state is a change like any other (stock mode applies it).
        new.header().note_change();
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
