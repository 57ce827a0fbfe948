//! The simulator's executor: one thread, simulated time, and the broker's
//! [`Executor`] seam, so that the production replica shell runs here with
//! every interleaving a function of the seed.
//!
//! Tasks run in the order they were woken (FIFO), timers fire in deadline
//! order (ties in the order they were set), and time moves only when the
//! simulation advances it ([`SimExecutor::advance_to`]). Every task has an
//! owner, a node incarnation: a crash drops all of that incarnation's
//! tasks at once ([`SimExecutor::cancel`]), as a killed process loses its
//! threads, so that nothing the dead incarnation started writes on.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use corelog_broker::executor::Executor;
use futures::future::LocalBoxFuture;

/// Who a task belongs to: a node and its incarnation.
pub type Owner = (u32, u64);

struct Task {
    owner: Owner,
    future: Option<LocalBoxFuture<'static, ()>>,
}

/// Task ids woken and not yet polled, in wake order.
#[derive(Default)]
struct ReadyQueue(Mutex<VecDeque<u64>>);

impl ReadyQueue {
    fn push(&self, id: u64) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(id);
    }

    fn pop(&self) -> Option<u64> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
    }
}

struct TaskWaker {
    id: u64,
    queue: Arc<ReadyQueue>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.queue.push(self.id);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.queue.push(self.id);
    }
}

struct Inner {
    now_ms: Cell<u64>,
    origin: Instant,
    tasks: RefCell<BTreeMap<u64, Task>>,
    next_task: Cell<u64>,
    ready: Arc<ReadyQueue>,
    /// Deadline and sequence number → the sleeping task's waker.
    timers: RefCell<BTreeMap<(u64, u64), Waker>>,
    next_timer: Cell<u64>,
    /// Tasks polled so far (statistics).
    polls: Cell<u64>,
}

/// The deterministic executor; clones share it.
#[derive(Clone)]
pub struct SimExecutor {
    inner: Rc<Inner>,
}

impl fmt::Debug for SimExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimExecutor")
            .field("now_ms", &self.inner.now_ms.get())
            .field("tasks", &self.inner.tasks.borrow().len())
            .field("timers", &self.inner.timers.borrow().len())
            .finish()
    }
}

impl Default for SimExecutor {
    fn default() -> Self {
        Self::new()
    }
}

impl SimExecutor {
    /// An executor at simulated time 0.
    #[must_use]
    pub fn new() -> SimExecutor {
        SimExecutor {
            inner: Rc::new(Inner {
                now_ms: Cell::new(0),
                // Only differences of instants are ever used, so the
                // real start time never reaches any decision.
                origin: Instant::now(),
                tasks: RefCell::new(BTreeMap::new()),
                next_task: Cell::new(0),
                ready: Arc::new(ReadyQueue::default()),
                timers: RefCell::new(BTreeMap::new()),
                next_timer: Cell::new(0),
                polls: Cell::new(0),
            }),
        }
    }

    /// The simulated time, in milliseconds since the start.
    #[must_use]
    pub fn now_ms(&self) -> u64 {
        self.inner.now_ms.get()
    }

    /// The simulated time as an instant (the start plus the simulated
    /// milliseconds).
    #[must_use]
    pub fn instant(&self) -> Instant {
        self.inner.origin + Duration::from_millis(self.now_ms())
    }

    /// Tasks polled so far.
    #[must_use]
    pub fn polls(&self) -> u64 {
        self.inner.polls.get()
    }

    /// The executor as the broker sees it, for tasks of `owner`.
    #[must_use]
    pub fn for_owner(&self, owner: Owner) -> Rc<dyn Executor> {
        Rc::new(OwnedExecutor {
            sim: self.clone(),
            owner,
        })
    }

    /// Runs `future` as a task of `owner`; it is polled first when the
    /// ready tasks before it have been.
    pub fn spawn(&self, owner: Owner, future: impl Future<Output = ()> + 'static) {
        self.spawn_boxed(owner, Box::pin(future));
    }

    fn spawn_boxed(&self, owner: Owner, future: LocalBoxFuture<'static, ()>) {
        let id = self.inner.next_task.get();
        self.inner.next_task.set(id + 1);
        self.inner.tasks.borrow_mut().insert(
            id,
            Task {
                owner,
                future: Some(future),
            },
        );
        self.inner.ready.push(id);
    }

    /// Drops every task of `owner` (a crashed incarnation).
    pub fn cancel(&self, owner: Owner) {
        let cancelled: Vec<Task> = {
            let mut tasks = self.inner.tasks.borrow_mut();
            let ids: Vec<u64> = tasks
                .iter()
                .filter(|(_, task)| task.owner == owner)
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter().filter_map(|id| tasks.remove(&id)).collect()
        };
        // Dropped outside the borrow: a future's drop may touch the
        // executor (a sleep unregisters its timer).
        drop(cancelled);
    }

