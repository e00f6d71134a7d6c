//! The messages Shoal publishes: Taskcluster's queue exchanges, routing keys and bodies.
//!
//! A message is built inside the transition's transaction from the task as the transition
//! left it, so what is published is exactly what was committed.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::value::RawValue;

use crate::artifact::Artifact;
use crate::event::Event;
use crate::graph::GraphState;
use crate::group::TaskGroup;
use crate::priority::Priority;
use crate::status::Run;
use crate::task::Task;
use crate::topic::{self, EXCHANGE_PREFIX, SCHEDULER_EXCHANGE_PREFIX, TaskKey};
use crate::{TaskId, Timestamp};

/// The topic exchanges: the queue's, and the task-graph scheduler's (`task-graph-*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Exchange {
    /// A task was defined.
    TaskDefined,
    /// A run became pending.
    TaskPending,
    /// A run was claimed.
    TaskRunning,
    /// An artifact was created (or its bytes arrived).
    ArtifactCreated,
    /// A run completed.
    TaskCompleted,
    /// A run failed.
    TaskFailed,
    /// A run ended with an exception.
    TaskException,
    /// A group has no unresolved task left.
    TaskGroupResolved,
    /// A group was sealed.
    TaskGroupSealed,
    /// A task's priority changed.
    TaskPriorityChanged,
    /// A group's priority changed.
    TaskGroupPriorityChanged,
    /// A task graph was submitted (or gained tasks after finishing) and is running.
    TaskGraphRunning,
    /// A task graph's task failed with no reruns left.
    TaskGraphBlocked,
    /// Every task of a task graph completed.
    TaskGraphFinished,
}

impl Exchange {
    /// Every exchange, in documentation order.
    pub const ALL: [Exchange; 14] = [
        Exchange::TaskDefined,
        Exchange::TaskPending,
        Exchange::TaskRunning,
        Exchange::ArtifactCreated,
        Exchange::TaskCompleted,
        Exchange::TaskFailed,
        Exchange::TaskException,
        Exchange::TaskGroupResolved,
        Exchange::TaskGroupSealed,
        Exchange::TaskPriorityChanged,
        Exchange::TaskGroupPriorityChanged,
        Exchange::TaskGraphRunning,
        Exchange::TaskGraphBlocked,
        Exchange::TaskGraphFinished,
    ];

    /// The full name, e.g. `exchange/taskcluster-queue/v1/task-pending`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Exchange::TaskDefined => "exchange/taskcluster-queue/v1/task-defined",
            Exchange::TaskPending => "exchange/taskcluster-queue/v1/task-pending",
            Exchange::TaskRunning => "exchange/taskcluster-queue/v1/task-running",
            Exchange::ArtifactCreated => "exchange/taskcluster-queue/v1/artifact-created",
            Exchange::TaskCompleted => "exchange/taskcluster-queue/v1/task-completed",
            Exchange::TaskFailed => "exchange/taskcluster-queue/v1/task-failed",
            Exchange::TaskException => "exchange/taskcluster-queue/v1/task-exception",
            Exchange::TaskGroupResolved => "exchange/taskcluster-queue/v1/task-group-resolved",
            Exchange::TaskGroupSealed => "exchange/taskcluster-queue/v1/task-group-sealed",
            Exchange::TaskPriorityChanged => "exchange/taskcluster-queue/v1/task-priority-changed",
            Exchange::TaskGroupPriorityChanged => "exchange/taskcluster-queue/v1/task-group-priority-changed",
            Exchange::TaskGraphRunning => "exchange/taskcluster-scheduler/v1/task-graph-running",
            Exchange::TaskGraphBlocked => "exchange/taskcluster-scheduler/v1/task-graph-blocked",
            Exchange::TaskGraphFinished => "exchange/taskcluster-scheduler/v1/task-graph-finished",
        }
    }

    /// The short name, e.g. `task-pending` (unique across both services).
    #[must_use]
    pub fn short_name(self) -> &'static str {
        let name = self.name();
        name.strip_prefix(EXCHANGE_PREFIX).or_else(|| name.strip_prefix(SCHEDULER_EXCHANGE_PREFIX)).unwrap_or(name)
    }

    /// Reads a full or short exchange name.
    #[must_use]
    pub fn parse(name: &str) -> Option<Exchange> {
        Exchange::ALL.into_iter().find(|exchange| exchange.name() == name || exchange.short_name() == name)
    }
}

