//! Group commit for the active segment, as a pure state machine: batches
//! wait in memory until a flush takes a run of them, writes them with one
//! aligned O_DIRECT write and one fdatasync, and only then are they durable.
//!
//! O_DIRECT writes whole aligned blocks, so every flush rewrites the
//! partially filled last block of the segment (kept here as `tail_block`)
//! followed by the new batches, zero-padded to the alignment. The padding
//! past the logical end is overwritten by the next flush and cut off when
//! the segment closes.

use std::collections::VecDeque;

use bytes::Bytes;
use corelog_wire::batch::BatchHeader;
use corelog_wire::types::Offset;

use super::disk::{align_down, align_up};

/// A batch with its offsets assigned, waiting for a flush.
#[derive(Clone, Debug)]
pub(super) struct PendingBatch {
    pub header: BatchHeader,
    pub bytes: Bytes,
}

/// One flush: write `block_count` aligned bytes at `write_position`, then sync.
#[derive(Debug)]
pub(super) struct FlushPlan {
    /// Aligned file position the write starts at.
    pub write_position: u64,
    /// Logical segment length before the flush: where the first batch goes.
    pub first_batch_position: u64,
    /// The batches, in offset order.
    pub batches: Vec<PendingBatch>,
    /// Bytes of the batches.
    pub batch_bytes: usize,
}

impl FlushPlan {
    /// Length of the aligned write.
    #[must_use]
    pub fn write_len(&self, alignment: u64) -> usize {
        let end = self.first_batch_position + self.batch_bytes as u64;
        (align_up(end, alignment) - self.write_position) as usize
    }
}

/// Pending batches and the partial last block of the active segment.
#[derive(Debug)]
pub(super) struct Appender {
    alignment: u64,
    /// Bytes of the active segment from `align_down(size)` to `size`.
    tail_block: Vec<u8>,
    pending: VecDeque<PendingBatch>,
    pending_bytes: usize,
}

impl Appender {
    /// An appender for a segment of `segment_size` bytes whose last partial
    /// block holds `tail_block`.
    pub fn new(alignment: u64, segment_size: u64, tail_block: Vec<u8>) -> Self {
        assert!(alignment.is_power_of_two());
        assert_eq!(
            tail_block.len() as u64,
            segment_size - align_down(segment_size, alignment),
            "tail block must hold the partial last block"
        );
        Appender {
            alignment,
            tail_block,
            pending: VecDeque::new(),
            pending_bytes: 0,
        }
    }

    /// Queues a batch whose offsets are assigned.
    pub fn push(&mut self, batch: PendingBatch) {
        self.pending_bytes += batch.bytes.len();
        self.pending.push_back(batch);
    }

    /// Bytes waiting for a flush.
    #[must_use]
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Size of the first waiting batch, if any.
    #[must_use]
    pub fn first_pending_bytes(&self) -> Option<usize> {
        self.pending.front().map(|batch| batch.bytes.len())
    }

    /// Waiting batches, oldest first.
    pub fn pending(&self) -> impl DoubleEndedIterator<Item = &PendingBatch> {
        self.pending.iter()
    }

    /// Waiting batches from the one at `offset` on (those whose base offset
    /// is at or above it), oldest first. Found from the back: the journal
    /// asks for the batches it has not taken yet once per append, usually
    /// the last one or few, while thousands wait for their segment (a scan
    /// from the front, and even a binary search's cache misses, cost a
    /// shard more than the append itself).
    pub fn pending_from(&self, offset: Offset) -> impl Iterator<Item = &PendingBatch> {
        let after = self
            .pending
            .iter()
            .rev()
            .take_while(|batch| batch.header.base_offset >= offset)
            .count();
        self.pending.range(self.pending.len() - after..)
    }

    /// Takes the next run of batches below offset `limit` for a segment now
    /// `segment_size` long: at most `room` bytes (but always one batch, so a
    /// batch larger than the room still goes into a fresh segment) and at
    /// most `flush_bytes_max`.
    pub fn take(
        &mut self,
        segment_size: u64,
        room: u64,
        flush_bytes_max: usize,
        limit: Offset,
    ) -> Option<FlushPlan> {
        let mut batches = Vec::new();
        let mut batch_bytes = 0usize;
        while let Some(next) = self.pending.front() {
            if next.header.next_offset() > limit {
                break;
            }
            let len = next.bytes.len();
            let fits = (batch_bytes + len) as u64 <= room && batch_bytes + len <= flush_bytes_max;
            if !batches.is_empty() && !fits {
                break;
            }
            batch_bytes += len;
            batches.push(self.pending.pop_front()?);
        }
        if batches.is_empty() {
            return None;
        }
        self.pending_bytes -= batch_bytes;
        Some(FlushPlan {
            write_position: align_down(segment_size, self.alignment),
            first_batch_position: segment_size,
            batches,
            batch_bytes,
        })
    }

    /// Fills the write buffer for `plan`: tail block, batches, zero padding.
    pub fn fill(&self, plan: &FlushPlan, buffer: &mut [u8]) {
        assert_eq!(buffer.len(), plan.write_len(self.alignment));
        let mut at = self.tail_block.len();
        buffer[..at].copy_from_slice(&self.tail_block);
        for batch in &plan.batches {
            buffer[at..at + batch.bytes.len()].copy_from_slice(&batch.bytes);
            at += batch.bytes.len();
        }
        buffer[at..].fill(0);
    }

