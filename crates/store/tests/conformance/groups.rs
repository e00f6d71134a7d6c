//! Deadlines and task groups: what a deadline resolves, groups sealed, cancelled, listed and
//! resolved, and a group named after one of its tasks.

use super::*;

pub(crate) async fn deadline_resolves_every_unresolved_state(name: &str, backend: Backend) {
    let store = &backend.store;
    let (unscheduled, pending, running, done) = (id(1), id(2), id(3), id(4));
    create(store, running, json!({}), at(0)).await;
    claim_ids(store, worker(1), at(0)).await;
    create(store, done, json!({}), at(0)).await;
    claim_ids(store, worker(1), at(0)).await;
    apply(store, done, TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None }, at(1)).await;
    create(store, pending, json!({}), at(0)).await;
    let self_dependent = json!({"dependencies": [unscheduled.to_string()]});
    create(store, unscheduled, self_dependent, at(0)).await;
    assert_eq!(state_of(store, unscheduled).await, TaskState::Unscheduled, "{name}");

    // Claim expiry of `running` is due too; the deadline comes after it.
    let fired = store.run(FireDue { limit: 100 }, at(3600)).await.unwrap();
    assert!(fired.value >= 3, "{name}: {}", fired.value);
    for task_id in [unscheduled, pending, running] {
        let status = store.read(move |reads| reads.task(task_id)).await.unwrap().unwrap().status;
        let last = status.runs.last().unwrap();
        assert_eq!(last.reason_resolved, Some(ReasonResolved::DeadlineExceeded), "{name}: {task_id}");
    }
    assert_eq!(state_of(store, done).await, TaskState::Completed, "{name}");
    assert!(claim_ids(store, worker(5), at(3601)).await.is_empty(), "{name}");
}

pub(crate) async fn a_groups_later_deadline_fires_after_its_earlier_task_resolved(name: &str, backend: Backend) {
    let store = &backend.store;
    let (group, early, late) = (id(10), id(1), id(2));
    create(store, early, json!({"taskGroupId": group.to_string()}), at(0)).await;
    let two_hours = json!({"taskGroupId": group.to_string(), "deadline": "2026-01-01T02:00:00.000Z"});
    create(store, late, two_hours, at(0)).await;
    claim_ids(store, worker(1), at(1)).await;
    apply(store, early, TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None }, at(2))
        .await;
    assert_eq!(
        store.run(FireDue { limit: 100 }, at(3601)).await.unwrap().value,
        0,
        "{name}: nothing due at the first deadline"
    );
    assert_eq!(
        store.run(FireDue { limit: 100 }, at(7201)).await.unwrap().value,
        1,
        "{name}: the second deadline fires"
    );
    let status = store.read(move |reads| reads.task(late)).await.unwrap().unwrap().status;
    assert_eq!(status.runs[0].reason_resolved, Some(ReasonResolved::DeadlineExceeded), "{name}");
}

pub(crate) async fn a_task_run_again_after_its_groups_deadlines_passed_still_meets_its_own(
    name: &str,
    backend: Backend,
) {
    let store = &backend.store;
    let (group, first, second) = (id(10), id(1), id(2));
    let two_hours = json!({"taskGroupId": group.to_string(), "deadline": "2026-01-01T02:00:00.000Z"});
    create(store, first, two_hours, at(0)).await;
    claim_ids(store, worker(1), at(1)).await;
    apply(store, first, TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None }, at(2))
        .await;
    create(store, second, json!({"taskGroupId": group.to_string()}), at(3)).await;
    // The group's only unresolved task passes its deadline: none is left after it.
    assert_eq!(store.run(FireDue { limit: 100 }, at(3601)).await.unwrap().value, 1, "{name}");
    apply(store, first, TaskCommand::Rerun, at(3700)).await;
    assert_eq!(state_of(store, first).await, TaskState::Pending, "{name}");
    assert_eq!(
        store.run(FireDue { limit: 100 }, at(7201)).await.unwrap().value,
        1,
        "{name}: the rerun's deadline fires"
    );
    let status = store.read(move |reads| reads.task(first)).await.unwrap().unwrap().status;
    assert_eq!(status.runs[1].reason_resolved, Some(ReasonResolved::DeadlineExceeded), "{name}");
}

