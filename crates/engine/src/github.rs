//! Taskcluster's GitHub integration's rules: which webhook deliveries become builds, the
//! role a change's tasks get (`assume:repo:<host>/<owner>/<repo>:branch:<branch>` ...), and
//! `.taskcluster.yml` (version 1) rendered with JSON-e into the tasks to create.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::{Rejection, TaskId, Timestamp};

mod render;
#[cfg(test)]
mod tests;

pub use render::{Rendered, Rendering, Report};

/// The schedulerId of the tasks a change makes, as Taskcluster's GitHub service sets it.
pub const SCHEDULER_ID: &str = "taskcluster-github";

/// What a change's tasks are for (`tasks_for` in `.taskcluster.yml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TasksFor {
    /// A push to a branch or a tag.
    #[serde(rename = "github-push")]
    Push,
    /// A pull request from someone trusted with the repository.
    #[serde(rename = "github-pull-request")]
    PullRequest,
    /// A pull request from anyone else, under a `public_restricted` policy.
    #[serde(rename = "github-pull-request-untrusted")]
    PullRequestUntrusted,
}

impl TasksFor {
    /// Its name in `.taskcluster.yml`'s context.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TasksFor::Push => "github-push",
            TasksFor::PullRequest => "github-pull-request",
            TasksFor::PullRequestUntrusted => "github-pull-request-untrusted",
        }
    }
}

/// A change a delivery announces: a push or a pull request's new head.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The repository's owner, as Taskcluster spells it in roles (`.` as `%`).
    pub organization: String,
    /// The repository's name, spelled the same way.
    pub repository: String,
    /// The forge's host (with its port, if any), from the clone URL.
    pub host: String,
    /// Where the repository is fetched from (http or https).
    pub clone_url: String,
    /// The commit the tasks are for (40 hexadecimal digits).
    pub sha: String,
    /// A ref the commit is reachable from, for servers that give no commit by its id.
    pub git_ref: String,
    /// Taskcluster's event type: `push`, `tag`, `pull_request.<action>`.
    pub event_type: String,
    /// The branch pushed to, or the pull request's base branch.
    pub branch: Option<String>,
    /// The tag pushed.
    pub tag: Option<String>,
    /// The pull request's number.
    pub pull_request: Option<u64>,
    /// Whether a pull request comes from another repository (a fork).
    pub from_fork: bool,
    /// The repository's default branch (where a pull request's policy is read).
    pub default_branch: String,
    /// `X-GitHub-Delivery`.
    pub event_id: String,
    /// The whole event, `event` in `.taskcluster.yml`'s context.
    pub event: Value,
}

/// What a delivery asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    /// Nothing to build, and why (a ping, a deleted branch, `[ci skip]`, another event).
    Ignored(String),
    /// A change to build.
    Change(Box<Change>),
}

/// Reads a webhook delivery (`X-GitHub-Event` `event`, `X-GitHub-Delivery` `delivery`) in
/// GitHub's format, which Gitea, Forgejo and GitHub Enterprise send too.
///
/// # Errors
/// A field the event needs is missing or malformed.
pub fn parse_delivery(event: &str, delivery: &str, body: &Value) -> Result<Delivery, Rejection> {
    let event_id = if delivery.is_empty() { "Unknown".to_owned() } else { delivery.to_owned() };
    match event {
        "ping" => Ok(Delivery::Ignored("a ping".into())),
        "push" => parse_push(event_id, body),
        "pull_request" => parse_pull_request(event_id, body),
        other => Ok(Delivery::Ignored(format!("no builds for `{other}` events"))),
    }
}

fn text<'a>(body: &'a Value, path: &[&str]) -> Result<&'a str, Rejection> {
    let mut at = body;
    for part in path {
        at = &at[*part];
    }
    at.as_str().ok_or_else(|| Rejection::invalid(path.join("."), "is required (a string)"))
}

fn sha(body: &Value, path: &[&str]) -> Result<String, Rejection> {
    let sha = text(body, path)?;
    if sha.len() == 40 && sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(sha.to_ascii_lowercase())
    } else {
        Err(Rejection::invalid(path.join("."), "must be a commit id (40 hexadecimal digits)"))
    }
}

/// Taskcluster's spelling of an owner or repository name in roles and builds: only
/// `[A-Za-z0-9-_.]`, and `.` as `%`.
fn sanitized(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
        .map(|c| if c == '.' { '%' } else { c })
        .collect()
}

/// The host (and port) of an http or https URL.
fn host_of(clone_url: &str, field: &str) -> Result<String, Rejection> {
    let rest = clone_url
        .strip_prefix("https://")
        .or_else(|| clone_url.strip_prefix("http://"))
        .ok_or_else(|| Rejection::invalid(field, "must be an http or https URL"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    // Credentials in the URL are never taken into a role's name.
    let host = authority.rsplit('@').next().unwrap_or_default();
    let fine = !host.is_empty() && host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b));
    if fine { Ok(host.to_ascii_lowercase()) } else { Err(Rejection::invalid(field, "must name a host")) }
}

