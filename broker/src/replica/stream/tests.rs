//! The stream's framing, flow control, failure and backlog rules against a
//! scripted carrier that the test answers by hand; the follower's side
//! (`runtime::replicas::serve_stream_frame`) against plain closures.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use corelog_replication::{Batch, Push, PushAck, PushResult, ReplicaId};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::replica_push::{
    PushResult as WirePushResult, ReplicaPushRequest, ReplicaPushResponse,
};
use corelog_wire::message::replica_stream::{
    PUSHES_PER_FRAME_MAX, ReplicaStreamRequest, ReplicaStreamResponse,
};
use corelog_wire::types::{LeaderEpoch, Offset, PartitionId};
use futures::channel::oneshot;
use futures::future::LocalBoxFuture;
use glommio::{LocalExecutorBuilder, Placement};

use super::*;
use crate::executor::GlommioExecutor;
use crate::runtime::replicas::serve_stream_frame;

const LEADER: ReplicaId = ReplicaId(1);
const TOPIC: u64 = 7;

fn on_executor<Fut: Future<Output = ()>>(test: impl FnOnce() -> Fut) {
    let executor = LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(1 << 20)
        .make()
        .expect("glommio executor starts");
    executor.run(test());
}

/// Lets every task that is ready run (the streams' flush tasks yield once
/// before they take a frame).
async fn settle() {
    for _ in 0..8 {
        YieldOnce::default().await;
    }
}

/// A frame the carrier was given, with the means to answer it.
struct Sent {
    to: ReplicaId,
    request: ReplicaStreamRequest,
    raw: Vec<Bytes>,
    answer: Option<oneshot::Sender<Result<ReplicaStreamResponse, String>>>,
}

/// Keeps every frame until the test answers it.
#[derive(Default)]
struct ScriptedCarrier {
    sent: RefCell<Vec<Sent>>,
}

impl FrameCarrier for ScriptedCarrier {
    fn carry(
        &self,
        to: ReplicaId,
        request: ReplicaStreamRequest,
        raw: Vec<Bytes>,
    ) -> LocalBoxFuture<'_, Result<ReplicaStreamResponse, String>> {
        let (answer, answered) = oneshot::channel();
        self.sent.borrow_mut().push(Sent {
            to,
            request,
            raw,
            answer: Some(answer),
        });
        Box::pin(async move {
            answered
                .await
                .unwrap_or_else(|_| Err("never answered".to_owned()))
        })
    }
}

impl ScriptedCarrier {
    /// (follower, (partition, start) of each push) of every frame sent.
    fn frames(&self) -> Vec<(u32, Vec<(u32, u64)>)> {
        self.sent
            .borrow()
            .iter()
            .map(|sent| {
                let pushes = sent
                    .request
                    .pushes
                    .iter()
                    .map(|push| (push.partition, push.start))
                    .collect();
                (sent.to.0, pushes)
            })
            .collect()
    }

    fn answer(&self, frame: usize, answer: Result<ReplicaStreamResponse, String>) {
        let sender = self.sent.borrow_mut()[frame].answer.take().unwrap();
        sender.send(answer).unwrap();
    }

    /// Answers frame `frame` with an `Ok` per push whose durable end is the
    /// push's start plus 100.
    fn acknowledge(&self, frame: usize) {
        let answers = self.sent.borrow()[frame]
            .request
            .pushes
            .iter()
            .map(|push| ok_answer(push.start + 100))
            .collect();
        self.answer(frame, Ok(frame_answer(answers)));
    }
}

fn ok_answer(durable_end: u64) -> ReplicaPushResponse {
    ReplicaPushResponse {
        error_code: ErrorCode::None.code(),
        error_message: None,
        result: WirePushResult::Ok {
            durable_end,
            log_end: durable_end,
        },
    }
}

