//! The VNSWRR ring (virtual-node smooth weighted round robin, docs/directives.md,
//! vnswrr): the selection logic of one peer group (primary or backup) in
//! one worker, with no nginx types. The caller says whether a peer is
//! usable through closures.
//!
//! # The ring
//!
//! A group with weights `w_i` (not all equal) has `N = sum(w_i) / g` nodes,
//! `g` the gcd of the weights. Node `k` is the `k`-th pick of nginx's smooth
//! WRR over the configured weights from zero current weights, ties to the
//! earlier peer; the sequence repeats after `N` picks and each peer holds
//! `w_i / g` nodes ([`build`] explains why the reduced weights give the
//! same sequence, and how a pick costs O(distinct weights), not O(peers)).
//! A group whose weights are all equal (all 1 in particular) has no stored
//! ring: node `k` is peer `k`.
//!
//! Memory per node: the node's peer (3 bytes), the node's place in its
//! peer's position list (3 bytes) and 1 bit of skip mark, about 6.1 bytes
//! (indices are below [`MAX_NODES`] = 2^24, so 24 bits hold them).
//!
//! # Building
//!
//! [`Ring::new`] builds the first `max_init` nodes (0 means the group's
//! peer count; capped at `N`). When selection reaches the first unbuilt
//! node, one more batch is built, continuing the same sequence: at most
//! `max_init` nodes and at most [`BUILD_BUDGET`] class comparisons, so a
//! selection never pays for a large ring. A selection builds at most one
//! batch, even when it walks twice (see [`Ring::select`]). If it has gone once around the built nodes of an incomplete ring
//! without a usable peer, it asks the peers it has not asked yet in
//! configuration order, O(peers), so that a usable peer is never refused
//! because its nodes are not built yet (only while the ring is incomplete
//! and its built part holds no usable peer).
//!
//! # Selection
//!
//! The first selection starts at a random `s` (mod peers): the first
//! candidate is node `(s + 1) mod built`. Each selection visits nodes from
//! the node after the previous choice, in ring order, at most once around,
//! and returns the peer of the first node whose peer `check` finds usable
//! and `take` takes.
//!
//! # Skipping unusable peers
//!
//! Skipping costs O(1) per rejected *peer*, not per rejected node:
//!
//! - A peer rejected for a reason that outlives the request (`down`,
//!   health-check down, `max_fails` reached: [`Verdict::SkipCached`]) is
//!   *blocked*: every node of it is marked at once (each peer keeps the
//!   list of its nodes) in a two-level bitset, and walks jump over marked
//!   nodes 64 at a time, and over runs of 64 full words one bit at a time.
//!   Blocking or unblocking a peer costs O(its nodes), once per state
//!   change.
//! - Blocked peers are asked again in the order they were blocked, each
//!   [`BLOCK_TTL_MS`] after its block, at most [`SWEEP`] per selection,
//!   outside the walk: still unusable, the peer stays blocked with its
//!   marks; usable, its marks are cleared. A peer that stays down costs one
//!   question per period, and no walk ever re-crosses the nodes of peers
//!   that stay down. A recovered peer gets traffic again once the sweep
//!   reaches it: [`BLOCK_TTL_MS`] after its block when requests come often
//!   enough for [`SWEEP`] questions per selection to keep up, later
//!   otherwise. Before a selection answers "no usable peer" it asks every
//!   blocked peer that is due, so no request is refused because of a
//!   block older than [`BLOCK_TTL_MS`].
//! - A peer rejected for this request only ([`Verdict::Skip`]: already
//!   tried, at `max_conns`) is asked once per selection; its further nodes
//!   in the same walk cost one array read each.
//! - When every peer of the group is known rejected the walk stops: a
//!   selection that finds nothing asks each peer at most once, and costs
//!   O(1) once all peers are blocked.
//!
//! In the steady state a selection visits one node and asks one peer,
//! whatever the number of unusable peers.

mod build;
mod marks;
mod packed;

use std::collections::VecDeque;

use build::Builder;
use marks::Marks;
use packed::U24;

/// Largest ring (sum of weights / gcd): indices fit in 24 bits.
pub const MAX_NODES: u64 = 1 << 24;

/// Work bound of one batch built during selection, in class comparisons
/// (one node costs one comparison per distinct weight).
pub const BUILD_BUDGET: usize = 8192;

/// How long a blocked peer stays blocked before it is asked again.
pub const BLOCK_TTL_MS: u64 = 500;

/// Blocked peers asked again per selection, at most.
pub const SWEEP: usize = 4;

