use super::*;
use proptest::prelude::*;

fn slot() -> Slot {
    let s = Slot::default();
    s.init_new(7, false);
    s
}

#[test]
fn passive_failures_take_an_up_peer_down_once() {
    let s = slot();
    assert_eq!(s.passive_failure(3, 10), None);
    s.passive_success();
    assert_eq!(s.passive_failure(3, 11), None);
    assert_eq!(s.passive_failure(3, 12), None);
    let flip = s.passive_failure(3, 13).expect("the third in a row");
    assert_eq!(flip.transition, Transition::WentDown);
    assert!(!flip.health.up);
    let snap = s.snapshot();
    assert!(!snap.up);
    assert_eq!((snap.last_change, snap.down_since), (13, 13));
    assert_eq!(snap.last_reason(), Some(Reason::Passive));
    assert_eq!(snap.failures[Reason::Passive.index()], 1);
    assert_eq!(snap.checks, 0, "not a check round");
    // Down already: more failures flip nothing.
    for t in 0..10 {
        assert_eq!(s.passive_failure(3, 20 + t), None);
    }
    // Check rounds bring it back (rise 2), with a fresh passive count.
    s.record(RoundResult::Up { delay_ms: 1 }, 1, (2, 3), 30, None);
    assert!(!s.snapshot().up, "one success is not rise=2");
    s.record(RoundResult::Up { delay_ms: 1 }, 1, (2, 3), 31, None);
    assert!(s.snapshot().up);
    assert_eq!(s.passive.load(Ordering::Relaxed), 0);
    assert_eq!(s.passive_failure(3, 40), None);
}

proptest! {
    #[test]
    fn passive_fall_is_consecutive_failures(
        fall in 1u32..6,
        attempts in proptest::collection::vec(any::<bool>(), 0..60),
    ) {
        // Model: the peer goes down at the first run of `fall` failures.
        let s = slot();
        let mut run = 0;
        let mut want_down_at = None;
        for (i, &ok) in attempts.iter().enumerate() {
            let flip = if ok { s.passive_success(); None } else { s.passive_failure(fall, i as u64) };
            run = if ok { 0 } else { run + 1 };
            if run == fall && want_down_at.is_none() {
                want_down_at = Some(i);
                prop_assert!(flip.is_some(), "down at attempt {}", i);
            } else {
                prop_assert!(flip.is_none());
            }
        }
        prop_assert_eq!(s.snapshot().up, want_down_at.is_none());
    }
}

#[test]
fn vetoed_is_disabled_or_down_without_fail_open() {
    let s = slot();
    assert!(!s.vetoed());
    s.up.store(0, Ordering::Relaxed);
    assert!(s.vetoed());
    s.set_fail_open(true);
    assert!(!s.vetoed(), "failing open lets a down peer be selected");
    s.admin.store(admin::DISABLED, Ordering::Relaxed);
    assert!(s.vetoed(), "a disabled peer stays out even failing open");
    s.up.store(1, Ordering::Relaxed);
    s.set_fail_open(false);
    assert!(s.vetoed(), "a disabled peer stays out while up");
}

#[test]
fn set_health_times_a_change_like_a_flip() {
    let s = slot();
    s.record(RoundResult::Up { delay_ms: 1 }, 1, (3, 3), 5, None);
    assert_eq!(s.snapshot().rise, 1);
    // Same state: nothing timed, counts start over.
    assert!(!s.set_health(true, 10));
    let snap = s.snapshot();
    assert_eq!(
        (snap.up, snap.rise, snap.fall, snap.last_change),
        (true, 0, 0, 0)
    );
    assert!(s.set_health(false, 20));
    let snap = s.snapshot();
    assert_eq!(
        (snap.up, snap.last_change, snap.down_since),
        (false, 20, 20)
    );
    assert!(s.vetoed());
    assert!(!s.set_health(false, 30));
    assert_eq!(s.snapshot().down_since, 20, "still down since the change");
    // Later rounds go on from there: `rise` successes bring it back.
    for t in 31..33 {
        assert_eq!(
            s.record(RoundResult::Up { delay_ms: 1 }, 1, (3, 3), t, None),
            None
        );
    }
    let flip = s.record(RoundResult::Up { delay_ms: 1 }, 1, (3, 3), 33, None);
    assert_eq!(flip.map(|f| f.transition), Some(Transition::WentUp));
    assert!(s.set_health(false, 40));
    assert!(s.set_health(true, 50));
    let snap = s.snapshot();
    assert_eq!((snap.up, snap.last_change, snap.down_since), (true, 50, 0));
    assert_eq!(s.seq.load(Ordering::Relaxed) & 1, 0, "the update ended");
}

