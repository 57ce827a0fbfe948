//! Network partitions for multi-process tests: a private network namespace
//! per test (or per nemesis run) and nftables rules that cut links in it.
//!
//! [`enter_private_network`] moves the calling thread into a fresh network
//! namespace with only `lo` up. Threads, tokio runtimes and child processes
//! (brokers, `nft`) started from that thread afterwards share it; the host's
//! network is untouched, and the namespace vanishes with its last user, so
//! there is nothing to clean up. Inside it all of 127.0.0.0/8 is local on
//! `lo`: brokers listen on 127.0.0.2, .3 and .4 and (since a broker's peer
//! connections start from its listen IP) their traffic is told apart by
//! address.
//!
//! Clients cannot choose their source address (the client library has no
//! such setting), so every client, the tests' own and the client library's,
//! connects from 127.0.0.1: "client isolated from the leader" is
//! [`Firewall::cut_both`]`(CLIENTS, leader)`.
//!
//! [`Firewall`] drops packets in an `input` hook: the sender sees nothing
//! (as on a real network, where a partition is silence), whereas a drop on
//! output would fail the sender's `send` with EPERM at once.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// The address every client connects from.
pub const CLIENTS: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);

/// The nftables table the rules live in (`inet` family).
pub const TABLE: &str = "corelog_nemesis";

/// Why the calling thread could not get a private network; callers say so
/// and fall back (to pauses) or, in CI which runs as root, fail.
#[derive(Debug, thiserror::Error)]
pub enum NetnsUnavailable {
    /// Creating a network namespace needs CAP_SYS_ADMIN.
    #[error("network namespaces need root (CAP_SYS_ADMIN); running as uid {uid}")]
    NotRoot {
        /// The effective user id.
        uid: u32,
    },
    /// The kernel refused `unshare(CLONE_NEWNET)` (a container without the
    /// capability, a kernel without namespaces).
    #[error("unshare(CLONE_NEWNET) was refused: {0}")]
    UnshareRefused(std::io::Error),
    /// `ip` (Debian `iproute2`) is needed to bring `lo` up.
    #[error("cannot run `ip` to bring lo up ({0}); install iproute2")]
    IpMissing(std::io::Error),
    /// `ip link set lo up` failed.
    #[error("`ip link set lo up` failed: {0}")]
    LoopbackDown(String),
}

/// Moves the calling thread into a new network namespace whose `lo` is up.
/// Call it before starting the threads, runtimes and processes that must
/// share the namespace; threads started earlier stay outside.
///
/// # Errors
/// [`NetnsUnavailable`] saying why (not root, refused, `ip` missing).
pub fn enter_private_network() -> Result<(), NetnsUnavailable> {
    let uid = rustix::process::geteuid().as_raw();
    if uid != 0 {
        return Err(NetnsUnavailable::NotRoot { uid });
    }
    // `unshare` is deprecated in rustix 1.1 for `unshare_unsafe`, whose
    // hazard is CLONE_FILES (file descriptors shared across threads); a new
    // network namespace has no such hazard, and this crate forbids unsafe.
    #[allow(deprecated)]
    rustix::thread::unshare(rustix::thread::UnshareFlags::NEWNET)
        .map_err(|errno| NetnsUnavailable::UnshareRefused(errno.into()))?;
    let output = Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .stdin(Stdio::null())
        .output()
        .map_err(NetnsUnavailable::IpMissing)?;
    if !output.status.success() {
        return Err(NetnsUnavailable::LoopbackDown(
            String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        ));
    }
    Ok(())
}

/// Why an nftables change failed.
#[derive(Debug, thiserror::Error)]
pub enum FirewallError {
    /// The `nft` binary is not installed.
    #[error("cannot run `nft` ({0}); install nftables (Debian package `nftables`)")]
    NftMissing(std::io::Error),
    /// `nft` refused the script.
    #[error("nft refused the rules ({stderr}); script:\n{script}")]
    Refused {
        /// What `nft` said.
        stderr: String,
        /// The script it was given.
        script: String,
    },
}

/// The table [`TABLE`] in the calling thread's network namespace, with an
/// input chain where links are cut; deleted when dropped. Create it only
/// after [`enter_private_network`]: on the host it would cut the host's
/// own loopback traffic.
#[derive(Debug)]
pub struct Firewall {
    _private: (),
}

