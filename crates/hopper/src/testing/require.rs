//! Assertions on what was enqueued: [`require_inserted`], [`require_many_inserted`],
//! [`require_not_inserted`], and their `_in` forms (`postgres` feature) that look inside
//! the caller's PostgreSQL transaction.
//!
//! Each reads the newest [`LISTED`] jobs and compares them with [`ExpectedJob`]s. A failure
//! is a [`RequireError`] whose message says what was expected and lists what was enqueued,
//! so a test that returns it with `?` reads like a failed `assert!`.

use std::fmt;

use hopper_core::{Error, JobGetParams, JobListParams, JobRecord};
#[cfg(feature = "postgres")]
use hopper_postgres::PgBackend;

use super::expect::{ExpectedJob, describe};
use crate::Client;

/// How many of the newest jobs the assertions read.
pub const LISTED: u32 = 10_000;

/// How many jobs a failure message lists at most.
const SHOWN: usize = 20;

/// A failed assertion (what was expected, what was found), or the database error that
/// prevented checking.
#[derive(Debug)]
pub struct RequireError {
    message: String,
}

impl RequireError {
    fn new(message: String) -> Self {
        RequireError { message }
    }
}

impl fmt::Display for RequireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RequireError {}

impl From<Error> for RequireError {
    fn from(e: Error) -> Self {
        RequireError::new(format!("could not read the enqueued jobs: {e}"))
    }
}

/// Requires that exactly one job like `expected` was enqueued, and returns it.
///
/// Fails if there is none or more than one; the message lists the jobs there are. Works on
/// every backend.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use hopper::testing::{ExpectedJob, require_inserted, require_not_inserted};
/// use hopper::{Client, NewJob, SqliteBackend, SqliteOptions};
/// use serde_json::json;
///
/// let backend = SqliteBackend::open_in_memory(SqliteOptions::default()).await?;
/// let client = Client::new(Arc::new(backend));
/// client.migrate().await?;
/// client.insert(NewJob::new("send_email", json!({"to": "ada@example.com", "n": 1})).with_queue("mail")).await?;
///
/// let job = require_inserted(
///     &client,
///     ExpectedJob::kind("send_email").args_containing(json!({"to": "ada@example.com"})).queue("mail"),
/// )
/// .await?;
/// assert_eq!(job.args["n"], 1);
/// require_not_inserted(&client, ExpectedJob::kind("send_sms")).await?;
/// # Ok(()) }
/// ```
pub async fn require_inserted(
    client: &Client,
    expected: ExpectedJob,
) -> Result<JobRecord, RequireError> {
    check_one(&listed(client).await?, &expected)
}

/// [`require_inserted`] as seen from inside `tx`, so a test can enqueue in a transaction,
/// assert, and roll back. `backend` names the schema.
#[cfg(feature = "postgres")]
pub async fn require_inserted_in(
    backend: &PgBackend,
    tx: &(impl tokio_postgres::GenericClient + Sync),
    expected: ExpectedJob,
) -> Result<JobRecord, RequireError> {
    check_one(&listed_in(backend, tx).await?, &expected)
}

/// Requires that the jobs of the kinds named in `expected` are exactly these, in the order
/// they were enqueued, one for one; returns them in that order. Jobs of other kinds are
/// ignored.
pub async fn require_many_inserted(
    client: &Client,
    expected: &[ExpectedJob],
) -> Result<Vec<JobRecord>, RequireError> {
    check_many(&listed(client).await?, expected)
}

/// [`require_many_inserted`] as seen from inside `tx`.
#[cfg(feature = "postgres")]
pub async fn require_many_inserted_in(
    backend: &PgBackend,
    tx: &(impl tokio_postgres::GenericClient + Sync),
    expected: &[ExpectedJob],
) -> Result<Vec<JobRecord>, RequireError> {
    check_many(&listed_in(backend, tx).await?, expected)
}

/// Requires that no job like `expected` was enqueued; the message lists the ones that were.
pub async fn require_not_inserted(
    client: &Client,
    expected: ExpectedJob,
) -> Result<(), RequireError> {
    check_none(&listed(client).await?, &expected)
}

/// [`require_not_inserted`] as seen from inside `tx`.
#[cfg(feature = "postgres")]
pub async fn require_not_inserted_in(
    backend: &PgBackend,
    tx: &(impl tokio_postgres::GenericClient + Sync),
    expected: ExpectedJob,
) -> Result<(), RequireError> {
    check_none(&listed_in(backend, tx).await?, &expected)
}

