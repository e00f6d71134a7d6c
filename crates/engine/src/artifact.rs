//! Artifacts: what a run may attach (blobs, references, links, errors) and the rules for
//! creating and replacing them, as Taskcluster's queue applies them.

use serde::{Deserialize, Serialize};

use crate::rejection::{Conflict, Missing};
use crate::status::{ReasonResolved, Run, RunState};
use crate::{Rejection, Timestamp};

/// How long after a run ended with an exception artifacts may still be created (so a worker
/// can upload the logs of a run it was told to stop).
pub const EXCEPTION_GRACE_MS: i64 = 25 * 60 * 1000;
/// How far in the past `expires` may lie (clock drift).
pub const EXPIRES_DRIFT_MS: i64 = 15 * 60 * 1000;
/// Most link hops followed before a chain counts as a cycle.
pub const MAX_LINK_HOPS: usize = 10;
/// Where Taskcluster's tools look for a run's log.
pub const LIVE_LOG_NAME: &str = "public/logs/live.log";

/// Why a worker could not produce an artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorReason {
    /// The file was not there.
    FileMissingOnWorker,
    /// The path was not a file (or directory) the worker could use.
    InvalidResourceOnWorker,
    /// The file was larger than allowed.
    TooLargeFileOnWorker,
    /// The file could not be read.
    FileNotReadableOnWorker,
}

/// What an artifact is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "storageType", rename_all = "camelCase", deny_unknown_fields)]
pub enum ArtifactKind {
    /// Bytes uploaded to the server's blob store (Taskcluster's `s3` storage type).
    #[serde(rename = "s3", rename_all = "camelCase")]
    Blob {
        /// Content type served with the bytes.
        content_type: String,
        /// Declared size, if the worker knew it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content_length: Option<u64>,
    },
    /// A redirect to a URL elsewhere.
    #[serde(rename = "reference", rename_all = "camelCase")]
    Reference {
        /// Content type of what the URL serves.
        content_type: String,
        /// Where to go.
        url: String,
    },
    /// Another artifact of the same run.
    #[serde(rename = "link", rename_all = "camelCase")]
    Link {
        /// Its name.
        artifact: String,
        /// What the client said it holds (informational, as Taskcluster's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content_type: Option<String>,
    },
    /// The run's live log on this server; served as a `reference` to it. Every claimed run
    /// gets one under [`LIVE_LOG_NAME`]; clients cannot create this kind.
    #[serde(rename = "live-log")]
    LiveLog,
    /// An artifact the worker could not produce (served as 424).
    #[serde(rename = "error")]
    Error {
        /// Why.
        reason: ErrorReason,
        /// A message for people.
        message: String,
    },
}

impl ArtifactKind {
    /// Taskcluster's name for the storage type.
    #[must_use]
    pub fn storage_type(&self) -> &'static str {
        match self {
            ArtifactKind::Blob { .. } => "s3",
            ArtifactKind::Reference { .. } | ArtifactKind::LiveLog => "reference",
            ArtifactKind::Link { .. } => "link",
            ArtifactKind::Error { .. } => "error",
        }
    }

    /// The content type listings show.
    #[must_use]
    pub fn content_type(&self) -> &str {
        match self {
            ArtifactKind::Blob { content_type, .. } | ArtifactKind::Reference { content_type, .. } => content_type,
            ArtifactKind::Link { content_type, .. } => content_type.as_deref().unwrap_or("application/octet-stream"),
            ArtifactKind::LiveLog => "text/plain; charset=utf-8",
            ArtifactKind::Error { .. } => "application/json",
        }
    }
}

/// A createArtifact body.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ArtifactRequest {
    /// When the artifact may be deleted.
    pub expires: Timestamp,
    /// What it is.
    #[serde(flatten)]
    pub kind: ArtifactKind,
}

/// A stored artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// Name, e.g. `public/logs/live.log`.
    pub name: String,
    /// When it may be deleted.
    pub expires: Timestamp,
    /// What it is.
    pub kind: ArtifactKind,
    /// Whether its content is there (a blob not uploaded yet is not).
    pub present: bool,
    /// For an uploaded blob, how many bytes it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// For an uploaded blob in a store that keeps each upload apart (S3), which object
    /// holds its bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
}

