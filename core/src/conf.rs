//! Configuration parsing: the arguments of every directive of the module,
//! turned into validated values or an `nginx -t` error message.
//!
//! Everything here is pure: the nginx glue hands over the raw argument
//! bytes (`cf->args` after the directive name) and prints a [`ConfError`]
//! after `[emerg] `.
//!
//! - [`parse_check`]: the `check` directive (docs/directives.md, check), including every
//!   default and cross-parameter rule.
//! - [`parse_shm_size`], [`parse_keepalive_requests`],
//!   [`parse_status_directive`], [`parse_vnswrr`]: the smaller directives.
//! - [`parse_http_send`], [`parse_http_expect_alive`],
//!   [`parse_http_request`], [`parse_http_header`], [`parse_buffer_size`]:
//!   the directives of `check ... type=http`; [`unescape`]: `\xHH` in raw
//!   byte strings.
//! - [`parse_time`]: nginx's time syntax (`ngx_parse_time`).
//! - [`finish_context`]: the rules across directives, checked when an
//!   `http {}` or `stream {}` context is complete, and the layout of its
//!   shared zone.

mod check;
mod context;
mod directives;
mod escape;
mod grpc;
mod http;
pub mod migration;
mod outlier;
mod time;
pub mod tls;

use std::fmt;

pub use check::{parse_check, parse_check_warned, parse_check_with, Checked, Written};
pub use context::{
    finish_context, keepalive_reuse, Diagnostic, Directive, Finished, HttpDirectives, PeerFacts,
    TlsDirectives, UpstreamFacts, ZoneLayout, RESOLVE_ROOM,
};
pub use directives::{
    parse_check_status, parse_fail_open, parse_fastcgi_param, parse_keepalive_requests,
    parse_keepalive_time, parse_max_connections, parse_max_inflight, parse_shm_size,
    parse_shutdown_sessions, parse_state_file, parse_status_directive, parse_vnswrr,
    refused_directive, StatusConf, VnswrrConf,
};
pub use escape::unescape;
pub use grpc::{parse_grpc_service, parse_grpc_status, parse_http_version, HttpVersion};
pub(crate) use http::{is_token, TOKEN_SYNTAX};
pub use http::{
    parse_buffer_size, parse_http_expect_alive, parse_http_header, parse_http_request,
    parse_http_send, HttpSend, StatusClasses, BUFFER_SIZE_DEFAULT, BUFFER_SIZE_MAX,
    BUFFER_SIZE_MIN, HOST_WARNING,
};
pub use outlier::{parse_outlier, OutlierConf};
pub use time::parse_time;

/// Smallest `interval`, in ms.
pub const INTERVAL_MIN_MS: u64 = 100;
/// Largest `interval`, in ms (24 h).
pub const INTERVAL_MAX_MS: u64 = 86_400_000;
/// Largest explicit `timeout`, in ms (24 h; it must also be below `interval`).
pub const TIMEOUT_MAX_MS: u64 = 86_400_000;
/// Largest `rise` and `fall`.
pub const RISE_FALL_MAX: u32 = 100_000;
/// Largest `reuse=<time>` and keepalive rehandshake period, in ms (7 days).
pub const PERIOD_MAX_MS: u64 = 604_800_000;
/// Largest `check_keepalive_requests`.
pub const KEEPALIVE_REQUESTS_MAX: u32 = 1_000_000;
/// `check_max_inflight`'s default: probes connecting or handshaking at
/// once in a worker, per http or stream block (docs/directives.md,
/// check_max_inflight).
pub const MAX_INFLIGHT_DEFAULT: u32 = 16;
/// `check_max_inflight`'s largest value.
pub const MAX_INFLIGHT_MAX: u32 = 65_535;
/// Largest `check_shm_size`, in bytes (4 GiB).
pub const SHM_SIZE_MAX: u64 = 1 << 32;

/// Largest TCP_KEEPIDLE / TCP_KEEPINTVL, in seconds (Linux's limit).
pub const KEEPALIVE_IDLE_MAX_S: u32 = 32_767;
/// Largest TCP_KEEPCNT (Linux's limit).
pub const KEEPALIVE_CNT_MAX: u32 = 127;

