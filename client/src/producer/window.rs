//! How many produce requests the producer keeps in flight to one broker
//! shard: an AIMD window, as TCP's congestion avoidance, driven by what
//! the broker says. It grows by one request per window's worth of answers
//! that came back promptly, and halves (at most once per round trip) when
//! the broker pushes back: a throttle, an append that timed out, or an
//! answer far slower than the fastest seen and than a second (a broker
//! far past its admission bound leaves requests waiting in TCP). Records the window
//! holds back wait in the producer's buffer, where they join larger
//! batches and where `send` blocks once the buffer is full, instead of
//! waiting inside an overloaded broker. Pure: time comes in as arguments.

use std::time::Duration;

use tokio::time::Instant;

/// An answer slower than this many times the fastest is pushback...
const SLOW_FACTOR: u32 = 10;
/// ...if it is slower than this too. A broker at its admission bound
/// answers in about half a second by design (its bound over its commit
/// rate); shrinking the window then would only leave the bound unfilled
/// (measured: 79% of offered load achieved at RF 3, 64 producers x 256
/// partitions, against 84% without a window, with a 250 ms floor). Slower
/// than this, requests wait in TCP and the broker's socket buffers.
const SLOW_FLOOR: Duration = Duration::from_secs(1);

/// One broker shard's window.
#[derive(Clone, Debug)]
pub(crate) struct Window {
    limit: f64,
    max: f64,
    in_flight: usize,
    /// When the window last halved: answers to requests sent before it
    /// describe the same congestion and do not halve it again.
    halved_at: Option<Instant>,
    fastest: Option<Duration>,
}

/// What an answer said about the broker's load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    /// Answered without pushback.
    Prompt,
    /// A throttle, or an append that timed out in the broker.
    Pushback,
    /// No answer (a broken connection): says nothing about load.
    Lost,
}

impl Window {
    /// A window of `max` requests at most, open to all of them at first.
    pub(crate) fn new(max: usize) -> Window {
        let max = max.max(1) as f64;
        Window {
            limit: max,
            max,
            in_flight: 0,
            halved_at: None,
            fastest: None,
        }
    }

    /// Requests that may be sent now.
    pub(crate) fn room(&self) -> usize {
        // `limit` is within 1..=max, a small count.
        (self.limit.floor() as usize).saturating_sub(self.in_flight)
    }

    /// The window's size now, in requests (for tests and stats).
    #[cfg(test)]
    pub(crate) fn limit(&self) -> f64 {
        self.limit
    }

    /// A request was sent.
    pub(crate) fn sent(&mut self) {
        self.in_flight += 1;
    }

    /// The request sent at `sent_at` came back at `now` with `signal`.
    pub(crate) fn answered(&mut self, sent_at: Instant, now: Instant, signal: Signal) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if signal == Signal::Lost {
            return;
        }
        let latency = now.saturating_duration_since(sent_at);
        let fastest = *self.fastest.get_or_insert(latency);
        self.fastest = Some(fastest.min(latency));
        let slow = latency > SLOW_FLOOR.max(fastest * SLOW_FACTOR);
        if signal == Signal::Pushback || slow {
            if self.halved_at.is_none_or(|halved| sent_at >= halved) {
                self.limit = (self.limit / 2.0).max(1.0);
                self.halved_at = Some(now);
            }
        } else {
            self.limit = (self.limit + 1.0 / self.limit).min(self.max);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{Signal, Window};

    #[test]
    fn pushback_halves_once_per_round_trip_and_prompt_answers_grow_it_back() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut window = Window::new(16);
        assert_eq!(window.room(), 16);
        for _ in 0..16 {
            window.sent();
        }
        assert_eq!(window.room(), 0);
        window.answered(at(0), at(5), Signal::Prompt);
        assert_eq!(window.room(), 1, "at its maximum already");
        // Two answers to requests sent before the first halving: one
        // halving.
        window.answered(at(1), at(10), Signal::Pushback);
        window.answered(at(2), at(11), Signal::Pushback);
        assert!((window.limit() - 8.0).abs() < 1e-9, "{}", window.limit());
        // A request sent after it, pushed back again: halved again.
        window.answered(at(12), at(20), Signal::Pushback);
        assert!((window.limit() - 4.0).abs() < 1e-9);
        // Never below one request.
        for ms in 30..40 {
            window.answered(at(ms), at(ms + 1), Signal::Pushback);
        }
        assert!((window.limit() - 1.0).abs() < 1e-9);
        // Additive increase: about one request per window of answers.
        for ms in 100..110 {
            window.answered(at(ms), at(ms + 5), Signal::Prompt);
        }
        assert!(
            window.limit() > 4.0 && window.limit() < 5.0,
            "{}",
            window.limit()
        );
    }

    #[test]
    fn an_answer_far_slower_than_the_fastest_is_pushback_and_a_lost_one_is_not() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut window = Window::new(8);
        window.answered(at(0), at(5), Signal::Prompt);
        window.answered(at(10), at(900), Signal::Prompt);
        assert!((window.limit() - 8.0).abs() < 1e-9, "under the floor");
        window.answered(at(1_000), at(2_100), Signal::Prompt);
        assert!((window.limit() - 4.0).abs() < 1e-9, "slow: halved");
        window.answered(at(3_000), at(9_000), Signal::Lost);
        assert!((window.limit() - 4.0).abs() < 1e-9, "lost: unchanged");
    }
}
