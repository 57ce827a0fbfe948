//! Replication streams: the pushes of every partition a shard leads travel
//! to each follower broker in shared frames (`ReplicaStream`), not one RPC
//! per partition, so the RPC rate, and the follower's fsync rate, follow the
//! shard's commit rate rather than its partition count (as Kafka's replica
//! fetcher batches partitions per broker pair).
//!
//! The state machine stays per partition and sees nothing of this: each
//! replica's [`PushTransport`] is a [`StreamPushTransport`], whose
//! `send_push` queues the push on its follower's stream and resolves with
//! that push's own acknowledgement, cut out of the frame's answer.
//!
//! A stream keeps a few frames in flight per follower
//! ([`StreamLimits::frames_in_flight_max`], two in the broker). A frame
//! takes everything queued for its follower (up to a byte and a count
//! budget), so under load the pushes that pile up while frames are in
//! flight leave together in the next one; when idle, a push waits only for
//! the other partitions' pushes of the same executor turn.
//!
//! Memory is bounded: a follower's queue takes no more pushes once it holds
//! [`StreamLimits::queued_bytes_max`] bytes or [`QUEUED_PUSHES_MAX`]
//! pushes. A follower that does not keep up (down, cut off, slow to sync)
//! gets its later pushes failed at once, which the state machines treat as
//! lost pushes and resend after their timeout, instead of a backlog of
//! heartbeats and resends growing for as long as it is gone.
//!
//! Loss, duplication and reordering of frames are as safe as they are for
//! single pushes (the contract of [`PushTransport`]): a lost frame fails its
//! pushes (the state machine resends on its timeout), and a duplicated or
//! late one is answered with mismatches. The simulator carries frames over
//! its faulty network with this very code.
//!
//! The follower's side is the runtime's (`runtime::replicas::serve_stream_frame`,
//! the frame cut by `corelog_replication::wire::split_stream_frame`): each
//! push goes to its partition's replica, every push of the frame at once,
//! so their appends share the follower's group commit, and the answers go
//! back in frame order.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use ahash::AHashMap;
use bytes::Bytes;
use corelog_replication::{Push, PushAck, ReplicaId};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::replica_push::ReplicaPushRequest;
use corelog_wire::message::replica_stream::{
    PUSHES_PER_FRAME_MAX, ReplicaStreamRequest, ReplicaStreamResponse,
};
use corelog_wire::types::{LeaderEpoch, PartitionId};
use futures::channel::oneshot;
use futures::future::LocalBoxFuture;

use super::{PushTransport, TransportError};
use crate::executor::{self, Executor};

/// Pushes one follower's queue holds before it takes no more, whatever
/// their bytes (heartbeats carry none): four full frames.
pub const QUEUED_PUSHES_MAX: usize = 4 * PUSHES_PER_FRAME_MAX;

/// How much a frame carries, how many are in flight, and how much waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamLimits {
    /// Batch bytes of one frame; a single larger push still goes, alone.
    pub frame_bytes_max: usize,
    /// Pushes of one frame, at most the wire's [`PUSHES_PER_FRAME_MAX`].
    pub frame_pushes_max: usize,
    /// Frames one follower may have unanswered at once.
    pub frames_in_flight_max: usize,
    /// Batch bytes one follower's queue holds before it takes no more
    /// pushes (it may go over by the push that reaches it).
    pub queued_bytes_max: usize,
}

impl StreamLimits {
    /// Frames of at most `frame_bytes_max` batch bytes and as many pushes
    /// as the wire allows; two in flight per follower (they keep the link
    /// busy while the follower syncs one; more would only cut the same
    /// pushes into smaller frames); four frames' worth queued (enough to
    /// fill the next frames meanwhile).
    #[must_use]
    pub fn for_frame_bytes(frame_bytes_max: usize) -> Self {
        Self {
            frame_bytes_max,
            frame_pushes_max: PUSHES_PER_FRAME_MAX,
            frames_in_flight_max: 2,
            queued_bytes_max: frame_bytes_max.saturating_mul(4),
        }
    }
}

/// Carries one frame to a follower broker and brings back its answer: the
/// inter-broker RPC in production, the simulated network in `sim/`.
///
/// Contract: the future resolves with the follower's answer to this frame,
/// or with an error (why, for the log) once the carrier gives up, within a
/// bounded time.
pub trait FrameCarrier {
    /// Sends `request`, with `raw` (each push's batches, in push order) as
    /// its raw section, to broker `to`.
    fn carry(
        &self,
        to: ReplicaId,
        request: ReplicaStreamRequest,
        raw: Vec<Bytes>,
    ) -> LocalBoxFuture<'_, Result<ReplicaStreamResponse, String>>;
}

/// What the streams report as they go: the shard's metrics in the broker.
pub trait StreamObserver {
    /// A frame of `pushes` pushes and `bytes` batch bytes left for a
    /// follower.
    fn on_frame(&self, pushes: usize, bytes: usize);

    /// A push was failed at once: its follower's queue was full.
    fn on_push_refused(&self);
}

