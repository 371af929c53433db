//! The completer: writes outcomes in batches, off the handlers' path.
//!
//! Handlers hand their outcome to a channel and return; this task drains the channel and
//! writes everything waiting in one statement per kind of outcome. Under load batches grow
//! by themselves; when idle, each outcome is written at once. A write that fails for a
//! transient reason is retried with backoff, never dropped: until it lands the job stays
//! leased, and if the process dies first, the lease expires and the job runs again
//! (at-least-once). An outcome the database refuses for good (a data exception) is
//! isolated from its batch and skipped, so it cannot wedge the others
//! ([`crate::outcomes`]); its job runs again when its lease expires. An outcome whose job row
//! another transaction holds is kept aside ([`Deferred`]) and written again once free,
//! while the others go on; its lease is renewed meanwhile ([`crate::outcomes::renew_held`]).

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Backend, Finish, FinishResult, JobState};

use crate::outcomes::Deferred;
use tokio::sync::{Mutex, Notify, mpsc};
use tokio_util::sync::CancellationToken;

/// One outcome to write. `expect_lost` marks a job already completed in the handler's own
/// transaction: a lost lease then is expected, not worth a warning.
#[derive(Debug)]
pub(crate) struct Pending {
    pub finish: Finish,
    pub expect_lost: bool,
}

/// Runs until the channel is closed (`closing` cancelled: the runtime is stopping, and
/// takes no outcome sent later, such as an abandoned handler's; or every sender dropped)
/// and drained, and no held outcome is left.
///
/// `scheduled` is notified whenever an outcome put a job back in `scheduled` (a retry after
/// a backoff, a snooze), so the promoter can wake in time for a short backoff.
/// The channel is shared so that a run restarted by its supervisor takes it over; a run
/// holds it for its whole life. Held outcomes' leases are renewed by `lease` at each try.
pub(crate) async fn run(
    backend: Arc<dyn Backend>,
    rx: Arc<Mutex<mpsc::Receiver<Pending>>>,
    batch: usize,
    lease: Duration,
    scheduled: Arc<Notify>,
    closing: CancellationToken,
) {
    let mut rx = rx.lock().await;
    let mut buffer: Vec<Pending> = Vec::with_capacity(batch);
    let mut held: Deferred<Pending> = Deferred::default();
    let mut closed = false;
    loop {
        tokio::select! {
            next = rx.recv() => match next {
                Some(first) => buffer.push(first),
                None => break,
            },
            () = held.due() => buffer.extend(held.take()),
            () = closing.cancelled(), if !closed => {
                // What was queued is still received, then `None`.
                rx.close();
                closed = true;
                continue;
            }
        }
        while buffer.len() < batch {
            match rx.try_recv() {
                Ok(p) => buffer.push(p),
                Err(_) => break,
            }
        }
        write(&*backend, &mut buffer, &mut held, lease, &scheduled).await;
    }
    // The runtime is stopping. Held outcomes are written once free; the shutdown gives up
    // on them after its bound (the node's deregistration then releases their jobs).
    while !held.is_empty() {
        held.due().await;
        buffer.extend(held.take());
        write(&*backend, &mut buffer, &mut held, lease, &scheduled).await;
    }
}

/// Writes the batch `pending` and empties it ([`crate::outcomes::write_isolating`]:
/// transient failures retried until they pass, a permanently refused outcome isolated and
/// skipped). Outcomes whose job row is held go to `held`, their leases renewed by
/// `lease`; `scheduled` is notified if any job went back to `scheduled`.
async fn write(
    backend: &dyn Backend,
    pending: &mut Vec<Pending>,
    held: &mut Deferred<Pending>,
    lease: Duration,
    scheduled: &Notify,
) {
    let finishes: Vec<Finish> = pending.iter().map(|p| p.finish.clone()).collect();
    let results = crate::outcomes::write_isolating(backend, &finishes).await;
    let mut went_back = false;
    let mut still_held = Vec::new();
    for (p, result) in pending.drain(..).zip(results) {
        match result {
            Ok(FinishResult::Recorded(JobState::Scheduled)) => went_back = true,
            Ok(FinishResult::Held) => still_held.push(p),
            Ok(FinishResult::LeaseLost) if !p.expect_lost => {
                tracing::warn!(
                    job_id = %p.finish.lease.job_id,
                    attempt = p.finish.lease.attempt,
                    "outcome discarded: lease lost (the job was re-claimed, cancelled or released)"
                );
            }
            // Refusals are logged and counted where they are decided.
            Ok(_) | Err(_) => {}
        }
    }
    let leases: Vec<_> = still_held.iter().map(|p| p.finish.lease).collect();
    held.defer(still_held);
    crate::outcomes::renew_held(backend, leases, lease).await;
    if went_back {
        scheduled.notify_one();
    }
}
