//! The Index, Secrets, Hooks and GitHub services' records, on every backend.

use super::*;
use serde_json::Map;
use shoal_engine::hook::{FiredBy, Hook, HookKey};
use shoal_engine::index::{Entry, Namespace};
use shoal_store::Page;
use shoal_store::hooks::{FireOutcome, FireRequest, HookWrite};
use shoal_store::named_secrets::NamedSecret;
use shoal_store::operation::{
    FireHook, IndexTask, PutHook, RemoveHook, RemoveSecret, ResetTriggerToken, SetSecret, UnindexTask,
};

fn ns(text: &str) -> Namespace {
    Namespace::parse("namespace", text).unwrap()
}

async fn finish(store: &Store, task_id: TaskId, resolution: Resolution, secs: i64) {
    assert_eq!(claim_ids(store, worker(1), at(secs)).await, vec![task_id]);
    let command = TaskCommand::Resolve { run_id: 0, resolution, stats: None };
    store.run(Apply { task_id, command }, at(secs + 1)).await.map(|done| done.value).unwrap();
}

pub(crate) async fn a_completed_task_is_indexed_under_its_routes_by_rank(name: &str, backend: Backend) {
    let store = &backend.store;
    let routes = json!(["index.proj.v1.build.latest", "index.top", "other.route", "index.bad..ns"]);
    let expires = "2026-06-01T00:00:00.000Z";
    create(
        store,
        id(1),
        json!({"routes": routes, "expires": expires, "extra": {"index": {"rank": 5, "data": {"k": 1}}}}),
        at(1),
    )
    .await;
    finish(store, id(1), Resolution::Completed, 2).await;
    create(store, id(2), json!({"routes": ["index.proj.v1.failed"]}), at(4)).await;
    finish(store, id(2), Resolution::Failed, 5).await;

    let indexed = |namespace: &'static str, secs: i64| store.read(move |reads| reads.indexed(&ns(namespace), at(secs)));
    let entry = indexed("proj.v1.build.latest", 10).await.unwrap().expect("indexed in the completing step");
    assert_eq!((entry.task_id, entry.rank), (id(1), 5), "{name}");
    assert_eq!(entry.data, json!({"k": 1}).as_object().unwrap().clone(), "{name}");
    assert_eq!(entry.expires, Timestamp::parse(expires).unwrap(), "{name}");
    assert!(indexed("top", 10).await.unwrap().is_some(), "{name}");
    assert!(indexed("proj.v1.failed", 10).await.unwrap().is_none(), "{name}: a failed task is not indexed");

    let under =
        |namespace: &'static str| store.read(move |reads| reads.namespaces_under(&ns(namespace), None, 10, at(10)));
    let names = |page: Page<(String, Timestamp)>| page.items.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    assert_eq!(names(under("").await.unwrap()), ["proj"], "{name}");
    assert_eq!(names(under("proj.v1").await.unwrap()), ["proj.v1.build"], "{name}");
    let tasks = store.read(|reads| reads.indexed_under(&ns("proj.v1.build"), None, 10, at(10))).await.unwrap();
    assert_eq!(
        tasks.items.iter().map(|(n, e)| (n.as_str(), e.task_id)).collect::<Vec<_>>(),
        [("proj.v1.build.latest", id(1))]
    );

    // A lower rank leaves the entry; an equal or higher one replaces it.
    let insert = |task: u32, rank: i64| IndexTask {
        namespace: ns("proj.v1.build.latest"),
        entry: Entry { task_id: id(task), rank, data: Map::new(), expires: at(86_400) },
    };
    assert_eq!(store.run(insert(3, 4), at(11)).await.unwrap().value.task_id, id(1), "{name}");
    assert_eq!(store.run(insert(3, 5), at(12)).await.unwrap().value.task_id, id(3), "{name}");
    // The namespaces above are kept until the latest of their entries' expiries' midnights.
    let later = Timestamp::parse("2026-09-01T12:00:00.000Z").unwrap();
    let longer = IndexTask {
        namespace: ns("proj.v1.build.other"),
        entry: Entry { task_id: id(4), rank: 0, data: Map::new(), expires: later },
    };
    let _ = store.run(longer, at(12)).await.unwrap().value;
    let kept = under("proj.v1").await.unwrap().items;
    assert_eq!(kept, [("proj.v1.build".to_owned(), Timestamp::parse("2026-09-02T00:00:00.000Z").unwrap())], "{name}");

    // It survives a restart, and expires.
    drop(backend.store.clone());
    let reopened = backend.reopen();
    let entry = reopened.read(|reads| reads.indexed(&ns("proj.v1.build.latest"), at(13))).await.unwrap();
    assert_eq!(entry.map(|e| e.task_id), Some(id(3)), "{name}");
    let later = at(86_400 * 2);
    assert!(reopened.read(move |reads| reads.indexed(&ns("proj.v1.build.latest"), later)).await.unwrap().is_none());

    reopened.run(UnindexTask { namespace: ns("top") }, at(14)).await.map(|done| done.value).unwrap();
    assert!(reopened.read(|reads| reads.indexed(&ns("top"), at(15))).await.unwrap().is_none(), "{name}");
    let again = reopened.run(UnindexTask { namespace: ns("top") }, at(16)).await.map(|done| done.value);
    assert!(again.is_ok(), "{name}: deleting what is not there is no error, as Taskcluster's: {again:?}");
}

