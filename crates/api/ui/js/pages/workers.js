// Queues and workers: `/provisioners[/<p>]` lists queues, `/provisioners/<p>/worker-types/<wt>`
// a queue with its workers by dimension, `.../workers/<group>/<id>` one worker with its recent
// tasks and events (and quarantine, for the signed-in), `/workers` the whole fleet.

import { allPages, call, credentials, get, queue, withQuery, withResult } from '../api.js';
import { badge, duration, facts, fill, h, nowLink, pagedListing, problem, queueLink, section, taskLink, when, workerHref } from '../view.js';

const WORKER_STATES = ['', 'idle', 'busy', 'quarantined', 'maintenance', 'missing', 'terminated'];
/** Runs a page of a worker's history shows. */
const HISTORY_ROWS = 20;

export async function queuesPage(main, provisioner) {
  const queues = [];
  await allPages(queue('/task-queues'), 'taskQueues', (page) => queues.push(...page));
  const shown = queues.filter((q) => !provisioner || q.taskQueueId.startsWith(`${provisioner}/`));
  const counts = await Promise.all(shown.map((q) => get(queue(`/task-queues/${q.taskQueueId}/counts`))));
  fill(main, h('h1', {}, provisioner ? `Provisioner ${provisioner}` : 'Queues'),
    h('div', { class: 'scroll' }, h('table', { class: 'list', id: 'queues' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Queue'), h('th', { class: 'num' }, 'Pending'), h('th', { class: 'num' }, 'Claimed'),
        h('th', { class: 'wide' }, 'Last active'), h('th', { class: 'wide' }, 'Description'))),
      h('tbody', {}, shown.map((q, i) => h('tr', { 'data-queue': q.taskQueueId },
        h('td', {}, queueLink(q.taskQueueId)), h('td', { class: 'num' }, nowLink(q.taskQueueId, 'pending', counts[i].pendingTasks)),
        h('td', { class: 'num' }, nowLink(q.taskQueueId, 'running', counts[i].claimedTasks)),
        h('td', { class: 'wide' }, when(q.lastDateActive)), h('td', { class: 'wide' }, q.description || '')))))));
}

/** The workers table with its dimension and state filters, over `queues`. */
async function workersTable(el, queues, params) {
  // Several dimensions, every one a worker's: space between in the box, each its own parameter.
  const dimension = params.getAll('dimension').flatMap((d) => d.split(/\s+/)).filter(Boolean);
  const state = params.get('state') || '';
  const form = h('form', { class: 'toolbar', id: 'worker-filter' },
    h('input', { name: 'dimension', placeholder: 'dimensions key:value (several: space between)', value: dimension.join(' '), 'aria-label': 'dimensions' }),
    h('select', { name: 'state', 'aria-label': 'state' }, WORKER_STATES.map((s) => h('option', { value: s, selected: s === state }, s || 'any state'))),
    h('button', { type: 'submit' }, 'Filter'));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const chosen = Object.fromEntries(new FormData(form));
    chosen.dimension = chosen.dimension.split(/\s+/).filter(Boolean);
    location.assign(withQuery(location.pathname, chosen));
  });
  const rows = h('tbody', { id: 'workers' });
  fill(el, form, h('div', { class: 'scroll' }, h('table', { class: 'list' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Worker'), h('th', {}, 'State'), h('th', { class: 'wide' }, 'Dimensions'),
      h('th', { class: 'wide' }, 'Last active'), h('th', { class: 'wide' }, 'Latest task'))),
    rows)));
  for (const taskQueueId of queues) {
    await allPages(queue(`/task-queues/${taskQueueId}/workers`), 'workers', (page) => {
      rows.append(...page.map((w) => h('tr', { 'data-worker': `${w.workerGroup}/${w.workerId}` },
        h('td', {}, h('a', { href: workerHref(taskQueueId, w.workerGroup, w.workerId) }, `${w.workerGroup}/${w.workerId}`),
          queues.length > 1 ? h('div', { class: 'muted small' }, taskQueueId) : null,
          // On a phone the dimensions column is hidden: they go under the name instead.
          h('div', { class: 'narrow' }, dimensionChips(w.dimensions))),
        h('td', {}, badge(w.state)),
        h('td', { class: 'wide' }, dimensionChips(w.dimensions)),
        h('td', { class: 'wide' }, when(w.lastDateActive)),
        h('td', { class: 'wide' }, w.latestTask ? taskLink(w.latestTask.taskId) : ''))));
    }, { dimension, state, limit: 1000 });
  }
  if (!rows.children.length) rows.append(h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'No worker matches.')));
}

