//! The remote transport: run the same [`crate::Worker`]s and [`crate::Runtime`], and the same
//! [`crate::Client`], through a `hopper serve` server instead of a database connection.
//!
//! [`RemoteBackend`] implements the storage seam ([`Backend`]) over the server's protocol
//! (`docs/protocol.md`): `job_claim` hands out the orders the server pushed, `subscribe`
//! wakes the runtime when one arrives, outcomes and lease extensions become protocol
//! messages. The admin calls (listing, retrying, deleting, clearing, stats, queue settings,
//! the cron list) are the protocol's admin requests. It offers none of the seam's
//! capabilities: the server does the maintenance (rescuing, promoting, pruning) itself, and
//! the protocol does not carry per-minute stats, registering cron entries or enqueueing
//! with group or unique keys ([`crate::Client::upsert`] answers [`Error::Unsupported`]).
//!
//! ```no_run
//! # async fn run(workers: hopper::Workers) -> hopper::Result<()> {
//! use hopper::{Runtime, RuntimeConfig};
//!
//! // The token can also come from HOPPER_TOKEN.
//! let backend = hopper::connect("tcp://127.0.0.1:7010?token=s3cret", Default::default()).await?;
//! let handle = Runtime::new(backend, workers, RuntimeConfig::default()).start().await?;
//! handle.run_until_signal().await;
//! # Ok(()) }
//! ```

mod admin;
mod connection;
mod logs;
mod outcomes;
mod socket;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use hopper_core::backend::{
    AppliedMigration, Backend, ClaimParams, ClaimedJob, Finish, FinishResult, JobCancelParams,
    JobClearParams, JobDeleteParams, JobExtendManyParams, JobGetParams, JobListParams,
    JobRetryManyParams, JobRetryParams, JobSearchParams, NodeDeregisterParams, NodeInfo, Outcome,
    QueueStats, Wakeup, WakeupStream,
};
use hopper_core::limits::MAX_DURATION;
use hopper_core::{
    CronEntry, Error, JobId, JobRecord, JobState, Lease, NewJob, QueueSettings, QueueUpdate, Result,
};
use hopper_protocol::{
    ErrorCode, FinishResult as WireResult, JobSpec, OutcomeItem, Reply, Request, Role,
};
use tokio::sync::{broadcast, mpsc, oneshot};

use connection::{Command, HelloInfo};

/// How to reach a `hopper serve` server. Built with [`RemoteOptions::new`] or
/// [`RemoteOptions::from_url`], then its fields set; `#[non_exhaustive]`, so a new option
/// is not a breaking change.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RemoteOptions {
    /// The server's endpoint, e.g. `tcp://127.0.0.1:7010`.
    pub endpoint: String,
    /// The token `hopper serve` printed the location of (`None` for `--insecure-no-auth`).
    pub token: Option<String>,
    /// The server's CURVE public key (40 Z85 characters, `public` in its key file): the
    /// connection is then encrypted and reaches only the server that holds the secret key.
    /// `None` for a plaintext server (on loopback, or `--insecure-plaintext`).
    pub server_key: Option<String>,
    /// A name for the server's logs. Default: the runtime's node name.
    pub name: Option<String>,
    /// The kinds of job this process runs; the server sends no others. Default: any kind
    /// in the runtime's queues (jobs of kinds with no registered worker then fail there).
    pub kinds: Option<Vec<String>>,
    /// How long a request waits for its reply before failing with a transient error (at
    /// most ten years, `hopper::limits::MAX_DURATION`). Default: 10 s. A runtime keeps
    /// trying a store of an attempt's log lines for 3 × (5 s + this), sending again a
    /// request left without a reply (`LogStore::job_log_store_window`).
    pub request_timeout: Duration,
    /// The most orders a worker holds beyond its concurrency, so a slot that frees starts
    /// its next job without waiting for the server (the hello's `prefetch`). The server sends
    /// fewer while the jobs are slow: what the slots start in 10 ms at their mean duration.
    /// Default: 1,000 (what a runtime claims at once from a database); 0 holds none.
    pub prefetch: u32,
}

