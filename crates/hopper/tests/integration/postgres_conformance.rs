//! The storage conformance suite (`hopper-conformance`) run against PostgreSQL: every case
//! gets its own migrated schema whose backend reads a [`TestClock`], and holds job rows
//! with `SELECT … FOR UPDATE` on a connection of its own where a case holds one.

use std::sync::Arc;

use anyhow::Context;
use futures_util::future::BoxFuture;
use hopper::testing::TestDatabase;
use hopper::{JobId, TestClock};
use hopper_conformance::{Harness, JobHold, conformance_suite};

async fn postgres() -> anyhow::Result<Harness> {
    let clock = TestClock::new(hopper_conformance::t0());
    let db = TestDatabase::with_clock(Arc::new(clock.clone())).await?;
    Ok(Harness::new(db.backend(), clock, db)
        .await?
        .with_job_holds(hold_job))
}

fn hold_job(h: &Harness, id: JobId) -> BoxFuture<'_, anyhow::Result<JobHold>> {
    Box::pin(async move {
        let db = h
            .store::<TestDatabase>()
            .context("a TestDatabase harness")?;
        crate::support::hold_job(db, id).await
    })
}

conformance_suite!(postgres);
