//! Read-only views of the upstreams of the http and stream contexts.
//!
//! http and stream keep identical round-robin structures under different
//! names; `walk!` reads either into the same plain description, so
//! everything after it is shared.

use core::ffi::c_void;

use core::mem::size_of;

use ngx::ffi::{
    ngx_array_t, ngx_atomic_t, ngx_module_t, ngx_str_t, ngx_uint_t, sockaddr, sockaddr_in,
    sockaddr_in6, socklen_t, AF_INET, AF_INET6, AF_UNIX,
};

use crate::conf::{UpsConf, UpstreamBlock};
use crate::ffi::str_bytes;

/// One checked peer: a resolved address of a non-`down` server line.
#[derive(Clone, Copy)]
pub struct PeerRef {
    /// The `ngx_*_upstream_rr_peer_t` nginx selects (the hook's key).
    pub peer: *const c_void,
    pub name: ngx_str_t,
    /// The `server` line's name as written (`backend.example:8080`).
    pub server: ngx_str_t,
    pub sockaddr: *mut sockaddr,
    pub socklen: socklen_t,
    /// The server's configured weight.
    pub weight: u32,
    /// In the upstream's backup list.
    pub backup: bool,
    /// The peer's `down` field, which stock mode sets and clears.
    pub down: *mut ngx_uint_t,
    /// Index of its list in `UpstreamRef::lists`.
    pub list: u32,
}

impl PeerRef {
    pub fn is_unix(&self) -> bool {
        // SAFETY: rr peers always carry a valid sockaddr of `socklen` bytes.
        !self.sockaddr.is_null() && u32::from(unsafe { (*self.sockaddr).sa_family }) == AF_UNIX
    }

    pub fn name_bytes(&self) -> &[u8] {
        // SAFETY: the name lives in the cycle pool or the upstream zone.
        unsafe { str_bytes(&self.name) }
    }

    /// The `server` line's name as written.
    pub fn server_bytes(&self) -> &[u8] {
        // SAFETY: as for the name.
        unsafe { str_bytes(&self.server) }
    }

    /// The peer's own port (0 for unix sockets).
    pub fn port(&self) -> u16 {
        if self.sockaddr.is_null() {
            return 0;
        }
        // SAFETY: rr peers hold a valid sockaddr of `socklen` bytes; the
        // family says which struct it is.
        unsafe {
            match u32::from((*self.sockaddr).sa_family) {
                AF_INET if self.socklen as usize >= size_of::<sockaddr_in>() => {
                    u16::from_be((*self.sockaddr.cast::<sockaddr_in>()).sin_port)
                }
                AF_INET6 if self.socklen as usize >= size_of::<sockaddr_in6>() => {
                    u16::from_be((*self.sockaddr.cast::<sockaddr_in6>()).sin6_port)
                }
                _ => 0,
            }
        }
    }
}

/// An upstream block (peers are collected only when it has `check`).
pub struct UpstreamRef {
    pub name: ngx_str_t,
    /// Its `ngx_*_upstream_srv_conf_t`.
    pub srv: *mut c_void,
    pub conf: *mut UpsConf,
    pub peers: Vec<PeerRef>,
    /// Its rr peer lists (primary, then backup), as the balancers pass
    /// them to the hooks.
    pub lists: Vec<*const c_void>,
    /// Each list's rwlock when the list is in an upstream `zone` (shared
    /// by the workers), else NULL.
    pub locks: Vec<*mut ngx_atomic_t>,
}

impl UpstreamRef {
    pub fn name_bytes(&self) -> &[u8] {
        // SAFETY: the name lives in the cycle pool.
        unsafe { str_bytes(&self.name) }
    }

    pub fn conf(&self) -> &UpsConf {
        // SAFETY: srv confs live in the cycle pool for the cycle's lifetime.
        unsafe { &*self.conf }
    }
}

impl UpstreamBlock for UpstreamRef {
    fn conf(&self) -> &UpsConf {
        UpstreamRef::conf(self)
    }

    fn name_bytes(&self) -> &[u8] {
        UpstreamRef::name_bytes(self)
    }

    fn peer_facts(&self) -> Vec<healthcheck_core::conf::PeerFacts<'_>> {
        self.peers
            .iter()
            .map(|p| healthcheck_core::conf::PeerFacts {
                name: p.name_bytes(),
                port: p.port(),
                unix: p.is_unix(),
            })
            .collect()
    }
}