/// No endpoint yet (the URL of [`crate::connect`] or [`RemoteOptions::with_url`] gives it),
/// every other option at its default.
impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions::new("")
    }
}

impl RemoteOptions {
    /// Options for `endpoint` with every default and no token.
    pub fn new(endpoint: impl Into<String>) -> Self {
        RemoteOptions {
            endpoint: endpoint.into(),
            token: None,
            server_key: None,
            name: None,
            kinds: None,
            request_timeout: Duration::from_secs(10),
            prefetch: DEFAULT_PREFETCH,
        }
    }

    /// Parses `tcp://host:port?token=…&server_key=…&kinds=a,b&name=…&prefetch=N`. Without a
    /// `token` parameter the token comes from the `HOPPER_TOKEN` environment variable, and
    /// without `server_key` the key from `HOPPER_SERVER_KEY`, if set. The server key may be
    /// written as it is (its Z85 alphabet holds `&`, `=`, `?` and `%`: the 40 characters
    /// after `server_key=` are taken whole) or percent-encoded.
    pub fn from_url(url: &str) -> Result<Self> {
        RemoteOptions::default().with_url(url)
    }

    /// These options with what `url` says on top (as [`RemoteOptions::from_url`] reads
    /// it): the endpoint, and each parameter the URL gives; the rest (`request_timeout`,
    /// and `prefetch`, `name`, … where the URL has none) stay as they are. This is how
    /// [`crate::connect`] applies its [`ConnectOptions::remote`](crate::ConnectOptions).
    pub fn with_url(self, url: &str) -> Result<Self> {
        let (endpoint, query) = url.split_once('?').unwrap_or((url, ""));
        let (server_key, query) = take_server_key(query)?;
        if !endpoint.starts_with("tcp://") {
            return Err(Error::InvalidInput(format!(
                "a hopper server URL starts with tcp://, got {endpoint:?}"
            )));
        }
        let mut options = RemoteOptions {
            endpoint: endpoint.to_owned(),
            ..self
        };
        if server_key.is_some() {
            options.server_key = server_key;
        }
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "token" => options.token = Some(value.to_owned()),
                "name" => options.name = Some(value.to_owned()),
                "kinds" => {
                    options.kinds = Some(value.split(',').map(str::to_owned).collect());
                }
                "prefetch" => {
                    options.prefetch = value.parse().map_err(|_| {
                        Error::InvalidInput(format!(
                            "prefetch in the server URL is a whole number of jobs, got {value:?}"
                        ))
                    })?;
                }
                other => {
                    return Err(Error::InvalidInput(format!(
                        "unknown parameter {other:?} in the server URL; known: token, server_key, name, kinds, prefetch"
                    )));
                }
            }
        }
        if options.token.is_none() {
            options.token = std::env::var("HOPPER_TOKEN").ok().filter(|t| !t.is_empty());
        }
        if options.server_key.is_none()
            && let Some(key) = std::env::var("HOPPER_SERVER_KEY")
                .ok()
                .filter(|k| !k.is_empty())
        {
            options.server_key = Some(check_server_key(key.trim())?);
        }
        Ok(options)
    }
}