impl Artifact {
    /// Whether finishArtifact may confirm it: its content is there (a blob once its bytes
    /// were uploaded; every other kind at once).
    ///
    /// # Errors
    /// Conflict for a blob whose bytes have not been uploaded.
    pub fn check_finished(&self) -> Result<(), Rejection> {
        if !self.present {
            return Err(Conflict::NotUploaded(self.name.clone()).into());
        }
        Ok(())
    }

    /// Whether bytes may be uploaded for this artifact now: a blob, not uploaded yet (its
    /// bytes are written once, so nobody replaces what readers already fetched).
    ///
    /// # Errors
    /// Conflict for another kind, or a blob whose bytes are there.
    pub fn check_writable(&self) -> Result<(), Rejection> {
        self.check_upload()?;
        if self.present {
            return Err(Conflict::AlreadyUploaded(self.name.clone()).into());
        }
        Ok(())
    }

    /// Whether this artifact takes uploaded bytes (a blob).
    ///
    /// # Errors
    /// Conflict for any other kind.
    pub fn check_upload(&self) -> Result<(), Rejection> {
        if !matches!(self.kind, ArtifactKind::Blob { .. }) {
            return Err(Conflict::NotAnUpload { name: self.name.clone(), kind: self.kind.storage_type() }.into());
        }
        Ok(())
    }
}

/// How far bytes written to `what` may go: `size` bytes would be there after a write, and
/// `limit` is what it may hold.
///
/// # Errors
/// TooLarge naming `what` and its limit.
pub fn check_size(what: impl FnOnce() -> String, size: u64, limit: u64) -> Result<(), Rejection> {
    if size > limit {
        return Err(Rejection::TooLarge { what: what(), limit });
    }
    Ok(())
}

/// Longest reference URL: it comes back as a `Location` header, which clients and proxies
/// limit to a few kilobytes.
pub const MAX_URL_BYTES: usize = 4096;

/// Checks a reference artifact's URL: http or https, at most [`MAX_URL_BYTES`], and no
/// control characters (CR or LF would end the `Location` header it is served in).
///
/// # Errors
/// Invalid naming `url` and the rule.
pub fn check_reference_url(url: &str) -> Result<(), Rejection> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(Rejection::invalid("url", "must be an http:// or https:// URL"));
    }
    if url.len() > MAX_URL_BYTES {
        return Err(Rejection::invalid("url", format!("must be at most {MAX_URL_BYTES} bytes")));
    }
    if url.chars().any(char::is_control) {
        return Err(Rejection::invalid("url", "must not contain control characters (CR, LF, NUL, ...)"));
    }
    Ok(())
}

/// Checks an artifact name: printable ASCII, 1 to 1024 bytes.
///
/// # Errors
/// Invalid naming `name`.
pub fn check_name(name: &str) -> Result<(), Rejection> {
    let ok = (1..=1024).contains(&name.len()) && name.bytes().all(|b| (0x20..=0x7e).contains(&b));
    if ok { Ok(()) } else { Err(Rejection::invalid("name", "must be 1 to 1024 printable ASCII characters")) }
}

/// The live-log artifact every claimed run has (unless a stored artifact replaced it); it is
/// derived, never stored, and lasts as long as its task.
#[must_use]
pub fn implicit_live_log(run: &Run, task_expires: Timestamp) -> Option<Artifact> {
    run.worker_id.as_ref()?;
    Some(Artifact {
        name: LIVE_LOG_NAME.to_owned(),
        expires: task_expires,
        kind: ArtifactKind::LiveLog,
        present: true,
        bytes: None,
        object: None,
    })
}

