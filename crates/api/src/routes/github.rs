//! The GitHub service's calls (`/api/github/v1`): a signed webhook delivery of a push or pull
//! request turned into its tasks, as Taskcluster's GitHub integration does it. The delivery's
//! signature is checked against the server's `github-webhook-secret`; `.taskcluster.yml` is
//! read at the commit (`crate::forge`), rendered (engine), each task checked as createTask
//! checks one against the scopes of the repository's role, and the tasks created with the
//! build's record in one store operation. A build that makes no task records why.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Value, json};
use shoal_engine::definition::TaskDefinition;
use shoal_engine::github::{Build, BuildState, Change, Delivery, Rendering, parse_delivery};
use shoal_engine::{TaskId, Timestamp};
use shoal_service::now;
use shoal_store::StoreError;
use shoal_store::operation::{CreateBuild, RecordBuild};

use crate::AppState;
use crate::auth::{Caller, Vars};
use crate::error::ApiError;
use crate::extract::{Paging, RawBody, parse_json};
use crate::forge::{self, Revision};
use crate::routes::tasks::{Unmade, checked_for_role};
use crate::routes::with_continuation;

/// Most members of pending builds' groups read to tell one listing's states.
const STATE_BUDGET: usize = 20_000;

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// Whether `signature` (`sha256=<hex>`) is the HMAC-SHA256 of `body` under `secret`.
fn signed_by(secret: &str, body: &[u8], signature: &str) -> bool {
    let Some(hex) = signature.strip_prefix("sha256=") else { return false };
    let Some(tag) = decode_hex(hex) else { return false };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    ring::hmac::verify(&key, body, &tag).is_ok()
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len()).step_by(2).map(|at| u8::from_str_radix(hex.get(at..at + 2)?, 16).ok()).collect()
}

/// githubWebHookConsumer: a delivery checked, then built.
pub(crate) async fn webhook(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Json<Value>, ApiError> {
    let Some(secret) = state.github_webhook_secret.as_deref() else {
        return Err(ApiError::bad_argument(
            "this server has no github-webhook-secret, so it takes no webhook deliveries",
        ));
    };
    let event = header(&headers, "x-github-event").ok_or_else(|| ApiError::bad_argument("Missing X-GitHub-Event"))?;
    let signature = header(&headers, "x-hub-signature-256")
        .ok_or_else(|| ApiError::bad_argument("Request missing a secret (X-Hub-Signature-256)"))?;
    if !signed_by(secret, &body, signature) {
        return Err(ApiError::forbidden("X-Hub-Signature-256 does not match; bad webhook secret?"));
    }
    let delivery_id = header(&headers, "x-github-delivery").unwrap_or_default();
    let body: Value = parse_json(&body)?;
    let change = match parse_delivery(event, delivery_id, &body)? {
        Delivery::Ignored(why) => return Ok(Json(json!({ "message": format!("Skipping: {why}") }))),
        Delivery::Change(change) => change,
    };
    match build(&state, &change).await? {
        Some(build) => Ok(Json(json!({ "build": build }))),
        None => Ok(Json(json!({ "message": format!("{} has no {}", change.sha, forge::CONFIG_FILE) }))),
    }
}

/// Builds `change`: its tasks created, or its build recorded in error; `None` when the
/// commit has no `.taskcluster.yml` (or it makes no tasks), as Taskcluster skips those.
async fn build(state: &AppState, change: &Change) -> Result<Option<Build>, ApiError> {
    let at = now();
    let fresh = || TaskId::parse(&slugid::nice()).ok_or_else(ApiError::internal);
    let made = match tasks_of(state, change, at).await {
        Ok(None) => return Ok(None),
        Ok(Some((group, tasks))) => {
            let build = Build::of(change, group, at);
            match state.queue.run(CreateBuild { build: build.clone(), tasks }).await {
                Ok(()) => return Ok(Some(build)),
                Err(StoreError::Rejected(rejection)) => build.failed(format!("createTask: {rejection}")),
                Err(err) => return Err(err.into()),
            }
        }
        Err(reason) => Build::of(change, fresh()?, at).failed(reason),
    };
    tracing::info!(repository = %change.full_name(), sha = %change.sha, error = ?made.error, "a change made no tasks");
    state.queue.run(RecordBuild { build: made.clone() }).await?;
    Ok(Some(made))
}

/// The group and checked tasks `change` makes, `None` when it makes none, or why it cannot.
async fn tasks_of(
    state: &AppState,
    change: &Change,
    at: Timestamp,
) -> Result<Option<(TaskId, Vec<(TaskId, TaskDefinition)>)>, String> {
    // The default branch's policy is read only where it decides (a fork's pull request).
    let policy = if change.needs_policy() {
        let default_branch = format!("refs/heads/{}", change.default_branch);
        let text = forge::read_config(&change.clone_url, Revision::Tip(&default_branch)).await?;
        text.as_deref().map(parse_config).transpose()?
    } else {
        None
    };
    let tasks_for = change.tasks_for(policy.as_ref()).ok_or_else(|| {
        format!(
            "pull request {} comes from a fork, and the policy of {} on {} builds only those of collaborators \
             (policy.pullRequests: public or public_restricted builds others')",
            change.pull_request.unwrap_or_default(),
            forge::CONFIG_FILE,
            change.default_branch
        )
    })?;
    let revision = Revision::Commit { sha: &change.sha, git_ref: &change.git_ref };
    let Some(text) = forge::read_config(&change.clone_url, revision).await? else { return Ok(None) };
    let config = parse_config(&text)?;
    let rendering = Rendering::of(&config, change, tasks_for, &state.root_url, at);
    let rendered = match &state.github_renderer {
        Some(program) => forge::render_apart(program, &rendering).await?,
        None => {
            let mut new_id =
                || TaskId::parse(&slugid::nice()).unwrap_or_else(|| unreachable!("slugid::nice makes slugids"));
            rendering.render(&mut new_id)?
        }
    };
    let Some(group) = rendered.task_group_id() else { return Ok(None) };
    let mut scopes = change.scopes(tasks_for);
    scopes.push(format!("queue:route:{}", rendered.route.as_str()));
    let held =
        state.auth.current().expander.expand(scopes.clone()).map_err(|err| format!("expanding {scopes:?}: {err}"))?;
    let mut checked = Vec::with_capacity(rendered.tasks.len());
    for (idx, (task_id, task)) in rendered.tasks.into_iter().enumerate() {
        match checked_for_role(task, task_id, at, &held) {
            Ok(definition) => checked.push((task_id, definition)),
            Err(Unmade::Invalid(error)) => return Err(format!("tasks[{idx}]: {error}")),
            Err(Unmade::Unauthorized(missing)) => {
                return Err(format!(
                    "tasks[{idx}]: the scopes {} do not suffice to create it: it is missing\n\n{missing}",
                    scopes.join(", ")
                ));
            }
        }
    }
    Ok(Some((group, checked)))
}

fn parse_config(text: &str) -> Result<Value, String> {
    serde_saphyr::from_str(text).map_err(|err| format!("{} is not YAML: {err}", forge::CONFIG_FILE))
}

/// `builds`' filters, as Taskcluster's.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BuildFilter {
    organization: Option<String>,
    repository: Option<String>,
    sha: Option<String>,
    pull_request: Option<String>,
}