#[test]
fn set_disabled_reports_changes_and_keeps_health() {
    let s = slot();
    assert!(s.set_disabled(true));
    assert!(!s.set_disabled(true));
    assert!(s.disabled() && s.snapshot().disabled());
    assert!(s.vetoed() && s.snapshot().up, "disabled, health untouched");
    assert!(s.set_disabled(false));
    assert!(!s.set_disabled(false));
    assert!(!s.vetoed());
}

#[test]
fn restore_takes_the_saved_state() {
    let s = Slot::default();
    s.init_new(7, false);
    s.restore(&crate::statefile::Entry {
        identity: 7,
        up: false,
        admin: admin::DISABLED | 0x80,
        last_change: 5,
        down_since: 0,
    });
    let snap = s.snapshot();
    assert_eq!(
        (snap.up, snap.admin, snap.last_change),
        (false, admin::DISABLED, 5)
    );
    assert_ne!(snap.down_since, 0, "down, so down since some time");
    assert!(s.vetoed());
    s.restore(&crate::statefile::Entry {
        identity: 7,
        up: true,
        admin: 0,
        last_change: 9,
        down_since: 3,
    });
    let snap = s.snapshot();
    assert_eq!((snap.up, snap.admin, snap.down_since), (true, 0, 0));
}

#[test]
fn admin_state_carries_over_a_reload() {
    let old = slot();
    old.admin.store(admin::DISABLED, Ordering::Relaxed);
    let new = Slot::default();
    fill(
        core::slice::from_ref(&new),
        core::slice::from_ref(&old),
        &[7],
        &[Initial::Down],
    );
    assert_eq!(new.admin.load(Ordering::Relaxed), admin::DISABLED);
    assert!(new.snapshot().up);
}

#[test]
fn a_new_slot_has_no_delays() {
    let s = slot();
    let snap = s.snapshot();
    assert!(snap.up);
    assert_eq!(
        (snap.last_delay, snap.min_delay, snap.max_delay),
        (u32::MAX, u32::MAX, u32::MAX)
    );
    let d = Slot::default();
    d.init_new(1, true);
    assert!(!d.snapshot().up);
}

#[test]
fn record_counts_successes_and_failures() {
    let s = slot();
    assert_eq!(
        s.record(RoundResult::Up { delay_ms: 5 }, 6, (2, 2), 1, None),
        None
    );
    assert_eq!(
        s.record(RoundResult::Up { delay_ms: 3 }, 3, (2, 2), 2, None),
        None
    );
    assert_eq!(
        s.record(RoundResult::Down(Reason::Reset), 30, (2, 2), 3, None),
        None
    );
    let flip = s.record(RoundResult::Down(Reason::Timeout), 1000, (2, 2), 4, None);
    assert_eq!(
        flip,
        Some(Flip {
            transition: Transition::WentDown,
            health: Health {
                up: false,
                rise: 0,
                fall: 2
            },
            first: false,
        })
    );
    let snap = s.snapshot();
    assert_eq!(snap.checks, 4);
    assert_eq!(snap.fails_total, 2);
    assert_eq!((snap.last_delay, snap.min_delay, snap.max_delay), (3, 3, 5));
    assert_eq!((snap.delay_sum, snap.delay_count), (8, 2));
    assert_eq!(snap.failures[Reason::Reset.index()], 1);
    assert_eq!(snap.failures[Reason::Timeout.index()], 1);
    assert_eq!(snap.last_reason(), Some(Reason::Timeout));
    assert_eq!((snap.last_change, snap.down_since), (4, 4));
    assert_eq!(snap.duration_sum, 6 + 3 + 30 + 1000);
    assert_eq!(snap.last_duration, 1000);
    assert_eq!(snap.buckets.iter().sum::<u64>(), 4);
    assert_eq!(snap.buckets[duration_bucket(1000)], 1);
    assert_eq!(s.seq.load(Ordering::Relaxed) & 1, 0, "the update ended");
    // Up again after `rise` successes; down_since cleared.
    s.record(RoundResult::Up { delay_ms: 1 }, 1, (2, 2), 5, None);
    let flip = s.record(RoundResult::Up { delay_ms: 1 }, 1, (2, 2), 6, None);
    assert_eq!(flip.map(|f| f.transition), Some(Transition::WentUp));
    let snap = s.snapshot();
    assert!(snap.up);
    assert_eq!((snap.last_change, snap.down_since), (6, 0));
    // The last HTTP status stays until a later round sees another.
    assert_eq!(snap.http_status(), None);
    s.record(RoundResult::Down(Reason::Status), 2, (2, 2), 7, Some(503));
    s.record(RoundResult::Down(Reason::Timeout), 2, (2, 2), 8, None);
    assert_eq!(s.snapshot().http_status(), Some(503));
    s.record(RoundResult::Up { delay_ms: 1 }, 1, (9, 9), 9, Some(200));
    assert_eq!(s.snapshot().http_status(), Some(200));
}

