//! Removing records from a log: retention of old segments, deletion of
//! segments a snapshot superseded, and truncation of an uncommitted tail
//! (replication reconciling a follower with its leader).

use std::rc::Rc;

use corelog_wire::types::{Offset, TimestampMs};

use super::super::StorageError;
use super::super::deletion_ledger::{DeletedRange, DeletionCause};
use super::super::disk::{Disk, DiskFile};
use super::super::index::SegmentSummary;
use super::super::recovery::{read_tail_block, remove_segment_files};
use super::super::retention::next_deletion;
use super::super::segment::Segment;
use super::PartitionLog;

impl<D: Disk> PartitionLog<D> {
    /// Deletes the oldest closed segment if retention says it is due: records
    /// the deletion in the ledger, persists the new log start, then unlinks.
    /// Deletes at most one segment per call so that callers can pace
    /// deletions (large unlinks stall fsyncs on discard-mounted disks).
    ///
    /// # Errors
    /// [`StorageError::Io`] when the ledger or checkpoint cannot be written;
    /// the log is fenced, as its metadata can no longer be kept durable.
    pub async fn enforce_retention(&self) -> Result<Option<DeletedRange>, StorageError> {
        // Every segment lies below the largest offset: no limit.
        self.enforce_retention_below(Offset(u64::MAX)).await
    }

    /// [`PartitionLog::enforce_retention`], but only for a segment that lies
    /// wholly below `limit`: a replicated partition deletes only committed,
    /// durable records (below its high watermark), whatever retention says.
    ///
    /// # Errors
    /// As [`PartitionLog::enforce_retention`].
    pub async fn enforce_retention_below(
        &self,
        limit: Offset,
    ) -> Result<Option<DeletedRange>, StorageError> {
        let retention = self.config.retention;
        let result = self
            .delete_oldest_if(|closed, total_bytes, now| {
                closed
                    .first()
                    .filter(|oldest| oldest.next_offset <= limit)
                    .and_then(|_| next_deletion(closed, total_bytes, &retention, now))
            })
            .await;
        if let Err(error) = &result
            && error.fences_the_log()
        {
            self.fence(error);
        }
        result
    }

    /// Deletes the oldest closed segment if it lies wholly below `offset`,
    /// recording `cause`: how a compacted partition drops what a newer
    /// snapshot of its state superseded. Call repeatedly to delete more.
    ///
    /// # Errors
    /// As [`PartitionLog::enforce_retention`].
    pub async fn delete_segment_below(
        &self,
        offset: Offset,
        cause: DeletionCause,
    ) -> Result<Option<DeletedRange>, StorageError> {
        let result = self
            .delete_oldest_if(|closed, _, _| {
                closed
                    .first()
                    .filter(|oldest| oldest.next_offset <= offset)
                    .map(|_| cause)
            })
            .await;
        if let Err(error) = &result
            && error.fences_the_log()
        {
            self.fence(error);
        }
        result
    }

    async fn delete_oldest_if(
        &self,
        decide: impl FnOnce(&[SegmentSummary], u64, TimestampMs) -> Option<DeletionCause>,
    ) -> Result<Option<DeletedRange>, StorageError> {
        let metadata = self.metadata.lock().await;
        let now = self.shard.clock.now();
        let (victim, deletion, ledger) = {
            let mut state = self.state.borrow_mut();
            if state.rewriting {
                // A follower's truncation or reset holds the log; the next
                // housekeeping round deletes what is due (sim seed 1863:
                // treating the refusal as a failure fenced the log, and a
                // broker exits on that).
                return Ok(None);
            }
            state.writable()?;
            let closed: Vec<SegmentSummary> = state
                .segments
                .values()
                .take(state.segments.len() - 1)
                .map(|segment| segment.summary())
                .collect();
            let total_bytes = state.segments.values().map(|segment| segment.size()).sum();
            let Some(cause) = decide(&closed, total_bytes, now) else {
                return Ok(None);
            };
            let victim = state
                .segments
                .values()
                .next()
                .expect("a closed segment")
                .clone();
            let summary = victim.summary();
            let deletion = DeletedRange {
                start_offset: summary.base_offset.max(state.log_start),
                end_offset: summary.next_offset,
                bytes: summary.size_bytes,
                record_count: summary.record_count,
                cause,
                deleted_at: now,
            };
            state.ledger.record(deletion);
            // Readers asking below the new start get the gap error from now on;
            // readers already holding the segment finish on it.
            state.log_start = summary.next_offset;
            state.segments.remove(&summary.base_offset);
            state.check_offsets();
            (victim, deletion, state.ledger.clone())
        };
        ledger.store(&self.disk, &self.dir).await?;
        drop(metadata);
        self.store_checkpoint(false).await?;
        unlink_segment(&self.disk, &self.dir, &victim).await?;
        self.disk
            .sync_dir(&self.dir)
            .await
            .map_err(|error| StorageError::io(&self.dir, error))?;
        tracing::info!(
            dir = %self.dir.display(),
            start = deletion.start_offset.0,
            end = deletion.end_offset.0,
            bytes = deletion.bytes,
            cause = deletion.cause.name(),
            "deleted segment"
        );
        Ok(Some(deletion))
    }
}

