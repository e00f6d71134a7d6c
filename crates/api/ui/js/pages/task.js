// `/tasks/<taskId>`: what the task is, its runs (reasons, worker, times, stats, artifacts),
// its log (followed live while the run runs), and cancel, rerun, retrigger and priority for
// the signed-in, with a link to edit a copy and create it. Kept current from the event stream.

import { TASK_EXCHANGES, call, credentials, fullStatus, get, listen, queue, withQuery } from '../api.js';
import { LogView, ansiLine } from '../log.js';
import { signedUrl } from '../hawk.js';
import { drawActionsMenu } from './actions.js';
import { copyOf, createTask, newTaskId } from './create.js';
import { heldWorkers } from './workers.js';
import { bytes, duration, facts, fill, h, problem, queueLink, runBadge, section, statusBadge, taskLink, when, workerHref } from '../view.js';

const PRIORITIES = ['highest', 'very-high', 'high', 'medium', 'low', 'very-low', 'lowest'];
/** Lines of a failed run's log shown at the top of its page. */
const TAIL_LINES = 15;

export async function taskPage(main, taskId, wantedRun) {
  const task = await get(queue(`/task/${taskId}`));
  let status = null;
  let draw = () => {};
  // Each change reads the task's result too (a message carries Taskcluster's status only);
  // only the latest read is drawn, so answers arriving out of order draw nothing stale.
  let reads = 0;
  const refresh = async (next) => {
    const read = ++reads;
    const full = await fullStatus(taskId, next);
    if (read === reads) { status = full; draw(); }
  };
  // Listen first, then read the status: nothing that happens in between is missed.
  await listen(TASK_EXCHANGES.map((exchange) => ({ exchange, routingKeyPattern: `primary.${taskId}.#` })),
    (message) => { if (status && message.payload.status) refresh(message.payload.status); },
    () => refresh());
  status = await fullStatus(taskId);
  const parts = {
    head: h('div'), waiting: h('div'), failure: h('div'), actions: h('div', { class: 'actions', id: 'actions' }),
    hookActions: h('div', { id: 'hook-actions' }),
    runs: h('div', { id: 'runs' }), log: h('div'),
  };
  const deps = { list: h('div', { id: 'dependencies' }), read: null };
  const logView = new LogView(parts.log);
  const slicesList = h('ol', { class: 'plain', id: 'slices' });
  fill(main,
    parts.head, parts.waiting, parts.failure, parts.actions, parts.hookActions,
    h('div', { class: 'grid' }, section('Task', describe(task, slicesList, deps.list)), section('Runs', parts.runs)),
    section('Log', parts.log),
    section('Definition', h('details', {}, h('summary', {}, 'payload and full definition (JSON)'),
      h('pre', { class: 'json' }, JSON.stringify(task, null, 2)))));

  document.title = `${task.metadata.name} · task · Shoal`;
  draw = () => {
    fill(parts.head,
      h('h1', {}, task.metadata.name, ' ', statusBadge(status)),
      h('p', { class: 'muted' }, h('span', { class: 'mono' }, taskId), ' · group ',
        h('a', { href: `/tasks/groups/${status.taskGroupId}`, class: 'mono' }, status.taskGroupId), ' · ', queueLink(status.taskQueueId),
        status.createdBy ? [' · created by ', h('a', { href: withQuery('/tasks', { createdBy: status.createdBy }), class: 'mono', id: 'created-by' }, status.createdBy)] : null));
    drawActions(parts.actions, task, status, (next) => refresh(next));
    fill(parts.runs, status.runs.length ? status.runs.slice().reverse().map((run) => runView(taskId, status, run)) : h('p', { class: 'muted' }, 'No run yet.'));
    const runId = wantedRun !== undefined ? Number(wantedRun) : status.runs.length - 1;
    const run = status.runs[runId];
    logView.show(taskId, run);
    drawFailure(parts.failure, taskId, run);
    drawWaiting(parts.waiting, task, status, deps);
    drawDependencies(deps, task);
    drawSlices(slicesList, task, status);
  };
  draw();
  // The group's actions (taskgraph's actions.json) do not change with the task: drawn once.
  await drawActionsMenu(parts.hookActions, task, status, Boolean(credentials()));
}

