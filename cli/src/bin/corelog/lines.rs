//! A set of input line numbers kept as ranges, so that `produce` can say
//! which lines were stored without a word per line: a million lines stored
//! in order are one range.

use std::collections::BTreeMap;
use std::fmt;

/// Ranges shown before the rest is summarised, so a message stays a line.
const RANGES_SHOWN_MAX: usize = 8;

/// Line numbers as disjoint, non-adjacent inclusive ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LineSet {
    /// First line of each range → its last line.
    ranges: BTreeMap<u64, u64>,
    len: u64,
}

impl LineSet {
    /// Adds a line; adding one already there changes nothing.
    pub(crate) fn insert(&mut self, line: u64) {
        let before = self
            .ranges
            .range(..=line)
            .next_back()
            .map(|(&s, &e)| (s, e));
        if before.is_some_and(|(_, end)| end >= line) {
            return;
        }
        self.len += 1;
        let after = line
            .checked_add(1)
            .and_then(|next| self.ranges.get(&next).map(|&end| (next, end)));
        let start = match before {
            Some((start, end)) if end.checked_add(1) == Some(line) => start,
            _ => line,
        };
        let end = match after {
            Some((next, end)) => {
                self.ranges.remove(&next);
                end
            }
            None => line,
        };
        self.ranges.insert(start, end);
    }

    /// How many lines.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ranges, in order, as `[first, last]` pairs.
    pub(crate) fn ranges(&self) -> Vec<[u64; 2]> {
        self.ranges
            .iter()
            .map(|(&start, &end)| [start, end])
            .collect()
    }
}

/// `line 4`, `lines 1-2`, `lines 1-3, 7, 9-12`; past eight ranges, the
/// rest as `and N more lines`.
impl fmt::Display for LineSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.len == 1 { "line " } else { "lines " })?;
        let mut shown = 0;
        for (index, (&start, &end)) in self.ranges.iter().enumerate() {
            if index == RANGES_SHOWN_MAX {
                return write!(f, " and {} more", self.len - shown);
            }
            if index > 0 {
                f.write_str(", ")?;
            }
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            shown += end - start + 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn set(lines: &[u64]) -> LineSet {
        let mut set = LineSet::default();
        for &line in lines {
            set.insert(line);
        }
        set
    }

    #[test]
    fn lines_read_as_ranges() {
        assert_eq!(set(&[4]).to_string(), "line 4");
        assert_eq!(set(&[2, 1]).to_string(), "lines 1-2");
        assert_eq!(
            set(&[1, 2, 3, 7, 9, 10, 11, 12]).to_string(),
            "lines 1-3, 7, 9-12"
        );
        assert_eq!(set(&[5, 3, 4]).ranges(), [[3, 5]], "a gap filled merges");
        let scattered: Vec<u64> = (0..10).map(|i| i * 10).collect();
        assert_eq!(
            set(&scattered).to_string(),
            "lines 0, 10, 20, 30, 40, 50, 60, 70 and 2 more"
        );
    }

    proptest! {
        #[test]
        fn the_set_matches_a_plain_set(lines in proptest::collection::vec(0_u64..60, 0..80)) {
            let model: std::collections::BTreeSet<u64> = lines.iter().copied().collect();
            let set = set(&lines);
            prop_assert_eq!(set.len(), model.len() as u64);
            let mut from_ranges = Vec::new();
            let mut previous_end: Option<u64> = None;
            for [start, end] in set.ranges() {
                prop_assert!(start <= end);
                // Disjoint and not adjacent: adjacent ranges would be one.
                prop_assert!(previous_end.is_none_or(|previous| previous + 1 < start));
                previous_end = Some(end);
                from_ranges.extend(start..=end);
            }
            prop_assert_eq!(from_ranges, model.into_iter().collect::<Vec<_>>());
        }
    }
}
