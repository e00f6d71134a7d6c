//! [`WriteTx`] (tasks) over a PostgreSQL transaction: each method one or two statements,
//! writes held back for the pipeline (`pipeline.rs`), rows locked as they are read. The
//! per-domain traits are in `domains.rs`.

use serde_json::value::RawValue;
use shoal_engine::definition::TaskDefinition;
use shoal_engine::message::Message;
use shoal_engine::secrets::Secrets;
use shoal_engine::status::TaskState;
use shoal_engine::{TaskId, Timestamp};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::ops::{
    Consequences, CreateLookup, DedupTx, DependencyTx, Due, ListingTx, NewTask, RowChange, SecretTx, TaskTx, WriteTx,
};
use crate::postgres::dimension_sets::claimable;
use crate::postgres::graph::parse_id;
use crate::postgres::pipeline::{Param, Params};
use crate::postgres::row::{GROUP_COLUMN_COUNT, GROUP_COLUMNS, N_TASK_COLUMNS, task_group_from_row};
use crate::postgres::tx::PgTx;
use crate::row::{TaskRow, corrupt, json};
use crate::{ClaimRequest, StoreError, TaskEvent};

impl WriteTx for PgTx {
    fn settings(&self) -> &crate::StoreSettings {
        &self.shared.settings
    }

    /// Staged in the outbox with the commit.
    fn publish(&mut self, message: Message) {
        self.messages.push(message);
    }

    fn events(&mut self) -> &mut Vec<TaskEvent> {
        &mut self.events
    }
}

impl TaskTx for PgTx {
    async fn load(&mut self, task_id: TaskId) -> Result<Option<TaskRow>, StoreError> {
        if let Some(row) = self.gathered.as_ref().and_then(|gathered| gathered.load(task_id)) {
            return Ok(row);
        }
        self.lock_task(task_id).await
    }

    async fn load_with_definition(&mut self, task_id: TaskId) -> Result<Option<(TaskRow, Box<RawValue>)>, StoreError> {
        self.lock_task_with_definition(task_id).await
    }

    async fn claimable(&mut self, request: &ClaimRequest) -> Result<Vec<(TaskRow, Box<RawValue>)>, StoreError> {
        if request.count == 0 {
            return Ok(Vec::new());
        }
        if let Some(gathered) = &mut self.gathered
            && let Some(rows) = gathered.claimable(request)?
        {
            return Ok(rows);
        }
        let count = request.count as i64;
        let rows = if request.dimensions.is_empty() {
            self.query(claimable(false, false), &[&request.task_queue_id, &count]).await?
        } else {
            let worker = json(&request.dimensions)?;
            self.query(claimable(false, true), &[&request.task_queue_id, &count, &worker]).await?
        };
        rows.iter().map(candidate).collect()
    }

    async fn insert_task(&mut self, row: &mut TaskRow, new: NewTask<'_>) -> Result<(), StoreError> {
        self.insert(row, &new)
    }

    async fn update_task(&mut self, row: &mut TaskRow, change: &RowChange) -> Result<(), StoreError> {
        self.save(row, change.place, change.priority_changed, change.moved_from.is_some()).await?;
        if let Some(gathered) = &mut self.gathered {
            gathered.written(row);
        }
        Ok(())
    }

