//! A typed client of Shoal's HTTP API. The worker and the CLI reach the server only through
//! it, as a remote worker on another machine would. Calls are retried with capped
//! exponential backoff on transport errors and 5xx answers, as Taskcluster's clients do.

mod credentials;
mod download;
mod events;
mod forward;
mod services;
mod workers;

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use shoal_engine::Timestamp;
use shoal_engine::status::{RunStats, TaskState, TaskStatus, WorkerException};

pub use shoal_engine::graph::GraphState;
pub use shoal_engine::message::GraphStatus;

pub use credentials::Credentials;
pub use events::{EventStream, StreamEvent};

/// Attempts per call before giving up on transport errors and 5xx answers.
const ATTEMPTS: u32 = 5;
/// First backoff; doubles each retry.
const BACKOFF: Duration = Duration::from_millis(100);
/// Longest backoff.
const MAX_BACKOFF: Duration = Duration::from_secs(3);
/// Longest any single request may take (a claimWork long poll is 20 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// What a call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error.
    #[error("{status}: {code}: {message}")]
    Status {
        /// HTTP status.
        status: StatusCode,
        /// Taskcluster's error code.
        code: String,
        /// The server's message.
        message: String,
    },
    /// The server could not be reached (after retries).
    #[error("cannot reach the server: {0}")]
    Transport(String),
    /// The answer was not what the API promises.
    #[error("unexpected answer: {0}")]
    Decode(String),
}

impl ClientError {
    /// Whether the server refused because of the current state (409): for a worker, the run
    /// is over (canceled, expired, or resolved).
    #[must_use]
    pub fn is_conflict(&self) -> bool {
        self.status() == Some(StatusCode::CONFLICT)
    }

    /// The HTTP status, when the server answered.
    #[must_use]
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ClientError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// The `{status}` answer of the scheduler's calls.
#[derive(Deserialize)]
struct GraphStatusAnswer {
    status: GraphStatus,
}

/// A graph and its tasks, as `/inspect` shows them.
#[derive(Debug, Clone, Deserialize)]
pub struct GraphInspection {
    /// The graph's status.
    pub status: GraphStatus,
    /// Its tasks.
    pub tasks: Vec<GraphTask>,
}

/// One task of a graph.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GraphTask {
    /// Its label.
    pub label: String,
    /// Its taskId.
    pub task_id: String,
    /// The queue's state of it.
    pub state: TaskState,
    /// Reruns not used yet.
    pub reruns_left: u32,
}

/// What claimWork answered Shoal's worker.
#[derive(Debug, Clone, Deserialize)]
pub struct ClaimAnswer {
    /// The runs claimed.
    pub tasks: Vec<Claim>,
    /// Whether the worker was asked to terminate (finish its runs, take no more, exit).
    #[serde(default)]
    pub terminate: bool,
}

/// What a heartbeat answered.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Standing {
    /// Whether the worker was asked to terminate.
    pub terminate: bool,
    /// Seconds until the next heartbeat is due.
    pub heartbeat_every: f64,
    /// Whether it is in maintenance (its own, or an operator's): its claims get nothing.
    #[serde(default)]
    pub maintenance: bool,
}

/// The worker a claimWork is for.
#[derive(Debug, Clone, Copy)]
pub struct ClaimingWorker<'a> {
    /// Its group.
    pub worker_group: &'a str,
    /// Its id.
    pub worker_id: &'a str,
    /// Its dimensions.
    pub dimensions: &'a Value,
    /// The named caches it holds, when it says.
    pub caches: Option<&'a [String]>,
    /// The other task queues it serves, after the claim's (one capacity for all).
    pub more_queues: &'a [String],
}

