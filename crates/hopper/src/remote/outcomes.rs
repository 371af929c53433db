//! Outcomes in batches: the runtime's completer hands over every outcome waiting, and they
//! go to the server as `outcomes` messages (one reply, `acks`, for each), instead of one
//! message and one reply per job.

use hopper_core::{Error, Finish, FinishResult, Result};
use hopper_protocol::{FinishResult as WireResult, OutcomeItem, Reply, Request};

use super::{RemoteBackend, lock, state_after, unexpected};

/// Most outcomes in one message (about 100 bytes each, a failure's error text more): half
/// the protocol's bound ([`hopper_protocol::MAX_OUTCOMES`]).
const PER_MESSAGE: usize = hopper_protocol::MAX_OUTCOMES / 2;

impl RemoteBackend {
    /// Sends `finishes` in `outcomes` messages, all at once, and gathers the results in
    /// order. A server that does not know `outcomes` (older than this library) gets one
    /// message per outcome.
    pub(super) async fn finish_batched(&self, finishes: &[Finish]) -> Result<Vec<FinishResult>> {
        let replies = futures_util::future::join_all(
            finishes
                .chunks(PER_MESSAGE)
                .map(|chunk| self.finish_chunk(chunk)),
        )
        .await;
        let mut results = Vec::with_capacity(finishes.len());
        for (chunk, reply) in finishes.chunks(PER_MESSAGE).zip(replies) {
            match reply {
                Ok(r) => results.extend(r),
                Err(Error::InvalidInput(m)) if m.starts_with("unknown_type") => {
                    for finish in chunk {
                        results.push(self.finish_one(finish).await?);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(results)
    }

    async fn finish_chunk(&self, chunk: &[Finish]) -> Result<Vec<FinishResult>> {
        let outcomes: Vec<OutcomeItem> = chunk.iter().map(OutcomeItem::from).collect();
        let reply = self
            .request(|req| Request::Outcomes { req, outcomes })
            .await?;
        let Reply::Acks { results, .. } = reply else {
            return Err(unexpected(&reply));
        };
        if results.len() != chunk.len() {
            return Err(unexpected(&Reply::Acks { req: 0, results }));
        }
        let mut held = lock(&self.shared.held);
        Ok(chunk
            .iter()
            .zip(results)
            .map(|(finish, result)| {
                held.remove(&finish.lease);
                match result {
                    WireResult::Recorded => FinishResult::Recorded(state_after(&finish.outcome)),
                    WireResult::LeaseLost => FinishResult::LeaseLost,
                }
            })
            .collect())
    }
}