/// Observes nothing (tests and the simulator).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoStreamObserver;

impl StreamObserver for NoStreamObserver {
    fn on_frame(&self, _pushes: usize, _bytes: usize) {}

    fn on_push_refused(&self) {}
}

/// The streams of one shard (its leaders' pushes), one per follower broker.
pub struct ReplicationStreams {
    leader: ReplicaId,
    carrier: Rc<dyn FrameCarrier>,
    observer: Rc<dyn StreamObserver>,
    executor: Rc<dyn Executor>,
    limits: StreamLimits,
    followers: RefCell<AHashMap<ReplicaId, FollowerStream>>,
}

impl std::fmt::Debug for ReplicationStreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicationStreams")
            .field("leader", &self.leader)
            .field("followers", &self.followers.borrow().len())
            .finish_non_exhaustive()
    }
}

/// What is queued for, and in flight to, one follower.
#[derive(Default)]
struct FollowerStream {
    queued: VecDeque<Queued>,
    /// Batch bytes of `queued`.
    queued_bytes: usize,
    in_flight: usize,
    /// A task will take the queue into a frame; no second one is needed.
    flush_scheduled: bool,
}

/// A push waiting for a frame.
struct Queued {
    request: ReplicaPushRequest,
    batches: Vec<Bytes>,
    waiting: Waiting,
}

/// A push sent, waiting for its acknowledgement.
struct Waiting {
    partition: PartitionId,
    epoch: LeaderEpoch,
    reply: oneshot::Sender<Result<PushAck, TransportError>>,
}

impl Waiting {
    fn answer(self, ack: Result<PushAck, TransportError>) {
        // A replica that stopped waiting (closed, stepped down) no longer
        // cares.
        let _gone = self.reply.send(ack);
    }
}

impl Queued {
    fn bytes(&self) -> usize {
        self.request.records_len as usize
    }
}

/// The pushes of one frame, with where each answer goes.
struct Frame {
    request: ReplicaStreamRequest,
    raw: Vec<Bytes>,
    waiting: Vec<Waiting>,
}

impl ReplicationStreams {
    /// The streams of a shard of broker `leader`, over `carrier`.
    #[must_use]
    pub fn new(
        leader: ReplicaId,
        carrier: Rc<dyn FrameCarrier>,
        executor: Rc<dyn Executor>,
        limits: StreamLimits,
        observer: Rc<dyn StreamObserver>,
    ) -> Rc<Self> {
        Rc::new(Self {
            leader,
            carrier,
            observer,
            executor,
            limits: StreamLimits {
                frame_pushes_max: limits.frame_pushes_max.clamp(1, PUSHES_PER_FRAME_MAX),
                frames_in_flight_max: limits.frames_in_flight_max.max(1),
                ..limits
            },
            followers: RefCell::new(AHashMap::new()),
        })
    }

    /// The transport of one partition's replica over these streams.
    #[must_use]
    pub fn transport(self: &Rc<Self>, partition: PartitionId) -> StreamPushTransport {
        StreamPushTransport {
            streams: Rc::clone(self),
            partition,
        }
    }

    /// Pushes queued or in flight to `to`, for tests and gauges.
    #[must_use]
    pub fn pending(&self, to: ReplicaId) -> (usize, usize) {
        self.followers
            .borrow()
            .get(&to)
            .map_or((0, 0), |stream| (stream.queued.len(), stream.in_flight))
    }

    /// Queues `push` for `to`, or fails it at once when `to`'s queue is
    /// full.
    fn submit(
        self: &Rc<Self>,
        to: ReplicaId,
        push: Push,
    ) -> Result<oneshot::Receiver<Result<PushAck, TransportError>>, TransportError> {
        let (reply, answer) = oneshot::channel();
        let queued = Queued {
            request: push.to_wire(),
            batches: push.batches.into_iter().map(|batch| batch.bytes).collect(),
            waiting: Waiting {
                partition: push.partition,
                epoch: push.epoch,
                reply,
            },
        };
        {
            let mut followers = self.followers.borrow_mut();
            let stream = followers.entry(to).or_default();
            // Full once it holds its worth: any push is taken below that, so
            // a stream of small heartbeats never keeps a large push out.
            let full = stream.queued.len() >= QUEUED_PUSHES_MAX
                || stream.queued_bytes >= self.limits.queued_bytes_max;
            if full {
                self.observer.on_push_refused();
                return Err(TransportError::Unreachable {
                    to,
                    reason: format!(
                        "the replication stream is backed up ({} pushes, {} bytes queued); \
                         the push is resent after its timeout",
                        stream.queued.len(),
                        stream.queued_bytes
                    ),
                });
            }
            stream.queued_bytes += queued.bytes();
            stream.queued.push_back(queued);
        }
        self.schedule_flush(to);
        Ok(answer)
    }

