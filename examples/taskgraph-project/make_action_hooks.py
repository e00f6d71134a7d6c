#!/usr/bin/env python3
"""Creates (or updates) the project's in-tree action hooks, as Taskcluster's ci-admin does: one
hook per action permission named in a decision task's `public/actions.json`, whose task is the
project's `.taskcluster.yml` rendered with `tasks_for: action`.

    TASKCLUSTER_ROOT_URL=... TASKCLUSTER_CLIENT_ID=... TASKCLUSTER_ACCESS_TOKEN=... \\
        make_action_hooks.py <decision taskId> [path/to/.taskcluster.yml]

Needs the official client (`pip install taskcluster`) and PyYAML; the caller needs
`hooks:modify-hook:project-<trust-domain>/*` and `assume:hook-id:project-<trust-domain>/*`.
Each hook's role, `hook-id:<hookGroupId>/<hookId>`, must grant what its action task is created
with (`assume:repo:<host>/<owner>/<repo>:action:<permission>` and the queue scopes).
"""

import os
import sys

import requests
import taskcluster
import yaml


def hook_definition(tcyml, permission):
    """The hook that renders `.taskcluster.yml` (parsed) into an action task for `permission`."""
    return {
        "metadata": {
            "name": f"In-tree actions ({permission})",
            "description": "Runs an action of the project's actions.json (taskgraph's action-callback).",
            "owner": "dev@example.com",
            "emailOnError": False,
        },
        "task": {
            "$let": {
                "tasks_for": "action",
                "action": {"$eval": "payload.decision.action"},
                "push": {"$eval": "payload.decision.push"},
                "repository": {"$eval": "payload.decision.repository"},
                "input": {"$eval": "payload.user.input"},
                "taskId": {"$eval": "payload.user.taskId"},
                "taskGroupId": {"$eval": "payload.user.taskGroupId"},
                # The hook's own id for the task it creates.
                "ownTaskId": {"$eval": "taskId"},
                "actionPerm": permission,
            },
            "in": tcyml["tasks"][0],
        },
        "triggerSchema": {
            "type": "object",
            "properties": {"decision": {"type": "object"}, "user": {"type": "object"}},
            "required": ["decision", "user"],
        },
    }


def make_hooks(hooks, queue, decision_task_id, tcyml):
    """Creates or updates a hook for each hook action of the decision's actions.json; answers
    the `(hookGroupId, hookId)` of each."""
    # A public artifact: downloaded from where the queue redirects, as any client may.
    answer = requests.get(queue.buildUrl("getLatestArtifact", decision_task_id, "public/actions.json"), timeout=60)
    answer.raise_for_status()
    actions = answer.json()
    made = set()
    for action in actions["actions"]:
        if action.get("kind") != "hook":
            continue
        key = (action["hookGroupId"], action["hookId"])
        if key in made:
            continue
        definition = hook_definition(tcyml, action["extra"]["actionPerm"])
        try:
            hooks.hook(*key)
            hooks.updateHook(*key, definition)
        except taskcluster.exceptions.TaskclusterRestFailure as failure:
            if failure.status_code != 404:
                raise
            hooks.createHook(*key, definition)
        made.add(key)
    return sorted(made)


def main():
    decision_task_id = sys.argv[1]
    path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), ".taskcluster.yml")
    with open(path) as file:
        tcyml = yaml.safe_load(file)
    options = taskcluster.optionsFromEnvironment()
    for group, hook in make_hooks(taskcluster.Hooks(options), taskcluster.Queue(options), decision_task_id, tcyml):
        print(f"{group}/{hook}")


if __name__ == "__main__":
    main()