pub(crate) async fn completions_arriving_together_are_each_indexed(name: &str, backend: Backend) {
    let store = backend.store.clone();
    // Twelve tasks under one shared namespace and one of their own each; one asks for an
    // entry that has expired by its completion, one for a rank that is no integer.
    let asks = |n: u32| match n {
        11 => json!({"expires": "2000-01-01T00:00:00.000Z"}),
        12 => json!({"rank": "high"}),
        n => json!({"rank": n % 3, "data": {"n": n}}),
    };
    for n in 1..=12 {
        let routes = json!(["index.together.latest", format!("index.together.own.t{n}")]);
        create(&store, id(n), json!({"routes": routes, "extra": {"index": asks(n)}}), at(1)).await;
    }
    let mut claimed = claim_ids(&store, worker(12), at(2)).await;
    claimed.sort();
    assert_eq!(claimed, (1..=12).map(id).collect::<Vec<_>>(), "{name}");
    let mut reports = tokio::task::JoinSet::new();
    for n in 1..=12 {
        let (store, command) =
            (store.clone(), TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None });
        reports.spawn(async move { store.run(Apply { task_id: id(n), command }, at(3)).await.map(|done| done.value) });
    }
    while let Some(reported) = reports.join_next().await {
        assert_eq!(reported.unwrap().unwrap().state, TaskState::Completed, "{name}: indexing never fails a completion");
    }
    for n in 1..=12 {
        let own = ns(&format!("together.own.t{n}"));
        let entry = store.read(move |reads| reads.indexed(&own, at(4))).await.unwrap();
        match n {
            11 | 12 => assert!(entry.is_none(), "{name}: task {n} is not indexed"),
            n => assert_eq!(
                entry.map(|e| (e.task_id, e.data)),
                Some((id(n), json!({"n": n}).as_object().unwrap().clone()))
            ),
        }
    }
    // Of tasks completing at once, the shared namespace keeps one of the highest rank (2)
    // on SQLite, whose one writer settles them in turn; PostgreSQL reads entries unlocked, so
    // there it keeps one of them (docs/API.md).
    let shared = store.read(|reads| reads.indexed(&ns("together.latest"), at(4))).await.unwrap().expect("indexed");
    let ranked = |rank: i64| (1..=10).filter(move |n| i64::from(n % 3) == rank).map(id).collect::<Vec<_>>();
    if backend.url.is_none() {
        assert!(ranked(2).contains(&shared.task_id) && shared.rank == 2, "{name}: {shared:?}");
    } else {
        assert!((1..=10).map(id).any(|task| task == shared.task_id), "{name}: {shared:?}");
    }
}

