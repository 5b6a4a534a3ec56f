//! Registering a context's zone and filling a fresh one: per-slot identity
//! and initial state from the configuration, the state of peers whose
//! identity the previous zone (a reload) or the state file (a start)
//! knows.

use core::ffi::c_void;
use core::ptr::{self, NonNull};
use core::sync::atomic::Ordering;

use healthcheck_core::status::Group;
use healthcheck_core::zone::{self, Header, LAYOUT_VERSION, MAGIC};
use ngx::ffi::{
    ngx_conf_t, ngx_int_t, ngx_shared_memory_add, ngx_shm_zone_t, ngx_slab_alloc, ngx_slab_pool_t,
    ngx_str_t, NGX_ERROR, NGX_OK,
};

use super::zone::Zone;

/// What the module needs to fill a fresh zone: per-slot identity and
/// initial state, computed at configuration time.
pub struct ZonePlan {
    pub identities: Vec<u64>,
    pub initial: Vec<healthcheck_core::zone::Initial>,
    /// Each configured slot's upstream has `check_outlier`.
    pub outlier: Vec<bool>,
    /// The zone has outlier counters (some upstream has `check_outlier`).
    pub outliers: bool,
    /// Slots for resolved addresses after the configured peers'.
    pub dynamic: usize,
    /// Tags of the upstreams with `resolve` servers (their old addresses
    /// carry over).
    pub tags: Vec<u64>,
    pub group: Group,
    /// `check_state_file`: read when the zone starts without a previous
    /// one (a start or a binary upgrade, not a reload).
    pub state_file: Option<Vec<u8>>,
}

/// Register `group`'s zone of `size` bytes, to be filled from `plan`
/// (moved into the configuration pool: the zone's `init` reads it while
/// this cycle is set up). A fresh zone on every load: `init` receives the
/// old zone's data.
///
/// # Safety
/// `cf` is the configuration of `group` being finished.
pub unsafe fn register(
    cf: *mut ngx_conf_t,
    group: Group,
    size: usize,
    plan: ZonePlan,
) -> Result<*mut ngx_shm_zone_t, ()> {
    let zone_name = ZONE_NAMES[group as usize];
    let mut name = ngx_str_t {
        len: zone_name.len(),
        data: zone_name.as_ptr().cast_mut(),
    };
    let tag = crate::modules::module(group);
    // SAFETY: valid cf; the name is static.
    let zone = unsafe { ngx_shared_memory_add(cf, &mut name, size, tag.cast()) };
    // SAFETY: NULL or a zone nginx owns.
    let Some(z) = (unsafe { zone.as_mut() }) else {
        return Err(());
    };
    // SAFETY: the configuration pool lives as long as the zone's use of
    // the plan.
    let Some(plan) = (unsafe { crate::pool::alloc((*cf).pool, plan) }) else {
        return Err(());
    };
    z.init = Some(init_zone);
    z.data = plan.as_ptr().cast();
    z.noreuse = 1;
    Ok(zone)
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
    let bytes = zone::data_bytes(total, plan.dynamic, plan.outliers);
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
    h.outliers = u32::from(plan.outliers);
    // SAFETY: not NULL (checked above); the header was just written.
    let new = unsafe { Zone::from_parts(NonNull::new_unchecked(header), shpool) };
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
    let from = zone::fill(
        &new.slots()[..n],
        old_slots,
        &plan.identities,
        &plan.initial,
    );
    // Outlier counters carry over with their slot; an ejection only where
    // the upstream still has `check_outlier` (nothing else would end it).
    for (i, prev) in from.iter().enumerate() {
        let counters = new.counters(i);
        let old_counters = prev.and_then(|j| old.as_ref()?.counters(j));
        match (counters, old_counters, plan.outlier.get(i).copied()) {
            (Some(c), Some(o), Some(true)) => c.copy_from(o),
            _ => {
                if let Some(s) = new.slot(i) {
                    s.set_ejected(false);
                }
            }
        }
    }
    if let Some(o) = &old {
        // The old zone's resolved addresses: its other workers may still
        // claim there, but not after this cycle's workers start.
        let live = plan.tags.iter().copied().collect();
        healthcheck_core::room::carry(new.room(), o.room(), &live);
    }
    if let (None, Some(path)) = (old, plan.state_file.as_deref()) {
        super::restore::restore(zone.shm.log, path, plan.group, &new.slots()[..n]);
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
        .map_or(ptr::null_mut(), |(_, z)| z.header_ptr().cast())
}
