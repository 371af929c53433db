//! The fair claim's ring, cached per process: for each grouped queue, the groups that had
//! ready jobs when it was last loaded (`queue_groups_ready.sql`), and the rotation cursor
//! (the group this process served last).
//!
//! Walking the groups in the database on every claim cost more than the claim itself (a
//! loose index scan: two index probes per group, each stepping over the dead entries at a
//! group's head), so the claim takes its groups from here and the walk runs a few times a
//! second instead. A stale ring costs nothing but fairness for a moment: a group missing
//! from it is served at the next load (within [`MAX_AGE`] while the others keep the
//! workers busy; at once when a claim from the cached groups comes back empty), and a
//! group in it that has no ready jobs left costs one index probe that finds nothing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

/// A ring older than this is reloaded with the next claim (pipelined with it).
pub const MAX_AGE: Duration = Duration::from_millis(100);

/// Most groups a ring holds: the next ones after the cursor, in key order. With more groups
/// than this, the others come in as the cursor moves on (each load starts after it).
pub const CAP: i32 = 1024;

#[derive(Debug)]
struct Ring {
    /// Groups with ready jobs at the last load, in key order.
    groups: Vec<String>,
    /// The ungrouped stragglers the last load saw at the head of the queue.
    stray: Vec<Uuid>,
    loaded_at: Option<Instant>,
    /// The group served last by this process.
    cursor: Option<String>,
}

/// What a claim should do, from the cached ring of its queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Turns {
    /// The groups to serve, in turn order: the ring rotated to start after the cursor.
    pub groups: Vec<String>,
    /// Ungrouped stragglers to claim first (seen at the last load; some may be gone).
    pub stray: Vec<Uuid>,
    /// The ring is older than [`MAX_AGE`] (or marked stale): reload it with this claim.
    pub stale: bool,
    /// Nothing is cached, or the cache says nothing is ready: load before claiming.
    pub unknown: bool,
}

/// The rings of every grouped queue this process claims from.
#[derive(Debug, Default)]
pub struct Rings {
    rings: Mutex<HashMap<String, Ring>>,
}

impl Rings {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Ring>> {
        self.rings.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cursor of `queue`: where the next load starts.
    pub fn cursor(&self, queue: &str) -> Option<String> {
        self.lock().get(queue).and_then(|r| r.cursor.clone())
    }

    /// The groups a claim of `queue` serves, at most `take` of them, in turn order.
    pub fn turns(&self, queue: &str, take: usize) -> Turns {
        let rings = self.lock();
        let Some(ring) = rings.get(queue) else {
            return Turns {
                groups: Vec::new(),
                stray: Vec::new(),
                stale: true,
                unknown: true,
            };
        };
        let start = ring.cursor.as_deref().map_or(0, |cursor| {
            ring.groups.partition_point(|g| g.as_str() <= cursor)
        });
        let groups = ring.groups[start..]
            .iter()
            .chain(&ring.groups[..start])
            .take(take)
            .cloned()
            .collect();
        Turns {
            groups,
            stray: ring.stray.clone(),
            stale: ring.loaded_at.is_none_or(|at| at.elapsed() >= MAX_AGE),
            unknown: ring.groups.is_empty() && ring.stray.is_empty(),
        }
    }

    /// Stores a loaded ring (`groups` in any order).
    pub fn store(&self, queue: &str, mut groups: Vec<String>, stray: Vec<Uuid>) {
        groups.sort_unstable();
        let mut rings = self.lock();
        let ring = rings.entry(queue.to_owned()).or_insert_with(|| Ring {
            groups: Vec::new(),
            stray: Vec::new(),
            loaded_at: None,
            cursor: None,
        });
        ring.groups = groups;
        ring.stray = stray;
        ring.loaded_at = Some(Instant::now());
    }

    /// Reloads the ring of `queue` with its next claim.
    pub fn mark_stale(&self, queue: &str) {
        if let Some(ring) = self.lock().get_mut(queue) {
            ring.loaded_at = None;
        }
    }

    /// Moves the cursor of `queue` to `group` (the last group a claim picked).
    pub fn set_cursor(&self, queue: &str, group: String) {
        if let Some(ring) = self.lock().get_mut(queue) {
            ring.cursor = Some(group);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn turns_start_after_the_cursor_and_wrap() {
        let rings = Rings::default();
        let unknown = rings.turns("q", 10);
        assert!(unknown.unknown && unknown.stale);
        rings.store("q", names(&["c", "a", "", "b"]), Vec::new());
        let t = rings.turns("q", 10);
        assert_eq!(t.groups, names(&["", "a", "b", "c"]));
        assert!(!t.unknown && !t.stale);
        rings.set_cursor("q", "a".into());
        assert_eq!(rings.turns("q", 10).groups, names(&["b", "c", "", "a"]));
        assert_eq!(rings.turns("q", 2).groups, names(&["b", "c"]));
        // A cursor on a group that is gone: the next one after it in key order.
        rings.set_cursor("q", "bb".into());
        assert_eq!(rings.turns("q", 10).groups, names(&["c", "", "a", "b"]));
        rings.mark_stale("q");
        assert!(rings.turns("q", 10).stale);
        rings.store("q", Vec::new(), Vec::new());
        assert!(rings.turns("q", 10).unknown);
        let stray = Uuid::now_v7();
        rings.store("q", Vec::new(), vec![stray]);
        let strays_only = rings.turns("q", 10);
        assert!(!strays_only.unknown && strays_only.stray == [stray]);
    }
}
