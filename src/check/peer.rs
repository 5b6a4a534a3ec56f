//! The peer a probe checks: where to connect, its names, its slot.

use core::mem::size_of;
use core::sync::atomic::Ordering;

use healthcheck_core::schedule;
use healthcheck_core::status::Group;
use healthcheck_core::zone::Slot;
use ngx::ffi::ngx_str_t;

use crate::shm::Zone;
use crate::target::Target;

/// The peer a probe checks.
pub struct Peer {
    /// The address to connect to (the check port when `port=` is set).
    pub addr: Box<[u8]>,
    /// Points into `name_buf` (the probe owns its copy: a resolved peer's
    /// name lives in nginx's zone only while nginx has the address).
    pub name: ngx_str_t,
    name_buf: Box<[u8]>,
    /// The `server` line (the probe's copy, as the name).
    server_buf: Box<[u8]>,
    pub upstream: ngx_str_t,
    pub proto: Group,
    /// Slot index in the zone.
    pub index: u32,
    /// The slot's identity when the probe was made: a slot of the room for
    /// resolved addresses that another address took is not this probe's.
    pub identity: u64,
    /// A resolved address's probe (its slot is in the room).
    pub resolved: bool,
    /// This worker owns the peer's rounds.
    pub owner: bool,
    /// This worker's slot.
    pub worker: u32,
}

impl Peer {
    /// The peer of `t` in context `proto`, for worker `worker` of `workers`.
    pub fn new(t: &Target, proto: Group, zone: &Zone, (worker, workers): (u32, u32)) -> Peer {
        let name_buf: Box<[u8]> = t.peer.name_bytes().into();
        Peer {
            addr: t.check_address(),
            name: ngx_str_t {
                len: name_buf.len(),
                data: name_buf.as_ptr().cast_mut(),
            },
            name_buf,
            server_buf: t.peer.server_bytes().into(),
            upstream: t.upstream,
            proto,
            index: t.index,
            identity: zone
                .slot(t.index as usize)
                .map_or(0, |s| s.identity.load(Ordering::Acquire)),
            resolved: t.index as usize >= zone.room_start(),
            owner: schedule::owner(t.index, workers) == worker,
            worker,
        }
    }

    /// The address family of the check address (0 if unknown).
    pub fn family(&self) -> i32 {
        if self.addr.len() < size_of::<libc::sockaddr>() {
            return 0;
        }
        // SAFETY: the buffer holds at least a sockaddr header; read
        // unaligned (a boxed byte slice).
        let sa = unsafe { self.addr.as_ptr().cast::<libc::sockaddr>().read_unaligned() };
        i32::from(sa.sa_family)
    }

    pub fn name(&self) -> String {
        String::from_utf8_lossy(&self.name_buf).into_owned()
    }

    /// The name and the `server` line, as the event log names a peer.
    pub fn names(&self) -> (&[u8], &[u8]) {
        (&self.name_buf, &self.server_buf)
    }
}

/// A row whose rounds another row's probe runs (`crate::sharing`): the
/// probe records each round in it too.
pub struct Follower {
    pub target: Target,
    pub proto: Group,
    pub zone: Zone,
    /// The slot's identity when the probe was made.
    identity: u64,
}

impl Follower {
    pub fn new(target: &Target, proto: Group, zone: Zone) -> Follower {
        let identity = zone
            .slot(target.index as usize)
            .map_or(0, |s| s.identity.load(Ordering::Acquire));
        Follower {
            target: target.clone(),
            proto,
            zone,
            identity,
        }
    }

    /// The row's slot, while it is still this row's.
    pub fn slot(&self) -> Option<&Slot> {
        self.zone
            .slot(self.target.index as usize)
            .filter(|s| self.identity != 0 && s.identity.load(Ordering::Acquire) == self.identity)
    }
}
