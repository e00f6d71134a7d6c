//! Why the engine refuses a command: the expected, business-level outcomes.

/// A command the rules refuse; each variant maps to one HTTP status at the API edge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// A field breaks a rule of the schema (400 InputValidationError).
    #[error("{field}: {rule}")]
    Invalid {
        /// The JSON path of the offending field, e.g. `metadata.name`.
        field: String,
        /// The rule it breaks, e.g. `must be at most 255 characters`.
        rule: String,
    },
    /// The input is well-formed but refers to things that do not fit (400 InputError).
    #[error("{0}")]
    Input(String),
    /// The command conflicts with the current state (409 RequestConflict).
    #[error("{0}")]
    Conflict(String),
    /// The command names something that does not exist (404 ResourceNotFound).
    #[error("{0}")]
    NotFound(String),
}

impl Rejection {
    /// A field that breaks a rule.
    pub fn invalid(field: impl Into<String>, rule: impl Into<String>) -> Rejection {
        Rejection::Invalid { field: field.into(), rule: rule.into() }
    }
}
