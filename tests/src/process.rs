//! Real `corelogd` processes on loopback, each with its own ports and data
//! directory, stopped (kill -9) when dropped.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::wire_client::Client;

/// A binary of this workspace, from the target directory the tests run
/// from. `make test` builds them first.
///
/// # Panics
/// If the binary is missing, saying how to build it.
#[must_use]
pub fn binary(name: &str) -> PathBuf {
    let path = profile_dir().join(name);
    assert!(
        path.exists(),
        "{} is not built; run `make test` or `cargo build --workspace --bins --examples` first",
        path.display()
    );
    path
}

/// The test build of `corelogd`, with storage fault hooks: what every
/// [`Broker`] runs. It lives in its own profile's directory so that the
/// `corelogd` users run never carries the hooks. `CORELOG_TEST_BROKER`
/// names another build instead (to measure an attack against a build from
/// before a fix, say).
///
/// # Panics
/// If it is missing, saying how to build it.
#[must_use]
pub fn test_broker_binary() -> PathBuf {
    use corelog_storage::fault_hooks::TEST_BUILD_DIR;
    if let Some(chosen) = std::env::var_os("CORELOG_TEST_BROKER") {
        return PathBuf::from(chosen);
    }
    let profile_dir = profile_dir();
    let target_dir = profile_dir
        .parent()
        .expect("the profile directory is in the target directory");
    let path = target_dir.join(TEST_BUILD_DIR).join("corelogd");
    assert!(
        path.exists(),
        "{} is not built; run `make test`, or `cargo build --profile fault-injection -p corelog-broker --features fault-injection --bin corelogd`",
        path.display()
    );
    path
}

/// The target/<profile> directory this test or harness runs from.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // Tests run from target/<profile>/deps, harness binaries (such as
    // corelog-nemesis) from target/<profile>.
    let exe_dir = exe.parent().expect("the executable is in a directory");
    let profile_dir = if exe_dir.ends_with("deps") {
        exe_dir.parent().expect("deps is in the profile directory")
    } else {
        exe_dir
    };
    profile_dir.to_path_buf()
}

/// Whether the binary at `path` was built with the storage fault hooks.
///
/// # Panics
/// If it cannot be read.
#[must_use]
pub fn has_fault_hooks(path: &Path) -> bool {
    let marker = corelog_storage::fault_hooks::BUILD_MARKER.as_bytes();
    let bytes = std::fs::read(path)
        .unwrap_or_else(|error| panic!("{} is not readable: {error}", path.display()));
    bytes.windows(marker.len()).any(|window| window == marker)
}

/// `log`, opened for appending (created if missing).
fn append_to(log: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|error| panic!("broker log {}: {error}", log.display()))
}

/// A free loopback port, given to no other caller in this process (see
/// [`free_port_on`]).
pub fn free_port() -> u16 {
    free_port_on(IpAddr::from([127, 0, 0, 1]))
}

/// A port free on `ip` that no other caller in this test process was
/// given. The kernel hands a just-released port to the next `bind(0)` as
/// readily as any other (3,000 binds here repeat about 270 ports), and
/// brokers bind with `SO_REUSEPORT` (glommio's listeners): two tests
/// running at once and given the same port would share it without an
/// error, one broker's clients reaching the other's metrics server.
pub fn free_port_on(ip: IpAddr) -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let port = TcpListener::bind((ip, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if GIVEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(port)
        {
            return port;
        }
    }
}

/// A `corelogd` child process, killed when dropped.
#[derive(Debug)]
pub struct Broker {
    pub child: Option<Child>,
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub data_dir: PathBuf,
    pub extra_args: Vec<String>,
    /// Environment variables of every later [`Broker::spawn`].
    env: Vec<(String, String)>,
    /// Where [`Broker::spawn`] appends the process's output; discarded
    /// when `None`.
    output_log: Option<PathBuf>,
    /// `RLIMIT_NOFILE` (soft and hard) of every later [`Broker::spawn`],
    /// set by `prlimit` before it executes the broker.
    descriptor_limit: Option<u64>,
    _temp: Option<tempfile::TempDir>,
}

