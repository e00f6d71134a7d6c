//! A task's secrets (Swarming's secret bytes): a JSON object kept apart from the definition
//! and handed only to the worker that claims a run.
//!
//! `Secrets` never prints its content (`Debug` is redacted) and is never part of a serialized
//! definition; the definition says only `hasSecrets: true`.

use serde::Serialize;
use serde_json::value::RawValue;

use crate::Rejection;

/// Largest serialized secrets object, in bytes (Swarming's limit for secret bytes).
pub const MAX_SECRETS_BYTES: usize = 20 * 1024;

/// A task's secrets: a JSON object, compact.
#[derive(Clone, PartialEq, Eq)]
pub struct Secrets(String);

impl Secrets {
    /// Checks a definition's `secrets`: a JSON object of at most [`MAX_SECRETS_BYTES`].
    ///
    /// # Errors
    /// [`Rejection::Invalid`] naming `secrets` (never quoting it).
    pub fn parse(value: &serde_json::Value) -> Result<Secrets, Rejection> {
        if !value.is_object() {
            return Err(Rejection::invalid("secrets", "must be a JSON object"));
        }
        let text = value.to_string();
        if text.len() > MAX_SECRETS_BYTES {
            return Err(Rejection::invalid("secrets", format!("must be at most {MAX_SECRETS_BYTES} bytes serialized")));
        }
        Ok(Secrets(text))
    }

    /// Secrets as the store kept them.
    #[must_use]
    pub fn from_stored(text: String) -> Secrets {
        Secrets(text)
    }

    /// The serialized object.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secrets(<redacted>)")
    }
}

impl Serialize for Secrets {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw: &RawValue = serde_json::from_str(&self.0).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for Secrets {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Secrets, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Ok(Secrets(value.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn secrets_are_objects_within_the_limit_and_never_printed() {
        let secrets = Secrets::parse(&json!({"token": "s3cr3t"})).unwrap();
        assert_eq!(format!("{secrets:?}"), "Secrets(<redacted>)");
        assert_eq!(serde_json::to_value(&secrets).unwrap(), json!({"token": "s3cr3t"}));
        let err = Secrets::parse(&json!("s3cr3t")).unwrap_err();
        assert!(!err.to_string().contains("s3cr3t"), "{err}");
        let big = json!({"x": "y".repeat(MAX_SECRETS_BYTES)});
        assert!(Secrets::parse(&big).unwrap_err().to_string().contains("secrets"));
    }
}
