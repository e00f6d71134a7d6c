//! Who may do what: scopes and their expressions, roles, clients, temporary credentials,
//! and the rule that turns presented credentials into the scopes a request holds.
//! Checking a Hawk signature is the HTTP face's; everything it then decides is here.

pub mod certificate;
pub mod client;
pub mod roles;
pub mod scope;

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

pub use certificate::{Certificate, CertificateError};
pub use roles::Roles;
pub use scope::{ScopeExpr, ScopeSet};

use crate::TaskId;

/// The client holding `*` whose access token the server's settings give.
pub const ROOT_CLIENT_ID: &str = "root";
/// The server's own client: it signs the credentials handed to workers and the URLs it gives.
pub const QUEUE_CLIENT_ID: &str = "static/shoal/queue";
/// The role every caller assumes, signed in or not.
pub const ANONYMOUS_ROLE: &str = "anonymous";
/// Hawk timestamps may be this far from the server's clock (Taskcluster's 15 minutes).
pub const TIMESTAMP_SKEW_SECS: u64 = 15 * 60;

/// Why a request's credentials are refused (401); each message says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthFailure {
    /// An `Authorization` header that is not Hawk's.
    #[error(
        "Authorization header: only the Hawk scheme is supported (Authorization: Hawk id=\"...\", ts=\"...\", nonce=\"...\", mac=\"...\")"
    )]
    NotHawk,
    /// A Hawk header or bewit that cannot be parsed.
    #[error("{0}")]
    Malformed(String),
    /// No such client.
    #[error("client `{0}` not found")]
    UnknownClient(String),
    /// The client is disabled.
    #[error("client `{0}` is disabled")]
    Disabled(String),
    /// The client (or its certificate) has expired.
    #[error("client `{0}` has expired")]
    Expired(String),
    /// The MAC does not match: a wrong key, or a request other than the one signed.
    #[error(
        "Bad mac: the request's signature does not match (wrong accessToken, or the method, URL, host or port differ from what was signed)"
    )]
    BadMac,
    /// The timestamp is too far from the server's clock.
    #[error("Stale timestamp: the request's ts is more than 15 minutes from the server's clock")]
    StaleTimestamp,
    /// The same nonce again within the skew window.
    #[error("Replayed request: this nonce was already used")]
    Replayed,
    /// The body does not match the signed payload hash.
    #[error("Bad payload hash: the body differs from the one signed")]
    BadPayloadHash,
    /// A bewit past its expiry.
    #[error("Access expired: the signed URL's bewit has expired")]
    BewitExpired,
    /// `ext` that is not base64 JSON of the expected shape.
    #[error("Failed to parse ext: {0}")]
    Ext(String),
    /// A bad temporary-credentials certificate.
    #[error(transparent)]
    Certificate(#[from] CertificateError),
    /// A signed URL used for another method than GET or HEAD (Hawk's rule), save the
    /// server's own upload URLs.
    #[error("bewit: a signed URL may be used only for GET and HEAD requests")]
    BewitMethod,
    /// A Hawk header naming one attribute twice.
    #[error("Hawk header: attribute `{0}` is given more than once")]
    RepeatedAttribute(String),
    /// `authorizedScopes` beyond the credentials' scopes.
    #[error("Supplied credentials do not satisfy authorizedScopes: {0}")]
    AuthorizedScopes(ScopeExpr),
    /// A run's credentials used, beyond the run's own calls, after the run ended.
    #[error("client `{0}`: the run these credentials were issued for is no longer running")]
    RunEnded(String),
}

/// What a request's Hawk `ext` may carry.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ext {
    /// Temporary credentials.
    #[serde(default, deserialize_with = "certificate_or_string")]
    pub certificate: Option<Certificate>,
    /// A restriction of the credentials' scopes.
    #[serde(default)]
    pub authorized_scopes: Option<Vec<String>>,
}

fn certificate_or_string<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<Certificate>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Text(String),
        Object(Certificate),
    }
    match Option::<Either>::deserialize(de)? {
        None => Ok(None),
        Some(Either::Object(cert)) => Ok(Some(cert)),
        Some(Either::Text(text)) => serde_json::from_str(&text).map(Some).map_err(serde::de::Error::custom),
    }
}

impl Ext {
    /// Parses Hawk's `ext` attribute: base64 of a JSON object.
    ///
    /// # Errors
    /// [`AuthFailure::Ext`] naming the problem.
    pub fn parse(ext: &str) -> Result<Ext, AuthFailure> {
        let bytes = STANDARD.decode(ext.trim()).map_err(|_| AuthFailure::Ext("not base64".into()))?;
        serde_json::from_slice(&bytes).map_err(|err| AuthFailure::Ext(err.to_string()))
    }
}

