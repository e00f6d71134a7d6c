//! docs/API.md's table of scopes per call, held to the endpoint table the server authorizes
//! with: every call that needs scopes is in it, and each row names the scopes its calls need.

use shoal_api::auth::Scopes;
use shoal_api::endpoints::{
    AUTH_ENDPOINTS, BLOB_ENDPOINTS, ENDPOINTS, Endpoint, HOOKS_ENDPOINTS, INDEX_ENDPOINTS, LOG_ENDPOINTS,
    SCHEDULER_ENDPOINTS, SECRETS_ENDPOINTS,
};

/// The rows of the scope table: the call names in the first column, the second column's text.
fn rows() -> Vec<(Vec<String>, String)> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/API.md")).unwrap();
    let table = text.split("| calls | scopes |").nth(1).expect("docs/API.md has the scope table");
    table
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').splitn(2, " | ").collect();
            let names = cells[0].split('`').skip(1).step_by(2).map(str::to_owned).collect();
            (names, cells.get(1).copied().unwrap_or_default().to_owned())
        })
        .collect()
}

/// The literal part of each scope an expression can require, up to its first placeholder.
fn literals(scopes: &Scopes, out: &mut Vec<String>) {
    match scopes {
        Scopes::Public => {}
        Scopes::Scope(scope) => {
            let literal = scope.split('<').next().unwrap_or_default();
            if !literal.is_empty() {
                out.push(literal.to_owned());
            }
        }
        Scopes::AllOf(all) | Scopes::AnyOf(all) => all.iter().for_each(|scopes| literals(scopes, out)),
        Scopes::For { each, .. } => literals(each, out),
        Scopes::If { then, .. } => literals(then, out),
    }
}

/// Whether `text` names `literal`, or the same with its verb written `<verb>` (the rows of
/// the task commands speak of `queue:<verb>:…` once for all of them).
fn names(text: &str, literal: &str) -> bool {
    if text.contains(literal) {
        return true;
    }
    let mut parts: Vec<String> = literal.splitn(3, ':').map(str::to_owned).collect();
    if parts.len() < 2 {
        return false;
    }
    parts[1] = if parts[1].ends_with("-in-project") { "<verb>-in-project".into() } else { "<verb>".into() };
    text.contains(&parts.join(":"))
}

#[test]
fn the_scope_table_in_the_docs_is_the_endpoint_tables() {
    let rows = rows();
    assert!(rows.len() >= 10, "{rows:?}");
    let tables: [&[Endpoint]; 8] = [
        ENDPOINTS,
        SCHEDULER_ENDPOINTS,
        AUTH_ENDPOINTS,
        BLOB_ENDPOINTS,
        LOG_ENDPOINTS,
        INDEX_ENDPOINTS,
        SECRETS_ENDPOINTS,
        HOOKS_ENDPOINTS,
    ];
    let mut missing = Vec::new();
    for endpoint in tables.iter().flat_map(|table| table.iter()) {
        if matches!(endpoint.scopes, Scopes::Public) {
            continue;
        }
        let Some((_, text)) = rows.iter().find(|(names, _)| names.iter().any(|name| name == endpoint.name)) else {
            missing.push(format!("{} is in no row", endpoint.name));
            continue;
        };
        // A row saying "what `createTask` … needs" refers to createTask's row.
        let mut text = text.clone();
        if text.contains("`createTask`") {
            let create = rows.iter().find(|(names, _)| names.iter().any(|name| name == "createTask"));
            text.push_str(create.map_or("", |(_, text)| text.as_str()));
        }
        let mut needed = Vec::new();
        literals(&endpoint.scopes, &mut needed);
        for literal in needed {
            if !names(&text, &literal) {
                missing.push(format!("{}: its row does not name `{literal}…`", endpoint.name));
            }
        }
    }
    assert!(missing.is_empty(), "docs/API.md's scope table differs from the endpoints:\n{}", missing.join("\n"));
}