pub(crate) async fn secrets_are_set_listed_removed_and_expire(name: &str, backend: Backend) {
    let store = &backend.store;
    let secret = |value: &str, expires: i64| NamedSecret {
        secret: json!({"token": value}).as_object().unwrap().clone(),
        expires: at(expires),
    };
    for (n, value) in [("project/a/deploy", "hunter2"), ("project/b", "other"), ("z", "last")] {
        store
            .run(SetSecret { name: n.into(), secret: secret(value, 100) }, at(1))
            .await
            .map(|done| done.value)
            .unwrap();
    }
    let got = store.read(|reads| reads.secret("project/a/deploy", at(2))).await.unwrap().expect("set");
    assert_eq!(got.secret["token"], json!("hunter2"), "{name}");
    assert_eq!(got.expires, at(100), "{name}");
    let first = store.read(|reads| reads.secret_names(None, 2, at(2))).await.unwrap();
    assert_eq!(first.items, ["project/a/deploy", "project/b"], "{name}");
    let token = first.continuation.expect("more");
    let rest = store.read(move |reads| reads.secret_names(Some(&token), 2, at(2))).await.unwrap();
    assert_eq!(rest.items, ["z"], "{name}");

    store
        .run(SetSecret { name: "project/b".into(), secret: secret("new", 200) }, at(3))
        .await
        .map(|done| done.value)
        .unwrap();
    let got = store.read(|reads| reads.secret("project/b", at(150))).await.unwrap();
    assert_eq!(got.map(|s| s.secret["token"].clone()), Some(json!("new")), "{name}: replaced");
    assert!(store.read(|reads| reads.secret("z", at(150))).await.unwrap().is_none(), "{name}: expired is gone");
    store.run(RemoveSecret { name: "project/a/deploy".into() }, at(4)).await.map(|done| done.value).unwrap();
    store.run(RemoveSecret { name: "project/a/deploy".into() }, at(5)).await.map(|done| done.value).unwrap();
    assert!(store.read(|reads| reads.secret("project/a/deploy", at(6))).await.unwrap().is_none(), "{name}");
    let past = store.run(SetSecret { name: "p".into(), secret: secret("x", 1) }, at(7)).await.map(|d| d.value);
    assert!(matches!(past, Err(StoreError::Rejected(Rejection::Invalid { .. }))), "{name}: {past:?}");
    if backend.url.is_none() {
        // SQLite keeps them with the tasks' secrets, never in the main database or its WAL.
        for file in ["shoal.db", "shoal.db-wal"] {
            let bytes = std::fs::read(backend.dir.path().join(file)).unwrap_or_default();
            assert!(!bytes.windows(4).any(|w| w == b"new\""), "{name}: a secret in {file}");
        }
    }
    store.run(ForgetTasks { task_ids: vec![], limit: 100 }, at(300)).await.map(|done| done.value).unwrap();
    assert!(store.read(|reads| reads.secret_names(None, 10, at(0))).await.unwrap().items.is_empty(), "{name}");
}

fn hook(schedule: serde_json::Value) -> Hook {
    let body = json!({
        "metadata": {"name": "n", "description": "d", "owner": "o@example.com"},
        "schedule": schedule,
        "task": {"taskQueueId": "prov/wt"},
    });
    Hook::parse(&key(), &serde_json::to_vec(&body).unwrap()).unwrap()
}

fn key() -> HookKey {
    HookKey::parse("project-x", "nightly/decision").unwrap()
}