impl ArtifactRequest {
    /// Decides whether this request may create (or repeat, or replace) an artifact on `run`
    /// of a task expiring at `task_expires`, given what is stored under the name; returns
    /// what to store.
    ///
    /// # Errors
    /// Invalid for a bad expiry or URL; Input for a run never claimed; Conflict for a run
    /// that no longer takes artifacts or an incompatible replacement.
    pub fn apply(
        self,
        name: &str,
        run: &Run,
        task_expires: Timestamp,
        existing: Option<&Artifact>,
        now: Timestamp,
    ) -> Result<Artifact, Rejection> {
        check_name(name)?;
        if self.expires < now.plus_millis(-EXPIRES_DRIFT_MS) {
            return Err(Rejection::invalid("expires", "must not be in the past"));
        }
        if self.expires > task_expires {
            return Err(Rejection::invalid("expires", format!("must not be after the task expires ({task_expires})")));
        }
        match &self.kind {
            ArtifactKind::Reference { url, .. } => check_reference_url(url)?,
            ArtifactKind::Link { artifact, content_type } => {
                check_name(artifact)
                    .map_err(|_| Rejection::invalid("artifact", "must be 1 to 1024 printable ASCII characters"))?;
                if content_type.as_ref().is_some_and(|content_type| content_type.len() > 255) {
                    return Err(Rejection::invalid("contentType", "must be at most 255 characters"));
                }
            }
            ArtifactKind::LiveLog => {
                return Err(Rejection::invalid("storageType", "must be s3, reference, link or error"));
            }
            _ => {}
        }
        check_run_takes_artifacts(run, now)?;
        let present = !matches!(self.kind, ArtifactKind::Blob { .. });
        let Some(existing) = existing else {
            return Ok(Artifact {
                name: name.to_owned(),
                expires: self.expires,
                kind: self.kind,
                present,
                bytes: None,
                object: None,
            });
        };
        let replaceable = match (&existing.kind, &self.kind) {
            (
                ArtifactKind::Reference { .. } | ArtifactKind::LiveLog,
                ArtifactKind::Reference { .. } | ArtifactKind::Link { .. },
            ) => true,
            (old, new) => old == new,
        };
        if !replaceable {
            return Err(
                Conflict::ArtifactUnchangeable { name: name.to_owned(), kind: existing.kind.storage_type() }.into()
            );
        }
        // The server chose the live log's expiry, not the worker, so replacing it may shorten it.
        if self.expires < existing.expires && existing.kind != ArtifactKind::LiveLog {
            return Err(Conflict::ArtifactExpiresEarlier { name: name.to_owned(), expires: existing.expires }.into());
        }
        let kept = existing.present && existing.kind == self.kind;
        let (bytes, object) = if kept { (existing.bytes, existing.object.clone()) } else { (None, None) };
        let present = present || kept;
        Ok(Artifact { name: name.to_owned(), expires: self.expires, kind: self.kind, present, bytes, object })
    }
}

/// Follows links from `name` to the artifact that holds content (a blob, reference or
/// error), looking each name up with `lookup`.
///
/// # Errors
/// NotFound when a name in the chain does not exist; Invalid when the chain is a cycle or
/// longer than [`MAX_LINK_HOPS`].
pub fn follow_links<E>(
    name: &str,
    mut lookup: impl FnMut(&str) -> Result<Option<Artifact>, E>,
) -> Result<Result<Artifact, Rejection>, E> {
    let mut current = name.to_owned();
    for _ in 0..=MAX_LINK_HOPS {
        let Some(artifact) = lookup(&current)? else {
            return Ok(Err(Missing::LinkTarget(current).into()));
        };
        match &artifact.kind {
            ArtifactKind::Link { artifact: target, .. } => current.clone_from(target),
            _ => return Ok(Ok(artifact)),
        }
    }
    Ok(Err(Rejection::invalid("name", format!("links from {name} form a cycle or a chain over {MAX_LINK_HOPS} hops"))))
}

/// Output may be appended to a run's live log only while the run is running.
///
/// # Errors
/// Conflict once the run is over (or before it started).
pub fn check_run_takes_output(run: &Run) -> Result<(), Rejection> {
    if run.state == RunState::Running {
        return Ok(());
    }
    Err(Conflict::LogClosed(run.run_id).into())
}

