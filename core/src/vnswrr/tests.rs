use super::*;
use proptest::prelude::*;

/// nginx's smooth WRR over the configured weights: add, pick the strictly
/// greatest (ties to the earlier peer), subtract the total.
fn nginx_swrr(weights: &[u64], steps: usize) -> Vec<usize> {
    let total: i64 = weights.iter().map(|&w| w as i64).sum();
    let mut current = vec![0i64; weights.len()];
    let mut out = Vec::with_capacity(steps);
    for _ in 0..steps {
        let mut best: Option<usize> = None;
        for (i, &w) in weights.iter().enumerate() {
            current[i] += w as i64;
            if best.map_or(true, |b| current[i] > current[b]) {
                best = Some(i);
            }
        }
        let best = best.unwrap();
        current[best] -= total;
        out.push(best);
    }
    out
}

/// `select` with a `take` that always takes.
fn sel(r: &mut Ring, now: u64, random: u64, check: impl FnMut(usize) -> Verdict) -> Option<usize> {
    r.select(now, || random, check, |_| true)
}

fn eager(weights: &[u64]) -> Ring {
    Ring::new(weights, u32::MAX).unwrap()
}

fn nodes(r: &Ring) -> Vec<usize> {
    (0..r.built()).map(|k| r.node(k).unwrap()).collect()
}

/// `n` selections accepting everything, clock fixed.
fn take(r: &mut Ring, random: u64, n: usize) -> Vec<usize> {
    (0..n)
        .map(|_| sel(r, 0, random, |_| Verdict::Usable).unwrap())
        .collect()
}

fn weights_strategy() -> impl Strategy<Value = Vec<u64>> {
    prop_oneof![
        proptest::collection::vec(1u64..=12, 1..10),
        // a shared factor
        (proptest::collection::vec(1u64..=6, 1..8), 2u64..=5)
            .prop_map(|(w, f)| w.into_iter().map(|x| x * f).collect()),
        // few distinct weights, many peers
        proptest::collection::vec(prop_oneof![Just(1u64), Just(3), Just(7)], 1..40),
    ]
}

#[test]
fn exact_sequences() {
    let cases: &[(&[u64], &[usize])] = &[
        (&[5, 1, 1], &[0, 0, 1, 0, 2, 0, 0]),
        (&[2, 1], &[0, 1, 0]),
        (&[3, 2], &[0, 1, 0, 1, 0]),
        (&[4, 2], &[0, 1, 0]),        // gcd 2: same as {2, 1}
        (&[10, 5, 5], &[0, 1, 2, 0]), // gcd 5: {2, 1, 1}
        (&[1, 2, 3], &[2, 1, 0, 2, 1, 2]),
    ];
    for &(w, want) in cases {
        let r = eager(w);
        assert_eq!(nodes(&r), want, "{w:?}");
        assert_eq!(nginx_swrr(w, want.len()), want, "reference {w:?}");
    }
}

#[test]
fn identity_groups_have_no_stored_ring() {
    for w in [&[1u64, 1, 1][..], &[3, 3, 3, 3], &[7]] {
        let r = Ring::new(w, 0).unwrap();
        assert!(r.is_identity(), "{w:?}");
        assert_eq!(r.len(), w.len());
        assert_eq!(nodes(&r), (0..w.len()).collect::<Vec<_>>());
        assert_eq!(r.nodes.capacity(), 0);
    }
    assert!(!eager(&[2, 1]).is_identity());
}

#[test]
fn single_peer() {
    let mut r = Ring::new(&[5], 0).unwrap();
    assert_eq!((r.len(), r.built()), (1, 1));
    assert_eq!(take(&mut r, 99, 3), [0, 0, 0]);
    assert_eq!(sel(&mut r, 0, 0, |_| Verdict::Skip), None);
    assert_eq!(sel(&mut r, 0, 0, |_| Verdict::SkipCached), None);
    assert_eq!(sel(&mut r, 0, 0, |_| Verdict::Usable), None, "blocked");
    assert_eq!(sel(&mut r, BLOCK_TTL_MS, 0, |_| Verdict::Usable), Some(0));
}

