//! Worker calls: claiming, reclaiming and resolving runs.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use shoal_engine::command::TaskCommand;
use shoal_engine::dimensions::Dimensions;
use shoal_engine::id::is_identifier;
use shoal_engine::status::{RunStats, WorkerException};
use shoal_engine::task::Resolution;
use shoal_engine::worker::{Sighting, WorkerKey, served_queues};
use shoal_engine::{TaskId, Timestamp};
use shoal_store::operation::{Apply, ClaimTask};
use shoal_store::{Claim, ClaimRequest};

use crate::AppState;
use crate::auth::{Caller, Vars};
use crate::error::ApiError;
use crate::extract::{Body, Params};
use crate::routes::tasks::status_of;
use crate::routes::{StatusBody, status_body};

/// Most tasks one claimWork may ask for.
const MAX_CLAIM: u32 = 32;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ClaimWorkBody {
    worker_group: String,
    worker_id: String,
    #[serde(default = "one")]
    tasks: u32,
    #[serde(default)]
    dimensions: BTreeMap<String, Vec<String>>,
    /// The worker's software version (Shoal's), kept in the worker registry.
    #[serde(default)]
    version: Option<String>,
    /// The named caches the worker holds (Shoal's), kept in the worker registry.
    #[serde(default)]
    caches: Option<Vec<String>>,
    /// Every task queue this one worker claims from (Shoal's), in order, the path's first.
    #[serde(default)]
    task_queue_ids: Option<Vec<String>>,
}

fn one() -> u32 {
    1
}

fn check_worker(worker_group: &str, worker_id: &str) -> Result<(), ApiError> {
    if !is_identifier(worker_group) {
        return Err(ApiError::invalid_input("workerGroup: must match ^[a-zA-Z0-9-_]{1,38}$"));
    }
    if !is_identifier(worker_id) {
        return Err(ApiError::invalid_input("workerId: must match ^[a-zA-Z0-9-_]{1,38}$"));
    }
    Ok(())
}

/// Temporary credentials for one run, in Taskcluster's shape: the worker signs its calls on
/// the run with them (reclaim, resolve, artifacts, log) until the claim's takenUntil.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Credentials {
    client_id: String,
    access_token: String,
    certificate: String,
}

/// Just the scopes of a stored definition.
#[derive(Deserialize)]
struct TaskScopes {
    #[serde(default)]
    scopes: Vec<String>,
}

fn task_scopes(definition: &str) -> Vec<String> {
    serde_json::from_str::<TaskScopes>(definition).map(|task| task.scopes).unwrap_or_default()
}

fn credentials(
    state: &AppState,
    task_id: TaskId,
    run_id: u32,
    worker: (&str, &str),
    definition: &str,
    until: Timestamp,
) -> Credentials {
    let issued = state.auth.run_credentials(task_id, run_id, worker, &task_scopes(definition), until);
    Credentials { client_id: issued.client_id, access_token: issued.access_token, certificate: issued.certificate }
}

/// One claim as claimWork and claimTask answer it.
#[derive(Serialize)]
pub(crate) struct ClaimBody {
    #[serde(flatten)]
    claim: Claim,
    credentials: Credentials,
}

fn claim_body(state: &AppState, claim: Claim) -> ClaimBody {
    let credentials = credentials(
        state,
        claim.status.task_id,
        claim.run_id,
        (&claim.worker_group, &claim.worker_id),
        claim.task.get(),
        claim.taken_until,
    );
    ClaimBody { claim, credentials }
}

/// claimWork's answer; Shoal adds `terminate` when the worker was asked to stop.
#[derive(Serialize)]
pub(crate) struct ClaimWorkAnswer {
    tasks: Vec<ClaimBody>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    terminate: bool,
}

fn worker_vars(task_queue_id: &str, worker_group: &str, worker_id: &str) -> Vars {
    Vars::new().one("taskQueueId", task_queue_id).one("workerGroup", worker_group).one("workerId", worker_id)
}

