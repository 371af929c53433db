//! The admin requests (`list_jobs`, `retry`, `delete`, `retry_failed`, `clear`,
//! `queue_stats`, `list_queues`, `update_queue`, `list_cron`, `list_nodes`, `job_stats`):
//! each is one backend call, run in a task like every other database request, and its
//! result in wire types (`hopper_protocol::convert`). The whole-table readings
//! (`queue_stats`, `job_stats`) go through the server's shared [`Readings`], so that a
//! flood of them cannot keep the database busy: an expensive reading is served again for a
//! while, and requests that arrive while one is taken wait for it.

use std::time::Duration;

use hopper::readings::Readings;
use hopper_core::backend::{JobDeleteParams, JobRetryParams};
use hopper_core::{Backend, Error, JobStatsParams, QueueUpdate, Result, StatsStore};
use hopper_protocol::convert;
use hopper_protocol::{CronInfo, JobInfo, NodeInfo, QueueCounts, QueueInfo, Reply, Request};

/// Runs one admin request.
/// `list_jobs` is cut to `max_frame` (`hopper_protocol::jobs_reply`).
pub(crate) async fn handle(
    backend: std::sync::Arc<dyn Backend>,
    readings: Readings,
    max_frame: usize,
    request: Request,
) -> Result<Reply> {
    Ok(match request {
        Request::ListJobs { req, filter } => {
            let jobs = backend.job_search(&filter.try_into()?).await?;
            let jobs = jobs.into_iter().map(JobInfo::from).collect();
            hopper_protocol::jobs_reply(req, jobs, max_frame)
        }
        Request::Retry { req, id } => Reply::Job {
            req,
            job: JobInfo::from(backend.job_retry(&JobRetryParams { id }).await?),
        },
        Request::Delete { req, id } => {
            backend.job_delete(&JobDeleteParams { id }).await?;
            Reply::Count { req, count: 1 }
        }
        Request::RetryFailed { req, queue, kind } => Reply::Count {
            req,
            count: backend
                .job_retry_many(&convert::retry_failed_params(queue, kind)?)
                .await?,
        },
        Request::Clear { req, queue } => Reply::Count {
            req,
            count: backend.job_clear(&convert::clear_params(queue)?).await?,
        },
        Request::QueueStats { req } => Reply::Stats {
            req,
            queues: readings
                .queues(backend.queue_stats())
                .await?
                .into_iter()
                .map(QueueCounts::from)
                .collect(),
        },
        Request::ListQueues { req } => Reply::Queues {
            req,
            queues: backend
                .queue_list()
                .await?
                .into_iter()
                .map(QueueInfo::from)
                .collect(),
        },
        Request::UpdateQueue { req, update } => {
            let update = QueueUpdate::try_from(update)?;
            Reply::Queue {
                req,
                queue: QueueInfo::from(backend.queue_update(&update).await?),
            }
        }
        Request::ListCron { req } => Reply::Cron {
            req,
            entries: backend
                .cron_list()
                .await?
                .into_iter()
                .map(CronInfo::from)
                .collect(),
        },
        Request::ListNodes { req, before, limit } => {
            let params = convert::node_list_params(before, limit)?;
            let page = stats_store(&*backend, "listing nodes")?
                .node_list(&params)
                .await?;
            Reply::Nodes {
                req,
                nodes: page.nodes.into_iter().map(NodeInfo::from).collect(),
                next_before: page.next_before.map(|cursor| cursor.to_string()),
            }
        }
        Request::JobStats { req, minutes } => {
            if !(1..=hopper_protocol::MAX_STATS_MINUTES).contains(&minutes) {
                return Err(Error::InvalidInput(format!(
                    "minutes must be from 1 to {}, got {minutes}",
                    hopper_protocol::MAX_STATS_MINUTES
                )));
            }
            let params = JobStatsParams {
                window: Duration::from_secs(u64::from(minutes) * 60),
            };
            let store = stats_store(&*backend, "per-minute job statistics")?;
            Reply::Minutes {
                req,
                minutes: readings
                    .minutes(minutes, store.job_stats_per_minute(&params))
                    .await?,
            }
        }
        other => {
            return Err(Error::InvalidInput(format!(
                "not an admin request: {other:?}"
            )));
        }
    })
}

/// The backend's statistics, or `Unsupported` naming what needed them.
fn stats_store<'a>(backend: &'a dyn Backend, what: &str) -> Result<&'a dyn StatsStore> {
    backend
        .stats()
        .ok_or_else(|| Error::Unsupported(format!("{what} ({} backend)", backend.name())))
}
