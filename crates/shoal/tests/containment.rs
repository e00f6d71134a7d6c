//! A hostile task against a real worker with its default bubblewrap sandbox (as root in CI,
//! where each slot has a user of its own): each test is an attack that once worked, and
//! asserts that it no longer does. docs/security.md names them beside its claims.

mod support;

use std::path::Path;

use base64::Engine as _;
use serde_json::{Value, json};
use support::worker::{create_definition, definition, log_of, resolved, run, server, worker_with};

fn root_is_running_this() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A shared library that, loaded into any process, appends `<program> uid=<uid>` to
/// `marks.txt` in `$MARK_DIR` and in `$HOME`; also an audit library (`LD_AUDIT`).
const MARKER_C: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static void note(const char *dir) {
    if (!dir) return;
    char exe[512] = {0};
    if (readlink("/proc/self/exe", exe, sizeof exe - 1) < 0) strcpy(exe, "?");
    char path[1024];
    snprintf(path, sizeof path, "%s/marks.txt", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0666);
    if (fd < 0) return;
    char line[700];
    int n = snprintf(line, sizeof line, "%s uid=%d\n", exe, (int)getuid());
    if (write(fd, line, n) < 0) {}
    close(fd);
}
__attribute__((constructor)) static void mark(void) { note(getenv("MARK_DIR")); note(getenv("HOME")); }
unsigned int la_version(unsigned int version) { return version; }
"#;

/// The same mark from a script, named as a program the sandbox might run.
const MARKER_SH: &str = "#!/bin/sh\nwhile read -r key value rest; do [ \"$key\" = Uid: ] && uid=$value; done < /proc/self/status\n\
    for d in \"$MARK_DIR\" \"$HOME\"; do [ -n \"$d\" ] && echo \"$0 uid=$uid\" >> \"$d/marks.txt\"; done\n";

fn compiled_marker(dir: &Path) -> Vec<u8> {
    let source = dir.join("marker.c");
    std::fs::write(&source, MARKER_C).unwrap();
    let library = dir.join("marker.so");
    let out = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .output()
        .expect("cc (gcc) builds the marker library");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::read(library).unwrap()
}

fn inline(path: &str, bytes: &[u8]) -> Value {
    json!({"file": path, "content": {"base64": base64::engine::general_purpose::STANDARD.encode(bytes)}})
}

/// Every loader and shell variable in `payload.env`, each pointing at the task's own code,
/// changes what the task's own command does and nothing else: no program that builds the
/// sandbox (bwrap, setpriv, env) runs it, nothing runs it as root, nothing outside the
/// sandbox runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_variables_reach_only_its_own_command() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let work = dir.path().join("work");
    let _worker = worker_with(&server.root, "attack/env", "w1", &work, &[]);
    // Outside the sandbox: only a process that escaped it could write here.
    let marks = dir.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    std::fs::set_permissions(&marks, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let library = compiled_marker(dir.path());
    let task_dir = work.join("slot-0");
    let at = |name: &str| task_dir.join(name).to_string_lossy().into_owned();
    let mut mounts = vec![inline("marker.so", &library), inline("bashenv.sh", MARKER_SH.as_bytes())];
    // Named as the programs that build the sandbox, for a PATH that looks here first.
    for fake in ["setpriv", "env", "bwrap", "sh"] {
        mounts.push(inline(fake, MARKER_SH.as_bytes()));
    }
    for library_name in ["libselinux.so.1", "libcap.so.2", "libcap-ng.so.0", "libpcre2-8.so.0"] {
        mounts.push(inline(&format!("lib/{library_name}"), &library));
    }
    mounts.push(inline("gconv/gconv-modules", b"module INTERNAL MARK// marker 1\n"));
    let payload = json!({
        "command": [
            ["/usr/bin/chmod", "+x", "setpriv", "env", "bwrap", "sh", "bashenv.sh"],
            ["bash", "-c", "true"],
            ["cat", "marks.txt"]
        ],
        "env": {
            "MARK_DIR": marks.to_string_lossy(),
            "LD_PRELOAD": at("marker.so"),
            "LD_AUDIT": at("marker.so"),
            "LD_LIBRARY_PATH": at("lib"),
            "PATH": ".:/usr/bin:/bin",
            "BASH_ENV": at("bashenv.sh"),
            "ENV": at("bashenv.sh"),
            "IFS": "/ ",
            "GCONV_PATH": at("gconv"),
            "LOCPATH": at("gconv"),
        },
        "mounts": mounts,
        "maxRunTime": 60
    });
    let (run, log) = run(&server, "attack/env", payload, &[]).await;
    assert_eq!(run["state"], "completed", "{log}");
    assert!(
        !marks.join("marks.txt").exists(),
        "code ran outside the sandbox: {:?}",
        std::fs::read_to_string(marks.join("marks.txt"))
    );
    let lines: Vec<&str> = log.lines().filter(|line| line.contains(" uid=")).collect();
    let own_uid = if root_is_running_this() { None } else { Some(nix::unistd::geteuid().as_raw()) };
    for line in &lines {
        let (program, uid) = line.rsplit_once(" uid=").unwrap();
        let uid: u32 = uid.trim().parse().unwrap_or_else(|_| panic!("{line}\n{log}"));
        assert_ne!(uid, 0, "code of the task's ran as root: {line}\n{log}");
        assert!(own_uid.is_none_or(|own| own == uid), "{line}");
        for builder in ["bwrap", "setpriv", "/env", "/sh"] {
            assert!(!program.ends_with(builder), "the sandbox's {builder} ran the task's code: {line}\n{log}");
        }
    }
    // The variables did reach the task's own command (so the test could see them fail).
    assert!(lines.iter().any(|line| line.starts_with("/usr/bin/bash uid=")), "LD_PRELOAD reached bash: {log}");
    assert!(lines.iter().any(|line| line.starts_with("bash uid=")), "BASH_ENV reached bash: {log}");
}

