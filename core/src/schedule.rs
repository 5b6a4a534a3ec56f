//! When a worker runs a peer's round (docs/design.md, How rounds are scheduled).
//!
//! Every worker keeps a timer per peer; the shared slot holds the next
//! round's point on the peer's lattice and a lease naming the worker running
//! a round. Lattice points are one interval in force apart (`interval`, or
//! `down_interval` after a round that left the peer down); a round is due at
//! its lattice point plus its jitter delay ([`due_at`]), which every worker
//! computes alike from the point and the peer's seed. The peer's owner
//! (`index % workers`) runs it when due; any other worker runs it only when
//! it is overdue by a whole interval in force (the owner died or stalls),
//! so the instance runs one round per peer per interval whatever the number
//! of workers, and a dead owner's round runs less than two intervals after
//! its lattice point.

/// Worker slot that owns peer `index`.
pub fn owner(index: u32, workers: u32) -> u32 {
    index % workers.max(1)
}

/// What a worker does when its timer for a peer fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Try to claim the lease and start a round now.
    Run,
    /// Sleep until this monotonic ms, then decide again.
    WaitUntil(u64),
}

/// Decide at `now` for a peer whose next round is due at `due`.
pub fn decide(now: u64, due: u64, is_owner: bool, interval: u64) -> Decision {
    let at = if is_owner {
        due
    } else {
        due.saturating_add(interval)
    };
    if now >= at {
        Decision::Run
    } else {
        Decision::WaitUntil(at)
    }
}

/// Due time of a peer's first round: a random offset inside the first
/// interval, so that many peers do not fire together. `random` is any
/// uniformly distributed value.
pub fn first_due(now: u64, interval: u64, random: u64) -> u64 {
    now + random % interval.max(1)
}

/// Lattice point of the round after one on lattice point `lattice`, due
/// at `due` (the point plus its jitter delay) and started at `start`;
/// `interval` is the interval in force after that round (its verdict
/// decides between `interval` and `down_interval`).
///
/// Fixed-rate: a round that started less than an interval after it was
/// due is followed on the next point, `lattice + interval`, so a late
/// start (a busy event loop) does not push later rounds back; when that
/// point's due time has passed by the time the round is committed (it
/// overran, or started very late), the next round starts right after the
/// commit and the lattice stays where it was. A round that started a whole
/// interval or more after it was due (taken over from a dead owner)
/// restarts the lattice from its start.
pub fn next_lattice(lattice: u64, due: u64, start: u64, interval: u64) -> u64 {
    if start.saturating_sub(due) < interval {
        lattice.saturating_add(interval)
    } else {
        start.saturating_add(interval)
    }
}

/// When the round on lattice point `lattice` is due: the point plus a
/// delay in `0..jitter` ([`jitter_delay`]).
pub fn due_at(lattice: u64, seed: u64, jitter: u64) -> u64 {
    lattice.saturating_add(jitter_delay(seed, lattice, jitter))
}

/// The jitter delay of the round on lattice point `lattice`, uniform in
/// `0..jitter` (0 when `jitter` is 0). A pure function of the peer's
/// `seed` and the point rather than a draw from a process's generator:
/// every worker must agree on when the round is due, because the ones that
/// do not own the peer take it over an interval after that time. The
/// lattice point changes every round, so the delays of successive rounds
/// are independent for any practical purpose.
pub fn jitter_delay(seed: u64, lattice: u64, jitter: u64) -> u64 {
    if jitter == 0 {
        return 0;
    }
    mix64(seed ^ mix64(lattice)) % jitter
}

/// The seed of a peer's jitter: its identity (the same in every worker and
/// across reloads) and its slot index (two `server` lines of one address
/// share an identity).
pub fn jitter_seed(identity: u64, index: u32) -> u64 {
    mix64(identity ^ u64::from(index).rotate_left(32))
}

