//! Scopes and scope expressions, Taskcluster's: a held scope ending in `*` satisfies every
//! scope it is a prefix of; any other satisfies only itself.

use std::fmt;

use serde::Serialize;

/// Longest scope accepted anywhere (Taskcluster sets none; this keeps a hostile list small).
pub const MAX_SCOPE_LEN: usize = 4096;

/// Whether `scope` is a valid scope: printable ASCII, at most [`MAX_SCOPE_LEN`] characters.
#[must_use]
pub fn is_valid_scope(scope: &str) -> bool {
    scope.len() <= MAX_SCOPE_LEN && scope.bytes().all(|b| (0x20..=0x7e).contains(&b))
}

/// Whether the held scope `held` satisfies the required scope `required`.
#[must_use]
pub fn satisfies(held: &str, required: &str) -> bool {
    match held.strip_suffix('*') {
        Some(prefix) => required.starts_with(prefix),
        None => held == required,
    }
}

/// A normalized set of held scopes: sorted, without duplicates, without any scope that a
/// star scope of the set already satisfies.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ScopeSet {
    scopes: Vec<String>,
    #[serde(skip)]
    stars: Vec<usize>,
}

impl ScopeSet {
    /// The set holding `scopes`, normalized.
    pub fn new(scopes: impl IntoIterator<Item = String>) -> ScopeSet {
        let mut all: Vec<String> = scopes.into_iter().collect();
        all.sort_unstable();
        all.dedup();
        let stars: Vec<String> = all.iter().filter(|scope| scope.ends_with('*')).cloned().collect();
        let kept: Vec<String> =
            all.into_iter().filter(|scope| !stars.iter().any(|star| star != scope && satisfies(star, scope))).collect();
        ScopeSet::from_normalized(kept)
    }

    fn from_normalized(scopes: Vec<String>) -> ScopeSet {
        let stars = scopes.iter().enumerate().filter(|(_, s)| s.ends_with('*')).map(|(i, _)| i).collect();
        ScopeSet { scopes, stars }
    }

    /// Whether some held scope satisfies `required`.
    #[must_use]
    pub fn satisfies(&self, required: &str) -> bool {
        self.scopes.binary_search_by(|held| held.as_str().cmp(required)).is_ok()
            || self.stars.iter().any(|&i| satisfies(&self.scopes[i], required))
    }

    /// Whether the set holds `*`, and so satisfies every scope.
    #[must_use]
    pub fn holds_everything(&self) -> bool {
        self.scopes.first().is_some_and(|first| first == "*")
    }

    /// Whether every scope of `required` is satisfied.
    #[must_use]
    pub fn satisfies_all<'a>(&self, required: impl IntoIterator<Item = &'a str>) -> bool {
        required.into_iter().all(|scope| self.satisfies(scope))
    }

    /// The scopes, in order.
    #[must_use]
    pub fn as_slice(&self) -> &[String] {
        &self.scopes
    }
}

/// A scope expression: a scope, or all of / any of several expressions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum ScopeExpr {
    /// Every one of them.
    AllOf(Vec<ScopeExpr>),
    /// At least one of them.
    AnyOf(Vec<ScopeExpr>),
    /// One scope.
    #[serde(untagged)]
    Scope(String),
}

impl ScopeExpr {
    /// Whether `held` satisfies the expression.
    #[must_use]
    pub fn satisfied_by(&self, held: &ScopeSet) -> bool {
        match self {
            ScopeExpr::Scope(scope) => held.satisfies(scope),
            ScopeExpr::AllOf(all) => all.iter().all(|expr| expr.satisfied_by(held)),
            ScopeExpr::AnyOf(any) => any.iter().any(|expr| expr.satisfied_by(held)),
        }
    }

    /// What of the expression `held` lacks, or `None` when it is satisfied: the scopes not
    /// held, the alternatives of which none is.
    #[must_use]
    pub fn unsatisfied(&self, held: &ScopeSet) -> Option<ScopeExpr> {
        match self {
            ScopeExpr::Scope(scope) => (!held.satisfies(scope)).then(|| self.clone()),
            ScopeExpr::AllOf(all) => {
                // Nested AllOfs read as one list, each missing expression named once.
                let mut missing: Vec<ScopeExpr> = Vec::new();
                for lacking in all.iter().filter_map(|expr| expr.unsatisfied(held)) {
                    let parts = match lacking {
                        ScopeExpr::AllOf(parts) => parts,
                        other => vec![other],
                    };
                    for part in parts {
                        if !missing.contains(&part) {
                            missing.push(part);
                        }
                    }
                }
                match missing.len() {
                    0 => None,
                    1 => missing.pop(),
                    _ => Some(ScopeExpr::AllOf(missing)),
                }
            }
            ScopeExpr::AnyOf(any) => {
                if any.iter().any(|expr| expr.satisfied_by(held)) {
                    return None;
                }
                let mut missing: Vec<ScopeExpr> = any.iter().filter_map(|expr| expr.unsatisfied(held)).collect();
                match missing.len() {
                    1 => missing.pop(),
                    _ => Some(ScopeExpr::AnyOf(missing)),
                }
            }
        }
    }

