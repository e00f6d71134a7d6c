//! What a PostgreSQL transaction holds back and how it goes on the wire.
//!
//! Round trips, not the database, bound how fast an operation is, so statements are
//! pipelined: BEGIN goes out with the first statement, and writes whose results nothing
//! waits for (inserts, dependency marks, the outbox row) are held back and sent together
//! with the next statement that is awaited, or with the COMMIT. The database runs them in
//! the order they were issued, so the operation reads as if each had run on its own; an
//! error in a held-back write surfaces at that next statement and rolls everything back.
//! A statement costs the database far more than a row, so held-back task rows are written
//! by one statement per kind over arrays, and a run of inserts, updates and the outbox
//! stage by one statement of data-modifying parts.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use crate::postgres::outbox;
use crate::postgres::task_rows::{INSERT_MANY, N_INSERT_PARAMS, N_UPDATE_PARAMS, NewRow, RowUpdate, UPDATE_MANY};

/// A statement parameter owned by a held-back write.
pub(crate) type Param = Box<dyn ToSql + Send + Sync>;

/// Parameters of a statement awaited at once.
pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A boxed future of a pipelined statement.
pub(crate) type Pending<'a> = Pin<Box<dyn Future<Output = Result<Vec<Row>, tokio_postgres::Error>> + Send + 'a>>;

/// A statement not sent yet.
pub(crate) enum HeldBack {
    /// A simple-protocol command (BEGIN, COMMIT).
    Command(&'static str),
    /// A write whose result nothing waits for.
    Write(Statement, Vec<Param>),
    /// New task rows in a row: written by one statement.
    Inserts(Vec<NewRow>),
    /// Task rows' new states in a row, each task at most once: written by one statement.
    Updates(Vec<RowUpdate>),
    /// The transaction's messages, staged in the outbox (their count, `encode`d, and the
    /// tag under which the server keeps them): the last write before the COMMIT.
    Stage(i32, String, i64),
}

impl HeldBack {
    /// Whether this writes the row of `task_id`.
    pub(crate) fn touches(&self, task_id: &str) -> bool {
        match self {
            HeldBack::Inserts(rows) => rows.iter().any(|row| row.task_id == task_id),
            HeldBack::Updates(rows) => rows.iter().any(|row| row.task_id == task_id),
            HeldBack::Command(_) | HeldBack::Write(..) | HeldBack::Stage(..) => false,
        }
    }
}

/// The held-back batch of inserts (`inserts`) or updates that a write of `task_id`'s row
/// can join: the last one, if only batches of the other kind that leave that row alone
/// came after it. The two kinds write different rows, so their order does not matter, and
/// a gathering that interleaves creates and reports still writes one statement of each
/// (a statement costs the database far more than a row). Nothing else is moved across:
/// held-back writes of other tables keep their order.
pub(crate) fn batch_for(held_back: &[HeldBack], task_id: &str, inserts: bool) -> Option<usize> {
    for (index, item) in held_back.iter().enumerate().rev() {
        match item {
            HeldBack::Inserts(_) | HeldBack::Updates(_) if item.touches(task_id) => return None,
            HeldBack::Inserts(_) if inserts => return Some(index),
            HeldBack::Updates(_) if !inserts => return Some(index),
            HeldBack::Inserts(_) | HeldBack::Updates(_) => {}
            HeldBack::Command(_) | HeldBack::Write(..) | HeldBack::Stage(..) => return None,
        }
    }
    None
}

/// A held-back item lowered to what goes on the wire.
pub(crate) enum Lowered {
    Command(&'static str),
    Write(Statement, Vec<Param>),
}

/// Drives `futures` to completion, polling each first in the order given: a statement's
/// request goes out when its future is first polled, so this sends them in that order.
pub(crate) async fn in_order<T>(mut futures: Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>) -> Vec<T> {
    let mut results: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (future, result) in futures.iter_mut().zip(results.iter_mut()) {
            if result.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *result = Some(value),
                    Poll::Pending => done = false,
                }
            }
        }
        if done { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
    results.into_iter().flatten().collect()
}

/// A run of held-back writes sent as one statement: task rows inserted, task rows updated
/// (none of them inserted by the same run: the parts of a statement do not see each other's
/// rows) and the outbox stage, which comes last.
#[derive(Default)]
pub(crate) struct Fused {
    pub(crate) inserts: Option<Vec<NewRow>>,
    pub(crate) updates: Option<Vec<RowUpdate>>,
    pub(crate) stage: Option<(i32, String, i64)>,
}

impl Fused {
    pub(crate) fn is_empty(&self) -> bool {
        self.inserts.is_none() && self.updates.is_none() && self.stage.is_none()
    }