/// The probe protocol of a `check`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckType {
    /// Connect, then peek one byte.
    Tcp,
    /// Send one datagram; only a confirmed ECONNREFUSED fails.
    Udp,
    /// Send an HTTP request, judge the response's status line, headers
    /// and (with a `check_match` block that tests it) body.
    Http,
    /// `type=http` over TLS.
    Https,
    /// Connect and complete a TLS handshake (`type=ssl_hello` too); a
    /// `check_match` send/expect then runs inside TLS.
    Tls,
    /// Read a MySQL / MariaDB server's initial handshake packet: protocol
    /// version 10 is up, an error packet down (`status`).
    Mysql,
    /// Send an AJP13 CPing, expect the CPong.
    Ajp,
    /// Send a FastCGI request (`check_fastcgi_param`), judge the
    /// response's `Status` as `check_http_expect_alive` says.
    Fastcgi,
    /// gRPC's `grpc.health.v1.Health/Check` over cleartext HTTP/2 (prior
    /// knowledge).
    Grpc,
    /// `type=grpc` over TLS, ALPN `h2`.
    Grpcs,
}

impl CheckType {
    /// The name as written in `type=` and printed by the status page.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckType::Tcp => "tcp",
            CheckType::Udp => "udp",
            CheckType::Http => "http",
            CheckType::Https => "https",
            CheckType::Tls => "tls",
            CheckType::Mysql => "mysql",
            CheckType::Ajp => "ajp",
            CheckType::Fastcgi => "fastcgi",
            CheckType::Grpc => "grpc",
            CheckType::Grpcs => "grpcs",
        }
    }

    /// Whether the check judges an HTTP-style status code (the types
    /// `check_http_expect_alive` applies to).
    pub fn judges_status(self) -> bool {
        matches!(
            self,
            CheckType::Http | CheckType::Https | CheckType::Fastcgi
        )
    }

    /// An HTTP request and response (`http`, `https`).
    pub fn is_http(self) -> bool {
        matches!(self, CheckType::Http | CheckType::Https)
    }

    /// Over TLS (`https`, `tls`, `grpcs`).
    pub fn is_tls(self) -> bool {
        matches!(self, CheckType::Https | CheckType::Tls | CheckType::Grpcs)
    }

    /// A gRPC health check (`grpc`, `grpcs`).
    pub fn is_grpc(self) -> bool {
        matches!(self, CheckType::Grpc | CheckType::Grpcs)
    }

    /// Whether the check may keep its connection between rounds
    /// (`reuse=`, `keepalive=`).
    pub fn may_keep_connection(self) -> bool {
        !matches!(
            self,
            CheckType::Udp | CheckType::Mysql | CheckType::Ajp | CheckType::Fastcgi
        )
    }

    /// The reasons a round of this type can fail with, in counter order
    /// (the Prometheus page has one failure series per reason listed).
    pub fn failure_reasons(self) -> &'static [crate::reason::Reason] {
        use crate::reason::Reason;
        match self {
            // Connect (refused, unreachable, timeout, other errors), then
            // the peek and settle window (reset, closed).
            CheckType::Tcp => &Reason::CONNECTION,
            // Only a confirmed ICMP port unreachable fails a UDP round.
            CheckType::Udp => &[Reason::Unreachable],
            // The connection's reasons, then the response's.
            CheckType::Http => &HTTP_REASONS,
            CheckType::Https => &HTTPS_REASONS,
            CheckType::Tls => &TLS_REASONS,
            // An error packet, or no handshake packet at all.
            CheckType::Mysql | CheckType::Fastcgi => &STATUS_REASONS,
            // Anything but the CPong.
            CheckType::Ajp => &AJP_REASONS,
            CheckType::Grpc => &GRPC_REASONS,
            CheckType::Grpcs => &GRPCS_REASONS,
        }
    }

    /// [`CheckType::failure_reasons_with`] of a check whose http rounds
    /// speak HTTP/2 (`h2`: `check_http_version 2`): `protocol` as well.
    pub fn failure_reasons_of(self, expects: bool, h2: bool) -> &'static [crate::reason::Reason] {
        match (self, h2) {
            (CheckType::Http, true) => &HTTP2_REASONS,
            (CheckType::Https, true) => &HTTPS2_REASONS,
            _ => self.failure_reasons_with(expects),
        }
    }

    /// The reasons a check of this type can fail with when its
    /// `check_match` block has an `expect` test (`expects`) or not: a tcp
    /// exchange adds `mismatch` and `invalid`; a udp check that waits for a
    /// reply adds `timeout`, `error` and `mismatch`.
    pub fn failure_reasons_with(self, expects: bool) -> &'static [crate::reason::Reason] {
        use crate::reason::Reason;
        const TCP_EXPECT: [Reason; 8] = [
            Reason::Refused,
            Reason::Timeout,
            Reason::Reset,
            Reason::Closed,
            Reason::Unreachable,
            Reason::Error,
            Reason::Mismatch,
            Reason::Invalid,
        ];
        const UDP_EXPECT: [Reason; 4] = [
            Reason::Timeout,
            Reason::Unreachable,
            Reason::Error,
            Reason::Mismatch,
        ];
        const TLS_EXPECT: [Reason; 10] = {
            let t = TCP_EXPECT;
            [
                t[0],
                t[1],
                t[2],
                t[3],
                t[4],
                t[5],
                t[6],
                t[7],
                Reason::Tls,
                Reason::TlsVerify,
            ]
        };
        match (self, expects) {
            (CheckType::Tcp, true) => &TCP_EXPECT,
            (CheckType::Udp, true) => &UDP_EXPECT,
            (CheckType::Tls, true) => &TLS_EXPECT,
            (t, _) => t.failure_reasons(),
        }
    }
}

