//! Finishing an `http {}` or `stream {}` context: the rules that span
//! several directives, checked once nginx has built every upstream's peers,
//! and what the context's shared zone holds.
//!
//! The nginx glue gathers plain facts about each upstream block
//! ([`UpstreamFacts`]) and the context's `check_match` blocks, calls
//! [`finish_context`], and logs every [`Diagnostic`] at the remembered
//! position of the directive it names (its [`Directive`]), as
//! `ngx_conf_log_error` would have.
//!
//! The rules, in the order they are checked (the first error ends the
//! check, warnings found before it are still reported):
//!
//! 1. Each `check_match` block, in configuration order: a name an earlier
//!    block has, an empty block, or more than one `send` or `expect`: an
//!    error at the block.
//!
//! Then each upstream, in configuration order:
//!
//! 2. `check_keepalive_requests` without `check ... reuse=on` has no
//!    effect: a warning at `check_keepalive_requests` (an http check with
//!    n > 1 keeps its connection instead, [`keepalive_reuse`]).
//! 3. `check ... port=n` in an upstream with a unix-socket server: a
//!    warning at `check` that the unix server is checked on its own
//!    address (it has no port to replace), as Tengine does.
//! 4. `check_http_send`, `check_http_request`, `check_http_header`,
//!    `check_http_expect_alive`, `check_http_expect_body`,
//!    `check_fastcgi_param`, `check_grpc_service`, `check_grpc_status` or
//!    `check_http_version` (in this order) in an upstream whose check
//!    type does not take it: an error at that directive; in an upstream
//!    without `check`, and `check_http_expect_alive` of a check that reads
//!    no HTTP status, a warning that it has no effect (the C modules
//!    accept both and ignore them).
//!    `check_http_send` is the request of `type=http`, the bytes a
//!    `type=tcp` check sends (and reads nothing) and the datagram of
//!    `type=udp`; `check_http_expect_alive` judges `http`, `https` and
//!    `fastcgi`; `check_fastcgi_param` is for `fastcgi`; the grpc
//!    directives for `grpc` and `grpcs`; `check_http_version` for `http`
//!    and `https`.
//! 5. `check_http_version 2` with `check_http_send` (HTTP/1 bytes): an
//!    error at `check_http_version`. `check_http_send` with
//!    `check_http_request` or `check_http_header` (the raw request
//!    replaces the one they build), or with a `check_match` block that has
//!    `send`: an error at `check_http_send`.
//! 6. `check ... match=NAME` without a block of that name, or with a block
//!    whose tests do not fit the check's type: an error at `check`.
//! 7. `check_http_send` of a tcp or udp check, or `check_http_expect_body`,
//!    with `match=`: an error at that directive (both say what the round
//!    does: the block must say it alone).
//! 8. `check_http_expect_alive` with `match=` (the block decides alone):
//!    a warning at `check_http_expect_alive`.
//!
//! And last:
//!
//! 9. `check_shm_size` below what the checked peers need: an error at
//!    `check_shm_size`.

use super::{CheckConf, CheckType, ConfError, Reuse, Written};
use crate::identity::{identity_hash, upstream_tag};
use crate::matcher::{misfit_reason, MatchBlock};
use crate::status::Group;

/// One checked peer of an upstream: a resolved address of a server line
/// that is not `down` (primary servers, then backup ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerFacts<'a> {
    /// The peer's name as nginx prints it (`127.0.0.1:80`, `unix:/x.sock`).
    pub name: &'a [u8],
    /// Its own port; 0 when its address has none (unix sockets).
    pub port: u16,
    /// Whether it is a unix socket.
    pub unix: bool,
}

/// What the rules read from one `upstream {}` block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamFacts<'a> {
    /// The upstream's name.
    pub name: &'a [u8],
    /// Its `check`, if any.
    pub check: Option<&'a CheckConf>,
    /// Its `check_keepalive_requests`, if any.
    pub keepalive_requests: Option<u32>,
    /// Its checked peers, in nginx's order (only read when it has `check`).
    pub peers: Vec<PeerFacts<'a>>,
    /// Which `check_http_*` directives it has.
    pub http: HttpDirectives,
    /// Whether it has `check_fail_open`.
    pub fail_open: bool,
    /// Which `check_ssl_*` directives it has.
    pub tls: TlsDirectives,
    /// Its `server ... resolve` lines (nginx adds and removes their
    /// addresses at run time; only read when it has `check`).
    pub resolve_lines: usize,
    /// Its `check_outlier`, if any.
    pub outlier: Option<&'a crate::conf::OutlierConf>,
    /// Which parameters its `check` writes out.
    pub written: Written,
}

