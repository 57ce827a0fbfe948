//! Quotas: how much a principal (or a source address) may use, kept in
//! cluster metadata so that every broker enforces the same limits.
//!
//! An entity is a principal (`user:NAME`), the default for every
//! principal without its own entry (`user:*`, which also covers
//! connections that did not log in), a source address (`ip:ADDRESS`) or
//! the default for every address (`ip:*`). A principal's limits are
//! produce and fetch bytes per second, a share of request-handling time
//! (percent of one shard's time) and a connection count; an address's, a
//! connection count only. A rate or connection limit not set is no limit.
//! A principal's entry may also set how many topics, partitions and
//! consumer groups it may create; those fall back on the default entry and
//! then on a built-in default (see [`crate::limits`]).
//!
//! Encoding of one quota (in [`crate::command::Command::PutQuota`] and the
//! metadata snapshot):
//!
//! ```text
//! entity str · produce opt-u64 · fetch opt-u64 · request percent opt-u32 · connections opt-u32
//! object limits = topics opt-u32 · partitions opt-u32 · groups opt-u32
//! opt-x = u8 (0 none, 1 some) · u64
//! ```
//!
//! The object limits follow the entity's rates only where they are set
//! (a command tag and a snapshot section of their own), so that an entry
//! without them is encoded as releases before them wrote it.

use std::collections::BTreeMap;

use crate::codec::{DecodeError, Reader, Writer};

/// Most quota entries a cluster holds (each may label a metrics series).
pub const QUOTAS_MAX: usize = 1_000;
/// Longest entity.
pub const QUOTA_ENTITY_BYTES_MAX: usize = 5 + 255;
/// Most percent of a shard's time a request-time quota may grant.
pub const REQUEST_PERCENT_MAX: u32 = 100;

/// Whom a quota limits.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuotaEntity {
    /// One principal.
    User(String),
    /// Every principal without its own entry.
    DefaultUser,
    /// One source address (its connection count).
    Ip(core::net::IpAddr),
    /// Every source address without its own entry.
    DefaultIp,
}

impl QuotaEntity {
    /// Reads `user:NAME`, `user:*`, `ip:ADDRESS` or `ip:*`.
    ///
    /// # Errors
    /// What is wrong with it, as a sentence.
    pub fn parse(entity: &str) -> Result<QuotaEntity, String> {
        match entity.split_once(':') {
            Some(("user", "*")) => Ok(QuotaEntity::DefaultUser),
            Some(("ip", "*")) => Ok(QuotaEntity::DefaultIp),
            Some(("user", name))
                if !name.is_empty()
                    && name.len() <= 255
                    && !name.chars().any(|c| c.is_whitespace() || c.is_control()) =>
            {
                Ok(QuotaEntity::User(name.to_owned()))
            }
            Some(("ip", address)) => address
                .parse()
                .map(QuotaEntity::Ip)
                .map_err(|_| format!("{address:?} is not an IP address")),
            _ => Err(format!(
                "quota entity {entity:?} is not user:NAME, user:*, ip:ADDRESS or ip:*"
            )),
        }
    }

    /// Whether it limits principals (else source addresses).
    #[must_use]
    pub fn is_user(&self) -> bool {
        matches!(self, QuotaEntity::User(_) | QuotaEntity::DefaultUser)
    }
}

impl std::fmt::Display for QuotaEntity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QuotaEntity::User(name) => write!(f, "user:{name}"),
            QuotaEntity::DefaultUser => f.write_str("user:*"),
            QuotaEntity::Ip(address) => write!(f, "ip:{address}"),
            QuotaEntity::DefaultIp => f.write_str("ip:*"),
        }
    }
}

/// The limits of one entity; `None` is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuotaLimits {
    /// Produce request bytes per second.
    pub produce_bytes_per_second: Option<u64>,
    /// Fetch response bytes per second.
    pub fetch_bytes_per_second: Option<u64>,
    /// Percent of one shard's time spent handling its requests.
    pub request_percent: Option<u32>,
    /// Open connections.
    pub connections: Option<u32>,
    /// Topics the principal may own.
    pub topics: Option<u32>,
    /// Partitions the principal may own, over all its topics.
    pub partitions: Option<u32>,
    /// Consumer groups the principal may create per coordinator.
    pub groups: Option<u32>,
}

impl QuotaLimits {
    /// Whether it sets a topic, partition or group limit.
    #[must_use]
    pub fn has_object_limits(&self) -> bool {
        self.topics.is_some() || self.partitions.is_some() || self.groups.is_some()
    }

