//! Deliveries a load generator awaits, collected without tripping tokio's
//! cooperative budget.
//!
//! A paced producer holds tens of thousands of pending deliveries (each a
//! oneshot receiver) in one `FuturesUnordered`. Once the task's coop
//! budget is spent, every receiver polled answers `Pending` and wakes
//! itself, so each poll of the set re-polls up to 32 of them for nothing
//! (futures-rs #2053, tokio #2390). A generator catching up after a stall
//! polls the set after every send, so that waste made it the bottleneck:
//! measured, 74 % of its CPU in `poll_next`/`wake_by_ref`, three times its
//! usual CPU, and tens of seconds of "latency" while the broker idled.
//! Polled unconstrained, a receiver is pending only when its delivery is.

use std::future::Future;

use futures::stream::{FuturesUnordered, StreamExt};

/// Futures in flight, completed in any order.
pub struct InFlight<F> {
    futures: FuturesUnordered<F>,
}

impl<F: Future> InFlight<F> {
    pub fn new() -> InFlight<F> {
        InFlight {
            futures: FuturesUnordered::new(),
        }
    }

    pub fn push(&mut self, future: F) {
        self.futures.push(future);
    }

    pub fn is_empty(&self) -> bool {
        self.futures.is_empty()
    }

    /// The next to complete; `None` once none is left.
    pub async fn next(&mut self) -> Option<F::Output> {
        tokio::task::unconstrained(self.futures.next()).await
    }

    /// One that already completed, without waiting.
    pub fn completed(&mut self) -> Option<F::Output> {
        futures::FutureExt::now_or_never(self.next()).flatten()
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll};

    use futures::FutureExt;
    use tokio::sync::oneshot;

    use super::InFlight;

    /// A delivery that counts how often it is polled.
    struct Counted {
        polls: Arc<AtomicUsize>,
        delivery: oneshot::Receiver<u32>,
    }

    impl Future for Counted {
        type Output = u32;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            self.delivery.poll_unpin(cx).map(|value| value.unwrap_or(0))
        }
    }

    /// Spends the task's coop budget without yielding: ready receivers
    /// answer `Pending` once it is gone.
    fn spend_budget() {
        for _ in 0..10_000 {
            let (sender, receiver) = oneshot::channel();
            let _sent = sender.send(());
            if receiver.now_or_never().is_none() {
                return;
            }
        }
        panic!("no coop budget in this runtime: the test shows nothing");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn completed_deliveries_are_collected_once_each_with_the_budget_spent() {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut in_flight = InFlight::new();
        let mut senders = Vec::new();
        for _ in 0..1_000 {
            let (sender, delivery) = oneshot::channel();
            senders.push(sender);
            in_flight.push(Counted {
                polls: polls.clone(),
                delivery,
            });
        }
        assert_eq!(in_flight.completed(), None, "nothing delivered yet");
        assert_eq!(polls.load(Ordering::Relaxed), 1_000);
        for (index, sender) in senders.into_iter().enumerate() {
            let _sent = sender.send(index as u32);
        }
        spend_budget();
        let mut collected = Vec::new();
        while let Some(value) = in_flight.completed() {
            collected.push(value);
        }
        collected.sort_unstable();
        assert_eq!(collected, (0..1_000).collect::<Vec<u32>>());
        assert!(in_flight.is_empty());
        assert_eq!(
            polls.load(Ordering::Relaxed),
            2_000,
            "each delivery polled once to register, once to complete"
        );
    }
}
