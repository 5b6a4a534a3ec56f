//! Read-only views of the upstreams of the http and stream contexts.
//!
//! http and stream keep identical round-robin structures under different
//! names; `walk!` reads either into the same plain description, so
//! everything after it is shared.

use core::ffi::c_void;

use core::mem::size_of;

use healthcheck_core::ptrmap::Dense;
use healthcheck_core::status::Group;
use ngx::ffi::{
    ngx_array_t, ngx_atomic_t, ngx_str_t, ngx_uint_t, sockaddr, sockaddr_in, sockaddr_in6,
    socklen_t, AF_INET, AF_INET6, AF_UNIX,
};

use crate::conf::UpsConf;
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
    /// Its list is in the upstream's `zone`, shared by the workers.
    pub shared: bool,
}

impl PeerRef {
    /// nginx's count of open connections to the peer (`peer->conns`).
    ///
    /// # Safety
    /// `peer` is a live rr peer of the stream context when `stream`, else
    /// of http.
    pub unsafe fn conns(&self, stream: bool) -> ngx_uint_t {
        // SAFETY: per the contract.
        unsafe {
            if stream {
                (*self.peer.cast::<ngx::ffi::ngx_stream_upstream_rr_peer_t>()).conns
            } else {
                (*self.peer.cast::<ngx::ffi::ngx_http_upstream_rr_peer_t>()).conns
            }
        }
    }

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

/// An upstream block (peers are collected only when it has `check` or
/// `check_outlier`).
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
    /// Its `server ... resolve` lines (templates nginx resolves).
    pub resolve_lines: usize,
    /// The zone's change counter of its lists (`peers->config`, bumped by
    /// nginx on every peer it adds or removes), NULL without `resolve`.
    pub config: *const ngx_uint_t,
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

    /// Per list: its peers' slots by address when nginx allocated them as
    /// one array (none for an upstream with `resolve` lines, whose lists
    /// change); `base` is the slot of its first peer.
    pub fn arrays(&self, group: Group, base: u32) -> Vec<Dense> {
        let stride = match group {
            Group::Http => size_of::<ngx::ffi::ngx_http_upstream_rr_peer_t>(),
            Group::Stream => size_of::<ngx::ffi::ngx_stream_upstream_rr_peer_t>(),
        };
        (0..self.lists.len())
            .map(|k| {
                let peers: Vec<(usize, u32)> = (base..)
                    .zip(&self.peers)
                    .filter(|(_, p)| p.list as usize == k)
                    .map(|(i, p)| (p.peer as usize, i))
                    .collect();
                match self.resolve_lines {
                    0 => Dense::new(&peers, stride).unwrap_or_default(),
                    _ => Dense::default(),
                }
            })
            .collect()
    }
}

// Peers nginx 1.27.3+ creates at run time for `server ... resolve` have a
// `host`; they are not checked here (docs/resolved.md) and never get a slot.
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
/// The `resolve` templates of a list and its change counter.
#[cfg(ngx_version_at_least = "1.27.3")]
macro_rules! templates {
    ($g:expr) => {{
        let mut n = 0usize;
        let mut t = $g.resolve;
        while let Some(tp) = t.as_ref() {
            n += 1;
            t = tp.next;
        }
        (n, $g.config as *const ngx_uint_t)
    }};
}
#[cfg(not(ngx_version_at_least = "1.27.3"))]
macro_rules! templates {
    ($g:expr) => {
        (0usize, core::ptr::null::<ngx_uint_t>())
    };
}
/// nginx 1.29.6+ `drain` (`NGX_HTTP_UPSTREAM_DRAINING`): a bit of
/// `peer->down` that keeps new requests off the peer while `sticky`
/// sessions still reach it. Such a peer is live and checked; only the
/// other bits (the `down` parameter: `NGX_*_UPSTREAM_FAILED`) mean "down
/// in the configuration". Older nginx (and stream) never set it.
const DRAINING: u64 = 8;