/** A pending task that no live worker matches says so: it waits until one does. */
function drawWaiting(el, task, status, deps) {
  if (status.state === 'unscheduled' && task.dependencies?.length) return drawBlocked(el, task, deps);
  if (status.state !== 'pending') return fill(el);
  const wanted = JSON.stringify(task.slices?.length ? task.slices[status.currentSlice ?? 0].dimensions || {} : task.dimensions || {});
  get(queue(`/task-queues/${status.taskQueueId}/backlog`)).then((backlog) => {
    const line = backlog.backlog.find((l) => JSON.stringify(l.dimensions) === wanted);
    const held = line ? heldWorkers(line) : [];
    fill(el, line?.stranded ? h('p', { class: 'warning', id: 'no-worker', role: 'alert' },
      'No live worker has the dimensions this task waits on', held.length ? ` (${held.join(', ')})` : '',
      '; it stays pending until one does. ', queueLink(status.taskQueueId)) : null);
  }).catch(() => fill(el));
}

/** Most dependencies named with their states (the rest counted). */
const MAX_DEPENDENCIES = 100;

/** The dependencies' names and states (read again at each redraw, at most every 5 s), those
 * that failed first; `deps.read` is the latest answer. */
function drawDependencies(deps, task) {
  const ids = task.dependencies || [];
  if (!ids.length || (deps.readAt && Date.now() - deps.readAt < 5000)) return;
  deps.readAt = Date.now();
  const shown = ids.slice(0, MAX_DEPENDENCIES);
  Promise.all([call('POST', queue('/tasks'), { taskIds: shown }), call('POST', queue('/tasks/status'), { taskIds: shown })])
    .then(([tasks, statuses]) => {
      const names = new Map(tasks.tasks.map((t) => [t.taskId, t.task.metadata.name]));
      const states = new Map(statuses.statuses.map((s) => [s.taskId, s.status]));
      const rank = (status) => (!status ? 3 : ['failed', 'exception'].includes(status.state) ? 0 : status.state === 'completed' ? 2 : 1);
      const ordered = shown.map((id) => ({ id, name: names.get(id), status: states.get(id) }))
        .sort((a, b) => rank(a.status) - rank(b.status) || String(resolvedAt(a.status)).localeCompare(String(resolvedAt(b.status))));
      deps.read = ordered;
      fill(deps.list, h('ul', { class: 'plain dependencies' }, ordered.map(({ id, name, status }) => h('li', { 'data-dependency': id },
        status ? statusBadge(status) : h('span', { class: 'muted' }, 'gone'), ' ', taskLink(id, name || id)))),
      ids.length > shown.length ? h('p', { class: 'muted' }, `and ${ids.length - shown.length} more`) : null);
      deps.onRead?.();
    })
    .catch((err) => fill(deps.list, problem(err)));
}

function resolvedAt(status) {
  const last = status?.runs?.[status.runs.length - 1];
  return last?.resolved || '';
}

/** An unscheduled task with dependencies says what it waits on: the dependency that failed
 * first (then it is blocked: it runs only once they all complete), or those not done. */
function drawBlocked(el, task, deps) {
  const say = () => {
    const read = deps.read || [];
    const failed = read.filter((d) => ['failed', 'exception'].includes(d.status?.state));
    const open = read.filter((d) => !['completed', 'failed', 'exception'].includes(d.status?.state));
    if (task.requires !== 'all-resolved' && failed.length) {
      const [first] = failed;
      fill(el, h('p', { class: 'warning', id: 'blocked', role: 'alert' }, 'Blocked: its dependency ',
        taskLink(first.id, first.name || first.id), ` ${first.status.state} first`,
        failed.length > 1 ? ` (${failed.length} of ${task.dependencies.length} did not complete)` : '',
        '; it runs only once every dependency completes.'));
    } else if (open.length) {
      fill(el, h('p', { class: 'muted', id: 'blocked' }, `Waiting on ${open.length} of ${task.dependencies.length} dependencies: `,
        open.slice(0, 5).flatMap((d, i) => [i ? ', ' : '', taskLink(d.id, d.name || d.id)]), open.length > 5 ? ', …' : ''));
    } else fill(el);
  };
  deps.onRead = say;
  say();
}

/** A failed run, first: why it ended and the lines of its log that look like the failure
 * (near the end) with its last lines, each a line link, above the fold on any screen. */
