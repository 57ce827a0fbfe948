//! Six partitions replicated on three brokers, every broker's pushes
//! carried by its own [`ReplicationStreams`] over a carrier that loses,
//! duplicates, delays and reorders frames and their answers: each
//! partition's acknowledged batches, and only they, end up on every replica
//! of that partition, and frames do carry several partitions at once.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};

use corelog_replication::wire::push_refusal;
use corelog_wire::message::replica_push::{ReplicaPushRequest, ReplicaPushResponse};
use corelog_wire::message::replica_stream::{ReplicaStreamRequest, ReplicaStreamResponse};
use corelog_wire::rng::SplitMix64;

use super::*;
use crate::replica::stream::{FrameCarrier, NoStreamObserver, ReplicationStreams, StreamLimits};
use crate::runtime::replicas::serve_stream_frame;

const TOPIC: u64 = 42;
const PARTITIONS: u32 = 6;
/// Broker 1 leads partitions 0..4, broker 2 leads 4..6: broker 1's frames
/// to each follower mix four partitions.
const LEADERS: [ReplicaId; PARTITIONS as usize] = [IDS[0], IDS[0], IDS[0], IDS[0], IDS[1], IDS[1]];
const BATCHES_PER_PARTITION: u64 = 40;

/// One broker: a replica of every partition, and the streams its leaders
/// push over.
struct Broker {
    replicas: BTreeMap<u32, Rc<Node>>,
    streams: Rc<ReplicationStreams>,
}

impl Broker {
    /// The follower's side of one push: the partition's replica answers it
    /// as received, as `Shard::replica_push` has it do.
    fn serve_push(
        &self,
        request: ReplicaPushRequest,
        records: Bytes,
    ) -> LocalBoxFuture<'static, ReplicaPushResponse> {
        let replica = self.replicas.get(&request.partition).cloned();
        Box::pin(async move {
            let Some(replica) = replica else {
                return push_refusal(ErrorCode::NotLeader, "no such replica".to_owned());
            };
            replica.serve_push(&request, records).await
        })
    }
}

/// What the faulty carrier did, for the test's own checks.
#[derive(Default)]
struct Faults {
    frames: Cell<u64>,
    lost: Cell<u64>,
    duplicated: Cell<u64>,
    answers_lost: Cell<u64>,
    /// Frames that carried more than one partition.
    mixed: Cell<u64>,
}

/// Frames from one broker to the others, delivered after a random delay
/// (two frames in flight overtake each other), lost before or after the
/// follower handled them, or handled twice.
struct FaultyCarrier {
    brokers: Rc<RefCell<BTreeMap<ReplicaId, Rc<Broker>>>>,
    rng: RefCell<SplitMix64>,
    faults: Rc<Faults>,
}

impl FaultyCarrier {
    fn roll(&self, per_million: u64) -> bool {
        self.rng.borrow_mut().chance_per_million(per_million)
    }

    async fn delay(&self) {
        let micros = self.rng.borrow_mut().between(0, 3_000);
        glommio::timer::sleep(Duration::from_micros(micros)).await;
    }

    async fn deliver(
        &self,
        to: ReplicaId,
        request: ReplicaStreamRequest,
        raw: Bytes,
    ) -> Result<ReplicaStreamResponse, String> {
        let broker = self.brokers.borrow().get(&to).cloned();
        let broker = broker.ok_or_else(|| "no such broker".to_owned())?;
        Ok(serve_stream_frame(request, &raw, |push, records| {
            broker.serve_push(push, records)
        })
        .await)
    }
}

impl FrameCarrier for FaultyCarrier {
    fn carry(
        &self,
        to: ReplicaId,
        request: ReplicaStreamRequest,
        raw: Vec<Bytes>,
    ) -> LocalBoxFuture<'_, Result<ReplicaStreamResponse, String>> {
        Box::pin(async move {
            let faults = &self.faults;
            faults.frames.set(faults.frames.get() + 1);
            let partitions: BTreeSet<u32> = request.pushes.iter().map(|p| p.partition).collect();
            if partitions.len() > 1 {
                faults.mixed.set(faults.mixed.get() + 1);
            }
            let raw = Bytes::from(raw.concat());
            self.delay().await;
            if self.roll(100_000) {
                faults.lost.set(faults.lost.get() + 1);
                return Err("frame lost".to_owned());
            }
            if self.roll(100_000) {
                faults.duplicated.set(faults.duplicated.get() + 1);
                let (request, raw) = (request.clone(), raw.clone());
                let brokers = self.brokers.clone();
                let late = self.rng.borrow_mut().between(0, 5_000);
                glommio::spawn_local(async move {
                    glommio::timer::sleep(Duration::from_micros(late)).await;
                    let broker = brokers.borrow().get(&to).cloned();
                    if let Some(broker) = broker {
                        serve_stream_frame(request, &raw, |push, records| {
                            broker.serve_push(push, records)
                        })
                        .await;
                    }
                })
                .detach();
            }
            let answer = self.deliver(to, request, raw).await;
            self.delay().await;
            if self.roll(100_000) {
                faults.answers_lost.set(faults.answers_lost.get() + 1);
                return Err("answer lost".to_owned());
            }
            answer
        })
    }
}

/// The tag of every batch in `batches` (see [`make_batch`]: record values
/// start with `tag:`).
fn tags(batches: &[Batch]) -> Vec<u64> {
    batches
        .iter()
        .filter_map(|found| {
            let records = batch::decode_records(&found.bytes, &BatchLimits::default()).unwrap();
            let value = records.first()?.value.clone()?;
            let text = std::str::from_utf8(&value).unwrap();
            text.split(':').next()?.parse().ok()
        })
        .collect()
}