pub(crate) async fn claim_work(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(body): Body<ClaimWorkBody>,
) -> Result<Json<ClaimWorkAnswer>, ApiError> {
    let task_queue_id = params.task_queue_id()?;
    check_worker(&body.worker_group, &body.worker_id)?;
    let queues = served_queues(&task_queue_id, body.task_queue_ids)?;
    for queue in &queues {
        caller.authorize(&worker_vars(queue, &body.worker_group, &body.worker_id))?;
    }
    if !(1..=MAX_CLAIM).contains(&body.tasks) {
        return Err(ApiError::invalid_input(format!("tasks: must be an integer 1..={MAX_CLAIM}")));
    }
    let dimensions = Dimensions::parse("dimensions", body.dimensions)?;
    let more_queues = queues[1..].to_vec();
    // Every claim says which queues its worker serves: one started again on a single queue
    // is no longer linked to the others.
    let sighting = Sighting {
        dimensions: Some(dimensions.clone()),
        version: body.version.clone(),
        heartbeat: false,
        caches: body.caches,
        maintenance: None,
        queues: Some(queues),
    };
    sighting.check()?;
    let request = ClaimRequest {
        task_queue_id,
        worker_group: body.worker_group,
        worker_id: body.worker_id,
        dimensions,
        version: body.version,
        count: body.tasks as usize,
    };
    let wait: Duration = state.queue.config().claim_wait;
    let outcome = state.queue.claim_work(request, more_queues, sighting, wait).await?;
    let tasks = outcome.claims.into_iter().map(|claim| claim_body(&state, claim)).collect();
    Ok(Json(ClaimWorkAnswer { tasks, terminate: outcome.standing.terminate }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ClaimTaskBody {
    worker_group: String,
    worker_id: String,
}

pub(crate) async fn claim_task(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(body): Body<ClaimTaskBody>,
) -> Result<Json<ClaimBody>, ApiError> {
    let task_id = params.task_id()?;
    let run_id = params.run_id()?;
    check_worker(&body.worker_group, &body.worker_id)?;
    let status = status_of(&state, task_id).await?;
    caller.authorize(&worker_vars(&status.task_queue_id, &body.worker_group, &body.worker_id))?;
    let key = WorkerKey {
        task_queue_id: status.task_queue_id.clone(),
        worker_group: body.worker_group.clone(),
        worker_id: body.worker_id.clone(),
    };
    state.queue.worker_seen(&key, Sighting::default()).await?;
    let claim = state
        .queue
        .run(ClaimTask { task_id, run_id, worker_group: body.worker_group, worker_id: body.worker_id })
        .await?;
    Ok(Json(claim_body(&state, claim)))
}

fn run_vars(params: &Params) -> Result<(TaskId, u32, Vars), ApiError> {
    let (task_id, run_id) = (params.task_id()?, params.run_id()?);
    Ok((task_id, run_id, Vars::new().one("taskId", task_id).one("runId", run_id)))
}

pub(crate) async fn reclaim_task(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let (task_id, run_id, vars) = run_vars(&params)?;
    caller.authorize(&vars)?;
    let status = state.queue.run(Apply { task_id, command: TaskCommand::Reclaim { run_id } }).await?;
    let run = status.runs.get(run_id as usize).cloned().ok_or_else(|| ApiError::not_found("run vanished"))?;
    let worker_group = run.worker_group.unwrap_or_default();
    let worker_id = run.worker_id.unwrap_or_default();
    let taken_until = run.taken_until.unwrap_or(Timestamp(0));
    // A reclaim says its worker is alive (Taskcluster's lastDateActive).
    let key = WorkerKey {
        task_queue_id: status.task_queue_id.clone(),
        worker_group: worker_group.clone(),
        worker_id: worker_id.clone(),
    };
    state.queue.worker_seen(&key, Sighting::default()).await?;
    let record = state.queue.store().read(move |reads| reads.task(task_id)).await?;
    let definition = record.map(|record| record.task.get().to_owned()).unwrap_or_default();
    let credentials = credentials(&state, task_id, run_id, (&worker_group, &worker_id), &definition, taken_until);
    Ok(Json(json!({
        "status": status,
        "runId": run_id,
        "workerGroup": worker_group,
        "workerId": worker_id,
        "takenUntil": taken_until,
        "credentials": credentials,
    })))
}

async fn resolve(
    state: &AppState,
    caller: &Caller,
    params: &Params,
    resolution: Resolution,
    stats: Option<RunStats>,
) -> Result<Json<StatusBody>, ApiError> {
    let (task_id, run_id, vars) = run_vars(params)?;
    caller.authorize(&vars)?;
    let stats = stats.map(Box::new);
    let status =
        state.queue.run(Apply { task_id, command: TaskCommand::Resolve { run_id, resolution, stats } }).await?;
    Ok(status_body(status))
}

/// reportCompleted's and reportFailed's optional body (Shoal's): what the worker measured.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReportBody {
    #[serde(default)]
    stats: Option<RunStats>,
}

pub(crate) async fn report_completed(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(body): Body<ReportBody>,
) -> Result<Json<StatusBody>, ApiError> {
    resolve(&state, &caller, &params, Resolution::Completed, body.stats).await
}

pub(crate) async fn report_failed(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(body): Body<ReportBody>,
) -> Result<Json<StatusBody>, ApiError> {
    resolve(&state, &caller, &params, Resolution::Failed, body.stats).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExceptionBody {
    reason: String,
    #[serde(default)]
    stats: Option<RunStats>,
}

pub(crate) async fn report_exception(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(body): Body<ExceptionBody>,
) -> Result<Json<StatusBody>, ApiError> {
    let reason = WorkerException::from_name(&body.reason).ok_or_else(|| {
        let names: Vec<&str> = WorkerException::ALL.iter().map(|reason| reason.as_str()).collect();
        ApiError::invalid_input(format!("reason: must be one of {}", names.join(", ")))
    })?;
    let resolution = Resolution::worker_exception(reason);
    resolve(&state, &caller, &params, resolution, body.stats).await
}
