//! Writes from concurrent requests, gathered into one transaction.
//!
//! On PostgreSQL a statement costs far more than a row, so each server gathers the creates
//! (of tasks without dependencies), task commands and claims that arrive while its previous
//! gathering is written, and writes them in one transaction of two round trips: one reads
//! and locks what they need (`read_all`), the other writes every row and the outbox row and
//! commits. Each operation is judged alone, by the same `ops` functions and in the same
//! order as when it runs on its own; one refused writes nothing; a database error runs each
//! alone. `docs/postgres-internals.md` ("Gathering") tells the lock order and the lanes.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

use shoal_engine::definition::TaskDefinition;
use shoal_engine::rejection::Missing;
use shoal_engine::status::TaskStatus;
use shoal_engine::{Rejection, TaskId, Timestamp};
use tokio::sync::{mpsc, oneshot};

use super::{PgInner, PgStore};
use crate::ops::{self, CreateLookup, WriteTx};
use crate::postgres::tx::{Known, PgTx};
use crate::postgres::write::candidate;
use crate::row::{TaskRow, json};
use crate::{Claim, ClaimRequest, Committed, StoreError, TaskGroup};
use shoal_engine::command::TaskCommand;

mod read;

use read::{Found, read_all};

/// Operations one gathering holds at most.
const MAX_GATHERING: usize = 128;

/// Gatherings one server writes at once: while one waits for its commit to be flushed to
/// disk, the next fills and goes out. Two, not more: a gathering takes whatever queued while
/// the lanes were busy, so fewer lanes carry more per transaction (measured against four:
/// the database's CPU per task 0.71–0.99× in every pair, also with each flush made 1 ms
/// slower; README).
const LANES: usize = 2;

/// How long a gathering keeps the next one from starting while it reads and judges. A lane
/// takes its gathering only when the one before has gone on to its commit, so that each
/// carries what queued meanwhile (without this, the two lanes split the queue between them);
/// but a gathering waiting on a row lock (another server's transaction) lets the next start
/// after this long, as two lanes independent of each other did.
const PATIENCE: std::time::Duration = std::time::Duration::from_millis(10);

/// An operation waiting to be written.
pub(crate) struct Job {
    pub(crate) task_id: TaskId,
    pub(crate) op: Op,
    pub(crate) now: Timestamp,
    pub(crate) reply: oneshot::Sender<Result<Committed<TaskStatus>, StoreError>>,
}

/// A claimWork waiting to be written.
pub(crate) struct ClaimJob {
    pub(crate) request: ClaimRequest,
    pub(crate) now: Timestamp,
    pub(crate) reply: oneshot::Sender<Result<Committed<Vec<Claim>>, StoreError>>,
}

/// What the lanes take from the queue.
enum Queued {
    Task(Job),
    Claim(ClaimJob),
}

impl Queued {
    /// Whether its caller stopped waiting (it gave up on a database that did not answer, or
    /// its client went away): nothing is written for it then.
    fn abandoned(&self) -> bool {
        match self {
            Queued::Task(job) => job.reply.is_closed(),
            Queued::Claim(job) => job.reply.is_closed(),
        }
    }
}

/// What a gathered operation does to its task.
pub(crate) enum Op {
    /// Creates it (no dependencies).
    Create(Box<TaskDefinition>),
    /// Runs a command on it.
    Apply(TaskCommand),
}

/// Where a server's writes are gathered.
pub(crate) struct Gatherer {
    lane: mpsc::UnboundedSender<Queued>,
}

impl Gatherer {
    /// Starts the lane; it ends when the store (which holds the gatherer) is dropped.
    pub(crate) fn start(inner: &Weak<PgInner>) -> Gatherer {
        let (lane, jobs) = mpsc::unbounded_channel();
        let jobs = Arc::new(tokio::sync::Mutex::new(jobs));
        for _ in 0..LANES {
            tokio::spawn(run_lane(Weak::clone(inner), Arc::clone(&jobs)));
        }
        Gatherer { lane }
    }