/// A client as authentication needs it.
#[derive(Clone)]
pub struct KnownClient {
    /// Its Hawk key.
    pub access_token: String,
    /// Its scopes, expanded through roles, with the anonymous role's.
    pub scopes: Arc<ScopeSet>,
    /// Until when it works (ms since the epoch).
    pub expires: i64,
    /// Whether it is disabled.
    pub disabled: bool,
}

/// Credentials that passed every check but the signature: the key to check it with and the
/// scopes the request holds.
#[derive(Clone)]
pub struct Principal {
    /// The client id the request was signed under.
    pub client_id: String,
    /// The key the signature must verify with.
    pub key: String,
    /// What the request may do.
    pub scopes: Arc<ScopeSet>,
}

// Keys stay out of `Debug`, and so out of any log.
impl std::fmt::Debug for KnownClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KnownClient").field("scopes", &self.scopes).field("disabled", &self.disabled).finish()
    }
}

impl std::fmt::Debug for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Principal").field("client_id", &self.client_id).field("scopes", &self.scopes).finish()
    }
}

/// The credentials presented as `name` (with `ext`) stand for, at `now` (ms since the
/// epoch): `lookup` finds stored clients; `roles` expands what certificates and
/// `authorizedScopes` name.
///
/// # Errors
/// The first rule the credentials break.
pub fn principal<'a>(
    name: &str,
    ext: Option<&Ext>,
    lookup: impl Fn(&str) -> Option<&'a KnownClient>,
    roles: &Roles,
    now: i64,
) -> Result<Principal, AuthFailure> {
    let certificate = ext.and_then(|ext| ext.certificate.as_ref());
    let issuer = certificate.and_then(|cert| cert.issuer.as_deref()).unwrap_or(name);
    let client = lookup(issuer).ok_or_else(|| AuthFailure::UnknownClient(issuer.to_owned()))?;
    if client.disabled {
        return Err(AuthFailure::Disabled(issuer.to_owned()));
    }
    if client.expires < now {
        return Err(AuthFailure::Expired(issuer.to_owned()));
    }
    let mut key = client.access_token.clone();
    let mut scopes = Arc::clone(&client.scopes);
    if let Some(cert) = certificate {
        let granted = certificate::check(cert, name, issuer, &client.access_token, &client.scopes, now)?;
        key = granted.access_token;
        scopes = Arc::new(expand_with_anonymous(roles, cert.scopes.iter().cloned()));
    }
    if let Some(authorized) = ext.and_then(|ext| ext.authorized_scopes.as_ref()) {
        scope::check_scopes("authorizedScopes", authorized)
            .map_err(|err| AuthFailure::Ext(format!("authorizedScopes must be valid scopes ({err})")))?;
        let wanted = ScopeExpr::all_of(authorized.iter().cloned());
        if let Some(missing) = wanted.unsatisfied(&scopes) {
            return Err(AuthFailure::AuthorizedScopes(missing));
        }
        scopes = Arc::new(expand_with_anonymous(roles, authorized.iter().cloned()));
    }
    Ok(Principal { client_id: name.to_owned(), key, scopes })
}

/// `scopes` with the anonymous role's, expanded (a runaway expansion keeps the unexpanded
/// scopes: role changes that would cause one are refused, so only a certificate's own
/// scopes can, and they then grant less, never more).
#[must_use]
pub fn expand_with_anonymous(roles: &Roles, scopes: impl Iterator<Item = String>) -> ScopeSet {
    let scopes: Vec<String> = scopes.chain(std::iter::once(format!("assume:{ANONYMOUS_ROLE}"))).collect();
    roles.expand(scopes.iter().cloned()).unwrap_or_else(|_| ScopeSet::new(scopes))
}

/// The scopes of the credentials a claim hands a worker for one run: renew the claim,
/// resolve the run, create its artifacts, and what the task itself was given.
#[must_use]
pub fn run_scopes(task_id: TaskId, run_id: u32, task_scopes: &[String]) -> Vec<String> {
    let mut scopes = vec![
        format!("queue:reclaim-task:{task_id}/{run_id}"),
        format!("queue:resolve-task:{task_id}/{run_id}"),
        format!("queue:create-artifact:{task_id}/{run_id}"),
    ];
    scopes.extend(task_scopes.iter().cloned());
    scopes
}

/// The client id of the credentials a claim hands out (Taskcluster's shape).
#[must_use]
pub fn run_client_id(task_id: TaskId, run_id: u32, worker_group: &str, worker_id: &str, until_secs: i64) -> String {
    format!("task-client/{task_id}/{run_id}/on/{worker_group}/{worker_id}/until/{until_secs}")
}