function drawFailure(el, taskId, run) {
  if (!run || !['failed', 'exception'].includes(run.state) || run.reasonResolved === 'canceled') {
    fill(el);
    delete el.dataset.drawn;
    return;
  }
  // Drawn already for this run (a redraw of the page): a resolved run's box does not change.
  if (el.dataset.drawn === `${taskId}/${run.runId}`) return;
  el.dataset.drawn = `${taskId}/${run.runId}`;
  const stats = run.stats || {};
  const tail = h('div', { class: 'log tail', id: 'failure-tail' }, '…');
  const why = [
    run.reasonResolved,
    stats.exitCode !== undefined ? `exit code ${stats.exitCode}` : null,
    stats.timedOut ? `${stats.timedOut} exceeded` : null,
    stats.limitExceeded ? `${stats.limitExceeded} limit exceeded` : null,
  ].filter(Boolean).join(' · ');
  fill(el, h('section', { class: 'failure', id: 'failure' },
    h('p', {}, h('strong', {}, `Run ${run.runId} ${run.state}`), ': ', h('span', { id: 'failure-why' }, why)),
    tail));
  failureLines(taskId, run).then((lines) => {
    fill(tail, lines.length ? lines : 'No log.');
    // The last lines in view when the box must scroll (a narrow screen).
    tail.scrollTop = tail.scrollHeight;
  }).catch(() => fill(tail, 'No log.'));
}

/** Lines that look like a failure's. */
const FAILURE = /\b(error|fail(ed|ure)?|fatal|panic(ked)?|exception|traceback|assert(ion)?)\b/i;
/** Most of the lines like a failure's shown before a failed run's last lines. */
const FAILURE_LINES = 8;

/** The elements of the failure box: from the log's last 64 KiB, the lines like a failure's
 * and the last lines, numbered and linked, a gap marked between them. */
