//! `hopper jobs prune`: deletes finished jobs past their retention now, in batches, the
//! way the runtime's pruner does (`RuntimeConfig::housekeeping`: `completed_retention` and the rest). For
//! a one-off clean-up, or for deployments that run no runtime with pruning on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hopper::backend::{Backend, JobPruneOutcome, JobPruneParams};
use indicatif::{ProgressBar, ProgressStyle};

use crate::admin::{parse_duration, print_json};
use crate::cli::PruneArgs;
use crate::output::outln;

/// A prune with its input checked.
#[derive(Debug)]
pub struct Prune {
    params: JobPruneParams,
    pause: Duration,
}

impl Prune {
    /// Parses the durations, refusing malformed ones and those past ten years
    /// ([`hopper_core::limits::MAX_DURATION`], as the runtime's `Housekeeping::check`).
    pub fn parse(args: &PruneArgs) -> anyhow::Result<Self> {
        let duration = |flag: &str, text: &str| -> anyhow::Result<Duration> {
            Ok(hopper_core::limits::check_duration(
                flag,
                parse_duration(flag, text)?,
            )?)
        };
        Ok(Prune {
            params: JobPruneParams {
                completed_retention: duration(
                    "--completed-older-than",
                    &args.completed_older_than,
                )?,
                failed_retention: duration("--failed-older-than", &args.failed_older_than)?,
                limit: args.batch,
                dry_run: args.dry_run,
                after: None,
            },
            pause: duration("--pause", &args.pause)?,
        })
    }

    /// Runs batches until one comes back short; prints what was (or would be) deleted.
    pub async fn run(mut self, backend: &Arc<dyn Backend>, json: bool) -> anyhow::Result<()> {
        let Some(store) = backend.maintenance() else {
            anyhow::bail!("the {} backend does not prune jobs", backend.name());
        };
        let started = Instant::now();
        let mut total = JobPruneOutcome {
            elected: true,
            ..JobPruneOutcome::default()
        };
        let bar = if json || self.params.dry_run {
            ProgressBar::hidden()
        } else {
            let bar = ProgressBar::new_spinner();
            bar.set_style(ProgressStyle::with_template(
                "{spinner} pruned {pos} jobs ({per_sec})",
            )?);
            bar
        };
        let mut statements = 0u64;
        loop {
            let statement = Instant::now();
            let outcome = store.job_prune(&self.params).await?;
            let took = statement.elapsed();
            statements += 1;
            total.completed += outcome.completed;
            total.cancelled += outcome.cancelled;
            total.failed += outcome.failed;
            bar.inc(outcome.total());
            if !outcome.elected {
                bar.finish_and_clear();
                anyhow::bail!(
                    "another node is pruning right now (after {} jobs here); try again later",
                    total.total()
                );
            }
            if self.params.dry_run || outcome.total() < u64::from(self.params.limit) {
                break;
            }
            // The next batch reads on past this one's last job, not again what it kept.
            self.params.after = outcome.last_id;
            // As the runtime's pruner: the pause plus three times the statement's time.
            tokio::time::sleep(self.pause.saturating_add(took.saturating_mul(3))).await;
        }
        bar.finish_and_clear();
        let elapsed = started.elapsed();
        if json {
            return print_json(&serde_json::json!({
                "dry_run": self.params.dry_run,
                "completed": total.completed,
                "cancelled": total.cancelled,
                "failed": total.failed,
                "total": total.total(),
                "statements": statements,
                "elapsed_ms": elapsed.as_millis() as u64,
            }));
        }
        let verb = if self.params.dry_run {
            "would delete"
        } else {
            "deleted"
        };
        outln!(
            "{verb} {} jobs ({} completed, {} cancelled, {} failed) in {:.1}s",
            total.total(),
            total.completed,
            total.cancelled,
            total.failed,
            elapsed.as_secs_f64()
        );
        Ok(())
    }
}