/// Artifacts go on claimed runs that are running, or that ended with an exception a short
/// while ago; their bytes may be uploaded only then too.
///
/// # Errors
/// Input for a run never claimed; Conflict for a run that no longer takes artifacts.
pub fn check_run_takes_artifacts(run: &Run, now: Timestamp) -> Result<(), Rejection> {
    if run.worker_id.is_none() {
        return Err(Rejection::Input(format!("run {} was never claimed; it cannot have artifacts", run.run_id)));
    }
    let recent_exception = run.state == RunState::Exception
        && run.reason_resolved != Some(ReasonResolved::Superseded)
        && run.resolved.is_some_and(|at| now < at.plus_millis(EXCEPTION_GRACE_MS));
    if run.state == RunState::Running || recent_exception {
        return Ok(());
    }
    Err(Conflict::RunResolved(run.run_id).into())
}

/// Where `len` bytes sent for `offset` go in a live log of `size` bytes: how many of them to
/// skip (what the log has already: a resend after a lost answer), or, for a chunk starting
/// past the end, `Err` with the size to resend from.
///
/// # Errors
/// The log's size, when `offset` is past it.
pub fn log_append_skip(size: u64, offset: u64, len: usize) -> Result<usize, u64> {
    if offset > size {
        return Err(size);
    }
    Ok(usize::try_from(size - offset).unwrap_or(usize::MAX).min(len))
}