/// Which `check_ssl_*` directives an upstream has, as the rules need them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlsDirectives {
    /// The first `check_ssl_*` directive written, if any.
    pub first: Option<&'static str>,
    /// `check_ssl_verify on`.
    pub verify: bool,
    /// `check_ssl_trusted_certificate`.
    pub trusted: bool,
    /// `check_ssl_certificate`.
    pub certificate: bool,
    /// `check_ssl_certificate_key`.
    pub key: bool,
}

/// Which of the directives of http checks an upstream has (the rules only
/// ask whether each is there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HttpDirectives {
    /// `check_http_send`.
    pub send: bool,
    /// `check_http_request`.
    pub request: bool,
    /// `check_http_header` (one or more).
    pub header: bool,
    /// `check_http_expect_alive`.
    pub expect_alive: bool,
    /// `check_http_expect_body`.
    pub expect_body: bool,
    /// `check_fastcgi_param` (one or more).
    pub fastcgi_param: bool,
    /// `check_grpc_service`.
    pub grpc_service: bool,
    /// `check_grpc_status`.
    pub grpc_status: bool,
    /// `check_http_version`.
    pub http_version: bool,
    /// `check_http_version 2`.
    pub http2: bool,
}

/// The directive a [`Diagnostic`] is about: nginx logs it at the position
/// where that directive was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Directive {
    /// `check` of the upstream at this index of the facts.
    Check(usize),
    /// `check_keepalive_requests` of the upstream at this index.
    KeepaliveRequests(usize),
    /// The context's `check_shm_size`.
    ShmSize,
    /// `check_http_send` of the upstream at this index.
    HttpSend(usize),
    /// `check_http_request` of the upstream at this index.
    HttpRequest(usize),
    /// The first `check_http_header` of the upstream at this index.
    HttpHeader(usize),
    /// `check_http_expect_alive` of the upstream at this index.
    HttpExpectAlive(usize),
    /// `check_http_expect_body` of the upstream at this index.
    HttpExpectBody(usize),
    /// The first `check_fastcgi_param` of the upstream at this index.
    FastcgiParam(usize),
    /// `check_grpc_service` of the upstream at this index.
    GrpcService(usize),
    /// `check_grpc_status` of the upstream at this index.
    GrpcStatus(usize),
    /// `check_http_version` of the upstream at this index.
    HttpVersion(usize),
    /// The `check_match` block at this index of the blocks.
    Match(usize),
    /// `check_fail_open` of the upstream at this index.
    FailOpen(usize),
    /// `check_outlier` of the upstream at this index.
    Outlier(usize),
    /// The named `check_ssl_*` directive of the upstream at this index.
    Tls(usize, &'static str),
}

impl Directive {
    /// The same directive of the upstream `f(i)` instead of `i` (a block
    /// or the context's `check_shm_size` as they are).
    pub fn of_upstream(self, f: impl Fn(usize) -> usize) -> Directive {
        use Directive as D;
        match self {
            D::Check(i) => D::Check(f(i)),
            D::KeepaliveRequests(i) => D::KeepaliveRequests(f(i)),
            D::HttpSend(i) => D::HttpSend(f(i)),
            D::HttpRequest(i) => D::HttpRequest(f(i)),
            D::HttpHeader(i) => D::HttpHeader(f(i)),
            D::HttpExpectAlive(i) => D::HttpExpectAlive(f(i)),
            D::HttpExpectBody(i) => D::HttpExpectBody(f(i)),
            D::FastcgiParam(i) => D::FastcgiParam(f(i)),
            D::GrpcService(i) => D::GrpcService(f(i)),
            D::GrpcStatus(i) => D::GrpcStatus(f(i)),
            D::HttpVersion(i) => D::HttpVersion(f(i)),
            D::FailOpen(i) => D::FailOpen(f(i)),
            D::Outlier(i) => D::Outlier(f(i)),
            D::Tls(i, d) => D::Tls(f(i), d),
            D::ShmSize | D::Match(_) => self,
        }
    }
}

