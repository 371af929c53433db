//! `hopper queues …` and `hopper cron …`: queue settings (pause, resume, global limits)
//! and periodic jobs. See `docs/scheduling.md`.
//!
//! Input is parsed before anything connects ([`QueuesAction::parse`]), like the other
//! admin commands.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::SecondsFormat;
use clap::Subcommand;
use hopper::backend::Backend;
use hopper::{Client, QueueSettings, QueueUpdate, RateLimit};
use serde::Serialize;

use crate::admin::{print_json, print_table};
use crate::output::outln;

/// `hopper queues …`.
#[derive(Debug, Subcommand)]
pub enum QueuesCommand {
    /// Every queue with jobs or settings: paused, limits, counts.
    List,
    /// Stop every node from claiming jobs of a queue (within a second).
    Pause {
        /// The queue.
        name: String,
        /// Pause a queue that has no jobs or settings yet (otherwise refused, so that a
        /// misspelt name is not paused silently).
        #[arg(long)]
        create: bool,
    },
    /// Let nodes claim jobs of a paused queue again.
    Resume {
        /// The queue.
        name: String,
        /// Accept a queue that has no jobs or settings yet.
        #[arg(long)]
        create: bool,
    },
    /// Set global limits of a queue, across every node; `off` removes one.
    Limit {
        /// The queue.
        name: String,
        /// Most jobs running at once (a number, or `off`).
        #[arg(long)]
        concurrency: Option<String>,
        /// Most jobs of one group running at once (a number, or `off`).
        #[arg(long)]
        group_concurrency: Option<String>,
        /// Most jobs started per interval: 100/s, 20/m, 1000/h, 5/10s (or `off`).
        #[arg(long)]
        rate: Option<String>,
        /// Most jobs started at once after a quiet spell (default: a tenth of the rate).
        #[arg(long, requires = "rate")]
        burst: Option<u32>,
        /// Set limits of a queue that has no jobs or settings yet.
        #[arg(long)]
        create: bool,
    },
}

/// `hopper cron …`.
#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// Every registered periodic job, with its next tick.
    List,
}

/// A `hopper queues …` command with its input parsed.
#[derive(Debug)]
pub enum QueuesAction {
    /// List queues.
    List,
    /// Change one queue's settings; `create`: also when the queue is unknown.
    Update {
        /// The change.
        update: QueueUpdate,
        /// Accept a queue with no jobs and no settings.
        create: bool,
    },
}

/// `N` or `off`.
fn parse_limit(flag: &str, value: &str) -> anyhow::Result<Option<u32>> {
    if value == "off" {
        return Ok(None);
    }
    let n: u32 = value
        .parse()
        .map_err(|_| anyhow::anyhow!("{flag} {value:?} must be a number or off"))?;
    anyhow::ensure!(n > 0, "{flag} must be at least 1 (or off)");
    Ok(Some(n))
}

impl QueuesAction {
    /// Parses and validates, refusing bad names and limits before connecting.
    pub fn parse(cmd: QueuesCommand) -> anyhow::Result<Self> {
        let (update, create) = match cmd {
            QueuesCommand::List => return Ok(QueuesAction::List),
            QueuesCommand::Pause { name, create } => (
                QueueUpdate {
                    paused: Some(true),
                    ..QueueUpdate::new(name)
                },
                create,
            ),
            QueuesCommand::Resume { name, create } => (
                QueueUpdate {
                    paused: Some(false),
                    ..QueueUpdate::new(name)
                },
                create,
            ),
            QueuesCommand::Limit {
                name,
                concurrency,
                group_concurrency,
                rate,
                burst,
                create,
            } => {
                anyhow::ensure!(
                    concurrency.is_some() || group_concurrency.is_some() || rate.is_some(),
                    "say which limit to set: --concurrency, --group-concurrency or --rate"
                );
                let rate = match rate.as_deref() {
                    None => None,
                    Some("off") => Some(None),
                    Some(text) => {
                        let mut limit = RateLimit::parse(text)?;
                        if let Some(burst) = burst {
                            limit.burst = burst;
                        }
                        limit.validate()?;
                        Some(Some(limit))
                    }
                };
                let update = QueueUpdate {
                    max_running: concurrency
                        .map(|v| parse_limit("--concurrency", &v))
                        .transpose()?,
                    max_running_per_group: group_concurrency
                        .map(|v| parse_limit("--group-concurrency", &v))
                        .transpose()?,
                    rate,
                    ..QueueUpdate::new(name)
                };
                (update, create)
            }
        };
        update.validate()?;
        Ok(QueuesAction::Update { update, create })
    }
}

/// One line of `hopper queues list`: settings and counts together.
#[derive(Debug, Default, Serialize)]
struct QueueLine {
    queue: String,
    paused: bool,
    grouped: bool,
    max_running: Option<u32>,
    max_running_per_group: Option<u32>,
    rate: Option<String>,
    available: i64,
    scheduled: i64,
    running: i64,
}