/// A 64-bit mixing function (SplitMix64's output step: add the golden
/// ratio, then two xor-shift-multiply rounds): consecutive inputs give
/// unrelated, uniformly spread outputs.
fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Must a round re-handshake its kept connection instead of peeking it?
/// `age` counts from the start of the round that opened the connection;
/// `served` counts rounds it served, the opening round included. `period`
/// is the effective rehandshake period (`u64::MAX` = no age limit);
/// `max_rounds` is `check_keepalive_requests`, applied with `reuse=on` only.
pub fn must_rehandshake(age: u64, served: u32, period: u64, max_rounds: Option<u32>) -> bool {
    age >= period || max_rounds.is_some_and(|n| served >= n)
}

// A lease word: the holder's worker slot in the top 16 bits, then a "held"
// bit, then the low 47 bits of the expiry (monotonic ms: 47 bits wrap after
// some 4000 years, and expiries are compared across the wrap). 0, what a
// fresh zone holds and what a finished round stores, is free.
const SLOT_SHIFT: u32 = 48;
const HELD: u64 = 1 << 47;
const EXPIRY_MASK: u64 = HELD - 1;

/// The largest worker slot a lease carries; larger slots would share their
/// low 16 bits with a smaller one. nginx has at most `NGX_MAX_PROCESSES`
/// (1024) worker slots.
pub const MAX_LEASE_SLOT: u32 = u16::MAX as u32;

/// The lease word of worker slot `worker` (at most [`MAX_LEASE_SLOT`])
/// running a round until `expiry`. Never the free word 0.
pub fn lease(worker: u32, expiry: u64) -> u64 {
    u64::from(worker as u16) << SLOT_SHIFT | HELD | (expiry & EXPIRY_MASK)
}

/// Can worker slot `me` claim a round at `now` given the lease word
/// `word`? Free; held by a round that outlived its budget (its worker
/// stalls); or held by slot `me` itself. A worker never asks while it runs
/// the peer's round, so a lease of its own slot was left by its
/// predecessor, killed mid-round and respawned by the master.
pub fn lease_claimable(word: u64, now: u64, me: u32) -> bool {
    if word & HELD == 0 {
        return true;
    }
    // How long ago the lease expired, modulo 2^47: expired when `now` is
    // after the expiry by less than half the range.
    let past = now.wrapping_sub(word) & EXPIRY_MASK;
    let expired = past != 0 && past < HELD / 2;
    expired || (word >> SLOT_SHIFT) as u16 == me as u16
}

