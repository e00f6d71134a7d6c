//! The Hooks service's rules: ids, definitions, schedules, payloads and rendering.

use serde_json::{Map, Value, json};

use super::*;

fn key() -> HookKey {
    HookKey::parse("project-x", "nightly/decision").unwrap()
}

fn body(extra: Value) -> Vec<u8> {
    let mut hook = json!({
        "metadata": {"name": "n", "description": "d", "owner": "o@example.com"},
        "task": {"taskQueueId": "p/w", "payload": {"at": "${now}", "by": "${firedBy}"}, "metadata": {}},
    });
    for (k, v) in extra.as_object().unwrap() {
        hook[k] = v.clone();
    }
    serde_json::to_vec(&hook).unwrap()
}

fn at(text: &str) -> Timestamp {
    Timestamp::parse(text).unwrap()
}

#[test]
fn ids_are_checked_as_taskcluster_routes_take_them() {
    assert!(HookKey::parse("a-b_c", "x/y-z").is_ok());
    assert!(HookKey::parse("a/b", "x").is_err(), "a group has no slash");
    assert!(HookKey::parse("a", "x.y").is_err());
    assert!(HookKey::parse("", "x").is_err());
    assert_eq!(key().role(), "assume:hook-id:project-x/nightly/decision");
}

#[test]
fn a_definition_gets_taskclusters_defaults_and_its_routes_ids() {
    let hook = Hook::parse(&key(), &body(json!({}))).unwrap();
    assert_eq!(hook.hook_group_id, "project-x");
    assert_eq!(hook.hook_id, "nightly/decision");
    assert!(hook.schedule.is_empty());
    assert_eq!(hook.trigger_schema, json!({"type": "object", "additionalProperties": false}));
    assert!(hook.metadata.email_on_error);
}

#[test]
fn bad_definitions_are_refused_naming_the_field() {
    let refused = |extra: Value| match Hook::parse(&key(), &body(extra)) {
        Err(Rejection::Invalid { field, .. }) => field,
        other => panic!("{other:?}"),
    };
    assert_eq!(refused(json!({"hookId": "other"})), "hookId");
    assert_eq!(refused(json!({"schedule": ["not cron"]})), "schedule[0]");
    assert_eq!(refused(json!({"schedule": ["0 0 * * *", "0 0 * * *"]})), "schedule[1]");
    assert_eq!(refused(json!({"triggerSchema": {"type": 12}})), "triggerSchema");
    assert_eq!(refused(json!({"bindings": [{"exchange": "x", "routingKeyPattern": "#"}]})), "bindings");
    assert_eq!(refused(json!({"surprise": 1})), "surprise");
    assert_eq!(refused(json!({"metadata": {"name": "n", "description": "d", "owner": "nobody"}})), "metadata.owner");
}

#[test]
fn the_schedule_reads_five_or_six_fields_with_posix_weekdays_in_utc() {
    let hook = |schedule: Value| Hook::parse(&key(), &body(json!({"schedule": schedule}))).unwrap();
    // 2026-11-27 is a Friday.
    let friday = at("2026-11-27T10:00:00.000Z");
    assert_eq!(hook(json!(["0 9 * * 1-5"])).next_fire(friday), Some(at("2026-11-30T09:00:00.000Z")));
    assert_eq!(hook(json!(["30 0 9 * * 1-5"])).next_fire(friday), Some(at("2026-11-30T09:00:30.000Z")));
    assert_eq!(hook(json!(["0 0 * * 0"])).next_fire(friday), Some(at("2026-11-29T00:00:00.000Z")), "0 is Sunday");
    // The earliest pattern wins; the time itself is excluded.
    let both = hook(json!(["0 12 * * *", "0 0 11 * * *"]));
    assert_eq!(both.next_fire(friday), Some(at("2026-11-27T11:00:00.000Z")));
    assert_eq!(both.next_fire(at("2026-11-27T11:00:00.000Z")), Some(at("2026-11-27T12:00:00.000Z")));
    assert_eq!(hook(json!([])).next_fire(friday), None);
}

#[test]
fn rendering_gives_the_fire_its_time_id_and_defaults() {
    let hook = Hook::parse(&key(), &body(json!({}))).unwrap();
    let task_id = TaskId::parse("fN1JgG5nT4i2ROFQ3x0XuA").unwrap();
    let mut context = Map::new();
    context.insert("firedBy".into(), json!("schedule"));
    let now = at("2026-11-27T09:00:00.000Z");
    let task = hook.render(context, task_id, now).unwrap().unwrap();
    assert_eq!(task["payload"], json!({"at": "2026-11-27T09:00:00.000Z", "by": "schedule"}));
    assert_eq!(task["created"], json!("2026-11-27T09:00:00.000Z"));
    assert_eq!(task["deadline"], json!("2026-11-28T09:00:00.000Z"));
    assert_eq!(task["expires"], json!("2026-12-27T09:00:00.000Z"));
    assert_eq!(task["taskGroupId"], json!(task_id));
}

#[test]
fn a_template_may_decline_or_fail() {
    let declines = body(json!({"task": {"$if": "payload.go", "then": {"taskQueueId": "p/w"}}}));
    let hook = Hook::parse(&key(), &declines).unwrap();
    let task_id = TaskId::parse("fN1JgG5nT4i2ROFQ3x0XuA").unwrap();
    let context = |go: bool| json!({"payload": {"go": go}}).as_object().unwrap().clone();
    let now = at("2026-11-27T09:00:00.000Z");
    assert_eq!(hook.render(context(false), task_id, now), Ok(None));
    assert!(hook.render(context(true), task_id, now).unwrap().is_some());
    let broken = Hook::parse(&key(), &body(json!({"task": {"x": {"$eval": "missing.field"}}}))).unwrap();
    assert!(broken.render(Map::new(), task_id, now).is_err());
}

#[test]
fn payloads_are_checked_against_the_trigger_schema() {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let hook = Hook::parse(&key(), &body(json!({"triggerSchema": schema}))).unwrap();
    assert!(hook.check_payload(&json!({"n": 3})).is_ok());
    let Err(Rejection::Input(message)) = hook.check_payload(&json!({"n": "three"})) else { panic!() };
    assert!(message.contains("payload/n"), "{message}");
    let default = Hook::parse(&key(), &body(json!({}))).unwrap();
    assert!(default.check_payload(&json!({})).is_ok());
    assert!(default.check_payload(&json!({"x": 1})).is_err(), "the default takes only an empty payload");
}

#[test]
fn a_fire_error_is_cut_at_a_character_boundary() {
    let task_id = TaskId::parse("fN1JgG5nT4i2ROFQ3x0XuA").unwrap();
    let long = "é".repeat(MAX_FIRE_ERROR);
    let fire = Fire::error(task_id, FiredBy::TriggerHook, Timestamp(0), &long);
    assert!(fire.error.len() <= MAX_FIRE_ERROR);
    assert_eq!(fire.result, "error");
}
