//! Every write operation as a value: its inputs, its answer, and the `ops` function it runs.
//!
//! `Store::run` hands an operation to the backend, which runs `Op::run` in one
//! transaction, alone or gathered with others (PostgreSQL); either way the same function
//! runs. Adding an operation is one entry here and its function in the domain's module.

use shoal_engine::artifact::{Artifact, ArtifactRequest};
use shoal_engine::command::TaskCommand;
use shoal_engine::definition::TaskDefinition;
use shoal_engine::graph::ExtensionInput;
use shoal_engine::message::GraphStatus;
use shoal_engine::priority::Priority;
use shoal_engine::status::TaskStatus;
use shoal_engine::worker::{Sighting, Worker, WorkerKey};
use shoal_engine::{TaskId, Timestamp};

use shoal_engine::github::Build;
use shoal_engine::hook::{Hook, HookKey};
use shoal_engine::index::{Entry, Namespace};

use crate::WriteTx;
use crate::hooks::{FireOutcome, FireRequest, HookWrite, StoredHook};
use crate::named_secrets::NamedSecret;
use crate::{
    ArtifactKey, AuthChange, AuthOutcome, Claim, ClaimRequest, GraphRequest, GroupCancellation, StoreError, TaskGroup,
    WorkerChange,
};

/// A write operation: a value `Store::run` runs on either backend.
pub trait Operation: Into<Op> {
    /// What it answers.
    type Output;

    /// Its answer, taken out of the outcome ([`None`]: another operation's outcome).
    fn output(outcome: Outcome) -> Option<Self::Output>;
}