/// Until when a round claimed at `now` holds the lease: its whole budget
/// (`timeout`) plus, as margin for a busy event loop, half of what is left
/// of the interval (half the interval when the timeout is not below it).
/// A round abandoned by a dead worker is thus claimable before the next
/// interval ends (the round's length, when that is longer), and another
/// worker, which looks an interval after the round was due, takes it over
/// within two intervals.
pub fn lease_expiry(now: u64, timeout: u64, interval: u64) -> u64 {
    let margin = match interval.checked_sub(timeout) {
        Some(left) if left > 0 => left / 2,
        _ => interval / 2,
    };
    now + timeout + margin
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn owner_spreads_peers() {
        assert_eq!(owner(0, 4), 0);
        assert_eq!(owner(5, 4), 1);
        assert_eq!(owner(7, 1), 0);
        assert_eq!(owner(7, 0), 0);
    }

    #[test]
    fn owner_runs_when_due_others_an_interval_later() {
        assert_eq!(decide(1000, 1000, true, 500), Decision::Run);
        assert_eq!(decide(999, 1000, true, 500), Decision::WaitUntil(1000));
        assert_eq!(decide(1000, 1000, false, 500), Decision::WaitUntil(1500));
        assert_eq!(decide(1500, 1000, false, 500), Decision::Run);
    }

    #[test]
    fn fixed_rate_and_overrun() {
        assert_eq!(next_lattice(1000, 1000, 1000, 100), 1100);
        // started 30 ms late (busy loop or jitter): the lattice does not drift
        assert_eq!(next_lattice(1000, 1000, 1030, 100), 1100);
        assert_eq!(next_lattice(1000, 1000, 1099, 100), 1100);
        // started a whole interval after its point (taken over): from the start
        assert_eq!(next_lattice(1000, 1000, 1100, 100), 1200);
        assert_eq!(next_lattice(1000, 1000, 1200, 100), 1300);
        // the peer went down: the lattice goes on from this round's point
        // with down_interval; back up: with interval again
        assert_eq!(next_lattice(1000, 1000, 1010, 500), 1500);
        assert_eq!(next_lattice(1500, 1500, 1510, 100), 1600);
        // a down_interval shorter than the round's lateness: from the start
        assert_eq!(next_lattice(1000, 1000, 1150, 100), 1250);
        // jitter 80: due at 1080 and started 30 ms late, past the next
        // point: the lattice stays (the next round follows the commit)
        assert_eq!(next_lattice(1000, 1080, 1110, 100), 1100);
        // taken over an interval after its jittered due time
        assert_eq!(next_lattice(1000, 1080, 1180, 100), 1280);
    }

    #[test]
    fn an_overrun_is_followed_at_once_and_the_lattice_stays() {
        // interval 100: the round on 1000 started at 1040 and was committed
        // at 1130, past the next round's due time 1100
        let next = next_lattice(1000, 1000, 1040, 100);
        assert_eq!(next, 1100);
        assert_eq!(decide(1130, due_at(next, 7, 0), true, 100), Decision::Run);
        // that round starts right after the commit; the one after is back
        // on the lattice, not an interval after the late start
        assert_eq!(next_lattice(next, next, 1131, 100), 1200);
    }

    #[test]
    fn jitter_delays_spread_evenly() {
        let seed = jitter_seed(0x1234_5678_9abc_def0, 3);
        let (jitter, n) = (10u64, 100_000u64);
        let mut buckets = [0u64; 10];
        let mut sum = 0;
        for k in 0..n {
            // lattice points one interval apart, as a schedule makes them
            let d = jitter_delay(seed, 50_000 + k * 1_000, jitter);
            buckets[d as usize] += 1;
            sum += d;
        }
        for (i, &b) in buckets.iter().enumerate() {
            assert!((9_500..=10_500).contains(&b), "bucket {i}: {b} of {n}");
        }
        // mean (jitter - 1) / 2 = 4.5
        assert!((4.45..=4.55).contains(&(sum as f64 / n as f64)));
        // successive rounds' delays are uncorrelated (lag-1 correlation
        // near 0; 1 if each repeated the last, -1 if they alternated)
        let d: Vec<f64> = (0..n)
            .map(|k| jitter_delay(seed, 50_000 + k * 1_000, 1_000) as f64)
            .collect();
        let mean = d.iter().sum::<f64>() / n as f64;
        let var: f64 = d.iter().map(|x| (x - mean).powi(2)).sum();
        let cov: f64 = d.windows(2).map(|w| (w[0] - mean) * (w[1] - mean)).sum();
        assert!((cov / var).abs() < 0.02, "lag-1 correlation {}", cov / var);
        assert_eq!(jitter_delay(seed, 5, 0), 0, "no jitter: no delay");
        assert_eq!(jitter_delay(seed, 5, 1), 0);
        assert_eq!(due_at(5, seed, 0), 5);
    }

    #[test]
    fn peers_draw_different_delays() {
        // same lattice point, different peers (identity or index)
        let a = jitter_delay(jitter_seed(1, 0), 10_000, 1_000_000);
        let b = jitter_delay(jitter_seed(2, 0), 10_000, 1_000_000);
        let c = jitter_delay(jitter_seed(1, 1), 10_000, 1_000_000);
        assert!(a != b && a != c && b != c, "{a} {b} {c}");
    }

    #[test]
    fn rehandshake_by_age_or_rounds() {
        assert!(!must_rehandshake(29_999, 1, 30_000, None));
        assert!(must_rehandshake(30_000, 1, 30_000, None));
        assert!(
            !must_rehandshake(u64::MAX - 1, 1_000_000, u64::MAX, None),
            "keepalive=off: no age limit"
        );
        assert!(!must_rehandshake(0, 9, 30_000, Some(10)));
        assert!(must_rehandshake(0, 10, 30_000, Some(10)));
        assert!(
            must_rehandshake(0, 1, 30_000, Some(1)),
            "n=1: every round re-handshakes"
        );
    }

    #[test]
    fn lease_round_trip() {
        let l = lease(3, 5000);
        assert!(!lease_claimable(l, 4999, 1));
        assert!(!lease_claimable(l, 5000, 1));
        assert!(lease_claimable(l, 5001, 1));
        assert!(lease_claimable(0, 0, 1));
        assert!(
            lease_claimable(l, 10, 3),
            "a respawned worker reclaims its predecessor's lease"
        );
        assert_ne!(lease(0, 0), 0, "a held lease is never the free word");
    }

    #[test]
    fn the_highest_slot_keeps_its_lease() {
        let top = MAX_LEASE_SLOT;
        assert_ne!(lease(top, 0), 0);
        assert_ne!(lease(top, 1 << 48), 0);
        assert!(lease_claimable(lease(top, 5), 0, top));
        assert!(!lease_claimable(lease(top, 5), 0, 0));
        assert!(!lease_claimable(lease(0, 5), 0, top));
    }

    #[test]
    fn expiry_is_compared_across_the_wrap() {
        let e = (1 << 47) - 10;
        assert!(!lease_claimable(lease(1, e), e, 2));
        assert!(lease_claimable(lease(1, e), e + 1, 2));
        // 20 ms later the expiry's 47 bits have wrapped
        assert!(lease_claimable(lease(1, e), e + 20, 2));
        assert!(!lease_claimable(lease(1, e + 20), e + 19, 2));
    }

    proptest! {
        #[test]
        fn an_abandoned_round_is_claimable_within_an_interval(start in 0u64..1 << 40, interval in 100u64..86_400_000, t in 1u64..86_400_000) {
            let timeout = t % interval;
            prop_assume!(timeout > 0);
            let expiry = lease_expiry(start, timeout, interval);
            // the live round always fits; a non-owner looking an interval
            // after the due time finds the lease claimable
            prop_assert!(expiry >= start + timeout);
            prop_assert!(lease_claimable(lease(0, expiry), start + interval, 1));
        }

        #[test]
        fn every_slot_holds_its_lease(slot in 0..=MAX_LEASE_SLOT, other in 0..=MAX_LEASE_SLOT, expiry: u64, ahead in 0u64..1 << 40) {
            let word = lease(slot, expiry);
            prop_assert_ne!(word, 0);
            prop_assert!(lease_claimable(word, expiry.wrapping_sub(ahead), slot));
            if other != slot {
                prop_assert!(!lease_claimable(word, expiry.wrapping_sub(ahead), other));
                prop_assert!(lease_claimable(word, expiry.wrapping_add(1 + ahead), other));
            }
        }

        #[test]
        fn first_round_inside_first_interval(now in 0u64..1 << 40, interval in 100u64..86_400_000, r: u64) {
            let d = first_due(now, interval, r);
            prop_assert!(d >= now && d < now + interval);
        }

        #[test]
        fn next_point_is_on_the_lattice_or_restarts_from_the_start(lattice in 0u64..1 << 40, jitter_part in 0u64..1_000, late in 0u64..300_000, interval in 100u64..100_000) {
            let due = lattice + interval * jitter_part / 1_000;
            let start = due + late;
            let next = next_lattice(lattice, due, start, interval);
            if late < interval {
                prop_assert_eq!(next, lattice + interval, "on the lattice");
            } else {
                prop_assert_eq!(next, start + interval, "a takeover restarts the lattice");
            }
        }

        #[test]
        fn jitter_delay_stays_below_jitter(seed: u64, lattice: u64, jitter in 0u64..86_400_000) {
            let d = jitter_delay(seed, lattice, jitter);
            prop_assert!(d < jitter.max(1));
            prop_assert_eq!(d, jitter_delay(seed, lattice, jitter), "the same in every worker");
            let due = due_at(lattice, seed, jitter);
            prop_assert!(due >= lattice && due - lattice == d.min(u64::MAX - lattice));
        }

        /// A live owner, each round starting up to a third of the shorter
        /// interval late and lasting up to a third of it, verdicts at
        /// random: every round is due on its lattice point plus less than
        /// the jitter, and the points are the sums of the intervals in
        /// force (no drift, whatever the lateness, durations and jitter).
        #[test]
        fn no_drift_with_jitter_and_down_interval(
            first in 1u64..1 << 40,
            interval in 100u64..100_000,
            down in 100u64..100_000,
            jitter_part in 0u64..1_000,
            seed: u64,
            rounds in prop::collection::vec((0u64..1_000, 0u64..1_000, any::<bool>()), 1..200),
        ) {
            let shortest = interval.min(down);
            let third = shortest / 3;
            let jitter = third * jitter_part / 1_000;
            let mut lattice = first;
            let mut expected = first;
            let mut committed = 0;
            for (late, took, up) in rounds {
                let due = due_at(lattice, seed, jitter);
                prop_assert!(due >= expected && due < expected + jitter.max(1));
                let start = due.max(committed) + late * third / 1_000;
                committed = start + took * third / 1_000;
                let after = if up { interval } else { down };
                lattice = next_lattice(lattice, due, start, after);
                expected += after;
                prop_assert_eq!(lattice, expected);
            }
        }

        /// With a fixed interval, the gaps between due times stay within
        /// `interval +- jitter` and their mean converges on the interval:
        /// after n rounds the schedule is off by less than one jitter.
        #[test]
        fn gaps_vary_within_the_jitter_and_average_the_interval(
            first in 1u64..1 << 40,
            interval in 100u64..100_000,
            jitter_part in 0u64..1_000,
            seed: u64,
            n in 1u64..500,
        ) {
            let jitter = interval * jitter_part / 1_000;
            let mut lattice = first;
            let due0 = due_at(lattice, seed, jitter);
            let mut prev = due0;
            for _ in 0..n {
                // each round starts when due
                lattice = next_lattice(lattice, prev, prev, interval);
                let due = due_at(lattice, seed, jitter);
                let gap = due - prev;
                prop_assert!(gap + jitter.max(1) > interval && gap < interval + jitter.max(1));
                prev = due;
            }
            let total = prev - due0;
            prop_assert!(total.abs_diff(n * interval) < jitter.max(1));
        }

        /// The owner dies after the round on `lattice`: another worker,
        /// deciding with the interval in force, runs the next round one
        /// interval after its due time, which is less than two intervals
        /// after the dead owner's last lattice point plus one interval (the
        /// missed point), finds the lease of a round abandoned at that due
        /// time claimable, and restarts the lattice from its start.
        #[test]
        fn takeover_within_two_intervals_of_the_missed_point(
            lattice in 1u64..1 << 40,
            interval in 100u64..100_000,
            t in 1u64..100_000,
            jitter_part in 0u64..1_000,
            seed: u64,
            now_offset in 0u64..300_000,
        ) {
            let timeout = t % interval;
            prop_assume!(timeout > 0);
            let jitter = interval * jitter_part / 1_000;
            let last = due_at(lattice, seed, jitter);
            let missed = next_lattice(lattice, last, last, interval);
            let due = due_at(missed, seed, jitter);
            let now = missed + now_offset;
            let runs = decide(now, due, false, interval) == Decision::Run;
            prop_assert_eq!(runs, now >= due + interval);
            prop_assert!(due + interval >= missed + interval && due + interval < missed + 2 * interval);
            // a round the owner started at `due` and abandoned
            let abandoned = lease(0, lease_expiry(due, timeout, interval));
            prop_assert!(lease_claimable(abandoned, due + interval, 1));
            let start = due + interval;
            let next = next_lattice(missed, due, start, interval);
            prop_assert_eq!(next, start + interval);
        }

        #[test]
        fn a_non_owner_never_runs_before_the_owner(now: u32, due: u32, interval in 100u64..100_000) {
            let (now, due) = (u64::from(now), u64::from(due));
            if decide(now, due, false, interval) == Decision::Run {
                prop_assert_eq!(decide(now, due, true, interval), Decision::Run);
            }
        }
    }
}
