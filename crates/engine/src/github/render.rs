//! `.taskcluster.yml` (version 1) rendered for a change: JSON-e with Taskcluster's context,
//! then each task given the ids, group, `created` and schedulerId it leaves out, in an order
//! where a task comes after those of its dependencies made with it.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::{Change, SCHEDULER_ID, Slugids, TasksFor, context};
use crate::{TaskId, Timestamp};

/// The context variable `as_slugid("label")` calls are read from: the JSON-e crate has no
/// functions of a caller's, so each call with a literal label becomes a lookup in it.
const SLUGIDS: &str = "__as_slugid";

/// The tasks a change makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rendered {
    /// Each task's id and definition, dependencies first.
    pub tasks: Vec<(TaskId, Value)>,
    /// The route every task gets, as Taskcluster's GitHub service adds it for its reports (its
    /// scope `queue:route:<route>` goes with the change's).
    pub route: Report,
}

/// How Taskcluster's GitHub service would report a change's tasks, named by the route it adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Report {
    /// Commit statuses (no `reporting` in the file).
    Statuses,
    /// Check runs (`reporting: checks-v1`).
    Checks,
}

impl Report {
    /// The route.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Report::Statuses => "statuses",
            Report::Checks => "checks",
        }
    }
}

/// Everything a rendering reads, so that it can be handed to another process whole.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rendering {
    /// The parsed `.taskcluster.yml`.
    pub config: Value,
    /// The delivery's body.
    pub event: Value,
    /// What the tasks are for.
    pub tasks_for: TasksFor,
    /// The server's root URL.
    pub root_url: String,
    /// The time it renders at.
    pub now: Timestamp,
}

impl Rendered {
    /// The group of its first task (the decision task's own id, for one task).
    #[must_use]
    pub fn task_group_id(&self) -> Option<TaskId> {
        self.tasks.first().and_then(|(_, task)| task["taskGroupId"].as_str().and_then(TaskId::parse))
    }
}

impl Rendering {
    /// The rendering of `config` (the parsed `.taskcluster.yml`) for `change`.
    #[must_use]
    pub fn of(config: &Value, change: &Change, tasks_for: TasksFor, root_url: &str, now: Timestamp) -> Rendering {
        Rendering { config: config.clone(), event: change.event.clone(), tasks_for, root_url: root_url.to_owned(), now }
    }

    /// Renders it; `new_id` makes each id the tasks need.
    ///
    /// # Errors
    /// Why the file makes no tasks, in words for its authors (shown as the build's error).
    pub fn render(&self, new_id: &mut dyn FnMut() -> TaskId) -> Result<Rendered, String> {
        let Rendering { config, event, tasks_for, root_url, now } = self;
        let (tasks_for, now) = (*tasks_for, *now);
        match config.get("version").and_then(Value::as_u64) {
            Some(1) => {}
            Some(0) | None => {
                return Err("`.taskcluster.yml` must say `version: 1` (version 0 is not supported)".into());
            }
            Some(other) => return Err(format!("`.taskcluster.yml` version {other} is not known (1 is)")),
        }
        let route = if config.get("reporting").is_some_and(|reporting| !reporting.is_null()) {
            Report::Checks
        } else {
            Report::Statuses
        };
        let mut slugids = Slugids::new();
        let template = with_slugid_lookups(config, &mut slugids, new_id);
        let mut context = context(event, tasks_for, root_url);
        context.insert(SLUGIDS.into(), json!(slugids));
        let template = json!({"$let": {"now": now.to_string()}, "in": template});
        let rendered = json_e::render(&template, &Value::Object(context)).map_err(|err| format!("rendering: {err}"))?;
        let tasks = match rendered.get("tasks") {
            None | Some(Value::Null) => return Ok(Rendered { tasks: Vec::new(), route }),
            Some(Value::Array(tasks)) => tasks.clone(),
            Some(_) => return Err("`tasks` of `.taskcluster.yml` must render to a list of tasks".into()),
        };
        let tasks = with_defaults(tasks, route.as_str(), now, new_id)?;
        Ok(Rendered { tasks: dependencies_first(tasks)?, route })
    }
}