/// What `check` says about a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Usable now: the selection then calls `take`.
    Usable,
    /// Not for this request (already tried, at max_conns): ask again next
    /// selection.
    Skip,
    /// Unusable beyond this request (down, check-down, failed): block it
    /// and ask again after [`BLOCK_TTL_MS`].
    SkipCached,
}

/// Why a group cannot have a ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RingError {
    /// No peers.
    Empty,
    /// A weight of 0 (nginx never configures one).
    ZeroWeight,
    /// More than [`MAX_NODES`] nodes.
    TooLarge { nodes: u128 },
}

impl core::fmt::Display for RingError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RingError::Empty => write!(f, "no servers"),
            RingError::ZeroWeight => write!(f, "a server has weight 0"),
            RingError::TooLarge { nodes } => write!(
                f,
                "the ring would have {nodes} nodes (total weight / gcd of the weights), \
                 at most {MAX_NODES} are supported"
            ),
        }
    }
}

/// Work counters of the last [`Ring::select`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Nodes looked at one by one (marked nodes skipped in bulk are not
    /// counted).
    pub visits: usize,
    /// `check` calls in the walk.
    pub asked: usize,
    /// `check` calls for blocked peers due again.
    pub swept: usize,
    /// Nodes built.
    pub built: usize,
    /// Marks set or cleared (blocking and unblocking peers).
    pub marked: usize,
}

/// Greatest common divisor (0 for an empty input).
pub fn gcd(weights: &[u64]) -> u64 {
    fn g(mut a: u64, mut b: u64) -> u64 {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    }
    weights.iter().fold(0, |acc, &w| g(acc, w))
}

/// One group's ring and cursor (per worker).
#[derive(Clone, Debug)]
pub struct Ring {
    peers: usize,
    /// N.
    len: usize,
    /// Weights all equal: node k is peer k, nothing stored.
    identity: bool,
    /// Peer of each built node.
    nodes: U24,
    /// Built nodes of peer p: `pos[first[p] .. first[p] + filled[p]]`.
    pos: U24,
    first: Vec<u32>,
    filled: Vec<u32>,
    /// Continues the sequence; `None` once complete or for identity.
    builder: Option<Builder>,
    max_init: usize,
    /// Next candidate node; `None` before the first selection.
    next: Option<usize>,

    /// Marked: the node's peer is blocked.
    marks: Marks,
    blocked: Vec<bool>,
    nblocked: usize,
    /// (when to ask again, peer), in blocking order; one entry per blocked
    /// peer.
    due: VecDeque<(u64, u32)>,
    /// Per peer: the selection that rejected it with [`Verdict::Skip`].
    skipped: Vec<u32>,
    call: u32,
    /// A batch was built during the current selection (at most one per
    /// selection, whichever of its walks reaches the unbuilt part first).
    grown: bool,
    stats: Stats,
}

impl Ring {
    /// The ring of a group with these weights (configuration order,
    /// `down` peers included), with its first `max_init` nodes built.
    pub fn new(weights: &[u64], max_init: u32) -> Result<Ring, RingError> {
        if weights.is_empty() {
            return Err(RingError::Empty);
        }
        if weights.contains(&0) {
            return Err(RingError::ZeroWeight);
        }
        let g = gcd(weights);
        let reduced: Vec<u64> = weights.iter().map(|&w| w / g).collect();
        let identity = reduced.iter().all(|&w| w == 1);
        let nodes: u128 = reduced.iter().map(|&w| u128::from(w)).sum();
        if nodes > u128::from(MAX_NODES) {
            return Err(RingError::TooLarge { nodes });
        }
        let len = nodes as usize;
        let peers = weights.len();
        let max_init = match max_init as usize {
            0 => peers,
            n => n,
        }
        .min(len);
        let mut ring = Ring {
            peers,
            len,
            identity,
            nodes: U24::default(),
            pos: U24::default(),
            first: Vec::new(),
            filled: Vec::new(),
            builder: None,
            max_init,
            next: None,
            marks: Marks::new(len),
            blocked: vec![false; peers],
            nblocked: 0,
            due: VecDeque::with_capacity(peers),
            skipped: vec![0; peers],
            call: 0,
            grown: false,
            stats: Stats::default(),
        };
        if !identity {
            ring.nodes = U24::with_capacity(len);
            ring.pos = U24::zeros(len);
            let mut at = 0u32;
            ring.first = reduced
                .iter()
                .map(|&w| {
                    let start = at;
                    at += w as u32;
                    start
                })
                .collect();
            ring.filled = vec![0; peers];
            ring.builder = Some(Builder::new(&reduced));
            ring.build(max_init);
        }
        Ok(ring)
    }

    /// Peers in the group.
    pub fn peers(&self) -> usize {
        self.peers
    }