/// Takes `server_key=…` out of a URL's query: the 40 characters after it if they are a key
/// (then `&` or the end), else the value up to the next `&`, percent-decoded.
fn take_server_key(query: &str) -> Result<(Option<String>, String)> {
    const NAME: &str = "server_key=";
    let start = if query.starts_with(NAME) {
        Some(0)
    } else {
        query.find(&format!("&{NAME}")).map(|at| at + 1)
    };
    let Some(start) = start else {
        return Ok((None, query.to_owned()));
    };
    let value_at = start + NAME.len();
    let rest = &query[value_at..];
    let raw = rest
        .get(..40)
        .filter(|k| check_server_key(k).is_ok())
        .filter(|_| {
            rest.get(40..)
                .is_some_and(|after| after.is_empty() || after.starts_with('&'))
        });
    let (key, used) = match raw {
        Some(key) => (key.to_owned(), 40),
        None => {
            let value = rest.split('&').next().unwrap_or("");
            (check_server_key(&percent_decode(value))?, value.len())
        }
    };
    let after = rest[used..].trim_start_matches('&');
    let before = query[..start].trim_end_matches('&');
    let remaining = match (before.is_empty(), after.is_empty()) {
        (true, _) => after.to_owned(),
        (false, true) => before.to_owned(),
        (false, false) => format!("{before}&{after}"),
    };
    Ok((Some(key), remaining))
}

/// `key` if it is written as a CURVE public key (40 Z85 characters).
fn check_server_key(key: &str) -> Result<String> {
    match hopper_protocol::is_curve_key(key) {
        true => Ok(key.to_owned()),
        false => Err(Error::InvalidInput(
            "server_key must be the server's CURVE public key: 40 Z85 characters (`public` in its key file)"
                .to_owned(),
        )),
    }
}

/// Decodes `%XX` escapes; anything else is kept as it is.
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The default [`RemoteOptions::prefetch`].
const DEFAULT_PREFETCH: u32 = 1000;

/// A [`Backend`] that talks to a `hopper serve` server. See the module docs.
#[derive(Debug, Clone)]
pub struct RemoteBackend {
    shared: Arc<Shared>,
    commands: mpsc::Sender<Command>,
}

/// What the backend and its connection task share.
#[derive(Debug)]
struct Shared {
    options: RemoteOptions,
    next_req: AtomicU64,
    hello: Mutex<HelloInfo>,
    sent_hello: Mutex<Option<HelloInfo>>,
    /// Orders received and not yet handed to the runtime, by queue.
    orders: Mutex<HashMap<String, VecDeque<ClaimedJob>>>,
    /// Every lease held: buffered orders and jobs the runtime runs.
    held: Mutex<HashSet<Lease>>,
    wakeups: broadcast::Sender<Wakeup>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn next_req(&self) -> u64 {
        self.next_req.fetch_add(1, Ordering::Relaxed)
    }

    fn hello_info(&self) -> HelloInfo {
        lock(&self.hello).clone()
    }

    fn hello_sent(&self, info: HelloInfo) {
        *lock(&self.sent_hello) = Some(info);
    }

    fn held_leases(&self) -> Vec<hopper_protocol::LeaseRef> {
        lock(&self.held)
            .iter()
            .map(|l| hopper_protocol::LeaseRef {
                id: l.job_id,
                attempt: l.attempt,
            })
            .collect()
    }

    /// Buffers orders for the runtime and wakes it once per queue.
    fn push_orders(&self, jobs: Vec<ClaimedJob>) {
        let mut queues: Vec<String> = Vec::new();
        {
            let mut held = lock(&self.held);
            let mut orders = lock(&self.orders);
            for job in jobs {
                held.insert(job.lease);
                if !queues.contains(&job.queue) {
                    queues.push(job.queue.clone());
                }
                orders.entry(job.queue.clone()).or_default().push_back(job);
            }
        }
        for queue in queues {
            let _ = self.wakeups.send(Wakeup::Jobs(queue));
        }
    }

    fn cancelled(&self, id: JobId) {
        lock(&self.held).retain(|l| l.job_id != id);
        for queue in lock(&self.orders).values_mut() {
            queue.retain(|j| j.lease.job_id != id);
        }
        let _ = self.wakeups.send(Wakeup::Cancelled(id));
    }

    fn lost(&self, lease: Lease) {
        if lock(&self.held).remove(&lease) {
            for queue in lock(&self.orders).values_mut() {
                queue.retain(|j| j.lease != lease);
            }
            let _ = self.wakeups.send(Wakeup::Cancelled(lease.job_id));
        }
    }
}

