//! Outlier detection (docs/outliers.md): what a proxied attempt counts
//! as, the per-peer counters in shared memory, and the rules that eject
//! a peer, over consecutive attempts or over an interval.
//!
//! Every worker counts its attempts into the peer's [`Counters`] with
//! atomics only. The consecutive rules trip at the attempt that reaches
//! their count; the interval rules are evaluated by one worker at the end
//! of each interval ([`evaluate`]) over the counts it takes out
//! ([`Counters::roll`]).

use core::fmt::{self, Write as _};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub use crate::conf::OutlierConf;

/// What one proxied attempt was, for the rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Answered in time, not 5xx.
    Ok,
    /// An HTTP 5xx answer (retried on another peer or not).
    Http5xx,
    /// A connect error, a timeout, a reset, an invalid answer.
    Error,
    /// Answered, but slower than `latency`: an error too.
    Slow,
}

/// How nginx ended one attempt: the upstream state's status (0 = none),
/// whether it reported the attempt failed, and the response time (the
/// connect time for stream), ms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub status: u16,
    pub failed: bool,
    pub time_ms: Option<u64>,
}

/// What `a` counts as under `conf`.
pub fn classify(conf: &OutlierConf, a: Attempt) -> Outcome {
    if (500..600).contains(&a.status) {
        Outcome::Http5xx
    } else if a.failed {
        Outcome::Error
    } else if conf.latency_ms > 0 && a.time_ms.is_some_and(|t| t > conf.latency_ms) {
        Outcome::Slow
    } else {
        Outcome::Ok
    }
}

/// Why a peer was ejected, with the numbers its detail prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// `consecutive_5xx`: this many 5xx in a row.
    Consecutive5xx(u32),
    /// `consecutive_errors`: this many errors in a row.
    ConsecutiveErrors(u32),
    /// `failure_percentage`: failures in percent over the interval, with
    /// its requests.
    FailureRate {
        percent: u32,
        interval_ms: u32,
        requests: u32,
    },
    /// `success_rate`: the peer's rate, the threshold, the upstream's mean
    /// and standard deviation, per mille (975 = 97.5%).
    SuccessRate {
        rate: u32,
        threshold: u32,
        mean: u32,
        stdev: u32,
    },
    /// An interval rule that slow answers tripped: how many of the
    /// interval's requests were slower than `latency`.
    Latency {
        slow: u32,
        requests: u32,
        latency_ms: u32,
    },
}

fn per_mille(out: &mut String, v: u32, decimals: bool) {
    if decimals {
        let _ = write!(out, "{}.{}%", v / 10, v % 10);
    } else {
        let _ = write!(out, "{}%", v / 10);
    }
}

/// A time as the details and the log lines print it: `500ms`, `2s`,
/// `1.5s`.
pub fn time_text(ms: u64) -> String {
    let mut s = String::new();
    ms_text(&mut s, ms.min(u64::from(u32::MAX)) as u32, false);
    s
}

fn ms_text(out: &mut String, ms: u32, spaced: bool) {
    let sep = if spaced { " " } else { "" };
    if ms % 1000 == 0 {
        let _ = write!(out, "{}{sep}s", ms / 1000);
    } else if ms > 1000 {
        let _ = write!(out, "{}.{:03}", ms / 1000, ms % 1000);
        while out.ends_with('0') {
            out.pop();
        }
        let _ = write!(out, "{sep}s");
    } else {
        let _ = write!(out, "{ms}{sep}ms");
    }
}

