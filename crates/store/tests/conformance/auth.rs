//! Clients and roles, kept, changed and deleted, on every backend.

use super::*;
use shoal_store::operation::{ChangeAuth, SigningToken};

pub(crate) fn client(client_id: &str, scopes: &[&str]) -> shoal_engine::auth::client::Client {
    shoal_engine::auth::client::Client {
        client_id: client_id.to_owned(),
        access_token: format!("token-of-{client_id}"),
        description: "a test client".into(),
        scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        expires: at(3600),
        disabled: false,
        delete_on_expiration: false,
        created: at(0),
        last_modified: at(0),
        last_rotated: at(0),
    }
}

pub(crate) fn role(role_id: &str, scopes: &[&str]) -> shoal_engine::auth::client::Role {
    shoal_engine::auth::client::Role {
        role_id: role_id.to_owned(),
        scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        description: "a test role".into(),
        created: at(0),
        last_modified: at(0),
    }
}

pub(crate) async fn clients_and_roles_are_kept_changed_and_deleted(name: &str, backend: Backend) {
    use shoal_store::{AuthChange, AuthOutcome, ClientEdit};
    let store = &backend.store;
    let generation = || store.read(|reads| reads.auth_generation());
    let start = generation().await.unwrap();
    store
        .run(ChangeAuth { change: AuthChange::CreateClient(client("ci/one", &["queue:a"])) }, at(0))
        .await
        .map(|done| done.value)
        .unwrap();
    let taken = store
        .run(ChangeAuth { change: AuthChange::CreateClient(client("ci/one", &[])) }, at(1))
        .await
        .map(|done| done.value);
    assert!(matches!(taken, Err(StoreError::Rejected(Rejection::Conflict(_)))), "{name}: {taken:?}");
    let disabled = store
        .run(ChangeAuth { change: AuthChange::UpdateClient("ci/one".into(), ClientEdit::Disabled(true)) }, at(2))
        .await
        .map(|done| done.value);
    assert!(matches!(disabled, Ok(AuthOutcome::Client(ref c)) if c.disabled && c.last_modified == at(2)), "{name}");
    let missing = store
        .run(ChangeAuth { change: AuthChange::UpdateClient("nobody".into(), ClientEdit::Disabled(true)) }, at(2))
        .await
        .map(|done| done.value);
    assert!(matches!(missing, Err(StoreError::Rejected(Rejection::NotFound(_)))), "{name}: {missing:?}");

    store
        .run(ChangeAuth { change: AuthChange::CreateRole(role("team", &["queue:b", "assume:other"])) }, at(3))
        .await
        .map(|done| done.value)
        .unwrap();
    store
        .run(ChangeAuth { change: AuthChange::CreateRole(role("other", &["queue:c"])) }, at(3))
        .await
        .map(|done| done.value)
        .unwrap();
    let runaway = store
        .run(ChangeAuth { change: AuthChange::CreateRole(role("loop*", &["assume:loopx<..>"])) }, at(4))
        .await
        .map(|done| done.value);
    assert!(matches!(runaway, Err(StoreError::Rejected(Rejection::Invalid { .. }))), "{name}: {runaway:?}");
    store
        .run(ChangeAuth { change: AuthChange::UpdateRole(role("other", &["queue:d"])) }, at(5))
        .await
        .map(|done| done.value)
        .unwrap();
    store
        .run(ChangeAuth { change: AuthChange::DeleteRole("team".into()) }, at(6))
        .await
        .map(|done| done.value)
        .unwrap();

    let snapshot = store.read(|reads| reads.auth_snapshot()).await.unwrap();
    assert_eq!(snapshot.clients.len(), 1, "{name}");
    assert!(snapshot.clients[0].disabled, "{name}");
    assert_eq!(snapshot.roles.len(), 1, "{name}: the refused role left nothing");
    assert_eq!((snapshot.roles[0].role_id.as_str(), snapshot.roles[0].created), ("other", at(3)), "{name}");
    assert_eq!(snapshot.roles[0].scopes, ["queue:d"], "{name}");
    assert_eq!(snapshot.generation, start + 6, "{name}: each change that was made moved the generation on");

    let first = store
        .run(SigningToken { candidate: "first".into() }, shoal_engine::Timestamp(0))
        .await
        .map(|done| done.value)
        .unwrap();
    assert_eq!(first, "first", "{name}");
    assert_eq!(
        store
            .run(SigningToken { candidate: "second".into() }, shoal_engine::Timestamp(0))
            .await
            .map(|done| done.value)
            .unwrap(),
        "first",
        "{name}: the stored token stays"
    );
    store
        .run(ChangeAuth { change: AuthChange::DeleteClient("ci/one".into()) }, at(7))
        .await
        .map(|done| done.value)
        .unwrap();
    backend.store.close().await;
    let reopened = backend.reopen();
    let snapshot = reopened.read(|reads| reads.auth_snapshot()).await.unwrap();
    assert!(snapshot.clients.is_empty(), "{name}");
    assert_eq!(
        reopened
            .run(SigningToken { candidate: "third".into() }, shoal_engine::Timestamp(0))
            .await
            .map(|done| done.value)
            .unwrap(),
        "first",
        "{name}: kept across a restart"
    );
    reopened.close().await;
}
