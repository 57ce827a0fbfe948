//! Running the `corelog` command-line tool against a broker, as a person or
//! a script would: arguments, stdin, and what comes back on stdout, stderr
//! and the exit code.

use std::io::Write;
use std::process::{Child, Command, Output, Stdio};

use crate::binary;

/// Runs `corelog --bootstrap <bootstrap> <args>` with `stdin` as its input
/// (none: an empty, closed stdin) and waits for it to exit.
pub fn corelog(bootstrap: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = spawn(bootstrap, args);
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

/// Starts `corelog --bootstrap <bootstrap> <args>` with piped stdin, stdout
/// and stderr, for commands that run until stopped (`--follow`,
/// `--watch`). The caller ends it by its pid.
pub fn spawn(bootstrap: &str, args: &[&str]) -> Child {
    Command::new(binary("corelog"))
        .arg("--bootstrap")
        .arg(bootstrap)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A running `corelog` ([`spawn`]) that is killed when dropped, so that a
/// failed assertion does not leave it running (holding the test's pipes).
#[derive(Debug)]
pub struct Running(pub Child);

impl Running {
    /// Kills it and returns what it printed to stderr and how it ended.
    ///
    /// # Panics
    /// If it cannot be waited for.
    pub fn stop(mut self) -> (Option<std::process::ExitStatus>, String) {
        let exited = self.0.try_wait().unwrap();
        let _killed = self.0.kill();
        let mut stderr = String::new();
        if let Some(mut pipe) = self.0.stderr.take() {
            let _read = std::io::Read::read_to_string(&mut pipe, &mut stderr);
        }
        let _reaped = self.0.wait();
        (exited, stderr)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _killed = self.0.kill();
        let _reaped = self.0.wait();
    }
}

/// Bytes of output as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts that a command succeeded, showing its stderr if not, and
/// returns its stdout.
#[track_caller]
pub fn succeeded(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}; stderr: {}",
        output.status.code(),
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// Asserts that a command failed with exit code 1 (an operating error, not
/// a usage error or a crash), and returns its stderr.
#[track_caller]
pub fn failed(output: &Output) -> String {
    assert_eq!(
        output.status.code(),
        Some(1),
        "stdout: {}; stderr: {}",
        text(&output.stdout),
        text(&output.stderr)
    );
    text(&output.stderr)
}
