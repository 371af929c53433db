//! `hopper bench`.

use std::sync::Arc;

use hopper::Backend;

use crate::cli::BenchArgs;

pub async fn run(_backend: Arc<dyn Backend>, _args: BenchArgs, _json: bool) -> anyhow::Result<()> {
    anyhow::bail!("bench: not built yet")
}
