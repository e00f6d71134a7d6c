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

use shoal_engine::{TaskId, Timestamp};
use tokio::sync::{mpsc, oneshot};

use super::{PgInner, PgStore};
use crate::postgres::tx::{Known, PgTx};
use crate::row::{TaskRow, json};
use crate::{Committed, Op, Outcome, StoreError};

mod read;
mod served;

use read::{Found, read_all};
pub(crate) use served::Gathered;

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
    pub(crate) op: Op,
    pub(crate) now: Timestamp,
    pub(crate) reply: oneshot::Sender<Result<Committed<Outcome>, StoreError>>,
}

/// Whether an operation is gathered: a create without dependencies (one with dependencies
/// locks them before its group), a task command, a claim.
pub(crate) fn gathers(op: &Op) -> bool {
    match op {
        Op::CreateTask(create) => create.definition.dependencies.is_empty(),
        Op::Apply(_) | Op::ClaimWork(_) => true,
        _ => false,
    }
}

/// Where a server's writes are gathered.
pub(crate) struct Gatherer {
    lane: mpsc::UnboundedSender<Job>,
}

impl Gatherer {
    /// Starts the lanes; they end when the store (which holds the gatherer) is dropped.
    pub(crate) fn start(inner: &Weak<PgInner>) -> Gatherer {
        let (lane, jobs) = mpsc::unbounded_channel();
        let jobs = Arc::new(tokio::sync::Mutex::new(jobs));
        for _ in 0..LANES {
            tokio::spawn(run_lane(Weak::clone(inner), Arc::clone(&jobs)));
        }
        Gatherer { lane }
    }

    /// Queues `job`; gives it back when the lanes have stopped.
    pub(crate) fn submit(&self, job: Job) -> Result<(), Box<Job>> {
        self.lane.send(job).map_err(|err| Box::new(err.0))
    }
}

/// The queue, held by the one lane that is taking or preparing a gathering.
type Baton = tokio::sync::OwnedMutexGuard<mpsc::UnboundedReceiver<Job>>;

/// Takes a gathering from the queue whenever this lane is free and no other lane is preparing
/// one, and writes it.
async fn run_lane(inner: Weak<PgInner>, jobs: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Job>>>) {
    loop {
        let mut baton = Arc::clone(&jobs).lock_owned().await;
        let Some(first) = baton.recv().await else { return };
        let mut gathering = vec![first];
        while gathering.len() < MAX_GATHERING
            && let Ok(job) = baton.try_recv()
        {
            gathering.push(job);
        }
        // Nothing is written for a caller that stopped waiting (it gave up on a database
        // that did not answer, or its client went away).
        gathering.retain(|job| !job.reply.is_closed());
        if gathering.is_empty() {
            continue;
        }
        let Some(inner) = inner.upgrade() else { return };
        write_gathering(&inner, gathering, baton).await;
    }
}

/// Writes a gathering in one transaction, or each of its operations alone when that fails;
/// passes the `baton` on when it reaches its commit (or after [`PATIENCE`]).
async fn write_gathering(inner: &Arc<PgInner>, jobs: Vec<Job>, baton: Baton) {
    // The same task twice in one gathering: the later ones run alone, after it.
    let mut seen = HashSet::with_capacity(jobs.len());
    let (mut gathered, mut again): (Vec<Job>, Vec<Job>) =
        jobs.into_iter().partition(|job| job.op.task_id().is_none_or(|task_id| seen.insert(task_id)));
    // Claims after every other operation, so that they never take a task the gathering
    // commands (a cancel and a claim of one pending task arriving together: the cancel wins).
    gathered.sort_by_key(|job| matches!(job.op, Op::ClaimWork(_)));
    let client = match inner.writer.get().await {
        Ok(client) => client,
        Err(err) => {
            for job in gathered.into_iter().chain(again) {
                let _ = job.reply.send(Err(super::unavailable(&err)));
            }
            return;
        }
    };
    // Nothing is written for callers that gave up while a connection was awaited.
    gathered.retain(|job| !job.reply.is_closed());
    again.retain(|job| !job.reply.is_closed());
    if gathered.is_empty() {
        for job in again {
            alone(inner, job);
        }
        return;
    }
    let mut tx = PgTx::begin(client, Arc::clone(&inner.shared));
    let mut baton = Some(baton);
    let prepared = {
        let prepare = write_all(&mut tx, &gathered);
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
        Ok(outcomes) => answer(inner, tx, gathered, outcomes),
        Err(err) => failed(inner, tx, err, gathered).await,
    }
    for job in again {
        alone(inner, job);
    }
}

