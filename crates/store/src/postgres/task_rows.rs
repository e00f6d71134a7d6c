//! Task rows as PostgreSQL writes them: inserts and per-step updates over arrays, built from
//! the one description of a row ([`crate::row::TASK_COLUMNS`]).

use std::borrow::Cow;
use std::sync::LazyLock;

use shoal_engine::task::Task;

use crate::StoreError;
use crate::ops::{NewTask, Place};
use crate::postgres::pipeline::Param;
use crate::row::{Backends, Cell, Kind, TASK_COLUMNS, TaskRow, Value, insert_cells, json, step_cells, step_columns};

/// How a row's place in line is named to [`UPDATE_ONE`] and [`UPDATE_MANY`].
fn place_name(place: Place) -> &'static str {
    match place {
        Place::None => "none",
        Place::Keep => "keep",
        Place::Back => "back",
    }
}

/// The columns PostgreSQL has, in [`TASK_COLUMNS`] order.
fn columns() -> impl Iterator<Item = &'static crate::row::Column> {
    TASK_COLUMNS.iter().filter(|column| column.on(Backends::Postgres))
}

/// The array type a column's cells are bound as.
fn array_type(column: &crate::row::Column) -> &'static str {
    match (&column.value, column.kind) {
        (Value::LinePlace, _) => "bool[]",
        (_, Kind::Int) => "int8[]",
        (_, Kind::Text | Kind::Jsonb) => "text[]",
    }
}

/// Inserts task rows given column by column, in order (their places in line follow it).
pub(crate) static INSERT_MANY: LazyLock<String> = LazyLock::new(|| {
    let names: Vec<&str> = columns().map(|column| column.name).collect();
    let arrays: Vec<String> =
        columns().enumerate().map(|(index, column)| format!("${}::{}", index + 1, array_type(column))).collect();
    let values: Vec<String> = columns()
        .map(|column| match (&column.value, column.kind) {
            (Value::LinePlace, _) => format!("CASE WHEN r.{} THEN nextval('tasks_pending_seq') END", column.name),
            (_, Kind::Jsonb) => format!("r.{}::jsonb", column.name),
            _ => format!("r.{}", column.name),
        })
        .collect();
    format!(
        "INSERT INTO tasks ({names}) SELECT {values} FROM unnest({arrays}) WITH ORDINALITY AS r({names}, n) \
         ORDER BY r.n",
        names = names.join(", "),
        values = values.join(", "),
        arrays = arrays.join(", "),
    )
});

/// Parameters of [`INSERT_MANY`].
pub(crate) static N_INSERT_PARAMS: LazyLock<usize> = LazyLock::new(|| columns().count());

/// The columns every step rewrites, as PostgreSQL binds them one row at a time.
fn step_sets(first: usize) -> Vec<String> {
    step_columns()
        .enumerate()
        .map(|(index, column)| {
            let ty = if column.kind == Kind::Int { "int8" } else { "text" };
            format!("{} = ${}::{ty}", column.name, first + index)
        })
        .collect()
}

/// Writes one task row's new state and tells its place in line: only this form can draw a new
/// place ('back'), since the caller needs it at once. Parameters: the task id, the step
/// cells, then place, priority, priority rank, whether the priority changed, dimensions.
pub(crate) static UPDATE_ONE: LazyLock<String> = LazyLock::new(|| {
    let sets = step_sets(2);
    let p = sets.len() + 1;
    format!(
        "UPDATE tasks SET {sets}, \
         pending_seq = CASE ${place} WHEN 'keep' THEN pending_seq WHEN 'back' THEN nextval('tasks_pending_seq') END, \
         priority = ${priority}::text, priority_rank = ${rank}, \
         definition = CASE WHEN ${changed} THEN jsonb_set(definition::jsonb, '{{priority}}', ${priority}::text::jsonb)::text \
         ELSE definition END, \
         dimensions = CASE WHEN ${dims}::text IS NULL THEN dimensions ELSE NULLIF(${dims}::text, '{{}}')::jsonb END \
         WHERE task_id = $1 RETURNING pending_seq",
        sets = sets.join(", "),
        place = p + 1,
        priority = p + 2,
        rank = p + 3,
        changed = p + 4,
        dims = p + 5,
    )
});