/// The newest [`LISTED`] jobs, oldest first, whole: a job whose `args` or `meta` the
/// listing left out ([`JobRecord::is_abridged`]) is read again alone, so that expectations
/// compare the values themselves.
async fn listed(client: &Client) -> Result<Vec<JobRecord>, RequireError> {
    let params = JobListParams {
        limit: LISTED,
        ..JobListParams::default()
    };
    let backend = client.backend();
    let mut jobs = Vec::new();
    for job in backend.job_list(&params).await? {
        if !job.is_abridged() {
            jobs.push(job);
        } else if let Some(whole) = backend.job_get(&JobGetParams { id: job.id }).await? {
            jobs.push(whole);
        }
    }
    jobs.reverse();
    Ok(jobs)
}

/// The newest [`LISTED`] jobs as `tx` sees them, oldest first.
#[cfg(feature = "postgres")]
async fn listed_in(
    backend: &PgBackend,
    tx: &(impl tokio_postgres::GenericClient + Sync),
) -> Result<Vec<JobRecord>, RequireError> {
    let mut jobs = backend.jobs_in(tx, LISTED).await?;
    jobs.reverse();
    Ok(jobs)
}

fn check_one(jobs: &[JobRecord], expected: &ExpectedJob) -> Result<JobRecord, RequireError> {
    let mut matching = matching(jobs, expected);
    match matching.len() {
        1 => Ok(matching.remove(0)),
        0 => Err(RequireError::new(format!(
            "expected one job with {expected}, found none.\n{}",
            listing("Enqueued", jobs)
        ))),
        n => Err(RequireError::new(format!(
            "expected one job with {expected}, found {n}.\n{}",
            listing("Matching", &matching)
        ))),
    }
}

fn check_many(
    jobs: &[JobRecord],
    expected: &[ExpectedJob],
) -> Result<Vec<JobRecord>, RequireError> {
    let of_kinds: Vec<JobRecord> = jobs
        .iter()
        .filter(|job| expected.iter().any(|e| e.expected_kind() == job.kind))
        .cloned()
        .collect();
    let mismatch = (0..expected.len().max(of_kinds.len())).find(|&i| {
        match (expected.get(i), of_kinds.get(i)) {
            (Some(e), Some(job)) => !e.matches(job),
            _ => true,
        }
    });
    let Some(i) = mismatch else {
        return Ok(of_kinds);
    };
    let wanted = expected
        .iter()
        .enumerate()
        .map(|(n, e)| format!("\n  {}. {e}", n + 1))
        .collect::<String>();
    let what = match (expected.get(i), of_kinds.get(i)) {
        (Some(_), Some(_)) => format!("job {} differs", i + 1),
        (Some(_), None) if of_kinds.len() == 1 => "only 1 job was enqueued".to_owned(),
        (Some(_), None) => format!("only {} jobs were enqueued", of_kinds.len()),
        (None, _) => format!("{} jobs were enqueued", of_kinds.len()),
    };
    Err(RequireError::new(format!(
        "expected exactly these {} job(s) of their kinds, in this order:{wanted}\nbut {what}.\n{}",
        expected.len(),
        listing("Enqueued of those kinds", &of_kinds)
    )))
}

fn check_none(jobs: &[JobRecord], expected: &ExpectedJob) -> Result<(), RequireError> {
    let matching = matching(jobs, expected);
    if matching.is_empty() {
        return Ok(());
    }
    Err(RequireError::new(format!(
        "expected no job with {expected}, found {}.\n{}",
        matching.len(),
        listing("Matching", &matching)
    )))
}

/// The jobs like `expected`, in order.
fn matching(jobs: &[JobRecord], expected: &ExpectedJob) -> Vec<JobRecord> {
    jobs.iter()
        .filter(|job| expected.matches(job))
        .cloned()
        .collect()
}

/// `title (n jobs, oldest first):` and one line per job, the first [`SHOWN`] of them.
fn listing(title: &str, jobs: &[JobRecord]) -> String {
    if jobs.is_empty() {
        return format!("{title}: no jobs.");
    }
    let count = match jobs.len() {
        1 => "1 job".to_owned(),
        n => format!("{n} jobs"),
    };
    let mut out = format!("{title} ({count}, oldest first):");
    for job in jobs.iter().take(SHOWN) {
        out.push_str("\n  - ");
        out.push_str(&describe(job));
    }
    if jobs.len() > SHOWN {
        out.push_str(&format!("\n  … and {} more", jobs.len() - SHOWN));
    }
    out
}
