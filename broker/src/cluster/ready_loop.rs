//! The controller node's Ready loop, in the order the controller crate
//! prescribes (`corelog_controller`'s crate docs, "Driving a node"): the
//! records durable, then the messages sent, then what committed acted on,
//! then `advance`, until the node has nothing more to hand out.
//!
//! Persist-before-send is what makes a vote or an append acknowledgement a
//! promise, so the order lives in one place: the broker's
//! [`super::controller_service::ControllerService`] and the simulator's
//! controller processes both run [`handle_readies`], each over its own log
//! file ([`ControllerLog`]) and transport ([`ReadyHost`]).

use std::cell::RefCell;

use corelog_controller::{ControllerNode, ControllerReady, OutboundMessage, Resolved, Role};

/// The controller's Raft log file, as the Ready loop writes it.
#[allow(
    async_fn_in_trait,
    reason = "single-threaded executors: futures need not be Send"
)]
pub trait ControllerLog {
    /// Appends `records` at the end and makes them durable: fdatasync, then
    /// the synced length recorded in the header.
    ///
    /// # Errors
    /// The I/O failure; the caller stops the controller role, as the
    /// records must be presumed lost.
    async fn persist(&mut self, records: &[u8]) -> Result<(), String>;

    /// Replaces the whole file with `contents`, atomically.
    ///
    /// # Errors
    /// As [`ControllerLog::persist`].
    async fn replace(&mut self, contents: &[u8]) -> Result<(), String>;
}

/// The shell around a controller node, as the Ready loop uses it.
pub trait ReadyHost {
    /// The node.
    fn node(&self) -> &RefCell<ControllerNode>;

    /// A Ready was handed out, before anything of it is done (a checker's
    /// hook; nothing to do in production).
    fn observe(&self, ready: &ControllerReady) {
        let _ = ready;
    }

    /// Sends a message to another voter, best effort: Raft resends what is
    /// lost. Called only once the Ready's records are durable.
    fn send(&self, message: OutboundMessage);

    /// One of this node's proposals ended: answer whoever waits for it.
    fn resolve(&self, resolved: Resolved);

    /// After this Ready the node does not lead: drop what only a leader
    /// keeps.
    fn not_leading(&self);

    /// The node advanced; `applied_moved` when the metadata version moved
    /// (publish it).
    fn advanced(&self, applied_moved: bool);
}

/// Handles every Ready the node has, in order; returns when it has none.
///
/// # Errors
/// The node halted or the log failed: the caller stops the controller
/// role.
pub async fn handle_readies<H: ReadyHost, L: ControllerLog>(
    host: &H,
    log: &mut L,
) -> Result<(), String> {
    loop {
        let ready = host.node().borrow_mut().ready();
        let ready = match ready {
            Ok(Some(ready)) => ready,
            Ok(None) => return Ok(()),
            Err(error) => return Err(error.to_string()),
        };
        host.observe(&ready);
        // 1. Durable before anything is sent.
        let records = ready.log_records();
        if !records.is_empty() {
            log.persist(&records).await?;
        }
        if ready.compacts_log() {
            let compacted = host.node().borrow().compacted_log();
            log.replace(&compacted).await?;
        }
        // 2. Messages.
        for message in ready.messages {
            host.send(message);
        }
        // 3. What committed.
        let applied_moved = !ready.committed.is_empty() || ready.snapshot.is_some();
        for resolved in ready.resolved {
            host.resolve(resolved);
        }
        if ready.role != Role::Leader {
            host.not_leading();
        }
        // 4. Advance.
        host.node().borrow_mut().advance();
        host.advanced(applied_moved);
        if let Some(error) = host.node().borrow().halted() {
            return Err(error.to_string());
        }
    }
}
