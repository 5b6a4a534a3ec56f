//! The bookkeeping of `check_max_inflight` (docs/directives.md,
//! check_max_inflight): at most `cap` rounds connecting or handshaking at
//! once ("places"), at most `cap` rounds starting in one millisecond of
//! the event loop's clock (the "budget"), and the rounds past either bound
//! waiting in one queue, oldest first, none dropped. `cap` 0: no bound.
//! When rounds waited while the clock moved on by `d` ms (a worker whose
//! turns are long, under load), `cap x (d - 2)` of them may start at once
//! (at most [`MAX_CATCH_UP_MS`] ms' worth): the checks keep their rate.
//! The first [`CATCH_UP_SLACK_MS`] are not caught up on: a turn that ran a
//! little long (a few rounds' connects, the hypervisor) must not make the
//! next one longer with twice the starts, and so on while rounds wait.
//! The worker's gate (nginx events) drives this; it knows no time but the
//! millisecond it is given.

use std::collections::VecDeque;

/// What a queued round waits for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Wait {
    /// To start (this millisecond's budget of starts is spent).
    Start,
    /// To open its connection (every place is taken).
    Open,
}

/// When the oldest waiting round may go on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Wake {
    /// Nothing waits.
    Idle,
    /// Now.
    Ready,
    /// At the next millisecond (a spent budget).
    NextMs,
    /// When a place is given back.
    OnLeave,
}

/// The most milliseconds of starts rounds that waited may catch up on.
pub const MAX_CATCH_UP_MS: u64 = 1000;

/// The milliseconds of a wait not caught up on.
pub const CATCH_UP_SLACK_MS: u64 = 2;

/// The places, the budget and the queue of one gate.
#[derive(Debug)]
pub struct Limiter<T> {
    cap: usize,
    busy: usize,
    /// Starts left in millisecond `.0`.
    budget: (u64, usize),
    queue: VecDeque<(T, Wait)>,
}

impl<T: Copy + PartialEq> Limiter<T> {
    pub fn new(cap: u32) -> Limiter<T> {
        Limiter {
            cap: cap as usize,
            busy: 0,
            budget: (0, cap as usize),
            queue: VecDeque::new(),
        }
    }

    /// A new millisecond: `cap` starts, or `cap` for each millisecond
    /// rounds waited through past the slack.
    fn refill(&mut self, now: u64) {
        let (ms, _) = self.budget;
        if ms == now {
            return;
        }
        let waited = match self.queue.is_empty() {
            true => 1,
            false => now
                .saturating_sub(ms)
                .saturating_sub(CATCH_UP_SLACK_MS)
                .clamp(1, MAX_CATCH_UP_MS),
        };
        self.budget = (now, self.cap.saturating_mul(waited as usize));
    }

    fn budget_left(&mut self, now: u64) -> bool {
        self.refill(now);
        self.cap == 0 || self.budget.1 > 0
    }

    fn spend(&mut self, now: u64) {
        self.refill(now);
        self.budget.1 = self.budget.1.saturating_sub(1);
    }

    fn place_left(&self) -> bool {
        self.cap == 0 || self.busy < self.cap
    }

    /// A round may start at `now` (and is counted); false: the budget is
    /// spent or older rounds wait (it must then [`wait`](Self::wait)).
    pub fn start(&mut self, now: u64) -> bool {
        if !self.queue.is_empty() || !self.budget_left(now) {
            return false;
        }
        self.spend(now);
        true
    }

    /// A round takes a place to connect; false: none is left.
    pub fn enter(&mut self) -> bool {
        if !self.place_left() {
            return false;
        }
        self.busy += 1;
        true
    }

    /// Queue `t`, waiting for `w`.
    pub fn wait(&mut self, t: T, w: Wait) {
        self.queue.push_back((t, w));
    }

    /// A place is given back.
    pub fn leave(&mut self) {
        self.busy = self.busy.saturating_sub(1);
    }

    /// `t` stops waiting.
    pub fn forget(&mut self, t: T) {
        self.queue.retain(|&(q, _)| q != t);
    }

    /// The oldest waiting round, if it may go on at `now`: counted or
    /// given its place, and out of the queue.
    pub fn next(&mut self, now: u64) -> Option<(T, Wait)> {
        self.refill(now);
        let &(t, w) = self.queue.front()?;
        match w {
            Wait::Start if self.budget_left(now) => self.spend(now),
            Wait::Open if self.place_left() => self.busy += 1,
            _ => return None,
        }
        self.queue.pop_front();
        Some((t, w))
    }

