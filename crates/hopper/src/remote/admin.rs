//! The admin calls of the storage seam over the server's admin requests (`list_jobs`,
//! `retry`, `delete`, `retry_failed`, `clear`, `queue_stats`, `list_queues`,
//! `update_queue`, `list_cron`), so a `Client` on a `tcp://` URL lists, retries, deletes
//! and pauses as one on the database does; and its statistics (`list_nodes`, `job_stats`).
//! The payloads convert both ways in `hopper_protocol::convert`.

use hopper_core::{
    CronEntry, Error, JobId, JobRecord, JobRetryManyParams, JobSearchParams, JobStatsParams,
    MinuteStats, NodeCursor, NodeListParams, NodePage, NodeRecord, QueueSettings, QueueStats,
    QueueUpdate, Result, StatsStore,
};
use hopper_protocol::{JobFilter, MAX_STATS_MINUTES, QueueChange, Reply, Request};

use super::{RemoteBackend, predates, unexpected};

impl RemoteBackend {
    /// `list_jobs`, paged on while the server cuts its replies to its frame size (its
    /// `next_before`), until the jobs asked for are all there or none are left.
    pub(super) async fn search(&self, params: &JobSearchParams) -> Result<Vec<JobRecord>> {
        let mut page = params.clone();
        let mut found = Vec::new();
        loop {
            let filter = JobFilter::from(&page);
            let (jobs, next_before) = match self
                .request(|req| Request::ListJobs { req, filter })
                .await?
            {
                Reply::Jobs {
                    jobs, next_before, ..
                } => (jobs, next_before),
                other => return Err(unexpected(&other)),
            };
            let got = u32::try_from(jobs.len()).unwrap_or(u32::MAX);
            for job in jobs {
                found.push(JobRecord::try_from(job)?);
            }
            match next_before {
                Some(cursor) if got > 0 && got < page.list.limit => {
                    page.list.before = Some(cursor);
                    page.list.limit -= got;
                }
                _ => return Ok(found),
            }
        }
    }

    pub(super) async fn retry(&self, id: JobId) -> Result<JobRecord> {
        match self.request(|req| Request::Retry { req, id }).await? {
            Reply::Job { job, .. } => JobRecord::try_from(job),
            other => Err(unexpected(&other)),
        }
    }

    pub(super) async fn count(&self, request: impl FnOnce(u64) -> Request) -> Result<u64> {
        match self.request(request).await? {
            Reply::Count { count, .. } => Ok(count),
            other => Err(unexpected(&other)),
        }
    }

    pub(super) async fn delete(&self, id: JobId) -> Result<()> {
        self.count(|req| Request::Delete { req, id })
            .await
            .map(drop)
    }

    pub(super) async fn retry_failed(&self, params: &JobRetryManyParams) -> Result<u64> {
        let (queue, kind) = (params.queue.clone(), params.kind.clone());
        self.count(|req| Request::RetryFailed { req, queue, kind })
            .await
    }

    pub(super) async fn stats(&self) -> Result<Vec<QueueStats>> {
        match self.request(|req| Request::QueueStats { req }).await? {
            Reply::Stats { queues, .. } => Ok(queues.into_iter().map(QueueStats::from).collect()),
            other => Err(unexpected(&other)),
        }
    }

    pub(super) async fn queues(&self) -> Result<Vec<QueueSettings>> {
        match self.request(|req| Request::ListQueues { req }).await? {
            Reply::Queues { queues, .. } => {
                Ok(queues.into_iter().map(QueueSettings::from).collect())
            }
            other => Err(unexpected(&other)),
        }
    }

    pub(super) async fn update_queue(&self, update: &QueueUpdate) -> Result<QueueSettings> {
        update.validate()?;
        let update = QueueChange::from(update);
        match self
            .request(|req| Request::UpdateQueue { req, update })
            .await?
        {
            Reply::Queue { queue, .. } => Ok(QueueSettings::from(queue)),
            other => Err(unexpected(&other)),
        }
    }

    pub(super) async fn cron(&self) -> Result<Vec<CronEntry>> {
        match self.request(|req| Request::ListCron { req }).await? {
            Reply::Cron { entries, .. } => Ok(entries.into_iter().map(CronEntry::from).collect()),
            other => Err(unexpected(&other)),
        }
    }
}

#[async_trait::async_trait]
impl StatsStore for RemoteBackend {
    /// The window is asked for in whole minutes (rounded up), one to a day.
    async fn job_stats_per_minute(&self, params: &JobStatsParams) -> Result<Vec<MinuteStats>> {
        let secs = params.window.as_secs() + u64::from(params.window.subsec_nanos() > 0);
        let minutes = secs.div_ceil(60);
        let minutes = u32::try_from(minutes)
            .ok()
            .filter(|m| (1..=MAX_STATS_MINUTES).contains(m))
            .ok_or_else(|| {
                Error::InvalidInput(format!(
                    "a statistics window is from one minute to {MAX_STATS_MINUTES} minutes, got {:?}",
                    params.window
                ))
            })?;
        let reply = self.request(|req| Request::JobStats { req, minutes });
        match reply.await.map_err(|e| predates(e, "job_stats"))? {
            Reply::Minutes { minutes, .. } => Ok(minutes),
            other => Err(unexpected(&other)),
        }
    }

    /// One request. A server that predates paging answers every node, with no next page.
    async fn node_list(&self, params: &NodeListParams) -> Result<NodePage> {
        let before = params.before.as_ref().map(ToString::to_string);
        let limit = Some(params.limit);
        let reply = self.request(|req| Request::ListNodes { req, before, limit });
        match reply.await.map_err(|e| predates(e, "list_nodes"))? {
            Reply::Nodes {
                nodes, next_before, ..
            } => Ok(NodePage {
                nodes: nodes.into_iter().map(NodeRecord::from).collect(),
                next_before: next_before
                    .map(|cursor| NodeCursor::parse("next_before", &cursor))
                    .transpose()?,
            }),
            other => Err(unexpected(&other)),
        }
    }
}