impl Rule {
    /// The rule's name: the parameter that set it.
    pub fn name(self) -> &'static str {
        match self {
            Rule::Consecutive5xx(_) => "consecutive_5xx",
            Rule::ConsecutiveErrors(_) => "consecutive_errors",
            Rule::FailureRate { .. } => "failure_percentage",
            Rule::SuccessRate { .. } => "success_rate",
            Rule::Latency { .. } => "latency",
        }
    }

    /// The detail of the ejection: `5xx 5 in a row`, `failure rate 34%
    /// over 10 s (120 requests)`, `success rate 61% < 88% (mean 97%, stdev
    /// 4.7%)`, `latency: 6 of 10 slower than 500ms`.
    pub fn detail(self) -> String {
        let mut s = String::new();
        match self {
            Rule::Consecutive5xx(n) => {
                let _ = write!(s, "5xx {n} in a row");
            }
            Rule::ConsecutiveErrors(n) => {
                let _ = write!(s, "errors {n} in a row");
            }
            Rule::FailureRate {
                percent,
                interval_ms,
                requests,
            } => {
                let _ = write!(s, "failure rate {percent}% over ");
                ms_text(&mut s, interval_ms, true);
                let _ = write!(s, " ({requests} requests)");
            }
            Rule::SuccessRate {
                rate,
                threshold,
                mean,
                stdev,
            } => {
                s.push_str("success rate ");
                per_mille(&mut s, rate, false);
                s.push_str(" < ");
                per_mille(&mut s, threshold, false);
                s.push_str(" (mean ");
                per_mille(&mut s, mean, false);
                s.push_str(", stdev ");
                per_mille(&mut s, stdev, true);
                s.push(')');
            }
            Rule::Latency {
                slow,
                requests,
                latency_ms,
            } => {
                let _ = write!(s, "latency: {slow} of {requests} slower than ");
                ms_text(&mut s, latency_ms, false);
            }
        }
        s
    }

    /// The rule as stored in a slot: a kind (1..=5) and four numbers.
    pub fn encode(self) -> (u32, [u32; 4]) {
        match self {
            Rule::Consecutive5xx(n) => (1, [n, 0, 0, 0]),
            Rule::ConsecutiveErrors(n) => (2, [n, 0, 0, 0]),
            Rule::FailureRate {
                percent,
                interval_ms,
                requests,
            } => (3, [percent, interval_ms, requests, 0]),
            Rule::SuccessRate {
                rate,
                threshold,
                mean,
                stdev,
            } => (4, [rate, threshold, mean, stdev]),
            Rule::Latency {
                slow,
                requests,
                latency_ms,
            } => (5, [slow, requests, latency_ms, 0]),
        }
    }

    /// The rule [`Rule::encode`] stored; `None` for 0 or an unknown kind.
    pub fn decode(kind: u32, v: [u32; 4]) -> Option<Rule> {
        Some(match kind {
            1 => Rule::Consecutive5xx(v[0]),
            2 => Rule::ConsecutiveErrors(v[0]),
            3 => Rule::FailureRate {
                percent: v[0],
                interval_ms: v[1],
                requests: v[2],
            },
            4 => Rule::SuccessRate {
                rate: v[0],
                threshold: v[1],
                mean: v[2],
                stdev: v[3],
            },
            5 => Rule::Latency {
                slow: v[0],
                requests: v[1],
                latency_ms: v[2],
            },
            _ => return None,
        })
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail())
    }
}

/// One peer's outlier counters in shared memory. The interval's counts
/// and the consecutive counts are written by every worker (atomics); the
/// rest by the worker that ejects or evaluates, under the zone's lock.
#[repr(C)]
#[derive(Default)]
pub struct Counters {
    /// This interval's attempts, failures (5xx, errors and slow answers)
    /// and slow answers, and the sum of their times, ms.
    pub requests: AtomicU32,
    pub failures: AtomicU32,
    pub slow: AtomicU32,
    /// 1 when a rule tripped in this interval (ejected or kept by the cap).
    pub tripped: AtomicU32,
    pub time_sum: AtomicU64,
    pub consecutive_5xx: AtomicU32,
    pub consecutive_errors: AtomicU32,
    /// The last interval's counts and mean time (`u32::MAX`: none).
    pub last_requests: AtomicU32,
    pub last_failures: AtomicU32,
    pub last_mean_ms: AtomicU32,
    /// Ejections since the peer was configured.
    pub ejections: AtomicU32,
    /// Ejections in a row: the multiplier of the ejection time.
    pub streak: AtomicU32,
    /// The last ejection's rule ([`Rule::encode`]), 0 = none.
    pub rule: AtomicU32,
    pub rule_values: [AtomicU32; 4],
    pub _pad: AtomicU32,
    /// Attempts and failures since the peer was configured.
    pub requests_total: AtomicU64,
    pub failures_total: AtomicU64,
    /// Unix ms when the current ejection ends, 0 = not ejected.
    pub ejected_until: AtomicU64,
    /// Unix ms when the peer last came back from an ejection, 0 = never.
    pub returned_at: AtomicU64,
    /// Unix ms when the current (or last) ejection started.
    pub ejected_at: AtomicU64,
    /// Unix ms of the last log line for a peer the cap kept in.
    pub kept_logged: AtomicU64,
}

/// What one peer had in an interval ([`Counters::roll`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Interval {
    pub requests: u32,
    pub failures: u32,
    pub slow: u32,
    /// Ejected at the interval's end: not judged, not counted in the
    /// upstream's success-rate statistics.
    pub ejected: bool,
}

/// A consistent-enough copy of a peer's counters for the status page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct View {
    pub ejections: u64,
    /// Unix ms when the current ejection started, while ejected.
    pub ejected_at_ms: Option<u64>,
    /// Unix ms when the ejection ends, while ejected.
    pub ejected_until_ms: Option<u64>,
    pub requests: u64,
    pub failures: u64,
    /// The last interval's mean response time, ms (`None`: no requests).
    pub mean_ms: Option<u64>,
    pub requests_total: u64,
    pub failures_total: u64,
    /// The last ejection's rule.
    pub rule: Option<Rule>,
}

