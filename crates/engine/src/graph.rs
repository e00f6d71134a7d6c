//! Task graphs (seed 000): labelled tasks submitted together, `requires` between labels,
//! `{"$subs": "taskId:<label>"}` placeholders replaced by the label's taskId, reruns, and the
//! state of the whole graph. A graph's tasks are queue tasks in the task group named by the
//! graph's id; the queue's own dependencies schedule each task when its requirements complete.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Deserialize;
use serde::de::{MapAccess, Visitor};
use serde_json::Value;

use crate::definition::{TaskDefinition, TaskDefinitionInput};
use crate::{Rejection, TaskId, Timestamp};

mod progress;
mod subs;

pub use progress::{GraphState, NodeProgress, Reaction, Tally, react};
pub use subs::check_submission;
use subs::{check_placeholders, substitute_payloads};

/// The scheduler id graph tasks carry unless configured otherwise (Taskcluster's).
pub const DEFAULT_SCHEDULER_ID: &str = "task-graph-scheduler";
/// Longest `routing` (seed 000: "limit 10 chars").
pub const MAX_ROUTING_LEN: usize = 10;
/// Most tasks one submission (or extension) may hold.
pub const MAX_TASKS: usize = 20_000;
/// Most reruns a task may ask for (the queue keeps at most 50 runs of a task).
pub const MAX_RERUNS: u32 = 49;
/// Longest label, in bytes.
pub const MAX_LABEL_LEN: usize = 255;

/// A graph as submitted: `PUT /task-graph/<taskGraphId>`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphInput {
    /// Routing words appended to every message about the graph and its tasks.
    pub routing: String,
    /// The tasks, by label.
    pub tasks: Labelled,
    /// What the graph is, for people (optional; `/info` shows it).
    #[serde(default)]
    pub metadata: Option<GraphMetadata>,
    /// Free-form string tags (optional; `/info` shows them).
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// A graph's description, as Taskcluster's scheduler took it.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GraphMetadata {
    /// Short name.
    #[serde(default)]
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// Who is responsible for it.
    #[serde(default)]
    pub owner: String,
    /// Where it came from.
    #[serde(default)]
    pub source: String,
}

/// Tasks added to a running graph: `POST /task-graph/<taskGraphId>/extend`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtensionInput {
    /// The new tasks, by label; they may require labels already in the graph.
    pub tasks: Labelled,
}

/// One labelled task as submitted.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeInput {
    /// Labels that must complete before this task is scheduled.
    #[serde(default)]
    pub requires: Vec<String>,
    /// Times the task is run again after it fails before the graph is blocked.
    #[serde(default)]
    pub reruns: u32,
    /// The queue task definition, with `$subs` placeholders.
    pub task: Value,
}

/// Tasks by label in submission order; a label given twice is refused while parsing.
#[derive(Debug, Clone, Default)]
pub struct Labelled(pub Vec<(String, NodeInput)>);

impl<'de> Deserialize<'de> for Labelled {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Labelled, D::Error> {
        struct LabelledVisitor;
        impl<'de> Visitor<'de> for LabelledVisitor {
            type Value = Labelled;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of tasks keyed by label")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Labelled, A::Error> {
                let mut seen = BTreeSet::new();
                let mut nodes = Vec::new();
                while let Some(label) = map.next_key::<String>()? {
                    if !seen.insert(label.clone()) {
                        return Err(serde::de::Error::custom(format!("duplicate label `{label}`")));
                    }
                    nodes.push((label, map.next_value()?));
                }
                Ok(Labelled(nodes))
            }
        }
        deserializer.deserialize_map(LabelledVisitor)
    }
}

/// A task of the graph, ready to be created on the queue.
#[derive(Debug, Clone)]
pub struct PlannedTask {
    /// Its label.
    pub label: String,
    /// The taskId given to the label.
    pub task_id: TaskId,
    /// Labels it requires.
    pub requires: Vec<String>,
    /// Reruns it may have.
    pub reruns: u32,
    /// The checked queue definition: placeholders replaced, group, scheduler, dependencies
    /// and routes set.
    pub definition: TaskDefinition,
}

