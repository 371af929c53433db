//! `/api/v1/jobs…`: enqueue, read, list, retry, cancel, delete.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hopper::backend::{JobDeleteParams, JobGetParams, JobRetryManyParams, JobSearchParams};
use hopper::core::job::validate_name;
use hopper::{InsertOutcome, JobId, JobRecord, NewJob};
use serde::Serialize;
use serde_json::json;

use super::ApiJson;
use super::input::{
    BatchRequest, EnqueueRequest, ListQuery, RetryFailedRequest, TraceContext, parse_id,
};
use super::object::Object;
use crate::error::ApiError;
use crate::{MAX_BATCH_JOBS, WebState};

/// A job as the API shows it: the stored record plus what is handy to read.
#[derive(Debug, Serialize)]
pub(crate) struct JobView {
    #[serde(flatten)]
    job: JobRecord,
    /// Attempts counted against `max_attempts` so far.
    attempts_used: i32,
    /// Each attempt's log lines (job detail only).
    #[serde(skip_serializing_if = "Option::is_none")]
    logs: Option<Vec<hopper::AttemptLog>>,
}

impl From<JobRecord> for JobView {
    fn from(job: JobRecord) -> Self {
        JobView {
            attempts_used: job.attempt - job.uncounted,
            job,
            logs: None,
        }
    }
}

/// The answer to an enqueue: the job that now stands for the request, and what happened.
#[derive(Debug, Serialize)]
pub(crate) struct Enqueued {
    #[serde(flatten)]
    job: JobView,
    /// `inserted`, or `duplicate` / `replaced` when a unique key was taken.
    outcome: &'static str,
}

fn outcome_name(outcome: InsertOutcome) -> &'static str {
    match outcome {
        InsertOutcome::Inserted => "inserted",
        InsertOutcome::Duplicate { .. } => "duplicate",
        InsertOutcome::Replaced { .. } => "replaced",
    }
}

/// A page of jobs, newest first.
#[derive(Debug, Serialize)]
pub(crate) struct JobPage {
    jobs: Vec<JobView>,
    /// The `before` cursor of the next (older) page, or `null` on the last page.
    next_before: Option<JobId>,
}

/// The job id of a path, refused with the API's error shape.
fn path_id(id: Result<Path<String>, PathRejection>) -> Result<JobId, ApiError> {
    let Path(id) = id.map_err(|e| ApiError::bad_request(e.body_text()))?;
    parse_id(&id)
}