/// A branch or tag name must be printable ASCII, as it becomes part of a scope.
fn printable(name: &str, field: &str) -> Result<String, Rejection> {
    if !name.is_empty() && name.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        Ok(name.to_owned())
    } else {
        Err(Rejection::invalid(field, "must be printable ASCII"))
    }
}

fn parse_push(event_id: String, body: &Value) -> Result<Delivery, Rejection> {
    let git_ref = text(body, &["ref"])?;
    if body["deleted"] == json!(true) || text(body, &["after"]).is_ok_and(|after| after.bytes().all(|b| b == b'0')) {
        return Ok(Delivery::Ignored(format!("{git_ref} was deleted")));
    }
    let message = body["head_commit"]["message"].as_str().unwrap_or_default();
    if message.contains("[ci skip]") || message.contains("[skip ci]") {
        return Ok(Delivery::Ignored("the commit asks for no CI ([ci skip])".into()));
    }
    let (branch, tag, event_type) = if let Some(tag) = git_ref.strip_prefix("refs/tags/") {
        (None, Some(printable(tag, "ref")?), "tag")
    } else if let Some(branch) = git_ref.strip_prefix("refs/heads/") {
        (Some(printable(branch, "ref")?), None, "push")
    } else {
        return Ok(Delivery::Ignored(format!("{git_ref} is neither a branch nor a tag")));
    };
    let repository = &body["repository"];
    let owner = repository["owner"]["name"].as_str().or_else(|| repository["owner"]["login"].as_str());
    let owner = owner.ok_or_else(|| Rejection::invalid("repository.owner.name", "is required (a string)"))?;
    let clone_url = text(body, &["repository", "clone_url"])?.to_owned();
    Ok(Delivery::Change(Box::new(Change {
        organization: sanitized(owner),
        repository: sanitized(text(body, &["repository", "name"])?),
        host: host_of(&clone_url, "repository.clone_url")?,
        sha: sha(body, &["after"])?,
        git_ref: git_ref.to_owned(),
        event_type: event_type.to_owned(),
        branch,
        tag,
        pull_request: None,
        from_fork: false,
        default_branch: repository["default_branch"].as_str().unwrap_or("main").to_owned(),
        clone_url,
        event_id,
        event: body.clone(),
    })))
}

fn parse_pull_request(event_id: String, body: &Value) -> Result<Delivery, Rejection> {
    let action = text(body, &["action"])?;
    if !["opened", "synchronize", "reopened"].contains(&action) {
        return Ok(Delivery::Ignored(format!("no builds for pull requests {action}")));
    }
    let number = body["number"]
        .as_u64()
        .or_else(|| body["pull_request"]["number"].as_u64())
        .ok_or_else(|| Rejection::invalid("number", "is required (the pull request's number)"))?;
    let base = &body["pull_request"]["base"];
    let head = &body["pull_request"]["head"];
    let clone_url = text(base, &["repo", "clone_url"])
        .map_err(|_| Rejection::invalid("pull_request.base.repo.clone_url", "is required (a string)"))?
        .to_owned();
    let owner = text(body, &["repository", "owner", "login"])?;
    Ok(Delivery::Change(Box::new(Change {
        organization: sanitized(owner),
        repository: sanitized(text(body, &["repository", "name"])?),
        host: host_of(&clone_url, "pull_request.base.repo.clone_url")?,
        sha: sha(body, &["pull_request", "head", "sha"])?,
        git_ref: format!("refs/pull/{number}/head"),
        event_type: format!("pull_request.{action}"),
        branch: Some(printable(text(base, &["ref"]).unwrap_or_default(), "pull_request.base.ref")?),
        tag: None,
        pull_request: Some(number),
        from_fork: head["repo"]["full_name"] != base["repo"]["full_name"],
        default_branch: body["repository"]["default_branch"].as_str().unwrap_or("main").to_owned(),
        clone_url,
        event_id,
        event: body.clone(),
    })))
}