pub(crate) async fn a_hook_fires_once_per_due_time_and_keeps_its_fires(name: &str, backend: Backend) {
    let store = &backend.store;
    // Every minute, on the minute; T0 is midnight.
    let stored = store
        .run(PutHook { hook: hook(json!(["0 * * * * *"])), write: HookWrite::Create, token: "t1".into() }, at(1))
        .await
        .unwrap()
        .value;
    assert_eq!(stored.next_fire, Some(at(60)), "{name}");
    let again = store
        .run(PutHook { hook: hook(json!(["0 * * * * *"])), write: HookWrite::Create, token: "t2".into() }, at(2))
        .await;
    assert!(again.is_ok(), "{name}: the same definition again is accepted");
    let other = store.run(PutHook { hook: hook(json!([])), write: HookWrite::Create, token: "t3".into() }, at(2)).await;
    assert!(matches!(other.map(|d| d.value), Err(StoreError::Rejected(Rejection::Conflict(_)))), "{name}");
    assert_eq!(store.read(|reads| reads.hook_token(&key())).await.unwrap().as_deref(), Some("t1"), "{name}");

    assert!(store.read(|reads| reads.due_hooks(at(59), 10)).await.unwrap().is_empty(), "{name}");
    let due = store.read(|reads| reads.due_hooks(at(61), 10)).await.unwrap();
    assert_eq!(due.len(), 1, "{name}");
    let fire = |task: u32, scheduled: Option<Timestamp>, definition: Option<Result<TaskDefinition, String>>| FireHook {
        request: FireRequest {
            key: key(),
            task_id: id(task),
            fired_by: FiredBy::Schedule,
            task: definition,
            scheduled,
        },
    };
    let made = store.run(fire(1, Some(at(60)), Some(Ok(definition(id(1), json!({}))))), at(61)).await.unwrap().value;
    assert!(matches!(made, FireOutcome::Created(task_id) if task_id == id(1)), "{name}: {made:?}");
    assert_eq!(state_of(store, id(1)).await, TaskState::Pending, "{name}: created in the fire's transaction");
    // A second server that read the same due time fires nothing.
    let twice = store.run(fire(2, Some(at(60)), Some(Ok(definition(id(2), json!({}))))), at(61)).await.unwrap().value;
    assert!(matches!(twice, FireOutcome::Skipped), "{name}: {twice:?}");
    assert!(store.read(|reads| reads.task(id(2))).await.unwrap().is_none(), "{name}");
    let moved = store.read(|reads| reads.hook(&key())).await.unwrap().unwrap();
    assert_eq!(moved.next_fire, Some(at(120)), "{name}");

    // A fire that cannot create its task is recorded with its error.
    let failed = store.run(fire(3, None, Some(Err("no scopes".into()))), at(70)).await.unwrap().value;
    assert!(matches!(failed, FireOutcome::Failed(_)), "{name}");
    let taken =
        store.run(fire(1, None, Some(Ok(definition(id(1), json!({"priority": "high"}))))), at(71)).await.unwrap().value;
    assert!(matches!(taken, FireOutcome::Failed(ref e) if e.contains("already exists")), "{name}: {taken:?}");
    let fires = store.read(|reads| reads.hook_fires(&key(), None, 10)).await.unwrap();
    let seen: Vec<(TaskId, &str)> = fires.items.iter().map(|f| (f.task_id, f.result.as_str())).collect();
    assert_eq!(seen, [(id(1), "error"), (id(3), "error"), (id(1), "success")], "{name}: newest first");
    let page = store.read(|reads| reads.hook_fires(&key(), None, 2)).await.unwrap();
    let token = page.continuation.expect("more");
    let rest = store.read(move |reads| reads.hook_fires(&key(), Some(&token), 2)).await.unwrap();
    assert_eq!(rest.items.len(), 1, "{name}");

    store.run(ResetTriggerToken { key: key(), token: "t9".into() }, at(72)).await.map(|done| done.value).unwrap();
    assert_eq!(store.read(|reads| reads.hook_token(&key())).await.unwrap().as_deref(), Some("t9"), "{name}");
    let updated = store
        .run(PutHook { hook: hook(json!([])), write: HookWrite::Update, token: String::new() }, at(73))
        .await
        .unwrap()
        .value;
    assert_eq!(updated.next_fire, None, "{name}: no schedule, no fire");
    assert_eq!(store.read(|reads| reads.hook_groups()).await.unwrap(), ["project-x"], "{name}");
    assert_eq!(store.read(|reads| reads.hooks("project-x")).await.unwrap().len(), 1, "{name}");
    store.run(RemoveHook { key: key() }, at(74)).await.map(|done| done.value).unwrap();
    assert!(store.read(|reads| reads.hook(&key())).await.unwrap().is_none(), "{name}");
    assert!(store.read(|reads| reads.hook_fires(&key(), None, 10)).await.unwrap().items.is_empty(), "{name}");
    let missing =
        store.run(PutHook { hook: hook(json!([])), write: HookWrite::Update, token: String::new() }, at(75)).await;
    assert!(matches!(missing.map(|d| d.value), Err(StoreError::Rejected(Rejection::NotFound(_)))), "{name}");
}

