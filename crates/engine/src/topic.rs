//! Topic routing: the routing keys Shoal publishes under and the one function that matches
//! them against AMQP-style binding patterns (`*` is exactly one word, `#` zero or more).
//! Everything that matches topics (the embedded event stream, tests, tools) uses [`matches`].

use crate::message::{Exchange, Message};
use crate::{Rejection, TaskId};

/// The prefix of every queue exchange.
pub const EXCHANGE_PREFIX: &str = "exchange/taskcluster-queue/v1/";
/// The prefix of every task-graph scheduler exchange.
pub const SCHEDULER_EXCHANGE_PREFIX: &str = "exchange/taskcluster-scheduler/v1/";
/// Longest routing key, in bytes.
pub const MAX_ROUTING_KEY_BYTES: usize = 255;
/// The word standing for a value the message does not have (e.g. the worker of a pending run).
pub const MISSING: &str = "_";

/// Whether `routing_key` matches the binding `pattern`.
#[must_use]
pub fn matches(pattern: &str, routing_key: &str) -> bool {
    let pattern: Vec<&str> = pattern.split('.').collect();
    let key: Vec<&str> = routing_key.split('.').collect();
    // reachable[j]: the pattern words seen so far can match the first j key words.
    let mut reachable = vec![false; key.len() + 1];
    reachable[0] = true;
    for word in pattern {
        let mut next = vec![false; key.len() + 1];
        for j in 0..=key.len() {
            if !reachable[j] {
                continue;
            }
            match word {
                // `#` absorbs any number of words, none included.
                "#" => next[j..].iter_mut().for_each(|slot| *slot = true),
                "*" if j < key.len() => next[j + 1] = true,
                literal if j < key.len() && key[j] == literal => next[j + 1] = true,
                _ => {}
            }
        }
        reachable = next;
    }
    reachable[key.len()]
}

/// The words of a task message's primary routing key.
#[derive(Debug, Clone, Copy)]
pub struct TaskKey<'a> {
    /// The task.
    pub task_id: TaskId,
    /// The run, if the message is about one.
    pub run_id: Option<u32>,
    /// The worker's group, if a worker holds the run.
    pub worker_group: Option<&'a str>,
    /// The worker, if a worker holds the run.
    pub worker_id: Option<&'a str>,
    /// `provisionerId/workerType`.
    pub task_queue_id: &'a str,
    /// Scheduler.
    pub scheduler_id: &'a str,
    /// Group.
    pub task_group_id: TaskId,
}

impl TaskKey<'_> {
    /// `primary.<taskId>.<runId>.<workerGroup>.<workerId>.<provisionerId>.<workerType>.<schedulerId>.<taskGroupId>._`,
    /// with `_` for a missing word (the last word is reserved and always `_`).
    #[must_use]
    pub fn routing_key(&self) -> String {
        let (provisioner_id, worker_type) = self.task_queue_id.split_once('/').unwrap_or((self.task_queue_id, MISSING));
        let run_id = self.run_id.map(|run_id| run_id.to_string());
        let words = [
            "primary",
            self.task_id.as_str(),
            run_id.as_deref().unwrap_or(MISSING),
            self.worker_group.unwrap_or(MISSING),
            self.worker_id.unwrap_or(MISSING),
            provisioner_id,
            worker_type,
            self.scheduler_id,
            self.task_group_id.as_str(),
            MISSING,
        ];
        // Identifiers are at most 38 bytes and slugids 22, so the key stays under 255 bytes.
        words.join(".")
    }
}

/// `primary.<taskGroupId>.<schedulerId>._`, the key of task-group messages.
#[must_use]
pub fn group_routing_key(task_group_id: TaskId, scheduler_id: &str) -> String {
    format!("primary.{task_group_id}.{scheduler_id}.{MISSING}")
}

/// The extra routing keys (AMQP CC) of a task's messages: `route.<route>` for each route.
#[must_use]
pub fn route_keys(routes: &[String]) -> Vec<String> {
    routes.iter().map(|route| format!("route.{route}")).collect()
}

/// One subscription binding: messages of `exchange` whose routing key (or one of its CC
/// keys) matches `pattern`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The exchange.
    pub exchange: Exchange,
    /// An AMQP topic pattern.
    pub pattern: String,
}

impl Binding {
    /// Parses an exchange name (full or short) and a routing-key pattern.
    ///
    /// # Errors
    /// Invalid naming `exchange` or `routingKeyPattern` and the rule broken.
    pub fn parse(exchange: &str, pattern: &str) -> Result<Binding, Rejection> {
        let exchange = Exchange::parse(exchange).ok_or_else(|| {
            Rejection::invalid(
                "exchange",
                format!(
                    "must be one of the queue's or the scheduler's exchanges ({EXCHANGE_PREFIX}task-pending, \
                     {SCHEDULER_EXCHANGE_PREFIX}task-graph-finished, ...), not {exchange:?}"
                ),
            )
        })?;
        if pattern.is_empty() || pattern.len() > MAX_ROUTING_KEY_BYTES || pattern.split('.').any(str::is_empty) {
            return Err(Rejection::invalid(
                "routingKeyPattern",
                "must be 1 to 255 bytes of non-empty words separated by '.' (`*` one word, `#` any number)",
            ));
        }
        Ok(Binding { exchange, pattern: pattern.to_owned() })
    }

