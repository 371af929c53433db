//! Riding through database outages: the long-running commands (`bench`, `stats --watch`)
//! retry what they read themselves while the database restarts or fails over, as the
//! runtime does for its own work, instead of exiting on the first refused connection (and
//! end at once on what waiting will not cure, such as a schema never migrated); and
//! `hopper serve` / `hopper worker` wait at their start for a database that is starting,
//! restarting or shutting down, while failing at once on what waiting will not cure (a
//! schema newer than this build, a port already taken).

use std::future::Future;
use std::time::Duration;

/// How long a command keeps retrying one read before it gives up with the last error: a
/// restart takes seconds, a failover under a minute.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// How often a streak of failures is reported again while [`retry_if`] retries.
const REMINDER: Duration = Duration::from_secs(30);

/// Runs `read` until it succeeds, retrying the failures `retryable` accepts (a transient
/// database error: [`is_transient`]) with backoff (100 ms doubling to 2 s) for at most
/// [`PATIENCE`]; any other failure is returned at once, since waiting will not cure it.
/// The first failure of a streak is reported on stderr, and the last one again every
/// [`REMINDER`] while the streak lasts, so that an operator sees it still waits, and why.
pub async fn retry_if<T, F, Fut>(
    what: &str,
    retryable: impl Fn(&anyhow::Error) -> bool,
    read: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    retry_reporting(what, retryable, read, |line| eprintln!("{line}")).await
}

/// [`retry_if`], its lines given to `report`.
async fn retry_reporting<T, F, Fut>(
    what: &str,
    retryable: impl Fn(&anyhow::Error) -> bool,
    mut read: F,
    mut report: impl FnMut(String),
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let started = tokio::time::Instant::now();
    let mut backoff = Duration::from_millis(100);
    let mut reported: Option<tokio::time::Instant> = None;
    loop {
        match read().await {
            Ok(value) => {
                if reported.is_some() {
                    report(format!("hopper: {what}: the database answers again"));
                }
                return Ok(value);
            }
            Err(e) if started.elapsed() < PATIENCE && retryable(&e) => {
                let why = crate::output::one_line(&e);
                match reported {
                    None => report(format!("hopper: {what} failed: {why}; retrying")),
                    Some(at) if at.elapsed() >= REMINDER => report(format!(
                        "hopper: {what} still fails after {}s: {why}; retrying for up to {}s",
                        started.elapsed().as_secs(),
                        PATIENCE.as_secs()
                    )),
                    Some(_) => {}
                }
                if reported.is_none_or(|at| at.elapsed() >= REMINDER) {
                    reported = Some(tokio::time::Instant::now());
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            Err(e) if retryable(&e) => return Err(gave_up(what, e)),
            Err(e) => return Err(e),
        }
    }
}

/// `e`, the last failure of [`retry_if`], saying that it gave up; `what` is said once,
/// also when the failure already starts with it.
fn gave_up(what: &str, e: anyhow::Error) -> anyhow::Error {
    if e.to_string() == what {
        e.context(format!("gave up after {PATIENCE:?}"))
    } else {
        e.context(format!("{what}: gave up after {PATIENCE:?}"))
    }
}

/// True when `e` is, or was caused by, a transient database error
/// ([`hopper::Error::is_transient`]: unreachable, starting, shutting down), also as the
/// server's registration error. A connection the server refused for a reason that waiting
/// will not cure (a wrong password or role, SQLSTATE class 28; a database that does not
/// exist, 3D000) is not.
pub fn is_transient(e: &anyhow::Error) -> bool {
    let refused_for_good = e.chain().any(|cause| {
        cause
            .downcast_ref::<hopper::ConnectError>()
            .and_then(|c| c.driver_error().as_db_error())
            .is_some_and(|db| {
                let code = db.code().code();
                code.starts_with("28") || code == "3D000"
            })
    });
    !refused_for_good
        && e.chain().any(|cause| {
            let hopper = match cause.downcast_ref::<hopper_server::ServeError>() {
                Some(hopper_server::ServeError::Backend(e)) => Some(e),
                Some(_) => None,
                None => cause.downcast_ref::<hopper::Error>(),
            };
            hopper.is_some_and(hopper::Error::is_transient)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A streak of failures is said at its start, again every REMINDER while it lasts
    /// (here 45 s: once more), and its end once.
    #[tokio::test(start_paused = true)]
    async fn a_long_streak_of_failures_is_said_again_while_it_lasts() {
        let started = tokio::time::Instant::now();
        let mut lines = Vec::new();
        let read = || async {
            if started.elapsed() < Duration::from_secs(45) {
                anyhow::bail!("the database system is starting up")
            }
            Ok(7)
        };
        let got = retry_reporting("opening the database", |_| true, read, |l| lines.push(l)).await;
        assert_eq!(got.ok(), Some(7));
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert_eq!(
            lines[0],
            "hopper: opening the database failed: the database system is starting up; retrying"
        );
        assert!(
            lines[1].starts_with("hopper: opening the database still fails after 3"),
            "{lines:#?}"
        );
        assert!(
            lines[1].ends_with("starting up; retrying for up to 120s"),
            "{lines:#?}"
        );
        assert_eq!(
            lines[2],
            "hopper: opening the database: the database answers again"
        );
    }

    /// A read that gave up names what it did once, whether or not its error already
    /// starts with it.
    #[test]
    fn a_read_that_gave_up_names_what_it_did_once() {
        let what = "counting unfinished jobs";
        let said = anyhow::anyhow!("connection refused").context(what);
        let e = format!("{:#}", gave_up(what, said));
        assert_eq!(
            e,
            "gave up after 120s: counting unfinished jobs: connection refused"
        );
        let bare = anyhow::anyhow!("connection refused");
        let e = format!("{:#}", gave_up(what, bare));
        assert_eq!(
            e,
            "counting unfinished jobs: gave up after 120s: connection refused"
        );
    }
}
