//! Topic routing: the routing keys Shoal publishes under and the one function that matches
//! them against AMQP-style binding patterns (`*` is exactly one word, `#` zero or more).
//! Everything that matches topics goes through [`Pattern`] (compiled once per binding) and
//! [`Key`] (split once per routing key); [`matches`] does both for one pattern and one key.

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
    Pattern::new(pattern).matches(&Key::new(routing_key))
}

/// A binding pattern, split once into words; a run of `#` is one `#` (they match the same).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    words: Vec<PatternWord>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PatternWord {
    /// `#`: any number of words.
    Any,
    /// `*`: exactly one word.
    One,
    /// This word.
    Literal(String),
}

impl Pattern {
    /// `pattern` compiled.
    #[must_use]
    pub fn new(pattern: &str) -> Pattern {
        let mut words = Vec::new();
        for word in pattern.split('.') {
            let word = match word {
                "#" if words.last() == Some(&PatternWord::Any) => continue,
                "#" => PatternWord::Any,
                "*" => PatternWord::One,
                literal => PatternWord::Literal(literal.to_owned()),
            };
            words.push(word);
        }
        Pattern { words }
    }

    /// Whether `key` matches.
    #[must_use]
    pub fn matches(&self, key: &Key<'_>) -> bool {
        self.matches_counting(key).0
    }

    /// Whether `key` matches, and how many word steps that took: at most one per word of the
    /// pattern (after collapsing runs of `#`), each over the key's positions in 64-bit words,
    /// so the cost is linear in the key's length for any pattern (the matcher it replaced
    /// was quadratic in it for each `#`).
    #[must_use]
    pub fn matches_counting(&self, key: &Key<'_>) -> (bool, usize) {
        // reachable: bit j set when the pattern words seen so far can match the first j key
        // words. Keys are at most 255 bytes, so at most 128 words: 129 positions.
        let positions = key.words.len() + 1;
        let mut reachable = Bits::new(positions);
        reachable.set(0);
        let mut steps = 0;
        for word in &self.words {
            steps += 1;
            reachable = match word {
                PatternWord::Any => reachable.up_from_lowest(positions),
                PatternWord::One => reachable.shifted(positions),
                PatternWord::Literal(literal) => match key.positions_of(literal) {
                    Some(at) => reachable.and(at).shifted(positions),
                    None => return (false, steps),
                },
            };
            if reachable.is_empty() {
                return (false, steps);
            }
        }
        (reachable.get(key.words.len()), steps)
    }
}

/// The keys a message is routed under, prepared for matching: its routing key, then its CC keys.
#[must_use]
pub fn message_keys(message: &Message) -> Vec<Key<'_>> {
    std::iter::once(&message.routing_key).chain(&message.cc).map(|key| Key::new(key)).collect()
}

/// A routing key split into words once, with where each distinct word stands (sorted by
/// word), so that any number of patterns match it without comparing words again.
#[derive(Debug)]
pub struct Key<'a> {
    words: Vec<&'a str>,
    /// Each distinct word and the positions it stands at.
    at: Vec<(&'a str, Bits)>,
}

