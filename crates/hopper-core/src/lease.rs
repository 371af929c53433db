//! Leases: the fencing token that proves a worker still owns a job.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::job::JobId;

/// The unique id of a worker process (a *node*). Jobs a node holds carry its id, so a node
/// that stops heartbeating has all of its jobs released at once (seed 004's lock key).
pub type NodeId = Uuid;

/// Proof of ownership of one attempt of one job.
///
/// Every claim increments the job's `attempt`, so `(job_id, attempt)` names exactly one
/// claim. Complete, fail, snooze and extend are accepted only while the row still carries
/// this attempt and is `running`; anything else gets [`crate::Error::LeaseLost`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Lease {
    /// The job.
    pub job_id: JobId,
    /// The attempt number this lease was granted for (1 for the first run).
    pub attempt: i32,
}
