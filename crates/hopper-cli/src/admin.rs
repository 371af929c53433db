//! Admin commands: migrate, enqueue, jobs, stats.
//!
//! User input is parsed and validated before anything connects ([`new_job`],
//! [`JobsAction::parse`]), so bad input is reported in one line, exits non-zero and writes
//! nothing, whether or not the database is reachable.

use std::io::Read;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, SecondsFormat, Utc};
use hopper::backend::Backend;
use hopper::{
    InsertOutcome, JobId, JobListParams, JobRecord, JobState, NewJob, Priority, QueueStats,
};
use serde_json::json;

use crate::cli::{EnqueueArgs, JobsCommand};
use crate::output::{outln, printable};

/// `hopper migrate`: applies pending migrations and says which (`--json`: their
/// versions and names under `applied`, empty when the schema was up to date).
pub async fn migrate(backend: &Arc<dyn Backend>, schema: &str, json: bool) -> anyhow::Result<()> {
    let applied = backend.migrate().await?;
    if json {
        return print_json(&json!({ "migrated": true, "schema": schema, "applied": applied }));
    }
    if applied.is_empty() {
        outln!("schema {schema} is up to date");
        return Ok(());
    }
    for m in &applied {
        outln!("applied migration {:04}_{}", m.version, m.name);
    }
    outln!(
        "schema {schema} is up to date ({} migration{} applied)",
        applied.len(),
        if applied.len() == 1 { "" } else { "s" }
    );
    Ok(())
}

/// Builds and validates the job `hopper enqueue` asks for, without touching the database.
pub fn new_job(args: &EnqueueArgs) -> anyhow::Result<NewJob> {
    let payload = read_args(&args.args)?;
    let priority = Priority::from_str(&args.priority)?;
    let timeout = parse_duration("--timeout", &args.timeout)?;
    let mut job = NewJob::new(&args.kind, payload)
        .with_queue(&args.queue)
        .with_priority(priority)
        .with_max_attempts(args.max_attempts)
        .with_timeout(timeout);
    if let Some(delay) = &args.delay {
        // Checked here, so that a delay past the bound is named as such, not as the
        // instant it would make.
        let delay = hopper::limits::check_duration("--delay", parse_duration("--delay", delay)?)?;
        job = job.with_delay(delay);
    }
    if let Some(at) = &args.run_at {
        let at = DateTime::parse_from_rfc3339(at).with_context(|| {
            format!("--run-at {at:?} is not an RFC 3339 time such as 2026-11-22T10:00:00Z")
        })?;
        job = job.with_run_at(at.with_timezone(&Utc));
    }
    if let Some(group) = &args.group {
        job = job.with_group(group);
    }
    if let Some(key) = &args.unique_key {
        job = job
            .with_unique_key(key)
            .with_unique_policy(args.unique_policy.parse()?);
    }
    if let Some(meta) = &args.meta {
        job = job
            .with_meta(hopper::core::meta::parse_meta(meta).map_err(|e| flag_error("--meta", e))?);
    }
    if let Some(tp) = &args.traceparent {
        hopper::core::meta::validate_traceparent(tp).map_err(|e| flag_error("--traceparent", e))?;
        job = job.with_meta_entry(hopper::core::meta::TRACEPARENT, tp.as_str());
    }
    job.validate()?;
    Ok(job)
}

/// A refusal of a flag's value, named after the flag.
fn flag_error(flag: &str, e: hopper::Error) -> anyhow::Error {
    match e {
        hopper::Error::InvalidInput(m) => anyhow::anyhow!("{flag}: {m}"),
        other => anyhow::anyhow!("{flag}: {other}"),
    }
}