async function failureLines(taskId, run) {
  const res = await fetch(`/logs/v1/${taskId}/${run.runId}?tail=65536`);
  if (!res.ok) return [];
  const first = Number(res.headers.get('x-log-line') || 1);
  const texts = (await res.text()).replace(/\n$/, '').split('\n').filter((t, i, all) => t || all.length > 1);
  const plain = (text) => text.replace(/\x1b\[[0-9;]*[A-Za-z]/g, '');
  const chosen = new Set(texts.map((_, i) => i).slice(-TAIL_LINES));
  texts.map((t, i) => [t, i]).filter(([t, i]) => !chosen.has(i) && FAILURE.test(plain(t))).slice(-FAILURE_LINES)
    .forEach(([, i]) => chosen.add(i));
  const page = `/tasks/${taskId}/runs/${run.runId}`;
  const out = [];
  let last = -1;
  for (const i of [...chosen].sort((a, b) => a - b)) {
    if (last >= 0 && i > last + 1) out.push(h('div', { class: 'line gap' }, h('span', { class: 'line-no' }, '⋮')));
    const n = first + i;
    out.push(h('div', { class: `line${FAILURE.test(plain(texts[i])) ? ' failure-line' : ''}`, 'data-line': n },
      h('a', { class: 'line-no', href: `${page}#L${n}` }, String(n)),
      h('span', { class: 'line-text' }, ansiLine(texts[i]))));
    last = i;
  }
  return out;
}

/** Swarming's slices, numbered from 0 as runs name them, each saying where the latest run is
 * with it: expired (and when), waited on (until when), or run on. */
function drawSlices(el, task, status) {
  const run = status.runs[status.runs.length - 1];
  const at = run?.slice;
  fill(el, (task.slices || []).map((slice, i) => {
    let note = null;
    if (at && i < at.index) note = [' · expired by ', when(at.since)];
    else if (at && i === at.index && run.state === 'pending') {
      note = [' · waited on since ', when(at.since), ', until ', when(new Date(Date.parse(at.since) + slice.expiresAfter * 1000).toISOString())];
    } else if (at && i === at.index && run.reasonResolved === 'deadline-exceeded' && !run.started) note = [' · expired'];
    else if (at && i === at.index && run.started) note = ' · ran on it';
    return h('li', { 'data-slice': i, class: at && i === at.index ? 'current' : null }, `${i}: `, dimensions(slice.dimensions) || 'any worker', ` waits ${slice.expiresAfter} s`,
      h('span', { class: 'muted' }, note));
  }));
}

function describe(task, slicesList, dependencies) {
  const tags = Object.entries(task.tags || {});
  return facts([
    ['Description', task.metadata.description],
    ['Owner', task.metadata.owner],
    ['Source', task.metadata.source ? h('a', { href: task.metadata.source, rel: 'noreferrer' }, task.metadata.source) : null],
    ['Created', when(task.created)],
    ['Deadline', when(task.deadline)],
    ['Expires', when(task.expires)],
    ['Priority', task.priority],
    ['Retries', task.retries],
    ['Scheduler', task.schedulerId],
    ['Project', task.projectId],
    ['Depends on', task.dependencies?.length ? dependencies : null],
    ['Dimensions', dimensions(task.dimensions)],
    ['Slices', task.slices?.length ? slicesList : null],
    ['Tags', tags.length ? h('div', { class: 'chips' }, tags.map(([k, v]) => h('a', { class: 'chip', href: `/tasks?tag=${encodeURIComponent(`${k}:${v}`)}` }, `${k}:${v}`))) : null],
    ['Command', task.payload?.command ? h('pre', { class: 'command', id: 'command' }, commandLines(task.payload.command)) : null],
  ]);
}

// The payload's commands one per line: an argv list as a shell would quote it, a shell
// string as given, anything else as JSON.
function commandLines(command) {
  const commands = Array.isArray(command) ? command : [command];
  return commands.map((one) => {
    if (typeof one === 'string') return one;
    if (Array.isArray(one)) return one.map((arg) => shellQuote(String(arg))).join(' ');
    return JSON.stringify(one);
  }).join('\n');
}

function shellQuote(arg) {
  return /^[A-Za-z0-9_\-.,:\/=@%+]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}

function dimensions(dims) {
  const pairs = Object.entries(dims || {});
  return pairs.length ? h('div', { class: 'chips' }, pairs.map(([k, values]) => h('span', { class: 'chip' }, `${k}:${[].concat(values).join(',')}`))) : null;
}

/** How long a private artifact's signed link lasts, signed again each time it is followed. */
const SIGNED_SECONDS = 15 * 60;

/** A link to an artifact: a private one (not under `public/`) signed for the reader signed in,
 * as Taskcluster's signed URLs are, so that it opens in the browser without headers. */
function artifactLink(url, name) {
  const creds = credentials();
  if (name.startsWith('public/') || !creds) return h('a', { href: url }, name);
  const link = h('a', { href: signedUrl(creds, url, SIGNED_SECONDS), class: 'signed', title: 'a link signed for you, for 15 minutes' }, name);
  const sign = () => { link.href = signedUrl(creds, url, SIGNED_SECONDS); };
  link.addEventListener('mousedown', sign);
  link.addEventListener('keydown', sign);
  return link;
}

function runView(taskId, status, run) {
  const stats = run.stats || {};
  const took = run.started && run.resolved ? new Date(run.resolved) - new Date(run.started) : null;
  const artifacts = h('div', { class: 'artifacts' });
  get(queue(`/task/${taskId}/runs/${run.runId}/artifacts`)).then(({ artifacts: list }) => {
    // An error artifact is what the worker could not produce: said so, not offered as a file.
    fill(artifacts, list.length ? h('ul', { class: 'plain' }, list.map((a) => h('li', { 'data-artifact': a.name },
      a.storageType === 'error'
        ? [h('span', { class: 'error' }, a.name), ' ', h('span', { class: 'muted' }, 'not produced (error artifact)')]
        : [artifactLink(queue(`/task/${taskId}/runs/${run.runId}/artifacts/${a.name.split('/').map(encodeURIComponent).join('/')}`), a.name),
          ' ', h('span', { class: 'muted' }, a.contentType || a.storageType)]))) : h('span', { class: 'muted' }, 'no artifacts'));
  }).catch((err) => fill(artifacts, problem(err)));
  const worker = run.workerId ? h('a', { href: workerHref(status.taskQueueId, run.workerGroup, run.workerId) }, `${run.workerGroup}/${run.workerId}`) : null;
  return h('div', { class: 'run', 'data-run': run.runId },
    h('h3', {}, `Run ${run.runId} `, runBadge(run), ' ', h('a', { href: `/tasks/${taskId}/runs/${run.runId}`, class: 'small' }, 'log')),
    facts([
      ['Created because', run.reasonCreated],
      ['Resolved because', run.reasonResolved],
      ['Worker', worker],
      ['Worker version', run.workerVersion],
      ['Worker had', dimensions(run.workerDimensions)],
      ['Scheduled', when(run.scheduled)],
      ['Started', run.started ? when(run.started) : null],
      ['Resolved', run.resolved ? when(run.resolved) : null],
      ['Took', took !== null ? duration(took) : null],
      ['Deduped from', run.dedupedFrom ? taskLink(run.dedupedFrom) : null],
      ['Slice', run.slice ? [`${run.slice.index}, current since `, when(run.slice.since)] : null],
      ['Exit code', stats.exitCode],
      ['Timed out', stats.timedOut ? `${stats.timedOut} exceeded` : null],
      ['Limit exceeded', stats.limitExceeded ? `the slot's ${stats.limitExceeded} limit` : null],
      ['Setup', stats.setupMs !== undefined ? duration(stats.setupMs) : null],
      ['Mounts', stats.mountMs !== undefined ? `${duration(stats.mountMs)}, ${bytes(stats.bytesFetched ?? 0)} fetched` : null],
      ['Command ran', stats.runMs !== undefined ? duration(stats.runMs) : null],
      ['Uploads', stats.uploadMs !== undefined ? `${duration(stats.uploadMs)}, ${bytes(stats.bytesUploaded)}` : null],
      ['Peak memory', stats.peakMemoryBytes !== undefined ? bytes(stats.peakMemoryBytes) : null],
      ['Artifacts', artifacts],
    ]));
}

function drawActions(el, task, status, onStatus) {
  const signedIn = Boolean(credentials());
  const message = h('span', { class: 'action-result', id: 'action-result', role: 'status' });
  // Asked first; the result is written once the page shows the new status (`onStatus`
  // resolves after the redraw, which replaces this bar: so into the bar as it is then).
  const act = (label, method, path, body) => async () => {
    if (!window.confirm(`${label} task ${status.taskId}?`)) return;
    fill(message, `${label}…`);
    let result;
    try {
      const answer = await call(method, queue(path), body);
      if (answer.status) await onStatus(answer.status);
      result = `${label}: done`;
    } catch (err) {
      result = problem(err);
    }
    fill(document.getElementById('action-result') || message, result);
  };
  const hint = signedIn ? null : 'sign in to act on this task';
  const resolved = ['completed', 'failed', 'exception'].includes(status.state);
  // Offered only where the server would take it: a rerun of a resolved (or unscheduled)
  // task, a priority for one not yet resolved.
  const rerunnable = resolved || status.state === 'unscheduled';
  const priority = h('select', { id: 'priority', disabled: !signedIn || resolved, 'aria-label': 'priority' },
    PRIORITIES.map((p) => h('option', { value: p, selected: p === task.priority }, p)));
  // Retrigger: the same definition as a new task, its times moved to now (Taskcluster's
  // "Retrigger", Swarming's "Retry").
  const retrigger = async () => {
    if (!window.confirm(`Retrigger: create a new task from ${task.metadata.name}'s definition?`)) return;
    const newId = newTaskId();
    fill(message, 'Retrigger…');
    let result;
    try {
      await createTask(newId, copyOf(task));
      result = ['Retriggered as ', h('a', { href: `/tasks/${newId}`, id: 'retriggered', class: 'mono' }, newId)];
    } catch (err) {
      result = problem(err);
    }
    fill(document.getElementById('action-result') || message, result);
  };
  fill(el,
    h('button', { id: 'cancel', disabled: !signedIn || resolved, title: hint, onclick: act('Cancel', 'POST', `/task/${status.taskId}/cancel`) }, 'Cancel'),
    h('button', { id: 'rerun', disabled: !signedIn || !rerunnable, title: hint, onclick: act('Rerun', 'POST', `/task/${status.taskId}/rerun`) }, 'Rerun'),
    priority,
    h('button', { id: 'set-priority', disabled: !signedIn || resolved, title: hint, onclick: () => act('Priority', 'POST', `/task/${status.taskId}/priority`, { newPriority: priority.value })() }, 'Set priority'),
    h('button', { id: 'retrigger', disabled: !signedIn, title: hint, onclick: retrigger }, 'Retrigger'),
    h('a', { href: withQuery('/tasks/create', { from: status.taskId }), id: 'edit-and-create' }, 'Edit and create'),
    signedIn ? null : h('span', { class: 'muted' }, ' Sign in to cancel, rerun, retrigger or change priority.'),
    message);
}
