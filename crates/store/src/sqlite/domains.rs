//! The per-domain transaction traits (groups, artifacts, graphs, expiry, auth, workers)
//! over SQLite's write transaction.

use rusqlite::{OptionalExtension, params};
use shoal_engine::artifact::Artifact;
use shoal_engine::dimensions::Dimensions;
use shoal_engine::graph::{NodeProgress, Tally};
use shoal_engine::worker::{TaskRun, Worker, WorkerEvent, WorkerKey, worker_name};
use shoal_engine::{TaskId, Timestamp};

use crate::ops::auth::AuthKind;
use crate::ops::graph::{NewNode, StoredGraph};
use crate::ops::{ArtifactTx, AuthTx, ExpireTx, GraphTx, GroupTx, WorkerTx};
use crate::row::corrupt;
use crate::row::unresolved;
use crate::sqlite::row;
use crate::sqlite::tx::Tx;
use crate::sqlite::{artifacts, graph, workers};
use crate::{ArtifactKey, StoreError, TaskGroup};

impl GroupTx for Tx<'_> {
    async fn load_group(&mut self, group: TaskId) -> Result<Option<TaskGroup>, StoreError> {
        row::task_group(self.conn, group)
    }

    async fn seal_group(&mut self, group: TaskId, at: Timestamp) -> Result<(), StoreError> {
        row::settle_group(self.conn, group)?;
        self.conn
            .prepare_cached("UPDATE task_groups SET sealed = ?2 WHERE task_group_id = ?1")?
            .execute(params![group.as_str(), at.millis()])?;
        Ok(())
    }

    async fn group_size(&mut self, group: TaskId) -> Result<u64, StoreError> {
        let size: i64 = self
            .conn
            .prepare_cached(
                "SELECT (SELECT COUNT(*) FROM tasks WHERE task_group_id = ?1 AND task_group_id <> task_id) \
                 + (SELECT COUNT(*) FROM tasks WHERE task_id = ?1 AND task_group_id = ?1)",
            )?
            .query_row([group.as_str()], |row| row.get(0))?;
        Ok(size as u64)
    }

    async fn unresolved_members(&mut self, group: TaskId) -> Result<Vec<TaskId>, StoreError> {
        self.ids(
            concat!("SELECT task_id FROM tasks WHERE task_group_id = ?1 AND ", unresolved!(), " ORDER BY task_id"),
            [group.as_str()],
        )
    }

    async fn insert_group(&mut self, group: &TaskGroup, created: Timestamp, first: TaskId) -> Result<(), StoreError> {
        if group.task_group_id == first && group.sealed.is_none() {
            // Implied by its namesake's row until it outgrows it (`row::settle_group`).
            return Ok(());
        }
        self.conn
            .prepare_cached(
                "INSERT INTO task_groups (task_group_id, scheduler_id, expires, sealed, created) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                group.task_group_id.as_str(),
                group.scheduler_id,
                group.expires.millis(),
                group.sealed.map(Timestamp::millis),
                created.millis()
            ])?;
        Ok(())
    }

    async fn extend_group(&mut self, group: TaskId, expires: Timestamp) -> Result<(), StoreError> {
        row::settle_group(self.conn, group)?;
        self.conn
            .prepare_cached("UPDATE task_groups SET expires = ?2 WHERE task_group_id = ?1")?
            .execute(params![group.as_str(), expires.millis()])?;
        Ok(())
    }
}

impl ArtifactTx for Tx<'_> {
    async fn stored_artifact(&mut self, key: &ArtifactKey) -> Result<Option<Artifact>, StoreError> {
        artifacts::stored(self.conn, key.task_id, key.run_id, &key.name)
    }

    async fn put_artifact(&mut self, key: &ArtifactKey, artifact: &Artifact) -> Result<(), StoreError> {
        artifacts::put(self.conn, key, artifact)
    }

    async fn delete_artifacts(&mut self, keys: &[ArtifactKey]) -> Result<usize, StoreError> {
        artifacts::delete(self.conn, keys)
    }
}

