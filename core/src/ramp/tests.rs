use super::*;
use proptest::prelude::*;

#[test]
fn no_ramp_without_a_return_a_length_or_after_its_end() {
    assert_eq!(Progress::at(0, 5_000, 10_000), None);
    assert_eq!(Progress::at(stamp(1_000), 5_000, 0), None);
    assert_eq!(Progress::at(stamp(1_000), 11_000, 10_000), None);
    let p = Progress::at(stamp(1_000), 3_500, 10_000).unwrap();
    assert_eq!((p.elapsed_ms, p.left_ms()), (2_500, 7_500));
    assert!((p.weight(4) - 1.0).abs() < 1e-9);
}

#[test]
fn the_stamp_wraps_and_is_never_zero() {
    let t = 1u64 << 32;
    assert_eq!(stamp(t), 1);
    // A ramp that started just before the low word wrapped.
    let p = Progress::at(stamp(t - 100), t + 400, 1_000).unwrap();
    assert_eq!(p.elapsed_ms, 500);
}

#[test]
fn admission_is_monotonic_in_time_for_one_draw() {
    for draw in [0, 1, u32::MAX / 3, u32::MAX / 2, u32::MAX - 1, u32::MAX] {
        let mut was = false;
        for e in 0..1_000 {
            let now = Progress {
                elapsed_ms: e,
                length_ms: 1_000,
            }
            .admits(draw);
            assert!(
                !was || now,
                "draw {draw} admitted at {} but not at {e}",
                e - 1
            );
            was = now;
        }
    }
    let start = Progress {
        elapsed_ms: 0,
        length_ms: 1_000,
    };
    assert!(!start.admits(0), "nothing is admitted at the ramp's start");
}

proptest! {
    /// Any run of consecutive requests is admitted in the ramp's fraction,
    /// within a few requests (a Weyl sequence's discrepancy).
    #[test]
    fn the_sequence_admits_the_ramps_fraction(
        start in any::<u32>(),
        n in 50u32..5_000,
        elapsed in 0u32..10_000,
    ) {
        let p = Progress { elapsed_ms: elapsed, length_ms: 10_000 };
        let admitted = (0..n).filter(|&i| p.admits(sequence(start.wrapping_add(i)))).count();
        let want = f64::from(n) * f64::from(elapsed) / 10_000.0;
        prop_assert!((admitted as f64 - want).abs() <= 12.0, "{admitted} of {n}, want {want}");
    }

    /// Keys spread: of many distinct keys, the admitted share is the
    /// ramp's fraction.
    #[test]
    fn key_draws_admit_the_ramps_fraction(salt in any::<u32>(), elapsed in 0u32..10_000) {
        let p = Progress { elapsed_ms: elapsed, length_ms: 10_000 };
        let n = 4_000;
        let admitted = (0..n)
            .filter(|i| p.admits(key_draw(format!("k{salt}-{i}").as_bytes())))
            .count();
        let want = f64::from(n) * f64::from(elapsed) / 10_000.0;
        // 5.5 standard deviations of a binomial at its widest (p = 1/2).
        prop_assert!((admitted as f64 - want).abs() <= 5.5 * 31.7, "{admitted}, want {want}");
    }
}

/// A ring of two equal peers: a held-back turn goes to the other peer and
/// the ring moves past it. Admitting turns by `admits_turn` gives the
/// ramping peer the ramp's fraction of its full share (half).
#[test]
fn turns_admitted_on_a_ring_give_the_ramps_share() {
    for elapsed in [1_000u32, 3_000, 5_000, 7_000, 9_000] {
        let p = Progress {
            elapsed_ms: elapsed,
            length_ms: 10_000,
        };
        let (mut at_a, mut to_a) = (true, 0u32);
        let n = 100_000u32;
        for i in 0..n {
            if at_a && p.admits_turn(sequence(i), 1, 1) {
                to_a += 1;
                at_a = false;
            } else {
                // B serves, from A's turn or its own; the next turn is A's.
                at_a = true;
            }
        }
        let want = 0.5 * f64::from(elapsed) / 10_000.0;
        let got = f64::from(to_a) / f64::from(n);
        assert!((got - want).abs() < 0.005, "{elapsed}: {got} want {want}");
    }
}
