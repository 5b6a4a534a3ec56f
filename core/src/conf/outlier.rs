//! `check_outlier`: ejecting peers that fail proxied traffic
//! (docs/outliers.md).

use super::http::{invalid_count, invalid_value};
use super::time::{parse_decimal, parse_time};
use super::{printable, ConfError};

/// The settings of `check_outlier`, in ms and counts. A rule whose value
/// is 0 (or `None`, `false`) is off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutlierConf {
    /// Consecutive 5xx answers that eject (http only).
    pub consecutive_5xx: u32,
    /// Consecutive errors (connect errors, timeouts, invalid answers,
    /// answers slower than `latency`) that eject.
    pub consecutive_errors: u32,
    /// Failure share over an interval, percent, that ejects.
    pub failure_percentage: Option<u8>,
    /// The success-rate rule: below the mean minus `stdev_factor` times
    /// the standard deviation of the upstream's peers.
    pub success_rate: bool,
    /// `stdev_factor`, in thousandths (1.9 = 1900).
    pub stdev_factor_milli: u32,
    /// An answer slower than this counts as an error, ms (0 = off).
    pub latency_ms: u64,
    /// Requests a peer needs in an interval for the interval rules.
    pub min_requests: u32,
    /// The counting interval, ms.
    pub interval_ms: u64,
    /// The first ejection's time, ms; the nth in a row lasts n times it.
    pub ejection_ms: u64,
    /// The longest ejection, ms.
    pub max_ejection_ms: u64,
    /// The largest share of the upstream's peers out at once, percent
    /// (at least one peer).
    pub max_ejected_pct: u8,
    /// No rule was written: the default rule applies (`consecutive_5xx=5`;
    /// in a stream upstream, which has no 5xx, `consecutive_errors=5`).
    pub implied: bool,
}

impl Default for OutlierConf {
    fn default() -> Self {
        OutlierConf {
            consecutive_5xx: 0,
            consecutive_errors: 0,
            failure_percentage: None,
            success_rate: false,
            stdev_factor_milli: 1900,
            latency_ms: 0,
            min_requests: 100,
            interval_ms: 10_000,
            ejection_ms: 30_000,
            max_ejection_ms: 300_000,
            max_ejected_pct: 10,
            implied: false,
        }
    }
}

/// The default rule when `check_outlier` names none: Envoy's.
pub const DEFAULT_CONSECUTIVE_5XX: u32 = 5;
/// The failure share `latency=` alone implies, percent.
pub const LATENCY_ONLY_PERCENTAGE: u8 = 50;

const D: &str = "check_outlier";
const COUNT_MAX: u64 = 1_000_000;
/// The longest interval, ejection and latency: a day.
const TIME_MAX_MS: u64 = 86_400_000;

impl OutlierConf {
    /// Whether a rule counted over an interval is on.
    pub fn interval_rules(&self) -> bool {
        self.failure_percentage.is_some() || self.success_rate
    }

    /// The cap on the upstream's ejected peers out of `peers`.
    pub fn max_ejected(&self, peers: usize) -> usize {
        (peers * usize::from(self.max_ejected_pct) / 100).max(1)
    }

    /// How long the `streak`th ejection in a row lasts, ms.
    pub fn ejection_time(&self, streak: u32) -> u64 {
        self.ejection_ms
            .saturating_mul(u64::from(streak.max(1)))
            .min(self.max_ejection_ms)
    }
}

fn count(arg: &[u8], value: &[u8], what: &str, min: u64) -> Result<u32, ConfError> {
    match parse_decimal(value) {
        Ok(n) if (min..=COUNT_MAX).contains(&n) => Ok(n as u32),
        _ => Err(invalid_value(
            D,
            arg,
            &format!("{what} must be a decimal integer from {min} to {COUNT_MAX}"),
        )),
    }
}

fn time(arg: &[u8], value: &[u8], what: &str) -> Result<u64, ConfError> {
    match parse_time(value, false) {
        Some(ms) if (1..=TIME_MAX_MS).contains(&ms) => Ok(ms),
        _ => Err(invalid_value(
            D,
            arg,
            &format!("{what} must be a time from 1ms to 1d (500ms, 10s, 5m)"),
        )),
    }
}

fn percent(arg: &[u8], value: &[u8], what: &str, min: u64) -> Result<u8, ConfError> {
    let digits = value.strip_suffix(b"%").unwrap_or(value);
    match parse_decimal(digits) {
        Ok(n) if (min..=100).contains(&n) => Ok(n as u8),
        _ => Err(invalid_value(
            D,
            arg,
            &format!("{what} must be a percentage from {min}% to 100%"),
        )),
    }
}

