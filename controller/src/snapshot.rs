//! The compact encoding of a whole [`MetadataState`]: the data of a Raft
//! snapshot, sent to lagging controller nodes and kept on disk to bound the
//! log.
//!
//! ```text
//! magic "CLMS" · version u8 (1) · crc32c(body) u32 LE · body length u32 LE · body
//! body = metadata version u64 · next topic id u64 · producer id block end i64
//!      · brokers: count u32 · (id u64 · host str · port u16 · rack opt-str
//!                              · shard count u16 · incarnation u64 · fenced u8)*
//!      · topics:  count u32 · (id u64 · name str · internal u8 · created at i64
//!                              · config: count u32 · (key str · value str)*
//!                              · partitions: count u32 · (leader u64 (0 = none)
//!                                · leader epoch u32 · replicas: count u32
//!                                · (node u64 · shard u16)*)*)*
//!      · users (version 2 and 3): count u32 · (name str · changed at u64
//!                              · credentials, see [`crate::users`])*
//!      · ACLs (version 3 and 4): count u32 · (binding, see [`crate::acls`])*
//!      · quotas (version 4 and 5): count u32 · (quota, see [`crate::quotas`])*
//!      · object limits (version 5): count u32 · (entity str
//!                              · topics, partitions, groups, see [`crate::quotas`])*
//!      · topic owners (version 5 and 6): count u32 · (topic id u64 · principal str)*
//!      · brokers in maintenance (version 6 and 7): count u32 · (id u64)*
//!      · reassignments (version 7 and 8): count u32 · (topic id u64 · partition u32
//!                              · original replicas · target replicas
//!                              · throttle u64 · started at i64 · cancelled u8)*
//!      · brokers being decommissioned (version 8): count u32 · (id u64
//!                              · throttle u64 · moves at once u16)*
//! str = length u32 · UTF-8 bytes; opt-str = u8 (0 none, 1 some) · str
//! ```
//!
//! A state is written in the oldest version that holds it: without users,
//! ACLs or quotas as version 1, with users only as version 2, with ACLs but
//! no quotas as version 3, with quotas but neither object limits nor topic
//! owners as version 4, without a broker in maintenance as version 5 or
//! older, without a reassignment in progress as version 6 or older,
//! without a broker being decommissioned as version 7 or older.
//! Brokers of the releases before read it, so a rolling upgrade works
//! until the first user (ACL, quota, owned topic, object limit,
//! maintenance, reassignment or decommission) is created. Object limits are listed only for the quotas
//! that set them (in entity order, each a quota of the section before);
//! owners only for the topics that have one (in id order). A topic of an
//! older state has no owner: it counts for nobody.
//!
//! Brokers, topics and config keys are written in increasing order and the
//! decoder insists on it, so a state has exactly one encoding: the cluster
//! tests compare nodes' states by comparing these bytes. A decoded state
//! must also pass [`MetadataState::check_invariants`]; one that does not is
//! reported as corrupt rather than loaded.

use std::collections::BTreeMap;

use crate::acls::{ACLS_MAX, AclBinding};
use crate::codec::{DecodeError, Reader, Writer, seal, unseal};
use crate::command::{
    HOST_BYTES_MAX, PARTITIONS_MAX, RACK_BYTES_MAX, TOPIC_NAME_BYTES_MAX, read_config,
    read_replicas, write_config, write_replicas,
};
use crate::decommission::Decommission;
use crate::quotas::{
    QUOTA_ENTITY_BYTES_MAX, QUOTAS_MAX, QuotaEntity, read_object_limits, read_quota,
    write_object_limits, write_quota,
};
use crate::reassignment::Reassignment;
use crate::state::{BrokerRecord, MetadataState, PartitionRecord, TopicRecord};
use crate::types::{LeaderEpoch, NodeId, TopicId};
use crate::users::{
    USERNAME_BYTES_MAX, USERS_MAX, UserRecord, read_credentials, write_credentials,
};

const MAGIC: [u8; 4] = *b"CLMS";
/// Version 1: no users; version 2: users after the topics; version 3:
/// ACLs after the users; version 4: quotas after the ACLs; version 5:
/// object limits and topic owners after the quotas; version 6: the brokers
/// in maintenance after the owners; version 7: the reassignments in
/// progress after them; version 8: the brokers being decommissioned last.
const VERSION: u8 = 8;
const WHAT: &str = "metadata snapshot";
/// Smallest encoded broker: id, empty host, port, no rack, shards,
/// incarnation, fenced.
const BROKER_BYTES_MIN: usize = 8 + 4 + 2 + 1 + 2 + 8 + 1;
/// Smallest encoded topic.
const TOPIC_BYTES_MIN: usize = 8 + 4 + 1 + 8 + 4 + 4;

