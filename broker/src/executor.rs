//! The replica shell's view of its runtime: spawn a task, sleep, read the
//! monotonic clock. Production runs it on the shard's glommio executor
//! ([`GlommioExecutor`]); the deterministic simulator (`sim/`) runs the
//! same shell on its own executor, whose clock moves only when the
//! simulation says so, so that every interleaving replays from a seed.
//!
//! Small on purpose: it is what the shell needs and nothing more, and it
//! keeps glommio (whose last release is 0.9, March 2024) replaceable.

use std::fmt;
use std::future::Future;
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

    fn now(&self) -> Instant {
        Instant::now()
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