    /// Whether `message` is delivered through this binding.
    #[must_use]
    pub fn matches(&self, message: &Message) -> bool {
        self.exchange == message.exchange
            && (matches(&self.pattern, &message.routing_key)
                || message.cc.iter().any(|key| matches(&self.pattern, key)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_is_one_word_hash_is_any_number() {
        assert!(matches("a.*.c", "a.b.c"));
        assert!(!matches("a.*.c", "a.c"));
        assert!(!matches("a.*.c", "a.b.b.c"));
        assert!(matches("a.#.c", "a.c"), "# matches zero words");
        assert!(matches("a.#.c", "a.b.b.c"));
        assert!(matches("#", "anything.at.all"));
        assert!(matches("a.#", "a"), "a trailing # matches nothing after");
        assert!(matches("#.c", "c"));
        assert!(matches("a.#.#.d", "a.d"));
        assert!(!matches("a.b", "a.b.c"));
        assert!(!matches("a.b.c", "a.b"));
        assert!(matches("route.index.#", "route.index.project.build"));
    }

    #[test]
    fn taskcluster_binding_patterns_match_our_keys() {
        let task_id = TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6A").unwrap();
        let key = TaskKey {
            task_id,
            run_id: Some(0),
            worker_group: None,
            worker_id: None,
            task_queue_id: "proj/linux",
            scheduler_id: "-",
            task_group_id: task_id,
        }
        .routing_key();
        assert_eq!(key, "primary.fN1S_sG4TTu5SNmTb0Xd6A.0._._.proj.linux.-.fN1S_sG4TTu5SNmTb0Xd6A._");
        assert!(key.len() <= MAX_ROUTING_KEY_BYTES);
        // What the official clients build for "every pending task of proj/linux".
        assert!(matches("primary.*.*.*.*.proj.linux.*.*.#", &key));
        assert!(!matches("primary.*.*.*.*.proj.windows.*.*.#", &key));
        assert!(matches(&format!("primary.{task_id}.#"), &key));
        assert_eq!(group_routing_key(task_id, "sched"), "primary.fN1S_sG4TTu5SNmTb0Xd6A.sched._");
        assert_eq!(route_keys(&["index.a.b".into()]), vec!["route.index.a.b"]);
    }

    /// The definition, written the slow obvious way.
    fn reference(pattern: &[&str], key: &[&str]) -> bool {
        match (pattern.split_first(), key.split_first()) {
            (None, None) => true,
            (None, Some(_)) => false,
            (Some((&"#", rest)), _) => reference(rest, key) || (!key.is_empty() && reference(pattern, &key[1..])),
            (Some(_), None) => false,
            (Some((&"*", rest)), Some((_, key_rest))) => reference(rest, key_rest),
            (Some((word, rest)), Some((key_word, key_rest))) => word == key_word && reference(rest, key_rest),
        }
    }

    proptest::proptest! {
        #[test]
        fn agrees_with_the_definition(
            pattern in proptest::collection::vec(proptest::sample::select(vec!["a", "b", "*", "#"]), 1..7),
            key in proptest::collection::vec(proptest::sample::select(vec!["a", "b", "c"]), 1..7),
        ) {
            let expected = reference(&pattern, &key);
            proptest::prop_assert_eq!(matches(&pattern.join("."), &key.join(".")), expected);
        }
    }

    #[test]
    fn bindings_match_primary_and_cc_keys_of_their_exchange() {
        let message = Message {
            exchange: Exchange::TaskCompleted,
            routing_key: "primary.t.0.g.w.proj.linux.s.grp._".into(),
            cc: vec!["route.index.project.build".into()],
            body: "{}".into(),
        };
        let binding = |exchange: &str, pattern: &str| Binding::parse(exchange, pattern).unwrap();
        assert!(binding("task-completed", "primary.*.*.*.*.proj.linux.#").matches(&message));
        assert!(binding("exchange/taskcluster-queue/v1/task-completed", "route.index.#").matches(&message));
        assert!(!binding("task-failed", "#").matches(&message), "another exchange");
        assert!(!binding("task-completed", "route.other.#").matches(&message));
        let bad = Binding::parse("task-done", "#").unwrap_err();
        assert!(bad.to_string().contains("exchange"), "{bad}");
        let bad = Binding::parse("task-completed", "a..b").unwrap_err();
        assert!(bad.to_string().contains("routingKeyPattern"), "{bad}");
    }

    #[test]
    fn the_longest_key_fits() {
        let task_id = TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6A").unwrap();
        let long = "x".repeat(38);
        let queue = format!("{long}/{}", "y".repeat(38));
        let key = TaskKey {
            task_id,
            run_id: Some(49),
            worker_group: Some(&long),
            worker_id: Some(&long),
            task_queue_id: &queue,
            scheduler_id: &long,
            task_group_id: task_id,
        }
        .routing_key();
        assert!(key.len() <= MAX_ROUTING_KEY_BYTES, "{} bytes", key.len());
    }
}
