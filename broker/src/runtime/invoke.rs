//! The one way to reach a shard: [`Shard::invoke_on`] runs a closure on
//! the shard that owns the work and returns its typed answer, as
//! Redpanda's `invoke_on` does. A new shard-bound operation is one
//! function; there is no command enum to extend, dispatch or match.
//!
//! The closure and its answer cross threads, so they are `Send`: owned
//! requests, batches as the bytes they arrived as (never re-encoded). What
//! it builds on the target shard (futures holding `Rc`s) never leaves it.
//! Work for this shard runs inline, without a hop.
//!
//! Each shard's mailbox is a bounded channel. [`Shard::invoke_on`] refuses
//! with `QUEUE_FULL` (retriable) when the owner's mailbox is full, so a
//! client is never held by an unbounded queue; [`Shard::invoke_on_waiting`]
//! waits for room instead, for control work that must arrive (metadata
//! snapshots, readiness). Tasks start in arrival order, so work sent in
//! order for one partition starts in order.

use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use corelog_wire::error::ErrorCode;
use futures::FutureExt;
use futures::channel::oneshot;

use super::shard::Shard;
use crate::metadata::ShardId;
use crate::partition::PartitionError;

/// Work sent to a shard: called there, it spawns the work on the shard's
/// executor (the work's future is built and allocated once, by the spawn).
pub type Task = Box<dyn FnOnce(Rc<Shard>) + Send>;

/// What a shard's mailbox carries.
pub enum Letter {
    /// Start this task (spawned, so that a slow one does not hold the next).
    Run(Task),
    /// Finish in-flight work, close every partition, stop reading the mailbox.
    Stop,
}

impl std::fmt::Debug for Letter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Letter::Run(_) => "Letter::Run",
            Letter::Stop => "Letter::Stop",
        })
    }
}

/// A shard's mailbox: where other shards' letters arrive.
pub type Mailbox = flume::Receiver<Letter>;
/// The sending end of a shard's mailbox.
pub type Address = flume::Sender<Letter>;

/// The bounded mailboxes of `shards` shards, each `depth` letters deep: the
/// addresses (every shard gets all of them) and the mailboxes, by index.
#[must_use]
pub fn mailboxes(shards: u16, depth: usize) -> (Vec<Address>, Vec<Mailbox>) {
    (0..shards).map(|_| flume::bounded(depth)).unzip()
}

/// Asks every shard behind `addresses` to stop (waiting for room: a stop
/// must arrive).
pub fn stop_all(addresses: &[Address]) {
    for address in addresses {
        // A shard already gone has nothing left to stop.
        let _stopping = address.send(Letter::Stop);
    }
}

/// Runs `work` on the shard behind `address` from a thread that is not a
/// shard's (the signal handler's) and blocks until its answer, at most
/// `timeout`; `None` when the shard is gone or did not answer in time.
pub fn invoke_from_outside<T, F, Fut>(address: &Address, work: F, timeout: Duration) -> Option<T>
where
    F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let (reply, answer) = flume::bounded(1);
    let task: Task = Box::new(move |shard| {
        glommio::spawn_local(async move {
            // The asker may have given up waiting: nothing to do.
            let _answered = reply.send(work(shard).await);
        })
        .detach();
    });
    address.send_timeout(Letter::Run(task), timeout).ok()?;
    answer.recv_timeout(timeout).ok()
}