fn frame_answer(answers: Vec<ReplicaPushResponse>) -> ReplicaStreamResponse {
    ReplicaStreamResponse {
        error_code: ErrorCode::None.code(),
        error_message: None,
        answers,
    }
}

/// Counts what the streams report.
#[derive(Default)]
struct Counted {
    frames: Cell<usize>,
    pushes: Cell<usize>,
    refused: Cell<usize>,
}

impl StreamObserver for Counted {
    fn on_frame(&self, pushes: usize, _bytes: usize) {
        self.frames.set(self.frames.get() + 1);
        self.pushes.set(self.pushes.get() + pushes);
    }

    fn on_push_refused(&self) {
        self.refused.set(self.refused.get() + 1);
    }
}

/// The broker's limits for frames of `frame_bytes_max` bytes.
fn streams(carrier: &Rc<ScriptedCarrier>, frame_bytes_max: usize) -> Rc<ReplicationStreams> {
    observed_streams(carrier, frame_bytes_max, Rc::new(NoStreamObserver))
}

fn observed_streams(
    carrier: &Rc<ScriptedCarrier>,
    frame_bytes_max: usize,
    observer: Rc<dyn StreamObserver>,
) -> Rc<ReplicationStreams> {
    ReplicationStreams::new(
        LEADER,
        carrier.clone(),
        Rc::new(GlommioExecutor),
        StreamLimits::for_frame_bytes(frame_bytes_max),
        observer,
    )
}

const FRAMES_IN_FLIGHT_MAX: usize = 2;
const QUEUED_FRAMES_MAX: usize = 4;

fn partition_id(partition: u32) -> PartitionId {
    PartitionId {
        topic_id: TOPIC,
        partition,
    }
}

/// A push of partition `partition` from `start`, carrying `bytes` bytes of
/// batch (one batch; its contents do not matter to the stream).
fn push(partition: u32, start: u64, bytes: usize) -> Push {
    let batches = if bytes == 0 {
        Vec::new()
    } else {
        vec![Batch {
            base: Offset(start),
            last: Offset(start),
            epoch: LeaderEpoch(3),
            bytes: Bytes::from(vec![partition as u8; bytes]),
        }]
    };
    Push {
        partition: partition_id(partition),
        epoch: LeaderEpoch(3),
        leader: LEADER,
        start: Offset(start),
        prev_epoch: Some(LeaderEpoch(3)),
        reset_to: None,
        hw: Offset(start),
        log_start: Offset(0),
        batches,
    }
}

/// Sends a push of partition `partition` (see [`push`]) to `to` through
/// the partition's transport, on a task of its own as the replica shell
/// does; the acknowledgement lands in the returned cell.
fn send(
    streams: &Rc<ReplicationStreams>,
    to: u32,
    partition: u32,
    start: u64,
    bytes: usize,
) -> Landed {
    let transport = streams.transport(partition_id(partition));
    let landed = Rc::new(RefCell::new(None));
    let cell = landed.clone();
    glommio::spawn_local(async move {
        let result = transport
            .send_push(ReplicaId(to), push(partition, start, bytes))
            .await;
        *cell.borrow_mut() = Some(result);
    })
    .detach();
    landed
}

type Landed = Rc<RefCell<Option<Result<PushAck, TransportError>>>>;

fn durable_end(landed: &Landed) -> Option<u64> {
    match landed.borrow().as_ref()? {
        Ok(PushAck {
            result: PushResult::Ok { durable_end, .. },
            ..
        }) => Some(durable_end.0),
        other => panic!("not an Ok acknowledgement: {other:?}"),
    }
}

