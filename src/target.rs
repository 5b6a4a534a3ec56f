//! What is checked, as a worker sees it: an upstream's check settings
//! ([`UpstreamCheck`], shared by the probes of its peers) and each checked
//! peer ([`Target`]). Built from the configuration once per process
//! (`crate::worker`), read by the probe engine and the status page.

use core::cell::RefCell;
use core::mem::{offset_of, size_of};
use std::rc::Rc;

use healthcheck_core::conf::{CheckConf, CheckType, FailOpen, StatusClasses, BUFFER_SIZE_DEFAULT};
use healthcheck_core::events::{By, Event, State};
use healthcheck_core::http::request::HttpRequest;
use healthcheck_core::matcher::{MatchBlock, Test};
use healthcheck_core::protocols::fastcgi;
use healthcheck_core::reason::Reason;
use healthcheck_core::status::Group;
use ngx::ffi::{ngx_log_t, ngx_str_t, NGX_LOG_WARN};

use crate::conf::{EventSink, HttpConf};
use crate::ffi::{self, str_bytes};
use crate::match_block::CompiledMatch;
use crate::regex::Compiled;
use crate::shm::{Slot, Zone};
use crate::tls::TlsConf;
use crate::upstream::{PeerRef, UpstreamRef};

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
    /// `check_fail_open`.
    pub fail_open: FailOpen,
    /// The upstream's checked peers: slot index and weight (the fail-open
    /// share is by weight); its resolved addresses join and leave.
    pub members: RefCell<Vec<(u32, u32)>>,
    /// The upstream's name (cycle pool).
    pub upstream: ngx_str_t,
    /// `type=https` / `type=tls`: the transport's settings.
    pub tls: Option<TlsCheck>,
    /// `type=fastcgi`: the request (`check_fastcgi_param`), built once.
    pub fastcgi_request: Vec<u8>,
    /// `type=grpc|grpcs`: what the health check asks and accepts.
    pub grpc: Option<GrpcCheck>,
    /// `check_http_version 2`: the http rounds speak HTTP/2.
    pub http2: bool,
    /// The context the upstream is in.
    pub group: Group,
    /// `check_log`: the upstream's, else its http or stream block's.
    pub events: Option<EventSink>,
    /// The upstream's own `check_max_inflight` (without: its block's limit).
    pub max_inflight: Option<u32>,
    /// `check_outlier`.
    pub outlier: Option<healthcheck_core::conf::OutlierConf>,
}

/// What a gRPC health check asks and accepts.
pub struct GrpcCheck {
    /// `check_grpc_service` (empty: the server's overall health).
    pub service: Vec<u8>,
    /// `check_grpc_status`: codes that pass as they are.
    pub extra_pass: Vec<u32>,
}

/// What a TLS check needs besides its SSL context's own settings.
pub struct TlsCheck {
    /// The upstream's SSL context (configuration pool).
    pub ssl: *mut ngx::ffi::ngx_ssl_t,
    /// `check_ssl_server_name`.
    pub server_name: bool,
    /// `check_ssl_name`.
    pub name: Option<Vec<u8>>,
    /// `check_ssl_verify`.
    pub verify: bool,
    /// `check_ssl_session_reuse`.
    pub session_reuse: bool,
    /// `check_ssl_verify_interval`, ms.
    pub verify_interval_ms: u64,
}

impl TlsCheck {
    /// The settings of `t`, once its SSL context exists.
    fn of(t: &TlsConf) -> Option<TlsCheck> {
        Some(TlsCheck {
            ssl: t.ssl?.as_ptr(),
            server_name: t.server_name.unwrap_or(true),
            name: t.name.clone(),
            verify: t.verify.unwrap_or(false),
            session_reuse: t.session_reuse.unwrap_or(true),
            verify_interval_ms: t
                .verify_interval
                .unwrap_or(healthcheck_core::conf::tls::VERIFY_INTERVAL_DEFAULT_MS),
        })
    }
}

/// What an http check sends and accepts.
pub struct HttpCheck {
    /// `check_http_send`, else built per peer from `request`.
    pub send: Option<Vec<u8>>,
    pub request: HttpRequest,
    pub expect_alive: StatusClasses,
}

