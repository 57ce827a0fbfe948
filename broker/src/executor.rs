//! The replica shell's view of its runtime: spawn a task, sleep, read the
//! monotonic clock. Production runs it on the shard's glommio executor
//! ([`GlommioExecutor`]); the deterministic simulator (`sim/`) runs the
//! same shell on its own executor, whose clock moves only when the
//! simulation says so, so that every interleaving replays from a seed.
//!
//! Small on purpose: it is what the shell needs and nothing more, and it
//! keeps glommio (whose last release is 0.9, March 2024) replaceable.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::rc::Rc;
use std::time::{Duration, Instant};

use event_listener::Event;
use futures::future::LocalBoxFuture;

/// Runs tasks of one shard and gives them time.
///
/// Contract: every method is called on the executor's own thread; a spawned
/// task runs concurrently with its spawner (never inside `spawn`); `sleep`
/// resolves no earlier than `duration` after it is called, on the clock of
/// [`Executor::now`]; `now` never moves backwards.
pub trait Executor: fmt::Debug {
    /// Runs `task` to completion in the background.
    fn spawn(&self, task: LocalBoxFuture<'static, ()>);

    /// A future that resolves after `duration`.
    fn sleep(&self, duration: Duration) -> LocalBoxFuture<'static, ()>;
    /// A future that resolves after `duration`, or up to two
    /// [`TIMEOUT_GRAIN`]s later: the timeout of a wait that nearly always
    /// ends first (every append has one), which needs no timer of its own.
    /// By default a [`sleep`](Executor::sleep).
    fn timeout(&self, duration: Duration) -> LocalBoxFuture<'static, ()> {
        self.sleep(duration)
    }

    /// The monotonic clock timers run on.
    fn now(&self) -> Instant;
}

/// Spawns a future on `executor`, boxing it.
pub fn spawn(executor: &dyn Executor, task: impl Future<Output = ()> + 'static) {
    executor.spawn(Box::pin(task));
}

/// The shard's glommio executor: tasks are glommio tasks, sleeps glommio
/// timers, the clock the system's monotonic one.
#[derive(Clone, Copy, Debug, Default)]
pub struct GlommioExecutor;

impl Executor for GlommioExecutor {
    fn spawn(&self, task: LocalBoxFuture<'static, ()>) {
        glommio::spawn_local(task).detach();
    }

    fn sleep(&self, duration: Duration) -> LocalBoxFuture<'static, ()> {
        Box::pin(async move {
            glommio::timer::sleep(duration).await;
        })
    }

    fn timeout(&self, duration: Duration) -> LocalBoxFuture<'static, ()> {
        COARSE_TIMEOUTS.with(|timeouts| timeouts.after(duration))
    }

    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// How finely [`Executor::timeout`] is kept on glommio.
pub const TIMEOUT_GRAIN: Duration = Duration::from_millis(5);

