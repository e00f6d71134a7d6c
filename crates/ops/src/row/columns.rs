//! The one description of a `tasks` row: each column, how it is computed from a task, and
//! how a task is read back. Both backends build their inserts, per-step updates and task
//! selects from [`TASK_COLUMNS`]; adding a task field is an entry here, a line in
//! [`task_from_cells`], and a migration per backend.

use std::borrow::Cow;

use shoal_engine::definition::Requires;
use shoal_engine::status::Run;
use shoal_engine::task::{Task, TaskMeta};
use shoal_engine::{TaskId, Timestamp};

use super::{TaskRow, corrupt, json};
use crate::NewTask;
use crate::StoreError;

/// A value bound to (or read from) a task column.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell<'a> {
    /// Text, or NULL: borrowed from the task where it holds the text as stored.
    Text(Option<Cow<'a, str>>),
    /// An integer, or NULL.
    Int(Option<i64>),
    /// Whether the run joins the claim line ([`Value::LinePlace`] on PostgreSQL).
    Joins(bool),
}

impl Cell<'_> {
    /// The cell holding its own text.
    pub fn into_owned(self) -> Cell<'static> {
        match self {
            Cell::Text(text) => Cell::Text(text.map(|text| Cow::Owned(text.into_owned()))),
            Cell::Int(int) => Cell::Int(int),
            Cell::Joins(joins) => Cell::Joins(joins),
        }
    }
}

/// A column's SQL type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Text.
    Text,
    /// JSON text; PostgreSQL stores it as `jsonb`.
    Jsonb,
    /// An integer (PostgreSQL: whichever width the column has).
    Int,
}

/// Which backends have a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backends {
    /// Both.
    Both,
    /// SQLite only.
    Sqlite,
    /// PostgreSQL only.
    Postgres,
}

/// Where a column's value comes from.
pub enum Value {
    /// The task as it stands.
    Task(fn(&Task) -> Result<Cell<'_>, StoreError>),
    /// The creation (definition, `created`).
    Created(for<'a> fn(&NewTask<'a>) -> Cell<'a>),
    /// The run's place in the claim line, drawn by the backend when the run is pending.
    LinePlace,
}

/// One column of `tasks`.
pub struct Column {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// Which backends have it.
    pub backends: Backends,
    /// Its value.
    pub value: Value,
    /// Whether every step rewrites it (others are written at creation, or by their own
    /// operation: the claim line's place, priority, dimensions).
    pub each_step: bool,
}

impl Column {
    /// Whether `backend` has this column.
    pub fn on(&self, backend: Backends) -> bool {
        self.backends == Backends::Both || self.backends == backend
    }
}

const fn column(name: &'static str, kind: Kind, value: Value) -> Column {
    Column { name, kind, backends: Backends::Both, value, each_step: false }
}

const fn step(name: &'static str, kind: Kind, value: fn(&Task) -> Result<Cell<'_>, StoreError>) -> Column {
    Column { name, kind, backends: Backends::Both, value: Value::Task(value), each_step: true }
}

const fn only(backends: Backends, column: Column) -> Column {
    Column { backends, ..column }
}

fn text(value: &str) -> Cell<'_> {
    Cell::Text(Some(Cow::Borrowed(value)))
}

/// A JSON column that is NULL for the empty value.
fn json_unless(empty: bool, value: &impl serde::Serialize) -> Result<Cell<'static>, StoreError> {
    Ok(Cell::Text((!empty).then(|| json(value).map(Cow::Owned)).transpose()?))
}

fn millis(at: Option<Timestamp>) -> Cell<'static> {
    Cell::Int(at.map(Timestamp::millis))
}