impl Change {
    /// `owner/repository`, as a build lists it.
    #[must_use]
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.organization, self.repository)
    }

    /// Whether what its tasks are for depends on the default branch's policy: a pull request
    /// from a fork (the repository's own branches are trusted whatever the policy).
    #[must_use]
    pub fn needs_policy(&self) -> bool {
        self.pull_request.is_some() && self.from_fork
    }

    /// What the change's tasks are for, under the policy of the default branch's
    /// `.taskcluster.yml` (`policy.pullRequests`); `None` when that policy builds none. Whether
    /// an author is a collaborator is not asked of the forge: a pull request from a branch of
    /// the repository itself is trusted (its author can push there), one from a fork is not.
    #[must_use]
    pub fn tasks_for(&self, default_branch_config: Option<&Value>) -> Option<TasksFor> {
        if self.pull_request.is_none() {
            return Some(TasksFor::Push);
        }
        let policy = default_branch_config.and_then(|config| config["policy"]["pullRequests"].as_str());
        match (policy.unwrap_or("collaborators"), self.from_fork) {
            ("public", _) | (_, false) => Some(TasksFor::PullRequest),
            ("public_restricted", true) => Some(TasksFor::PullRequestUntrusted),
            _ => None,
        }
    }

    /// The scopes its tasks are created with: the repository's role for what they are for, and
    /// the scheduler id, as Taskcluster's GitHub service gives them.
    #[must_use]
    pub fn scopes(&self, tasks_for: TasksFor) -> Vec<String> {
        let repo = format!("assume:repo:{}/{}/{}", self.host, self.organization, self.repository);
        let role = match (tasks_for, &self.tag, &self.branch) {
            (TasksFor::PullRequest, ..) => format!("{repo}:pull-request"),
            (TasksFor::PullRequestUntrusted, ..) => format!("{repo}:pull-request-untrusted"),
            (TasksFor::Push, Some(tag), _) => format!("{repo}:tag:{tag}"),
            (TasksFor::Push, None, branch) => format!("{repo}:branch:{}", branch.as_deref().unwrap_or_default()),
        };
        vec![role, format!("queue:scheduler-id:{SCHEDULER_ID}")]
    }
}

/// A build's state, as Taskcluster's builds list has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BuildState {
    /// Its tasks are under way.
    Pending,
    /// Every task completed.
    Success,
    /// A task failed or ended in an exception.
    Failure,
    /// No task could be made: `.taskcluster.yml` missing, refused or broken.
    Error,
    /// Its tasks were cancelled.
    Cancelled,
}

/// One change built: the tasks made for a push or pull request, or why none could be.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Build {
    /// The repository's owner.
    pub organization: String,
    /// The repository.
    pub repository: String,
    /// The commit.
    pub sha: String,
    /// How it stands (as recorded; a pending build's tasks tell more).
    pub state: BuildState,
    /// The task group of its tasks (for a build in error, the one reserved for it).
    pub task_group_id: TaskId,
    /// `push`, `tag` or `pull_request.<action>`.
    pub event_type: String,
    /// The delivery's id.
    pub event_id: String,
    /// When it was made.
    pub created: Timestamp,
    /// When its state was last recorded.
    pub updated: Timestamp,
    /// The pull request's number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull_request_number: Option<u64>,
    /// Why it is in error (Shoal's: Taskcluster says so in a comment on the forge).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Build {
    /// A build of `change` whose tasks go to `task_group_id`, made `now`, pending.
    #[must_use]
    pub fn of(change: &Change, task_group_id: TaskId, now: Timestamp) -> Build {
        Build {
            organization: change.organization.clone(),
            repository: change.repository.clone(),
            sha: change.sha.clone(),
            state: BuildState::Pending,
            task_group_id,
            event_type: change.event_type.clone(),
            event_id: change.event_id.clone(),
            created: now,
            updated: now,
            pull_request_number: change.pull_request,
            error: None,
        }
    }

    /// The same build in error, for `reason`.
    #[must_use]
    pub fn failed(self, reason: String) -> Build {
        Build { state: BuildState::Error, error: Some(reason), ..self }
    }

    /// Its state from its tasks' states (`counts`: how many are in each state), for a
    /// pending build: success once all completed, failure once none is left to run and one
    /// failed.
    #[must_use]
    pub fn state_from(&self, counts: &HashMap<&str, u64>) -> BuildState {
        if self.state != BuildState::Pending {
            return self.state;
        }
        let count = |state: &str| counts.get(state).copied().unwrap_or(0);
        let open = count("unscheduled") + count("pending") + count("running");
        let total: u64 = counts.values().sum();
        match (open, count("failed") + count("exception")) {
            _ if total == 0 => BuildState::Pending,
            (0, 0) => BuildState::Success,
            (0, _) => BuildState::Failure,
            _ => BuildState::Pending,
        }
    }
}

/// The `.taskcluster.yml` context a change renders with (beside `now` and `as_slugid`).
fn context(event: &Value, tasks_for: TasksFor, root_url: &str) -> Map<String, Value> {
    let mut context = Map::new();
    context.insert("tasks_for".into(), json!(tasks_for.as_str()));
    context.insert("event".into(), event.clone());
    context.insert("taskcluster_root_url".into(), json!(root_url));
    context
}

/// The labels a template's `as_slugid("...")` calls name, each with the id it gets.
type Slugids = BTreeMap<String, TaskId>;