macro_rules! walk {
    ($umcf:expr, $uscf_t:ty, $peers_t:ty, $server_t:ty, $group:expr) => {{
        let stock = crate::enforce::stock($group);
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
            let conf = crate::modules::srv_conf::<UpsConf>(uscf.srv_conf, $group);
            let Some(c) = conf.as_ref() else { continue };
            let mut peers = Vec::new();
            let mut lists = Vec::new();
            let mut locks = Vec::new();
            let mut group = uscf.peer.data as *mut $peers_t;
            let mut backup = false;
            let mut resolve_lines = 0;
            let mut config = core::ptr::null();
            while let Some(g) = group
                .as_mut()
                .filter(|_| c.check.is_set() || c.outlier.is_set())
            {
                let (n, counter) = templates!(g);
                // (At configuration time the lists are not in the zone yet
                // and have no counter; workers see the zone's.)
                resolve_lines += n;
                if n > 0 && !g.shpool.is_null() {
                    config = counter;
                }
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
                // The server lines, for whether a peer is down in the
                // configuration: in stock mode a zone's peer may still
                // carry the bit an earlier worker set (one that died).
                let servers: &[$server_t] = match uscf.servers.as_ref() {
                    Some(a) if stock && !g.shpool.is_null() && !a.elts.is_null() => {
                        core::slice::from_raw_parts(a.elts as *const $server_t, a.nelts)
                    }
                    _ => &[],
                };
                let mut p = g.peer;
                while let Some(peer) = p.as_mut() {
                    let configured_down = peer.down as u64 & !DRAINING != 0
                        && servers
                            .iter()
                            .find(|s| str_bytes(&s.name) == str_bytes(&peer.server))
                            .map_or(true, |s| s.down != 0);
                    if !configured_down && !resolved!(peer) {
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
                            shared: !g.shpool.is_null(),
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
                resolve_lines,
                config,
            });
        }
        out
    }};
}

/// The upstreams of a context (checked ones with their peers), in
/// configuration order, read from the context's `main_conf` array.
///
/// # Safety
/// `main_conf` is the `main_conf` array of `group`'s configuration, or
/// NULL, after the upstream module's `init_main_conf` ran (peers exist).
pub unsafe fn of_context(group: Group, main_conf: *mut *mut c_void) -> Vec<UpstreamRef> {
    if main_conf.is_null() {
        return Vec::new();
    }
    // SAFETY: the arrays hold one entry per module of the context; the
    // upstream module's is its main conf.
    unsafe {
        match group {
            Group::Http => {
                let umcf = (*main_conf.add(ngx::ffi::ngx_http_upstream_module.ctx_index))
                    .cast::<ngx::ffi::ngx_http_upstream_main_conf_t>();
                walk!(
                    umcf,
                    ngx::ffi::ngx_http_upstream_srv_conf_t,
                    ngx::ffi::ngx_http_upstream_rr_peers_t,
                    ngx::ffi::ngx_http_upstream_server_t,
                    Group::Http
                )
            }
            Group::Stream => {
                let Some((_, upstream)) = crate::stream_link::module_indices() else {
                    return Vec::new();
                };
                let umcf =
                    (*main_conf.add(upstream)).cast::<ngx::ffi::ngx_stream_upstream_main_conf_t>();
                walk!(
                    umcf,
                    ngx::ffi::ngx_stream_upstream_srv_conf_t,
                    ngx::ffi::ngx_stream_upstream_rr_peers_t,
                    ngx::ffi::ngx_stream_upstream_server_t,
                    Group::Stream
                )
            }
        }
    }
}

/// An address nginx resolved for a `server ... resolve` line, copied out of
/// the upstream's zone (nginx frees the peer when the address goes).
pub struct ResolvedPeer {
    /// The rr peer (valid while the list's change counter stays).
    pub peer: *const c_void,
    /// Its `sockaddr` field (what a proxied attempt's `pc->sockaddr` is).
    pub sockaddr_ptr: *const sockaddr,
    /// Its `down` field.
    pub down: *mut ngx_uint_t,
    pub sockaddr: Box<[u8]>,
    pub name: Box<[u8]>,
    pub server: Box<[u8]>,
    pub weight: u32,
    pub backup: bool,
    /// Index of its list in `UpstreamRef::lists`.
    pub list: u32,
}