impl MetadataState {
    /// Encodes the whole state (see the module docs).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::default();
        writer.u64(self.version);
        writer.u64(self.next_topic_id);
        writer.i64(self.producer_id_block_end);
        writer.len(self.brokers.len());
        for broker in self.brokers.values() {
            writer.u64(broker.id.0);
            writer.str(&broker.host);
            writer.u16(broker.port);
            writer.opt_str(broker.rack.as_deref());
            writer.u16(broker.shard_count);
            writer.u64(broker.incarnation);
            writer.bool(broker.fenced);
        }
        writer.len(self.topics.len());
        for topic in self.topics.values() {
            writer.u64(topic.id.0);
            writer.str(&topic.name);
            writer.bool(topic.internal);
            writer.i64(topic.created_at_ms);
            write_config(&mut writer, &topic.config);
            writer.len(topic.partitions.len());
            for partition in &topic.partitions {
                writer.u64(partition.leader.map_or(0, |leader| leader.0));
                writer.u32(partition.leader_epoch.0);
                write_replicas(&mut writer, &partition.replicas);
            }
        }
        let owned: Vec<&TopicRecord> = self
            .topics
            .values()
            .filter(|topic| topic.owner.is_some())
            .collect();
        let object_limits: Vec<_> = self
            .quotas
            .iter()
            .filter(|(_, limits)| limits.has_object_limits())
            .collect();
        let in_maintenance: Vec<NodeId> = self
            .brokers
            .values()
            .filter(|broker| broker.maintenance)
            .map(|broker| broker.id)
            .collect();
        let moving: Vec<(TopicId, u32, &Reassignment)> = self
            .partitions()
            .filter_map(|(topic_id, partition, record)| {
                Some((topic_id, partition, record.reassignment.as_ref()?))
            })
            .collect();
        let decommissioning: Vec<&BrokerRecord> = self
            .brokers
            .values()
            .filter(|broker| broker.decommission.is_some())
            .collect();
        let newest = !owned.is_empty()
            || !object_limits.is_empty()
            || !in_maintenance.is_empty()
            || !moving.is_empty()
            || !decommissioning.is_empty();
        if self.users.is_empty() && self.acls.is_empty() && self.quotas.is_empty() && !newest {
            return seal(MAGIC, 1, &writer.bytes);
        }
        writer.len(self.users.len());
        for user in self.users.values() {
            writer.str(&user.name);
            writer.u64(user.changed_at);
            write_credentials(&mut writer, &user.credentials);
        }
        if self.acls.is_empty() && self.quotas.is_empty() && !newest {
            return seal(MAGIC, 2, &writer.bytes);
        }
        writer.len(self.acls.len());
        for binding in self.acls.iter() {
            binding.write(&mut writer);
        }
        if self.quotas.is_empty() && !newest {
            return seal(MAGIC, 3, &writer.bytes);
        }
        writer.len(self.quotas.len());
        for (entity, limits) in &self.quotas {
            write_quota(&mut writer, entity, limits);
        }
        if !newest {
            return seal(MAGIC, 4, &writer.bytes);
        }
        writer.len(object_limits.len());
        for (entity, limits) in object_limits {
            writer.str(&entity.to_string());
            write_object_limits(&mut writer, limits);
        }
        writer.len(owned.len());
        for topic in owned {
            writer.u64(topic.id.0);
            writer.str(topic.owner.as_deref().unwrap_or_default());
        }
        if in_maintenance.is_empty() && moving.is_empty() && decommissioning.is_empty() {
            return seal(MAGIC, 5, &writer.bytes);
        }
        writer.len(in_maintenance.len());
        for node in in_maintenance {
            writer.u64(node.0);
        }
        if moving.is_empty() && decommissioning.is_empty() {
            return seal(MAGIC, 6, &writer.bytes);
        }
        writer.len(moving.len());
        for (topic_id, partition, reassignment) in moving {
            writer.u64(topic_id.0);
            writer.u32(partition);
            write_replicas(&mut writer, &reassignment.original);
            write_replicas(&mut writer, &reassignment.target);
            writer.u64(reassignment.throttle_bytes_per_s);
            writer.i64(reassignment.started_at_ms);
            writer.bool(reassignment.cancelled);
        }
        if decommissioning.is_empty() {
            return seal(MAGIC, 7, &writer.bytes);
        }
        writer.len(decommissioning.len());
        for broker in decommissioning {
            if let Some(decommission) = broker.decommission {
                writer.u64(broker.id.0);
                writer.u64(decommission.throttle_bytes_per_s);
                writer.u16(decommission.max_moves);
            }
        }
        seal(MAGIC, VERSION, &writer.bytes)
    }

    /// Decodes a state written by [`MetadataState::encode`].
    ///
    /// # Errors
    /// [`DecodeError`] when the bytes are damaged, of an unknown version,
    /// not canonical, or describe a state that breaks an invariant. Never
    /// panics, and allocates no more than the input can describe.
    pub fn decode(bytes: &[u8]) -> Result<MetadataState, DecodeError> {
        let (version, body) = unseal(bytes, MAGIC, VERSION, WHAT)?;
        let mut reader = Reader::new(body, crate::codec::SEAL_HEADER_BYTES);
        let mut state = MetadataState {
            version: reader.u64("metadata version")?,
            next_topic_id: reader.u64("next topic id")?,
            producer_id_block_end: reader.i64("producer id block end")?,
            ..MetadataState::default()
        };
        let count = reader.len("brokers", usize::MAX, BROKER_BYTES_MIN)?;
        for _ in 0..count {
            let at = reader.position();
            let broker = read_broker(&mut reader)?;
            if state
                .brokers
                .last_key_value()
                .is_some_and(|(id, _)| *id >= broker.id)
            {
                return Err(reader.invalid_at("broker", at, "brokers out of order".to_owned()));
            }
            state.brokers.insert(broker.id, broker);
        }
        let count = reader.len("topics", usize::MAX, TOPIC_BYTES_MIN)?;
        for _ in 0..count {
            let at = reader.position();
            let topic = read_topic(&mut reader)?;
            if state
                .topics
                .last_key_value()
                .is_some_and(|(id, _)| *id >= topic.id)
            {
                return Err(reader.invalid_at("topic", at, "topics out of order".to_owned()));
            }
            if state.names.insert(topic.name.clone(), topic.id).is_some() {
                return Err(reader.invalid_at("topic", at, "duplicate topic name".to_owned()));
            }
            state.topics.insert(topic.id, topic);
        }
        if version >= 2 {
            // Name, changed-at, a credential count: at least 16 bytes.
            let count = reader.len("users", USERS_MAX, 16)?;
            if count == 0 && version == 2 {
                return Err(reader.invalid_at(
                    "users",
                    reader.position(),
                    "a state without users is written as version 1".to_owned(),
                ));
            }
            for _ in 0..count {
                let at = reader.position();
                let user = UserRecord {
                    name: reader.str("user name", USERNAME_BYTES_MAX)?,
                    changed_at: reader.u64("changed at")?,
                    credentials: read_credentials(&mut reader)?,
                };
                if state
                    .users
                    .last_key_value()
                    .is_some_and(|(name, _)| *name >= user.name)
                {
                    return Err(reader.invalid_at("user", at, "users out of order".to_owned()));
                }
                state.users.insert(user.name.clone(), user);
            }
        }
        if version >= 3 {
            // Two names and four codes: at least 12 bytes.
            let count = reader.len("ACLs", ACLS_MAX, 12)?;
            if count == 0 && version == 3 {
                return Err(reader.invalid_at(
                    "ACLs",
                    reader.position(),
                    "a state without ACLs is written as version 1 or 2".to_owned(),
                ));
            }
            for _ in 0..count {
                let at = reader.position();
                let binding = AclBinding::read(&mut reader)?;
                if state
                    .acls
                    .iter()
                    .next_back()
                    .is_some_and(|last| *last >= binding)
                {
                    return Err(reader.invalid_at("ACL", at, "ACLs out of order".to_owned()));
                }
                state.acls.insert(binding);
            }
        }
        if version >= 4 {
            // An entity and four presence bytes: at least 9 bytes.
            let count = reader.len("quotas", QUOTAS_MAX, 9)?;
            if count == 0 && version == 4 {
                return Err(reader.invalid_at(
                    "quotas",
                    reader.position(),
                    "a state without quotas is written as version 1 to 3".to_owned(),
                ));
            }
            for _ in 0..count {
                let at = reader.position();
                let (entity, limits) = read_quota(&mut reader)?;
                if state
                    .quotas
                    .last_key_value()
                    .is_some_and(|(last, _)| *last >= entity)
                {
                    return Err(reader.invalid_at("quota", at, "quotas out of order".to_owned()));
                }
                state.quotas.insert(entity, limits);
            }
        }
        if version >= 5 {
            read_object_limits_section(&mut reader, &mut state)?;
            read_owners_section(&mut reader, &mut state, version)?;
        }
        if version >= 6 {
            read_maintenance_section(&mut reader, &mut state, version)?;
        }
        if version >= 7 {
            read_reassignments_section(&mut reader, &mut state, version)?;
        }
        if version >= 8 {
            read_decommissions_section(&mut reader, &mut state)?;
        }
        reader.finish()?;
        state
            .check_invariants()
            .map_err(|reason| reader.invalid_at("metadata state", 0, reason))?;
        Ok(state)
    }
}

