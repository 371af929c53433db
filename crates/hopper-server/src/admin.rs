//! The admin requests (`list_jobs`, `retry`, `delete`, `retry_failed`, `clear`,
//! `queue_stats`, `list_queues`, `update_queue`, `list_cron`, `list_nodes`, `job_stats`):
//! each is one backend call,
//! run in a task like every other database request, and its result in wire types.

use std::time::Duration;

use hopper_core::backend::{JobClearParams, JobDeleteParams, JobRetryParams};
use hopper_core::{
    Backend, CronEntry, Error, JobListParams, JobRetryManyParams, JobSearchParams, JobStatsParams,
    NodeRecord, QueueSettings, QueueStats, QueueUpdate, RateLimit, Result, StatsStore,
};
use hopper_protocol::{
    CronInfo, JobFilter, JobInfo, NodeInfo, QueueChange, QueueCounts, QueueInfo, RateInfo, Reply,
    Request,
};

/// Most jobs one `list_jobs` returns.
const MAX_LIST: u32 = 1000;

/// Runs one admin request.
pub(crate) async fn handle(
    backend: std::sync::Arc<dyn Backend>,
    request: Request,
) -> Result<Reply> {
    Ok(match request {
        Request::ListJobs { req, filter } => {
            let jobs = backend.job_search(&search(filter)?).await?;
            Reply::Jobs {
                req,
                jobs: jobs.into_iter().map(JobInfo::from).collect(),
            }
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
                .job_retry_many(&JobRetryManyParams { queue, kind })
                .await?,
        },
        Request::Clear { req, queue } => Reply::Count {
            req,
            count: backend.job_clear(&JobClearParams { queue }).await?,
        },
        Request::QueueStats { req } => Reply::Stats {
            req,
            queues: backend
                .queue_stats()
                .await?
                .into_iter()
                .map(counts)
                .collect(),
        },
        Request::ListQueues { req } => Reply::Queues {
            req,
            queues: backend
                .queue_list()
                .await?
                .into_iter()
                .map(queue_info)
                .collect(),
        },
        Request::UpdateQueue { req, update } => {
            let update = queue_update(update);
            update.validate()?;
            Reply::Queue {
                req,
                queue: queue_info(backend.queue_update(&update).await?),
            }
        }
        Request::ListCron { req } => Reply::Cron {
            req,
            entries: backend
                .cron_list()
                .await?
                .into_iter()
                .map(cron_info)
                .collect(),
        },
        Request::ListNodes { req } => Reply::Nodes {
            req,
            nodes: stats_store(&*backend, "listing nodes")?
                .node_list()
                .await?
                .into_iter()
                .map(node_info)
                .collect(),
        },
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
            Reply::Minutes {
                req,
                minutes: stats_store(&*backend, "per-minute job statistics")?
                    .job_stats_per_minute(&params)
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

fn node_info(node: NodeRecord) -> NodeInfo {
    NodeInfo {
        id: node.info.id,
        name: node.info.name,
        queues: node.info.queues,
        concurrency: node.info.concurrency,
        started_at: node.started_at,
        heartbeat_at: node.heartbeat_at,
    }
}

fn search(filter: JobFilter) -> Result<JobSearchParams> {
    let limit = filter.limit.unwrap_or(20);
    if limit == 0 || limit > MAX_LIST {
        return Err(Error::InvalidInput(format!(
            "limit must be from 1 to {MAX_LIST}, got {limit}"
        )));
    }
    let state = filter.state.as_deref().map(str::parse).transpose()?;
    Ok(JobSearchParams {
        list: JobListParams {
            queue: filter.queue,
            state,
            kind: filter.kind,
            before: filter.before,
            limit,
            ..JobListParams::default()
        },
        created_after: filter.created_after,
        created_before: filter.created_before,
    })
}

fn counts(s: QueueStats) -> QueueCounts {
    QueueCounts {
        queue: s.queue,
        available: s.available,
        scheduled: s.scheduled,
        running: s.running,
        completed: s.completed,
        failed: s.failed,
        cancelled: s.cancelled,
        oldest_available_secs: s.oldest_available_secs,
    }
}

fn queue_info(s: QueueSettings) -> QueueInfo {
    QueueInfo {
        queue: s.queue,
        paused: s.paused,
        grouped: s.grouped,
        max_running: s.max_running,
        max_running_per_group: s.max_running_per_group,
        rate: s.rate.map(|r| RateInfo {
            jobs: r.jobs,
            per_ms: u64::try_from(r.per.as_millis()).unwrap_or(u64::MAX),
            burst: Some(r.burst),
        }),
    }
}

fn queue_update(c: QueueChange) -> QueueUpdate {
    QueueUpdate {
        queue: c.queue,
        paused: c.paused,
        max_running: c.max_running,
        max_running_per_group: c.max_running_per_group,
        rate: c.rate.map(|r| {
            r.map(|r| {
                let mut limit = RateLimit::new(r.jobs, Duration::from_millis(r.per_ms));
                if let Some(burst) = r.burst {
                    limit.burst = burst;
                }
                limit
            })
        }),
    }
}

fn cron_info(e: CronEntry) -> CronInfo {
    CronInfo {
        name: e.name,
        schedule: e.schedule,
        timezone: e.timezone,
        queue: e.queue,
        kind: e.kind,
        args: e.args,
        priority: e.priority.0,
        max_attempts: e.max_attempts,
        timeout_ms: e.timeout_ms,
        catch_up: e.catch_up,
        next_run_at: e.next_run_at,
        last_run_at: e.last_run_at,
        last_job_id: e.last_job_id,
    }
}