/// Where the graph's tasks go and how they are routed.
#[derive(Debug, Clone, Copy)]
pub struct GraphContext<'a> {
    /// The graph's id: also its tasks' task group.
    pub task_graph_id: TaskId,
    /// The scheduler's id, set on every task (`task-graph-scheduler` by default).
    pub scheduler_id: &'a str,
    /// The graph's routing.
    pub routing: &'a str,
    /// Now, for the queue's definition checks.
    pub now: Timestamp,
    /// The authenticated client submitting the tasks, recorded as each one's creator.
    pub created_by: Option<&'a str>,
}

/// Checks a graph's `routing`: 1 to 10 characters, words of `[a-zA-Z0-9-_]` between dots.
///
/// # Errors
/// Invalid naming `routing` and the rule.
pub fn check_routing(routing: &str) -> Result<(), Rejection> {
    let words_ok = routing
        .split('.')
        .all(|word| !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    if routing.is_empty() || routing.len() > MAX_ROUTING_LEN || !words_ok {
        return Err(Rejection::invalid(
            "routing",
            format!("must be 1 to {MAX_ROUTING_LEN} characters: words of [a-zA-Z0-9-_] separated by dots"),
        ));
    }
    Ok(())
}

/// Turns submitted tasks into queue tasks in creation order (each after those it requires).
/// `existing` holds the labels already in the graph (when extending); `new_id` gives each
/// new label its taskId.
///
/// # Errors
/// Invalid or Input naming the problem: an empty submission, a label already in the graph,
/// a bad label, an unknown label in `requires` or in a `$subs`, a cycle, or a task definition
/// the queue would refuse (its field path under `tasks.<label>.task`).
pub fn plan(
    context: GraphContext<'_>,
    tasks: Labelled,
    existing: &BTreeMap<String, TaskId>,
    mut new_id: impl FnMut() -> TaskId,
) -> Result<Vec<PlannedTask>, Rejection> {
    if tasks.0.is_empty() {
        return Err(Rejection::invalid("tasks", "must hold at least one task"));
    }
    if tasks.0.len() > MAX_TASKS {
        return Err(Rejection::invalid("tasks", format!("must hold at most {MAX_TASKS} tasks")));
    }
    let mut ids: HashMap<String, TaskId> = existing.iter().map(|(label, id)| (label.clone(), *id)).collect();
    for (label, node) in &tasks.0 {
        check_label(label)?;
        if existing.contains_key(label) {
            return Err(Rejection::invalid(format!("tasks.{label}"), "duplicate label: already in the graph"));
        }
        if node.reruns > MAX_RERUNS {
            return Err(Rejection::invalid(format!("tasks.{label}.reruns"), format!("must be at most {MAX_RERUNS}")));
        }
        ids.insert(label.clone(), new_id());
    }
    for (label, node) in &tasks.0 {
        if let Some(unknown) = node.requires.iter().find(|required| !ids.contains_key(*required)) {
            return Err(Rejection::invalid(format!("tasks.{label}.requires"), format!("unknown label `{unknown}`")));
        }
    }
    let order = creation_order(&tasks)?;
    let mut nodes: Vec<Option<(String, NodeInput)>> = tasks.0.into_iter().map(Some).collect();
    let mut planned = Vec::with_capacity(nodes.len());
    for index in order {
        let (label, node) = nodes[index].take().expect("each index once");
        let task_id = ids[&label];
        let definition = queue_definition(context, &label, task_id, &node, &ids)?;
        let mut requires = node.requires;
        requires.sort_unstable();
        requires.dedup();
        planned.push(PlannedTask { label, task_id, requires, reruns: node.reruns, definition });
    }
    Ok(planned)
}

fn check_label(label: &str) -> Result<(), Rejection> {
    if label.is_empty() || label.len() > MAX_LABEL_LEN || label.chars().any(char::is_control) {
        return Err(Rejection::invalid(
            format!("tasks.{label}"),
            format!("labels must be 1 to {MAX_LABEL_LEN} bytes without control characters"),
        ));
    }
    Ok(())
}

/// Indexes of the new tasks, each after the new tasks it requires (Kahn's algorithm).
fn creation_order(tasks: &Labelled) -> Result<Vec<usize>, Rejection> {
    let index: HashMap<&str, usize> = tasks.0.iter().enumerate().map(|(i, (label, _))| (label.as_str(), i)).collect();
    let mut waiting_on = vec![0usize; tasks.0.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); tasks.0.len()];
    for (i, (_, node)) in tasks.0.iter().enumerate() {
        let required: BTreeSet<&str> = node.requires.iter().map(String::as_str).collect();
        for label in required {
            // Labels already in the graph are created; only new ones order the creation.
            if let Some(&j) = index.get(label) {
                waiting_on[i] += 1;
                dependents[j].push(i);
            }
        }
    }
    let mut ready: Vec<usize> = (0..tasks.0.len()).filter(|&i| waiting_on[i] == 0).rev().collect();
    let mut order = Vec::with_capacity(tasks.0.len());
    while let Some(i) = ready.pop() {
        order.push(i);
        for &dependent in &dependents[i] {
            waiting_on[dependent] -= 1;
            if waiting_on[dependent] == 0 {
                ready.push(dependent);
            }
        }
    }
    if order.len() < tasks.0.len() {
        let cycle = find_cycle(tasks, &index, &waiting_on);
        return Err(Rejection::invalid("tasks", format!("requires form a cycle: {}", cycle.join(" -> "))));
    }
    Ok(order)
}

