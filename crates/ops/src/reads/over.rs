//! The read side, written once over [`ReadDb`]: each backend runs the queries and decodes the
//! rows; the listings' paging, continuation tokens and shapes are here.

use serde_json::value::RawValue;
use shoal_engine::artifact::{Artifact, LIVE_LOG_NAME, implicit_live_log};
use shoal_engine::backlog::PendingSet;
use shoal_engine::group::group_name;
use shoal_engine::worker::{
    KEPT_EVENTS, TaskRun, Worker, WorkerEvent, WorkerKey, newest_first, run_events, worker_name,
};
use shoal_engine::{Rejection, TaskId, Timestamp};

use crate::OutboxEntry;
use crate::auth::AuthKind;
use crate::documents::{DocKind, Document};
use crate::graph::{GraphNode, GraphRecord, StoredGraph};
use crate::page::{
    MAX_PAGE_BYTES, artifact_page, fitting, newest_first_token, page, parse_seq, parse_task_id, task_token,
    worker_claim_token, worker_token,
};
use crate::row::{Backends, TaskRow, select_list};
use crate::{
    ArtifactKey, AuthSnapshot, ClaimedRun, GroupListing, Page, PendingListing, QueueCounts, Reads, RecentGraph,
    RecentGroup, StoreError, TagQuery, TaskGroup, TaskQueueInfo, TaskRecord, WorkerListing, WorkerRun,
};

