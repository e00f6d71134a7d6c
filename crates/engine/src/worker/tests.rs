//! The worker registry's rules, case by case.

use super::*;

#[test]
fn a_sighting_names_what_is_wrong_with_its_caches() {
    let with = |caches: Vec<String>| Sighting { caches: Some(caches), ..Sighting::default() }.check();
    assert!(with(vec!["checkout".into(), "ccache:v2".into()]).is_ok());
    for bad in [vec!["../up".to_owned()], vec![String::new()], vec!["x".to_owned(); MAX_CACHES + 1]] {
        let refused = with(bad).unwrap_err();
        assert!(format!("{refused:?}").contains("caches"), "{refused:?}");
    }
}

#[test]
fn a_first_sighting_is_the_oldest_event_of_its_millisecond() {
    let at = Timestamp(1_790_000_000_000);
    let mut events = vec![
        WorkerEvent::at(WorkerEventKind::FirstSeen, at),
        WorkerEvent::at(WorkerEventKind::Claimed, at),
        WorkerEvent::at(WorkerEventKind::Resolved, Timestamp(at.0 + 1)),
    ];
    newest_first(&mut events);
    let kinds: Vec<_> = events.iter().map(|event| event.kind).collect();
    assert_eq!(kinds, [WorkerEventKind::Resolved, WorkerEventKind::Claimed, WorkerEventKind::FirstSeen]);
}

fn key() -> WorkerKey {
    WorkerKey { task_queue_id: "p/w".into(), worker_group: "g".into(), worker_id: "i".into() }
}

fn at(secs: i64) -> Timestamp {
    Timestamp(1_800_000_000_000 + secs * 1000)
}

fn heartbeat() -> Sighting {
    Sighting { heartbeat: true, ..Sighting::default() }
}

#[test]
fn a_silent_heartbeating_worker_goes_missing_once_and_comes_back() {
    let (mut worker, events) = Worker::first(key(), heartbeat(), at(0), at(100));
    assert_eq!(events[0].kind, WorkerEventKind::FirstSeen);
    assert!(worker.lose(at(0), at(130)).is_empty(), "seen at the cutoff is not missing");
    let lost = worker.lose(at(10), at(130));
    assert_eq!(lost[0].kind, WorkerEventKind::Missing);
    assert!(worker.lose(at(10), at(131)).is_empty(), "missing once");
    assert_eq!(worker.state(at(131), 120_000, false), WorkerState::Missing);
    let back = worker.seen(heartbeat(), at(140), at(200));
    assert_eq!(back[0].kind, WorkerEventKind::Back);
    assert_eq!(worker.state(at(141), 120_000, true), WorkerState::Busy);
}

#[test]
fn a_worker_that_does_not_heartbeat_is_never_marked_missing() {
    let (mut worker, _) = Worker::first(key(), Sighting::default(), at(0), at(100));
    assert!(worker.lose(at(500), at(600)).is_empty());
    assert_eq!(worker.state(at(600), 120_000, false), WorkerState::Missing, "but listed as silent");
}

#[test]
fn quarantine_bars_claims_until_it_ends_and_a_past_time_releases() {
    let (mut worker, _) = Worker::first(key(), Sighting::default(), at(0), at(100));
    let events = worker.quarantine(at(60), "flaky disk".into(), "admin", at(1)).unwrap();
    assert_eq!(events[0].kind, WorkerEventKind::Quarantined);
    assert_eq!(events[0].detail.as_deref(), Some("flaky disk"));
    assert_eq!(worker.standing(at(2)).quarantine_until, Some(at(60)));
    assert!(worker.standing(at(2)).barred(at(2)));
    assert_eq!(worker.state(at(2), 120_000, false), WorkerState::Quarantined);
    assert!(!worker.standing(at(61)).barred(at(61)), "ends by itself");
    let events = worker.quarantine(at(1), String::new(), "admin", at(3)).unwrap();
    assert_eq!(events[0].kind, WorkerEventKind::Released);
    assert!(!worker.standing(at(4)).barred(at(4)));
    assert_eq!(worker.quarantine_details.len(), 2);
    worker.quarantine(at(5000), String::new(), "admin", at(4)).unwrap();
    assert_eq!(worker.expires, at(5000), "kept while quarantined");
    let long = "x".repeat(MAX_QUARANTINE_INFO + 1);
    assert!(matches!(worker.quarantine(at(9), long, "a", at(5)), Err(Rejection::Invalid { .. })));
}