// Peers nginx 1.27.3+ creates at run time for `server ... resolve` have a
// `host`; they are not checked (README: Limits) and never get a slot.
#[cfg(ngx_version_at_least = "1.27.3")]
macro_rules! resolved {
    ($peer:expr) => {
        !$peer.host.is_null()
    };
}
#[cfg(not(ngx_version_at_least = "1.27.3"))]
macro_rules! resolved {
    ($peer:expr) => {
        false
    };
}
/// nginx 1.29.6+ `drain` (`NGX_HTTP_UPSTREAM_DRAINING`): a bit of
/// `peer->down` that keeps new requests off the peer while `sticky`
/// sessions still reach it. Such a peer is live and checked; only the
/// other bits (the `down` parameter: `NGX_*_UPSTREAM_FAILED`) mean "down
/// in the configuration". Older nginx (and stream) never set it.
const DRAINING: u64 = 8;

macro_rules! walk {
    ($umcf:expr, $uscf_t:ty, $peers_t:ty, $module:expr) => {{
        let mut out = Vec::new();
        let upstreams: &ngx_array_t = &(*$umcf).upstreams;
        let list =
            core::slice::from_raw_parts(upstreams.elts as *const *mut $uscf_t, upstreams.nelts);
        for &uscf in list {
            let srv = uscf as *mut c_void;
            let Some(uscf) = uscf.as_ref() else { continue };
            // implicit upstreams (proxy_pass to an address) have no srv_conf
            if uscf.srv_conf.is_null() {
                continue;
            }
            let conf = *uscf.srv_conf.add($module.ctx_index) as *mut UpsConf;
            let Some(c) = conf.as_ref() else { continue };
            let mut peers = Vec::new();
            let mut lists = Vec::new();
            let mut locks = Vec::new();
            let mut group = uscf.peer.data as *mut $peers_t;
            let mut backup = false;
            while let Some(g) = group.as_mut().filter(|_| c.check.is_some()) {
                let list = lists.len() as u32;
                lists.push(group as *const c_void);
                let lock = if g.shpool.is_null() {
                    core::ptr::null_mut()
                } else {
                    core::ptr::addr_of_mut!(g.rwlock)
                };
                locks.push(lock);
                // A zone's list may change under another worker's resolver.
                if !lock.is_null() {
                    ngx::ffi::ngx_rwlock_rlock(lock);
                }
                let mut p = g.peer;
                while let Some(peer) = p.as_mut() {
                    if peer.down as u64 & !DRAINING == 0 && !resolved!(peer) {
                        peers.push(PeerRef {
                            peer: p as *const c_void,
                            name: peer.name,
                            server: peer.server,
                            sockaddr: peer.sockaddr,
                            socklen: peer.socklen,
                            weight: u32::try_from(peer.weight).unwrap_or(u32::MAX),
                            backup,
                            down: core::ptr::addr_of_mut!(peer.down),
                            list,
                        });
                    }
                    p = peer.next;
                }
                if !lock.is_null() {
                    ngx::ffi::ngx_rwlock_unlock(lock);
                }
                group = g.next;
                backup = true;
            }
            out.push(UpstreamRef {
                name: uscf.host,
                srv,
                conf,
                peers,
                lists,
                locks,
            });
        }
        out
    }};
}

/// The checked upstreams of the http context, in configuration order.
///
/// # Safety
/// `umcf` must be the `ngx_http_upstream_module` main conf, after its
/// `init_main_conf` ran (peers exist).
pub unsafe fn http_upstreams(
    umcf: *const ngx::ffi::ngx_http_upstream_main_conf_t,
    module: &ngx_module_t,
) -> Vec<UpstreamRef> {
    // SAFETY: per the function's contract.
    unsafe {
        walk!(
            umcf,
            ngx::ffi::ngx_http_upstream_srv_conf_t,
            ngx::ffi::ngx_http_upstream_rr_peers_t,
            module
        )
    }
}

/// The checked upstreams of the stream context, in configuration order.
///
/// # Safety
/// As for [`http_upstreams`], for `ngx_stream_upstream_module`.
pub unsafe fn stream_upstreams(
    umcf: *const ngx::ffi::ngx_stream_upstream_main_conf_t,
    module: &ngx_module_t,
) -> Vec<UpstreamRef> {
    // SAFETY: per the function's contract.
    unsafe {
        walk!(
            umcf,
            ngx::ffi::ngx_stream_upstream_srv_conf_t,
            ngx::ffi::ngx_stream_upstream_rr_peers_t,
            module
        )
    }
}