    /// The partial last block after `plan` is written from `written`.
    #[must_use]
    pub fn tail_block_after(&self, plan: &FlushPlan, written: &[u8]) -> Vec<u8> {
        let end = plan.first_batch_position + plan.batch_bytes as u64;
        let block_start = align_down(end, self.alignment);
        let from = (block_start - plan.write_position) as usize;
        let to = (end - plan.write_position) as usize;
        written[from..to].to_vec()
    }

    /// Records that a flush is durable and left `tail_block` as the partial last block.
    pub fn set_tail_block(&mut self, tail_block: Vec<u8>) {
        assert!((tail_block.len() as u64) < self.alignment);
        self.tail_block = tail_block;
    }

    /// Puts an untaken plan's batches back at the front, in order.
    pub fn restore(&mut self, plan: FlushPlan) {
        self.pending_bytes += plan.batch_bytes;
        for batch in plan.batches.into_iter().rev() {
            self.pending.push_front(batch);
        }
    }

    /// Starts over on a new, empty segment.
    pub fn reset_for_new_segment(&mut self) {
        self.tail_block.clear();
    }

    /// Drops every pending batch from `offset` on (the log failed; they
    /// will not be written), keeping those below it; returns how many.
    pub fn abandon_from(&mut self, offset: Offset) -> usize {
        let kept = self
            .pending
            .iter()
            .take_while(|pending| pending.header.base_offset < offset)
            .count();
        let dropped = self.pending.len() - kept;
        for batch in self.pending.drain(kept..) {
            self.pending_bytes -= batch.bytes.len();
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corelog_wire::batch::{BatchBuilder, BatchLimits, Compression, NewRecord, validate};

    fn pending(value_len: usize) -> PendingBatch {
        let mut builder = BatchBuilder::new(Compression::None);
        builder
            .push(&NewRecord {
                value: Some(Bytes::from(vec![7u8; value_len])),
                ..NewRecord::default()
            })
            .unwrap();
        let bytes = builder.build().unwrap();
        let header = validate(&bytes, &BatchLimits::default()).unwrap();
        PendingBatch { header, bytes }
    }

    #[test]
    fn flushes_rewrite_the_partial_block_and_pad_to_alignment() {
        let mut appender = Appender::new(512, 0, Vec::new());
        let mut file = Vec::new();
        for value_len in [100, 700, 3] {
            appender.push(pending(value_len));
            let size = file.len() as u64;
            let plan = appender
                .take(size, u64::MAX, usize::MAX, Offset(u64::MAX))
                .unwrap();
            let mut buffer = vec![0xAA; plan.write_len(512)];
            appender.fill(&plan, &mut buffer);
            assert_eq!(plan.write_position % 512, 0);
            assert_eq!(buffer.len() % 512, 0);
            // What the disk would now hold, and the logical content.
            let logical_end = size as usize + plan.batch_bytes;
            let mut disk = file.clone();
            disk.resize(plan.write_position as usize, 0);
            disk.extend_from_slice(&buffer);
            file.extend(
                plan.batches
                    .iter()
                    .flat_map(|batch| batch.bytes.iter().copied()),
            );
            assert_eq!(&disk[..logical_end], &file[..]);
            assert!(disk[logical_end..].iter().all(|byte| *byte == 0));
            let tail = appender.tail_block_after(&plan, &buffer);
            appender.set_tail_block(tail);
        }
    }

    #[test]
    fn pending_from_starts_at_the_first_batch_at_or_above_the_offset() {
        let mut appender = Appender::new(512, 0, Vec::new());
        for base in [0, 1, 2, 5] {
            let mut batch = pending(10);
            batch.header.base_offset = Offset(base);
            appender.push(batch);
        }
        let bases = |from: u64| -> Vec<u64> {
            appender
                .pending_from(Offset(from))
                .map(|batch| batch.header.base_offset.0)
                .collect()
        };
        assert_eq!(bases(0), [0, 1, 2, 5]);
        assert_eq!(bases(2), [2, 5]);
        assert_eq!(bases(3), [5]);
        assert_eq!(bases(6), Vec::<u64>::new());
    }

    #[test]
    fn take_respects_room_but_always_takes_one_batch() {
        let mut appender = Appender::new(512, 0, Vec::new());
        appender.push(pending(1000));
        appender.push(pending(1000));
        let plan = appender.take(0, 10, usize::MAX, Offset(u64::MAX)).unwrap();
        assert_eq!(plan.batches.len(), 1);
        appender.restore(plan);
        assert_eq!(
            appender.pending_bytes(),
            2 * appender.first_pending_bytes().unwrap()
        );
        let plan = appender
            .take(0, u64::MAX, usize::MAX, Offset(u64::MAX))
            .unwrap();
        assert_eq!(plan.batches.len(), 2);
        assert!(
            appender
                .take(0, u64::MAX, usize::MAX, Offset(u64::MAX))
                .is_none()
        );
    }
}
