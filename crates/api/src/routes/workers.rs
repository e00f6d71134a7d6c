//! The worker registry: Taskcluster's worker calls, and Shoal's (events read and posted,
//! terminate, maintenance, heartbeat, a queue's dimensions).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Query, State};
use serde::Deserialize;
use serde_json::{Value, json};
use shoal_engine::backlog;
use shoal_engine::dimensions::Dimensions;
use shoal_engine::id::{is_identifier, split_task_queue_id};
use shoal_engine::worker::{Posted, Sighting, Worker, WorkerKey, WorkerState};
use shoal_engine::{TaskId, Timestamp};
use shoal_service::{Standing, now};
use shoal_store::WorkerChange;

use crate::AppState;
use crate::auth::{Caller, Vars};
use crate::error::ApiError;
use crate::extract::{Body, Paging, Params};
use crate::routes::with_continuation;

/// The task queue a worker route names: by provisionerId and workerType (Taskcluster's
/// routes), or as a taskQueueId (Shoal's, under `/task-queues/`).
pub(crate) fn queue_of(params: &Params) -> Result<String, ApiError> {
    if params.0.contains_key("queue") {
        return params.task_queue_id();
    }
    let provisioner = params.0.get("provisioner").map(String::as_str).unwrap_or_default();
    let worker_type = params.0.get("worker_type").map(String::as_str).unwrap_or_default();
    let task_queue_id = format!("{provisioner}/{worker_type}");
    match split_task_queue_id(&task_queue_id) {
        Some(_) => Ok(task_queue_id),
        None => Err(ApiError::bad_argument(format!(
            "provisionerId/workerType `{task_queue_id}` must match ^[a-zA-Z0-9-_]{{1,38}}/[a-z]([-a-z0-9]{{0,36}}[a-z0-9])?$"
        ))),
    }
}

/// The worker a route names.
fn key_of(params: &Params) -> Result<WorkerKey, ApiError> {
    let task_queue_id = queue_of(params)?;
    let part = |name: &str, wire: &str| {
        let value = params.0.get(name).cloned().unwrap_or_default();
        match is_identifier(&value) {
            true => Ok(value),
            false => Err(ApiError::bad_argument(format!("{wire} `{value}` must match ^[a-zA-Z0-9-_]{{1,38}}$"))),
        }
    };
    let worker_group = part("worker_group", "workerGroup")?;
    let worker_id = part("worker_id", "workerId")?;
    Ok(WorkerKey { task_queue_id, worker_group, worker_id })
}

/// The scope variables of a worker route.
fn vars_of(key: &WorkerKey) -> Vars {
    let (provisioner_id, worker_type) = key.task_queue_id.split_once('/').unwrap_or_default();
    Vars::new()
        .one("taskQueueId", &key.task_queue_id)
        .one("provisionerId", provisioner_id)
        .one("workerType", worker_type)
        .one("workerGroup", &key.worker_group)
        .one("workerId", &key.worker_id)
}

fn dead_after_ms(state: &AppState) -> i64 {
    i64::try_from(state.queue.config().worker_dead_after.as_millis()).unwrap_or(i64::MAX)
}

/// A worker in Taskcluster's getWorker shape (`worker-response.json`), nothing more.
fn worker_body(worker: &Worker) -> Value {
    let key = &worker.key;
    let (provisioner_id, worker_type) = key.task_queue_id.split_once('/').unwrap_or_default();
    let mut body = json!({
        "provisionerId": provisioner_id,
        "workerType": worker_type,
        "taskQueueId": key.task_queue_id,
        "workerGroup": key.worker_group,
        "workerId": key.worker_id,
        "recentTasks": worker.recent_tasks,
        "expires": worker.expires,
        "quarantineDetails": worker.quarantine_details,
        "firstClaim": worker.first_claim.unwrap_or(worker.first_seen),
        "lastDateActive": worker.last_seen,
    });
    if let Some(until) = worker.quarantine_until {
        body["quarantineUntil"] = json!(until);
    }
    body
}

/// A worker as Shoal's fleet view shows it: Taskcluster's fields and Shoal's (`state`,
/// `dimensions`, `version`, `firstSeen`, `runningTasks`, `terminating`, `caches`,
/// `maintenance`, `taskQueueIds`), which `worker-response.json` has no place for.
fn fleet_body(worker: &Worker, running: &[TaskId], state: &AppState) -> Value {
    let mut body = worker_body(worker);
    body["state"] = json!(worker.state(now(), dead_after_ms(state), !running.is_empty()));
    body["dimensions"] = json!(worker.dimensions);
    body["firstSeen"] = json!(worker.first_seen);
    body["runningTasks"] = json!(running);
    body["terminating"] = json!(worker.terminating());
    if let Some(version) = &worker.version {
        body["version"] = json!(version);
    }
    if !worker.caches.is_empty() {
        body["caches"] = json!(worker.caches);
    }
    if let Some(maintenance) = &worker.maintenance {
        body["maintenance"] = json!(maintenance);
    }
    if !worker.task_queue_ids.is_empty() {
        body["taskQueueIds"] = json!(worker.task_queue_ids);
    }
    body
}

