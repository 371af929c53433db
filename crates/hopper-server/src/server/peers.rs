//! The peers that said hello, the orders each holds, and the index dispatch reads
//! ([`Roster`]), kept in step with one another: every change to a peer's orders or credit
//! goes through [`Peers`], which tells the roster, so that no claim needs a pass over every
//! connected worker.

use std::collections::{HashMap, HashSet, VecDeque, hash_map};

use hopper_core::pace::{Pace, prefetch_for};
use hopper_core::{JobId, Lease};
use hopper_protocol::Role;
use tokio::time::Instant;
use uuid::Uuid;

use super::PeerId;
use crate::auth::Access;
use crate::roster::Roster;

/// An order a worker holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held {
    pub attempt: i32,
    pub counted_attempt: i32,
    pub sent_at: Instant,
    /// When the server stops waiting: the job's timeout (moved by `extend`) plus a grace of
    /// two heartbeat periods. `None` for leases adopted after a restart (timeout unknown).
    pub deadline: Option<Instant>,
}

/// How many leases a peer may still log for without holding them ([`Loggable`]). A
/// worker's last lines of an attempt may come after its outcome (the Python and Node
/// workers send them once the attempt's request in flight is answered, a round trip or a
/// few retries later): this many of its attempts finished since is past what a worker
/// finishes meanwhile unless its jobs take well under a millisecond. About 64 KB a peer
/// at most (a lease is 20 bytes, kept in a queue and a set).
pub(crate) const LOGGABLE_LEASES: usize = 1024;

/// The leases a peer may still send log lines for though it does not hold them: the
/// attempts it finished or that were taken from it, and leases of an earlier run of this
/// server found to be this node's ([`LOGGABLE_LEASES`] at most, the oldest forgotten
/// first).
#[derive(Debug, Default)]
pub(crate) struct Loggable {
    order: VecDeque<Lease>,
    set: HashSet<Lease>,
}

impl Loggable {
    /// Remembers `lease`, forgetting the oldest when the bound is reached (first, so that
    /// neither container grows past it).
    fn insert(&mut self, lease: Lease) {
        if self.set.contains(&lease) {
            return;
        }
        if self.order.len() >= LOGGABLE_LEASES
            && let Some(oldest) = self.order.pop_front()
        {
            self.set.remove(&oldest);
        }
        self.order.push_back(lease);
        self.set.insert(lease);
    }

    fn contains(&self, lease: &Lease) -> bool {
        self.set.contains(lease)
    }
}

/// What a hello registers.
pub(crate) struct Registration {
    pub role: Role,
    pub access: Access,
    pub name: String,
    /// `None`: any kind.
    pub kinds: Option<HashSet<String>>,
    pub queues: Vec<String>,
    pub concurrency: usize,
    pub prefetch: usize,
    pub batch: bool,
}

/// A peer that said hello. What decides where its orders go (role, queues, kinds, credit,
/// orders held) is read-only here: it changes through [`Peers`].
#[derive(Debug)]
pub(crate) struct Peer {
    pub session: Uuid,
    role: Role,
    /// What its token allows.
    pub access: Access,
    pub name: String,
    kinds: Option<HashSet<String>>,
    queues: Vec<String>,
    concurrency: usize,
    /// The most orders it holds beyond `concurrency` (its hello's `prefetch`).
    prefetch: usize,
    /// The mean duration of its jobs, from the outcomes it reports: sizes the credit it is
    /// granted beyond its concurrency.
    pub pace: Pace,
    held: HashMap<JobId, Held>,
    /// Leases it may still log for without holding them.
    loggable: Loggable,
    /// Jobs of an earlier run of this server that its last heartbeat listed and could not
    /// adopt (the database failed): its next heartbeat tries again, even once inherited
    /// leases are no longer looked for (`leases.rs`).
    pub unadopted: HashSet<JobId>,
    pub last_seen: Instant,
    /// Said bye: no more orders.
    pub leaving: bool,
    /// Its connection closed while frames of it still waited their turn: no more orders,
    /// and its session ends once the last is handled (`Core::on_event_or_gone`).
    pub closed: bool,
    /// Reads `orders` (several jobs per push).
    pub batch: bool,
}