/// [`Reason::CONNECTION`] and `extra`, in counter order (`M` is 6 + `N`).
const fn connection_and<const N: usize, const M: usize>(
    extra: [crate::reason::Reason; N],
) -> [crate::reason::Reason; M] {
    assert!(M == 6 + N);
    let mut all = [crate::reason::Reason::Refused; M];
    let mut i = 0;
    while i < 6 {
        all[i] = crate::reason::Reason::CONNECTION[i];
        i += 1;
    }
    let mut j = 0;
    while j < N {
        all[6 + j] = extra[j];
        j += 1;
    }
    all
}

/// `type=mysql` and `type=fastcgi`: the connection's, a refused status
/// (an error packet, a `Status` not accepted) and an unreadable answer.
const STATUS_REASONS: [crate::reason::Reason; 8] = connection_and([
    crate::reason::Reason::Status,
    crate::reason::Reason::Invalid,
]);

/// `type=ajp`: the connection's and an answer that is not the CPong.
const AJP_REASONS: [crate::reason::Reason; 7] = connection_and([crate::reason::Reason::Mismatch]);

/// `type=grpc`: the connection's, a status that does not pass, a
/// malformed answer and HTTP/2's own failures.
const GRPC_REASONS: [crate::reason::Reason; 9] = connection_and([
    crate::reason::Reason::Status,
    crate::reason::Reason::Invalid,
    crate::reason::Reason::Protocol,
]);

/// `type=grpcs`: [`GRPC_REASONS`] and the handshake's (in counter order).
const GRPCS_REASONS: [crate::reason::Reason; 11] = connection_and([
    crate::reason::Reason::Status,
    crate::reason::Reason::Invalid,
    crate::reason::Reason::Tls,
    crate::reason::Reason::TlsVerify,
    crate::reason::Reason::Protocol,
]);

/// `type=http` over HTTP/2: the http reasons and `protocol`.
const HTTP2_REASONS: [crate::reason::Reason; 10] = connection_and([
    crate::reason::Reason::Status,
    crate::reason::Reason::Mismatch,
    crate::reason::Reason::Invalid,
    crate::reason::Reason::Protocol,
]);

