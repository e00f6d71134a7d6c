//! Scenarios through the real HTTP API: a server on 127.0.0.1:0 over a temporary SQLite
//! database, driven the way clients and workers drive it. With `SHOAL_TEST_BACKEND=postgres`
//! every scenario runs on PostgreSQL instead (a fresh database each, on a private cluster this
//! test binary starts); `scripts/test.sh` runs the suite both ways.

#[path = "../../../store/tests/support/postgres.rs"]
mod pg;

mod artifacts;
mod auth;
mod claims;
mod connections;
mod errors;
mod events;
mod graphs;
mod logs;
mod schemas;
mod scope_table;
mod tasks;
mod workers;

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use shoal_api::AppState;
use shoal_service::{Service, ServiceConfig};
use shoal_store::{PgConfig, PgStore, SqliteConfig, SqliteStore, Store};

/// A running server and a client for it.
pub(crate) struct TestApp {
    pub(crate) base: String,
    pub(crate) root: String,
    pub(crate) queue: Service,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// The store the suite runs on: SQLite unless `SHOAL_TEST_BACKEND=postgres`.
fn open_store(dir: &std::path::Path, claim_timeout_secs: i64) -> Store {
    let backend = std::env::var("SHOAL_TEST_BACKEND").unwrap_or_default();
    match backend.as_str() {
        "" | "sqlite" => {
            let config = SqliteConfig {
                path: dir.join("shoal.db"),
                settings: shoal_store::StoreSettings { claim_timeout_secs, ..Default::default() },
            };
            Store::Sqlite(SqliteStore::open(&config).unwrap())
        }
        "postgres" => {
            let mut config = PgConfig::new(&pg::fresh_database());
            config.settings.claim_timeout_secs = claim_timeout_secs;
            // The blocking client must not start inside the test's runtime.
            let store = std::thread::spawn(move || PgStore::open(&config)).join().unwrap().unwrap();
            Store::Postgres(store)
        }
        other => panic!("SHOAL_TEST_BACKEND: must be sqlite or postgres, not {other}"),
    }
}

/// Server settings a test may change.
pub(crate) struct Settings {
    pub(crate) claim_timeout_secs: i64,
    pub(crate) claim_wait: Duration,
    pub(crate) limits: shoal_api::ConnectionLimits,
    pub(crate) sizes: shoal_service::SizeLimits,
    pub(crate) worker_dead_after: Duration,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            claim_timeout_secs: 1200,
            claim_wait: Duration::from_secs(20),
            limits: shoal_api::ConnectionLimits::default(),
            sizes: shoal_service::SizeLimits::default(),
            worker_dead_after: Duration::from_secs(120),
        }
    }
}

impl TestApp {
    pub(crate) async fn start() -> TestApp {
        TestApp::with(Settings::default()).await
    }

    pub(crate) async fn with(settings: Settings) -> TestApp {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path(), settings.claim_timeout_secs);
        let queue_config = ServiceConfig {
            claim_wait: settings.claim_wait,
            due_interval: Duration::from_millis(50),
            sizes: settings.sizes,
            worker_dead_after: settings.worker_dead_after,
        };
        let blobs = shoal_blobs::Blobs::local(&dir.path().join("blobs")).unwrap();
        let queue = Service::new(store, blobs, queue_config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let root_url = format!("http://{}", listener.local_addr().unwrap());
        let base = format!("{root_url}/api/queue/v1");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (due_stop, due_stopped) = tokio::sync::oneshot::channel::<()>();
        let (publisher_stop, publisher_stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(shoal_service::run_due_loop(queue.clone(), async {
            let _ = due_stopped.await;
        }));
        tokio::spawn(shoal_service::run_publisher(queue.store().clone(), shoal_bus::Bus::Local, async {
            let _ = publisher_stopped.await;
        }));
        let auth = shoal_service::Authority::open(queue.store().clone(), ROOT_TOKEN.to_owned()).await.unwrap();
        let state = AppState {
            queue: queue.clone(),
            auth,
            nonces: Default::default(),
            started: Instant::now(),
            root_url,
            github_webhook_secret: None,
            github_renderer: None,
            subscribers: Default::default(),
        };
        let closing = queue.clone();
        tokio::spawn(shoal_api::serve_with(listener, state, settings.limits, async move {
            let _ = stopped.await;
            closing.close_subscriptions();
            let _ = due_stop.send(());
            let _ = publisher_stop.send(());
        }));
        // Redirects are checked, not followed, as the official clients do.
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        let root = base.trim_end_matches("/api/queue/v1").to_owned();
        TestApp { base, root, queue, client, _dir: dir, stop: Some(stop) }
    }

    /// Where the server keeps its files.
    pub(crate) fn data_dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// A queue call signed as the root client.
    pub(crate) async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        self.call_as(Some(&root_credentials()), method, &format!("{}{path}", self.base), body).await
    }

