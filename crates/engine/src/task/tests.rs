//! Transition tests as scripts: each line is a command, the output the rendered result.

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::definition::TaskDefinitionInput;

const T0: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

fn new_task(retries: u32) -> Task {
    let input: TaskDefinitionInput = serde_json::from_value(json!({
        "taskQueueId": "prov/wt",
        "created": "2026-01-01T00:00:00.000Z",
        "deadline": "2026-01-01T01:00:00.000Z",
        "retries": retries,
        "payload": {},
        "metadata": {"name": "n", "description": "d", "owner": "o", "source": "https://x"}
    }))
    .unwrap();
    let task_id = TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6A").unwrap();
    Task::new(task_id, &input.validate(task_id, Timestamp(T0)).unwrap())
}

/// Applies one script line at `now`; time moves with `at +Ns`.
fn apply(task: &mut Task, now: &mut Timestamp, line: &str) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let run = |idx: usize| words.get(idx).and_then(|w| w.parse::<u32>().ok()).unwrap_or(0);
    let res = match words.as_slice() {
        ["at", offset] => {
            let secs: i64 = offset.trim_start_matches('+').trim_end_matches('s').parse().unwrap();
            *now = now.plus_secs(secs);
            return format!("now +{}s", (now.millis() - T0) / 1000);
        }
        ["schedule"] => task.schedule(*now, &Capacity::Assumed),
        ["claim", _] => task.claim(run(1), &Claimant::named("g", "w"), *now, 60),
        ["reclaim", _] => task.reclaim(run(1), *now, 60),
        ["complete", _] => task.resolve(run(1), Resolution::Completed, *now),
        ["fail", _] => task.resolve(run(1), Resolution::Failed, *now),
        ["exception", _, reason] => {
            task.resolve(run(1), Resolution::worker_exception(WorkerException::from_name(reason).unwrap()), *now)
        }
        ["expire-claims"] => Ok(task.expire_claim(*now).unwrap_or_default()),
        ["exceed-deadline"] => Ok(task.exceed_deadline(*now).unwrap_or_default()),
        ["cancel"] => task.cancel(*now),
        ["rerun"] => task.rerun(*now),
        ["priority", name] => task.change_priority(Priority::parse("priority", &json!(name)).unwrap(), *now),
        _ => panic!("unknown command {line}"),
    };
    match res {
        Err(rejection) => format!("{line} -> rejected: {rejection}"),
        Ok(effects) => format!("{line} -> {:?} | {}", effects.0, render(task)),
    }
}

fn render(task: &Task) -> String {
    let runs: Vec<String> = task
        .runs()
        .iter()
        .map(|run| {
            let state = serde_json::to_value(run.state).unwrap();
            let created = serde_json::to_value(run.reason_created).unwrap();
            let resolved = run.reason_resolved.map(|r| serde_json::to_value(r).unwrap());
            match resolved {
                Some(reason) => {
                    format!("{}/{}/{}", state.as_str().unwrap(), created.as_str().unwrap(), reason.as_str().unwrap())
                }
                None => format!("{}/{}", state.as_str().unwrap(), created.as_str().unwrap()),
            }
        })
        .collect();
    format!("{} retries={} [{}]", task.state().as_str(), task.retries_left(), runs.join(", "))
}

#[track_caller]
fn check(retries: u32, script: &str, expect: &str) {
    let mut task = new_task(retries);
    let mut now = Timestamp(T0);
    let got: Vec<String> =
        script.lines().map(str::trim).filter(|l| !l.is_empty()).map(|line| apply(&mut task, &mut now, line)).collect();
    let expect: Vec<&str> = expect.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    assert_eq!(got, expect, "\n--- got ---\n{}\n", got.join("\n"));
}

#[test]
fn happy_path() {
    check(
        5,
        "schedule
         schedule
         claim 0
         complete 0
         complete 0
         fail 0",
        "schedule -> [Pending { run_id: 0 }] | pending retries=5 [pending/scheduled]
         schedule -> [] | pending retries=5 [pending/scheduled]
         claim 0 -> [Running { run_id: 0 }] | running retries=5 [running/scheduled]
         complete 0 -> [Completed { run_id: 0 }] | completed retries=5 [completed/scheduled/completed]
         complete 0 -> [] | completed retries=5 [completed/scheduled/completed]
         fail 0 -> rejected: run 0 of task fN1S_sG4TTu5SNmTb0Xd6A is not running",
    );
}

