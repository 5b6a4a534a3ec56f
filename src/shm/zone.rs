//! A view of one zone's data: its header, its slots, the room for
//! resolved addresses, and its lock.

use core::mem::size_of;
use core::ptr::NonNull;

use ngx::ffi::{ngx_shm_zone_t, ngx_shmtx_lock, ngx_shmtx_unlock, ngx_slab_pool_t};

pub use healthcheck_core::outlier::Counters;
use healthcheck_core::zone::{self, LAYOUT_VERSION, MAGIC};
pub use healthcheck_core::zone::{DynMeta, Header, Slot};

/// Bytes of zone memory `nslots` configured peers and `ndyn` slots for
/// resolved addresses need, slab bookkeeping included, rounded up to whole
/// pages.
pub fn required_size(nslots: usize, ndyn: usize, outliers: bool, page: usize) -> usize {
    let data = zone::data_bytes(nslots + ndyn, ndyn, outliers);
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

    /// The zone whose header is at `header` in the slab pool `pool`.
    ///
    /// # Safety
    /// `header` is a header `init` wrote; `pool` the zone's slab pool.
    pub(super) unsafe fn from_parts(header: NonNull<Header>, pool: *mut ngx_slab_pool_t) -> Self {
        Self { header, pool }
    }

    /// The address of the zone's header (what nginx keeps as `data`).
    pub(super) fn header_ptr(&self) -> *mut Header {
        self.header.as_ptr()
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

    /// Slot `i`'s outlier counters, in a zone that has them.
    pub fn counters(&self, i: usize) -> Option<&Counters> {
        let h = self.header();
        let n = h.nslots as usize;
        if h.outliers == 0 || i >= n {
            return None;
        }
        let ndyn = n - self.room_start();
        // SAFETY: `init_zone` placed `nslots` counters after the slots and
        // the room's metas when `outliers` is set.
        unsafe {
            let first = self
                .header_ptr()
                .add(1)
                .cast::<Slot>()
                .add(n)
                .cast::<DynMeta>()
                .add(ndyn)
                .cast::<Counters>();
            Some(&*first.add(i))
        }
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
