//! What the web UI's overview lists: recent groups and graphs, and tasks that failed.

use serde_json::json;
use shoal_engine::command::TaskCommand;
use shoal_engine::status::TaskState;
use shoal_engine::task::Resolution;
use shoal_engine::{TaskId, Timestamp};
use shoal_store::operation::CreateGraph;
use shoal_store::{FAILED_TAG, Store, TagQuery};

use super::{Backend, apply, at, claim_ids, create, graph_input, id, worker};

fn created(secs: i64) -> String {
    Timestamp(at(0).millis() + secs * 1000).to_string()
}

async fn failed(
    store: &Store,
    state: Option<TaskState>,
    after: Option<String>,
    limit: usize,
) -> (Vec<TaskId>, Option<String>) {
    let query = TagQuery { tag: FAILED_TAG.to_owned(), state, ..TagQuery::default() };
    let page = store.read(move |reads| reads.list_tagged(&query, after.as_deref(), limit)).await.unwrap();
    (page.items.iter().map(|task| task.status.task_id).collect(), page.continuation)
}

/// Groups newest first by their first task's creation, paged; failures filed as they fail
/// (latest first) and unfiled when run again; graphs newest first.
pub(crate) async fn the_overview_lists_groups_graphs_and_failures_newest_first(name: &str, backend: Backend) {
    let store = &backend.store;
    // Three groups, the middle one created last; a later task in the first group does not
    // make it newer.
    for (n, group, secs) in [(1, 101, 1), (2, 103, 3), (3, 102, 5), (4, 101, 6)] {
        let patch = json!({"taskGroupId": id(group).as_str(), "created": created(secs)});
        create(store, id(n), patch, at(secs)).await;
    }
    // Two groups made by their namesakes (as every task created without a group makes one),
    // between them in time; a later member with a later expiry joins the second.
    for (n, secs) in [(104, 2), (105, 4)] {
        create(store, id(n), json!({"created": created(secs)}), at(secs)).await;
    }
    let later = json!({"taskGroupId": id(105).as_str(), "created": created(7), "expires": "2027-06-01T00:00:00.000Z"});
    create(store, id(5), later, at(7)).await;
    let groups = |after: Option<String>| async move {
        let page = store.read(move |reads| reads.list_task_groups(after.as_deref(), 2)).await.unwrap();
        (page.items.iter().map(|group| group.recent.group.task_group_id).collect::<Vec<_>>(), page.continuation)
    };
    let (first, next) = groups(None).await;
    assert_eq!(first, vec![id(102), id(105)], "{name}");
    let (second, next) = groups(next).await;
    assert_eq!(second, vec![id(103), id(104)], "{name}");
    let (third, end) = groups(next).await;
    assert_eq!((third, end), (vec![id(101)], None), "{name}");
    let all = store.read(|reads| reads.list_task_groups(None, 10)).await.unwrap();
    let grown = &all.items.iter().find(|group| group.recent.group.task_group_id == id(105)).expect("listed").recent;
    assert_eq!(grown.created, Timestamp(at(0).millis() + 4000), "{name}: its namesake's creation");
    assert_eq!(grown.group.expires.to_string(), "2027-06-01T01:00:00.000Z", "{name}: the member's expiry, an hour on");

    // Task 1 fails, task 2 is resolved as an exception, task 3 completes.
    assert_eq!(claim_ids(store, worker(3), at(5)).await.len(), 3, "{name}");
    let resolve = |resolution| TaskCommand::Resolve { run_id: 0, resolution, stats: None };
    apply(store, id(2), TaskCommand::Cancel, at(6)).await;
    apply(store, id(1), resolve(Resolution::Failed), at(7)).await;
    apply(store, id(3), resolve(Resolution::Completed), at(7)).await;
    assert_eq!(failed(store, None, None, 10).await, (vec![id(1), id(2)], None), "{name}: latest failure first");
    // A group is resolved when none of its tasks is left unresolved.
    let all = store.read(|reads| reads.list_task_groups(None, 10)).await.unwrap();
    let resolved: Vec<(TaskId, bool)> =
        all.items.iter().map(|group| (group.recent.group.task_group_id, group.recent.resolved)).collect();
    let expected = [(102, true), (105, false), (103, true), (104, false), (101, false)].map(|(n, done)| (id(n), done));
    assert_eq!(resolved, expected, "{name}");
    let (page, next) = failed(store, None, None, 1).await;
    assert_eq!(page, vec![id(1)], "{name}");
    assert_eq!(failed(store, None, next, 1).await, (vec![id(2)], None), "{name}");
    assert_eq!(failed(store, Some(TaskState::Failed), None, 10).await.0, vec![id(1)], "{name}");
    // Run again, it is no longer a failure; failed again, it is the latest.
    apply(store, id(2), TaskCommand::Rerun, at(8)).await;
    assert_eq!(failed(store, None, None, 10).await.0, vec![id(1)], "{name}");
    apply(store, id(2), TaskCommand::Cancel, at(10)).await;
    assert_eq!(failed(store, None, None, 10).await.0, vec![id(2), id(1)], "{name}");

    // Graphs, newest first.
    for (graph, secs) in [(201, 10), (202, 11)] {
        let input = graph_input(json!({"a": {}}));
        let request = shoal_store::GraphRequest { task_graph_id: id(graph), input, created_by: None };
        let _graph = store.run(CreateGraph { request }, at(secs)).await.unwrap().value;
    }
    let graphs = store.read(|reads| reads.list_task_graphs(None, 10)).await.unwrap();
    let ids: Vec<TaskId> = graphs.items.iter().map(|graph| graph.graph.status.task_graph_id).collect();
    assert_eq!(ids, vec![id(202), id(201)], "{name}");
    assert_eq!(graphs.items[0].created, at(11), "{name}");
}

