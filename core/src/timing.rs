//! Timer arithmetic of a round (docs/design.md, How checks work).
//!
//! The timer that may fire a little late (the look at the schedule that
//! starts a round) is aligned to a grid of `interval / 50`, 1 to 20 ms, on
//! nginx's monotonic clock, so that the rounds of many peers share a worker
//! wake-up. A settle window is at most a quarter of the timeout and 100
//! ms, never past the round's timeout; it ends exactly, not on the grid,
//! so that the ends of the rounds of one grid point are spread over the
//! turns their starts were (`check_max_inflight` spreads those), not all
//! in one turn.

/// Longest delay alignment adds to a timer: `interval / 50`, 1 .. 20 ms.
pub fn grid_step(interval_ms: u64) -> u64 {
    (interval_ms / 50).clamp(1, 20)
}

/// Milliseconds from `now` to the first grid point at or after `at` (and
/// at least 1 ms from now).
pub fn aligned_delay(now: u64, at: u64, step: u64) -> u64 {
    let step = step.max(1);
    let at = at.max(now.saturating_add(1));
    at.div_ceil(step).saturating_mul(step) - now
}

/// Longest a TCP round watches a fresh connection for a close or reset
/// after its connect and peek: a quarter of the timeout, at most 100 ms,
/// and what is left of the timeout (`elapsed_ms` of it spent). 0 means the
/// round ends at once.
pub fn settle_window(timeout_ms: u64, elapsed_ms: u64) -> u64 {
    let budget = timeout_ms.saturating_sub(elapsed_ms);
    budget.min(timeout_ms / 4).min(100)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn grid_steps() {
        assert_eq!(grid_step(0), 1);
        assert_eq!(grid_step(49), 1);
        assert_eq!(grid_step(100), 2);
        assert_eq!(grid_step(1000), 20);
        assert_eq!(grid_step(60_000), 20);
    }

    #[test]
    fn aligned_delays() {
        assert_eq!(aligned_delay(100, 100, 20), 20); // at least 1 ms: 101 -> 120
        assert_eq!(aligned_delay(100, 105, 20), 20);
        assert_eq!(aligned_delay(100, 120, 20), 20);
        assert_eq!(aligned_delay(100, 121, 20), 40);
        assert_eq!(aligned_delay(7, 3, 1), 1);
        assert_eq!(aligned_delay(0, 50, 0), 50);
    }

    #[test]
    fn settle_windows() {
        assert_eq!(settle_window(1000, 3), 100);
        assert_eq!(settle_window(200, 0), 50);
        assert_eq!(settle_window(200, 180), 20);
        assert_eq!(settle_window(200, 250), 0);
        assert_eq!(settle_window(3, 0), 0);
    }

    proptest! {
        #[test]
        fn aligned_delay_lands_on_the_grid(now in 0u64..1 << 40, ahead in 0u64..100_000, interval in 0u64..100_000) {
            let step = grid_step(interval);
            let d = aligned_delay(now, now + ahead, step);
            prop_assert!(d >= 1);
            prop_assert_eq!((now + d) % step, 0);
            prop_assert!(now + d >= now + ahead);
            prop_assert!(d < ahead.max(1) + step);
        }

        #[test]
        fn settle_never_ends_past_the_timeout(timeout in 0u64..100_000, elapsed in 0u64..100_000) {
            let settle = settle_window(timeout, elapsed);
            prop_assert!(settle <= 100 && settle <= timeout / 4);
            prop_assert!(elapsed + settle <= timeout.max(elapsed));
        }
    }
}
