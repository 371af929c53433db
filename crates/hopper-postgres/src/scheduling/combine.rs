//! One claim at a time per limited queue and process: concurrent claims are combined.
//!
//! A limited queue's claims take turns on its settings row (`queue_lock.sql`) across every
//! node, and the lock is held until the claim's commit has been flushed. A runtime with
//! several claims in flight would have them queue behind each other there, each paying
//! its own lock wait and WAL flush for a share of the jobs. Instead, the first claim of a
//! process leads: it claims alone, and the claims that arrive meanwhile wait here; when it
//! is done, the next leader claims what all of them asked for at once (one lock, one
//! commit) and hands each its share, in arrival order. The limits are untouched: the
//! combined claim runs the same statements under the same lock, within the same allowance.
//!
//! Only claims of the same queue, node, lease and kinds combine. A leader that fails hands the
//! others nothing: they claim again themselves. A leader dropped mid-claim (its caller
//! gave up) passes the turn on; its followers start over.
//!
//! A leader may pass the turn on before it is done ([`Handoff::pass`]): the limited claim
//! does once its transaction has committed (and released the settings row), while it waits
//! for that commit to be flushed. Combining only saves locks and commits; the limits are
//! kept by the settings row, so two claims of one process under way at once are as safe as
//! two processes'.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper_core::{ClaimParams, ClaimedJob, NodeId, Result};
use tokio::sync::oneshot;

/// Which claims may be combined: same queue, node, lease and kinds (a combined claim runs
/// with one kinds filter, and each share must hold only kinds its claimer asked for).
type Key = (String, NodeId, Duration, Option<Vec<String>>);

/// A claim waiting for the current leader to finish.
struct Waiter {
    want: u32,
    reply: oneshot::Sender<Reply>,
}

/// What a waiting claim is told.
enum Reply {
    /// Its share of a combined claim.
    Jobs(Vec<ClaimedJob>),
    /// Lead the next claim, for itself and these.
    Lead(Vec<Waiter>),
    /// The combined claim failed: claim alone.
    Alone,
}

#[derive(Default)]
struct Turn {
    /// A claim of this key is under way.
    busy: bool,
    waiting: Vec<Waiter>,
}

/// See the module docs.
#[derive(Default)]
pub(crate) struct Combiner {
    turns: Arc<Mutex<HashMap<Key, Turn>>>,
}

impl std::fmt::Debug for Combiner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Combiner").finish_non_exhaustive()
    }
}

/// Held by the leader: when it goes (done, dropped or passed on), the next waiter leads.
struct Leading {
    turns: Arc<Mutex<HashMap<Key, Turn>>>,
    key: Key,
}

impl Drop for Leading {
    fn drop(&mut self) {
        let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
        let Some(turn) = turns.get_mut(&self.key) else {
            return;
        };
        let mut waiting = std::mem::take(&mut turn.waiting).into_iter();
        // The first waiter still listening leads the others.
        while let Some(next) = waiting.next() {
            match next.reply.send(Reply::Lead(waiting.collect())) {
                Ok(()) => return,
                Err(Reply::Lead(rest)) => waiting = rest.into_iter(),
                Err(_) => return,
            }
        }
        turns.remove(&self.key);
    }
}

/// The leader's turn, handed to its claim: [`Handoff::pass`] lets the next claim start
/// before this one is done. Passed at the latest when the leader finishes.
#[derive(Clone, Default)]
pub(crate) struct Handoff(Arc<Mutex<Option<Leading>>>);

impl Handoff {
    /// Lets the next waiting claim lead now. Later calls do nothing.
    pub(crate) fn pass(&self) {
        let leading = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(leading);
    }
}

impl Combiner {
    /// Claims `params.limit` jobs with `claim`, combined with this process's concurrent
    /// claims of the same queue (see the module docs). `release` hands back jobs whose
    /// claimer gave up while waiting.
    pub(crate) async fn claim<C, F, R, G>(
        &self,
        params: &ClaimParams,
        claim: C,
        release: R,
    ) -> Result<Vec<ClaimedJob>>
    where
        C: Fn(u32, Handoff) -> F,
        F: Future<Output = Result<Vec<ClaimedJob>>>,
        R: FnOnce(Vec<ClaimedJob>) -> G,
        G: Future<Output = ()>,
    {
        let key: Key = (
            params.queue.clone(),
            params.node,
            params.lease,
            params.kinds.clone(),
        );
        let followers = loop {
            let rx = {
                let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
                let turn = turns.entry(key.clone()).or_default();
                if !turn.busy {
                    turn.busy = true;
                    break Vec::new();
                }
                let (reply, rx) = oneshot::channel();
                turn.waiting.push(Waiter {
                    want: params.limit,
                    reply,
                });
                rx
            };
            match rx.await {
                Ok(Reply::Jobs(jobs)) => return Ok(jobs),
                Ok(Reply::Lead(followers)) => break followers,
                Ok(Reply::Alone) => return claim(params.limit, Handoff::default()).await,
                // The leader was dropped before answering: start over.
                Err(_) => continue,
            }
        };
        let handoff = Handoff(Arc::new(Mutex::new(Some(Leading {
            turns: self.turns.clone(),
            key,
        }))));
        let total = followers
            .iter()
            .fold(params.limit, |sum, w| sum.saturating_add(w.want));
        let claimed = claim(total, handoff.clone()).await;
        handoff.pass();
        let mut jobs = match claimed {
            Ok(jobs) => jobs.into_iter(),
            Err(e) => {
                for w in followers {
                    let _ = w.reply.send(Reply::Alone);
                }
                return Err(e);
            }
        };
        let mine: Vec<ClaimedJob> = jobs.by_ref().take(params.limit as usize).collect();
        let mut orphans = Vec::new();
        for w in followers {
            let share: Vec<ClaimedJob> = jobs.by_ref().take(w.want as usize).collect();
            if let Err(Reply::Jobs(share)) = w.reply.send(Reply::Jobs(share)) {
                orphans.extend(share);
            }
        }
        orphans.extend(jobs);
        if !orphans.is_empty() {
            release(orphans).await;
        }
        Ok(mine)
    }
}