    /// Takes `item` into the run, or gives it back when it cannot join.
    pub(crate) fn absorb(&mut self, item: HeldBack) -> Option<HeldBack> {
        if self.stage.is_some() {
            return Some(item);
        }
        match item {
            HeldBack::Inserts(rows) if self.inserts.is_none() && !self.updates_any(&rows) => {
                self.inserts = Some(rows);
                None
            }
            HeldBack::Updates(rows) if self.updates.is_none() && !self.inserts_any(&rows) => {
                self.updates = Some(rows);
                None
            }
            HeldBack::Stage(count, messages, tag) => {
                self.stage = Some((count, messages, tag));
                None
            }
            item => Some(item),
        }
    }

    fn updates_any(&self, rows: &[NewRow]) -> bool {
        self.updates
            .as_ref()
            .is_some_and(|updates| rows.iter().any(|row| updates.iter().any(|u| u.task_id == row.task_id)))
    }

    fn inserts_any(&self, rows: &[RowUpdate]) -> bool {
        self.inserts
            .as_ref()
            .is_some_and(|inserts| rows.iter().any(|row| inserts.iter().any(|i| i.task_id == row.task_id)))
    }
}

/// The statement writing a run with the given parts ([`Fused`]).
pub(crate) fn fused_sql(inserts: bool, updates: bool, stage: bool) -> &'static str {
    static FUSED: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        (0..8).map(|parts| build_fused_sql(parts & 1 != 0, parts & 2 != 0, parts & 4 != 0)).collect()
    });
    match (inserts, updates, stage) {
        (true, false, false) => &INSERT_MANY,
        (false, true, false) => &UPDATE_MANY,
        (false, false, true) => outbox::STAGE,
        _ => &FUSED[usize::from(inserts) | usize::from(updates) << 1 | usize::from(stage) << 2],
    }
}

/// Data-modifying parts of one statement run on one snapshot, in no set order unless the
/// main part reads them: the stage reads the others, so that its outbox id is drawn after
/// every row is written (and locked; see `outbox.rs`).
fn build_fused_sql(inserts: bool, updates: bool, stage: bool) -> String {
    let mut parts = Vec::new();
    let mut counts = Vec::new();
    let mut offset = 0;
    if inserts {
        parts.push(format!("i AS ({} RETURNING 1)", *INSERT_MANY));
        counts.push("(SELECT count(*) FROM i) AS ci");
        offset += *N_INSERT_PARAMS;
    }
    if updates {
        parts.push(format!("u AS ({} RETURNING 1)", renumber(&UPDATE_MANY, offset)));
        counts.push("(SELECT count(*) FROM u) AS cu");
        offset += *N_UPDATE_PARAMS;
    }
    let counts = counts.join(", ");
    let main = if stage {
        format!(
            "INSERT INTO outbox_pending (id, count, messages, origin, tag) \
             SELECT nextval('outbox_ids'), ${}, ${}, ${}, ${} FROM {counts}",
            offset + 1,
            offset + 2,
            offset + 3,
            offset + 4
        )
    } else {
        format!("SELECT * FROM {counts}")
    };
    format!("WITH {} {main}", parts.join(", "))
}