#[test]
fn pushes_of_one_turn_leave_in_one_frame_per_follower_and_each_gets_its_own_ack() {
    on_executor(|| async {
        let carrier = Rc::new(ScriptedCarrier::default());
        let streams = streams(&carrier, 1 << 20);
        let first = send(&streams, 2, 1, 10, 100);
        let second = send(&streams, 2, 2, 20, 50);
        let third = send(&streams, 2, 3, 30, 0);
        let elsewhere = send(&streams, 3, 1, 10, 100);
        settle().await;

        let mut frames = carrier.frames();
        frames.sort();
        assert_eq!(
            frames,
            [(2, vec![(1, 10), (2, 20), (3, 30)]), (3, vec![(1, 10)])]
        );
        // The raw section is each push's batches, in push order.
        let to_two = carrier
            .sent
            .borrow()
            .iter()
            .position(|sent| sent.to == ReplicaId(2))
            .unwrap();
        let lengths: Vec<usize> = carrier.sent.borrow()[to_two]
            .raw
            .iter()
            .map(Bytes::len)
            .collect();
        assert_eq!(lengths, [100, 50]);

        carrier.acknowledge(to_two);
        settle().await;
        assert_eq!(durable_end(&first), Some(110));
        assert_eq!(durable_end(&second), Some(120));
        assert_eq!(durable_end(&third), Some(130));
        assert!(elsewhere.borrow().is_none(), "follower 3 has not answered");
        let acked = first.borrow();
        let Some(Ok(ack)) = acked.as_ref() else {
            panic!("no ack")
        };
        assert_eq!(
            (ack.partition, ack.epoch, ack.from),
            (partition_id(1), LeaderEpoch(3), ReplicaId(2))
        );
    });
}

#[test]
fn a_follower_has_two_frames_in_flight_and_what_waits_leaves_together() {
    on_executor(|| async {
        let carrier = Rc::new(ScriptedCarrier::default());
        let streams = streams(&carrier, 1 << 20);
        send(&streams, 2, 1, 0, 10);
        settle().await;
        send(&streams, 2, 1, 1, 10);
        settle().await;
        let third = send(&streams, 2, 1, 2, 10);
        settle().await;
        let fourth = send(&streams, 2, 2, 0, 10);
        settle().await;
        assert_eq!(carrier.frames().len(), FRAMES_IN_FLIGHT_MAX);
        assert_eq!(streams.pending(ReplicaId(2)), (2, 2));

        carrier.acknowledge(0);
        settle().await;
        assert_eq!(
            carrier.frames()[2],
            (2, vec![(1, 2), (2, 0)]),
            "the pushes queued meanwhile share the next frame, in order"
        );
        carrier.acknowledge(1);
        carrier.acknowledge(2);
        settle().await;
        assert_eq!(durable_end(&third), Some(102));
        assert_eq!(durable_end(&fourth), Some(100));
        assert_eq!(streams.pending(ReplicaId(2)), (0, 0));
    });
}

#[test]
fn a_frame_keeps_to_its_byte_budget_but_a_larger_push_goes_alone() {
    on_executor(|| async {
        let carrier = Rc::new(ScriptedCarrier::default());
        let streams = streams(&carrier, 100);
        for (partition, bytes) in [(1, 60), (2, 30), (3, 20), (4, 250), (5, 10)] {
            send(&streams, 2, partition, 0, bytes);
        }
        settle().await;
        for frame in 0..5 {
            if carrier.frames().len() > frame {
                carrier.acknowledge(frame);
                settle().await;
            }
        }
        let frames: Vec<Vec<u32>> = carrier
            .frames()
            .into_iter()
            .map(|(_, pushes)| pushes.into_iter().map(|(partition, _)| partition).collect())
            .collect();
        assert_eq!(frames, [vec![1, 2], vec![3], vec![4], vec![5]]);
    });
}

