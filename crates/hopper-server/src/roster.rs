//! The roster: connected workers indexed by the queues and kinds they serve, with the free
//! credit of each, so that a claim and the placing of its jobs read only the workers that
//! can take them, not every connected one.
//!
//! Workers that declared the same queues and the same kinds form one *group* (thousands of
//! identical workers are one group). A group keeps its members that have free credit in
//! order: most free credit first, then the one whose last order is oldest (so equal workers
//! take turns). A queue keeps its total free credit and the groups serving it that have
//! some. Hence:
//!
//! - the free credit of a queue (how many jobs to claim) is one lookup;
//! - the kinds to claim from a queue are the union of the kinds of its groups with credit;
//! - a claimed job goes to the first member of the best of the queue's groups with credit
//!   that take its kind: one look per such group, whatever the number of workers;
//! - a worker's credit changing (an order sent, an outcome reported) moves it inside its
//!   group and adjusts the totals of its queues: O(queues it serves × log(workers)).
//!
//! Pure bookkeeping: the server tells it every change (`server/peers.rs`).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::Hash;

/// What a worker serves: its queues (sorted, each once) and its kinds (`None`: any kind).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Profile {
    queues: Vec<String>,
    kinds: Option<BTreeSet<String>>,
}

impl Profile {
    fn takes(&self, kind: &str) -> bool {
        self.kinds.as_ref().is_none_or(|k| k.contains(kind))
    }
}

type GroupId = u64;

/// A member's place in its group: most free credit first, then the oldest last order, then
/// the key (so that places are unique).
type Rank<K> = (Reverse<usize>, u64, K);

/// Workers of one profile.
#[derive(Debug)]
struct Group<K> {
    profile: Profile,
    /// Members, with credit or not: the group goes with the last.
    members: usize,
    /// Members with free credit, best first.
    ready: BTreeSet<Rank<K>>,
    /// The free credit of its members, summed.
    credit: usize,
}

/// One served queue.
#[derive(Debug, Default)]
struct Queue {
    /// The free credit of the workers serving it, summed.
    credit: usize,
    /// Its groups that have free credit.
    ready: BTreeSet<GroupId>,
    /// Its groups: the queue goes with the last.
    groups: usize,
}

/// One worker.
#[derive(Debug)]
struct Member {
    group: GroupId,
    free: usize,
    /// When it was last given an order, on the roster's own clock (0: never).
    stamp: u64,
}

/// Connected workers indexed for dispatch; `K` names a worker.
#[derive(Debug)]
pub(crate) struct Roster<K> {
    members: HashMap<K, Member>,
    groups: HashMap<GroupId, Group<K>>,
    profiles: HashMap<Profile, GroupId>,
    queues: BTreeMap<String, Queue>,
    next_group: GroupId,
    /// Counts the orders given; stamps members.
    clock: u64,
}

impl<K> Default for Roster<K> {
    fn default() -> Self {
        Self {
            members: HashMap::new(),
            groups: HashMap::new(),
            profiles: HashMap::new(),
            queues: BTreeMap::new(),
            next_group: 0,
            clock: 0,
        }
    }
}

impl<K: Clone + Ord + Hash> Roster<K> {
    /// Adds a worker serving `queues` (any kind when `kinds` is `None`) with `free` credit.
    /// A worker already on the roster is registered anew (its place among equals kept).
    pub fn join(&mut self, id: K, queues: &[String], kinds: Option<&HashSet<String>>, free: usize) {
        let stamp = self.members.get(&id).map_or(0, |m| m.stamp);
        self.leave(&id);
        let mut queues = queues.to_vec();
        queues.sort_unstable();
        queues.dedup();
        let profile = Profile {
            queues,
            kinds: kinds.map(|k| k.iter().cloned().collect()),
        };
        let group = match self.profiles.get(&profile) {
            Some(group) => *group,
            None => {
                let group = self.next_group;
                self.next_group += 1;
                for q in &profile.queues {
                    self.queues.entry(q.clone()).or_default().groups += 1;
                }
                self.profiles.insert(profile.clone(), group);
                let entry = Group {
                    profile,
                    members: 0,
                    ready: BTreeSet::new(),
                    credit: 0,
                };
                self.groups.insert(group, entry);
                group
            }
        };
        if let Some(g) = self.groups.get_mut(&group) {
            g.members += 1;
        }
        let member = Member {
            group,
            free: 0,
            stamp,
        };
        self.members.insert(id.clone(), member);
        self.set_free(&id, free);
    }

    /// Takes a worker off the roster (nothing when it is not on it).
    pub fn leave(&mut self, id: &K) {
        self.set_free(id, 0);
        let Some(member) = self.members.remove(id) else {
            return;
        };
        let Some(group) = self.groups.get_mut(&member.group) else {
            return;
        };
        group.members -= 1;
        if group.members > 0 {
            return;
        }
        let Some(group) = self.groups.remove(&member.group) else {
            return;
        };
        self.profiles.remove(&group.profile);
        for q in &group.profile.queues {
            if let Some(queue) = self.queues.get_mut(q) {
                queue.groups -= 1;
                if queue.groups == 0 {
                    self.queues.remove(q);
                }
            }
        }
    }