/// Answers each operation of a gathering that committed, with its events; what the
/// resolutions entailed goes to the last answer, so that the workers it concerns are woken.
fn answer(inner: &Arc<PgInner>, tx: PgTx, gathered: Vec<Job>, outcomes: Outcomes) {
    let Committed { events, .. } = inner.committed((), tx);
    let mut events = events.into_iter();
    let mut answers: Vec<_> = outcomes
        .into_iter()
        .map(|(outcome, n_events)| {
            let events: Vec<_> = events.by_ref().take(n_events).collect();
            outcome.map(|value| Committed { value, events })
        })
        .collect();
    if let Some(Ok(last)) = answers.iter_mut().rev().find(|answer| answer.is_ok()) {
        last.events.extend(events);
    }
    for (job, answer) in gathered.into_iter().zip(answers) {
        let _ = job.reply.send(answer);
    }
}

/// A gathering that did not commit: after the COMMIT went out its outcome is unknown and each
/// caller is told so; otherwise each operation runs alone.
async fn failed(inner: &Arc<PgInner>, tx: PgTx, err: StoreError, gathered: Vec<Job>) {
    match err {
        // As when an operation runs alone.
        StoreError::Unavailable(text) if tx.committing => {
            tx.discard();
            for job in gathered {
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
        let _ = job.reply.send(store.alone(job.op, job.now).await);
    });
}

/// Each operation's answer (a refusal is an answer) and how many events it recorded, in order.
type Outcomes = Vec<(Result<Outcome, StoreError>, usize)>;

/// The gathering's claims that one query serves: those on one queue with the same dimensions.
pub(super) struct ClaimLine<'a> {
    pub(super) task_queue_id: &'a str,
    pub(super) dimensions: String,
    /// Whether the dimensions hold anything (else only tasks requiring nothing match).
    pub(super) constrained: bool,
    pub(super) limit: i64,
}

/// Runs every operation of `jobs` (distinct task ids, claims last) in `tx`, in order: one
/// round trip reads and locks what they need, each then runs as it does alone (`Op::run`),
/// served what that round trip found; what the resolutions among them entail is judged once
/// for all.
async fn write_all(tx: &mut PgTx, jobs: &[Job]) -> Result<Outcomes, StoreError> {
    let lines = claim_lines(jobs)?;
    let commanded: HashSet<TaskId> = jobs
        .iter()
        .filter_map(|job| match &job.op {
            Op::Apply(apply) => Some(apply.task_id),
            _ => None,
        })
        .collect();
    let (Found { loaded, upserted, mut known, stored }, claimable) = read_all(tx, jobs, &commanded, &lines).await?;
    let lines = lines.iter().map(|line| (line.task_queue_id.to_owned(), line.dimensions.clone()));
    tx.gathered = Some(Box::new(Gathered::new(commanded, loaded, upserted, stored, lines.zip(claimable).collect())));
    tx.gather_resolutions();
    let mut outcomes = Vec::with_capacity(jobs.len());
    for job in jobs {
        let mark = tx.mark();
        match job.op.run(tx, job.now).await {
            Err(StoreError::Rejected(rejection)) => {
                if !tx.undo(&mark) {
                    return Err(StoreError::Internal("a gathered operation was refused after writing".into()));
                }
                outcomes.push((Err(StoreError::Rejected(rejection)), 0));
            }
            Err(err) => return Err(err),
            Ok(outcome) => outcomes.push((Ok(outcome), tx.events.len() - mark.events)),
        }
    }
    let gathered = tx.end_gathering().await?;
    if let Some(known) = &mut known {
        judge_groups(known, &gathered.loaded, jobs, &gathered.stored, &outcomes);
    }
    tx.resolve_gathered(known).await?;
    Ok(outcomes)
}

/// The gathering's claims by queue and dimensions, each line in the order its first claim
/// came, asking for as many runs as its claims together.
fn claim_lines(jobs: &[Job]) -> Result<Vec<ClaimLine<'_>>, StoreError> {
    let mut lines: Vec<ClaimLine<'_>> = Vec::new();
    for job in jobs {
        let Op::ClaimWork(claim) = &job.op else { continue };
        let request = &claim.request;
        let dimensions = json(&request.dimensions)?;
        let count = i64::try_from(request.count).unwrap_or(i64::MAX);
        match lines.iter_mut().find(|line| line.task_queue_id == request.task_queue_id && line.dimensions == dimensions)
        {
            Some(line) => line.limit = line.limit.saturating_add(count),
            None => lines.push(ClaimLine {
                task_queue_id: &request.task_queue_id,
                constrained: !request.dimensions.is_empty(),
                dimensions,
                limit: count,
            }),
        }
    }
    Ok(lines)
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
        if let (Op::CreateTask(create), Ok(_)) = (&job.op, outcome)
            && !stored.contains_key(&create.task_id)
        {
            known.unresolved.insert(create.definition.task_group_id);
        }
    }
}