#[cfg(ngx_version_at_least = "1.27.3")]
macro_rules! copy_resolved {
    ($lists:expr, $locks:expr, $peers_t:ty, $out:expr) => {{
        for (list, (&l, &lock)) in $lists.iter().zip($locks).enumerate() {
            let Some(g) = (l as *const $peers_t).as_ref() else {
                continue;
            };
            if !lock.is_null() {
                ngx::ffi::ngx_rwlock_rlock(lock);
            }
            let mut p = g.peer;
            while let Some(peer) = p.as_ref() {
                // Down in the configuration: its template is (the peer's
                // own `down` also has stock mode's bit).
                let configured_down = peer
                    .host
                    .as_ref()
                    .and_then(|h| h.peer.as_ref())
                    .map_or(0, |t| t.down as u64 & !DRAINING);
                if !peer.host.is_null() && configured_down == 0 {
                    let sa = core::slice::from_raw_parts(
                        peer.sockaddr.cast::<u8>(),
                        peer.socklen as usize,
                    );
                    $out.push(ResolvedPeer {
                        peer: p as *const c_void,
                        sockaddr_ptr: peer.sockaddr,
                        down: core::ptr::addr_of!(peer.down).cast_mut(),
                        sockaddr: sa.into(),
                        name: str_bytes(&peer.name).into(),
                        server: str_bytes(&peer.server).into(),
                        weight: u32::try_from(peer.weight).unwrap_or(u32::MAX),
                        backup: list > 0,
                        list: list as u32,
                    });
                }
                p = peer.next;
            }
            if !lock.is_null() {
                ngx::ffi::ngx_rwlock_unlock(lock);
            }
        }
    }};
}

/// The resolved addresses in `lists` (an upstream's rr lists, primary
/// first, with their locks), each list read under its read lock.
///
/// # Safety
/// `lists` and `locks` come from a walk of `proto`'s upstreams of the
/// running cycle.
#[cfg(ngx_version_at_least = "1.27.3")]
pub unsafe fn resolved_peers(
    proto: Group,
    lists: &[*const c_void],
    locks: &[*mut ngx_atomic_t],
) -> Vec<ResolvedPeer> {
    let mut out = Vec::new();
    // SAFETY: per the function's contract.
    unsafe {
        match proto {
            Group::Http => {
                copy_resolved!(lists, locks, ngx::ffi::ngx_http_upstream_rr_peers_t, out)
            }
            Group::Stream => {
                copy_resolved!(lists, locks, ngx::ffi::ngx_stream_upstream_rr_peers_t, out)
            }
        }
    }
    out
}

/// nginx before 1.27.3 resolves no servers at run time.
///
/// # Safety
/// None needed; as the other version's.
#[cfg(not(ngx_version_at_least = "1.27.3"))]
pub unsafe fn resolved_peers(
    _proto: Group,
    _lists: &[*const c_void],
    _locks: &[*mut ngx_atomic_t],
) -> Vec<ResolvedPeer> {
    Vec::new()
}

/// The address of rr peer `peer` of `proto`.
///
/// # Safety
/// `peer` is a live rr peer of `proto` (its list locked by the caller).
pub unsafe fn peer_sockaddr<'a>(proto: Group, peer: *const c_void) -> &'a [u8] {
    // SAFETY: per the function's contract.
    unsafe {
        let (sa, len) = match proto {
            Group::Http => {
                let p = &*peer.cast::<ngx::ffi::ngx_http_upstream_rr_peer_t>();
                (p.sockaddr, p.socklen)
            }
            Group::Stream => {
                let p = &*peer.cast::<ngx::ffi::ngx_stream_upstream_rr_peer_t>();
                (p.sockaddr, p.socklen)
            }
        };
        if sa.is_null() {
            return &[];
        }
        core::slice::from_raw_parts(sa.cast::<u8>(), len as usize)
    }
}