/// The task holds no capability, and sees the system read-only, its own directory and the
/// operator's `--sandbox-path`, and nothing else of the host: not `/etc/shadow`, not a
/// world-readable file elsewhere, not the worker's work directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_capability_survives_and_the_host_is_out_of_sight() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let work = dir.path().join("work");
    // World-readable, outside /tmp (whose sandbox copy is private anyway).
    let elsewhere = tempfile::Builder::new().prefix("shoal-probe-").tempdir_in("/var/tmp").unwrap();
    std::fs::write(elsewhere.path().join("seen.txt"), "host file").unwrap();
    let extra = tempfile::Builder::new().prefix("shoal-tools-").tempdir_in("/var/tmp").unwrap();
    std::fs::write(extra.path().join("tool.txt"), "operator tool").unwrap();
    for path in [elsewhere.path(), extra.path()] {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let extra_arg = extra.path().to_string_lossy().into_owned();
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("worker.toml"), "token = 'x'").unwrap();
    let _worker = worker_with(&server.root, "attack/view", "w1", &work, &["--sandbox-path", &extra_arg]);
    let payload = json!({
        "command": [
            "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status",
            "test -s /etc/shadow && echo SAW-SHADOW; head -c 64 /etc/shadow 2>/dev/null | grep -q . && echo READ-SHADOW; \
             test -e \"$ELSEWHERE/seen.txt\" && echo SAW-ELSEWHERE; test -e \"$WORK/worker.toml\" && echo SAW-WORKER; \
             test -e /root && echo SAW-ROOT-HOME; test -e /home && echo SAW-HOME; \
             echo \"extra: $(cat \"$EXTRA/tool.txt\")\"; touch \"$EXTRA/new\" 2>/dev/null && echo WROTE-EXTRA; \
             touch /usr/x 2>/dev/null && echo WROTE-USR; test -r /etc/passwd && echo passwd-readable; echo root: $(ls /)"
        ],
        "env": {"ELSEWHERE": elsewhere.path().to_string_lossy(), "WORK": work.to_string_lossy(), "EXTRA": extra_arg},
        "maxRunTime": 60
    });
    let (run, log) = run(&server, "attack/view", payload, &[]).await;
    assert_eq!(run["state"], "completed", "{log}");
    for seen in ["SAW-", "READ-SHADOW", "WROTE-"] {
        assert!(!log.contains(seen), "{seen}: {log}");
    }
    assert!(log.contains("extra: operator tool") && log.contains("passwd-readable"), "{log}");
    assert!(log.contains("NoNewPrivs:\t1"), "{log}");
    let caps: Vec<&str> = log.lines().filter(|line| line.starts_with("Cap")).collect();
    assert_eq!(caps.len(), 5, "{log}");
    for line in caps {
        let held = line.split_whitespace().nth(1).unwrap();
        let must_be_empty = root_is_running_this() || line.starts_with("CapEff") || line.starts_with("CapPrm");
        if must_be_empty {
            assert_eq!(held, "0000000000000000", "no capability survives: {line}\n{log}");
        }
    }
}