    /// When the oldest waiting round may go on, seen at `now`.
    pub fn wake(&mut self, now: u64) -> Wake {
        match self.queue.front().map(|&(_, w)| w) {
            None => Wake::Idle,
            Some(Wait::Start) if self.budget_left(now) => Wake::Ready,
            Some(Wait::Start) => Wake::NextMs,
            Some(Wait::Open) if self.place_left() => Wake::Ready,
            Some(Wait::Open) => Wake::OnLeave,
        }
    }

    /// Rounds holding a place.
    pub fn busy(&self) -> usize {
        self.busy
    }

    /// Rounds waiting.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }
}

/// How many events of the checks' connections a worker handles in one
/// millisecond of the event loop's clock, the rest waiting in order for
/// the next (docs/design.md, Bounded turns): a server that dies closes
/// hundreds of connections at once, and their rounds' ends, handled in
/// one turn, would make it as long as the starts the budget of
/// [`Limiter`] bounds. Waited-for milliseconds are caught up on as there
/// (past [`CATCH_UP_SLACK_MS`]).
#[derive(Debug)]
pub struct EventBudget {
    per_ms: u64,
    ms: u64,
    left: u64,
}

impl EventBudget {
    pub const fn new(per_ms: u64) -> EventBudget {
        EventBudget {
            per_ms,
            ms: 0,
            left: per_ms,
        }
    }

