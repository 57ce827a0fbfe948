//! The event log of a run, printed as it happens when replaying a seed
//! (`SIM_TRACE=1`, which `make sim SEED=N` sets) and formatted not at all
//! otherwise, so that thousands of seeds stay fast.

/// Where trace lines go.
#[derive(Debug, Default)]
pub struct Trace {
    enabled: bool,
}

impl Trace {
    /// A trace that prints when `enabled`.
    #[must_use]
    pub fn new(enabled: bool) -> Self {
        Self { enabled }
    }

    /// Prints the line `line()` at `now_ms`, if enabled.
    pub fn log(&mut self, now_ms: u64, line: impl FnOnce() -> String) {
        if self.enabled {
            println!("{now_ms:>6} ms  {}", line());
        }
    }
}
