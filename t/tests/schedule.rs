//! How rounds are scheduled (docs/design.md, How rounds are scheduled): the
//! `down_interval=` and `jitter=` parameters of `check`, measured where an
//! operator would see them, as probe connections arriving at a backend.
//!
//! Tolerances come from the configured intervals. A round may start late
//! (a loaded machine), but its lattice point does not move, so a single
//! gap between two probes is off by at most the lateness of its two ends
//! and the mean gap over n rounds by at most that divided by n. The bounds
//! below allow a few hundred ms of lateness per round, yet each fails by a
//! wide margin if the parameter were ignored.

use std::time::{Duration, Instant};

use healthcheck_t::conf::web_conf;
use healthcheck_t::wait::wait_for;
use healthcheck_t::{free_port, poll_status_json, Backend, Kind, Mode, Nginx};

/// How long any single phase may take before the test gives up.
const LONG: Duration = Duration::from_secs(30);

/// The first `n` probe arrivals at `b` at or after `since`, waiting for
/// them as long as [`LONG`].
fn probes_since(b: &Backend, since: Instant, n: usize) -> Vec<Instant> {
    wait_for(LONG, format!("{n} probes at {}", b.addr()), || {
        let t: Vec<Instant> = b
            .accept_times()
            .into_iter()
            .filter(|&t| t >= since)
            .collect();
        (t.len() >= n).then(|| t[..n].to_vec())
    })
}

/// Gaps between consecutive instants, in ms.
fn gaps_ms(times: &[Instant]) -> Vec<u64> {
    times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis() as u64)
        .collect()
}

/// Mean gap in ms over `times` (first to last).
fn mean_gap_ms(times: &[Instant]) -> f64 {
    let n = times.len().saturating_sub(1).max(1);
    (times[times.len() - 1] - times[0]).as_secs_f64() * 1000.0 / n as f64
}

fn is_down(s: &healthcheck_t::Status, b: &Backend) -> bool {
    s.is_down(Kind::Http, "web", &b.addr())
}

fn is_up(s: &healthcheck_t::Status, b: &Backend) -> bool {
    s.is_up(Kind::Http, "web", &b.addr())
}

/// A peer that goes down is probed every `down_interval`, from the round
/// that marked it down on; back up, every `interval` again, from the round
/// that marked it up on. An http check, so that a hanging backend fails
/// every round (a TCP check would call it alive) while the backend still
/// records each probe's arrival.
#[test]
fn down_interval_paces_a_down_peer_and_interval_returns_when_it_is_up() {
    const INTERVAL: u64 = 200;
    const DOWN: u64 = 800;
    const FALL: usize = 2;
    const DOWN_GAPS: usize = 5;
    const UP_GAPS: usize = 6;
    let b = Backend::start();
    let (ng, port) = Nginx::builder().workers(2).start_with(|| {
        let port = free_port();
        let check = format!(
            "check type=http interval={INTERVAL} timeout=150 down_interval={DOWN} \
             fall={FALL} rise=1;"
        );
        (web_conf(port, &[&b], &check), port)
    });
    poll_status_json(port, LONG, "two good rounds", |s| {
        is_up(s, &b) && s.checks(Kind::Http, "web", &b.addr()) >= 2
    });

    // Down: FALL failing rounds an interval apart, then down_interval.
    b.set_mode(Mode::Hang);
    let hang = Instant::now();
    let failing = probes_since(&b, hang, FALL + DOWN_GAPS);
    poll_status_json(port, LONG, "peer down", |s| is_down(s, &b));
    let gaps = gaps_ms(&failing);
    let (before, after) = gaps.split_at(FALL - 1);
    for &g in before {
        assert!(
            g < DOWN - 200,
            "a gap of {g} ms before the peer was down: the interval ({INTERVAL} ms) \
             was in force, not down_interval ({DOWN} ms); gaps {gaps:?}"
        );
    }
    for &g in after {
        assert!(
            (DOWN - 300..=DOWN + 400).contains(&g),
            "a gap of {g} ms while the peer was down, want about down_interval \
             ({DOWN} ms); gaps {gaps:?}"
        );
    }
    let down_mean = mean_gap_ms(&failing[FALL - 1..]);
    eprintln!("down: gaps {gaps:?} ms, mean from the flip {down_mean:.1} ms");
    assert!(
        (DOWN as f64 - 100.0..=DOWN as f64 + 100.0).contains(&down_mean),
        "mean gap {down_mean:.0} ms while down over {DOWN_GAPS} rounds, want {DOWN} +- 100; \
         gaps {gaps:?}"
    );

    // Up: the round that succeeds comes on the down lattice (within a
    // down_interval); after it, rounds are an interval apart again.
    b.set_mode(Mode::Serve);
    let serve = Instant::now();
    let good = probes_since(&b, serve, UP_GAPS + 1);
    poll_status_json(port, LONG, "peer up", |s| is_up(s, &b));
    let first = (good[0] - serve).as_millis() as u64;
    assert!(
        first <= DOWN + 400,
        "the first round after the backend recovered came {first} ms later, \
         want at most about down_interval ({DOWN} ms)"
    );
    let gaps = gaps_ms(&good);
    for &g in &gaps {
        assert!(
            g <= INTERVAL + 350,
            "a gap of {g} ms after the peer was up again, want about interval \
             ({INTERVAL} ms), not down_interval ({DOWN} ms); gaps {gaps:?}"
        );
    }
    let up_mean = mean_gap_ms(&good);
    eprintln!("up: first round {first} ms after recovery, gaps {gaps:?} ms, mean {up_mean:.1} ms");
    assert!(
        (INTERVAL as f64 - 60.0..=INTERVAL as f64 + 60.0).contains(&up_mean),
        "mean gap {up_mean:.0} ms while up over {UP_GAPS} rounds, want {INTERVAL} +- 60; \
         gaps {gaps:?}"
    );
    drop(ng);
}

