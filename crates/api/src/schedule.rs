//! The hooks' schedule: every second, each hook whose next fire is due is fired as of its
//! scheduled time. A fire moves the hook's next fire on in the transaction that creates its
//! task, so of several servers reading the same due hook one fires it; a hook missed while no
//! server ran is due at start and fires once, its next fire then counted from now.

use std::future::Future;
use std::time::Duration;

use serde_json::{Map, json};
use shoal_engine::TaskId;
use shoal_engine::hook::FiredBy;
use shoal_service::now;
use shoal_store::hooks::{FireOutcome, FireRequest};
use shoal_store::operation::FireHook;

use crate::AppState;
use crate::error::ApiError;
use crate::routes::hooks::{Prepared, prepare};

/// Most hooks fired in one tick.
const PER_TICK: usize = 100;

/// Fires due hooks every second until `shutdown`.
pub async fn run_hook_schedule(state: AppState, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = tick.tick() => {}
        }
        if let Err(err) = fire_due(&state).await {
            tracing::warn!(error = %err.message, "firing scheduled hooks");
        }
    }
}

/// Fires the hooks due now (at most [`PER_TICK`]); answers how many created a task.
///
/// # Errors
/// The store's.
pub async fn fire_due(state: &AppState) -> Result<usize, ApiError> {
    let at = now();
    let due = state.queue.store().read(move |reads| reads.due_hooks(at, PER_TICK)).await?;
    let mut created = 0;
    for hook in due {
        let Some(scheduled) = hook.next_fire else { continue };
        let task_id = TaskId::parse(&slugid::nice()).ok_or_else(ApiError::internal)?;
        let mut context = Map::new();
        context.insert("firedBy".into(), json!(FiredBy::Schedule));
        let task = match prepare(state, &hook.hook, context, task_id, scheduled, None) {
            Prepared::Declined => None,
            Prepared::Task(definition) => Some(Ok(*definition)),
            Prepared::Refused(error, _) => Some(Err(error)),
        };
        let request =
            FireRequest { key: hook.key(), task_id, fired_by: FiredBy::Schedule, task, scheduled: Some(scheduled) };
        match state.queue.run(FireHook { request }).await? {
            FireOutcome::Created(_) => created += 1,
            FireOutcome::Failed(error) => {
                tracing::warn!(hook = %hook.key().path(), %error, "a scheduled hook failed to create its task");
            }
            FireOutcome::Skipped => {}
        }
    }
    Ok(created)
}