/// What a backend's read connection offers: one query each, on committed state.
pub trait ReadDb {
    /// Tasks as `query` selects them, in its order, at most `limit`, with their definitions.
    fn tasks(&self, query: TaskQuery<'_>, limit: usize) -> Result<Vec<StoredTask>, StoreError>;
    /// The sizes in bytes of the definitions of the tasks `tasks` would return, in its order.
    fn task_sizes(&self, query: TaskQuery<'_>, limit: usize) -> Result<Vec<u64>, StoreError>;
    /// How many tasks `query` selects.
    fn count_tagged(&self, query: &TagQuery) -> Result<u64, StoreError>;
    /// Groups created before `before` (`(created, id)`), newest first, at most `limit`.
    fn recent_groups(&self, before: (i64, &str), limit: usize) -> Result<Vec<RecentGroup>, StoreError>;
    /// How many of a group's tasks are where, the name of the task named like it, and the
    /// names of its first `names` tasks by id.
    fn group_facts(&self, group: TaskId, names: usize) -> Result<GroupFacts, StoreError>;
    /// Graphs created before `before` (`(created, id)`), newest first, at most `limit`.
    fn recent_graphs(&self, before: (i64, &str), limit: usize) -> Result<Vec<(StoredGraph, Timestamp)>, StoreError>;
    /// A queue's pending and running counts.
    fn queue_counts(&self, task_queue_id: &str) -> Result<QueueCounts, StoreError>;
    /// The dimension sets of at most `scan` of a queue's pending runs (the longest-waiting, as
    /// the backend's pending index orders them), each with how many wait on it and the oldest
    /// `scheduled` among them.
    fn pending_sets(&self, task_queue_id: &str, scan: usize) -> Result<Vec<PendingSet>, StoreError>;
    /// Task queues after `after`, by id, at most `limit`.
    fn task_queues(&self, after: &str, limit: usize) -> Result<Vec<TaskQueueInfo>, StoreError>;
    /// One task queue.
    fn task_queue(&self, task_queue_id: &str) -> Result<Option<TaskQueueInfo>, StoreError>;
    /// The stored record of an artifact (not the implicit live log).
    fn stored_artifact(&self, key: &ArtifactKey) -> Result<Option<Artifact>, StoreError>;
    /// A run's stored artifacts named after `after`, by name, at most `limit`.
    fn artifacts(&self, task_id: TaskId, run_id: u32, after: &str, limit: usize) -> Result<Vec<Artifact>, StoreError>;
    /// Artifacts expired at `now`, earliest first, at most `limit`.
    fn expired_artifacts(&self, now: Timestamp, limit: usize) -> Result<Vec<(ArtifactKey, Artifact)>, StoreError>;
    /// The bytes of a run's uploaded blobs, by their records.
    fn run_bytes(&self, task_id: TaskId, run_id: u32) -> Result<u64, StoreError>;
    /// A task group.
    fn task_group(&self, group: TaskId) -> Result<Option<TaskGroup>, StoreError>;
    /// A graph's row.
    fn task_graph(&self, task_graph_id: TaskId) -> Result<Option<StoredGraph>, StoreError>;
    /// Every task of a graph, by label.
    fn graph_nodes(&self, task_graph_id: TaskId) -> Result<Vec<GraphNode>, StoreError>;
    /// Outbox messages from sequence `from` on, in order, at most `limit`.
    fn outbox(&self, from: u64, limit: usize) -> Result<Vec<OutboxEntry>, StoreError>;
    /// Resolved tasks expired at `now`, earliest first, at most `limit`, each with its number
    /// of runs.
    fn expired_tasks(&self, now: Timestamp, limit: usize) -> Result<Vec<(TaskId, u32)>, StoreError>;
    /// The auth generation, and every stored JSON of a kind (with `Some`), by id.
    fn auth(&self, kind: Option<AuthKind>) -> Result<(i64, Vec<String>), StoreError>;
    /// A worker's record.
    fn worker(&self, key: &WorkerKey) -> Result<Option<Worker>, StoreError>;
    /// A queue's workers after `(group, id)`, by group then id, at most `limit`.
    fn workers(&self, task_queue_id: &str, after: (&str, &str), limit: usize) -> Result<Vec<Worker>, StoreError>;
    /// A queue's running runs: the worker holding each (`group/id`) and its task.
    fn running_by_worker(&self, task_queue_id: &str) -> Result<Vec<(String, TaskId)>, StoreError>;
    /// A worker's claims made before `before` (`(at, first taskId)`), newest first, at most
    /// `limit`.
    fn worker_claims(&self, key: &WorkerKey, before: (i64, &str), limit: usize)
    -> Result<Vec<ClaimRecord>, StoreError>;
    /// A worker's kept events numbered before `before`, newest first, at most `limit`.
    fn worker_events(&self, key: &WorkerKey, before: u64, limit: usize) -> Result<Vec<(u64, WorkerEvent)>, StoreError>;
    /// A document.
    fn document(&self, kind: DocKind, key: &str) -> Result<Option<Document>, StoreError>;
    /// Documents of a kind with keys after `after` and before `end`, by key, at most `limit`.
    fn documents(
        &self,
        kind: DocKind,
        after: &str,
        end: &str,
        limit: usize,
    ) -> Result<Vec<(String, Document)>, StoreError>;
    /// Documents of a kind due at `now`, earliest first, at most `limit`.
    fn due_documents(&self, kind: DocKind, now: Timestamp, limit: usize)
    -> Result<Vec<(String, Document)>, StoreError>;
}

/// What a backend reads of a group for its listing.
#[derive(Debug, Clone)]
pub struct GroupFacts {
    /// Where its tasks are.
    pub counts: shoal_engine::group::GroupCounts,
    /// The name of its task named like it (a decision task), if it has one.
    pub namesake: Option<String>,
    /// The names of its first tasks by id.
    pub names: Vec<String>,
}

/// Which tasks a listing reads.
#[derive(Debug, Clone, Copy)]
pub enum TaskQuery<'a> {
    /// One task.
    Id(TaskId),
    /// A group's tasks with ids after the second, by task id.
    Group(TaskId, &'a str),
    /// The dependents of a task with ids after the second, by task id.
    Dependents(TaskId, &'a str),
    /// A queue's pending tasks after a place in line, in line order (arrival).
    Pending(&'a str, u64),
    /// A queue's running tasks with ids after the second, by task id.
    Claimed(&'a str, &'a str),
    /// The tasks filed under a tag before the second (`filed:taskId`), newest first, each with
    /// the time it is filed at.
    Tagged(&'a str, &'a str),
    /// The tasks a client created before the second (`created:taskId`), newest first, each
    /// with its `created`.
    Created(&'a str, &'a str),
}

impl TaskQuery<'_> {
    /// Which kind it is: an index into each backend's statements, in the order declared.
    pub fn kind(&self) -> usize {
        match self {
            TaskQuery::Id(_) => 0,
            TaskQuery::Group(..) => 1,
            TaskQuery::Dependents(..) => 2,
            TaskQuery::Pending(..) => 3,
            TaskQuery::Claimed(..) => 4,
            TaskQuery::Tagged(..) => 5,
            TaskQuery::Created(..) => 6,
        }
    }

    /// The key it selects by, and where the listing resumes (a task id or a place in line).
    pub fn params(&self) -> (&str, String) {
        match self {
            TaskQuery::Id(task_id) => (task_id.as_str(), String::new()),
            TaskQuery::Group(key, after) | TaskQuery::Dependents(key, after) => (key.as_str(), (*after).to_owned()),
            TaskQuery::Pending(queue, after) => (queue, after.to_string()),
            TaskQuery::Claimed(key, after) | TaskQuery::Tagged(key, after) | TaskQuery::Created(key, after) => {
                (key, (*after).to_owned())
            }
        }
    }
}

/// A backend's statements for each kind of [`TaskQuery`], built once: reading the tasks with
/// their definitions, and reading only their definitions' sizes.
pub struct TaskStatements {
    tasks: [String; 7],
    sizes: [String; 7],
}

impl TaskStatements {
    /// From `build` (a statement per kind of query, selecting its first argument, or its
    /// second where the tasks table is `t`), `backend`'s task columns, and the size expressions.
    pub fn new(build: fn(&str, &str) -> [String; 7], backend: Backends, size: &str, size_of_t: &str) -> TaskStatements {
        let (columns, prefixed) = (select_list(backend, ""), select_list(backend, "t."));
        let tasks = build(&format!("{columns}, definition"), &format!("{prefixed}, t.definition"));
        TaskStatements { tasks, sizes: build(size, size_of_t) }
    }

    /// The statement reading the tasks of `query`, with their definitions.
    pub fn tasks(&self, query: &TaskQuery<'_>) -> &str {
        &self.tasks[query.kind()]
    }

    /// The statement reading the sizes of the definitions of the tasks of `query`.
    pub fn sizes(&self, query: &TaskQuery<'_>) -> &str {
        &self.sizes[query.kind()]
    }
}

/// A task as a read found it.
pub struct StoredTask {
    /// Its row.
    pub row: TaskRow,
    /// Its stored definition.
    pub definition: Box<RawValue>,
    /// For a task read by tag, the time it is filed at (its `created`, or for the failed
    /// list when it failed).
    pub filed: Option<i64>,
}

/// [`Reads`] over a backend's [`ReadDb`].
pub struct ReadsOver<D>(pub D);

impl<D: ReadDb> Reads for ReadsOver<D> {
    fn artifact(&self, task_id: TaskId, run_id: u32, name: &str) -> Result<Option<Artifact>, StoreError> {
        let key = ArtifactKey { task_id, run_id, name: name.to_owned() };
        if let Some(artifact) = self.0.stored_artifact(&key)? {
            return Ok(Some(artifact));
        }
        if name != LIVE_LOG_NAME {
            return Ok(None);
        }
        self.implicit_live_log(task_id, run_id)
    }

    fn list_artifacts(
        &self,
        task_id: TaskId,
        run_id: u32,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<Artifact>, StoreError> {
        let items = self.0.artifacts(task_id, run_id, after.unwrap_or(""), limit + 1)?;
        artifact_page(items, after, limit, || self.implicit_live_log(task_id, run_id))
    }

    fn expired_artifacts(&self, now: Timestamp, limit: usize) -> Result<Vec<(ArtifactKey, Artifact)>, StoreError> {
        self.0.expired_artifacts(now, limit)
    }

    fn run_bytes(&self, task_id: TaskId, run_id: u32) -> Result<u64, StoreError> {
        self.0.run_bytes(task_id, run_id)
    }

    fn task(&self, task_id: TaskId) -> Result<Option<TaskRecord>, StoreError> {
        Ok(self.0.tasks(TaskQuery::Id(task_id), 1)?.into_iter().next().map(record))
    }

    fn tasks_by_id(&self, ids: &[TaskId], after: Option<&str>, limit: usize) -> Result<Page<TaskRecord>, StoreError> {
        let start = match parse_task_id(after)? {
            None => 0,
            Some(last) => ids.iter().position(|id| *id == last).map(|at| at + 1).ok_or_else(|| {
                StoreError::from(Rejection::invalid("continuationToken", "is not a token this listing issued"))
            })?,
        };
        // Sizes first (of as many known tasks as could fit), so a page never holds more than
        // its bound in memory; `fitting` then decides the page as for any listing.
        let (mut known, mut sizes, mut total) = (Vec::new(), Vec::new(), 0);
        for &task_id in &ids[start.min(ids.len())..] {
            if known.len() > limit || total > MAX_PAGE_BYTES {
                break;
            }
            let Some(&size) = self.0.task_sizes(TaskQuery::Id(task_id), 1)?.first() else { continue };
            known.push(task_id);
            sizes.push(size);
            total += size;
        }
        let fit = fitting(&sizes, limit);
        let mut items = Vec::with_capacity(fit);
        for &task_id in &known[..fit] {
            items.extend(self.0.tasks(TaskQuery::Id(task_id), 1)?.into_iter().next().map(record));
        }
        Ok(page(items, known.len() > fit, |task| task.status.task_id.to_string()))
    }

    fn task_graph(&self, task_graph_id: TaskId) -> Result<Option<GraphRecord>, StoreError> {
        Ok(self.0.task_graph(task_graph_id)?.map(StoredGraph::into_record))
    }

    fn graph_nodes(&self, task_graph_id: TaskId) -> Result<Vec<GraphNode>, StoreError> {
        self.0.graph_nodes(task_graph_id)
    }

    fn task_group(&self, group: TaskId) -> Result<Option<TaskGroup>, StoreError> {
        self.0.task_group(group)
    }

    fn list_task_group(
        &self,
        group: TaskId,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<TaskRecord>, StoreError> {
        let after = task_token(after)?;
        let (found, more) = self.bounded(TaskQuery::Group(group, &after), limit)?;
        Ok(page(found.into_iter().map(record).collect(), more, |task| task.status.task_id.to_string()))
    }

    fn list_tagged(&self, query: &TagQuery, after: Option<&str>, limit: usize) -> Result<Page<TaskRecord>, StoreError> {
        if query.tag.is_empty() && query.created_by.is_none() {
            return self.live(query, after, limit);
        }
        let first = query.until.map_or(i64::MAX, |until| until.millis().saturating_add(1));
        let after = match after {
            None | Some("") => format!("{first}:"),
            Some(token) => {
                newest_first_token(Some(token))?;
                token.to_owned()
            }
        };
        let listing = match query.creator_listing() {
            Some(client_id) => TaskQuery::Created(client_id, &after),
            None => TaskQuery::Tagged(&query.tag, &after),
        };
        let (found, more) = self.bounded(listing, limit)?;
        let mut items = Vec::with_capacity(found.len());
        let mut last = None;
        for task in found {
            let created = match task.filed {
                Some(filed) => Timestamp(filed),
                None => created_of(&task)?,
            };
            // Newest first: past `since`, nothing further can be listed.
            if query.since.is_some_and(|since| created < since) {
                return Ok(Page { items, continuation: None });
            }
            last = Some(format!("{}:{}", created.millis(), task.row.task.task_id));
            if query.selects(&task.row.task, created) {
                items.push(record(task));
            }
        }
        Ok(Page { items, continuation: if more { last } else { None } })
    }

    fn count_tagged(&self, query: &TagQuery) -> Result<u64, StoreError> {
        self.0.count_tagged(query)
    }

    fn list_task_groups(&self, after: Option<&str>, limit: usize) -> Result<Page<GroupListing>, StoreError> {
        let (created, id) = newest_first_token(after)?;
        let mut found = self.0.recent_groups((created, id), limit + 1)?;
        let more = found.len() > limit;
        found.truncate(limit);
        let mut items = Vec::with_capacity(found.len());
        for recent in found {
            let group = recent.group.task_group_id;
            let facts = self.0.group_facts(group, NAMES_READ)?;
            let graph = self.0.task_graph(group)?.map(|graph| graph.into_record().metadata.name);
            let name = group_name(graph.as_deref(), facts.namesake.as_deref(), &facts.names);
            items.push(GroupListing { recent, name, verdict: facts.counts.verdict(), task_counts: facts.counts });
        }
        Ok(page(items, more, |item| format!("{}:{}", item.recent.created.millis(), item.recent.group.task_group_id)))
    }

    fn list_task_graphs(&self, after: Option<&str>, limit: usize) -> Result<Page<RecentGraph>, StoreError> {
        let (created, id) = newest_first_token(after)?;
        let mut found = self.0.recent_graphs((created, id), limit + 1)?;
        let more = found.len() > limit;
        found.truncate(limit);
        let items =
            found.into_iter().map(|(graph, created)| RecentGraph { graph: graph.into_record(), created }).collect();
        Ok(page(items, more, |item: &RecentGraph| {
            format!("{}:{}", item.created.millis(), item.graph.status.task_graph_id)
        }))
    }

    fn list_dependents(
        &self,
        task_id: TaskId,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<TaskRecord>, StoreError> {
        let after = task_token(after)?;
        let (found, more) = self.bounded(TaskQuery::Dependents(task_id, &after), limit)?;
        Ok(page(found.into_iter().map(record).collect(), more, |task| task.status.task_id.to_string()))
    }

    fn queue_counts(&self, task_queue_id: &str) -> Result<QueueCounts, StoreError> {
        self.0.queue_counts(task_queue_id)
    }

    fn pending_sets(&self, task_queue_id: &str, scan: usize) -> Result<Vec<PendingSet>, StoreError> {
        self.0.pending_sets(task_queue_id, scan)
    }

    fn list_pending(
        &self,
        task_queue_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<PendingListing>, StoreError> {
        let (found, more) = self.bounded(TaskQuery::Pending(task_queue_id, parse_seq(after)?), limit)?;
        let listed = found
            .into_iter()
            .map(|StoredTask { row, definition, .. }| {
                let run = row.task.runs().last();
                let listing = PendingListing {
                    task_id: row.task.task_id,
                    run_id: run.map_or(0, |run| run.run_id),
                    inserted: run.map_or(Timestamp(0), |run| run.scheduled),
                    task: definition,
                };
                (row.pending_seq.unwrap_or(0), listing)
            })
            .collect();
        let page = page(listed, more, |(seq, _)| seq.to_string());
        Ok(Page { items: page.items.into_iter().map(|(_, item)| item).collect(), continuation: page.continuation })
    }

    fn list_claimed(
        &self,
        task_queue_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<ClaimedRun>, StoreError> {
        let after = task_token(after)?;
        let (found, more) = self.bounded(TaskQuery::Claimed(task_queue_id, &after), limit)?;
        let mut listed = Vec::with_capacity(found.len());
        for StoredTask { row, definition, .. } in found {
            let Some(run) = row.task.runs().last() else {
                return Err(StoreError::Corrupt(format!("running task {} without runs", row.task.task_id)));
            };
            listed.push(ClaimedRun {
                task_id: row.task.task_id,
                run_id: run.run_id,
                worker_group: run.worker_group.clone().unwrap_or_default(),
                worker_id: run.worker_id.clone().unwrap_or_default(),
                claimed: run.started.unwrap_or(run.scheduled),
                task: definition,
            });
        }
        Ok(page(listed, more, |claimed| claimed.task_id.to_string()))
    }

    fn list_task_queues(&self, after: Option<&str>, limit: usize) -> Result<Page<TaskQueueInfo>, StoreError> {
        let mut found = self.0.task_queues(after.unwrap_or(""), limit + 1)?;
        let more = found.len() > limit;
        found.truncate(limit);
        Ok(page(found, more, |queue| queue.task_queue_id.clone()))
    }

    fn task_queue(&self, task_queue_id: &str) -> Result<Option<TaskQueueInfo>, StoreError> {
        self.0.task_queue(task_queue_id)
    }

    fn outbox(&self, from: u64, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        self.0.outbox(from, limit)
    }

    fn expired_tasks(&self, now: Timestamp, limit: usize) -> Result<Vec<(TaskId, u32)>, StoreError> {
        self.0.expired_tasks(now, limit)
    }

    fn auth_generation(&self) -> Result<i64, StoreError> {
        Ok(self.0.auth(None)?.0)
    }

    fn auth_snapshot(&self) -> Result<AuthSnapshot, StoreError> {
        let (generation, clients) = self.0.auth(Some(AuthKind::Client))?;
        let (_, roles) = self.0.auth(Some(AuthKind::Role))?;
        Ok(AuthSnapshot {
            generation,
            clients: clients.iter().map(|body| decode_auth("client", body)).collect::<Result<_, _>>()?,
            roles: roles.iter().map(|body| decode_auth("role", body)).collect::<Result<_, _>>()?,
        })
    }

    fn worker(&self, key: &WorkerKey) -> Result<Option<(Worker, Vec<TaskId>)>, StoreError> {
        let Some(worker) = self.0.worker(key)? else { return Ok(None) };
        let name = worker_name(&key.worker_group, &key.worker_id);
        let running = self.0.running_by_worker(&key.task_queue_id)?;
        let tasks = running.into_iter().filter(|(holder, _)| *holder == name).map(|(_, task_id)| task_id).collect();
        Ok(Some((worker, tasks)))
    }

    fn list_workers(
        &self,
        task_queue_id: &str,
        after: Option<&str>,
        limit: usize,
        keep: &dyn Fn(&Worker, bool) -> bool,
    ) -> Result<Page<WorkerListing>, StoreError> {
        let (mut group, mut id) = worker_token(after)?;
        let busy: std::collections::HashSet<String> =
            self.0.running_by_worker(task_queue_id)?.into_iter().map(|(worker, _)| worker).collect();
        let mut listed = Vec::new();
        // Filters drop workers after reading: read on until the page is full or none are left.
        loop {
            let batch = self.0.workers(task_queue_id, (&group, &id), (limit + 1).max(100))?;
            let exhausted = batch.len() < (limit + 1).max(100);
            for worker in batch {
                (group, id) = (worker.key.worker_group.clone(), worker.key.worker_id.clone());
                let busy = busy.contains(&worker_name(&group, &id));
                if keep(&worker, busy) {
                    listed.push(WorkerListing { worker, busy });
                    if listed.len() > limit {
                        listed.truncate(limit);
                        return Ok(page(listed, true, |w| {
                            worker_name(&w.worker.key.worker_group, &w.worker.key.worker_id)
                        }));
                    }
                }
            }
            if exhausted {
                return Ok(page(listed, false, |_| String::new()));
            }
        }
    }

    fn list_worker_runs(
        &self,
        key: &WorkerKey,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<WorkerRun>, StoreError> {
        let (at, first) = match after {
            None | Some("") => (i64::MAX, String::new()),
            Some(token) => worker_claim_token(token)?,
        };
        // Each claim took at least one run: `limit` claims hold the page, one more says
        // whether more follow. A claim's runs are never split between pages.
        let claims = self.0.worker_claims(key, (at, &first), limit + 1)?;
        let mut items = Vec::new();
        let mut listed = 0;
        for claim in &claims {
            if items.len() >= limit {
                break;
            }
            let claimed = claim.claimed;
            items.extend(claim.runs.iter().rev().map(|run| WorkerRun {
                task_id: run.task_id,
                run_id: run.run_id,
                claimed,
            }));
            listed += 1;
        }
        let continuation = (listed < claims.len())
            .then(|| claims.get(listed.wrapping_sub(1)))
            .flatten()
            .map(|claim| format!("{}:{}", claim.claimed.millis(), claim.first));
        Ok(Page { items, continuation })
    }

    fn worker_events(&self, key: &WorkerKey) -> Result<Vec<WorkerEvent>, StoreError> {
        let mut events: Vec<WorkerEvent> =
            self.0.worker_events(key, u64::MAX, KEPT_EVENTS as usize)?.into_iter().map(|(_, event)| event).collect();
        let Some(worker) = self.0.worker(key)? else { return Ok(events) };
        let mut runs = Vec::new();
        for recent in &worker.recent_tasks {
            let Some(found) = self.0.tasks(TaskQuery::Id(recent.task_id), 1)?.into_iter().next() else { continue };
            if let Some(run) = found.row.task.runs().get(recent.run_id as usize) {
                runs.push((recent.task_id, run.clone()));
            }
        }
        events.extend(run_events(key, &runs));
        newest_first(&mut events);
        Ok(events)
    }
}

impl<D: ReadDb> ReadsOver<D> {
    /// The first tasks `query` finds, at most `limit` and, beyond the first, at most
    /// [`MAX_PAGE_BYTES`] of definitions; and whether more follow. The sizes are read first,
    /// so a page never holds more than that in memory however large each definition is.
    pub(super) fn bounded(&self, query: TaskQuery<'_>, limit: usize) -> Result<(Vec<StoredTask>, bool), StoreError> {
        let sizes = self.0.task_sizes(query, limit + 1)?;
        let fitting = fitting(&sizes, limit);
        let more = sizes.len() > fitting;
        let mut found = self.0.tasks(query, fitting)?;
        // A task committed between the two reads may have joined the range: keep the count.
        found.truncate(fitting);
        Ok((found, more))
    }

    /// The run's live log, derived from the run (claimed runs have one).
    fn implicit_live_log(&self, task_id: TaskId, run_id: u32) -> Result<Option<Artifact>, StoreError> {
        let Some(found) = self.0.tasks(TaskQuery::Id(task_id), 1)?.into_iter().next() else { return Ok(None) };
        let task = &found.row.task;
        Ok(task.runs().get(run_id as usize).and_then(|run| implicit_live_log(run, task.meta.expires)))
    }
}

/// One row of a backend's pending-set count: the dimensions' JSON (NULL for none), how many
/// runs, and the oldest `scheduled` (as a status writes it).
pub fn pending_set(dimensions: Option<&str>, pending: i64, oldest: &str) -> Result<PendingSet, StoreError> {
    let dimensions = match dimensions {
        None => Default::default(),
        Some(json) => serde_json::from_str(json).map_err(|err| crate::row::corrupt(format!("dimensions: {err}")))?,
    };
    let oldest = Timestamp::parse(oldest).ok_or_else(|| crate::row::corrupt(format!("scheduled: {oldest:?}")))?;
    Ok(PendingSet { dimensions, pending: pending as u64, oldest })
}

fn decode_auth<T: serde::de::DeserializeOwned>(kind: &str, body: &str) -> Result<T, StoreError> {
    serde_json::from_str(body).map_err(|err| crate::row::corrupt(format!("{kind} record: {err}")))
}

pub(super) fn record(found: StoredTask) -> TaskRecord {
    TaskRecord { status: found.row.task.status(), task: found.definition }
}

/// How many of a group's task names its name is judged from.
const NAMES_READ: usize = 20;

/// When a task was created (its definition's `created`, which its tags are filed at).
pub(super) fn created_of(task: &StoredTask) -> Result<Timestamp, StoreError> {
    #[derive(serde::Deserialize)]
    struct Created {
        created: Timestamp,
    }
    let created: Created = serde_json::from_str(task.definition.get()).map_err(crate::row::corrupt)?;
    Ok(created.created)
}

/// One claim as a worker's history keeps it: when, its first task, and every run it took.
#[derive(Debug, Clone)]
pub struct ClaimRecord {
    /// When it was made.
    pub claimed: Timestamp,
    /// Its first task (with `claimed`, where a listing resumes).
    pub first: TaskId,
    /// The runs it took, in the order claimed.
    pub runs: Vec<TaskRun>,
}

impl ClaimRecord {
    /// A stored row: its time, first task id and runs' JSON.
    ///
    /// # Errors
    /// Corrupt when the id or the JSON is not what was written.
    pub fn decode(at: i64, first: &str, runs: &str) -> Result<ClaimRecord, StoreError> {
        let first = TaskId::parse(first).ok_or_else(|| crate::row::corrupt(format!("task id {first}")))?;
        let runs = serde_json::from_str(runs).map_err(|err| crate::row::corrupt(format!("claimed runs: {err}")))?;
        Ok(ClaimRecord { claimed: Timestamp(at), first, runs })
    }
}
