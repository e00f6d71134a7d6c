//! A gathering's first round trip: every lock and read its operations and claims need, in
//! one pipeline, in the lock order that keeps two servers' gatherings out of a cycle.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::LazyLock;

use shoal_engine::TaskId;
use tokio_postgres::types::ToSql;

use super::{ClaimLine, Job};
use crate::ops::Waiting;
use crate::postgres::dimension_sets::claimable;
use crate::postgres::row::{GROUP_COLUMNS, N_TASK_COLUMNS, TASK_COLUMNS, task_from_row, task_group_from_row};
use crate::postgres::tx::{Known, PgTx};
use crate::row::TaskRow;
use crate::row::unresolved;
use crate::{Op, StoreError, TaskGroup};
use shoal_engine::command::TaskCommand;

/// What a gathering's first round trip found.
pub(super) struct Found {
    /// The commanded tasks, locked.
    pub(super) loaded: HashMap<TaskId, TaskRow>,
    /// The groups the gathering touches, created, extended or locked.
    pub(super) upserted: HashMap<TaskId, TaskGroup>,
    /// What resolving the commanded tasks would entail, when some command may resolve one.
    pub(super) known: Option<Known>,
    /// The created tasks that exist already, with their stored definitions.
    pub(super) stored: HashMap<TaskId, (TaskRow, String)>,
}

/// The commanded tasks, locked in id order.
static LOCK_TASKS: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = ANY($1) ORDER BY task_id FOR UPDATE"));

/// Every group the gathering touches, locked in one pass in id order: the created tasks'
/// groups created or extended, the commanded tasks' groups (which exist) only locked, since
/// ON CONFLICT locks a row its WHERE then leaves as it is. Their placeholder values pass the
/// NOT NULL checks, which PostgreSQL makes before it looks for the conflict.
static LOCK_GROUPS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO task_groups AS g (task_group_id, scheduler_id, expires, sealed, created) \
         SELECT t.id, max(t.scheduler_id), max(t.expires), NULL, max(t.created) FROM \
         (SELECT u.id, u.scheduler_id, u.expires, u.created FROM unnest($2::text[], $3::text[], $4::int8[], $5::int8[]) \
         AS u(id, scheduler_id, expires, created) \
         UNION ALL SELECT task_group_id, '', -1, 0 FROM tasks WHERE task_id = ANY($1)) AS t \
         GROUP BY t.id ORDER BY t.id COLLATE \"C\" \
         ON CONFLICT (task_group_id) DO UPDATE SET expires = greatest(g.expires, excluded.expires) \
         WHERE excluded.expires >= 0 \
         RETURNING {GROUP_COLUMNS}"
    )
});

/// The commanded tasks' groups as locked (the upsert returns only the rows it wrote), for
/// judging what resolutions entail.
static COMMANDED_GROUPS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {GROUP_COLUMNS} FROM task_groups WHERE task_group_id IN \
         (SELECT task_group_id FROM tasks WHERE task_id = ANY($1)) ORDER BY task_group_id"
    )
});

/// What resolving the commanded tasks would entail, asked before writing (a round trip
/// saved): which of their groups hold unresolved tasks besides them, and who waits on them.
/// Asked after the locks, so that both stay true until the commit: a group's tasks resolve,
/// and tasks join it, only under its lock, and a dependent is added only under a share lock
/// on what it requires.
const AROUND: &str = concat!(
    "SELECT g.id, NULL, NULL FROM (SELECT DISTINCT task_group_id AS id FROM tasks \
     WHERE task_id = ANY($1)) AS g WHERE EXISTS (SELECT 1 FROM tasks AS t WHERE t.task_group_id = g.id AND ",
    unresolved!("t"),
    " AND NOT t.task_id = ANY($1)) \
     UNION ALL SELECT required_task_id, dependent_task_id, requires FROM task_dependencies \
     WHERE required_task_id = ANY($1) AND NOT satisfied ORDER BY 1, 2"
);

/// The created tasks that exist already, with their definitions.
static EXISTING: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {TASK_COLUMNS}, definition FROM tasks WHERE task_id = ANY($1)"));

/// The groups a gathering's creates make or extend, column by column for [`LOCK_GROUPS`],
/// in id order: each once, extended to the latest expiry asked for; a new group takes the
/// scheduler and creation time of its first create (as when it commits first).
struct GroupPlan<'a> {
    group_ids: Vec<&'a str>,
    schedulers: Vec<&'a str>,
    expiries: Vec<i64>,
    created: Vec<i64>,
}