/// Writes several task rows' new states ('keep' or 'none' only), given column by column.
/// Each task appears once: a row matched twice would take one of the two arbitrarily.
pub(crate) static UPDATE_MANY: LazyLock<String> = LazyLock::new(|| {
    let names: Vec<&str> = step_columns().map(|column| column.name).collect();
    let sets: Vec<String> = names.iter().map(|name| format!("{name} = u.{name}")).collect();
    let mut arrays = vec!["$1::text[]".to_owned()];
    for (index, column) in step_columns().enumerate() {
        arrays.push(format!("${}::{}", index + 2, array_type(column)));
    }
    let p = arrays.len();
    for (offset, ty) in ["text[]", "text[]", "int2[]", "bool[]", "text[]"].iter().enumerate() {
        arrays.push(format!("${}::{ty}", p + offset + 1));
    }
    format!(
        "UPDATE tasks SET {sets}, pending_seq = CASE u.place WHEN 'keep' THEN tasks.pending_seq END, \
         priority = u.priority, priority_rank = u.priority_rank, \
         definition = CASE WHEN u.priority_changed \
         THEN jsonb_set(tasks.definition::jsonb, '{{priority}}', u.priority::jsonb)::text ELSE tasks.definition END, \
         dimensions = CASE WHEN u.dimensions IS NULL THEN tasks.dimensions ELSE NULLIF(u.dimensions, '{{}}')::jsonb END \
         FROM unnest({arrays}) AS u(task_id, {names}, place, priority, priority_rank, priority_changed, dimensions) \
         WHERE tasks.task_id = u.task_id",
        sets = sets.join(", "),
        arrays = arrays.join(", "),
        names = names.join(", "),
    )
});

/// Parameters of [`UPDATE_MANY`].
pub(crate) static N_UPDATE_PARAMS: LazyLock<usize> = LazyLock::new(|| step_columns().count() + 6);

/// A task row to insert.
pub(crate) struct NewRow {
    pub(crate) task_id: String,
    /// Its cells on PostgreSQL, in [`TASK_COLUMNS`] order.
    cells: Vec<Cell<'static>>,
}

impl NewRow {
    /// The row of a new task.
    pub(crate) fn new(row: &TaskRow, new: &NewTask<'_>) -> Result<NewRow, StoreError> {
        Ok(NewRow {
            task_id: row.task.task_id.as_str().to_owned(),
            cells: insert_cells(row, new, Backends::Postgres)?.into_iter().map(Cell::into_owned).collect(),
        })
    }

    /// A row with no cells, for tests of batching.
    #[cfg(test)]
    pub(crate) fn bare(task_id: &str) -> NewRow {
        NewRow { task_id: task_id.to_owned(), cells: Vec::new() }
    }

    /// The parameters of [`INSERT_MANY`]: one array per column.
    pub(crate) fn columns(mut rows: Vec<NewRow>) -> Vec<Param> {
        columns()
            .enumerate()
            .map(|(index, column)| array(column, rows.iter_mut().map(|row| take(&mut row.cells[index]))))
            .collect()
    }
}

/// A task row's new state.
pub(crate) struct RowUpdate {
    pub(crate) task_id: String,
    /// The columns every step rewrites, in [`step_columns`] order.
    cells: Vec<Cell<'static>>,
    place: &'static str,
    priority: String,
    priority_rank: i16,
    /// Whether the stored definition's priority is rewritten too.
    priority_changed: bool,
    /// Its new dimensions (`{}` for none) when its pending run moved to another slice.
    dimensions: Option<String>,
}

impl RowUpdate {
    /// `task`'s new state; its place in line, whether its priority changed and whether its
    /// pending run moved to other dimensions.
    pub(crate) fn new(task: &Task, place: Place, priority_changed: bool, moved: bool) -> Result<Self, StoreError> {
        Ok(RowUpdate {
            task_id: task.task_id.as_str().to_owned(),
            cells: step_cells(task)?.into_iter().map(Cell::into_owned).collect(),
            place: place_name(place),
            priority: json(&task.meta.priority)?,
            priority_rank: i16::from(task.meta.priority.rank()),
            priority_changed,
            dimensions: moved.then(|| json(&task.meta.dimensions)).transpose()?,
        })
    }