/// builds: the builds, filtered by owner, repository, commit or pull request, each pending
/// one's state told by its tasks.
pub(crate) async fn builds(
    State(state): State<AppState>,
    caller: Caller,
    paging: Paging,
    Query(filter): Query<BuildFilter>,
) -> Result<Json<Value>, ApiError> {
    caller.authorize(&Vars::new())?;
    let part = |value: &Option<String>, name: &str| match value.as_deref() {
        None | Some("") => Ok(None),
        Some(text) if text.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_%".contains(&b)) => {
            Ok(Some(text.to_owned()))
        }
        Some(_) => Err(ApiError::bad_argument(format!("{name} must match ^([a-zA-Z0-9-_%]*)$"))),
    };
    let (organization, repository) =
        (part(&filter.organization, "organization")?, part(&filter.repository, "repository")?);
    let sha = filter.sha.filter(|sha| !sha.is_empty());
    let prefix = match (organization, repository, sha) {
        (None, None, None) => String::new(),
        (Some(org), None, None) => format!("{org}/"),
        (Some(org), Some(repo), None) => format!("{org}/{repo}/"),
        (Some(org), Some(repo), Some(sha)) => format!("{org}/{repo}/{}/", sha.to_ascii_lowercase()),
        (None, Some(_), _) => {
            return Err(ApiError::bad_argument("Must provide `organization` if querying `repository`"));
        }
        (_, None, Some(_)) => return Err(ApiError::bad_argument("Must provide `repository` if querying `sha`")),
    };
    let pull_request = match filter.pull_request.as_deref() {
        None | Some("") => None,
        Some(number) => {
            Some(number.parse::<u64>().map_err(|_| ApiError::bad_argument("pullRequest must be a number"))?)
        }
    };
    let (limit, after, at) = (paging.limit, paging.continuation.clone(), now());
    let store = state.queue.store();
    let page = store.read(move |reads| reads.builds(&prefix, after.as_deref(), limit, at)).await?;
    let mut budget = STATE_BUDGET;
    let mut builds = Vec::with_capacity(page.items.len());
    for build in
        page.items.into_iter().filter(|build| pull_request.is_none() || build.pull_request_number == pull_request)
    {
        let state_now = if build.state == BuildState::Pending {
            told_state(&state, &build, &mut budget).await?
        } else {
            build.state
        };
        builds.push(Build { state: state_now, ..build });
    }
    Ok(with_continuation(json!({ "builds": builds }), page.continuation))
}

/// A pending build's state from its group's tasks, while `budget` (members read) lasts.
async fn told_state(state: &AppState, build: &Build, budget: &mut usize) -> Result<BuildState, ApiError> {
    let mut counts: HashMap<&'static str, u64> = HashMap::new();
    let mut after: Option<String> = None;
    loop {
        if *budget == 0 {
            return Ok(BuildState::Pending);
        }
        let (group, limit, from) = (build.task_group_id, (*budget).min(1000), after.clone());
        let page = state.queue.store().read(move |reads| reads.list_task_group(group, from.as_deref(), limit)).await?;
        *budget -= page.items.len().min(*budget);
        for record in &page.items {
            *counts.entry(record.status.state.as_str()).or_default() += 1;
        }
        match page.continuation {
            Some(next) => after = Some(next),
            None => return Ok(build.state_from(&counts)),
        }
    }
}
