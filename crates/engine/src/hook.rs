//! The Hooks service's rules (Taskcluster's hooks): a hook's definition checked, when its
//! schedule fires next, a trigger's payload against the hook's `triggerSchema`, and its task
//! template rendered with JSON-e into the task it creates.
//!
//! Rendering follows Taskcluster: the context holds `firedBy`, `payload` (not for a scheduled
//! fire), `clientId` (for `triggerHook`), `taskId` and `now`; a template that renders to
//! `null` declines to fire; `created`, `deadline` (+1 day), `expires` (+1 month) and
//! `taskGroupId` (the task's own id) are filled in when the task leaves them out.

use croner::Cron;
use croner::parser::{CronParser, Seconds};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::{Rejection, TaskId, Timestamp};

/// The longest hookGroupId and hookId, as Taskcluster's routes allow.
const MAX_ID_LEN: usize = 1000;

/// Most schedule patterns a hook may have.
pub const MAX_PATTERNS: usize = 64;

/// The longest error kept with a failed fire (Taskcluster keeps 128 KiB).
pub const MAX_FIRE_ERROR: usize = 128 * 1024;

/// A hook's address: its group and its id within it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HookKey {
    /// `hookGroupId`: `[a-zA-Z0-9-_]`, 1 to 1000 characters.
    pub group: String,
    /// `hookId`: `[a-zA-Z0-9-_/]`, 1 to 1000 characters.
    pub id: String,
}

impl HookKey {
    /// Checks a hook's group and id as Taskcluster's routes do.
    pub fn parse(group: &str, id: &str) -> Result<HookKey, Rejection> {
        let ok = |text: &str, slash: bool| {
            (1..=MAX_ID_LEN).contains(&text.len())
                && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (slash && b == b'/'))
        };
        if !ok(group, false) {
            return Err(Rejection::invalid("hookGroupId", "must be 1 to 1000 of [a-zA-Z0-9-_]"));
        }
        if !ok(id, true) {
            return Err(Rejection::invalid("hookId", "must be 1 to 1000 of [a-zA-Z0-9-_/]"));
        }
        Ok(HookKey { group: group.to_owned(), id: id.to_owned() })
    }

    /// `<hookGroupId>/<hookId>`.
    #[must_use]
    pub fn path(&self) -> String {
        format!("{}/{}", self.group, self.id)
    }

    /// The role whose scopes the hook's tasks are created with.
    #[must_use]
    pub fn role(&self) -> String {
        format!("assume:hook-id:{}/{}", self.group, self.id)
    }
}

/// Who a hook's owner is and what it does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metadata {
    /// Human-readable name (at most 255 characters).
    pub name: String,
    /// What the hook is for (at most 32,768 characters).
    pub description: String,
    /// An email address (at most 255 characters).
    pub owner: String,
    /// Whether the owner would be mailed on a failed scheduled fire (kept; Shoal sends no mail).
    #[serde(default = "yes")]
    pub email_on_error: bool,
}

fn yes() -> bool {
    true
}

/// A hook's definition, as createHook takes it and `hook` answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Hook {
    /// Its group.
    #[serde(default)]
    pub hook_group_id: String,
    /// Its id.
    #[serde(default)]
    pub hook_id: String,
    /// Name, description, owner.
    pub metadata: Metadata,
    /// Cron patterns (UTC, optional seconds first) at which it fires.
    #[serde(default)]
    pub schedule: Vec<String>,
    /// The JSON-e template of the task it creates.
    pub task: Map<String, Value>,
    /// What a trigger's payload must match.
    #[serde(default = "empty_payload_schema")]
    pub trigger_schema: Value,
    /// Pulse bindings (always empty: Shoal's hooks fire on schedule and triggers only).
    #[serde(default)]
    pub bindings: Vec<Value>,
}

fn empty_payload_schema() -> Value {
    json!({"type": "object", "additionalProperties": false})
}

/// What fired a hook, as lastFires names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FiredBy {
    /// Its schedule.
    Schedule,
    /// `triggerHook`.
    TriggerHook,
    /// `triggerHookWithToken`.
    TriggerHookWithToken,
}

/// One fire of a hook, as lastFires lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fire {
    /// The task it created (or tried to).
    pub task_id: TaskId,
    /// What fired it.
    pub fired_by: FiredBy,
    /// When.
    pub task_create_time: Timestamp,
    /// `success` or `error`.
    pub result: String,
    /// Why it failed (empty on success).
    pub error: String,
}

impl Fire {
    /// A fire that created its task.
    #[must_use]
    pub fn success(task_id: TaskId, fired_by: FiredBy, at: Timestamp) -> Fire {
        Fire { task_id, fired_by, task_create_time: at, result: "success".into(), error: String::new() }
    }

    /// A fire that failed, with its error (cut to [`MAX_FIRE_ERROR`]).
    #[must_use]
    pub fn error(task_id: TaskId, fired_by: FiredBy, at: Timestamp, error: &str) -> Fire {
        let mut end = error.len().min(MAX_FIRE_ERROR);
        while !error.is_char_boundary(end) {
            end -= 1;
        }
        Fire { task_id, fired_by, task_create_time: at, result: "error".into(), error: error[..end].to_owned() }
    }
}