/// The names among `names` that are not public (outside `public/`): reading each needs
/// `queue:get-artifact:<name>`; public ones anyone may read.
#[must_use]
pub fn private_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut private: Vec<String> =
        names.into_iter().filter(|name| !name.starts_with("public/")).map(str::to_owned).collect();
    private.dedup();
    private
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_log_append_skips_what_the_log_has_and_refuses_gaps() {
        assert_eq!(log_append_skip(0, 0, 5), Ok(0), "the first chunk");
        assert_eq!(log_append_skip(5, 0, 5), Ok(5), "a resend adds nothing");
        assert_eq!(log_append_skip(5, 3, 8), Ok(2), "an overlap keeps its new part");
        assert_eq!(log_append_skip(5, 9, 1), Err(5), "a gap says where to resend from");
    }
    use crate::status::ReasonCreated;

    const NOW: Timestamp = Timestamp(1_767_225_600_000);

    fn run(state: RunState, resolved_ago_ms: Option<i64>) -> Run {
        Run {
            run_id: 0,
            state,
            reason_created: ReasonCreated::Scheduled,
            reason_resolved: resolved_ago_ms.map(|_| ReasonResolved::WorkerShutdown),
            worker_group: Some("g".into()),
            worker_id: Some("w".into()),
            worker_dimensions: None,
            worker_version: None,
            taken_until: Some(NOW.plus_secs(60)),
            scheduled: NOW,
            started: Some(NOW),
            resolved: resolved_ago_ms.map(|ago| NOW.plus_millis(-ago)),
            slice: None,
            stats: None,
            deduped_from: None,
        }
    }

    fn request(body: serde_json::Value) -> ArtifactRequest {
        serde_json::from_value(body).unwrap()
    }

    fn blob() -> ArtifactRequest {
        request(json!({"storageType": "s3", "expires": "2026-01-02T00:00:00.000Z", "contentType": "text/plain"}))
    }

    const TASK_EXPIRES: Timestamp = Timestamp(1_767_225_600_000 + 365 * 24 * 3600 * 1000);

    #[test]
    fn bytes_past_a_limit_are_refused_naming_it() {
        assert!(check_size(|| "artifact a".into(), 10, 10).is_ok());
        let refused = check_size(|| "artifact a".into(), 11, 10).unwrap_err();
        assert_eq!(refused, Rejection::TooLarge { what: "artifact a".into(), limit: 10 });
        assert_eq!(refused.to_string(), "artifact a may hold at most 10 bytes");
    }

    #[test]
    fn only_blobs_take_bytes_and_finish_once_their_bytes_are_there() {
        let running = run(RunState::Running, None);
        let mut stored = blob().apply("public/b", &running, TASK_EXPIRES, None, NOW).unwrap();
        assert!(stored.check_upload().is_ok());
        assert_eq!(stored.check_finished().unwrap_err(), Rejection::Conflict(Conflict::NotUploaded("public/b".into())));
        assert!(stored.check_writable().is_ok());
        stored.present = true;
        assert!(stored.check_finished().is_ok());
        assert_eq!(
            stored.check_writable().unwrap_err(),
            Rejection::Conflict(Conflict::AlreadyUploaded("public/b".into()))
        );
        let reference = request(
            json!({"storageType": "reference", "expires": "2026-01-02T00:00:00Z", "contentType": "text/plain", "url": "https://x"}),
        )
        .apply("public/r", &running, TASK_EXPIRES, None, NOW)
        .unwrap();
        let refused = reference.check_upload().unwrap_err().to_string();
        assert_eq!(refused, "artifact public/r is a reference, not an upload");
        assert!(reference.check_finished().is_ok(), "a reference is there at once");
    }

    #[test]
    fn parses_every_storage_type() {
        let reference = request(
            json!({"storageType": "reference", "expires": "2026-01-02T00:00:00Z", "contentType": "text/html", "url": "https://x"}),
        );
        assert_eq!(reference.kind.storage_type(), "reference");
        let link = request(json!({"storageType": "link", "expires": "2026-01-02T00:00:00Z", "artifact": "public/a"}));
        assert_eq!(link.kind, ArtifactKind::Link { artifact: "public/a".into(), content_type: None });
        let error = request(
            json!({"storageType": "error", "expires": "2026-01-02T00:00:00Z", "reason": "file-missing-on-worker", "message": "gone"}),
        );
        assert_eq!(error.kind.content_type(), "application/json");
        let object = serde_json::from_value::<ArtifactRequest>(
            json!({"storageType": "object", "expires": "2026-01-02T00:00:00Z", "contentType": "x"}),
        );
        assert!(object.is_err(), "object storage is not offered");
    }

    #[test]
    fn runs_take_artifacts_while_running_or_just_after_an_exception() {
        let running = run(RunState::Running, None);
        let created = blob().apply("public/a", &running, TASK_EXPIRES, None, NOW).unwrap();
        assert!(!created.present, "a blob is present only once uploaded");
        let late = run(RunState::Exception, Some(10 * 60 * 1000));
        assert!(blob().apply("public/a", &late, TASK_EXPIRES, None, NOW).is_ok());
        let too_late = run(RunState::Exception, Some(30 * 60 * 1000));
        assert!(matches!(blob().apply("public/a", &too_late, TASK_EXPIRES, None, NOW), Err(Rejection::Conflict(_))));
        let done = run(RunState::Completed, Some(1));
        assert!(matches!(blob().apply("public/a", &done, TASK_EXPIRES, None, NOW), Err(Rejection::Conflict(_))));
        let mut unclaimed = run(RunState::Pending, None);
        unclaimed.worker_id = None;
        assert!(matches!(blob().apply("public/a", &unclaimed, TASK_EXPIRES, None, NOW), Err(Rejection::Input(_))));
    }

    #[test]
    fn replacement_rules() {
        let running = run(RunState::Running, None);
        let reference = request(
            json!({"storageType": "reference", "expires": "2026-01-02T00:00:00Z", "contentType": "text/plain", "url": "https://live"}),
        );
        let stored = reference.clone().apply("public/log", &running, TASK_EXPIRES, None, NOW).unwrap();
        let link =
            request(json!({"storageType": "link", "expires": "2026-01-03T00:00:00Z", "artifact": "public/full"}));
        let replaced = link.apply("public/log", &running, TASK_EXPIRES, Some(&stored), NOW).unwrap();
        assert_eq!(replaced.kind.storage_type(), "link", "a reference may become a link");
        let back = reference.apply("public/log", &running, TASK_EXPIRES, Some(&replaced), NOW);
        assert!(matches!(back, Err(Rejection::Conflict(_))), "a link stays a link");

        let stored_blob = blob().apply("public/b", &running, TASK_EXPIRES, None, NOW).unwrap();
        assert!(blob().apply("public/b", &running, TASK_EXPIRES, Some(&stored_blob), NOW).is_ok(), "repeats are fine");
        let other_type =
            request(json!({"storageType": "s3", "expires": "2026-01-02T00:00:00Z", "contentType": "image/png"}));
        assert!(matches!(
            other_type.apply("public/b", &running, TASK_EXPIRES, Some(&stored_blob), NOW),
            Err(Rejection::Conflict(_))
        ));
        let shorter =
            request(json!({"storageType": "s3", "expires": "2026-01-01T12:00:00Z", "contentType": "text/plain"}));
        assert!(matches!(
            shorter.apply("public/b", &running, TASK_EXPIRES, Some(&stored_blob), NOW),
            Err(Rejection::Conflict(_))
        ));
    }

    #[test]
    fn links_are_followed_and_cycles_refused() {
        let stored = |name: &str, kind: ArtifactKind| Artifact {
            name: name.into(),
            expires: NOW,
            kind,
            present: true,
            bytes: None,
            object: None,
        };
        let lookup = |name: &str| -> Result<Option<Artifact>, ()> {
            Ok(match name {
                "a" => Some(stored("a", ArtifactKind::Link { artifact: "b".into(), content_type: None })),
                "b" => {
                    Some(stored("b", ArtifactKind::Blob { content_type: "text/plain".into(), content_length: None }))
                }
                "loop1" => Some(stored("loop1", ArtifactKind::Link { artifact: "loop2".into(), content_type: None })),
                "loop2" => Some(stored("loop2", ArtifactKind::Link { artifact: "loop1".into(), content_type: None })),
                "dangling" => {
                    Some(stored("dangling", ArtifactKind::Link { artifact: "nowhere".into(), content_type: None }))
                }
                _ => None,
            })
        };
        assert_eq!(follow_links("a", lookup).unwrap().unwrap().name, "b");
        assert!(matches!(follow_links("loop1", lookup).unwrap(), Err(Rejection::Invalid { .. })));
        assert!(matches!(follow_links("dangling", lookup).unwrap(), Err(Rejection::NotFound(_))));
    }

    #[test]
    fn the_live_log_is_the_servers_and_may_become_a_link() {
        let running = run(RunState::Running, None);
        let live = implicit_live_log(&running, TASK_EXPIRES).unwrap();
        let mut unclaimed = running.clone();
        unclaimed.worker_id = None;
        assert!(implicit_live_log(&unclaimed, TASK_EXPIRES).is_none(), "only claimed runs have one");
        assert_eq!(live.kind.storage_type(), "reference");
        let forged = request(json!({"storageType": "live-log", "expires": "2026-01-02T00:00:00Z"}));
        assert!(matches!(forged.apply("public/x", &running, TASK_EXPIRES, None, NOW), Err(Rejection::Invalid { .. })));
        let link =
            request(json!({"storageType": "link", "expires": "2026-01-02T00:00:00Z", "artifact": "public/full.log"}));
        assert!(link.apply(LIVE_LOG_NAME, &running, TASK_EXPIRES, Some(&live), NOW).is_ok());
    }

    #[test]
    fn expiry_and_names_are_checked() {
        let running = run(RunState::Running, None);
        let past = request(json!({"storageType": "s3", "expires": "2025-12-31T00:00:00Z", "contentType": "x"}));
        assert!(
            matches!(past.apply("a", &running, TASK_EXPIRES, None, NOW), Err(Rejection::Invalid { ref field, .. }) if field == "expires")
        );
        assert!(
            matches!(blob().apply("a", &running, NOW, None, NOW), Err(Rejection::Invalid { ref field, .. }) if field == "expires")
        );
        assert!(check_name("public/\u{7f}").is_err());
        assert!(check_name("").is_err());
        let bad_url = request(
            json!({"storageType": "reference", "expires": "2026-01-02T00:00:00Z", "contentType": "x", "url": "ftp://x"}),
        );
        assert!(bad_url.apply("a", &running, TASK_EXPIRES, None, NOW).is_err());
        for url in [
            "https://x/\r\nSet-Cookie: a=b".to_owned(),
            "https://x/\0".to_owned(),
            format!("https://x/{}", "a".repeat(5000)),
        ] {
            let refused = request(
                json!({"storageType": "reference", "expires": "2026-01-02T00:00:00Z", "contentType": "x", "url": url}),
            )
            .apply("a", &running, TASK_EXPIRES, None, NOW)
            .unwrap_err();
            assert!(matches!(&refused, Rejection::Invalid { field, .. } if field == "url"), "{refused}");
        }
    }
}