    /// Queues `job`; gives it back when the lane has stopped.
    pub(crate) fn submit(&self, job: Job) -> Result<(), Job> {
        self.lane.send(Queued::Task(job)).map_err(|err| match err.0 {
            Queued::Task(job) => job,
            Queued::Claim(_) => unreachable!("a task job was sent"),
        })
    }

    /// Queues a claim; gives it back when the lane has stopped.
    pub(crate) fn submit_claim(&self, job: ClaimJob) -> Result<(), Box<ClaimJob>> {
        self.lane.send(Queued::Claim(job)).map_err(|err| match err.0 {
            Queued::Claim(job) => Box::new(job),
            Queued::Task(_) => unreachable!("a claim was sent"),
        })
    }
}

/// The queue, held by the one lane that is taking or preparing a gathering.
type Baton = tokio::sync::OwnedMutexGuard<mpsc::UnboundedReceiver<Queued>>;

/// Takes a gathering from the queue whenever this lane is free and no other lane is preparing
/// one, and writes it.
async fn run_lane(inner: Weak<PgInner>, jobs: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Queued>>>) {
    loop {
        let mut baton = Arc::clone(&jobs).lock_owned().await;
        let Some(first) = baton.recv().await else { return };
        let mut gathering = vec![first];
        while gathering.len() < MAX_GATHERING
            && let Ok(job) = baton.try_recv()
        {
            gathering.push(job);
        }
        gathering.retain(|queued| !queued.abandoned());
        if gathering.is_empty() {
            continue;
        }
        let Some(inner) = inner.upgrade() else { return };
        write_gathering(&inner, gathering, baton).await;
    }
}

/// Writes a gathering in one transaction, or each of its operations alone when that fails;
/// passes the `baton` on when it reaches its commit (or after [`PATIENCE`]).
async fn write_gathering(inner: &Arc<PgInner>, queued: Vec<Queued>, baton: Baton) {
    let (mut jobs, mut claims) = (Vec::with_capacity(queued.len()), Vec::new());
    for item in queued {
        match item {
            Queued::Task(job) => jobs.push(job),
            Queued::Claim(job) => claims.push(job),
        }
    }
    // The same task twice in one gathering: the later ones run alone, after it.
    let mut seen = HashSet::with_capacity(jobs.len());
    let (mut gathered, mut again): (Vec<Job>, Vec<Job>) = jobs.drain(..).partition(|job| seen.insert(job.task_id));
    let client = match inner.writer.get().await {
        Ok(client) => client,
        Err(err) => {
            for job in gathered.into_iter().chain(again) {
                let _ = job.reply.send(Err(super::unavailable(&err)));
            }
            for job in claims {
                let _ = job.reply.send(Err(super::unavailable(&err)));
            }
            return;
        }
    };
    // Nothing is written for callers that gave up while a connection was awaited.
    gathered.retain(|job| !job.reply.is_closed());
    again.retain(|job| !job.reply.is_closed());
    claims.retain(|job| !job.reply.is_closed());
    if gathered.is_empty() && claims.is_empty() {
        for job in again {
            alone(inner, job);
        }
        return;
    }
    let mut tx = PgTx::begin(client, Arc::clone(&inner.shared));
    let mut baton = Some(baton);
    let prepared = {
        let prepare = write_all(&mut tx, &gathered, &claims);
        tokio::pin!(prepare);
        tokio::select! {
            biased;
            prepared = &mut prepare => prepared,
            () = tokio::time::sleep(PATIENCE) => {
                baton = None;
                prepare.await
            }
        }
    };
    // The next lane gathers while this one commits (or, failed, runs each operation alone).
    drop(baton);
    let outcome = match prepared {
        Ok(outcomes) => tx.commit().await.map(|()| outcomes),
        Err(err) => Err(err),
    };
    match outcome {
        Ok((outcomes, claimed)) => answer(inner, tx, gathered, claims, outcomes, claimed),
        Err(err) => failed(inner, tx, err, gathered, claims).await,
    }
    for job in again {
        alone(inner, job);
    }
}