    /// N: nodes in a whole cycle.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a ring has at least one node.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Nodes built so far.
    pub fn built(&self) -> usize {
        if self.identity {
            self.len
        } else {
            self.nodes.len()
        }
    }

    /// Whether the group's weights are all equal (no stored ring).
    pub fn is_identity(&self) -> bool {
        self.identity
    }

    /// `max_init` after defaulting and capping.
    pub fn max_init(&self) -> usize {
        self.max_init
    }

    /// Peers currently blocked.
    pub fn blocked(&self) -> usize {
        self.nblocked
    }

    /// Peer of built node `k`.
    pub fn node(&self, k: usize) -> Option<usize> {
        if self.identity {
            (k < self.len).then_some(k)
        } else {
            self.nodes.get(k).map(|p| p as usize)
        }
    }

    /// The peer of the node the next selection looks at first (skip marks
    /// aside), when that node is built: a caller may prefetch that peer's
    /// data so that the next selection does not wait on a cache miss.
    /// `None` before the first selection.
    pub fn upcoming(&self) -> Option<usize> {
        let k = match self.next? {
            k if k >= self.len => 0,
            k => k,
        };
        self.node(k)
    }

    /// Work done by the last [`Ring::select`].
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Build up to `n` more nodes; returns how many.
    fn build(&mut self, n: usize) -> usize {
        let Some(b) = self.builder.as_mut() else {
            return 0;
        };
        let n = n.min(self.len - self.nodes.len());
        for _ in 0..n {
            let p = b.step() as usize;
            let k = self.nodes.len();
            self.nodes.push(p as u32);
            let (Some(&first), Some(filled)) = (self.first.get(p), self.filled.get_mut(p)) else {
                continue;
            };
            self.pos.set((first + *filled) as usize, k as u32);
            *filled += 1;
            if self.blocked.get(p) == Some(&true) {
                self.marks.set(k);
            }
        }
        if self.nodes.len() == self.len {
            self.builder = None;
        }
        n
    }

    /// One batch during selection: at most `max_init` nodes and
    /// [`BUILD_BUDGET`] comparisons, at least one node.
    fn build_batch(&mut self) {
        let Some(b) = self.builder.as_ref() else {
            return;
        };
        let by_budget = (BUILD_BUDGET / b.classes().max(1)).max(1);
        let n = self.build(self.max_init.min(by_budget).max(1));
        self.stats.built += n;
    }

    /// Set or clear the marks of every built node of `peer`.
    fn mark_peer(&mut self, peer: usize, on: bool) {
        let apply = |marks: &mut Marks, k: usize| {
            if on {
                marks.set(k);
            } else {
                marks.unset(k);
            }
        };
        if self.identity {
            apply(&mut self.marks, peer);
            self.stats.marked += 1;
            return;
        }
        let (Some(&first), Some(&filled)) = (self.first.get(peer), self.filled.get(peer)) else {
            return;
        };
        for i in first..first + filled {
            if let Some(k) = self.pos.get(i as usize) {
                apply(&mut self.marks, k as usize);
            }
        }
        self.stats.marked += filled as usize;
    }

    fn block(&mut self, peer: usize, now_ms: u64) {
        if let Some(b) = self.blocked.get_mut(peer) {
            if !*b {
                *b = true;
                self.nblocked += 1;
                self.due
                    .push_back((now_ms.saturating_add(BLOCK_TTL_MS), peer as u32));
                self.mark_peer(peer, true);
            }
        }
    }

    /// Whether a blocked peer is due to be asked again (the common case,
    /// nothing blocked, costs no call).
    #[inline]
    fn sweep_due(&self, now_ms: u64) -> bool {
        self.due.front().is_some_and(|&(at, _)| at <= now_ms)
    }

    /// Ask blocked peers that are due again, at most `limit`; returns how
    /// many were unblocked.
    fn sweep(
        &mut self,
        now_ms: u64,
        limit: usize,
        check: &mut impl FnMut(usize) -> Verdict,
    ) -> usize {
        let mut unblocked = 0;
        for _ in 0..limit.min(self.due.len()) {
            let Some(&(at, peer)) = self.due.front() else {
                break;
            };
            if at > now_ms {
                break;
            }
            self.due.pop_front();
            let peer = peer as usize;
            self.stats.swept += 1;
            if check(peer) == Verdict::SkipCached {
                self.due
                    .push_back((now_ms.saturating_add(BLOCK_TTL_MS), peer as u32));
            } else if let Some(b) = self.blocked.get_mut(peer) {
                *b = false;
                self.nblocked -= 1;
                self.mark_peer(peer, false);
                unblocked += 1;
            }
        }
        unblocked
    }