#[test]
fn errors() {
    assert_eq!(Ring::new(&[], 0).unwrap_err(), RingError::Empty);
    assert_eq!(Ring::new(&[1, 0], 0).unwrap_err(), RingError::ZeroWeight);
    let big = [MAX_NODES, 1];
    assert!(matches!(
        Ring::new(&big, 0).unwrap_err(),
        RingError::TooLarge { nodes } if nodes == u128::from(MAX_NODES) + 1
    ));
    // a large gcd keeps it small
    assert_eq!(
        Ring::new(&[MAX_NODES * 4, MAX_NODES * 2], 0).unwrap().len(),
        3
    );
    assert!(Ring::new(&[u64::MAX, u64::MAX - 1], 0).is_err());
}

#[test]
fn max_init_defaults_and_caps() {
    let w = [5, 1, 1]; // N = 7, 3 peers
    assert_eq!(Ring::new(&w, 0).unwrap().built(), 3);
    assert_eq!(Ring::new(&w, 1).unwrap().built(), 1);
    assert_eq!(Ring::new(&w, 3).unwrap().built(), 3);
    assert_eq!(Ring::new(&w, 7).unwrap().built(), 7);
    assert_eq!(Ring::new(&w, 1000).unwrap().built(), 7);
    assert_eq!(Ring::new(&w, 1000).unwrap().max_init(), 7);
    // gcd 3: N = 3, Tengine would cap at 21 and overrun
    let r = Ring::new(&[6, 3, 3, 9, 6][..3], 100).unwrap();
    assert_eq!((r.len(), r.built()), (4, 4));
}

#[test]
fn first_candidate_is_s_plus_one_mod_built() {
    // 3 peers, built 3 of 7: s = random % 3, first candidate (s + 1) % 3
    let ring = eager(&[5, 1, 1]);
    for (random, first) in [(0u64, 1usize), (1, 2), (2, 0), (5, 0), (7, 2)] {
        let mut r = Ring::new(&[5, 1, 1], 0).unwrap();
        let got = take(&mut r, random, 7);
        let want: Vec<usize> = (0..7)
            .map(|i| ring.node((first + i) % 7).unwrap())
            .collect();
        assert_eq!(got, want, "random {random}");
    }
    // max_init 1: built 1, every start is node 0
    let mut r = Ring::new(&[5, 1, 1], 1).unwrap();
    assert_eq!(take(&mut r, 2, 7), nodes(&ring));
    // random is called once
    let mut r = Ring::new(&[5, 1, 1], 0).unwrap();
    let mut calls = 0;
    for _ in 0..10 {
        r.select(
            0,
            || {
                calls += 1;
                4
            },
            |_| Verdict::Usable,
            |_| true,
        );
    }
    assert_eq!(calls, 1);
}

#[test]
fn skip_is_per_selection() {
    let mut r = eager(&[1, 1, 1]);
    let first = sel(&mut r, 0, 0, |_| Verdict::Usable).unwrap();
    assert_eq!(first, 1);
    // peer 2 tried: the next is 0; then 2 is asked again
    assert_eq!(
        sel(&mut r, 0, 0, |p| if p == 2 {
            Verdict::Skip
        } else {
            Verdict::Usable
        }),
        Some(0)
    );
    assert_eq!(sel(&mut r, 0, 0, |_| Verdict::Usable), Some(1));
    assert_eq!(sel(&mut r, 0, 0, |_| Verdict::Usable), Some(2));
}

#[test]
fn blocked_peers_return_after_the_ttl() {
    let mut r = eager(&[2, 1, 1]);
    let mut down = true;
    let verdict = |p: usize, down: bool| {
        if p == 0 && down {
            Verdict::SkipCached
        } else {
            Verdict::Usable
        }
    };
    for _ in 0..8 {
        assert_ne!(sel(&mut r, 10, 0, |p| verdict(p, down)), Some(0));
    }
    down = false;
    // still blocked without being asked
    for _ in 0..8 {
        let mut asked_0 = false;
        let got = sel(&mut r, 10 + BLOCK_TTL_MS - 1, 0, |p| {
            asked_0 |= p == 0;
            verdict(p, down)
        });
        assert_ne!(got, Some(0));
        assert!(!asked_0);
    }
    let got: Vec<usize> = (0..8)
        .map(|_| sel(&mut r, 10 + BLOCK_TTL_MS, 0, |p| verdict(p, down)).unwrap())
        .collect();
    assert_eq!(got.iter().filter(|&&p| p == 0).count(), 4, "{got:?}");
}

