//! The probe kinds, dispatched by `match` (no boxing).

use std::rc::Rc;

use healthcheck_core::conf::CheckType;
use healthcheck_core::http::request::{build_request, host_of_server};

use super::exchange::{Exchange, Protocol};
use super::kind::{Cx, ProbeKind};
use super::outcome::Step;
use super::{http, tcp, udp};
use crate::target::Target;

pub enum Kind {
    Tcp(tcp::Tcp),
    Udp(udp::Udp),
    Http(http::Http),
    Exchange(Exchange),
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
            CheckType::Http | CheckType::Https => {
                let Some(h) = check.http.as_ref() else {
                    return Kind::Tcp(tcp::Tcp::default());
                };
                let request: Rc<[u8]> = match &h.send {
                    Some(raw) => raw.as_slice().into(),
                    None => {
                        let (host, _) = host_of_server(t.peer.server_bytes());
                        let port = match check.conf.port {
                            0 => t.peer.port(),
                            p => p,
                        };
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

/// Every call goes to the variant's own implementation.
macro_rules! dispatch {
    ($self:ident, $k:ident => $call:expr) => {
        match $self {
            Kind::Tcp($k) => $call,
            Kind::Udp($k) => $call,
            Kind::Http($k) => $call,
            Kind::Exchange($k) => $call,
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
}
