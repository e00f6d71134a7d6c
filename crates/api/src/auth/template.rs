//! Scope templates, as the endpoint table declares them: Taskcluster's expressions with
//! `<param>` placeholders, `for … in … each` and `if … then`, filled in per request.

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use shoal_engine::auth::ScopeExpr;

/// What an endpoint requires, before its parameters are known.
#[derive(Debug, Clone, Copy)]
pub enum Scopes {
    /// Nothing: anyone, signed in or not.
    Public,
    /// One scope, with `<param>` placeholders.
    Scope(&'static str),
    /// Every one of them.
    AllOf(&'static [Scopes]),
    /// At least one of them.
    AnyOf(&'static [Scopes]),
    /// `each` once per element of the list parameter `list`, bound to `var` (a record's
    /// fields are bound by their own names); all of them are required.
    For {
        /// The name each element is bound to.
        var: &'static str,
        /// The list parameter.
        list: &'static str,
        /// What each element requires.
        each: &'static Scopes,
    },
    /// `then` when the flag parameter `cond` is set, nothing otherwise.
    If {
        /// The flag parameter.
        cond: &'static str,
        /// What it then requires.
        then: &'static Scopes,
    },
}

/// A parameter's value.
#[derive(Debug, Clone)]
pub enum Var {
    /// Text put in place of `<name>`.
    One(String),
    /// A list of texts for `for`.
    Many(Vec<String>),
    /// A list of records for `for`.
    Records(Vec<Vars>),
    /// A flag for `if`.
    Flag(bool),
}

/// The parameters of one request.
#[derive(Debug, Clone, Default)]
pub struct Vars(Vec<(&'static str, Var)>);

impl Vars {
    /// No parameters.
    #[must_use]
    pub fn new() -> Vars {
        Vars::default()
    }

    /// With `name` set to the text `value`.
    #[must_use]
    pub fn one(mut self, name: &'static str, value: impl ToString) -> Vars {
        self.0.push((name, Var::One(value.to_string())));
        self
    }

    /// With `name` set to the list `values`.
    #[must_use]
    pub fn many(mut self, name: &'static str, values: Vec<String>) -> Vars {
        self.0.push((name, Var::Many(values)));
        self
    }

    /// With `name` set to the records `values`.
    #[must_use]
    pub fn records(mut self, name: &'static str, values: Vec<Vars>) -> Vars {
        self.0.push((name, Var::Records(values)));
        self
    }

    /// With the flag `name`.
    #[must_use]
    pub fn flag(mut self, name: &'static str, value: bool) -> Vars {
        self.0.push((name, Var::Flag(value)));
        self
    }

    fn get(&self, name: &str) -> Option<&Var> {
        // Later bindings (a `for` element) shadow earlier ones.
        self.0.iter().rev().find(|(known, _)| *known == name).map(|(_, value)| value)
    }
}

/// A template that names a parameter the request did not give: a bug in a handler.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("scope template needs parameter `{0}`")]
pub struct MissingParam(pub String);

impl Scopes {
    /// The expression these scopes require with `vars` filled in.
    ///
    /// # Errors
    /// [`MissingParam`] when a placeholder has no value.
    pub fn render(&self, vars: &Vars) -> Result<ScopeExpr, MissingParam> {
        let mut out = Vec::new();
        self.render_into(vars, &mut out)?;
        Ok(match out.len() {
            1 => out.pop().unwrap_or(ScopeExpr::AllOf(Vec::new())),
            _ => ScopeExpr::AllOf(out),
        })
    }

    /// Renders into `out`: a `for` adds one expression per element.
    fn render_into(&self, vars: &Vars, out: &mut Vec<ScopeExpr>) -> Result<(), MissingParam> {
        match self {
            Scopes::Public => {}
            Scopes::Scope(text) => out.push(ScopeExpr::Scope(fill(text, vars)?)),
            Scopes::AllOf(all) => {
                let mut inner = Vec::new();
                for scopes in *all {
                    scopes.render_into(vars, &mut inner)?;
                }
                out.push(ScopeExpr::AllOf(inner));
            }
            Scopes::AnyOf(any) => {
                let mut inner = Vec::new();
                for scopes in *any {
                    scopes.render_into(vars, &mut inner)?;
                }
                out.push(ScopeExpr::AnyOf(inner));
            }
            Scopes::For { var, list, each } => match vars.get(list) {
                Some(Var::Many(values)) => {
                    for value in values {
                        let bound = Vars(vec![(*var, Var::One(value.clone()))]);
                        let mut scoped = vars.clone();
                        scoped.0.extend(bound.0);
                        each.render_into(&scoped, out)?;
                    }
                }
                Some(Var::Records(records)) => {
                    for record in records {
                        let mut scoped = vars.clone();
                        scoped.0.extend(record.0.iter().cloned());
                        each.render_into(&scoped, out)?;
                    }
                }
                _ => return Err(MissingParam((*list).to_owned())),
            },
            Scopes::If { cond, then } => match vars.get(cond) {
                Some(Var::Flag(true)) => then.render_into(vars, out)?,
                Some(Var::Flag(false)) => {}
                _ => return Err(MissingParam((*cond).to_owned())),
            },
        }
        Ok(())
    }
}

/// `text` with each `<name>` replaced by its value.
fn fill(text: &str, vars: &Vars) -> Result<String, MissingParam> {
    let mut out = String::with_capacity(text.len() + 32);
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        let Some(close) = rest[open..].find('>') else { break };
        let name = &rest[open + 1..open + close];
        out.push_str(&rest[..open]);
        match vars.get(name) {
            Some(Var::One(value)) => out.push_str(value),
            _ => return Err(MissingParam(name.to_owned())),
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

impl Serialize for Scopes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Scopes::Public => serializer.serialize_none(),
            Scopes::Scope(text) => serializer.serialize_str(text),
            Scopes::AllOf(list) | Scopes::AnyOf(list) => {
                let key = if matches!(self, Scopes::AllOf(_)) { "AllOf" } else { "AnyOf" };
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry(key, &List(list))?;
                map.end()
            }
            Scopes::For { var, list, each } => {
                let mut map = serializer.serialize_map(Some(3))?;
                map.serialize_entry("for", var)?;
                map.serialize_entry("in", list)?;
                map.serialize_entry("each", each)?;
                map.end()
            }
            Scopes::If { cond, then } => {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("if", cond)?;
                map.serialize_entry("then", then)?;
                map.end()
            }
        }
    }
}

struct List(&'static [Scopes]);

impl Serialize for List {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for item in self.0 {
            seq.serialize_element(item)?;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CREATE: Scopes = Scopes::AllOf(&[
        Scopes::For { var: "scope", list: "scopes", each: &Scopes::Scope("<scope>") },
        Scopes::Scope("queue:scheduler-id:<schedulerId>"),
        Scopes::AnyOf(&[Scopes::For {
            var: "priority",
            list: "priorities",
            each: &Scopes::Scope("queue:create-task:<priority>:<taskQueueId>"),
        }]),
    ]);

    #[test]
    fn templates_fill_in_parameters_and_lists() {
        let vars = Vars::new()
            .many("scopes", vec!["secrets:get:x".into()])
            .one("schedulerId", "-")
            .one("taskQueueId", "p/w")
            .many("priorities", vec!["highest".into(), "lowest".into()]);
        let expr = CREATE.render(&vars).unwrap();
        assert_eq!(
            expr.to_string(),
            r#"{"AllOf":["secrets:get:x","queue:scheduler-id:-",{"AnyOf":["queue:create-task:highest:p/w","queue:create-task:lowest:p/w"]}]}"#
        );
        assert_eq!(CREATE.render(&Vars::new()), Err(MissingParam("scopes".into())));
    }

    #[test]
    fn if_and_records() {
        let private = Scopes::If { cond: "private", then: &Scopes::Scope("queue:get-artifact:<name>") };
        let public = private.render(&Vars::new().flag("private", false).one("name", "public/x")).unwrap();
        assert_eq!(public, ScopeExpr::AllOf(vec![]));
        let each = Scopes::For { var: "task", list: "tasks", each: &Scopes::Scope("q:<a>") };
        let vars = Vars::new().records("tasks", vec![Vars::new().one("a", "1"), Vars::new().one("a", "2")]);
        assert_eq!(each.render(&vars).unwrap().to_string(), r#"{"AllOf":["q:1","q:2"]}"#);
        assert_eq!(serde_json::to_string(&private).unwrap(), r#"{"if":"private","then":"queue:get-artifact:<name>"}"#);
    }
}
