//! Admission control for produce work: a shard admits produce requests
//! only while the bytes it has admitted and not yet answered stay under
//! `produce_bytes_in_flight_max`. A connection whose produce does not fit
//! waits before handing it on, and reads nothing more meanwhile, so that
//! past its capacity a broker pushes back (TCP fills, the producer's
//! buffer fills, its `send` blocks) instead of queueing work it cannot
//! commit within any timeout.
//!
//! Waiters are served in arrival order: a large request is not overtaken
//! forever by small ones. A request larger than the whole bound is
//! admitted alone, once nothing else is in flight. Pure bookkeeping on one
//! executor: no timer, no I/O.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use event_listener::Event;
use prometheus_client::metrics::gauge::Gauge;

/// One shard's produce bytes in flight.
#[derive(Debug)]
pub struct ProduceAdmission {
    limit: u64,
    state: RefCell<State>,
    /// `corelog_produce_bytes_in_flight`: kept with the count it shows.
    gauge: Gauge,
    /// Notified whenever bytes are released or a waiter leaves the queue.
    changed: Event,
}

#[derive(Debug, Default)]
struct State {
    in_flight: u64,
    /// Tickets of the waiters, in arrival order.
    queue: VecDeque<u64>,
    next_ticket: u64,
}

/// Bytes admitted, given back when dropped.
#[derive(Debug)]
#[must_use = "the bytes are given back when this is dropped"]
pub struct Admitted {
    admission: Rc<ProduceAdmission>,
    bytes: u64,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut state = self.admission.state.borrow_mut();
        state.in_flight -= self.bytes;
        self.admission.show(&state);
        drop(state);
        self.admission.changed.notify(usize::MAX);
    }
}

/// A place in the queue, given up if the wait is dropped.
struct Waiting<'a> {
    admission: &'a ProduceAdmission,
    ticket: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut state = self.admission.state.borrow_mut();
        if let Some(at) = state.queue.iter().position(|ticket| *ticket == self.ticket) {
            state.queue.remove(at);
            drop(state);
            // The waiter behind may be at the front now.
            self.admission.changed.notify(usize::MAX);
        }
    }
}

impl ProduceAdmission {
    /// At most `limit` bytes in flight (a single larger request alone);
    /// `gauge` shows how many are.
    #[must_use]
    pub fn new(limit: u64, gauge: Gauge) -> Rc<ProduceAdmission> {
        Rc::new(ProduceAdmission {
            limit,
            state: RefCell::new(State::default()),
            gauge,
            changed: Event::new(),
        })
    }

    /// Bytes admitted and not yet given back.
    #[must_use]
    pub fn in_flight(&self) -> u64 {
        self.state.borrow().in_flight
    }

