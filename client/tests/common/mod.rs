//! Shared test support: the fake broker and small helpers.

#![allow(dead_code, clippy::unwrap_used)]

pub mod fake_broker;
pub mod fake_groups;

use std::time::Duration;

use corelog_client::{ClientConfig, ConsumerConfig, ProducerConfig};

/// Client settings for tests: short timeouts so that lost replies and
/// retries show up in well under a second.
pub fn client_config(addr: &str) -> ClientConfig {
    ClientConfig {
        request_timeout: Duration::from_millis(500),
        reconnect_backoff: Duration::from_millis(20),
        metadata_refresh_backoff: Duration::from_millis(10),
        ..ClientConfig::new(addr)
    }
}

pub fn producer_config(addr: &str) -> ProducerConfig {
    ProducerConfig {
        client: client_config(addr),
        linger: Duration::from_millis(2),
        retry_backoff: Duration::from_millis(10),
        retry_backoff_max: Duration::from_millis(50),
        ack_timeout: Duration::from_millis(200),
        delivery_timeout: Duration::from_secs(10),
        topic_wait: Duration::from_millis(300),
        ..ProducerConfig::default()
    }
}

pub fn consumer_config(addr: &str) -> ConsumerConfig {
    ConsumerConfig {
        client: client_config(addr),
        fetch_max_wait: Duration::from_millis(100),
        retry_backoff: Duration::from_millis(10),
        ..ConsumerConfig::default()
    }
}

/// Waits until `condition` holds, failing the test after `seconds`.
pub async fn wait_until(seconds: u64, what: &str, condition: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