/// `stdev_factor=F`: a decimal number from 0.1 to 10 with up to three
/// decimals, in thousandths.
fn factor(arg: &[u8], value: &[u8]) -> Result<u32, ConfError> {
    let bad = || {
        invalid_value(
            D,
            arg,
            "stdev_factor must be a decimal number from 0.1 to 10 (1.9, 2.5)",
        )
    };
    let (whole, frac) = match value.iter().position(|&c| c == b'.') {
        Some(i) => (&value[..i], &value[i + 1..]),
        None => (value, &b""[..]),
    };
    if frac.len() > 3 || (value.contains(&b'.') && frac.is_empty()) {
        return Err(bad());
    }
    let whole = parse_decimal(whole).map_err(|_| bad())?;
    let mut milli = 0u64;
    for (i, &c) in frac.iter().enumerate() {
        if !c.is_ascii_digit() {
            return Err(bad());
        }
        milli += u64::from(c - b'0') * [100, 10, 1][i];
    }
    match whole.checked_mul(1000).map(|w| w + milli) {
        Some(m) if (100..=10_000).contains(&m) => Ok(m as u32),
        _ => Err(bad()),
    }
}

/// `check_outlier [consecutive_5xx=N] [consecutive_errors=N]
/// [failure_percentage=P] [success_rate=on|off] [stdev_factor=F]
/// [latency=TIME] [min_requests=R] [interval=TIME] [ejection=TIME]
/// [max_ejection=TIME] [max_ejected=P%]`. Without a rule, Envoy's default:
/// `consecutive_5xx=5`; `latency` without a rule that counts errors
/// implies `failure_percentage=50`.
pub fn parse_outlier(args: &[&[u8]]) -> Result<OutlierConf, ConfError> {
    if args.len() > 11 {
        return Err(invalid_count(D));
    }
    let mut c = OutlierConf::default();
    let mut seen: Vec<&[u8]> = Vec::new();
    let mut rule = false;
    for &arg in args {
        let Some(eq) = arg.iter().position(|&b| b == b'=') else {
            return Err(ConfError(format!(
                "invalid parameter \"{}\" in \"{D}\" directive: parameters are written name=value \
                 (consecutive_5xx=5, failure_percentage=30, interval=10s; docs/directives.md, {D})",
                printable(arg)
            )));
        };
        let (name, value) = (&arg[..eq], &arg[eq + 1..]);
        if seen.contains(&name) {
            return Err(ConfError(format!(
                "duplicate parameter \"{}\" in \"{D}\" directive",
                printable(name)
            )));
        }
        seen.push(name);
        match name {
            b"consecutive_5xx" => {
                c.consecutive_5xx = count(arg, value, "consecutive_5xx", 1)?;
                rule = true;
            }
            b"consecutive_errors" => {
                c.consecutive_errors = count(arg, value, "consecutive_errors", 1)?;
                rule = true;
            }
            b"failure_percentage" => {
                c.failure_percentage = Some(percent(arg, value, "failure_percentage", 1)?);
                rule = true;
            }
            b"success_rate" => {
                c.success_rate = match value {
                    b"on" => true,
                    b"off" => false,
                    _ => return Err(invalid_value(D, arg, "success_rate must be on or off")),
                };
                rule |= c.success_rate;
            }
            b"stdev_factor" => c.stdev_factor_milli = factor(arg, value)?,
            b"latency" => c.latency_ms = time(arg, value, "latency")?,
            b"min_requests" => c.min_requests = count(arg, value, "min_requests", 1)?,
            b"interval" => c.interval_ms = time(arg, value, "interval")?,
            b"ejection" => c.ejection_ms = time(arg, value, "ejection")?,
            b"max_ejection" => c.max_ejection_ms = time(arg, value, "max_ejection")?,
            b"max_ejected" => c.max_ejected_pct = percent(arg, value, "max_ejected", 1)?,
            _ => {
                return Err(ConfError(format!(
                    "invalid parameter \"{}\" in \"{D}\" directive: the parameters are \
                     consecutive_5xx, consecutive_errors, failure_percentage, success_rate, \
                     stdev_factor, latency, min_requests, interval, ejection, max_ejection and \
                     max_ejected (docs/directives.md, {D})",
                    printable(arg)
                )));
            }
        }
    }
    if c.max_ejection_ms < c.ejection_ms {
        return Err(ConfError(format!(
            "\"{D}\" max_ejection={}ms is shorter than ejection={}ms: max_ejection caps the \
             growing ejection time and must be at least ejection",
            c.max_ejection_ms, c.ejection_ms
        )));
    }
    if !rule {
        if c.latency_ms > 0 {
            c.failure_percentage = Some(LATENCY_ONLY_PERCENTAGE);
        } else {
            c.consecutive_5xx = DEFAULT_CONSECUTIVE_5XX;
            c.implied = true;
        }
    }
    Ok(c)
}