/// One message: where it goes and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The exchange.
    pub exchange: Exchange,
    /// The primary routing key.
    pub routing_key: String,
    /// Extra routing keys (AMQP `CC`): `route.<r>` for each of the task's routes.
    pub cc: Vec<String>,
    /// The JSON body.
    pub body: String,
}

impl Message {
    /// The run this message says ended (completed, failed or exception), read from its
    /// primary routing key (`primary.<taskId>.<runId>...`).
    #[must_use]
    pub fn ended_run(&self) -> Option<(TaskId, u32)> {
        if !matches!(self.exchange, Exchange::TaskCompleted | Exchange::TaskFailed | Exchange::TaskException) {
            return None;
        }
        let mut words = self.routing_key.split('.');
        let (Some("primary"), Some(task_id), Some(run_id)) = (words.next(), words.next(), words.next()) else {
            return None;
        };
        Some((TaskId::parse(task_id)?, run_id.parse().ok()?))
    }
}

/// The body of every task message; absent fields are left out, as Taskcluster does.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TaskBody<'a> {
    version: u8,
    status: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_id: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker_group: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    taken_until: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task: Option<PulseTask<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    old_priority: Option<Priority>,
    #[serde(skip_serializing_if = "Option::is_none")]
    new_priority: Option<Priority>,
    #[serde(skip_serializing_if = "Option::is_none")]
    artifact: Option<ArtifactBody<'a>>,
}

/// The part of the definition task messages carry (Taskcluster's task-pulse-definition).
#[derive(Serialize)]
struct PulseTask<'a> {
    tags: &'a BTreeMap<String, String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ArtifactBody<'a> {
    storage_type: &'static str,
    name: &'a str,
    expires: Timestamp,
    content_type: &'a str,
}