impl Counters {
    /// Count one attempt. Returns the consecutive rule it trips, to
    /// exactly one caller (the attempt that reaches the count).
    pub fn record(&self, conf: &OutlierConf, outcome: Outcome, time_ms: u64) -> Option<Rule> {
        let r = Ordering::Relaxed;
        self.requests.fetch_add(1, r);
        self.requests_total.fetch_add(1, r);
        self.time_sum.fetch_add(time_ms.min(u64::from(u32::MAX)), r);
        let reset = |a: &AtomicU32| {
            if a.load(r) != 0 {
                a.store(0, r);
            }
        };
        match outcome {
            Outcome::Ok => {
                reset(&self.consecutive_5xx);
                reset(&self.consecutive_errors);
                None
            }
            Outcome::Http5xx => {
                self.fail();
                let n = self.consecutive_5xx.fetch_add(1, r).wrapping_add(1);
                (conf.consecutive_5xx > 0 && n == conf.consecutive_5xx)
                    .then_some(Rule::Consecutive5xx(n))
            }
            Outcome::Error | Outcome::Slow => {
                self.fail();
                if outcome == Outcome::Slow {
                    self.slow.fetch_add(1, r);
                }
                let n = self.consecutive_errors.fetch_add(1, r).wrapping_add(1);
                (conf.consecutive_errors > 0 && n == conf.consecutive_errors)
                    .then_some(Rule::ConsecutiveErrors(n))
            }
        }
    }

