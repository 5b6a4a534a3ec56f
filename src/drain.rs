//! nginx 1.30's own drain for admin `drain` (docs/transitions.md, A peer an
//! operator drains): nginx (1.29.6+) skips a peer whose `down` has the
//! `NGX_HTTP_UPSTREAM_DRAINING` bit everywhere but in the `sticky` lookup,
//! so a drained peer gets that bit, and sessions `sticky` pins to it still
//! reach it. Each worker remembers which peers it gave the bit to take it
//! back when the drain ends.

use core::cell::RefCell;
use std::collections::HashMap;

use healthcheck_core::status::Group;
use ngx::ffi::{ngx_http_upstream_rr_peer_t, ngx_uint_t};

use crate::shm::{Slot, Zone};

/// nginx 1.29.6+'s `NGX_HTTP_UPSTREAM_DRAINING` bit of `peer->down`.
const NGINX_DRAINING: ngx_uint_t = 8;

/// Peers (the hook's rr peer address, or in stock mode the address of its
/// `down` field) this worker gave the bit, with their slots.
#[derive(Default)]
pub struct DrainBits(RefCell<HashMap<usize, u32>>);

impl DrainBits {
    /// The hook meets the drained peer at `addr` (slot `slot`): one that
    /// has the bit is reached only from the `sticky` lookup (admitted:
    /// `false`); one that has not gets it now and is skipped (`true`).
    pub fn hook(&self, addr: usize, slot: u32) -> bool {
        let peer = addr as *mut ngx_http_upstream_rr_peer_t;
        // SAFETY: the hook's peer, an http rr peer nginx is selecting from
        // (under its list's lock when the list is shared).
        unsafe {
            if (*peer).down & NGINX_DRAINING != 0 {
                return false;
            }
            (*peer).down |= NGINX_DRAINING;
        }
        if let Ok(mut bits) = self.0.try_borrow_mut() {
            bits.insert(addr, slot);
        }
        true
    }

    /// A few times a second (`crate::closer`): give the bit to drained
    /// peers the hook has not met yet (so that the first `sticky` session
    /// after a drain finds it too), and take it back from peers an
    /// operator enabled again. `peers` are the context's (rr peer address,
    /// slot) pairs.
    pub fn sync(&self, zone: Option<&Zone>, peers: impl Iterator<Item = (usize, u32)>) {
        // Stock mode applies the bit with the rest of the state.
        if crate::enforce::stock(Group::Http) {
            return;
        }
        let (Some(zone), Ok(mut bits)) = (zone, self.0.try_borrow_mut()) else {
            return;
        };
        for (addr, slot) in peers {
            let drained = zone
                .slot(slot as usize)
                .is_some_and(|s| s.draining() && !s.vetoed_but_draining());
            if drained && !bits.contains_key(&addr) {
                let peer = addr as *mut ngx_http_upstream_rr_peer_t;
                // SAFETY: a configured http rr peer of this worker's
                // configuration; one word, as the hook writes it.
                unsafe { (*peer).down |= NGINX_DRAINING };
                bits.insert(addr, slot);
            }
        }
        bits.retain(|&addr, &mut slot| {
            if zone.slot(slot as usize).is_some_and(Slot::draining) {
                return true;
            }
            let peer = addr as *mut ngx_http_upstream_rr_peer_t;
            // SAFETY: a peer of this worker's configuration (the map is
            // the context's, rebuilt with it).
            unsafe { (*peer).down &= !NGINX_DRAINING };
            false
        });
    }

    /// Whether stock mode gave the bit to the peer whose `down` is at
    /// `down`.
    pub fn has(&self, down: usize) -> bool {
        self.0.borrow().contains_key(&down)
    }

    /// Stock mode: give the peer whose `down` field is `down` the bit, or
    /// take it back.
    ///
    /// # Safety
    /// `down` is a peer's `down` field, under its list's write lock when
    /// the list is shared.
    pub unsafe fn stock(&self, down: *mut ngx_uint_t, slot: u32, drained: bool) {
        let mut bits = self.0.borrow_mut();
        // SAFETY: per the contract.
        unsafe {
            if drained {
                *down |= NGINX_DRAINING;
                bits.insert(down as usize, slot);
            } else {
                *down &= !NGINX_DRAINING;
                bits.remove(&(down as usize));
            }
        }
    }
}
