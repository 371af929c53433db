//! The messages. Field names and `type` values are the protocol; `docs/protocol.md`
//! describes each one.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::admin::{CronInfo, JobFilter, NodeInfo, QueueChange, QueueCounts, QueueInfo};
use crate::batch::{Completed, Failed, OutcomeItem, Released, Snoozed};
use crate::jobs::{JobInfo, JobSpec, LogLineSpec, Order};
use crate::{map_only, uuid_str};

/// What a peer does: clients submit and inspect jobs; workers also receive orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Submits, inspects and cancels jobs; never receives orders.
    Client,
    /// Receives orders (jobs to run) up to its declared concurrency, and may also do what a
    /// client does.
    Worker,
}

/// One attempt of one job: the lease a worker holds while it runs the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaseRef {
    /// The job.
    #[serde(with = "uuid_str")]
    pub id: Uuid,
    /// The attempt number from the order.
    pub attempt: i32,
}

/// Peer to server. Every request carries `req`, a number the peer chooses; the reply to it
/// carries the same `req`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// The handshake; nothing else is accepted before a successful one. Sending it again
    /// replaces the peer's registration (a worker that changes its queues, or a client that
    /// becomes a worker).
    Hello {
        /// The request number.
        req: u64,
        /// The protocol version the peer speaks (1).
        version: u32,
        /// What the peer does.
        role: Role,
        /// The peer's token (absent when the server runs without authentication).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
        /// A human name for logs (host and pid, say).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// Workers: the kinds of job it runs. Absent: any kind.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kinds: Option<Vec<String>>,
        /// Workers: the queues it serves. Absent: `["default"]`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        queues: Option<Vec<String>>,
        /// Workers: jobs it runs at once; the server never has more orders outstanding
        /// with it. Absent: 1.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        concurrency: Option<u32>,
        /// Workers: the most orders it holds beyond its concurrency, to start as slots free.
        /// The server sends fewer while the worker's jobs are slow: as many as its slots start
        /// in 10 ms at the mean duration its outcomes report. Absent: 0, never more orders
        /// outstanding than `concurrency`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prefetch: Option<u32>,
        /// The peer reads `orders` (several jobs in one push). Absent: false, and every
        /// job comes in an `order` of its own.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        batch: bool,
    },
    /// Submit one job. Reply: `submitted`.
    Submit {
        /// The request number.
        req: u64,
        /// The job.
        #[serde(deserialize_with = "map_only::one")]
        job: JobSpec,
    },
    /// Submit many jobs in one transaction: all or none. Reply: `submitted`.
    SubmitBatch {
        /// The request number.
        req: u64,
        /// The jobs.
        #[serde(deserialize_with = "map_only::each")]
        jobs: Vec<JobSpec>,
    },
    /// Read a job. Reply: `job`, or `not_found`.
    Status {
        /// The request number.
        req: u64,
        /// The job.
        #[serde(with = "uuid_str")]
        id: Uuid,
    },
    /// Cancel a job that has not finished. Reply: `job`, `not_found` or `conflict`.
    Cancel {
        /// The request number.
        req: u64,
        /// The job.
        #[serde(with = "uuid_str")]
        id: Uuid,
    },
    /// The job of an order succeeded. Reply: `ack`.
    Completed {
        /// The request number.
        req: u64,
        /// What it reports.
        #[serde(flatten)]
        outcome: Completed,
    },
    /// The job of an order failed. Reply: `ack`.
    Failed {
        /// The request number.
        req: u64,
        /// What it reports.
        #[serde(flatten)]
        outcome: Failed,
    },
    /// Run the job of an order again after `delay_ms`, without using up an attempt.
    /// Reply: `ack`.
    Snoozed {
        /// The request number.
        req: u64,
        /// What it reports.
        #[serde(flatten)]
        outcome: Snoozed,
    },
    /// Hand an order back unstarted: the job is available again at once, the attempt not
    /// counted. Reply: `ack`.
    Released {
        /// The request number.
        req: u64,
        /// What it reports.
        #[serde(flatten)]
        outcome: Released,
    },
    /// "I am alive, and I still run these." The server extends the leases in the database.
    /// Reply: `heartbeat_ack` with the leases that are lost (stop those jobs).
    Heartbeat {
        /// The request number.
        req: u64,
        /// Every order the worker still holds (started or not).
        #[serde(default, deserialize_with = "map_only::each")]
        leases: Vec<LeaseRef>,
    },
    /// Extend one lease to `by_ms` from now (a long job). Reply: `ack`.
    Extend {
        /// The request number.
        req: u64,
        /// The job.
        #[serde(with = "uuid_str")]
        id: Uuid,
        /// The attempt from the order.
        attempt: i32,
        /// The new lease, from now.
        by_ms: u64,
    },
    /// Lines for the log of one attempt of an order the worker holds (see
    /// `docs/job-meta-and-logs.md`). Reply: `ack` (`recorded`, or `lease_lost` when another
    /// worker holds the job). An attempt keeps at most 64 KiB of lines; past that they are
    /// counted as dropped, never an error.
    Log {
        /// The request number.
        req: u64,
        /// The job.
        #[serde(with = "uuid_str")]
        id: Uuid,
        /// The attempt from the order.
        attempt: i32,
        /// The lines, oldest first.
        #[serde(deserialize_with = "map_only::each")]
        lines: Vec<LogLineSpec>,
        /// Lines the worker wrote but did not send (past its own bound), counted as
        /// dropped (default 0).
        #[serde(default)]
        dropped: u64,
    },
    /// Read the logs of a job's attempts after attempt `after`, oldest first, at most
    /// [`crate::LOGS_PAGE`] attempts a reply (see `docs/job-meta-and-logs.md`). Reply: `logs`, or
    /// `not_found` when the job does not exist.
    JobLogs {
        /// The request number.
        req: u64,
        /// The job.
        #[serde(with = "uuid_str")]
        id: Uuid,
        /// Only attempts after this one (default 0: from the first); the `next` of the
        /// previous page.
        #[serde(default)]
        after: i32,
    },
    /// A graceful leave: the server sends no more orders. Orders still held must be
    /// reported (or `released`) before the peer goes. Reply: `ack`.
    Bye {
        /// The request number.
        req: u64,
    },
    /// The outcomes of several orders in one message, each as `completed`, `failed`,
    /// `snoozed` or `released` would say it. Reply: `acks`, one result per outcome, in order.
    Outcomes {
        /// The request number.
        req: u64,
        /// The outcomes.
        #[serde(deserialize_with = "map_only::each")]
        outcomes: Vec<OutcomeItem>,
    },
    /// Admin: list jobs, newest first. Reply: `jobs`.
    ListJobs {
        /// The request number.
        req: u64,
        /// The filters, cursor and page size.
        #[serde(default, deserialize_with = "map_only::one")]
        filter: JobFilter,
    },
    /// Admin: put a failed or cancelled job back to `available` with fresh attempts.
    /// Reply: `job`, `not_found` or `conflict`.
    Retry {
        /// The request number.
        req: u64,
        /// The job.
        #[serde(with = "uuid_str")]
        id: Uuid,
    },
    /// Admin: delete a job that is not running. Reply: `count` (1), `not_found` or
    /// `conflict`.
    Delete {
        /// The request number.
        req: u64,
        /// The job.
        #[serde(with = "uuid_str")]
        id: Uuid,
    },
    /// Admin: retry every failed job of a queue and/or kind. Reply: `count`.
    RetryFailed {
        /// The request number.
        req: u64,
        /// Only this queue.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        queue: Option<String>,
        /// Only this kind.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<String>,
    },
    /// Admin: delete every job that is not running, of one queue or of all. Reply: `count`.
    Clear {
        /// The request number.
        req: u64,
        /// Only this queue.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        queue: Option<String>,
    },
    /// Admin: counts of jobs by queue and state. Reply: `stats`.
    QueueStats {
        /// The request number.
        req: u64,
    },
    /// Admin: every queue that has settings. Reply: `queues`.
    ListQueues {
        /// The request number.
        req: u64,
    },
    /// Admin: change a queue's settings (pause, resume, limits). Reply: `queue`.
    UpdateQueue {
        /// The request number.
        req: u64,
        /// The change.
        #[serde(deserialize_with = "map_only::one")]
        update: QueueChange,
    },
    /// Admin: every registered periodic job. Reply: `cron`.
    ListCron {
        /// The request number.
        req: u64,
    },
    /// Admin: one page of the registered nodes (runtimes and servers), by name. Reply:
    /// `nodes`. Without `before` and `limit`, the first page of the default size.
    ListNodes {
        /// The request number.
        req: u64,
        /// The cursor of the page: the `next_before` of the previous reply (absent: the
        /// first page).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        before: Option<String>,
        /// At most this many (default 20, at most 1,000), as `list_jobs`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<u32>,
    },
    /// Admin: what finished in each minute of the last `minutes` (1 to
    /// [`crate::MAX_STATS_MINUTES`]). Reply: `minutes`.
    JobStats {
        /// The request number.
        req: u64,
        /// How many minutes back from the database's "now".
        minutes: u32,
    },
}

