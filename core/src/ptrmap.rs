//! A fixed, read-only map from addresses to small indices, built once per
//! worker. The selection hooks use it to find a peer's slot in O(1) without
//! touching nginx's peer structures (whose layout the patch must not change).

/// Open-addressing table keyed by non-zero `usize` (a peer's address).
#[derive(Clone, Debug, Default)]
pub struct PtrMap {
    keys: Vec<usize>,
    values: Vec<u32>,
    shift: u32,
}

impl PtrMap {
    /// Build from `(key, value)` pairs. Zero keys are ignored; for a
    /// repeated key the first value wins.
    pub fn new(pairs: impl IntoIterator<Item = (usize, u32)>) -> Self {
        let pairs: Vec<(usize, u32)> = pairs.into_iter().filter(|&(k, _)| k != 0).collect();
        let cap = (pairs.len() * 2).next_power_of_two().max(8);
        let mut map = Self {
            keys: vec![0; cap],
            values: vec![0; cap],
            shift: usize::BITS - cap.trailing_zeros(),
        };
        for (k, v) in pairs {
            let mut i = map.bucket(k);
            loop {
                if map.keys[i] == k {
                    break;
                }
                if map.keys[i] == 0 {
                    map.keys[i] = k;
                    map.values[i] = v;
                    break;
                }
                i = (i + 1) & (cap - 1);
            }
        }
        map
    }

    fn bucket(&self, k: usize) -> usize {
        (k.wrapping_mul(0x9e37_79b9_7f4a_7c15_u64 as usize) >> self.shift) & (self.keys.len() - 1)
    }

    /// The value stored for `k`.
    #[inline]
    pub fn get(&self, k: usize) -> Option<u32> {
        if k == 0 || self.keys.is_empty() {
            return None;
        }
        let mask = self.keys.len() - 1;
        let mut i = self.bucket(k);
        loop {
            match self.keys[i] {
                0 => return None,
                x if x == k => return Some(self.values[i]),
                _ => i = (i + 1) & mask,
            }
        }
    }

    pub fn len(&self) -> usize {
        self.keys.iter().filter(|&&k| k != 0).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn empty_map_finds_nothing() {
        let m = PtrMap::default();
        assert_eq!(m.get(0x1000), None);
        assert!(PtrMap::new([]).get(8).is_none());
    }

    #[test]
    fn first_value_wins_and_zero_is_ignored() {
        let m = PtrMap::new([(0, 1), (16, 2), (16, 3)]);
        assert_eq!(m.get(16), Some(2));
        assert_eq!(m.get(0), None);
        assert_eq!(m.len(), 1);
    }

    proptest! {
        #[test]
        fn finds_every_key_and_only_those(keys in proptest::collection::hash_set(1usize..usize::MAX, 0..300),
                                          probe in 1usize..usize::MAX) {
            let keys: Vec<usize> = keys.into_iter().collect();
            let m = PtrMap::new(keys.iter().enumerate().map(|(i, &k)| (k, i as u32)));
            for (i, &k) in keys.iter().enumerate() {
                prop_assert_eq!(m.get(k), Some(i as u32));
            }
            if !keys.contains(&probe) {
                prop_assert_eq!(m.get(probe), None);
            }
        }

        #[test]
        fn aligned_addresses_spread(n in 1usize..2000) {
            // peers are 8-byte aligned, often in one array
            let m = PtrMap::new((0..n).map(|i| (0x7f00_0000_0000 + i * 200, i as u32)));
            for i in 0..n {
                prop_assert_eq!(m.get(0x7f00_0000_0000 + i * 200), Some(i as u32));
            }
        }
    }
}
