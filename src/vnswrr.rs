//! The `vnswrr` balancer (docs/directives.md, vnswrr) for http and stream upstreams.
//!
//! It wraps nginx's round robin the way `least_conn` does: nginx builds the
//! peer lists (`ngx_*_upstream_init_round_robin`) and the per-request state
//! (`ngx_*_upstream_init_round_robin_peer`: tried bitmap, tries), and its
//! `free` stays in place; only `peer.get` is ours. Selection order comes
//! from the per-group ring of `healthcheck_core::vnswrr`; everything nginx
//! shares between workers (`down`, `fails`, `checked`, `conns`,
//! `max_conns`) is read from the live peers, under the peers' rwlock when
//! the upstream has a `zone`.
//!
//! State: each upstream's [`Balancer`] is built at configuration time (the
//! first `max_init` nodes of each ring) and hangs off our srv conf. After
//! fork every worker mutates its own copy, so rings and cursors are per
//! worker without any map or lock. Rings index peers by their position in
//! the group's list; a worker resolves positions to the live peers (in
//! shared memory with `zone`) on its first selection.
//!
//! Run-time re-resolution (`server ... resolve`, nginx 1.27.3+) is refused:
//! the directive does not set `NGX_*_UPSTREAM_MODIFY`, so nginx itself
//! fails `nginx -t` with "load balancing method does not support resolving
//! names at run time". A ring is a fixed permutation of a fixed peer list.

use core::ffi::{c_char, c_void, CStr};
use core::ptr;