impl Request {
    /// The request number.
    pub fn req(&self) -> u64 {
        match self {
            Request::Hello { req, .. }
            | Request::Submit { req, .. }
            | Request::SubmitBatch { req, .. }
            | Request::Status { req, .. }
            | Request::Cancel { req, .. }
            | Request::Completed { req, .. }
            | Request::Failed { req, .. }
            | Request::Snoozed { req, .. }
            | Request::Released { req, .. }
            | Request::Heartbeat { req, .. }
            | Request::Extend { req, .. }
            | Request::Log { req, .. }
            | Request::JobLogs { req, .. }
            | Request::Bye { req }
            | Request::Outcomes { req, .. }
            | Request::ListJobs { req, .. }
            | Request::Retry { req, .. }
            | Request::Delete { req, .. }
            | Request::RetryFailed { req, .. }
            | Request::Clear { req, .. }
            | Request::QueueStats { req }
            | Request::ListQueues { req }
            | Request::UpdateQueue { req, .. }
            | Request::ListCron { req }
            | Request::ListNodes { req, .. }
            | Request::JobStats { req, .. } => *req,
        }
    }

    /// Every `type` a request may have.
    pub const TYPES: [&'static str; 26] = [
        "hello",
        "submit",
        "submit_batch",
        "status",
        "cancel",
        "completed",
        "failed",
        "snoozed",
        "released",
        "heartbeat",
        "extend",
        "log",
        "job_logs",
        "bye",
        "outcomes",
        "list_jobs",
        "retry",
        "delete",
        "retry_failed",
        "clear",
        "queue_stats",
        "list_queues",
        "update_queue",
        "list_cron",
        "list_nodes",
        "job_stats",
    ];
}