    /// Every scope an `AllOf` of plain scopes.
    #[must_use]
    pub fn all_of(scopes: impl IntoIterator<Item = String>) -> ScopeExpr {
        ScopeExpr::AllOf(scopes.into_iter().map(ScopeExpr::Scope).collect())
    }
}

impl fmt::Display for ScopeExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match serde_json::to_string(self) {
            Ok(text) => f.write_str(&text),
            Err(_) => f.write_str("?"),
        }
    }
}

/// Checks a list of scopes given as input, naming the field of the first invalid one.
///
/// # Errors
/// A [`crate::Rejection::Invalid`] naming `field[i]`.
pub fn check_scopes(field: &str, scopes: &[String]) -> Result<(), crate::Rejection> {
    for (idx, scope) in scopes.iter().enumerate() {
        if !is_valid_scope(scope) {
            return Err(crate::Rejection::invalid(
                format!("{field}[{idx}]"),
                format!("must be printable ASCII of at most {MAX_SCOPE_LEN} characters"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(scopes: &[&str]) -> ScopeSet {
        ScopeSet::new(scopes.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn a_star_satisfies_its_prefix_only() {
        assert!(satisfies("queue:*", "queue:create-task:x"));
        assert!(satisfies("queue:*", "queue:"));
        assert!(!satisfies("queue:*", "queu"));
        assert!(satisfies("*", "anything"));
        assert!(!satisfies("queue:a", "queue:ab"));
        assert!(satisfies("queue:a", "queue:a"));
        // A star in the middle is a character like any other.
        assert!(!satisfies("a*b", "axb"));
        assert!(satisfies("a*b", "a*b"));
    }

    #[test]
    fn normalizing_drops_what_a_star_covers() {
        let held = set(&["b", "a:x", "a:*", "a:y*", "c", "b"]);
        assert_eq!(held.as_slice(), ["a:*", "b", "c"]);
        assert!(held.satisfies("a:anything"));
        assert!(held.satisfies("b"));
        assert!(!held.satisfies("d"));
        assert_eq!(set(&["*", "x"]).as_slice(), ["*"]);
        assert!(set(&["*", "x"]).holds_everything() && !held.holds_everything());
    }

    #[test]
    fn expressions_say_what_is_missing() {
        let held = set(&["queue:claim-work:p/w"]);
        let expr = ScopeExpr::AllOf(vec![
            ScopeExpr::Scope("queue:claim-work:p/w".into()),
            ScopeExpr::Scope("queue:worker-id:g/w".into()),
        ]);
        assert!(!expr.satisfied_by(&held));
        assert_eq!(expr.unsatisfied(&held), Some(ScopeExpr::Scope("queue:worker-id:g/w".into())));
        let any = ScopeExpr::AnyOf(vec![ScopeExpr::Scope("x".into()), ScopeExpr::Scope("queue:claim-work:p/w".into())]);
        assert_eq!(any.unsatisfied(&held), None);
        assert_eq!(
            ScopeExpr::AllOf(vec![ScopeExpr::Scope("a".into()), ScopeExpr::Scope("b".into())]).to_string(),
            r#"{"AllOf":["a","b"]}"#
        );
        assert!(ScopeExpr::AllOf(vec![]).satisfied_by(&ScopeSet::default()));
        let nested = ScopeExpr::AllOf(vec![
            ScopeExpr::AllOf(vec![ScopeExpr::Scope("a".into()), ScopeExpr::Scope("b".into())]),
            ScopeExpr::AllOf(vec![ScopeExpr::Scope("a".into())]),
        ]);
        assert_eq!(nested.unsatisfied(&ScopeSet::default()).unwrap().to_string(), r#"{"AllOf":["a","b"]}"#);
    }

    #[test]
    fn scopes_are_printable_ascii() {
        assert!(is_valid_scope("queue:route:index.*"));
        assert!(!is_valid_scope("tab\there"));
        assert!(!is_valid_scope("caf\u{e9}"));
        assert!(
            check_scopes("scopes", &["ok".into(), "bad\n".into()]).unwrap_err().to_string().starts_with("scopes[1]")
        );
    }
}