    /// One round trip: the dependencies, then the group, in the order locks are taken
    /// everywhere (tasks before their group). The dependencies are share-locked: one resolving
    /// on another server now either committed before (its state is read here) or waits for
    /// this transaction and then releases this task. The group is created or extended and its
    /// row locked either way (two servers may race to create it; a group sealed by another
    /// server's committed transaction is seen here); a refusal rolls the extension back. The
    /// group's statement also reads the stored definition, if any (a plain read, so its place
    /// among the locks does not matter). When the task already exists, the locks and the
    /// group's expiry (already this late) change nothing.
    async fn lookup_create(
        &mut self,
        definition: &TaskDefinition,
        task_id: TaskId,
    ) -> Result<CreateLookup, StoreError> {
        if let Some(gathered) = &self.gathered {
            return gathered.lookup_create(task_id, definition.task_group_id);
        }
        let group = definition.task_group_id;
        let expires = shoal_engine::group::group_expiry(definition).millis();
        // Taskcluster allows a task to depend on itself: it then waits for scheduleTask.
        let others: Vec<&str> =
            definition.dependencies.iter().filter(|&&required| required != task_id).map(TaskId::as_str).collect();
        let others_params: Vec<[&(dyn ToSql + Sync); 1]> = others.iter().map(|id| [id as _]).collect();
        let upsert = format!(
            "WITH g AS (INSERT INTO task_groups AS g (task_group_id, scheduler_id, expires, sealed, created) \
             VALUES ($1, $2, $3, NULL, $5) \
             ON CONFLICT (task_group_id) DO UPDATE SET expires = greatest(g.expires, excluded.expires) \
             RETURNING {GROUP_COLUMNS}) \
             SELECT g.*, (SELECT definition FROM tasks WHERE task_id = $4) FROM g"
        );
        let created = definition.created.millis();
        let group_params: [&(dyn ToSql + Sync); 5] =
            [&group.as_str(), &definition.scheduler_id, &expires, &task_id.as_str(), &created];
        let mut queries: Vec<(&str, Params<'_>)> = Vec::with_capacity(others.len() + 1);
        for params in &others_params {
            queries.push(("SELECT state, expires FROM tasks WHERE task_id = $1 FOR SHARE", params));
        }
        queries.push((&upsert, &group_params));
        let mut answers = self.pipeline(&queries).await?;
        let group_rows = answers.pop().unwrap_or_default();
        let group_row = group_rows.first().ok_or_else(|| StoreError::Corrupt("group upsert returned no row".into()))?;
        if let Some(stored) = group_row.try_get::<_, Option<String>>(GROUP_COLUMN_COUNT)? {
            let row = self.lock_task(task_id).await?.ok_or_else(|| corrupt(format!("task {task_id} vanished")))?;
            return Ok(CreateLookup {
                existing: Some((stored, row.task.status())),
                group: None,
                dependencies: Vec::new(),
            });
        }
        let dependencies = answers
            .iter()
            .map(|rows| {
                rows.first()
                    .map(|row| {
                        let (state, expires): (&str, i64) = (row.try_get(0)?, row.try_get(1)?);
                        let state =
                            TaskState::from_name(state).ok_or_else(|| corrupt(format!("task state {state}")))?;
                        Ok((state, Timestamp(expires)))
                    })
                    .transpose()
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(CreateLookup { existing: None, group: Some(task_group_from_row(group_row)?), dependencies })
    }

    async fn touch_queue(&mut self, task_queue_id: &str, now: Timestamp) -> Result<(), StoreError> {
        if let Some(gathered) = &mut self.gathered {
            gathered.touched.push((task_queue_id.to_owned(), now));
            return Ok(());
        }
        self.record_queue(task_queue_id, now).await
    }

    /// Rows another server is firing are skipped, so each fires exactly once.
    async fn due(&mut self, now: Timestamp, limit: usize) -> Result<Due, StoreError> {
        let (now_ms, limit) = (now.millis(), limit as i64);
        let mut due = self
            .pipeline(&[
                (
                    "SELECT task_id FROM tasks WHERE taken_until <= $1 ORDER BY taken_until LIMIT $2 \
                     FOR UPDATE SKIP LOCKED",
                    &[&now_ms, &limit],
                ),
                (
                    "SELECT task_id FROM tasks WHERE deadline_due <= $1 ORDER BY deadline_due LIMIT $2 \
                     FOR UPDATE SKIP LOCKED",
                    &[&now_ms, &limit],
                ),
            ])
            .await?
            .into_iter()
            .map(|rows| task_ids(&rows));
        Ok(Due {
            expired: due.next().transpose()?.unwrap_or_default(),
            late: due.next().transpose()?.unwrap_or_default(),
        })
    }
}

impl DependencyTx for PgTx {
    async fn insert_dependencies(
        &mut self,
        task_id: TaskId,
        definition: &TaskDefinition,
        satisfied: &[bool],
    ) -> Result<(), StoreError> {
        for (required, done) in definition.dependencies.iter().zip(satisfied) {
            self.defer(
                "INSERT INTO task_dependencies (required_task_id, dependent_task_id, requires, satisfied) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                vec![
                    Box::new(required.as_str().to_owned()),
                    Box::new(task_id.as_str().to_owned()),
                    Box::new(definition.requires.as_str()),
                    Box::new(*done),
                ],
            )
            .await?;
        }
        Ok(())
    }

    async fn mark_satisfied(&mut self, required: TaskId, dependent: TaskId) -> Result<(), StoreError> {
        self.defer(
            "UPDATE task_dependencies SET satisfied = TRUE WHERE required_task_id = $1 AND dependent_task_id = $2",
            vec![Box::new(required.as_str().to_owned()), Box::new(dependent.as_str().to_owned())],
        )
        .await
    }

    async fn has_unmet_dependencies(&mut self, task_id: TaskId) -> Result<bool, StoreError> {
        let sql = "SELECT 1 FROM task_dependencies WHERE dependent_task_id = $1 AND NOT satisfied LIMIT 1";
        Ok(self.query_opt(sql, &[&task_id.as_str()]).await?.is_some())
    }

    async fn consequences(
        &mut self,
        task_id: TaskId,
        group: TaskId,
        state: TaskState,
        now: Timestamp,
    ) -> Result<Option<Consequences>, StoreError> {
        self.resolution(task_id, group, state, now).await
    }
}

impl SecretTx for PgTx {
    async fn save_secrets(&mut self, task_id: TaskId, secrets: &Secrets) -> Result<(), StoreError> {
        let params: Vec<Param> = vec![Box::new(task_id.as_str().to_owned()), Box::new(secrets.expose().to_owned())];
        self.defer("INSERT INTO task_secrets (task_id, secrets) VALUES ($1, $2)", params).await
    }

    async fn load_secrets(&mut self, task_id: TaskId) -> Result<Option<Secrets>, StoreError> {
        let row = self.query_opt("SELECT secrets FROM task_secrets WHERE task_id = $1", &[&task_id.as_str()]).await?;
        row.map(|row| Ok(Secrets::from_stored(row.try_get(0)?))).transpose()
    }
}

impl DedupTx for PgTx {
    async fn find_completion(&mut self, hash: &str, since: Timestamp) -> Result<Option<TaskId>, StoreError> {
        let row = self
            .query_opt("SELECT task_id FROM completions WHERE hash = $1 AND completed >= $2", &[&hash, &since.millis()])
            .await?;
        row.map(|row| parse_id(row.try_get(0)?)).transpose()
    }

    async fn remember_completion(&mut self, hash: &str, task_id: TaskId, at: Timestamp) -> Result<(), StoreError> {
        let params: Vec<Param> =
            vec![Box::new(hash.to_owned()), Box::new(task_id.as_str().to_owned()), Box::new(at.millis())];
        self.defer(
            "INSERT INTO completions (hash, task_id, completed) VALUES ($1, $2, $3) \
             ON CONFLICT (hash) DO UPDATE SET task_id = EXCLUDED.task_id, completed = EXCLUDED.completed",
            params,
        )
        .await
    }

    async fn forget_completions(&mut self, task_id: TaskId) -> Result<(), StoreError> {
        self.defer("DELETE FROM completions WHERE task_id = $1", vec![Box::new(task_id.as_str().to_owned())]).await
    }
}

impl ListingTx for PgTx {
    async fn index_tags(&mut self, task_id: TaskId, created: Timestamp, tags: &[String]) -> Result<(), StoreError> {
        let params: Vec<Param> =
            vec![Box::new(tags.to_vec()), Box::new(created.millis()), Box::new(task_id.as_str().to_owned())];
        self.defer(
            "INSERT INTO task_tags (tag, created, task_id) SELECT unnest($1::text[]), $2, $3 ON CONFLICT DO NOTHING",
            params,
        )
        .await
    }

    async fn file_failure(&mut self, task_id: TaskId, at: Option<Timestamp>) -> Result<(), StoreError> {
        let id = Box::new(task_id.as_str().to_owned());
        match at {
            Some(at) => {
                self.defer(
                    "INSERT INTO task_tags (tag, created, task_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                    vec![Box::new(crate::FAILED_TAG), Box::new(at.millis()), id],
                )
                .await
            }
            None => {
                self.defer(
                    "DELETE FROM task_tags WHERE tag = $1 AND task_id = $2",
                    vec![Box::new(crate::FAILED_TAG), id],
                )
                .await
            }
        }
    }
}

/// A row a [`claimable`] query found: the task and its definition.
pub(crate) fn candidate(row: &Row) -> Result<(TaskRow, Box<RawValue>), StoreError> {
    Ok((crate::postgres::row::task_from_row(row)?, crate::postgres::row::raw_json(row, N_TASK_COLUMNS)?))
}

pub(crate) fn task_ids(rows: &[Row]) -> Result<Vec<TaskId>, StoreError> {
    rows.iter()
        .map(|row| {
            let id: &str = row.try_get(0)?;
            TaskId::parse(id).ok_or_else(|| corrupt(format!("task id {id}")))
        })
        .collect()
}
