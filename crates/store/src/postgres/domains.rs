//! The per-domain transaction traits (groups, artifacts, graphs, expiry, auth, workers)
//! over a PostgreSQL transaction, as `write.rs` does tasks.

use shoal_engine::artifact::Artifact;
use shoal_engine::dimensions::Dimensions;
use shoal_engine::graph::{NodeProgress, Tally};
use shoal_engine::worker::{TaskRun, Worker, WorkerEvent, WorkerKey};
use shoal_engine::{TaskId, Timestamp};
use tokio_postgres::types::ToSql;

use crate::ops::auth::AuthKind;
use crate::ops::graph::{NewNode, StoredGraph};
use crate::ops::{ArtifactTx, AuthTx, ExpireTx, GraphTx, GroupTx, WorkerTx};
use crate::postgres::graph::{GRAPH_COLUMNS, graph_from_row, parse_id};
use crate::postgres::pipeline::{Param, Params};
use crate::postgres::row::artifact_from_row;
use crate::postgres::tx::PgTx;
use crate::postgres::write::task_ids;
use crate::row::json;
use crate::row::unresolved;
use crate::{ArtifactKey, StoreError, TaskGroup};

impl GroupTx for PgTx {
    async fn load_group(&mut self, group: TaskId) -> Result<Option<TaskGroup>, StoreError> {
        self.lock_group(group).await
    }

    async fn seal_group(&mut self, group: TaskId, at: Timestamp) -> Result<(), StoreError> {
        self.defer(
            "UPDATE task_groups SET sealed = $2 WHERE task_group_id = $1",
            vec![Box::new(group.as_str().to_owned()), Box::new(at.millis())],
        )
        .await
    }

    async fn group_size(&mut self, group: TaskId) -> Result<u64, StoreError> {
        let row = self.query_one("SELECT COUNT(*) FROM tasks WHERE task_group_id = $1", &[&group.as_str()]).await?;
        Ok(row.try_get::<_, i64>(0)? as u64)
    }

    async fn unresolved_members(&mut self, group: TaskId) -> Result<Vec<TaskId>, StoreError> {
        let rows = self
            .query(
                concat!("SELECT task_id FROM tasks WHERE task_group_id = $1 AND ", unresolved!(), " ORDER BY task_id"),
                &[&group.as_str()],
            )
            .await?;
        task_ids(&rows)
    }

    async fn insert_group(&mut self, group: &TaskGroup, created: Timestamp, _first: TaskId) -> Result<(), StoreError> {
        self.defer(
            "INSERT INTO task_groups (task_group_id, scheduler_id, expires, sealed, created) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            vec![
                Box::new(group.task_group_id.as_str().to_owned()),
                Box::new(group.scheduler_id.clone()),
                Box::new(group.expires.millis()),
                Box::new(group.sealed.map(Timestamp::millis)),
                Box::new(created.millis()),
            ],
        )
        .await
    }

    async fn extend_group(&mut self, group: TaskId, expires: Timestamp) -> Result<(), StoreError> {
        self.defer(
            "UPDATE task_groups SET expires = greatest(expires, $2) WHERE task_group_id = $1",
            vec![Box::new(group.as_str().to_owned()), Box::new(expires.millis())],
        )
        .await
    }
}

impl ArtifactTx for PgTx {
    async fn stored_artifact(&mut self, key: &ArtifactKey) -> Result<Option<Artifact>, StoreError> {
        let row = self
            .query_opt(
                "SELECT name, kind, present, expires, bytes, object FROM artifacts WHERE task_id = $1 AND run_id = $2 AND name = $3",
                &[&key.task_id.as_str(), &(key.run_id as i32), &key.name],
            )
            .await?;
        row.as_ref().map(artifact_from_row).transpose()
    }