impl<'a> TaskBody<'a> {
    fn new(status: &'a RawValue) -> TaskBody<'a> {
        TaskBody {
            version: 1,
            status,
            run_id: None,
            worker_group: None,
            worker_id: None,
            taken_until: None,
            task: None,
            old_priority: None,
            new_priority: None,
            artifact: None,
        }
    }

    fn with_run(mut self, run: Option<&'a Run>) -> TaskBody<'a> {
        if let Some(run) = run {
            self.run_id = Some(run.run_id);
            self.worker_group = run.worker_group.as_deref();
            self.worker_id = run.worker_id.as_deref();
        }
        self
    }
}

/// The messages of one transition of `task`, which is in the state the transition left it.
#[must_use]
pub fn task_messages(task: &Task, events: &[Event]) -> Vec<Message> {
    if events.is_empty() {
        return Vec::new();
    }
    // A transition's messages share its status: serialized once, not once per message.
    let status = status_json(task);
    let cc = topic::route_keys(&task.meta.routes);
    events
        .iter()
        // A group's priority change is told by the group's message alone.
        .filter(|event| !matches!(event, Event::PriorityChanged { with_group: true, .. }))
        .map(|event| {
            let run = event.run_id().and_then(|run_id| task.runs().get(run_id as usize));
            let with_run = TaskBody { task: Some(tags_of(task)), ..TaskBody::new(&status).with_run(run) };
            let (exchange, body, key_run) = match *event {
                Event::Defined => {
                    (Exchange::TaskDefined, TaskBody { task: Some(tags_of(task)), ..TaskBody::new(&status) }, None)
                }
                Event::Pending { .. } => (Exchange::TaskPending, with_run, run),
                Event::Running { .. } => (
                    Exchange::TaskRunning,
                    TaskBody { taken_until: run.and_then(|run| run.taken_until), ..with_run },
                    run,
                ),
                Event::Completed { .. } => (Exchange::TaskCompleted, with_run, run),
                Event::Failed { .. } => (Exchange::TaskFailed, with_run, run),
                Event::Exception { .. } => (Exchange::TaskException, with_run, run),
                // About the task, not a run: the routing key's run and worker words are `_`.
                Event::PriorityChanged { old, new, .. } => (
                    Exchange::TaskPriorityChanged,
                    TaskBody { old_priority: Some(old), new_priority: Some(new), ..TaskBody::new(&status) },
                    None,
                ),
            };
            Message {
                exchange,
                routing_key: task_key(task, key_run).routing_key(),
                cc: cc.clone(),
                body: encode(&body),
            }
        })
        .collect()
}

fn tags_of(task: &Task) -> PulseTask<'_> {
    PulseTask { tags: &task.meta.tags }
}

/// artifact-created for `artifact` of run `run_id` of `task`; none for an `s3` artifact, as
/// Taskcluster sends none (its exchange schema has no `s3`).
#[must_use]
pub fn artifact_created(task: &Task, run_id: u32, artifact: &Artifact) -> Option<Message> {
    if artifact.kind.storage_type() == "s3" {
        return None;
    }
    let status = status_json(task);
    let run = task.runs().get(run_id as usize);
    let body = TaskBody {
        artifact: Some(ArtifactBody {
            storage_type: artifact.kind.storage_type(),
            name: &artifact.name,
            expires: artifact.expires,
            content_type: artifact.kind.content_type(),
        }),
        ..TaskBody::new(&status).with_run(run)
    };
    Some(Message {
        exchange: Exchange::ArtifactCreated,
        routing_key: task_key(task, run).routing_key(),
        cc: topic::route_keys(&task.meta.routes),
        body: encode(&body),
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GroupBody<'a> {
    version: u8,
    task_group_id: TaskId,
    scheduler_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sealed: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    new_priority: Option<Priority>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tasks_affected: Option<u64>,
}

fn group_message(exchange: Exchange, group: &TaskGroup, body: &GroupBody<'_>) -> Message {
    Message {
        exchange,
        routing_key: topic::group_routing_key(group.task_group_id, &group.scheduler_id),
        cc: Vec::new(),
        body: encode(body),
    }
}

fn group_body(group: &TaskGroup) -> GroupBody<'_> {
    GroupBody {
        version: 1,
        task_group_id: group.task_group_id,
        scheduler_id: &group.scheduler_id,
        expires: Some(group.expires),
        sealed: group.sealed,
        new_priority: None,
        tasks_affected: None,
    }
}

/// task-group-resolved: `group` has no unresolved task left.
#[must_use]
pub fn group_resolved(group: &TaskGroup) -> Message {
    group_message(Exchange::TaskGroupResolved, group, &group_body(group))
}

/// task-group-sealed: no task may join `group` any more.
#[must_use]
pub fn group_sealed(group: &TaskGroup) -> Message {
    group_message(Exchange::TaskGroupSealed, group, &group_body(group))
}

/// task-group-priority-changed: `tasks_affected` unresolved tasks of `group` now have `priority`.
#[must_use]
pub fn group_priority_changed(group: &TaskGroup, priority: Priority, tasks_affected: u64) -> Message {
    let body = GroupBody {
        expires: None,
        sealed: None,
        new_priority: Some(priority),
        tasks_affected: Some(tasks_affected),
        ..group_body(group)
    };
    group_message(Exchange::TaskGroupPriorityChanged, group, &body)
}

/// The body of the task-graph messages: seed 000's task-graph status structure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GraphStatus {
    /// The scheduler that took the graph.
    pub scheduler_id: String,
    /// The graph.
    pub task_graph_id: TaskId,
    /// Where the graph stands.
    pub state: GraphState,
    /// The graph's routing.
    pub routing: String,
}

/// A task-graph message: on the exchange of the graph's new state, with the routing key
/// `primary._._._._._._.<schedulerId>.<taskGraphId>.<routing>`, whose words 2 to 7 stand
/// where the queue's keys have the task and run, so one pattern can match both services'
/// messages about a graph (its tasks' task group is the graph's id).
#[must_use]
pub fn graph_message(status: &GraphStatus) -> Message {
    let exchange = match status.state {
        GraphState::Running => Exchange::TaskGraphRunning,
        GraphState::Blocked => Exchange::TaskGraphBlocked,
        GraphState::Finished => Exchange::TaskGraphFinished,
    };
    #[derive(Serialize)]
    struct Body<'a> {
        version: u8,
        status: &'a GraphStatus,
    }
    Message {
        exchange,
        routing_key: format!("primary._._._._._._.{}.{}.{}", status.scheduler_id, status.task_graph_id, status.routing),
        cc: Vec::new(),
        // Serializing plain strings and ids cannot fail.
        body: serde_json::to_string(&Body { version: 1, status }).unwrap_or_default(),
    }
}

