//! The storage conformance suite (`tests/conformance/`) run against PostgreSQL: every case
//! gets its own migrated schema whose backend reads a [`TestClock`].

#[macro_use]
mod conformance;

use std::sync::Arc;

use conformance::Harness;
use hopper::TestClock;
use hopper::testing::TestDatabase;

async fn postgres() -> anyhow::Result<Harness> {
    let clock = TestClock::new(conformance::t0());
    let db = TestDatabase::with_clock(Arc::new(clock.clone())).await?;
    Harness::new(db.backend(), clock, db).await
}

conformance_suite!(postgres);