/// Every column of `tasks`. Those [`READ`] of them come first, in the order a select reads.
pub const TASK_COLUMNS: &[Column] = &[
    column("task_id", Kind::Text, Value::Task(|t| Ok(text(t.task_id.as_str())))),
    column("task_queue_id", Kind::Text, Value::Task(|t| Ok(text(&t.meta.task_queue_id)))),
    column("scheduler_id", Kind::Text, Value::Task(|t| Ok(text(&t.meta.scheduler_id)))),
    column("project_id", Kind::Text, Value::Task(|t| Ok(text(&t.meta.project_id)))),
    column("task_group_id", Kind::Text, Value::Task(|t| Ok(text(t.meta.task_group_id.as_str())))),
    column("priority", Kind::Text, Value::Task(|t| Ok(Cell::Text(Some(Cow::Owned(json(&t.meta.priority)?)))))),
    column("retries", Kind::Int, Value::Task(|t| Ok(Cell::Int(Some(i64::from(t.meta.retries)))))),
    step("retries_left", Kind::Int, |t| Ok(Cell::Int(Some(i64::from(t.retries_left()))))),
    column("deadline", Kind::Int, Value::Task(|t| Ok(Cell::Int(Some(t.meta.deadline.millis()))))),
    column("expires", Kind::Int, Value::Task(|t| Ok(Cell::Int(Some(t.meta.expires.millis()))))),
    column("requires", Kind::Text, Value::Task(|t| Ok(text(t.meta.requires.as_str())))),
    column("dimensions", Kind::Jsonb, Value::Task(|t| json_unless(t.meta.dimensions.is_empty(), &t.meta.dimensions))),
    step("runs", Kind::Text, |t| Ok(Cell::Text(Some(Cow::Owned(json(t.runs())?))))),
    column("pending_seq", Kind::Int, Value::LinePlace),
    column("routes", Kind::Text, Value::Task(|t| json_unless(t.meta.routes.is_empty(), &t.meta.routes))),
    column("tags", Kind::Text, Value::Task(|t| json_unless(t.meta.tags.is_empty(), &t.meta.tags))),
    column("slices", Kind::Text, Value::Task(|t| json_unless(t.meta.slices.is_empty(), &t.meta.slices))),
    column("dedup", Kind::Text, Value::Task(|t| Ok(Cell::Text(t.meta.dedup_hash.as_deref().map(Cow::Borrowed))))),
    column("created_by", Kind::Text, Value::Task(|t| Ok(Cell::Text(t.meta.created_by.as_deref().map(Cow::Borrowed))))),
    column("secrets", Kind::Int, Value::Task(|t| Ok(Cell::Int(t.meta.has_secrets.then_some(1))))),
    column("index_options", Kind::Text, Value::Task(|t| json_unless(t.meta.index.is_none(), &t.meta.index))),
    // Written, not read back: derived from the above, or kept for queries.
    step("state", Kind::Text, |t| Ok(text(t.state().as_str()))),
    step("taken_until", Kind::Int, |t| Ok(millis(t.running_until()))),
    step("deadline_due", Kind::Int, |t| Ok(millis(t.deadline_due()))),
    step("worker", Kind::Text, |t| Ok(Cell::Text(t.running_worker().map(Cow::Owned)))),
    column("definition", Kind::Text, Value::Created(|new| text(new.definition))),
    only(
        Backends::Postgres,
        column("priority_rank", Kind::Int, Value::Task(|t| Ok(Cell::Int(Some(i64::from(t.meta.priority.rank())))))),
    ),
    column("created", Kind::Int, Value::Created(|new| Cell::Int(Some(new.created.millis())))),
];

/// How many of [`TASK_COLUMNS`] a task select reads, from the first.
pub const READ: usize = at("index_options") + 1;

/// The index of column `name` in [`TASK_COLUMNS`] (a compile-time error when there is none).
pub(super) const fn at(name: &str) -> usize {
    let mut index = 0;
    while index < TASK_COLUMNS.len() {
        if same(TASK_COLUMNS[index].name, name) {
            return index;
        }
        index += 1;
    }
    panic!("no such task column");
}

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The index of task column `$name` as a task select reads it, found at compile time: a
/// compile error when there is none, or when it stands at or after [`READ`] (a select would
/// not read it back).
macro_rules! col {
    ($name:literal) => {{
        const INDEX: usize = at($name);
        const _: () = assert!(INDEX < READ, concat!("task column `", $name, "` is read back but stands after READ"));
        INDEX
    }};
}

/// A row's cells, by column index, as a backend reads them.
pub trait Cells {
    /// A text cell (NULL as `None`).
    fn text(&self, index: usize) -> Result<Option<&str>, StoreError>;
    /// An integer cell (NULL as `None`).
    fn int(&self, index: usize) -> Result<Option<i64>, StoreError>;
}

/// The columns a select of whole tasks names, in order, on `backend`, each after `prefix`
/// (`definition` and the queries' own columns follow at [`READ`] and after).
pub fn select_list(backend: Backends, prefix: &str) -> String {
    let names: Vec<String> = TASK_COLUMNS[..READ]
        .iter()
        .map(|column| match (column.kind, backend) {
            (Kind::Jsonb, Backends::Postgres) => format!("{prefix}{}::text", column.name),
            _ => format!("{prefix}{}", column.name),
        })
        .collect();
    names.join(", ")
}

/// A backend's [`select_list`], made once and shown in `format!`.
pub struct SelectList(std::sync::LazyLock<String>);

impl SelectList {
    /// The list `make` builds.
    pub const fn new(make: fn() -> String) -> SelectList {
        SelectList(std::sync::LazyLock::new(make))
    }
}

