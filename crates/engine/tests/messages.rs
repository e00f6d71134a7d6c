//! Every message body on the wire, one of each exchange, held to a reviewed snapshot: a
//! renamed or dropped field shows as a diff to accept (`cargo insta review`) or fix.

use serde_json::{Value, json};
use shoal_engine::artifact::{Artifact, ArtifactKind};
use shoal_engine::definition::TaskDefinitionInput;
use shoal_engine::event::Effects;
use shoal_engine::graph::GraphState;
use shoal_engine::group::TaskGroup;
use shoal_engine::message::{
    Exchange, GraphStatus, Message, artifact_created, graph_message, group_priority_changed, group_resolved,
    group_sealed, task_messages,
};
use shoal_engine::priority::Priority;
use shoal_engine::slice::Capacity;
use shoal_engine::status::WorkerException;
use shoal_engine::task::{Claimant, Resolution, Task};
use shoal_engine::{Rejection, TaskId, Timestamp};

fn at(secs: i64) -> Timestamp {
    Timestamp(1_790_000_000_000 + secs * 1000)
}

fn task(n: u8) -> Task {
    let input: TaskDefinitionInput = serde_json::from_value(json!({
        "taskQueueId": "proj/linux",
        "schedulerId": "sched",
        "taskGroupId": "fN1S_sG4TTu5SNmTb0Xd6A",
        "created": at(0),
        "deadline": at(3600),
        "retries": 0,
        "routes": ["index.project.build"],
        "tags": {"kind": "build"},
        "payload": {},
        "metadata": {"name": "t", "description": "d", "owner": "o@example.com", "source": "https://example.com"}
    }))
    .expect("input");
    let task_id = TaskId::parse(&format!("dJ0Bhn5BQGuyTK2nR0iE{}g", char::from(b'A' + n))).expect("id");
    Task::new(task_id, &input.validate(task_id, at(0)).expect("valid"))
}

/// The messages of one transition of `task`.
fn step(task: &mut Task, transition: impl FnOnce(&mut Task) -> Result<Effects, Rejection>) -> Vec<Message> {
    let effects = transition(task).expect("the transition is allowed");
    task_messages(task, &effects.0)
}

fn shown(message: &Message) -> Value {
    json!({
        "exchange": message.exchange.name(),
        "routingKey": message.routing_key,
        "cc": message.cc,
        "body": serde_json::from_str::<Value>(&message.body).expect("JSON body"),
    })
}

#[test]
fn every_exchange_body_as_sent() {
    let mut messages = Vec::new();
    let mut life = task(0);
    messages.extend(task_messages(&life, &[shoal_engine::event::Event::Defined]));
    messages.extend(step(&mut life, |t| t.schedule(at(1), &Capacity::Assumed)));
    messages.extend(step(&mut life, |t| t.claim(0, &Claimant::named("wg", "w1"), at(2), 1200)));
    let blob = Artifact {
        name: "public/build.tar.gz".into(),
        kind: ArtifactKind::Blob { content_type: "application/gzip".into(), content_length: Some(3) },
        present: true,
        bytes: None,
        object: None,
        expires: at(7200),
    };
    assert!(artifact_created(&life, 0, &blob).is_none(), "no artifact-created for s3, as Taskcluster");
    let reference = Artifact {
        name: "public/build.log".into(),
        kind: ArtifactKind::Reference {
            url: "https://example.com/build.log".into(),
            content_type: "text/plain".into(),
        },
        present: true,
        bytes: None,
        object: None,
        expires: at(7200),
    };
    messages.extend(artifact_created(&life, 0, &reference));
    messages.extend(step(&mut life, |t| t.resolve(0, Resolution::Completed, at(3))));
    let mut failing = task(1);
    let _ = failing.schedule(at(1), &Capacity::Assumed).expect("schedule");
    let _ = failing.claim(0, &Claimant::named("wg", "w1"), at(2), 1200).expect("claim");
    messages.extend(step(&mut failing, |t| t.resolve(0, Resolution::Failed, at(3))));
    let mut broken = task(2);
    let _ = broken.schedule(at(1), &Capacity::Assumed).expect("schedule");
    let _ = broken.claim(0, &Claimant::named("wg", "w1"), at(2), 1200).expect("claim");
    let exception = Resolution::worker_exception(WorkerException::MalformedPayload);
    messages.extend(step(&mut broken, |t| t.resolve(0, exception, at(3))));
    let mut urgent = task(3);
    let high = Priority::parse("priority", &json!("high")).expect("priority");
    messages.extend(step(&mut urgent, |t| t.change_priority(high, at(1))));
    let group = TaskGroup {
        task_group_id: life.meta.task_group_id,
        scheduler_id: "sched".into(),
        expires: at(7200),
        sealed: Some(at(5)),
    };
    messages.push(group_resolved(&group));
    messages.push(group_sealed(&group));
    messages.push(group_priority_changed(&group, high, 3));
    for state in [GraphState::Running, GraphState::Blocked, GraphState::Finished] {
        let status = GraphStatus {
            scheduler_id: "task-graph-scheduler".into(),
            task_graph_id: life.meta.task_group_id,
            state,
            routing: "ci.push".into(),
        };
        messages.push(graph_message(&status));
    }
    let exchanges: std::collections::HashSet<Exchange> = messages.iter().map(|message| message.exchange).collect();
    assert_eq!((exchanges.len(), messages.len()), (Exchange::ALL.len(), Exchange::ALL.len()), "one of each exchange");
    let shown: Vec<Value> = messages.iter().map(shown).collect();
    insta::assert_json_snapshot!(shown);
}
