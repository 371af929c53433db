//! The end of a chaos run: what the queue and the handlers' records say, and the verdict.

use std::fmt;

/// The counts of a chaos run (`sql/report.sql` says how each is worked out).
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Jobs enqueued.
    pub total: i64,
    /// Jobs completed.
    pub completed: i64,
    /// Jobs not completed at the end.
    pub lost: i64,
    /// Jobs the queue marked completed more than once.
    pub double_completed: i64,
    /// Completions written under an attempt other than the job's final one.
    pub misattributed: i64,
    /// Handler runs recorded.
    pub executions: i64,
    /// Runs of an attempt a later attempt superseded (lease expired or released).
    pub superseded: i64,
    /// Extra runs under the lease that completed the job.
    pub same_lease: i64,
    /// Runs of an attempt after the completing one.
    pub after_completion: i64,
    /// Runs of jobs that did not complete.
    pub of_unfinished: i64,
    /// Completed jobs with no recorded run of their completing attempt.
    pub phantom: i64,
    /// Distinct worker processes that ran jobs.
    pub workers: i64,
    /// Superseded runs by the reason hopper recorded for their attempt.
    pub reasons: Vec<(String, i64)>,
}

impl Report {
    /// Reads the report from the run's database.
    pub async fn read(client: &tokio_postgres::Client) -> anyhow::Result<Self> {
        let row = client
            .query_one(include_str!("sql/report.sql"), &[])
            .await?;
        let reasons = client
            .query(include_str!("sql/reasons.sql"), &[])
            .await?
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
            .collect();
        let n = |i: usize| -> anyhow::Result<i64> { Ok(row.try_get::<_, i64>(i)?) };
        Ok(Report {
            total: n(0)?,
            completed: n(1)?,
            lost: n(2)?,
            double_completed: n(3)?,
            misattributed: n(4)?,
            executions: n(5)?,
            superseded: n(6)?,
            same_lease: n(7)?,
            after_completion: n(8)?,
            of_unfinished: n(9)?,
            phantom: n(10)?,
            workers: n(11)?,
            reasons,
        })
    }

    /// Runs beyond one per completed job.
    pub fn extra(&self) -> i64 {
        self.executions - self.completed
    }

    /// Extra runs that no superseded lease explains.
    pub fn unexplained(&self) -> i64 {
        self.same_lease + self.after_completion + self.phantom
    }

    /// True when nothing was lost, nothing completed twice, every extra run explained.
    pub fn passed(&self) -> bool {
        self.total > 0
            && self.lost == 0
            && self.double_completed == 0
            && self.misattributed == 0
            && self.unexplained() == 0
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "jobs total              {}", self.total)?;
        writeln!(f, "completed               {}", self.completed)?;
        writeln!(f, "lost (not completed)    {}", self.lost)?;
        writeln!(f, "double-completed        {}", self.double_completed)?;
        writeln!(f, "completed by a stale attempt {}", self.misattributed)?;
        writeln!(
            f,
            "executions              {} (by {} worker processes)",
            self.executions, self.workers
        )?;
        writeln!(f, "extra executions        {}", self.extra())?;
        writeln!(
            f,
            "  explained (superseded attempt: lease expired or released) {}",
            self.superseded
        )?;
        for (reason, n) in &self.reasons {
            writeln!(f, "    {n:>7}  {reason}")?;
        }
        writeln!(f, "  of jobs not completed {}", self.of_unfinished)?;
        writeln!(f, "unexplained             {}", self.unexplained())?;
        writeln!(f, "  twice under one lease {}", self.same_lease)?;
        writeln!(f, "  after the completion  {}", self.after_completion)?;
        writeln!(f, "  completed, never run  {}", self.phantom)?;
        write!(
            f,
            "verdict                 {}",
            if self.passed() { "PASS" } else { "FAIL" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Report;
    use crate::db::RunDatabase;
    use hopper::backend::Backend;
    use hopper::{PgBackend, PgOptions};

    /// The report finds each kind of fault in a staged run (needs PostgreSQL at
    /// DATABASE_URL; creates and drops a database of its own).
    #[tokio::test]
    async fn finds_lost_double_completed_and_unexplained_runs() -> anyhow::Result<()> {
        let url = hopper::testing::database_url();
        let db = RunDatabase::create(&url, "chaos_test").await?;
        let result = async {
            PgBackend::connect(&db.url, PgOptions::default())
                .await?
                .migrate()
                .await?;
            let client = crate::db::connect(&db.url).await?;
            client.batch_execute(include_str!("sql/setup.sql")).await?;
            client
                .batch_execute(include_str!("sql/test_scenario.sql"))
                .await?;
            Report::read(&client).await
        }
        .await;
        db.finish(false).await?;
        let report = result?;
        assert_eq!((report.total, report.completed, report.lost), (3, 2, 1));
        assert_eq!(report.double_completed, 1);
        assert_eq!(report.executions, 5);
        assert_eq!(report.superseded, 1, "A's first run");
        assert_eq!(report.same_lease, 1, "B's second run");
        assert_eq!(report.of_unfinished, 1, "C's run");
        assert_eq!(report.unexplained(), 1);
        assert!(!report.passed());
        Ok(())
    }
}
