//! Failed logins on one broker, by user name and by source address, shared
//! by every shard's connections (see [`super::edge`]), so that password
//! guessing is slow however the guesses are spread:
//!
//! - **Delay.** The `n`th failure of a user name or an address within
//!   [`LoginLedger::FORGET_AFTER`] is answered after
//!   [`LoginLedger::DELAY_MIN`] doubled `n − 1` times, up to
//!   [`LoginLedger::DELAY_MAX`].
//! - **One guess at a time.** Until that delay has passed, no other proof
//!   for the same user name or from the same address is checked
//!   ([`LoginLedger::turn`]): guesses sent side by side on many
//!   connections (from one address, or at one user from many) wait in
//!   line instead of each waiting out its own delay at the same time.
//! - **Abandoned exchanges count.** An exchange that got its server-first
//!   message and never sent its proof is a failure: it learnt the salt and
//!   iterations, and it would otherwise be a free probe.
//! - **Budget and lockout.** A user name with `failures_max` failures is
//!   locked out for `lockout` ([`LoginLedger::locked_out`]), right
//!   password or not, except from an address that logged in as it before
//!   ("known good"). The trade-off: an attacker can lock a user out of new
//!   places for a while (never out of the ones it uses); without the
//!   lockout the delays alone let a patient attacker try ~17,000 guesses a
//!   day per address. Unknown names are counted and locked alike, so a
//!   lockout tells nothing about whether a user exists.
//!
//! Memory is bounded: at most [`LoginLedger::KEYS_MAX`] names and as many
//! addresses (quiet ones forgotten first), and
//! [`LoginLedger::KNOWN_GOOD_PER_USER`] known-good addresses per user.
//! All of it is per broker and lost at a restart.
//!
//! Pure: callers hand in the time.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The failure budget of a user name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoginLimits {
    /// Failures within [`LoginLedger::FORGET_AFTER`] that lock a user
    /// name out.
    pub failures_max: u32,
    /// How long a lockout lasts.
    pub lockout: Duration,
}

/// The failures of one user name or one address.
#[derive(Clone, Copy, Debug)]
struct Failures {
    count: u32,
    last: Instant,
    /// No proof is checked for this key before then.
    busy_until: Instant,
    /// Locked out until then (user names only).
    locked_until: Option<Instant>,
}

/// Whether a proof may be checked now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// Check it.
    Now,
    /// Not before then: an earlier failure's delay runs until then.
    After(Instant),
}

/// The broker's failed logins.
#[derive(Debug)]
pub struct LoginLedger {
    limits: LoginLimits,
    users: HashMap<String, Failures>,
    addresses: HashMap<IpAddr, Failures>,
    /// Addresses each user logged in from, most recent last.
    known_good: HashMap<String, Vec<(IpAddr, Instant)>>,
}

impl LoginLedger {
    /// The delay of a first failure.
    pub const DELAY_MIN: Duration = Duration::from_millis(200);
    /// The longest delay.
    pub const DELAY_MAX: Duration = Duration::from_secs(5);
    /// Quiet time after which a name's or an address's failures are
    /// forgotten.
    pub const FORGET_AFTER: Duration = Duration::from_secs(600);
    /// Names, and addresses, remembered at most.
    pub const KEYS_MAX: usize = 10_000;
    /// Known-good addresses remembered per user.
    pub const KNOWN_GOOD_PER_USER: usize = 16;
    /// How long an address stays known good after a login from it.
    pub const KNOWN_GOOD_FOR: Duration = Duration::from_secs(30 * 24 * 3600);

    /// An empty ledger with these limits.
    #[must_use]
    pub fn new(limits: LoginLimits) -> LoginLedger {
        LoginLedger {
            limits,
            users: HashMap::new(),
            addresses: HashMap::new(),
            known_good: HashMap::new(),
        }
    }

    /// Until when `user` is locked out for a login from `address`; `None`
    /// when it is not (or `address` is known good for it).
    #[must_use]
    pub fn locked_out(&self, user: &str, address: IpAddr, now: Instant) -> Option<Instant> {
        let until = self.users.get(user)?.locked_until?;
        (until > now && !self.is_known_good(user, address, now)).then_some(until)
    }

    /// Whether a proof for `user` from `address` may be checked at `now`.
    #[must_use]
    pub fn turn(&self, user: &str, address: IpAddr, now: Instant) -> Turn {
        let mut until = self
            .addresses
            .get(&address)
            .map(|failures| failures.busy_until);
        if !self.is_known_good(user, address, now) {
            let user_until = self.users.get(user).map(|failures| failures.busy_until);
            until = until.max(user_until);
        }
        match until {
            Some(until) if until > now => Turn::After(until),
            _ => Turn::Now,
        }
    }

    /// Records a wrong proof for `user` from `address` at `now`; returns
    /// how long to wait before answering it.
    pub fn failed(&mut self, user: &str, address: IpAddr, now: Instant) -> Duration {
        let by_address = note_failure(&mut self.addresses, address, now);
        let by_user = note_failure(&mut self.users, user.to_owned(), now);
        let limits = self.limits;
        if let Some(failures) = self.users.get_mut(user)
            && failures.count >= limits.failures_max
        {
            failures.locked_until = Some(now + limits.lockout);
        }
        by_address.max(by_user)
    }

