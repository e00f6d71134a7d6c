//! `/metrics`: the process's counters and histograms in Prometheus' text format, with each
//! queue's pending and claimed counts and workers by state read from the store at scrape
//! time, and the outbox's backlog.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use shoal_engine::worker::WorkerState;
use shoal_store::QueueCounts;

use crate::AppState;
use crate::error::ApiError;

/// Latency buckets, in seconds: sub-millisecond claims to minute-long long polls.
const BUCKETS: &[f64] =
    &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// Most queues whose counts one scrape reads.
const MAX_QUEUES: usize = 1000;

/// The process's one recorder, installed on first use (several servers in one test process
/// share it).
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let builder = PrometheusBuilder::new().set_buckets(BUCKETS).unwrap_or_else(|_| PrometheusBuilder::new());
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("another metrics recorder is installed; /metrics shows only the gauges");
        }
        handle
    })
}

/// Most workers of one queue counted by state per scrape.
const MAX_WORKERS: usize = 100_000;

/// What a scrape reads of one queue.
struct QueueGauges {
    queue: String,
    counts: QueueCounts,
    workers: BTreeMap<WorkerState, u64>,
}

pub(crate) async fn serve(State(state): State<AppState>) -> Result<Response, ApiError> {
    let handle = handle();
    let now = shoal_service::now();
    let dead_after = i64::try_from(state.queue.config().worker_dead_after.as_millis()).unwrap_or(i64::MAX);
    let gauges = state
        .queue
        .store()
        .read(move |reads| {
            let queues = reads.list_task_queues(None, MAX_QUEUES)?;
            queues
                .items
                .into_iter()
                .map(|queue| {
                    let queue = queue.task_queue_id;
                    let counts = reads.queue_counts(&queue)?;
                    let mut workers: BTreeMap<WorkerState, u64> = BTreeMap::new();
                    let mut after = None;
                    let mut seen = 0;
                    loop {
                        let page = reads.list_workers(&queue, after.as_deref(), 1000, &|_, _| true)?;
                        for listed in &page.items {
                            *workers.entry(listed.worker.state(now, dead_after, listed.busy)).or_default() += 1;
                        }
                        seen += page.items.len();
                        match page.continuation {
                            Some(next) if seen < MAX_WORKERS => after = Some(next),
                            _ => break,
                        }
                    }
                    Ok(QueueGauges { queue, counts, workers })
                })
                .collect::<Result<Vec<_>, shoal_store::StoreError>>()
        })
        .await?;
    for QueueGauges { queue, counts, workers } in gauges {
        metrics::gauge!("shoal_pending_tasks", "queue" => queue.clone()).set(counts.pending_tasks as f64);
        metrics::gauge!("shoal_claimed_tasks", "queue" => queue.clone()).set(counts.claimed_tasks as f64);
        for worker_state in WorkerState::ALL {
            let n = workers.get(&worker_state).copied().unwrap_or(0);
            metrics::gauge!("shoal_workers", "queue" => queue.clone(), "state" => worker_state.as_str()).set(n as f64);
        }
    }
    // Only the publishing server's count means anything (another one's never moves).
    let store = state.queue.store();
    let backlog = if store.is_publishing() { store.outbox().backlog() } else { 0 };
    metrics::gauge!("shoal_outbox_backlog").set(backlog as f64);
    metrics::gauge!("shoal_claims_waiting").set(state.queue.claims_waiting() as f64);
    let mut res = handle.render().into_response();
    res.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
    Ok(res)
}