/// Ends an exclusive rewrite: appends and flushes may proceed again.
struct RewriteGuard<'a, D: Disk> {
    log: &'a PartitionLog<D>,
}

impl<D: Disk> Drop for RewriteGuard<'_, D> {
    fn drop(&mut self) {
        let mut state = self.log.state.borrow_mut();
        state.flushing = false;
        state.rewriting = false;
        drop(state);
        self.log.durable_changed.notify(usize::MAX);
    }
}

impl<D: Disk> PartitionLog<D> {
    /// Takes the log for a rewrite: everything pending made durable (in the
    /// segments, in journal mode too), no flush running, appends refused
    /// (`Busy`) until the guard drops.
    async fn rewrite(&self) -> Result<RewriteGuard<'_, D>, StorageError> {
        loop {
            let (next, listener) = {
                let mut state = self.state.borrow_mut();
                state.writable()?;
                if !state.flushing && state.appender.pending_bytes() == 0 {
                    state.flushing = true;
                    state.rewriting = true;
                    return Ok(RewriteGuard { log: self });
                }
                let listener = state.flushing.then(|| self.durable_changed.listen());
                (state.next_offset, listener)
            };
            match listener {
                Some(listener) => listener.await,
                None => {
                    self.wait_durable(next).await?;
                    self.flush_segment().await?;
                }
            }
        }
    }

    /// In journal mode, makes the journal entries written so far stale
    /// before a rewrite changes the log under them: recovery replays only
    /// entries of the newest generation (see [`super::super::journal`]).
    async fn start_journal_generation(&self) -> Result<(), StorageError> {
        if self.journal.is_none() {
            return Ok(());
        }
        self.state.borrow_mut().journal_generation += 1;
        self.store_checkpoint(false).await
    }

    /// Removes every record at or after `offset`: the uncommitted tail a
    /// follower drops to match its leader. Cuts at the start of the batch
    /// containing `offset`, so the new end may be below it; returns the new
    /// end. Storage knows nothing of high watermarks: the caller (the
    /// replication state machine) asserts that nothing committed is cut.
    ///
    /// # Errors
    /// [`StorageError::InvalidConfig`] below the log start (use
    /// [`PartitionLog::reset_to`]); I/O errors fence the log.
    pub async fn truncate_to(&self, offset: Offset) -> Result<Offset, StorageError> {
        let result = self.truncate_inner(offset).await;
        if let Err(error) = &result
            && error.fences_the_log()
        {
            self.fence(error);
        }
        result
    }

    async fn truncate_inner(&self, offset: Offset) -> Result<Offset, StorageError> {
        let guard = self.rewrite().await?;
        if offset < self.state.borrow().next_offset {
            self.start_journal_generation().await?;
        }
        let _metadata = self.metadata.lock().await;
        let (keep, victims, old_end) = {
            let state = self.state.borrow();
            if offset >= state.next_offset {
                return Ok(state.next_offset);
            }
            if offset < state.log_start {
                return Err(StorageError::InvalidConfig(format!(
                    "cannot truncate to {offset}, below the log start {}; reset the log instead",
                    state.log_start
                )));
            }
            let keep = state
                .segments
                .range(..=offset)
                .next_back()
                .map(|(_, segment)| segment.clone());
            let victims: Vec<Rc<Segment<D>>> = state
                .segments
                .range(offset..)
                .map(|(_, segment)| segment.clone())
                .filter(|segment| {
                    keep.as_ref()
                        .is_none_or(|kept| kept.base() != segment.base())
                })
                .collect();
            (keep, victims, state.next_offset)
        };
        let keep = match keep {
            Some(keep) => keep,
            None => {
                return Err(StorageError::InvalidConfig(
                    "no segment holds the truncation point".to_owned(),
                ));
            }
        };
        let cut = keep.cut_position(offset, &self.config.batch_limits).await?;
        let path = keep.paths().log.clone();
        let file = keep.file().await?;
        file.truncate(cut)
            .await
            .map_err(|error| StorageError::io(&path, error))?;
        file.sync_data()
            .await
            .map_err(|error| StorageError::io(&path, error))?;
        drop(file);
        keep.scan(&self.config.batch_limits).await?;
        for index_file in [&keep.paths().index, &keep.paths().time_index] {
            match self.disk.remove(index_file).await {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(StorageError::io(index_file, error)),
            }
        }
        for victim in &victims {
            unlink_segment(&self.disk, &self.dir, victim).await?;
        }
        self.disk
            .sync_dir(&self.dir)
            .await
            .map_err(|error| StorageError::io(&self.dir, error))?;
        let tail_block = read_tail_block(&keep).await?;
        let new_end = keep.next_offset();
        let now = self.shard.clock.now();
        let ledger = {
            let mut state = self.state.borrow_mut();
            for victim in &victims {
                state.segments.remove(&victim.base());
            }
            let alignment = keep.alignment();
            state.appender =
                super::super::appender::Appender::new(alignment, keep.size(), tail_block);
            state.next_offset = new_end;
            state.durable_end = new_end;
            state.journaled_end = new_end;
            state.check_offsets();
            state.ledger.record(DeletedRange {
                start_offset: new_end,
                end_offset: old_end,
                bytes: 0,
                record_count: old_end.since(new_end),
                cause: DeletionCause::Truncation,
                deleted_at: now,
            });
            state.ledger.clone()
        };
        self.shard.cache.truncate_from(self.partition, new_end);
        ledger.store(&self.disk, &self.dir).await?;
        drop(_metadata);
        self.store_checkpoint(false).await?;
        drop(guard);
        tracing::info!(dir = %self.dir.display(), from = old_end.0, to = new_end.0, "truncated uncommitted tail");
        Ok(new_end)
    }

    /// Discards the whole log and restarts it, empty, at `offset`: a
    /// follower so far behind that its leader no longer holds the records it
    /// needs continues from the leader's log start.
    ///
    /// # Errors
    /// I/O errors, which fence the log.
    pub async fn reset_to(&self, offset: Offset) -> Result<(), StorageError> {
        let result = self.reset_inner(offset).await;
        if let Err(error) = &result
            && error.fences_the_log()
        {
            self.fence(error);
        }
        result
    }

    async fn reset_inner(&self, offset: Offset) -> Result<(), StorageError> {
        let guard = self.rewrite().await?;
        self.start_journal_generation().await?;
        let metadata = self.metadata.lock().await;
        let (victims, old_start, old_end) = {
            let state = self.state.borrow();
            let victims: Vec<Rc<Segment<D>>> = state.segments.values().cloned().collect();
            (victims, state.log_start, state.next_offset)
        };
        for victim in &victims {
            unlink_segment(&self.disk, &self.dir, victim).await?;
        }
        let segment = Segment::create(
            &self.disk,
            &self.dir,
            offset,
            self.config.index_interval_bytes,
            self.shard.clock.now(),
        )
        .await?;
        self.disk
            .sync_dir(&self.dir)
            .await
            .map_err(|error| StorageError::io(&self.dir, error))?;
        let now = self.shard.clock.now();
        let ledger = {
            let mut state = self.state.borrow_mut();
            state.segments.clear();
            let alignment = segment.alignment();
            state.segments.insert(offset, Rc::new(segment));
            state.appender = super::super::appender::Appender::new(alignment, 0, Vec::new());
            state.log_start = offset;
            state.next_offset = offset;
            state.durable_end = offset;
            state.journaled_end = offset;
            state.check_offsets();
            if old_end > old_start {
                state.ledger.record(DeletedRange {
                    start_offset: old_start,
                    end_offset: old_end,
                    bytes: 0,
                    record_count: old_end.since(old_start),
                    cause: DeletionCause::Truncation,
                    deleted_at: now,
                });
            }
            state.ledger.clone()
        };
        self.shard.cache.forget(self.partition);
        ledger.store(&self.disk, &self.dir).await?;
        drop(metadata);
        self.store_checkpoint(false).await?;
        drop(guard);
        tracing::info!(dir = %self.dir.display(), offset = offset.0, "reset the log to start at the leader's log start");
        Ok(())
    }
}

/// Unlinks `victim`'s files. A reader may still hold the segment and finish
/// on it: its file is pinned open first (see [`Segment::pin_open`]). A pin
/// refused for want of descriptors does not stop the deletion: such a
/// reader then fails, and retries below the new log start.
async fn unlink_segment<D: Disk>(
    disk: &D,
    dir: &std::path::Path,
    victim: &Segment<D>,
) -> Result<(), StorageError> {
    if let Err(error) = victim.pin_open().await {
        tracing::debug!(dir = %dir.display(), base = victim.base().0, %error, "deleting a segment whose file could not be kept open for its readers");
    }
    remove_segment_files(disk, dir, victim.base()).await
}
