//! Admin commands: migrate, enqueue, jobs, stats.

use std::sync::Arc;

use hopper::Backend;

use crate::cli::{EnqueueArgs, JobsCommand};

pub async fn migrate(backend: &Arc<dyn Backend>, _json: bool) -> anyhow::Result<()> {
    backend.migrate().await?;
    Ok(())
}

pub async fn enqueue(
    _backend: &Arc<dyn Backend>,
    _args: EnqueueArgs,
    _json: bool,
) -> anyhow::Result<()> {
    anyhow::bail!("enqueue: not built yet")
}

pub async fn jobs(
    _backend: &Arc<dyn Backend>,
    _cmd: JobsCommand,
    _json: bool,
) -> anyhow::Result<()> {
    anyhow::bail!("jobs: not built yet")
}

pub async fn stats(_backend: &Arc<dyn Backend>, _json: bool) -> anyhow::Result<()> {
    anyhow::bail!("stats: not built yet")
}