/// `type=https` over HTTP/2.
const HTTPS2_REASONS: [crate::reason::Reason; 12] = connection_and([
    crate::reason::Reason::Status,
    crate::reason::Reason::Mismatch,
    crate::reason::Reason::Invalid,
    crate::reason::Reason::Tls,
    crate::reason::Reason::TlsVerify,
    crate::reason::Reason::Protocol,
]);

/// [`Reason::CONNECTION`], then what a response can fail with.
const HTTP_REASONS: [crate::reason::Reason; 9] = {
    use crate::reason::Reason;
    let response = [Reason::Status, Reason::Mismatch, Reason::Invalid];
    let mut all = [Reason::Refused; 9];
    let mut i = 0;
    while i < Reason::CONNECTION.len() {
        all[i] = Reason::CONNECTION[i];
        i += 1;
    }
    let mut j = 0;
    while j < response.len() {
        all[i + j] = response[j];
        j += 1;
    }
    all
};

/// [`Reason::CONNECTION`], then the handshake's.
const TLS_REASONS: [crate::reason::Reason; 8] = {
    use crate::reason::Reason;
    let c = Reason::CONNECTION;
    [
        c[0],
        c[1],
        c[2],
        c[3],
        c[4],
        c[5],
        Reason::Tls,
        Reason::TlsVerify,
    ]
};

/// [`HTTP_REASONS`], then the handshake's.
const HTTPS_REASONS: [crate::reason::Reason; 11] = {
    use crate::reason::Reason;
    let h = HTTP_REASONS;
    [
        h[0],
        h[1],
        h[2],
        h[3],
        h[4],
        h[5],
        h[6],
        h[7],
        h[8],
        Reason::Tls,
        Reason::TlsVerify,
    ]
};

/// The `reuse=` parameter as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reuse {
    /// A new connection every round.
    Off,
    /// Keep the connection; re-handshake every `max(30s, 2 * interval)`.
    On,
    /// Keep the connection; re-handshake every `ms` milliseconds
    /// (always greater than `interval`).
    Period {
        /// The period in milliseconds (written in seconds syntax).
        ms: u64,
    },
}

/// Kernel keepalive options of a kept check connection, all in the units
/// the socket options take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelKeepalive {
    /// TCP_KEEPIDLE, seconds, 1..=32767.
    pub idle_s: u32,
    /// TCP_KEEPINTVL, seconds, 1..=`idle_s`.
    pub intvl_s: u32,
    /// TCP_KEEPCNT, 1..=127.
    pub cnt: u32,
}

/// `check_max_connections`: how many connections a worker's checks may
/// hold (kept between rounds, and rounds in flight).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnLimit {
    /// This many.
    Count(u32),
    /// This share of `worker_connections`, in percent (1..=100).
    Share(u8),
}

impl Default for ConnLimit {
    /// Half of `worker_connections`.
    fn default() -> Self {
        ConnLimit::Share(50)
    }
}

impl ConnLimit {
    /// The number, for a worker of `worker_connections` connections.
    pub fn of(self, worker_connections: u64) -> u64 {
        match self {
            ConnLimit::Count(n) => u64::from(n),
            ConnLimit::Share(p) => worker_connections * u64::from(p) / 100,
        }
    }
}

/// `check_fail_open`: when an upstream stops vetoing selection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailOpen {
    /// Never: a check-down peer is never selected.
    #[default]
    Off,
    /// When the check-up share of the upstream's checked peers, by
    /// weight, is at or below this many percent (`on` = 0: none up).
    AtOrBelow(u8),
}

impl FailOpen {
    /// Whether an upstream whose checked peers weigh `total` in all, of
    /// which `up` is check-up, fails open. An upstream without checked
    /// peers never does.
    pub fn applies(self, up: u64, total: u64) -> bool {
        match self {
            FailOpen::Off => false,
            _ if total == 0 => false,
            FailOpen::AtOrBelow(pct) => u128::from(up) * 100 <= u128::from(pct) * u128::from(total),
        }
    }
}