/// `POST /api/v1/jobs`: enqueue one job; 201 with the job, or 200 with the job holding its
/// unique key when nothing was inserted.
pub(crate) async fn enqueue(
    State(state): State<WebState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    ApiJson(request): ApiJson<EnqueueRequest>,
) -> Result<Response, ApiError> {
    let trace = TraceContext::from_headers(&headers);
    let job = request.into_job(&trace).map_err(ApiError::bad_request)?;
    let own = job.id;
    let outcome = if job.needs_upsert() {
        state.client().upsert(job).await?
    } else {
        state.client().insert(job).await?;
        InsertOutcome::Inserted
    };
    let id = outcome.id(own);
    let record = state
        .backend()
        .job_get(&JobGetParams { id })
        .await?
        .ok_or_else(|| ApiError::not_found(format!("job {id} was enqueued, then deleted")))?;
    let status = if outcome == InsertOutcome::Inserted {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let body = Enqueued {
        job: record.into(),
        outcome: outcome_name(outcome),
    };
    let mut response = (status, Json(body)).into_response();
    // The job's URL, relative to where this API is mounted.
    let location = format!("{}/{id}", uri.path().trim_end_matches('/'));
    if let Ok(value) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    Ok(response)
}

/// `POST /api/v1/jobs/batch`: enqueue many jobs in one transaction; 201 with the id that
/// stands for each (its own, or the holder of its unique key) and what became of it.
pub(crate) async fn enqueue_batch(
    State(state): State<WebState>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<BatchRequest>,
) -> Result<Response, ApiError> {
    let trace = TraceContext::from_headers(&headers);
    if request.jobs.is_empty() {
        return Err(ApiError::bad_request("jobs is empty: nothing to enqueue"));
    }
    if request.jobs.len() > MAX_BATCH_JOBS {
        return Err(ApiError::bad_request(format!(
            "{} jobs in one batch; the limit is {MAX_BATCH_JOBS}",
            request.jobs.len()
        )));
    }
    let mut jobs = Vec::with_capacity(request.jobs.len());
    for (i, Object(job)) in request.jobs.into_iter().enumerate() {
        jobs.push(
            job.into_job(&trace)
                .map_err(|m| ApiError::bad_request(format!("jobs[{i}]: {m}")))?,
        );
    }
    let outcomes = if jobs.iter().any(NewJob::needs_upsert) {
        state.client().upsert_many(&jobs).await?
    } else {
        state.client().insert_many(&jobs).await?;
        vec![InsertOutcome::Inserted; jobs.len()]
    };
    let ids: Vec<JobId> = jobs
        .iter()
        .zip(&outcomes)
        .map(|(job, outcome)| outcome.id(job.id))
        .collect();
    let inserted = outcomes
        .iter()
        .filter(|o| **o == InsertOutcome::Inserted)
        .count();
    let names: Vec<&str> = outcomes.iter().map(|o| outcome_name(*o)).collect();
    Ok((
        StatusCode::CREATED,
        Json(json!({ "count": ids.len(), "inserted": inserted, "ids": ids, "outcomes": names })),
    )
        .into_response())
}

/// `GET /api/v1/jobs/{id}`.
pub(crate) async fn get(
    State(state): State<WebState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<JobView>, ApiError> {
    let id = path_id(id)?;
    let job = state
        .backend()
        .job_get(&JobGetParams { id })
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no job {id}")))?;
    let mut view = JobView::from(job);
    view.logs = Some(state.client().job_logs(id).await?);
    Ok(Json(view))
}

/// `GET /api/v1/jobs`: newest first, filtered, one page at a time.
pub(crate) async fn list(
    State(state): State<WebState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<JobPage>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let request = query.parse()?;
    let limit = request.list.limit;
    // One more than asked: whether it comes back says if there is an older page.
    let mut params = JobSearchParams {
        list: request.list,
        created_after: request.since,
        created_before: request.until,
    };
    params.list.limit = limit + 1;
    let mut jobs = state.backend().job_search(&params).await?;
    let more = jobs.len() > limit as usize;
    jobs.truncate(limit as usize);
    let next_before = if more {
        jobs.last().map(|j| j.id)
    } else {
        None
    };
    Ok(Json(JobPage {
        jobs: jobs.into_iter().map(JobView::from).collect(),
        next_before,
    }))
}

/// `POST /api/v1/jobs/{id}/retry`: a failed or cancelled job runs again.
pub(crate) async fn retry(
    State(state): State<WebState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<JobView>, ApiError> {
    let id = path_id(id)?;
    let job = state.client().retry(id).await?;
    tracing::info!(job_id = %id, "job retried through the API");
    Ok(Json(job.into()))
}

/// `POST /api/v1/jobs/{id}/cancel`: an unfinished job is cancelled.
pub(crate) async fn cancel(
    State(state): State<WebState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<JobView>, ApiError> {
    let id = path_id(id)?;
    let job = state.client().cancel(id).await?;
    tracing::info!(job_id = %id, "job cancelled through the API");
    Ok(Json(job.into()))
}

/// `DELETE /api/v1/jobs/{id}`: 204; 409 while it runs.
pub(crate) async fn delete(
    State(state): State<WebState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let id = path_id(id)?;
    state.backend().job_delete(&JobDeleteParams { id }).await?;
    tracing::info!(job_id = %id, "job deleted through the API");
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/v1/jobs/retry-failed`: every failed job (of a queue, of a kind) runs again.
pub(crate) async fn retry_failed(
    State(state): State<WebState>,
    ApiJson(request): ApiJson<RetryFailedRequest>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if let Some(q) = &request.queue {
        validate_name("queue", q)?;
    }
    if let Some(k) = &request.kind {
        validate_name("kind", k)?;
    }
    let retried = state
        .backend()
        .job_retry_many(&JobRetryManyParams {
            queue: request.queue.clone(),
            kind: request.kind.clone(),
        })
        .await?;
    tracing::info!(queue = ?request.queue, kind = ?request.kind, retried, "failed jobs retried through the API");
    Ok(Json(json!({ "retried": retried })))
}