impl UpstreamCheck {
    /// The check of upstream `u` (which has `check`), its configured
    /// peers at slots `first..`; `matches` are the context's blocks.
    pub fn new(
        u: &UpstreamRef,
        first: u32,
        matches: &[Rc<CompiledMatch>],
        (group, block_log): (Group, Option<EventSink>),
    ) -> Option<Self> {
        let c = u.conf();
        let conf = c.check.get()?;
        let h = &c.http;
        let http = conf.check_type.judges_status().then(|| HttpCheck {
            send: h.send.get().cloned(),
            request: h.request.clone(),
            expect_alive: h.expect_alive.get().copied().unwrap_or_default(),
        });
        let matcher = match &conf.match_block {
            Some(name) => matches.iter().find(|m| &m.block.name == name).cloned(),
            None => implied_block(conf.check_type, h),
        };
        let fastcgi_request = match conf.check_type {
            CheckType::Fastcgi => {
                let params: Vec<(Vec<u8>, Vec<u8>)> = match h.fastcgi_params.get() {
                    Some(p) => p.clone(),
                    None => fastcgi::DEFAULT_PARAMS
                        .iter()
                        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
                        .collect(),
                };
                fastcgi::request(&params)
            }
            _ => Vec::new(),
        };
        let tls = conf
            .check_type
            .is_tls()
            .then(|| TlsCheck::of(&c.tls))
            .flatten();
        Some(UpstreamCheck {
            conf: conf.clone(),
            keepalive_requests: c.keepalive_requests.get().copied().unwrap_or(10),
            http,
            matcher,
            buffer_size: h.buffer_size.get().copied().unwrap_or(BUFFER_SIZE_DEFAULT),
            fail_open: c.fail_open.get().copied().unwrap_or_default(),
            members: RefCell::new(
                (first..)
                    .zip(&u.peers)
                    .map(|(i, p)| (i, p.weight))
                    .collect(),
            ),
            upstream: u.name,
            tls,
            fastcgi_request,
            grpc: conf.check_type.is_grpc().then(|| GrpcCheck {
                service: h.grpc_service.get().cloned().unwrap_or_default(),
                extra_pass: h.grpc_status.get().cloned().unwrap_or_default(),
            }),
            http2: conf.check_type.is_http()
                && h.http_version.get() == Some(&healthcheck_core::conf::HttpVersion::Http2),
            group,
            events: c.event_log.get().copied().or(block_log),
            max_inflight: c.max_inflight.get().copied(),
            outlier: c.outlier.get().map(|o| match group {
                Group::Http => *o,
                Group::Stream => o.for_stream(),
            }),
        })
    }

    /// A transition of the upstream (`peer` None) or of its peer `(name,
    /// server)`, now; the caller adds reason, detail and checks.
    pub fn event<'a>(
        &'a self,
        peer: Option<(&'a [u8], &'a [u8])>,
        (from, to): (State, State),
        by: By,
    ) -> Event<'a> {
        Event {
            time_ms: ffi::unix_ms(),
            upstream: self.upstream_bytes(),
            upstream_type: self.group.as_str(),
            peer,
            from,
            to,
            by,
            reason: None,
            detail: None,
            checks: None,
        }
    }

    /// Write `ev` to the upstream's `check_log`, if it has one.
    pub fn emit(&self, zone: &Zone, ev: &Event) {
        if let Some(sink) = &self.events {
            crate::events::emit(sink, zone, ev);
        }
    }

    /// Whether a round of `self` and one of `o` to the same address and
    /// `server` line are the same round: every setting a round uses is
    /// equal (the upstream's own ones, fail-open, the event log, the
    /// limits, may differ). The condition of a shared probe.
    pub fn probes_like(&self, o: &UpstreamCheck) -> bool {
        let http = match (&self.http, &o.http) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                a.send == b.send && a.request == b.request && a.expect_alive == b.expect_alive
            }
            _ => false,
        };
        let matcher = match (&self.matcher, &o.matcher) {
            (None, None) => true,
            (Some(a), Some(b)) => Rc::ptr_eq(a, b) || a.block == b.block,
            _ => false,
        };
        let tls = match (&self.tls, &o.tls) {
            (None, None) => true,
            // One SSL context per distinct set of settings in a context.
            (Some(a), Some(b)) => {
                a.ssl == b.ssl
                    && a.server_name == b.server_name
                    && a.name == b.name
                    && a.verify == b.verify
                    && a.session_reuse == b.session_reuse
                    && a.verify_interval_ms == b.verify_interval_ms
            }
            _ => false,
        };
        let grpc = match (&self.grpc, &o.grpc) {
            (None, None) => true,
            (Some(a), Some(b)) => a.service == b.service && a.extra_pass == b.extra_pass,
            _ => false,
        };
        // `passive_fall` and `default_down` are the rows' own.
        let round = |c: &CheckConf| CheckConf {
            passive_fall: 0,
            default_down: false,
            ..c.clone()
        };
        round(&self.conf) == round(&o.conf)
            && self.conf.shared
            && self.keepalive_requests == o.keepalive_requests
            && self.buffer_size == o.buffer_size
            && self.fastcgi_request == o.fastcgi_request
            && self.http2 == o.http2
            && http
            && matcher
            && tls
            && grpc
    }

    /// Whether the rounds speak HTTP/2 (grpc, or http with
    /// `check_http_version 2`).
    pub fn is_h2(&self) -> bool {
        self.grpc.is_some() || self.http2
    }

    /// The reasons this check can fail with (the Prometheus page has one
    /// failure series per reason listed).
    pub fn failure_reasons(&self) -> &'static [Reason] {
        let expects = self
            .matcher
            .as_ref()
            .is_some_and(|m| m.block.tests.iter().any(|t| matches!(t, Test::Expect(_))));
        self.conf.check_type.failure_reasons_of(expects, self.http2)
    }

    pub fn upstream_bytes(&self) -> &[u8] {
        // SAFETY: the upstream name lives in the cycle pool.
        unsafe { str_bytes(&self.upstream) }
    }

    /// Enter or leave fail-open for the upstream when its check-up share
    /// (by weight) crossed the threshold; logs the change at `warn`. Every
    /// slot of the upstream carries the flag (selection reads its own); the
    /// first slot's flag decides who logs.
    pub fn update_fail_open(&self, zone: &Zone, log: *mut ngx_log_t) {
        if self.fail_open == FailOpen::Off {
            return;
        }
        let Ok(members) = self.members.try_borrow() else {
            return;
        };
        let Some(first) = members.first().and_then(|&(i, _)| zone.slot(i as usize)) else {
            return;
        };
        // A few tries: another worker may change a peer meanwhile.
        for _ in 0..4 {
            let (mut up, mut total) = (0u64, 0u64);
            for &(i, w) in members.iter() {
                total += u64::from(w);
                if zone.slot(i as usize).is_some_and(Slot::serving) {
                    up += u64::from(w);
                }
            }
            let want = self.fail_open.applies(up, total);
            if first.fail_open() == want {
                // Members that joined since (resolved addresses) carry it too.
                let mut moved = false;
                for &(i, _) in &members[1..] {
                    moved |= zone.slot(i as usize).is_some_and(|s| s.set_fail_open(want));
                }
                if moved {
                    zone.header().note_change();
                }
                return;
            }
            // Another worker may have made the same change meanwhile.
            if !first.set_fail_open(want) {
                continue;
            }
            for &(i, _) in &members[1..] {
                if let Some(s) = zone.slot(i as usize) {
                    s.set_fail_open(want);
                }
            }
            zone.header().note_change();
            let name = String::from_utf8_lossy(self.upstream_bytes());
            if self.events.is_some() {
                let detail = format!("weight {up} of {total} of its checked peers is up");
                let mut ev = self.event(
                    None,
                    if want {
                        (State::Enforced, State::FailOpen)
                    } else {
                        (State::FailOpen, State::Enforced)
                    },
                    By::FailOpen,
                );
                ev.detail = Some(&detail);
                self.emit(zone, &ev);
            }
            ffi::log(
                NGX_LOG_WARN,
                log,
                format_args!(
                    "upstream {name} {}: weight {up} of {total} of its checked peers is up \
                     (check_fail_open {})",
                    if want {
                        "fails open, nginx's own max_fails decides alone"
                    } else {
                        "no longer fails open, checks keep down peers out again"
                    },
                    self.fail_open,
                ),
            );
        }
    }
}

