//! The rise/fall machine (docs/design.md, How checks work): one peer's up/down
//! state and its consecutive success and failure counts.

/// A change of a peer's state caused by one round's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// A down peer reached `rise` consecutive successes.
    WentUp,
    /// An up peer reached `fall` consecutive failures.
    WentDown,
}

/// One peer's health: its state and current consecutive counts.
///
/// The thresholds are passed to [`Health::record`] rather than stored, so
/// a reload that changes `rise` or `fall` keeps the counts and applies the
/// new thresholds from the next round on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Health {
    /// Whether the peer may be selected.
    pub up: bool,
    /// Consecutive successful rounds (0 after a failure).
    pub rise: u32,
    /// Consecutive failed rounds (0 after a success).
    pub fall: u32,
}

impl Health {
    /// A new peer: down when `default_down`, up otherwise; no history.
    pub fn new(default_down: bool) -> Self {
        Health {
            up: !default_down,
            rise: 0,
            fall: 0,
        }
    }

    /// Records one round's result.
    ///
    /// A success increments `rise` and resets `fall`; a failure does the
    /// reverse. The state flips only when the counter for the opposite
    /// state reaches its threshold (`rise_threshold` successes to go up,
    /// `fall_threshold` failures to go down); the counter keeps counting
    /// afterwards. Counters saturate at `u32::MAX`.
    pub fn record(
        &mut self,
        ok: bool,
        rise_threshold: u32,
        fall_threshold: u32,
    ) -> Option<Transition> {
        if ok {
            self.rise = self.rise.saturating_add(1);
            self.fall = 0;
            if !self.up && self.rise >= rise_threshold {
                self.up = true;
                return Some(Transition::WentUp);
            }
        } else {
            self.fall = self.fall.saturating_add(1);
            self.rise = 0;
            if self.up && self.fall >= fall_threshold {
                self.up = false;
                return Some(Transition::WentDown);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Feeds `results` ('+' success, '-' failure) and returns the
    /// transitions, one character per round ('.' none, 'U' up, 'D' down).
    fn run(h: &mut Health, results: &str, rise: u32, fall: u32) -> String {
        results
            .chars()
            .map(|c| match h.record(c == '+', rise, fall) {
                None => '.',
                Some(Transition::WentUp) => 'U',
                Some(Transition::WentDown) => 'D',
            })
            .collect()
    }

    #[test]
    fn new_peer() {
        assert_eq!(Health::new(false), state(true, 0, 0));
        assert_eq!(Health::new(true), state(false, 0, 0));
    }

    fn state(up: bool, rise: u32, fall: u32) -> Health {
        Health { up, rise, fall }
    }

    /// default_down, rise threshold, fall threshold, results, transitions,
    /// final state.
    type Case = (bool, u32, u32, &'static str, &'static str, Health);

    #[test]
    fn table() {
        let cases: &[Case] = &[
            (false, 2, 3, "---", "..D", state(false, 0, 3)),
            (false, 2, 3, "--+--", ".....", state(true, 0, 2)),
            (false, 2, 3, "---++", "..D.U", state(true, 2, 0)),
            (false, 2, 3, "----+-+", "..D....", state(false, 1, 0)),
            (false, 2, 3, "----+-+-", "..D.....", state(false, 0, 1)),
            (true, 2, 3, "+", ".", state(false, 1, 0)),
            (true, 2, 3, "++", ".U", state(true, 2, 0)),
            (true, 2, 3, "+-++", "...U", state(true, 2, 0)),
            (true, 2, 3, "+++++", ".U...", state(true, 5, 0)),
            (false, 1, 1, "-+-+", "DUDU", state(true, 1, 0)),
            (true, 1, 1, "+", "U", state(true, 1, 0)),
            (false, 1, 1, "+++", "...", state(true, 3, 0)),
            (false, 5, 1, "-++++-+++++", "D.........U", state(true, 5, 0)),
        ];
        for &(default_down, rise, fall, results, want, end) in cases {
            let mut h = Health::new(default_down);
            let got = run(&mut h, results, rise, fall);
            let what = format!("default_down={default_down} rise={rise} fall={fall} {results}");
            assert_eq!(got, want, "{what}");
            assert_eq!(h, end, "{what}");
        }
    }

    #[test]
    fn counts_keep_going_after_a_flip() {
        let mut h = Health::new(false);
        assert_eq!(run(&mut h, "-----", 2, 3), "..D..");
        assert_eq!(h.fall, 5);
    }

    #[test]
    fn lowered_threshold_flips_on_the_next_matching_round() {
        // A reload lowers rise from 5 to 2 while 3 successes are counted.
        let mut h = Health {
            up: false,
            rise: 3,
            fall: 0,
        };
        assert_eq!(h.record(true, 2, 3), Some(Transition::WentUp));
        // A failure does not flip a down peer, whatever the counts.
        let mut h = Health {
            up: false,
            rise: 0,
            fall: 7,
        };
        assert_eq!(h.record(false, 2, 3), None);
    }

    #[test]
    fn counters_saturate() {
        let mut h = Health {
            up: true,
            rise: u32::MAX,
            fall: 0,
        };
        assert_eq!(h.record(true, 2, 3), None);
        assert_eq!(h.rise, u32::MAX);
        let mut h = Health {
            up: false,
            rise: 0,
            fall: u32::MAX,
        };
        assert_eq!(h.record(false, 2, 3), None);
        assert_eq!(h.fall, u32::MAX);
    }

    fn health() -> impl Strategy<Value = Health> {
        (any::<bool>(), any::<u32>(), any::<u32>()).prop_map(|(up, rise, fall)| Health {
            up,
            rise,
            fall,
        })
    }

    proptest! {
        #[test]
        fn alternating_results_never_flip(
            default_down: bool,
            start_ok: bool,
            rise in 2u32..100,
            fall in 2u32..100,
            n in 0usize..200,
        ) {
            let mut h = Health::new(default_down);
            for i in 0..n {
                prop_assert_eq!(h.record(start_ok ^ (i % 2 == 1), rise, fall), None);
            }
            prop_assert_eq!(h.up, !default_down);
        }

        #[test]
        fn fall_failures_take_an_up_peer_down(
            rise in 1u32..100,
            fall in 1u32..100,
            history in proptest::collection::vec(any::<bool>(), 0..50),
        ) {
            let mut h = Health::new(false);
            for ok in history {
                h.record(ok, rise, fall);
            }
            let was_up = h.up;
            let mut flips = Vec::new();
            for _ in 0..fall {
                flips.extend(h.record(false, rise, fall));
            }
            prop_assert!(!h.up);
            prop_assert_eq!(h.rise, 0);
            prop_assert!(h.fall >= fall);
            let want = if was_up { vec![Transition::WentDown] } else { vec![] };
            prop_assert_eq!(flips, want);
        }

        #[test]
        fn rise_successes_bring_a_down_peer_up(
            rise in 1u32..100,
            fall in 1u32..100,
            history in proptest::collection::vec(any::<bool>(), 0..50),
        ) {
            let mut h = Health::new(true);
            for ok in history {
                h.record(ok, rise, fall);
            }
            for _ in 0..rise {
                h.record(true, rise, fall);
            }
            prop_assert!(h.up);
            prop_assert_eq!(h.fall, 0);
            prop_assert!(h.rise >= rise);
        }

        #[test]
        fn fewer_than_threshold_never_flips(
            mut h in health(),
            rise in 1u32..100,
            fall in 1u32..100,
        ) {
            // From a fresh streak, threshold - 1 equal results never flip.
            if h.up {
                h.fall = 0;
                for _ in 1..fall {
                    prop_assert_eq!(h.record(false, rise, fall), None);
                }
                prop_assert!(h.up);
            } else {
                h.rise = 0;
                for _ in 1..rise {
                    prop_assert_eq!(h.record(true, rise, fall), None);
                }
                prop_assert!(!h.up);
            }
        }

        #[test]
        fn one_step_invariants(
            mut h in health(),
            ok: bool,
            rise in 1u32..=u32::MAX,
            fall in 1u32..=u32::MAX,
        ) {
            let before = h;
            let t = h.record(ok, rise, fall);
            if ok {
                prop_assert_eq!(h.fall, 0);
                prop_assert_eq!(h.rise, before.rise.saturating_add(1));
                prop_assert_ne!(t, Some(Transition::WentDown));
            } else {
                prop_assert_eq!(h.rise, 0);
                prop_assert_eq!(h.fall, before.fall.saturating_add(1));
                prop_assert_ne!(t, Some(Transition::WentUp));
            }
            // A transition is reported exactly when the state changed.
            match t {
                Some(Transition::WentUp) => prop_assert!(!before.up && h.up),
                Some(Transition::WentDown) => prop_assert!(before.up && !h.up),
                None => prop_assert_eq!(before.up, h.up),
            }
            // A peer that stays up after a failure is below the fall
            // threshold, and one that stays down after a success below rise.
            if h.up && !ok {
                prop_assert!(h.fall < fall);
            }
            if !h.up && ok {
                prop_assert!(h.rise < rise);
            }
        }
    }
}