/// What a heartbeat says of the worker.
#[derive(Debug, Clone, Copy)]
pub struct Beat<'a> {
    /// Its dimensions.
    pub dimensions: &'a Value,
    /// The named caches it holds.
    pub caches: &'a [String],
    /// Its own maintenance: `Some(Some(why))` in, `Some(None)` out, `None` says nothing.
    pub maintenance: Option<Option<&'a str>>,
    /// It exits now, as it was asked to.
    pub exiting: bool,
}

/// One claimed run, as claimWork hands it out.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Claim {
    /// The task's status after the claim.
    pub status: TaskStatus,
    /// The run to work on.
    pub run_id: u32,
    /// Until when the claim holds without a reclaim.
    pub taken_until: Timestamp,
    /// The task definition (the payload is in `task["payload"]`).
    pub task: Value,
    /// Credentials for this run: reclaim, resolve, artifacts and log.
    #[serde(default)]
    pub credentials: Option<Credentials>,
    /// The task's secrets, if it has any (handed only to the claiming worker).
    #[serde(default)]
    pub secrets: Option<shoal_engine::secrets::Secrets>,
}

/// A client of one Shoal server.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    root_url: String,
    /// Shared by the clones of one `with_credentials`, so that renewed run credentials
    /// reach every part of a worker that uses them.
    credentials: Option<std::sync::Arc<std::sync::RwLock<Credentials>>>,
}