pub(crate) async fn groups_seal_and_cancel(name: &str, backend: Backend) {
    let store = &backend.store;
    let group = id(100);
    for n in 1..=3 {
        let patch = json!({"taskGroupId": group.to_string()});
        create(store, id(n), patch, at(0)).await;
    }
    let early = store.run(CancelGroup { task_group_id: group }, at(1)).await;
    assert!(matches!(early, Err(StoreError::Rejected(Rejection::Conflict(_)))), "{name}: must be sealed first");
    let other_scheduler = json!({"taskGroupId": group.to_string(), "schedulerId": "other"});
    let res = store.run(CreateTask { definition: definition(id(4), other_scheduler), task_id: id(4) }, at(1)).await;
    assert!(matches!(res, Err(StoreError::Rejected(Rejection::Conflict(_)))), "{name}: schedulerId is fixed");

    let sealed = store.run(SealGroup { task_group_id: group }, at(2)).await.unwrap().value;
    assert_eq!(sealed.sealed, Some(at(2)), "{name}");
    let late = store
        .run(
            CreateTask { definition: definition(id(5), json!({"taskGroupId": group.to_string()})), task_id: id(5) },
            at(3),
        )
        .await;
    assert!(matches!(late, Err(StoreError::Rejected(Rejection::Conflict(_)))), "{name}: sealed");

    claim_ids(store, worker(1), at(3)).await;
    let canceled = store.run(CancelGroup { task_group_id: group }, at(4)).await.unwrap().value;
    assert_eq!((canceled.task_group_size, canceled.cancelled_count), (3, 3), "{name}");
    let page = store.read(move |reads| reads.list_task_group(group, None, 2)).await.unwrap();
    assert_eq!(page.items.len(), 2, "{name}");
    let rest = store.read(move |reads| reads.list_task_group(group, page.continuation.as_deref(), 2)).await.unwrap();
    assert_eq!((rest.items.len(), rest.continuation), (1, None), "{name}");
    assert!(rest.items.iter().all(|rec| rec.status.state == TaskState::Exception), "{name}");
}