/// `hopper enqueue`: inserts the job built by [`new_job`] and prints its id; when its
/// unique key was taken, says so: `duplicate of <id>` (or `replaced <id>`), and under
/// `--json` the `outcome` (`inserted`, `duplicate`, `replaced`) as the HTTP API gives it.
pub async fn enqueue(backend: &Arc<dyn Backend>, job: NewJob, json: bool) -> anyhow::Result<()> {
    let client = crate::telemetry::client(backend.clone());
    let own = job.id;
    let outcome = if job.needs_upsert() {
        client.upsert(job).await?
    } else {
        client.insert(job).await?;
        InsertOutcome::Inserted
    };
    let id = outcome.id(own);
    let name = match outcome {
        InsertOutcome::Inserted => "inserted",
        InsertOutcome::Duplicate { .. } => "duplicate",
        InsertOutcome::Replaced { .. } => "replaced",
    };
    if json {
        return print_json(&json!({ "id": id, "outcome": name }));
    }
    match outcome {
        InsertOutcome::Inserted => outln!("{id}"),
        InsertOutcome::Duplicate { .. } => outln!("duplicate of {id}"),
        InsertOutcome::Replaced { .. } => outln!("replaced {id}"),
    }
    Ok(())
}

/// A `hopper jobs …` command with its input parsed.
#[derive(Debug)]
pub enum JobsAction {
    /// List jobs matching the filters.
    List(JobListParams),
    /// Show one job.
    Show(JobId),
    /// Retry one failed or cancelled job.
    Retry(JobId),
    /// Cancel one unfinished job.
    Cancel(JobId),
    /// Delete finished jobs past their retention.
    Prune(crate::prune::Prune),
}

impl JobsAction {
    /// Parses ids, states and names, refusing malformed ones (an empty `--queue` too,
    /// which would list nothing as if the queue merely had no jobs).
    pub fn parse(cmd: JobsCommand) -> anyhow::Result<Self> {
        Ok(match cmd {
            JobsCommand::List {
                queue,
                state,
                kind,
                group,
                meta,
                limit,
            } => {
                for (what, name) in [("queue", &queue), ("kind", &kind), ("group", &group)] {
                    if let Some(name) = name {
                        hopper::core::job::validate_name(what, name)?;
                    }
                }
                let meta = meta
                    .as_deref()
                    .map(hopper::core::meta::parse_meta_filter)
                    .transpose()
                    .map_err(|e| flag_error("--meta", e))?;
                JobsAction::List(JobListParams {
                    queue,
                    state: state.as_deref().map(JobState::from_str).transpose()?,
                    kind,
                    group,
                    meta,
                    before: None,
                    limit,
                })
            }
            JobsCommand::Show { id } => JobsAction::Show(parse_id(&id)?),
            JobsCommand::Retry { id } => JobsAction::Retry(parse_id(&id)?),
            JobsCommand::Cancel { id } => JobsAction::Cancel(parse_id(&id)?),
            JobsCommand::Prune(args) => JobsAction::Prune(crate::prune::Prune::parse(&args)?),
        })
    }
}

/// `hopper jobs …`.
pub async fn jobs(
    backend: &Arc<dyn Backend>,
    action: JobsAction,
    json: bool,
) -> anyhow::Result<()> {
    let client = hopper::Client::new(backend.clone());
    match action {
        JobsAction::List(params) => {
            let jobs = client.jobs(&params).await?;
            if json {
                print_json(&jobs)
            } else {
                print_job_table(&jobs)
            }
        }
        JobsAction::Show(id) => {
            let job = client
                .job(id)
                .await?
                .ok_or_else(|| hopper::Error::NotFound(format!("job {id}")))?;
            // A `hopper serve` older than the `job_logs` request cannot send them: the job
            // is shown without.
            let logs = match client.job_logs(id).await {
                Err(hopper::Error::Unsupported(_)) => Vec::new(),
                other => other?,
            };
            if json {
                let mut value = serde_json::to_value(&job)?;
                value["logs"] = serde_json::to_value(&logs)?;
                print_json(&value)
            } else {
                print_job(&job)?;
                print_logs(&logs)
            }
        }
        JobsAction::Retry(id) => print_new_state(&client.retry(id).await?, json),
        JobsAction::Cancel(id) => print_new_state(&client.cancel(id).await?, json),
        JobsAction::Prune(prune) => prune.run(backend, json).await,
    }
}