pub(crate) async fn a_builds_tasks_are_created_with_its_record_or_not_at_all(name: &str, backend: Backend) {
    use shoal_engine::github::{Build, BuildState};
    use shoal_store::operation::{CreateBuild, RecordBuild};
    let store = &backend.store;
    let build = |group: TaskId, sha: &str| Build {
        organization: "org".into(),
        repository: "proj".into(),
        sha: sha.into(),
        state: BuildState::Pending,
        task_group_id: group,
        event_type: "push".into(),
        event_id: "d-1".into(),
        created: at(1),
        updated: at(1),
        pull_request_number: None,
        error: None,
    };
    let sha = |n: u8| format!("{n:040}");
    let task = |n: u32, patch: serde_json::Value| (id(n), definition(id(n), patch));
    let made = build(id(1), &sha(1));
    let tasks =
        vec![task(1, json!({"taskGroupId": id(1)})), task(2, json!({"taskGroupId": id(1), "dependencies": [id(1)]}))];
    store.run(CreateBuild { build: made.clone(), tasks }, at(1)).await.map(drop).unwrap();
    assert_eq!(state_of(store, id(2)).await, TaskState::Unscheduled, "{name}: created with its dependency");

    // A task refused (its dependency unknown) undoes the others and records nothing.
    let refused = build(id(3), &sha(2));
    let tasks =
        vec![task(3, json!({"taskGroupId": id(3)})), task(4, json!({"taskGroupId": id(3), "dependencies": [id(9)]}))];
    let err = store.run(CreateBuild { build: refused.clone(), tasks }, at(2)).await.map(drop).unwrap_err();
    assert!(matches!(err, StoreError::Rejected(_)), "{name}: {err:?}");
    assert!(store.read(|reads| reads.task(id(3))).await.unwrap().is_none(), "{name}: none of its tasks");
    let failed = refused.failed("createTask: dependencies".into());
    store.run(RecordBuild { build: failed.clone() }, at(2)).await.map(drop).unwrap();

    let listed = |prefix: &'static str| store.read(move |reads| reads.builds(prefix, None, 10, at(3)));
    assert_eq!(listed("").await.unwrap().items, [made.clone(), failed.clone()], "{name}");
    let one_commit = format!("org/proj/{}/", sha(2));
    let page = store.read(move |reads| reads.builds(&one_commit, None, 10, at(3))).await.unwrap();
    assert_eq!(page.items, [failed], "{name}");
    assert!(listed("other/").await.unwrap().items.is_empty(), "{name}");
    let first = store.read(|reads| reads.builds("org/", None, 1, at(3))).await.unwrap();
    assert_eq!((first.items.len(), first.continuation.is_some()), (1, true), "{name}: paged");
}