/// The brokers in maintenance of version 6: registered ones, in
/// increasing id order, at least one.
fn read_maintenance_section(
    reader: &mut Reader<'_>,
    state: &mut MetadataState,
    version: u8,
) -> Result<(), DecodeError> {
    let count = reader.len("brokers in maintenance", state.brokers.len(), 8)?;
    if count == 0 && version == 6 {
        return Err(reader.invalid_at(
            "brokers in maintenance",
            reader.position(),
            "a state without a broker in maintenance is written as version 5 or older".to_owned(),
        ));
    }
    let mut last: Option<NodeId> = None;
    for _ in 0..count {
        let at = reader.position();
        let node = NodeId(reader.u64("broker in maintenance")?);
        if last.is_some_and(|last| last >= node) {
            return Err(reader.invalid_at(
                "broker in maintenance",
                at,
                "brokers in maintenance out of order".to_owned(),
            ));
        }
        last = Some(node);
        let Some(broker) = state.brokers.get_mut(&node) else {
            return Err(reader.invalid_at(
                "broker in maintenance",
                at,
                format!("broker {node} is not registered"),
            ));
        };
        broker.maintenance = true;
    }
    Ok(())
}

/// The brokers being decommissioned of version 8: registered ones, in
/// increasing id order, at least one.
fn read_decommissions_section(
    reader: &mut Reader<'_>,
    state: &mut MetadataState,
) -> Result<(), DecodeError> {
    let count = reader.len("brokers being decommissioned", state.brokers.len(), 18)?;
    if count == 0 {
        return Err(reader.invalid_at(
            "brokers being decommissioned",
            reader.position(),
            "a state without a broker being decommissioned is written as version 7 or older"
                .to_owned(),
        ));
    }
    let mut last: Option<NodeId> = None;
    for _ in 0..count {
        let at = reader.position();
        let node = NodeId(reader.u64("broker being decommissioned")?);
        if last.is_some_and(|last| last >= node) {
            return Err(reader.invalid_at(
                "broker being decommissioned",
                at,
                "brokers being decommissioned out of order".to_owned(),
            ));
        }
        last = Some(node);
        let decommission = Decommission {
            throttle_bytes_per_s: reader.u64("throttle")?,
            max_moves: reader.u16("moves at once")?,
        };
        let Some(broker) = state.brokers.get_mut(&node) else {
            return Err(reader.invalid_at(
                "broker being decommissioned",
                at,
                format!("broker {node} is not registered"),
            ));
        };
        broker.decommission = Some(decommission);
    }
    Ok(())
}