    /// Choose a peer (see the module docs): the first node from the cursor
    /// on whose peer `check` finds [`Verdict::Usable`] and `take` takes
    /// (`take` may still refuse, e.g. a limit reached meanwhile; it is
    /// called at most once per peer and selection, and the selection ends
    /// when it returns true). `now_ms` is a monotonic clock in
    /// milliseconds; `random` is called once, on the first selection.
    pub fn select(
        &mut self,
        now_ms: u64,
        random: impl FnOnce() -> u64,
        mut check: impl FnMut(usize) -> Verdict,
        mut take: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        self.stats = Stats::default();
        self.grown = false;
        if self.sweep_due(now_ms) {
            self.sweep(now_ms, SWEEP, &mut check);
        }
        self.call = self.call.wrapping_add(1);
        if self.call == 0 {
            self.skipped.fill(0);
            self.call = 1;
        }
        let mut random = Some(random);
        if let Some(p) = self.walk(now_ms, &mut random, &mut check, &mut take) {
            return Some(p);
        }
        // Nothing usable among the unblocked peers: before answering "no
        // peer", ask every blocked peer that is due again (a recovered one
        // must not wait for the sweep to reach it).
        if self.sweep_due(now_ms) && self.sweep(now_ms, usize::MAX, &mut check) > 0 {
            return self.walk(now_ms, &mut random, &mut check, &mut take);
        }
        None
    }

    /// Once around the ring from the cursor (see [`Ring::select`]).
    fn walk(
        &mut self,
        now_ms: u64,
        random: &mut Option<impl FnOnce() -> u64>,
        check: &mut impl FnMut(usize) -> Verdict,
        take: &mut impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        if self.nblocked == self.peers {
            return None;
        }
        let start = match self.next {
            Some(n) if n < self.len => n,
            Some(_) => 0,
            None => {
                let r = random.take().map_or(0, |f| f());
                ((r % self.peers as u64) as usize + 1) % self.built()
            }
        };
        self.next = Some(start);

        // Known rejected peers, each counted once: a rejected peer is then
        // blocked (its nodes marked) or skipped for this call.
        let mut rejected = self.nblocked;
        let mut pos = start;
        let mut end = self.built();
        let mut wrapped = false;
        loop {
            if pos >= end {
                if !wrapped && end < self.len && !self.grown {
                    self.build_batch();
                    self.grown = true;
                    end = self.built();
                    continue;
                }
                if wrapped {
                    break;
                }
                wrapped = true;
                pos = 0;
                end = start;
                continue;
            }
            let Some(k) = self.marks.next_unmarked(pos, end) else {
                pos = end;
                continue;
            };
            pos = k + 1;
            self.stats.visits += 1;
            let peer = self.node(k)?;
            match self.ask(peer, now_ms, check, take) {
                Asked::Taken => {
                    self.next = Some(k + 1);
                    return Some(peer);
                }
                Asked::Rejected => {
                    rejected += 1;
                    if rejected >= self.peers {
                        return None;
                    }
                }
                Asked::Known => {}
            }
        }

        // Once around the built nodes of an incomplete ring and some peers
        // not yet asked (no built node, or only ones behind the cursor):
        // ask them in configuration order, so that a usable peer is never
        // refused because its nodes are not built yet. The cursor stays;
        // the ring grew by a batch (in this walk or the selection's first)
        // for the next selection.
        for peer in 0..self.peers {
            if let Asked::Taken = self.ask(peer, now_ms, check, take) {
                return Some(peer);
            }
        }
        None
    }

    /// Ask about `peer` unless already known rejected in this selection.
    fn ask(
        &mut self,
        peer: usize,
        now_ms: u64,
        check: &mut impl FnMut(usize) -> Verdict,
        take: &mut impl FnMut(usize) -> bool,
    ) -> Asked {
        let (Some(&blocked), Some(&skipped)) = (self.blocked.get(peer), self.skipped.get(peer))
        else {
            return Asked::Known;
        };
        if blocked || skipped == self.call {
            return Asked::Known;
        }
        self.stats.asked += 1;
        match check(peer) {
            Verdict::Usable if take(peer) => Asked::Taken,
            Verdict::Usable | Verdict::Skip => {
                self.skipped[peer] = self.call;
                Asked::Rejected
            }
            Verdict::SkipCached => {
                self.block(peer, now_ms);
                Asked::Rejected
            }
        }
    }
}

/// Outcome of [`Ring::ask`].
enum Asked {
    Taken,
    /// Rejected now (first time in this selection).
    Rejected,
    /// Already known rejected: not asked.
    Known,
}

#[cfg(test)]
mod tests;
