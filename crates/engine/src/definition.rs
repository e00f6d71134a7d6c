//! Task definitions: the createTask body as it arrives, and the checked, normalized form.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::dedup::{Properties, properties_hash};
use crate::dimensions::Dimensions;
use crate::id::{is_identifier, is_worker_type, split_task_queue_id};
use crate::priority::Priority;
use crate::rejection::Conflict;
use crate::secrets::Secrets;
use crate::slice::{Slice, SliceInput, parse_slices};
use crate::status::TaskState;
use crate::{Rejection, TaskId, Timestamp};

/// How far `created` may be from the server's clock.
pub const MAX_CLOCK_DRIFT_MS: i64 = 15 * 60 * 1000;
/// Latest deadline, counted from now.
pub const MAX_DEADLINE_MS: i64 = 5 * 24 * 3600 * 1000;
/// Default distance from deadline to expires.
pub const DEFAULT_EXPIRES_AFTER_DEADLINE_MS: i64 = 365 * 24 * 3600 * 1000;
/// Most dependencies a task may list.
pub const MAX_DEPENDENCIES: usize = 10_000;
/// Most routes a task may list.
pub const MAX_ROUTES: usize = 64;
/// Most automatic retries a task may ask for.
pub const MAX_RETRIES: i64 = 49;
/// Automatic retries when the task does not say.
pub const DEFAULT_RETRIES: u32 = 5;

/// When a task's dependencies count as satisfied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Requires {
    /// Every dependency completed successfully.
    #[default]
    AllCompleted,
    /// Every dependency resolved, however.
    AllResolved,
}

impl Requires {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Requires::AllCompleted => "all-completed",
            Requires::AllResolved => "all-resolved",
        }
    }

    /// Parses the wire name.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Requires> {
        match name {
            "all-completed" => Some(Requires::AllCompleted),
            "all-resolved" => Some(Requires::AllResolved),
            _ => None,
        }
    }

    /// Whether a dependency in `state` counts as met. A dependency that failed never meets
    /// `all-completed`: its dependent waits for scheduleTask or its deadline, as in Taskcluster.
    #[must_use]
    pub fn satisfied_by(self, state: TaskState) -> bool {
        match self {
            Requires::AllCompleted => state == TaskState::Completed,
            Requires::AllResolved => state.is_resolved(),
        }
    }
}

/// The createTask body, shaped but not yet checked.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TaskDefinitionInput {
    /// `provisionerId/workerType`.
    pub task_queue_id: Option<String>,
    /// Legacy half of the queue id.
    pub provisioner_id: Option<String>,
    /// Legacy half of the queue id.
    pub worker_type: Option<String>,
    /// Scheduler that owns the task group; default `-`.
    pub scheduler_id: Option<String>,
    /// Group the task belongs to; default the task's own id.
    pub task_group_id: Option<String>,
    /// Project; default `none`.
    pub project_id: Option<String>,
    /// Tasks that must resolve first.
    #[serde(default)]
    pub dependencies: Vec<String>,
    /// `all-completed` (default) or `all-resolved`.
    pub requires: Option<String>,
    /// Routes, copied onto event routing keys.
    #[serde(default)]
    pub routes: Vec<String>,
    /// A Taskcluster name or a Swarming number; default `lowest`.
    pub priority: Option<serde_json::Value>,
    /// Automatic retries, 0..=49; default 5.
    pub retries: Option<i64>,
    /// When the client made the definition.
    pub created: String,
    /// When the task is resolved as deadline-exceeded if not done.
    pub deadline: String,
    /// When the task and its data may be deleted; default deadline + 1 year.
    pub expires: Option<String>,
    /// Scopes the task's credentials carry.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The worker's instructions.
    pub payload: serde_json::Value,
    /// Human-readable description.
    pub metadata: MetadataInput,
    /// Free-form string tags.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Free-form extra data.
    #[serde(default = "empty_object")]
    pub extra: serde_json::Value,
    /// Worker dimensions required beyond the queue (Shoal's extension).
    #[serde(default)]
    pub dimensions: BTreeMap<String, Vec<String>>,
    /// Swarming's slices: alternative dimension sets tried in order (Shoal's extension).
    pub slices: Option<Vec<SliceInput>>,
    /// A JSON object handed only to the worker that claims a run (Shoal's extension).
    pub secrets: Option<serde_json::Value>,
    /// Whether a recent completion of the same properties may stand for this task (Swarming's).
    #[serde(default)]
    pub idempotent: bool,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// The metadata block as it arrives.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetadataInput {
    /// Short name.
    pub name: String,
    /// Longer description.
    pub description: String,
    /// Who to ask about the task.
    pub owner: String,
    /// Where the definition came from (a URL).
    pub source: String,
}

