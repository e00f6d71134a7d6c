//! Operations on tasks: create, commands, claims and due transitions.

use serde_json::value::RawValue;
use shoal_engine::command::TaskCommand;
use shoal_engine::definition::{TaskDefinition, check_redefinition};
use shoal_engine::event::{Effects, Event};
use shoal_engine::group::{TaskGroup, dependencies_satisfied, group_expiry};
use shoal_engine::rejection::Missing;
use shoal_engine::slice::{Capacity, handed_over};
use shoal_engine::status::TaskStatus;
use shoal_engine::task::{Claimant, Task};
use shoal_engine::{Rejection, TaskId, Timestamp};

use crate::row::{TaskRow, corrupt, json};
use crate::step::insert_stepped;
use crate::workers;
use crate::{Claim, ClaimRequest, StoreError};
use crate::{NewTask, PriorRow, WriteTx, capacity_for, load_existing, record, start, step};
use shoal_engine::worker::WorkerKey;

/// createTask: defines a task (idempotent for an equal definition) and schedules it when it
/// has no unmet dependencies.
pub async fn create_task(
    tx: &mut impl WriteTx,
    definition: &TaskDefinition,
    task_id: TaskId,
    now: Timestamp,
) -> Result<TaskStatus, StoreError> {
    let lookup = tx.lookup_create(definition, task_id).await?;
    let text = json(definition)?;
    if let Some((stored, status)) = lookup.existing {
        check_redefinition(task_id, &stored, &text)?;
        return Ok(status);
    }
    // Every check that can refuse runs before the first write.
    let satisfied = dependencies_satisfied(definition, task_id, lookup.dependencies)?;
    let expires = group_expiry(definition);
    if let Some(group) = &lookup.group {
        group.admit(&definition.scheduler_id)?;
    }
    let mut row = TaskRow { task: Task::new(task_id, definition), pending_seq: None };
    let before = PriorRow::of(&row.task);
    let scheduled = match satisfied.iter().all(|done| *done) {
        true => Some(start(tx, &mut row.task, now).await?),
        false => None,
    };
    match &lookup.group {
        None => tx.insert_group(&TaskGroup::first_of(definition), definition.created, task_id).await?,
        Some(group) if group.expires < expires => tx.extend_group(group.task_group_id, expires).await?,
        Some(_) => {}
    }
    if !definition.dependencies.is_empty() {
        tx.insert_dependencies(task_id, definition, &satisfied).await?;
    }
    if let Some(secrets) = &definition.secrets {
        tx.save_secrets(task_id, secrets).await?;
    }
    if !definition.tags.is_empty() {
        let tags: Vec<String> = definition.tags.iter().map(|(key, value)| format!("{key}:{value}")).collect();
        tx.index_tags(task_id, definition.created, &tags).await?;
    }
    record(tx, &row.task, vec![Event::Defined]);
    let new = NewTask { definition: &text, created: definition.created };
    match scheduled {
        Some(effects) => insert_stepped(tx, &mut row, now, before, effects, new).await?,
        None => tx.insert_task(&mut row, new).await?,
    }
    tx.touch_queue(&definition.task_queue_id, now).await?;
    Ok(row.task.status())
}

/// Runs `command` on task `task_id`.
pub async fn apply(
    tx: &mut impl WriteTx,
    task_id: TaskId,
    command: &TaskCommand,
    now: Timestamp,
) -> Result<TaskStatus, StoreError> {
    let mut row = load_existing(tx, task_id).await?;
    let claim_timeout = tx.settings().claim_timeout_secs;
    let capacity = match command {
        TaskCommand::Schedule => capacity_for(tx, &row.task, now).await?,
        _ => Capacity::Assumed,
    };
    step(tx, &mut row, now, |task| command.apply(task, now, claim_timeout, &capacity)).await?;
    Ok(row.task.status())
}

/// claimWork: claims up to the request's count of pending runs the worker matches, most
/// urgent first.
pub async fn claim_work(
    tx: &mut impl WriteTx,
    request: &ClaimRequest,
    now: Timestamp,
) -> Result<Vec<Claim>, StoreError> {
    claims_for(tx, request, Call::Looking, now).await
}

/// claimWork for a call parked with SQLite's writer while it waited, made in the batch that
/// made runs pending: nothing if its worker was quarantined or asked to terminate meanwhile
/// (its call then looks again and hears why).
pub async fn claim_parked(
    tx: &mut impl WriteTx,
    request: &ClaimRequest,
    now: Timestamp,
) -> Result<Vec<Claim>, StoreError> {
    claims_for(tx, request, Call::Parked, now).await
}

/// How a claimWork call reaches the writer.
#[derive(Clone, Copy)]
enum Call {
    /// It looks, its worker found free to claim just before.
    Looking,
    /// It was parked while it waited: its worker may have been barred since.
    Parked,
}