/// Answers each operation and claim of a gathering that committed, with its events; what
/// the resolutions entailed goes to the last answer, so that the workers it concerns are woken.
fn answer(
    inner: &Arc<PgInner>,
    tx: PgTx,
    gathered: Vec<Job>,
    claims: Vec<ClaimJob>,
    outcomes: Outcomes,
    claimed: Claimed,
) {
    let Committed { events, .. } = inner.committed((), tx);
    let mut events = events.into_iter();
    let mut answers: Vec<_> = outcomes
        .into_iter()
        .map(|(outcome, n_events)| {
            let events: Vec<_> = events.by_ref().take(n_events).collect();
            outcome.map(|value| Committed { value, events })
        })
        .collect();
    let mut claimed: Vec<_> = claimed
        .into_iter()
        .map(|(index, value, n_events)| (index, Committed { value, events: events.by_ref().take(n_events).collect() }))
        .collect();
    // What the resolutions entailed (dependents released) goes to the last answer
    // that commits, so that the workers it concerns are woken.
    if let Some(Ok(last)) = answers.iter_mut().rev().find(|answer| answer.is_ok()) {
        last.events.extend(events);
    } else if let Some((_, last)) = claimed.last_mut() {
        last.events.extend(events);
    }
    for (job, answer) in gathered.into_iter().zip(answers) {
        let _ = job.reply.send(answer);
    }
    let mut claims: Vec<_> = claims.into_iter().map(Some).collect();
    for (index, answer) in claimed {
        if let Some(job) = claims[index].take() {
            let _ = job.reply.send(Ok(answer));
        }
    }
}

/// A gathering that did not commit: after the COMMIT went out its outcome is unknown and each
/// caller is told so; otherwise each operation and claim runs alone.
async fn failed(inner: &Arc<PgInner>, tx: PgTx, err: StoreError, gathered: Vec<Job>, claims: Vec<ClaimJob>) {
    match err {
        // As when a create runs alone.
        StoreError::Unavailable(text) if tx.committing => {
            tx.discard();
            for job in gathered {
                let _ = job.reply.send(Err(StoreError::Unavailable(text.clone())));
            }
            for job in claims {
                let _ = job.reply.send(Err(StoreError::Unavailable(text.clone())));
            }
        }
        err => {
            tracing::debug!(error = %err, operations = gathered.len(), "gathered writes failed; running each alone");
            match err {
                StoreError::Unavailable(_) => tx.discard(),
                _ => tx.rollback().await,
            }
            for job in gathered {
                alone(inner, job);
            }
            for job in claims {
                claim_alone(inner, job);
            }
        }
    }
}

/// Runs an operation in a transaction of its own (answering its caller).
fn alone(inner: &Arc<PgInner>, job: Job) {
    if job.reply.is_closed() {
        return;
    }
    let store = PgStore { inner: Arc::clone(inner) };
    tokio::spawn(async move {
        let _ = job.reply.send(store.alone(job.task_id, job.op, job.now).await);
    });
}

/// Runs a claim in a transaction of its own (answering its caller).
fn claim_alone(inner: &Arc<PgInner>, job: ClaimJob) {
    if job.reply.is_closed() {
        return;
    }
    let store = PgStore { inner: Arc::clone(inner) };
    tokio::spawn(async move {
        let _ = job.reply.send(store.claim_alone(job.request, job.now).await);
    });
}

/// Each create's answer (a refusal is an answer) and how many events it recorded, in order.
type Outcomes = Vec<(Result<TaskStatus, StoreError>, usize)>;

/// Each claim's runs (by its index among the gathering's claims) and how many events it
/// recorded, in the order the claims were written.
type Claimed = Vec<(usize, Vec<Claim>, usize)>;

