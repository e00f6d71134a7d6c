//! Roles: a held scope `assume:<roleId>` grants the role's scopes. A role whose id ends in
//! `*` is granted to every `assume:` scope with its prefix, and `<..>` in its scopes stands
//! for the rest of that scope. A held star scope grants every role it could assume.

use std::collections::{BTreeMap, HashSet};

use crate::auth::scope::ScopeSet;

/// The prefix of role-assuming scopes.
pub const ASSUME: &str = "assume:";
/// Most scopes one expansion may reach; a set of roles whose expansion goes beyond is refused.
pub const MAX_EXPANDED: usize = 10_000;
/// Most bytes the scopes of one expansion may hold together: with [`MAX_EXPANDED`], what
/// bounds the work of one expansion (scopes that grow by a few characters each step would
/// otherwise cost the square of their count).
pub const MAX_EXPANDED_BYTES: usize = 1024 * 1024;

/// A concrete parameter the write-time check tries parameterized roles with.
const PROBE: &str = "probe";

/// Why roles cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpansionError {
    /// Parameterized roles that keep producing new scopes.
    #[error(
        "the roles expand to more than {MAX_EXPANDED} scopes or {MAX_EXPANDED_BYTES} bytes (parameterized roles \
         that assume each other?)"
    )]
    TooLarge,
}

/// Every role's scopes, ready to expand held scopes through.
#[derive(Debug, Clone, Default)]
pub struct Roles {
    /// Role id (without a trailing `*` for parameterized roles) to (parameterized, scopes).
    roles: BTreeMap<String, (bool, Vec<String>)>,
}

impl Roles {
    /// The roles `(roleId, scopes)`.
    pub fn new(roles: impl IntoIterator<Item = (String, Vec<String>)>) -> Roles {
        let roles = roles
            .into_iter()
            .map(|(id, scopes)| match id.strip_suffix('*') {
                Some(prefix) => (prefix.to_owned(), (true, scopes)),
                None => (id, (false, scopes)),
            })
            .collect();
        Roles { roles }
    }

    /// `scopes` with every scope their roles grant, transitively.
    ///
    /// # Errors
    /// [`ExpansionError::TooLarge`] when the expansion does not end within [`MAX_EXPANDED`].
    pub fn expand(&self, scopes: impl IntoIterator<Item = String>) -> Result<ScopeSet, ExpansionError> {
        let mut seen: HashSet<String> = HashSet::new();
        let mut work: Vec<String> = scopes.into_iter().collect();
        let mut bytes = 0;
        while let Some(scope) = work.pop() {
            if seen.contains(&scope) {
                continue;
            }
            bytes += scope.len();
            if seen.len() >= MAX_EXPANDED || bytes > MAX_EXPANDED_BYTES {
                return Err(ExpansionError::TooLarge);
            }
            self.granted(&scope, &mut |granted| {
                if !seen.contains(&granted) {
                    work.push(granted);
                }
            });
            seen.insert(scope);
        }
        Ok(ScopeSet::new(seen))
    }

    /// Checks that every role's expansion ends: each role as assumed, and each parameterized
    /// role also with concrete parameters (a probe, and the ones that lead its scopes into
    /// other roles), since `assume:<prefix>*` cuts what follows `<..>` and so never shows a
    /// scope that grows after its parameter.
    ///
    /// # Errors
    /// The role id whose expansion runs away, and why.
    pub fn check_expansions_end(&self) -> Result<(), (String, ExpansionError)> {
        for (id, (parameterized, scopes)) in &self.roles {
            let role_id = if *parameterized { format!("{id}*") } else { id.clone() };
            let mut tries = vec![format!("{ASSUME}{role_id}")];
            if *parameterized {
                tries.push(format!("{ASSUME}{id}{PROBE}"));
                // A scope `assume:T<..>` enters every role whose id starts with T when the
                // parameter spells the rest of that id.
                for template in scopes.iter().filter_map(|scope| scope.strip_prefix(ASSUME)) {
                    let Some(at) = template.find("<..>") else { continue };
                    let entered = &template[..at];
                    for other in self.roles.keys().filter_map(|other| other.strip_prefix(entered)) {
                        tries.push(format!("{ASSUME}{id}{other}{PROBE}"));
                    }
                }
            }
            for scope in tries {
                self.expand([scope]).map_err(|err| (role_id.clone(), err))?;
            }
        }
        Ok(())
    }

    /// Calls `grant` with each scope the roles that `held` assumes grant directly.
    fn granted(&self, held: &str, grant: &mut impl FnMut(String)) {
        // What of a role id `held` covers: an exact id, or (star) every id with a prefix.
        let (text, star) = match held.strip_suffix('*') {
            Some(prefix) => (prefix, true),
            None => (held, false),
        };
        let wanted: &str = if let Some(rest) = text.strip_prefix(ASSUME) {
            rest
        } else if star && ASSUME.starts_with(text) {
            ""
        } else {
            return;
        };
        for (id, (parameterized, scopes)) in &self.roles {
            let parameter = match (star, *parameterized) {
                // `assume:X` takes role `X`, and role `P*` when X starts with P.
                (false, false) => (wanted == id).then(String::new),
                (false, true) => wanted.strip_prefix(id.as_str()).map(str::to_owned),
                // `assume:X*` takes every role whose id starts with X, and role `P*` when X
                // starts with P (the parameter is then the rest of X, and a star).
                (true, false) => id.starts_with(wanted).then(String::new),
                (true, true) => {
                    if let Some(rest) = wanted.strip_prefix(id.as_str()) {
                        Some(format!("{rest}*"))
                    } else {
                        id.starts_with(wanted).then(|| "*".to_owned())
                    }
                }
            };
            if let Some(parameter) = parameter {
                for scope in scopes {
                    grant(substitute(scope, &parameter));
                }
            }
        }
    }
}