async fn read_worker(state: &AppState, key: WorkerKey) -> Result<(Worker, Vec<TaskId>), ApiError> {
    let lookup = key.clone();
    let found = state.queue.store().read(move |reads| reads.worker(&lookup)).await?;
    found.ok_or_else(|| ApiError::not_found(format!("worker {key} not found")))
}

pub(crate) async fn get_worker(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let (worker, _) = read_worker(&state, key_of(&params)?).await?;
    Ok(Json(worker_body(&worker)))
}

/// Shoal's `taskQueueWorker`: one worker with its standing, dimensions and running tasks.
pub(crate) async fn get_fleet_worker(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let (worker, running) = read_worker(&state, key_of(&params)?).await?;
    Ok(Json(fleet_body(&worker, &running, &state)))
}

/// Shoal's `listWorkerRuns`: the runs a worker claimed within the queue retention, newest
/// first, paged (beyond the 20 of its record's `recentTasks`).
pub(crate) async fn list_worker_runs(
    State(state): State<AppState>,
    params: Params,
    paging: Paging,
) -> Result<Json<Value>, ApiError> {
    let key = key_of(&params)?;
    let page = state
        .queue
        .store()
        .read(move |reads| reads.list_worker_runs(&key, paging.continuation.as_deref(), paging.limit))
        .await?;
    Ok(with_continuation(json!({ "runs": page.items }), page.continuation))
}

/// listWorkers' query: Taskcluster's `quarantined`, and Shoal's `dimension=key:value`
/// (repeatable, all must match) and `state`.
#[derive(Debug, Default)]
struct WorkerFilter {
    quarantined: Option<bool>,
    dimensions: Vec<(String, String)>,
    state: Option<WorkerState>,
}

fn worker_filter(pairs: Vec<(String, String)>) -> Result<WorkerFilter, ApiError> {
    let mut filter = WorkerFilter::default();
    for (name, value) in pairs {
        match name.as_str() {
            "quarantined" => {
                filter.quarantined = Some(match value.as_str() {
                    "true" => true,
                    "false" => false,
                    _ => return Err(ApiError::bad_argument("quarantined must be true or false")),
                });
            }
            "dimension" => match value.split_once(':') {
                Some((key, wanted)) if !key.is_empty() && !wanted.is_empty() => {
                    filter.dimensions.push((key.to_owned(), wanted.to_owned()));
                }
                _ => return Err(ApiError::bad_argument(format!("dimension `{value}` must be key:value"))),
            },
            "state" => {
                filter.state = Some(WorkerState::from_name(&value).ok_or_else(|| {
                    ApiError::bad_argument(format!(
                        "state `{value}` must be one of idle, busy, quarantined, missing, terminated"
                    ))
                })?);
            }
            _ => {}
        }
    }
    Ok(filter)
}

/// listWorkers in Taskcluster's shape (`list-workers-response.json`), with Shoal's filters.
pub(crate) async fn list_workers(
    state: State<AppState>,
    params: Params,
    paging: Paging,
    query: Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    listing(state, params, paging, query, false).await
}

/// Shoal's `taskQueueWorkers`: listWorkers with each worker's `state` and `dimensions`.
pub(crate) async fn list_fleet_workers(
    state: State<AppState>,
    params: Params,
    paging: Paging,
    query: Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    listing(state, params, paging, query, true).await
}