    fn fail(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.failures_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether an ejection is running.
    pub fn ejected(&self) -> bool {
        self.ejected_until.load(Ordering::Acquire) != 0
    }

    /// Eject the peer at `now` (unix ms) for `rule`: the ejection time is
    /// `ejection` times the ejections in a row, capped. Returns when it
    /// ends.
    pub fn eject(&self, conf: &OutlierConf, rule: Rule, now: u64) -> u64 {
        let r = Ordering::Relaxed;
        let streak = self.streak.load(r).saturating_add(1);
        self.streak.store(streak, r);
        self.ejections.fetch_add(1, r);
        let (kind, values) = rule.encode();
        for (a, v) in self.rule_values.iter().zip(values) {
            a.store(v, r);
        }
        self.rule.store(kind, r);
        self.tripped.store(1, r);
        self.consecutive_5xx.store(0, r);
        self.consecutive_errors.store(0, r);
        self.ejected_at.store(now, r);
        let until = now.saturating_add(conf.ejection_time(streak)).max(1);
        self.ejected_until.store(until, Ordering::Release);
        until
    }

    /// A rule tripped but the cap kept the peer in: it is not a clean
    /// interval, and the consecutive count starts again.
    pub fn kept(&self) {
        let r = Ordering::Relaxed;
        self.tripped.store(1, r);
        self.consecutive_5xx.store(0, r);
        self.consecutive_errors.store(0, r);
    }

    /// End the ejection if its time is over at `now`; returns whether it
    /// ended.
    pub fn end_if_over(&self, now: u64) -> bool {
        let until = self.ejected_until.load(Ordering::Acquire);
        if until == 0 || until > now {
            return false;
        }
        let r = Ordering::Relaxed;
        self.consecutive_5xx.store(0, r);
        self.consecutive_errors.store(0, r);
        self.returned_at.store(now, r);
        self.ejected_until.store(0, Ordering::Release);
        true
    }

    /// Take this interval's counts out (they start again from zero), keep
    /// them as the last interval's, and let the ejections in a row decay:
    /// one less after an interval that started at `start` (unix ms) and
    /// that the peer spent wholly in service without a rule tripping.
    pub fn roll(&self, start: u64) -> Interval {
        let r = Ordering::Relaxed;
        let requests = self.requests.swap(0, r);
        let failures = self.failures.swap(0, r).min(requests);
        let slow = self.slow.swap(0, r).min(failures);
        let sum = self.time_sum.swap(0, r);
        let tripped = self.tripped.swap(0, r) != 0;
        let ejected = self.ejected();
        self.last_requests.store(requests, r);
        self.last_failures.store(failures, r);
        let mean = sum
            .checked_div(u64::from(requests))
            .map_or(u32::MAX, |m| m.min(u64::from(u32::MAX - 1)) as u32);
        self.last_mean_ms.store(mean, r);
        let streak = self.streak.load(r);
        if streak > 0 && !ejected && !tripped && self.returned_at.load(r) <= start {
            self.streak.store(streak - 1, r);
        }
        Interval {
            requests,
            failures,
            slow,
            ejected,
        }
    }

    /// Copy everything the status page shows.
    pub fn view(&self) -> View {
        let r = Ordering::Relaxed;
        let until = self.ejected_until.load(r);
        let mean = self.last_mean_ms.load(r);
        let values = core::array::from_fn(|i| self.rule_values[i].load(r));
        View {
            ejections: u64::from(self.ejections.load(r)),
            ejected_until_ms: (until != 0).then_some(until),
            ejected_at_ms: (until != 0).then(|| self.ejected_at.load(r)),
            requests: u64::from(self.last_requests.load(r)),
            failures: u64::from(self.last_failures.load(r)),
            // Zeroed memory (never rolled) reads as no requests.
            mean_ms: (mean != u32::MAX && self.last_requests.load(r) > 0)
                .then_some(u64::from(mean)),
            requests_total: self.requests_total.load(r),
            failures_total: self.failures_total.load(r),
            rule: Rule::decode(self.rule.load(r), values),
        }
    }

    /// Carry `from`'s counters over (the same peer in a new zone).
    pub fn copy_from(&self, from: &Counters) {
        let r = Ordering::Relaxed;
        macro_rules! copy {
            ($($f:ident),*) => { $( self.$f.store(from.$f.load(r), r); )* };
        }
        copy!(
            requests,
            failures,
            slow,
            tripped,
            time_sum,
            consecutive_5xx,
            consecutive_errors,
            last_requests,
            last_failures,
            last_mean_ms,
            ejections,
            streak,
            rule,
            requests_total,
            failures_total,
            ejected_until,
            returned_at,
            ejected_at,
            kept_logged
        );
        for (a, b) in self.rule_values.iter().zip(&from.rule_values) {
            a.store(b.load(r), r);
        }
    }
}

/// The interval rules over the upstream's peers: which peers to eject and
/// why, worst success rate first. Ejected peers are not judged and not
/// counted in the statistics.
pub fn evaluate(conf: &OutlierConf, peers: &[Interval]) -> Vec<(usize, Rule)> {
    let min = conf.min_requests.max(1);
    let qualified = |p: &Interval| !p.ejected && p.requests >= min;
    // Success rates in per-mille.
    let rate = |p: &Interval| {
        (u64::from(p.requests - p.failures.min(p.requests)) * 1000 / u64::from(p.requests)) as u32
    };
    let mut out: Vec<(usize, Rule, u32)> = Vec::new();
    if let Some(pct) = conf.failure_percentage {
        for (i, p) in peers.iter().enumerate().filter(|(_, p)| qualified(p)) {
            let percent = (u64::from(p.failures) * 100 / u64::from(p.requests)) as u32;
            if percent >= u32::from(pct) {
                let rule = Rule::FailureRate {
                    percent,
                    interval_ms: conf.interval_ms.min(u64::from(u32::MAX)) as u32,
                    requests: p.requests,
                };
                out.push((i, rule, rate(p)));
            }
        }
    }
    if conf.success_rate {
        let rates: Vec<(usize, u32)> = peers
            .iter()
            .enumerate()
            .filter(|(_, p)| qualified(p))
            .map(|(i, p)| (i, rate(p)))
            .collect();
        if rates.len() >= 5 {
            let n = rates.len() as f64;
            let mean = rates.iter().map(|&(_, r)| f64::from(r)).sum::<f64>() / n;
            let var = rates
                .iter()
                .map(|&(_, r)| (f64::from(r) - mean).powi(2))
                .sum::<f64>()
                / n;
            let stdev = var.sqrt();
            let threshold = mean - f64::from(conf.stdev_factor_milli) / 1000.0 * stdev;
            for &(i, r) in &rates {
                if f64::from(r) < threshold && !out.iter().any(|&(j, _, _)| j == i) {
                    let rule = Rule::SuccessRate {
                        rate: r,
                        threshold: threshold.max(0.0) as u32,
                        mean: mean.round() as u32,
                        stdev: stdev.round() as u32,
                    };
                    out.push((i, rule, r));
                }
            }
        }
    }
    // Slow answers that made most of the failures name the latency.
    for (i, rule, _) in &mut out {
        let p = peers[*i];
        if conf.latency_ms > 0 && p.slow > 0 && p.slow * 2 > p.failures {
            *rule = Rule::Latency {
                slow: p.slow,
                requests: p.requests,
                latency_ms: conf.latency_ms.min(u64::from(u32::MAX)) as u32,
            };
        }
    }
    out.sort_by_key(|&(i, _, r)| (r, i));
    out.into_iter().map(|(i, rule, _)| (i, rule)).collect()
}

#[cfg(test)]
mod tests;