/** The queue's pending runs by the dimensions they wait on, the sets no live worker matches
 * called out. */
function backlogTable(backlog) {
  if (!backlog.backlog.length) return h('p', { class: 'muted', id: 'backlog' }, 'Nothing pending.');
  return h('div', { class: 'scroll' }, h('table', { class: 'list', id: 'backlog' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Dimensions'), h('th', { class: 'num' }, 'Pending'), h('th', {}, 'Oldest'), h('th', {}, 'Workers matching'))),
    h('tbody', {}, backlog.backlog.map((line) => h('tr', { 'data-stranded': String(line.stranded) },
      h('td', {}, Object.keys(line.dimensions).length ? dimensionChips(line.dimensions) : h('span', { class: 'muted' }, 'any worker')),
      h('td', { class: 'num' }, line.pendingTasks), h('td', {}, when(line.oldestPending)),
      h('td', {}, matchingWorkers(line)))))),
  backlog.complete ? null : h('p', { class: 'muted small' }, 'Counted over the longest-waiting runs only.'));
}

/** The workers of a backlog line that match but cannot claim now: "1 quarantined, 2 missing". */
export function heldWorkers(line) {
  return ['quarantined', 'maintenance', 'terminating', 'missing'].filter((k) => line.workers[k]).map((k) => `${line.workers[k]} ${k}`);
}

/** "3 live", or a warning that no live worker matches, with the workers that match but cannot claim. */
function matchingWorkers(line) {
  const held = heldWorkers(line);
  if (line.stranded) {
    return h('span', { class: 'warning', role: 'alert' }, 'No live worker matches', held.length ? ` (${held.join(', ')})` : '');
  }
  return [`${line.workers.live} live`, held.length ? h('span', { class: 'muted' }, `, ${held.join(', ')}`) : null];
}

function dimensionChips(dims) {
  return h('div', { class: 'chips' }, Object.entries(dims || {}).map(([k, values]) => h('span', { class: 'chip' }, `${k}:${[].concat(values).join(',')}`)));
}

export async function queuePage(main, taskQueueId) {
  const [counts, info, backlog] = await Promise.all([
    get(queue(`/task-queues/${taskQueueId}/counts`)),
    get(queue(`/task-queues/${taskQueueId}`)).catch(() => ({})),
    get(queue(`/task-queues/${taskQueueId}/backlog`)),
  ]);
  const workers = h('div');
  const oldest = backlog.backlog[0]?.oldestPending;
  fill(main, h('h1', {}, 'Queue ', h('span', { class: 'mono' }, taskQueueId)),
    facts([['Pending', nowLink(taskQueueId, 'pending', counts.pendingTasks)], ['Oldest pending', oldest ? h('span', { id: 'oldest-pending' }, 'since ', when(oldest)) : null],
      ['Claimed', nowLink(taskQueueId, 'running', counts.claimedTasks)], ['Last active', when(info.lastDateActive)], ['Description', info.description]]),
    section('Backlog by dimensions', backlogTable(backlog)),
    section('Workers', workers));
  await workersTable(workers, [taskQueueId], new URLSearchParams(location.search));
}

export async function fleetPage(main) {
  const queues = [];
  await allPages(queue('/task-queues'), 'taskQueues', (page) => queues.push(...page.map((q) => q.taskQueueId)));
  const workers = h('div');
  fill(main, h('h1', {}, 'Workers'), workers);
  await workersTable(workers, queues, new URLSearchParams(location.search));
}

export async function workerPage(main, taskQueueId, workerGroup, workerId) {
  const [provisioner, workerType] = taskQueueId.split('/');
  const base = queue(`/provisioners/${provisioner}/worker-types/${workerType}/workers/${encodeURIComponent(workerGroup)}/${encodeURIComponent(workerId)}`);
  const fleet = queue(`/task-queues/${taskQueueId}/workers/${encodeURIComponent(workerGroup)}/${encodeURIComponent(workerId)}`);
  const [worker, { events }] = await Promise.all([get(fleet), get(`${base}/events`)]);
  document.title = `${workerGroup}/${workerId} · worker · Shoal`;
  const signedIn = Boolean(credentials());
  const result = h('span', { id: 'quarantine-result', role: 'status' });
  const hours = h('select', { id: 'quarantine-for', 'aria-label': 'quarantine for', disabled: !signedIn },
    [['1', '1 hour'], ['24', '1 day'], ['168', '1 week'], ['0', 'lift quarantine']].map(([v, label]) => h('option', { value: v }, label)));
  const reason = h('input', { id: 'quarantine-reason', placeholder: 'why', disabled: !signedIn, 'aria-label': 'reason' });
  const quarantine = async () => {
    const until = new Date(Date.now() + Number(hours.value) * 3600 * 1000).toISOString();
    try {
      await call('PUT', base, { quarantineUntil: until, quarantineInfo: reason.value });
      location.reload();
    } catch (err) {
      fill(result, problem(err));
    }
  };
  // Asked first; the answer (or the refusal) is said, then the page shows the worker as it is.
  const act = (label, method, path, body) => async () => {
    if (!window.confirm(`${label} worker ${workerGroup}/${workerId}?`)) return;
    fill(result, `${label}…`);
    try {
      await call(method, `${base}${path}`, body);
      fill(result, `${label}: done`);
      location.reload();
    } catch (err) {
      fill(result, problem(err));
    }
  };
  const offered = (label, id, shown, method, path, body) => shown
    ? h('button', { id, disabled: !signedIn, title: signedIn ? null : `sign in to ${label.toLowerCase()}`, onclick: act(label, method, path, body) }, label)
    : null;
  const quarantined = Boolean(worker.quarantineUntil && new Date(worker.quarantineUntil) > new Date());
  // The names of the tasks its events and running runs mention, read once.
  const ids = [...new Set(events.map((e) => e.taskId).concat(worker.runningTasks).filter(Boolean))];
  const names = ids.length
    ? call('POST', queue('/tasks'), { taskIds: ids }).then(({ tasks }) => new Map(tasks.map((t) => [t.taskId, t.task.metadata.name])))
    : Promise.resolve(new Map());
  const named = (taskId) => {
    const link = taskLink(taskId);
    names.then((known) => { if (known.has(taskId)) fill(link, known.get(taskId)); link.title = taskId; }).catch(() => {});
    return link;
  };
  fill(main,
    h('h1', {}, 'Worker ', h('span', { class: 'mono' }, `${workerGroup}/${workerId}`), ' ', badge(worker.state)),
    h('p', { class: 'muted' }, 'in ', queueLink(taskQueueId)),
    h('div', { class: 'actions' }, hours, reason,
      h('button', { id: 'quarantine', disabled: !signedIn, title: signedIn ? null : 'sign in to quarantine', onclick: quarantine }, 'Quarantine'),
      offered('Release', 'release', quarantined, 'PUT', '', { quarantineUntil: new Date().toISOString(), quarantineInfo: 'released' }),
      offered('Resume', 'resume', Boolean(worker.maintenance), 'POST', '/maintenance', { maintenance: null }),
      offered('Terminate', 'terminate', !worker.terminating && worker.state !== 'terminated', 'POST', '/terminate', {}),
      signedIn ? null : h('span', { class: 'muted' }, ' Sign in to quarantine this worker.'), result),
    h('div', { class: 'grid' },
      section('Worker', facts([
        ['State', badge(worker.state)],
        // One machine serving several queues: its record in each, one click away.
        ['Serves', worker.taskQueueIds ? h('span', { id: 'serves' }, worker.taskQueueIds.map((id, n) => [n ? ', ' : '',
          id === taskQueueId ? id : h('a', { href: workerHref(id, workerGroup, workerId) }, id)])) : null],
        ['Quarantined until', quarantined ? quarantineSaid(worker) : null],
        ['Maintenance', worker.maintenance ? h('span', { id: 'maintenance' }, worker.maintenance.message,
          h('span', { class: 'muted' }, ` by ${worker.maintenance.clientId || 'the worker'}, since `), when(worker.maintenance.since)) : null],
        ['Dimensions', dimensionChips(worker.dimensions)],
        ['Version', worker.version],
        ['Named caches', worker.caches && worker.caches.length ? worker.caches.join(', ') : null],
        ['First seen', when(worker.firstSeen)],
        ['Last active', when(worker.lastDateActive)],
        ['Expires', when(worker.expires)],
        ['Running', worker.runningTasks.length ? h('ul', { class: 'plain' }, worker.runningTasks.map((id) => h('li', {}, named(id)))) : null],
      ])),
      section('Runs', runHistory(fleet)),
      section('Events', events.length
        ? h('ul', { class: 'plain', id: 'events' }, events.map((e) => h('li', {}, h('strong', {}, e.kind), ' ', when(e.at),
          e.clientId ? h('span', { class: 'muted' }, ` by ${e.clientId}`) : null, e.taskId ? [' ', named(e.taskId)] : null, e.detail ? h('span', { class: 'muted' }, ` ${e.detail}`) : null)))
        : h('p', { class: 'muted' }, 'None.'))));
}

/** Until when a worker is quarantined, by whom and why (its latest quarantine change). */
function quarantineSaid(worker) {
  const last = (worker.quarantineDetails || []).at(-1);
  return h('span', { id: 'quarantine-said' }, when(worker.quarantineUntil),
    last ? h('span', {}, ` by ${last.clientId}`, last.quarantineInfo ? [': ', h('q', {}, last.quarantineInfo)] : null) : null);
}

/** The runs a worker claimed, newest first, 20 a page (`?pages=N` keeps how many): task by
 * name, run, state, when it was claimed, how long it took, exit code. */
function runHistory(fleet) {
  const rows = h('tbody');
  const more = h('div', { class: 'pager' });
  const table = h('div', {}, h('div', { class: 'scroll' }, h('table', { class: 'list', id: 'recent-tasks' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Task'), h('th', {}, 'Run'), h('th', {}, 'State'), h('th', {}, 'Claimed'), h('th', {}, 'Took'), h('th', {}, 'Exit'))),
    rows)), more);
  pagedListing(more, async (token) => {
    const page = await get(withQuery(`${fleet}/runs`, { limit: HISTORY_ROWS, continuationToken: token }));
    if (!page.runs.length && !rows.children.length) rows.append(h('tr', {}, h('td', { colspan: 6, class: 'muted' }, 'None yet.')));
    const taskIds = [...new Set(page.runs.map((t) => t.taskId))];
    const [{ tasks }, { statuses }, { results }] = taskIds.length
      ? await Promise.all([call('POST', queue('/tasks'), { taskIds }), call('POST', queue('/tasks/status'), { taskIds }),
        call('POST', queue('/tasks/result'), { taskIds })])
      : [{ tasks: [] }, { statuses: [] }, { results: [] }];
    const names = new Map(tasks.map((t) => [t.taskId, t.task.metadata.name]));
    const facts = new Map(results.map((r) => [r.taskId, r]));
    const runs = new Map(statuses.map((st) => [st.taskId, withResult(st.status, facts.get(st.taskId)).runs]));
    rows.append(...page.runs.map(({ taskId, runId, claimed }) => {
      const run = (runs.get(taskId) || [])[runId];
      const took = run && run.started && run.resolved ? new Date(run.resolved) - new Date(run.started) : null;
      return h('tr', { 'data-task': taskId },
        h('td', {}, taskLink(taskId, names.get(taskId) || taskId)), h('td', {}, `${runId}`),
        h('td', {}, run ? badge(run.state) : h('span', { class: 'muted' }, 'expired')),
        h('td', {}, when(claimed)),
        h('td', {}, took !== null ? duration(took) : ''), h('td', {}, run?.stats?.exitCode ?? ''));
    }));
    return page.continuationToken;
  });
  return table;
}
