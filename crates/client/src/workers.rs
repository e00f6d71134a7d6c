//! The worker registry's calls (Taskcluster's worker calls and Shoal's), answered as JSON.

use reqwest::Method;
use serde_json::{Value, json};

use crate::{Body, Client, ClientError};

/// `/provisioners/<p>/worker-types/<wt>/workers` for a task queue.
pub(crate) fn workers_path(task_queue_id: &str) -> String {
    let (provisioner_id, worker_type) = task_queue_id.split_once('/').unwrap_or((task_queue_id, ""));
    format!("/provisioners/{provisioner_id}/worker-types/{worker_type}/workers")
}

/// `/task-queues/<p>/<wt>/workers`: Shoal's fleet view of a task queue's workers.
fn fleet_path(task_queue_id: &str) -> String {
    format!("/task-queues/{task_queue_id}/workers")
}

impl Client {
    /// taskQueueWorkers (listWorkers with Shoal's `state` and `dimensions`), one page: `query`
    /// holds the query string's pairs (`quarantined`, `dimension`, `state`, `limit`,
    /// `continuationToken`).
    ///
    /// # Errors
    /// As the server answers.
    pub async fn list_workers(&self, task_queue_id: &str, query: &[(&str, String)]) -> Result<Value, ClientError> {
        let mut url = reqwest::Url::parse(&self.queue(&fleet_path(task_queue_id)))
            .map_err(|err| ClientError::Transport(format!("bad URL: {err}")))?;
        url.query_pairs_mut().extend_pairs(query);
        self.call(Method::GET, url.as_str(), None).await
    }

    /// taskQueueWorker: getWorker with Shoal's fields (state, dimensions, running tasks ...).
    ///
    /// # Errors
    /// As the server answers (404 for an unknown worker).
    pub async fn worker(&self, task_queue_id: &str, worker_group: &str, worker_id: &str) -> Result<Value, ClientError> {
        let url = self.queue(&format!("{}/{worker_group}/{worker_id}", fleet_path(task_queue_id)));
        self.call(Method::GET, &url, None).await
    }

    /// A worker's history (Shoal's), newest first.
    ///
    /// # Errors
    /// As the server answers.
    pub async fn worker_events(
        &self,
        task_queue_id: &str,
        worker_group: &str,
        worker_id: &str,
    ) -> Result<Value, ClientError> {
        let url = self.queue(&format!("{}/{worker_group}/{worker_id}/events", workers_path(task_queue_id)));
        self.call(Method::GET, &url, None).await
    }

    /// quarantineWorker: no claims until `until` (RFC 3339; a time not ahead releases it).
    ///
    /// # Errors
    /// As the server answers.
    pub async fn quarantine_worker(
        &self,
        task_queue_id: &str,
        worker_group: &str,
        worker_id: &str,
        until: &str,
        info: &str,
    ) -> Result<Value, ClientError> {
        let url = self.queue(&format!("{}/{worker_group}/{worker_id}", workers_path(task_queue_id)));
        let body = json!({"quarantineUntil": until, "quarantineInfo": info});
        self.call(Method::PUT, &url, Some(Body::Json(&body))).await
    }

    /// Asks a worker to finish its runs, take no more and exit (Shoal's).
    ///
    /// # Errors
    /// As the server answers.
    pub async fn terminate_worker(
        &self,
        task_queue_id: &str,
        worker_group: &str,
        worker_id: &str,
    ) -> Result<Value, ClientError> {
        let url = self.queue(&format!("{}/{worker_group}/{worker_id}/terminate", workers_path(task_queue_id)));
        self.call(Method::POST, &url, Some(Body::Json(&json!({})))).await
    }

    /// Puts a worker in maintenance with why, or takes it out (`None`) (Shoal's).
    ///
    /// # Errors
    /// As the server answers.
    pub async fn maintain_worker(
        &self,
        task_queue_id: &str,
        worker_group: &str,
        worker_id: &str,
        message: Option<&str>,
    ) -> Result<Value, ClientError> {
        let url = self.queue(&format!("{}/{worker_group}/{worker_id}/maintenance", workers_path(task_queue_id)));
        self.call(Method::POST, &url, Some(Body::Json(&json!({"maintenance": message})))).await
    }

    /// Posts an event about a worker (Shoal's): `kind` error, rebooting, shutdown or log.
    ///
    /// # Errors
    /// As the server answers.
    pub async fn post_worker_event(
        &self,
        task_queue_id: &str,
        worker_group: &str,
        worker_id: &str,
        kind: &str,
        message: &str,
    ) -> Result<Value, ClientError> {
        let url = self.queue(&format!("{}/{worker_group}/{worker_id}/events", workers_path(task_queue_id)));
        self.call(Method::POST, &url, Some(Body::Json(&json!({"kind": kind, "message": message})))).await
    }
}