impl Broker {
    /// Starts a broker with one shard and `extra_args`.
    pub fn start(extra_args: &[&str]) -> Broker {
        Self::start_at(SocketAddr::from(([127, 0, 0, 1], free_port())), extra_args)
    }

    /// Starts a broker on `addr` with one shard and `extra_args`; for
    /// clusters, whose members must know each other's addresses first.
    pub fn start_at(addr: SocketAddr, extra_args: &[&str]) -> Broker {
        let temp = tempfile::tempdir().unwrap();
        let mut broker = Self::unstarted(addr, &temp.path().join("data"), extra_args);
        broker._temp = Some(temp);
        broker.spawn();
        broker
    }

    /// Starts a broker on `addr` whose data directory is `data_dir` (for
    /// example on a [`crate::small_fs::SmallFs`]); the caller keeps the
    /// directory alive longer than the broker.
    pub fn start_at_dir(addr: SocketAddr, data_dir: &Path, extra_args: &[&str]) -> Broker {
        let mut broker = Self::unstarted(addr, data_dir, extra_args);
        broker.spawn();
        broker
    }

    /// A broker like [`Broker::start_at_dir`], not started yet: set its
    /// output log first, then [`Broker::spawn`] it.
    pub fn unstarted(addr: SocketAddr, data_dir: &Path, extra_args: &[&str]) -> Broker {
        Broker {
            child: None,
            addr,
            metrics_addr: SocketAddr::from(([127, 0, 0, 1], free_port())),
            data_dir: data_dir.to_path_buf(),
            extra_args: extra_args.iter().map(|arg| (*arg).to_owned()).collect(),
            env: Vec::new(),
            output_log: None,
            descriptor_limit: None,
            _temp: None,
        }
    }

    /// Starts every later [`Broker::spawn`] with at most `limit` open file
    /// descriptors, soft and hard, so that the broker cannot raise it:
    /// how a host with a low `LimitNOFILE=` runs it.
    #[must_use]
    pub fn with_descriptor_limit(mut self, limit: u64) -> Broker {
        self.descriptor_limit = Some(limit);
        self
    }

    /// Appends the output of every later [`Broker::spawn`] to `log`.
    #[must_use]
    pub fn with_output_log(mut self, log: PathBuf) -> Broker {
        self.output_log = Some(log);
        self
    }

    /// Sets (or with `None` clears) an environment variable of every later
    /// [`Broker::spawn`], such as a fault hook's.
    pub fn set_env(&mut self, key: &str, value: Option<&str>) {
        self.env.retain(|(known, _)| known != key);
        if let Some(value) = value {
            self.env.push((key.to_owned(), value.to_owned()));
        }
    }