fn apply(line: &mut QueueLine, s: &QueueSettings) {
    line.paused = s.paused;
    line.grouped = s.grouped;
    line.max_running = s.max_running;
    line.max_running_per_group = s.max_running_per_group;
    line.rate = s.rate.map(|r| format!("{r} (burst {})", r.burst));
}

/// Runs a `hopper queues …` action.
pub async fn queues(
    backend: &Arc<dyn Backend>,
    action: QueuesAction,
    json: bool,
) -> anyhow::Result<()> {
    let client = Client::new(backend.clone());
    match action {
        QueuesAction::Update { update, create } => {
            if !create && !known(&client, &update.queue).await? {
                return Err(hopper::Error::NotFound(format!(
                    "queue {:?} has no jobs and no settings; check the name, or pass --create \
                     to set it ahead of its first job",
                    update.queue
                ))
                .into());
            }
            let settings = client.update_queue(&update).await?;
            let mut line = QueueLine {
                queue: settings.queue.clone(),
                ..QueueLine::default()
            };
            apply(&mut line, &settings);
            if json {
                return print_json(&line);
            }
            outln!("{}", describe(&line));
            Ok(())
        }
        QueuesAction::List => {
            let mut lines: BTreeMap<String, QueueLine> = BTreeMap::new();
            for s in client.stats().await? {
                lines.insert(
                    s.queue.clone(),
                    QueueLine {
                        queue: s.queue.clone(),
                        available: s.available,
                        scheduled: s.scheduled,
                        running: s.running,
                        ..QueueLine::default()
                    },
                );
            }
            for s in client.queues().await? {
                let line = lines.entry(s.queue.clone()).or_insert_with(|| QueueLine {
                    queue: s.queue.clone(),
                    ..QueueLine::default()
                });
                apply(line, &s);
            }
            let lines: Vec<QueueLine> = lines.into_values().collect();
            if json {
                #[derive(Serialize)]
                struct Queues<'a> {
                    queues: &'a [QueueLine],
                }
                return print_json(&Queues { queues: &lines });
            }
            if lines.is_empty() {
                outln!("no queues");
                return Ok(());
            }
            let off = |n: Option<u32>| n.map_or("-".to_owned(), |n| n.to_string());
            let rows = lines
                .iter()
                .map(|l| {
                    vec![
                        l.queue.clone(),
                        if l.paused { "paused" } else { "active" }.to_owned(),
                        if l.grouped { "yes" } else { "-" }.to_owned(),
                        off(l.max_running),
                        off(l.max_running_per_group),
                        l.rate.clone().unwrap_or_else(|| "-".to_owned()),
                        l.available.to_string(),
                        l.scheduled.to_string(),
                        l.running.to_string(),
                    ]
                })
                .collect();
            print_table(
                "",
                &[
                    "QUEUE",
                    "STATE",
                    "GROUPS",
                    "MAX RUNNING",
                    "PER GROUP",
                    "RATE",
                    "AVAILABLE",
                    "SCHEDULED",
                    "RUNNING",
                ],
                rows,
            )
        }
    }
}

/// True when `queue` has jobs (in any state) or settings.
async fn known(client: &Client, queue: &str) -> anyhow::Result<bool> {
    if client.queues().await?.iter().any(|s| s.queue == queue) {
        return Ok(true);
    }
    Ok(client.stats().await?.iter().any(|s| s.queue == queue))
}

fn describe(line: &QueueLine) -> String {
    let mut parts = vec![format!(
        "queue {} is {}",
        line.queue,
        if line.paused { "paused" } else { "active" }
    )];
    if let Some(n) = line.max_running {
        parts.push(format!("at most {n} running"));
    }
    if let Some(n) = line.max_running_per_group {
        parts.push(format!("at most {n} running per group"));
    }
    if let Some(rate) = &line.rate {
        parts.push(format!("rate {rate}"));
    }
    parts.join(", ")
}

/// `hopper cron list`.
pub async fn cron(backend: &Arc<dyn Backend>, cmd: CronCommand, json: bool) -> anyhow::Result<()> {
    let CronCommand::List = cmd;
    let entries = Client::new(backend.clone()).cron_jobs().await?;
    if json {
        #[derive(Serialize)]
        struct Cron<'a> {
            periodic_jobs: &'a [hopper::CronEntry],
        }
        return print_json(&Cron {
            periodic_jobs: &entries,
        });
    }
    if entries.is_empty() {
        outln!("no periodic jobs");
        return Ok(());
    }
    let time = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
    let rows = entries
        .iter()
        .map(|e| {
            vec![
                e.name.clone(),
                e.schedule.clone(),
                e.timezone.clone(),
                e.queue.clone(),
                e.kind.clone(),
                time(e.next_run_at),
                e.last_run_at.map_or("-".to_owned(), time),
            ]
        })
        .collect();
    print_table(
        "",
        &[
            "NAME",
            "SCHEDULE",
            "TIME ZONE",
            "QUEUE",
            "KIND",
            "NEXT",
            "LAST",
        ],
        rows,
    )
}
