//! The bounds on the database requests of peers in flight: one for the whole server, so a
//! flood cannot pile up tasks without end, and one per peer, so that a peer sending faster
//! than the database answers is refused ("busy") while the other peers are still served.
//! Within its places in flight, a peer's requests also take turns: at most
//! [`executing_per_peer`] of them execute (hold or wait for a pool connection) at once, the
//! others wait in its line, so requests of one peer stuck behind a lock cannot take the
//! whole pool from the other peers and from the server's claims and outcome batches. And
//! the requests of all peers together execute on at most [`executing_for_peers`]
//! connections, so a crowd of stuck peers still leaves the server's own work its part.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

use crate::server::PeerId;

/// Database requests of all peers in flight at once; more get `internal` ("busy").
pub(crate) const MAX_REQUESTS_IN_FLIGHT: usize = 1024;

/// Database requests of one peer in flight at once; more get `internal` ("busy") while
/// other peers are served. A worker has one `log` request in flight per attempt it runs,
/// plus the `extend`s and submits of its handlers: 128 leaves room for a worker running
/// 100 attempts at once that all log, and past that its extra requests are only retried a
/// little later. More would not store faster: the server's pool is a few connections, so
/// 128 requests of one peer already wait on each other (in its line, [`executing_per_peer`]).
/// An eighth of the server's bound, so one peer, or seven, cannot take all of it.
pub(crate) const MAX_REQUESTS_PER_PEER: usize = 128;

/// How many of one peer's requests execute at once with a pool of `pool_size` connections:
/// a quarter of the pool, at least one. The rest of its requests in flight wait in its line,
/// in the order they came. A quarter lets one peer use a few connections at once (two at the
/// default pool of 8, so its read need not wait behind its slow submit), while three peers
/// whose requests all wait on a lock a user's transaction holds still leave a quarter of the
/// pool to the other peers and to the server's own work (one claim at a time, the outcome
/// and log writers), which does not go through these bounds. Under 8 connections a peer
/// executes one request at a time. Against a crowd of stuck peers, see
/// [`executing_for_peers`].
pub(crate) fn executing_per_peer(pool_size: usize) -> usize {
    (pool_size / 4).max(1)
}

/// How many requests of all peers together execute at once with a pool of `pool_size`
/// connections: all but a quarter of the pool (at least one kept back when there are two
/// or more). What is kept back is for the server's own work, one claim at a time and the
/// outcome and log writers, so that claims and outcomes go on however many peers' requests
/// wait on locks; peers' requests past it wait for a connection in the order they asked.
/// 6 of the default 8.
pub(crate) fn executing_for_peers(pool_size: usize) -> usize {
    if pool_size <= 1 {
        return 1;
    }
    pool_size - (pool_size / 4).max(1)
}

/// The error of a request refused because [`MAX_REQUESTS_IN_FLIGHT`] are in flight.
pub(crate) const BUSY: &str = "the server is busy (too many requests in flight); retry later";

/// The error of a request refused because its peer has [`MAX_REQUESTS_PER_PEER`] in flight.
const PEER_BUSY: &str = "this peer has too many requests in flight; retry later";

/// One peer's share: its requests in flight, and the line in which they take turns to
/// execute (closed when its session ends, so that those still waiting are not run).
#[derive(Debug)]
struct Share {
    in_flight: usize,
    turns: Arc<Semaphore>,
}

/// The shares of the peers with requests in flight; a peer with none has no entry.
type Shares = Arc<Mutex<HashMap<PeerId, Share>>>;

/// Hands out a [`Permit`] per request in flight, within both bounds, and a turn to execute
/// within the peer's ([`InFlight::try_queue`]).
#[derive(Debug)]
pub(crate) struct InFlight {
    all: Arc<Semaphore>,
    shares: Shares,
    per_peer_max: usize,
    executing_max: usize,
    /// The turns to execute of all peers' requests together.
    executing: Arc<Semaphore>,
}

/// One request's place in flight, counted against the server and its peer until dropped
/// (when the request is answered, whether or not its peer is still connected).
#[derive(Debug)]
pub(crate) struct Permit {
    _all: OwnedSemaphorePermit,
    peer: PeerId,
    shares: Shares,
}

/// A request in its peer's line: its place in flight, and its turn to execute, taken or
/// waited for ([`Queued::turn`]).
pub(crate) struct Queued {
    permit: Permit,
    turn: Turn,
    /// The turns to execute of all peers' requests together.
    executing: Arc<Semaphore>,
}