    /// Checks the limits against the entity: at least one set, rates above
    /// zero, a request share of 1 to 100 percent, and only a connection
    /// count for an address.
    ///
    /// # Errors
    /// What is wrong, as a sentence.
    pub fn check(&self, entity: &QuotaEntity) -> Result<(), String> {
        if *self == QuotaLimits::default() {
            return Err("a quota sets at least one limit".to_owned());
        }
        if !entity.is_user()
            && (self.produce_bytes_per_second.is_some()
                || self.fetch_bytes_per_second.is_some()
                || self.request_percent.is_some()
                || self.has_object_limits())
        {
            return Err(format!(
                "{entity} limits connections only: rates and topic, partition and group limits belong to principals (user:NAME)"
            ));
        }
        if self.produce_bytes_per_second == Some(0) || self.fetch_bytes_per_second == Some(0) {
            return Err("a byte rate is at least 1 byte per second".to_owned());
        }
        if let Some(percent) = self.request_percent
            && !(1..=REQUEST_PERCENT_MAX).contains(&percent)
        {
            return Err(format!(
                "a request time share is 1 to {REQUEST_PERCENT_MAX} percent, not {percent}"
            ));
        }
        Ok(())
    }
}

/// The quotas of a cluster, by entity.
pub type Quotas = BTreeMap<QuotaEntity, QuotaLimits>;

/// The limits that apply to `principal` (`None`: not logged in): its own
/// entry, else the default one.
#[must_use]
pub fn principal_limits(quotas: &Quotas, principal: Option<&str>) -> Option<QuotaLimits> {
    // Most clusters set no quota: no key to build per request then.
    if quotas.is_empty() {
        return None;
    }
    principal
        .and_then(|name| quotas.get(&QuotaEntity::User(name.to_owned())))
        .or_else(|| quotas.get(&QuotaEntity::DefaultUser))
        .copied()
}

/// The connection limit of source address `address`: its own entry, else
/// the default one.
#[must_use]
pub fn address_connections(quotas: &Quotas, address: core::net::IpAddr) -> Option<u32> {
    quotas
        .get(&QuotaEntity::Ip(address))
        .or_else(|| quotas.get(&QuotaEntity::DefaultIp))
        .and_then(|limits| limits.connections)
}

pub(crate) fn write_quota(writer: &mut Writer, entity: &QuotaEntity, limits: &QuotaLimits) {
    writer.str(&entity.to_string());
    write_opt_u64(writer, limits.produce_bytes_per_second);
    write_opt_u64(writer, limits.fetch_bytes_per_second);
    write_opt_u64(writer, limits.request_percent.map(u64::from));
    write_opt_u64(writer, limits.connections.map(u64::from));
}

/// Writes the topic, partition and group limits (the extension of
/// [`write_quota`]).
pub(crate) fn write_object_limits(writer: &mut Writer, limits: &QuotaLimits) {
    write_opt_u64(writer, limits.topics.map(u64::from));
    write_opt_u64(writer, limits.partitions.map(u64::from));
    write_opt_u64(writer, limits.groups.map(u64::from));
}

/// Reads what [`write_object_limits`] wrote into `limits`.
pub(crate) fn read_object_limits(
    reader: &mut Reader<'_>,
    limits: &mut QuotaLimits,
) -> Result<(), DecodeError> {
    limits.topics = read_opt_u32(reader, "topic limit")?;
    limits.partitions = read_opt_u32(reader, "partition limit")?;
    limits.groups = read_opt_u32(reader, "group limit")?;
    Ok(())
}

fn read_opt_u32(reader: &mut Reader<'_>, what: &'static str) -> Result<Option<u32>, DecodeError> {
    let at = reader.position();
    read_opt_u64(reader, what)?
        .map(|value| {
            u32::try_from(value).map_err(|_| reader.invalid_at(what, at, "over u32".to_owned()))
        })
        .transpose()
}