impl Client {
    /// A client of the server at `root_url` (e.g. `http://127.0.0.1:8080`).
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn new(root_url: &str) -> Result<Client, ClientError> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|err| ClientError::Transport(err.to_string()))?;
        Ok(Client { http, root_url: root_url.trim_end_matches('/').to_owned(), credentials: None })
    }

    /// This client signing its calls with `credentials` (or anonymous with `None`).
    #[must_use]
    pub fn with_credentials(&self, credentials: Option<Credentials>) -> Client {
        let credentials = credentials.map(|credentials| std::sync::Arc::new(std::sync::RwLock::new(credentials)));
        Client { credentials, ..self.clone() }
    }

    /// Replaces the credentials this client (and its clones) sign with: those a reclaim renewed.
    pub fn renew_credentials(&self, renewed: Credentials) {
        if let Some(credentials) = &self.credentials {
            *credentials.write().unwrap_or_else(std::sync::PoisonError::into_inner) = renewed;
        }
    }

    /// The server's root URL.
    #[must_use]
    pub fn root_url(&self) -> &str {
        &self.root_url
    }

    fn queue(&self, path: &str) -> String {
        format!("{}/api/queue/v1{path}", self.root_url)
    }

    fn scheduler(&self, path: &str) -> String {
        format!("{}/api/scheduler/v1{path}", self.root_url)
    }

    /// createTaskGraph: submits a graph (seed 000's format) under `task_graph_id`.
    ///
    /// # Errors
    /// As the server answers (400 names the problem: a cycle, an unknown label, a bad task).
    pub async fn create_task_graph(&self, task_graph_id: &str, graph: &Value) -> Result<GraphStatus, ClientError> {
        let answer: GraphStatusAnswer = self
            .call(Method::PUT, &self.scheduler(&format!("/task-graph/{task_graph_id}")), Some(Body::Json(graph)))
            .await?;
        Ok(answer.status)
    }

    /// A task graph's status.
    ///
    /// # Errors
    /// As the server answers (404 for an unknown graph).
    pub async fn task_graph_status(&self, task_graph_id: &str) -> Result<GraphStatus, ClientError> {
        let answer: GraphStatusAnswer =
            self.call(Method::GET, &self.scheduler(&format!("/task-graph/{task_graph_id}/status")), None).await?;
        Ok(answer.status)
    }

    /// Every task of a graph with its label, requirements and state (`/inspect`).
    ///
    /// # Errors
    /// As the server answers (404 for an unknown graph).
    pub async fn inspect_task_graph(&self, task_graph_id: &str) -> Result<GraphInspection, ClientError> {
        self.call(Method::GET, &self.scheduler(&format!("/task-graph/{task_graph_id}/inspect")), None).await
    }

    /// Sends a request (retrying transport errors and 5xx) and returns the answer's body.
    async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<Body<'_>>,
    ) -> Result<(StatusCode, Vec<u8>), ClientError> {
        let body = match &body {
            Some(Body::Json(value)) => Some((
                "application/json",
                serde_json::to_vec(value).map_err(|err| ClientError::Decode(format!("request body: {err}")))?,
            )),
            Some(Body::Bytes(bytes)) => Some(("application/octet-stream", bytes.to_vec())),
            None => None,
        };
        let (body, method) = (&body, &method);
        retried(url, || async move {
            let mut request = self.http.request(method.clone(), url);
            if let Some((content_type, bytes)) = &body {
                request = request.header(reqwest::header::CONTENT_TYPE, *content_type).body(bytes.clone());
            }
            if let Some(credentials) = &self.credentials {
                // Signed anew each attempt: a retry must not reuse the nonce.
                let signed = body.as_ref().map(|(content_type, bytes)| (*content_type, bytes.as_slice()));
                let credentials = credentials.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
                match credentials.authorization(method.as_str(), url, signed) {
                    Ok(authorization) => request = request.header(reqwest::header::AUTHORIZATION, authorization),
                    Err(err) => return Try::Done(Err(err)),
                }
            }
            match request.send().await {
                Ok(res) => {
                    let status = res.status();
                    match res.bytes().await {
                        Ok(bytes) if !status.is_server_error() => Try::Done(Ok((status, bytes.to_vec()))),
                        Ok(bytes) => Try::Again(ClientError::Status {
                            status,
                            code: "ServerError".into(),
                            message: String::from_utf8_lossy(&bytes).into_owned(),
                        }),
                        Err(err) => Try::Again(ClientError::Transport(err.to_string())),
                    }
                }
                Err(err) => Try::Again(ClientError::Transport(err.to_string())),
            }
        })
        .await
    }

    /// A call whose success answer is JSON of type `T`.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: &str,
        body: Option<Body<'_>>,
    ) -> Result<T, ClientError> {
        let (status, bytes) = self.send(method, url, body).await?;
        if !status.is_success() {
            return Err(error_of(status, &bytes));
        }
        serde_json::from_slice(&bytes).map_err(|err| ClientError::Decode(format!("{url}: {err}")))
    }

    /// claimWork: waits (up to the server's long-poll time) for up to `count` runs.
    ///
    /// # Errors
    /// As the server answers.
    pub async fn claim_work(
        &self,
        task_queue_id: &str,
        worker_group: &str,
        worker_id: &str,
        count: u32,
        dimensions: &Value,
    ) -> Result<Vec<Claim>, ClientError> {
        let worker = ClaimingWorker { worker_group, worker_id, dimensions, caches: None, more_queues: &[] };
        Ok(self.claim_for_worker(task_queue_id, &worker, count).await?.tasks)
    }

    /// claimWork as Shoal's worker makes it: with its version, the named caches it holds (when
    /// given) and the other queues it serves, and told whether to stop.
    ///
    /// # Errors
    /// As the server answers.
    pub async fn claim_for_worker(
        &self,
        task_queue_id: &str,
        worker: &ClaimingWorker<'_>,
        count: u32,
    ) -> Result<ClaimAnswer, ClientError> {
        let url = self.queue(&format!("/claim-work/{}", task_queue_id.replace('/', "%2F")));
        let mut body = json!({
            "workerGroup": worker.worker_group,
            "workerId": worker.worker_id,
            "tasks": count,
            "dimensions": worker.dimensions,
            "version": env!("CARGO_PKG_VERSION"),
        });
        if let Some(caches) = worker.caches {
            body["caches"] = json!(caches);
        }
        if !worker.more_queues.is_empty() {
            let queues: Vec<&str> =
                std::iter::once(task_queue_id).chain(worker.more_queues.iter().map(String::as_str)).collect();
            body["taskQueueIds"] = json!(queues);
        }
        self.call(Method::POST, &url, Some(Body::Json(&body))).await
    }

    /// A worker's heartbeat (Shoal's): says it is alive, what it has (dimensions, the named
    /// caches it holds) and, with `exiting`, that it exits as it was asked to; the answer
    /// says whether to stop and when to call again.
    ///
    /// # Errors
    /// As the server answers.
    pub async fn heartbeat(
        &self,
        task_queue_id: &str,
        worker_group: &str,
        worker_id: &str,
        beat: &Beat<'_>,
    ) -> Result<Standing, ClientError> {
        let url = self.queue(&format!("{}/{worker_group}/{worker_id}/heartbeat", workers::workers_path(task_queue_id)));
        let mut body = json!({
            "dimensions": beat.dimensions,
            "version": env!("CARGO_PKG_VERSION"),
            "exiting": beat.exiting,
            "caches": beat.caches,
        });
        if let Some(maintenance) = beat.maintenance {
            body["maintenance"] = json!(maintenance);
        }
        self.call(Method::POST, &url, Some(Body::Json(&body))).await
    }

    /// reclaimTask: extends the claim; a 409 means the run is over (canceled, expired).
    ///
    /// # Errors
    /// As the server answers.
    pub async fn reclaim(&self, task_id: &str, run_id: u32) -> Result<(Timestamp, Option<Credentials>), ClientError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Answer {
            taken_until: Timestamp,
            #[serde(default)]
            credentials: Option<Credentials>,
        }
        let url = self.queue(&format!("/task/{task_id}/runs/{run_id}/reclaim"));
        let answer: Answer = self.call(Method::POST, &url, None).await?;
        Ok((answer.taken_until, answer.credentials))
    }

    /// reportCompleted, reportFailed or reportException.
    ///
    /// # Errors
    /// As the server answers.
    pub async fn report(&self, task_id: &str, run_id: u32, outcome: &Outcome) -> Result<TaskStatus, ClientError> {
        self.report_measured(task_id, run_id, outcome, None).await
    }

    /// [`Client::report`] with what the worker measured of the run (Shoal's `stats`).
    ///
    /// # Errors
    /// As the server answers.
    pub async fn report_measured(
        &self,
        task_id: &str,
        run_id: u32,
        outcome: &Outcome,
        stats: Option<&RunStats>,
    ) -> Result<TaskStatus, ClientError> {
        #[derive(Deserialize)]
        struct Answer {
            status: TaskStatus,
        }
        let (path, mut body) = match outcome {
            Outcome::Completed => ("completed", None),
            Outcome::Failed => ("failed", None),
            Outcome::Exception(reason) => ("exception", Some(json!({ "reason": reason.as_str() }))),
        };
        if let Some(stats) = stats {
            body.get_or_insert_with(|| json!({}))["stats"] = json!(stats);
        }
        let url = self.queue(&format!("/task/{task_id}/runs/{run_id}/{path}"));
        let answer: Answer = self.call(Method::POST, &url, body.as_ref().map(Body::Json)).await?;
        Ok(answer.status)
    }

    /// createArtifact; answers the server's JSON (for a blob, with its `putUrl`).
    ///
    /// # Errors
    /// As the server answers.
    pub async fn create_artifact(
        &self,
        task_id: &str,
        run_id: u32,
        name: &str,
        body: &Value,
    ) -> Result<Value, ClientError> {
        let url = self.queue(&format!("/task/{task_id}/runs/{run_id}/artifacts/{}", encode_path(name)));
        self.call(Method::POST, &url, Some(Body::Json(body))).await
    }

    /// Uploads a file as a blob artifact's bytes to `put_url`, streaming it (never held in
    /// memory whole); retried like every call, reopening the file each time.
    ///
    /// # Errors
    /// When the file cannot be read or the server refuses.
    pub async fn upload_file(&self, put_url: &str, path: &std::path::Path) -> Result<(), ClientError> {
        retried(put_url, || async move {
            let file = match tokio::fs::File::open(path).await {
                Ok(file) => file,
                Err(err) => {
                    return Try::Done(Err(ClientError::Transport(format!("opening {}: {err}", path.display()))));
                }
            };
            // Large reads: each read of a tokio file is a trip to a blocking thread.
            let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024));
            match self.http.put(put_url).body(body).send().await {
                Ok(res) if res.status().is_success() => Try::Done(Ok(())),
                Ok(res) => {
                    let status = res.status();
                    let error = error_of(status, &res.bytes().await.unwrap_or_default());
                    if status.is_server_error() { Try::Again(error) } else { Try::Done(Err(error)) }
                }
                Err(err) => Try::Again(ClientError::Transport(err.to_string())),
            }
        })
        .await
    }

    /// createTask.
    ///
    /// # Errors
    /// As the server answers (400 names the bad field).
    pub async fn create_task(&self, task_id: &str, definition: &Value) -> Result<TaskStatus, ClientError> {
        let answer: StatusAnswer =
            self.call(Method::PUT, &self.queue(&format!("/task/{task_id}")), Some(Body::Json(definition))).await?;
        Ok(answer.status)
    }

    /// A task's status.
    ///
    /// # Errors
    /// As the server answers (404 for an unknown task).
    pub async fn task_status(&self, task_id: &str) -> Result<TaskStatus, ClientError> {
        let answer: StatusAnswer =
            self.call(Method::GET, &self.queue(&format!("/task/{task_id}/status")), None).await?;
        Ok(answer.status)
    }

    /// cancelTask.
    ///
    /// # Errors
    /// As the server answers.
    pub async fn cancel_task(&self, task_id: &str) -> Result<TaskStatus, ClientError> {
        let answer: StatusAnswer =
            self.call(Method::POST, &self.queue(&format!("/task/{task_id}/cancel")), None).await?;
        Ok(answer.status)
    }

    /// Every member of a task group (all pages), each with its definition and status.
    ///
    /// # Errors
    /// As the server answers.
    pub async fn task_group(&self, group: &str) -> Result<Vec<GroupMember>, ClientError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Page {
            tasks: Vec<GroupMember>,
            continuation_token: Option<String>,
        }
        let mut members = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut url = self.queue(&format!("/task-group/{group}/list"));
            if let Some(token) = &token {
                url.push_str(&format!("?continuationToken={}", encode_path(token)));
            }
            let page: Page = self.call(Method::GET, &url, None).await?;
            members.extend(page.tasks);
            match page.continuation_token {
                Some(next) => token = Some(next),
                None => return Ok(members),
            }
        }
    }

    /// An artifact's bytes (links and references followed; an error artifact is an error).
    ///
    /// # Errors
    /// As the server answers (424 for an error artifact).
    pub async fn artifact_bytes(&self, task_id: &str, run_id: Option<u32>, name: &str) -> Result<Vec<u8>, ClientError> {
        let path = match run_id {
            Some(run_id) => format!("/task/{task_id}/runs/{run_id}/artifact-content/{}", encode_path(name)),
            None => format!("/task/{task_id}/artifact-content/{}", encode_path(name)),
        };
        let content: Value = self.call(Method::GET, &self.queue(&path), None).await?;
        if content["storageType"] == "error" {
            return Err(ClientError::Status {
                status: StatusCode::FAILED_DEPENDENCY,
                code: content["reason"].as_str().unwrap_or("error").to_owned(),
                message: content["message"].as_str().unwrap_or("").to_owned(),
            });
        }
        let url = content["url"].as_str().ok_or_else(|| ClientError::Decode("artifact content without url".into()))?;
        let (status, bytes) = self.send(Method::GET, url, None).await?;
        if status.is_success() { Ok(bytes) } else { Err(error_of(status, &bytes)) }
    }

    /// A run's live log from `offset`; with `follow`, the response streams until the run ends.
    ///
    /// # Errors
    /// When the server cannot be reached or refuses.
    pub async fn log(&self, task_id: &str, run_id: u32, follow: bool) -> Result<reqwest::Response, ClientError> {
        let follow = if follow { "&follow=1" } else { "" };
        let url = format!("{}/logs/v1/{task_id}/{run_id}?offset=0{follow}", self.root_url);
        // A following read lasts as long as the run: no request timeout.
        let res =
            reqwest::Client::new().get(url).send().await.map_err(|err| ClientError::Transport(err.to_string()))?;
        if res.status().is_success() {
            return Ok(res);
        }
        let status = res.status();
        let bytes = res.bytes().await.map_err(|err| ClientError::Transport(err.to_string()))?;
        Err(error_of(status, &bytes))
    }

    /// Appends live-log bytes at `offset`; answers the log's size. A 409 carries the offset
    /// to resend from in its message.
    ///
    /// # Errors
    /// As the server answers.
    pub async fn append_log(&self, task_id: &str, run_id: u32, offset: u64, bytes: &[u8]) -> Result<u64, ClientError> {
        #[derive(Deserialize)]
        struct Answer {
            size: u64,
        }
        let url = format!("{}/logs/v1/{task_id}/{run_id}?offset={offset}", self.root_url);
        let answer: Answer = self.call(Method::POST, &url, Some(Body::Bytes(bytes))).await?;
        Ok(answer.size)
    }
}

