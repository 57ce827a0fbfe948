//! Settings shared by the producer, the consumer and the admin client: where
//! the cluster is and how long to wait for it.

use std::time::Duration;

use crate::error::ClientError;
use crate::sasl::SaslCredentials;
use crate::tls::ClientTls;

/// The broker address used when none is given: a local `corelogd` started
/// with `make run`.
pub const DEFAULT_BOOTSTRAP: &str = "127.0.0.1:7100";

/// How to reach the cluster.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Broker addresses (`host:port`) to learn the cluster from; any one of
    /// them answering is enough. Default [`DEFAULT_BOOTSTRAP`].
    pub bootstrap: Vec<String>,
    /// This client's name, sent in ApiVersions for the broker's logs.
    pub client_name: String,
    /// Longest wait for a TCP connection to open. Default 10 s.
    pub connect_timeout: Duration,
    /// Longest wait for a response, beyond any wait the request itself asks
    /// for (a fetch's `max_wait`). A request past it closes its connection,
    /// since its fate can no longer be known. Default 30 s.
    pub request_timeout: Duration,
    /// Requests in flight on one connection. The broker stops reading a
    /// connection at its own bound (64 by default), so staying below it
    /// keeps the client's writes from stalling. Default 32.
    pub max_in_flight_per_connection: usize,
    /// Largest response frame accepted; a larger one closes the connection
    /// before anything is allocated for it (C9). Default 64 MiB.
    pub max_response_bytes: u32,
    /// Shortest interval between two metadata refreshes, so that a burst of
    /// leader errors costs one refresh. Default 25 ms: a refresh that came
    /// back before the new leader was published is repeated soon enough
    /// that a planned leadership move stalls a partition tens of
    /// milliseconds, not a hundred.
    pub metadata_refresh_backoff: Duration,
    /// Wait before reconnecting to a broker that refused or dropped a
    /// connection. Default 100 ms.
    pub reconnect_backoff: Duration,
    /// Send each partition's produce (and, where one shard owns most of a
    /// fetch, the fetch) to the broker shard that owns it, on the port
    /// that shard accepts on alone (learned with `DescribeShards`), so
    /// the broker does not forward it between its cores. A broker without
    /// per-shard ports is reached on its shared port either way. Default
    /// true.
    pub shard_aware: bool,
    /// TLS to every broker, or plaintext when `None` (the default).
    pub tls: Option<ClientTls>,
    /// Log in on every connection as this user (SCRAM), or not at all when
    /// `None` (the default). Use it with TLS: without, the user name and
    /// the traffic cross the network in the clear (the password never
    /// does).
    pub sasl: Option<SaslCredentials>,
}

impl Default for ClientConfig {
    fn default() -> ClientConfig {
        ClientConfig {
            bootstrap: vec![DEFAULT_BOOTSTRAP.to_owned()],
            client_name: "corelog-client".to_owned(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_in_flight_per_connection: 32,
            max_response_bytes: 64 << 20,
            metadata_refresh_backoff: Duration::from_millis(25),
            reconnect_backoff: Duration::from_millis(100),
            shard_aware: true,
            tls: None,
            sasl: None,
        }
    }
}

impl ClientConfig {
    /// Defaults, with the bootstrap brokers of `bootstrap`: one
    /// `host:port`, or several separated by commas as in Kafka's
    /// `bootstrap.servers` (`a:7100,b:7100`; spaces around each ignored).
    /// The client tries them in order until one answers.
    #[must_use]
    pub fn new(bootstrap: impl Into<String>) -> ClientConfig {
        ClientConfig {
            bootstrap: bootstrap
                .into()
                .split(',')
                .map(|address| address.trim().to_owned())
                .collect(),
            ..ClientConfig::default()
        }
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`ClientError::InvalidConfig`] naming the first bad setting.
    pub fn validate(&self) -> Result<(), ClientError> {
        if self.bootstrap.is_empty() {
            return Err(ClientError::InvalidConfig(
                "bootstrap needs at least one host:port".to_owned(),
            ));
        }
        if let Some(bad) = self.bootstrap.iter().find(|addr| !addr.contains(':')) {
            return Err(ClientError::InvalidConfig(format!(
                "bootstrap address {bad:?} is not host:port"
            )));
        }
        if self.max_in_flight_per_connection == 0 || self.max_in_flight_per_connection > 1024 {
            return Err(ClientError::InvalidConfig(
                "max_in_flight_per_connection must be between 1 and 1024".to_owned(),
            ));
        }
        if self.connect_timeout.is_zero() || self.request_timeout.is_zero() {
            return Err(ClientError::InvalidConfig(
                "timeouts must be positive".to_owned(),
            ));
        }
        if self.max_response_bytes < 1 << 20 {
            return Err(ClientError::InvalidConfig(
                "max_response_bytes must be at least 1 MiB".to_owned(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        ClientConfig::default().validate().unwrap();
        let error = ClientConfig::new("localhost").validate().unwrap_err();
        assert!(error.to_string().contains("host:port"), "{error}");
        let config = ClientConfig {
            max_in_flight_per_connection: 0,
            ..ClientConfig::default()
        };
        assert!(config.validate().is_err());
    }

    #[test]
    fn a_comma_separated_bootstrap_is_a_list_of_brokers() {
        let config = ClientConfig::new("a:7100, b:7101,c:7102");
        assert_eq!(config.bootstrap, ["a:7100", "b:7101", "c:7102"]);
        config.validate().unwrap();
        let error = ClientConfig::new("a:7100,").validate().unwrap_err();
        assert!(error.to_string().contains("bootstrap"), "{error}");
    }
}