/// A waiting turn: the future of the line's semaphore, boxed so that it can be polled once
/// where the request arrives (which puts it in line) and then moved into its task.
type Waiting = Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>;

/// A request's turn to execute.
enum Turn {
    /// Taken (`None`: the peer's line closed before its turn came).
    Ready(Option<OwnedSemaphorePermit>),
    /// In line.
    Waiting(Waiting),
}

/// A request that executes: its place in flight, its turn in its peer's line (none when it
/// runs after its peer's session ended, [`Queued::turn_kept`]) and among all peers'
/// requests, all given back when dropped.
pub(crate) struct Running {
    _permit: Permit,
    _turn: Option<OwnedSemaphorePermit>,
    _executing: Option<OwnedSemaphorePermit>,
}

impl InFlight {
    /// At most `all` requests in flight, at most `per_peer` of them of one peer, of which at
    /// most `executing` execute at once; at most `executing_all` of all peers' execute at
    /// once.
    pub fn new(all: usize, per_peer: usize, executing: usize, executing_all: usize) -> Self {
        Self {
            all: Arc::new(Semaphore::new(all)),
            shares: Arc::default(),
            per_peer_max: per_peer,
            executing_max: executing.max(1),
            executing: Arc::new(Semaphore::new(executing_all.max(1))),
        }
    }

    /// A place for a request of `peer` that needs no turn (a `log`, which the log writer
    /// stores with its one connection), or the busy error to answer it with.
    pub fn try_acquire(&self, peer: &PeerId) -> Result<Permit, &'static str> {
        self.admit(peer).map(|(permit, _)| permit)
    }

    /// A place for a request of `peer` that executes on its own connection, in line behind
    /// the peer's earlier ones (those that are still waiting come first), or the busy error
    /// to answer it with.
    pub fn try_queue(&self, peer: &PeerId) -> Result<Queued, &'static str> {
        let (permit, turns) = self.admit(peer)?;
        let turn = match turns.clone().try_acquire_owned() {
            Ok(turn) => Turn::Ready(Some(turn)),
            Err(_) => {
                // Polled once here rather than in the request's task, so that the request
                // takes its place in line now: tasks do not start in the order spawned.
                let mut waiting: Waiting = Box::pin(turns.acquire_owned());
                match waiting
                    .as_mut()
                    .poll(&mut Context::from_waker(Waker::noop()))
                {
                    Poll::Ready(turn) => Turn::Ready(turn.ok()),
                    Poll::Pending => Turn::Waiting(waiting),
                }
            }
        };
        Ok(Queued {
            permit,
            turn,
            executing: self.executing.clone(),
        })
    }

    /// Ends `peer`'s line: its requests still waiting for their turn give back their places
    /// without being run (the peer's session ended: there is nobody to answer); those that
    /// execute go on. A new session of the same routing id gets a new line.
    pub fn close_line(&self, peer: &PeerId) {
        if let Some(share) = lock(&self.shares).get(peer) {
            share.turns.close();
        }
    }

    /// A place in flight for `peer` and its line.
    fn admit(&self, peer: &PeerId) -> Result<(Permit, Arc<Semaphore>), &'static str> {
        let all = self.all.clone().try_acquire_owned().map_err(|_| BUSY)?;
        let mut shares = lock(&self.shares);
        let share = shares.entry(peer.clone()).or_insert_with(|| Share {
            in_flight: 0,
            turns: Arc::new(Semaphore::new(self.executing_max)),
        });
        if share.in_flight >= self.per_peer_max {
            return Err(PEER_BUSY);
        }
        if share.turns.is_closed() {
            share.turns = Arc::new(Semaphore::new(self.executing_max));
        }
        share.in_flight += 1;
        let permit = Permit {
            _all: all,
            peer: peer.clone(),
            shares: self.shares.clone(),
        };
        Ok((permit, share.turns.clone()))
    }
}

impl Queued {
    /// Waits for the request's turn in its peer's line, then among all peers' requests;
    /// `None` when its peer's line was closed first (the request is then not to be run,
    /// and its place in flight goes with `self`).
    pub async fn turn(self) -> Option<Running> {
        let turn = match self.turn {
            Turn::Ready(turn) => turn,
            Turn::Waiting(waiting) => waiting.await.ok(),
        }?;
        // Never closed: an error cannot come, and would only mean "do not run".
        let executing = self.executing.acquire_owned().await.ok()?;
        // The peer's session may have ended while the request waited for a connection.
        if turn.semaphore().is_closed() {
            return None;
        }
        Some(Running {
            _permit: self.permit,
            _turn: Some(turn),
            _executing: Some(executing),
        })
    }