/// The reassignments of version 7 and 8: partitions of known topics, in
/// increasing (topic, partition) order; at least one in version 7. Their
/// consistency with the replica sets is [`MetadataState::check_invariants`]'.
fn read_reassignments_section(
    reader: &mut Reader<'_>,
    state: &mut MetadataState,
    version: u8,
) -> Result<(), DecodeError> {
    // Ids, two one-replica sets, throttle, time, flag: at least 53 bytes.
    let count = reader.len("reassignments", usize::MAX, 53)?;
    if count == 0 && version == 7 {
        return Err(reader.invalid_at(
            "reassignments",
            reader.position(),
            "a state without a reassignment is written as version 6 or older".to_owned(),
        ));
    }
    let mut last: Option<(TopicId, u32)> = None;
    for _ in 0..count {
        let at = reader.position();
        let key = (TopicId(reader.u64("topic id")?), reader.u32("partition")?);
        if last.is_some_and(|last| last >= key) {
            return Err(reader.invalid_at(
                "reassignment",
                at,
                "reassignments out of order".to_owned(),
            ));
        }
        last = Some(key);
        let reassignment = Reassignment {
            original: read_replicas(reader)?,
            target: read_replicas(reader)?,
            throttle_bytes_per_s: reader.u64("throttle")?,
            started_at_ms: reader.i64("start time")?,
            cancelled: reader.bool("cancelled")?,
        };
        let Some(partition) = state
            .topics
            .get_mut(&key.0)
            .and_then(|topic| topic.partitions.get_mut(key.1 as usize))
        else {
            return Err(reader.invalid_at(
                "reassignment",
                at,
                format!("topic {} has no partition {}", key.0, key.1),
            ));
        };
        partition.reassignment = Some(reassignment);
    }
    Ok(())
}