#[test]
fn a_failed_or_refused_frame_fails_each_of_its_pushes() {
    on_executor(|| async {
        let carrier = Rc::new(ScriptedCarrier::default());
        let streams = streams(&carrier, 1 << 20);
        let outcomes = [
            Err("connection reset".to_owned()),
            Ok(ReplicaStreamResponse {
                error_code: ErrorCode::InvalidRequest.code(),
                error_message: Some("too many pushes".to_owned()),
                answers: Vec::new(),
            }),
            // One answer for a frame of two pushes.
            Ok(frame_answer(vec![ok_answer(5)])),
        ];
        for (frame, outcome) in outcomes.into_iter().enumerate() {
            let pushes = [send(&streams, 2, 1, 0, 10), send(&streams, 2, 2, 0, 10)];
            settle().await;
            carrier.answer(frame, outcome);
            settle().await;
            for landed in &pushes {
                let landed = landed.borrow();
                let Some(Err(error)) = landed.as_ref() else {
                    panic!("frame {frame}: a push got {landed:?}");
                };
                let expected = match frame {
                    1 => matches!(
                        error,
                        TransportError::Refused {
                            code: ErrorCode::InvalidRequest,
                            ..
                        }
                    ),
                    _ => matches!(error, TransportError::Unreachable { .. }),
                };
                assert!(expected, "frame {frame}: {error}");
            }
        }
    });
}

#[test]
fn one_refused_push_does_not_fail_the_others_of_its_frame() {
    on_executor(|| async {
        let carrier = Rc::new(ScriptedCarrier::default());
        let streams = streams(&carrier, 1 << 20);
        let kept = send(&streams, 2, 1, 0, 10);
        let refused = send(&streams, 2, 2, 0, 10);
        settle().await;
        let not_replica = ReplicaPushResponse {
            error_code: ErrorCode::NotLeader.code(),
            error_message: Some("no such replica".to_owned()),
            result: WirePushResult::NotReplica,
        };
        carrier.answer(0, Ok(frame_answer(vec![ok_answer(9), not_replica])));
        settle().await;
        assert_eq!(durable_end(&kept), Some(9));
        assert!(matches!(
            refused.borrow().as_ref(),
            Some(Err(TransportError::Refused { .. }))
        ));
    });
}

#[test]
fn a_backed_up_stream_fails_further_pushes_at_once() {
    on_executor(|| async {
        let carrier = Rc::new(ScriptedCarrier::default());
        let frame_bytes_max = 100;
        let counted = Rc::new(Counted::default());
        let streams = observed_streams(&carrier, frame_bytes_max, counted.clone());
        // Two frames in flight that are never answered: the follower hangs.
        send(&streams, 2, 1, 0, 100);
        settle().await;
        send(&streams, 2, 1, 1, 100);
        settle().await;
        assert_eq!(carrier.frames().len(), FRAMES_IN_FLIGHT_MAX);
        let queued: Vec<Landed> = (0..QUEUED_FRAMES_MAX)
            .map(|i| send(&streams, 2, 2, i as u64, frame_bytes_max))
            .collect();
        let refused = send(&streams, 2, 3, 0, 1);
        let other_follower = send(&streams, 3, 3, 0, 1);
        settle().await;
        assert_eq!(streams.pending(ReplicaId(2)), (QUEUED_FRAMES_MAX, 2));
        assert!(queued.iter().all(|landed| landed.borrow().is_none()));
        let refused = refused.borrow();
        let Some(Err(TransportError::Unreachable { reason, .. })) = refused.as_ref() else {
            panic!("the push over the bound got {refused:?}");
        };
        assert!(reason.contains("backed up"), "{reason}");
        assert!(
            other_follower.borrow().is_none(),
            "another follower's stream is not affected"
        );
        assert_eq!(carrier.frames().len(), FRAMES_IN_FLIGHT_MAX + 1);
        assert_eq!(
            (
                counted.frames.get(),
                counted.pushes.get(),
                counted.refused.get()
            ),
            (3, 3, 1)
        );
    });
}

