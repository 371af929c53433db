//! Core types of hopper, shared by every backend and by the runtime.
//!
//! This crate does no I/O. It holds:
//!
//! - [`backoff`]: the delays between retries of a transient failure ([`Backoff`]);
//! - [`job`]: what a job is ([`NewJob`], [`JobRecord`], [`JobState`], [`Priority`]) and the
//!   validation every entry point applies before anything is written;
//! - [`job_log`]: per-job logs, bounded per attempt, and the capability that stores them
//!   ([`job_log::LogStore`]);
//! - [`lease`]: the fencing token a worker holds while it runs a job ([`Lease`]);
//! - [`liveness`]: the capability of backends that see a node die at once ([`NodeLiveness`]);
//! - [`node_list`]: the listing of the registered nodes, a page at a time (its order, its
//!   cursor, how a page is cut);
//! - [`backend`]: the storage seam ([`Backend`] and its capability traits), for backend
//!   authors and outside semver, with one params struct per method;
//! - [`policy`]: the rules every backend applies the same way (the rate bucket, keys of
//!   periodic ticks, names spliced into SQL, conflict messages);
//! - [`scheduling`]: queue settings (pause, global limits), unique-key policies and
//!   periodic entries;
//! - [`limits`]: the one range of instants and the one bound of durations every way in
//!   accepts;
//! - [`clock`]: injectable time ([`Clock`]), so tests never sleep for a lease to expire;
//! - [`log_limit`]: truncating what peers send before it reaches a log, and logging a
//!   repeated event at most once per interval;
//! - [`meta`]: job metadata (a JSON object beside the arguments) and the W3C trace
//!   context kept in it;
//! - [`json_numbers`]: how the numbers of `args` and `meta` are held (64-bit integers or
//!   doubles), and the check that refuses wider integers in JSON text;
//! - [`value_path`]: how messages name where a value sits (`jobs[2].args.ratio`);
//! - [`pace`]: how long a node's jobs take, and how many to hold ahead of its free slots
//!   (the runtime's prefetch, the server's extra credit);
//! - [`error`]: the error type ([`Error`]) and its [`Result`] alias.

pub mod backend;
pub mod backoff;
pub mod clock;
pub mod error;
pub mod job;
pub mod job_log;
pub mod json_numbers;
pub mod lease;
pub mod limits;
pub mod liveness;
pub mod log_limit;
pub mod meta;
pub mod node_list;
pub mod pace;
pub mod policy;
pub mod scheduling;
pub mod value_path;

pub use backend::{
    AppliedMigration, Backend, ClaimParams, ClaimedJob, Finish, FinishResult, JobCancelParams,
    JobClearParams, JobDeleteParams, JobExtendManyParams, JobGetParams, JobListParams,
    JobPromoteOutcome, JobPruneOutcome, JobPruneParams, JobRetryManyParams, JobRetryParams,
    JobSearchParams, JobStatsParams, JobVacuumParams, MaintenanceStore, MinuteStats,
    NodeDeregisterParams, NodeInfo, NodeRecord, NodeReleaseDeadParams, Outcome, QueueStats,
    SchedulingStore, StatsStore, Wakeup, WakeupStream,
};
pub use backoff::Backoff;
pub use clock::{Clock, SystemClock, TestClock};
pub use error::{Error, Result};
pub use job::{
    AttemptError, DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, DEFAULT_TIMEOUT, JobArgs, JobId, JobRecord,
    JobState, LISTED_VALUE_BYTES, MAX_ARGS_BYTES, NewJob, Priority,
};
pub use lease::{Lease, NodeId};
pub use liveness::{NodeHold, NodeLiveness};
pub use node_list::{NodeCursor, NodeListParams, NodePage};
pub use scheduling::{
    CronAdvance, CronEntry, InsertOutcome, QueueSettings, QueueUpdate, RateLimit, UniquePolicy,
};