    /// Polls one ready task; returns false when none is ready.
    pub fn poll_one(&self) -> bool {
        loop {
            let Some(id) = self.inner.ready.pop() else {
                return false;
            };
            // A task woken twice, finished or cancelled is skipped.
            let Some(mut future) = self
                .inner
                .tasks
                .borrow_mut()
                .get_mut(&id)
                .and_then(|task| task.future.take())
            else {
                continue;
            };
            let waker = Waker::from(Arc::new(TaskWaker {
                id,
                queue: self.inner.ready.clone(),
            }));
            let mut context = Context::from_waker(&waker);
            self.inner.polls.set(self.inner.polls.get() + 1);
            let done = future.as_mut().poll(&mut context).is_ready();
            let mut tasks = self.inner.tasks.borrow_mut();
            if done {
                tasks.remove(&id);
            } else if let Some(task) = tasks.get_mut(&id) {
                task.future = Some(future);
            }
            // Cancelled while it ran: dropped when `future` goes out of
            // scope after the borrow ends.
            drop(tasks);
            return true;
        }
    }

    /// The deadline of the next timer, if any.
    #[must_use]
    pub fn next_timer_ms(&self) -> Option<u64> {
        self.inner
            .timers
            .borrow()
            .keys()
            .next()
            .map(|(deadline, _)| *deadline)
    }

    /// Moves time to `now_ms` (never backwards) and wakes every timer due.
    ///
    /// # Panics
    /// If `now_ms` is before the current time.
    pub fn advance_to(&self, now_ms: u64) {
        assert!(now_ms >= self.now_ms(), "simulated time moved backwards");
        self.inner.now_ms.set(now_ms);
        loop {
            let due = {
                let mut timers = self.inner.timers.borrow_mut();
                match timers.first_entry() {
                    Some(entry) if entry.key().0 <= now_ms => Some(entry.remove()),
                    _ => None,
                }
            };
            match due {
                Some(waker) => waker.wake(),
                None => return,
            }
        }
    }

    /// A future that resolves once simulated time has moved `duration`
    /// on (at least one millisecond: the clock's resolution).
    pub fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + 'static {
        let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        // Sub-millisecond sleeps still yield to the next millisecond, as a
        // timer tick would.
        let deadline = self.now_ms().saturating_add(millis.max(1));
        let sequence = self.inner.next_timer.get();
        self.inner.next_timer.set(sequence + 1);
        Sleep {
            sim: self.clone(),
            key: (deadline, sequence),
        }
    }
}

/// A timer: ready once simulated time reaches its deadline.
struct Sleep {
    sim: SimExecutor,
    key: (u64, u64),
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<()> {
        if self.sim.now_ms() >= self.key.0 {
            self.sim.inner.timers.borrow_mut().remove(&self.key);
            return Poll::Ready(());
        }
        self.sim
            .inner
            .timers
            .borrow_mut()
            .insert(self.key, context.waker().clone());
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.sim.inner.timers.borrow_mut().remove(&self.key);
    }
}

/// [`SimExecutor`] as one owner's [`Executor`].
struct OwnedExecutor {
    sim: SimExecutor,
    owner: Owner,
}

impl fmt::Debug for OwnedExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedExecutor")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl Executor for OwnedExecutor {
    fn spawn(&self, task: LocalBoxFuture<'static, ()>) {
        self.sim.spawn_boxed(self.owner, task);
    }

    fn sleep(&self, duration: Duration) -> LocalBoxFuture<'static, ()> {
        Box::pin(self.sim.sleep(duration))
    }

    fn now(&self) -> Instant {
        self.sim.instant()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    #[test]
    fn tasks_run_in_wake_order_and_sleep_on_simulated_time() {
        let sim = SimExecutor::new();
        let log = Rc::new(RefCell::new(Vec::new()));
        for (name, delay) in [("slow", 30), ("fast", 10), ("none", 0)] {
            let executor = sim.for_owner((1, 0));
            let log = log.clone();
            sim.spawn((1, 0), async move {
                if delay > 0 {
                    executor.sleep(Duration::from_millis(delay)).await;
                }
                log.borrow_mut().push((name, executor.now()));
            });
        }
        while sim.poll_one() {}
        assert_eq!(log.borrow().len(), 1, "only the task without a sleep ran");
        while let Some(next) = sim.next_timer_ms() {
            sim.advance_to(next);
            while sim.poll_one() {}
        }
        let names: Vec<&str> = log.borrow().iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["none", "fast", "slow"]);
        assert_eq!(sim.now_ms(), 30);
        assert_eq!(
            log.borrow()[2].1.duration_since(log.borrow()[0].1),
            Duration::from_millis(30)
        );
    }

    #[test]
    fn a_cancelled_owner_runs_no_more() {
        let sim = SimExecutor::new();
        let ran = Rc::new(Cell::new(0));
        for owner in [(1, 0), (2, 0)] {
            let executor = sim.for_owner(owner);
            let ran = ran.clone();
            sim.spawn(owner, async move {
                executor.sleep(Duration::from_millis(5)).await;
                ran.set(ran.get() + 1);
            });
        }
        while sim.poll_one() {}
        sim.cancel((1, 0));
        sim.advance_to(10);
        while sim.poll_one() {}
        assert_eq!(ran.get(), 1);
        assert_eq!(
            sim.next_timer_ms(),
            None,
            "the cancelled sleep left no timer"
        );
    }
}