impl std::fmt::Display for SelectList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The cells of a new task's row on `backend`, in [`TASK_COLUMNS`] order (the line place
/// as `pending_seq` on SQLite, as whether it joins on PostgreSQL).
pub fn insert_cells<'a>(row: &'a TaskRow, new: &NewTask<'a>, backend: Backends) -> Result<Vec<Cell<'a>>, StoreError> {
    let mut cells = Vec::with_capacity(TASK_COLUMNS.len());
    for column in TASK_COLUMNS.iter().filter(|column| column.on(backend)) {
        cells.push(match &column.value {
            Value::Task(value) => value(&row.task)?,
            Value::Created(value) => value(new),
            Value::LinePlace if backend == Backends::Postgres => Cell::Joins(crate::pending_run(&row.task).is_some()),
            Value::LinePlace => Cell::Int(row.pending_seq.map(|seq| seq as i64)),
        });
    }
    Ok(cells)
}

/// The columns every step rewrites.
pub fn step_columns() -> impl Iterator<Item = &'static Column> {
    TASK_COLUMNS.iter().filter(|column| column.each_step)
}

/// The cells of the columns every step rewrites, in [`step_columns`] order.
pub fn step_cells(task: &Task) -> Result<Vec<Cell<'_>>, StoreError> {
    // Room for the place in line and the task id the backends bind after them.
    let mut cells = Vec::with_capacity(8);
    for column in step_columns() {
        cells.push(match &column.value {
            Value::Task(value) => value(task)?,
            Value::Created(_) | Value::LinePlace => unreachable!("step columns are computed from the task"),
        });
    }
    Ok(cells)
}

/// A task read back from the first [`READ`] cells of a row.
pub fn task_from_cells(row: &impl Cells) -> Result<TaskRow, StoreError> {
    let text = |name: usize| -> Result<&str, StoreError> {
        row.text(name)?.ok_or_else(|| corrupt(format!("{} is NULL", TASK_COLUMNS[name].name)))
    };
    let int = |name: usize| -> Result<i64, StoreError> {
        row.int(name)?.ok_or_else(|| corrupt(format!("{} is NULL", TASK_COLUMNS[name].name)))
    };
    let id = |name: usize| -> Result<TaskId, StoreError> {
        let raw = text(name)?;
        TaskId::parse(raw).ok_or_else(|| corrupt(format!("bad task id {raw}")))
    };
    let small = |name: usize| -> Result<u32, StoreError> {
        u32::try_from(int(name)?).map_err(|_| corrupt(format!("{} out of range", TASK_COLUMNS[name].name)))
    };
    let runs: Vec<Run> = serde_json::from_str(text(col!("runs"))?).map_err(corrupt)?;
    let meta = TaskMeta {
        task_queue_id: text(col!("task_queue_id"))?.to_owned(),
        scheduler_id: text(col!("scheduler_id"))?.to_owned(),
        project_id: text(col!("project_id"))?.to_owned(),
        task_group_id: id(col!("task_group_id"))?,
        priority: serde_json::from_str(text(col!("priority"))?).map_err(corrupt)?,
        retries: small(col!("retries"))?,
        deadline: Timestamp(int(col!("deadline"))?),
        expires: Timestamp(int(col!("expires"))?),
        requires: Requires::from_name(text(col!("requires"))?).ok_or_else(|| corrupt("bad requires"))?,
        dimensions: optional_json(row, col!("dimensions"))?,
        routes: optional_json(row, col!("routes"))?,
        tags: optional_json(row, col!("tags"))?,
        slices: optional_json(row, col!("slices"))?,
        dedup_hash: row.text(col!("dedup"))?.map(str::to_owned),
        has_secrets: row.int(col!("secrets"))? == Some(1),
        created_by: row.text(col!("created_by"))?.map(str::to_owned),
        index: row.text(col!("index_options"))?.map(serde_json::from_str).transpose().map_err(corrupt)?,
    };
    let retries_left = small(col!("retries_left"))?;
    Ok(TaskRow {
        task: Task::from_parts(id(col!("task_id"))?, meta, retries_left, runs),
        pending_seq: row.int(col!("pending_seq"))?.map(|seq| seq as u64),
    })
}

/// A JSON column that is NULL for the empty value.
fn optional_json<T: serde::de::DeserializeOwned + Default>(row: &impl Cells, index: usize) -> Result<T, StoreError> {
    match row.text(index)? {
        None => Ok(T::default()),
        Some(json) => serde_json::from_str(json).map_err(corrupt),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_columns_read_back_are_on_both_backends_and_computed_from_the_task() {
        for column in &TASK_COLUMNS[..READ] {
            assert_eq!(column.backends, Backends::Both, "{}", column.name);
            assert!(!matches!(column.value, Value::Created(_)), "{}", column.name);
        }
    }

    #[test]
    fn column_names_are_distinct() {
        for (index, column) in TASK_COLUMNS.iter().enumerate() {
            assert_eq!(at(column.name), index, "{} is named twice", column.name);
        }
    }
}