impl Hook {
    /// Checks a createHook or updateHook body for the hook at `key`: the ids in the body (if
    /// any) must be the route's, metadata within its limits, each schedule pattern a cron
    /// pattern, the trigger schema a JSON schema, and no Pulse bindings.
    pub fn parse(key: &HookKey, body: &[u8]) -> Result<Hook, Rejection> {
        let mut de = serde_json::Deserializer::from_slice(body);
        let mut hook: Hook = serde_path_to_error::deserialize(&mut de).map_err(|err| {
            let path = err.path().to_string();
            Rejection::invalid(if path == "." { "body".to_owned() } else { path }, err.inner().to_string())
        })?;
        if !hook.hook_group_id.is_empty() && hook.hook_group_id != key.group {
            return Err(Rejection::invalid("hookGroupId", "must be the hookGroupId of the URL"));
        }
        if !hook.hook_id.is_empty() && hook.hook_id != key.id {
            return Err(Rejection::invalid("hookId", "must be the hookId of the URL"));
        }
        hook.hook_group_id.clone_from(&key.group);
        hook.hook_id.clone_from(&key.id);
        let limits = [
            ("metadata.name", &hook.metadata.name, 255),
            ("metadata.description", &hook.metadata.description, 32_768),
            ("metadata.owner", &hook.metadata.owner, 255),
        ];
        for (field, text, max) in limits {
            if text.chars().count() > max {
                return Err(Rejection::invalid(field, format!("must be at most {max} characters")));
            }
        }
        if !hook.metadata.owner.contains('@') {
            return Err(Rejection::invalid("metadata.owner", "must be an email address"));
        }
        if hook.schedule.len() > MAX_PATTERNS {
            return Err(Rejection::invalid("schedule", format!("may hold at most {MAX_PATTERNS} patterns")));
        }
        for (i, pattern) in hook.schedule.iter().enumerate() {
            parse_pattern(pattern).map_err(|rule| Rejection::invalid(format!("schedule[{i}]"), rule))?;
            if hook.schedule[..i].contains(pattern) {
                return Err(Rejection::invalid(format!("schedule[{i}]"), "must not repeat an earlier pattern"));
            }
        }
        if !hook.trigger_schema.is_object() {
            return Err(Rejection::invalid("triggerSchema", "must be an object"));
        }
        if let Err(err) = jsonschema::meta::validate(&hook.trigger_schema) {
            return Err(Rejection::invalid("triggerSchema", format!("is not a valid JSON schema: {err}")));
        }
        if let Err(err) = jsonschema::validator_for(&hook.trigger_schema) {
            return Err(Rejection::invalid("triggerSchema", format!("is not a usable JSON schema: {err}")));
        }
        if !hook.bindings.is_empty() {
            return Err(Rejection::invalid(
                "bindings",
                "must be empty: Shoal's hooks fire on their schedule and on triggers, not on Pulse messages",
            ));
        }
        Ok(hook)
    }

    /// The first time after `after` that its schedule names (`None`: no schedule).
    #[must_use]
    pub fn next_fire(&self, after: Timestamp) -> Option<Timestamp> {
        let start = chrono::DateTime::from_timestamp_millis(after.millis())?;
        self.schedule
            .iter()
            .filter_map(|pattern| parse_pattern(pattern).ok())
            .filter_map(|cron| cron.find_next_occurrence(&start, false).ok())
            .map(|next| Timestamp(next.timestamp_millis()))
            .min()
    }

    /// Checks a trigger's payload against the hook's `triggerSchema`.
    pub fn check_payload(&self, payload: &Value) -> Result<(), Rejection> {
        let validator = jsonschema::validator_for(&self.trigger_schema)
            .map_err(|err| Rejection::Input(format!("the hook's triggerSchema is not usable: {err}")))?;
        let errors: Vec<String> = validator
            .iter_errors(payload)
            .take(10)
            .map(|err| format!("payload{}: {err}", err.instance_path()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Rejection::Input(format!("the payload does not match the hook's triggerSchema: {}", errors.join("; "))))
        }
    }

    /// Renders the task template with `context` (`firedBy`, `payload`, `clientId`) plus
    /// `taskId` and `now`; `Ok(None)` when it renders to `null` (the hook declines).
    pub fn render(
        &self,
        context: Map<String, Value>,
        task_id: TaskId,
        now: Timestamp,
    ) -> Result<Option<Value>, String> {
        let mut context = context;
        context.entry("taskId").or_insert_with(|| json!(task_id));
        // The crate sets `now` to the wall clock over the caller's; a `$let` around the
        // template gives it the fire's own time (a scheduled fire's is its scheduled time).
        let template = json!({"$let": {"now": now.to_string()}, "in": Value::Object(self.task.clone())});
        let rendered = json_e::render(&template, &Value::Object(context)).map_err(|err| err.to_string())?;
        let mut task = match rendered {
            Value::Null => return Ok(None),
            Value::Object(task) => task,
            other => return Err(format!("the task template rendered to {other}, not an object")),
        };
        let at = |t: Timestamp| json!(t.to_string());
        task.entry("created").or_insert_with(|| at(now));
        task.entry("deadline").or_insert_with(|| at(now.plus_secs(86_400)));
        task.entry("expires").or_insert_with(|| at(one_month_after(now)));
        task.entry("taskGroupId").or_insert_with(|| json!(task_id));
        Ok(Some(Value::Object(task)))
    }
}

/// A month later by the calendar, as Taskcluster's `fromNow('1 month')`.
fn one_month_after(t: Timestamp) -> Timestamp {
    chrono::DateTime::from_timestamp_millis(t.millis())
        .and_then(|at| at.checked_add_months(chrono::Months::new(1)))
        .map_or(t.plus_secs(30 * 86_400), |at| Timestamp(at.timestamp_millis()))
}

/// A cron pattern as cron-parser reads it: five fields, or six with seconds first; POSIX
/// weekdays (0 and 7 are Sunday); UTC.
fn parse_pattern(pattern: &str) -> Result<Cron, String> {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .build()
        .parse(pattern)
        .map_err(|err| format!("is not a cron pattern ({err})"))
}

#[cfg(test)]
mod tests;
