//! The probe kinds, dispatched by `match` (no boxing).

use std::rc::Rc;

use healthcheck_core::conf::CheckType;
use healthcheck_core::http::request::{build_request, host_of_server};

use super::exchange::{Exchange, Protocol};
use super::h2::{Mode, H2};
use super::kind::{Cx, ProbeKind};
use super::outcome::Step;
use super::{http, tcp, udp};
use crate::target::Target;

pub enum Kind {
    Tcp(tcp::Tcp),
    Udp(udp::Udp),
    Http(http::Http),
    Exchange(Exchange),
    H2(H2),
}

impl Kind {
    /// The probe kind of `t`'s check; `keep` says whether this probe keeps
    /// its connections (the request says so).
    pub fn new(t: &Target, keep: bool) -> Kind {
        let check = &t.check;
        let matcher = check.matcher.clone();
        match check.conf.check_type {
            // type=tls: the handshake is the transport's; then as tcp.
            CheckType::Tcp | CheckType::Tls => Kind::Tcp(tcp::Tcp::new(matcher, check.buffer_size)),
            CheckType::Udp => Kind::Udp(udp::Udp::new(matcher)),
            CheckType::Mysql | CheckType::Ajp | CheckType::Fastcgi => {
                let (protocol, request): (Protocol, Rc<[u8]>) = match check.conf.check_type {
                    CheckType::Mysql => (Protocol::Mysql, Rc::from(&[][..])),
                    CheckType::Ajp => (
                        Protocol::Ajp,
                        Rc::from(&healthcheck_core::protocols::ajp::CPING[..]),
                    ),
                    _ => {
                        let alive = check
                            .http
                            .as_ref()
                            .map_or(Default::default(), |h| h.expect_alive);
                        (
                            Protocol::Fastcgi(alive),
                            Rc::from(check.fastcgi_request.as_slice()),
                        )
                    }
                };
                Kind::Exchange(Exchange::new(protocol, request, check.buffer_size))
            }
            CheckType::Grpc | CheckType::Grpcs => {
                let https = check.conf.check_type == CheckType::Grpcs;
                let default_port = if https { 443 } else { 80 };
                let authority = match check.tls.as_ref().and_then(|t| t.name.clone()) {
                    Some(name) => name,
                    None => authority(t, default_port),
                };
                let (service, extra) = check
                    .grpc
                    .as_ref()
                    .map_or((&[][..], &[][..]), |g| (&g.service[..], &g.extra_pass[..]));
                Kind::H2(H2::new(
                    Mode::Grpc {
                        https,
                        authority,
                        body: H2::grpc_body(service),
                        extra_pass: extra.into(),
                    },
                    check.buffer_size,
                ))
            }
            CheckType::Http | CheckType::Https if check.http2 => {
                let Some(h) = check.http.as_ref() else {
                    return Kind::Tcp(tcp::Tcp::default());
                };
                let https = check.conf.check_type == CheckType::Https;
                let (host, _) = host_of_server(t.peer.server_bytes());
                let headers = healthcheck_core::h2::request::http_request_headers(
                    &h.request,
                    https,
                    host,
                    check_port(t),
                    if https { 443 } else { 80 },
                );
                Kind::H2(H2::new(
                    Mode::Http {
                        headers,
                        expect_alive: h.expect_alive,
                        matcher,
                    },
                    check.buffer_size,
                ))
            }
            CheckType::Http | CheckType::Https => {
                let Some(h) = check.http.as_ref() else {
                    return Kind::Tcp(tcp::Tcp::default());
                };
                let request: Rc<[u8]> = match &h.send {
                    Some(raw) => raw.as_slice().into(),
                    None => {
                        let (host, _) = host_of_server(t.peer.server_bytes());
                        let port = check_port(t);
                        let default_port = match check.conf.check_type {
                            CheckType::Https => 443,
                            _ => 80,
                        };
                        build_request(&h.request, host, port, default_port, keep).into()
                    }
                };
                Kind::Http(http::Http::new(
                    request,
                    h.expect_alive,
                    check.buffer_size,
                    matcher,
                ))
            }
        }
    }

    /// A datagram kind (its socket is UDP).
    pub fn datagram(&self) -> bool {
        matches!(self, Kind::Udp(_))
    }
}

/// The port a round of `t` connects to: `port=`, else the peer's own.
fn check_port(t: &Target) -> u16 {
    match t.check.conf.port {
        0 => t.peer.port(),
        p => p,
    }
}

/// `:authority` of a grpc round: the server line's host and the port
/// connected to (left out when it is the scheme's default).
fn authority(t: &Target, default_port: u16) -> Vec<u8> {
    let (host, _) = host_of_server(t.peer.server_bytes());
    healthcheck_core::http::request::host_value(host, check_port(t), default_port)
}

/// Every call goes to the variant's own implementation.
macro_rules! dispatch {
    ($self:ident, $k:ident => $call:expr) => {
        match $self {
            Kind::Tcp($k) => $call,
            Kind::Udp($k) => $call,
            Kind::Http($k) => $call,
            Kind::Exchange($k) => $call,
            Kind::H2($k) => $call,
        }
    };
}

impl ProbeKind for Kind {
    fn on_connected(&mut self, cx: &Cx) -> Step {
        dispatch!(self, k => k.on_connected(cx))
    }
    fn on_reused(&mut self, cx: &Cx) -> Step {
        dispatch!(self, k => k.on_reused(cx))
    }
    fn on_readable(&mut self, cx: &Cx) -> Step {
        dispatch!(self, k => k.on_readable(cx))
    }
    fn on_writable(&mut self, cx: &Cx) -> Step {
        dispatch!(self, k => k.on_writable(cx))
    }
    fn on_timeout(&mut self, cx: &Cx) -> Step {
        dispatch!(self, k => k.on_timeout(cx))
    }
    fn may_keep(&self) -> bool {
        dispatch!(self, k => k.may_keep())
    }
    fn http_status(&self) -> Option<u16> {
        dispatch!(self, k => k.http_status())
    }
    fn reuse_with_pending_data(&self) -> bool {
        dispatch!(self, k => k.reuse_with_pending_data())
    }
    fn detail(&self) -> Option<&str> {
        dispatch!(self, k => k.detail())
    }
    fn on_round_start(&mut self) {
        dispatch!(self, k => k.on_round_start())
    }
    fn grpc_status(&self) -> Option<u32> {
        dispatch!(self, k => k.grpc_status())
    }
    fn idle_data(&mut self, data: &[u8], c: super::conn::Conn) -> Option<bool> {
        dispatch!(self, k => k.idle_data(data, c))
    }
}
