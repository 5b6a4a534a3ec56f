//! Outlier detection in the worker (docs/outliers.md): every worker counts
//! its proxied attempts into the peers' shared counters and ejects a peer
//! when a consecutive rule trips; worker 0 (`crate::ejections`) ends the
//! ejections whose time is over and, at the end of each interval, takes
//! the interval's counts out and applies the interval rules. Ejections are
//! decided under the zone's lock, so `max_ejected` holds across workers.

use core::sync::atomic::Ordering::Relaxed;

use healthcheck_core::events::{By, State};
use healthcheck_core::outlier::{classify, evaluate, time_text, Attempt, Interval, Rule};
use ngx::ffi::{ngx_log_t, NGX_LOG_NOTICE, NGX_LOG_WARN};

use crate::ffi::{self, unix_ms};
use crate::shm::{Slot, Zone};
use crate::target::{Target, UpstreamCheck};

/// Runs the function with the target of a slot, static or resolved.
pub type WithTarget<'a> = &'a dyn Fn(u32, &mut dyn FnMut(&Target));

/// What the rules need of a context: its zone, and its targets by slot.
pub struct Judge<'a> {
    pub zone: &'a Zone,
    pub with_target: WithTarget<'a>,
}

impl Judge<'_> {
    /// Upstream and peer name of the target of slot `i`.
    fn target_name(&self, i: u32) -> Option<(String, String)> {
        let mut out = None;
        (self.with_target)(i, &mut |t| {
            out = Some((
                String::from_utf8_lossy(t.upstream_bytes()).into_owned(),
                String::from_utf8_lossy(t.peer.name_bytes()).into_owned(),
            ));
        });
        out
    }

    /// Count one attempt to slot `index` of the upstream `check`; eject at
    /// a consecutive rule.
    pub fn attempt(&self, check: &UpstreamCheck, index: u32, a: Attempt, log: *mut ngx_log_t) {
        let zone = self.zone;
        let (Some(conf), Some(k)) = (check.outlier.as_ref(), zone.counters(index as usize)) else {
            return;
        };
        let outcome = classify(conf, a);
        if let Some(rule) = k.record(conf, outcome, a.time_ms.unwrap_or(0)) {
            self.eject(check, &[(index, rule)], log);
        }
    }

    /// Eject `candidates` (slot, rule) in order while `max_ejected`
    /// allows; the others stay, with a log line (one per peer per
    /// interval).
    fn eject(&self, check: &UpstreamCheck, candidates: &[(u32, Rule)], log: *mut ngx_log_t) {
        let zone = self.zone;
        let Some(conf) = check.outlier.as_ref() else {
            return;
        };
        let Ok(members) = check.members.try_borrow() else {
            return;
        };
        let members: Vec<u32> = members.iter().map(|&(i, _)| i).collect();
        let cap = conf.max_ejected(members.len());
        let now = unix_ms();
        let mut ejected = Vec::new();
        let mut kept = Vec::new();
        zone.locked(|| {
            let mut out: Vec<u32> = members
                .iter()
                .copied()
                .filter(|&i| zone.slot(i as usize).is_some_and(Slot::ejected))
                .collect();
            for &(i, rule) in candidates {
                let (Some(s), Some(k)) = (zone.slot(i as usize), zone.counters(i as usize)) else {
                    continue;
                };
                if s.ejected() {
                    continue;
                }
                if out.len() >= cap {
                    k.kept();
                    if now.saturating_sub(k.kept_logged.load(Relaxed)) >= conf.interval_ms {
                        k.kept_logged.store(now, Relaxed);
                        kept.push((i, rule, out.clone()));
                    }
                    continue;
                }
                let until = k.eject(conf, rule, now);
                s.set_ejected(true);
                out.push(i);
                ejected.push((i, rule, until - now, k.streak.load(Relaxed)));
            }
        });
        if ejected.is_empty() && kept.is_empty() {
            return;
        }
        if !ejected.is_empty() {
            zone.header().note_change();
            check.update_fail_open(zone, log);
        }
        for (i, rule, ms, streak) in ejected {
            let detail = rule.detail();
            let Some((u, p)) = self.target_name(i) else {
                continue;
            };
            ffi::log(
                NGX_LOG_WARN,
                log,
                format_args!(
                    "upstream {u} peer {p} is ejected by check_outlier for {}: {detail} \
                     (ejection {streak} in a row)",
                    time_text(ms)
                ),
            );
            let up = zone
                .slot(i as usize)
                .is_some_and(|s| s.up.load(Relaxed) != 0);
            let from = if up { State::Up } else { State::Down };
            self.event(i, (from, State::Down), Some(&detail));
        }
        for (i, rule, out) in kept {
            let Some((u, p)) = self.target_name(i) else {
                continue;
            };
            let names: Vec<String> = out
                .iter()
                .filter_map(|&j| self.target_name(j).map(|n| n.1))
                .collect();
            ffi::log(
                NGX_LOG_WARN,
                log,
                format_args!(
                    "upstream {u} peer {p} is kept in service although check_outlier found \
                     {}: max_ejected={}% lets {cap} of its {} peers out and {} are ({})",
                    rule.detail(),
                    conf.max_ejected_pct,
                    members.len(),
                    out.len(),
                    names.join(", ")
                ),
            );
        }
    }

    fn event(&self, i: u32, states: (State, State), detail: Option<&str>) {
        let zone = self.zone;
        (self.with_target)(i, &mut |t| {
            if t.check.events.is_none() {
                return;
            }
            let names = (t.peer.name_bytes(), t.peer.server_bytes());
            let mut ev = t.check.event(Some(names), states, By::Outlier);
            ev.reason = detail.map(|_| "outlier");
            ev.detail = detail;
            t.check.emit(zone, &ev);
        });
    }

    /// Worker 0's look at the context's upstreams `checks`: ejections whose
    /// time is over end; an interval that is over is judged. `starts` holds
    /// each upstream's interval start (unix ms).
    pub fn tick(
        &self,
        checks: &[&UpstreamCheck],
        now: u64,
        starts: &mut Vec<u64>,
        log: *mut ngx_log_t,
    ) {
        let zone = self.zone;
        starts.resize(checks.len(), now);
        for (n, check) in checks.iter().enumerate() {
            let Some(conf) = check.outlier.as_ref() else {
                continue;
            };
            let members: Vec<u32> = match check.members.try_borrow() {
                Ok(m) => m.iter().map(|&(i, _)| i).collect(),
                Err(_) => continue,
            };
            let mut returned = false;
            for &i in &members {
                let (Some(s), Some(k)) = (zone.slot(i as usize), zone.counters(i as usize)) else {
                    continue;
                };
                if !s.ejected() {
                    continue;
                }
                let lasted = k
                    .ejected_until
                    .load(Relaxed)
                    .saturating_sub(k.ejected_at.load(Relaxed));
                // A bit without an ejection behind it ends too.
                let ended =
                    zone.locked(|| (k.end_if_over(now) || !k.ejected()) && s.set_ejected(false));
                if !ended {
                    continue;
                }
                returned = true;
                let up = s.up.load(Relaxed) != 0;
                if up {
                    s.returned(crate::ffi::unix_ms());
                }
                if let Some((u, p)) = self.target_name(i) {
                    let lasted = time_text(lasted);
                    let rest = if up {
                        ""
                    } else {
                        "; its check says down: it stays out until its check passes"
                    };
                    ffi::log(
                        NGX_LOG_NOTICE,
                        log,
                        format_args!(
                            "upstream {u} peer {p} returns from its {lasted} check_outlier \
                             ejection{rest}"
                        ),
                    );
                }
                if up {
                    self.event(i, (State::Down, State::Up), None);
                }
            }
            if returned {
                zone.header().note_change();
                check.update_fail_open(zone, log);
            }
            let start = starts[n];
            if now < start.saturating_add(conf.interval_ms) {
                continue;
            }
            starts[n] = now;
            let intervals: Vec<Interval> = members
                .iter()
                .map(|&i| {
                    zone.counters(i as usize)
                        .map(|k| k.roll(start))
                        .unwrap_or_default()
                })
                .collect();
            if conf.interval_rules() {
                let found: Vec<(u32, Rule)> = evaluate(conf, &intervals)
                    .into_iter()
                    .filter_map(|(j, rule)| Some((*members.get(j)?, rule)))
                    .collect();
                if !found.is_empty() {
                    self.eject(check, &found, log);
                }
            }
        }
    }
}

/// The period worker 0's look at `checks` needs, ms; `None` when none has
/// `check_outlier`.
pub fn period<'a>(checks: impl Iterator<Item = &'a UpstreamCheck>) -> Option<u64> {
    checks
        .filter_map(|c| c.outlier.as_ref())
        .map(|c| (c.interval_ms.min(c.ejection_ms) / 10).clamp(20, 500))
        .min()
}