    /// As [`Queued::turn`], but run all the same when its peer's session ends first: for
    /// work that must not be lost with its peer (the lookup of the outcomes and log lines
    /// it sent before it went). Once its peer's line is closed it waits only for a
    /// connection among all peers' requests.
    pub async fn turn_kept(self) -> Running {
        let turn = match self.turn {
            Turn::Ready(turn) => turn,
            Turn::Waiting(waiting) => waiting.await.ok(),
        };
        // Never closed, so never `None`; were it ever, the request still runs.
        let executing = self.executing.acquire_owned().await.ok();
        Running {
            _permit: self.permit,
            _turn: turn,
            _executing: executing,
        }
    }
}

impl Running {
    /// Gives back the turn and the connection's, keeping the place in flight: for a request
    /// whose work goes on without a connection of its own (outcomes checked, then handed to
    /// the batching writer).
    pub fn into_place(self) -> Permit {
        self._permit
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut shares = lock(&self.shares);
        if let Some(share) = shares.get_mut(&self.peer) {
            share.in_flight -= 1;
            if share.in_flight == 0 {
                shares.remove(&self.peer);
            }
        }
    }
}

/// The shares, also after a panic elsewhere while they were held (each change is one step,
/// never left half done).
fn lock(shares: &Shares) -> std::sync::MutexGuard<'_, HashMap<PeerId, Share>> {
    shares.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;
    use tokio::sync::mpsc;

    use super::*;

    fn peer(name: &'static str) -> PeerId {
        PeerId::from_static(name.as_bytes())
    }

    /// The request's turn if it has come, without waiting.
    fn now(queued: Queued) -> Option<Running> {
        queued.turn().now_or_never().flatten()
    }

    /// Requests of `who` in flight.
    fn in_flight_of(in_flight: &InFlight, who: &'static str) -> Option<usize> {
        lock(&in_flight.shares).get(&peer(who)).map(|s| s.in_flight)
    }

    #[test]
    fn a_peer_at_its_bound_is_refused_while_others_are_served() {
        let in_flight = InFlight::new(10, 3, 1, 10);
        let held: Vec<Permit> = (0..3)
            .map(|_| in_flight.try_acquire(&peer("a")).expect("within a's bound"))
            .collect();
        assert_eq!(in_flight.try_acquire(&peer("a")).err(), Some(PEER_BUSY));
        assert_eq!(in_flight.try_queue(&peer("a")).err(), Some(PEER_BUSY));
        assert!(in_flight.try_acquire(&peer("b")).is_ok());
        drop(held);
        assert!(in_flight.try_acquire(&peer("a")).is_ok());
    }

    #[test]
    fn the_server_bound_holds_across_peers() {
        let in_flight = InFlight::new(4, 3, 1, 10);
        let names = ["a", "b", "c", "d"];
        let _held: Vec<Permit> = names
            .iter()
            .map(|n| in_flight.try_acquire(&peer(n)).expect("within the bounds"))
            .collect();
        assert_eq!(in_flight.try_acquire(&peer("e")).err(), Some(BUSY));
        assert_eq!(lock(&in_flight.shares).len(), 4);
    }

    #[test]
    fn counts_go_when_the_last_request_of_a_peer_ends() {
        let in_flight = InFlight::new(4, 3, 1, 10);
        let first = in_flight.try_acquire(&peer("a")).expect("a place");
        let second = in_flight.try_queue(&peer("a")).expect("a place");
        drop(first);
        assert_eq!(in_flight_of(&in_flight, "a"), Some(1));
        drop(now(second).expect("its turn"));
        assert!(lock(&in_flight.shares).is_empty(), "no entry left behind");
        assert_eq!(in_flight.all.available_permits(), 4);
    }

    #[test]
    fn a_peer_executes_its_share_while_others_execute_theirs() {
        let in_flight = InFlight::new(10, 5, 2, 10);
        let queue = |who| in_flight.try_queue(&peer(who)).expect("a place");
        let running: Vec<Running> = (0..2)
            .map(|_| now(queue("a")).expect("within a's turns"))
            .collect();
        assert!(now(queue("a")).is_none(), "a third waits");
        // A `log` is stored by the log writer: it takes a place in flight, not a turn.
        let log = in_flight.try_acquire(&peer("b")).expect("a place");
        let b = now(queue("b")).expect("b's turn comes at once");
        drop((running, log, b));
        assert!(lock(&in_flight.shares).is_empty(), "no entry left behind");
    }

    #[tokio::test]
    async fn waiting_requests_take_their_turns_in_the_order_they_came() {
        let in_flight = InFlight::new(10, 5, 1, 10);
        let first = now(in_flight.try_queue(&peer("a")).expect("a place")).expect("a turn");
        let waiting: Vec<Queued> = (0..4)
            .map(|_| in_flight.try_queue(&peer("a")).expect("a place"))
            .collect();
        // Their tasks start last first: the order is the one they came in all the same.
        let (done, mut order) = mpsc::unbounded_channel();
        for (i, queued) in waiting.into_iter().enumerate().rev() {
            let done = done.clone();
            tokio::spawn(async move {
                let running = queued.turn().await;
                let _ = done.send((i, running.is_some()));
            });
        }
        drop(done);
        tokio::task::yield_now().await;
        assert!(order.try_recv().is_err(), "none runs before the first ends");
        drop(first);
        let mut came = Vec::new();
        while let Some(turn) = order.recv().await {
            came.push(turn);
        }
        assert_eq!(came, [(0, true), (1, true), (2, true), (3, true)]);
        assert!(lock(&in_flight.shares).is_empty(), "no entry left behind");
    }

    #[tokio::test]
    async fn a_closed_line_gives_back_the_places_of_those_waiting() {
        let in_flight = InFlight::new(10, 5, 1, 10);
        let running = now(in_flight.try_queue(&peer("a")).expect("a place")).expect("a turn");
        let waiting = in_flight.try_queue(&peer("a")).expect("a place");
        let task = tokio::spawn(waiting.turn());
        tokio::task::yield_now().await;
        in_flight.close_line(&peer("a"));
        let turn = task.await.expect("the waiting task");
        assert!(turn.is_none(), "not run once its peer's session ended");
        assert_eq!(
            in_flight_of(&in_flight, "a"),
            Some(1),
            "only the running one"
        );
        // The same routing id in a new session has a new line, at once.
        let again = in_flight.try_queue(&peer("a")).expect("a place");
        let again = now(again).expect("a turn in the new line");
        drop((running, again));
        assert!(lock(&in_flight.shares).is_empty(), "no entry left behind");
        assert_eq!(in_flight.all.available_permits(), 10);
    }

    #[tokio::test]
    async fn a_kept_request_runs_after_its_line_closed() {
        let in_flight = InFlight::new(10, 5, 1, 10);
        let running = now(in_flight.try_queue(&peer("a")).expect("a place")).expect("a turn");
        let kept = in_flight.try_queue(&peer("a")).expect("a place");
        let task = tokio::spawn(kept.turn_kept());
        tokio::task::yield_now().await;
        assert!(
            !task.is_finished(),
            "it waits its turn while the line is open"
        );
        in_flight.close_line(&peer("a"));
        let kept = task.await.expect("the waiting task");
        assert_eq!(
            in_flight_of(&in_flight, "a"),
            Some(2),
            "both still in flight"
        );
        assert_eq!(in_flight.executing.available_permits(), 8, "both execute");
        drop((running, kept));
        assert!(lock(&in_flight.shares).is_empty(), "no entry left behind");
        assert_eq!(in_flight.all.available_permits(), 10);
    }

    #[test]
    fn all_peers_together_execute_within_their_part_of_the_pool() {
        let in_flight = InFlight::new(10, 5, 2, 3);
        let queue = |who| in_flight.try_queue(&peer(who)).expect("a place");
        let a: Vec<Running> = (0..2)
            .map(|_| now(queue("a")).expect("within a's turns"))
            .collect();
        let b = now(queue("b")).expect("the third connection for peers");
        assert!(
            now(queue("c")).is_none(),
            "c has a turn in its line but no connection is left for peers"
        );
        drop(a);
        let c = now(queue("c")).expect("a connection again");
        drop((b, c));
        assert!(lock(&in_flight.shares).is_empty(), "no entry left behind");
        assert_eq!(in_flight.executing.available_permits(), 3);
    }

    #[test]
    fn all_but_a_quarter_of_the_pool_executes_for_peers() {
        let parts: Vec<usize> = [1, 2, 3, 4, 8, 16]
            .into_iter()
            .map(executing_for_peers)
            .collect();
        assert_eq!(parts, [1, 1, 2, 3, 6, 12]);
    }

    #[test]
    fn a_quarter_of_the_pool_executes_for_one_peer() {
        let shares: Vec<usize> = [1, 3, 4, 7, 8, 16, 256]
            .into_iter()
            .map(executing_per_peer)
            .collect();
        assert_eq!(shares, [1, 1, 1, 1, 2, 4, 64]);
    }
}
