//! What every part of a run shares: the executor, the network, the trace,
//! the calls awaiting answers, and the reports tasks leave for the
//! checker.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use corelog_wire::types::Offset;
use futures::channel::oneshot;
use futures::future::{Either, select};

use crate::executor::SimExecutor;
use crate::network::{Answer, Endpoint, Message, Network};
use crate::trace::Trace;

/// A node process: its id and how often it restarted.
pub type Incarnation = (u32, u64);

/// What a task tells the checker, which reads the reports after each step.
#[derive(Clone, Debug)]
pub enum Report {
    /// A leader acknowledged a client's batch as committed at `base`.
    Acknowledged {
        /// The leader.
        by: Incarnation,
        /// The client.
        client: u32,
        /// Its request.
        request: u64,
        /// Where the leader said the batch is.
        base: Offset,
        /// The values of the batch's records, as the client sent them.
        values: Vec<Bytes>,
    },
    /// Something that must never happen, seen where it happened.
    Violation(String),
}

/// The shared parts of a run.
pub struct World {
    /// Runs every task and keeps the time.
    pub executor: SimExecutor,
    /// The network.
    pub network: RefCell<Network>,
    /// The event trace.
    pub trace: RefCell<Trace>,
    /// Reports for the checker.
    pub reports: RefCell<Vec<Report>>,
    /// The controller processes, which brokers send their sessions to.
    controllers: RefCell<Vec<Endpoint>>,
    next_call: Cell<u64>,
    waiting: RefCell<BTreeMap<u64, oneshot::Sender<Answer>>>,
}

impl fmt::Debug for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("World")
            .field("executor", &self.executor)
            .field("calls_waiting", &self.waiting.borrow().len())
            .finish_non_exhaustive()
    }
}

impl World {
    /// A world at time 0.
    #[must_use]
    pub fn new(executor: SimExecutor, network: Network, trace: Trace) -> World {
        World {
            executor,
            network: RefCell::new(network),
            trace: RefCell::new(trace),
            reports: RefCell::new(Vec::new()),
            controllers: RefCell::new(Vec::new()),
            next_call: Cell::new(0),
            waiting: RefCell::new(BTreeMap::new()),
        }
    }

    /// The simulated time, milliseconds.
    #[must_use]
    pub fn now_ms(&self) -> u64 {
        self.executor.now_ms()
    }

    /// Sends `message` now.
    pub fn send(&self, from: Endpoint, to: Endpoint, message: Message) {
        self.network
            .borrow_mut()
            .send(self.now_ms(), from, to, message);
    }

    /// Prints a trace line, if tracing.
    pub fn log(&self, line: impl FnOnce() -> String) {
        self.trace.borrow_mut().log(self.now_ms(), line);
    }

    /// Names the controller processes.
    pub fn set_controllers(&self, controllers: Vec<Endpoint>) {
        *self.controllers.borrow_mut() = controllers;
    }

    /// Sends `message` to every controller process (only the leader acts
    /// on it).
    pub fn send_to_controllers(&self, from: Endpoint, message: &Message) {
        let controllers = self.controllers.borrow().clone();
        for to in controllers {
            self.send(from, to, message.clone());
        }
    }

    /// Leaves a report for the checker.
    pub fn report(&self, report: Report) {
        self.reports.borrow_mut().push(report);
    }

    /// Sends the request `message(call)` and waits for its answer, or
    /// `timeout`: `None` then. A call whose task is dropped (its node
    /// crashed) stops waiting; a late answer finds nobody and is dropped.
    pub async fn call(
        &self,
        from: Endpoint,
        to: Endpoint,
        message: impl FnOnce(u64) -> Message,
        timeout: Duration,
    ) -> Option<Answer> {
        let call = self.next_call.get();
        self.next_call.set(call + 1);
        let (sender, receiver) = oneshot::channel();
        self.waiting.borrow_mut().insert(call, sender);
        let _waiting = Waiting { world: self, call };
        self.send(from, to, message(call));
        let deadline = self.executor.sleep(timeout);
        match select(receiver, Box::pin(deadline)).await {
            Either::Left((Ok(answer), _)) => Some(answer),
            Either::Left((Err(_), _)) | Either::Right(_) => None,
        }
    }

    /// An answer arrived for `call`.
    pub fn answer(&self, call: u64, answer: Answer) {
        if let Some(sender) = self.waiting.borrow_mut().remove(&call) {
            // The caller may have given up in this very step.
            let _delivered = sender.send(answer);
        }
    }
}

/// Removes a call from the waiting ones when its caller stops waiting.
struct Waiting<'a> {
    world: &'a World,
    call: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.world.waiting.borrow_mut().remove(&self.call);
    }
}