impl fmt::Display for FailOpen {
    /// As written in `check_fail_open`: `off`, `on` or `N%`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailOpen::Off => f.write_str("off"),
            FailOpen::AtOrBelow(0) => f.write_str("on"),
            FailOpen::AtOrBelow(p) => write!(f, "{p}%"),
        }
    }
}

/// A validated `check` directive with every default filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckConf {
    /// Time between the starts of two rounds for one peer, in ms.
    pub interval_ms: u64,
    /// Budget of one round in ms; always positive. It may be as long as an
    /// interval or longer (with a `[warn]`): a round still in flight then
    /// delays the next ([`CheckConf::period_ms`]).
    pub timeout_ms: u64,
    /// `down_interval=`: time between the starts of two rounds while the
    /// peer is down, in ms; `None` = `interval_ms`.
    pub down_interval_ms: Option<u64>,
    /// `jitter=`: each round's due time gets a delay in `0..jitter_ms`
    /// (0 = none); below every interval in force.
    pub jitter_ms: u64,
    /// Consecutive failures that mark an up peer down.
    pub fall: u32,
    /// Consecutive successes that mark a down peer up.
    pub rise: u32,
    /// Whether new peers start down.
    pub default_down: bool,
    /// Probe protocol.
    pub check_type: CheckType,
    /// Check port; 0 = the server's own port.
    pub port: u16,
    /// The `reuse` parameter as written (`Off` for UDP).
    pub reuse: Reuse,
    /// Kernel keepalive options; `None` = keepalive off.
    pub keepalive: Option<KernelKeepalive>,
    /// Effective re-handshake period in ms when the check keeps its
    /// connection: `None` when neither reuse nor keepalive is on;
    /// `Some(u64::MAX)` = no age limit.
    pub rehandshake_ms: Option<u64>,
    /// `match=NAME`: the `check_match` block that judges the answer, as
    /// written (checked against the context's blocks by
    /// [`finish_context`]).
    pub match_block: Option<Vec<u8>>,
    /// `passive_fall`: consecutive failed proxied attempts that mark the
    /// peer down; 0 = off.
    pub passive_fall: u32,
    /// `shared` (default on): a peer of the same address and settings in
    /// another upstream shares this one's probe.
    pub shared: bool,
    /// Rounds run. `false` only for [`CheckConf::traffic_only`].
    pub active: bool,
    /// `mandatory`: a peer whose state is unknown is `checking` (no
    /// traffic) until its first round decides.
    pub mandatory: bool,
    /// `slow_start`: after a peer returns to service its share of new
    /// traffic ramps from about zero to its full share over this time, ms
    /// (0 = off; docs/transitions.md).
    pub slow_start_ms: u64,
}

impl CheckConf {
    /// The interval in force for a peer that is `up` or down: rounds of a
    /// down peer run at `down_interval` when it is set.
    pub fn interval_for(&self, up: bool) -> u64 {
        match self.down_interval_ms {
            Some(ms) if !up => ms,
            _ => self.interval_ms,
        }
    }

    /// The longest time between the starts of two rounds of a peer that
    /// is `up` or down: its interval, or the timeout when a round may last
    /// longer than that (the next round starts when it ends).
    pub fn period_ms(&self, up: bool) -> u64 {
        self.interval_for(up).max(self.timeout_ms)
    }

    /// The shorter of the two intervals (the timer grid's base).
    pub fn shortest_interval_ms(&self) -> u64 {
        self.interval_ms
            .min(self.down_interval_ms.unwrap_or(u64::MAX))
    }

    /// The check of an upstream with `check_outlier` and no `check`: its
    /// peers get slots and rows (type `none`) but no rounds; they are up
    /// unless ejected (docs/outliers.md).
    pub fn traffic_only() -> CheckConf {
        let mut c = check::parse_check(&[b"type=tcp"]).unwrap_or_else(|_| unreachable!());
        c.active = false;
        c.shared = false;
        c
    }

    /// How a peer seen for the first time starts.
    pub fn initial(&self) -> crate::zone::Initial {
        crate::zone::Initial::of(self.default_down, self.mandatory)
    }