/// A checked definition with every default applied; equal definitions serialize equally,
/// which is what makes createTask idempotent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskDefinition {
    /// Legacy half of the queue id.
    pub provisioner_id: String,
    /// Legacy half of the queue id.
    pub worker_type: String,
    /// `provisionerId/workerType`.
    pub task_queue_id: String,
    /// Scheduler that owns the group.
    pub scheduler_id: String,
    /// Project.
    pub project_id: String,
    /// Group.
    pub task_group_id: TaskId,
    /// Tasks that must resolve first.
    pub dependencies: Vec<TaskId>,
    /// When dependencies count as satisfied.
    pub requires: Requires,
    /// Routes.
    pub routes: Vec<String>,
    /// Priority.
    pub priority: Priority,
    /// Automatic retries.
    pub retries: u32,
    /// When the client made it.
    pub created: Timestamp,
    /// Deadline.
    pub deadline: Timestamp,
    /// Expiry.
    pub expires: Timestamp,
    /// Scopes.
    pub scopes: Vec<String>,
    /// Worker instructions.
    pub payload: serde_json::Value,
    /// Human-readable description.
    pub metadata: Metadata,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// Extra data.
    pub extra: serde_json::Value,
    /// Required worker dimensions (absent when none).
    #[serde(default, skip_serializing_if = "Dimensions::is_empty")]
    pub dimensions: Dimensions,
    /// Slices (absent when none; then `dimensions` hold).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slices: Vec<Slice>,
    /// Whether the task has secrets (kept apart; only this flag is in the definition).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub has_secrets: bool,
    /// The secrets themselves: never serialized with the definition.
    #[serde(skip)]
    pub secrets: Option<Secrets>,
    /// Whether a recent completion of the same properties may stand for this task.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idempotent: bool,
    /// For an idempotent task, the hash of its properties ([`crate::dedup`]); never serialized.
    #[serde(skip)]
    pub dedup_hash: Option<String>,
    /// The authenticated client creating it (set by the API, not the body); never serialized,
    /// so a repeated createTask by another client is still the same definition.
    #[serde(skip)]
    pub created_by: Option<String>,
}

/// Whether createTask may define `task_id` again as `submitted` when it is stored as
/// `stored` (both serialized [`TaskDefinition`]s): only the very same definition repeats.
///
/// # Errors
/// Conflict when they differ.
pub fn check_redefinition(task_id: TaskId, stored: &str, submitted: &str) -> Result<(), Rejection> {
    if stored != submitted {
        return Err(Conflict::TaskRedefined(task_id).into());
    }
    Ok(())
}

/// Checked metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    /// Short name.
    pub name: String,
    /// Longer description.
    pub description: String,
    /// Who to ask.
    pub owner: String,
    /// Where it came from.
    pub source: String,
}

