//! A two-level bitset over ring nodes: marked nodes are skipped 64 at a
//! time, and runs of 4096 fully marked nodes one bit at a time.

#[derive(Clone, Debug)]
pub(super) struct Marks {
    /// Bit `i` set: node `i` is marked.
    nodes: Vec<u64>,
    /// Bit `w` set: word `w` of `nodes` is all ones.
    full: Vec<u64>,
}

impl Marks {
    pub(super) fn new(len: usize) -> Marks {
        let words = len.div_ceil(64);
        Marks {
            nodes: vec![0; words],
            full: vec![0; words.div_ceil(64)],
        }
    }

    pub(super) fn set(&mut self, i: usize) {
        let w = i / 64;
        if let Some(word) = self.nodes.get_mut(w) {
            *word |= 1 << (i % 64);
            if *word == u64::MAX {
                self.full[w / 64] |= 1 << (w % 64);
            }
        }
    }

    pub(super) fn unset(&mut self, i: usize) {
        let w = i / 64;
        if let Some(word) = self.nodes.get_mut(w) {
            *word &= !(1 << (i % 64));
            self.full[w / 64] &= !(1 << (w % 64));
        }
    }

    /// The first unmarked node in `from..end`.
    #[inline]
    pub(super) fn next_unmarked(&self, from: usize, end: usize) -> Option<usize> {
        if from >= end {
            return None;
        }
        let w = from / 64;
        let free = !*self.nodes.get(w)? & (u64::MAX << (from % 64));
        if free != 0 {
            let i = w * 64 + free.trailing_zeros() as usize;
            return (i < end).then_some(i);
        }
        self.next_open_word(w + 1, end)
    }

    /// The first unmarked node in the words from `w` on (below `end`).
    fn next_open_word(&self, mut w: usize, end: usize) -> Option<usize> {
        // The next word that is not all ones, found through `full`.
        loop {
            if w >= self.nodes.len() || w * 64 >= end {
                return None;
            }
            let j = w / 64;
            let open = !self.full[j] & (u64::MAX << (w % 64));
            if open != 0 {
                w = j * 64 + open.trailing_zeros() as usize;
                let word = *self.nodes.get(w)?;
                let i = w * 64 + (!word).trailing_zeros() as usize;
                return (i < end).then_some(i);
            }
            w = (j + 1) * 64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn finds_the_first_unmarked(len in 1usize..20_000,
                                    marked in proptest::collection::vec(0usize..20_000, 0..20_000),
                                    dense in 0usize..20_000, dense_len in 0usize..10_000,
                                    from in 0usize..20_000, end in 0usize..20_000) {
            let mut m = Marks::new(len);
            let mut naive = vec![false; len];
            for i in marked.into_iter().chain(dense..dense + dense_len).filter(|&i| i < len) {
                m.set(i);
                naive[i] = true;
            }
            // unset every 7th marked node again
            let again: Vec<usize> = (0..len).filter(|&i| naive[i] && i % 7 == 3).collect();
            for i in again {
                m.unset(i);
                naive[i] = false;
            }
            let end = end.min(len);
            let want = (from..end).find(|&i| !naive[i]);
            prop_assert_eq!(m.next_unmarked(from, end), want);
        }
    }

    #[test]
    fn all_marked_then_some_unset() {
        let len = 64 * 64 * 3 + 5;
        let mut m = Marks::new(len);
        for i in 0..len {
            m.set(i);
        }
        assert_eq!(m.next_unmarked(0, len), None);
        m.set(len + 100); // out of range: ignored
        m.unset(len + 100);
        m.unset(64 * 64 * 2 + 7);
        assert_eq!(m.next_unmarked(7, len), Some(64 * 64 * 2 + 7));
        assert_eq!(m.next_unmarked(64 * 64 * 2 + 8, len), None);
        m.unset(len - 1);
        assert_eq!(m.next_unmarked(64 * 64 * 2 + 8, len), Some(len - 1));
    }
}