    /// An update with no cells, for tests of batching.
    #[cfg(test)]
    pub(crate) fn bare(task_id: &str) -> RowUpdate {
        RowUpdate {
            task_id: task_id.to_owned(),
            cells: Vec::new(),
            place: "none",
            priority: String::new(),
            priority_rank: 0,
            priority_changed: false,
            dimensions: None,
        }
    }

    /// The parameters of [`UPDATE_ONE`].
    pub(crate) fn params(self) -> Vec<Param> {
        let mut params: Vec<Param> = vec![Box::new(self.task_id)];
        params.extend(self.cells.into_iter().map(one));
        params.push(Box::new(self.place));
        params.push(Box::new(self.priority));
        params.push(Box::new(self.priority_rank));
        params.push(Box::new(self.priority_changed));
        params.push(Box::new(self.dimensions));
        params
    }

    /// The parameters of [`UPDATE_MANY`]: one array per column.
    pub(crate) fn columns(mut rows: Vec<RowUpdate>) -> Vec<Param> {
        let mut params: Vec<Param> = vec![Box::new(rows.iter().map(|row| row.task_id.clone()).collect::<Vec<_>>())];
        for (index, column) in step_columns().enumerate() {
            params.push(array(column, rows.iter_mut().map(|row| take(&mut row.cells[index]))));
        }
        params.push(Box::new(rows.iter().map(|row| row.place).collect::<Vec<_>>()));
        params.push(Box::new(rows.iter().map(|row| row.priority.clone()).collect::<Vec<_>>()));
        params.push(Box::new(rows.iter().map(|row| row.priority_rank).collect::<Vec<_>>()));
        params.push(Box::new(rows.iter().map(|row| row.priority_changed).collect::<Vec<_>>()));
        params.push(Box::new(rows.into_iter().map(|row| row.dimensions).collect::<Vec<_>>()));
        params
    }
}

fn take(cell: &mut Cell<'static>) -> Cell<'static> {
    std::mem::replace(cell, Cell::Int(None))
}

/// One cell as a parameter of its own.
fn one(cell: Cell<'static>) -> Param {
    match cell {
        Cell::Text(text) => Box::new(text.map(Cow::into_owned)),
        Cell::Int(int) => Box::new(int),
        Cell::Joins(joins) => Box::new(joins),
    }
}

/// A column's cells as one array parameter of [`array_type`].
fn array(column: &crate::row::Column, cells: impl Iterator<Item = Cell<'static>>) -> Param {
    match (&column.value, column.kind) {
        (Value::LinePlace, _) => Box::new(cells.map(|cell| matches!(cell, Cell::Joins(true))).collect::<Vec<_>>()),
        (_, Kind::Int) => {
            Box::new(cells.map(|cell| if let Cell::Int(int) = cell { int } else { None }).collect::<Vec<Option<i64>>>())
        }
        (_, Kind::Text | Kind::Jsonb) => Box::new(
            cells
                .map(|cell| if let Cell::Text(text) = cell { text.map(Cow::into_owned) } else { None })
                .collect::<Vec<Option<String>>>(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_numbers_its_parameters_from_one_without_gaps() {
        for (sql, count) in [(&*INSERT_MANY, *N_INSERT_PARAMS), (&*UPDATE_MANY, *N_UPDATE_PARAMS)] {
            for n in 1..=count {
                assert!(sql.contains(&format!("${n}::")), "${n} missing in {sql}");
            }
            assert!(!sql.contains(&format!("${}:", count + 1)), "{sql}");
        }
        let one = step_columns().count() + 6;
        for n in 1..=one {
            assert!(UPDATE_ONE.contains(&format!("${n}")), "${n} missing in {}", *UPDATE_ONE);
        }
    }
}
