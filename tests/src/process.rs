//! Real `corelogd` processes on loopback, each with its own ports and data
//! directory, stopped (kill -9) when dropped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::wire_client::Client;

/// A binary of this workspace, from the target directory the tests run
/// from. `make test` builds them first.
///
/// # Panics
/// If the binary is missing, saying how to build it.
#[must_use]
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // Tests run from target/<profile>/deps, harness binaries (such as
    // corelog-nemesis) from target/<profile>.
    let exe_dir = exe.parent().expect("the executable is in a directory");
    let profile_dir = if exe_dir.ends_with("deps") {
        exe_dir.parent().expect("deps is in the profile directory")
    } else {
        exe_dir
    };
    let path = profile_dir.join(name);
    assert!(
        path.exists(),
        "{} is not built; run `make test` or `cargo build --workspace --bins` first",
        path.display()
    );
    path
}

/// A free loopback port (bound then released; fine for tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `corelogd` child process, killed when dropped.
#[derive(Debug)]
pub struct Broker {
    pub child: Option<Child>,
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub data_dir: PathBuf,
    pub extra_args: Vec<String>,
    _temp: Option<tempfile::TempDir>,
}

impl Broker {
    /// Starts a broker with one shard and `extra_args`.
    pub fn start(extra_args: &[&str]) -> Broker {
        let temp = tempfile::tempdir().unwrap();
        let data_dir = temp.path().join("data");
        let mut broker = Broker {
            child: None,
            addr: SocketAddr::from(([127, 0, 0, 1], free_port())),
            metrics_addr: SocketAddr::from(([127, 0, 0, 1], free_port())),
            data_dir,
            extra_args: extra_args.iter().map(|arg| (*arg).to_owned()).collect(),
            _temp: Some(temp),
        };
        broker.spawn();
        broker
    }

    /// Starts a broker on `addr` with one shard and `extra_args`; for
    /// clusters, whose members must know each other's addresses first.
    pub fn start_at(addr: SocketAddr, extra_args: &[&str]) -> Broker {
        let temp = tempfile::tempdir().unwrap();
        let data_dir = temp.path().join("data");
        let mut broker = Broker {
            child: None,
            addr,
            metrics_addr: SocketAddr::from(([127, 0, 0, 1], free_port())),
            data_dir,
            extra_args: extra_args.iter().map(|arg| (*arg).to_owned()).collect(),
            _temp: Some(temp),
        };
        broker.spawn();
        broker
    }

    /// Whether the process is running (not killed by the test).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Starts the process again on the same ports and data directory.
    pub fn spawn(&mut self) {
        let mut command = Command::new(binary("corelogd"));
        command
            .arg("--listen")
            .arg(self.addr.to_string())
            .arg("--metrics-listen")
            .arg(self.metrics_addr.to_string())
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--disk-reserve-bytes")
            .arg("0")
            .args(&self.extra_args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if !self.extra_args.iter().any(|arg| arg == "--shards") {
            command.arg("--shards").arg("1");
        }
        self.child = Some(command.spawn().expect("corelogd starts"));
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|child| child.try_wait().unwrap())
            {
                panic!("corelogd exited at start-up: {status}");
            }
            if let Ok(mut client) = Client::connect(self.addr)
                && client.handshake().is_ok()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("corelogd did not become ready");
    }

    /// kill -9.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// SIGTERM, then wait for exit; returns whether it exited cleanly.
    pub fn terminate(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        rustix::process::kill_process(
            rustix::process::Pid::from_child(&child),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().unwrap() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill().unwrap();
        false
    }

    /// SIGSTOP: the process stays alive, holds its sockets and its data,
    /// and answers nothing (a frozen VM, a long stall) until
    /// [`Broker::resume`]. Dropping a paused broker still kills it.
    pub fn pause(&self) {
        self.signal(rustix::process::Signal::STOP);
        // The signal takes effect asynchronously (a thread running on
        // another CPU stops at its next kernel entry): wait until every
        // thread is stopped, so nothing sent afterwards is processed.
        let pid = self.pid().expect("the broker process is running");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !all_threads_stopped(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "broker pid {pid} did not stop within 5 s of SIGSTOP"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// SIGCONT: continues a [`Broker::pause`]d process.
    pub fn resume(&self) {
        self.signal(rustix::process::Signal::CONT);
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn signal(&self, signal: rustix::process::Signal) {
        let child = self.child.as_ref().expect("the broker process is running");
        rustix::process::kill_process(rustix::process::Pid::from_child(child), signal).unwrap();
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// A connected client that has done the ApiVersions handshake.
    pub fn client(&self) -> Client {
        let mut client = Client::connect(self.addr).unwrap();
        client.handshake().unwrap();
        client
    }

    /// The `/metrics` text.
    pub fn metrics(&self) -> String {
        let mut stream = TcpStream::connect(self.metrics_addr).unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `n` brokers forming a cluster whose every member is a controller voter.
pub fn start_cluster(n: u32, extra_args: &[&str]) -> Vec<Broker> {
    let addrs: Vec<SocketAddr> = (0..n)
        .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
        .collect();
    let voters = addrs
        .iter()
        .enumerate()
        .map(|(index, addr)| format!("{}@{addr}", index + 1))
        .collect::<Vec<_>>()
        .join(",");
    addrs
        .iter()
        .enumerate()
        .map(|(index, addr)| {
            let node_id = (index + 1).to_string();
            let rack = format!("rack-{}", index + 1);
            let mut args = vec![
                "--node-id",
                node_id.as_str(),
                "--controller-voters",
                voters.as_str(),
                "--rack",
                rack.as_str(),
            ];
            args.extend_from_slice(extra_args);
            Broker::start_at(*addr, &args)
        })
        .collect()
}

/// Whether every thread of `pid` is stopped (state `T` in
/// `/proc/<pid>/task/<tid>/stat`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            // The state follows the command name, which is in parentheses.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state == "T" || state == "t")
        })
    })
}