/// The block the C modules' directives stand for when no `match=` names
/// one: `check_http_send` of a tcp check (bytes sent, nothing read) or of a
/// udp check (the datagram), `check_http_expect_body` of an http check
/// (with the status `check_http_expect_alive` accepts).
fn implied_block(t: CheckType, h: &HttpConf) -> Option<Rc<CompiledMatch>> {
    match t {
        CheckType::Tcp | CheckType::Udp => {
            let send = h.send.get()?;
            Some(Rc::new(CompiledMatch {
                block: MatchBlock {
                    name: b"check_http_send".to_vec(),
                    tests: vec![Test::Send(send.clone())],
                },
                regexes: Compiled::default(),
            }))
        }
        CheckType::Http | CheckType::Https => {
            let body = h.expect_body.get()?;
            let alive = h.expect_alive.get().copied().unwrap_or_default();
            let mut tests = vec![Test::Status {
                negated: false,
                ranges: alive.ranges(),
            }];
            tests.extend(body.block.tests.iter().cloned());
            Some(Rc::new(CompiledMatch {
                block: MatchBlock {
                    name: body.block.name.clone(),
                    tests,
                },
                regexes: body.regexes.clone(),
            }))
        }
        _ => None,
    }
}

/// One checked peer as the worker sees it.
#[derive(Clone)]
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

    /// A copy of the peer's address, with the check port when `port=` is set.
    pub fn check_address(&self) -> Box<[u8]> {
        let t = self;
        let len = t.peer.socklen as usize;
        // SAFETY: rr peers hold a valid sockaddr of `socklen` bytes.
        let mut addr: Box<[u8]> =
            unsafe { core::slice::from_raw_parts(t.peer.sockaddr.cast::<u8>(), len) }.into();
        let port = t.check.conf.port;
        if port != 0 {
            let be = port.to_be_bytes();
            // sin_port and sin6_port both sit right after the 2-byte family.
            let family = if len >= size_of::<libc::sockaddr>() {
                // SAFETY: at least a sockaddr header; read unaligned.
                i32::from(
                    unsafe { addr.as_ptr().cast::<libc::sockaddr>().read_unaligned() }.sa_family,
                )
            } else {
                0
            };
            let fits = match family {
                libc::AF_INET => len >= size_of::<libc::sockaddr_in>(),
                libc::AF_INET6 => len >= size_of::<libc::sockaddr_in6>(),
                _ => false,
            };
            if fits {
                let at = offset_of!(libc::sockaddr_in, sin_port);
                debug_assert_eq!(at, offset_of!(libc::sockaddr_in6, sin6_port));
                addr[at..at + 2].copy_from_slice(&be);
            }
        }
        addr
    }
}
