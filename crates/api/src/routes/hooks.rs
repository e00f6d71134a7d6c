//! The Hooks API's calls (`/api/hooks/v1`) and firing a hook: its template rendered (engine),
//! the task checked as createTask checks one, against the scopes of the role
//! `hook-id:<hookGroupId>/<hookId>` rather than the caller's, then created and the fire
//! recorded in one store operation. The schedule's loop (`crate::schedule`) fires the same way.

use axum::Json;
use axum::extract::State;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use shoal_engine::definition::TaskDefinition;
use shoal_engine::hook::{Fire, FiredBy, Hook, HookKey};
use shoal_engine::rejection::Missing;
use shoal_engine::status::TaskState;
use shoal_engine::{Rejection, TaskId, Timestamp};
use shoal_service::now;
use shoal_store::hooks::{FireOutcome, FireRequest, HookWrite, StoredHook};
use shoal_store::operation::{FireHook, PutHook, RemoveHook, ResetTriggerToken};

use crate::AppState;
use crate::auth::{Caller, Vars};
use crate::error::ApiError;
use crate::extract::{Body, Paging, Params, RawBody};
use crate::routes::tasks::{Unmade, checked_for_role};
use crate::routes::with_continuation;

fn key(params: &Params) -> Result<HookKey, ApiError> {
    let group = params.0.get("hook_group_id").map_or("", String::as_str);
    let id = params.0.get("hook_id").map_or("", String::as_str);
    Ok(HookKey::parse(group, id)?)
}

/// The route's hook, once the caller holds the endpoint's scopes for it.
fn authorized(params: &Params, caller: &Caller) -> Result<HookKey, ApiError> {
    let key = key(params)?;
    caller.authorize(&Vars::new().one("hookGroupId", &key.group).one("hookId", &key.id))?;
    Ok(key)
}

fn no_hook(key: &HookKey) -> ApiError {
    Rejection::from(Missing::Hook(key.path())).into()
}

async fn stored(state: &AppState, key: &HookKey) -> Result<StoredHook, ApiError> {
    let lookup = key.clone();
    state.queue.store().read(move |reads| reads.hook(&lookup)).await?.ok_or_else(|| no_hook(key))
}

/// A new trigger token.
fn new_token() -> String {
    slugid::nice()
}

pub(crate) async fn list_hook_groups(State(state): State<AppState>, caller: Caller) -> Result<Json<Value>, ApiError> {
    caller.authorize(&Vars::new())?;
    let groups = state.queue.store().read(|reads| reads.hook_groups()).await?;
    Ok(Json(json!({ "groups": groups })))
}

pub(crate) async fn list_hooks(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let group = params.0.get("hook_group_id").cloned().unwrap_or_default();
    HookKey::parse(&group, "x")?;
    caller.authorize(&Vars::new().one("hookGroupId", &group))?;
    let lookup = group.clone();
    let hooks = state.queue.store().read(move |reads| reads.hooks(&lookup)).await?;
    if hooks.is_empty() {
        return Err(ApiError::not_found(format!("hook group {group} has no hooks")));
    }
    Ok(Json(json!({ "hooks": hooks.iter().map(|stored| &stored.hook).collect::<Vec<_>>() })))
}

pub(crate) async fn hook(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let key = authorized(&params, &caller)?;
    Ok(Json(json!(stored(&state, &key).await?.hook)))
}

pub(crate) async fn status(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let key = authorized(&params, &caller)?;
    let hook = stored(&state, &key).await?;
    let lookup = key.clone();
    let fires = state.queue.store().read(move |reads| reads.hook_fires(&lookup, None, 1)).await?;
    let last_fire = match fires.items.first() {
        None => json!({ "result": "no-fire" }),
        Some(fire) if fire.result == "success" => {
            json!({ "result": "success", "taskId": fire.task_id, "time": fire.task_create_time })
        }
        Some(fire) => {
            json!({ "result": "error", "error": { "message": fire.error }, "time": fire.task_create_time })
        }
    };
    let mut body = json!({ "lastFire": last_fire });
    if let Some(next) = hook.next_fire {
        body["nextScheduledDate"] = json!(next);
    }
    Ok(Json(body))
}

