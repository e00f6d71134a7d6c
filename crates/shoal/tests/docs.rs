//! The docs that drift unless a test holds them: every module says what it holds, the map
//! stays readable, and README carries no dated figures (those live in docs/performance.md).

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

#[test]
fn every_module_opens_with_its_doc() {
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root().join("crates")).unwrap() {
        let src = krate.unwrap().path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    assert!(files.len() > 100, "found only {} files", files.len());
    let missing: Vec<_> = files
        .iter()
        .filter(|path| !std::fs::read_to_string(path).unwrap().starts_with("//!"))
        .map(|path| path.strip_prefix(root()).unwrap_or(path).display().to_string())
        .collect();
    assert!(missing.is_empty(), "modules without a `//!` doc: {missing:?}");
}

#[test]
fn the_map_and_the_guides_keep_readable_lines() {
    for (doc, longest) in [("ARCHITECTURE.md", 600), ("docs/postgres.md", 200), ("docs/postgres-internals.md", 200)] {
        let text = std::fs::read_to_string(root().join(doc)).unwrap();
        for (n, line) in text.lines().enumerate() {
            assert!(line.chars().count() <= longest, "{doc}:{}: {} characters", n + 1, line.chars().count());
        }
    }
}

#[test]
fn readme_has_no_dated_figures() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let dated = dated_lines(&readme);
    assert!(dated.is_empty(), "README lines with a date (figures belong in docs/performance.md): {dated:?}");
}

/// Lines holding a `YYYY-MM-DD` date.
fn dated_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|line| {
            line.as_bytes().windows(10).any(|w| {
                let digit = |i: usize| w[i].is_ascii_digit();
                (0..4).all(digit) && w[4] == b'-' && digit(5) && digit(6) && w[7] == b'-' && digit(8) && digit(9)
            })
        })
        .collect()
}

/// The scopes the docs show in backticks (`queue:…`, `auth:…`, `assume:…`, …).
fn scope_examples(text: &str) -> Vec<&str> {
    const SERVICES: [&str; 5] = ["queue:", "auth:", "assume:", "test:", "secrets:"];
    text.split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|quoted| quoted.split('"'))
        .filter(|word| SERVICES.iter().any(|service| word.starts_with(service)) && !word.contains(' '))
        .collect()
}

/// Every scope example the docs show satisfies something: a `*` counts only at the end of
/// a scope (Taskcluster's rule), so one in the middle is a scope that grants nothing.
#[test]
fn the_docs_scope_examples_can_grant_something() {
    let mut seen = 0;
    for doc in ["README.md", "docs/API.md", "docs/security.md", "docs/worker.md", "docs/fleet.md"] {
        let text = std::fs::read_to_string(root().join(doc)).unwrap();
        for scope in scope_examples(&text) {
            seen += 1;
            let star = scope.find('*');
            assert!(star.is_none_or(|at| at == scope.len() - 1), "{doc}: `{scope}` has a `*` before its end");
        }
    }
    assert!(seen > 20, "found only {seen} scope examples");
}

/// README's example role for a CI system lets that system create what it says it does.
#[test]
fn readmes_ci_role_creates_tasks_in_its_pool() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let line = readme.lines().find(|line| line.contains(r#"{"roleId": "ci""#)).expect("the example role");
    let json = &line[line.find('{').unwrap()..=line.rfind('}').unwrap()];
    let role: serde_json::Value = serde_json::from_str(json).unwrap();
    let scopes: Vec<String> = serde_json::from_value(role["scopes"].clone()).unwrap();
    let held = shoal_engine::auth::ScopeSet::new(scopes);
    // createTask of a task on my-pool/linux at priority high (or a more urgent name's scope)
    // with an index route.
    let urgent = ["high", "very-high", "highest"];
    assert!(urgent.iter().any(|p| held.satisfies(&format!("queue:create-task:{p}:my-pool/linux"))), "{held:?}");
    for required in ["queue:scheduler-id:-", "queue:create-task:project:none", "queue:route:index.project.build"] {
        assert!(held.satisfies(required), "the README's ci role lacks {required}");
    }
}

/// Every test docs/security.md names beside a claim exists (a Rust test, or one of the Python
/// suite's), so the table cannot point at a test that was renamed or removed.
#[test]
fn every_test_the_security_table_names_exists() {
    let security = std::fs::read_to_string(root().join("docs/security.md")).unwrap();
    let table = security.split("## Each claim and the test that holds it").nth(1).expect("the claims table");
    let mut sources = String::new();
    let mut files = Vec::new();
    rust_files(&root().join("crates"), &mut files);
    for file in files {
        sources.push_str(&std::fs::read_to_string(file).unwrap());
    }
    // The Python suite's tests too (`def test_…(`), read as `fn test_…(`.
    for entry in std::fs::read_dir(root().join("tests/python")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "py") {
            sources.push_str(&std::fs::read_to_string(path).unwrap().replace("def test_", "fn test_"));
        }
    }
    let named: Vec<&str> = table
        .lines()
        .filter_map(|line| line.rsplit('|').nth(1))
        .flat_map(|cell| cell.split('`').skip(1).step_by(2))
        .filter(|name| name.chars().all(|c| c.is_ascii_lowercase() || c == '_') && name.contains('_'))
        .collect();
    assert!(named.len() > 25, "the table names tests: {named:?}");
    let missing: Vec<&&str> = named.iter().filter(|name| !sources.contains(&format!("fn {name}("))).collect();
    assert!(missing.is_empty(), "docs/security.md names tests that do not exist: {missing:?}");
}

/// README stays a guide: reference tables and long explanations live in docs/.
#[test]
fn the_readme_stays_a_guide() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.lines().count() <= 250, "README has {} lines", readme.lines().count());
    for (n, line) in readme.lines().enumerate() {
        assert!(line.chars().count() <= 300, "README.md:{}: {} characters", n + 1, line.chars().count());
    }
}