/// The object limits of version 5: each names a quota of the section
/// before, in increasing entity order, and sets at least one limit.
fn read_object_limits_section(
    reader: &mut Reader<'_>,
    state: &mut MetadataState,
) -> Result<(), DecodeError> {
    // An entity and three presence bytes: at least 8 bytes.
    let count = reader.len("object limits", QUOTAS_MAX, 8)?;
    let mut previous: Option<QuotaEntity> = None;
    for _ in 0..count {
        let at = reader.position();
        let entity = reader.str("quota entity", QUOTA_ENTITY_BYTES_MAX)?;
        let entity = QuotaEntity::parse(&entity)
            .map_err(|reason| reader.invalid_at("quota entity", at, reason))?;
        if previous
            .as_ref()
            .is_some_and(|previous| *previous >= entity)
        {
            return Err(reader.invalid_at("object limits", at, "out of order".to_owned()));
        }
        let Some(limits) = state.quotas.get_mut(&entity) else {
            return Err(reader.invalid_at("object limits", at, format!("{entity} has no quota")));
        };
        read_object_limits(reader, limits)?;
        if !limits.has_object_limits() {
            return Err(reader.invalid_at("object limits", at, "none set".to_owned()));
        }
        previous = Some(entity);
    }
    Ok(())
}

/// The topic owners of version 5, in increasing topic id order; a state
/// of version 5 has an owner or an object limit.
fn read_owners_section(
    reader: &mut Reader<'_>,
    state: &mut MetadataState,
    version: u8,
) -> Result<(), DecodeError> {
    // An id and a name: at least 12 bytes.
    let count = reader.len("topic owners", usize::MAX, 12)?;
    let mut previous: Option<TopicId> = None;
    for _ in 0..count {
        let at = reader.position();
        let id = TopicId(reader.u64("topic id")?);
        let owner = reader.str("topic owner", USERNAME_BYTES_MAX)?;
        if previous.is_some_and(|previous| previous >= id) {
            return Err(reader.invalid_at("topic owners", at, "out of order".to_owned()));
        }
        let Some(topic) = state.topics.get_mut(&id) else {
            return Err(reader.invalid_at("topic owners", at, format!("no topic {id}")));
        };
        topic.owner = Some(owner);
        previous = Some(id);
    }
    let limited = state
        .quotas
        .values()
        .any(|limits| limits.has_object_limits());
    if count == 0 && !limited && version == 5 {
        return Err(reader.invalid_at(
            "topic owners",
            reader.position(),
            "a state without owners or object limits is written as version 1 to 4".to_owned(),
        ));
    }
    Ok(())
}

fn read_broker(reader: &mut Reader<'_>) -> Result<BrokerRecord, DecodeError> {
    Ok(BrokerRecord {
        id: NodeId(reader.u64("broker id")?),
        host: reader.str("host", HOST_BYTES_MAX)?,
        port: reader.u16("port")?,
        rack: reader.opt_str("rack", RACK_BYTES_MAX)?,
        shard_count: reader.u16("shard count")?,
        incarnation: reader.u64("incarnation")?,
        fenced: reader.bool("fenced")?,
        maintenance: false,
        decommission: None,
    })
}