    async fn put_artifact(&mut self, key: &ArtifactKey, artifact: &Artifact) -> Result<(), StoreError> {
        let params: Vec<Param> = vec![
            Box::new(key.task_id.as_str().to_owned()),
            Box::new(key.run_id as i32),
            Box::new(key.name.clone()),
            Box::new(json(&artifact.kind)?),
            Box::new(artifact.present),
            Box::new(artifact.expires.millis()),
            Box::new(artifact.bytes.map(|bytes| i64::try_from(bytes).unwrap_or(i64::MAX))),
            Box::new(artifact.object.clone()),
        ];
        self.defer(
            "INSERT INTO artifacts (task_id, run_id, name, kind, present, expires, bytes, object) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (task_id, run_id, name) DO UPDATE SET kind = excluded.kind, present = excluded.present, \
             expires = excluded.expires, bytes = excluded.bytes, object = excluded.object",
            params,
        )
        .await
    }

    async fn delete_artifacts(&mut self, keys: &[ArtifactKey]) -> Result<usize, StoreError> {
        let ids: Vec<(&str, i32)> = keys.iter().map(|key| (key.task_id.as_str(), key.run_id as i32)).collect();
        let params: Vec<[&(dyn ToSql + Sync); 3]> =
            keys.iter().zip(&ids).map(|(key, (task_id, run_id))| [task_id as _, run_id as _, &key.name as _]).collect();
        let queries: Vec<(&str, Params<'_>)> = params
            .iter()
            .map(|params| {
                ("DELETE FROM artifacts WHERE task_id = $1 AND run_id = $2 AND name = $3 RETURNING 1", &params[..])
            })
            .collect();
        Ok(self.pipeline(&queries).await?.iter().map(Vec::len).sum())
    }
}

impl GraphTx for PgTx {
    /// Locked: servers resolving a graph's tasks at once count each resolution once.
    async fn load_graph(&mut self, task_graph_id: TaskId) -> Result<Option<StoredGraph>, StoreError> {
        let sql = format!("SELECT {GRAPH_COLUMNS} FROM task_graphs WHERE task_graph_id = $1 FOR UPDATE");
        self.query_opt(&sql, &[&task_graph_id.as_str()]).await?.map(|row| graph_from_row(&row)).transpose()
    }

    async fn insert_graph(&mut self, graph: &StoredGraph, now: Timestamp) -> Result<(), StoreError> {
        let params: Vec<Param> = vec![
            Box::new(graph.task_graph_id.as_str().to_owned()),
            Box::new(graph.scheduler_id.clone()),
            Box::new(graph.routing.clone()),
            Box::new(graph.tally.open as i32),
            Box::new(graph.tally.failed as i32),
            Box::new(json(&graph.metadata)?),
            Box::new(json(&graph.tags)?),
            Box::new(now.millis()),
        ];
        self.defer(
            "INSERT INTO task_graphs (task_graph_id, scheduler_id, routing, open, failed, metadata, tags, created) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            params,
        )
        .await
    }

    async fn save_tally(&mut self, task_graph_id: TaskId, tally: Tally) -> Result<(), StoreError> {
        let params: Vec<Param> = vec![
            Box::new(task_graph_id.as_str().to_owned()),
            Box::new(tally.open as i32),
            Box::new(tally.failed as i32),
        ];
        self.defer("UPDATE task_graphs SET open = $2, failed = $3 WHERE task_graph_id = $1", params).await
    }

    async fn graph_labels(&mut self, task_graph_id: TaskId) -> Result<Vec<(String, TaskId, String)>, StoreError> {
        let sql = "SELECT label, task_id, submitted FROM graph_tasks WHERE task_graph_id = $1";
        self.query(sql, &[&task_graph_id.as_str()])
            .await?
            .iter()
            .map(|row| Ok((row.try_get(0)?, parse_id(row.try_get(1)?)?, row.try_get(2)?)))
            .collect()
    }

    async fn insert_node(&mut self, node: &NewNode<'_>) -> Result<(), StoreError> {
        let planned = node.planned;
        let params: Vec<Param> = vec![
            Box::new(planned.task_id.as_str().to_owned()),
            Box::new(node.task_graph_id.as_str().to_owned()),
            Box::new(planned.label.clone()),
            Box::new(json(&planned.requires)?),
            Box::new(planned.reruns as i32),
            Box::new(node.submitted.to_owned()),
        ];
        self.defer(
            "INSERT INTO graph_tasks (task_id, task_graph_id, label, requires, reruns, reruns_left, failed, submitted) \
             VALUES ($1, $2, $3, $4, $5, $5, false, $6)",
            params,
        )
        .await
    }

