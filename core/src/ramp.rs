//! `slow_start`: after a peer returns to service, the share of new traffic
//! it is offered ramps linearly over the ramp's length (docs/transitions.md).
//!
//! Selection asks, for a ramping peer, whether this request may go to it:
//! the request carries a *draw* (a 32-bit number), and the peer admits it
//! when `draw / 2^32 < elapsed / length`. For weighted balancers the draw
//! is the next term of a Weyl sequence (golden-ratio steps), so that the
//! admitted fraction of any run of requests is the ramp's fraction within
//! a few requests; for hash balancers it is a hash of the request's key, so
//! that the keys admitted at one moment are still admitted later and the
//! admitted set grows with the ramp.
//!
//! Times are the low 32 bits of unix milliseconds, compared by wrapping
//! difference: a ramp is at most `SLOW_START_MAX_MS` long, far below the
//! 49 days the difference can express.

/// The step of the Weyl sequence: 2^32 / φ, odd.
const GOLDEN: u32 = 0x9e37_79b9;

/// The stored form of a unix time (never 0, which means "none").
#[inline]
pub fn stamp(now_unix_ms: u64) -> u32 {
    (now_unix_ms as u32).max(1)
}

/// Where a peer is in its ramp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Milliseconds since the ramp started, below `length_ms`.
    pub elapsed_ms: u32,
    pub length_ms: u32,
}

impl Progress {
    /// The ramp of a peer that returned at `since` (a [`stamp`], 0 = never),
    /// at `now_unix_ms`, for a ramp of `length_ms`: `None` when there is
    /// none (no return, no ramp configured, or the ramp is over).
    #[inline]
    pub fn at(since: u32, now_unix_ms: u64, length_ms: u64) -> Option<Progress> {
        if since == 0 || length_ms == 0 {
            return None;
        }
        let length_ms = u32::try_from(length_ms).unwrap_or(u32::MAX);
        let elapsed_ms = (now_unix_ms as u32).wrapping_sub(since);
        (elapsed_ms < length_ms).then_some(Progress {
            elapsed_ms,
            length_ms,
        })
    }

    /// Whether a request with `draw` may go to the peer now.
    #[inline]
    pub fn admits(self, draw: u32) -> bool {
        u64::from(draw) * u64::from(self.length_ms) < u64::from(self.elapsed_ms) << 32
    }

    /// Whether a request with `draw` may go to the peer now, for a
    /// balancer that walks a fixed sequence of turns (`vnswrr`): a turn the
    /// ramp holds back goes to the next peer, so admitting a fraction `g`
    /// of the peer's turns gives it the share a weight of `g` would. To
    /// give it the ramp's fraction `f` of its full share, with the other
    /// selectable peers' weight `others`: `g = f·others / (others +
    /// weight·(1 - f))`.
    pub fn admits_turn(self, draw: u32, weight: u32, others: u32) -> bool {
        let f = f64::from(self.elapsed_ms) / f64::from(self.length_ms);
        let (w, o) = (f64::from(weight.max(1)), f64::from(others));
        let g = if o == 0.0 {
            1.0
        } else {
            f * o / (o + w * (1.0 - f))
        };
        // Mixed: which turn a request meets depends on the draws before
        // it, and consecutive terms of the sequence are far from
        // independent.
        f64::from(mix(draw)) < g * 4_294_967_296.0
    }

    /// Milliseconds left.
    pub fn left_ms(self) -> u32 {
        self.length_ms - self.elapsed_ms
    }

    /// The weight the peer has now, of its configured `weight`.
    pub fn weight(self, weight: u32) -> f64 {
        f64::from(weight) * f64::from(self.elapsed_ms) / f64::from(self.length_ms)
    }
}

/// The draw of the `n`th request of a worker (weighted balancers).
#[inline]
pub fn sequence(n: u32) -> u32 {
    n.wrapping_mul(GOLDEN)
}

/// The draw of a request with hash key `key` (hash balancers): FNV-1a,
/// then a finalizer so that keys a balancer maps to the same peer (whose
/// own hashes are close) still spread over the whole range.
pub fn key_draw(key: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in key {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    mix(h)
}

/// murmur3's finalizer (fmix32): a bijection that spreads close inputs.
#[inline]
pub fn mix(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

#[cfg(test)]
mod tests;