#[test]
fn a_frame_carries_at_most_its_push_count() {
    on_executor(|| async {
        let carrier = Rc::new(ScriptedCarrier::default());
        let streams = streams(&carrier, 1 << 20);
        for partition in 0..=PUSHES_PER_FRAME_MAX {
            let partition = partition as u32;
            let transport = streams.transport(partition_id(partition));
            glommio::spawn_local(async move {
                let _ = transport
                    .send_push(ReplicaId(2), push(partition, 0, 0))
                    .await;
            })
            .detach();
        }
        settle().await;
        let sizes: Vec<usize> = carrier
            .frames()
            .iter()
            .map(|(_, pushes)| pushes.len())
            .collect();
        assert_eq!(sizes, [PUSHES_PER_FRAME_MAX, 1]);
    });
}

fn request(pushes: &[(u32, u32)]) -> ReplicaStreamRequest {
    ReplicaStreamRequest {
        leader: LEADER.0,
        pushes: pushes
            .iter()
            .map(|&(partition, records_len)| ReplicaPushRequest {
                topic_id: TOPIC,
                partition,
                epoch: 3,
                leader: LEADER.0,
                start: 0,
                prev_epoch: None,
                truncate_to: None,
                reset_to: None,
                hw: 0,
                log_start: 0,
                records_len,
            })
            .collect(),
    }
}

#[test]
fn a_follower_serves_the_pushes_of_a_frame_at_once_and_answers_in_frame_order() {
    on_executor(|| async {
        let raw = Bytes::from_static(b"aaabbbbc");
        let seen = Rc::new(RefCell::new(Vec::new()));
        let serve = |push: ReplicaPushRequest, records: Bytes| {
            let seen = seen.clone();
            async move {
                seen.borrow_mut().push((push.partition, records.to_vec()));
                // The first push finishes only once the last one started:
                // a follower serving a frame's pushes one after the other
                // (no shared group commit) fails here.
                if push.partition == 0 {
                    for _ in 0..100 {
                        if seen.borrow().len() == 4 {
                            break;
                        }
                        glommio::timer::sleep(Duration::from_millis(10)).await;
                    }
                    assert_eq!(seen.borrow().len(), 4, "the pushes ran one at a time");
                }
                ok_answer(u64::from(push.partition) * 10 + records.len() as u64)
            }
        };
        let response =
            serve_stream_frame(request(&[(0, 3), (1, 4), (2, 0), (3, 1)]), &raw, serve).await;
        assert_eq!(response.error_code, ErrorCode::None.code());
        let ends: Vec<u64> = response
            .answers
            .iter()
            .map(|answer| match answer.result {
                WirePushResult::Ok { durable_end, .. } => durable_end,
                _ => panic!("{answer:?}"),
            })
            .collect();
        assert_eq!(ends, [3, 14, 20, 31]);
        assert_eq!(
            *seen.borrow(),
            [
                (0, b"aaa".to_vec()),
                (1, b"bbbb".to_vec()),
                (2, Vec::new()),
                (3, b"c".to_vec())
            ]
        );
    });
}

#[test]
fn a_follower_refuses_a_frame_whose_lengths_do_not_add_up() {
    on_executor(|| async {
        let served = Rc::new(RefCell::new(0));
        let serve = |_: ReplicaPushRequest, _: Bytes| {
            *served.borrow_mut() += 1;
            async { ok_answer(0) }
        };
        for pushes in [&[(0, 3), (1, 4)][..], &[(0, 1)], &[(0, 100)]] {
            let response =
                serve_stream_frame(request(pushes), &Bytes::from_static(b"abcde"), serve).await;
            assert_eq!(
                response.error_code,
                ErrorCode::InvalidRequest.code(),
                "{pushes:?}"
            );
            assert!(response.answers.is_empty());
        }
        let too_many = vec![(0, 0); PUSHES_PER_FRAME_MAX + 1];
        let response = serve_stream_frame(request(&too_many), &Bytes::new(), serve).await;
        assert_eq!(response.error_code, ErrorCode::InvalidRequest.code());
        assert_eq!(*served.borrow(), 0, "no push of a refused frame is served");
    });
}
