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

/// The peers of one list that nginx allocated as one array, in list
/// order at a fixed stride, their indices consecutive: an address maps to
/// its index by arithmetic, at the same cost for every list (a `PtrMap`'s
/// probes depend on where the addresses fall).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dense {
    base: usize,
    /// Bytes the array spans (0: maps nothing).
    span: usize,
    /// `ceil(2^64 / stride)`: `off * magic >> 64` is `off / stride` for
    /// every offset of the array.
    magic: u64,
    first: u32,
}

impl Dense {
    /// Maps nothing.
    pub const NONE: Dense = Dense {
        base: 0,
        span: 0,
        magic: 0,
        first: 0,
    };

    /// `peers`: `(address, index)` in list order. `None` unless the
    /// addresses are `stride` apart and the indices consecutive.
    pub fn new(peers: &[(usize, u32)], stride: usize) -> Option<Dense> {
        let &(base, first) = peers.first()?;
        if stride < 2 || base == 0 {
            return None;
        }
        let span = peers.len().checked_mul(stride)?;
        base.checked_add(span)?;
        // Offsets below 2^32 keep `off * magic >> 64` exact (below).
        if span > u32::MAX as usize {
            return None;
        }
        for (k, &(a, i)) in peers.iter().enumerate() {
            if a != base + k * stride || u64::from(i) != u64::from(first) + k as u64 {
                return None;
            }
        }
        u32::try_from(u64::from(first) + peers.len() as u64 - 1).ok()?;
        let magic = ((1u128 << 64).div_ceil(stride as u128)) as u64;
        Some(Dense {
            base,
            span,
            magic,
            first,
        })
    }

    /// The index of the peer at `addr`, when it is in the array.
    #[inline]
    pub fn get(&self, addr: usize) -> Option<u32> {
        let off = addr.wrapping_sub(self.base);
        if off >= self.span {
            return None;
        }
        // off = k * stride + j (j < stride): off * magic = k * 2^64 plus
        // less than 2^64 while off < 2^32, so the high word is k.
        let k = ((off as u128 * u128::from(self.magic)) >> 64) as u32;
        Some(self.first + k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_maps_an_array_and_nothing_else() {
        let peers: Vec<(usize, u32)> = (0..5).map(|k| (0x1000 + k * 200, 7 + k as u32)).collect();
        let d = Dense::new(&peers, 200).unwrap();
        for &(a, i) in &peers {
            assert_eq!(d.get(a), Some(i));
        }
        assert_eq!(d.get(0x1000 - 200), None);
        assert_eq!(d.get(0x1000 + 5 * 200), None);
        assert_eq!(d.get(0), None);
        assert_eq!(Dense::default().get(0x1000), None);
        // A gap, a wrong stride, indices out of order: not dense.
        let mut gap = peers.clone();
        gap[3].0 += 8;
        assert_eq!(Dense::new(&gap, 200), None);
        assert_eq!(Dense::new(&peers, 208), None);
        let mut swapped = peers.clone();
        swapped.swap(1, 2);
        assert_eq!(Dense::new(&swapped, 200), None);
        assert_eq!(Dense::new(&[], 200), None);
        assert_eq!(Dense::new(&peers[..1], 1), None);
    }
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
        fn dense_finds_every_peer(n in 1usize..3000, stride in 2usize..1024,
                                  base in 1usize..(1 << 47), first in 0u32..1_000_000) {
            let peers: Vec<(usize, u32)> =
                (0..n).map(|k| (base + k * stride, first + k as u32)).collect();
            let d = Dense::new(&peers, stride).unwrap();
            for &(a, i) in &peers {
                prop_assert_eq!(d.get(a), Some(i));
                // An address inside a peer maps to that peer.
                prop_assert_eq!(d.get(a + stride - 1), Some(i));
            }
            prop_assert_eq!(d.get(base.wrapping_sub(1)), None);
            prop_assert_eq!(d.get(base + n * stride), None);
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
