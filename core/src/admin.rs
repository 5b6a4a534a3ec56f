//! The `healthcheck_admin` request (docs/directives.md, healthcheck_admin): which
//! peers an operator names and what to do with them.
//!
//! Query arguments, percent-decoded like the status page's:
//! `upstream=NAME` (required), `peer=ADDRESS` (a peer's `name` as the
//! status page shows it) or `server=NAME` (every address of a `server`
//! line, as written), exactly one of the two; `action=` one of
//! `disable`, `enable`, `down`, `up` (required); `group=http|stream`
//! (optional: both contexts otherwise). Anything else is refused rather
//! than ignored (a misspelt argument must not act on more peers than
//! meant): an unknown argument, one given twice, an empty value.

use crate::query::{self, percent_decode, shown};
use crate::status::Group;

/// What the operator asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Keep the peer out of every balancer until `Enable`; checks go on.
    Disable,
    /// No new sessions until `Enable` (nginx 1.30: `sticky` ones still
    /// reach it); checks go on.
    Drain,
    Enable,
    /// Set the health state now; later rounds may flip it.
    Down,
    Up,
}

impl Action {
    pub const ALL: [Action; 5] = [
        Action::Disable,
        Action::Drain,
        Action::Enable,
        Action::Down,
        Action::Up,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Action::Disable => "disable",
            Action::Drain => "drain",
            Action::Enable => "enable",
            Action::Down => "down",
            Action::Up => "up",
        }
    }
}

/// Which peers of the upstream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Select {
    /// The peer whose address (status `name`) is this.
    Peer(Vec<u8>),
    /// Every peer of the `server` line written so (status `server`).
    Server(Vec<u8>),
}

/// A parsed admin request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminRequest {
    pub upstream: Vec<u8>,
    pub select: Select,
    /// `None`: both contexts.
    pub group: Option<Group>,
    pub action: Action,
}

impl AdminRequest {
    /// Whether a peer (its group, upstream, address and server line) is
    /// one this request names.
    pub fn selects(&self, group: Group, upstream: &[u8], name: &[u8], server: &[u8]) -> bool {
        self.group.map_or(true, |g| g == group)
            && upstream == self.upstream.as_slice()
            && match &self.select {
                Select::Peer(p) => p.as_slice() == name,
                Select::Server(s) => s.as_slice() == server,
            }
    }
}

