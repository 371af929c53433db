//! The admin payloads between the wire and the storage seam, both ways: what `hopper serve`
//! answers an operator's request with, and what the remote transport turns back into the
//! core's types.

use std::time::Duration;

use hopper_core::job::validate_name;
use hopper_core::{
    CronEntry, Error, JobClearParams, JobListParams, JobRetryManyParams, JobSearchParams,
    NodeCursor, NodeListParams, NodeRecord, Priority, QueueSettings, QueueStats, QueueUpdate,
    RateLimit, Result,
};

use super::millis;
use crate::admin::{CronInfo, JobFilter, NodeInfo, QueueChange, QueueCounts, QueueInfo, RateInfo};

/// The largest page of a listing: most jobs one `list_jobs` returns, most nodes one
/// `list_nodes` returns.
pub const MAX_LIST_PAGE: u32 = 1000;

/// How many jobs `list_jobs` returns when its filter says nothing, and how many nodes
/// `list_nodes` returns.
const DEFAULT_LIST_PAGE: u32 = 20;

/// The page size of a listing request (`list_jobs`, `list_nodes`): [`DEFAULT_LIST_PAGE`]
/// when absent, else from 1 to [`MAX_LIST_PAGE`].
fn list_limit(limit: Option<u32>) -> Result<u32> {
    let limit = limit.unwrap_or(DEFAULT_LIST_PAGE);
    if limit == 0 || limit > MAX_LIST_PAGE {
        return Err(Error::InvalidInput(format!(
            "limit must be from 1 to {MAX_LIST_PAGE}, got {limit}"
        )));
    }
    Ok(limit)
}

/// What `list_nodes` asks for: its `before` a cursor of the node listing (a `next_before`
/// of an earlier reply), its `limit` bounded as `list_jobs`'s.
pub fn node_list_params(before: Option<String>, limit: Option<u32>) -> Result<NodeListParams> {
    let limit = list_limit(limit)?;
    let before = before
        .map(|cursor| NodeCursor::parse("before", &cursor))
        .transpose()?;
    Ok(NodeListParams { before, limit })
}

/// A search as a `list_jobs` filter.
impl From<&JobSearchParams> for JobFilter {
    fn from(search: &JobSearchParams) -> Self {
        let list = &search.list;
        JobFilter {
            queue: list.queue.clone(),
            state: list.state.map(|s| s.as_str().to_owned()),
            kind: list.kind.clone(),
            group: list.group.clone(),
            meta: list.meta.clone(),
            before: list.before,
            created_after: search.created_after,
            created_before: search.created_before,
            limit: Some(list.limit),
        }
    }
}

/// An optional queue or kind name of a request, checked as every way in checks names
/// ([`validate_name`]) before it reaches a query.
fn checked_name(what: &str, name: Option<String>) -> Result<Option<String>> {
    if let Some(name) = &name {
        validate_name(what, name)?;
    }
    Ok(name)
}

/// What `retry_failed` retries: its `queue` and `kind`, when given, valid names.
pub fn retry_failed_params(
    queue: Option<String>,
    kind: Option<String>,
) -> Result<JobRetryManyParams> {
    Ok(JobRetryManyParams {
        queue: checked_name("queue", queue)?,
        kind: checked_name("kind", kind)?,
    })
}

/// What `clear` deletes: its `queue`, when given, a valid name.
pub fn clear_params(queue: Option<String>) -> Result<JobClearParams> {
    Ok(JobClearParams {
        queue: checked_name("queue", queue)?,
    })
}

/// A `list_jobs` filter as a search: its queue and kind valid names, its limit from 1 to
/// [`MAX_LIST_PAGE`], its state one of the job states.
impl TryFrom<JobFilter> for JobSearchParams {
    type Error = Error;