    /// Requests waiting for admission.
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.state.borrow().queue.len()
    }

    /// Admits `bytes` at once if nobody waits and they fit; `None` then
    /// [`ProduceAdmission::admit`] must wait.
    #[must_use]
    pub fn try_admit(self: &Rc<Self>, bytes: u64) -> Option<Admitted> {
        let mut state = self.state.borrow_mut();
        if !state.queue.is_empty() || !self.fits(&state, bytes) {
            return None;
        }
        state.in_flight += bytes;
        self.show(&state);
        drop(state);
        Some(Admitted {
            admission: Rc::clone(self),
            bytes,
        })
    }

    /// Waits until `bytes` fit, behind every earlier waiter, and admits
    /// them.
    pub async fn admit(self: &Rc<Self>, bytes: u64) -> Admitted {
        if let Some(admitted) = self.try_admit(bytes) {
            return admitted;
        }
        let ticket = {
            let mut state = self.state.borrow_mut();
            let ticket = state.next_ticket;
            state.next_ticket += 1;
            state.queue.push_back(ticket);
            ticket
        };
        let waiting = Waiting {
            admission: self,
            ticket,
        };
        loop {
            let changed = self.changed.listen();
            {
                let mut state = self.state.borrow_mut();
                if state.queue.front() == Some(&ticket) && self.fits(&state, bytes) {
                    state.queue.pop_front();
                    state.in_flight += bytes;
                    self.show(&state);
                    drop(state);
                    std::mem::forget(waiting);
                    // The next waiter may fit beside this one.
                    self.changed.notify(usize::MAX);
                    return Admitted {
                        admission: Rc::clone(self),
                        bytes,
                    };
                }
            }
            changed.await;
        }
    }

    fn show(&self, state: &State) {
        self.gauge
            .set(i64::try_from(state.in_flight).unwrap_or(i64::MAX));
    }

    fn fits(&self, state: &State, bytes: u64) -> bool {
        state.in_flight == 0 || state.in_flight.saturating_add(bytes) <= self.limit
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use futures::FutureExt;
    use futures::executor::LocalPool;
    use futures::task::LocalSpawnExt;

    use prometheus_client::metrics::gauge::Gauge;

    use super::ProduceAdmission;

    #[test]
    fn admits_up_to_the_bound_then_in_arrival_order() {
        let gauge = Gauge::default();
        let admission = ProduceAdmission::new(100, gauge.clone());
        let first = admission.try_admit(60).expect("fits");
        assert_eq!(gauge.get(), 60, "the gauge shows what is admitted");
        assert!(admission.try_admit(50).is_none(), "over the bound");
        let mut pool = LocalPool::new();
        let order = Rc::new(RefCell::new(Vec::new()));
        let mut held = Vec::new();
        for (name, bytes) in [("large", 90), ("small", 10)] {
            let admission = admission.clone();
            let order = order.clone();
            held.push(
                pool.spawner()
                    .spawn_local_with_handle(async move {
                        let admitted = admission.admit(bytes).await;
                        order.borrow_mut().push(name);
                        admitted
                    })
                    .expect("spawned"),
            );
        }
        pool.run_until_stalled();
        // The small one would fit beside the first, but it came second.
        assert!(order.borrow().is_empty());
        assert_eq!(admission.waiting(), 2);
        assert!(admission.try_admit(1).is_none(), "no one jumps the queue");
        drop(first);
        pool.run_until_stalled();
        assert_eq!(*order.borrow(), ["large", "small"]);
        assert_eq!(admission.in_flight(), 100);
        assert_eq!(gauge.get(), 100);
        let admitted: Vec<_> = held
            .into_iter()
            .map(|handle| handle.now_or_never().expect("done"))
            .collect();
        drop(admitted);
        assert_eq!(admission.in_flight(), 0);
        assert_eq!(gauge.get(), 0, "and what is given back");
    }

    #[test]
    fn a_request_larger_than_the_bound_is_admitted_alone() {
        let admission = ProduceAdmission::new(100, Gauge::default());
        let small = admission.try_admit(10).expect("fits");
        assert!(admission.try_admit(500).is_none());
        drop(small);
        let large = admission.try_admit(500).expect("alone");
        assert!(admission.try_admit(1).is_none());
        drop(large);
        assert_eq!(admission.in_flight(), 0);
    }

    #[test]
    fn a_waiter_that_gives_up_leaves_the_queue() {
        let admission = ProduceAdmission::new(100, Gauge::default());
        let first = admission.try_admit(100).expect("fits");
        let mut pool = LocalPool::new();
        let gone = pool
            .spawner()
            .spawn_local_with_handle({
                let admission = admission.clone();
                async move { admission.admit(50).await }
            })
            .expect("spawned");
        let behind = pool
            .spawner()
            .spawn_local_with_handle({
                let admission = admission.clone();
                async move { admission.admit(50).await }
            })
            .expect("spawned");
        pool.run_until_stalled();
        assert_eq!(admission.waiting(), 2);
        drop(gone);
        pool.run_until_stalled();
        assert_eq!(admission.waiting(), 1);
        drop(first);
        pool.run_until_stalled();
        let admitted = behind.now_or_never().expect("admitted");
        assert_eq!(admission.in_flight(), 50);
        drop(admitted);
    }
}