/// Parse the raw query string. The error is one printable ASCII line for
/// a 400 body.
pub fn parse_admin_query(q: &[u8]) -> Result<AdminRequest, String> {
    const KEYS: [&str; 5] = ["upstream", "peer", "server", "group", "action"];
    let mut values: [Option<Vec<u8>>; 5] = Default::default();
    for (key, value) in query::pairs(q) {
        let Some(k) = KEYS.iter().position(|k| k.as_bytes() == key.as_slice()) else {
            return Err(format!(
                "unknown argument \"{}\": use upstream, peer or server, action and group",
                shown(&key)
            ));
        };
        let value = percent_decode(value);
        if value.is_empty() {
            return Err(format!("empty \"{}\" argument", KEYS[k]));
        }
        if values[k].replace(value).is_some() {
            return Err(format!("\"{}\" given twice", KEYS[k]));
        }
    }
    let [upstream, peer, server, group, action] = values;
    let upstream = upstream.ok_or("missing \"upstream\" argument")?;
    let select = match (peer, server) {
        (Some(p), None) => Select::Peer(p),
        (None, Some(s)) => Select::Server(s),
        (None, None) => return Err("missing \"peer\" or \"server\" argument".into()),
        (Some(_), Some(_)) => return Err("give \"peer\" or \"server\", not both".into()),
    };
    let group = match group.as_deref() {
        None => None,
        Some(b"http") => Some(Group::Http),
        Some(b"stream") => Some(Group::Stream),
        Some(other) => {
            return Err(format!(
                "unknown group \"{}\": use http or stream",
                shown(other)
            ))
        }
    };
    let action = action.ok_or("missing \"action\" argument")?;
    let action = Action::ALL
        .into_iter()
        .find(|a| a.as_str().as_bytes() == action.as_slice())
        .ok_or_else(|| {
            format!(
                "unknown action \"{}\": use disable, drain, enable, down or up",
                shown(&action)
            )
        })?;
    Ok(AdminRequest {
        upstream,
        select,
        group,
        action,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(q: &str) -> AdminRequest {
        parse_admin_query(q.as_bytes()).unwrap_or_else(|e| panic!("{q}: {e}"))
    }

    fn err(q: &str) -> String {
        parse_admin_query(q.as_bytes()).expect_err(q)
    }

    #[test]
    fn valid_requests() {
        assert_eq!(
            ok("upstream=web&peer=127.0.0.1:8081&action=disable"),
            AdminRequest {
                upstream: b"web".to_vec(),
                select: Select::Peer(b"127.0.0.1:8081".to_vec()),
                group: None,
                action: Action::Disable,
            }
        );
        let r = ok("action=up&group=stream&server=backend.test%3A80&upstream=a+b");
        assert_eq!(r.upstream, b"a b");
        assert_eq!(r.select, Select::Server(b"backend.test:80".to_vec()));
        assert_eq!((r.group, r.action), (Some(Group::Stream), Action::Up));
        for a in Action::ALL {
            assert_eq!(
                ok(&format!("upstream=u&peer=p&action={}", a.as_str())).action,
                a
            );
        }
        assert_eq!(ok("&&upstream=u&peer=p&&action=down&").action, Action::Down);
    }

    #[test]
    fn errors_name_the_argument() {
        assert_eq!(err(""), "missing \"upstream\" argument");
        assert_eq!(err("peer=p&action=up"), "missing \"upstream\" argument");
        assert_eq!(
            err("upstream=u&action=up"),
            "missing \"peer\" or \"server\" argument"
        );
        assert_eq!(
            err("upstream=u&peer=p&server=s&action=up"),
            "give \"peer\" or \"server\", not both"
        );
        assert_eq!(err("upstream=u&peer=p"), "missing \"action\" argument");
        assert_eq!(
            err("upstream=u&peer=p&action=drained"),
            "unknown action \"drained\": use disable, drain, enable, down or up"
        );
        assert_eq!(
            err("upstream=u&peer=p&action=UP"),
            "unknown action \"UP\": use disable, drain, enable, down or up"
        );
        assert_eq!(
            err("upstream=u&peer=p&action=up&group=tcp"),
            "unknown group \"tcp\": use http or stream"
        );
        assert_eq!(
            err("upstream=u&peer=p&acton=up"),
            "unknown argument \"acton\": use upstream, peer or server, action and group"
        );
        assert_eq!(
            err("upstream=&peer=p&action=up"),
            "empty \"upstream\" argument"
        );
        assert_eq!(err("upstream=u&peer&action=up"), "empty \"peer\" argument");
        assert_eq!(
            err("upstream=u&upstream=v&peer=p&action=up"),
            "\"upstream\" given twice"
        );
        assert_eq!(
            err("upstream=u&peer=p&action=%00%22"),
            "unknown action \"\\x00\\\"\": use disable, drain, enable, down or up"
        );
    }

    #[test]
    fn selects_by_peer_or_server_and_group() {
        let r = ok("upstream=u&peer=10.0.0.1:80&action=up");
        assert!(r.selects(Group::Http, b"u", b"10.0.0.1:80", b"x"));
        assert!(r.selects(Group::Stream, b"u", b"10.0.0.1:80", b"x"));
        assert!(!r.selects(Group::Http, b"v", b"10.0.0.1:80", b"x"));
        assert!(!r.selects(Group::Http, b"u", b"10.0.0.2:80", b"10.0.0.1:80"));
        let r = ok("upstream=u&server=b.test:80&group=http&action=up");
        assert!(r.selects(Group::Http, b"u", b"10.0.0.1:80", b"b.test:80"));
        assert!(!r.selects(Group::Stream, b"u", b"10.0.0.1:80", b"b.test:80"));
        assert!(!r.selects(Group::Http, b"u", b"b.test:80", b"c.test:80"));
    }

    proptest! {
        /// Any query parses or fails with one printable line; a request
        /// that parses round-trips through its canonical query.
        #[test]
        fn any_query(q in prop::collection::vec(any::<u8>(), 0..200)) {
            match parse_admin_query(&q) {
                Ok(r) => {
                    let enc = |v: &[u8]| v.iter().map(|b| format!("%{b:02X}")).collect::<String>();
                    let (k, v) = match &r.select {
                        Select::Peer(p) => ("peer", p),
                        Select::Server(s) => ("server", s),
                    };
                    let mut canon = format!("upstream={}&{k}={}&action={}", enc(&r.upstream), enc(v), r.action.as_str());
                    if let Some(g) = r.group {
                        canon.push_str(&format!("&group={}", g.as_str()));
                    }
                    prop_assert_eq!(parse_admin_query(canon.as_bytes()), Ok(r));
                }
                Err(e) => prop_assert!(!e.is_empty() && e.bytes().all(|b| (0x20..0x7f).contains(&b)), "{}", e),
            }
        }
    }
}