impl OutlierConf {
    /// The settings for a stream upstream: the implied rule counts errors
    /// there (a stream peer answers no 5xx).
    pub fn for_stream(mut self) -> OutlierConf {
        if self.implied {
            self.consecutive_errors = self.consecutive_5xx;
            self.consecutive_5xx = 0;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(args: &[&[u8]]) -> String {
        parse_outlier(args).unwrap_err().0
    }

    #[test]
    fn defaults_are_envoys() {
        let c = parse_outlier(&[]).unwrap();
        assert_eq!(c.consecutive_5xx, 5);
        let s = c.for_stream();
        assert_eq!((s.consecutive_5xx, s.consecutive_errors), (0, 5));
        let written = parse_outlier(&[b"consecutive_5xx=3"]).unwrap();
        assert_eq!(written.for_stream(), written, "a written rule stays");
        assert_eq!(c.failure_percentage, None);
        assert!(!c.success_rate);
        assert_eq!(
            (c.interval_ms, c.ejection_ms, c.max_ejection_ms),
            (10_000, 30_000, 300_000)
        );
        assert_eq!(
            (c.min_requests, c.max_ejected_pct, c.stdev_factor_milli),
            (100, 10, 1900)
        );
    }

    #[test]
    fn every_parameter_parses() {
        let c = parse_outlier(&[
            b"consecutive_5xx=3",
            b"consecutive_errors=4",
            b"failure_percentage=30",
            b"success_rate=on",
            b"stdev_factor=2.25",
            b"latency=500ms",
            b"min_requests=20",
            b"interval=2s",
            b"ejection=3s",
            b"max_ejection=1m",
            b"max_ejected=20%",
        ])
        .unwrap();
        assert_eq!(c.consecutive_5xx, 3);
        assert_eq!(c.consecutive_errors, 4);
        assert_eq!(c.failure_percentage, Some(30));
        assert!(c.success_rate);
        assert_eq!(c.stdev_factor_milli, 2250);
        assert_eq!(c.latency_ms, 500);
        assert_eq!(c.min_requests, 20);
        assert_eq!(
            (c.interval_ms, c.ejection_ms, c.max_ejection_ms),
            (2000, 3000, 60_000)
        );
        assert_eq!(c.max_ejected_pct, 20);
    }

    #[test]
    fn latency_alone_counts_a_failure_share() {
        let c = parse_outlier(&[b"latency=200ms"]).unwrap();
        assert_eq!((c.consecutive_5xx, c.failure_percentage), (0, Some(50)));
        let c = parse_outlier(&[b"latency=200ms", b"success_rate=on"]).unwrap();
        assert_eq!((c.consecutive_5xx, c.failure_percentage), (0, None));
    }

    #[test]
    fn bad_values_name_the_parameter_and_value() {
        assert_eq!(
            err(&[b"consecutive_5xx=0"]),
            "invalid value \"consecutive_5xx=0\" in \"check_outlier\" directive: consecutive_5xx \
             must be a decimal integer from 1 to 1000000"
        );
        assert!(err(&[b"failure_percentage=101"]).contains("\"failure_percentage=101\""));
        assert!(err(&[b"max_ejected=0%"]).contains("from 1% to 100%"));
        assert!(err(&[b"stdev_factor=abc"]).contains("stdev_factor must be a decimal number"));
        assert!(err(&[b"stdev_factor=0.05"]).contains("\"stdev_factor=0.05\""));
        assert!(err(&[b"stdev_factor=1."]).contains("\"stdev_factor=1.\""));
        assert!(err(&[b"interval=0"]).contains("interval must be a time"));
        assert!(err(&[b"latency=fast"]).contains("\"latency=fast\""));
        assert!(err(&[b"success_rate=yes"]).contains("success_rate must be on or off"));
        assert!(err(&[b"eject=1s"]).contains("the parameters are consecutive_5xx"));
        assert!(err(&[b"5"]).contains("parameters are written name=value"));
        assert_eq!(
            err(&[b"interval=1s", b"interval=2s"]),
            "duplicate parameter \"interval\" in \"check_outlier\" directive"
        );
        assert!(err(&[b"ejection=10m", b"max_ejection=1m"]).contains("max_ejection=60000ms"));
    }

    #[test]
    fn ejection_grows_and_is_capped() {
        let c = OutlierConf {
            ejection_ms: 30_000,
            max_ejection_ms: 100_000,
            ..OutlierConf::default()
        };
        assert_eq!(c.ejection_time(0), 30_000);
        assert_eq!(c.ejection_time(1), 30_000);
        assert_eq!(c.ejection_time(2), 60_000);
        assert_eq!(c.ejection_time(4), 100_000);
        assert_eq!(c.ejection_time(u32::MAX), 100_000);
    }

    #[test]
    fn the_cap_is_at_least_one_peer() {
        let c = OutlierConf {
            max_ejected_pct: 20,
            ..OutlierConf::default()
        };
        assert_eq!(c.max_ejected(10), 2);
        assert_eq!(c.max_ejected(3), 1);
        assert_eq!(c.max_ejected(0), 1);
        let c = OutlierConf::default();
        assert_eq!(c.max_ejected(25), 2);
    }
}
