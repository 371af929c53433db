//! The client's scheduling and control methods: inserts that report what became of unique
//! jobs, queue settings (pause, resume, global limits), and periodic jobs. See
//! `docs/scheduling.md`.

use hopper_core::{
    CronEntry, Error, InsertOutcome, NewJob, QueueSettings, QueueUpdate, RateLimit, Result,
};

use crate::Client;
use crate::spans;

impl Client {
    /// Inserts a job honouring its group and unique key, and says what became of it:
    /// inserted, a duplicate of a job holding its key, or that job replaced by it.
    pub async fn upsert(&self, job: NewJob) -> Result<InsertOutcome> {
        // One job through `upsert_many`: its span and middleware.
        let outcomes = self.upsert_many(std::slice::from_ref(&job)).await?;
        Ok(outcomes
            .into_iter()
            .next()
            .unwrap_or(InsertOutcome::Inserted))
    }

    /// Inserts many jobs in one transaction (all or nothing), honouring groups and unique
    /// keys; one outcome per job, in order. Jobs with unique keys go through
    /// `INSERT … ON CONFLICT`, the others through binary COPY.
    pub async fn upsert_many(&self, jobs: &[NewJob]) -> Result<Vec<InsertOutcome>> {
        let upsert = async {
            let jobs = self.prepared(jobs).await?;
            self.upsert_prepared(&jobs).await
        };
        spans::seam(self.enqueue_span(jobs), upsert, spans::uncounted).await
    }

    /// [`Client::upsert_many`] once the middleware ran.
    pub(crate) async fn upsert_prepared(&self, jobs: &[NewJob]) -> Result<Vec<InsertOutcome>> {
        for job in jobs {
            job.validate()?;
        }
        let outcomes = match self.backend().scheduling() {
            Some(store) => store.job_upsert_many(jobs).await?,
            None if jobs.iter().any(NewJob::needs_upsert) => {
                return Err(Error::Unsupported(format!(
                    "group keys and unique keys ({} backend)",
                    self.backend().name()
                )));
            }
            None => {
                self.backend().job_insert_many(jobs).await?;
                vec![InsertOutcome::Inserted; jobs.len()]
            }
        };
        for (job, outcome) in jobs.iter().zip(&outcomes) {
            if *outcome == InsertOutcome::Inserted {
                crate::metrics::enqueued(&job.queue, &job.kind, 1);
            }
        }
        Ok(outcomes)
    }

    /// Every queue that has settings.
    pub async fn queues(&self) -> Result<Vec<QueueSettings>> {
        self.backend().queue_list().await
    }

    /// Changes a queue's settings; every node sees the change within a second.
    pub async fn update_queue(&self, update: &QueueUpdate) -> Result<QueueSettings> {
        update.validate()?;
        self.backend().queue_update(update).await
    }

    /// Stops every node from claiming jobs of `queue` (within a second; usually at once).
    /// Jobs already running finish; new jobs are still accepted.
    pub async fn pause(&self, queue: &str) -> Result<QueueSettings> {
        self.update_queue(&QueueUpdate {
            paused: Some(true),
            ..QueueUpdate::new(queue)
        })
        .await
    }

    /// Lets nodes claim jobs of `queue` again.
    pub async fn resume(&self, queue: &str) -> Result<QueueSettings> {
        self.update_queue(&QueueUpdate {
            paused: Some(false),
            ..QueueUpdate::new(queue)
        })
        .await
    }

    /// Sets (or with `None` removes) the global concurrency and rate limits of `queue`.
    pub async fn limit(
        &self,
        queue: &str,
        max_running: Option<u32>,
        rate: Option<RateLimit>,
    ) -> Result<QueueSettings> {
        self.update_queue(&QueueUpdate {
            max_running: Some(max_running),
            rate: Some(rate),
            ..QueueUpdate::new(queue)
        })
        .await
    }

    /// Every registered periodic job.
    pub async fn cron_jobs(&self) -> Result<Vec<CronEntry>> {
        self.backend().cron_list().await
    }
}