/// Declares each operation (a struct of its inputs), [`Op`] holding any of them, [`Outcome`]
/// holding any answer, and [`Op::run`] calling each one's function with `tx` and `now`, its
/// fields bound by reference.
macro_rules! operations {
    ($(
        $(#[$doc:meta])*
        $name:ident { $($(#[$field_doc:meta])* $field:ident: $ty:ty),* $(,)? } -> $output:ty
            = |$tx:ident, $now:ident| $run:expr;
    )*) => {
        $(
            $(#[$doc])*
            pub struct $name { $($(#[$field_doc])* pub $field: $ty),* }

            impl Operation for $name {
                type Output = $output;

                fn output(outcome: Outcome) -> Option<$output> {
                    match outcome {
                        Outcome::$name(value) => Some(value),
                        _ => None,
                    }
                }
            }

            impl From<$name> for Op {
                fn from(op: $name) -> Op {
                    Op::$name(op)
                }
            }
        )*

        /// Any write operation. Not boxed: it moves once, to its backend (a create carries
        /// its definition inline).
        #[allow(clippy::large_enum_variant)]
        pub enum Op {
            $($(#[$doc])* $name($name),)*
        }

        /// Any operation's answer, under the operation's name.
        pub enum Outcome {
            $(#[doc = concat!("What [`", stringify!($name), "`] answers.")] $name($output),)*
        }

        impl Op {
            /// Runs the operation in `tx`.
            pub async fn run(&self, tx: &mut impl WriteTx, now: Timestamp) -> Result<Outcome, StoreError> {
                match self {
                    $(Op::$name($name { $($field),* }) => {
                        #[allow(unused_variables)]
                        let ($tx, $now) = (&mut *tx, now);
                        $run.await.map(Outcome::$name)
                    })*
                }
            }
        }
    };
}

operations! {
    /// createTask: defines a task (idempotent for an equal definition) and schedules it when
    /// it has no unmet dependencies.
    CreateTask {
        /// The checked definition.
        definition: TaskDefinition,
        /// Its id.
        task_id: TaskId,
    } -> TaskStatus = |tx, now| crate::tasks::create_task(tx, definition, *task_id, now);

    /// A command on a task: schedule, reclaim, report, cancel, rerun, change its priority.
    Apply {
        /// The task.
        task_id: TaskId,
        /// What to do.
        command: TaskCommand,
    } -> TaskStatus = |tx, now| crate::tasks::apply(tx, *task_id, command, now);

    /// claimWork: claims up to the request's count of pending runs the worker matches, most
    /// urgent first.
    ClaimWork {
        /// The worker and what it asks for.
        request: ClaimRequest,
    } -> Vec<Claim> = |tx, now| crate::tasks::claim_work(tx, request, now);

    /// claimTask (deprecated): claims one specific pending run.
    ClaimTask {
        /// The task.
        task_id: TaskId,
        /// Its pending run.
        run_id: u32,
        /// The claiming worker's group.
        worker_group: String,
        /// The claiming worker's id.
        worker_id: String,
    } -> Claim = |tx, now| crate::tasks::claim_task(tx, *task_id, *run_id, worker_group, worker_id, now);

    /// Fires due claim expiries and deadlines, at most `limit` of each; answers how many fired.
    FireDue {
        /// Most of each kind to fire.
        limit: usize,
    } -> usize = |tx, now| crate::tasks::fire_due(tx, now, *limit);

    /// Creates a task graph and its tasks (idempotent for the very same submission).
    CreateGraph {
        /// The graph.
        request: GraphRequest,
    } -> GraphStatus = |tx, now| crate::graph::create(tx, request, now);

    /// Adds tasks to a task graph.
    ExtendGraph {
        /// The graph.
        task_graph_id: TaskId,
        /// The tasks to add.
        input: ExtensionInput,
        /// The client adding them.
        created_by: Option<String>,
    } -> GraphStatus = |tx, now| crate::graph::extend(tx, *task_graph_id, input, created_by.as_deref(), now);

    /// Seals a task group: no task may join it afterwards.
    SealGroup {
        /// The group.
        task_group_id: TaskId,
    } -> TaskGroup = |tx, now| crate::groups::seal(tx, *task_group_id, now);

    /// Cancels every unresolved task of a sealed group.
    CancelGroup {
        /// The group.
        task_group_id: TaskId,
    } -> GroupCancellation = |tx, now| crate::groups::cancel(tx, *task_group_id, now);

    /// Changes the priority of every unresolved task of a group; answers their ids.
    ChangeGroupPriority {
        /// The group.
        task_group_id: TaskId,
        /// The new priority.
        priority: Priority,
    } -> Vec<TaskId> = |tx, now| crate::groups::change_priority(tx, *task_group_id, *priority, now);

    /// createArtifact: records an artifact of a run (or repeats or replaces it as the rules
    /// allow).
    CreateArtifact {
        /// Where it is filed.
        key: ArtifactKey,
        /// What was asked.
        request: ArtifactRequest,
    } -> Artifact = |tx, now| crate::artifacts::create(tx, key, request.clone(), now);

    /// Records that a blob artifact's bytes are complete (once, while its run takes artifacts).
    ArtifactUploaded {
        /// The artifact.
        key: ArtifactKey,
        /// Its size in bytes.
        bytes: u64,
        /// The object holding them, when not the blob store's default name.
        object: Option<String>,
    } -> Artifact = |tx, now| crate::artifacts::uploaded(tx, key, (*bytes, object.clone()), now);

    /// Deletes the records of expired artifacts (after their bytes are gone).
    ForgetArtifacts {
        /// The artifacts.
        keys: Vec<ArtifactKey>,
    } -> usize = |tx, now| crate::artifacts::forget(tx, keys);

    /// Deletes the listed tasks that are resolved and expired (with their dependency rows,
    /// artifact records and graph nodes), the groups and graphs left empty, and up to `limit`
    /// task-queue and worker records past their retention; answers how many tasks went.
    ForgetTasks {
        /// The candidates.
        task_ids: Vec<TaskId>,
        /// Most queue and worker records to delete.
        limit: usize,
    } -> usize = |tx, now| crate::expire::forget_tasks(tx, task_ids, now, *limit);

    /// Creates, changes or deletes a client or role.
    ChangeAuth {
        /// The change.
        change: AuthChange,
    } -> AuthOutcome = |tx, now| crate::auth::change(tx, change, now);

    /// The token the servers sign with: the stored one, or `candidate` stored now.
    SigningToken {
        /// Stored when none is.
        candidate: String,
    } -> String = |tx, now| tx.signing_token(candidate);

    /// Records that a worker called, as its sighting describes; answers its record.
    WorkerSeen {
        /// The worker.
        key: WorkerKey,
        /// What it said of itself.
        sighting: Sighting,
    } -> Worker = |tx, now| crate::workers::seen(tx, key, sighting.clone(), now);

    /// Quarantines, terminates or declares a worker; answers its record.
    ChangeWorker {
        /// The worker.
        key: WorkerKey,
        /// The change.
        change: WorkerChange,
        /// The client making it.
        client_id: String,
    } -> Worker = |tx, now| crate::workers::change(tx, key, change, client_id, now);

    /// Marks missing the heartbeating workers silent since before `cutoff` (at most `limit`)
    /// and ends their runs; answers how many it marked.
    LoseSilentWorkers {
        /// Silent since before this.
        cutoff: Timestamp,
        /// Most to mark.
        limit: usize,
    } -> usize = |tx, now| crate::workers::lose_silent(tx, *cutoff, now, *limit);

    /// insertTask: puts an entry in the Index unless a live one of higher rank is there;
    /// answers the entry the namespace holds.
    IndexTask {
        /// Where.
        namespace: Namespace,
        /// What.
        entry: Entry,
    } -> Entry = |tx, now| crate::index::insert(tx, namespace, entry.clone(), now);

    /// deleteTask: removes the Index entry at a namespace, if any.
    UnindexTask {
        /// Where.
        namespace: Namespace,
    } -> () = |tx, now| crate::index::delete(tx, namespace);

    /// Stores a secret of the Secrets service, replacing any of its name.
    SetSecret {
        /// Its name.
        name: String,
        /// Its value and expiry.
        secret: NamedSecret,
    } -> () = |tx, now| crate::named_secrets::set(tx, name, secret, now);

    /// Removes a secret of the Secrets service (nothing when there is none).
    RemoveSecret {
        /// Its name.
        name: String,
    } -> () = |tx, now| crate::named_secrets::remove(tx, name);

    /// createHook or updateHook; a new hook gets `token` as its trigger token.
    PutHook {
        /// The checked definition.
        hook: Hook,
        /// Create or update.
        write: HookWrite,
        /// A new hook's trigger token.
        token: String,
    } -> StoredHook = |tx, now| crate::hooks::put(tx, hook, *write, token, now);

    /// removeHook: the hook, its token and its fires.
    RemoveHook {
        /// The hook.
        key: HookKey,
    } -> () = |tx, now| crate::hooks::remove(tx, key);

    /// resetTriggerToken.
    ResetTriggerToken {
        /// The hook.
        key: HookKey,
        /// Its new token.
        token: String,
    } -> () = |tx, now| crate::hooks::reset_token(tx, key, token);

    /// Fires a hook: its task created and the fire recorded in one transaction.
    FireHook {
        /// The fire, as the service prepared it.
        request: FireRequest,
    } -> FireOutcome = |tx, now| crate::hooks::fire(tx, request, now);

    /// A change built: its tasks created (dependencies first) and its build recorded, or none
    /// of them.
    CreateBuild {
        /// The build's record.
        build: Build,
        /// Its tasks, checked.
        tasks: Vec<(TaskId, TaskDefinition)>,
    } -> () = |tx, now| crate::github::create(tx, build, tasks, now);

    /// Records a build that made no tasks (and why, in its error).
    RecordBuild {
        /// The build's record.
        build: Build,
    } -> () = |tx, now| crate::github::record(tx, build);
}

impl Op {
    /// The task a task operation concerns (a create or a command), for gathering them.
    pub fn task_id(&self) -> Option<TaskId> {
        match self {
            Op::CreateTask(op) => Some(op.task_id),
            Op::Apply(op) => Some(op.task_id),
            _ => None,
        }
    }
}
