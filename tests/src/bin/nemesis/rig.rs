//! The cluster under test and the means to hurt it: three brokers on
//! their own loopback addresses, a fault proxy in front of each, nftables
//! rules in a private network namespace, durable ledgers for power loss,
//! EIO hooks, a small filesystem under one broker, and file corruption.

use crate::secured::Secured;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corelog_tests::corruption::{self, Damage, FileKind};
use corelog_tests::netns::{self, CLIENTS, Firewall};
use corelog_tests::process::{self, EioKind};
use corelog_tests::proxy::{FaultProxy, Faults, ProxyStats};
use corelog_tests::small_fs::SmallFs;
use corelog_tests::{Broker, free_port};

use corelog_wire::rng::SplitMix64;

use crate::plan::FaultKind;

/// The broker whose data directory sits on the small filesystem.
const SMALL_FS_BROKER: usize = 2;
/// Size of that filesystem (a tmpfs: memory, taken only as it is used):
/// room for a long soak's data, small enough to fill in a second or two.
const SMALL_FS_BYTES: u64 = 1 << 30;
/// Time given to fenced logs to reopen after a disk-full fault.
const DISK_FULL_RECOVERY: Duration = Duration::from_secs(2);
/// Longest wait for followers to catch up after a repair.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a restarted broker is watched for a refusal to run.
const OPEN_GRACE: Duration = Duration::from_secs(3);

/// What the rig could set up; missing parts make their faults fall back.
#[derive(Debug)]
pub struct Capabilities {
    /// Why there are no network cuts, if there are none.
    pub no_network: Option<String>,
    /// Why there is no small filesystem, if there is none.
    pub no_small_fs: Option<String>,
}

/// Enters a private network namespace (before any thread or runtime
/// exists) and creates the firewall table in it.
pub fn private_network() -> Result<Firewall, String> {
    netns::enter_private_network().map_err(|error| error.to_string())?;
    Firewall::new().map_err(|error| error.to_string())
}

/// The cluster and the fault machinery.
#[derive(Debug)]
pub struct Rig {
    // Field order is drop order: brokers die before the proxies, the
    // firewall table and the filesystem under one of them go away.
    pub brokers: Vec<Broker>,
    proxies: Vec<FaultProxy>,
    firewall: Option<Firewall>,
    small_fs: Option<SmallFs>,
    /// Data directories (but the small one), backups and logs.
    work: tempfile::TempDir,
    broker_ips: [Ipv4Addr; 3],
    proxy_ips: [Ipv4Addr; 3],
}

/// What one injected fault did, for the report.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Brokers hit (node ids).
    pub brokers: Vec<u32>,
    /// When every partition had lost its quorum, and when the first broker
    /// came back, if the fault took two or more brokers away.
    pub no_quorum: Option<(Instant, Instant)>,
    /// What happened, in words (files cut, corruption and the broker's
    /// answer, a broker that exited on EIO).
    pub detail: String,
}

impl Rig {
    /// The brokers' addresses (127.0.0.2-4), then their proxies'
    /// (127.0.0.12-14): what a TLS certificate of the rig must name.
    pub const HOSTS: [Ipv4Addr; 6] = [
        Ipv4Addr::new(127, 0, 0, 2),
        Ipv4Addr::new(127, 0, 0, 3),
        Ipv4Addr::new(127, 0, 0, 4),
        Ipv4Addr::new(127, 0, 0, 12),
        Ipv4Addr::new(127, 0, 0, 13),
        Ipv4Addr::new(127, 0, 0, 14),
    ];