    /// Records a failed proof from `address` that names no user (a wrong
    /// cluster secret); returns how long to wait before answering it.
    pub fn failed_from(&mut self, address: IpAddr, now: Instant) -> Duration {
        note_failure(&mut self.addresses, address, now)
    }

    /// Records an exchange for `user` from `address` that ended without a
    /// proof: a failure, with nobody left to answer.
    pub fn abandoned(&mut self, user: &str, address: IpAddr, now: Instant) {
        let _delay = self.failed(user, address, now);
    }

    /// Records a login of `user` from `address`: the address is known good
    /// for the user from now on. Failures are not forgiven: an attacker
    /// holding one account must not clear its address's record by logging
    /// in to it between guesses at another.
    pub fn succeeded(&mut self, user: &str, address: IpAddr, now: Instant) {
        if !self.known_good.contains_key(user) && self.known_good.len() >= Self::KEYS_MAX {
            self.known_good.retain(|_, addresses| {
                addresses.last().is_some_and(|(_, at)| {
                    now.saturating_duration_since(*at) < Self::KNOWN_GOOD_FOR
                })
            });
            if self.known_good.len() >= Self::KEYS_MAX
                && let Some(oldest) = self
                    .known_good
                    .iter()
                    .min_by_key(|(_, addresses)| addresses.last().map(|(_, at)| *at))
                    .map(|(name, _)| name.clone())
            {
                self.known_good.remove(&oldest);
            }
        }
        let addresses = self.known_good.entry(user.to_owned()).or_default();
        addresses.retain(|(known, _)| *known != address);
        if addresses.len() >= Self::KNOWN_GOOD_PER_USER {
            addresses.remove(0);
        }
        addresses.push((address, now));
    }

    fn is_known_good(&self, user: &str, address: IpAddr, now: Instant) -> bool {
        self.known_good.get(user).is_some_and(|addresses| {
            addresses.iter().any(|(known, at)| {
                *known == address && now.saturating_duration_since(*at) < Self::KNOWN_GOOD_FOR
            })
        })
    }
}

/// Counts a failure of `key` at `now` (starting over after a quiet
/// [`LoginLedger::FORGET_AFTER`]); returns its delay, which also keeps the
/// key busy.
fn note_failure<K: Hash + Eq + Clone>(
    keys: &mut HashMap<K, Failures>,
    key: K,
    now: Instant,
) -> Duration {
    if !keys.contains_key(&key) && keys.len() >= LoginLedger::KEYS_MAX {
        forget_quiet(keys, now);
    }
    let failures = keys.entry(key).or_insert(Failures {
        count: 0,
        last: now,
        busy_until: now,
        locked_until: None,
    });
    let locked = failures.locked_until.is_some_and(|until| until > now);
    if now.saturating_duration_since(failures.last) >= LoginLedger::FORGET_AFTER && !locked {
        failures.count = 0;
        failures.locked_until = None;
    }
    failures.count = failures.count.saturating_add(1);
    failures.last = now;
    let doublings = failures.count.saturating_sub(1).min(16);
    let delay = LoginLedger::DELAY_MIN
        .saturating_mul(1 << doublings)
        .min(LoginLedger::DELAY_MAX);
    failures.busy_until = failures.busy_until.max(now) + delay;
    delay
}

