//! The log writer of `hopper serve`: stores the lines of `log` requests in batches (one
//! statement for what waited while the last one ran), and keeps one worker's refused lines
//! from costing another's.
//!
//! A store that fails for a transient reason is not retried here: its requests are answered
//! at once with a transient `internal` error, and the workers send them again (with
//! backoff, within a few seconds, the attempt's later lines held back meanwhile so the
//! order holds). Retrying here would hold the requests' in-flight permits, shared with
//! every other request of the server, for as long as the database is away, and the one
//! writer with them.

use std::sync::Arc;

use hopper_core::Error;
use hopper_core::backend::Backend;
use hopper_core::job_log::{JobLogAppend, LogStore, held_elsewhere};
use hopper_protocol::{FinishResult as WireResult, Reply};
use tokio::sync::mpsc;

use crate::in_flight::Permit;
use crate::server::PeerId;

/// A `log` request waiting to be stored.
pub(crate) struct LogItem {
    /// Who sent it.
    pub peer: PeerId,
    /// Its request number, for the acknowledgement.
    pub req: u64,
    /// Its lines.
    pub append: JobLogAppend,
    /// Its place among the requests in flight (the server's and its peer's), given back
    /// once it is acknowledged: what bounds the log writer's queue.
    pub permit: Permit,
}

/// Most `log` requests stored by one statement (each at most 64 KiB of lines).
const LOG_BATCH: usize = 256;

/// Stores `log` requests: takes what waits (at most [`LOG_BATCH`]), stores it with one
/// `job_log_append` call, whose one statement writes each attempt's row once however many
/// requests carried its lines, then acknowledges each request, or answers it with its
/// error ([`store_isolating`]); a request whose attempt's job row or log row another
/// transaction holds is answered as transient rather than waited for
/// (`LogStore::job_log_append_shared`), so that one held row does not stall every
/// worker's logs. One writer, taking requests in the order they came, so an
/// attempt's lines are stored in the order they were sent. The channel is shared so that a
/// run restarted by its supervisor takes it over.
pub(crate) async fn store_logs(
    backend: Arc<dyn Backend>,
    items: Arc<tokio::sync::Mutex<mpsc::Receiver<LogItem>>>,
    out: mpsc::Sender<(PeerId, Reply)>,
) {
    let mut items = items.lock().await;
    let mut batch = Vec::with_capacity(LOG_BATCH);
    while items.recv_many(&mut batch, LOG_BATCH).await > 0 {
        let (appends, waiting): (Vec<JobLogAppend>, Vec<_>) = batch
            .drain(..)
            .map(|i| (i.append, (i.peer, i.req, i.permit)))
            .unzip();
        let stored = match backend.logs() {
            Some(store) => store_isolating(store, &appends).await,
            None => vec![Ok(()); appends.len()],
        };
        for ((peer, req, _permit), stored) in waiting.into_iter().zip(stored) {
            let reply = match stored {
                Ok(()) => Reply::Ack {
                    req,
                    result: WireResult::Recorded,
                },
                Err(e) => Reply::failure(Some(req), &e),
            };
            let _ = out.send((peer, reply)).await;
        }
    }
}

/// How one request's lines fared: stored, or the error to answer it with (shared by the
/// requests of a batch that failed as one).
type Stored = std::result::Result<(), Arc<Error>>;

/// Stores `appends`, one result per entry, in order. A batch the database refuses for good
/// is stored again in halves until the entry at fault is alone, so that one worker's
/// refused lines do not cost the others theirs (an attempt's lines keep their order: the
/// left half is stored first). A transient failure (the database away) is answered to
/// every entry of the batch, as transient: the next store would fail alike, and the
/// workers send their requests again.
async fn store_isolating(store: &dyn LogStore, appends: &[JobLogAppend]) -> Vec<Stored> {
    let mut results: Vec<Option<Stored>> = vec![None; appends.len()];
    // The groups still to store, as ranges of `appends`; the last is stored first.
    let mut groups = Vec::new();
    groups.push(0..appends.len());
    while let Some(group) = groups.pop() {
        if group.is_empty() {
            continue;
        }
        let requests = group.len();
        match store.job_log_append_shared(&appends[group.clone()]).await {
            Ok(held) if held.is_empty() => group.for_each(|i| results[i] = Some(Ok(()))),
            Ok(held) => {
                // Not waited for: those requests are answered as transient and sent again,
                // every other one was stored.
                tracing::debug!(
                    requests = held.len(),
                    "job logs held by another transaction"
                );
                let failed = Arc::new(held_elsewhere());
                for i in group {
                    let stored = if held.contains(&appends[i].lease) {
                        Err(failed.clone())
                    } else {
                        Ok(())
                    };
                    results[i] = Some(stored);
                }
            }
            Err(e) if e.is_transient() || requests == 1 => {
                tracing::warn!(error = %crate::convert::detail(&e), requests, "storing job logs failed");
                let failed = Arc::new(e);
                group.for_each(|i| results[i] = Some(Err(failed.clone())));
            }
            Err(e) => {
                tracing::warn!(error = %crate::convert::detail(&e), requests, "a batch of job logs was refused; storing it in halves to find the request at fault");
                let middle = group.start + requests / 2;
                groups.push(middle..group.end);
                groups.push(group.start..middle);
            }
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(Arc::new(Error::Shutdown))))
        .collect()
}