    /// Starts three brokers (node ids 1-3) on 127.0.0.2-4, each behind a
    /// proxy on 127.0.0.12-14 that it advertises, every one recording a
    /// durable ledger; broker 3's data on a small filesystem when one can
    /// be mounted.
    pub fn start(
        seed: u64,
        firewall: Option<Firewall>,
        security: Option<&Secured>,
    ) -> (Rig, Capabilities) {
        let work = tempfile::tempdir().expect("a temporary directory");
        let (small_fs, no_small_fs) = match SmallFs::mount(SMALL_FS_BYTES) {
            Ok(fs) => (Some(fs), None),
            Err(error) => (None, Some(error.to_string())),
        };
        let [b1, b2, b3, p1, p2, p3] = Rig::HOSTS;
        let broker_ips = [b1, b2, b3];
        let proxy_ips = [p1, p2, p3];
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let proxies: Vec<FaultProxy> = (0..3)
            .map(|index| {
                let listen = SocketAddr::from((proxy_ips[index], ports[index]));
                let upstream = SocketAddr::from((broker_ips[index], ports[index]));
                FaultProxy::start(listen, upstream, seed.wrapping_add(index as u64))
                    .unwrap_or_else(|error| panic!("proxy on {listen}: {error}"))
            })
            .collect();
        let proxy_addrs: Vec<SocketAddr> = (0..3)
            .map(|index| SocketAddr::from((proxy_ips[index], ports[index])))
            .collect();
        let voters = process::voters_list(&proxy_addrs);
        let brokers = (0..3)
            .map(|index| {
                let home = work.path().join(format!("broker-{}", index + 1));
                let data_dir = home.join("data");
                std::fs::create_dir_all(&home).expect("a broker directory");
                match (&small_fs, index) {
                    // A link, so that the durable ledger (beside the data
                    // directory) stays off the filesystem that fills up.
                    (Some(fs), SMALL_FS_BROKER) => {
                        let target = fs.path().join("data");
                        std::fs::create_dir_all(&target).expect("a data directory");
                        std::os::unix::fs::symlink(&target, &data_dir)
                            .expect("a link to the small filesystem");
                    }
                    _ => std::fs::create_dir_all(&data_dir).expect("a data directory"),
                }
                // The ledger file must exist when the broker starts.
                std::fs::File::create(home.join("data.durable-ledger"))
                    .expect("a durable ledger file");
                let advertised = proxy_ips[index].to_string();
                let secured = security.map(Secured::broker_args).unwrap_or_default();
                let secured: Vec<&str> = secured.iter().map(String::as_str).collect();
                let args = process::member_args(index, &voters, Some(&advertised), &secured);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let addr = SocketAddr::from((broker_ips[index], ports[index]));
                let mut broker = Broker::unstarted(addr, &data_dir, &args)
                    .with_output_log(home.join("broker.log"));
                broker.spawn();
                broker
            })
            .collect();
        let capabilities = Capabilities {
            no_network: firewall
                .is_none()
                .then(|| "no private network namespace".to_owned()),
            no_small_fs,
        };
        let rig = Rig {
            brokers,
            proxies,
            firewall,
            small_fs,
            work,
            broker_ips,
            proxy_ips,
        };
        (rig, capabilities)
    }

    /// Where broker `index`'s output goes (appended across restarts).
    fn broker_log(&self, index: usize) -> PathBuf {
        self.work
            .path()
            .join(format!("broker-{}", index + 1))
            .join("broker.log")
    }

    /// Copies every broker's output log into `dir` as `broker-N.log`.
    ///
    /// # Errors
    /// From creating `dir` or copying.
    pub fn save_logs(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        for index in 0..self.brokers.len() {
            std::fs::copy(
                self.broker_log(index),
                dir.join(format!("broker-{}.log", index + 1)),
            )?;
        }
        Ok(())
    }

    /// Addresses clients bootstrap from: the proxies.
    pub fn bootstrap(&self) -> Vec<String> {
        self.proxies
            .iter()
            .map(|proxy| proxy.listen_addr().to_string())
            .collect()
    }

    /// The proxies' counts, summed.
    pub fn proxy_stats(&self) -> ProxyStats {
        self.proxies
            .iter()
            .map(FaultProxy::stats)
            .fold(ProxyStats::default(), |sum, stats| sum + stats)
    }

    /// The kind actually injected: network faults become pauses without a
    /// firewall, disk-full becomes a kill without the small filesystem.
    pub fn effective(&self, kind: FaultKind) -> FaultKind {
        if kind.needs_network() && self.firewall.is_none() {
            return match kind {
                FaultKind::PowerLossWhilePartitioned => FaultKind::PowerLossWhilePaused,
                _ => FaultKind::Pause,
            };
        }
        if kind == FaultKind::DiskFull && self.small_fs.is_none() {
            return FaultKind::Kill;
        }
        kind
    }