use healthcheck_core::conf::parse_vnswrr;
use healthcheck_core::vnswrr::{Ring, Verdict};
use ngx::core::{NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::ffi::{
    ngx_command_t, ngx_conf_t, ngx_http_conf_ctx_t, ngx_http_request_t, ngx_http_upstream_module,
    ngx_int_t, ngx_log_t, ngx_msec_t, ngx_palloc, ngx_peer_connection_t, ngx_pool_t,
    ngx_rwlock_rlock, ngx_rwlock_unlock, ngx_rwlock_wlock, ngx_stream_conf_ctx_t,
    ngx_stream_session_t, ngx_uint_t, time_t, NGX_BUSY, NGX_ERROR, NGX_LOG_ALERT, NGX_LOG_EMERG,
    NGX_LOG_WARN, NGX_OK, NGX_STREAM_UPS_CONF,
};

use crate::conf::UpsConf;
use crate::ffi::guard;
use healthcheck_core::status::Group as HttpOrStream;

/// One upstream's rings, one per group (primary, then backup): the state
/// this balancer keeps in the upstream's `UpsConf::balancer`.
struct Balancer {
    groups: Vec<Group>,
}

struct Group {
    ring: Ring,
    /// Live peers by position in the group's list, read on this worker's
    /// first selection from the list requests use.
    peers: Vec<*mut c_void>,
    /// The list `peers` was read from.
    list: *const c_void,
    /// A broken invariant was reported (once per group and worker).
    warned: bool,
}

// nginx 1.27.3 added re-resolving servers at run time, and with it
// `peers->config` (a generation count checked by every balancer) and
// `peer->refs` (taken by `get`, dropped by round robin's `free`). The older
// nginx versions the module supports have neither.
// (build.rs emits the cfg from the version of the nginx tree.)
#[cfg(ngx_version_at_least = "1.27.3")]
macro_rules! since_1_27_3 {
    ($($t:tt)*) => { $($t)* };
}
#[cfg(not(ngx_version_at_least = "1.27.3"))]
macro_rules! since_1_27_3 {
    ($($t:tt)*) => {};
}

/// `vnswrr [max_init=n];` in an upstream block: parse the arguments, then
/// make vnswrr the upstream's balancer.
pub unsafe extern "C" fn ngx_upstream_vnswrr(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx's directive contract.
    let rv = unsafe {
        crate::directive::run::<UpsConf>(cf, cmd, conf, |_, c, args| {
            if c.vnswrr.is_some() {
                return Err(healthcheck_core::conf::ConfError(
                    "\"vnswrr\" directive is duplicate".into(),
                ));
            }
            c.vnswrr = Some(parse_vnswrr(args)?);
            Ok(())
        })
    };
    if rv != NGX_CONF_OK {
        return rv;
    }
    // SAFETY: nginx's directive contract.
    unsafe { set_method(cf) }
}

/// `vnswrr` in an upstream block (after its arguments were parsed): make
/// it the upstream's balancer, as nginx's `least_conn` does.
///
/// # Safety
/// Called from the directive handler with nginx's `cf`.
unsafe fn set_method(cf: *mut ngx_conf_t) -> *mut c_char {
    // SAFETY: nginx passes the configuration being parsed.
    let cfr = unsafe { &*cf };
    if cfr.cmd_type == NGX_STREAM_UPS_CONF as ngx_uint_t {
        // Inside a stream `upstream {}` stream is loaded: never None.
        let Some(upstream_module) = crate::stream_link::stream_upstream_module() else {
            return NGX_CONF_ERROR;
        };
        // SAFETY: inside `upstream {}` of stream, ctx is a stream conf ctx
        // whose srv_conf holds the upstream module's srv conf.
        let uscf = unsafe {
            let ctx = cfr.ctx.cast::<ngx_stream_conf_ctx_t>();
            (*(*ctx).srv_conf.add(upstream_module.ctx_index))
                .cast::<ngx::ffi::ngx_stream_upstream_srv_conf_t>()
                .as_mut()
        };
        let Some(uscf) = uscf else {
            return NGX_CONF_ERROR;
        };
        if uscf.peer.init_upstream.is_some() {
            ngx::ngx_conf_log_error!(NGX_LOG_WARN, cf, "load balancing method redefined");
        }
        uscf.peer.init_upstream = Some(stream::ngx_stream_upstream_init_vnswrr);
        // No NGX_STREAM_UPSTREAM_MODIFY: `resolve` is refused (module docs).
        uscf.flags = (ngx::ffi::NGX_STREAM_UPSTREAM_CREATE
            | ngx::ffi::NGX_STREAM_UPSTREAM_WEIGHT
            | ngx::ffi::NGX_STREAM_UPSTREAM_MAX_CONNS
            | ngx::ffi::NGX_STREAM_UPSTREAM_MAX_FAILS
            | ngx::ffi::NGX_STREAM_UPSTREAM_FAIL_TIMEOUT
            | ngx::ffi::NGX_STREAM_UPSTREAM_DOWN
            | ngx::ffi::NGX_STREAM_UPSTREAM_BACKUP) as ngx_uint_t;
    } else {
        // SAFETY: inside `upstream {}` of http, likewise.
        let uscf = unsafe {
            let ctx = cfr.ctx.cast::<ngx_http_conf_ctx_t>();
            (*(*ctx).srv_conf.add(ngx_http_upstream_module.ctx_index))
                .cast::<ngx::ffi::ngx_http_upstream_srv_conf_t>()
                .as_mut()
        };
        let Some(uscf) = uscf else {
            return NGX_CONF_ERROR;
        };
        if uscf.peer.init_upstream.is_some() {
            ngx::ngx_conf_log_error!(NGX_LOG_WARN, cf, "load balancing method redefined");
        }
        uscf.peer.init_upstream = Some(http::ngx_http_upstream_init_vnswrr);
        // No NGX_HTTP_UPSTREAM_MODIFY: `resolve` is refused (module docs).
        uscf.flags = (ngx::ffi::NGX_HTTP_UPSTREAM_CREATE
            | ngx::ffi::NGX_HTTP_UPSTREAM_WEIGHT
            | ngx::ffi::NGX_HTTP_UPSTREAM_MAX_CONNS
            | ngx::ffi::NGX_HTTP_UPSTREAM_MAX_FAILS
            | ngx::ffi::NGX_HTTP_UPSTREAM_FAIL_TIMEOUT
            | ngx::ffi::NGX_HTTP_UPSTREAM_DOWN
            | ngx::ffi::NGX_HTTP_UPSTREAM_BACKUP) as ngx_uint_t;
    }
    NGX_CONF_OK
}

/// Our srv conf of an upstream.
///
/// # Safety
/// `srv_conf` is an upstream's srv_conf array of `group`, or NULL.
unsafe fn ups_conf<'a>(srv_conf: *mut *mut c_void, group: HttpOrStream) -> Option<&'a mut UpsConf> {
    // SAFETY: per the contract; our create_srv_conf allocated an UpsConf
    // there.
    unsafe { crate::modules::srv_conf::<UpsConf>(srv_conf, group).as_mut() }
}

/// What a request needs from its session (http request or stream session).
trait Session {
    /// # Safety
    /// `this` is a live session with an upstream.
    unsafe fn pool(this: *mut Self) -> *mut ngx_pool_t;
    /// # Safety
    /// As for `pool`.
    unsafe fn peer(this: *mut Self) -> *mut ngx_peer_connection_t;
    /// # Safety
    /// As for `pool`.
    unsafe fn log(this: *mut Self) -> *mut ngx_log_t;
}

impl Session for ngx_http_request_t {
    unsafe fn pool(this: *mut Self) -> *mut ngx_pool_t {
        // SAFETY: per the trait's contract.
        unsafe { (*this).pool }
    }
    unsafe fn peer(this: *mut Self) -> *mut ngx_peer_connection_t {
        // SAFETY: per the trait's contract.
        unsafe { ptr::addr_of_mut!((*(*this).upstream).peer) }
    }
    unsafe fn log(this: *mut Self) -> *mut ngx_log_t {
        // SAFETY: per the trait's contract.
        unsafe { (*(*this).connection).log }
    }
}

impl Session for ngx_stream_session_t {
    unsafe fn pool(this: *mut Self) -> *mut ngx_pool_t {
        // SAFETY: per the trait's contract (nginx's stream round robin
        // allocates from the connection pool too: a session is one
        // connection).
        unsafe { (*(*this).connection).pool }
    }
    unsafe fn peer(this: *mut Self) -> *mut ngx_peer_connection_t {
        // SAFETY: per the trait's contract.
        unsafe { ptr::addr_of_mut!((*(*this).upstream).peer) }
    }
    unsafe fn log(this: *mut Self) -> *mut ngx_log_t {
        // SAFETY: per the trait's contract.
        unsafe { (*(*this).connection).log }
    }
}

/// nginx's cached clocks: (wall seconds, monotonic milliseconds).
fn now() -> (time_t, ngx_msec_t) {
    (
        (crate::ffi::unix_ms() / 1000) as time_t,
        crate::ffi::monotonic_ms() as ngx_msec_t,
    )
}

fn random() -> u64 {
    // SAFETY: libc random(); nginx seeds it per worker.
    unsafe { ngx::ffi::random() as u64 }
}

/// Hint the CPU to bring `len` bytes at `p` into the cache. A hint only:
/// never faults, whatever `p` is.
#[inline]
fn prefetch(p: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let mut at = 0;
        while at < len {
            // SAFETY: a prefetch is a hint that does not access memory
            // architecturally and never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(at).cast()) };
            at += 64;
        }
        // The last line when `p` is not aligned to a line.
        // SAFETY: as above.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(len.saturating_sub(1)).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

/// The configuration position of an upstream, for messages.
fn position(file: *const u8, line: ngx_uint_t) -> String {
    if file.is_null() {
        return String::new();
    }
    // SAFETY: nginx stores the upstream's file name NUL-terminated in the
    // cycle pool.
    let name = unsafe { CStr::from_ptr(file.cast()) };
    format!(" in {}:{}", name.to_string_lossy(), line)
}

/// The http and stream balancers: the same code over nginx's two sets of
/// identical round-robin types.
macro_rules! balancer {
    (
        mod $m:ident;
        proto: $proto:expr,
        debug: $mask:ident,
        srv_conf: $uscf_t:ty,
        peers: $peers_t:ty,
        peer: $peer_t:ty,
        peer_data: $rrp_t:ty,
        session: $sess_t:ty,
        round_robin: $($rr:ident)::+,
        init_round_robin: $init_rr:ident,
        init_round_robin_peer: $init_rr_peer:ident,
        get_round_robin_peer: $get_rr:ident,
        init_upstream: $init_upstream:ident,
        init_peer: $init_peer:ident,
        get_peer: $get_peer:ident,
    ) => {
        pub(crate) mod $m {
            use super::*;
            use $($rr)::+::{$get_rr, $init_rr, $init_rr_peer};

            type Peers = $peers_t;
            type Peer = $peer_t;
            type PeerData = $rrp_t;

            /// Per-request state: nginx's round-robin data first, so that
            /// round robin's `free` (which stays) gets what it expects.
            #[repr(C)]
            struct Data {
                rrp: PeerData,
                balancer: *mut Balancer,
                /// 0: primary, 1: backup.
                group: usize,
            }

            /// The upstream's `init_upstream`.
            pub(crate) unsafe extern "C" fn $init_upstream(
                cf: *mut ngx_conf_t,
                us: *mut $uscf_t,
            ) -> ngx_int_t {
                // SAFETY: nginx passes the configuration being finished.
                let log = unsafe { (*cf).log };
                // SAFETY: nginx passes the upstream being initialised.
                guard(log, "vnswrr init", NGX_ERROR as ngx_int_t, || unsafe {
                    init_upstream(cf, us, log)
                })
            }

            /// # Safety
            /// As for the extern fn.
            unsafe fn init_upstream(
                cf: *mut ngx_conf_t,
                us: *mut $uscf_t,
                log: *mut ngx_log_t,
            ) -> ngx_int_t {
                // SAFETY: nginx's init_upstream contract.
                if unsafe { $init_rr(cf, us) } != NGX_OK as ngx_int_t {
                    return NGX_ERROR as ngx_int_t;
                }
                // SAFETY: as above.
                let Some(us) = (unsafe { us.as_mut() }) else {
                    return NGX_ERROR as ngx_int_t;
                };
                // SAFETY: an upstream block's srv_conf array.
                let Some(conf) = (unsafe { ups_conf(us.srv_conf, $proto) }) else {
                    return NGX_ERROR as ngx_int_t;
                };
                let max_init = conf.vnswrr.map_or(0, |v| v.max_init);
                let mut groups = Vec::new();
                let mut list = us.peer.data as *const Peers;
                // SAFETY: round robin just built the lists.
                while let Some(peers) = unsafe { list.as_ref() } {
                    let mut weights = Vec::with_capacity(peers.number);
                    let mut p = peers.peer;
                    // SAFETY: as above.
                    while let Some(peer) = unsafe { p.as_ref() } {
                        weights.push(peer.weight.max(1) as u64);
                        p = peer.next;
                    }
                    match Ring::new(&weights, max_init) {
                        Ok(ring) => groups.push(Group {
                            ring,
                            peers: Vec::new(),
                            list: ptr::null(),
                            warned: false,
                        }),
                        Err(e) => {
                            // SAFETY: the upstream's name lives in the pool.
                            let name = unsafe { crate::ffi::str_bytes(&us.host) };
                            ngx::ngx_log_error!(
                                NGX_LOG_EMERG,
                                log,
                                "\"vnswrr\" cannot balance upstream \"{}\"{}: {}",
                                String::from_utf8_lossy(name),
                                position(us.file_name, us.line),
                                e
                            );
                            return NGX_ERROR as ngx_int_t;
                        }
                    }
                    list = peers.next;
                }
                conf.balancer = Some(Box::new(Balancer { groups }));
                us.peer.init = Some($init_peer);
                NGX_OK as ngx_int_t
            }

            /// The upstream's per-request `init`.
            unsafe extern "C" fn $init_peer(s: *mut $sess_t, us: *mut $uscf_t) -> ngx_int_t {
                // SAFETY: nginx passes a live session about to connect.
                let log = unsafe { <$sess_t as Session>::log(s) };
                // SAFETY: as above.
                guard(log, "vnswrr init peer", NGX_ERROR as ngx_int_t, || unsafe {
                    init_peer(s, us)
                })
            }

            /// # Safety
            /// As for the extern fn.
            unsafe fn init_peer(s: *mut $sess_t, us: *mut $uscf_t) -> ngx_int_t {
                // SAFETY: an upstream configured by `init_upstream` above.
                let balancer = unsafe {
                    ups_conf((*us).srv_conf, $proto)
                        .and_then(|c| c.balancer.as_deref_mut())
                        .and_then(|b| b.downcast_mut::<Balancer>())
                        .map_or(ptr::null_mut(), |b| b as *mut Balancer)
                };
                if balancer.is_null() {
                    return NGX_ERROR as ngx_int_t;
                }
                // SAFETY: the session's pool outlives the connection attempt.
                let data = unsafe {
                    ngx_palloc(<$sess_t as Session>::pool(s), core::mem::size_of::<Data>())
                }
                .cast::<Data>();
                if data.is_null() {
                    return NGX_ERROR as ngx_int_t;
                }
                // SAFETY: fresh, suitably aligned pool memory; all-zero is a
                // valid round-robin data (nginx fills it next).
                unsafe {
                    data.write(Data {
                        rrp: core::mem::zeroed(),
                        balancer,
                        group: 0,
                    });
                }
                // SAFETY: the session has an upstream; round robin uses the
                // data it finds in peer.data.
                unsafe {
                    let pc = <$sess_t as Session>::peer(s);
                    (*pc).data = ptr::addr_of_mut!((*data).rrp).cast();
                    if $init_rr_peer(s, us) != NGX_OK as ngx_int_t {
                        return NGX_ERROR as ngx_int_t;
                    }
                    (*pc).get = Some($get_peer);
                }
                NGX_OK as ngx_int_t
            }

            /// The request's `peer.get`.
            unsafe extern "C" fn $get_peer(
                pc: *mut ngx_peer_connection_t,
                data: *mut c_void,
            ) -> ngx_int_t {
                // SAFETY: nginx passes the peer connection being set up
                // and the data `init_peer` installed.
                let log = unsafe { (*pc).log };
                // SAFETY: as above.
                guard(log, "vnswrr get peer", NGX_BUSY as ngx_int_t, || unsafe {
                    get_peer(pc, data.cast())
                })
            }

            unsafe fn rlock(peers: *mut Peers) {
                // SAFETY: live peers; the lock exists when shpool is set.
                unsafe {
                    if !(*peers).shpool.is_null() {
                        ngx_rwlock_rlock(ptr::addr_of_mut!((*peers).rwlock));
                    }
                }
            }

            unsafe fn unlock(peers: *mut Peers) {
                // SAFETY: as for rlock.
                unsafe {
                    if !(*peers).shpool.is_null() {
                        ngx_rwlock_unlock(ptr::addr_of_mut!((*peers).rwlock));
                    }
                }
            }

            /// Take the peer for this request: under the peer's own lock
            /// (as round robin's `free` gives it back), re-check
            /// `max_conns` and count the connection.
            ///
            /// # Safety
            /// `peer` is in `peers`, whose lock is held for reading.
            unsafe fn take(peers: *mut Peers, peer: *mut Peer, now: time_t, ring: bool) -> bool {
                // SAFETY: per the contract.
                unsafe {
                    let shared = !(*peers).shpool.is_null();
                    if shared {
                        ngx_rwlock_wlock(ptr::addr_of_mut!((*peer).lock));
                    }
                    let ok = (*peer).max_conns == 0 || (*peer).conns < (*peer).max_conns;
                    if ok {
                        (*peer).conns += 1;
                        since_1_27_3! {
                            (*peer).refs += 1;
                        }
                        if ring && now - (*peer).checked > (*peer).fail_timeout {
                            (*peer).checked = now;
                        }
                    }
                    if shared {
                        ngx_rwlock_unlock(ptr::addr_of_mut!((*peer).lock));
                    }
                    ok
                }
            }

            fn check_down(list: *const c_void, peer: *mut Peer) -> bool {
                crate::process::peer_down($proto, list as usize, peer as usize)
            }

            /// `Some(true)`: out by its state; `Some(false)`: held back by
            /// a ramp for this request alone.
            fn verdict(list: *const c_void, peer: *mut Peer) -> Option<bool> {
                crate::process::peer_verdict($proto, list as usize, peer as usize)
            }

            /// nginx's single-peer path: no ring, no tried bitmap, no
            /// max_fails.
            ///
            /// # Safety
            /// `peers` is live and read-locked.
            unsafe fn single(peers: *mut Peers, rrp: &mut PeerData, now: time_t) -> *mut Peer {
                // SAFETY: per the contract.
                unsafe {
                    let peer = (*peers).peer;
                    // A ramp never holds back the only peer.
                    if peer.is_null() || (*peer).down != 0 || check_down(peers.cast(), peer) {
                        return ptr::null_mut();
                    }
                    if (*peer).max_conns != 0 && (*peer).conns >= (*peer).max_conns {
                        return ptr::null_mut();
                    }
                    if !take(peers, peer, now, false) {
                        return ptr::null_mut();
                    }
                    rrp.current = peer;
                    peer
                }
            }

            enum Pick {
                Peer(*mut Peer),
                Nothing,
                /// The live list does not match the ring (a broken
                /// invariant): let round robin choose.
                Mismatch,
            }

            /// Choose from `group`'s ring.
            ///
            /// # Safety
            /// `peers` is the group's live list, read-locked; `rrp` the
            /// request's round-robin data.
            unsafe fn from_ring(
                peers: *mut Peers,
                rrp: &mut PeerData,
                group: &mut Group,
                now: (time_t, ngx_msec_t),
            ) -> Pick {
                // SAFETY: per the contract.
                unsafe {
                    if group.list != peers as *const c_void {
                        group.peers.clear();
                        let mut p = (*peers).peer;
                        while !p.is_null() {
                            group.peers.push(p.cast());
                            p = (*p).next;
                        }
                        group.list = peers as *const c_void;
                    }
                }
                // SAFETY: as above.
                let number = unsafe { (*peers).number };
                if group.peers.len() != group.ring.peers() || number != group.peers.len() {
                    return Pick::Mismatch;
                }
                let list = peers as *const c_void;
                let Group {
                    ring, peers: live, ..
                } = group;
                let live: &[*mut c_void] = live;
                let tried = rrp.tried;
                let (sec, msec) = now;
                let bit = |i: usize| (i / usize::BITS as usize, 1usize << (i % usize::BITS as usize));
                // Reasons that outlive the request first, so that the ring
                // may cache them; then this request's own.
                let check = |i: usize| {
                    let Some(&p) = live.get(i) else {
                        return Verdict::SkipCached;
                    };
                    let peer = p.cast::<Peer>();
                    let (n, m) = bit(i);
                    // SAFETY: live, read-locked peers; the tried bitmap
                    // covers the larger group.
                    unsafe {
                        let verdict = verdict(list, peer);
                        if (*peer).down != 0 || verdict == Some(true) {
                            return Verdict::SkipCached;
                        }
                        if (*peer).max_fails != 0
                            && (*peer).fails >= (*peer).max_fails
                            && sec - (*peer).checked <= (*peer).fail_timeout
                        {
                            return Verdict::SkipCached;
                        }
                        if *tried.add(n) & m != 0 || verdict == Some(false) {
                            return Verdict::Skip;
                        }
                        if (*peer).max_conns != 0 && (*peer).conns >= (*peer).max_conns {
                            return Verdict::Skip;
                        }
                    }
                    Verdict::Usable
                };
                let take = |i: usize| {
                    live.get(i)
                        // SAFETY: as above.
                        .is_some_and(|&p| unsafe { take(peers, p.cast(), sec, true) })
                };
                let Some(i) = ring.select(msec as u64, random, check, take) else {
                    return Pick::Nothing;
                };
                let Some(&p) = live.get(i) else {
                    return Pick::Nothing;
                };
                // The next request most likely takes the next node's peer:
                // fetch its struct into the cache now, while this request
                // is proxied. In a large upstream a peer comes round once
                // every N selections, so its struct is otherwise a cache
                // miss on the next selection's path.
                if let Some(&next) = ring.upcoming().and_then(|j| live.get(j)) {
                    prefetch(next.cast_const().cast(), core::mem::size_of::<Peer>());
                }
                // Its address is read next (pc->sockaddr, and compared by
                // `keepalive`'s cache lookup).
                // SAFETY: a live peer, read-locked.
                prefetch(unsafe { (*p.cast::<Peer>()).sockaddr }.cast_const().cast(), 16);
                let (n, m) = bit(i);
                // SAFETY: as above.
                unsafe { *tried.add(n) |= m };
                rrp.current = p.cast();
                Pick::Peer(p.cast())
            }

            /// # Safety
            /// As for the extern fn.
            unsafe fn get_peer(pc: *mut ngx_peer_connection_t, data: *mut Data) -> ngx_int_t {
                // SAFETY: nginx's get contract; `data` is ours.
                let (pc, data) = unsafe { (&mut *pc, &mut *data) };
                ngx::ngx_log_debug!(
                    mask: ngx::log::DebugMask::$mask,
                    pc.log,
                    "get vnswrr peer, try: {}",
                    pc.tries
                );
                pc.set_cached(0);
                pc.connection = ptr::null_mut();
                let now = now();
                let first = data.rrp.peers;
                // SAFETY: the balancer lives in the cycle's srv conf.
                let Some(balancer) = (unsafe { data.balancer.as_mut() }) else {
                    return NGX_BUSY as ngx_int_t;
                };
                loop {
                    let peers = data.rrp.peers;
                    // SAFETY: live peers of this upstream.
                    unsafe { rlock(peers) };
                    since_1_27_3! {
                        // SAFETY: read-locked; config points into the zone.
                        let stale = unsafe {
                            !(*peers).config.is_null() && data.rrp.config != *(*peers).config
                        };
                        if stale {
                            // SAFETY: locked above.
                            unsafe { unlock(peers) };
                            // SAFETY: `first` is live; its name too.
                            pc.name = unsafe { (*first).name };
                            return NGX_BUSY as ngx_int_t;
                        }
                    }
                    // SAFETY: read-locked.
                    let pick = unsafe {
                        if (*peers).single() != 0 {
                            Pick::Peer(single(peers, &mut data.rrp, now.0))
                        } else {
                            match balancer.groups.get_mut(data.group) {
                                Some(g) => from_ring(peers, &mut data.rrp, g, now),
                                None => Pick::Mismatch,
                            }
                        }
                    };
                    match pick {
                        Pick::Peer(peer) if !peer.is_null() => {
                            // SAFETY: the chosen peer, read-locked.
                            unsafe {
                                pc.sockaddr = (*peer).sockaddr;
                                pc.socklen = (*peer).socklen;
                                pc.name = ptr::addr_of_mut!((*peer).name);
                                unlock(peers);
                            }
                            return NGX_OK as ngx_int_t;
                        }
                        Pick::Mismatch => {
                            // SAFETY: locked above.
                            unsafe { unlock(peers) };
                            if let Some(g) = balancer.groups.get_mut(data.group) {
                                if !g.warned {
                                    g.warned = true;
                                    ngx::ngx_log_error!(
                                        NGX_LOG_ALERT,
                                        pc.log,
                                        "vnswrr: the peer list changed under the ring; \
                                         using round robin"
                                    );
                                }
                            }
                            // SAFETY: rrp is round robin's data.
                            return unsafe { $get_rr(pc, ptr::addr_of_mut!(data.rrp).cast()) };
                        }
                        _ => {}
                    }
                    // SAFETY: read-locked.
                    let next = unsafe { (*peers).next };
                    // SAFETY: locked above.
                    unsafe { unlock(peers) };
                    if next.is_null() || data.group != 0 {
                        break;
                    }
                    // The backup group, for this and later tries of the
                    // request, with the tried bitmap cleared (as round robin).
                    ngx::ngx_log_debug!(
                        mask: ngx::log::DebugMask::$mask,
                        pc.log,
                        "vnswrr backup servers"
                    );
                    data.rrp.peers = next;
                    data.group = 1;
                    // SAFETY: the bitmap covers the larger group.
                    unsafe {
                        let words = (*next).number.div_ceil(usize::BITS as usize);
                        for w in 0..words {
                            *data.rrp.tried.add(w) = 0;
                        }
                    }
                }
                // SAFETY: `first` is live; its name too.
                pc.name = unsafe { (*first).name };
                NGX_BUSY as ngx_int_t
            }
        }
    };
}

balancer! {
    mod http;
    proto: HttpOrStream::Http,
    debug: Http,
    srv_conf: ngx::ffi::ngx_http_upstream_srv_conf_t,
    peers: ngx::ffi::ngx_http_upstream_rr_peers_t,
    peer: ngx::ffi::ngx_http_upstream_rr_peer_t,
    peer_data: ngx::ffi::ngx_http_upstream_rr_peer_data_t,
    session: ngx_http_request_t,
    round_robin: ngx::ffi,
    init_round_robin: ngx_http_upstream_init_round_robin,
    init_round_robin_peer: ngx_http_upstream_init_round_robin_peer,
    get_round_robin_peer: ngx_http_upstream_get_round_robin_peer,
    init_upstream: ngx_http_upstream_init_vnswrr,
    init_peer: ngx_http_upstream_init_vnswrr_peer,
    get_peer: ngx_http_upstream_get_vnswrr_peer,
}

balancer! {
    mod stream;
    proto: HttpOrStream::Stream,
    debug: Stream,
    srv_conf: ngx::ffi::ngx_stream_upstream_srv_conf_t,
    peers: ngx::ffi::ngx_stream_upstream_rr_peers_t,
    peer: ngx::ffi::ngx_stream_upstream_rr_peer_t,
    peer_data: ngx::ffi::ngx_stream_upstream_rr_peer_data_t,
    session: ngx_stream_session_t,
    // Found at run time: stream may be a module of its own (src/stream_link.rs).
    round_robin: crate::stream_link,
    init_round_robin: ngx_stream_upstream_init_round_robin,
    init_round_robin_peer: ngx_stream_upstream_init_round_robin_peer,
    get_round_robin_peer: ngx_stream_upstream_get_round_robin_peer,
    init_upstream: ngx_stream_upstream_init_vnswrr,
    init_peer: ngx_stream_upstream_init_vnswrr_peer,
    get_peer: ngx_stream_upstream_get_vnswrr_peer,
}