fn read_topic(reader: &mut Reader<'_>) -> Result<TopicRecord, DecodeError> {
    let id = TopicId(reader.u64("topic id")?);
    let name = reader.str("topic name", TOPIC_NAME_BYTES_MAX)?;
    let internal = reader.bool("internal")?;
    let created_at_ms = reader.i64("created at")?;
    let config: BTreeMap<String, String> = read_config(reader)?;
    let count = reader.len("partitions", PARTITIONS_MAX as usize, 8 + 4 + 4)?;
    let mut partitions = Vec::with_capacity(count);
    for _ in 0..count {
        let leader = match reader.u64("leader")? {
            0 => None,
            node => Some(NodeId(node)),
        };
        let leader_epoch = LeaderEpoch(reader.u32("leader epoch")?);
        partitions.push(PartitionRecord {
            replicas: read_replicas(reader)?,
            reassignment: None,
            leader,
            leader_epoch,
        });
    }
    Ok(TopicRecord {
        id,
        name,
        internal,
        config,
        partitions,
        created_at_ms,
        owner: None,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::testing::{arb_state, sample_state};

    #[test]
    fn a_sample_state_round_trips() {
        let state = sample_state();
        assert!(!state.topics().is_empty());
        let bytes = state.encode();
        assert_eq!(MetadataState::decode(&bytes), Ok(state));
    }

    #[test]
    fn a_broker_in_maintenance_is_kept_in_version_6_and_only_then() {
        let mut state = sample_state();
        assert!(state.encode()[4] <= 5, "nothing needs version 6 yet");
        let index = state.version() + 1;
        let command = crate::Command::SetBrokerMaintenance {
            node: NodeId(2),
            enabled: true,
        };
        assert!(state.apply(index, &command).is_ok());
        let bytes = state.encode();
        assert_eq!(bytes[4], 6);
        let decoded = MetadataState::decode(&bytes).expect("decodes");
        assert!(decoded.brokers()[&NodeId(2)].maintenance);
        assert_eq!(decoded, state);
    }

    #[test]
    fn a_broker_being_decommissioned_is_kept_in_version_8_and_only_then() {
        let mut state = sample_state();
        assert!(state.encode()[4] <= 7, "nothing needs version 8 yet");
        let plan = Decommission {
            throttle_bytes_per_s: 1 << 20,
            max_moves: 2,
        };
        // A fourth broker to take broker 2's replicas.
        let register = crate::Command::RegisterBroker {
            node: NodeId(4),
            host: "broker-4".to_owned(),
            port: 7100,
            rack: None,
            shard_count: 1,
            incarnation: 1,
        };
        assert!(state.apply(state.version() + 1, &register).is_ok());
        let command = crate::Command::SetBrokerDecommission {
            node: NodeId(2),
            decommission: Some(plan),
        };
        assert!(state.apply(state.version() + 1, &command).is_ok());
        let bytes = state.encode();
        assert_eq!(bytes[4], 8);
        let decoded = MetadataState::decode(&bytes).expect("decodes");
        assert_eq!(decoded.brokers()[&NodeId(2)].decommission, Some(plan));
        assert_eq!(decoded, state);
    }

    #[test]
    fn the_empty_state_round_trips() {
        let state = MetadataState::default();
        assert_eq!(MetadataState::decode(&state.encode()), Ok(state));
    }

    #[test]
    fn every_damaged_byte_and_every_cut_is_detected() {
        let bytes = sample_state().encode();
        for index in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[index] = damaged[index].wrapping_add(1);
            assert!(MetadataState::decode(&damaged).is_err(), "byte {index}");
        }
        for len in 0..bytes.len() {
            assert!(
                MetadataState::decode(&bytes[..len]).is_err(),
                "cut at {len}"
            );
        }
    }

    proptest! {
        #[test]
        fn states_round_trip(state in arb_state()) {
            let bytes = state.encode();
            prop_assert_eq!(MetadataState::decode(&bytes), Ok(state));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
            let _ = MetadataState::decode(&bytes);
        }

        #[test]
        fn arbitrary_bodies_with_a_valid_seal_never_panic(
            body in proptest::collection::vec(any::<u8>(), 0..1024),
        ) {
            let _ = MetadataState::decode(&seal(MAGIC, VERSION, &body));
        }
    }
}