    /// Injects `kind` on brokers `first` (and `second` for two-broker
    /// faults), holds it for `hold`, undoes it.
    pub fn inject(
        &mut self,
        kind: FaultKind,
        first: usize,
        second: usize,
        hold: Duration,
        seed: u64,
    ) -> Outcome {
        let node = |index: usize| u32::try_from(index + 1).unwrap_or(0);
        let mut outcome = Outcome {
            brokers: vec![node(first)],
            ..Outcome::default()
        };
        match kind {
            FaultKind::Kill => {
                self.brokers[first].kill();
                std::thread::sleep(hold);
                self.brokers[first].spawn();
            }
            FaultKind::Pause => {
                self.brokers[first].pause();
                std::thread::sleep(hold);
                self.brokers[first].resume();
            }
            FaultKind::KillTwo | FaultKind::PauseTwo => {
                outcome.brokers.push(node(second));
                for index in [first, second] {
                    if kind == FaultKind::KillTwo {
                        self.brokers[index].kill();
                    } else {
                        self.brokers[index].pause();
                    }
                }
                let down = Instant::now();
                std::thread::sleep(hold);
                let back = Instant::now();
                for index in [first, second] {
                    if kind == FaultKind::KillTwo {
                        self.brokers[index].spawn();
                    } else {
                        self.brokers[index].resume();
                    }
                }
                outcome.no_quorum = Some((down, back));
            }
            FaultKind::PowerLoss => {
                let cut = self.brokers[first].power_loss();
                outcome.detail = format!(
                    "{} of {} files cut, {} bytes",
                    cut.files_truncated, cut.files_known, cut.bytes_cut
                );
                std::thread::sleep(hold);
                self.brokers[first].spawn();
            }
            FaultKind::PowerLossAll => {
                outcome.brokers = vec![1, 2, 3];
                let (mut files, mut bytes) = (0, 0);
                for broker in &mut self.brokers {
                    let cut = broker.power_loss();
                    files += cut.files_truncated;
                    bytes += cut.bytes_cut;
                }
                let down = Instant::now();
                outcome.detail = format!("{files} files cut, {bytes} bytes");
                std::thread::sleep(hold);
                let back = Instant::now();
                for broker in &mut self.brokers {
                    broker.spawn();
                }
                outcome.no_quorum = Some((down, back));
            }
            FaultKind::PowerLossWhilePaused | FaultKind::PowerLossWhilePartitioned => {
                outcome.brokers.push(node(second));
                if kind == FaultKind::PowerLossWhilePaused {
                    self.brokers[second].pause();
                } else {
                    self.firewall()
                        .isolate(self.broker_ips[second])
                        .expect("nft isolates");
                }
                let cut = self.brokers[first].power_loss();
                let down = Instant::now();
                outcome.detail =
                    format!("{} files cut, {} bytes", cut.files_truncated, cut.bytes_cut);
                std::thread::sleep(hold);
                let back = Instant::now();
                self.brokers[first].spawn();
                if kind == FaultKind::PowerLossWhilePaused {
                    self.brokers[second].resume();
                } else {
                    self.firewall().heal().expect("nft heals");
                }
                outcome.no_quorum = Some((down, back));
            }
            FaultKind::Isolate | FaultKind::SplitPair | FaultKind::OneWay => {
                let firewall = self.firewall();
                let (a, b) = (first, second);
                // Peers reach a broker through its proxy, from their own
                // listen address.
                match kind {
                    FaultKind::Isolate => firewall.isolate(self.broker_ips[a]),
                    FaultKind::SplitPair => firewall
                        .cut_both(self.broker_ips[a], self.proxy_ips[b])
                        .and_then(|()| firewall.cut_both(self.broker_ips[b], self.proxy_ips[a])),
                    _ => firewall.cut(self.broker_ips[a], self.proxy_ips[b]),
                }
                .expect("nft cuts");
                if kind != FaultKind::Isolate {
                    outcome.brokers.push(node(b));
                }
                std::thread::sleep(hold);
                self.firewall().heal().expect("nft heals");
            }
            FaultKind::ClientIsolated => {
                self.firewall()
                    .cut_both(CLIENTS, self.proxy_ips[first])
                    .expect("nft cuts");
                std::thread::sleep(hold);
                self.firewall().heal().expect("nft heals");
            }
            FaultKind::ProxyChaos => {
                outcome.brokers = vec![1, 2, 3];
                let before = self.proxy_stats();
                for proxy in &self.proxies {
                    proxy.set_faults(Faults::mixed());
                }
                std::thread::sleep(hold);
                for proxy in &self.proxies {
                    proxy.set_faults(Faults::none());
                }
                let after = self.proxy_stats();
                outcome.detail = format!("{:?}", after - before);
            }
            FaultKind::EioSync | FaultKind::EioWrite => {
                self.brokers[first].inject_eio(if kind == FaultKind::EioSync {
                    EioKind::Sync
                } else {
                    EioKind::Write
                });
                std::thread::sleep(hold);
                outcome.detail = match self.brokers[first].exit_status() {
                    Some(status) => format!("the broker exited ({status}); restarted"),
                    None => "the broker kept running; restarted".to_owned(),
                };
                self.brokers[first].kill();
                self.brokers[first].spawn();
            }
            FaultKind::DiskFull => {
                outcome.brokers = vec![node(SMALL_FS_BROKER)];
                let fs = self
                    .small_fs
                    .as_ref()
                    .expect("disk-full needs the small filesystem");
                let ballast = fs.fill().expect("the ballast fills the filesystem");
                std::thread::sleep(hold);
                fs.free().expect("the ballast is removed");
                outcome.detail = format!("{ballast} bytes of ballast");
                // Every fenced log reopens by itself once space is back; a
                // leader's also resigns its leadership (README, "Losing
                // brokers"). A broker that exited instead is restarted.
                std::thread::sleep(DISK_FULL_RECOVERY);
                let broker = &mut self.brokers[SMALL_FS_BROKER];
                if let Some(status) = broker.exit_status() {
                    outcome
                        .detail
                        .push_str(&format!("; the broker exited ({status})"));
                    broker.kill();
                    broker.spawn();
                }
            }
            FaultKind::Corrupt => {
                outcome.detail = self.corrupt(first, hold, seed);
            }
            FaultKind::Terminate => {
                outcome.detail = self.terminate(first);
                std::thread::sleep(hold);
            }
            // Operators' commands: the nemesis runs them with its admin
            // client, and only the restart here.
            FaultKind::Transfer | FaultKind::Maintenance => {}
        }
        outcome
    }