async fn put(
    state: &AppState,
    caller: &Caller,
    params: &Params,
    body: &[u8],
    write: HookWrite,
) -> Result<Json<Value>, ApiError> {
    let key = authorized(params, caller)?;
    let hook = Hook::parse(&key, body)?;
    let stored = state.queue.run(PutHook { hook, write, token: new_token() }).await?;
    Ok(Json(json!(stored.hook)))
}

pub(crate) async fn create_hook(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    RawBody(body): RawBody,
) -> Result<Json<Value>, ApiError> {
    put(&state, &caller, &params, &body, HookWrite::Create).await
}

pub(crate) async fn update_hook(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    RawBody(body): RawBody,
) -> Result<Json<Value>, ApiError> {
    put(&state, &caller, &params, &body, HookWrite::Update).await
}

pub(crate) async fn remove_hook(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let key = authorized(&params, &caller)?;
    state.queue.run(RemoveHook { key }).await?;
    Ok(Json(json!({})))
}

pub(crate) async fn get_trigger_token(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let key = authorized(&params, &caller)?;
    let lookup = key.clone();
    let token = state.queue.store().read(move |reads| reads.hook_token(&lookup)).await?;
    Ok(Json(json!({ "token": token.ok_or_else(|| no_hook(&key))? })))
}

pub(crate) async fn reset_trigger_token(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let key = authorized(&params, &caller)?;
    let token = new_token();
    state.queue.run(ResetTriggerToken { key, token: token.clone() }).await?;
    Ok(Json(json!({ "token": token })))
}

pub(crate) async fn trigger_hook(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(payload): Body<Map<String, Value>>,
) -> Result<Json<Value>, ApiError> {
    let key = authorized(&params, &caller)?;
    let hook = stored(&state, &key).await?;
    let trigger = Trigger { fired_by: FiredBy::TriggerHook, payload, client_id: caller.client_id.clone() };
    triggered(&state, &hook, trigger).await
}

pub(crate) async fn trigger_hook_with_token(
    State(state): State<AppState>,
    params: Params,
    Body(payload): Body<Map<String, Value>>,
) -> Result<Json<Value>, ApiError> {
    let key = key(&params)?;
    let hook = stored(&state, &key).await?;
    let given = params.0.get("token").cloned().unwrap_or_default();
    let lookup = key.clone();
    let token = state.queue.store().read(move |reads| reads.hook_token(&lookup)).await?.unwrap_or_default();
    // Compared as digests, so the time taken says nothing of the token.
    if token.is_empty() || Sha256::digest(given.as_bytes()) != Sha256::digest(token.as_bytes()) {
        return Err(ApiError::authentication_failed("invalid hook token"));
    }
    let trigger = Trigger { fired_by: FiredBy::TriggerHookWithToken, payload, client_id: None };
    triggered(&state, &hook, trigger).await
}

pub(crate) async fn list_last_fires(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    paging: Paging,
) -> Result<Json<Value>, ApiError> {
    let key = authorized(&params, &caller)?;
    let (lookup, limit, first) = (key.clone(), paging.limit, paging.continuation.is_none());
    let (page, states) = state
        .queue
        .store()
        .read(move |reads| {
            let page = reads.hook_fires(&lookup, paging.continuation.as_deref(), limit)?;
            let ids: Vec<TaskId> = page.items.iter().map(|fire| fire.task_id).collect();
            let tasks = reads.tasks_by_id(&ids, None, ids.len().max(1))?;
            let states: Vec<(TaskId, TaskState)> =
                tasks.items.iter().map(|record| (record.status.task_id, record.status.state)).collect();
            Ok((page, states))
        })
        .await?;
    if page.items.is_empty() && first {
        return Err(ApiError::not_found(format!("hook {} has no fires (or does not exist)", key.path())));
    }
    let fires: Vec<Value> = page.items.iter().map(|fire| fire_body(&key, fire, &states)).collect();
    Ok(with_continuation(json!({ "lastFires": fires }), page.continuation))
}

