//! What an order's outcome says, defined once: the four payloads (`completed`, `failed`,
//! `snoozed`, `released`), sent either as a message of their own ([`Request::Completed`]
//! and the others, with a `req`) or as the items of an `outcomes` message
//! ([`OutcomeItem`], told apart by their `outcome` key).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::messages::Request;
use crate::uuid_str;

fn yes() -> bool {
    true
}

/// The job of an order succeeded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completed {
    /// The job.
    #[serde(with = "uuid_str")]
    pub id: Uuid,
    /// The attempt from the order.
    pub attempt: i32,
    /// How long the run took.
    #[serde(default)]
    pub duration_ms: i64,
}

/// The job of an order failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failed {
    /// The job.
    #[serde(with = "uuid_str")]
    pub id: Uuid,
    /// The attempt from the order.
    pub attempt: i32,
    /// What went wrong (kept in the job's error history).
    pub error: String,
    /// False: do not retry, dead-letter the job now. Default true.
    #[serde(default = "yes")]
    pub retryable: bool,
    /// Delay before the retry; absent: the server's backoff (exponential, with jitter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<u64>,
    /// How long the run took.
    #[serde(default)]
    pub duration_ms: i64,
}

/// Run the job of an order again after `delay_ms`, without using up an attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snoozed {
    /// The job.
    #[serde(with = "uuid_str")]
    pub id: Uuid,
    /// The attempt from the order.
    pub attempt: i32,
    /// The delay.
    pub delay_ms: u64,
}

/// Hand an order back unstarted: the job is available again at once, the attempt not
/// counted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Released {
    /// The job.
    #[serde(with = "uuid_str")]
    pub id: Uuid,
    /// The attempt from the order.
    pub attempt: i32,
}

/// One order's outcome in an `outcomes` message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum OutcomeItem {
    /// As `completed`.
    Completed(Completed),
    /// As `failed`.
    Failed(Failed),
    /// As `snoozed`.
    Snoozed(Snoozed),
    /// As `released`.
    Released(Released),
}

impl OutcomeItem {
    /// The job and attempt it reports.
    pub fn lease(&self) -> (Uuid, i32) {
        match self {
            OutcomeItem::Completed(Completed { id, attempt, .. })
            | OutcomeItem::Failed(Failed { id, attempt, .. })
            | OutcomeItem::Snoozed(Snoozed { id, attempt, .. })
            | OutcomeItem::Released(Released { id, attempt }) => (*id, *attempt),
        }
    }

    /// The same outcome as a message of its own: `completed`, `failed`, `snoozed` or
    /// `released`.
    pub fn into_request(self, req: u64) -> Request {
        match self {
            OutcomeItem::Completed(outcome) => Request::Completed { req, outcome },
            OutcomeItem::Failed(outcome) => Request::Failed { req, outcome },
            OutcomeItem::Snoozed(outcome) => Request::Snoozed { req, outcome },
            OutcomeItem::Released(outcome) => Request::Released { req, outcome },
        }
    }

    /// The outcome a single message (`completed`, `failed`, `snoozed`, `released`)
    /// reports, with its `req`; `None` for any other request.
    pub fn from_request(request: &Request) -> Option<(u64, OutcomeItem)> {
        let item = match request.clone() {
            Request::Completed { outcome, .. } => OutcomeItem::Completed(outcome),
            Request::Failed { outcome, .. } => OutcomeItem::Failed(outcome),
            Request::Snoozed { outcome, .. } => OutcomeItem::Snoozed(outcome),
            Request::Released { outcome, .. } => OutcomeItem::Released(outcome),
            _ => return None,
        };
        Some((request.req(), item))
    }
}