/// Whether an outcome was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishResult {
    /// Recorded.
    Recorded,
    /// The lease was no longer current (the job was re-claimed, cancelled or finished
    /// elsewhere): nothing was changed. Stop working on the job.
    LeaseLost,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The frame is not one CBOR map.
    BadFrame,
    /// The map's `type` is not a request type.
    UnknownType,
    /// A field is missing, of the wrong type, or out of range; or the job is invalid.
    Invalid,
    /// No successful `hello` yet, or a wrong token.
    Unauthorized,
    /// The frame is larger than `max_frame`.
    TooLarge,
    /// The job does not exist.
    NotFound,
    /// The job's state does not allow this (cancel a finished job), or the id exists.
    Conflict,
    /// The server failed: retrying later may succeed when the reply's `transient` is true
    /// (the database is unreachable, say), not when it is false (the database refused the
    /// request for good).
    Internal,
}

impl ErrorCode {
    /// The code as sent.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadFrame => "bad_frame",
            ErrorCode::UnknownType => "unknown_type",
            ErrorCode::Invalid => "invalid",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Internal => "internal",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Server to peer: replies (with the request's `req`) and pushes (`order`, `cancel`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    /// The handshake succeeded.
    Welcome {
        /// The `req` of the hello.
        req: u64,
        /// The protocol version the server speaks.
        version: u32,
        /// This registration's id (for logs).
        #[serde(with = "uuid_str")]
        session: Uuid,
        /// Send something (a heartbeat at least) this often; a worker silent for three
        /// periods is dropped and its jobs retried.
        heartbeat_ms: u64,
        /// The largest frame the server accepts.
        max_frame: u64,
    },
    /// The jobs were inserted; their ids, in the order submitted.
    Submitted {
        /// The `req` of the submit.
        req: u64,
        /// The jobs' ids.
        #[serde(with = "uuid_str::vec")]
        ids: Vec<Uuid>,
    },
    /// A job (`status`, `cancel`).
    Job {
        /// The `req` of the request.
        req: u64,
        /// The job.
        job: JobInfo,
    },
    /// An outcome, extension or bye was handled.
    Ack {
        /// The `req` of the request.
        req: u64,
        /// Whether it was recorded.
        result: FinishResult,
    },
    /// The answer to a heartbeat.
    HeartbeatAck {
        /// The `req` of the heartbeat.
        req: u64,
        /// The leases that are no longer the worker's: stop those jobs, do not report them.
        lost: Vec<LeaseRef>,
    },
    /// A job to run (server push, no `req`).
    Order {
        /// The job.
        job: Order,
    },
    /// Stop the job you run with this id: it was cancelled (server push, no `req`).
    Cancel {
        /// The job.
        #[serde(with = "uuid_str")]
        id: Uuid,
    },
    /// Several jobs to run (server push, no `req`), to peers that said `batch` in their
    /// hello.
    Orders {
        /// The jobs.
        jobs: Vec<Order>,
    },
    /// The answer to `outcomes`: one result per outcome, in order.
    Acks {
        /// The `req` of the request.
        req: u64,
        /// Whether each was recorded.
        results: Vec<FinishResult>,
    },
    /// Jobs (`list_jobs`), newest first.
    Jobs {
        /// The `req` of the request.
        req: u64,
        /// The jobs.
        jobs: Vec<JobInfo>,
        /// Present when the server cut the page short of its `limit` so that the reply
        /// stays under `max_frame`: the `before` that goes on with the jobs after the last
        /// one here (more may match). Absent (null) when the page holds what `limit`
        /// allowed, as a server that predates the cut always sends it.
        #[serde(
            default,
            with = "uuid_str::option",
            skip_serializing_if = "Option::is_none"
        )]
        next_before: Option<Uuid>,
    },
    /// How many jobs a request affected (`delete`, `retry_failed`, `clear`).
    Count {
        /// The `req` of the request.
        req: u64,
        /// How many.
        count: u64,
    },
    /// Counts of jobs by queue and state (`queue_stats`).
    Stats {
        /// The `req` of the request.
        req: u64,
        /// One entry per queue that has jobs.
        queues: Vec<QueueCounts>,
    },
    /// Queue settings (`list_queues`).
    Queues {
        /// The `req` of the request.
        req: u64,
        /// Every queue that has settings.
        queues: Vec<QueueInfo>,
    },
    /// One queue's settings after a change (`update_queue`).
    Queue {
        /// The `req` of the request.
        req: u64,
        /// The settings now stored.
        queue: QueueInfo,
    },
    /// Registered periodic jobs (`list_cron`).
    Cron {
        /// The `req` of the request.
        req: u64,
        /// Every entry, by name.
        entries: Vec<CronInfo>,
    },
    /// One page of the registered nodes (`list_nodes`).
    Nodes {
        /// The `req` of the request.
        req: u64,
        /// The nodes, by name (bytes), then id.
        nodes: Vec<NodeInfo>,
        /// The `before` of the next page; `None` (null) on the last page. A server that
        /// predates paging sends none, and every node in one reply.
        #[serde(default)]
        next_before: Option<String>,
    },
    /// What finished per minute (`job_stats`), oldest first; minutes in which nothing
    /// finished are left out.
    Minutes {
        /// The `req` of the request.
        req: u64,
        /// One entry per minute in which a job finished.
        minutes: Vec<hopper_core::MinuteStats>,
    },
    /// One page of a job's logs (`job_logs`): each attempt's lines, oldest attempt first.
    Logs {
        /// The `req` of the request.
        req: u64,
        /// The job.
        #[serde(with = "uuid_str")]
        id: Uuid,
        /// At most [`crate::LOGS_PAGE`] attempts' logs, oldest first.
        logs: Vec<hopper_core::job_log::AttemptLog>,
        /// The `after` of the next page, or null when this page is the last.
        next: Option<i32>,
    },
    /// A request was refused.
    Error {
        /// The `req` of the request, when it could be read.
        req: Option<u64>,
        /// Why, for programs.
        code: ErrorCode,
        /// Why, for people.
        message: String,
        /// With `internal`: whether the failure is transient (the database away, the server
        /// busy), so the same request may succeed later, or permanent (the database refused
        /// it for good), so it would fail again. Absent from other codes, and from servers
        /// that predate it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        transient: Option<bool>,
    },
}