pub(crate) fn read_quota(
    reader: &mut Reader<'_>,
) -> Result<(QuotaEntity, QuotaLimits), DecodeError> {
    let at = reader.position();
    let entity = reader.str("quota entity", QUOTA_ENTITY_BYTES_MAX)?;
    let entity = QuotaEntity::parse(&entity)
        .map_err(|reason| reader.invalid_at("quota entity", at, reason))?;
    let produce_bytes_per_second = read_opt_u64(reader, "produce quota")?;
    let fetch_bytes_per_second = read_opt_u64(reader, "fetch quota")?;
    let narrow = |reader: &Reader<'_>, value: Option<u64>, what: &'static str| {
        value
            .map(|value| {
                u32::try_from(value)
                    .map_err(|_| reader.invalid_at(what, reader.position(), "over u32".to_owned()))
            })
            .transpose()
    };
    let request_percent = read_opt_u64(reader, "request quota")?;
    let request_percent = narrow(reader, request_percent, "request quota")?;
    let connections = read_opt_u64(reader, "connection quota")?;
    let connections = narrow(reader, connections, "connection quota")?;
    Ok((
        entity,
        QuotaLimits {
            produce_bytes_per_second,
            fetch_bytes_per_second,
            request_percent,
            connections,
            ..QuotaLimits::default()
        },
    ))
}

fn write_opt_u64(writer: &mut Writer, value: Option<u64>) {
    match value {
        None => writer.u8(0),
        Some(value) => {
            writer.u8(1);
            writer.u64(value);
        }
    }
}

fn read_opt_u64(reader: &mut Reader<'_>, what: &'static str) -> Result<Option<u64>, DecodeError> {
    let at = reader.position();
    match reader.u8(what)? {
        0 => Ok(None),
        1 => Ok(Some(reader.u64(what)?)),
        other => Err(reader.invalid_at(what, at, format!("presence byte {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entities_parse_and_print_alike() {
        for text in ["user:alice", "user:*", "ip:10.0.0.7", "ip:*", "ip:::1"] {
            assert_eq!(QuotaEntity::parse(text).unwrap().to_string(), text);
        }
        for bad in ["alice", "user:", "user:a b", "ip:nowhere", "group:x"] {
            assert!(QuotaEntity::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn limits_fit_their_entity() {
        let user = QuotaEntity::User("alice".to_owned());
        let ip = QuotaEntity::DefaultIp;
        let rate = QuotaLimits {
            produce_bytes_per_second: Some(1 << 20),
            ..QuotaLimits::default()
        };
        assert!(rate.check(&user).is_ok());
        assert!(rate.check(&ip).unwrap_err().contains("connections only"));
        let connections = QuotaLimits {
            connections: Some(10),
            ..QuotaLimits::default()
        };
        assert!(connections.check(&ip).is_ok());
        assert!(QuotaLimits::default().check(&user).is_err());
        let share = QuotaLimits {
            request_percent: Some(101),
            ..QuotaLimits::default()
        };
        assert!(share.check(&user).is_err());
        let topics = QuotaLimits {
            topics: Some(0),
            ..QuotaLimits::default()
        };
        assert!(topics.check(&user).is_ok(), "0 topics forbids creating any");
        assert!(topics.check(&ip).unwrap_err().contains("connections only"));
    }

    #[test]
    fn a_principal_without_an_entry_gets_the_default() {
        let mut quotas = Quotas::new();
        let own = QuotaLimits {
            produce_bytes_per_second: Some(100),
            ..QuotaLimits::default()
        };
        let default = QuotaLimits {
            produce_bytes_per_second: Some(10),
            ..QuotaLimits::default()
        };
        assert_eq!(principal_limits(&quotas, Some("alice")), None);
        quotas.insert(QuotaEntity::User("alice".to_owned()), own);
        quotas.insert(QuotaEntity::DefaultUser, default);
        assert_eq!(principal_limits(&quotas, Some("alice")), Some(own));
        assert_eq!(principal_limits(&quotas, Some("bob")), Some(default));
        assert_eq!(principal_limits(&quotas, None), Some(default));
        let address = "10.0.0.7".parse().unwrap();
        assert_eq!(address_connections(&quotas, address), None);
    }

    #[test]
    fn a_quota_round_trips() {
        let entity = QuotaEntity::User("alice".to_owned());
        let limits = QuotaLimits {
            produce_bytes_per_second: Some(5),
            fetch_bytes_per_second: None,
            request_percent: Some(20),
            connections: Some(3),
            topics: Some(4),
            partitions: None,
            groups: Some(0),
        };
        let mut writer = Writer::default();
        write_quota(&mut writer, &entity, &limits);
        write_object_limits(&mut writer, &limits);
        let mut reader = Reader::new(&writer.bytes, 0);
        let (read_entity, mut read_limits) = read_quota(&mut reader).unwrap();
        read_object_limits(&mut reader, &mut read_limits).unwrap();
        assert_eq!((read_entity, read_limits), (entity, limits));
        reader.finish().unwrap();
    }
}