#[test]
fn termination_bars_claims_until_the_worker_exits_and_a_new_process_starts_afresh() {
    let (mut worker, _) = Worker::first(key(), heartbeat(), at(0), at(100));
    assert!(worker.exited(at(1)).is_empty(), "not asked");
    assert_eq!(worker.request_termination("admin", at(1))[0].kind, WorkerEventKind::Terminating);
    assert!(worker.request_termination("admin", at(2)).is_empty());
    assert!(worker.standing(at(2)).barred(at(2)));
    assert_eq!(worker.exited(at(3))[0].kind, WorkerEventKind::Terminated);
    assert!(worker.lose(at(500), at(600)).is_empty(), "an exited worker is not missing");
    assert_eq!(worker.state(at(4), 120_000, false), WorkerState::Terminated);
    // Exited, a claim still waiting from that process gets nothing, and the heartbeat's answer
    // does not ask it to terminate again.
    let standing = worker.standing(at(4));
    assert!(standing.exited && !standing.terminate && standing.barred(at(4)), "{standing:?}");
    assert_eq!(worker.seen(heartbeat(), at(5), at(100))[0].kind, WorkerEventKind::Back);
    assert!(!worker.standing(at(6)).barred(at(6)));
}

#[test]
fn the_standing_is_the_one_rule_state_and_backlog_read() {
    // Each way a worker can be held, seen alike by its standing, its state and the backlog.
    let now = at(10);
    let (free, _) = Worker::first(key(), heartbeat(), at(0), at(100));
    let mut quarantined = free.clone();
    quarantined.quarantine_until = Some(at(60));
    let mut maintained = free.clone();
    maintained.maintenance = Some(Maintenance { message: "disk".into(), since: at(1), client_id: None });
    let mut terminating = free.clone();
    terminating.request_termination("admin", at(1));
    let mut exited = terminating.clone();
    exited.exited(at(2));
    let counted = |live, quarantined, maintenance, terminating| crate::backlog::Matching {
        live,
        quarantined,
        maintenance,
        terminating,
        missing: 0,
    };
    let cases = [
        (&free, false, WorkerState::Idle, counted(1, 0, 0, 0)),
        (&quarantined, true, WorkerState::Quarantined, counted(0, 1, 0, 0)),
        (&maintained, true, WorkerState::Maintenance, counted(0, 0, 1, 0)),
        (&terminating, true, WorkerState::Idle, counted(0, 0, 0, 1)),
        (&exited, true, WorkerState::Terminated, counted(0, 0, 0, 0)),
    ];
    for (worker, barred, state, backlog) in cases {
        let standing = worker.standing(now);
        assert_eq!(standing.barred(now), barred, "{standing:?}");
        assert_eq!(worker.state(now, 120_000, false), state, "{standing:?}");
        assert_eq!(worker.is_quarantined(now), standing.quarantine_until.is_some());
        let set = crate::backlog::PendingSet { dimensions: Dimensions::default(), pending: 1, oldest: at(0) };
        let lines = crate::backlog::backlog(vec![set], std::slice::from_ref(worker), now, 120_000);
        assert_eq!(lines[0].workers, backlog, "{standing:?}");
    }
}

#[test]
fn recent_tasks_keep_the_latest_twenty() {
    let (mut worker, _) = Worker::first(key(), Sighting::default(), at(0), at(100));
    let task_id = TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6A").unwrap();
    worker.claimed((0..25).map(|run_id| TaskRun { task_id, run_id }), at(1));
    worker.claimed([TaskRun { task_id, run_id: 25 }], at(2));
    assert_eq!(worker.recent_tasks.len(), RECENT_TASKS);
    assert_eq!(worker.recent_tasks[0].run_id, 6);
    assert_eq!(worker.first_claim, Some(at(1)));
}

#[test]
fn events_are_numbered_on_from_those_recorded() {
    let (mut worker, events) = Worker::first(key(), Sighting::default(), at(0), at(100));
    let numbers = |numbered: Vec<(u64, WorkerEvent)>| numbered.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    assert_eq!(numbers(worker.number(events)), [1]);
    let later = worker.request_termination("admin", at(1));
    let again = worker.exited(at(2));
    assert_eq!(numbers(worker.number([later, again].concat())), [2, 3]);
    assert_eq!(worker.events_recorded, 3);
}

#[test]
fn dimension_filters_need_every_pair() {
    let raw = [("os".to_owned(), vec!["Linux".to_owned(), "Ubuntu".to_owned()])].into_iter().collect();
    let sighting = Sighting { dimensions: Some(Dimensions::parse("dimensions", raw).unwrap()), ..heartbeat() };
    let (worker, _) = Worker::first(key(), sighting, at(0), at(100));
    let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert!(worker.has_dimensions(&[pair("os", "Linux"), pair("os", "Ubuntu")]));
    assert!(!worker.has_dimensions(&[pair("os", "Linux"), pair("pool", "x")]));
}

