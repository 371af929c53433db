//! The open-files limit of the long-running commands (`hopper serve`, `hopper worker`).
//!
//! Every connection costs descriptors (a ZeroMQ peer three, a database connection one), and
//! the usual soft limit of 1,024 is far below what a server with thousands of peers needs,
//! while the hard limit (what an unprivileged process may raise itself to) is usually much
//! higher. So these commands raise the soft limit to the hard one when they start, and say
//! the value once.

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and logs the result; a failure is
/// logged, not fatal (the process runs on with the limit it had).
pub fn raise() {
    let before = rlimit::Resource::NOFILE.get();
    match (before, rlimit::increase_nofile_limit(u64::MAX)) {
        (Ok((soft, hard)), Ok(now)) => {
            tracing::info!(before = soft, now, hard, "open files limit");
        }
        (_, Err(e)) | (Err(e), _) => {
            tracing::warn!(error = %e, "could not raise the open files limit");
        }
    }
}
