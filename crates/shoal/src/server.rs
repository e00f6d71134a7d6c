//! `shoal server`: the API, the due loop, the hooks' schedule and the store wired together,
//! and the staged shutdown on SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context;
use shoal_api::AppState;
use shoal_blobs::Blobs;
use shoal_service::{Authority, Service, ServiceConfig, SizeLimits};
use shoal_store::Store;
use tokio::sync::watch;

use crate::settings::ServerConfig;
use crate::{credentials, data_dir, limits};

/// Runs a server until SIGINT or SIGTERM.
pub(crate) async fn server(config: ServerConfig) -> anyhow::Result<()> {
    let shutdown = ShutdownSignal::install()?;
    let running = RunningServer::start(&config).await?;
    // Printed on stdout so scripts (and tests) can learn the port when listening on :0.
    println!("shoal listening on http://{} (rootUrl {})", running.local, running.root_url);
    shutdown.received().await;
    running.stop().await
}

/// A server started in this process: the API, the due loop and the store behind them.
pub(crate) struct RunningServer {
    pub(crate) local: SocketAddr,
    pub(crate) root_url: String,
    /// The root client's access token (for `shoal dev`'s own workers and its exports).
    pub(crate) root_token: credentials::Secret,
    stop: watch::Sender<bool>,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
    due: tokio::task::JoinHandle<()>,
    hooks: tokio::task::JoinHandle<()>,
    publisher: tokio::task::JoinHandle<()>,
    auth_refresh: tokio::task::JoinHandle<()>,
    queue: Service,
    store: Store,
    /// Held while the server runs on the embedded database (`data_dir::lock`).
    _data_dir_lock: Option<std::fs::File>,
}

/// How long a temporary upload file must have gone unwritten before a starting server
/// removes it as left behind (an upload in progress writes as its bytes arrive).
const STALE_UPLOAD: Duration = Duration::from_secs(3600);

impl RunningServer {
    pub(crate) async fn start(config: &ServerConfig) -> anyhow::Result<RunningServer> {
        data_dir::make_private(&config.data_dir)?;
        let data_dir_lock = match config.database {
            None => Some(data_dir::lock(&config.data_dir)?),
            Some(_) => None,
        };
        let store = config.open_store().await?;
        let queue_config = ServiceConfig {
            claim_wait: Duration::from_secs(config.claim_wait),
            sizes: SizeLimits {
                artifact_bytes: config.max_artifact_bytes,
                run_bytes: config.max_run_bytes,
                log_bytes: config.max_log_bytes,
            },
            worker_dead_after: Duration::from_secs(config.worker_dead_after),
            ..ServiceConfig::default()
        };
        let blobs_dir = config.data_dir.join("blobs");
        let blobs = match &config.blob_store {
            // The endpoint, region and credentials come from the standard AWS variables.
            Some(url) => Blobs::s3(url, &[], &blobs_dir).with_context(|| format!("opening blob storage {url}"))?,
            None => {
                Blobs::local(&blobs_dir).with_context(|| format!("opening blob storage {}", blobs_dir.display()))?
            }
        };
        // Uploads a killed process left half-written; in the background, since a large data
        // dir takes a while to walk.
        let sweep = blobs.clone();
        tokio::task::spawn_blocking(move || match sweep.remove_stale_uploads(STALE_UPLOAD) {
            Ok(0) => {}
            Ok(n_removed) => tracing::info!(n_removed, "removed temporary uploads left by a stopped server"),
            Err(err) => tracing::warn!(error = %err, "looking for temporary uploads left behind failed"),
        });
        let (root_token, kept) = credentials::root_access_token(config.root_access_token.as_ref(), &config.data_dir)?;
        if let Some(path) = &kept {
            tracing::info!(path = %path.display(), "the root client's access token is in this file (clientId root)");
        }
        let root_token_copy = root_token.clone();
        let auth = Authority::open(store.clone(), root_token).await.context("loading clients and roles")?;
        let queue = Service::new(store.clone(), blobs, queue_config);
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("listening on {}", config.listen))?;
        let local = listener.local_addr().context("reading the bound address")?;
        let root_url = config.root_url.clone().unwrap_or_else(|| format!("http://{local}"));
        let root_url = root_url.trim_end_matches('/').to_owned();
        let (stop, stop_rx) = watch::channel(false);
        let due = tokio::spawn(shoal_service::run_due_loop(queue.clone(), stopped(stop_rx.clone())));
        let publisher =
            tokio::spawn(shoal_service::run_publisher(store.clone(), config.bus()?, stopped(stop_rx.clone())));
        let auth_refresh = tokio::spawn(shoal_service::run_auth_refresh(auth.clone(), stopped(stop_rx.clone())));
        let state = AppState {
            queue: queue.clone(),
            auth,
            nonces: Default::default(),
            started: Instant::now(),
            root_url: root_url.clone(),
            subscribers: shoal_api::Subscribers::default(),
            github_webhook_secret: config.github_webhook_secret.as_ref().map(|secret| secret.0.as_str().into()),
            // This very program renders pushes' templates apart, under limits.
            github_renderer: std::env::current_exe().ok(),
        };
        let descriptors = limits::raise_descriptor_limit();
        let max_connections = limits::max_connections(config.max_connections, descriptors);
        let connection_limits = shoal_api::ConnectionLimits {
            max_connections,
            max_connections_per_address: limits::per_address(config.max_connections_per_address, max_connections),
            ..shoal_api::ConnectionLimits::default()
        };
        tracing::debug!(
            max_connections,
            per_address = connection_limits.max_connections_per_address,
            descriptors,
            "connection limits"
        );
        let hooks = tokio::spawn(shoal_api::schedule::run_hook_schedule(state.clone(), stopped(stop_rx.clone())));
        let serving = tokio::spawn(shoal_api::serve_with(listener, state, connection_limits, stopped(stop_rx)));
        Ok(RunningServer {
            local,
            root_url,
            root_token: credentials::Secret(root_token_copy),
            stop,
            serving,
            due,
            hooks,
            publisher,
            auth_refresh,
            queue,
            store,
            _data_dir_lock: data_dir_lock,
        })
    }

    /// Stops in stages: no new requests, open ones finish, the due loop stops, the store
    /// commits what is queued.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        tracing::info!("shutting down: no new requests; finishing open ones");
        let _ = self.stop.send(true);
        // Event streams never end by themselves.
        self.queue.close_subscriptions();
        self.serving.await.context("server task")?.context("serving")?;
        self.due.await.context("due loop")?;
        self.hooks.await.context("hooks' schedule")?;
        self.auth_refresh.await.context("auth refresh")?;
        // Unpublished messages stay in the outbox for the next start.
        self.publisher.await.context("publisher")?;
        self.store.close().await;
        tracing::info!("stopped");
        Ok(())
    }
}

pub(crate) async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// SIGINT or SIGTERM, listened for from the moment this is made: a signal that arrives
/// before anyone awaits it is kept, not lost (or ignored, for processes started in the
/// background).
pub(crate) struct ShutdownSignal {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl ShutdownSignal {
    pub(crate) fn install() -> anyhow::Result<ShutdownSignal> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(ShutdownSignal {
            interrupt: signal(SignalKind::interrupt()).context("listening for SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("listening for SIGTERM")?,
        })
    }

    pub(crate) async fn received(mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}
