//! The items of an `outcomes` message: what `completed`, `failed`, `snoozed` and
//! `released` say, one map per order, told apart by their `outcome` key.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::messages::Request;
use crate::uuid_str;

fn yes() -> bool {
    true
}

/// One order's outcome in an `outcomes` message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum OutcomeItem {
    /// As `completed`.
    Completed {
        /// The job.
        #[serde(with = "uuid_str")]
        id: Uuid,
        /// The attempt from the order.
        attempt: i32,
        /// How long the run took.
        #[serde(default)]
        duration_ms: i64,
    },
    /// As `failed`.
    Failed {
        /// The job.
        #[serde(with = "uuid_str")]
        id: Uuid,
        /// The attempt from the order.
        attempt: i32,
        /// What went wrong.
        error: String,
        /// False: dead-letter now. Default true.
        #[serde(default = "yes")]
        retryable: bool,
        /// Delay before the retry; absent: the server's backoff.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_in_ms: Option<u64>,
        /// How long the run took.
        #[serde(default)]
        duration_ms: i64,
    },
    /// As `snoozed`.
    Snoozed {
        /// The job.
        #[serde(with = "uuid_str")]
        id: Uuid,
        /// The attempt from the order.
        attempt: i32,
        /// The delay.
        delay_ms: u64,
    },
    /// As `released`.
    Released {
        /// The job.
        #[serde(with = "uuid_str")]
        id: Uuid,
        /// The attempt from the order.
        attempt: i32,
    },
}

impl OutcomeItem {
    /// The job and attempt it reports.
    pub fn lease(&self) -> (Uuid, i32) {
        match self {
            OutcomeItem::Completed { id, attempt, .. }
            | OutcomeItem::Failed { id, attempt, .. }
            | OutcomeItem::Snoozed { id, attempt, .. }
            | OutcomeItem::Released { id, attempt } => (*id, *attempt),
        }
    }
}

impl OutcomeItem {
    /// The same outcome as a message of its own: `completed`, `failed`, `snoozed` or
    /// `released`.
    pub fn into_request(self, req: u64) -> Request {
        match self {
            OutcomeItem::Completed {
                id,
                attempt,
                duration_ms,
            } => Request::Completed {
                req,
                id,
                attempt,
                duration_ms,
            },
            OutcomeItem::Failed {
                id,
                attempt,
                error,
                retryable,
                retry_in_ms,
                duration_ms,
            } => Request::Failed {
                req,
                id,
                attempt,
                error,
                retryable,
                retry_in_ms,
                duration_ms,
            },
            OutcomeItem::Snoozed {
                id,
                attempt,
                delay_ms,
            } => Request::Snoozed {
                req,
                id,
                attempt,
                delay_ms,
            },
            OutcomeItem::Released { id, attempt } => Request::Released { req, id, attempt },
        }
    }

    /// The outcome a single message (`completed`, `failed`, `snoozed`, `released`)
    /// reports, with its `req`; `None` for any other request.
    pub fn from_request(request: &Request) -> Option<(u64, OutcomeItem)> {
        let item = match request.clone() {
            Request::Completed {
                id,
                attempt,
                duration_ms,
                ..
            } => OutcomeItem::Completed {
                id,
                attempt,
                duration_ms,
            },
            Request::Failed {
                id,
                attempt,
                error,
                retryable,
                retry_in_ms,
                duration_ms,
                ..
            } => OutcomeItem::Failed {
                id,
                attempt,
                error,
                retryable,
                retry_in_ms,
                duration_ms,
            },
            Request::Snoozed {
                id,
                attempt,
                delay_ms,
                ..
            } => OutcomeItem::Snoozed {
                id,
                attempt,
                delay_ms,
            },
            Request::Released { id, attempt, .. } => OutcomeItem::Released { id, attempt },
            _ => return None,
        };
        Some((request.req(), item))
    }
}