async fn listing(
    State(state): State<AppState>,
    params: Params,
    paging: Paging,
    Query(query): Query<Vec<(String, String)>>,
    fleet: bool,
) -> Result<Json<Value>, ApiError> {
    let task_queue_id = queue_of(&params)?;
    let filter = worker_filter(query)?;
    let (now, dead_after) = (now(), dead_after_ms(&state));
    let queue = task_queue_id.clone();
    let page = state
        .queue
        .store()
        .read(move |reads| {
            let keep = |worker: &Worker, busy: bool| {
                filter.quarantined.is_none_or(|wanted| worker.is_quarantined(now) == wanted)
                    && worker.has_dimensions(&filter.dimensions)
                    && filter.state.is_none_or(|wanted| worker.state(now, dead_after, busy) == wanted)
            };
            reads.list_workers(&queue, paging.continuation.as_deref(), paging.limit, &keep)
        })
        .await?;
    let workers: Vec<Value> = page
        .items
        .iter()
        .map(|listed| {
            let worker = &listed.worker;
            let mut entry = json!({
                "workerGroup": worker.key.worker_group,
                "workerId": worker.key.worker_id,
                "firstClaim": worker.first_claim.unwrap_or(worker.first_seen),
                "lastDateActive": worker.last_seen,
            });
            if fleet {
                entry["state"] = json!(worker.state(now, dead_after, listed.busy));
                entry["dimensions"] = json!(worker.dimensions);
            }
            if let Some(latest) = worker.recent_tasks.last() {
                entry["latestTask"] = json!(latest);
            }
            if let Some(until) = worker.quarantine_until.filter(|&until| until > now) {
                entry["quarantineUntil"] = json!(until);
            }
            entry
        })
        .collect();
    Ok(with_continuation(json!({ "workers": workers }), page.continuation))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct QuarantineBody {
    quarantine_until: String,
    #[serde(default)]
    quarantine_info: String,
}

fn client_of(caller: &Caller) -> String {
    caller.client_id.clone().unwrap_or_else(|| "anonymous".into())
}

/// Applies `change` on behalf of `caller`; answers the worker it left.
async fn change(state: &AppState, key: WorkerKey, change: WorkerChange, caller: &Caller) -> Result<Worker, ApiError> {
    Ok(state.queue.change_worker(key, change, client_of(caller)).await?)
}

/// The fleet view of a worker just changed (Shoal's calls answer it), with its running tasks.
async fn fleet_view(state: &AppState, worker: Worker) -> Result<Json<Value>, ApiError> {
    let key = worker.key.clone();
    let (worker, running) = match state.queue.store().read(move |reads| reads.worker(&key)).await? {
        Some(found) => found,
        None => (worker, Vec::new()),
    };
    Ok(Json(fleet_body(&worker, &running, state)))
}

fn timestamp(field: &str, text: &str) -> Result<Timestamp, ApiError> {
    Timestamp::parse(text)
        .ok_or_else(|| ApiError::invalid_input(format!("{field}: `{text}` must be an RFC 3339 date-time")))
}

pub(crate) async fn quarantine_worker(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(body): Body<QuarantineBody>,
) -> Result<Json<Value>, ApiError> {
    let key = key_of(&params)?;
    caller.authorize(&vars_of(&key))?;
    let until = timestamp("quarantineUntil", &body.quarantine_until)?;
    let worker = change(&state, key, WorkerChange::Quarantine { until, info: body.quarantine_info }, &caller).await?;
    Ok(Json(worker_body(&worker)))
}

pub(crate) async fn declare_worker(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(body): Body<BTreeMap<String, Value>>,
) -> Result<Json<Value>, ApiError> {
    let key = key_of(&params)?;
    caller.authorize(&vars_of(&key).many("properties", body.keys().cloned().collect()))?;
    let mut expires = None;
    for (name, value) in &body {
        match (name.as_str(), value.as_str()) {
            ("expires", Some(text)) => expires = Some(timestamp("expires", text)?),
            ("expires", None) => return Err(ApiError::invalid_input("expires: must be an RFC 3339 date-time")),
            _ => return Err(ApiError::invalid_input(format!("{name}: is not a property of a worker (expires is)"))),
        }
    }
    Ok(Json(worker_body(&change(&state, key, WorkerChange::Declare { expires }, &caller).await?)))
}

pub(crate) async fn terminate_worker(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let key = key_of(&params)?;
    caller.authorize(&vars_of(&key))?;
    fleet_view(&state, change(&state, key, WorkerChange::Terminate, &caller).await?).await
}

/// maintainWorker's body: why the worker is in maintenance, or `null` to end it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MaintainBody {
    maintenance: Option<String>,
}

pub(crate) async fn maintain_worker(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(body): Body<MaintainBody>,
) -> Result<Json<Value>, ApiError> {
    let key = key_of(&params)?;
    caller.authorize(&vars_of(&key))?;
    fleet_view(&state, change(&state, key, WorkerChange::Maintain { message: body.maintenance }, &caller).await?).await
}

/// postWorkerEvent's body: what kind of event, and a short message.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PostedBody {
    kind: String,
    #[serde(default)]
    message: String,
}

pub(crate) async fn post_worker_event(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(body): Body<PostedBody>,
) -> Result<Json<Value>, ApiError> {
    let key = key_of(&params)?;
    let kind = Posted::from_name(&body.kind)
        .ok_or_else(|| ApiError::invalid_input("kind: must be error, rebooting, shutdown or log"))?;
    caller.authorize(&vars_of(&key).one("kind", kind.as_str()))?;
    fleet_view(&state, change(&state, key, WorkerChange::Post { kind, message: body.message }, &caller).await?).await
}