/// The claims of a claimWork call. A parked call's worker is checked on the record the claims
/// are then added to, so the record is read once.
async fn claims_for(
    tx: &mut impl WriteTx,
    request: &ClaimRequest,
    call: Call,
    now: Timestamp,
) -> Result<Vec<Claim>, StoreError> {
    let key = request.worker_key();
    let read = match call {
        Call::Looking => None,
        Call::Parked => {
            let worker = tx.load_worker(&key).await?;
            if worker.as_ref().is_some_and(|worker| worker.standing(now).barred(now)) {
                return Ok(Vec::new());
            }
            Some(worker)
        }
    };
    tx.touch_queue(&request.task_queue_id, now).await?;
    let candidates = tx.claimable(request).await?;
    let claims = claim_candidates(tx, candidates, request, now).await?;
    if claims.is_empty() {
        return Ok(claims);
    }
    workers::record_claims(tx, &key, &claims, now, read).await?;
    Ok(claims)
}

/// claimWork over `candidates` (the pending runs the worker matches, in line order, loaded
/// with their definitions): claims each in turn, skipping runs that stopped being
/// claimable (their deadline passed: the deadline will resolve them). The worker's record is
/// the caller's to update.
async fn claim_candidates(
    tx: &mut impl WriteTx,
    candidates: Vec<(TaskRow, Box<RawValue>)>,
    request: &ClaimRequest,
    now: Timestamp,
) -> Result<Vec<Claim>, StoreError> {
    let mut claims = Vec::with_capacity(candidates.len());
    for (row, definition) in candidates {
        let Some(run_id) = row.task.runs().last().map(|run| run.run_id) else { continue };
        match claim_loaded(tx, row, definition, run_id, &request.claimant(), now).await {
            Ok(claim) => claims.push(claim),
            Err(StoreError::Rejected(_)) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(claims)
}

/// claimTask: claims one specific pending run.
pub async fn claim_task(
    tx: &mut impl WriteTx,
    task_id: TaskId,
    run_id: u32,
    worker_group: &str,
    worker_id: &str,
    now: Timestamp,
) -> Result<Claim, StoreError> {
    let Some((row, definition)) = tx.load_with_definition(task_id).await? else {
        return Err(Rejection::from(Missing::Task(task_id)).into());
    };
    let claim = claim_loaded(tx, row, definition, run_id, &Claimant::named(worker_group, worker_id), now).await?;
    let key = WorkerKey {
        task_queue_id: claim.status.task_queue_id.clone(),
        worker_group: worker_group.to_owned(),
        worker_id: worker_id.to_owned(),
    };
    workers::record_claims(tx, &key, std::slice::from_ref(&claim), now, None).await?;
    Ok(claim)
}

/// Claims run `run_id` of a task already loaded with its definition.
pub async fn claim_loaded(
    tx: &mut impl WriteTx,
    mut row: TaskRow,
    definition: Box<RawValue>,
    run_id: u32,
    by: &Claimant<'_>,
    now: Timestamp,
) -> Result<Claim, StoreError> {
    let claim_timeout = tx.settings().claim_timeout_secs;
    step(tx, &mut row, now, |task| task.claim(run_id, by, now, claim_timeout)).await?;
    // A run on a slice with its own payload hands its worker that payload.
    let slice = row.task.runs().get(run_id as usize).and_then(|run| run.slice);
    let definition = match slice {
        Some(at) => {
            handed_over(definition.get(), &row.task.meta.slices, at.index).map_err(corrupt)?.unwrap_or(definition)
        }
        None => definition,
    };
    let secrets = match row.task.meta.has_secrets {
        true => tx.load_secrets(row.task.task_id).await?,
        false => None,
    };
    Ok(Claim {
        secrets,
        taken_until: row.task.running_until().unwrap_or(now),
        status: row.task.status(),
        run_id,
        worker_group: by.worker_group.to_owned(),
        worker_id: by.worker_id.to_owned(),
        task: definition,
    })
}

/// Fires claim expiries, then deadlines, that are due at `now`; says how many fired.
pub async fn fire_due(tx: &mut impl WriteTx, now: Timestamp, limit: usize) -> Result<usize, StoreError> {
    let due = tx.due(now, limit).await?;
    let n_fired = due.expired.len() + due.late.len();
    for task_id in due.expired {
        let mut row = load_existing(tx, task_id).await?;
        // An out-of-date due time (cannot happen while rows are written by `step`) is rewritten.
        step(tx, &mut row, now, |task| Ok(task.expire_claim(now).unwrap_or_else(Effects::none))).await?;
    }
    // Due: a deadline, or a slice that waited its time.
    for task_id in due.late {
        let mut row = load_existing(tx, task_id).await?;
        let capacity = capacity_for(tx, &row.task, now).await?;
        step(tx, &mut row, now, |task| {
            Ok(task.exceed_deadline(now).or_else(|| task.expire_slice(now, &capacity)).unwrap_or_else(Effects::none))
        })
        .await?;
    }
    Ok(n_fired)
}