impl GraphTx for Tx<'_> {
    async fn load_graph(&mut self, task_graph_id: TaskId) -> Result<Option<StoredGraph>, StoreError> {
        graph::graph(self.conn, task_graph_id)
    }

    async fn insert_graph(&mut self, graph: &StoredGraph, now: Timestamp) -> Result<(), StoreError> {
        graph::insert(self.conn, graph, now)
    }

    async fn save_tally(&mut self, task_graph_id: TaskId, tally: Tally) -> Result<(), StoreError> {
        graph::save_tally(self.conn, task_graph_id, tally)
    }

    async fn graph_labels(&mut self, task_graph_id: TaskId) -> Result<Vec<(String, TaskId, String)>, StoreError> {
        graph::labels(self.conn, task_graph_id)
    }

    async fn insert_node(&mut self, node: &NewNode<'_>) -> Result<(), StoreError> {
        graph::insert_node(self.conn, node)
    }

    async fn load_node(&mut self, task_id: TaskId) -> Result<Option<(TaskId, NodeProgress)>, StoreError> {
        graph::node(self.conn, task_id)
    }

    async fn save_node(&mut self, task_id: TaskId, progress: NodeProgress) -> Result<(), StoreError> {
        graph::save_node(self.conn, task_id, progress)
    }
}

impl ExpireTx for Tx<'_> {
    async fn task_expires(&mut self, task_id: TaskId) -> Result<Option<Timestamp>, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT expires FROM tasks WHERE task_id = ?1")?
            .query_row([task_id.as_str()], |row| row.get(0))
            .optional()?
            .map(Timestamp))
    }

    async fn delete_expired_task(&mut self, task_id: TaskId, now: Timestamp) -> Result<Option<TaskId>, StoreError> {
        // A namesake going before its group's members leaves them the group's own row.
        let members = self
            .conn
            .prepare_cached(
                "SELECT 1 FROM tasks WHERE task_group_id = ?1 AND task_group_id <> task_id AND EXISTS \
                 (SELECT 1 FROM tasks WHERE task_id = ?1 AND task_group_id = ?1 AND expires <= ?2 \
                 AND deadline_due IS NULL) LIMIT 1",
            )?
            .exists(params![task_id.as_str(), now.millis()])?;
        if members {
            row::settle_group(self.conn, task_id)?;
        }
        let group: Option<String> = self
            .conn
            .prepare_cached(
                "DELETE FROM tasks WHERE task_id = ?1 AND expires <= ?2 AND deadline_due IS NULL \
                 RETURNING task_group_id",
            )?
            .query_row(params![task_id.as_str(), now.millis()], |row| row.get(0))
            .optional()?;
        let Some(group) = group else { return Ok(None) };
        for sql in [
            "DELETE FROM task_dependencies WHERE required_task_id = ?1",
            "DELETE FROM task_dependencies WHERE dependent_task_id = ?1",
            "DELETE FROM artifacts WHERE task_id = ?1",
            "DELETE FROM graph_tasks WHERE task_id = ?1",
            "DELETE FROM secrets.task_secrets WHERE task_id = ?1",
            "DELETE FROM completions WHERE task_id = ?1",
            "DELETE FROM task_tags WHERE task_id = ?1",
        ] {
            self.conn.prepare_cached(sql)?.execute([task_id.as_str()])?;
        }
        Ok(Some(TaskId::parse(&group).ok_or_else(|| corrupt(format!("task group id {group}")))?))
    }

    async fn delete_group_if_empty(&mut self, group: TaskId) -> Result<(), StoreError> {
        let empty = self
            .conn
            .prepare_cached(
                "SELECT NOT EXISTS (SELECT 1 FROM tasks WHERE task_group_id = ?1 AND task_group_id <> task_id) \
                 AND NOT EXISTS (SELECT 1 FROM tasks WHERE task_id = ?1 AND task_group_id = ?1)",
            )?
            .query_row([group.as_str()], |row| row.get::<_, bool>(0))?;
        if empty {
            self.conn.prepare_cached("DELETE FROM task_groups WHERE task_group_id = ?1")?.execute([group.as_str()])?;
            self.conn.prepare_cached("DELETE FROM task_graphs WHERE task_graph_id = ?1")?.execute([group.as_str()])?;
        }
        Ok(())
    }

    async fn delete_expired_queues(&mut self, now: Timestamp, limit: usize) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "DELETE FROM task_queues WHERE task_queue_id IN \
                 (SELECT task_queue_id FROM task_queues WHERE expires <= ?1 LIMIT ?2)",
            )?
            .execute(params![now.millis(), limit as i64])?;
        Ok(())
    }
}