pub(crate) async fn worker_events(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let key = key_of(&params)?;
    read_worker(&state, key.clone()).await?;
    let events = state.queue.store().read(move |reads| reads.worker_events(&key)).await?;
    Ok(Json(json!({ "events": events })))
}

/// A heartbeat's body: what the worker has, and whether it is exiting.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct HeartbeatBody {
    #[serde(default)]
    dimensions: Option<BTreeMap<String, Vec<String>>>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    exiting: bool,
    #[serde(default)]
    caches: Option<Vec<String>>,
    /// Absent: says nothing of it; a message: in maintenance; `null`: out of it.
    #[serde(default, deserialize_with = "present")]
    maintenance: Option<Option<String>>,
}

/// A field that may be `null`, told apart from one that is absent.
fn present<'de, D: serde::Deserializer<'de>>(field: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(field).map(Some)
}

/// What a worker is told after it called: whether to stop, until when it is quarantined,
/// and how often to heartbeat.
pub(crate) fn standing_body(standing: Standing, state: &AppState) -> Value {
    let every = state.queue.config().heartbeat_every();
    let mut body = json!({
        "terminate": standing.terminate,
        "heartbeatEvery": every.as_secs_f64(),
    });
    if let Some(until) = standing.quarantine_until {
        body["quarantineUntil"] = json!(until);
    }
    if standing.maintenance {
        body["maintenance"] = json!(true);
    }
    body
}

pub(crate) async fn heartbeat(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(body): Body<HeartbeatBody>,
) -> Result<Json<Value>, ApiError> {
    let key = key_of(&params)?;
    caller.authorize(&vars_of(&key))?;
    let dimensions = body.dimensions.map(|raw| Dimensions::parse("dimensions", raw)).transpose()?;
    let sighting = Sighting {
        dimensions,
        version: body.version,
        heartbeat: true,
        caches: body.caches,
        maintenance: body.maintenance,
        queues: None,
    };
    let standing = state.queue.heartbeat(&key, sighting, body.exiting).await?;
    Ok(Json(standing_body(standing, &state)))
}

/// Most pending runs one backlog reads (the longest-waiting).
const BACKLOG_SCAN: usize = 10_000;

/// `GET /task-queues/<q>/backlog`: the queue's pending runs by dimension set, each with its
/// oldest and the workers matching it, the sets no live worker matches marked `stranded`.
pub(crate) async fn queue_backlog(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let task_queue_id = params.task_queue_id()?;
    let (now, dead_after) = (now(), dead_after_ms(&state));
    let queue = task_queue_id.clone();
    let (counts, sets, workers) = state
        .queue
        .store()
        .read(move |reads| {
            let every = |_: &Worker, _: bool| true;
            let workers = reads.list_workers(&queue, None, MAX_SUMMARY_WORKERS, &every)?;
            Ok((reads.queue_counts(&queue)?, reads.pending_sets(&queue, BACKLOG_SCAN)?, workers))
        })
        .await?;
    let counted: u64 = sets.iter().map(|set| set.pending).sum();
    let more_sets = sets.len() > backlog::MAX_LINES;
    let workers: Vec<Worker> = workers.items.into_iter().map(|listed| listed.worker).collect();
    let lines: Vec<Value> = backlog::backlog(sets, &workers, now, dead_after)
        .into_iter()
        .map(|line| {
            let stranded = line.stranded();
            let mut body = json!(line);
            body["stranded"] = json!(stranded);
            body
        })
        .collect();
    Ok(Json(json!({
        "taskQueueId": task_queue_id,
        "pendingTasks": counts.pending_tasks,
        // Whether every pending run and every set is in `backlog` (the read is bounded).
        "complete": !more_sets && counted == counts.pending_tasks,
        "backlog": lines,
    })))
}

/// Most workers one dimension summary reads.
const MAX_SUMMARY_WORKERS: usize = 100_000;

pub(crate) async fn queue_dimensions(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let task_queue_id = params.task_queue_id()?;
    let (now, dead_after) = (now(), dead_after_ms(&state));
    let queue = task_queue_id.clone();
    let live = state
        .queue
        .store()
        .read(move |reads| {
            let keep = |worker: &Worker, _: bool| worker.is_live(now, dead_after);
            reads.list_workers(&queue, None, MAX_SUMMARY_WORKERS, &keep)
        })
        .await?;
    let mut counts: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
    for listed in &live.items {
        for (key, values) in listed.worker.dimensions.iter() {
            for value in values {
                *counts.entry(key).or_default().entry(value).or_default() += 1;
            }
        }
    }
    Ok(Json(json!({
        "taskQueueId": task_queue_id,
        "liveWorkers": live.items.len(),
        "dimensions": counts,
    })))
}