/// `template` with each `as_slugid("label")` (or `'label'`) in its strings and keys replaced by
/// a lookup of the label's id, made the first time the label is seen.
fn with_slugid_lookups(template: &Value, slugids: &mut Slugids, new_id: &mut dyn FnMut() -> TaskId) -> Value {
    match template {
        Value::String(text) => Value::String(rewrite_calls(text, slugids, new_id)),
        Value::Array(items) => {
            Value::Array(items.iter().map(|item| with_slugid_lookups(item, slugids, new_id)).collect())
        }
        Value::Object(object) => Value::Object(
            object
                .iter()
                .map(|(key, value)| (rewrite_calls(key, slugids, new_id), with_slugid_lookups(value, slugids, new_id)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn rewrite_calls(text: &str, slugids: &mut Slugids, new_id: &mut dyn FnMut() -> TaskId) -> String {
    const CALL: &str = "as_slugid(";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(CALL) {
        out.push_str(&rest[..at]);
        let after = &rest[at + CALL.len()..];
        match literal_argument(after) {
            Some((label, used)) => {
                slugids.entry(label.to_owned()).or_insert_with(&mut *new_id);
                // The label is plain text between quotes of one kind: the lookup quotes it
                // with the same kind.
                let quote = after.trim_start().chars().next().unwrap_or('"');
                out.push_str(&format!("{SLUGIDS}[{quote}{label}{quote}]"));
                rest = &after[used..];
            }
            None => {
                out.push_str(CALL);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A quoted label and `)` at the start of `text` (spaces allowed): the label and how many
/// bytes the argument took, `)` included.
fn literal_argument(text: &str) -> Option<(&str, usize)> {
    let trimmed = text.trim_start();
    let skipped = text.len() - trimmed.len();
    let quote = trimmed.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let body = &trimmed[1..];
    let end = body.find(quote)?;
    let label = &body[..end];
    let after = &body[end + 1..];
    let closing = after.trim_start();
    closing.starts_with(')').then_some((label, skipped + 1 + end + 1 + (after.len() - closing.len()) + 1))
}

/// A task made by the file: its id, and its definition without it.
type Made = (TaskId, Map<String, Value>);

/// Each task with what Taskcluster's GitHub service fills in: a sole task is its own group
/// (a decision task); several share a new group; `created` is now; `route` joins its routes.
fn with_defaults(
    tasks: Vec<Value>,
    route: &str,
    now: Timestamp,
    new_id: &mut dyn FnMut() -> TaskId,
) -> Result<Vec<Made>, String> {
    let sole = tasks.len() == 1;
    let group = (!sole).then(&mut *new_id);
    let mut made = Vec::with_capacity(tasks.len());
    for (idx, task) in tasks.into_iter().enumerate() {
        let Value::Object(mut task) = task else {
            return Err(format!("tasks[{idx}] of `.taskcluster.yml` must render to an object"));
        };
        let id = |field: &str, task: &Map<String, Value>| match task.get(field) {
            None => Ok(None),
            Some(value) => value
                .as_str()
                .and_then(TaskId::parse)
                .map(Some)
                .ok_or_else(|| format!("tasks[{idx}].{field} must be a slugid")),
        };
        let (own, in_group) = (id("taskId", &task)?, id("taskGroupId", &task)?);
        let task_id = match (own, in_group) {
            (Some(own), _) => own,
            (None, Some(in_group)) if sole => in_group,
            (None, _) => new_id(),
        };
        let task_group_id = in_group.or(group).unwrap_or(task_id);
        task.remove("taskId");
        task.insert("taskGroupId".into(), json!(task_group_id));
        task.entry("created").or_insert_with(|| json!(now.to_string()));
        task.entry("schedulerId").or_insert_with(|| json!(SCHEDULER_ID));
        let routes = task.entry("routes").or_insert_with(|| json!([]));
        match routes {
            Value::Array(routes) if !routes.contains(&json!(route)) => routes.push(json!(route)),
            Value::Array(_) => {}
            _ => return Err(format!("tasks[{idx}].routes must be a list of routes")),
        }
        made.push((task_id, task));
    }
    Ok(made)
}

/// The tasks ordered so that each comes after those it depends on among them.
fn dependencies_first(tasks: Vec<Made>) -> Result<Vec<(TaskId, Value)>, String> {
    let place: HashMap<TaskId, usize> = tasks.iter().enumerate().map(|(idx, (id, _))| (*id, idx)).collect();
    let mut waiting_on: Vec<usize> = vec![0; tasks.len()];
    let mut dependents: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (idx, (_, task)) in tasks.iter().enumerate() {
        let dependencies = task.get("dependencies").and_then(Value::as_array).into_iter().flatten();
        for dependency in dependencies.filter_map(|d| d.as_str().and_then(TaskId::parse)) {
            if let Some(&on) = place.get(&dependency) {
                waiting_on[idx] += 1;
                dependents.entry(on).or_default().push(idx);
            }
        }
    }
    let mut ready: Vec<usize> = (0..tasks.len()).rev().filter(|idx| waiting_on[*idx] == 0).collect();
    let mut order = Vec::with_capacity(tasks.len());
    while let Some(idx) = ready.pop() {
        order.push(idx);
        for &next in dependents.get(&idx).into_iter().flatten() {
            waiting_on[next] -= 1;
            if waiting_on[next] == 0 {
                ready.push(next);
            }
        }
    }
    if order.len() < tasks.len() {
        return Err("the tasks of `.taskcluster.yml` depend on each other in a cycle".into());
    }
    let mut slots: Vec<Option<Made>> = tasks.into_iter().map(Some).collect();
    Ok(order.into_iter().filter_map(|idx| slots[idx].take()).map(|(id, task)| (id, Value::Object(task))).collect())
}