/// Each of the slot's limits ends a run that reaches it, naming it in the log and the
/// stats; the worker goes on to run the next task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_a_slot_limit_ends_with_its_reason_and_the_worker_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let limits = ["--max-processes", "64", "--max-memory", "200MiB", "--tmp-size", "8MiB", "--max-task-disk", "32MiB"];
    // A slot user of its own: the kernel counts a uid's processes across every worker.
    let limits = [&limits[..], &["--first-uid", "61000"]].concat();
    let _worker = worker_with(&server.root, "attack/limits", "w1", &dir.path().join("work"), &limits);
    let cases = [
        // bash retries a fork the kernel refuses, as a build tool would.
        ("processes", "bash -c 'for i in $(seq 300); do sleep 60 & done; wait'", "--max-processes"),
        ("memory", "dd if=/dev/zero of=/dev/null bs=400M count=100", "--max-memory"),
        ("tmp", "head -c 16M /dev/zero > /tmp/big; sleep 60", "--tmp-size"),
        ("disk", "head -c 64M /dev/zero > big; sleep 60", "--max-task-disk"),
    ];
    for (limit, command, flag) in cases {
        let (run, log) = run(&server, "attack/limits", json!({"command": [command], "maxRunTime": 120}), &[]).await;
        assert_eq!(run["state"], "failed", "{limit}: {log}");
        assert_eq!(run["stats"]["limitExceeded"], limit, "{run}\n{log}");
        assert!(log.contains(flag), "{limit}: the log names the limit: {log}");
    }
    let (run, log) = run(&server, "attack/limits", json!({"command": ["echo alive"], "maxRunTime": 60}), &[]).await;
    assert_eq!(run["state"], "completed", "the worker lives on: {log}");
}

/// A URL mount of the server's own API is fetched as anyone would: not with the run's
/// credentials (which may resolve and reclaim it, and create its artifacts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_mount_carries_no_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let _worker = worker_with(&server.root, "attack/url", "w1", &dir.path().join("work"), &[]);
    let url = format!("{}/api/auth/v1/scopes/current", server.root);
    let payload = json!({
        "command": ["cat scopes.json"],
        "mounts": [{"file": "scopes.json", "content": {"url": url}}],
        "maxRunTime": 60
    });
    let (run, log) = run(&server, "attack/url", payload, &["queue:get-artifact:private/*"]).await;
    assert_eq!(run["state"], "completed", "{log}");
    assert!(log.contains("\"scopes\""), "{log}");
    for scope in ["queue:resolve-task", "queue:reclaim-task", "queue:create-artifact", "queue:get-artifact"] {
        assert!(!log.contains(scope), "the mount was fetched with {scope}: {log}");
    }
}

/// A digest read from a victim's definition does not unlock the bytes of its private
/// artifact from the worker's cache: content is kept by where it came from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_digest_never_unlocks_a_private_artifact_from_the_cache() {
    use sha2::Digest as _;
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let _worker = worker_with(&server.root, "attack/cache", "w1", &dir.path().join("work"), &[]);
    let secret = "the victims private bytes\n";
    let payload = json!({
        "command": ["echo 'the victims private bytes' > key.txt"],
        "artifacts": [{"type": "file", "path": "key.txt", "name": "private/key.txt"}],
        "maxRunTime": 60
    });
    let mut task = definition("attack/cache", payload);
    task["retries"] = json!(0);
    let build_id = create_definition(&server, &task).await;
    let build = resolved(&server, &build_id, 1).await;
    assert_eq!(build["state"], "completed", "{}", log_of(&server, &build_id, 0).await);
    let sha256 = format!("{:x}", sha2::Sha256::digest(secret.as_bytes()));
    let victim = json!({
        "command": ["cat key.txt"],
        "mounts": [{"file": "key.txt", "content": {"taskId": build_id, "artifact": "private/key.txt", "sha256": sha256}}],
        "maxRunTime": 60
    });
    let (run_victim, log) = run(&server, "attack/cache", victim, &["queue:get-artifact:private/key.txt"]).await;
    assert_eq!(run_victim["state"], "completed", "{log}");
    assert!(log.contains(secret.trim_end()), "{log}");
    let attacker = json!({
        "command": ["cat key.txt"],
        "mounts": [{"file": "key.txt", "content": {"url": format!("{}/nothing-here", server.root), "sha256": sha256}}],
        "maxRunTime": 60
    });
    let (run_attacker, log) = run(&server, "attack/cache", attacker, &[]).await;
    assert!(!log.contains(secret.trim_end()), "the cache served the private bytes: {log}");
    assert_eq!(run_attacker["state"], "exception", "{log}");
}