/// `count` grains: a slot's instant after the origin (never before a
/// timeout in it is due; saturates past 584 years).
fn grains(count: u128) -> Duration {
    let nanos = count.saturating_mul(TIMEOUT_GRAIN.as_nanos());
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

thread_local! {
    static COARSE_TIMEOUTS: Rc<CoarseTimeouts> = Rc::new(CoarseTimeouts::new());
}

/// A thread's timeouts, rounded up to a [`TIMEOUT_GRAIN`] and sharing one
/// event per grain, woken by one task on one glommio timer. A glommio timer
/// per append (inserted into the reactor, polled, removed) was 4% of a
/// shard's CPU with one-record batches.
struct CoarseTimeouts {
    origin: Instant,
    /// Grains since `origin` -> the event of the timeouts due then.
    slots: RefCell<BTreeMap<u128, Rc<Event>>>,
    ticking: Cell<bool>,
}

impl CoarseTimeouts {
    fn new() -> CoarseTimeouts {
        CoarseTimeouts {
            origin: Instant::now(),
            slots: RefCell::new(BTreeMap::new()),
            ticking: Cell::new(false),
        }
    }

    fn after(self: &Rc<Self>, duration: Duration) -> LocalBoxFuture<'static, ()> {
        let due = Instant::now() + duration;
        let slot = (due - self.origin)
            .as_nanos()
            .div_ceil(TIMEOUT_GRAIN.as_nanos());
        let event = Rc::clone(self.slots.borrow_mut().entry(slot).or_default());
        if !self.ticking.replace(true) {
            let this = Rc::clone(self);
            glommio::spawn_local(async move { this.tick().await }).detach();
        }
        Box::pin(async move {
            loop {
                // On the stack of this (boxed) future: no allocation per
                // turn.
                event_listener::listener!(event => listener);
                if Instant::now() >= due {
                    return;
                }
                listener.await;
            }
        })
    }

    /// Wakes each slot's timeouts once its instant passed; looks again at
    /// least every grain, so a slot added before the first is late by one
    /// grain at most. Ends when no slot is left.
    async fn tick(self: Rc<Self>) {
        loop {
            let Some(first) = self.slots.borrow().keys().next().copied() else {
                self.ticking.set(false);
                return;
            };
            let at = self.origin + grains(first);
            let now = Instant::now();
            if at > now {
                glommio::timer::sleep((at - now).min(TIMEOUT_GRAIN)).await;
                continue;
            }
            let due_slots = {
                let mut slots = self.slots.borrow_mut();
                let later = slots.split_off(&(first + 1));
                std::mem::replace(&mut *slots, later)
            };
            for event in due_slots.into_values() {
                event.notify(usize::MAX);
            }
        }
    }
}

/// Waits until `done` holds or `deadline` passes, on the shard's glommio
/// timers; returns whether `done` held. `event` must be notified whenever
/// `done` may have become true: the listener is taken before each check,
/// so no notification is lost.
pub async fn wait_until(event: &Event, deadline: Instant, done: impl Fn() -> bool) -> bool {
    loop {
        let listener = event.listen();
        if done() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        let timeout = glommio::timer::sleep(deadline - now);
        futures::future::select(listener, Box::pin(timeout)).await;
    }
}

#[cfg(test)]
mod tests {
    use futures::future::{Either, join, select};
    use glommio::{LocalExecutorBuilder, Placement};

    use super::*;

    fn on_glommio(test: impl FnOnce() -> LocalBoxFuture<'static, ()> + Send + 'static) {
        LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(1 << 20)
            .spawn(test)
            .unwrap()
            .join()
            .unwrap();
    }

    fn slots() -> usize {
        COARSE_TIMEOUTS.with(|timeouts| timeouts.slots.borrow().len())
    }

    #[test]
    fn coarse_timeouts_never_end_early_and_leave_nothing_behind() {
        on_glommio(|| {
            Box::pin(async {
                let start = Instant::now();
                let wait = Duration::from_millis(30);
                let first = GlommioExecutor.timeout(wait);
                let second = GlommioExecutor.timeout(wait);
                assert!(slots() <= 2, "timeouts due together share a slot");
                join(first, second).await;
                assert!(start.elapsed() >= wait);
                assert_eq!(slots(), 0, "a fired slot is removed");
                drop(GlommioExecutor.timeout(Duration::from_millis(10)));
                glommio::timer::sleep(Duration::from_millis(40)).await;
                assert_eq!(slots(), 0, "an abandoned timeout's slot passes too");
                assert!(COARSE_TIMEOUTS.with(|timeouts| !timeouts.ticking.get()));
            })
        });
    }

    #[test]
    fn a_timeout_due_before_the_first_slot_is_not_kept_waiting_for_it() {
        on_glommio(|| {
            Box::pin(async {
                let _later = GlommioExecutor.timeout(Duration::from_secs(60));
                // Let the ticker go to sleep towards the later slot.
                glommio::timer::sleep(TIMEOUT_GRAIN * 2).await;
                let sooner = GlommioExecutor.timeout(Duration::from_millis(20));
                let guard = glommio::timer::sleep(Duration::from_secs(10));
                match select(sooner, Box::pin(guard)).await {
                    Either::Left(((), _)) => {}
                    Either::Right(_) => panic!("the sooner timeout waited for the later slot"),
                }
            })
        });
    }
}