#[test]
fn claims_need_the_pending_last_run() {
    check(
        5,
        "claim 0
         schedule
         claim 1
         claim 0
         claim 0
         reclaim 0
         reclaim 3",
        "claim 0 -> rejected: run 0 of task fN1S_sG4TTu5SNmTb0Xd6A not found
         schedule -> [Pending { run_id: 0 }] | pending retries=5 [pending/scheduled]
         claim 1 -> rejected: run 1 of task fN1S_sG4TTu5SNmTb0Xd6A not found
         claim 0 -> [Running { run_id: 0 }] | running retries=5 [running/scheduled]
         claim 0 -> rejected: run 0 of task fN1S_sG4TTu5SNmTb0Xd6A is not pending
         reclaim 0 -> [] | running retries=5 [running/scheduled]
         reclaim 3 -> rejected: run 3 of task fN1S_sG4TTu5SNmTb0Xd6A not found",
    );
}

#[test]
fn retries_until_the_budget_is_spent() {
    check(
        2,
        "schedule
         claim 0
         exception 0 worker-shutdown
         claim 1
         exception 1 intermittent-task
         claim 2
         at +61s
         expire-claims
         expire-claims",
        "schedule -> [Pending { run_id: 0 }] | pending retries=2 [pending/scheduled]
         claim 0 -> [Running { run_id: 0 }] | running retries=2 [running/scheduled]
         exception 0 worker-shutdown -> [Exception { run_id: 0 }, Pending { run_id: 1 }] | pending retries=1 [exception/scheduled/worker-shutdown, pending/retry]
         claim 1 -> [Running { run_id: 1 }] | running retries=1 [exception/scheduled/worker-shutdown, running/retry]
         exception 1 intermittent-task -> [Exception { run_id: 1 }, Pending { run_id: 2 }] | pending retries=0 [exception/scheduled/worker-shutdown, exception/retry/intermittent-task, pending/task-retry]
         claim 2 -> [Running { run_id: 2 }] | running retries=0 [exception/scheduled/worker-shutdown, exception/retry/intermittent-task, running/task-retry]
         now +61s
         expire-claims -> [Exception { run_id: 2 }] | exception retries=0 [exception/scheduled/worker-shutdown, exception/retry/intermittent-task, exception/task-retry/claim-expired]
         expire-claims -> [] | exception retries=0 [exception/scheduled/worker-shutdown, exception/retry/intermittent-task, exception/task-retry/claim-expired]",
    );
}

#[test]
fn reclaim_postpones_expiry_and_non_retry_exceptions_are_final() {
    check(
        5,
        "schedule
         claim 0
         at +50s
         reclaim 0
         at +20s
         expire-claims
         exception 0 malformed-payload
         reclaim 0",
        "schedule -> [Pending { run_id: 0 }] | pending retries=5 [pending/scheduled]
         claim 0 -> [Running { run_id: 0 }] | running retries=5 [running/scheduled]
         now +50s
         reclaim 0 -> [] | running retries=5 [running/scheduled]
         now +70s
         expire-claims -> [] | running retries=5 [running/scheduled]
         exception 0 malformed-payload -> [Exception { run_id: 0 }] | exception retries=5 [exception/scheduled/malformed-payload]
         reclaim 0 -> rejected: run 0 of task fN1S_sG4TTu5SNmTb0Xd6A is resolved or not running",
    );
}

#[test]
fn cancel_and_deadline() {
    check(
        5,
        "cancel
         cancel
         rerun
         at +3600s
         exceed-deadline
         rerun",
        "cancel -> [Exception { run_id: 0 }] | exception retries=5 [exception/exception/canceled]
         cancel -> [] | exception retries=5 [exception/exception/canceled]
         rerun -> [Pending { run_id: 1 }] | pending retries=5 [exception/exception/canceled, pending/rerun]
         now +3600s
         exceed-deadline -> [Exception { run_id: 1 }] | exception retries=5 [exception/exception/canceled, exception/rerun/deadline-exceeded]
         rerun -> rejected: task fN1S_sG4TTu5SNmTb0Xd6A passed its deadline 2026-01-01T01:00:00.000Z",
    );
}

#[test]
fn deadline_ends_unscheduled_and_running_tasks() {
    check(5, "at +3600s\nexceed-deadline", "now +3600s\nexceed-deadline -> [Exception { run_id: 0 }] | exception retries=0 [exception/exception/deadline-exceeded]".replace("retries=0", "retries=5").as_str());
    check(
        5,
        "schedule
         claim 0
         at +3599s
         exceed-deadline
         at +1s
         exceed-deadline",
        "schedule -> [Pending { run_id: 0 }] | pending retries=5 [pending/scheduled]
         claim 0 -> [Running { run_id: 0 }] | running retries=5 [running/scheduled]
         now +3599s
         exceed-deadline -> [] | running retries=5 [running/scheduled]
         now +3600s
         exceed-deadline -> [Exception { run_id: 0 }] | exception retries=5 [exception/scheduled/deadline-exceeded]",
    );
}