#[test]
fn steady_state_with_most_peers_down_is_one_visit() {
    // 1000 peers, weights 1..=10, all but 10 down
    let weights: Vec<u64> = (0..1000).map(|i| 1 + (i * 7 % 10)).collect();
    let up = |p: usize| p % 100 == 37;
    let verdict = |p: usize| {
        if up(p) {
            Verdict::Usable
        } else {
            Verdict::SkipCached
        }
    };
    let mut r = Ring::new(&weights, 0).unwrap();
    let n = r.len();
    let up_nodes: usize = (0..1000)
        .filter(|&p| up(p))
        .map(|p| weights[p] as usize)
        .sum();
    // Warm-up: build the whole ring, then go once around it, which marks
    // every node of a down peer.
    let (mut selections, mut asked) = (0, 0);
    while r.built() < n {
        assert!(up(sel(&mut r, 0, 3, verdict).unwrap()));
        assert!(r.stats().built <= BUILD_BUDGET);
        asked += r.stats().asked;
        selections += 1;
        assert!(selections < 1_000_000);
    }
    for _ in 0..up_nodes {
        assert!(up(sel(&mut r, 0, 3, verdict).unwrap()));
        asked += r.stats().asked;
        selections += 1;
    }
    assert_eq!(asked - selections, 990, "each down peer asked once, ever");
    let mut counts = vec![0usize; 1000];
    for _ in 0..10 * up_nodes {
        let p = sel(&mut r, 0, 3, verdict).unwrap();
        counts[p] += 1;
        assert_eq!(
            r.stats(),
            Stats {
                visits: 1,
                asked: 1,
                ..Stats::default()
            }
        );
    }
    for p in 0..1000 {
        let want = if up(p) { 10 * weights[p] as usize } else { 0 };
        assert_eq!(counts[p], want, "peer {p}");
    }
}

#[test]
fn all_blocked_is_immediate() {
    let mut r = eager(&[3, 2, 1]);
    assert_eq!(sel(&mut r, 0, 0, |_| Verdict::SkipCached), None);
    assert_eq!(r.stats().asked, 3);
    assert_eq!(sel(&mut r, 1, 0, |_| Verdict::Usable), None);
    assert_eq!(r.stats(), Stats::default());
}

#[test]
fn incomplete_ring_never_refuses_a_usable_peer() {
    // max_init 1: the built part is [0]; only peer 2 is usable.
    let mut r = Ring::new(&[5, 1, 1], 1).unwrap();
    assert_eq!(
        sel(&mut r, 0, 0, |p| if p == 2 {
            Verdict::Usable
        } else {
            Verdict::SkipCached
        }),
        Some(2)
    );
    assert_eq!(r.built(), 2, "one batch per selection");
    let mut r = Ring::new(&[5, 1, 1], 1).unwrap();
    assert_eq!(
        sel(&mut r, 0, 0, |p| if p == 2 {
            Verdict::Usable
        } else {
            Verdict::Skip
        }),
        Some(2)
    );
}

#[test]
fn batches_are_bounded() {
    // 5000 peers, weights 1..=100: N = 252500, 100 classes
    let weights: Vec<u64> = (0..5000).map(|i| 1 + i % 100).collect();
    let mut r = Ring::new(&weights, 0).unwrap();
    assert_eq!(r.built(), 5000);
    let mut selections = 0;
    while r.built() < r.len() {
        sel(&mut r, 0, 1, |_| Verdict::Usable).unwrap();
        let s = r.stats();
        assert!(s.built <= BUILD_BUDGET / 100, "{s:?}");
        selections += 1;
    }
    assert!(selections > 1000);
    // the lazily built ring is the eager one
    let e = Ring::new(&weights, u32::MAX).unwrap();
    assert!((0..r.len()).all(|k| r.node(k) == e.node(k)));
}