impl Shard {
    /// Runs `work` on shard `owner` and returns its answer: here at once
    /// when `owner` is this shard, else queued to its mailbox now (so that
    /// calls made in order are queued in order), refused with `QUEUE_FULL`
    /// when it is full.
    ///
    /// # Errors
    /// `QUEUE_FULL` (retriable) when the owner's mailbox is full;
    /// `LEADER_NOT_AVAILABLE` when the owner stopped (the broker is
    /// stopping) or there is no such shard.
    pub fn invoke_on<T, F, Fut>(
        &self,
        owner: ShardId,
        work: F,
    ) -> impl Future<Output = Result<T, PartitionError>> + use<T, F, Fut>
    where
        F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        enum Route<F, T> {
            Here(Rc<Shard>, F),
            There(oneshot::Receiver<T>),
            Refused(PartitionError),
        }
        let route = if owner == self.id {
            Route::Here(self.rc(), work)
        } else {
            let (task, answer) = task(work);
            match self.send_now(owner, task) {
                Ok(()) => Route::There(answer),
                Err(error) => Route::Refused(error),
            }
        };
        async move {
            match route {
                Route::Here(shard, work) => Ok(work(shard).await),
                Route::There(answer) => answer.await.map_err(|_| owner_stopped()),
                Route::Refused(error) => Err(error),
            }
        }
    }

    /// [`Shard::invoke_on`] for work whose answer is itself a result with a
    /// [`PartitionError`]: the two failures in one.
    ///
    /// # Errors
    /// As [`Shard::invoke_on`], or the work's own error.
    pub fn try_invoke_on<T, F, Fut>(
        &self,
        owner: ShardId,
        work: F,
    ) -> impl Future<Output = Result<T, PartitionError>> + use<T, F, Fut>
    where
        F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, PartitionError>> + 'static,
        T: Send + 'static,
    {
        // A combinator, not an async block: the block would hold the
        // invoked future twice (captured, and being awaited), and a
        // produce's boxed future is one of these.
        self.invoke_on(owner, work)
            .map(|invoked| invoked.and_then(std::convert::identity))
    }

    /// [`Shard::invoke_on`] that waits for room in a full mailbox instead
    /// of refusing: for control work that must arrive (metadata
    /// snapshots, readiness, the controller's report), never for a
    /// client's request.
    ///
    /// # Errors
    /// `LEADER_NOT_AVAILABLE` when the owner stopped or there is no such
    /// shard.
    pub async fn invoke_on_waiting<T, F, Fut>(
        &self,
        owner: ShardId,
        work: F,
    ) -> Result<T, PartitionError>
    where
        F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        if owner == self.id {
            return Ok(work(self.rc()).await);
        }
        let (task, answer) = task(work);
        self.address(owner)?
            .send_async(Letter::Run(task))
            .await
            .map_err(|_| owner_stopped())?;
        answer.await.map_err(|_| owner_stopped())
    }

    /// This shard's own `Rc`: a shard lives in one from its start to its
    /// end, so a borrow of it means the `Rc` is alive.
    pub(super) fn rc(&self) -> Rc<Shard> {
        self.me
            .upgrade()
            .expect("a shard is borrowed only while its Rc lives")
    }

    /// Every other shard of this broker, by id.
    pub(super) fn other_shard_ids(&self) -> impl Iterator<Item = ShardId> + use<> {
        let me = self.id;
        (0..self.config.shards)
            .map(ShardId)
            .filter(move |shard| *shard != me)
    }

    fn address(&self, owner: ShardId) -> Result<&Address, PartitionError> {
        self.peers.get(owner.index()).ok_or_else(|| {
            PartitionError::new(ErrorCode::UnknownServerError, format!("no shard {owner}"))
        })
    }

    /// Queues `task` to shard `owner` now, or says why it cannot go.
    fn send_now(&self, owner: ShardId, task: Task) -> Result<(), PartitionError> {
        self.address(owner)?
            .try_send(Letter::Run(task))
            .map_err(|error| match error {
                flume::TrySendError::Full(_) => PartitionError::new(
                    ErrorCode::QueueFull,
                    format!(
                        "shard {owner} has {} requests queued; retry",
                        self.config.shard_queue_depth
                    ),
                ),
                flume::TrySendError::Disconnected(_) => owner_stopped(),
            })
    }
}

/// `work` as a task that answers on the returned receiver.
fn task<T, F, Fut>(work: F) -> (Task, oneshot::Receiver<T>)
where
    F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let (reply, answer) = oneshot::channel();
    let task: Task = Box::new(move |shard| {
        glommio::spawn_local(async move {
            // The asker may have given up (its client left): nothing to do.
            let _answered = reply.send(work(shard).await);
        })
        .detach();
    });
    (task, answer)
}

/// The answer of work whose shard stopped before answering.
pub(super) fn owner_stopped() -> PartitionError {
    PartitionError::new(ErrorCode::LeaderNotAvailable, "the owning shard stopped")
}
