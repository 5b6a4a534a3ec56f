//! Finishing an `http {}` or `stream {}` context: the rules that span
//! several directives, checked once nginx has built every upstream's peers,
//! and what the context's shared zone holds.
//!
//! The nginx glue gathers plain facts about each upstream block
//! ([`UpstreamFacts`]), calls [`finish_context`], and logs every
//! [`Diagnostic`] at the remembered position of the directive it names
//! (its [`Directive`]), as `ngx_conf_log_error` would have.
//!
//! The rules, in the order they are checked (upstreams in configuration
//! order; the first error ends the check, warnings found before it are
//! still reported):
//!
//! 1. `check_keepalive_requests` without `check ... reuse=on` has no
//!    effect: a warning at `check_keepalive_requests`.
//! 2. `check ... port=n` in an upstream with a unix-socket server: an
//!    error at `check` (such a server has no port to replace).
//! 3. `check_shm_size` below what the checked peers need: an error at
//!    `check_shm_size`.

use super::{CheckConf, ConfError, Reuse};
use crate::identity::identity_hash;
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
    /// Each slot's `default_down`.
    pub default_down: Vec<bool>,
    /// The zone size to register, in bytes.
    pub size: usize,
}

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
/// `shm_size` is the context's `check_shm_size`; `required_size` gives the
/// smallest zone that holds a number of checked peers (the zone exists, and
/// is sized, even without checked peers).
pub fn finish_context(
    group: Group,
    upstreams: &[UpstreamFacts<'_>],
    shm_size: Option<u64>,
    required_size: impl FnOnce(usize) -> usize,
) -> Finished {
    let mut warnings = Vec::new();
    let result = layout(group, upstreams, shm_size, required_size, &mut warnings);
    Finished { warnings, result }
}

fn layout(
    group: Group,
    upstreams: &[UpstreamFacts<'_>],
    shm_size: Option<u64>,
    required_size: impl FnOnce(usize) -> usize,
    warnings: &mut Vec<Diagnostic>,
) -> Result<ZoneLayout, Diagnostic> {
    let mut identities = Vec::new();
    let mut default_down = Vec::new();
    for (i, u) in upstreams.iter().enumerate() {
        let name = String::from_utf8_lossy(u.name);
        if u.keepalive_requests.is_some() && u.check.map(|c| c.reuse) != Some(Reuse::On) {
            warnings.push(Diagnostic {
                at: Directive::KeepaliveRequests(i),
                error: ConfError(format!(
                    "\"check_keepalive_requests\" has no effect in upstream \"{name}\": \
                     its check is not reuse=on"
                )),
            });
        }
        let Some(check) = u.check else { continue };
        if check.port != 0 {
            if let Some(p) = u.peers.iter().find(|p| p.unix) {
                return Err(Diagnostic {
                    at: Directive::Check(i),
                    error: ConfError(format!(
                        "invalid parameter \"port={}\": upstream \"{name}\" has the unix-socket \
                         server \"{}\", which has no port",
                        check.port,
                        String::from_utf8_lossy(p.name),
                    )),
                });
            }
        }
        for p in &u.peers {
            // The effective check port: `port=` naming the server's own
            // port is the same check as no `port=`.
            let port = if check.port == 0 { p.port } else { check.port };
            identities.push(identity_hash(
                group.as_str(),
                u.name,
                p.name,
                check.check_type.as_str(),
                port,
            ));
            default_down.push(check.default_down);
        }
    }

    let npeers = identities.len();
    let required = required_size(npeers);
    let size = match shm_size {
        None => required,
        Some(s) => {
            // (Saturates on 32-bit targets, where the 4g maximum does not fit.)
            let size = usize::try_from(s).unwrap_or(usize::MAX);
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
            size
        }
    };
    Ok(ZoneLayout {
        identities,
        default_down,
        size,
    })
}

#[cfg(test)]
mod tests;