impl TaskDefinitionInput {
    /// Checks every field against Taskcluster's rules and fills in defaults.
    ///
    /// # Errors
    /// [`Rejection::Invalid`] naming the first field that breaks a rule.
    pub fn validate(self, task_id: TaskId, now: Timestamp) -> Result<TaskDefinition, Rejection> {
        let (provisioner_id, worker_type, task_queue_id) = self.queue()?;
        let scheduler_id = self.scheduler_id.unwrap_or_else(|| "-".to_owned());
        if !is_identifier(&scheduler_id) {
            return Err(Rejection::invalid("schedulerId", "must match ^[a-zA-Z0-9-_]{1,38}$"));
        }
        let project_id = self.project_id.unwrap_or_else(|| "none".to_owned());
        let project_ok = (1..=500).contains(&project_id.len())
            && project_id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._/-".contains(&b));
        if !project_ok {
            return Err(Rejection::invalid("projectId", "must match ^[a-zA-Z0-9._/-]*$ and be 1 to 500 characters"));
        }
        let task_group_id = match self.task_group_id {
            None => task_id,
            Some(text) => TaskId::parse(&text).ok_or_else(|| Rejection::invalid("taskGroupId", "must be a slugid"))?,
        };
        let dependencies = parse_dependencies(&self.dependencies)?;
        let requires = match self.requires.as_deref() {
            None => Requires::default(),
            Some(name) => Requires::from_name(name)
                .ok_or_else(|| Rejection::invalid("requires", "must be all-completed or all-resolved"))?,
        };
        check_routes(&self.routes)?;
        let priority = match &self.priority {
            None => Priority::LOWEST,
            Some(value) => Priority::parse("priority", value)?,
        };
        let retries = match self.retries {
            None => DEFAULT_RETRIES,
            Some(n @ 0..=MAX_RETRIES) => n as u32,
            Some(_) => {
                return Err(Rejection::invalid("retries", format!("must be an integer 0..={MAX_RETRIES}")));
            }
        };
        let (created, deadline, expires) = check_times(&self.created, &self.deadline, self.expires.as_deref(), now)?;
        check_scopes(&self.scopes)?;
        if !self.payload.is_object() {
            return Err(Rejection::invalid("payload", "must be a JSON object"));
        }
        let metadata = check_metadata(self.metadata)?;
        if let Some((key, _)) = self.tags.iter().find(|(key, value)| key.len() > 4096 || value.len() > 4096) {
            return Err(Rejection::invalid(format!("tags.{key}"), "keys and values must be at most 4096 characters"));
        }
        if !self.extra.is_object() {
            return Err(Rejection::invalid("extra", "must be a JSON object"));
        }
        let slices = parse_slices(self.slices, !self.dimensions.is_empty())?;
        let secrets = self.secrets.as_ref().map(Secrets::parse).transpose()?;
        let dimensions = Dimensions::parse_required("dimensions", self.dimensions)?;
        // A task with secrets is never deduplicated (crate::dedup says why).
        let dedup_hash = (self.idempotent && secrets.is_none()).then(|| {
            properties_hash(&Properties {
                task_queue_id: &task_queue_id,
                project_id: &project_id,
                scheduler_id: &scheduler_id,
                scopes: &self.scopes,
                routes: &self.routes,
                dimensions: &dimensions,
                slices: &slices,
                payload: &self.payload,
            })
        });
        Ok(TaskDefinition {
            provisioner_id,
            worker_type,
            task_queue_id,
            scheduler_id,
            project_id,
            task_group_id,
            dependencies,
            requires,
            routes: self.routes,
            priority,
            retries,
            created,
            deadline,
            expires,
            scopes: self.scopes,
            payload: self.payload,
            metadata,
            tags: self.tags,
            extra: self.extra,
            dimensions,
            slices,
            has_secrets: secrets.is_some(),
            dedup_hash,
            created_by: None,
            idempotent: self.idempotent,
            secrets,
        })
    }

    fn queue(&self) -> Result<(String, String, String), Rejection> {
        let legacy = match (&self.provisioner_id, &self.worker_type) {
            (Some(provisioner_id), Some(worker_type)) => {
                if !is_identifier(provisioner_id) {
                    return Err(Rejection::invalid("provisionerId", "must match ^[a-zA-Z0-9-_]{1,38}$"));
                }
                if !is_worker_type(worker_type) {
                    return Err(Rejection::invalid("workerType", "must match ^[a-z]([-a-z0-9]{0,36}[a-z0-9])?$"));
                }
                Some(format!("{provisioner_id}/{worker_type}"))
            }
            (None, None) => None,
            _ => {
                return Err(Rejection::invalid("provisionerId", "provisionerId and workerType must be given together"));
            }
        };
        let task_queue_id = match (&self.task_queue_id, legacy) {
            (Some(queue), Some(legacy)) if *queue != legacy => {
                return Err(Rejection::invalid(
                    "taskQueueId",
                    format!("must equal provisionerId/workerType ({legacy})"),
                ));
            }
            (Some(queue), _) => queue.clone(),
            (None, Some(legacy)) => legacy,
            (None, None) => {
                return Err(Rejection::invalid("taskQueueId", "is required (or both provisionerId and workerType)"));
            }
        };
        let Some((provisioner_id, worker_type)) = split_task_queue_id(&task_queue_id) else {
            return Err(Rejection::invalid(
                "taskQueueId",
                "must match ^[a-zA-Z0-9-_]{1,38}/[a-z]([-a-z0-9]{0,36}[a-z0-9])?$",
            ));
        };
        Ok((provisioner_id.to_owned(), worker_type.to_owned(), task_queue_id.clone()))
    }
}

