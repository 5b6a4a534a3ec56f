//! The one-time `[notice]` of a configuration written for a C health-check
//! module (yaoweibin's, Tengine's, zhouchangxun's and their forks;
//! docs/migrating.md, Defaults): it uses `check_status`, or an upstream has
//! `check_http_send`, and a `check` line relies on `default_down`'s
//! default, which differs: those modules start peers down, this one up. Akvicor's module starts `type=udp` peers up, as here,
//! so udp checks never ask for it.
//!
//! The http and stream contexts are finished one after the other, in the
//! order they are written, and `check_status` may come after the
//! upstreams: each context notes its upstreams ([`Candidates::add`]) and
//! the notice is decided once the whole configuration is read, over both
//! ([`Candidates::then`], [`Candidates::notice`]).

use super::context::UpstreamFacts;
use super::CheckType;

/// The first upstreams of a configuration that rely on `default_down`'s
/// default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Candidates {
    /// The first such upstream.
    any: Option<Vec<u8>>,
    /// Some upstream has `check_http_send`.
    send: bool,
}

impl Candidates {
    /// Take note of one context's upstreams.
    pub fn add(&mut self, upstreams: &[UpstreamFacts<'_>]) {
        for u in upstreams {
            self.send |= u.http.send;
            let Some(c) = u.check else { continue };
            if u.written.default_down || c.check_type == CheckType::Udp {
                continue;
            }
            self.any.get_or_insert_with(|| u.name.to_vec());
        }
    }

    /// These candidates, then those of another context.
    pub fn then(&self, later: &Candidates) -> Candidates {
        Candidates {
            any: self.any.clone().or_else(|| later.any.clone()),
            send: self.send || later.send,
        }
    }

    /// The notice, when the configuration looks migrated:
    /// `check_status_used` says whether it has `check_status` (or one of its
    /// other names).
    pub fn notice(&self, check_status_used: bool) -> Option<String> {
        let name = self.any.as_ref()?;
        let why = match (check_status_used, self.send) {
            (true, _) => "check_status",
            (false, true) => "check_http_send",
            (false, false) => return None,
        };
        Some(format!(
            "upstream \"{}\" looks written for a C health-check module ({why}) and its \
             \"check\" has no default_down: here its peers start up (default_down=false), where \
             those modules start them down; write default_down=true to keep that \
             (docs/migrating.md, Defaults)",
            String::from_utf8_lossy(name),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::context::HttpDirectives;
    use crate::conf::{parse_check, CheckConf, Written};

    fn ups<'a>(
        name: &'a str,
        check: Option<&'a CheckConf>,
        send: bool,
        dd: bool,
    ) -> UpstreamFacts<'a> {
        UpstreamFacts {
            name: name.as_bytes(),
            check,
            keepalive_requests: None,
            peers: Vec::new(),
            http: HttpDirectives {
                send,
                ..HttpDirectives::default()
            },
            fail_open: false,
            tls: Default::default(),
            resolve_lines: 0,
            outlier: None,
            written: Written {
                default_down: dd,
                connection: false,
                check_type: false,
            },
        }
    }

    fn check(line: &str) -> CheckConf {
        let args: Vec<&[u8]> = line.split_whitespace().map(str::as_bytes).collect();
        parse_check(&args).unwrap()
    }

    #[test]
    fn check_status_anywhere_names_the_first_upstream_relying_on_the_default() {
        let tcp = check("type=tcp");
        let (mut http, mut stream) = (Candidates::default(), Candidates::default());
        http.add(&[ups("web", Some(&tcp), false, false)]);
        stream.add(&[ups("db", Some(&tcp), false, false)]);
        // Whatever the order of the blocks, http's upstreams come first.
        let c = stream.then(&http);
        assert!(c.notice(true).unwrap().starts_with("upstream \"db\""));
        let c = Candidates::default().then(&stream);
        let n = c.notice(true).unwrap();
        assert!(
            n.starts_with(
                "upstream \"db\" looks written for a C health-check module (check_status)"
            ),
            "{n}"
        );
        assert_eq!(c.notice(false), None, "no check_status, no check_http_send");
    }

    #[test]
    fn check_http_send_alone_is_enough_and_is_named() {
        let web = check("type=http");
        let mut c = Candidates::default();
        // The send of "b" says the configuration is the C modules'; "a",
        // before it, relies on the default.
        c.add(&[
            ups("a", Some(&web), false, false),
            ups("b", Some(&web), true, true),
        ]);
        let n = c.notice(false).unwrap();
        assert!(
            n.starts_with(
                "upstream \"a\" looks written for a C health-check module (check_http_send)"
            ),
            "{n}"
        );
        assert!(n.ends_with("write default_down=true to keep that (docs/migrating.md, Defaults)"));
    }

    #[test]
    fn written_default_down_udp_and_unchecked_upstreams_do_not_ask() {
        let tcp = check("type=tcp");
        let udp = check("type=udp");
        let mut c = Candidates::default();
        c.add(&[
            ups("given", Some(&tcp), true, true),
            ups("udp", Some(&udp), true, false),
            ups("none", None, true, false),
        ]);
        assert_eq!(c.any, None);
        assert_eq!(c.notice(true), None);
    }
}