/// A message for `nginx -t`, and where to log it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The directive it is logged at.
    pub at: Directive,
    /// The complete message (without the position).
    pub error: ConfError,
}

/// What the context's shared zone holds: one slot per checked peer, in
/// the order of the facts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneLayout {
    /// Each slot's peer identity ([`identity_hash`] with the effective
    /// check port).
    pub identities: Vec<u64>,
    /// How each slot starts when its peer is new (`default_down`,
    /// `mandatory`).
    pub initial: Vec<crate::zone::Initial>,
    /// Each slot's upstream has `check_outlier`.
    pub outlier: Vec<bool>,
    /// Slots after the configured peers' for addresses of `resolve`
    /// servers: [`RESOLVE_ROOM`] per line, or what `check_shm_size` leaves.
    pub dynamic: usize,
    /// [`upstream_tag`] of each checked upstream with `resolve` servers.
    pub tags: Vec<u64>,
    /// The zone size to register, in bytes.
    pub size: usize,
}

/// Room for resolved addresses per `server ... resolve` line of a checked
/// upstream when `check_shm_size` is not set.
pub const RESOLVE_ROOM: usize = 32;

/// The outcome of [`finish_context`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finished {
    /// Warnings (`[warn]`), in configuration order; logged whatever the
    /// result.
    pub warnings: Vec<Diagnostic>,
    /// The zone's layout, or the error (`[emerg]`) that fails the
    /// configuration.
    pub result: Result<ZoneLayout, Diagnostic>,
}