#[test]
fn refused_take_moves_on() {
    let mut r = eager(&[1, 1, 1]);
    assert_eq!(sel(&mut r, 0, 0, |_| Verdict::Usable), Some(1));
    let mut asked = vec![];
    let got = r.select(
        0,
        || 0,
        |p| {
            asked.push(p);
            Verdict::Usable
        },
        |p| p != 2,
    );
    assert_eq!(got, Some(0));
    assert_eq!(asked, [2, 0]);
    // a refused take blocks nothing
    assert_eq!(sel(&mut r, 0, 0, |_| Verdict::Usable), Some(1));
    assert_eq!(sel(&mut r, 0, 0, |_| Verdict::Usable), Some(2));
}

#[test]
fn down_peers_stay_marked_across_periods() {
    // 200 peers, weights 1..=5, 150 down; the clock runs through many
    // block periods: peers that stay down are asked once per period by
    // the sweep, never again by a walk, and their marks stay.
    let weights: Vec<u64> = (0..200).map(|i| 1 + i % 5).collect();
    let up = |p: usize| p % 4 == 1;
    let verdict = |p: usize| {
        if up(p) {
            Verdict::Usable
        } else {
            Verdict::SkipCached
        }
    };
    let mut r = Ring::new(&weights, u32::MAX).unwrap();
    let up_nodes: usize = (0..200)
        .filter(|&p| up(p))
        .map(|p| weights[p] as usize)
        .sum();
    for _ in 0..up_nodes {
        assert!(up(sel(&mut r, 0, 9, verdict).unwrap()));
    }
    assert_eq!(r.blocked(), 150);
    let mut swept = 0;
    let mut counts = vec![0usize; 200];
    let rounds = 40 * up_nodes;
    for i in 0..rounds {
        let now = (i as u64) * 25; // 20 selections per period
        let p = sel(&mut r, now, 9, verdict).unwrap();
        counts[p] += 1;
        let s = r.stats();
        assert_eq!(
            (s.visits, s.asked, s.marked, s.built),
            (1, 1, 0, 0),
            "{s:?}"
        );
        assert!(s.swept <= SWEEP);
        swept += s.swept;
    }
    assert_eq!(r.blocked(), 150);
    // the sweep keeps up (SWEEP per selection, 20 selections per period)
    assert!(
        swept >= 150 * (rounds * 25 / BLOCK_TTL_MS as usize - 2) / 2,
        "{swept}"
    );
    for p in 0..200 {
        assert_eq!(
            counts[p],
            if up(p) { 40 * weights[p] as usize } else { 0 },
            "peer {p}"
        );
    }
}

#[test]
fn recovered_peer_is_unmarked_and_used() {
    let weights = [3u64, 2, 1];
    let mut r = eager(&weights);
    let mut down = [false, true, false];
    for _ in 0..8 {
        let got = sel(&mut r, 0, 0, |p| {
            if down[p] {
                Verdict::SkipCached
            } else {
                Verdict::Usable
            }
        });
        assert_ne!(got, Some(1));
    }
    assert_eq!(r.blocked(), 1);
    down[1] = false;
    let got = sel(&mut r, BLOCK_TTL_MS, 0, |p| {
        if down[p] {
            Verdict::SkipCached
        } else {
            Verdict::Usable
        }
    });
    assert_eq!(r.stats().swept, 1);
    assert_eq!(r.stats().marked, 2, "peer 1's two nodes unmarked");
    assert!(got.is_some());
    let got: Vec<usize> = (0..6)
        .map(|_| sel(&mut r, BLOCK_TTL_MS, 0, |_| Verdict::Usable).unwrap())
        .collect();
    assert_eq!(got.iter().filter(|&&p| p == 1).count(), 2, "{got:?}");
}