#[test]
fn maintenance_bars_claims_and_the_workers_word_never_overrides_an_operators() {
    let own = |message: Option<&str>| Sighting { maintenance: Some(message.map(str::to_owned)), ..heartbeat() };
    let (mut worker, events) = Worker::first(key(), own(Some("disk full")), at(0), at(100));
    assert_eq!(events[1].kind, WorkerEventKind::Maintenance, "entered with its first sighting");
    assert_eq!(worker.state(at(1), 120_000, true), WorkerState::Maintenance, "its runs go on");
    assert!(worker.standing(at(1)).barred(at(1)));
    assert!(worker.seen(own(Some("disk full")), at(2), at(100)).is_empty(), "said again: nothing new");
    assert!(worker.seen(heartbeat(), at(2), at(100)).is_empty(), "a sighting saying nothing changes nothing");
    let ended = worker.seen(own(None), at(3), at(100));
    assert_eq!(ended[0].kind, WorkerEventKind::MaintenanceEnded);
    assert!(!worker.standing(at(3)).barred(at(3)));

    // An operator's maintenance stands until an operator ends it.
    let events = worker.maintain(Some("reimage".into()), Some("admin"), at(4)).unwrap();
    assert_eq!((events[0].kind, events[0].client_id.as_deref()), (WorkerEventKind::Maintenance, Some("admin")));
    assert!(worker.seen(own(None), at(5), at(100)).is_empty(), "the worker cannot end it");
    assert!(worker.seen(own(Some("fine")), at(5), at(100)).is_empty(), "nor replace it");
    assert_eq!(worker.maintenance.as_ref().map(|held| held.message.as_str()), Some("reimage"));
    assert_eq!(worker.maintain(None, Some("admin"), at(6)).unwrap()[0].kind, WorkerEventKind::MaintenanceEnded);
    let long = "x".repeat(MAX_MESSAGE + 1);
    assert!(matches!(worker.maintain(Some(long.clone()), None, at(7)), Err(Rejection::Invalid { .. })));
    assert!(own(Some(&long)).check().is_err(), "a sighting's too");
}

#[test]
fn posted_events_are_kept_and_a_shutdown_means_it_exited() {
    let (mut worker, _) = Worker::first(key(), heartbeat(), at(0), at(100));
    let events = worker.posted(Posted::Error, "sandbox setup failed".into(), "worker/w", at(1)).unwrap();
    assert_eq!((events[0].kind, events[0].detail.as_deref()), (WorkerEventKind::Error, Some("sandbox setup failed")));
    assert_eq!(worker.state(at(1), 120_000, false), WorkerState::Idle, "an error changes no state");
    worker.posted(Posted::Shutdown, String::new(), "worker/w", at(2)).unwrap();
    assert_eq!(worker.state(at(3), 120_000, false), WorkerState::Terminated);
    assert!(worker.lose(at(500), at(600)).is_empty(), "a worker that said it exits is not missing");
    assert!(worker.posted(Posted::Log, "x".repeat(MAX_MESSAGE + 1), "worker/w", at(4)).is_err());
    assert_eq!(Posted::from_name("rebooting"), Some(Posted::Rebooting));
    assert_eq!(Posted::from_name("reboot"), None);
}

#[test]
fn a_record_in_another_queue_is_the_same_machine_only_if_it_lists_this_queue_too() {
    let in_queue = |queue: &str, serves: Option<Vec<String>>| {
        let key = WorkerKey { task_queue_id: queue.into(), ..key() };
        Worker::first(key, Sighting { queues: serves, ..heartbeat() }, at(0), at(3600)).0
    };
    let both = || Some(vec!["p/a".to_owned(), "p/b".to_owned()]);
    let worker = in_queue("p/a", both());
    let keys: Vec<String> = worker.siblings().map(|key| key.task_queue_id).collect();
    assert_eq!(keys, ["p/b"]);
    assert!(worker.is_sibling(&in_queue("p/b", both())));
    assert!(!worker.is_sibling(&in_queue("p/b", None)), "a namesake that never listed p/a");
    assert!(!worker.is_sibling(&in_queue("p/a", both())), "not its own record");
}

#[test]
fn a_claims_queues_start_with_its_paths_each_once_and_few() {
    let listed = |queues: &[&str]| Some(queues.iter().map(|queue| (*queue).to_owned()).collect::<Vec<_>>());
    assert_eq!(served_queues("p/a", None).unwrap(), ["p/a"]);
    assert_eq!(served_queues("p/a", listed(&["p/a", "p/b"])).unwrap(), ["p/a", "p/b"]);
    let refused = |path, queues: &[&str]| served_queues(path, listed(queues)).unwrap_err().to_string();
    assert_eq!(refused("p/a", &["p/b", "p/a"]), "taskQueueIds: must start with the task queue of the path");
    assert_eq!(refused("p/a", &["p/a", "nope"]), "taskQueueIds[1]: `nope` must be provisionerId/workerType");
    assert_eq!(refused("p/a", &["p/a", "p/b", "p/a"]), "taskQueueIds[2]: `p/a` is listed twice");
    let many: Vec<String> = (0..=MAX_QUEUES).map(|n| format!("p/{n}")).collect();
    let too_many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert!(refused("p/0", &too_many).starts_with("taskQueueIds: must list at most"));
}
