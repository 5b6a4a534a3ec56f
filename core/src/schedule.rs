//! When a worker runs a peer's round (README: How checks work).
//!
//! Every worker keeps a timer per peer; the shared slot holds when the next
//! round is due and a lease naming the worker running a round. The peer's
//! owner (`index % workers`) runs it when due; any other worker runs it only
//! when it is overdue by a whole interval (the owner died or stalls), so
//! the instance runs one round per peer per interval whatever the number
//! of workers, and a dead owner is replaced within two intervals.

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

/// Due time of the round after one that was due at `due`, started at
/// `start` and committed at `committed`: fixed-rate on the schedule, so a
/// round that started a little late (a busy event loop) does not push every
/// later round back; a round taken over by another worker (started a whole
/// interval or more after it was due) restarts the schedule from its start;
/// a round that overran its interval is followed right after its commit.
pub fn next_due(due: u64, start: u64, committed: u64, interval: u64) -> u64 {
    let base = if start.saturating_sub(due) < interval {
        due
    } else {
        start
    };
    base.saturating_add(interval).max(committed)
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
/// (`timeout`, always less than `interval`) plus half of what is left of the
/// interval, as margin for a busy event loop. A round abandoned by a dead
/// worker is thus claimable before the next interval ends, and another
/// worker, which looks an interval after the round was due, takes it over
/// within two intervals.
pub fn lease_expiry(now: u64, timeout: u64, interval: u64) -> u64 {
    now + timeout + interval.saturating_sub(timeout) / 2
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
        assert_eq!(next_due(1000, 1000, 1040, 100), 1100);
        assert_eq!(next_due(1000, 1000, 1250, 100), 1250);
        // started 30 ms late: the schedule does not drift
        assert_eq!(next_due(1000, 1030, 1040, 100), 1100);
        // taken over two intervals late: from the takeover
        assert_eq!(next_due(1000, 1200, 1210, 100), 1300);
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
        fn next_round_never_before_commit_nor_drifting(due in 0u64..1 << 40, late in 0u64..300_000, took in 0u64..100_000, interval in 100u64..100_000) {
            let start = due + late;
            let d = next_due(due, start, start + took, interval);
            prop_assert!(d >= start + took, "never before the commit");
            if late < interval {
                prop_assert!(d == due + interval || d == start + took, "on schedule unless overrun");
            } else {
                prop_assert!(d == start + interval || d == start + took, "a takeover restarts the schedule");
            }
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