/// The current time, for clients (the worker's reclaim timing, the CLI's default dates).
#[must_use]
pub fn now() -> Timestamp {
    let millis = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    Timestamp(i64::try_from(millis).unwrap_or(i64::MAX))
}

/// A task of a group, as listTaskGroup gives it.
#[derive(Debug, Clone, Deserialize)]
pub struct GroupMember {
    /// Status.
    pub status: TaskStatus,
    /// Definition.
    pub task: Value,
}

#[derive(Deserialize)]
struct StatusAnswer {
    status: TaskStatus,
}

/// How a run ended, as the worker reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// reportCompleted.
    Completed,
    /// reportFailed.
    Failed,
    /// reportException with this reason.
    Exception(WorkerException),
}

enum Body<'a> {
    Json(&'a Value),
    Bytes(&'a [u8]),
}

pub(crate) fn error_of(status: StatusCode, bytes: &[u8]) -> ClientError {
    let body: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    ClientError::Status {
        status,
        code: body["code"].as_str().unwrap_or("Unknown").to_owned(),
        message: body["message"].as_str().map_or_else(|| String::from_utf8_lossy(bytes).into_owned(), str::to_owned),
    }
}

/// One try of a call: how it ended, or an error worth another try (transport, 5xx).
enum Try<T> {
    Done(Result<T, ClientError>),
    Again(ClientError),
}

/// Tries `call` up to [`ATTEMPTS`] times with capped exponential backoff, as long as it
/// says another try may succeed; answers the last error otherwise.
async fn retried<T, F: Future<Output = Try<T>>>(url: &str, mut call: impl FnMut() -> F) -> Result<T, ClientError> {
    let mut backoff = BACKOFF;
    let mut attempt = 1;
    loop {
        match call().await {
            Try::Done(result) => return result,
            Try::Again(err) if attempt >= ATTEMPTS => return Err(err),
            Try::Again(_) => {
                tracing::debug!(url, attempt, "retrying after a failed call");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                attempt += 1;
            }
        }
    }
}

/// Percent-encodes a path (artifact names), keeping `/`.
pub(crate) fn encode_path(name: &str) -> String {
    // Everything but unreserved characters and `/` is escaped.
    const PATH: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~').remove(b'/');
    percent_encoding::utf8_percent_encode(name, PATH).to_string()
}
