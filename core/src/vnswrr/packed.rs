//! Vectors of 24-bit unsigned integers: 3 bytes per entry. Node and peer
//! indices of a ring are below [`super::MAX_NODES`] = 2^24.

#[derive(Clone, Debug, Default)]
pub(super) struct U24 {
    bytes: Vec<u8>,
}

impl U24 {
    /// `len` zeros.
    pub(super) fn zeros(len: usize) -> U24 {
        U24 {
            bytes: vec![0; 3 * len],
        }
    }

    /// Empty, with room for `len` entries.
    pub(super) fn with_capacity(len: usize) -> U24 {
        U24 {
            bytes: Vec::with_capacity(3 * len),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.bytes.len() / 3
    }

    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.bytes.capacity() / 3
    }

    #[inline]
    pub(super) fn get(&self, i: usize) -> Option<u32> {
        let at = i.checked_mul(3)?;
        let b = self.bytes.get(at..at + 3)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], 0]))
    }

    pub(super) fn set(&mut self, i: usize, v: u32) {
        debug_assert!(v < 1 << 24);
        let Some(at) = i.checked_mul(3) else {
            return;
        };
        if let Some(b) = self.bytes.get_mut(at..at + 3) {
            b.copy_from_slice(&v.to_le_bytes()[..3]);
        }
    }

    pub(super) fn push(&mut self, v: u32) {
        debug_assert!(v < 1 << 24);
        self.bytes.extend_from_slice(&v.to_le_bytes()[..3]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let mut v = U24::with_capacity(4);
        for x in [0, 1, 0xff_ffff, 0x12_3456] {
            v.push(x);
        }
        assert_eq!(v.len(), 4);
        assert_eq!(v.get(2), Some(0xff_ffff));
        assert_eq!(v.get(3), Some(0x12_3456));
        assert_eq!(v.get(4), None);
        v.set(0, 0xab_cdef);
        v.set(9, 1); // out of range: ignored
        assert_eq!(v.get(0), Some(0xab_cdef));
        let z = U24::zeros(5);
        assert_eq!((z.len(), z.get(4)), (5, Some(0)));
    }
}
