//! The ring's node sequence: nginx's smooth weighted round robin, computed
//! one pick at a time from private state.
//!
//! nginx's step adds every peer's weight to its current weight, picks the
//! greatest current weight (ties to the earlier peer) and subtracts the
//! total from the pick. After `t` steps peer `i` holds
//! `t * w_i - W * k_i`, where `k_i` counts its picks so far. Peers of equal
//! weight therefore differ only by their pick counts: the one with the
//! fewest picks is ahead, ties to the earlier peer, so within a class of
//! equal weight the picks go round the class's members in configuration
//! order. A step then only compares one representative per class: it costs
//! O(D) for D distinct weights instead of O(peers).
//!
//! Scaling every weight by the same factor scales every current weight and
//! changes no comparison, so the sequence over the configured weights and
//! over the weights divided by their gcd is the same; after
//! `N = sum(w_i / g)` steps every current weight is back at 0 and the
//! sequence repeats. The builder works on the reduced weights.

/// Peers of one weight.
#[derive(Clone, Debug)]
struct Class {
    /// Reduced weight.
    weight: i64,
    /// Peer indices, ascending.
    members: Vec<u32>,
    /// Next member to pick.
    pos: usize,
    /// Picks of each member from `pos` on; members before `pos` have one
    /// more.
    round: i64,
}

/// State of the smooth-WRR sequence after `steps` picks.
#[derive(Clone, Debug)]
pub(super) struct Builder {
    classes: Vec<Class>,
    /// Sum of the reduced weights: N, the cycle length.
    total: i64,
    /// Picks made so far.
    steps: i64,
}

impl Builder {
    /// `reduced` holds each peer's weight divided by the group's gcd; their
    /// sum must fit comfortably in an i64 (the ring caps it far lower).
    pub(super) fn new(reduced: &[u64]) -> Builder {
        let mut classes: Vec<Class> = Vec::new();
        for (i, &w) in reduced.iter().enumerate() {
            let w = w as i64;
            match classes.iter_mut().find(|c| c.weight == w) {
                Some(c) => c.members.push(i as u32),
                None => classes.push(Class {
                    weight: w,
                    members: vec![i as u32],
                    pos: 0,
                    round: 0,
                }),
            }
        }
        Builder {
            total: reduced.iter().map(|&w| w as i64).sum(),
            classes,
            steps: 0,
        }
    }

    /// Number of distinct weights: the cost of one step.
    pub(super) fn classes(&self) -> usize {
        self.classes.len()
    }

    /// The next pick.
    pub(super) fn step(&mut self) -> u32 {
        self.steps += 1;
        let t = self.steps;
        let mut best = 0;
        let mut best_value = i64::MIN;
        let mut best_peer = u32::MAX;
        for (c, class) in self.classes.iter().enumerate() {
            // Current weight of the class's leading member after adding
            // the weights of step t: t * w - W * picks.
            let value = t * class.weight - self.total * class.round;
            let peer = class.members[class.pos];
            if value > best_value || (value == best_value && peer < best_peer) {
                best = c;
                best_value = value;
                best_peer = peer;
            }
        }
        let class = &mut self.classes[best];
        class.pos += 1;
        if class.pos == class.members.len() {
            class.pos = 0;
            class.round += 1;
        }
        best_peer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nginx's loop, verbatim in spirit: configured weights, strict `>`.
    fn nginx_swrr(weights: &[u64], steps: usize) -> Vec<u32> {
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
            let b = best.unwrap();
            current[b] -= total;
            out.push(b as u32);
        }
        out
    }

    #[test]
    fn classes_match_the_plain_loop() {
        for weights in [
            vec![5, 1, 1],
            vec![1, 2, 3, 4, 5],
            vec![3, 3, 1, 3, 1],
            vec![7, 7, 7, 2],
            vec![10, 1],
        ] {
            let n: u64 = weights.iter().sum();
            let mut b = Builder::new(&weights);
            let ours: Vec<u32> = (0..3 * n).map(|_| b.step()).collect();
            assert_eq!(ours, nginx_swrr(&weights, 3 * n as usize), "{weights:?}");
        }
    }
}
