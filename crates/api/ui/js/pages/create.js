// `/tasks/create[?from=<taskId>]`: a task definition to edit and create, as Taskcluster's
// "Create task" and "Edit and create" and Swarming's "Retry" offer: a copy of an existing
// task (new times, no dedup), or a small template. Also the copy that "Retrigger" creates.

import { call, credentials, get, queue } from '../api.js';
import { fill, h, problem, taskLink } from '../view.js';

/** A new nice slugid: a random (v4) UUID in URL-safe base64, starting with a letter. */
export function newTaskId() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  bytes[0] &= 0x7f;
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/** A definition to create again from `task` (as task() answers it): created now, its deadline
 * and expiry as far from now as they were from its creation; never deduplicated against it;
 * without the fields the queue derives (the legacy queue halves, `hasSecrets`). */
export function copyOf(task) {
  const copy = structuredClone(task);
  const now = Date.now();
  const created = Date.parse(task.created);
  const shifted = (at) => new Date(now + (Date.parse(at) - created)).toISOString();
  copy.deadline = shifted(task.deadline);
  copy.expires = shifted(task.expires);
  copy.created = new Date(now).toISOString();
  for (const derived of ['provisionerId', 'workerType', 'hasSecrets', 'idempotent']) delete copy[derived];
  return copy;
}

/** Creates `definition` as `taskId`; answers the new task's status. */
export function createTask(taskId, definition) {
  return call('PUT', queue(`/task/${taskId}`), definition);
}

function template(taskId) {
  const now = Date.now();
  return {
    taskQueueId: 'proj/linux',
    schedulerId: '-',
    taskGroupId: taskId,
    created: new Date(now).toISOString(),
    deadline: new Date(now + 3600e3).toISOString(),
    expires: new Date(now + 30 * 86400e3).toISOString(),
    payload: { command: [['sh', '-c', 'echo hello']], maxRunTime: 600 },
    metadata: {
      name: 'A task made by hand',
      description: 'Created from the web UI',
      owner: credentials()?.clientId || 'nobody@example.com',
      source: `${location.origin}/tasks/create`,
    },
  };
}

export async function createPage(main) {
  const from = new URLSearchParams(location.search).get('from');
  const source = from ? await get(queue(`/task/${from}`)) : null;
  const taskId = newTaskId();
  const definition = source ? copyOf(source) : template(taskId);
  const signedIn = Boolean(credentials());
  const idInput = h('input', { id: 'new-task-id', class: 'mono', value: taskId, 'aria-label': 'taskId', size: 24 });
  const editor = h('textarea', { id: 'definition', class: 'mono editor', spellcheck: 'false', 'aria-label': 'task definition' });
  editor.value = JSON.stringify(definition, null, 2);
  const result = h('div', { id: 'create-result', role: 'status' });
  const create = async () => {
    let body;
    try {
      body = JSON.parse(editor.value);
    } catch (err) {
      fill(result, h('p', { class: 'error', role: 'alert' }, `definition: not JSON: ${err.message}`));
      return;
    }
    fill(result, 'Creating…');
    try {
      await createTask(idInput.value.trim(), body);
      location.assign(`/tasks/${idInput.value.trim()}`);
    } catch (err) {
      fill(result, problem(err));
    }
  };
  fill(main,
    h('h1', {}, from ? ['Edit and create: a copy of ', taskLink(from, source.metadata.name)] : 'Create a task'),
    h('p', { class: 'muted' }, from
      ? 'Its times are moved to now; change anything, then create it as a new task.'
      : 'Edit the definition (Taskcluster\'s createTask body), then create it.',
    source?.hasSecrets ? h('strong', { id: 'no-secrets' }, ' Its secrets are not copied: add them as `secrets` if it needs them.') : null),
    h('div', { class: 'toolbar' }, h('label', {}, 'taskId ', idInput)),
    editor,
    h('div', { class: 'actions' },
      h('button', { id: 'create', disabled: !signedIn, title: signedIn ? null : 'sign in to create a task', onclick: create }, 'Create task'),
      signedIn ? null : h('span', { class: 'muted' }, ' Sign in to create a task.')),
    result);
}