fn parse_dependencies(raw: &[String]) -> Result<Vec<TaskId>, Rejection> {
    if raw.len() > MAX_DEPENDENCIES {
        return Err(Rejection::invalid("dependencies", format!("must have at most {MAX_DEPENDENCIES} items")));
    }
    let mut seen = BTreeSet::new();
    let mut res = Vec::with_capacity(raw.len());
    for (idx, text) in raw.iter().enumerate() {
        let id = TaskId::parse(text)
            .ok_or_else(|| Rejection::invalid(format!("dependencies[{idx}]"), "must be a slugid"))?;
        if !seen.insert(id) {
            return Err(Rejection::invalid(format!("dependencies[{idx}]"), "items must be unique"));
        }
        res.push(id);
    }
    Ok(res)
}

fn check_routes(routes: &[String]) -> Result<(), Rejection> {
    if routes.len() > MAX_ROUTES {
        return Err(Rejection::invalid("routes", format!("must have at most {MAX_ROUTES} items")));
    }
    let mut seen = BTreeSet::new();
    for (idx, route) in routes.iter().enumerate() {
        if !(1..=249).contains(&route.len()) {
            return Err(Rejection::invalid(format!("routes[{idx}]"), "must be 1 to 249 characters"));
        }
        if !seen.insert(route) {
            return Err(Rejection::invalid(format!("routes[{idx}]"), "items must be unique"));
        }
    }
    Ok(())
}

fn check_times(
    created: &str,
    deadline: &str,
    expires: Option<&str>,
    now: Timestamp,
) -> Result<(Timestamp, Timestamp, Timestamp), Rejection> {
    let parse = |field: &str, text: &str| {
        Timestamp::parse(text).ok_or_else(|| Rejection::invalid(field, "must be an RFC 3339 date-time"))
    };
    let created = parse("created", created)?;
    let deadline = parse("deadline", deadline)?;
    if (created.millis() - now.millis()).abs() > MAX_CLOCK_DRIFT_MS {
        return Err(Rejection::invalid("created", "must be within 15 minutes of the server's current time"));
    }
    if created > deadline {
        return Err(Rejection::invalid("deadline", "must not be before created"));
    }
    if deadline <= now {
        return Err(Rejection::invalid("deadline", "must be in the future"));
    }
    if deadline > now.plus_millis(MAX_DEADLINE_MS + MAX_CLOCK_DRIFT_MS) {
        return Err(Rejection::invalid("deadline", "must be at most 5 days from now"));
    }
    let expires = match expires {
        None => deadline.plus_millis(DEFAULT_EXPIRES_AFTER_DEADLINE_MS),
        Some(text) => parse("expires", text)?,
    };
    if expires < deadline {
        return Err(Rejection::invalid("expires", "must not be before deadline"));
    }
    Ok((created, deadline, expires))
}

fn check_scopes(scopes: &[String]) -> Result<(), Rejection> {
    for (idx, scope) in scopes.iter().enumerate() {
        if !scope.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            return Err(Rejection::invalid(format!("scopes[{idx}]"), "must be printable ASCII"));
        }
        if scope.ends_with("**") {
            return Err(Rejection::invalid(format!("scopes[{idx}]"), "must not end with **"));
        }
    }
    Ok(())
}