/// `sql` with each parameter `$n` renamed `$(n + offset)`.
fn renumber(sql: &str, offset: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        match rest[..digits].parse::<usize>() {
            Ok(n) => out.push_str(&(n + offset).to_string()),
            Err(_) => out.push_str(&rest[..digits]),
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(task_id: &str) -> NewRow {
        NewRow::bare(task_id)
    }

    fn update(task_id: &str) -> RowUpdate {
        RowUpdate::bare(task_id)
    }

    #[test]
    fn interleaved_creates_and_reports_join_one_batch_of_each() {
        let held = vec![
            HeldBack::Command("BEGIN"),
            HeldBack::Inserts(vec![insert("a")]),
            HeldBack::Updates(vec![update("b")]),
        ];
        assert_eq!(batch_for(&held, "c", true), Some(1), "an insert joins the inserts across updates of other rows");
        assert_eq!(batch_for(&held, "c", false), Some(2));
        let held = vec![
            HeldBack::Command("BEGIN"),
            HeldBack::Updates(vec![update("b")]),
            HeldBack::Inserts(vec![insert("a")]),
        ];
        assert_eq!(batch_for(&held, "c", false), Some(1), "an update joins the updates across inserts of other rows");
    }

    #[test]
    fn writes_of_one_row_keep_their_order() {
        let held = vec![HeldBack::Updates(vec![update("a")]), HeldBack::Inserts(vec![insert("b")])];
        assert_eq!(batch_for(&held, "a", false), None, "a second update of a row goes after the first");
        assert_eq!(batch_for(&held, "b", false), None, "an update of a new row goes after its insert");
        let held = vec![HeldBack::Inserts(vec![insert("a")]), HeldBack::Updates(vec![update("b")])];
        assert_eq!(batch_for(&held, "b", true), None);
        assert_eq!(batch_for(&held, "a", true), None);
    }

    #[test]
    fn a_run_of_inserts_updates_and_the_stage_is_one_statement() {
        let mut run = Fused::default();
        assert!(run.absorb(HeldBack::Inserts(vec![insert("a")])).is_none());
        assert!(run.absorb(HeldBack::Updates(vec![update("b")])).is_none());
        assert!(run.absorb(HeldBack::Stage(2, "[]".into(), 1)).is_none());
        assert!(run.absorb(HeldBack::Command("COMMIT")).is_some(), "a command is sent on its own");
        let mut run = Fused::default();
        assert!(run.absorb(HeldBack::Inserts(vec![insert("a")])).is_none());
        assert!(run.absorb(HeldBack::Updates(vec![update("a")])).is_some(), "an update of a row the run inserts");
        assert!(run.absorb(HeldBack::Inserts(vec![insert("c")])).is_some(), "a second batch of inserts");
        let mut run = Fused::default();
        assert!(run.absorb(HeldBack::Stage(1, "[]".into(), 2)).is_none());
        assert!(run.absorb(HeldBack::Updates(vec![update("b")])).is_some(), "nothing comes after the stage");
    }

    #[test]
    fn the_fused_statements_number_their_parameters_in_order() {
        assert_eq!(
            renumber("SELECT $1, $10 FROM t WHERE x = $2 AND y = '$'", 21),
            "SELECT $22, $31 FROM t WHERE x = $23 AND y = '$'"
        );
        let all = fused_sql(true, true, true);
        let (i, u) = (*N_INSERT_PARAMS, *N_UPDATE_PARAMS);
        assert!(all.starts_with("WITH i AS (INSERT INTO tasks"), "{all}");
        assert!(all.contains(&format!("${i}::")) && all.contains(&format!("${}::text[]", i + 1)), "{all}");
        assert!(all.contains(&format!("${}::text[]", i + u)), "{all}");
        let stage = format!(
            "SELECT nextval('outbox_ids'), ${}, ${}, ${}, ${} FROM",
            i + u + 1,
            i + u + 2,
            i + u + 3,
            i + u + 4
        );
        assert!(
            all.ends_with(&format!("{stage} (SELECT count(*) FROM i) AS ci, (SELECT count(*) FROM u) AS cu")),
            "{all}"
        );
        let updates = fused_sql(false, true, true);
        assert!(
            updates.contains("$1::text[]")
                && updates.contains(&format!("${u}::text[]"))
                && updates.contains(&format!("${}, ${}, ${}, ${} FROM", u + 1, u + 2, u + 3, u + 4)),
            "{updates}"
        );
        assert_eq!(fused_sql(true, false, false), *INSERT_MANY);
        assert_eq!(fused_sql(false, false, true), outbox::STAGE);
        assert!(
            fused_sql(true, true, false)
                .ends_with("SELECT * FROM (SELECT count(*) FROM i) AS ci, (SELECT count(*) FROM u) AS cu")
        );
    }

    #[test]
    fn nothing_moves_across_other_writes() {
        let held = vec![HeldBack::Inserts(vec![insert("a")]), HeldBack::Command("COMMIT")];
        assert_eq!(batch_for(&held, "c", true), None);
        assert_eq!(batch_for(&[], "c", true), None);
        assert_eq!(batch_for(&[HeldBack::Updates(vec![update("a")])], "c", true), None);
    }
}