    async fn load_node(&mut self, task_id: TaskId) -> Result<Option<(TaskId, NodeProgress)>, StoreError> {
        let sql = "SELECT task_graph_id, reruns_left, failed FROM graph_tasks WHERE task_id = $1 FOR UPDATE";
        self.query_opt(sql, &[&task_id.as_str()])
            .await?
            .map(|row| {
                let reruns_left: i32 = row.try_get(1)?;
                Ok((
                    parse_id(row.try_get(0)?)?,
                    NodeProgress { reruns_left: reruns_left as u32, failed: row.try_get(2)? },
                ))
            })
            .transpose()
    }

    async fn save_node(&mut self, task_id: TaskId, progress: NodeProgress) -> Result<(), StoreError> {
        let params: Vec<Param> = vec![
            Box::new(task_id.as_str().to_owned()),
            Box::new(progress.reruns_left as i32),
            Box::new(progress.failed),
        ];
        self.defer("UPDATE graph_tasks SET reruns_left = $2, failed = $3 WHERE task_id = $1", params).await
    }
}

impl ExpireTx for PgTx {
    async fn task_expires(&mut self, task_id: TaskId) -> Result<Option<Timestamp>, StoreError> {
        let row = self.query_opt("SELECT expires FROM tasks WHERE task_id = $1", &[&task_id.as_str()]).await?;
        row.map(|row| Ok(Timestamp(row.try_get(0)?))).transpose()
    }

    async fn delete_expired_task(&mut self, task_id: TaskId, now: Timestamp) -> Result<Option<TaskId>, StoreError> {
        let row = self
            .query_opt(
                "DELETE FROM tasks WHERE task_id = $1 AND expires <= $2 AND deadline_due IS NULL \
                 RETURNING task_group_id",
                &[&task_id.as_str(), &now.millis()],
            )
            .await?;
        let Some(row) = row else { return Ok(None) };
        let group: String = row.try_get(0)?;
        for sql in [
            "DELETE FROM task_dependencies WHERE required_task_id = $1",
            "DELETE FROM task_dependencies WHERE dependent_task_id = $1",
            "DELETE FROM artifacts WHERE task_id = $1",
            "DELETE FROM graph_tasks WHERE task_id = $1",
            "DELETE FROM task_secrets WHERE task_id = $1",
            "DELETE FROM completions WHERE task_id = $1",
            "DELETE FROM task_tags WHERE task_id = $1",
            "DELETE FROM log_chunks WHERE task_id = $1",
        ] {
            self.defer(sql, vec![Box::new(task_id.as_str().to_owned())]).await?;
        }
        Ok(Some(parse_id(&group)?))
    }

    async fn delete_group_if_empty(&mut self, group: TaskId) -> Result<(), StoreError> {
        let id = group.as_str().to_owned();
        self.defer(
            "DELETE FROM task_groups WHERE task_group_id = $1 \
             AND NOT EXISTS (SELECT 1 FROM tasks WHERE task_group_id = $1)",
            vec![Box::new(id.clone())],
        )
        .await?;
        self.defer(
            "DELETE FROM task_graphs WHERE task_graph_id = $1 \
             AND NOT EXISTS (SELECT 1 FROM tasks WHERE task_group_id = $1)",
            vec![Box::new(id)],
        )
        .await
    }

    async fn delete_expired_queues(&mut self, now: Timestamp, limit: usize) -> Result<(), StoreError> {
        self.defer(
            "DELETE FROM task_queues WHERE task_queue_id IN \
             (SELECT task_queue_id FROM task_queues WHERE expires <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
            vec![Box::new(now.millis()), Box::new(limit as i64)],
        )
        .await
    }
}

impl AuthTx for PgTx {
    async fn load_auth(&mut self, kind: AuthKind, id: &str) -> Result<Option<String>, StoreError> {
        let row = self
            .query_opt("SELECT body FROM auth_entities WHERE kind = $1 AND id = $2 FOR UPDATE", &[&kind.as_str(), &id])
            .await?;
        Ok(row.map(|row| row.try_get(0)).transpose()?)
    }