#[test]
fn rerun_and_priority_rules() {
    check(
        5,
        "rerun
         schedule
         priority high
         priority high
         claim 0
         complete 0
         priority low
         rerun
         rerun",
        "rerun -> [Pending { run_id: 0 }] | pending retries=5 [pending/rerun]
         schedule -> [] | pending retries=5 [pending/rerun]
         priority high -> [PriorityChanged { old: Named(6), new: Named(2), with_group: false }] | pending retries=5 [pending/rerun]
         priority high -> [] | pending retries=5 [pending/rerun]
         claim 0 -> [Running { run_id: 0 }] | running retries=5 [running/rerun]
         complete 0 -> [Completed { run_id: 0 }] | completed retries=5 [completed/rerun/completed]
         priority low -> rejected: task fN1S_sG4TTu5SNmTb0Xd6A is resolved; its priority cannot change
         rerun -> [Pending { run_id: 1 }] | pending retries=5 [completed/rerun/completed, pending/rerun]
         rerun -> [] | pending retries=5 [completed/rerun/completed, pending/rerun]",
    );
}

#[test]
fn taken_until_rounds_up_to_whole_seconds() {
    assert_eq!(taken_until(Timestamp(1_000), 10), Timestamp(11_000));
    assert_eq!(taken_until(Timestamp(1_001), 10), Timestamp(12_000));
}

/// Every command the property test may issue.
#[derive(Debug, Clone)]
enum Cmd {
    Schedule,
    Claim(u32),
    Reclaim(u32),
    Resolve(u32, u8),
    ExpireClaims,
    ExceedDeadline,
    Cancel,
    Rerun,
    Advance(i64),
}

fn cmd() -> impl Strategy<Value = Cmd> {
    prop_oneof![
        Just(Cmd::Schedule),
        (0u32..6).prop_map(Cmd::Claim),
        (0u32..6).prop_map(Cmd::Reclaim),
        (0u32..6, 0u8..8).prop_map(|(run, how)| Cmd::Resolve(run, how)),
        Just(Cmd::ExpireClaims),
        Just(Cmd::ExceedDeadline),
        Just(Cmd::Cancel),
        Just(Cmd::Rerun),
        (1i64..400).prop_map(Cmd::Advance),
    ]
}

proptest! {
    #[test]
    fn invariants_hold_for_any_command_sequence(retries in 0u32..4, cmds in proptest::collection::vec(cmd(), 1..80)) {
        let mut task = new_task(retries);
        let mut now = Timestamp(T0);
        for cmd in cmds {
            let before = task.clone();
            // A reclaim moves takenUntil and publishes nothing; every other change has an event.
            let silent_change_allowed = matches!(cmd, Cmd::Reclaim(_));
            let res = match cmd {
                Cmd::Schedule => task.schedule(now, &Capacity::Assumed),
                Cmd::Claim(run) => task.claim(run, &Claimant::named("g", "w"), now, 60),
                Cmd::Reclaim(run) => task.reclaim(run, now, 60),
                Cmd::Resolve(run, how) => {
                    let resolution = match how {
                        0 => Resolution::Completed,
                        1 => Resolution::Failed,
                        n => Resolution::worker_exception(WorkerException::ALL[usize::from(n - 2)]),
                    };
                    task.resolve(run, resolution, now)
                }
                Cmd::ExpireClaims => Ok(task.expire_claim(now).unwrap_or_default()),
                Cmd::ExceedDeadline => Ok(task.exceed_deadline(now).unwrap_or_default()),
                Cmd::Cancel => task.cancel(now),
                Cmd::Rerun => task.rerun(now),
                Cmd::Advance(secs) => { now = now.plus_secs(secs); Ok(Effects::none()) }
            };
            match res {
                Err(_) => prop_assert_eq!(&task, &before, "a refused command changed the task"),
                Ok(effects) if effects.is_empty() => prop_assert!(silent_change_allowed || task == before, "a change without an event"),
                Ok(_) => prop_assert_ne!(&task, &before, "an event without a change"),
            }
            // Runs only append: every run but the previous last is unchanged.
            let n_before = before.runs().len();
            prop_assert!(task.runs().len() >= n_before);
            if n_before > 1 {
                prop_assert_eq!(&task.runs()[..n_before - 1], &before.runs()[..n_before - 1]);
            }
            for (idx, run) in task.runs().iter().enumerate() {
                prop_assert_eq!(run.run_id as usize, idx);
                let unresolved = !run.state.is_resolved();
                prop_assert!(!unresolved || idx + 1 == task.runs().len(), "only the last run may be unresolved");
                prop_assert_eq!(run.state.is_resolved(), run.reason_resolved.is_some(), "resolved runs have a reason");
                prop_assert_eq!(run.state.is_resolved(), run.resolved.is_some());
                if run.state == RunState::Running {
                    prop_assert!(run.worker_id.is_some() && run.taken_until.is_some());
                }
            }
            prop_assert!(task.retries_left() <= task.meta.retries);
            prop_assert!(task.runs().len() <= MAX_RUNS);
            // The stores' SQL reads "unresolved" as `deadline_due IS NOT NULL` (`row::unresolved!`).
            prop_assert_eq!(task.deadline_due().is_some(), !task.state().is_resolved(), "deadline_due set exactly while unresolved");
        }
    }
}