    /// Sets a worker's free credit. Less than before means it was given orders: it goes
    /// behind the workers of equal credit.
    pub fn set_free(&mut self, id: &K, free: usize) {
        let Some(member) = self.members.get_mut(id) else {
            return;
        };
        let old = member.free;
        if old == free {
            return;
        }
        let Some(group) = self.groups.get_mut(&member.group) else {
            return;
        };
        if old > 0 {
            group
                .ready
                .remove(&(Reverse(old), member.stamp, id.clone()));
        }
        if free < old {
            self.clock += 1;
            member.stamp = self.clock;
        }
        if free > 0 {
            group
                .ready
                .insert((Reverse(free), member.stamp, id.clone()));
        }
        member.free = free;
        let had = group.credit;
        group.credit = had - old + free;
        for q in &group.profile.queues {
            let Some(queue) = self.queues.get_mut(q) else {
                continue;
            };
            queue.credit = queue.credit - old + free;
            if had == 0 {
                queue.ready.insert(member.group);
            } else if group.credit == 0 {
                queue.ready.remove(&member.group);
            }
        }
    }

    /// The queues with free credit, by name, and the credit of each.
    pub fn queues_with_credit(&self) -> impl Iterator<Item = (&str, usize)> {
        self.queues
            .iter()
            .filter(|(_, q)| q.credit > 0)
            .map(|(name, q)| (name.as_str(), q.credit))
    }

    /// The kinds the workers with free credit in `queue` run, sorted, when each of them
    /// declared its kinds; `None` when one of them runs any kind.
    pub fn kinds_for(&self, queue: &str) -> Option<Vec<String>> {
        let mut kinds = BTreeSet::new();
        for group in self.ready_groups(queue) {
            kinds.extend(group.profile.kinds.as_ref()?.iter().map(String::as_str));
        }
        Some(kinds.into_iter().map(str::to_owned).collect())
    }

    /// The worker to give a job of `kind` in `queue`: of those with free credit that serve
    /// the queue and run the kind, the one with the most free credit, and of those the one
    /// whose last order is oldest.
    pub fn pick(&self, queue: &str, kind: &str) -> Option<&K> {
        self.ready_groups(queue)
            .filter(|group| group.profile.takes(kind))
            .filter_map(|group| group.ready.first())
            .min()
            .map(|(_, _, id)| id)
    }