/// The run a client id of [`run_client_id`]'s shape names.
#[must_use]
pub fn run_of_client_id(client_id: &str) -> Option<(TaskId, u32)> {
    let mut parts = client_id.strip_prefix("task-client/")?.splitn(3, '/');
    let task_id = TaskId::parse(parts.next()?)?;
    let run_id = parts.next()?.parse().ok()?;
    parts.next()?.starts_with("on/").then_some((task_id, run_id))
}

/// The calls a run's own credentials make for the run itself (each refuses a run that is not
/// running on its own); any other call with them is allowed only while the run is running.
pub const RUN_OWN_CALLS: [&str; 8] = [
    "reclaimTask",
    "reportCompleted",
    "reportFailed",
    "reportException",
    "createArtifact",
    "finishArtifact",
    "putBlob",
    "appendLog",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn known(token: &str, scopes: &[&str]) -> KnownClient {
        KnownClient {
            access_token: token.into(),
            scopes: Arc::new(ScopeSet::new(scopes.iter().map(|s| (*s).to_owned()))),
            expires: i64::MAX,
            disabled: false,
        }
    }

    #[test]
    fn a_certificate_replaces_the_key_and_the_scopes() {
        let issuer = known("secret", &["queue:*", "auth:create-client:*"]);
        let lookup = |id: &str| (id == "issuer").then_some(&issuer);
        let seed = "s".repeat(44);
        let (cert, token) =
            certificate::issue("issuer", "secret", Some("temp"), vec!["queue:a".into()], (0, 10_000), seed);
        let ext = Ext { certificate: Some(cert), authorized_scopes: None };
        let found = principal("temp", Some(&ext), lookup, &Roles::default(), 5_000).unwrap();
        assert_eq!(found.key, token);
        assert_eq!(found.client_id, "temp");
        assert!(found.scopes.satisfies("queue:a") && !found.scopes.satisfies("queue:b"));
    }

    #[test]
    fn a_runs_client_id_names_its_run() {
        let task_id = TaskId::parse("fN1ySwQHT6u1i1nTHvyBuA").unwrap();
        let client_id = run_client_id(task_id, 3, "group", "worker", 1_700_000_000);
        assert_eq!(run_of_client_id(&client_id), Some((task_id, 3)));
        assert_eq!(run_of_client_id("task-client/fN1ySwQHT6u1i1nTHvyBuA/3"), None);
        assert_eq!(run_of_client_id("task-client/not-an-id/3/on/g/w/until/1"), None);
        assert_eq!(run_of_client_id("root"), None);
    }

    #[test]
    fn authorized_scopes_restrict_and_must_be_held() {
        let client = known("t", &["queue:a", "queue:b"]);
        let lookup = |id: &str| (id == "c").then_some(&client);
        let ext = Ext { certificate: None, authorized_scopes: Some(vec!["queue:a".into()]) };
        let found = principal("c", Some(&ext), lookup, &Roles::default(), 0).unwrap();
        assert!(found.scopes.satisfies("queue:a") && !found.scopes.satisfies("queue:b"));
        let beyond = Ext { certificate: None, authorized_scopes: Some(vec!["queue:c".into()]) };
        assert!(matches!(
            principal("c", Some(&beyond), lookup, &Roles::default(), 0),
            Err(AuthFailure::AuthorizedScopes(_))
        ));
    }

    #[test]
    fn unknown_disabled_and_expired_clients_are_refused() {
        let mut client = known("t", &[]);
        assert!(matches!(principal("x", None, |_| None, &Roles::default(), 0), Err(AuthFailure::UnknownClient(_))));
        client.disabled = true;
        assert!(matches!(principal("c", None, |_| Some(&client), &Roles::default(), 0), Err(AuthFailure::Disabled(_))));
        client.disabled = false;
        client.expires = 10;
        assert!(matches!(principal("c", None, |_| Some(&client), &Roles::default(), 11), Err(AuthFailure::Expired(_))));
    }

    #[test]
    fn ext_is_base64_json_with_a_certificate_as_object_or_text() {
        let cert = r#"{"version":1,"scopes":[],"start":0,"expiry":1,"seed":"s","signature":"x"}"#;
        let as_text = serde_json::json!({ "certificate": cert }).to_string();
        let ext = Ext::parse(&STANDARD.encode(as_text)).unwrap();
        assert_eq!(ext.certificate.unwrap().expiry, 1);
        assert!(matches!(Ext::parse("!!"), Err(AuthFailure::Ext(_))));
    }
}