impl Peer {
    /// Orders it can take now: its concurrency, plus what it holds ahead of its slots when
    /// it announced a prefetch (as many as its slots start in 10 ms at the pace of its jobs,
    /// [`hopper_core::pace::prefetch_for`], at most the prefetch it announced), minus the
    /// orders it holds. A worker of concurrency 0 takes none: it runs nothing, so it would
    /// hold what it was sent ahead for ever.
    pub fn free(&self) -> usize {
        if self.role != Role::Worker || self.leaving || self.closed || self.concurrency == 0 {
            return 0;
        }
        let ahead = match self.prefetch {
            0 => 0,
            most => prefetch_for(self.concurrency, self.pace.mean(), most).min(most),
        };
        (self.concurrency + ahead).saturating_sub(self.held.len())
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// The queues it serves.
    pub fn queues(&self) -> &[String] {
        &self.queues
    }

    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// The orders it holds.
    pub fn held(&self) -> &HashMap<JobId, Held> {
        &self.held
    }
}

/// The peers, by routing id.
#[derive(Debug, Default)]
pub(crate) struct Peers {
    map: HashMap<PeerId, Peer>,
    /// Who holds each order.
    holders: HashMap<JobId, PeerId>,
    roster: Roster<PeerId>,
}

impl Peers {
    pub fn get(&self, id: &PeerId) -> Option<&Peer> {
        self.map.get(id)
    }

    pub fn contains(&self, id: &PeerId) -> bool {
        self.map.contains_key(id)
    }

    pub fn iter(&self) -> hash_map::Iter<'_, PeerId, Peer> {
        self.map.iter()
    }

