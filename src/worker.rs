//! What a worker knows of its checked peers: for each context (http,
//! stream) the peers in status order, the map the selection hooks use, and
//! the shared zone. Built once per process (and per in-place reload) by
//! `process`, read through `process::with`.
//!
//! nginx runs every module callback of a process on one thread, so this
//! state needs no locks; `Cell` documents that single-threaded contract.

use core::cell::Cell;
use std::rc::Rc;

use healthcheck_core::conf::{CheckConf, CheckType, StatusClasses, BUFFER_SIZE_DEFAULT};
use healthcheck_core::http::request::HttpRequest;
use healthcheck_core::matcher::Test;
use healthcheck_core::ptrmap::PtrMap;
use healthcheck_core::reason::Reason;
use ngx::ffi::ngx_str_t;

use crate::ffi::str_bytes;
use crate::match_block::CompiledMatch;
use crate::shm::{Slot, Zone};
use crate::upstream::{PeerRef, UpstreamRef};
use healthcheck_core::status::Group;

/// An upstream's check settings, shared by its peers' targets and probes.
pub struct UpstreamCheck {
    pub conf: CheckConf,
    /// `check_keepalive_requests` (default 10).
    pub keepalive_requests: u32,
    /// `type=http`: the request and the verdict's settings.
    pub http: Option<HttpCheck>,
    /// The `check_match` block of `match=`.
    pub matcher: Option<Rc<CompiledMatch>>,
    /// `check_buffer_size` (also what a send/expect check reads at most).
    pub buffer_size: usize,
}

impl UpstreamCheck {
    /// The reasons this check can fail with (the Prometheus page has one
    /// failure series per reason listed).
    pub fn failure_reasons(&self) -> &'static [Reason] {
        let expects = self
            .matcher
            .as_ref()
            .is_some_and(|m| m.block.tests.iter().any(|t| matches!(t, Test::Expect(_))));
        self.conf.check_type.failure_reasons_with(expects)
    }
}

/// What an http check sends and accepts.
pub struct HttpCheck {
    /// `check_http_send`, else built per peer from `request`.
    pub send: Option<Vec<u8>>,
    pub request: HttpRequest,
    pub expect_alive: StatusClasses,
}

/// One checked peer as the worker sees it.
pub struct Target {
    /// Index in the status output and in the zone (per context).
    pub index: u32,
    pub upstream: ngx_str_t,
    pub peer: PeerRef,
    pub check: Rc<UpstreamCheck>,
}

impl Target {
    pub fn upstream_bytes(&self) -> &[u8] {
        // SAFETY: the upstream name lives in the cycle pool.
        unsafe { str_bytes(&self.upstream) }
    }
}

/// The checked peers of one context.
#[derive(Default)]
pub struct Context {
    pub zone: Option<Zone>,
    pub targets: Vec<Target>,
    /// `rr peer address -> index`.
    pub map: PtrMap,
    /// The rr peer lists (primary and backup) of checked upstreams.
    lists: PtrMap,
    /// The list last asked about and whether it is in `lists` (balancers
    /// ask about every peer of one list in a row).
    last_list: Cell<(usize, bool)>,
    /// `check_state_file` of the context (full path).
    pub state_file: Option<Vec<u8>>,
}

impl Context {
    /// Build from the context's upstreams, in the order the zone was planned.
    pub fn new(
        zone: Option<Zone>,
        upstreams: &[UpstreamRef],
        matches: &[Rc<CompiledMatch>],
    ) -> Self {
        let mut targets = Vec::new();
        for u in upstreams {
            let Some(conf) = &u.conf().check else {
                continue;
            };
            let h = &u.conf().http;
            let http = (conf.check_type == CheckType::Http).then(|| {
                let mut request = HttpRequest::default();
                if let Some((method, uri)) = &h.request {
                    request.method = method.clone();
                    request.uri = uri.clone();
                }
                for (n, v) in &h.headers {
                    request.set_header(n.clone(), v.clone());
                }
                HttpCheck {
                    send: h.send.clone(),
                    request,
                    expect_alive: h.expect_alive.unwrap_or_default(),
                }
            });
            let matcher = conf
                .match_block
                .as_ref()
                .and_then(|name| matches.iter().find(|m| &m.block.name == name).cloned());
            let check = Rc::new(UpstreamCheck {
                conf: conf.clone(),
                keepalive_requests: u.conf().keepalive_requests.unwrap_or(10),
                http,
                matcher,
                buffer_size: h.buffer_size.unwrap_or(BUFFER_SIZE_DEFAULT),
            });
            for p in &u.peers {
                targets.push(Target {
                    index: targets.len() as u32,
                    upstream: u.name,
                    peer: *p,
                    check: Rc::clone(&check),
                });
            }
        }
        // A zone planned for a different peer list must never be indexed
        // with this one (a broken invariant, but never a wrong peer).
        let zone = zone.filter(|z| z.slots().len() == targets.len());
        let map = PtrMap::new(targets.iter().map(|t| (t.peer.peer as usize, t.index)));
        let lists = PtrMap::new(
            upstreams
                .iter()
                .filter(|u| u.conf().check.is_some())
                .flat_map(|u| u.lists.iter().map(|&l| (l as usize, 1))),
        );
        Self {
            zone,
            targets,
            map,
            lists,
            last_list: Cell::new((0, false)),
            state_file: None,
        }
    }

    /// Is the peer at `addr` marked down by its check? Unknown peers (not
    /// checked, or created at run time by `resolve`) are never down.
    ///
    /// `list` is the rr peer list the balancer is walking (0 = unknown): a
    /// list of an upstream without `check` answers "not down" after one
    /// comparison, so a round robin over thousands of unchecked servers
    /// pays almost nothing per server for the hook.
    #[inline]
    pub fn peer_down(&self, list: usize, addr: usize) -> bool {
        if list != 0 {
            let (last, checked) = self.last_list.get();
            let checked = if last == list {
                checked
            } else {
                let checked = self.lists.get(list).is_some();
                self.last_list.set((list, checked));
                checked
            };
            if !checked {
                return false;
            }
        }
        let (Some(zone), Some(i)) = (self.zone.as_ref(), self.map.get(addr)) else {
            return false;
        };
        zone.slot(i as usize).is_some_and(Slot::vetoed)
    }
}

/// Everything a worker knows.
#[derive(Default)]
pub struct Worker {
    pub http: Context,
    pub stream: Context,
}

impl Worker {
    pub fn context(&self, proto: Group) -> &Context {
        match proto {
            Group::Http => &self.http,
            Group::Stream => &self.stream,
        }
    }
}