    fn try_from(filter: JobFilter) -> Result<Self> {
        let queue = checked_name("queue", filter.queue)?;
        let kind = checked_name("kind", filter.kind)?;
        let group = checked_name("group", filter.group)?;
        if let Some(meta) = &filter.meta {
            hopper_core::meta::validate_meta_filter(meta)?;
        }
        let limit = list_limit(filter.limit)?;
        let state = filter.state.as_deref().map(str::parse).transpose()?;
        Ok(JobSearchParams {
            list: JobListParams {
                queue,
                state,
                kind,
                group,
                meta: filter.meta,
                before: filter.before,
                limit,
            },
            created_after: filter.created_after,
            created_before: filter.created_before,
        })
    }
}

impl From<QueueStats> for QueueCounts {
    fn from(s: QueueStats) -> Self {
        QueueCounts {
            queue: s.queue,
            available: s.available,
            scheduled: s.scheduled,
            running: s.running,
            completed: s.completed,
            failed: s.failed,
            cancelled: s.cancelled,
            oldest_available_secs: s.oldest_available_secs,
        }
    }
}

impl From<QueueCounts> for QueueStats {
    fn from(q: QueueCounts) -> Self {
        QueueStats {
            queue: q.queue,
            available: q.available,
            scheduled: q.scheduled,
            running: q.running,
            completed: q.completed,
            failed: q.failed,
            cancelled: q.cancelled,
            oldest_available_secs: q.oldest_available_secs,
        }
    }
}

impl From<RateLimit> for RateInfo {
    fn from(r: RateLimit) -> Self {
        RateInfo {
            jobs: r.jobs,
            per_ms: millis(r.per),
            burst: Some(r.burst),
        }
    }
}

/// A rate from the wire: without a `burst`, the core's default for its `jobs`.
impl From<RateInfo> for RateLimit {
    fn from(r: RateInfo) -> Self {
        let mut limit = RateLimit::new(r.jobs, Duration::from_millis(r.per_ms));
        if let Some(burst) = r.burst {
            limit.burst = burst;
        }
        limit
    }
}

impl From<QueueSettings> for QueueInfo {
    fn from(s: QueueSettings) -> Self {
        QueueInfo {
            queue: s.queue,
            paused: s.paused,
            grouped: s.grouped,
            max_running: s.max_running,
            max_running_per_group: s.max_running_per_group,
            rate: s.rate.map(RateInfo::from),
        }
    }
}

impl From<QueueInfo> for QueueSettings {
    fn from(q: QueueInfo) -> Self {
        QueueSettings {
            queue: q.queue,
            paused: q.paused,
            grouped: q.grouped,
            max_running: q.max_running,
            max_running_per_group: q.max_running_per_group,
            rate: q.rate.map(RateLimit::from),
        }
    }
}

impl From<&QueueUpdate> for QueueChange {
    fn from(u: &QueueUpdate) -> Self {
        QueueChange {
            queue: u.queue.clone(),
            paused: u.paused,
            max_running: u.max_running,
            max_running_per_group: u.max_running_per_group,
            rate: u.rate.map(|r| r.map(RateInfo::from)),
        }
    }
}

/// A change from the wire, checked ([`QueueUpdate::validate`]: the queue a valid name,
/// limits at least 1).
impl TryFrom<QueueChange> for QueueUpdate {
    type Error = Error;

    fn try_from(c: QueueChange) -> Result<Self> {
        let update = QueueUpdate {
            queue: c.queue,
            paused: c.paused,
            max_running: c.max_running,
            max_running_per_group: c.max_running_per_group,
            rate: c.rate.map(|r| r.map(RateLimit::from)),
        };
        update.validate()?;
        Ok(update)
    }
}

impl From<CronEntry> for CronInfo {
    fn from(e: CronEntry) -> Self {
        CronInfo {
            name: e.name,
            schedule: e.schedule,
            timezone: e.timezone,
            queue: e.queue,
            kind: e.kind,
            args: e.args,
            priority: e.priority.0,
            max_attempts: e.max_attempts,
            timeout_ms: e.timeout_ms,
            catch_up: e.catch_up,
            next_run_at: e.next_run_at,
            last_run_at: e.last_run_at,
            last_job_id: e.last_job_id,
        }
    }
}