/// With `jitter`, the gaps between one peer's probes vary, each within
/// `interval +- jitter` (plus lateness), while their mean stays the
/// interval: the jitter delays do not add up into a drift. Two peers and
/// two workers: every worker computes the same delays.
#[test]
fn jitter_spreads_probes_without_drift() {
    const INTERVAL: u64 = 400;
    const JITTER: u64 = 200;
    const GAPS: usize = 20;
    let (b1, b2) = (Backend::start(), Backend::start());
    let (ng, port) = Nginx::builder().workers(2).start_with(|| {
        let port = free_port();
        let check = format!("check interval={INTERVAL} jitter={JITTER} fall=100 rise=1;");
        (web_conf(port, &[&b1, &b2], &check), port)
    });
    poll_status_json(port, LONG, "a round of each peer", |s| {
        [&b1, &b2]
            .iter()
            .all(|b| s.checks(Kind::Http, "web", &b.addr()) >= 1)
    });
    let since = Instant::now();
    let mut all_gaps = Vec::new();
    for b in [&b1, &b2] {
        let times = probes_since(b, since, GAPS + 1);
        let gaps = gaps_ms(&times);
        for &g in &gaps {
            // interval +- jitter, less 150 ms for a round that started
            // late, plus 250 ms for one that starts late
            assert!(
                (INTERVAL - JITTER - 150..=INTERVAL + JITTER + 250).contains(&g),
                "{}: a gap of {g} ms, want {INTERVAL} +- {JITTER} ms; gaps {gaps:?}",
                b.addr()
            );
        }
        // n gaps span n intervals plus the difference of two delays
        // (under the jitter) and two latenesses: allow 300 ms of them.
        let mean = mean_gap_ms(&times);
        eprintln!("{}: gaps {gaps:?} ms, mean {mean:.1} ms", b.addr());
        let slack = (JITTER + 300) as f64 / GAPS as f64;
        assert!(
            (mean - INTERVAL as f64).abs() <= slack,
            "{}: mean gap {mean:.1} ms over {GAPS} rounds, want {INTERVAL} +- {slack:.0} \
             (no drift); gaps {gaps:?}",
            b.addr()
        );
        all_gaps.extend(gaps);
    }
    // Without jitter the gaps would all be the interval give or take the
    // timer grid (8 ms here); with it they spread like the difference of
    // two uniform delays, standard deviation jitter / sqrt(6) (82 ms).
    let n = all_gaps.len() as f64;
    let mean = all_gaps.iter().sum::<u64>() as f64 / n;
    let var = all_gaps
        .iter()
        .map(|&g| (g as f64 - mean).powi(2))
        .sum::<f64>()
        / (n - 1.0);
    let (min, max) = (all_gaps.iter().min(), all_gaps.iter().max());
    let range = max.zip(min).map_or(0, |(a, b)| a - b);
    eprintln!("all gaps: sd {:.1} ms, range {range} ms", var.sqrt());
    assert!(
        var.sqrt() >= JITTER as f64 / 5.0 && range >= JITTER / 2,
        "gaps spread by a standard deviation of {:.0} ms and a range of {range} ms, \
         want at least {} and {} (jitter {JITTER} ms): {all_gaps:?}",
        var.sqrt(),
        JITTER / 5,
        JITTER / 2
    );
    drop(ng);
}

/// A peer that starts down (`default_down=true`) has its first round within
/// the first `interval` (the shorter one), not the first `down_interval`:
/// with a down_interval of a minute it still comes up at once.
#[test]
fn a_peer_starting_down_is_first_probed_within_the_shorter_interval() {
    const INTERVAL: u64 = 200;
    const DOWN: u64 = 60_000;
    let b = Backend::start();
    let started = Instant::now();
    let (ng, port) = Nginx::builder().start_with(|| {
        let port = free_port();
        let check = format!(
            "check interval={INTERVAL} down_interval={DOWN} default_down=true rise=1 fall=1;"
        );
        (web_conf(port, &[&b], &check), port)
    });
    let first = probes_since(&b, started, 1)[0] - started;
    poll_status_json(port, LONG, "peer up", |s| is_up(s, &b));
    // nginx's start-up, then at most an interval; a round on the
    // down_interval would come at a random point of the first minute.
    assert!(
        first < Duration::from_millis(INTERVAL + 3_000),
        "the first probe came {first:?} after the start, want within the interval \
         ({INTERVAL} ms) of nginx's start-up"
    );
    drop(ng);
}