pub(crate) async fn a_groups_listing_pages_in_task_id_order_whatever_each_tasks_state(name: &str, backend: Backend) {
    let store = &backend.store;
    let group = id(100);
    for n in 1..=7 {
        create(store, id(n), json!({"taskGroupId": group.to_string()}), at(0)).await;
    }
    for n in [2, 3, 6] {
        apply(store, id(n), TaskCommand::Cancel, at(1)).await;
    }
    let (mut listed, mut after) = (Vec::new(), None::<String>);
    loop {
        let page = store.read(move |reads| reads.list_task_group(group, after.as_deref(), 2)).await.unwrap();
        assert!(page.items.len() <= 2, "{name}");
        listed.extend(page.items.iter().map(|rec| (rec.status.task_id, rec.status.state)));
        match page.continuation {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let expected: Vec<_> = (1..=7)
        .map(|n| (id(n), if [2, 3, 6].contains(&n) { TaskState::Exception } else { TaskState::Pending }))
        .collect();
    assert_eq!(listed, expected, "{name}");
}

pub(crate) async fn a_group_named_after_one_of_its_tasks_holds_it_like_any_other(name: &str, backend: Backend) {
    let store = &backend.store;
    let group = id(5);
    let expires = "2026-01-01T02:00:00.000Z";
    // id(5) names its own group, as a task created without one does; the others join it.
    create(store, group, json!({"expires": expires}), at(0)).await;
    for n in [9, 2, 7] {
        create(store, id(n), json!({"taskGroupId": group.to_string(), "expires": expires}), at(0)).await;
    }
    let listing = |size: usize| async move {
        let (mut listed, mut after) = (Vec::new(), None::<String>);
        loop {
            let page = store.read(move |reads| reads.list_task_group(group, after.as_deref(), size)).await.unwrap();
            listed.extend(page.items.iter().map(|rec| rec.status.task_id));
            match page.continuation {
                Some(next) => after = Some(next),
                None => return listed,
            }
        }
    };
    let all = vec![id(2), id(5), id(7), id(9)];
    for size in [1, 2, 3, 10] {
        assert_eq!(listing(size).await, all, "{name}: pages of {size}");
    }
    let _ = store.run(SealGroup { task_group_id: group }, at(1)).await.unwrap();
    let canceled = store.run(CancelGroup { task_group_id: group }, at(2)).await.unwrap().value;
    assert_eq!((canceled.task_group_size, canceled.cancelled_count), (4, 4), "{name}");

    // The group stays while any of its tasks does, its namesake included.
    let later = at(3 * 3600);
    assert_eq!(
        store
            .run(ForgetTasks { task_ids: vec![id(2), id(7), id(9)], limit: 10 }, later)
            .await
            .map(|done| done.value)
            .unwrap(),
        3,
        "{name}"
    );
    assert!(store.read(move |reads| reads.task_group(group)).await.unwrap().is_some(), "{name}");
    assert_eq!(listing(2).await, vec![group], "{name}");
    assert_eq!(
        store.run(ForgetTasks { task_ids: vec![group], limit: 10 }, later).await.map(|done| done.value).unwrap(),
        1,
        "{name}"
    );
    assert!(
        store.read(move |reads| reads.task_group(group)).await.unwrap().is_none(),
        "{name}: gone with its last task"
    );

    // A member forgotten last takes the group with it just the same.
    let other = id(20);
    create(store, other, json!({"expires": expires}), at(0)).await;
    create(store, id(21), json!({"taskGroupId": other.to_string(), "expires": expires}), at(0)).await;
    let _ = store.run(SealGroup { task_group_id: other }, at(1)).await.unwrap();
    let _ = store.run(CancelGroup { task_group_id: other }, at(2)).await.unwrap();
    assert_eq!(
        store.run(ForgetTasks { task_ids: vec![other], limit: 10 }, later).await.map(|done| done.value).unwrap(),
        1,
        "{name}"
    );
    assert!(store.read(move |reads| reads.task_group(other)).await.unwrap().is_some(), "{name}: a member is left");
    assert_eq!(
        store.run(ForgetTasks { task_ids: vec![id(21)], limit: 10 }, later).await.map(|done| done.value).unwrap(),
        1,
        "{name}"
    );
    assert!(store.read(move |reads| reads.task_group(other)).await.unwrap().is_none(), "{name}");

    // A namesake forgotten before its member, the group never sealed nor grown: the group
    // stays as it was, listed as it was, until the member goes too.
    let (lone, member) = (id(22), id(23));
    create(store, lone, json!({"expires": expires}), at(0)).await;
    create(store, member, json!({"taskGroupId": lone.to_string(), "expires": expires}), at(0)).await;
    let group_now = || async move { store.read(move |reads| reads.task_group(lone)).await.unwrap() };
    let listed_now = || async move {
        let page = store.read(|reads| reads.list_task_groups(None, 100)).await.unwrap();
        page.items
            .into_iter()
            .map(|item| item.recent)
            .find(|item| item.group.task_group_id == lone)
            .map(|item| (item.group, item.created))
    };
    let (before, listed_before) = (group_now().await.expect("the group"), listed_now().await);
    assert_eq!(listed_before, Some((before.clone(), at(0))), "{name}");
    for task in [lone, member] {
        apply(store, task, TaskCommand::Cancel, at(1)).await;
    }
    assert_eq!(
        store.run(ForgetTasks { task_ids: vec![lone], limit: 10 }, later).await.map(|done| done.value).unwrap(),
        1,
        "{name}"
    );
    assert_eq!(group_now().await, Some(before), "{name}: the member keeps the group");
    assert_eq!(listed_now().await, listed_before, "{name}");
    assert_eq!(
        store.run(ForgetTasks { task_ids: vec![member], limit: 10 }, later).await.map(|done| done.value).unwrap(),
        1,
        "{name}"
    );
    assert_eq!((group_now().await, listed_now().await), (None, None), "{name}: gone with its last task");

    // Resolved only once nothing in it is left unresolved, whichever resolves last.
    let done = |run_id| TaskCommand::Resolve { run_id, resolution: Resolution::Completed, stats: None };
    // In the first group its namesake resolves last, in the second its member.
    let [(namesake_last, first_member), (member_last, second_member)] = [(id(30), id(31)), (id(40), id(41))];
    for (group, member) in [(namesake_last, first_member), (member_last, second_member)] {
        create(store, group, json!({}), at(0)).await;
        create(store, member, json!({"taskGroupId": group.to_string()}), at(0)).await;
    }
    let resolved = vec![format!("primary.{namesake_last}.-._"), format!("primary.{member_last}.-._")];
    // The groups above resolved too, when they were cancelled.
    let resolved_now = || async {
        let all = routed(store, "task-group-resolved").await;
        all.into_iter().filter(|key| resolved.contains(key)).collect::<Vec<_>>()
    };
    assert_eq!(claim_ids(store, worker(4), at(1)).await.len(), 4, "{name}");
    apply(store, first_member, done(0), at(2)).await;
    apply(store, member_last, done(0), at(2)).await;
    assert!(resolved_now().await.is_empty(), "{name}: each group has a task running");
    apply(store, namesake_last, done(0), at(3)).await;
    apply(store, second_member, done(0), at(3)).await;
    assert_eq!(resolved_now().await, resolved, "{name}");
}