impl From<CronInfo> for CronEntry {
    fn from(c: CronInfo) -> Self {
        CronEntry {
            name: c.name,
            schedule: c.schedule,
            timezone: c.timezone,
            queue: c.queue,
            kind: c.kind,
            args: c.args,
            priority: Priority(c.priority),
            max_attempts: c.max_attempts,
            timeout_ms: c.timeout_ms,
            catch_up: c.catch_up,
            next_run_at: c.next_run_at,
            last_run_at: c.last_run_at,
            last_job_id: c.last_job_id,
        }
    }
}

impl From<NodeRecord> for NodeInfo {
    fn from(node: NodeRecord) -> Self {
        NodeInfo {
            id: node.info.id,
            name: node.info.name,
            queues: node.info.queues,
            concurrency: node.info.concurrency,
            started_at: node.started_at,
            heartbeat_at: node.heartbeat_at,
        }
    }
}

impl From<NodeInfo> for NodeRecord {
    fn from(n: NodeInfo) -> Self {
        NodeRecord {
            info: hopper_core::NodeInfo {
                id: n.id,
                name: n.name,
                queues: n.queues,
                concurrency: n.concurrency,
            },
            started_at: n.started_at,
            heartbeat_at: n.heartbeat_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use hopper_core::JobState;
    use serde_json::json;

    #[test]
    fn every_admin_payload_comes_back_from_the_wire_as_it_left() {
        let rate = RateLimit {
            jobs: 100,
            per: Duration::from_millis(1500),
            burst: 7,
        };
        let settings = QueueSettings {
            queue: "mail".into(),
            paused: true,
            grouped: true,
            max_running: Some(5),
            max_running_per_group: Some(2),
            rate: Some(rate),
        };
        assert_eq!(
            QueueSettings::from(QueueInfo::from(settings.clone())),
            settings
        );

        let update = QueueUpdate {
            queue: "mail".into(),
            paused: Some(false),
            max_running: Some(None),
            max_running_per_group: Some(Some(3)),
            rate: Some(Some(rate)),
        };
        let back = QueueUpdate::try_from(QueueChange::from(&update)).expect("a valid change");
        assert_eq!(
            (
                back.paused,
                back.max_running,
                back.max_running_per_group,
                back.rate
            ),
            (
                update.paused,
                update.max_running,
                update.max_running_per_group,
                update.rate
            )
        );

        let stats = QueueStats {
            queue: "mail".into(),
            available: 1,
            scheduled: 2,
            running: 3,
            completed: 4,
            failed: 5,
            cancelled: 6,
            oldest_available_secs: 7.5,
        };
        assert_eq!(QueueStats::from(QueueCounts::from(stats.clone())), stats);

        let entry = CronEntry {
            name: "nightly".into(),
            schedule: "0 3 * * *".into(),
            timezone: "Europe/Paris".into(),
            queue: "reports".into(),
            kind: "report".into(),
            args: json!({"full": true}),
            priority: Priority(-2),
            max_attempts: 4,
            timeout_ms: 60_000,
            catch_up: true,
            next_run_at: Utc::now(),
            last_run_at: Some(Utc::now()),
            last_job_id: Some(uuid::Uuid::now_v7()),
        };
        assert_eq!(CronEntry::from(CronInfo::from(entry.clone())), entry);

        let node = NodeRecord {
            info: hopper_core::NodeInfo {
                id: uuid::Uuid::now_v7(),
                name: "web-3:4121".into(),
                queues: vec!["mail".into(), "pdf".into()],
                concurrency: 16,
            },
            started_at: Utc::now(),
            heartbeat_at: Utc::now(),
        };
        assert_eq!(NodeRecord::from(NodeInfo::from(node.clone())), node);

        let search = JobSearchParams {
            list: JobListParams {
                queue: Some("mail".into()),
                state: Some(JobState::Failed),
                kind: Some("k".into()),
                before: Some(uuid::Uuid::now_v7()),
                limit: 50,
                ..JobListParams::default()
            },
            created_after: Some(Utc::now()),
            created_before: None,
        };
        let back = JobSearchParams::try_from(JobFilter::from(&search)).expect("a valid filter");
        assert_eq!(format!("{back:?}"), format!("{search:?}"));
    }

    #[test]
    fn every_admin_request_checks_its_queue_and_kind_names() {
        let long = "q".repeat(100_000);
        for bad in ["", "a b", "\u{0}", long.as_str()] {
            let name = Some(bad.to_owned());
            let filters = [
                JobFilter {
                    queue: name.clone(),
                    ..JobFilter::default()
                },
                JobFilter {
                    kind: name.clone(),
                    ..JobFilter::default()
                },
            ];
            for filter in filters {
                assert!(
                    matches!(
                        JobSearchParams::try_from(filter),
                        Err(Error::InvalidInput(_))
                    ),
                    "{bad:?}"
                );
            }
            assert!(retry_failed_params(name.clone(), None).is_err());
            assert!(retry_failed_params(None, name.clone()).is_err());
            assert!(clear_params(name.clone()).is_err());
            let change = QueueChange {
                queue: bad.to_owned(),
                paused: Some(true),
                ..QueueChange::default()
            };
            assert!(QueueUpdate::try_from(change).is_err());
        }
        let fine = retry_failed_params(Some("mail".into()), Some("send:v2".into()));
        assert_eq!(fine.expect("valid").kind.as_deref(), Some("send:v2"));
        assert_eq!(clear_params(None).expect("valid").queue, None);
    }

    #[test]
    fn a_node_listing_takes_the_job_listings_bounds_and_its_own_cursors() {
        let first = node_list_params(None, None).expect("valid");
        assert_eq!(first, NodeListParams::first(20));
        assert_eq!(
            node_list_params(None, Some(1000)).expect("valid").limit,
            1000
        );
        for limit in [0, 1001, u32::MAX] {
            match node_list_params(None, Some(limit)) {
                Err(Error::InvalidInput(m)) => {
                    assert_eq!(m, format!("limit must be from 1 to 1000, got {limit}"));
                }
                other => panic!("{limit}: {other:?}"),
            }
        }
        let node = NodeRecord {
            info: hopper_core::NodeInfo {
                id: uuid::Uuid::now_v7(),
                name: "web-3".into(),
                queues: Vec::new(),
                concurrency: 1,
            },
            started_at: Utc::now(),
            heartbeat_at: Utc::now(),
        };
        let cursor = NodeCursor::after(&node);
        let next = node_list_params(Some(cursor.to_string()), Some(5)).expect("valid");
        assert_eq!(next.before, Some(cursor));
        for before in ["", "a job id?", "0190f3c2-0000-7000-8000-000000000000"] {
            match node_list_params(Some(before.to_owned()), None) {
                Err(Error::InvalidInput(m)) => {
                    assert!(m.starts_with("before: "), "{m}");
                    assert!(m.contains("next_before"), "{m}");
                }
                other => panic!("{before:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_wire_rate_without_burst_takes_the_default_and_a_filter_its_bounds() {
        let rate = RateLimit::from(RateInfo {
            jobs: 50,
            per_ms: 1000,
            burst: None,
        });
        assert_eq!(rate, RateLimit::new(50, Duration::from_secs(1)));

        let default = JobSearchParams::try_from(JobFilter::default()).expect("valid");
        assert_eq!(default.list.limit, 20);
        for (limit, state) in [(Some(0), None), (Some(1001), None), (None, Some("lost"))] {
            let filter = JobFilter {
                limit,
                state: state.map(str::to_owned),
                ..JobFilter::default()
            };
            assert!(
                matches!(
                    JobSearchParams::try_from(filter),
                    Err(Error::InvalidInput(_))
                ),
                "{limit:?} {state:?}"
            );
        }
    }
}
