//! A request body as read off a connection: it starts 16-aligned, as
//! validated rkyv access requires, and is owned as [`BytesMut`], so that a
//! handler can hand the record bytes in it on (a produce's batches, a
//! push's) without copying them.

use std::ops::{Deref, DerefMut, Range};

use bytes::{Buf, BytesMut};
use corelog_wire::message::BODY_ALIGNMENT;

/// An aligned request body; see the module docs.
#[derive(Debug)]
pub struct RequestBody {
    bytes: BytesMut,
}

impl RequestBody {
    /// `len` zero bytes at an aligned address, to be read into.
    #[must_use]
    pub fn zeroed(len: usize) -> RequestBody {
        let mut bytes = BytesMut::zeroed(len + BODY_ALIGNMENT - 1);
        let past_alignment = bytes.as_ptr() as usize % BODY_ALIGNMENT;
        bytes.advance((BODY_ALIGNMENT - past_alignment) % BODY_ALIGNMENT);
        bytes.truncate(len);
        debug_assert_eq!(bytes.as_ptr() as usize % BODY_ALIGNMENT, 0);
        RequestBody { bytes }
    }

    /// An aligned copy of `body`.
    #[must_use]
    pub fn copy_from(body: &[u8]) -> RequestBody {
        let mut aligned = RequestBody::zeroed(body.len());
        aligned.copy_from_slice(body);
        aligned
    }

    /// Where `part`, a slice of this body, lies in it.
    ///
    /// # Panics
    /// If `part` is not inside this body: a handler bug, not an input.
    #[must_use]
    pub fn range_of(&self, part: &[u8]) -> Range<usize> {
        let start = (part.as_ptr() as usize)
            .checked_sub(self.bytes.as_ptr() as usize)
            .filter(|start| start + part.len() <= self.bytes.len())
            .expect("a slice of this body");
        start..start + part.len()
    }

    /// Cuts the body into the given pieces, each owned and writable,
    /// without copying. `ranges` are in order and do not overlap (as
    /// [`RequestBody::range_of`] gives them for a raw section's parts).
    ///
    /// # Panics
    /// If `ranges` are out of order, overlap or reach past the end.
    #[must_use]
    pub fn split_into(self, ranges: &[Range<usize>]) -> Vec<BytesMut> {
        let mut rest = self.bytes;
        let mut consumed = 0;
        let mut pieces = Vec::with_capacity(ranges.len());
        for range in ranges {
            assert!(range.start >= consumed, "ranges out of order");
            rest.advance(range.start - consumed);
            pieces.push(rest.split_to(range.len()));
            consumed = range.end;
        }
        pieces
    }
}

impl Deref for RequestBody {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl DerefMut for RequestBody {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_start_aligned_at_every_length() {
        for len in [0, 1, 15, 16, 17, 4095, 1 << 20] {
            let body = RequestBody::zeroed(len);
            assert_eq!(body.len(), len);
            assert_eq!(body.as_ptr() as usize % BODY_ALIGNMENT, 0, "{len}");
            assert!(body.iter().all(|&byte| byte == 0));
        }
        let copied = RequestBody::copy_from(b"corelog");
        assert_eq!(&copied[..], b"corelog");
        assert_eq!(copied.as_ptr() as usize % BODY_ALIGNMENT, 0);
    }

    #[test]
    fn split_gives_each_part_and_shares_the_allocation() {
        let body = RequestBody::copy_from(b"head:aaaa-bb--cccccc");
        let ranges = [
            body.range_of(&body[5..9]),
            body.range_of(&body[10..12]),
            body.range_of(&body[14..20]),
        ];
        assert_eq!(ranges, [5..9, 10..12, 14..20]);
        let start = body.as_ptr() as usize;
        let mut pieces = body.split_into(&ranges);
        assert_eq!(pieces[0], &b"aaaa"[..]);
        assert_eq!(pieces[1], &b"bb"[..]);
        assert_eq!(pieces[2], &b"cccccc"[..]);
        assert_eq!(pieces[1].as_ptr() as usize, start + 10, "not copied");
        // Each piece is writable on its own.
        pieces[1][0] = b'B';
        assert_eq!(pieces[1], &b"Bb"[..]);
        assert_eq!(pieces[0], &b"aaaa"[..]);
    }

    #[test]
    #[should_panic(expected = "a slice of this body")]
    fn a_foreign_slice_has_no_range() {
        let body = RequestBody::zeroed(8);
        let other = [0u8; 4];
        let _ = body.range_of(&other);
    }
}
