//! `{"$subs": "taskId:<label>"}` placeholders: allowed only in a task's payload (seed 000) and
//! its slices' payloads, and replaced there by the label's taskId.

use std::collections::HashMap;

use serde_json::Value;

use crate::graph::Labelled;
use crate::{Rejection, TaskId};

/// The placeholder key, and the prefix of its value.
const SUBS_KEY: &str = "$subs";
const SUBS_PREFIX: &str = "taskId:";

/// Checks that every task of a submission holds placeholders only in its `payload` (seed 000),
/// so that what authorization reads of a task (scopes, routes, project, queue, priority) is
/// what will be created.
///
/// # Errors
/// Invalid naming the first placeholder found outside a payload.
pub fn check_submission(tasks: &Labelled) -> Result<(), Rejection> {
    tasks.0.iter().try_for_each(|(label, node)| check_placeholders(label, &node.task))
}

pub(crate) fn check_placeholders(label: &str, task: &Value) -> Result<(), Rejection> {
    let Value::Object(object) = task else { return Ok(()) };
    let outside = |key: &str, value: &Value| find_placeholder(value, &format!("tasks.{label}.task.{key}"));
    let mut found = None;
    for (key, value) in object.iter().filter(|(key, _)| *key != "payload") {
        found = match (key.as_str(), value) {
            // A slice's own payload is a payload too.
            ("slices", Value::Array(slices)) => slices.iter().enumerate().find_map(|(index, slice)| match slice {
                Value::Object(fields) => fields
                    .iter()
                    .filter(|(field, _)| *field != "payload")
                    .find_map(|(field, inner)| outside(&format!("slices[{index}].{field}"), inner)),
                other => outside(&format!("slices[{index}]"), other),
            }),
            _ => outside(key, value),
        };
        if found.is_some() {
            break;
        }
    }
    match found {
        Some(at) => Err(Rejection::invalid(at, "a `$subs` placeholder is allowed only in the payload")),
        None => Ok(()),
    }
}

/// Replaces the placeholders of a task's payloads: its own and its slices'.
pub(crate) fn substitute_payloads(
    task: &mut serde_json::Map<String, Value>,
    ids: &HashMap<String, TaskId>,
    field: impl Fn(&str) -> String,
) -> Result<(), Rejection> {
    if let Some(payload) = task.get_mut("payload") {
        substitute(payload, ids, &field("payload"))?;
    }
    if let Some(Value::Array(slices)) = task.get_mut("slices") {
        for (index, slice) in slices.iter_mut().enumerate() {
            if let Some(payload) = slice.get_mut("payload") {
                substitute(payload, ids, &field(&format!("slices[{index}].payload")))?;
            }
        }
    }
    Ok(())
}

/// The path of the first `$subs` placeholder in `value`, if any.
fn find_placeholder(value: &Value, path: &str) -> Option<String> {
    match value {
        Value::Object(object) if object.contains_key(SUBS_KEY) => Some(format!("{path}.{SUBS_KEY}")),
        Value::Object(object) => {
            object.iter().find_map(|(key, inner)| find_placeholder(inner, &format!("{path}.{key}")))
        }
        Value::Array(items) => {
            items.iter().enumerate().find_map(|(index, inner)| find_placeholder(inner, &format!("{path}[{index}]")))
        }
        _ => None,
    }
}

/// Replaces every `{"$subs": "taskId:<label>"}` in `value` by that label's taskId.
pub(crate) fn substitute(value: &mut Value, ids: &HashMap<String, TaskId>, path: &str) -> Result<(), Rejection> {
    match value {
        Value::Object(object) if object.len() == 1 && object.contains_key(SUBS_KEY) => {
            let at = format!("{path}.{SUBS_KEY}");
            let Some(Value::String(wanted)) = object.get(SUBS_KEY) else {
                return Err(Rejection::invalid(at, "must be a string `taskId:<label>`"));
            };
            let Some(label) = wanted.strip_prefix(SUBS_PREFIX) else {
                return Err(Rejection::invalid(at, "must be a string `taskId:<label>`"));
            };
            let Some(task_id) = ids.get(label) else {
                return Err(Rejection::invalid(at, format!("unknown label `{label}`")));
            };
            *value = Value::from(task_id.to_string());
        }
        Value::Object(object) => {
            for (key, inner) in object.iter_mut() {
                substitute(inner, ids, &format!("{path}.{key}"))?;
            }
        }
        Value::Array(items) => {
            for (index, inner) in items.iter_mut().enumerate() {
                substitute(inner, ids, &format!("{path}[{index}]"))?;
            }
        }
        _ => {}
    }
    Ok(())
}