fn check_metadata(metadata: MetadataInput) -> Result<Metadata, Rejection> {
    let limits = [
        ("metadata.name", &metadata.name, 255),
        ("metadata.description", &metadata.description, 32768),
        ("metadata.owner", &metadata.owner, 255),
        ("metadata.source", &metadata.source, 4096),
    ];
    for (field, value, max) in limits {
        if value.chars().count() > max {
            return Err(Rejection::invalid(field, format!("must be at most {max} characters")));
        }
    }
    let source_ok = ["http://", "https://", "ssh://", "git@"].iter().any(|p| metadata.source.starts_with(p));
    if !source_ok {
        return Err(Rejection::invalid("metadata.source", "must start with http://, https://, ssh:// or git@"));
    }
    Ok(Metadata {
        name: metadata.name,
        description: metadata.description,
        owner: metadata.owner,
        source: metadata.source,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const NOW: &str = "2026-01-01T00:00:00.000Z";

    fn input(patch: serde_json::Value) -> TaskDefinitionInput {
        let mut base = json!({
            "taskQueueId": "prov/wt",
            "created": NOW,
            "deadline": "2026-01-01T01:00:00.000Z",
            "payload": {},
            "metadata": {"name": "n", "description": "d", "owner": "o", "source": "https://x"}
        });
        let serde_json::Value::Object(extra) = patch else { panic!("patch must be an object") };
        for (key, value) in extra {
            base[key] = value;
        }
        serde_json::from_value(base).unwrap()
    }

    fn check(patch: serde_json::Value) -> Result<TaskDefinition, Rejection> {
        let id = TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6A").unwrap();
        input(patch).validate(id, Timestamp::parse(NOW).unwrap())
    }

    fn field_of(patch: serde_json::Value) -> String {
        match check(patch) {
            Err(Rejection::Invalid { field, .. }) => field,
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn a_task_is_defined_again_only_as_it_was() {
        let id = TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6A").unwrap();
        assert!(check_redefinition(id, "{\"a\":1}", "{\"a\":1}").is_ok());
        let refused = check_redefinition(id, "{\"a\":1}", "{\"a\":2}").unwrap_err();
        assert_eq!(refused, Rejection::Conflict(Conflict::TaskRedefined(id)));
        assert_eq!(refused.to_string(), format!("task {id} already exists with a different definition"));
    }

    #[test]
    fn defaults_are_taskclusters() {
        let def = check(json!({})).unwrap();
        assert_eq!(def.scheduler_id, "-");
        assert_eq!(def.project_id, "none");
        assert_eq!(def.task_group_id.as_str(), "fN1S_sG4TTu5SNmTb0Xd6A");
        assert_eq!(def.priority, Priority::LOWEST);
        assert_eq!(def.retries, 5);
        assert_eq!(def.requires, Requires::AllCompleted);
        assert_eq!(def.expires.to_string(), "2027-01-01T01:00:00.000Z");
        assert_eq!((def.provisioner_id.as_str(), def.worker_type.as_str()), ("prov", "wt"));
    }

    #[test]
    fn requires_decides_which_resolutions_satisfy() {
        for state in [TaskState::Unscheduled, TaskState::Pending, TaskState::Running] {
            assert!(!Requires::AllCompleted.satisfied_by(state) && !Requires::AllResolved.satisfied_by(state));
        }
        assert!(Requires::AllCompleted.satisfied_by(TaskState::Completed));
        assert!(!Requires::AllCompleted.satisfied_by(TaskState::Failed));
        assert!(!Requires::AllCompleted.satisfied_by(TaskState::Exception));
        assert!(Requires::AllResolved.satisfied_by(TaskState::Failed));
        assert!(Requires::AllResolved.satisfied_by(TaskState::Exception));
    }

    #[test]
    fn legacy_queue_fields() {
        let def = check(json!({"taskQueueId": null, "provisionerId": "p", "workerType": "w"})).unwrap();
        assert_eq!(def.task_queue_id, "p/w");
        assert_eq!(field_of(json!({"provisionerId": "p", "workerType": "other"})), "taskQueueId");
        assert_eq!(field_of(json!({"taskQueueId": null})), "taskQueueId");
        assert_eq!(field_of(json!({"taskQueueId": "p/W"})), "taskQueueId");
    }

    #[test]
    fn each_rule_names_its_field() {
        assert_eq!(field_of(json!({"deadline": "2026-01-07T00:00:00.000Z"})), "deadline");
        assert_eq!(field_of(json!({"deadline": "2025-12-31T00:00:00.000Z"})), "deadline");
        assert_eq!(field_of(json!({"created": "2025-12-31T00:00:00.000Z"})), "created");
        assert_eq!(field_of(json!({"expires": "2026-01-01T00:30:00.000Z"})), "expires");
        assert_eq!(field_of(json!({"retries": 50})), "retries");
        assert_eq!(field_of(json!({"priority": "normal"})), "priority");
        assert_eq!(field_of(json!({"routes": ["a", "a"]})), "routes[1]");
        assert_eq!(field_of(json!({"scopes": ["queue:**"]})), "scopes[0]");
        assert_eq!(field_of(json!({"dependencies": ["nope"]})), "dependencies[0]");
        assert_eq!(
            field_of(json!({"metadata": {"name": "n", "description": "d", "owner": "o", "source": "ftp://x"}})),
            "metadata.source"
        );
        assert_eq!(field_of(json!({"schedulerId": ""})), "schedulerId");
        assert_eq!(field_of(json!({"requires": "some"})), "requires");
        assert_eq!(field_of(json!({"payload": []})), "payload");
    }
}