impl AuthTx for Tx<'_> {
    async fn load_auth(&mut self, kind: AuthKind, id: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT body FROM auth_entities WHERE kind = ?1 AND id = ?2")?
            .query_row([kind.as_str(), id], |row| row.get(0))
            .optional()?)
    }

    async fn all_auth(&mut self, kind: AuthKind) -> Result<Vec<String>, StoreError> {
        let mut stmt = self.conn.prepare_cached("SELECT body FROM auth_entities WHERE kind = ?1 ORDER BY id")?;
        let rows = stmt.query_map([kind.as_str()], |row| row.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    async fn save_auth(&mut self, kind: AuthKind, id: &str, body: Option<&str>) -> Result<(), StoreError> {
        match body {
            Some(body) => self
                .conn
                .prepare_cached(
                    "INSERT INTO auth_entities (kind, id, body) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (kind, id) DO UPDATE SET body = excluded.body",
                )?
                .execute(params![kind.as_str(), id, body])?,
            None => self
                .conn
                .prepare_cached("DELETE FROM auth_entities WHERE kind = ?1 AND id = ?2")?
                .execute([kind.as_str(), id])?,
        };
        Ok(())
    }

    async fn bump_auth_generation(&mut self) -> Result<(), StoreError> {
        self.conn.prepare_cached("UPDATE auth_state SET generation = generation + 1")?.execute([])?;
        Ok(())
    }

    async fn signing_token(&mut self, candidate: &str) -> Result<String, StoreError> {
        self.conn
            .prepare_cached("UPDATE auth_state SET signing_token = ?1 WHERE signing_token IS NULL")?
            .execute([candidate])?;
        Ok(self.conn.prepare_cached("SELECT signing_token FROM auth_state")?.query_row([], |row| row.get(0))?)
    }
}

impl WorkerTx for Tx<'_> {
    /// The record is read and written at once: the writer holds it in its page cache.
    async fn append_claims(
        &mut self,
        _: &WorkerKey,
        _: &[TaskRun],
        _: Timestamp,
        _: impl FnOnce() -> (Worker, Vec<(u64, WorkerEvent)>),
    ) -> Result<bool, StoreError> {
        Ok(false)
    }

    async fn load_worker(&mut self, key: &WorkerKey) -> Result<Option<Worker>, StoreError> {
        workers::load(self.conn, key)
    }

    async fn save_worker(&mut self, worker: &Worker, events: &[(u64, WorkerEvent)]) -> Result<(), StoreError> {
        workers::save(self.conn, worker, events)
    }

    async fn silent_workers(&mut self, cutoff: Timestamp, limit: usize) -> Result<Vec<WorkerKey>, StoreError> {
        workers::silent(self.conn, cutoff, limit)
    }

    async fn live_worker_dimensions(
        &mut self,
        task_queue_id: &str,
        since: Timestamp,
    ) -> Result<Vec<Dimensions>, StoreError> {
        workers::live_dimensions(self.conn, task_queue_id, since)
    }

    async fn worker_runs(&mut self, key: &WorkerKey) -> Result<Vec<TaskId>, StoreError> {
        let name = worker_name(&key.worker_group, &key.worker_id);
        self.ids(
            "SELECT task_id FROM tasks WHERE state = 'running' AND task_queue_id = ?1 AND worker = ?2",
            params![key.task_queue_id, name],
        )
    }

    async fn delete_expired_workers(&mut self, now: Timestamp, limit: usize) -> Result<(), StoreError> {
        workers::delete_expired(self.conn, now, limit)
    }

    async fn record_worker_runs(&mut self, key: &WorkerKey, runs: &[TaskRun], at: Timestamp) -> Result<(), StoreError> {
        workers::record_runs(self.conn, key, runs, at)
    }

    async fn trim_worker_runs(&mut self, key: &WorkerKey, before: Timestamp) -> Result<(), StoreError> {
        workers::trim_runs(self.conn, key, before)
    }
}
