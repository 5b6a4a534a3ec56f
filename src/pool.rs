//! Rust values in nginx pools.
//!
//! ngx 0.5.1's `Pool::allocate` writes the value before it checks the
//! allocation for NULL; this module checks first. A value stored here is
//! dropped by a pool cleanup when nginx destroys the pool.

use core::mem::{align_of, size_of};
use core::ptr::{self, NonNull};

use ngx::ffi::{ngx_palloc, ngx_pool_cleanup_add, ngx_pool_t, NGX_ALIGNMENT};

/// Move `value` into `pool`; `None` (and `value` dropped) when nginx has no
/// memory. The value lives until the pool is destroyed, then is dropped.
///
/// # Safety
/// `pool` is a live nginx pool.
pub unsafe fn alloc<T>(pool: *mut ngx_pool_t, value: T) -> Option<NonNull<T>> {
    const { assert!(align_of::<T>() <= NGX_ALIGNMENT) };
    // SAFETY: a live pool; the cleanup's data is `size_of::<T>()` bytes
    // from the pool, aligned to NGX_ALIGNMENT.
    let cln = unsafe { ngx_pool_cleanup_add(pool, size_of::<T>()).as_mut() }?;
    let data = NonNull::new(cln.data.cast::<T>())?;
    // SAFETY: fresh, aligned, large enough, and not yet initialised.
    unsafe { ptr::write(data.as_ptr(), value) };
    cln.handler = Some(drop_value::<T>);
    Some(data)
}

unsafe extern "C" fn drop_value<T>(data: *mut core::ffi::c_void) {
    // SAFETY: `alloc` wrote a `T` there, and the pool runs each cleanup
    // once. A panicking destructor must not unwind into nginx.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
        ptr::drop_in_place(data.cast::<T>())
    }));
}

/// Move `value`, a type without drop glue, into `pool` without a cleanup
/// (nothing runs when the pool goes: one allocation, no handler); `None`
/// when nginx has no memory. For per-request data on a hot path.
///
/// # Safety
/// `pool` is a live nginx pool.
pub unsafe fn alloc_plain<T: Copy>(pool: *mut ngx_pool_t, value: T) -> Option<NonNull<T>> {
    const { assert!(align_of::<T>() <= NGX_ALIGNMENT) };
    // SAFETY: a live pool; ngx_palloc aligns to NGX_ALIGNMENT.
    let data = NonNull::new(unsafe { ngx_palloc(pool, size_of::<T>()) }.cast::<T>())?;
    // SAFETY: fresh, aligned, large enough, and not yet initialised.
    unsafe { ptr::write(data.as_ptr(), value) };
    Some(data)
}