/// Each listed group has a name (its graph's, its namesake's, or what its tasks' names share)
/// and a verdict from where its tasks are.
pub(crate) async fn a_listed_group_is_named_and_says_how_it_went(name: &str, backend: Backend) {
    let store = &backend.store;
    let task = |group: u32, task_name: &str| json!({"taskGroupId": id(group).as_str(), "metadata": {"name": task_name, "description": "d", "owner": "o", "source": "https://x"}});
    // 101: a decision task and what it made, all completed.
    create(store, id(101), task(101, "Decision Task"), at(0)).await;
    create(store, id(1), task(101, "build"), at(0)).await;
    // 102: a failure, a task blocked behind it, and one completed; 103: one pending.
    create(store, id(2), task(102, "nightly build linux"), at(0)).await;
    let mut blocked = task(102, "nightly build mac");
    blocked["dependencies"] = json!([id(2).as_str()]);
    create(store, id(3), blocked, at(0)).await;
    create(store, id(4), task(102, "nightly test"), at(0)).await;
    assert_eq!(claim_ids(store, worker(4), at(1)).await.len(), 4, "{name}");
    let resolve = |resolution| TaskCommand::Resolve { run_id: 0, resolution, stats: None };
    for (n, resolution) in [(101, Resolution::Completed), (1, Resolution::Completed), (2, Resolution::Failed)] {
        apply(store, id(n), resolve(resolution), at(2)).await;
    }
    apply(store, id(4), resolve(Resolution::Completed), at(2)).await;
    create(store, id(5), task(103, "lint"), at(3)).await;
    // 201: a graph's group, named by the graph.
    let mut input = graph_input(json!({"a": {}, "b": {}}));
    input.metadata = Some(serde_json::from_value(json!({"name": "push 41"})).unwrap());
    let request = shoal_store::GraphRequest { task_graph_id: id(201), input, created_by: None };
    let _graph = store.run(CreateGraph { request }, at(4)).await.unwrap().value;

    let listed = store.read(|reads| reads.list_task_groups(None, 10)).await.unwrap();
    let said: Vec<(TaskId, Option<String>, serde_json::Value, serde_json::Value)> = listed
        .items
        .iter()
        .map(|group| {
            let facts = serde_json::to_value(group).unwrap();
            (
                group.recent.group.task_group_id,
                group.name.clone(),
                facts["verdict"].clone(),
                facts["taskCounts"].clone(),
            )
        })
        .collect();
    let counts = |total, unresolved, active, failed| json!({"total": total, "unresolved": unresolved, "active": active, "failed": failed});
    let expected = vec![
        (id(201), Some("push 41".to_owned()), json!("running"), counts(2, 2, 2, 0)),
        (id(103), Some("lint".to_owned()), json!("running"), counts(1, 1, 1, 0)),
        (id(102), Some("nightly".to_owned()), json!("blocked"), counts(3, 1, 0, 1)),
        (id(101), Some("Decision Task".to_owned()), json!("completed"), counts(2, 0, 0, 0)),
    ];
    assert_eq!(said, expected, "{name}");
}