    pub fn values(&self) -> hash_map::Values<'_, PeerId, Peer> {
        self.map.values()
    }

    /// The workers indexed by queue and kind, with their free credit.
    pub fn roster(&self) -> &Roster<PeerId> {
        &self.roster
    }

    /// The peer holding order `job`.
    pub fn holder(&self, job: &JobId) -> Option<&PeerId> {
        self.holders.get(job)
    }

    /// Registers a hello: a new peer, or new settings for one that has a session (its
    /// session and orders kept).
    pub fn register(&mut self, id: &PeerId, reg: Registration, now: Instant) -> &Peer {
        let p = self.map.entry(id.clone()).or_insert_with(|| Peer {
            session: Uuid::now_v7(),
            role: reg.role,
            access: reg.access,
            name: String::new(),
            kinds: None,
            queues: Vec::new(),
            concurrency: 0,
            prefetch: 0,
            pace: Pace::default(),
            held: HashMap::new(),
            loggable: Loggable::default(),
            unadopted: HashSet::new(),
            last_seen: now,
            leaving: false,
            closed: false,
            batch: false,
        });
        p.role = reg.role;
        p.access = reg.access;
        p.name = reg.name;
        p.kinds = reg.kinds;
        p.queues = reg.queues;
        p.concurrency = reg.concurrency;
        p.prefetch = reg.prefetch;
        p.batch = reg.batch;
        p.last_seen = now;
        p.leaving = false;
        if p.role == Role::Worker {
            self.roster
                .join(id.clone(), &p.queues, p.kinds.as_ref(), p.free());
        } else {
            self.roster.leave(id);
        }
        p
    }

    /// Changes a peer with `f` (its pace, last message, leaving); its credit is read
    /// again after. `None` when there is no such peer.
    pub fn update<R>(&mut self, id: &PeerId, f: impl FnOnce(&mut Peer) -> R) -> Option<R> {
        let p = self.map.get_mut(id)?;
        let result = f(p);
        self.roster.set_free(id, p.free());
        Some(result)
    }

    /// Gives a peer an order to hold.
    pub fn hold(&mut self, id: &PeerId, job: JobId, held: Held) {
        let Some(p) = self.map.get_mut(id) else {
            return;
        };
        p.held.insert(job, held);
        self.holders.insert(job, id.clone());
        self.roster.set_free(id, p.free());
    }

    /// Takes back an order a peer holds; `None` when it does not hold it. Its late log
    /// lines are still taken ([`Peers::may_log`]).
    pub fn release(&mut self, id: &PeerId, job: &JobId) -> Option<Held> {
        let p = self.map.get_mut(id)?;
        let held = p.held.remove(job)?;
        p.loggable.insert(Lease {
            job_id: *job,
            attempt: held.attempt,
        });
        if self.holders.get(job) == Some(id) {
            self.holders.remove(job);
        }
        self.roster.set_free(id, p.free());
        Some(held)
    }

    /// Lets peer `id` log for `lease`, which it does not hold: it reported its outcome, or
    /// the lease was found to be this node's.
    pub fn allow_logs(&mut self, id: &PeerId, lease: Lease) {
        if let Some(p) = self.map.get_mut(id) {
            p.loggable.insert(lease);
        }
    }

    /// Whether peer `id` may send log lines for `lease`: it holds that attempt, or may
    /// still log for it ([`Loggable`]).
    pub fn may_log(&self, id: &PeerId, lease: &Lease) -> bool {
        self.map.get(id).is_some_and(|p| {
            p.held.get(&lease.job_id).map(|h| h.attempt) == Some(lease.attempt)
                || p.loggable.contains(lease)
        })
    }

    /// The attempt under which peer `id` holds order `job`; `None` when it does not hold it.
    /// A report of another attempt is not that order's (a late outcome of an earlier
    /// attempt, a wrong one), and leaves it as it is.
    pub fn held_attempt(&self, id: &PeerId, job: &JobId) -> Option<i32> {
        self.map.get(id)?.held.get(job).map(|h| h.attempt)
    }

    /// The order `job` peer `id` holds under `attempt`, to move its deadline.
    pub fn held_mut(&mut self, id: &PeerId, job: &JobId, attempt: i32) -> Option<&mut Held> {
        if self.held_attempt(id, job) != Some(attempt) {
            return None;
        }
        self.map.get_mut(id)?.held.get_mut(job)
    }

    /// Ends a peer's session; it is returned with the orders it held.
    pub fn remove(&mut self, id: &PeerId) -> Option<Peer> {
        let p = self.map.remove(id)?;
        self.roster.leave(id);
        for job in p.held.keys() {
            if self.holders.get(job) == Some(id) {
                self.holders.remove(job);
            }
        }
        Some(p)
    }

    /// Whether the roster's credit per queue agrees with a recount over every peer, and
    /// each holder in the index holds its order: checked in debug builds, where tests run.
    pub fn consistent(&self) -> bool {
        let mut credit: HashMap<&str, usize> = HashMap::new();
        for p in self.map.values() {
            let free = p.free();
            if free == 0 {
                continue;
            }
            let queues: HashSet<&str> = p.queues.iter().map(String::as_str).collect();
            for q in queues {
                *credit.entry(q).or_default() += free;
            }
        }
        let indexed: HashMap<&str, usize> = self.roster.queues_with_credit().collect();
        let holders_hold = self
            .holders
            .iter()
            .all(|(job, id)| self.map.get(id).is_some_and(|p| p.held.contains_key(job)));
        indexed == credit && holders_hold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(n: usize) -> Lease {
        Lease {
            job_id: Uuid::from_u128(n as u128 + 1),
            attempt: 1,
        }
    }

    #[test]
    fn loggable_leases_forget_the_oldest_past_the_bound() {
        let mut loggable = Loggable::default();
        for n in 0..=LOGGABLE_LEASES {
            loggable.insert(lease(n));
        }
        // Again: not counted twice.
        loggable.insert(lease(LOGGABLE_LEASES));
        assert!(!loggable.contains(&lease(0)), "the oldest is forgotten");
        assert!((1..=LOGGABLE_LEASES).all(|n| loggable.contains(&lease(n))));
        assert_eq!(loggable.order.len(), LOGGABLE_LEASES);
        assert_eq!(loggable.set.len(), LOGGABLE_LEASES);
    }
}
