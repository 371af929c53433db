//! `hopper demo`.

use std::sync::Arc;

use hopper::Backend;

use crate::cli::DemoArgs;

pub async fn run(_backend: Arc<dyn Backend>, _args: DemoArgs, _json: bool) -> anyhow::Result<()> {
    anyhow::bail!("demo: not built yet")
}