#[test]
fn huge_delays_saturate_below_the_none_marker() {
    let s = slot();
    s.record(RoundResult::Up { delay_ms: u64::MAX }, 0, (1, 1), 1, None);
    assert_eq!(s.snapshot().last_delay, u32::MAX - 1);
}

#[test]
fn a_dead_writer_does_not_hang_readers() {
    let s = slot();
    s.write_begin(); // never ended
    let snap = s.snapshot();
    assert!(snap.up);
    // The next writer makes it even again.
    s.record(RoundResult::Up { delay_ms: 1 }, 1, (1, 1), 1, None);
    assert_eq!(s.seq.load(Ordering::Relaxed) & 1, 0);
}

#[test]
fn fill_matches_identities_in_order() {
    let old: Vec<Slot> = (0..3).map(|_| Slot::default()).collect();
    old[0].init_new(10, false);
    old[1].init_new(20, false);
    old[2].init_new(20, false);
    old[1].record(RoundResult::Down(Reason::Refused), 1, (1, 1), 9, None);
    old[2].checks.store(5, Ordering::Relaxed);
    let new: Vec<Slot> = (0..4).map(|_| Slot::default()).collect();
    fill(
        &new,
        &old,
        &[20, 30, 20, 10],
        &[Initial::Up, Initial::Down, Initial::Up, Initial::Up],
    );
    let s: Vec<Snapshot> = new.iter().map(Slot::snapshot).collect();
    // First 20 inherits old[1] (down), second 20 inherits old[2].
    assert!(!s[0].up && s[0].checks == 1);
    assert!(s[2].up && s[2].checks == 5);
    // 30 is new and starts down (default_down).
    assert!(!s[1].up && s[1].checks == 0 && s[1].last_delay == u32::MAX);
    assert!(s[3].up);
    assert_eq!(new[1].identity.load(Ordering::Relaxed), 30);
}

#[test]
fn sizes() {
    assert_eq!(data_bytes(0, 0, false), data_bytes(1, 0, false));
    assert_eq!(data_bytes(3, 0, false) - data_bytes(2, 0, false), SLOT_SIZE);
    assert_eq!(
        data_bytes(3, 1, false) - data_bytes(3, 0, false),
        size_of::<DynMeta>()
    );
    assert_eq!(
        data_bytes(3, 1, true) - data_bytes(3, 1, false),
        3 * OUTLIER_SIZE
    );
    // docs/directives.md, check_outlier and check_shm_size.
    assert_eq!(OUTLIER_SIZE, 128);
}

