//! The Hooks service's writes: a hook created, updated or removed, its trigger token reset,
//! and a fire: the task created (in the same transaction) and the fire recorded, a scheduled
//! fire only by the transaction that moves the hook's next fire on, so several servers fire
//! it once.

use shoal_engine::definition::TaskDefinition;
use shoal_engine::hook::{Fire, FiredBy, Hook, HookKey};
use shoal_engine::rejection::{Conflict, Missing};
use shoal_engine::{Rejection, TaskId, Timestamp};

use crate::documents::{DocKind, Document};
use crate::row::{corrupt, json};
use crate::{StoreError, WriteTx};

/// How long a fire is listed.
const FIRE_KEPT_MS: i64 = 365 * 86_400_000;

/// A stored hook and its next scheduled fire.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredHook {
    /// Its definition.
    pub hook: Hook,
    /// When its schedule fires next (`None`: no schedule).
    pub next_fire: Option<Timestamp>,
}

impl StoredHook {
    /// Its key.
    #[must_use]
    pub fn key(&self) -> HookKey {
        HookKey { group: self.hook.hook_group_id.clone(), id: self.hook.hook_id.clone() }
    }

    /// A stored document as a hook.
    pub fn decode(document: &Document) -> Result<StoredHook, StoreError> {
        let hook = serde_json::from_str(&document.body).map_err(|err| corrupt(format!("hook: {err}")))?;
        Ok(StoredHook { hook, next_fire: document.due })
    }
}

/// The key range of a hook's fires: `<group>/<id> `, then the newest first.
#[must_use]
pub fn fires_prefix(key: &HookKey) -> String {
    format!("{} ", key.path())
}

fn fire_key(key: &HookKey, fire: &Fire) -> String {
    let newest_first = 9_999_999_999_999_i64.saturating_sub(fire.task_create_time.millis()).max(0);
    format!("{}{newest_first:013} {}", fires_prefix(key), fire.task_id)
}

/// createHook or updateHook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookWrite {
    /// A new hook (an equal definition again is accepted; another is a 409).
    Create,
    /// A new definition for an existing hook (404 when missing).
    Update,
}

/// Stores a hook's definition with its next fire from `now`; a new hook gets `token`.
pub async fn put(
    tx: &mut impl WriteTx,
    hook: &Hook,
    write: HookWrite,
    token: &str,
    now: Timestamp,
) -> Result<StoredHook, StoreError> {
    let key = HookKey { group: hook.hook_group_id.clone(), id: hook.hook_id.clone() };
    let stored = tx.load_document(DocKind::Hook, &key.path()).await?;
    match (write, stored) {
        (HookWrite::Create, Some(stored)) => {
            let stored = StoredHook::decode(&stored)?;
            if stored.hook == *hook {
                return Ok(stored);
            }
            return Err(Rejection::from(Conflict::HookExists(key.path())).into());
        }
        (HookWrite::Update, None) => return Err(Rejection::from(Missing::Hook(key.path())).into()),
        (HookWrite::Create, None) => {
            tx.put_document(DocKind::HookToken, &key.path(), &Document::new(json(token)?)).await?;
        }
        (HookWrite::Update, Some(_)) => {}
    }
    let next_fire = hook.next_fire(now);
    let document = Document { body: json(hook)?, expires: None, due: next_fire };
    tx.put_document(DocKind::Hook, &key.path(), &document).await?;
    Ok(StoredHook { hook: hook.clone(), next_fire })
}

/// Removes a hook, its token and its fires (nothing when there is none).
pub async fn remove(tx: &mut impl WriteTx, key: &HookKey) -> Result<(), StoreError> {
    tx.delete_document(DocKind::Hook, &key.path()).await?;
    tx.delete_document(DocKind::HookToken, &key.path()).await?;
    tx.delete_documents_under(DocKind::HookFire, &fires_prefix(key)).await
}

/// Gives a hook a new trigger token (404 when there is no hook).
pub async fn reset_token(tx: &mut impl WriteTx, key: &HookKey, token: &str) -> Result<(), StoreError> {
    if tx.load_document(DocKind::Hook, &key.path()).await?.is_none() {
        return Err(Rejection::from(Missing::Hook(key.path())).into());
    }
    tx.put_document(DocKind::HookToken, &key.path(), &Document::new(json(token)?)).await
}

/// A fire as the service prepared it: the task rendered and checked, or why it could not be.
#[derive(Debug, Clone)]
pub struct FireRequest {
    /// The hook.
    pub key: HookKey,
    /// The task's id.
    pub task_id: TaskId,
    /// What fired it.
    pub fired_by: FiredBy,
    /// The task to create, or why there is none (`None`: the template declined; a scheduled
    /// fire then only moves on).
    pub task: Option<Result<TaskDefinition, String>>,
    /// For a scheduled fire, the next fire it was due at: it fires only if the hook still
    /// says so (another server did not fire it, no update moved it).
    pub scheduled: Option<Timestamp>,
}

/// What a fire did.
#[derive(Debug, Clone)]
pub enum FireOutcome {
    /// The task was created.
    Created(TaskId),
    /// The fire failed and is recorded with this error.
    Failed(String),
    /// A scheduled fire already made (or moved) elsewhere, or one whose template declined:
    /// no task, no fire recorded.
    Skipped,
}

/// Fires a hook: for a scheduled fire, moves its next fire on (or skips it); creates the task;
/// records the fire with its result.
pub async fn fire(tx: &mut impl WriteTx, request: &FireRequest, now: Timestamp) -> Result<FireOutcome, StoreError> {
    let key = &request.key;
    let Some(document) = tx.load_document(DocKind::Hook, &key.path()).await? else {
        return match request.scheduled {
            Some(_) => Ok(FireOutcome::Skipped),
            None => Err(Rejection::from(Missing::Hook(key.path())).into()),
        };
    };
    if let Some(due) = request.scheduled {
        if document.due != Some(due) {
            return Ok(FireOutcome::Skipped);
        }
        let stored = StoredHook::decode(&document)?;
        // Missed fires are not made up: the next is the first after now, as Taskcluster's.
        let next = Document { due: stored.hook.next_fire(now.max(due)), ..document };
        tx.put_document(DocKind::Hook, &key.path(), &next).await?;
    }
    let Some(task) = &request.task else { return Ok(FireOutcome::Skipped) };
    let (outcome, record) = match task {
        Ok(definition) => match crate::tasks::create_task(tx, definition, request.task_id, now).await {
            Ok(_) => (FireOutcome::Created(request.task_id), Fire::success(request.task_id, request.fired_by, now)),
            Err(StoreError::Rejected(rejection)) => {
                let error = format!("createTask: {rejection}");
                (FireOutcome::Failed(error.clone()), Fire::error(request.task_id, request.fired_by, now, &error))
            }
            Err(err) => return Err(err),
        },
        Err(error) => (FireOutcome::Failed(error.clone()), Fire::error(request.task_id, request.fired_by, now, error)),
    };
    let document = Document { body: json(&record)?, expires: Some(now.plus_millis(FIRE_KEPT_MS)), due: None };
    tx.put_document(DocKind::HookFire, &fire_key(key, &record), &document).await?;
    Ok(outcome)
}