/// A cycle among the tasks Kahn's algorithm could not order, as labels (first = last).
fn find_cycle(tasks: &Labelled, index: &HashMap<&str, usize>, waiting_on: &[usize]) -> Vec<String> {
    // Every unordered task requires another unordered one: walking those links must repeat.
    let start = waiting_on.iter().position(|&n| n > 0).unwrap_or(0);
    let mut path = vec![start];
    let mut seen = HashMap::from([(start, 0usize)]);
    let mut at = start;
    loop {
        let next = tasks.0[at]
            .1
            .requires
            .iter()
            .filter_map(|label| index.get(label.as_str()).copied())
            .find(|&j| waiting_on[j] > 0);
        let Some(next) = next else { break };
        if let Some(&from) = seen.get(&next) {
            let mut cycle: Vec<String> = path[from..].iter().map(|&i| tasks.0[i].0.clone()).collect();
            cycle.push(tasks.0[next].0.clone());
            return cycle;
        }
        seen.insert(next, path.len());
        path.push(next);
        at = next;
    }
    path.iter().map(|&i| tasks.0[i].0.clone()).collect()
}

/// The queue definition of one task: placeholders replaced, the graph's group, scheduler,
/// dependencies and routing applied, then checked by the queue's rules.
fn queue_definition(
    context: GraphContext<'_>,
    label: &str,
    task_id: TaskId,
    node: &NodeInput,
    ids: &HashMap<String, TaskId>,
) -> Result<TaskDefinition, Rejection> {
    let field = |name: &str| format!("tasks.{label}.task{}{name}", if name.is_empty() { "" } else { "." });
    check_placeholders(label, &node.task)?;
    let mut task = node.task.clone();
    let Value::Object(object) = &mut task else {
        return Err(Rejection::invalid(field(""), "must be a task definition object"));
    };
    substitute_payloads(object, ids, field)?;
    let group = context.task_graph_id.to_string();
    for (key, wanted) in [("taskGroupId", group.as_str()), ("schedulerId", context.scheduler_id)] {
        match object.get(key) {
            None => {
                object.insert(key.to_owned(), Value::from(wanted));
            }
            Some(Value::String(given)) if given == wanted => {}
            Some(_) => return Err(Rejection::invalid(field(key), format!("must be `{wanted}` or absent"))),
        }
    }
    let mut dependencies: Vec<Value> = match object.remove("dependencies") {
        None => Vec::new(),
        Some(Value::Array(given)) => given,
        Some(_) => return Err(Rejection::invalid(field("dependencies"), "must be an array of taskIds")),
    };
    for required in &node.requires {
        let id = Value::from(ids[required].to_string());
        if !dependencies.contains(&id) {
            dependencies.push(id);
        }
    }
    object.insert("dependencies".to_owned(), Value::Array(dependencies));
    // Every message about the task carries the graph's routing: each route is prefixed, and a
    // task without routes gets the prefix as its one route.
    let prefix = format!("{}.{}.{}", context.scheduler_id, context.task_graph_id, context.routing);
    let routes = match object.remove("routes") {
        None => vec![Value::from(prefix)],
        Some(Value::Array(routes)) if routes.is_empty() => vec![Value::from(prefix)],
        Some(Value::Array(routes)) => routes
            .into_iter()
            .map(|route| match route {
                Value::String(route) => Ok(Value::from(format!("{prefix}.{route}"))),
                _ => Err(Rejection::invalid(field("routes"), "must be an array of strings")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(Rejection::invalid(field("routes"), "must be an array of strings")),
    };
    object.insert("routes".to_owned(), Value::Array(routes));
    // The graph keeps each submitted node for its inspector: secrets would show there.
    if object.contains_key("secrets") {
        return Err(Rejection::invalid(
            field("secrets"),
            "is not accepted in a task graph (the graph keeps what was submitted); create the task with createTask",
        ));
    }
    let input: TaskDefinitionInput = serde_path_to_error::deserialize(task).map_err(|err| {
        let path = err.path().to_string();
        let at = if path == "." { field("") } else { field(&path) };
        Rejection::invalid(at, err.into_inner().to_string())
    })?;
    let mut definition = input.validate(task_id, context.now).map_err(|rejection| match rejection {
        Rejection::Invalid { field: inner, rule } => Rejection::invalid(field(&inner), rule),
        other => other,
    })?;
    definition.created_by = context.created_by.map(str::to_owned);
    Ok(definition)
}

/// Checks that every dependency of the planned tasks exists and outlives the task's deadline
/// (the queue's rule), before anything is written: `stored` gives a stored task's expiry.
///
/// # Errors
/// Invalid naming `tasks.<label>.task.dependencies` (or `.requires`) and the offending ids.
pub fn check_dependencies(
    planned: &[PlannedTask],
    mut stored: impl FnMut(TaskId) -> Option<Timestamp>,
) -> Result<(), Rejection> {
    let new: HashMap<TaskId, Timestamp> = planned.iter().map(|task| (task.task_id, task.definition.expires)).collect();
    for task in planned {
        let (mut missing, mut expiring) = (Vec::new(), Vec::new());
        for &required in &task.definition.dependencies {
            match new.get(&required).copied().or_else(|| stored(required)) {
                None => missing.push(required.to_string()),
                Some(expires) if expires < task.definition.deadline => expiring.push(required.to_string()),
                Some(_) => {}
            }
        }
        if let Some(rejection) = crate::group::dependency_rejection(&missing, &expiring) {
            return Err(Rejection::invalid(format!("tasks.{}.task.dependencies", task.label), rejection.to_string()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::slice::Capacity;
    use crate::status::TaskState;
    use crate::task::{Claimant, Task};

    const GRAPH_ID: &str = "fN1S_sG4TTu5SNmTb0Xd6A";

    fn context() -> GraphContext<'static> {
        GraphContext {
            task_graph_id: TaskId::parse(GRAPH_ID).unwrap(),
            scheduler_id: "task-graph-scheduler",
            routing: "try.linux",
            now: Timestamp::parse("2026-01-01T00:00:00.000Z").unwrap(),
            created_by: Some("submitter"),
        }
    }

    fn task(extra: Value) -> Value {
        let mut base = json!({
            "taskQueueId": "proj/linux",
            "created": "2026-01-01T00:00:00.000Z",
            "deadline": "2026-01-01T01:00:00.000Z",
            "payload": {},
            "metadata": {"name": "t", "description": "d", "owner": "o@example.com", "source": "https://example.com"}
        });
        for (key, value) in extra.as_object().unwrap() {
            base[key] = value.clone();
        }
        base
    }

    fn ids() -> impl FnMut() -> TaskId {
        let mut n = 0u32;
        move || {
            n += 1;
            TaskId::parse(&format!("{n:08}QxCxxxxxxxxxxA")).unwrap()
        }
    }

    fn parse(tasks: Value) -> Labelled {
        serde_json::from_value(tasks).unwrap()
    }

    fn plan_of(tasks: Value) -> Result<Vec<PlannedTask>, Rejection> {
        plan(context(), parse(tasks), &BTreeMap::new(), ids())
    }

    fn field_of(result: Result<Vec<PlannedTask>, Rejection>) -> (String, String) {
        match result {
            Err(Rejection::Invalid { field, rule }) => (field, rule),
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn a_diamond_is_created_in_dependency_order_with_its_ids_substituted() {
        let planned = plan_of(json!({
            "test": {"requires": ["build-a", "build-b"], "reruns": 2,
                     "task": task(json!({"payload": {"env": {"A": {"$subs": "taskId:build-a"}},
                                                      "fetch": [{"$subs": "taskId:build-b"}]}}))},
            "build-a": {"requires": ["decision"], "task": task(json!({}))},
            "build-b": {"requires": ["decision"], "task": task(json!({"routes": ["index.b"]}))},
            "decision": {"task": task(json!({}))}
        }))
        .unwrap();
        let labels: Vec<&str> = planned.iter().map(|task| task.label.as_str()).collect();
        assert_eq!(labels[0], "decision");
        assert_eq!(labels[3], "test");
        let id_of = |label: &str| planned.iter().find(|task| task.label == label).unwrap().task_id;
        let test = &planned[3];
        assert_eq!(test.reruns, 2);
        assert_eq!(test.definition.payload["env"]["A"], json!(id_of("build-a").to_string()));
        assert_eq!(test.definition.payload["fetch"][0], json!(id_of("build-b").to_string()));
        let mut dependencies = test.definition.dependencies.clone();
        dependencies.sort_unstable();
        let mut wanted = vec![id_of("build-a"), id_of("build-b")];
        wanted.sort_unstable();
        assert_eq!(dependencies, wanted);
        assert_eq!(test.definition.task_group_id.to_string(), GRAPH_ID);
        assert_eq!(test.definition.scheduler_id, "task-graph-scheduler");
        let prefix = format!("task-graph-scheduler.{GRAPH_ID}.try.linux");
        assert_eq!(test.definition.routes, vec![prefix.clone()]);
        let b = planned.iter().find(|task| task.label == "build-b").unwrap();
        assert_eq!(b.definition.routes, vec![format!("{prefix}.index.b")]);
    }

    #[test]
    fn bad_graphs_are_refused_naming_the_problem() {
        let cycle = field_of(plan_of(json!({
            "a": {"requires": ["c"], "task": task(json!({}))},
            "b": {"requires": ["a"], "task": task(json!({}))},
            "c": {"requires": ["b"], "task": task(json!({}))},
            "d": {"task": task(json!({}))}
        })));
        assert_eq!(cycle.0, "tasks");
        assert!(cycle.1.starts_with("requires form a cycle: "), "{}", cycle.1);
        for label in ["a", "b", "c"] {
            assert!(cycle.1.contains(label), "{}", cycle.1);
        }
        assert!(!cycle.1.contains('d'), "{}", cycle.1);
        let own = field_of(plan_of(json!({"a": {"requires": ["a"], "task": task(json!({}))}})));
        assert_eq!(own, ("tasks".to_owned(), "requires form a cycle: a -> a".to_owned()));

        let unknown = field_of(plan_of(json!({"a": {"requires": ["nope"], "task": task(json!({}))}})));
        assert_eq!(unknown, ("tasks.a.requires".to_owned(), "unknown label `nope`".to_owned()));

        let subs =
            field_of(plan_of(json!({"a": {"task": task(json!({"payload": {"x": [1, {"$subs": "taskId:gone"}]}}))}})));
        assert_eq!(subs, ("tasks.a.task.payload.x[1].$subs".to_owned(), "unknown label `gone`".to_owned()));
        let bad_subs = field_of(plan_of(json!({"a": {"task": task(json!({"payload": {"$subs": "label:a"}}))}})));
        assert_eq!(bad_subs.0, "tasks.a.task.payload.$subs");

        for (outside, at) in [
            (json!({"scopes": [{"$subs": "taskId:a"}]}), "tasks.a.task.scopes[0].$subs"),
            (json!({"routes": ["x", {"$subs": "taskId:a"}]}), "tasks.a.task.routes[1].$subs"),
            (json!({"projectId": {"$subs": "taskId:a"}}), "tasks.a.task.projectId.$subs"),
            (json!({"dependencies": [{"$subs": "taskId:a"}]}), "tasks.a.task.dependencies[0].$subs"),
            (json!({"tags": {"k": {"$subs": "taskId:a", "x": 1}}}), "tasks.a.task.tags.k.$subs"),
            (
                json!({"slices": [{"expiresAfter": 5, "dimensions": {"os": [{"$subs": "taskId:a"}]}}]}),
                "tasks.a.task.slices[0].dimensions.os[0].$subs",
            ),
        ] {
            let tasks = json!({"a": {"task": task(outside)}});
            assert_eq!(field_of(plan_of(tasks.clone())).0, at);
            let rejection = check_submission(&parse(tasks)).unwrap_err();
            assert!(matches!(&rejection, Rejection::Invalid { field, .. } if field == at), "{rejection:?}");
        }
        assert!(
            check_submission(&parse(json!({"a": {"task": task(json!({"payload": {"$subs": "taskId:a"}}))}}))).is_ok()
        );
        // A slice's own payload is a payload: substituted, as the task's.
        let on_linux =
            json!({"dimensions": {"os": ["Linux"]}, "expiresAfter": 5, "payload": {"on": {"$subs": "taskId:a"}}});
        let sliced = json!({"slices": [{"expiresAfter": 5}, on_linux]});
        let planned = plan_of(json!({"a": {"task": task(sliced)}})).unwrap();
        let id = planned[0].task_id.to_string();
        assert_eq!(planned[0].definition.slices[1].payload, Some(json!({"on": id})));

        let queue = field_of(plan_of(json!({"a": {"task": task(json!({"retries": 1000}))}})));
        assert_eq!(queue.0, "tasks.a.task.retries", "the queue's own rule, under the task's path");
        let group = field_of(plan_of(json!({"a": {"task": task(json!({"taskGroupId": "fN1S_sG4TTu5SNmTb0Xd6Q"}))}})));
        assert_eq!(group.0, "tasks.a.task.taskGroupId");
        let reruns = field_of(plan_of(json!({"a": {"reruns": 50, "task": task(json!({}))}})));
        assert_eq!(reruns.0, "tasks.a.reruns");
        assert_eq!(field_of(plan_of(json!({}))).0, "tasks");
        let secrets = field_of(plan_of(json!({"a": {"task": task(json!({"secrets": {"k": "v"}}))}})));
        assert_eq!(secrets.0, "tasks.a.task.secrets", "the graph would keep them: {}", secrets.1);

        let duplicate =
            serde_json::from_str::<GraphInput>(r#"{"routing": "r", "tasks": {"a": {"task": {}}, "a": {"task": {}}}}"#);
        assert!(duplicate.unwrap_err().to_string().contains("duplicate label `a`"));
    }

    #[test]
    fn an_extension_may_require_labels_already_in_the_graph_but_not_reuse_them() {
        let existing = BTreeMap::from([("build".to_owned(), TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6Q").unwrap())]);
        let planned = plan(
            context(),
            parse(json!({"test": {"requires": ["build"], "task": task(json!({"payload": {"b": {"$subs": "taskId:build"}}}))}})),
            &existing,
            ids(),
        )
        .unwrap();
        assert_eq!(planned[0].definition.dependencies, vec![existing["build"]]);
        assert_eq!(planned[0].definition.payload["b"], json!("fN1S_sG4TTu5SNmTb0Xd6Q"));
        let again = plan(context(), parse(json!({"build": {"task": task(json!({}))}})), &existing, ids());
        assert_eq!(field_of(again).0, "tasks.build");
    }

    #[test]
    fn routing_is_short_dotted_words() {
        assert!(check_routing("try.linux").is_ok());
        for bad in ["", "a..b", ".a", "much-too-long", "a b"] {
            assert!(matches!(check_routing(bad), Err(Rejection::Invalid { .. })), "{bad:?}");
        }
    }

    #[test]
    fn a_failure_is_rerun_while_reruns_last_then_blocks_until_run_again() {
        let planned = plan_of(json!({"flaky": {"reruns": 1, "task": task(json!({}))}})).unwrap();
        let now = context().now;
        let mut task = Task::new(planned[0].task_id, &planned[0].definition);
        let mut node = NodeProgress { reruns_left: 1, failed: false };
        let mut tally = Tally { open: 1, failed: 0 };
        let fail = |task: &mut Task, node: &mut NodeProgress, tally: &mut Tally| {
            let run_id = task.runs().last().unwrap().run_id;
            let _ = task.claim(run_id, &Claimant::named("g", "w"), now, 60).unwrap();
            let was = task.state();
            let _ = task.resolve(run_id, crate::task::Resolution::Failed, now).unwrap();
            react(task, was, node, tally, now)
        };
        let _ = task.schedule(now, &Capacity::Assumed).unwrap();
        assert_eq!(fail(&mut task, &mut node, &mut tally), Reaction::Rerun);
        assert_eq!((node.reruns_left, tally.state()), (0, GraphState::Running));
        let _ = task.rerun(now).unwrap();
        assert_eq!(fail(&mut task, &mut node, &mut tally), Reaction::Count);
        assert!(node.failed);
        assert_eq!(tally, Tally { open: 1, failed: 1 });
        assert_eq!(tally.state(), GraphState::Blocked);
        // Someone runs it again by hand, and it completes: the graph is running, then finished.
        let _ = task.rerun(now).unwrap();
        assert_eq!(react(&task, TaskState::Failed, &mut node, &mut tally, now), Reaction::Count);
        assert_eq!(tally.state(), GraphState::Running);
        let run_id = task.runs().last().unwrap().run_id;
        let _ = task.claim(run_id, &Claimant::named("g", "w"), now, 60).unwrap();
        let _ = task.resolve(run_id, crate::task::Resolution::Completed, now).unwrap();
        assert_eq!(react(&task, TaskState::Running, &mut node, &mut tally, now), Reaction::Count);
        assert_eq!(tally.state(), GraphState::Finished);
        // A completed task run again reopens the graph.
        let _ = task.rerun(now).unwrap();
        assert_eq!(react(&task, TaskState::Completed, &mut node, &mut tally, now), Reaction::Count);
        assert_eq!(tally, Tally { open: 1, failed: 0 });
    }

    #[test]
    fn a_canceled_task_is_not_rerun() {
        let planned = plan_of(json!({"t": {"reruns": 3, "task": task(json!({}))}})).unwrap();
        let now = context().now;
        let mut task = Task::new(planned[0].task_id, &planned[0].definition);
        let _ = task.schedule(now, &Capacity::Assumed).unwrap();
        let _ = task.cancel(now).unwrap();
        let mut node = NodeProgress { reruns_left: 3, failed: false };
        let mut tally = Tally { open: 1, failed: 0 };
        assert_eq!(react(&task, TaskState::Pending, &mut node, &mut tally, now), Reaction::Count);
        assert_eq!((node.reruns_left, tally.state()), (3, GraphState::Blocked));
    }

    #[test]
    fn dependencies_must_exist_and_outlive_the_deadline() {
        let planned = plan_of(json!({
            "a": {"task": task(json!({"deadline": "2026-01-01T00:30:00.000Z", "expires": "2026-01-01T00:40:00.000Z"}))},
            "b": {"requires": ["a"], "task": task(json!({}))},
        }));
        // `a` expires before `b`'s deadline: refused, naming b.
        let planned = planned.unwrap();
        let (field, rule) = field_of(check_dependencies(&planned, |_| None).map(|()| Vec::new()));
        assert_eq!(field, "tasks.b.task.dependencies");
        assert!(rule.contains("expiringTaskDependencies"), "{rule}");
        let outside = TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6Q").unwrap();
        let planned = plan_of(json!({"c": {"task": task(json!({"dependencies": [outside.to_string()]}))}})).unwrap();
        let (field, rule) = field_of(check_dependencies(&planned, |_| None).map(|()| Vec::new()));
        assert_eq!(field, "tasks.c.task.dependencies");
        assert!(rule.contains("missingTaskDependencies"), "{rule}");
        let far = Timestamp::parse("2027-01-01T00:00:00.000Z").unwrap();
        assert!(check_dependencies(&planned, |id| (id == outside).then_some(far)).is_ok());
    }
}
