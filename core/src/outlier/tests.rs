use super::*;
use proptest::prelude::*;

fn conf() -> OutlierConf {
    OutlierConf {
        consecutive_5xx: 5,
        consecutive_errors: 3,
        failure_percentage: Some(20),
        success_rate: true,
        latency_ms: 100,
        min_requests: 10,
        interval_ms: 2000,
        ejection_ms: 3000,
        max_ejection_ms: 10_000,
        ..OutlierConf::default()
    }
}

fn at(status: u16, failed: bool, time_ms: u64) -> Attempt {
    Attempt {
        status,
        failed,
        time_ms: Some(time_ms),
    }
}

#[test]
fn attempts_are_classified() {
    let c = conf();
    assert_eq!(classify(&c, at(200, false, 5)), Outcome::Ok);
    assert_eq!(classify(&c, at(404, false, 5)), Outcome::Ok);
    assert_eq!(
        classify(&c, at(503, true, 5)),
        Outcome::Http5xx,
        "retried 5xx counts"
    );
    assert_eq!(classify(&c, at(500, false, 500)), Outcome::Http5xx);
    assert_eq!(classify(&c, at(0, true, 5)), Outcome::Error);
    assert_eq!(classify(&c, at(200, false, 101)), Outcome::Slow);
    assert_eq!(classify(&c, at(200, false, 100)), Outcome::Ok);
    let off = OutlierConf { latency_ms: 0, ..c };
    assert_eq!(classify(&off, at(200, false, 100_000)), Outcome::Ok);
}

#[test]
fn consecutive_rules_trip_once_at_their_count() {
    let c = conf();
    let k = Counters::default();
    for _ in 0..4 {
        assert_eq!(k.record(&c, Outcome::Http5xx, 1), None);
    }
    assert_eq!(
        k.record(&c, Outcome::Http5xx, 1),
        Some(Rule::Consecutive5xx(5))
    );
    assert_eq!(k.record(&c, Outcome::Http5xx, 1), None, "one caller wins");
    let k = Counters::default();
    k.record(&c, Outcome::Error, 1);
    k.record(&c, Outcome::Slow, 1);
    k.record(&c, Outcome::Ok, 1);
    k.record(&c, Outcome::Error, 1);
    k.record(&c, Outcome::Error, 1);
    assert_eq!(
        k.record(&c, Outcome::Slow, 1),
        Some(Rule::ConsecutiveErrors(3))
    );
    let i = k.roll(0);
    assert_eq!((i.requests, i.failures, i.slow), (6, 5, 2));
}

#[test]
fn ejection_time_doubles_and_decays_after_clean_intervals() {
    let c = conf();
    let k = Counters::default();
    assert_eq!(k.eject(&c, Rule::Consecutive5xx(5), 1000), 4000);
    assert!(k.ejected());
    assert!(!k.end_if_over(3999));
    assert!(k.end_if_over(4000));
    assert!(!k.ejected());
    assert_eq!(
        k.eject(&c, Rule::Consecutive5xx(5), 5000),
        11_000,
        "twice the time"
    );
    assert!(k.end_if_over(11_000));
    // The interval it came back in is not clean: no decay.
    k.roll(10_000);
    assert_eq!(k.streak.load(Ordering::Relaxed), 2);
    // A whole clean interval after the return: one less.
    k.roll(12_000);
    assert_eq!(k.streak.load(Ordering::Relaxed), 1);
    assert_eq!(k.eject(&c, Rule::Consecutive5xx(5), 20_000), 26_000);
    k.end_if_over(30_000);
    assert_eq!(k.eject(&c, Rule::Consecutive5xx(5), 30_000), 39_000);
    k.end_if_over(40_000);
    assert_eq!(
        k.eject(&c, Rule::Consecutive5xx(5), 40_000),
        50_000,
        "capped at max_ejection"
    );
    assert_eq!(k.view().ejections, 5);
}

#[test]
fn a_tripped_interval_does_not_decay() {
    let c = conf();
    let k = Counters::default();
    k.eject(&c, Rule::Consecutive5xx(5), 0);
    k.end_if_over(10_000);
    k.kept();
    k.roll(20_000);
    assert_eq!(k.streak.load(Ordering::Relaxed), 1);
    k.roll(20_000);
    assert_eq!(k.streak.load(Ordering::Relaxed), 0);
}

#[test]
fn details_read_as_documented() {
    assert_eq!(Rule::Consecutive5xx(5).detail(), "5xx 5 in a row");
    assert_eq!(Rule::ConsecutiveErrors(7).detail(), "errors 7 in a row");
    let f = Rule::FailureRate {
        percent: 34,
        interval_ms: 10_000,
        requests: 120,
    };
    assert_eq!(f.detail(), "failure rate 34% over 10 s (120 requests)");
    let f = Rule::FailureRate {
        percent: 34,
        interval_ms: 1500,
        requests: 12,
    };
    assert_eq!(f.detail(), "failure rate 34% over 1.5 s (12 requests)");
    let s = Rule::SuccessRate {
        rate: 613,
        threshold: 881,
        mean: 970,
        stdev: 47,
    };
    assert_eq!(s.detail(), "success rate 61% < 88% (mean 97%, stdev 4.7%)");
    let l = Rule::Latency {
        slow: 6,
        requests: 10,
        latency_ms: 500,
    };
    assert_eq!(l.detail(), "latency: 6 of 10 slower than 500ms");
    let l = Rule::Latency {
        slow: 6,
        requests: 10,
        latency_ms: 2000,
    };
    assert_eq!(l.detail(), "latency: 6 of 10 slower than 2s");
}