impl Reply {
    /// The `req` this answers, if it is a reply rather than a push.
    pub fn req(&self) -> Option<u64> {
        match self {
            Reply::Welcome { req, .. }
            | Reply::Submitted { req, .. }
            | Reply::Job { req, .. }
            | Reply::Ack { req, .. }
            | Reply::HeartbeatAck { req, .. }
            | Reply::Acks { req, .. }
            | Reply::Jobs { req, .. }
            | Reply::Count { req, .. }
            | Reply::Stats { req, .. }
            | Reply::Queues { req, .. }
            | Reply::Queue { req, .. }
            | Reply::Cron { req, .. }
            | Reply::Nodes { req, .. }
            | Reply::Minutes { req, .. }
            | Reply::Logs { req, .. } => Some(*req),
            Reply::Error { req, .. } => *req,
            Reply::Order { .. } | Reply::Orders { .. } | Reply::Cancel { .. } => None,
        }
    }

    /// An error reply that says nothing of `transient` (a refusal of the request itself).
    pub fn error(req: Option<u64>, code: ErrorCode, message: impl Into<String>) -> Self {
        Reply::Error {
            req,
            code,
            message: message.into(),
            transient: None,
        }
    }

    /// An `internal` error reply for a failure that may pass (the server busy or stopping):
    /// `transient` is true, the peer may send the request again later.
    pub fn transient(req: Option<u64>, message: impl Into<String>) -> Self {
        Reply::Error {
            req,
            code: ErrorCode::Internal,
            message: message.into(),
            transient: Some(true),
        }
    }

    /// Every `type` a reply may have.
    pub const TYPES: [&'static str; 19] = [
        "welcome",
        "submitted",
        "job",
        "ack",
        "heartbeat_ack",
        "order",
        "cancel",
        "error",
        "orders",
        "acks",
        "jobs",
        "count",
        "stats",
        "queues",
        "queue",
        "cron",
        "logs",
        "nodes",
        "minutes",
    ];
}