/// Makes room for a new key: drops those quiet for
/// [`LoginLedger::FORGET_AFTER`] and not locked out, then, if still full,
/// the one whose last failure is oldest.
fn forget_quiet<K: Hash + Eq + Clone>(keys: &mut HashMap<K, Failures>, now: Instant) {
    keys.retain(|_, failures| {
        now.saturating_duration_since(failures.last) < LoginLedger::FORGET_AFTER
            || failures.locked_until.is_some_and(|until| until > now)
    });
    if keys.len() >= LoginLedger::KEYS_MAX
        && let Some(oldest) = keys
            .iter()
            .min_by_key(|(_, failures)| failures.last)
            .map(|(key, _)| key.clone())
    {
        keys.remove(&oldest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: LoginLimits = LoginLimits {
        failures_max: 5,
        lockout: Duration::from_secs(900),
    };

    fn address(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn failures_wait_longer_each_time_up_to_a_bound_and_are_forgotten_when_quiet() {
        let mut ledger = LoginLedger::new(LoginLimits {
            failures_max: 100,
            ..LIMITS
        });
        let now = Instant::now();
        let delays: Vec<Duration> = (0..8)
            .map(|_| ledger.failed("alice", address(1), now))
            .collect();
        assert_eq!(delays[0], LoginLedger::DELAY_MIN);
        assert_eq!(delays[1], LoginLedger::DELAY_MIN * 2);
        assert!(
            delays.windows(2).all(|pair| pair[0] <= pair[1]),
            "{delays:?}"
        );
        assert_eq!(delays[7], LoginLedger::DELAY_MAX);
        let later = now + Duration::from_secs(3600);
        assert_eq!(
            ledger.failed("bob", address(2), later),
            LoginLedger::DELAY_MIN
        );
        assert_eq!(
            ledger.failed("alice", address(1), later),
            LoginLedger::DELAY_MIN,
            "forgotten"
        );
    }

    /// Guesses at one user from many addresses, and from one address at
    /// many users, each wait for the one before: the ledger is the same
    /// object on every shard, so this holds across shards too.
    #[test]
    fn one_proof_at_a_time_per_user_and_per_address() {
        let mut ledger = LoginLedger::new(LIMITS);
        let now = Instant::now();
        assert_eq!(ledger.turn("alice", address(1), now), Turn::Now);
        let delay = ledger.failed("alice", address(1), now);
        // Another address guessing at alice waits for that failure's delay.
        assert_eq!(
            ledger.turn("alice", address(2), now),
            Turn::After(now + delay)
        );
        // Another user from the same address waits too.
        assert_eq!(
            ledger.turn("bob", address(1), now),
            Turn::After(now + delay)
        );
        // Neither the user nor the address: at once.
        assert_eq!(ledger.turn("bob", address(2), now), Turn::Now);
        let then = now + delay;
        assert_eq!(ledger.turn("alice", address(2), then), Turn::Now);
        let second = ledger.failed("alice", address(2), then);
        assert_eq!(second, LoginLedger::DELAY_MIN * 2, "alice's second failure");
        assert_eq!(
            ledger.turn("alice", address(3), then),
            Turn::After(then + second)
        );
    }

    /// The ledger shared by two shard threads, each failing as soon as it
    /// is its turn: the failures are spread over the sum of their delays,
    /// not answered side by side.
    #[test]
    fn guesses_from_two_shards_wait_in_one_line() {
        let shared = std::sync::Mutex::new(LoginLedger::new(LoginLimits {
            failures_max: 100,
            ..LIMITS
        }));
        let start = Instant::now();
        let last_checked = std::thread::scope(|scope| {
            let shards: Vec<_> = (0..2u8)
                .map(|shard| {
                    let shared = &shared;
                    scope.spawn(move || {
                        let mut now = start;
                        for _ in 0..3 {
                            loop {
                                let mut ledger = shared.lock().unwrap();
                                match ledger.turn("alice", address(shard), now) {
                                    Turn::Now => {
                                        let _delay = ledger.failed("alice", address(shard), now);
                                        break;
                                    }
                                    Turn::After(until) => now = until,
                                }
                            }
                        }
                        now
                    })
                })
                .collect();
            shards
                .into_iter()
                .map(|shard| shard.join().unwrap())
                .max()
                .unwrap()
        });
        // Six failures of alice: the sixth is checked after the first five
        // delays, 200 + 400 + 800 + 1600 + 3200 ms.
        assert!(
            last_checked.saturating_duration_since(start) >= Duration::from_millis(6200),
            "{:?}",
            last_checked.saturating_duration_since(start)
        );
    }

    #[test]
    fn a_user_past_its_budget_is_locked_out_except_from_a_known_good_address() {
        let mut ledger = LoginLedger::new(LIMITS);
        let now = Instant::now();
        ledger.succeeded("alice", address(1), now);
        for n in 0..LIMITS.failures_max {
            assert_eq!(ledger.locked_out("alice", address(9), now), None, "{n}");
            let _delay = ledger.failed("alice", address(9), now);
        }
        let until = now + LIMITS.lockout;
        assert_eq!(ledger.locked_out("alice", address(7), now), Some(until));
        assert_eq!(ledger.locked_out("alice", address(1), now), None);
        // Nor does alice's own address wait for the guesser's delays.
        assert_eq!(ledger.turn("alice", address(1), now), Turn::Now);
        assert_eq!(ledger.locked_out("alice", address(7), until), None);
        // An unknown name is locked out alike.
        for _ in 0..LIMITS.failures_max {
            ledger.abandoned("mallory", address(9), now);
        }
        assert_eq!(ledger.locked_out("mallory", address(7), now), Some(until));
    }

    #[test]
    fn the_ledger_remembers_a_bounded_number_of_names_and_addresses() {
        let mut ledger = LoginLedger::new(LIMITS);
        let now = Instant::now();
        for n in 0..=LoginLedger::KEYS_MAX as u32 {
            let _delay = ledger.failed(&format!("user-{n}"), IpAddr::from(n.to_be_bytes()), now);
            ledger.succeeded(&format!("user-{n}"), IpAddr::from(n.to_be_bytes()), now);
        }
        assert!(ledger.addresses.len() <= LoginLedger::KEYS_MAX);
        assert!(ledger.users.len() <= LoginLedger::KEYS_MAX);
        assert!(ledger.known_good.len() <= LoginLedger::KEYS_MAX);
        for n in 0..40u8 {
            ledger.succeeded("alice", address(n), now);
        }
        assert_eq!(
            ledger.known_good["alice"].len(),
            LoginLedger::KNOWN_GOOD_PER_USER
        );
    }
}