    /// Whether the check keeps its connection between rounds.
    pub fn keeps_connection(&self) -> bool {
        self.reuse != Reuse::Off || self.keepalive.is_some()
    }

    /// The re-handshake period `reuse` alone asks for, in ms: `None` for
    /// `reuse=off`. (`rehandshake_ms` also takes keepalive into account.)
    pub fn reuse_period_ms(&self) -> Option<u64> {
        match self.reuse {
            Reuse::Off => None,
            Reuse::On => Some(default_period_ms(self.interval_ms)),
            Reuse::Period { ms } => Some(ms),
        }
    }
}

/// The re-handshake period of `reuse=on` and of an empty or `on`
/// keepalive rehandshake field: `max(30s, 2 * interval)`, in ms.
pub fn default_period_ms(interval_ms: u64) -> u64 {
    interval_ms.saturating_mul(2).max(30_000)
}

/// A configuration error. `Display` gives the complete message nginx
/// prints after `[emerg] `.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfError(pub String);

impl fmt::Display for ConfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfError {}

/// Renders an argument for an error message: valid UTF-8 as written,
/// invalid bytes and ASCII control characters as `\xNN`, so a message is
/// always one printable line.
pub(crate) fn printable(bytes: &[u8]) -> String {
    use fmt::Write as _;

    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_ascii_control() {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_escapes_only_what_it_must() {
        assert_eq!(printable(b"interval=abc"), "interval=abc");
        assert_eq!(printable("port=\u{e9}".as_bytes()), "port=\u{e9}");
        assert_eq!(printable(b"port=\xff\xfe1"), "port=\\xff\\xfe1");
        assert_eq!(printable(b"a\nb\x7f"), "a\\x0ab\\x7f");
        assert_eq!(printable(b""), "");
    }

    #[test]
    fn a_traffic_only_check_runs_no_rounds() {
        let c = CheckConf::traffic_only();
        assert!(!c.active && !c.shared && !c.default_down && c.passive_fall == 0);
    }

    #[test]
    fn fail_open_displays_as_written() {
        assert_eq!(FailOpen::Off.to_string(), "off");
        assert_eq!(FailOpen::AtOrBelow(0).to_string(), "on");
        assert_eq!(FailOpen::AtOrBelow(25).to_string(), "25%");
    }

    #[test]
    fn conf_error_displays_its_message() {
        let e = ConfError("invalid parameter \"x\": unknown parameter".into());
        assert_eq!(e.to_string(), "invalid parameter \"x\": unknown parameter");
    }

    #[test]
    fn check_type_names() {
        assert_eq!(CheckType::Tcp.as_str(), "tcp");
        assert_eq!(CheckType::Udp.as_str(), "udp");
        for t in [CheckType::Tcp, CheckType::Udp, CheckType::Http] {
            for expects in [false, true] {
                let r = t.failure_reasons_with(expects);
                // Counter order, no repeats, and a superset of the type's.
                assert!(
                    r.windows(2).all(|w| w[0].index() < w[1].index()),
                    "{t:?} {r:?}"
                );
                assert!(t.failure_reasons().iter().all(|x| r.contains(x)), "{t:?}");
            }
        }
        assert_eq!(CheckType::Http.as_str(), "http");
    }

    #[test]
    fn http_fails_for_the_connection_and_the_response() {
        use crate::reason::Reason;
        let r = CheckType::Http.failure_reasons();
        assert_eq!(r[..6], Reason::CONNECTION);
        assert_eq!(r[6..], [Reason::Status, Reason::Mismatch, Reason::Invalid]);
        assert_eq!(CheckType::Tcp.failure_reasons(), Reason::CONNECTION);
        assert_eq!(CheckType::Udp.failure_reasons(), [Reason::Unreachable]);
    }

    #[test]
    fn default_period_is_max_of_30s_and_twice_interval() {
        assert_eq!(default_period_ms(100), 30_000);
        assert_eq!(default_period_ms(15_000), 30_000);
        assert_eq!(default_period_ms(20_000), 40_000);
        assert_eq!(default_period_ms(INTERVAL_MAX_MS), 2 * INTERVAL_MAX_MS);
    }
}