impl<'a> GroupPlan<'a> {
    fn of(jobs: &'a [Job]) -> GroupPlan<'a> {
        let mut groups: BTreeMap<&str, (&str, i64, i64)> = BTreeMap::new();
        for job in jobs {
            if let Op::CreateTask(create) = &job.op {
                let definition = &create.definition;
                let expires = shoal_engine::group::group_expiry(definition).millis();
                let first = (definition.scheduler_id.as_str(), expires, definition.created.millis());
                let entry = groups.entry(definition.task_group_id.as_str()).or_insert(first);
                entry.1 = entry.1.max(expires);
            }
        }
        GroupPlan {
            group_ids: groups.keys().copied().collect(),
            schedulers: groups.values().map(|(scheduler, _, _)| *scheduler).collect(),
            expiries: groups.values().map(|(_, expires, _)| *expires).collect(),
            created: groups.values().map(|(_, _, created)| *created).collect(),
        }
    }
}

/// Reads and locks, in one round trip, what the gathering's operations need ([`Found`]), and
/// what each claim line can take (one answer per line).
pub(super) async fn read_all(
    tx: &mut PgTx,
    jobs: &[Job],
    commanded: &HashSet<TaskId>,
    lines: &[ClaimLine<'_>],
) -> Result<(Found, Vec<Vec<tokio_postgres::Row>>), StoreError> {
    // Commanded tasks, then every group the gathering touches (the commanded tasks' and the
    // created tasks', new ones inserted), each set locked in id order in one statement, tasks
    // before groups as everywhere: gatherings on two servers do not wait on each other in a
    // cycle over these locks. Locking the two kinds of group one set after the other
    // deadlocked whenever tasks of one group were created and reported at once (a decision
    // task's graph), and PostgreSQL takes a second (deadlock_timeout) to say so.
    let mut commanded: Vec<&str> = commanded.iter().map(TaskId::as_str).collect();
    commanded.sort_unstable();
    let GroupPlan { group_ids, schedulers, expiries, created: group_created } = GroupPlan::of(jobs);
    let created: Vec<&str> = jobs
        .iter()
        .filter_map(|job| match &job.op {
            Op::CreateTask(create) => Some(create.task_id.as_str()),
            _ => None,
        })
        .collect();
    let resolving = jobs.iter().any(|job| {
        matches!(&job.op, Op::Apply(apply) if matches!(apply.command, TaskCommand::Resolve { .. } | TaskCommand::Cancel))
    });
    let commanded_params: [&(dyn ToSql + Sync); 1] = [&commanded];
    let touched_params: [&(dyn ToSql + Sync); 5] = [&commanded, &group_ids, &schedulers, &expiries, &group_created];
    let created_params: [&(dyn ToSql + Sync); 1] = [&created];
    // Claims after everything else: their locks skip what another transaction holds, so
    // they never wait and take no part in a cycle. Not the commanded tasks: this transaction
    // holds them already, which SKIP LOCKED does not skip.
    let line_params: Vec<Vec<&(dyn ToSql + Sync)>> = lines
        .iter()
        .map(|line| match line.constrained {
            true => vec![&line.task_queue_id as _, &line.limit as _, &line.dimensions as _, &commanded as _],
            false => vec![&line.task_queue_id as _, &line.limit as _, &commanded as _],
        })
        .collect();
    let mut queries: Vec<(&str, crate::postgres::pipeline::Params<'_>)> = Vec::with_capacity(5 + lines.len());
    if !commanded.is_empty() {
        queries.push((&LOCK_TASKS, &commanded_params));
    }
    // A gathering of claims alone touches no group: a statement saved on every claimWork
    // that finds its worker waiting, and on the wake-up's path.
    let touches_groups = !commanded.is_empty() || !group_ids.is_empty();
    if touches_groups {
        queries.push((&LOCK_GROUPS, &touched_params));
    }
    if !commanded.is_empty() && resolving {
        queries.push((&COMMANDED_GROUPS, &commanded_params));
        queries.push((AROUND, &commanded_params));
    }
    if !created.is_empty() {
        queries.push((&EXISTING, &created_params));
    }
    for (line, params) in lines.iter().zip(&line_params) {
        queries.push((claimable(true, line.constrained), params));
    }
    let mut answers = tx.pipeline(&queries).await?.into_iter();
    let mut loaded: HashMap<TaskId, TaskRow> = HashMap::with_capacity(commanded.len());
    let mut known = None;
    if !commanded.is_empty() {
        for row in &answers.next().unwrap_or_default() {
            let row = task_from_row(row)?;
            loaded.insert(row.task.task_id, row);
        }
    }
    let mut upserted: HashMap<TaskId, TaskGroup> = HashMap::with_capacity(group_ids.len());
    if touches_groups {
        for row in &answers.next().unwrap_or_default() {
            let group = task_group_from_row(row)?;
            upserted.insert(group.task_group_id, group);
        }
    }
    if !commanded.is_empty() && resolving {
        let locked = answers.next().unwrap_or_default();
        known = Some(known_before(&loaded, &locked, &answers.next().unwrap_or_default())?);
    }
    let mut stored: HashMap<TaskId, (TaskRow, String)> = HashMap::with_capacity(created.len());
    if !created.is_empty() {
        for row in &answers.next().unwrap_or_default() {
            let found = task_from_row(row)?;
            stored.insert(found.task.task_id, (found, row.try_get(N_TASK_COLUMNS)?));
        }
    }
    let claimable = answers.collect();
    Ok((Found { loaded, upserted, known, stored }, claimable))
}

/// What the lock round trip told about the commanded tasks (`loaded`): their groups
/// (`locked`), and (`around`) which of those hold other unresolved tasks and who waits on
/// each task. The groups' verdicts are completed by [`judge_groups`].
fn known_before(
    loaded: &HashMap<TaskId, TaskRow>,
    locked: &[tokio_postgres::Row],
    around: &[tokio_postgres::Row],
) -> Result<Known, StoreError> {
    let groups = locked.iter().map(task_group_from_row).collect::<Result<Vec<_>, _>>()?;
    let mut unresolved = HashSet::new();
    let mut waiting: HashMap<TaskId, Vec<Waiting>> = HashMap::new();
    for row in around {
        let first: &str = row.try_get(0)?;
        let id = TaskId::parse(first).ok_or_else(|| StoreError::Corrupt(format!("bad id {first}")))?;
        match (row.try_get::<_, Option<String>>(1)?, row.try_get::<_, Option<String>>(2)?) {
            (Some(dependent), Some(requires)) => {
                waiting.entry(id).or_default().push(Waiting::parse(&dependent, &requires)?);
            }
            _ => {
                unresolved.insert(id);
            }
        }
    }
    let covers = loaded.keys().copied().collect();
    Ok(Known { covers, groups, unresolved, waiting })
}