#[test]
fn blocking_marks_nodes_built_later() {
    // max_init 1: peer 0 is blocked while most of its nodes are unbuilt;
    // nodes built afterwards are marked too.
    let weights = [5u64, 1, 1];
    let mut r = Ring::new(&weights, 1).unwrap();
    let verdict = |p: usize| {
        if p == 0 {
            Verdict::SkipCached
        } else {
            Verdict::Usable
        }
    };
    let mut got = vec![];
    for _ in 0..20 {
        got.push(sel(&mut r, 0, 0, verdict).unwrap());
    }
    assert_eq!(r.built(), 7);
    assert!(got.iter().all(|&p| p != 0));
    // in steady state one visit per selection: node 0's marks are complete
    for _ in 0..6 {
        sel(&mut r, 0, 0, verdict).unwrap();
        assert_eq!(r.stats().visits, 1, "{:?}", r.stats());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn ring_is_nginx_swrr_and_periodic(weights in weights_strategy()) {
        let r = eager(&weights);
        let g = gcd(&weights);
        let n: u64 = weights.iter().map(|w| w / g).sum();
        prop_assert_eq!(r.len() as u64, n);
        let reference = nginx_swrr(&weights, 2 * r.len());
        if r.is_identity() {
            prop_assert_eq!(&reference[..r.len()], &(0..r.len()).collect::<Vec<_>>()[..]);
        } else {
            prop_assert_eq!(&reference[..r.len()], &nodes(&r)[..]);
        }
        prop_assert_eq!(&reference[..r.len()], &reference[r.len()..]);
        for (p, &w) in weights.iter().enumerate() {
            let count = reference[..r.len()].iter().filter(|&&x| x == p).count() as u64;
            prop_assert_eq!(count, w / g, "peer {}", p);
        }
    }

    #[test]
    fn lazy_build_gives_the_eager_ring(weights in weights_strategy(),
                                       max_init in prop_oneof![Just(0u32), Just(1), Just(2), Just(3), 0u32..50, Just(u32::MAX)],
                                       random in any::<u64>()) {
        let e = eager(&weights);
        let mut r = Ring::new(&weights, max_init).unwrap();
        let built = r.built();
        prop_assert!(built >= 1 && built <= r.len());
        let first = ((random % weights.len() as u64) as usize + 1) % built;
        let n = r.len();
        let got = take(&mut r, random, 3 * n);
        let want: Vec<usize> = (0..3 * n).map(|i| e.node((first + i) % e.len()).unwrap()).collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(r.built(), r.len());
    }

    #[test]
    fn fixed_rejections_keep_exact_shares(weights in weights_strategy(),
                                          verdicts in proptest::collection::vec(0u8..4, 40),
                                          max_init in prop_oneof![Just(0u32), Just(1), Just(u32::MAX)],
                                          random in any::<u64>()) {
        // 0,1: accept; 2: skip; 3: skip cached
        let verdict = |p: usize| match verdicts[p] {
            0 | 1 => Verdict::Usable,
            2 => Verdict::Skip,
            _ => Verdict::SkipCached,
        };
        let g = gcd(&weights);
        let usable: u64 = (0..weights.len()).filter(|&p| verdicts[p] < 2).map(|p| weights[p] / g).sum();
        let mut r = Ring::new(&weights, max_init).unwrap();
        if usable == 0 {
            prop_assert_eq!(sel(&mut r, 0, random, verdict), None);
            prop_assert_eq!(sel(&mut r, 0, random, verdict), None);
            return Ok(());
        }
        // first complete the ring (fallback picks may happen before)
        let mut guard = 0;
        while r.built() < r.len() {
            let p = sel(&mut r, 0, random, verdict).unwrap();
            prop_assert!(verdicts[p] < 2);
            guard += 1;
            prop_assert!(guard < 100_000);
        }
        // now whole cycles of the usable nodes give exact shares, in ring order
        let mut counts = vec![0u64; weights.len()];
        let mut seq = Vec::new();
        for _ in 0..3 * usable {
            let p = sel(&mut r, 0, random, verdict).unwrap();
            counts[p] += 1;
            seq.push(p);
        }
        for p in 0..weights.len() {
            let want = if verdicts[p] < 2 { 3 * weights[p] / g } else { 0 };
            prop_assert_eq!(counts[p], want, "peer {}", p);
        }
        let filtered: Vec<usize> = (0..r.len()).map(|k| r.node(k).unwrap()).filter(|&p| verdicts[p] < 2).collect();
        let cycle = &seq[..usable as usize];
        let rotations = (0..filtered.len()).any(|s| (0..filtered.len()).all(|i| filtered[(s + i) % filtered.len()] == cycle[i]));
        prop_assert!(rotations, "not the ring order: {:?} vs {:?}", cycle, filtered);
    }

    #[test]
    fn never_returns_a_rejected_peer(weights in weights_strategy(),
                                     steps in proptest::collection::vec(proptest::collection::vec(0u8..3, 40), 1..40),
                                     max_init in prop_oneof![Just(0u32), Just(1), Just(u32::MAX)],
                                     random in any::<u64>()) {
        // Verdicts change every selection; the clock jumps past the TTL each
        // time, so cached blocks never hide a peer that became usable.
        let mut r = Ring::new(&weights, max_init).unwrap();
        for (i, v) in steps.iter().enumerate() {
            let verdict = |p: usize| match v[p] {
                0 => Verdict::Usable,
                1 => Verdict::Skip,
                _ => Verdict::SkipCached,
            };
            let now = i as u64 * BLOCK_TTL_MS;
            let mut asked = vec![0; weights.len()];
            let mut taken = 0;
            let got = r.select(now, || random, |p| {
                asked[p] += 1;
                verdict(p)
            }, |p| {
                taken += 1;
                v[p] == 0
            });
            // at most once by the sweep and once by the walk
            prop_assert!(asked.iter().all(|&n| n <= 2), "{:?}", asked);
            prop_assert!(taken <= 1);
            let any_usable = (0..weights.len()).any(|p| v[p] == 0);
            match got {
                Some(p) => prop_assert_eq!(v[p], 0),
                None => prop_assert!(!any_usable),
            }
        }
    }
}

/// `cargo test --release -p healthcheck-core -- --ignored --nocapture
/// worst_selection_time`: the slowest selection while a 5000-peer ring
/// (weights 1..=100, N = 252500) is built lazily, and with 90% of the
/// peers down.
#[test]
#[ignore]
fn worst_selection_time() {
    use std::time::{Duration, Instant};
    let weights: Vec<u64> = (0..5000).map(|i| 1 + (i * 37 % 100)).collect();
    for down_every in [0usize, 10] {
        let t0 = Instant::now();
        let mut r = Ring::new(&weights, 0).unwrap();
        let init = t0.elapsed();
        let verdict = |p: usize| {
            if down_every != 0 && p % down_every != 0 {
                Verdict::SkipCached
            } else {
                Verdict::Usable
            }
        };
        let mut worst = Duration::ZERO;
        let mut total = Duration::ZERO;
        let mut slow = 0;
        let mut most = Stats::default();
        let (mut building, mut building_time) = (0u32, Duration::ZERO);
        let mut now = 0;
        let n = 2 * r.len();
        for i in 0..n {
            if i % 1000 == 0 {
                now += 100; // a second every 10000 selections
            }
            let t = Instant::now();
            std::hint::black_box(sel(&mut r, now, 7, verdict));
            let d = t.elapsed();
            worst = worst.max(d);
            total += d;
            slow += usize::from(d > Duration::from_micros(100));
            let s = r.stats();
            if s.built > 0 {
                building += 1;
                building_time += d;
            }
            most.marked = most.marked.max(s.marked);
            most.swept = most.swept.max(s.swept);
            most.visits = most.visits.max(s.visits);
            most.asked = most.asked.max(s.asked);
            most.built = most.built.max(s.built);
        }
        println!(
            "down 1 in {down_every}: init {init:?}, {n} selections, mean {:?}, worst {worst:?}, \
             {slow} over 100us (a loaded machine preempts); mean of the {building} \
             selections that built a batch {:?}; most work in one selection: {most:?}",
            total / n as u32,
            building_time / building.max(1)
        );
    }
}

proptest! {
    /// `upcoming` names the peer the next selection takes when every peer
    /// is usable (lazy batches included), and nothing it cannot know.
    #[test]
    fn upcoming_is_the_next_pick_when_all_usable(weights in weights_strategy(),
                                                 max_init in 0u32..6,
                                                 random in any::<u64>()) {
        let mut r = Ring::new(&weights, max_init).unwrap();
        prop_assert_eq!(r.upcoming(), None);
        for _ in 0..2 * r.len() + 3 {
            let hint = r.upcoming();
            let got = sel(&mut r, 0, random, |_| Verdict::Usable).unwrap();
            if let Some(h) = hint {
                prop_assert_eq!(h, got);
            }
            prop_assert!(r.upcoming().is_some() || r.built() < r.len());
        }
    }
}