/// `hopper stats`: counts by queue and state, and the oldest available job's age.
pub async fn stats(backend: &Arc<dyn Backend>, json: bool) -> anyhow::Result<()> {
    let queues = backend.queue_stats().await?;
    if json {
        // A struct rather than `json!`, so the fields keep their documented order.
        #[derive(serde::Serialize)]
        struct Stats<'a> {
            queues: &'a [QueueStats],
        }
        return print_json(&Stats { queues: &queues });
    }
    if queues.is_empty() {
        outln!("no jobs");
        return Ok(());
    }
    let rows = queues.iter().map(stats_row).collect();
    print_table(
        "",
        &[
            "QUEUE",
            "AVAILABLE",
            "SCHEDULED",
            "RUNNING",
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "OLDEST AVAILABLE",
        ],
        rows,
    )
}

pub(crate) fn stats_row(s: &QueueStats) -> Vec<String> {
    let oldest = if s.available == 0 {
        "-".to_owned()
    } else {
        format_age(s.oldest_available_secs)
    };
    vec![
        s.queue.clone(),
        s.available.to_string(),
        s.scheduled.to_string(),
        s.running.to_string(),
        s.completed.to_string(),
        s.failed.to_string(),
        s.cancelled.to_string(),
        oldest,
    ]
}

/// The job arguments: inline JSON, `@path` for a file, or `-` for stdin. A file or stdin is
/// read only just past [`hopper::core::MAX_ARGS_BYTES`] (`@/dev/zero` would never end). An
/// integer no 64-bit integer holds is refused, not stored rounded
/// ([`hopper::core::json_numbers`]).
fn read_args(spec: &str) -> anyhow::Result<serde_json::Value> {
    let (text, source) = if spec == "-" {
        let text = read_bounded(std::io::stdin().lock(), "stdin")?;
        (text, "stdin".to_owned())
    } else if let Some(path) = spec.strip_prefix('@') {
        let file =
            std::fs::File::open(path).with_context(|| format!("cannot read --args from {path}"))?;
        (read_bounded(file, path)?, path.to_owned())
    } else {
        (spec.to_owned(), "--args".to_owned())
    };
    let args =
        serde_json::from_str(&text).with_context(|| format!("{source} is not valid JSON"))?;
    hopper::core::json_numbers::check_integers(&text, "args")
        .map_err(|why| anyhow::anyhow!("{source}: {why}"))?;
    Ok(args)
}