impl<'a> Key<'a> {
    /// `routing_key` prepared for matching.
    #[must_use]
    pub fn new(routing_key: &'a str) -> Key<'a> {
        let words: Vec<&str> = routing_key.split('.').collect();
        // Sorted, so that a key of many distinct words (a client chooses its routes) costs
        // n log n to prepare and log n per lookup, never a scan per word.
        let mut sorted: Vec<(&str, usize)> = words.iter().copied().zip(0..).collect();
        sorted.sort_unstable();
        let mut at: Vec<(&str, Bits)> = Vec::new();
        for (word, index) in sorted {
            match at.last_mut() {
                Some((last, bits)) if *last == word => bits.set(index),
                _ => {
                    let mut bits = Bits::new(words.len() + 1);
                    bits.set(index);
                    at.push((word, bits));
                }
            }
        }
        Key { words, at }
    }

    fn positions_of(&self, word: &str) -> Option<&Bits> {
        let found = self.at.binary_search_by(|(known, _)| (*known).cmp(word)).ok()?;
        Some(&self.at[found].1)
    }
}

/// A set of key positions.
#[derive(Debug, Clone)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(positions: usize) -> Bits {
        Bits(vec![0; positions.div_ceil(64)])
    }

    fn set(&mut self, index: usize) {
        self.0[index / 64] |= 1 << (index % 64);
    }

    fn get(&self, index: usize) -> bool {
        self.0[index / 64] & (1 << (index % 64)) != 0
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(|block| *block == 0)
    }

    fn and(mut self, other: &Bits) -> Bits {
        self.0.iter_mut().zip(&other.0).for_each(|(block, other)| *block &= other);
        self
    }

    /// Every position one further (what `*` or a literal leads to), within `positions`.
    fn shifted(mut self, positions: usize) -> Bits {
        let mut carry = 0;
        for block in &mut self.0 {
            let next_carry = *block >> 63;
            *block = (*block << 1) | carry;
            carry = next_carry;
        }
        self.trimmed(positions)
    }

    /// Every position from the lowest set one on (what `#` leads to), within `positions`.
    fn up_from_lowest(mut self, positions: usize) -> Bits {
        let mut seen = false;
        for block in &mut self.0 {
            if seen {
                *block = u64::MAX;
            } else if *block != 0 {
                *block = !((*block & block.wrapping_neg()) - 1);
                seen = true;
            }
        }
        self.trimmed(positions)
    }

    fn trimmed(mut self, positions: usize) -> Bits {
        let spare = self.0.len() * 64 - positions;
        if let Some(last) = self.0.last_mut()
            && spare > 0
        {
            *last &= u64::MAX >> spare;
        }
        self
    }
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
    /// The pattern compiled.
    compiled: Pattern,
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
        Ok(Binding { exchange, pattern: pattern.to_owned(), compiled: Pattern::new(pattern) })
    }

    /// Whether `message` is delivered through this binding.
    #[must_use]
    pub fn matches(&self, message: &Message) -> bool {
        self.matches_keys(message.exchange, &message_keys(message))
    }

    /// Whether a message of `exchange` under the prepared `keys` (its routing key and CC
    /// keys) is delivered through this binding: the keys are split once for every binding.
    #[must_use]
    pub fn matches_keys(&self, exchange: Exchange, keys: &[Key<'_>]) -> bool {
        self.exchange == exchange && keys.iter().any(|key| self.compiled.matches(key))
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

    /// The definition, written the slow obvious way (remembering what it found, so that
    /// long keys stay quick).
    fn reference(pattern: &[&str], key: &[&str]) -> bool {
        fn go(pattern: &[&str], key: &[&str], seen: &mut std::collections::HashMap<(usize, usize), bool>) -> bool {
            if let Some(&known) = seen.get(&(pattern.len(), key.len())) {
                return known;
            }
            let found = match (pattern.split_first(), key.split_first()) {
                (None, None) => true,
                (None, Some(_)) => false,
                (Some((&"#", rest)), _) => go(rest, key, seen) || (!key.is_empty() && go(pattern, &key[1..], seen)),
                (Some(_), None) => false,
                (Some((&"*", rest)), Some((_, key_rest))) => go(rest, key_rest, seen),
                (Some((word, rest)), Some((key_word, key_rest))) => word == key_word && go(rest, key_rest, seen),
            };
            seen.insert((pattern.len(), key.len()), found);
            found
        }
        go(pattern, key, &mut std::collections::HashMap::new())
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

    proptest::proptest! {
        #[test]
        fn agrees_with_the_definition_on_long_keys(
            pattern in proptest::collection::vec(proptest::sample::select(vec!["a", "b", "*", "#"]), 1..12),
            key in proptest::collection::vec(proptest::sample::select(vec!["a", "b"]), 60..140),
        ) {
            // Keys over 64 words use several blocks of positions.
            let expected = reference(&pattern, &key);
            proptest::prop_assert_eq!(matches(&pattern.join("."), &key.join(".")), expected);
        }
    }

    #[test]
    fn a_hostile_pattern_costs_one_step_per_word_whatever_the_key() {
        // The probe of issue 39: 126 `#`s and a last word, against a key of 125 short words.
        let hostile = format!("{}zz", "#.".repeat(126));
        let long_key = vec!["a"; 125].join(".");
        let (matched, steps) = Pattern::new(&hostile).matches_counting(&Key::new(&long_key));
        assert!(!matched);
        assert_eq!(steps, 2, "a run of `#` is one step, then `zz` is not in the key");
        let ending = format!("{long_key}.zz");
        assert_eq!(Pattern::new(&hostile).matches_counting(&Key::new(&ending)), (true, 2));
        // Alternating words cannot be collapsed: one step per pattern word, never per key word.
        let alternating = ["#.a"; 64].join(".");
        let (matched, steps) = Pattern::new(&alternating).matches_counting(&Key::new(&long_key));
        assert!(matched);
        assert!(steps <= 128, "{steps} steps");
    }

    #[test]
    fn a_key_of_many_distinct_words_is_looked_up_by_word() {
        let words: Vec<String> = (0..124).map(|n| format!("w{n}")).collect();
        let key = words.join(".");
        let prepared = Key::new(&key);
        assert!(Pattern::new("#.w123").matches(&prepared));
        assert!(Pattern::new("#.w50.#").matches(&prepared));
        assert!(Pattern::new("w0.*.w2.#").matches(&prepared));
        assert!(!Pattern::new("#.w124").matches(&prepared), "a word the key lacks");
        assert!(!Pattern::new("w1.#").matches(&prepared), "a word out of place");
        let (matched, steps) = Pattern::new(&format!("{}w99", "#.".repeat(126))).matches_counting(&prepared);
        assert_eq!((matched, steps), (false, 2));
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
        let keys = message_keys(&message);
        assert!(binding("task-completed", "route.index.#").matches_keys(message.exchange, &keys));
        assert!(!binding("task-failed", "#").matches_keys(message.exchange, &keys));
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