impl RemoteBackend {
    /// Starts connecting to the server and returns at once; requests made before the
    /// connection is up wait for it (up to `request_timeout`).
    pub fn new(options: RemoteOptions) -> Self {
        let (wakeups, _) = broadcast::channel(4096);
        let shared = Arc::new(Shared {
            hello: Mutex::new(HelloInfo {
                role: Role::Client,
                name: options.name.clone(),
                kinds: options.kinds.clone(),
                queues: None,
                concurrency: None,
                prefetch: None,
            }),
            options,
            next_req: AtomicU64::new(1),
            sent_hello: Mutex::new(None),
            orders: Mutex::new(HashMap::new()),
            held: Mutex::new(HashSet::new()),
            wakeups,
        });
        let (commands, rx) = mpsc::channel(1024);
        tokio::spawn(connection::run(shared.clone(), rx));
        RemoteBackend { shared, commands }
    }

    /// Connects and waits for the server's welcome: fails with the reason if the server
    /// refuses the token or cannot be reached within the request timeout.
    pub async fn connect(options: RemoteOptions) -> Result<Self> {
        let backend = RemoteBackend::new(options);
        backend.hello().await?;
        Ok(backend)
    }

    /// The options it was made with.
    pub fn options(&self) -> &RemoteOptions {
        &self.shared.options
    }