    /// The groups serving `queue` that have free credit.
    fn ready_groups(&self, queue: &str) -> impl Iterator<Item = &Group<K>> {
        self.queues
            .get(queue)
            .into_iter()
            .flat_map(|q| q.ready.iter())
            .filter_map(|id| self.groups.get(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn kinds(list: &[&str]) -> HashSet<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn credit(roster: &Roster<u32>) -> Vec<(String, usize)> {
        roster
            .queues_with_credit()
            .map(|(q, c)| (q.to_owned(), c))
            .collect()
    }

    #[test]
    fn credit_is_summed_per_queue_and_follows_each_change() {
        let mut r = Roster::default();
        r.join(1, &names(&["a", "b"]), None, 2);
        r.join(2, &names(&["b"]), None, 3);
        assert_eq!(credit(&r), [("a".into(), 2), ("b".into(), 5)]);
        r.set_free(&1, 0);
        assert_eq!(credit(&r), [("b".into(), 3)]);
        r.set_free(&1, 1);
        r.set_free(&2, 4);
        assert_eq!(credit(&r), [("a".into(), 1), ("b".into(), 5)]);
        r.leave(&2);
        assert_eq!(credit(&r), [("a".into(), 1), ("b".into(), 1)]);
        r.leave(&1);
        assert!(credit(&r).is_empty());
        assert!(r.groups.is_empty() && r.profiles.is_empty() && r.queues.is_empty());
    }

    #[test]
    fn a_queue_named_twice_counts_a_worker_once() {
        let mut r = Roster::default();
        r.join(1, &names(&["a", "a"]), None, 2);
        assert_eq!(credit(&r), [("a".into(), 2)]);
    }

    #[test]
    fn the_most_free_goes_first_then_equals_take_turns() {
        let mut r = Roster::default();
        for id in 1..=3 {
            r.join(id, &names(&["q"]), None, 1);
        }
        r.join(4, &names(&["q"]), None, 3);
        assert_eq!(r.pick("q", "k"), Some(&4));
        r.set_free(&4, 1);
        // All at 1 now: those never given an order before the one just given one.
        let mut order = Vec::new();
        for _ in 0..4 {
            let id = *r.pick("q", "k").expect("a worker with credit");
            order.push(id);
            r.set_free(&id, 0);
        }
        assert_eq!(order, [1, 2, 3, 4]);
        assert_eq!(r.pick("q", "k"), None);
        // Freed again in another order, they are given orders oldest first.
        for id in [4, 2, 3, 1] {
            r.set_free(&id, 1);
        }
        let next = *r.pick("q", "k").expect("a worker with credit");
        assert_eq!(next, 1);
    }

    #[test]
    fn jobs_go_only_to_workers_of_their_queue_and_kind() {
        let mut r = Roster::default();
        r.join(1, &names(&["q"]), Some(&kinds(&["a"])), 1);
        r.join(2, &names(&["q"]), Some(&kinds(&["b"])), 5);
        r.join(3, &names(&["other"]), None, 9);
        assert_eq!(r.pick("q", "a"), Some(&1));
        assert_eq!(r.pick("q", "b"), Some(&2));
        assert_eq!(r.pick("q", "c"), None);
        assert_eq!(r.pick("nowhere", "a"), None);
        assert_eq!(r.pick("other", "c"), Some(&3));
        assert_eq!(r.kinds_for("q"), Some(names(&["a", "b"])));
        r.set_free(&2, 0);
        assert_eq!(r.kinds_for("q"), Some(names(&["a"])));
        // A worker of any kind with credit: every kind is claimed.
        r.join(4, &names(&["q"]), None, 1);
        assert_eq!(r.kinds_for("q"), None);
        assert_eq!(r.pick("q", "c"), Some(&4));
        // Without credit it no longer widens the claim.
        r.set_free(&4, 0);
        assert_eq!(r.kinds_for("q"), Some(names(&["a"])));
    }

    #[test]
    fn a_new_hello_moves_a_worker_to_its_new_queues() {
        let mut r = Roster::default();
        r.join(1, &names(&["a"]), None, 1);
        r.join(1, &names(&["b"]), Some(&kinds(&["k"])), 2);
        assert_eq!(credit(&r), [("b".into(), 2)]);
        assert_eq!(r.pick("a", "k"), None);
        assert_eq!(r.pick("b", "k"), Some(&1));
        assert_eq!(r.groups.len(), 1);
    }

    #[test]
    fn identical_workers_share_one_group() {
        let mut r = Roster::default();
        for id in 0..100 {
            r.join(id, &names(&["q", "p"]), Some(&kinds(&["x", "y"])), 1);
        }
        r.join(100, &names(&["p", "q"]), Some(&kinds(&["y", "x"])), 1);
        assert_eq!(r.groups.len(), 1);
        assert_eq!(credit(&r), [("p".into(), 101), ("q".into(), 101)]);
    }

    /// Against a plain recount over every worker, after each of many random changes.
    #[test]
    fn agrees_with_a_recount_after_random_changes() {
        struct Worker {
            queues: Vec<String>,
            kinds: Option<HashSet<String>>,
            free: usize,
        }
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            usize::try_from(seed % n).expect("small")
        };
        let queue_names = names(&["q0", "q1", "q2"]);
        let kind_names = ["a", "b", "c"];
        let mut r = Roster::default();
        let mut model: HashMap<u32, Worker> = HashMap::new();
        for _ in 0..5000 {
            let id = u32::try_from(next(40)).expect("small");
            match next(4) {
                0 => {
                    let queues = vec![queue_names[next(3)].clone(), queue_names[next(3)].clone()];
                    let declared = (next(3) > 0).then(|| kinds(&kind_names[..1 + next(3)]));
                    let free = next(4);
                    r.join(id, &queues, declared.as_ref(), free);
                    let kinds = declared;
                    model.insert(
                        id,
                        Worker {
                            queues,
                            kinds,
                            free,
                        },
                    );
                }
                1 => {
                    r.leave(&id);
                    model.remove(&id);
                }
                _ => {
                    let free = next(4);
                    r.set_free(&id, free);
                    if let Some(w) = model.get_mut(&id) {
                        w.free = free;
                    }
                }
            }
            for q in &queue_names {
                let serving: Vec<&Worker> = model
                    .values()
                    .filter(|w| w.free > 0 && w.queues.contains(q))
                    .collect();
                let expected: usize = serving.iter().map(|w| w.free).sum();
                let got = r
                    .queues_with_credit()
                    .find(|(name, _)| name == q)
                    .map_or(0, |(_, c)| c);
                assert_eq!(got, expected, "credit of {q}");
                let expected_kinds = serving
                    .iter()
                    .map(|w| w.kinds.as_ref().map(|k| k.iter().cloned()))
                    .try_fold(BTreeSet::new(), |mut all, k| {
                        all.extend(k?);
                        Some(all)
                    })
                    .map(|all| all.into_iter().collect::<Vec<_>>());
                assert_eq!(r.kinds_for(q), expected_kinds, "kinds of {q}");
                for kind in kind_names {
                    let best = serving
                        .iter()
                        .filter(|w| w.kinds.as_ref().is_none_or(|k| k.contains(kind)))
                        .map(|w| w.free)
                        .max();
                    let picked = r.pick(q, kind).map(|id| model[id].free);
                    assert_eq!(picked, best, "pick in {q} for {kind}");
                }
            }
        }
    }
}