proptest! {
    /// Whatever the results, the counters add up and the stored state
    /// is what `Health::record` computes.
    #[test]
    fn counters_add_up(results in prop::collection::vec((any::<bool>(), 0u64..20_000, 0usize..REASONS), 0..200),
                       rise in 1u32..5, fall in 1u32..5) {
        let s = slot();
        let mut h = Health::new(false);
        let (mut ups, mut downs) = (0u64, 0u64);
        for (i, &(ok, ms, reason)) in results.iter().enumerate() {
            let r = if ok {
                ups += 1;
                RoundResult::Up { delay_ms: ms }
            } else {
                downs += 1;
                RoundResult::Down(Reason::ALL[reason])
            };
            let expect = h.record(ok, rise, fall);
            let got = s.record(r, ms, (rise, fall), i as u64 + 1, None);
            prop_assert_eq!(got.map(|f| f.transition), expect);
        }
        let snap = s.snapshot();
        prop_assert_eq!(snap.checks, ups + downs);
        prop_assert_eq!(snap.fails_total, downs);
        prop_assert_eq!(snap.failures.iter().sum::<u64>(), downs);
        prop_assert_eq!(snap.delay_count, ups);
        prop_assert_eq!(snap.buckets.iter().sum::<u64>(), ups + downs);
        prop_assert_eq!((snap.up, snap.rise, snap.fall), (h.up, h.rise, h.fall));
    }

    /// Operator changes interleaved with rounds: `up` is always the
    /// last thing that set it, `down_since` is non-zero exactly while
    /// down, and `last_change` moves only when the state does.
    #[test]
    fn set_health_and_rounds_agree(steps in prop::collection::vec((0u8..3, any::<bool>()), 0..200),
                                   rise in 1u32..4, fall in 1u32..4) {
        let s = slot();
        let mut h = Health::new(false);
        let mut last_change = 0;
        for (i, &(kind, ok)) in steps.iter().enumerate() {
            let now = i as u64 + 1;
            let before = h.up;
            if kind == 0 {
                let changed = s.set_health(ok, now);
                prop_assert_eq!(changed, before != ok);
                h = Health { up: ok, rise: 0, fall: 0 };
            } else {
                let r = if ok { RoundResult::Up { delay_ms: 1 } } else { RoundResult::Down(Reason::Refused) };
                let expect = h.record(ok, rise, fall);
                let got = s.record(r, 1, (rise, fall), now, None);
                prop_assert_eq!(got.map(|f| f.transition), expect);
            }
            if h.up != before {
                last_change = now;
            }
            let snap = s.snapshot();
            prop_assert_eq!((snap.up, snap.rise, snap.fall), (h.up, h.rise, h.fall));
            prop_assert_eq!(snap.last_change, last_change);
            prop_assert_eq!(snap.down_since != 0, !snap.up);
        }
    }
}

#[test]
fn http_and_grpc_status_share_a_word_without_touching_each_other() {
    let s = Slot::default();
    s.init_new(1, false);
    let snap = s.snapshot();
    assert_eq!((snap.http_status(), snap.grpc_status()), (None, None));
    s.record(RoundResult::Up { delay_ms: 1 }, 1, (1, 1), 0, Some(200));
    s.record_grpc_status(14);
    let snap = s.snapshot();
    assert_eq!(
        (snap.http_status(), snap.grpc_status()),
        (Some(200), Some(14))
    );
    s.record(RoundResult::Down(Reason::Status), 1, (1, 1), 0, Some(503));
    assert_eq!(s.snapshot().grpc_status(), Some(14));
    s.record_grpc_status(0);
    assert_eq!(s.snapshot().http_status(), Some(503));
    assert_eq!(s.snapshot().grpc_status(), Some(0));
    s.record_grpc_status(u32::MAX);
    assert_eq!(s.snapshot().grpc_status(), Some(0xfffe));
}

/// `mandatory`: a new peer is checking and out of selection; its first
/// round decides at once (a pass is up whatever `rise`), and the bit goes.
#[test]
fn a_checking_peer_is_decided_by_its_first_round() {
    let s = Slot::default();
    s.init_new(1, Initial::Checking);
    assert!(s.checking() && s.vetoed() && !s.snapshot().up);
    let flip = s.record(RoundResult::Up { delay_ms: 1 }, 1, (3, 2), 5, None);
    assert_eq!(
        flip.map(|f| (f.transition, f.first)),
        Some((Transition::WentUp, true))
    );
    assert!(!s.checking() && !s.vetoed());
    let f = Slot::default();
    f.init_new(2, Initial::Checking);
    let flip = f.record(RoundResult::Down(Reason::Refused), 1, (3, 2), 5, None);
    assert_eq!(
        flip.map(|f| (f.transition, f.first)),
        Some((Transition::WentDown, true))
    );
    assert!(!f.checking() && f.vetoed());
    // Then rise counts as usual.
    assert_eq!(
        f.record(RoundResult::Up { delay_ms: 1 }, 1, (3, 2), 6, None),
        None
    );
    // An operator's word decides too.
    let a = Slot::default();
    a.init_new(3, Initial::Checking);
    a.set_health(true, 7);
    assert!(!a.checking() && !a.vetoed());
    assert_eq!(Initial::from(true), Initial::Down);
    assert_eq!(Initial::of(true, true), Initial::Checking);
}