    /// Take one event at `now`; `behind`: events wait for this budget
    /// (the milliseconds since the last refill are caught up on). False:
    /// this millisecond's events are spent.
    pub fn take(&mut self, now: u64, behind: bool) -> bool {
        if self.ms != now {
            let waited = match behind {
                false => 1,
                true => now
                    .saturating_sub(self.ms)
                    .saturating_sub(CATCH_UP_SLACK_MS)
                    .clamp(1, MAX_CATCH_UP_MS),
            };
            self.ms = now;
            self.left = self.per_ms.saturating_mul(waited);
        }
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn budget_per_millisecond() {
        let mut l = Limiter::<u32>::new(2);
        assert!(l.start(5) && l.start(5));
        assert!(!l.start(5));
        l.wait(1, Wait::Start);
        assert_eq!(l.wake(5), Wake::NextMs);
        assert_eq!(l.next(5), None);
        // A new millisecond: the waiting round goes first; a newcomer
        // waits behind it.
        assert_eq!(l.wake(6), Wake::Ready);
        l.wait(2, Wait::Start);
        assert!(!l.start(6));
        assert_eq!(l.next(6), Some((1, Wait::Start)));
        assert_eq!(l.next(6), Some((2, Wait::Start)));
        assert_eq!(l.wake(6), Wake::Idle);
        assert!(!l.start(6), "budget of ms 6 spent by the two");
    }

    /// A worker whose turns are long (500 ms under load): the rounds that
    /// waited through them start together, at `cap` a millisecond waited.
    #[test]
    fn long_turns_catch_up() {
        let mut l = Limiter::<u32>::new(2);
        assert!(l.start(10) && l.start(10));
        for i in 0..100 {
            l.wait(i, Wait::Start);
        }
        let mut went = 0;
        while l.next(510).is_some() {
            went += 1;
        }
        assert_eq!(went, 100, "2 a ms over 498 of the 500 ms: all 100");
        // A fresh burst after an idle time gets `cap`, not the idle time.
        assert!(l.start(2000) && l.start(2000));
        assert!(!l.start(2000));
    }

    /// A turn a little long (3 ms between two refills) gives the next turn
    /// `cap` starts, not three times that: the longer turn it would make
    /// would give the next more again.
    #[test]
    fn a_little_late_is_not_caught_up_on() {
        let mut l = Limiter::<u32>::new(4);
        assert!((0..4).all(|_| l.start(10)));
        for i in 0..100 {
            l.wait(i, Wait::Start);
        }
        let went = |l: &mut Limiter<u32>, now| {
            let mut n = 0;
            while l.next(now).is_some() {
                n += 1;
            }
            n
        };
        assert_eq!(went(&mut l, 13), 4, "3 ms: within the slack");
        assert_eq!(went(&mut l, 14), 4, "the next millisecond");
        assert_eq!(went(&mut l, 24), 4 * 8, "10 ms: all but the slack");
    }

    #[test]
    fn events_per_millisecond() {
        let mut b = EventBudget::new(3);
        assert!((0..3).all(|_| b.take(7, false)));
        assert!(!b.take(7, false) && !b.take(7, true));
        assert!((0..3).all(|_| b.take(8, false)));
        assert!(!b.take(8, false));
        // Events that waited 10 ms: all but the slack caught up on.
        assert_eq!((0..100).filter(|_| b.take(18, true)).count(), 3 * 8);
        // A quiet start after a long idle time gets one millisecond's.
        assert_eq!((0..100).filter(|_| b.take(5000, false)).count(), 3);
    }

    #[test]
    fn places() {
        let mut l = Limiter::<u32>::new(1);
        assert!(l.enter());
        assert!(!l.enter());
        l.wait(7, Wait::Open);
        assert_eq!(l.wake(0), Wake::OnLeave);
        assert_eq!(l.next(0), None);
        l.leave();
        assert_eq!(l.wake(0), Wake::Ready);
        assert_eq!(l.next(0), Some((7, Wait::Open)));
        assert_eq!(l.busy(), 1);
        l.wait(8, Wait::Open);
        l.forget(8);
        assert_eq!(l.waiting(), 0);
    }

    #[test]
    fn zero_is_no_limit() {
        let mut l = Limiter::<u32>::new(0);
        for _ in 0..10_000 {
            assert!(l.start(1) && l.enter());
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// A round falls due (and connects if it starts).
        Due,
        /// A connecting round connects (gives its place back).
        Connected,
        /// The clock moves on.
        Tick,
        /// A waiting round's probe stops.
        Stop(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => Just(Op::Due),
            3 => Just(Op::Connected),
            2 => Just(Op::Tick),
            1 => (0usize..64).prop_map(Op::Stop),
        ]
    }

    proptest! {
        /// Whatever happens, at most `cap` hold a place and at most `cap`
        /// start in a millisecond; rounds leave the queue in order; when
        /// the clock moves on and places come back, every waiting round
        /// goes on (none is dropped but those whose probe stopped).
        #[test]
        fn bounds_order_and_no_loss(cap in 1u32..6, ops in proptest::collection::vec(op(), 1..300)) {
            let mut l = Limiter::<usize>::new(cap);
            let (mut now, mut next_id) = (1u64, 0usize);
            let mut connecting = 0usize;
            let mut started_at: Vec<u64> = Vec::new();
            let mut waiting: Vec<usize> = Vec::new();
            let mut gone: Vec<usize> = Vec::new();
            let run = |l: &mut Limiter<usize>, now: u64, connecting: &mut usize,
                           started_at: &mut Vec<u64>, gone: &mut Vec<usize>| {
                while let Some((t, w)) = l.next(now) {
                    gone.push(t);
                    if w == Wait::Start {
                        started_at.push(now);
                        if l.enter() { *connecting += 1 } else { l.wait(t, Wait::Open) }
                    } else {
                        *connecting += 1;
                    }
                }
            };
            for o in ops {
                match o {
                    Op::Due => {
                        let id = next_id;
                        next_id += 1;
                        if l.start(now) {
                            started_at.push(now);
                            if l.enter() { connecting += 1 } else { l.wait(id, Wait::Open); waiting.push(id) }
                        } else {
                            l.wait(id, Wait::Start);
                            waiting.push(id);
                        }
                    }
                    Op::Connected if connecting > 0 => { connecting -= 1; l.leave(); }
                    Op::Connected => {}
                    Op::Tick => now += 1,
                    Op::Stop(i) => {
                        if let Some(&id) = waiting.get(i) {
                            l.forget(id);
                            waiting.retain(|&w| w != id);
                        }
                    }
                }
                run(&mut l, now, &mut connecting, &mut started_at, &mut gone);
                prop_assert!(l.busy() <= cap as usize);
                prop_assert_eq!(l.busy(), connecting);
                for ms in started_at.iter() {
                    prop_assert!(started_at.iter().filter(|&&m| m == *ms).count() <= cap as usize);
                }
            }
            // Drain: places come back and the clock moves on.
            for _ in 0..10_000 {
                if l.waiting() == 0 { break; }
                while connecting > 0 { connecting -= 1; l.leave(); }
                now += 1;
                run(&mut l, now, &mut connecting, &mut started_at, &mut gone);
            }
            prop_assert_eq!(l.waiting(), 0);
            // Order: the rounds that waited left in the order they came.
            let waited: Vec<usize> = gone.iter().copied().filter(|t| waiting.contains(t)).collect();
            let mut first_seen = Vec::new();
            for t in waited { if !first_seen.contains(&t) { first_seen.push(t) } }
            let mut sorted = first_seen.clone();
            sorted.sort();
            prop_assert_eq!(first_seen, sorted);
        }
    }
}