/// `input` to its end as text, refused as soon as it passes the arguments' limit:
/// at most one byte more than the limit is read.
fn read_bounded(input: impl Read, source: &str) -> anyhow::Result<String> {
    let limit = hopper::core::MAX_ARGS_BYTES;
    let mut bytes = Vec::new();
    input
        .take(u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read --args from {source}"))?;
    if bytes.len() > limit {
        anyhow::bail!("--args from {source} is over the limit of {limit} bytes for job arguments");
    }
    String::from_utf8(bytes).with_context(|| format!("{source} is not valid JSON (not UTF-8)"))
}

pub(crate) use hopper_cli::duration::parse_duration;

fn parse_id(text: &str) -> anyhow::Result<JobId> {
    JobId::parse_str(text).map_err(|_| {
        anyhow::anyhow!(
            "invalid job id {text:?}: expected a UUID such as 0192f5c4-7d2e-7b61-9a4c-3f0e8d2b1a55"
        )
    })
}

pub(crate) fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

fn print_new_state(job: &JobRecord, json: bool) -> anyhow::Result<()> {
    if json {
        print_json(job)
    } else {
        outln!("job {} is now {}", job.id, job.state);
        Ok(())
    }
}

fn print_job_table(jobs: &[JobRecord]) -> anyhow::Result<()> {
    if jobs.is_empty() {
        outln!("no jobs");
        return Ok(());
    }
    let rows = jobs
        .iter()
        .map(|j| {
            vec![
                j.id.to_string(),
                j.queue.clone(),
                j.kind.clone(),
                j.group.clone().unwrap_or_else(|| "-".to_owned()),
                j.state.to_string(),
                j.priority.to_string(),
                format!("{}/{}", j.attempt - j.uncounted, j.max_attempts),
                time(j.run_at),
            ]
        })
        .collect();
    print_table(
        "",
        &[
            "ID", "QUEUE", "KIND", "GROUP", "STATE", "PRIORITY", "ATTEMPTS", "RUN AT",
        ],
        rows,
    )
}

/// Prints each attempt's log lines, and a marker where lines were dropped.
fn print_logs(logs: &[hopper::AttemptLog]) -> anyhow::Result<()> {
    for log in logs {
        outln!("log of attempt {}:", log.attempt);
        for line in &log.lines {
            // JSON escapes C0 controls, not C1 controls nor bidirectional overrides.
            let fields = if line.fields.is_empty() {
                String::new()
            } else {
                let json = serde_json::Value::Object(line.fields.clone()).to_string();
                format!(" {}", printable(&json))
            };
            outln!(
                "  {} {:<5} {}{fields}",
                time(line.at),
                line.level,
                printable(&line.message)
            );
        }
        if log.dropped > 0 {
            outln!(
                "  [truncated: {} more lines dropped past the {}-byte limit of an attempt]",
                log.dropped,
                hopper::core::job_log::MAX_ATTEMPT_LOG_BYTES
            );
        }
    }
    Ok(())
}

fn print_job(j: &JobRecord) -> anyhow::Result<()> {
    let field = |name: &str, value: String| -> std::io::Result<()> {
        let value = printable(&value);
        crate::output::write_stdout(format_args!("{name:<14}{value}\n"))
    };
    let optional = |t: Option<DateTime<Utc>>| t.map_or_else(|| "-".to_owned(), time);
    field("id", j.id.to_string())?;
    field("queue", j.queue.clone())?;
    field("kind", j.kind.clone())?;
    let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
    field("group", or_dash(&j.group))?;
    field("unique key", or_dash(&j.unique_key))?;
    field("state", j.state.to_string())?;
    field("priority", format!("{} ({})", j.priority, j.priority.0))?;
    field("args", j.args.to_string())?;
    field("meta", j.meta.to_string())?;
    field("run at", time(j.run_at))?;
    field(
        "attempts",
        format!(
            "{} of {} used ({} claims in all)",
            j.attempt - j.uncounted,
            j.max_attempts,
            j.attempt
        ),
    )?;
    field("timeout", format_ms(i64::from(j.timeout_ms)))?;
    field(
        "node",
        j.node_id.map_or_else(|| "-".to_owned(), |n| n.to_string()),
    )?;
    field("lease expires", optional(j.lease_expires_at))?;
    field("created at", time(j.created_at))?;
    field("attempted at", optional(j.attempted_at))?;
    field("finished at", optional(j.finished_at))?;
    field(
        "duration",
        j.duration_ms.map_or_else(|| "-".to_owned(), format_ms),
    )?;
    if j.errors.is_empty() {
        field("errors", "none".to_owned())?;
        return Ok(());
    }
    outln!("errors ({}):", j.errors.len());
    let rows = j
        .errors
        .iter()
        .map(|e| {
            vec![
                e.attempt.to_string(),
                time(e.at),
                e.duration_ms.map_or_else(|| "-".to_owned(), format_ms),
                e.error.clone(),
            ]
        })
        .collect();
    print_table("  ", &["ATTEMPT", "AT", "DURATION", "ERROR"], rows)
}

/// Prints `rows` under `headers`, each column as wide as its widest cell, every line
/// starting with `indent`; the cells [`printable`].
pub(crate) fn print_table(
    indent: &str,
    headers: &[&str],
    rows: Vec<Vec<String>>,
) -> anyhow::Result<()> {
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|row| row.iter().map(|c| printable(c).into_owned()).collect())
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| -> anyhow::Result<()> {
        let mut out = indent.to_owned();
        for (cell, width) in cells.iter().zip(&widths) {
            out.push_str(&format!("{cell:<width$}  "));
        }
        outln!("{}", out.trim_end());
        Ok(())
    };
    line(&headers.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>())?;
    for row in &rows {
        line(row)?;
    }
    Ok(())
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn format_ms(ms: i64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        humantime::format_duration(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
            .to_string()
    }
}

fn format_age(secs: f64) -> String {
    if secs < 1.0 {
        format!("{:.0} ms", secs.max(0.0) * 1000.0)
    } else {
        humantime::format_duration(Duration::from_secs(secs as u64)).to_string()
    }
}