    /// A call on an absolute URL signed with `credentials` (anonymous with `None`).
    pub(crate) async fn call_as(
        &self,
        credentials: Option<&shoal_client::Credentials>,
        method: reqwest::Method,
        url: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.client.request(method.clone(), url);
        let bytes = body.map(|body| serde_json::to_vec(&body).unwrap());
        if let Some(bytes) = &bytes {
            req = req.header("content-type", "application/json").body(bytes.clone());
        }
        if let Some(credentials) = credentials {
            let signed = bytes.as_deref().map(|bytes| ("application/json", bytes));
            req = req.header("authorization", credentials.authorization(method.as_str(), url, signed).unwrap());
        }
        let res = req.send().await.unwrap();
        let status = res.status();
        let text = res.text().await.unwrap();
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("{url} answered non-JSON: {text}"))
        };
        (status, value)
    }

    /// The raw response to a request on an absolute URL (redirect targets, blob uploads).
    pub(crate) async fn raw(&self, method: reqwest::Method, url: &str, body: Option<Vec<u8>>) -> reqwest::Response {
        let mut req = self.client.request(method, url);
        if let Some(body) = body {
            req = req.body(body);
        }
        req.send().await.unwrap()
    }

    /// The raw response to a request on an absolute URL, signed as the root client (a body
    /// is sent as `application/octet-stream`).
    pub(crate) async fn signed_raw(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<Vec<u8>>,
    ) -> reqwest::Response {
        let mut req = self.client.request(method.clone(), url);
        let signed = body.as_deref().map(|bytes| ("application/octet-stream", bytes));
        let authorization = root_credentials().authorization(method.as_str(), url, signed).unwrap();
        req = req.header("authorization", authorization);
        if let Some(body) = body {
            req = req.header("content-type", "application/octet-stream").body(body);
        }
        req.send().await.unwrap()
    }

    pub(crate) async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    pub(crate) async fn put(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(reqwest::Method::PUT, path, Some(body)).await
    }

    /// Creates a task and asserts it was accepted; returns its status.
    pub(crate) async fn create(&self, task_id: &str, patch: Value) -> Value {
        let (status, body) = self.put(&format!("/task/{task_id}"), task_def(patch)).await;
        assert_eq!(status, StatusCode::OK, "createTask: {body}");
        body["status"].clone()
    }

    /// One claimWork call; returns the claims.
    pub(crate) async fn claim(&self, queue: &str, worker_id: &str, n: u32) -> Vec<Value> {
        let body = json!({"workerGroup": "g", "workerId": worker_id, "tasks": n});
        let (status, res) = self.post(&format!("/claim-work/{}", queue.replace('/', "%2F")), body).await;
        assert_eq!(status, StatusCode::OK, "claimWork: {res}");
        res["tasks"].as_array().unwrap().clone()
    }

    pub(crate) async fn report(&self, task_id: &str, run_id: u64, how: &str) -> Value {
        let (status, body) = self.post(&format!("/task/{task_id}/runs/{run_id}/{how}"), json!({})).await;
        assert_eq!(status, StatusCode::OK, "report {how}: {body}");
        body["status"].clone()
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The root client's access token on every test server.
pub(crate) const ROOT_TOKEN: &str = "test-root-access-token";

/// The root client's credentials.
pub(crate) fn root_credentials() -> shoal_client::Credentials {
    shoal_client::Credentials { client_id: "root".into(), access_token: ROOT_TOKEN.into(), certificate: None }
}

/// A fresh slugid.
pub(crate) fn slugid() -> String {
    slugid::nice()
}

fn rfc3339(offset: Duration, forward: bool) -> String {
    let now = shoal_service::now();
    let millis = offset.as_millis() as i64;
    shoal_engine::Timestamp(if forward { now.millis() + millis } else { now.millis() - millis }).to_string()
}

/// A time `secs` from now.
pub(crate) fn from_now(secs: u64) -> String {
    rfc3339(Duration::from_secs(secs), true)
}

/// A valid definition in queue `prov/wt` with `patch` applied (null removes a field).
pub(crate) fn task_def(patch: Value) -> Value {
    let mut def = json!({
        "taskQueueId": "prov/wt",
        "created": rfc3339(Duration::ZERO, true),
        "deadline": from_now(3600),
        "payload": {"command": ["true"]},
        "metadata": {"name": "t", "description": "d", "owner": "me@example.com", "source": "https://example.com/x"}
    });
    for (key, value) in patch.as_object().unwrap() {
        if value.is_null() {
            def.as_object_mut().unwrap().remove(key);
        } else {
            def[key] = value.clone();
        }
    }
    def
}