/// The gathering's claims that one query serves: those on one queue with the same dimensions.
struct ClaimLine<'a> {
    task_queue_id: &'a str,
    dimensions: String,
    /// Whether the dimensions hold anything (else only tasks requiring nothing match).
    constrained: bool,
    limit: i64,
    /// Indexes of its claims, in the order they came.
    members: Vec<usize>,
}

/// Runs every operation of `jobs` (distinct task ids) in `tx`, in order, then `claims`: one
/// round trip reads and locks what they need, each is judged on it, and what the resolutions
/// among them entail is judged once for all.
async fn write_all(tx: &mut PgTx, jobs: &[Job], claims: &[ClaimJob]) -> Result<(Outcomes, Claimed), StoreError> {
    let lines = claim_lines(claims)?;
    let (mut found, claimable) = read_all(tx, jobs, &lines).await?;
    tx.gather_resolutions();
    let outcomes = run_jobs(tx, jobs, &mut found).await?;
    let claimed = claim_all(tx, claims, &lines, claimable.into_iter()).await?;
    if let Some(known) = &mut found.known {
        judge_groups(known, &found.loaded, jobs, &found.stored, &outcomes);
    }
    tx.resolve_gathered(found.known).await?;
    Ok((outcomes, claimed))
}

/// Judges each operation of the gathering alone, in order, on what [`read_all`] found; a
/// refused one is undone and answered.
async fn run_jobs(tx: &mut PgTx, jobs: &[Job], found: &mut Found) -> Result<Outcomes, StoreError> {
    let Found { loaded, upserted, known, stored } = found;
    let mut outcomes = Vec::with_capacity(jobs.len());
    for job in jobs {
        let mark = tx.mark();
        let outcome = match &job.op {
            Op::Create(definition) => {
                create_one(
                    tx,
                    definition,
                    job.task_id,
                    job.now,
                    stored.get(&job.task_id),
                    upserted.get(&definition.task_group_id),
                )
                .await
            }
            Op::Apply(command) => match loaded.get_mut(&job.task_id) {
                Some(row) => {
                    // Kept only where groups are judged on the rows' final states.
                    let before = known.is_some().then(|| row.task.clone());
                    let outcome = ops::tasks::apply_loaded(tx, row, command, job.now).await;
                    if let (Err(_), Some(before)) = (&outcome, before) {
                        // Refused: the row is as it was.
                        row.task = before;
                    }
                    outcome
                }
                None => Err(Rejection::from(Missing::Task(job.task_id)).into()),
            },
        };
        match outcome {
            Err(StoreError::Rejected(rejection)) => {
                if !tx.undo(&mark) {
                    return Err(StoreError::Internal("a gathered operation was refused after writing".into()));
                }
                outcomes.push((Err(StoreError::Rejected(rejection)), 0));
            }
            Err(err) => return Err(err),
            Ok(status) => outcomes.push((Ok(status), tx.events.len() - mark.events)),
        }
    }
    Ok(outcomes)
}

/// The gathering's claims by queue and dimensions, each line in the order its first claim came.
fn claim_lines(claims: &[ClaimJob]) -> Result<Vec<ClaimLine<'_>>, StoreError> {
    let mut lines: Vec<ClaimLine<'_>> = Vec::new();
    for (index, job) in claims.iter().enumerate() {
        let dimensions = json(&job.request.dimensions)?;
        let count = i64::try_from(job.request.count).unwrap_or(i64::MAX);
        match lines
            .iter_mut()
            .find(|line| line.task_queue_id == job.request.task_queue_id && line.dimensions == dimensions)
        {
            Some(line) => {
                line.limit = line.limit.saturating_add(count);
                line.members.push(index);
            }
            None => lines.push(ClaimLine {
                task_queue_id: &job.request.task_queue_id,
                constrained: !job.request.dimensions.is_empty(),
                dimensions,
                limit: count,
                members: vec![index],
            }),
        }
    }
    Ok(lines)
}