    /// SIGTERM to broker `index` (a controlled shutdown), then a start on
    /// the same data directory; says whether it exited cleanly.
    pub fn terminate(&mut self, index: usize) -> String {
        let clean = self.brokers[index].terminate();
        self.brokers[index].spawn();
        if clean {
            "exited cleanly on SIGTERM".to_owned()
        } else {
            "did NOT exit cleanly on SIGTERM".to_owned()
        }
    }

    fn firewall(&self) -> &Firewall {
        self.firewall
            .as_ref()
            .expect("network faults need the firewall (see Rig::effective)")
    }

    /// Stops broker `index`, damages one of its files (kind and damage from
    /// `seed`), restarts it: it must repair or refuse to start; a refusal
    /// is answered by putting its pristine copy back.
    fn corrupt(&mut self, index: usize, hold: Duration, seed: u64) -> String {
        let log = self.broker_log(index);
        let broker = &mut self.brokers[index];
        broker.kill();
        let mut rng = SplitMix64::new(seed);
        let damage = if rng.below(2) == 0 {
            Damage::BitFlip
        } else {
            Damage::Truncate
        };
        // A non-empty file of the first kind, from a random start, that has
        // one.
        let start = rng.index(FileKind::DAMAGEABLE.len());
        let victim = (0..FileKind::DAMAGEABLE.len()).find_map(|step| {
            let kind = FileKind::DAMAGEABLE[(start + step) % FileKind::DAMAGEABLE.len()];
            let files: Vec<_> = corruption::files_of(&broker.data_dir, kind)
                .expect("the data directory lists")
                .into_iter()
                .filter(|path| std::fs::metadata(path).is_ok_and(|meta| meta.len() > 0))
                .collect();
            (!files.is_empty()).then(|| (kind, files[rng.index(files.len())].clone()))
        });
        let Some((kind, path)) = victim else {
            std::thread::sleep(hold);
            broker.spawn();
            return "no file to damage".to_owned();
        };
        // Only the damaged file is put back after a refusal: the rest of
        // the directory is what the broker last wrote (a whole older copy
        // would take back records it had acknowledged as a follower).
        let original = std::fs::read(&path).expect("the file reads");
        let done = corruption::corrupt_file(&path, kind, damage, rng.next_u64())
            .expect("the file is damaged");
        std::thread::sleep(hold);
        // Damage may be found at start-up or when the replica opens, just
        // after: watch the broker that long.
        let refused = match broker.try_spawn_logged(&log) {
            Ok(()) => {
                std::thread::sleep(OPEN_GRACE);
                broker.exit_status()
            }
            Err(status) => Some(status),
        };
        let detail = match refused {
            None => format!("{done}: started"),
            Some(status) => {
                broker.kill();
                let said = last_error_line(&log);
                std::fs::write(&path, &original).expect("the file is put back");
                broker.spawn();
                format!("{done}: refused ({status}): {said}")
            }
        };
        // A replica repaired from its peers has one copy fewer until it
        // caught up: no further fault meanwhile (an operator would wait).
        let caught_up = self.wait_caught_up(CATCH_UP_TIMEOUT);
        format!("{detail}; caught up: {caught_up}")
    }

    /// Waits until every leader reports its followers caught up; whether
    /// they did within `timeout`.
    fn wait_caught_up(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self
                .brokers
                .iter()
                .all(|broker| broker.replica_lag().is_none_or(|lag| lag == 0))
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }
}

/// The last line of a broker's log that reports an error.
fn last_error_line(log: &Path) -> String {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .rev()
        .find(|line| line.contains("ERROR") || line.contains("error"))
        .unwrap_or("(nothing logged)")
        .chars()
        .take(300)
        .collect()
}
