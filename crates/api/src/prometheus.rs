//! `/metrics`: the process's counters and histograms in Prometheus' text format, with each
//! queue's pending and claimed counts read from the store at scrape time.

use std::sync::OnceLock;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

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

pub(crate) async fn serve(State(state): State<AppState>) -> Result<Response, ApiError> {
    let handle = handle();
    let counts = state
        .queue
        .store()
        .read(|reads| {
            let queues = reads.list_task_queues(None, MAX_QUEUES)?;
            queues
                .items
                .into_iter()
                .map(|queue| Ok((reads.queue_counts(&queue.task_queue_id)?, queue.task_queue_id)))
                .collect::<Result<Vec<_>, shoal_store::StoreError>>()
        })
        .await?;
    for (count, queue) in counts {
        metrics::gauge!("shoal_pending_tasks", "queue" => queue.clone()).set(count.pending_tasks as f64);
        metrics::gauge!("shoal_claimed_tasks", "queue" => queue).set(count.claimed_tasks as f64);
    }
    let mut res = handle.render().into_response();
    res.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
    Ok(res)
}