#[test]
fn claim_expiry_past_the_deadline_is_a_deadline() {
    check(
        5,
        "schedule
         claim 0
         at +3600s
         expire-claims",
        "schedule -> [Pending { run_id: 0 }] | pending retries=5 [pending/scheduled]
         claim 0 -> [Running { run_id: 0 }] | running retries=5 [running/scheduled]
         now +3600s
         expire-claims -> [Exception { run_id: 0 }] | exception retries=5 [exception/scheduled/deadline-exceeded]",
    );
}

fn sliced_task() -> Task {
    let input: TaskDefinitionInput = serde_json::from_value(json!({
        "taskQueueId": "prov/wt",
        "created": "2026-01-01T00:00:00.000Z",
        "deadline": "2026-01-01T01:00:00.000Z",
        "retries": 1,
        "payload": {},
        "metadata": {"name": "n", "description": "d", "owner": "o", "source": "https://x"},
        "slices": [
            {"dimensions": {"os": ["Mac"]}, "expiresAfter": 60},
            {"dimensions": {"os": ["Linux"]}, "expiresAfter": 120},
            {"dimensions": {"os": ["Windows"]}, "expiresAfter": 30, "waitForCapacity": true}
        ]
    }))
    .unwrap();
    let task_id = TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6A").unwrap();
    Task::new(task_id, &input.validate(task_id, Timestamp(T0)).unwrap())
}

fn workers(oses: &[&str]) -> Capacity {
    let one = |os: &str| {
        crate::dimensions::Dimensions::parse("w", BTreeMap::from([("os".to_owned(), vec![os.to_owned()])])).unwrap()
    };
    Capacity::Workers(oses.iter().map(|os| one(os)).collect())
}

#[test]
fn slices_fall_back_in_order_keeping_the_run() {
    let t0 = Timestamp(T0);
    let mut task = sliced_task();
    let linux = workers(&["Linux"]);
    let _ = task.schedule(t0, &linux).unwrap();
    assert_eq!(task.status_slice(), Some(1), "no Mac worker: the first slice is skipped at once");
    assert_eq!(task.meta.dimensions, task.meta.slices[1].dimensions);
    assert_eq!(task.deadline_due(), Some(t0.plus_secs(120)));
    assert!(task.expire_slice(t0.plus_secs(119), &linux).is_none(), "not yet");
    let effects = task.expire_slice(t0.plus_secs(120), &workers(&[])).unwrap();
    assert_eq!(effects.0, vec![Event::Pending { run_id: 0 }], "the same run, announced again");
    assert_eq!(task.status_slice(), Some(2), "waitForCapacity waits without workers");
    assert_eq!(task.runs()[0].slice.map(|at| at.since), Some(t0.plus_secs(120)));
    let effects = task.expire_slice(t0.plus_secs(150), &linux).unwrap();
    assert_eq!(effects.0, vec![Event::Exception { run_id: 0 }]);
    assert_eq!(task.runs()[0].reason_resolved, Some(ReasonResolved::DeadlineExceeded), "after the last slice");
    assert_eq!(task.deadline_due(), None);
}

#[test]
fn a_task_no_slice_can_run_is_resource_unavailable_and_retries_keep_the_slice() {
    let t0 = Timestamp(T0);
    let mut input = sliced_task();
    input.meta.slices[2].wait_for_capacity = false;
    let mut task = input.clone();
    let _ = task.schedule(t0, &workers(&["BeOS"])).unwrap();
    assert_eq!(task.state(), TaskState::Exception);
    assert_eq!(task.runs()[0].reason_resolved, Some(ReasonResolved::ResourceUnavailable));
    let mut task = input;
    let _ = task.schedule(t0, &workers(&["Linux"])).unwrap();
    let _ = task.claim(0, &Claimant::named("g", "w"), t0, 60).unwrap();
    let _ = task.resolve(0, Resolution::Exception(ReasonResolved::WorkerShutdown), t0.plus_secs(5)).unwrap();
    assert_eq!(task.status_slice(), Some(1), "the retry waits on the slice that ran");
    assert_eq!(task.deadline_due(), Some(t0.plus_secs(125)), "counted from the retry");
}
