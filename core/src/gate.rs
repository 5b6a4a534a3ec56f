//! `healthcheck_gate UPSTREAM [min=N|N%];` (docs/directives.md,
//! healthcheck_gate): a location that answers 200 while enough peers of an
//! upstream are selectable, else 503, for a load balancer or a readiness
//! probe in front of nginx. The directive's arguments and the verdict; the
//! nginx glue counts the peers.

use crate::conf::ConfError;

/// How many selectable peers the gate needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Min {
    /// At least this many (1 or more).
    Count(u32),
    /// At least this share of the upstream's checked peers, 1..=100,
    /// rounded up (`min=50%` of 3 peers is 2).
    Percent(u8),
}

/// A parsed `healthcheck_gate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateConf {
    /// The upstream's name.
    pub upstream: Vec<u8>,
    pub min: Min,
}

/// The most `min=N` takes.
pub const MIN_MAX: u32 = 1_000_000;

fn invalid(arg: &[u8], why: &str) -> ConfError {
    ConfError(format!(
        "invalid parameter \"{}\" in \"healthcheck_gate\" directive: {why}",
        crate::conf::printable(arg)
    ))
}

/// `healthcheck_gate UPSTREAM [min=N|N%]`: the arguments after the name.
pub fn parse_gate(args: &[&[u8]]) -> Result<GateConf, ConfError> {
    let (upstream, rest) = match args {
        [u, rest @ ..] if !u.is_empty() && rest.len() <= 1 => (u, rest),
        [b"", ..] => {
            return Err(ConfError(
                "\"healthcheck_gate\" needs the name of an upstream".into(),
            ))
        }
        _ => {
            return Err(ConfError(
                "invalid number of arguments in \"healthcheck_gate\" directive: write \
                 healthcheck_gate UPSTREAM [min=N|N%]"
                    .into(),
            ))
        }
    };
    let min = match rest {
        [] => Min::Count(1),
        [arg] => {
            let Some(v) = arg.strip_prefix(b"min=") else {
                return Err(invalid(arg, "the only parameter is min=N or min=N%"));
            };
            let (digits, percent) = match v.strip_suffix(b"%") {
                Some(d) => (d, true),
                None => (v, false),
            };
            let n =
                (!digits.is_empty() && digits.len() <= 7 && digits.iter().all(u8::is_ascii_digit))
                    .then(|| {
                        digits
                            .iter()
                            .fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'))
                    });
            match (n, percent) {
                (Some(p @ 1..=100), true) => Min::Percent(p as u8),
                (_, true) => return Err(invalid(arg, "a share is from 1% to 100%")),
                (Some(n @ 1..=MIN_MAX), false) => Min::Count(n),
                _ => {
                    return Err(invalid(
                        arg,
                        &format!("min is a count from 1 to {MIN_MAX}, or a share (min=50%)"),
                    ))
                }
            }
        }
        _ => unreachable!("at most one parameter, checked above"),
    };
    Ok(GateConf {
        upstream: upstream.to_vec(),
        min,
    })
}

/// What the gate counted: the upstream's checked peers and how many of
/// them selection may pick (not disabled, and up or failing open).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub peers: u64,
    pub selectable: u64,
}

impl GateConf {
    /// The selectable peers needed out of `peers`.
    pub fn needed(&self, peers: u64) -> u64 {
        match self.min {
            Min::Count(n) => u64::from(n),
            Min::Percent(p) => (peers * u64::from(p)).div_ceil(100).max(1),
        }
    }

    /// Open (200) or shut (503), and the one-line body that says why.
    pub fn verdict(&self, t: Tally) -> (bool, String) {
        let needed = self.needed(t.peers);
        let open = t.peers > 0 && t.selectable >= needed;
        let name = String::from_utf8_lossy(&self.upstream);
        let body = if t.peers == 0 {
            format!("unavailable: upstream \"{name}\" has no checked peer\n")
        } else {
            format!(
                "{}: {} of {} peers of upstream \"{name}\" selectable, {needed} needed\n",
                if open { "ok" } else { "unavailable" },
                t.selectable,
                t.peers
            )
        };
        (open, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(args: &[&str]) -> Result<GateConf, ConfError> {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        parse_gate(&a)
    }

    #[test]
    fn arguments() {
        assert_eq!(gate(&["web"]).unwrap().min, Min::Count(1));
        assert_eq!(gate(&["web", "min=3"]).unwrap().min, Min::Count(3));
        assert_eq!(gate(&["web", "min=50%"]).unwrap().min, Min::Percent(50));
        assert_eq!(
            gate(&["web", "min=0"]).unwrap_err().0,
            "invalid parameter \"min=0\" in \"healthcheck_gate\" directive: min is a count from \
             1 to 1000000, or a share (min=50%)"
        );
        for bad in ["min=101%", "min=0%", "min=x", "min=", "max=2", "min=-1"] {
            assert!(gate(&["web", bad]).is_err(), "{bad}");
        }
        assert!(gate(&[]).is_err());
        assert!(gate(&["web", "min=1", "min=2"]).is_err());
    }

    #[test]
    fn verdicts() {
        let g = gate(&["web", "min=2"]).unwrap();
        let t = |peers, selectable| Tally { peers, selectable };
        assert_eq!(
            g.verdict(t(4, 3)),
            (
                true,
                "ok: 3 of 4 peers of upstream \"web\" selectable, 2 needed\n".into()
            )
        );
        assert_eq!(
            g.verdict(t(4, 1)),
            (
                false,
                "unavailable: 1 of 4 peers of upstream \"web\" selectable, 2 needed\n".into()
            )
        );
        assert!(!g.verdict(t(0, 0)).0);
        let half = gate(&["web", "min=50%"]).unwrap();
        assert_eq!(half.needed(3), 2);
        assert_eq!(half.needed(4), 2);
        assert_eq!(half.needed(1), 1);
        assert!(half.verdict(t(3, 2)).0);
        assert!(!half.verdict(t(3, 1)).0);
        let one = gate(&["web"]).unwrap();
        assert!(one.verdict(t(5, 1)).0 && !one.verdict(t(5, 0)).0);
    }
}
