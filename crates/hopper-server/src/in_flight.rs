//! The bounds on the database requests of peers in flight: one for the whole server, so a
//! flood cannot pile up tasks without end, and one per peer, so that a peer sending faster
//! than the database answers is refused ("busy") while the other peers are still served.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::server::PeerId;

/// Database requests of all peers in flight at once; more get `internal` ("busy").
pub(crate) const MAX_REQUESTS_IN_FLIGHT: usize = 1024;

/// Database requests of one peer in flight at once; more get `internal` ("busy") while
/// other peers are served. A worker has one `log` request in flight per attempt it runs,
/// plus the `extend`s and submits of its handlers: 128 leaves room for a worker running
/// 100 attempts at once that all log, and past that its extra requests are only retried a
/// little later. More would not store faster: the server's pool is a few connections, so
/// 128 requests of one peer already wait on each other. An eighth of the server's bound, so
/// one peer, or seven, cannot take all of it.
pub(crate) const MAX_REQUESTS_PER_PEER: usize = 128;

/// The error of a request refused because [`MAX_REQUESTS_IN_FLIGHT`] are in flight.
pub(crate) const BUSY: &str = "the server is busy (too many requests in flight); retry later";

/// The error of a request refused because its peer has [`MAX_REQUESTS_PER_PEER`] in flight.
const PEER_BUSY: &str = "this peer has too many requests in flight; retry later";

/// The requests in flight per peer; a peer with none has no entry.
type Counts = Arc<Mutex<HashMap<PeerId, usize>>>;

/// Hands out a [`Permit`] per request in flight, within both bounds.
#[derive(Debug)]
pub(crate) struct InFlight {
    all: Arc<Semaphore>,
    per_peer: Counts,
    per_peer_max: usize,
}

/// One request's place in flight, counted against the server and its peer until dropped
/// (when the request is answered, whether or not its peer is still connected).
#[derive(Debug)]
pub(crate) struct Permit {
    _all: OwnedSemaphorePermit,
    peer: PeerId,
    per_peer: Counts,
}

impl InFlight {
    /// At most `all` requests in flight, at most `per_peer` of them of one peer.
    pub fn new(all: usize, per_peer: usize) -> Self {
        Self {
            all: Arc::new(Semaphore::new(all)),
            per_peer: Arc::default(),
            per_peer_max: per_peer,
        }
    }

    /// A place for a request of `peer`, or the busy error to answer it with.
    pub fn try_acquire(&self, peer: &PeerId) -> Result<Permit, &'static str> {
        let all = self.all.clone().try_acquire_owned().map_err(|_| BUSY)?;
        let mut counts = lock(&self.per_peer);
        let count = counts.entry(peer.clone()).or_default();
        if *count >= self.per_peer_max {
            return Err(PEER_BUSY);
        }
        *count += 1;
        Ok(Permit {
            _all: all,
            peer: peer.clone(),
            per_peer: self.per_peer.clone(),
        })
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut counts = lock(&self.per_peer);
        if let Some(count) = counts.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.peer);
            }
        }
    }
}

/// The counts, also after a panic elsewhere while they were held (each change is one step,
/// never left half done).
fn lock(counts: &Counts) -> std::sync::MutexGuard<'_, HashMap<PeerId, usize>> {
    counts.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(name: &'static str) -> PeerId {
        PeerId::from_static(name.as_bytes())
    }

    #[test]
    fn a_peer_at_its_bound_is_refused_while_others_are_served() {
        let in_flight = InFlight::new(10, 3);
        let held: Vec<Permit> = (0..3)
            .map(|_| in_flight.try_acquire(&peer("a")).expect("within a's bound"))
            .collect();
        assert_eq!(in_flight.try_acquire(&peer("a")).err(), Some(PEER_BUSY));
        assert!(in_flight.try_acquire(&peer("b")).is_ok());
        drop(held);
        assert!(in_flight.try_acquire(&peer("a")).is_ok());
    }

    #[test]
    fn the_server_bound_holds_across_peers() {
        let in_flight = InFlight::new(4, 3);
        let names = ["a", "b", "c", "d"];
        let _held: Vec<Permit> = names
            .iter()
            .map(|n| in_flight.try_acquire(&peer(n)).expect("within the bounds"))
            .collect();
        assert_eq!(in_flight.try_acquire(&peer("e")).err(), Some(BUSY));
        assert_eq!(lock(&in_flight.per_peer).len(), 4);
    }

    #[test]
    fn counts_go_when_the_last_request_of_a_peer_ends() {
        let in_flight = InFlight::new(4, 3);
        let first = in_flight.try_acquire(&peer("a")).expect("a place");
        let second = in_flight.try_acquire(&peer("a")).expect("a place");
        drop(first);
        assert_eq!(lock(&in_flight.per_peer).get(&peer("a")), Some(&1));
        drop(second);
        assert!(lock(&in_flight.per_peer).is_empty(), "no entry left behind");
        assert_eq!(in_flight.all.available_permits(), 4);
    }
}
