//! `features.chainOfTrust`, as generic-worker has it: after the artifacts, a record of the
//! run (the task's definition, who ran it, each artifact's SHA-256) as
//! `public/chain-of-trust.json`, and its Ed25519 signature by the worker's key as
//! `public/chain-of-trust.json.sig`, so a release or signing task can verify what it takes.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use base64::Engine as _;
use ring::signature::{Ed25519KeyPair, KeyPair as _};
use serde_json::{Value, json};

/// The record's name.
pub(crate) const CERTIFICATE: &str = "public/chain-of-trust.json";
/// Its signature's name.
pub(crate) const SIGNATURE: &str = "public/chain-of-trust.json.sig";

/// The worker's Ed25519 signing key, read from a file as generic-worker keeps it (the
/// base64 of the key's 32-byte seed).
pub struct SigningKey(Ed25519KeyPair);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({})", self.public())
    }
}

impl SigningKey {
    /// Reads the key at `path`, which only its owner may read (a task must not).
    ///
    /// # Errors
    /// The file is missing, readable by others, or holds no key.
    pub fn read(path: &Path) -> Result<SigningKey, String> {
        let shown = path.display();
        let metadata = std::fs::metadata(path).map_err(|err| format!("{shown}: {err}"))?;
        if metadata.mode() & 0o077 != 0 {
            return Err(format!(
                "{shown} may be read by others than its owner (mode {:o}): `chmod 600 {shown}`",
                metadata.mode() & 0o777
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|err| format!("{shown}: {err}"))?;
        let seed = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .ok()
            .filter(|seed| seed.len() == 32)
            .ok_or_else(|| format!("{shown} does not hold an Ed25519 key (the base64 of a 32-byte seed)"))?;
        Ed25519KeyPair::from_seed_unchecked(&seed)
            .map(SigningKey)
            .map_err(|_| format!("{shown} does not hold a valid Ed25519 seed"))
    }

    /// A new key, written to `path` (which must not exist) readable by its owner alone.
    ///
    /// # Errors
    /// The file exists or cannot be written.
    pub fn create(path: &Path) -> Result<SigningKey, String> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let seed: [u8; 32] = ring::rand::generate(&ring::rand::SystemRandom::new())
            .map_err(|_| "no randomness for a key".to_owned())?
            .expose();
        let key = Ed25519KeyPair::from_seed_unchecked(&seed).map_err(|_| "a key from its seed".to_owned())?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|err| format!("{}: {err}", path.display()))?;
        writeln!(file, "{}", base64::engine::general_purpose::STANDARD.encode(seed))
            .map_err(|err| format!("{}: {err}", path.display()))?;
        Ok(SigningKey(key))
    }

    /// The public key, base64 (what a verifier is given).
    #[must_use]
    pub fn public(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.0.public_key().as_ref())
    }

    /// The detached signature of `bytes` (64 bytes).
    #[must_use]
    pub fn sign(&self, bytes: &[u8]) -> Vec<u8> {
        self.0.sign(bytes).as_ref().to_vec()
    }
}

/// Who ran the run, for its record.
pub(crate) struct Runner<'a> {
    pub(crate) task_id: &'a str,
    pub(crate) run_id: u32,
    pub(crate) worker_group: &'a str,
    pub(crate) worker_id: &'a str,
}

/// The record of a run (`chainOfTrustVersion` 1, generic-worker's fields), pretty-printed
/// as generic-worker writes it: `digests` maps each artifact's name to its SHA-256 (hex).
pub(crate) fn certificate(task: &Value, runner: &Runner<'_>, digests: &BTreeMap<String, String>) -> Vec<u8> {
    let artifacts: serde_json::Map<String, Value> =
        digests.iter().map(|(name, sha256)| (name.clone(), json!({ "sha256": sha256 }))).collect();
    let record = json!({
        "chainOfTrustVersion": 1,
        "artifacts": artifacts,
        "task": task,
        "taskId": runner.task_id,
        "runId": runner.run_id,
        "workerGroup": runner.worker_group,
        "workerId": runner.worker_id,
        // A worker outside a cloud has no instance or region to state.
        "environment": {"privateIpAddress": "", "instanceId": "", "instanceType": "", "region": ""},
    });
    serde_json::to_vec_pretty(&record).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use ring::signature::{ED25519, UnparsedPublicKey};

    use super::*;

    #[test]
    fn a_key_made_here_signs_what_its_public_key_verifies_and_others_may_not_read_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        let made = SigningKey::create(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert!(SigningKey::create(&path).is_err(), "an existing key is never overwritten");
        let key = SigningKey::read(&path).unwrap();
        assert_eq!(key.public(), made.public());

        let digests = BTreeMap::from([("public/build/app".to_owned(), "ab".repeat(32))]);
        let runner = Runner { task_id: "T", run_id: 1, worker_group: "g", worker_id: "w" };
        let record = certificate(&json!({"payload": {}}), &runner, &digests);
        let parsed: Value = serde_json::from_slice(&record).unwrap();
        assert_eq!(parsed["artifacts"]["public/build/app"]["sha256"], "ab".repeat(32));
        assert_eq!((parsed["chainOfTrustVersion"].clone(), parsed["runId"].clone()), (json!(1), json!(1)));
        let public = base64::engine::general_purpose::STANDARD.decode(key.public()).unwrap();
        let signature = key.sign(&record);
        assert!(UnparsedPublicKey::new(&ED25519, &public).verify(&record, &signature).is_ok());
        assert!(UnparsedPublicKey::new(&ED25519, &public).verify(b"another record", &signature).is_err());

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(SigningKey::read(&path).unwrap_err().contains("chmod 600"));
        std::fs::write(dir.path().join("bad"), "not a key").unwrap();
        std::fs::set_permissions(dir.path().join("bad"), std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(SigningKey::read(&dir.path().join("bad")).unwrap_err().contains("Ed25519"));
    }
}