/// A role's scope with `<..>` replaced by `parameter`; a parameter ending in `*` makes
/// whatever followed `<..>` redundant, so it is cut.
fn substitute(scope: &str, parameter: &str) -> String {
    match scope.find("<..>") {
        None => scope.to_owned(),
        Some(at) if parameter.ends_with('*') => format!("{}{parameter}", &scope[..at]),
        Some(at) => format!("{}{parameter}{}", &scope[..at], &scope[at + 4..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles(list: &[(&str, &[&str])]) -> Roles {
        Roles::new(list.iter().map(|(id, scopes)| ((*id).to_owned(), scopes.iter().map(|s| (*s).to_owned()).collect())))
    }

    fn expand(roles: &Roles, scopes: &[&str]) -> Vec<String> {
        roles.expand(scopes.iter().map(|s| (*s).to_owned())).unwrap().as_slice().to_vec()
    }

    #[test]
    fn assume_grants_a_role_transitively() {
        let roles = roles(&[("a", &["x", "assume:b"]), ("b", &["y"]), ("c", &["z"])]);
        assert_eq!(expand(&roles, &["assume:a"]), ["assume:a", "assume:b", "x", "y"]);
        assert_eq!(expand(&roles, &["other"]), ["other"]);
    }

    #[test]
    fn cycles_end() {
        let roles = roles(&[("a", &["assume:b"]), ("b", &["assume:a", "q"])]);
        assert_eq!(expand(&roles, &["assume:a"]), ["assume:a", "assume:b", "q"]);
    }

    #[test]
    fn parameterized_roles_take_the_rest_of_the_scope() {
        let roles = roles(&[("repo:*", &["secrets:get:<..>/token", "queue:route:<..>"])]);
        assert_eq!(
            expand(&roles, &["assume:repo:github.com/org"]),
            ["assume:repo:github.com/org", "queue:route:github.com/org", "secrets:get:github.com/org/token"]
        );
        // A star parameter makes the rest of the scope redundant.
        assert_eq!(expand(&roles, &["assume:repo:gh*"]), ["assume:repo:gh*", "queue:route:gh*", "secrets:get:gh*"]);
    }

    #[test]
    fn star_scopes_take_every_role_they_cover() {
        let roles = roles(&[("team:a", &["x"]), ("team:b", &["y"]), ("other", &["z"])]);
        assert_eq!(expand(&roles, &["assume:team:*"]), ["assume:team:*", "x", "y"]);
        assert_eq!(expand(&roles, &["*"]), ["*"]);
        let everything = roles.expand(["assume:*".to_owned()]).unwrap();
        assert!(everything.satisfies("z") && everything.satisfies("x"));
    }

    #[test]
    fn runaway_parameterized_roles_are_refused() {
        let roles = roles(&[("a*", &["assume:ab<..>"])]);
        assert_eq!(roles.expand(["assume:ax".to_owned()]), Err(ExpansionError::TooLarge));
        assert_eq!(roles.check_expansions_end(), Err(("a*".to_owned(), ExpansionError::TooLarge)));
    }

    #[test]
    fn a_role_that_runs_away_only_for_concrete_parameters_is_found() {
        // `assume:a*` expands to itself (the star cuts the growing suffix); `assume:aX` grows.
        let grows = roles(&[("a*", &["assume:a<..>x"])]);
        assert_eq!(expand(&grows, &["assume:a*"]), ["assume:a*"]);
        assert_eq!(grows.check_expansions_end(), Err(("a*".to_owned(), ExpansionError::TooLarge)));
        // Only parameters that spell the rest of another role's id lead into it.
        let through = roles(&[("a*", &["assume:b<..>"]), ("bq*", &["assume:aq<..>x"])]);
        assert!(through.expand(["assume:aprobe".to_owned()]).is_ok());
        assert!(through.check_expansions_end().is_err());
        let fine = roles(&[("repo:*", &["assume:team:<..>", "queue:route:<..>"]), ("team:*", &["x:<..>"])]);
        assert_eq!(fine.check_expansions_end(), Ok(()));
    }

    #[test]
    fn an_expansion_of_ever_longer_scopes_stops_at_its_byte_bound() {
        let grows = roles(&[("a*", &["assume:a<..>xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"])]);
        // About 180 scopes reach the byte bound; to the count bound they would hold 3 GB.
        assert_eq!(grows.expand(["assume:aQ".to_owned()]), Err(ExpansionError::TooLarge));
    }
}