fn iv(requests: u32, failures: u32, slow: u32) -> Interval {
    Interval {
        requests,
        failures,
        slow,
        ejected: false,
    }
}

#[test]
fn the_interval_rules_find_the_bad_peers_only() {
    let c = conf();
    let mut peers = vec![iv(100, 0, 0); 10];
    peers[1] = iv(100, 30, 0); // 30% failures
    peers[2] = iv(100, 100, 100); // all slow
    peers[3] = iv(5, 5, 0); // too few requests to judge
    let out = evaluate(&c, &peers);
    let idx: Vec<usize> = out.iter().map(|&(i, _)| i).collect();
    assert_eq!(idx, vec![2, 1], "worst first");
    assert_eq!(
        out[1].1,
        Rule::FailureRate {
            percent: 30,
            interval_ms: 2000,
            requests: 100
        }
    );
    assert_eq!(
        out[0].1,
        Rule::Latency {
            slow: 100,
            requests: 100,
            latency_ms: 100
        }
    );
}

#[test]
fn success_rate_needs_five_peers_and_uses_the_spread() {
    let c = OutlierConf {
        failure_percentage: None,
        latency_ms: 0,
        ..conf()
    };
    let four = vec![iv(100, 0, 0), iv(100, 0, 0), iv(100, 0, 0), iv(100, 50, 0)];
    assert!(evaluate(&c, &four).is_empty());
    let mut peers = vec![
        iv(100, 1, 0),
        iv(100, 2, 0),
        iv(100, 0, 0),
        iv(100, 3, 0),
        iv(100, 1, 0),
    ];
    assert!(
        evaluate(&c, &peers).is_empty(),
        "a tight spread ejects nobody"
    );
    peers.push(iv(100, 40, 0));
    let out = evaluate(&c, &peers);
    assert_eq!(out.len(), 1);
    let (
        i,
        Rule::SuccessRate {
            rate,
            threshold,
            mean,
            stdev,
        },
    ) = out[0]
    else {
        panic!("{out:?}");
    };
    assert_eq!((i, rate), (5, 600));
    assert!(threshold > rate && threshold < mean && stdev > 0, "{out:?}");
    // An ejected peer is not judged again nor counted.
    peers[5].ejected = true;
    assert!(evaluate(&c, &peers).is_empty());
}

#[test]
fn rules_round_trip_through_the_slot() {
    let rules = [
        Rule::Consecutive5xx(5),
        Rule::ConsecutiveErrors(2),
        Rule::FailureRate {
            percent: 1,
            interval_ms: 2,
            requests: 3,
        },
        Rule::SuccessRate {
            rate: 1,
            threshold: 2,
            mean: 3,
            stdev: 4,
        },
        Rule::Latency {
            slow: 1,
            requests: 2,
            latency_ms: 3,
        },
    ];
    for r in rules {
        let (k, v) = r.encode();
        assert_eq!(Rule::decode(k, v), Some(r));
    }
    assert_eq!(Rule::decode(0, [0; 4]), None);
    assert_eq!(Rule::decode(99, [0; 4]), None);
}

#[test]
fn the_view_shows_the_last_interval() {
    let c = conf();
    let k = Counters::default();
    assert_eq!(k.view().mean_ms, None);
    k.record(&c, Outcome::Ok, 10);
    k.record(&c, Outcome::Http5xx, 30);
    k.roll(0);
    let v = k.view();
    assert_eq!((v.requests, v.failures, v.mean_ms), (2, 1, Some(20)));
    assert_eq!((v.requests_total, v.failures_total), (2, 1));
    let n = Counters::default();
    n.copy_from(&k);
    assert_eq!(n.view(), v);
}

proptest! {
    /// Whatever the counts, the rules never panic, never judge a peer
    /// below min_requests or an ejected one, and name each peer once.
    #[test]
    fn evaluate_is_total(raw in proptest::collection::vec((0u32..500, 0u32..600, 0u32..600, any::<bool>()), 0..40)) {
        let c = conf();
        let peers: Vec<Interval> = raw.iter().map(|&(r, f, s, e)| Interval {
            requests: r, failures: f.min(r), slow: s.min(f.min(r)), ejected: e,
        }).collect();
        let out = evaluate(&c, &peers);
        let mut seen = std::collections::HashSet::new();
        for (i, rule) in out {
            prop_assert!(seen.insert(i));
            prop_assert!(!peers[i].ejected && peers[i].requests >= c.min_requests);
            prop_assert!(!rule.detail().is_empty());
        }
    }
}

/// The worked example of docs/outliers.md, success_rate.
#[test]
fn the_documented_success_rate_example() {
    let c = OutlierConf {
        success_rate: true,
        min_requests: 100,
        ..OutlierConf::default()
    };
    let mut peers = vec![iv(100, 0, 0); 9];
    peers.push(iv(100, 39, 0));
    let out = evaluate(&c, &peers);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].1.detail(),
        "success rate 61% < 73% (mean 96%, stdev 11.7%)"
    );
}

#[test]
fn times_read_as_the_log_lines_print_them() {
    assert_eq!(time_text(3000), "3s");
    assert_eq!(time_text(1500), "1.5s");
    assert_eq!(time_text(500), "500ms");
    assert_eq!(time_text(u64::MAX), time_text(u64::from(u32::MAX)));
}
