//! What the queue counts for Prometheus (the API renders it on `/metrics`): tasks created and
//! resolved per queue and outcome, and how long claimed runs waited.

use shoal_engine::event::Event;
use shoal_store::{Claim, TaskEvent};

/// Counts a commit's events: each task defined, and each run resolution that resolved its
/// task (one followed in the same commit by the task's next pending run is a retry).
pub(crate) fn count(events: &[TaskEvent]) {
    for (at, event) in events.iter().enumerate() {
        let outcome = match event.event {
            Event::Defined => {
                metrics::counter!("shoal_tasks_created_total", "queue" => event.task_queue_id.clone()).increment(1);
                continue;
            }
            Event::Completed { .. } => "completed",
            Event::Failed { .. } => "failed",
            Event::Exception { .. } => "exception",
            _ => continue,
        };
        let retried = events[at + 1..]
            .iter()
            .any(|later| later.task_id == event.task_id && matches!(later.event, Event::Pending { .. }));
        let (kind, queue) = (if retried { "retried" } else { outcome }, event.task_queue_id.clone());
        metrics::counter!("shoal_runs_resolved_total", "queue" => queue.clone(), "outcome" => kind).increment(1);
        if !retried {
            metrics::counter!("shoal_tasks_resolved_total", "queue" => queue, "outcome" => outcome).increment(1);
        }
    }
}

/// How long each claimed run waited pending, from becoming pending to its claim.
pub(crate) fn claimed(claims: &[Claim]) {
    for claim in claims {
        let Some(run) = claim.status.runs.get(claim.run_id as usize) else { continue };
        let Some(started) = run.started else { continue };
        let waited = (started.millis() - run.scheduled.millis()).max(0) as f64 / 1000.0;
        metrics::histogram!("shoal_claim_wait_seconds", "queue" => claim.status.task_queue_id.clone()).record(waited);
    }
}