fn task_key<'a>(task: &'a Task, run: Option<&'a Run>) -> TaskKey<'a> {
    TaskKey {
        task_id: task.task_id,
        run_id: run.map(|run| run.run_id),
        worker_group: run.and_then(|run| run.worker_group.as_deref()),
        worker_id: run.and_then(|run| run.worker_id.as_deref()),
        task_queue_id: &task.meta.task_queue_id,
        scheduler_id: &task.meta.scheduler_id,
        task_group_id: task.meta.task_group_id,
    }
}

fn status_json(task: &Task) -> Box<RawValue> {
    // As in `encode`: a status always serializes.
    serde_json::value::to_raw_value(&task.status()).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

fn encode(body: &impl Serialize) -> String {
    // Serializing these structs cannot fail: every field is a string, number or map of strings.
    serde_json::to_string(body).unwrap_or_else(|_| String::from("{}"))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::definition::TaskDefinitionInput;
    use crate::slice::Capacity;
    use crate::status::ReasonResolved;
    use crate::task::{Claimant, Resolution};

    fn at(secs: i64) -> Timestamp {
        Timestamp(1_790_000_000_000 + secs * 1000)
    }

    fn task(routes: &[&str]) -> Task {
        let input: TaskDefinitionInput = serde_json::from_value(json!({
            "taskQueueId": "proj/linux",
            "schedulerId": "sched",
            "taskGroupId": "fN1S_sG4TTu5SNmTb0Xd6A",
            "created": at(0),
            "deadline": at(3600),
            "routes": routes,
            "tags": {"kind": "build"},
            "payload": {},
            "metadata": {"name": "t", "description": "d", "owner": "o@example.com", "source": "https://example.com"}
        }))
        .unwrap();
        let task_id = TaskId::parse("dJ0Bhn5BQGuyTK2nR0iEmg").unwrap();
        Task::new(task_id, &input.validate(task_id, at(0)).unwrap())
    }

    fn body(message: &Message) -> Value {
        serde_json::from_str(&message.body).unwrap()
    }

    #[test]
    fn a_task_life_in_messages() {
        let mut task = task(&["index.project.build", "notify.email"]);
        let defined = task_messages(&task, &[Event::Defined]);
        assert_eq!(defined[0].exchange.name(), "exchange/taskcluster-queue/v1/task-defined");
        assert_eq!(
            defined[0].routing_key,
            "primary.dJ0Bhn5BQGuyTK2nR0iEmg._._._.proj.linux.sched.fN1S_sG4TTu5SNmTb0Xd6A._"
        );
        assert_eq!(defined[0].cc, vec!["route.index.project.build", "route.notify.email"]);
        let defined = body(&defined[0]);
        assert_eq!(defined["version"], 1);
        assert_eq!(defined["status"]["state"], "unscheduled");
        assert_eq!(defined["task"], json!({"tags": {"kind": "build"}}));
        assert!(defined.get("runId").is_none());

        let effects = task.schedule(at(1), &Capacity::Assumed).unwrap();
        let pending = &task_messages(&task, &effects.0)[0];
        assert_eq!(pending.exchange, Exchange::TaskPending);
        assert!(pending.routing_key.starts_with("primary.dJ0Bhn5BQGuyTK2nR0iEmg.0._._.proj.linux."));
        assert_eq!(body(pending)["runId"], 0);
        assert!(body(pending).get("workerId").is_none());

        let effects = task.claim(0, &Claimant::named("wg", "w1"), at(2), 1200).unwrap();
        let running = &task_messages(&task, &effects.0)[0];
        assert_eq!(running.exchange, Exchange::TaskRunning);
        assert!(running.routing_key.starts_with("primary.dJ0Bhn5BQGuyTK2nR0iEmg.0.wg.w1.proj.linux.sched."));
        let running = body(running);
        assert_eq!(running["workerGroup"], "wg");
        assert_eq!(running["workerId"], "w1");
        assert_eq!(running["takenUntil"], json!(at(1202)));
        assert_eq!(running["status"]["state"], "running");

        let effects = task.resolve(0, Resolution::Completed, at(3)).unwrap();
        let completed = &task_messages(&task, &effects.0)[0];
        assert_eq!(completed.exchange, Exchange::TaskCompleted);
        let completed = body(completed);
        assert_eq!(completed["status"]["state"], "completed");
        assert_eq!(completed["workerId"], "w1");
        assert!(completed.get("takenUntil").is_none());
        assert_eq!(completed["task"]["tags"]["kind"], "build");
    }

    #[test]
    fn only_resolutions_name_an_ended_run() {
        let mut task = task(&[]);
        let task_id = task.task_id;
        assert_eq!(task_messages(&task, &[Event::Defined])[0].ended_run(), None);
        let effects = task.schedule(at(1), &Capacity::Assumed).unwrap();
        assert_eq!(task_messages(&task, &effects.0)[0].ended_run(), None, "pending");
        let effects = task.claim(0, &Claimant::named("wg", "w1"), at(2), 1200).unwrap();
        assert_eq!(task_messages(&task, &effects.0)[0].ended_run(), None, "running");
        let effects = task.resolve(0, Resolution::Failed, at(3)).unwrap();
        assert_eq!(task_messages(&task, &effects.0)[0].ended_run(), Some((task_id, 0)));
        let effects = task.rerun(at(4)).unwrap();
        assert!(task_messages(&task, &effects.0).iter().all(|message| message.ended_run().is_none()), "rerun");
        let _ = task.claim(1, &Claimant::named("wg", "w1"), at(5), 1200).unwrap();
        let effects = task.exceed_deadline(at(3601)).unwrap();
        assert_eq!(task_messages(&task, &effects.0)[0].ended_run(), Some((task_id, 1)), "deadline");
    }

    #[test]
    fn a_deadline_on_a_pending_run_has_a_run_but_no_worker() {
        let mut task = task(&[]);
        let _ = task.schedule(at(1), &Capacity::Assumed).unwrap();
        let effects = task.exceed_deadline(at(3601)).unwrap();
        let exception = &task_messages(&task, &effects.0)[0];
        assert_eq!(exception.exchange, Exchange::TaskException);
        assert!(exception.routing_key.starts_with("primary.dJ0Bhn5BQGuyTK2nR0iEmg.0._._.proj.linux."));
        assert!(exception.cc.is_empty());
        let exception = body(exception);
        assert_eq!(exception["runId"], 0);
        assert!(exception.get("workerGroup").is_none());
        assert_eq!(exception["status"]["runs"][0]["reasonResolved"], "deadline-exceeded");
    }

    #[test]
    fn a_retried_exception_is_two_messages_with_the_final_status() {
        let mut task = task(&[]);
        let _ = task.schedule(at(1), &Capacity::Assumed).unwrap();
        let _ = task.claim(0, &Claimant::named("wg", "w1"), at(2), 1200).unwrap();
        let effects = task.resolve(0, Resolution::Exception(ReasonResolved::WorkerShutdown), at(3)).unwrap();
        let messages = task_messages(&task, &effects.0);
        let exchanges: Vec<_> = messages.iter().map(|message| message.exchange).collect();
        assert_eq!(exchanges, vec![Exchange::TaskException, Exchange::TaskPending]);
        assert!(messages[0].routing_key.contains(".0.wg.w1."));
        assert!(messages[1].routing_key.contains(".1._._."));
        assert_eq!(body(&messages[0])["status"]["state"], "pending");
    }

    #[test]
    fn priority_and_group_messages() {
        let mut task = task(&[]);
        let effects = task.change_priority(Priority::parse("priority", &json!("high")).unwrap(), at(1)).unwrap();
        let changed = body(&task_messages(&task, &effects.0)[0]);
        assert_eq!(changed["oldPriority"], "lowest");
        assert_eq!(changed["newPriority"], "high");

        let group = TaskGroup {
            task_group_id: task.meta.task_group_id,
            scheduler_id: "sched".into(),
            expires: at(7200),
            sealed: Some(at(5)),
        };
        let resolved = group_resolved(&group);
        assert_eq!(resolved.exchange.name(), "exchange/taskcluster-queue/v1/task-group-resolved");
        assert_eq!(resolved.routing_key, "primary.fN1S_sG4TTu5SNmTb0Xd6A.sched._");
        assert_eq!(
            body(&resolved),
            json!({"version": 1, "taskGroupId": "fN1S_sG4TTu5SNmTb0Xd6A", "schedulerId": "sched",
                   "expires": at(7200), "sealed": at(5)})
        );
        assert_eq!(group_sealed(&group).exchange, Exchange::TaskGroupSealed);
        let priority = body(&group_priority_changed(&group, Priority::parse("priority", &json!("low")).unwrap(), 3));
        assert_eq!(priority["newPriority"], "low");
        assert_eq!(priority["tasksAffected"], 3);
        assert!(priority.get("expires").is_none());
    }

    #[test]
    fn exchanges_parse_by_full_or_short_name() {
        for exchange in Exchange::ALL {
            let prefix = if exchange.short_name().starts_with("task-graph-") {
                SCHEDULER_EXCHANGE_PREFIX
            } else {
                EXCHANGE_PREFIX
            };
            assert_eq!(exchange.name(), format!("{prefix}{}", exchange.short_name()));
            assert_eq!(Exchange::parse(exchange.name()), Some(exchange));
            assert_eq!(Exchange::parse(exchange.short_name()), Some(exchange));
        }
        assert_eq!(Exchange::parse("exchange/taskcluster-queue/v1/nope"), None);
        assert_eq!(Exchange::parse("exchange/taskcluster-queue/v1/task-graph-blocked"), None, "wrong service");
    }

    #[test]
    fn graph_messages_go_by_state_with_the_scheduler_routing_key() {
        let mut status = GraphStatus {
            scheduler_id: "task-graph-scheduler".into(),
            task_graph_id: TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6A").unwrap(),
            state: GraphState::Running,
            routing: "try.linux".into(),
        };
        let running = graph_message(&status);
        assert_eq!(running.exchange, Exchange::TaskGraphRunning);
        assert_eq!(running.routing_key, "primary._._._._._._.task-graph-scheduler.fN1S_sG4TTu5SNmTb0Xd6A.try.linux");
        assert_eq!(
            body(&running),
            json!({"version": 1, "status": {"schedulerId": "task-graph-scheduler",
                "taskGraphId": "fN1S_sG4TTu5SNmTb0Xd6A", "state": "running", "routing": "try.linux"}})
        );
        status.state = GraphState::Blocked;
        assert_eq!(graph_message(&status).exchange, Exchange::TaskGraphBlocked);
        status.state = GraphState::Finished;
        assert_eq!(graph_message(&status).exchange, Exchange::TaskGraphFinished);
    }
}