    /// Starts a task that frames `to`'s queue, unless one is coming or the
    /// follower has as many frames in flight as it may.
    fn schedule_flush(self: &Rc<Self>, to: ReplicaId) {
        {
            let mut followers = self.followers.borrow_mut();
            let Some(stream) = followers.get_mut(&to) else {
                return;
            };
            if stream.flush_scheduled
                || stream.queued.is_empty()
                || stream.in_flight >= self.limits.frames_in_flight_max
            {
                return;
            }
            stream.flush_scheduled = true;
        }
        let this = Rc::clone(self);
        executor::spawn(&*self.executor, async move {
            // The other partitions' pushes of this turn join the frame.
            YieldOnce::default().await;
            let frame = this.take_frame(to);
            if let Some(frame) = frame {
                this.send(to, frame).await;
            }
        });
    }

    /// Takes the front of `to`'s queue, within the frame budget, as a frame
    /// now in flight (and schedules the next one if more is queued).
    fn take_frame(self: &Rc<Self>, to: ReplicaId) -> Option<Frame> {
        let frame = {
            let mut followers = self.followers.borrow_mut();
            let stream = followers.get_mut(&to)?;
            stream.flush_scheduled = false;
            let mut frame = Frame {
                request: ReplicaStreamRequest {
                    leader: self.leader.0,
                    pushes: Vec::new(),
                },
                raw: Vec::new(),
                waiting: Vec::new(),
            };
            let mut bytes = 0usize;
            while let Some(next) = stream.queued.front() {
                // A single push larger than the budget still goes, alone.
                let full = frame.waiting.len() >= self.limits.frame_pushes_max
                    || (!frame.waiting.is_empty()
                        && bytes + next.bytes() > self.limits.frame_bytes_max);
                if full {
                    break;
                }
                let Some(queued) = stream.queued.pop_front() else {
                    break;
                };
                stream.queued_bytes -= queued.bytes();
                bytes += queued.bytes();
                frame.request.pushes.push(queued.request);
                frame.raw.extend(queued.batches);
                frame.waiting.push(queued.waiting);
            }
            if frame.waiting.is_empty() {
                return None;
            }
            self.observer.on_frame(frame.waiting.len(), bytes);
            stream.in_flight += 1;
            frame
        };
        self.schedule_flush(to);
        Some(frame)
    }

    async fn send(self: &Rc<Self>, to: ReplicaId, frame: Frame) {
        let Frame {
            request,
            raw,
            waiting,
        } = frame;
        let answer = self.carrier.carry(to, request, raw).await;
        if let Some(stream) = self.followers.borrow_mut().get_mut(&to) {
            stream.in_flight -= 1;
        }
        answer_each(to, waiting, answer);
        self.schedule_flush(to);
    }
}

/// Answers each waiting push with its acknowledgement from the frame's
/// answer, or with the frame's failure.
fn answer_each(
    to: ReplicaId,
    waiting: Vec<Waiting>,
    answer: Result<ReplicaStreamResponse, String>,
) {
    let failure = match answer {
        Err(reason) => TransportError::Unreachable { to, reason },
        Ok(response) if response.error_code != ErrorCode::None.code() => TransportError::Refused {
            to,
            code: ErrorCode::from_code(response.error_code)
                .unwrap_or(ErrorCode::UnknownServerError),
            message: response.error_message.unwrap_or_default(),
        },
        Ok(response) if response.answers.len() != waiting.len() => TransportError::Unreachable {
            to,
            reason: format!(
                "the follower answered {} of the frame's {} pushes",
                response.answers.len(),
                waiting.len()
            ),
        },
        Ok(response) => {
            for (push, answer) in waiting.into_iter().zip(response.answers) {
                let ack =
                    PushAck::from_wire(to, push.partition, push.epoch, answer).map_err(|refusal| {
                        TransportError::Refused {
                            to,
                            code: refusal.code,
                            message: refusal.message,
                        }
                    });
                push.answer(ack);
            }
            return;
        }
    };
    for push in waiting {
        push.answer(Err(failure.clone()));
    }
}

/// One partition's pushes, over its shard's [`ReplicationStreams`].
pub struct StreamPushTransport {
    streams: Rc<ReplicationStreams>,
    partition: PartitionId,
}

impl std::fmt::Debug for StreamPushTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamPushTransport")
            .field("partition", &self.partition)
            .finish_non_exhaustive()
    }
}

impl PushTransport for StreamPushTransport {
    fn send_push(
        &self,
        to: ReplicaId,
        push: Push,
    ) -> LocalBoxFuture<'_, Result<PushAck, TransportError>> {
        // Queued now, in call order: pushes to one follower keep their order.
        debug_assert_eq!(
            push.partition, self.partition,
            "a push of another partition"
        );
        let submitted = self.streams.submit(to, push);
        Box::pin(async move {
            submitted?.await.unwrap_or_else(|_| {
                Err(TransportError::Unreachable {
                    to,
                    reason: "the replication stream stopped".to_owned(),
                })
            })
        })
    }
}

#[cfg(test)]
mod tests;

/// Pending once, then ready: lets the tasks already woken run first, on
/// any executor.
#[derive(Default)]
struct YieldOnce {
    yielded: bool,
}

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