impl Firewall {
    /// Creates the table and its (empty) input chain, replacing any table
    /// of the same name left behind.
    ///
    /// # Errors
    /// [`FirewallError`] when `nft` is missing or refuses.
    pub fn new() -> Result<Firewall, FirewallError> {
        // `add` then `delete` then `add`: one atomic transaction that works
        // whether or not a previous run left the table.
        nft(&format!(
            "add table inet {TABLE}\n\
             delete table inet {TABLE}\n\
             table inet {TABLE} {{\n\
             \tchain input {{ type filter hook input priority 0; policy accept; }}\n\
             }}\n"
        ))?;
        Ok(Firewall { _private: () })
    }

    /// One-way cut: packets from `from` to `to` are dropped; the other
    /// direction still flows (so TCP connections stall rather than reset).
    ///
    /// # Errors
    /// [`FirewallError`] when `nft` fails.
    pub fn cut(&self, from: Ipv4Addr, to: Ipv4Addr) -> Result<(), FirewallError> {
        nft(&rule(&format!("ip saddr {from} ip daddr {to}")))
    }

    /// Both directions between `a` and `b`.
    ///
    /// # Errors
    /// [`FirewallError`] when `nft` fails.
    pub fn cut_both(&self, a: Ipv4Addr, b: Ipv4Addr) -> Result<(), FirewallError> {
        nft(&format!(
            "{}{}",
            rule(&format!("ip saddr {a} ip daddr {b}")),
            rule(&format!("ip saddr {b} ip daddr {a}"))
        ))
    }

    /// Every link of `ip`, to and from every other address (brokers and
    /// clients): an isolated leader. Its traffic to itself still flows,
    /// since a broker talking to its own listener is not a network link.
    ///
    /// # Errors
    /// [`FirewallError`] when `nft` fails.
    pub fn isolate(&self, ip: Ipv4Addr) -> Result<(), FirewallError> {
        nft(&format!(
            "{}{}",
            rule(&format!("ip saddr {ip} ip daddr != {ip}")),
            rule(&format!("ip daddr {ip} ip saddr != {ip}"))
        ))
    }

    /// Removes every cut.
    ///
    /// # Errors
    /// [`FirewallError`] when `nft` fails.
    pub fn heal(&self) -> Result<(), FirewallError> {
        nft(&format!("flush chain inet {TABLE} input\n"))
    }

    /// The current rules, as `nft list table` prints them (for logs).
    ///
    /// # Errors
    /// [`FirewallError`] when `nft` fails.
    pub fn rules(&self) -> Result<String, FirewallError> {
        nft_list()
    }

    /// Whether [`TABLE`] exists in the calling thread's namespace.
    ///
    /// # Errors
    /// [`FirewallError::NftMissing`] when `nft` cannot run.
    pub fn table_exists() -> Result<bool, FirewallError> {
        match nft_list() {
            Ok(_) => Ok(true),
            Err(FirewallError::Refused { .. }) => Ok(false),
            Err(missing) => Err(missing),
        }
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        if let Err(error) = nft(&format!("delete table inet {TABLE}\n")) {
            eprintln!("cannot delete the nftables table {TABLE}: {error}");
        }
    }
}

/// One drop rule for packets matching `matches`, as a script line.
fn rule(matches: &str) -> String {
    let mut line = String::new();
    let _infallible = writeln!(line, "add rule inet {TABLE} input {matches} drop");
    line
}

/// Runs `nft -f -` with `script` on stdin.
fn nft(script: &str) -> Result<(), FirewallError> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(FirewallError::NftMissing)?;
    let written = child
        .stdin
        .take()
        .map(|mut stdin| stdin.write_all(script.as_bytes()));
    let output = child
        .wait_with_output()
        .map_err(FirewallError::NftMissing)?;
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    match written {
        Some(Ok(())) if output.status.success() => Ok(()),
        Some(Err(error)) => Err(FirewallError::Refused {
            stderr: format!("{stderr} (writing the script: {error})"),
            script: script.to_owned(),
        }),
        _ => Err(FirewallError::Refused {
            stderr,
            script: script.to_owned(),
        }),
    }
}

fn nft_list() -> Result<String, FirewallError> {
    let output = Command::new("nft")
        .args(["list", "table", "inet", TABLE])
        .stdin(Stdio::null())
        .output()
        .map_err(FirewallError::NftMissing)?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(FirewallError::Refused {
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            script: format!("list table inet {TABLE}"),
        })
    }
}