    /// Whether the process is running (not killed by the test).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether the process exited by itself (a fatal storage error, a
    /// refusal to run); `None` while it runs or when it was never started.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten())
    }

    /// Starts the process again on the same ports and data directory.
    pub fn spawn(&mut self) {
        self.spawn_unwaited();
        self.wait_ready();
    }

    /// Starts the process like [`Broker::spawn`] but returns at once, for
    /// a test that watches the start itself.
    pub fn spawn_unwaited(&mut self) {
        let mut command = self.command();
        // CORELOG_TEST_LOG_DIR keeps every broker's output there, one file
        // per client port, for reading why a test failed.
        let kept = std::env::var_os("CORELOG_TEST_LOG_DIR")
            .map(|dir| PathBuf::from(dir).join(format!("corelogd-{}.log", self.addr.port())));
        match self.output_log.as_ref().or(kept.as_ref()) {
            Some(log) => {
                let output = append_to(log);
                command
                    .stdout(output.try_clone().expect("log file handle"))
                    .stderr(output);
            }
            None => {
                command.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        self.child = Some(command.spawn().expect("corelogd starts"));
    }

    /// The command that starts this broker (arguments and fault-hook
    /// environment), shared by every way of spawning it; output is left
    /// to the caller.
    fn command(&self) -> Command {
        let mut command = match self.descriptor_limit {
            // `prlimit` sets the limit on itself and executes the broker:
            // the same process, so signals and `Child` reach the broker.
            Some(limit) => {
                let mut command = Command::new("prlimit");
                command
                    .arg(format!("--nofile={limit}:{limit}"))
                    .arg("--")
                    .arg(test_broker_binary());
                command
            }
            None => Command::new(test_broker_binary()),
        };
        command
            .arg("--listen")
            .arg(self.addr.to_string())
            .arg("--metrics-listen")
            .arg(self.metrics_addr.to_string())
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--disk-reserve-bytes")
            .arg("0")
            .args(&self.extra_args);
        if !self.extra_args.iter().any(|arg| arg == "--shards") {
            command.arg("--shards").arg("1");
        }
        self.set_fault_env(&mut command);
        command.envs(self.env.iter().map(|(key, value)| (key, value)));
        command
    }

    /// Starts the process again like [`Broker::spawn`], but with its
    /// stdout and stderr appended to `log`, and without panicking when it
    /// refuses to start: `Err` with its exit status when it exits before
    /// answering, so that a test can read why from `log`.
    ///
    /// # Errors
    /// The exit status of a broker that stopped at start-up.
    pub fn try_spawn_logged(&mut self, log: &Path) -> Result<(), std::process::ExitStatus> {
        let output = append_to(log);
        let mut command = self.command();
        command
            .stdout(output.try_clone().expect("log file handle"))
            .stderr(output);
        self.child = Some(command.spawn().expect("corelogd starts"));
        match self.poll_ready() {
            Some(Ok(())) => Ok(()),
            Some(Err(status)) => {
                self.child = None;
                Err(status)
            }
            None => panic!(
                "corelogd did not become ready; its output is in {}",
                log.display()
            ),
        }
    }

    fn wait_ready(&mut self) {
        match self.poll_ready() {
            Some(Ok(())) => {}
            Some(Err(status)) => panic!("corelogd exited at start-up: {status}"),
            None => panic!("corelogd did not become ready"),
        }
    }

    /// Polls the just-spawned process for up to 60 s until it answers a
    /// handshake (`Ok`) or exits (`Err` with its status); `None` when it
    /// does neither in time. A broker restarted after a crash with a
    /// thousand partitions syncs each of them before it answers: about 7 s
    /// here, more than 20 s on a slow CI disk.
    fn poll_ready(&mut self) -> Option<Result<(), std::process::ExitStatus>> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|child| child.try_wait().unwrap())
            {
                return Some(Err(status));
            }
            if let Ok(mut client) = Client::connect(self.addr)
                && client.handshake_answered()
            {
                // Else a lost controller log would go unnoticed at the
                // next start (`corelog_broker::data_dir::check_controller_log`).
                assert!(
                    corelog_broker::identity::is_recorded(&self.data_dir),
                    "corelogd answered a client before recording its data directory's identity"
                );
                return Some(Ok(()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
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

    /// Sends `signal` to the running process (SIGHUP to reload TLS, say).
    ///
    /// # Panics
    /// If the broker is not running.
    pub fn signal(&self, signal: rustix::process::Signal) {
        let child = self.child.as_ref().expect("the broker process is running");
        rustix::process::kill_process(rustix::process::Pid::from_child(child), signal).unwrap();
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The durable ledger's path, beside the data directory. The broker
    /// records one (test build, see [`crate::power_loss`]) when this file
    /// exists as it starts: [`Broker::with_durable_ledger`] creates it.
    pub fn durable_ledger_path(&self) -> PathBuf {
        sibling(&self.data_dir, "durable-ledger")
    }

    /// The file whose text restricts injected EIO faults to paths that
    /// contain it (see [`Broker::inject_eio_on`]).
    fn fault_filter_path(&self) -> PathBuf {
        sibling(&self.data_dir, "fault-filter")
    }

    /// The fault hooks' environment, read by the test build of corelogd,
    /// which starts only when it is allowed.
    fn set_fault_env(&self, command: &mut Command) {
        use corelog_storage::fault_hooks::{ALLOW_ENV, FILTER_FILE_ENV, LEDGER_ENV};
        command.env(ALLOW_ENV, "1");
        command.env(FILTER_FILE_ENV, self.fault_filter_path());
        let ledger = self.durable_ledger_path();
        if ledger.exists() {
            command.env(LEDGER_ENV, ledger);
        } else {
            command.env_remove(LEDGER_ENV);
        }
    }

    /// Panics unless the test build of corelogd has the hooks: without
    /// them a ledger stays empty and an EIO signal kills the broker.
    fn assert_fault_hooks() {
        static FOUND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let found = *FOUND.get_or_init(|| has_fault_hooks(&test_broker_binary()));
        assert!(
            found,
            "the test build of corelogd has no fault hooks: build it with `make test`"
        );
    }

    /// Makes this broker record a durable ledger from now on, so that
    /// [`Broker::power_loss`] works. If it runs, it is killed (-9) and
    /// started again so that the ledger covers the whole new process; what
    /// the first process wrote counts as durable.
    pub fn with_durable_ledger(&mut self) {
        Self::assert_fault_hooks();
        let ledger = self.durable_ledger_path();
        if !ledger.exists() {
            std::fs::File::create(&ledger).expect("durable ledger file");
        }
        if self.is_running() {
            self.kill();
            self.spawn();
        }
    }

    /// Power loss: kill -9, then every file cut to its last fdatasync'ed
    /// length. Start the broker again with [`Broker::spawn`].
    ///
    /// # Panics
    /// If the broker records no durable ledger ([`Broker::with_durable_ledger`]).
    pub fn power_loss(&mut self) -> crate::power_loss::PowerLossSummary {
        let ledger = self.durable_ledger_path();
        assert!(
            ledger.exists(),
            "power loss needs a durable ledger: call Broker::with_durable_ledger first"
        );
        self.kill();
        crate::power_loss::apply(&self.data_dir, &ledger).expect("power loss applies")
    }

    /// Makes the next fdatasync (`EioKind::Sync`) or write
    /// (`EioKind::Write`) of any file fail with EIO, once. Test build only.
    pub fn inject_eio(&self, kind: EioKind) {
        self.inject_eio_on(kind, None);
    }

    /// As [`Broker::inject_eio`], for the next call on a path containing
    /// `path_contains` (any path if `None`).
    pub fn inject_eio_on(&self, kind: EioKind, path_contains: Option<&str>) {
        Self::assert_fault_hooks();
        let filter = self.fault_filter_path();
        match path_contains {
            Some(text) => std::fs::write(&filter, text).expect("fault filter file"),
            None if filter.exists() => std::fs::remove_file(&filter).expect("fault filter file"),
            None => {}
        }
        self.signal(match kind {
            EioKind::Sync => rustix::process::Signal::USR1,
            EioKind::Write => rustix::process::Signal::USR2,
        });
    }

    /// A connected client that has done the ApiVersions handshake.
    pub fn client(&self) -> Client {
        let mut client = Client::connect(self.addr).unwrap();
        client.handshake().unwrap();
        client
    }

    /// The sum of `corelog_replica_lag_records` over the partitions this
    /// broker leads: 0 once every follower has caught up. `None` when the
    /// broker does not run or leads nothing.
    pub fn replica_lag(&self) -> Option<u64> {
        if !self.is_running() {
            return None;
        }
        let text = self.metrics();
        let values: Vec<u64> = text
            .lines()
            .filter(|line| !line.starts_with('#') && line.contains("replica_lag_records"))
            .filter_map(|line| line.rsplit(' ').next()?.trim().parse().ok())
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    }

    /// The `/metrics` text.
    ///
    /// # Panics
    /// If the broker does not answer within 10 s (a hung broker fails the
    /// test instead of hanging it).
    pub fn metrics(&self) -> String {
        let mut stream = TcpStream::connect(self.metrics_addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
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

/// Which I/O call [`Broker::inject_eio`] fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EioKind {
    /// The next fdatasync.
    Sync,
    /// The next write.
    Write,
}

/// `path`'s sibling named `<file name of path>.<suffix>`.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(suffix);
    path.with_file_name(name)
}

/// As [`start_cluster`], with every broker recording a durable ledger
/// ([`Broker::with_durable_ledger`]; each is restarted once for it).
pub fn start_cluster_with_durable_ledgers(n: u32, extra_args: &[&str]) -> Vec<Broker> {
    let mut brokers = start_cluster(n, extra_args);
    for broker in &mut brokers {
        broker.with_durable_ledger();
    }
    brokers
}

/// The controller voters list, `1@addr,2@addr,...`: node ids follow the
/// order of `addrs`.
#[must_use]
pub fn voters_list(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .enumerate()
        .map(|(index, addr)| format!("{}@{addr}", index + 1))
        .collect::<Vec<_>>()
        .join(",")
}

/// The cluster secret file every test cluster shares (a fixed, public
/// secret: it keeps test clusters' brokers proving it like real ones).
#[must_use]
pub fn test_cluster_secret_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/cluster.secret")
}

/// The flags that make broker `index` (node id `index + 1`, rack
/// `rack-<id>`) a member of the cluster of `voters` (proving the test
/// cluster secret), advertising `advertised_host` if given, followed by
/// `extra_args`.
#[must_use]
pub fn member_args(
    index: usize,
    voters: &str,
    advertised_host: Option<&str>,
    extra_args: &[&str],
) -> Vec<String> {
    let mut args = vec![
        "--node-id".to_owned(),
        (index + 1).to_string(),
        "--controller-voters".to_owned(),
        voters.to_owned(),
        "--rack".to_owned(),
        format!("rack-{}", index + 1),
        "--cluster-secret-file".to_owned(),
        test_cluster_secret_file().display().to_string(),
    ];
    if let Some(host) = advertised_host {
        args.extend(["--advertised-host".to_owned(), host.to_owned()]);
    }
    args.extend(extra_args.iter().map(|arg| (*arg).to_owned()));
    args
}

/// Borrowed views of owned arguments.
#[must_use]
pub fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// A cluster of one broker per IP in `ips` (node ids 1, 2, ... in order),
/// every one a controller voter, each listening on, advertising and
/// connecting to its peers from its own IP: so that [`crate::netns`] rules
/// can cut links between them. The IPs must be local (for example
/// 127.0.0.2, .3, .4 inside [`crate::netns::enter_private_network`]).
pub fn start_cluster_on(ips: &[std::net::Ipv4Addr], extra_args: &[&str]) -> Vec<Broker> {
    let addrs: Vec<SocketAddr> = ips
        .iter()
        .map(|ip| {
            // A port free on this IP, not only on 127.0.0.1.
            SocketAddr::from((*ip, free_port_on(IpAddr::V4(*ip))))
        })
        .collect();
    let voters = voters_list(&addrs);
    addrs
        .iter()
        .enumerate()
        .map(|(index, addr)| {
            let host = addr.ip().to_string();
            let args = member_args(index, &voters, Some(&host), extra_args);
            Broker::start_at(*addr, &as_strs(&args))
        })
        .collect()
}

/// `n` brokers forming a cluster whose every member is a controller voter.
pub fn start_cluster(n: u32, extra_args: &[&str]) -> Vec<Broker> {
    start_cluster_with_data_dirs(n, extra_args, &[])
}

/// [`start_cluster`], except that broker `index` (0-based) of each
/// `(index, dir)` in `data_dirs` keeps its data in `dir`.
pub fn start_cluster_with_data_dirs(
    n: u32,
    extra_args: &[&str],
    data_dirs: &[(usize, &Path)],
) -> Vec<Broker> {
    let addrs: Vec<SocketAddr> = (0..n)
        .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
        .collect();
    let voters = voters_list(&addrs);
    addrs
        .iter()
        .enumerate()
        .map(|(index, addr)| {
            let args = member_args(index, &voters, None, extra_args);
            match data_dirs.iter().find(|(at, _)| *at == index) {
                Some((_, dir)) => Broker::start_at_dir(*addr, dir, &as_strs(&args)),
                None => Broker::start_at(*addr, &as_strs(&args)),
            }
        })
        .collect()
}

/// A cluster whose brokers are reached only through fault proxies; see
/// [`start_cluster_behind_proxies`]. Dropping it kills the brokers, then
/// stops the proxies.
#[derive(Debug)]
pub struct ProxiedCluster {
    /// Broker `i` is node id `i + 1`, listening on `127.0.0.1:P_i`.
    pub brokers: Vec<Broker>,
    /// Proxy `i` listens on `127.0.0.(11 + i):P_i` and forwards to broker `i`.
    pub proxies: Vec<crate::proxy::FaultProxy>,
}

impl ProxiedCluster {
    /// The proxies' addresses: what clients should bootstrap from.
    pub fn bootstrap(&self) -> Vec<String> {
        self.proxies
            .iter()
            .map(|proxy| proxy.listen_addr().to_string())
            .collect()
    }

    /// Sets the same faults on every proxy.
    pub fn set_faults(&self, faults: crate::proxy::Faults) {
        for proxy in &self.proxies {
            proxy.set_faults(faults);
        }
    }

    /// The proxies' counts, summed.
    pub fn stats(&self) -> crate::proxy::ProxyStats {
        self.proxies
            .iter()
            .map(crate::proxy::FaultProxy::stats)
            .fold(crate::proxy::ProxyStats::default(), |sum, stats| {
                sum + stats
            })
    }
}

/// `n` brokers (at most 100) forming a cluster, every member a controller
/// voter, with every connection to a broker going through that broker's
/// [`FaultProxy`](crate::proxy::FaultProxy) (faults off until set).
///
/// Broker `i` listens on `127.0.0.1:P_i`; its proxy listens on
/// `127.0.0.(11 + i):P_i` (all of 127.0.0.0/8 is local, so the same port
/// on another address is free) and the broker advertises
/// `--advertised-host 127.0.0.(11 + i)` with its own port. The controller
/// voters list names the proxies, so clients (through metadata) and peers
/// (Raft, registration, heartbeats, metadata fetches, replication pushes,
/// election queries) all cross a proxy. A broker finds its own voter entry
/// by node id, and refuses to start only when its own listen address
/// already accepts connections, so no broker change is needed for this.
/// Proxy `i` is seeded with `seed + i`.
///
/// # Panics
/// If a proxy cannot bind or a broker does not start.
pub fn start_cluster_behind_proxies(n: u32, seed: u64, extra_args: &[&str]) -> ProxiedCluster {
    assert!(n <= 100, "proxy addresses are 127.0.0.11 to 127.0.0.110");
    let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let proxy_addr = |index: usize| SocketAddr::from(([127, 0, 0, 11 + index as u8], ports[index]));
    let proxies: Vec<crate::proxy::FaultProxy> = (0..n as usize)
        .map(|index| {
            let upstream = SocketAddr::from(([127, 0, 0, 1], ports[index]));
            crate::proxy::FaultProxy::start(proxy_addr(index), upstream, seed + index as u64)
                .unwrap_or_else(|error| panic!("proxy on {}: {error}", proxy_addr(index)))
        })
        .collect();
    let proxy_addrs: Vec<SocketAddr> = (0..n as usize).map(proxy_addr).collect();
    let voters = voters_list(&proxy_addrs);
    let brokers = (0..n as usize)
        .map(|index| {
            let host = proxy_addrs[index].ip().to_string();
            let args = member_args(index, &voters, Some(&host), extra_args);
            Broker::start_at(
                SocketAddr::from(([127, 0, 0, 1], ports[index])),
                &as_strs(&args),
            )
        })
        .collect();
    ProxiedCluster { brokers, proxies }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_port_never_gives_one_port_twice() {
        let ports: Vec<u16> = (0..3_000).map(|_| free_port()).collect();
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "a port was given twice");
    }
}
