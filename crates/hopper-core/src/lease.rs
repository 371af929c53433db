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

/// Checks the counts a claim returned, as stored (`i64`, whatever the column's width): the
/// lease's `attempt` and the attempts used (`attempt` less the claims not counted). A
/// claim raises the attempt by one and counts at least this one, so a row written by hand
/// with counts no claim could leave (an attempt at `i32::MAX`, after which no attempt can
/// follow; more claims not counted than claims) is an [`crate::Error::Schema`]: the backend
/// fails the job as unreadable rather than run it with counts that would never end its
/// retries or could never lease it again.
pub fn claimed_counts(attempt: i64, used: i64) -> crate::Result<(i32, i32)> {
    let attempt = i32::try_from(attempt)
        .ok()
        .filter(|a| *a < i32::MAX)
        .ok_or_else(|| {
            crate::Error::Schema(format!(
                "attempt {attempt} is past the last a lease can count ({})",
                i32::MAX - 1
            ))
        })?;
    let used = i32::try_from(used)
        .ok()
        .filter(|u| (1..=attempt).contains(u))
        .ok_or_else(|| {
            crate::Error::Schema(format!(
                "attempts used ({used}: attempt {attempt} less the claims not counted) must be \
                 between 1 and the attempt"
            ))
        })?;
    Ok((attempt, used))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claimed_counts_are_those_a_claim_can_leave() {
        assert_eq!(claimed_counts(1, 1).ok(), Some((1, 1)));
        assert_eq!(claimed_counts(9, 2).ok(), Some((9, 2)));
        let max = i64::from(i32::MAX);
        assert_eq!(claimed_counts(max - 1, 5).ok(), Some((i32::MAX - 1, 5)));
        for (attempt, used) in [
            (max, 1),
            (i64::MAX, 1),
            (5, 0),
            (5, 6),
            (5, -3),
            (1, max + 9),
            (0, 1),
            (-4, 1),
            (-1, -1),
        ] {
            let err = claimed_counts(attempt, used).expect_err("refused");
            assert!(matches!(err, crate::Error::Schema(_)), "{err}");
        }
    }
}