/// Check the cross-directive rules of one context (see the module
/// documentation) and lay out its zone.
///
/// `match_blocks` are the context's `check_match` blocks in configuration
/// order; `shm_size` is the context's `check_shm_size`; `required_size`
/// gives the smallest zone that holds a number of configured peers and of
/// slots for resolved addresses (the zone exists, and is sized, even
/// without checked peers).
pub fn finish_context(
    group: Group,
    upstreams: &[UpstreamFacts<'_>],
    match_blocks: &[MatchBlock],
    shm_size: Option<u64>,
    required_size: impl Fn(usize, usize) -> usize,
) -> Finished {
    let mut warnings = Vec::new();
    let result = check_blocks(match_blocks).and_then(|()| {
        layout(
            group,
            upstreams,
            match_blocks,
            shm_size,
            required_size,
            &mut warnings,
        )
    });
    Finished { warnings, result }
}

/// `check_keepalive_requests n` with n > 1 on an http check whose line
/// does not say whether the connection is kept (neither `reuse=` nor
/// `keepalive=` written, not even `off`): the check with `reuse=on`, as
/// yaoweibin's and Tengine's modules keep the connection for n requests.
/// `None` when the directive changes nothing.
pub fn keepalive_reuse(
    check: &CheckConf,
    written: Written,
    requests: Option<u32>,
) -> Option<CheckConf> {
    let n = requests?;
    if n <= 1 || !check.check_type.is_http() || written.connection || check.keeps_connection() {
        return None;
    }
    let mut c = check.clone();
    c.reuse = Reuse::On;
    c.rehandshake_ms = c.reuse_period_ms();
    Some(c)
}

/// Rule 1: the blocks on their own.
fn check_blocks(blocks: &[MatchBlock]) -> Result<(), Diagnostic> {
    for (j, b) in blocks.iter().enumerate() {
        let at = Directive::Match(j);
        if blocks[..j].iter().any(|earlier| earlier.name == b.name) {
            return Err(Diagnostic {
                at,
                error: ConfError(format!(
                    "duplicate check_match \"{}\"",
                    String::from_utf8_lossy(&b.name)
                )),
            });
        }
        b.check_shape().map_err(|error| Diagnostic { at, error })?;
    }
    Ok(())
}

/// Rules 4 to 7 for upstream `i`, whose name is `name`.
fn check_http(
    i: usize,
    name: &str,
    u: &UpstreamFacts<'_>,
    blocks: &[MatchBlock],
    warnings: &mut Vec<Diagnostic>,
) -> Result<(), Diagnostic> {
    let err = |at, message: String| {
        Err(Diagnostic {
            at,
            error: ConfError(message),
        })
    };
    let h = u.http;
    let t = u.check.map(|c| c.check_type);
    let is = |types: &[CheckType]| t.is_some_and(|t| types.contains(&t));
    use CheckType::{Fastcgi, Grpc, Grpcs, Http, Https, Tcp, Udp};
    for (given, at, directive, types, what) in [
        (
            h.send,
            Directive::HttpSend(i),
            "check_http_send",
            &[Http, Https, Tcp, Udp][..],
            "type=http (the request), type=tcp (bytes sent, nothing read) or type=udp \
             (the datagram)",
        ),
        (
            h.request,
            Directive::HttpRequest(i),
            "check_http_request",
            &[Http, Https][..],
            "type=http",
        ),
        (
            h.header,
            Directive::HttpHeader(i),
            "check_http_header",
            &[Http, Https][..],
            "type=http",
        ),
        (
            h.expect_alive,
            Directive::HttpExpectAlive(i),
            "check_http_expect_alive",
            &[Http, Https, Fastcgi][..],
            "type=http or type=fastcgi",
        ),
        (
            h.expect_body,
            Directive::HttpExpectBody(i),
            "check_http_expect_body",
            &[Http, Https][..],
            "type=http",
        ),
        (
            h.fastcgi_param,
            Directive::FastcgiParam(i),
            "check_fastcgi_param",
            &[Fastcgi][..],
            "type=fastcgi",
        ),
        (
            h.grpc_service,
            Directive::GrpcService(i),
            "check_grpc_service",
            &[Grpc, Grpcs][..],
            "type=grpc or type=grpcs",
        ),
        (
            h.grpc_status,
            Directive::GrpcStatus(i),
            "check_grpc_status",
            &[Grpc, Grpcs][..],
            "type=grpc or type=grpcs",
        ),
        (
            h.http_version,
            Directive::HttpVersion(i),
            "check_http_version",
            &[Http, Https][..],
            "type=http or type=https",
        ),
    ] {
        if given && !is(types) {
            // As the C modules: a directive of an upstream without check,
            // and check_http_expect_alive where no HTTP status is read,
            // do nothing, and nginx -t says so.
            let no_check = t.is_none();
            let no_status =
                directive == "check_http_expect_alive" && t.is_some_and(|t| !t.judges_status());
            if no_check || no_status {
                let why = match t {
                    None => "it has no check".to_string(),
                    Some(t) => {
                        let mut w = format!("a type={} check reads no HTTP status", t.as_str());
                        if t == Tcp && !u.written.check_type && h.send {
                            w.push_str(" (did you mean check ... type=http?)");
                        }
                        w
                    }
                };
                warnings.push(Diagnostic {
                    at,
                    error: ConfError(format!(
                        "\"{directive}\" has no effect in upstream \"{name}\": {why}"
                    )),
                });
                continue;
            }
            let now = t.map_or(String::from("no check"), |t| format!("type={}", t.as_str()));
            return err(
                at,
                format!(
                    "\"{directive}\" requires \"check ... {what}\" in upstream \"{name}\", \
                     which has {now}"
                ),
            );
        }
    }
    if u.check.is_none() {
        // Nothing of it is used (each directive was warned about above).
        return Ok(());
    }
    if h.send && h.http2 {
        return err(
            Directive::HttpVersion(i),
            format!(
                "\"check_http_version 2\" and \"check_http_send\" cannot both be used in upstream \
                 \"{name}\": check_http_send is HTTP/1 bytes; build the request with \
                 check_http_request and check_http_header"
            ),
        );
    }
    if h.send {
        for (given, other) in [
            (h.request, "check_http_request"),
            (h.header, "check_http_header"),
        ] {
            if given {
                return err(
                    Directive::HttpSend(i),
                    format!(
                        "\"check_http_send\" and \"{other}\" cannot both be used in upstream \
                         \"{name}\": check_http_send is the whole request"
                    ),
                );
            }
        }
        let block_sends = u
            .check
            .and_then(|c| c.match_block.as_ref())
            .and_then(|w| blocks.iter().find(|b| &b.name == w))
            .is_some_and(|b| b.send().is_some());
        if block_sends {
            return err(
                Directive::HttpSend(i),
                format!(
                    "\"check_http_send\" and the \"send\" of the check's check_match block both \
                     say what upstream \"{name}\" sends: keep one"
                ),
            );
        }
    }
    let Some(check) = u.check else { return Ok(()) };
    let Some(wanted) = &check.match_block else {
        return Ok(());
    };
    let block_name = String::from_utf8_lossy(wanted);
    let Some(block) = blocks.iter().find(|b| &b.name == wanted) else {
        return err(
            Directive::Check(i),
            format!("unknown check_match \"{block_name}\" in upstream \"{name}\""),
        );
    };
    if let Some(test) = block.misfit(check.check_type) {
        return err(
            Directive::Check(i),
            format!(
                "check_match \"{block_name}\" cannot be used by the type={} check of upstream \
                 \"{name}\": {}",
                check.check_type.as_str(),
                misfit_reason(test)
            ),
        );
    }
    if h.send && matches!(check.check_type, CheckType::Tcp | CheckType::Udp) {
        // Of a tcp or udp check, check_http_send is the block's `send`.
        return err(
            Directive::HttpSend(i),
            format!(
                "\"check_http_send\" and \"check ... match={block_name}\" both say what the \
                 type={} check of upstream \"{name}\" does: write send \"...\" in check_match \
                 \"{block_name}\" instead",
                check.check_type.as_str()
            ),
        );
    }
    if h.expect_body {
        return err(
            Directive::HttpExpectBody(i),
            format!(
                "\"check_http_expect_body\" and \"check ... match={block_name}\" both judge the \
                 responses of upstream \"{name}\": write the body test in check_match \
                 \"{block_name}\" instead"
            ),
        );
    }
    if h.expect_alive && check.check_type.judges_status() {
        warnings.push(Diagnostic {
            at: Directive::HttpExpectAlive(i),
            error: ConfError(format!(
                "\"check_http_expect_alive\" has no effect in upstream \"{name}\": \
                 its check uses check_match \"{block_name}\""
            )),
        });
    }
    Ok(())
}

/// The `check_ssl_*` rules for upstream `i`: they need a TLS check, and
/// they need each other (verify needs trusted certificates, a client
/// certificate its key and the other way round).
fn check_tls(i: usize, name: &str, u: &UpstreamFacts<'_>) -> Result<(), Diagnostic> {
    let t = u.tls;
    let Some(first) = t.first else { return Ok(()) };
    let err = |directive: &'static str, message: String| {
        Err(Diagnostic {
            at: Directive::Tls(i, directive),
            error: ConfError(message),
        })
    };
    if !u.check.is_some_and(|c| c.check_type.is_tls()) {
        return err(
            first,
            format!(
                "\"{first}\" requires \"check ... type=https\" or \"type=tls\" in upstream \"{name}\""
            ),
        );
    }
    if t.verify && !t.trusted {
        return err(
            "check_ssl_verify",
            format!(
                "\"check_ssl_verify\" is on but upstream \"{name}\" has no \
                 \"check_ssl_trusted_certificate\" to verify against"
            ),
        );
    }
    if t.certificate && !t.key {
        return err(
            "check_ssl_certificate",
            format!(
                "\"check_ssl_certificate\" requires \"check_ssl_certificate_key\" in upstream \"{name}\""
            ),
        );
    }
    if t.key && !t.certificate {
        return err(
            "check_ssl_certificate_key",
            format!(
                "\"check_ssl_certificate_key\" requires \"check_ssl_certificate\" in upstream \"{name}\""
            ),
        );
    }
    Ok(())
}

