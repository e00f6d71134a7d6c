// `/`: queues with their pending and claimed counts and live workers, recent groups and
// graphs, and recent failures. Refreshed every few seconds while open.

import { get, queue, withQuery } from '../api.js';
import { badge, fill, h, keepInUrl, nowLink, pagedListing, problem, queueLink, section, statusBadge, taskLink, when } from '../view.js';

const REFRESH_MS = 5000;

export async function overview(main) {
  const parts = { queues: h('div'), groups: h('div'), graphs: h('div'), failures: h('div') };
  fill(main,
    h('h1', {}, 'Overview'),
    h('div', { class: 'grid' },
      section('Queues', parts.queues),
      section('Recent task groups', parts.groups),
      section('Recent task graphs', parts.graphs),
      section('Recent failures', parts.failures)));
  const draw = async () => {
    await Promise.all([
      drawQueues(parts.queues).catch((err) => fill(parts.queues, problem(err))),
      drawGroups(parts.groups).catch((err) => fill(parts.groups, problem(err))),
      drawGraphs(parts.graphs).catch((err) => fill(parts.graphs, problem(err))),
      drawFailures(parts.failures).catch((err) => fill(parts.failures, problem(err))),
    ]);
  };
  await draw();
  const timer = setInterval(() => { if (document.visibilityState === 'visible') draw(); }, REFRESH_MS);
  addEventListener('pagehide', () => clearInterval(timer));
}

async function drawQueues(el) {
  const { taskQueues } = await get(queue('/task-queues?limit=100'));
  if (!taskQueues.length) return fill(el, h('p', { class: 'muted' }, 'No queue has been used yet.'));
  const rows = await Promise.all(taskQueues.map(async ({ taskQueueId }) => {
    const [counts, { workers }] = await Promise.all([
      get(queue(`/task-queues/${taskQueueId}/counts`)),
      get(queue(`/task-queues/${taskQueueId}/workers?limit=1000`)),
    ]);
    const live = workers.filter((w) => w.state === 'idle' || w.state === 'busy').length;
    return h('tr', { 'data-queue': taskQueueId },
      h('td', {}, queueLink(taskQueueId)),
      h('td', { class: 'num' }, nowLink(taskQueueId, 'pending', counts.pendingTasks)),
      h('td', { class: 'num' }, nowLink(taskQueueId, 'running', counts.claimedTasks)),
      h('td', { class: 'num' }, live));
  }));
  fill(el, h('table', { class: 'list', id: 'queues' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Queue'), h('th', { class: 'num' }, 'Pending'), h('th', { class: 'num' }, 'Claimed'), h('th', { class: 'num' }, 'Live workers'))),
    h('tbody', {}, rows)));
}

async function drawGroups(el) {
  const { taskGroups } = await get(queue('/task-groups?limit=10'));
  if (!taskGroups.length) return fill(el, h('p', { class: 'muted' }, 'No task group yet.'));
  fill(el, h('ul', { class: 'plain', id: 'recent-groups' }, taskGroups.map((group) => h('li', { 'data-group': group.taskGroupId },
    groupState(group), ' ', h('a', { href: `/tasks/groups/${group.taskGroupId}`, class: 'mono' }, group.taskGroupId), ' ',
    h('span', { class: 'muted' }, group.schedulerId), ' ', when(group.created),
    group.sealed ? h('span', { class: 'muted' }, ' sealed') : null))),
  h('p', {}, h('a', { href: '/tasks/groups', id: 'all-groups' }, 'All task groups →')));
}

/** A group's state: running while any task of it is unresolved, else resolved. */
function groupState(group) {
  return group.resolved ? h('span', { class: 'badge state-resolved' }, 'resolved') : badge('running');
}

/** `/tasks/groups?q=&pages=`: every task group, newest first, 100 a page, narrowed by id or
 * scheduler. */
export async function groupList(main) {
  const wanted = new URLSearchParams(location.search).get('q') || '';
  const search = h('input', { id: 'group-search', type: 'search', placeholder: 'group id or scheduler', value: wanted, 'aria-label': 'search groups' });
  const rows = h('tbody', { id: 'groups' });
  const more = h('div', { class: 'pager' });
  const loaded = [];
  const draw = () => {
    const q = search.value.trim().toLowerCase();
    // The search stays in the URL, so a link shows the same list.
    keepInUrl({ q: search.value.trim() });
    fill(rows, loaded.filter((g) => !q || g.taskGroupId.toLowerCase().includes(q) || g.schedulerId.toLowerCase().includes(q))
      .map((g) => h('tr', { 'data-group': g.taskGroupId },
        h('td', {}, h('a', { href: `/tasks/groups/${g.taskGroupId}`, class: 'mono' }, g.taskGroupId)),
        h('td', {}, groupState(g)), h('td', {}, g.schedulerId), h('td', {}, when(g.created)), h('td', {}, g.sealed ? 'sealed' : ''))));
  };
  search.addEventListener('input', draw);
  fill(main, h('h1', {}, 'Task groups'), h('div', { class: 'toolbar' }, search),
    h('div', { class: 'scroll' }, h('table', { class: 'list' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Group'), h('th', {}, 'State'), h('th', {}, 'Scheduler'), h('th', {}, 'Created'), h('th', {}, ''))), rows)),
    more);
  await pagedListing(more, async (token) => {
    const page = await get(withQuery(queue('/task-groups'), { limit: 100, continuationToken: token }));
    loaded.push(...page.taskGroups);
    draw();
    return page.continuationToken;
  });
}

async function drawGraphs(el) {
  const { taskGraphs } = await get('/api/scheduler/v1/task-graphs?limit=10');
  if (!taskGraphs.length) return fill(el, h('p', { class: 'muted' }, 'No task graph yet.'));
  fill(el, h('ul', { class: 'plain' }, taskGraphs.map((graph) => h('li', {},
    badge(graph.status.state), ' ',
    h('a', { href: `/task-graphs/${graph.status.taskGraphId}` }, graph.metadata.name || graph.status.taskGraphId), ' ',
    when(graph.created)))));
}

async function drawFailures(el) {
  // Cancellations are deliberate, not failures: left out unless asked for.
  const withCancels = new URLSearchParams(location.search).get('cancelled') === 'shown';
  const { tasks } = await get(queue('/tasks/failed?limit=50'));
  const shown = tasks.filter(({ status }) => withCancels || status.runs[status.runs.length - 1]?.reasonResolved !== 'canceled').slice(0, 10);
  const toggle = h('a', { href: withCancels ? '/' : '/?cancelled=shown', class: 'small', id: 'toggle-cancelled' },
    withCancels ? 'hide cancellations' : 'show cancellations too');
  if (!shown.length) return fill(el, h('p', { class: 'muted' }, 'Nothing failed lately. ', toggle));
  fill(el, h('ul', { class: 'plain', id: 'failures' }, shown.map(({ task, status }) => h('li', { 'data-task': status.taskId },
    statusBadge(status), ' ', taskLink(status.taskId, task.metadata.name), ' ',
    h('span', { class: 'muted' }, status.taskQueueId), ' failed ', when(status.runs[status.runs.length - 1]?.resolved)))), toggle);
}