#[test]
fn lost_duplicated_and_reordered_frames_keep_each_partitions_records_apart_and_whole() {
    on_executor(|| async {
        let clock = Rc::new(ManualClock::new(TimestampMs(T0)));
        let fences = Rc::new(FenceRecorder::default());
        let brokers = Rc::new(RefCell::new(BTreeMap::new()));
        let faults = Rc::new(Faults::default());
        let dirs: Vec<String> = (0..PARTITIONS)
            .map(|index| format!("/data/events-{index}"))
            .collect();
        for (seed, id) in (1..).zip(IDS) {
            let carrier = Rc::new(FaultyCarrier {
                brokers: brokers.clone(),
                rng: RefCell::new(SplitMix64::new(seed)),
                faults: faults.clone(),
            });
            let limits = StreamLimits::for_frame_bytes(8 << 10);
            let streams = ReplicationStreams::new(
                id,
                carrier,
                Rc::new(GlommioExecutor),
                limits,
                Rc::new(NoStreamObserver),
            );
            let disk = MemoryDisk::new(512, 1 << 40);
            disk.set_yielding(true);
            let mut replicas = BTreeMap::new();
            for (index, dir) in (0..PARTITIONS).zip(&dirs) {
                let key = PartitionId {
                    topic_id: TOPIC,
                    partition: index,
                };
                let spec = replica_spec(id, key, Path::new(dir), test_config(), 64 << 10, None);
                let storage = shard_storage(&disk, clock.clone(), fences.clone());
                let transport = Rc::new(streams.transport(key));
                let executor = Rc::new(GlommioExecutor);
                let replica =
                    ReplicatedPartition::open(disk.clone(), spec, storage, transport, executor)
                        .await
                        .expect("replica opens");
                replicas.insert(index, replica);
            }
            brokers
                .borrow_mut()
                .insert(id, Rc::new(Broker { replicas, streams }));
        }
        let replicas = |index: u32| -> Vec<Rc<Node>> {
            IDS.iter()
                .map(|id| brokers.borrow()[id].replicas[&index].clone())
                .collect()
        };
        let ticking = brokers.clone();
        // Stopped before the queues are checked: a tick queues heartbeats.
        let ticks_on = Rc::new(Cell::new(true));
        let ticker_on = ticks_on.clone();
        glommio::spawn_local(async move {
            while ticker_on.get() {
                glommio::timer::sleep(Duration::from_millis(2)).await;
                let nodes: Vec<Rc<Node>> = ticking
                    .borrow()
                    .values()
                    .flat_map(|broker| broker.replicas.values().cloned().collect::<Vec<_>>())
                    .collect();
                for node in nodes {
                    node.tick();
                }
            }
        })
        .detach();
        for index in 0..PARTITIONS {
            let leader = LEADERS[index as usize];
            for (id, node) in IDS.iter().zip(replicas(index)) {
                if *id == leader {
                    node.become_leader(LeaderEpoch(1), &IDS).await.unwrap();
                } else {
                    node.become_follower(LeaderEpoch(1), leader).await.unwrap();
                }
            }
        }

        // Every partition's producer at once, each batch acknowledged by a
        // quorum before the next.
        let producers: Vec<_> = (0..PARTITIONS)
            .map(|index| {
                let leader = brokers.borrow()[&LEADERS[index as usize]].replicas[&index].clone();
                glommio::spawn_local(async move {
                    for sequence in 0..BATCHES_PER_PARTITION {
                        let tag = u64::from(index) * 1_000 + sequence;
                        leader
                            .produce(plain(tag), Acks::Quorum, LONG)
                            .await
                            .unwrap_or_else(|error| panic!("batch {tag}: {error}"));
                    }
                })
            })
            .collect();
        for producer in producers {
            producer.await;
        }

        for index in 0..PARTITIONS {
            let nodes = replicas(index);
            let leader = &nodes[LEADERS[index as usize].0 as usize - 1];
            wait_until("the followers catch up", || {
                nodes.iter().all(|node| {
                    node.durable_end() == leader.durable_end()
                        && node.high_watermark() == leader.high_watermark()
                })
            })
            .await;
            let expected: Vec<u64> = (0..BATCHES_PER_PARTITION)
                .map(|sequence| u64::from(index) * 1_000 + sequence)
                .collect();
            for node in &nodes {
                let found = committed(node, Offset(0)).await;
                assert_eq!(tags(&found), expected, "partition {index}");
            }
            let bytes = log_bytes(leader).await;
            for node in &nodes {
                assert_eq!(log_bytes(node).await, bytes, "partition {index}");
            }
        }
        assert!(fences.fenced.borrow().is_empty(), "{:?}", fences.fenced);
        // Without ticks nothing new is queued: what was queued must go out
        // (a heartbeat queued by the last tick is not stuck, just late).
        ticks_on.set(false);
        let leading = brokers.borrow()[&IDS[0]].clone();
        wait_until("the leading broker's queue to follower 2 drains", || {
            leading.streams.pending(IDS[1]).0 == 0
        })
        .await;
        for (what, count) in [
            ("frames lost", faults.lost.get()),
            ("frames duplicated", faults.duplicated.get()),
            ("answers lost", faults.answers_lost.get()),
            ("frames of several partitions", faults.mixed.get()),
        ] {
            assert!(
                count > 0,
                "no {what} in {} frames: the test proves less than it says",
                faults.frames.get()
            );
        }
    });
}