    async fn request(&self, build: impl FnOnce(u64) -> Request) -> Result<Reply> {
        let request = build(self.shared.next_req());
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command { request, reply: tx })
            .await
            .map_err(|_| Error::Shutdown)?;
        let wait = self.shared.options.request_timeout.min(MAX_DURATION) + Duration::from_secs(1);
        let reply = tokio::time::timeout(wait, rx)
            .await
            .map_err(|_| connection::unavailable("no reply from the hopper server"))?
            .map_err(|_| Error::Shutdown)??;
        match reply {
            Reply::Error {
                code,
                message,
                transient,
                ..
            } => Err(match code {
                ErrorCode::NotFound => Error::NotFound(message),
                ErrorCode::Conflict => Error::Conflict(message),
                // Refused for good: not retried as if the server were away. A server that
                // predates `transient` leaves it out, read as transient as before.
                ErrorCode::Internal if transient == Some(false) => Error::Refused(message),
                ErrorCode::Internal => connection::unavailable(message),
                _ => Error::InvalidInput(format!("{code}: {message}")),
            }),
            reply => Ok(reply),
        }
    }

    /// (Re)sends the hello with the current registration and waits for the welcome.
    async fn hello(&self) -> Result<()> {
        match self
            .request(|req| connection::hello(&self.shared, req))
            .await?
        {
            Reply::Welcome { .. } => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    async fn finish_one(&self, finish: &Finish) -> Result<FinishResult> {
        let reply = self
            .request(|req| OutcomeItem::from(finish).into_request(req))
            .await?;
        lock(&self.shared.held).remove(&finish.lease);
        match reply {
            // The server does not say which state the job reached; `running` is never a
            // state an outcome leads to, so callers that look only at Recorded/LeaseLost
            // (the runtime) are unaffected.
            Reply::Ack {
                result: WireResult::Recorded,
                ..
            } => Ok(FinishResult::Recorded(state_after(&finish.outcome))),
            Reply::Ack {
                result: WireResult::LeaseLost,
                ..
            } => Ok(FinishResult::LeaseLost),
            other => Err(unexpected(&other)),
        }
    }
}

fn state_after(outcome: &Outcome) -> JobState {
    match outcome {
        Outcome::Completed { .. } => JobState::Completed,
        Outcome::Failed { .. } => JobState::Failed,
        Outcome::Retry { .. } | Outcome::Snoozed { .. } => JobState::Scheduled,
        Outcome::Released => JobState::Available,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn unexpected(reply: &Reply) -> Error {
    Error::database(std::io::Error::other(format!(
        "unexpected reply from the hopper server: {reply:?}"
    )))
}

/// A server older than `request` answers `unknown_type`: that is something it cannot do
/// (`Unsupported`), not something wrong with the request.
pub(super) fn predates(e: Error, request: &str) -> Error {
    match e {
        Error::InvalidInput(m) if m.starts_with("unknown_type") => Error::Unsupported(format!(
            "this hopper serve predates the {request} request; ask the database or a newer server"
        )),
        e => e,
    }
}

/// The largest encoded batch sent in one `submit_batch` (the server takes 2 MiB frames).
const BATCH_BYTES: usize = 1536 * 1024;

#[async_trait]
impl Backend for RemoteBackend {
    fn logs(&self) -> Option<&dyn hopper_core::job_log::LogStore> {
        Some(self)
    }

    /// The nodes and per-minute statistics of the server's database (`list_nodes`,
    /// `job_stats`, admin requests).
    fn stats(&self) -> Option<&dyn hopper_core::StatsStore> {
        Some(self)
    }

    fn name(&self) -> &'static str {
        "remote"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    /// The server migrates its database when it starts; nothing to do here.
    async fn migrate(&self) -> Result<Vec<AppliedMigration>> {
        Ok(Vec::new())
    }

    async fn job_insert(&self, job: &NewJob) -> Result<()> {
        job.validate()?;
        let job = JobSpec::from(job);
        match self.request(|req| Request::Submit { req, job }).await? {
            Reply::Submitted { .. } => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Sends the jobs in `submit_batch` messages of up to 1.5 MiB and
    /// [`hopper_protocol::MAX_BATCH_JOBS`] jobs each. Each message is inserted all or
    /// nothing; a batch larger than one message is not atomic as a whole.
    async fn job_insert_many(&self, jobs: &[NewJob]) -> Result<()> {
        let mut chunk: Vec<JobSpec> = Vec::new();
        let mut size = 0usize;
        for job in jobs {
            job.validate()?;
            let s = JobSpec::from(job);
            let len = hopper_protocol::encode(&s).map(|b| b.len()).unwrap_or(0);
            let full = size + len > BATCH_BYTES || chunk.len() == hopper_protocol::MAX_BATCH_JOBS;
            if !chunk.is_empty() && full {
                self.submit_batch(std::mem::take(&mut chunk)).await?;
                size = 0;
            }
            size += len;
            chunk.push(s);
        }
        if !chunk.is_empty() {
            self.submit_batch(chunk).await?;
        }
        Ok(())
    }

    async fn job_get(&self, params: &JobGetParams) -> Result<Option<JobRecord>> {
        let id = params.id;
        match self.request(|req| Request::Status { req, id }).await {
            Ok(Reply::Job { job, .. }) => JobRecord::try_from(job).map(Some),
            Ok(other) => Err(unexpected(&other)),
            Err(Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn job_list(&self, params: &JobListParams) -> Result<Vec<JobRecord>> {
        self.search(&JobSearchParams {
            list: params.clone(),
            ..JobSearchParams::default()
        })
        .await
    }

    /// Hands out orders the server pushed for `params.queue` (the server chose them and
    /// holds their leases; `params.lease` does not apply).
    async fn job_claim(&self, params: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        let mut orders = lock(&self.shared.orders);
        let Some(queue) = orders.get_mut(&params.queue) else {
            return Ok(Vec::new());
        };
        let n = queue.len().min(params.limit as usize);
        Ok(queue.drain(..n).collect())
    }

    /// One `outcomes` message per 500 outcomes (see `outcomes.rs`).
    async fn job_finish_many(&self, finishes: &[Finish]) -> Result<Vec<FinishResult>> {
        self.finish_batched(finishes).await
    }

    async fn job_extend_many(&self, params: &JobExtendManyParams) -> Result<Vec<Lease>> {
        let leases = &params.leases;
        let by_ms = millis(params.by);
        let results = futures_util::future::join_all(leases.iter().map(|lease| {
            self.request(move |req| Request::Extend {
                req,
                id: lease.job_id,
                attempt: lease.attempt,
                by_ms,
            })
        }))
        .await;
        let mut lost = Vec::new();
        for (lease, result) in leases.iter().zip(results) {
            match result? {
                Reply::Ack {
                    result: WireResult::LeaseLost,
                    ..
                } => {
                    lock(&self.shared.held).remove(lease);
                    lost.push(*lease);
                }
                Reply::Ack { .. } => {}
                other => return Err(unexpected(&other)),
            }
        }
        Ok(lost)
    }

    async fn job_retry(&self, params: &JobRetryParams) -> Result<JobRecord> {
        self.retry(params.id).await
    }

    async fn job_cancel(&self, params: &JobCancelParams) -> Result<JobRecord> {
        let id = params.id;
        match self.request(|req| Request::Cancel { req, id }).await? {
            Reply::Job { job, .. } => JobRecord::try_from(job),
            other => Err(unexpected(&other)),
        }
    }

    async fn job_clear(&self, params: &JobClearParams) -> Result<u64> {
        let queue = params.queue.clone();
        self.count(|req| Request::Clear { req, queue }).await
    }

    /// The first call registers this process as a worker (its queues and concurrency);
    /// liveness is then the connection's own heartbeat.
    async fn node_heartbeat(&self, node: &NodeInfo) -> Result<()> {
        let info = {
            let mut hello = lock(&self.shared.hello);
            hello.role = Role::Worker;
            hello.queues = Some(node.queues.clone());
            hello.concurrency = Some(u32::try_from(node.concurrency.max(0)).unwrap_or(0));
            hello.prefetch = Some(self.shared.options.prefetch);
            if hello.name.is_none() {
                hello.name = Some(node.name.clone());
            }
            hello.clone()
        };
        if lock(&self.shared.sent_hello).as_ref() == Some(&info) {
            return Ok(());
        }
        self.hello().await
    }

    /// Hands back the orders the runtime never started, then says bye: the server sends
    /// no more orders. Outcomes of jobs still running are accepted after it.
    async fn node_deregister(&self, _params: &NodeDeregisterParams) -> Result<()> {
        let unstarted: Vec<ClaimedJob> = lock(&self.shared.orders)
            .drain()
            .flat_map(|(_, q)| q)
            .collect();
        let releases: Vec<Finish> = unstarted
            .iter()
            .map(|j| Finish {
                lease: j.lease,
                outcome: Outcome::Released,
            })
            .collect();
        self.job_finish_many(&releases).await?;
        lock(&self.shared.hello).role = Role::Client;
        match self.request(|req| Request::Bye { req }).await? {
            Reply::Ack { .. } => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    async fn queue_stats(&self) -> Result<Vec<QueueStats>> {
        self.stats().await
    }

    async fn job_search(&self, params: &JobSearchParams) -> Result<Vec<JobRecord>> {
        self.search(params).await
    }

    async fn job_delete(&self, params: &JobDeleteParams) -> Result<()> {
        self.delete(params.id).await
    }

    async fn job_retry_many(&self, params: &JobRetryManyParams) -> Result<u64> {
        self.retry_failed(params).await
    }

    async fn queue_list(&self) -> Result<Vec<QueueSettings>> {
        self.queues().await
    }

    async fn queue_update(&self, update: &QueueUpdate) -> Result<QueueSettings> {
        self.update_queue(update).await
    }

    async fn cron_list(&self) -> Result<Vec<CronEntry>> {
        self.cron().await
    }

    /// Wake-ups when orders arrive, when the server cancels a job this process runs or
    /// finds its lease lost, and a resync after each reconnect.
    async fn subscribe(&self) -> Result<WakeupStream> {
        let rx = self.shared.wakeups.subscribe();
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            match rx.recv().await {
                Ok(w) => Some((w, rx)),
                Err(broadcast::error::RecvError::Lagged(_)) => Some((Wakeup::Resync, rx)),
                Err(broadcast::error::RecvError::Closed) => None,
            }
        });
        Ok(stream.boxed())
    }
}

impl RemoteBackend {
    async fn submit_batch(&self, jobs: Vec<JobSpec>) -> Result<()> {
        match self
            .request(|req| Request::SubmitBatch { req, jobs })
            .await?
        {
            Reply::Submitted { .. } => Ok(()),
            other => Err(unexpected(&other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_url_carries_the_options_and_refuses_bad_ones() {
        let options =
            RemoteOptions::from_url("tcp://127.0.0.1:7010?token=t&name=w1&kinds=a,b&prefetch=20")
                .expect("a valid URL");
        assert_eq!(options.endpoint, "tcp://127.0.0.1:7010");
        assert_eq!(options.token.as_deref(), Some("t"));
        assert_eq!(options.name.as_deref(), Some("w1"));
        assert_eq!(options.kinds, Some(vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(options.prefetch, 20);
        let default = RemoteOptions::from_url("tcp://127.0.0.1:7010?token=t").expect("valid");
        assert_eq!(default.prefetch, DEFAULT_PREFETCH);

        for (url, says) in [
            ("tcp://127.0.0.1:7010?token=t&prefetch=many", "prefetch"),
            ("tcp://127.0.0.1:7010?token=t&prefetch=-1", "prefetch"),
            (
                "tcp://127.0.0.1:7010?token=t&speed=9",
                "known: token, server_key, name, kinds, prefetch",
            ),
            ("http://127.0.0.1:7010", "tcp://"),
            ("tcp://127.0.0.1:7010?server_key=short", "40 Z85"),
        ] {
            match RemoteOptions::from_url(url) {
                Err(Error::InvalidInput(message)) => {
                    assert!(message.contains(says), "{url}: {message}");
                }
                other => panic!("{url}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_url_goes_on_top_of_the_options_it_is_given() {
        let base = RemoteOptions {
            request_timeout: Duration::from_secs(3),
            prefetch: 7,
            name: Some("base".to_owned()),
            ..RemoteOptions::default()
        };
        let options = base
            .with_url("tcp://127.0.0.1:7010?token=t&name=url")
            .expect("a valid URL");
        assert_eq!(options.endpoint, "tcp://127.0.0.1:7010");
        assert_eq!(options.request_timeout, Duration::from_secs(3));
        assert_eq!(options.prefetch, 7, "the URL gives no prefetch");
        assert_eq!(options.name.as_deref(), Some("url"), "the URL's wins");
    }

    #[test]
    fn the_server_key_is_read_whole_or_percent_encoded() {
        // A Z85 key may hold `&`, `=`, `?` and `%`.
        let key = "rq:rM>}U?@Lns47E1%kR.o&n=FcmmsL/@{H8]yf7";
        assert!(check_server_key(key).is_ok());
        for url in [
            format!("tcp://h:1?token=t&server_key={key}&name=w"),
            format!("tcp://h:1?server_key={key}&token=t&name=w"),
            format!("tcp://h:1?token=t&name=w&server_key={key}"),
            format!(
                "tcp://h:1?token=t&name=w&server_key={}",
                key.replace('%', "%25")
                    .replace('&', "%26")
                    .replace('=', "%3D")
            ),
        ] {
            let options = RemoteOptions::from_url(&url).expect("a valid URL");
            assert_eq!(options.server_key.as_deref(), Some(key), "{url}");
            assert_eq!(options.token.as_deref(), Some("t"), "{url}");
            assert_eq!(options.name.as_deref(), Some("w"), "{url}");
        }
    }
}