/// `check_outlier` rules that can never trip in this upstream: a `[warn]`
/// each, saying why (docs/outliers.md).
fn outlier_warnings(
    group: Group,
    i: usize,
    name: &str,
    u: &UpstreamFacts<'_>,
    warnings: &mut Vec<Diagnostic>,
) {
    let Some(o) = u.outlier else { return };
    let mut warn = |text: String| {
        warnings.push(Diagnostic {
            at: Directive::Outlier(i),
            error: ConfError(text),
        })
    };
    if group == Group::Stream && o.consecutive_5xx > 0 && !o.implied {
        warn(format!(
            "\"check_outlier\" consecutive_5xx={} never trips in stream upstream \"{name}\": a \
             stream peer answers no HTTP status; consecutive_errors counts its connect errors, \
             timeouts and resets (docs/outliers.md)",
            o.consecutive_5xx
        ));
    }
    if o.success_rate && u.peers.len() < 5 {
        warn(format!(
            "\"check_outlier\" success_rate=on never applies in upstream \"{name}\": it compares \
             at least 5 peers and the upstream has {} (docs/outliers.md)",
            u.peers.len()
        ));
    }
}

fn layout(
    group: Group,
    upstreams: &[UpstreamFacts<'_>],
    blocks: &[MatchBlock],
    shm_size: Option<u64>,
    required_size: impl Fn(usize, usize) -> usize,
    warnings: &mut Vec<Diagnostic>,
) -> Result<ZoneLayout, Diagnostic> {
    let mut identities = Vec::new();
    let mut initial = Vec::new();
    let mut outlier = Vec::new();
    let mut lines = 0;
    let mut tags = Vec::new();
    for (i, u) in upstreams.iter().enumerate() {
        let name = String::from_utf8_lossy(u.name);
        if u.fail_open && u.check.is_none() {
            return Err(Diagnostic {
                at: Directive::FailOpen(i),
                error: ConfError(format!(
                    "\"check_fail_open\" requires \"check\" in upstream \"{name}\""
                )),
            });
        }
        outlier_warnings(group, i, &name, u, warnings);
        check_tls(i, &name, u)?;
        let kept = u.check.is_some_and(|c| {
            c.reuse == Reuse::On || keepalive_reuse(c, u.written, u.keepalive_requests).is_some()
        });
        if u.keepalive_requests.is_some() && !kept {
            let keeps = u.check.is_some_and(CheckConf::keeps_connection);
            let why = match u.keepalive_requests {
                // The C modules' default: one round per connection.
                Some(1) if !keeps => "1 round per connection is what its check does; remove it",
                _ => "its check is not reuse=on",
            };
            warnings.push(Diagnostic {
                at: Directive::KeepaliveRequests(i),
                error: ConfError(format!(
                    "\"check_keepalive_requests\" has no effect in upstream \"{name}\": {why}"
                )),
            });
        }
        if let Some(check) = u.check.filter(|c| c.port != 0) {
            for p in u.peers.iter().filter(|p| p.unix) {
                warnings.push(Diagnostic {
                    at: Directive::Check(i),
                    error: ConfError(format!(
                        "\"check\" ignores \"port={}\" for the unix-socket server \"{}\" of \
                         upstream \"{name}\": it has no port and is checked on its own address",
                        check.port,
                        String::from_utf8_lossy(p.name),
                    )),
                });
            }
        }
        check_http(i, &name, u, blocks, warnings)?;
        let Some(check) = u.check else { continue };
        if u.resolve_lines > 0 {
            lines += u.resolve_lines;
            tags.push(upstream_tag(group.as_str(), u.name));
        }
        for p in &u.peers {
            // The effective check port: `port=` naming the server's own
            // port is the same check as no `port=`; a unix socket has none.
            let port = if check.port == 0 || p.unix {
                p.port
            } else {
                check.port
            };
            identities.push(identity_hash(
                group.as_str(),
                u.name,
                p.name,
                check.check_type.as_str(),
                port,
            ));
            initial.push(check.initial());
            outlier.push(u.outlier.is_some());
        }
    }

    let npeers = identities.len();
    let room = lines.saturating_mul(RESOLVE_ROOM);
    let (size, dynamic) = match shm_size {
        None => (required_size(npeers, room), room),
        Some(s) => {
            // (Saturates on 32-bit targets, where the 4g maximum does not fit.)
            let size = usize::try_from(s).unwrap_or(usize::MAX);
            let required = required_size(npeers, 0);
            if size < required {
                return Err(Diagnostic {
                    at: Directive::ShmSize,
                    error: ConfError(format!(
                        "\"check_shm_size\" {s} is too small for {npeers} checked {} peers: \
                         at least {required} bytes ({}k) are needed",
                        group.as_str(),
                        required.div_ceil(1024)
                    )),
                });
            }
            // With `resolve` servers, all the rest is room for their
            // addresses (the most that fits, by bisection).
            let dynamic = if lines == 0 {
                0
            } else {
                let (mut lo, mut hi) = (0usize, size / 64 + 1);
                while lo + 1 < hi {
                    let mid = lo + (hi - lo) / 2;
                    if required_size(npeers, mid) <= size {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                lo
            };
            (size, dynamic)
        }
    };
    Ok(ZoneLayout {
        identities,
        initial,
        outlier,
        dynamic,
        tags,
        size,
    })
}

#[cfg(test)]
mod tests;
