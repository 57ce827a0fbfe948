//! SplitMix64: the one small seeded generator of the test rig (fault
//! schedules, proxy faults, file damage), so that every random choice is a
//! function of a printed seed and a failing run can be replayed.

use std::time::Duration;

/// SplitMix64 (Steele, Lea and Flood): a 64-bit state, one addition and a
/// mix per draw. Not for cryptography; the modulo bias of [`below`] is
/// irrelevant at the bounds used here.
///
/// [`below`]: SplitMix64::below
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose draws depend on `seed` alone.
    #[must_use]
    pub const fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound`; 0 when `bound` is 0.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }

    /// Uniform index into a slice of `len` elements; 0 when `len` is 0.
    pub fn index(&mut self, len: usize) -> usize {
        usize::try_from(self.below(len as u64)).unwrap_or(0)
    }

    /// True with probability `p`; draws nothing when `p` is 0 or less.
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        // 53 random bits: a uniform float in [0, 1).
        let unit = (self.next_u64() >> 11) as f64 / (1_u64 << 53) as f64;
        unit < p
    }

    /// Uniform in `min..=max` (microsecond steps); `min` when `max <= min`.
    pub fn duration(&mut self, min: Duration, max: Duration) -> Duration {
        if max <= min {
            return min;
        }
        let span = u64::try_from((max - min).as_micros()).unwrap_or(u64::MAX);
        min + Duration::from_micros(self.below(span.saturating_add(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_a_function_of_the_seed() {
        let draw = |seed| {
            let mut rng = SplitMix64::new(seed);
            (0..8).map(|_| rng.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn chance_and_ranges_hold_their_bounds() {
        let mut rng = SplitMix64::new(1);
        let hits = (0..10_000).filter(|_| rng.chance(0.1)).count();
        assert!((800..1200).contains(&hits), "{hits}");
        assert!(!(0..1000).any(|_| rng.chance(0.0)));
        assert!((0..1000).all(|_| rng.below(7) < 7));
        assert_eq!(rng.below(0), 0);
        let (min, max) = (Duration::from_millis(3), Duration::from_millis(5));
        assert!((0..1000).all(|_| (min..=max).contains(&rng.duration(min, max))));
    }
}
