//! A `list_jobs` reply cut to the frame size: however many jobs its `limit` allows, the
//! server sends no more than fit under its `max_frame`, and says where the rest begins
//! (`next_before`), so that a client that trusts the `max_frame` of its `welcome` never
//! meets a larger frame.

use uuid::Uuid;

use crate::codec::encode;
use crate::jobs::JobInfo;
use crate::messages::Reply;

/// Bytes a `jobs` reply takes besides its jobs, with room to spare: the map, its `type`,
/// `req` and `next_before` (a 36-character id) and the array's header.
const REPLY_OVERHEAD: usize = 128;

/// The `jobs` reply to `req`: the jobs of `listed` (newest first) that fit in a frame of
/// `max_frame` bytes, and, when some were cut, the `next_before` that goes on after the
/// last one kept. A page keeps its first job whatever its size, so that paging always
/// moves on.
pub fn jobs_reply(req: u64, listed: Vec<JobInfo>, max_frame: usize) -> Reply {
    let mut used = REPLY_OVERHEAD;
    let mut jobs: Vec<JobInfo> = Vec::with_capacity(listed.len());
    let mut next_before: Option<Uuid> = None;
    for job in listed {
        // Every JobInfo encodes (CBOR holds any JSON value); one that did not would fail
        // the reply's own encoding, so it is counted as too large here.
        let size = encode(&job).map_or(usize::MAX, |frame| frame.len());
        if !jobs.is_empty() && used.saturating_add(size) > max_frame {
            next_before = jobs.last().map(|kept| kept.id);
            break;
        }
        used = used.saturating_add(size);
        jobs.push(job);
    }
    Reply::Jobs {
        req,
        jobs,
        next_before,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MAX_FRAME;

    fn job(args_len: usize) -> JobInfo {
        let now = chrono::Utc::now();
        JobInfo {
            id: Uuid::now_v7(),
            queue: "default".into(),
            kind: "k".into(),
            args: serde_json::Value::String("x".repeat(args_len)),
            state: "available".into(),
            priority: 0,
            run_at: now,
            attempt: 0,
            attempts_used: 0,
            max_attempts: 25,
            timeout_ms: 1000,
            created_at: now,
            attempted_at: None,
            finished_at: None,
            duration_ms: None,
            errors: Vec::new(),
            meta: serde_json::json!({}),
            args_bytes: None,
            meta_bytes: None,
        }
    }

    #[test]
    fn a_page_over_the_frame_is_cut_after_the_last_job_that_fits() -> Result<(), String> {
        let listed: Vec<JobInfo> = (0..10).map(|_| job(300 * 1024)).collect();
        let ids: Vec<Uuid> = listed.iter().map(|j| j.id).collect();
        let Reply::Jobs {
            jobs, next_before, ..
        } = jobs_reply(7, listed, MAX_FRAME)
        else {
            return Err("not a jobs reply".into());
        };
        assert_eq!(jobs.len(), 6, "6 jobs of 300 KiB fit in 2 MiB, not 7");
        assert_eq!(next_before, Some(ids[5]));
        let frame = encode(&Reply::Jobs {
            req: u64::MAX,
            jobs,
            next_before,
        })?;
        assert!(frame.len() <= MAX_FRAME, "{} bytes", frame.len());
        Ok(())
    }

    #[test]
    fn a_page_that_fits_is_whole_and_a_lone_large_job_is_kept() -> Result<(), String> {
        let small: Vec<JobInfo> = (0..3).map(|_| job(10)).collect();
        let Reply::Jobs {
            jobs, next_before, ..
        } = jobs_reply(1, small, MAX_FRAME)
        else {
            return Err("not a jobs reply".into());
        };
        assert_eq!((jobs.len(), next_before), (3, None));
        let Reply::Jobs {
            jobs, next_before, ..
        } = jobs_reply(1, vec![job(4096), job(10)], 1024)
        else {
            return Err("not a jobs reply".into());
        };
        assert_eq!(jobs.len(), 1, "the first job is kept whatever its size");
        assert_eq!(next_before, Some(jobs[0].id));
        Ok(())
    }
}