/// Hands each line's claimable rows (`found`, one answer per line) to its claims in the order
/// they came, each up to its count, and claims them by `ops::tasks::claim_candidates`, as
/// `ops::tasks::claim_work` does for one worker. A task two lines both found (a worker's
/// dimensions matching another's) goes to the first.
async fn claim_all(
    tx: &mut PgTx,
    claims: &[ClaimJob],
    lines: &[ClaimLine<'_>],
    found: impl Iterator<Item = Vec<tokio_postgres::Row>>,
) -> Result<Claimed, StoreError> {
    let mut claimed = Vec::with_capacity(claims.len());
    let mut taken = HashSet::new();
    for (line, rows) in lines.iter().zip(found) {
        let mut rows = rows.iter();
        for &index in &line.members {
            let ClaimJob { request, now, .. } = &claims[index];
            let events_before = tx.events.len();
            let mut candidates = Vec::with_capacity(request.count);
            while candidates.len() < request.count
                && let Some(found) = rows.next()
            {
                let (row, definition) = candidate(found)?;
                if taken.insert(row.task.task_id) {
                    candidates.push((row, definition));
                }
            }
            let runs = ops::tasks::claim_candidates(tx, candidates, request, *now).await?;
            claimed.push((index, runs, tx.events.len() - events_before));
        }
    }
    // The workers that took something record it (appended, their records not read).
    for (index, runs, _) in &claimed {
        let ClaimJob { request, now, .. } = &claims[*index];
        ops::workers::record_claims(tx, &request.worker_key(), runs, *now, None).await?;
    }
    // Each queue recorded as active, as a claim alone does.
    let mut queues: Vec<(&str, Timestamp)> =
        claims.iter().map(|job| (job.request.task_queue_id.as_str(), job.now)).collect();
    queues.sort_unstable_by_key(|(queue, _)| *queue);
    queues.dedup_by_key(|(queue, _)| *queue);
    for (queue, now) in queues {
        tx.touch_queue(queue, now).await?;
    }
    Ok(claimed)
}

/// Completes, once every operation ran, which of the commanded tasks' groups still hold an
/// unresolved task: besides them (as the lock round trip said), among them now, or created
/// into the group by this gathering.
fn judge_groups(
    known: &mut Known,
    loaded: &HashMap<TaskId, TaskRow>,
    jobs: &[Job],
    stored: &HashMap<TaskId, (TaskRow, String)>,
    outcomes: &Outcomes,
) {
    for row in loaded.values() {
        if !row.task.state().is_resolved() {
            known.unresolved.insert(row.task.meta.task_group_id);
        }
    }
    for (job, (outcome, _)) in jobs.iter().zip(outcomes) {
        if let (Op::Create(definition), Ok(_)) = (&job.op, outcome)
            && !stored.contains_key(&job.task_id)
        {
            known.unresolved.insert(definition.task_group_id);
        }
    }
}

/// One create of a gathering, judged as one alone is (`ops::tasks::create_task`), on what
/// the gathering's first round trip found.
async fn create_one(
    tx: &mut PgTx,
    definition: &TaskDefinition,
    task_id: TaskId,
    now: Timestamp,
    stored: Option<&(TaskRow, String)>,
    group: Option<&TaskGroup>,
) -> Result<TaskStatus, StoreError> {
    let lookup = match stored {
        Some((row, existing)) => CreateLookup {
            existing: Some((existing.clone(), row.task.status())),
            group: None,
            dependencies: Vec::new(),
        },
        None => {
            let group =
                group.ok_or_else(|| StoreError::Corrupt(format!("group {} not upserted", definition.task_group_id)))?;
            CreateLookup { existing: None, group: Some(group.clone()), dependencies: Vec::new() }
        }
    };
    ops::tasks::create_looked_up(tx, definition, task_id, now, lookup).await
}