fn fire_body(key: &HookKey, fire: &Fire, states: &[(TaskId, TaskState)]) -> Value {
    let state = states.iter().find(|(task_id, _)| *task_id == fire.task_id).map(|(_, state)| *state);
    json!({
        "hookGroupId": key.group,
        "hookId": key.id,
        "firedBy": fire.fired_by,
        "taskId": fire.task_id,
        "taskCreateTime": fire.task_create_time,
        "result": fire.result,
        "error": fire.error,
        "taskState": state.map_or(json!("unknown"), |state| json!(state)),
    })
}

/// What set a fire off, beside the schedule.
struct Trigger {
    fired_by: FiredBy,
    payload: Map<String, Value>,
    client_id: Option<String>,
}

/// triggerHook's and triggerHookWithToken's answer: the payload checked, the hook fired, and
/// the task's id, or the error (recorded in lastFires too).
async fn triggered(state: &AppState, hook: &StoredHook, trigger: Trigger) -> Result<Json<Value>, ApiError> {
    let payload = Value::Object(trigger.payload);
    hook.hook.check_payload(&payload)?;
    let task_id = match payload.get("taskId") {
        None => TaskId::parse(&slugid::nice()).ok_or_else(ApiError::internal)?,
        Some(given) => {
            given.as_str().and_then(TaskId::parse).ok_or_else(|| Rejection::invalid("taskId", "must be a slugid"))?
        }
    };
    let mut context = Map::new();
    context.insert("firedBy".into(), json!(trigger.fired_by));
    context.insert("payload".into(), payload);
    if let Some(client_id) = &trigger.client_id {
        context.insert("clientId".into(), json!(client_id));
    }
    let at = now();
    let prepared = prepare(state, &hook.hook, context, task_id, at, trigger.client_id);
    let scopes_missing = matches!(prepared, Prepared::Refused(_, true));
    let task = match prepared {
        Prepared::Declined => return Ok(Json(json!({}))),
        Prepared::Task(definition) => Ok(*definition),
        Prepared::Refused(error, _) => Err(error),
    };
    let request =
        FireRequest { key: hook.key(), task_id, fired_by: trigger.fired_by, task: Some(task), scheduled: None };
    match state.queue.run(FireHook { request }).await? {
        FireOutcome::Created(task_id) => Ok(Json(json!({ "taskId": task_id, "status": { "taskId": task_id } }))),
        FireOutcome::Failed(error) if scopes_missing => Err(ApiError::forbidden(error)),
        FireOutcome::Failed(error) => Err(Rejection::Input(format!("while firing the hook: {error}")).into()),
        FireOutcome::Skipped => Ok(Json(json!({}))),
    }
}

/// A fire's task, made ready for the store.
pub(crate) enum Prepared {
    /// The template rendered to `null`.
    Declined,
    /// The task to create.
    Task(Box<TaskDefinition>),
    /// Why there is none (and whether for want of scopes).
    Refused(String, bool),
}

/// Renders the hook's template with `context` at `at` and checks the task as createTask
/// would, with the hook's role's scopes.
pub(crate) fn prepare(
    state: &AppState,
    hook: &Hook,
    context: Map<String, Value>,
    task_id: TaskId,
    at: Timestamp,
    created_by: Option<String>,
) -> Prepared {
    let rendered = match hook.render(context, task_id, at) {
        Ok(None) => return Prepared::Declined,
        Ok(Some(task)) => task,
        Err(err) => return Prepared::Refused(format!("rendering the task template: {err}"), false),
    };
    let key = HookKey { group: hook.hook_group_id.clone(), id: hook.hook_id.clone() };
    let held = match state.auth.current().expander.expand([key.role()]) {
        Ok(held) => held,
        Err(err) => return Prepared::Refused(format!("expanding {}: {err}", key.role()), true),
    };
    let mut definition = match checked_for_role(rendered, task_id, now(), &held) {
        Ok(definition) => definition,
        Err(Unmade::Invalid(error)) => return Prepared::Refused(error, false),
        Err(Unmade::Unauthorized(missing)) => {
            return Prepared::Refused(
                format!(
                    "the role `hook-id:{}` does not have sufficient scopes to create the task: it is missing\n\n{missing}",
                    key.path()
                ),
                true,
            );
        }
    };
    definition.created_by = created_by;
    Prepared::Task(Box::new(definition))
}