    async fn all_auth(&mut self, kind: AuthKind) -> Result<Vec<String>, StoreError> {
        let rows = self.query("SELECT body FROM auth_entities WHERE kind = $1 ORDER BY id", &[&kind.as_str()]).await?;
        Ok(rows.iter().map(|row| row.try_get(0)).collect::<Result<_, _>>()?)
    }

    async fn save_auth(&mut self, kind: AuthKind, id: &str, body: Option<&str>) -> Result<(), StoreError> {
        match body {
            Some(body) => {
                self.defer(
                    "INSERT INTO auth_entities (kind, id, body) VALUES ($1, $2, $3) \
                     ON CONFLICT (kind, id) DO UPDATE SET body = excluded.body",
                    vec![Box::new(kind.as_str()), Box::new(id.to_owned()), Box::new(body.to_owned())],
                )
                .await
            }
            None => {
                self.defer(
                    "DELETE FROM auth_entities WHERE kind = $1 AND id = $2",
                    vec![Box::new(kind.as_str()), Box::new(id.to_owned())],
                )
                .await
            }
        }
    }

    async fn bump_auth_generation(&mut self) -> Result<(), StoreError> {
        self.defer("UPDATE auth_state SET generation = generation + 1", vec![]).await
    }

    async fn signing_token(&mut self, candidate: &str) -> Result<String, StoreError> {
        let row = self
            .query_one(
                "UPDATE auth_state SET signing_token = coalesce(signing_token, $1) RETURNING signing_token",
                &[&candidate],
            )
            .await?;
        Ok(row.try_get(0)?)
    }
}

impl WorkerTx for PgTx {
    async fn load_worker(&mut self, key: &WorkerKey) -> Result<Option<Worker>, StoreError> {
        self.lock_worker(key).await
    }

    async fn save_worker(&mut self, worker: &Worker, events: &[(u64, WorkerEvent)]) -> Result<(), StoreError> {
        self.store_worker(worker, events).await
    }

    async fn silent_workers(&mut self, cutoff: Timestamp, limit: usize) -> Result<Vec<WorkerKey>, StoreError> {
        self.silent_workers_before(cutoff, limit).await
    }

    async fn live_worker_dimensions(
        &mut self,
        task_queue_id: &str,
        since: Timestamp,
    ) -> Result<Vec<Dimensions>, StoreError> {
        self.live_dimensions(task_queue_id, since).await
    }

    async fn worker_runs(&mut self, key: &WorkerKey) -> Result<Vec<TaskId>, StoreError> {
        self.runs_of_worker(key).await
    }

    async fn delete_expired_workers(&mut self, now: Timestamp, limit: usize) -> Result<(), StoreError> {
        self.delete_workers_expired(now, limit).await
    }

    async fn record_worker_runs(&mut self, key: &WorkerKey, runs: &[TaskRun], at: Timestamp) -> Result<(), StoreError> {
        self.record_runs(key, runs, at).await
    }

    async fn trim_worker_runs(&mut self, key: &WorkerKey, before: Timestamp) -> Result<(), StoreError> {
        self.defer(
            "DELETE FROM worker_runs WHERE task_queue_id = $1 AND worker_group = $2 AND worker_id = $3 AND at < $4",
            vec![
                Box::new(key.task_queue_id.clone()),
                Box::new(key.worker_group.clone()),
                Box::new(key.worker_id.clone()),
                Box::new(before.millis()),
            ],
        )
        .await
    }

    /// Appended: a claim neither reads nor locks the worker's row, which claims of one worker
    /// through two servers (or two gatherings) would otherwise queue on.
    async fn append_claims(
        &mut self,
        key: &WorkerKey,
        runs: &[TaskRun],
        now: Timestamp,
        first: impl FnOnce() -> (Worker, Vec<(u64, WorkerEvent)>),
    ) -> Result<bool, StoreError> {
        self.append_worker_claims(key, runs, now, first);
        Ok(true)
    }
}
