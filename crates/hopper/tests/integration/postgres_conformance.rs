//! The storage conformance suite (`hopper-conformance`) run against PostgreSQL: every case
//! gets its own migrated schema whose backend reads a [`TestClock`].

use std::sync::Arc;

use hopper::TestClock;
use hopper::testing::TestDatabase;
use hopper_conformance::{Harness, conformance_suite};

async fn postgres() -> anyhow::Result<Harness> {
    let clock = TestClock::new(hopper_conformance::t0());
    let db = TestDatabase::with_clock(Arc::new(clock.clone())).await?;
    Harness::new(db.backend(), clock, db).await
}

conformance_suite!(postgres);
