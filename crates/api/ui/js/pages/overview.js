// `/`: queues with their pending and claimed counts and live workers, recent groups and
// graphs, and recent failures. Refreshed every few seconds while open.

import { call, get, queue, withQuery } from '../api.js';
import { badge, fill, groupLink, groupTally, groupVerdict, h, keepInUrl, nowLink, pagedListing, problem, queueLink, section, statusBadge, taskLink, when } from '../view.js';

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
    // The failures name their groups as the groups' list does.
    const groups = drawGroups(parts.groups).catch((err) => { fill(parts.groups, problem(err)); return []; });
    await Promise.all([
      drawQueues(parts.queues).catch((err) => fill(parts.queues, problem(err))),
      groups,
      drawGraphs(parts.graphs).catch((err) => fill(parts.graphs, problem(err))),
      drawFailures(parts.failures, groups).catch((err) => fill(parts.failures, problem(err))),
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

/** The overview's page of recent groups: its token stays in the URL (`groups=`), so a refresh
 * or a link shows the same page; earlier pages' tokens are kept to go back. */
const groupPages = { tokens: [] };

async function drawGroups(el) {
  const token = new URLSearchParams(location.search).get('groups') || '';
  const { taskGroups, continuationToken } = await get(withQuery(queue('/task-groups'), { limit: 10, continuationToken: token }));
  const go = (next) => () => {
    if (next !== null) groupPages.tokens.push(token);
    keepInUrl({ groups: next ?? groupPages.tokens.pop() ?? '' });
    drawGroups(el).catch((err) => fill(el, problem(err)));
  };
  const pager = h('p', { class: 'pager' },
    token ? h('button', { id: 'newer-groups', onclick: go(null) }, '← newer') : null, ' ',
    continuationToken ? h('button', { id: 'older-groups', onclick: go(continuationToken) }, 'older →') : null, ' ',
    h('a', { href: '/tasks/groups', id: 'all-groups' }, 'All task groups →'));
  if (!taskGroups.length) {
    fill(el, h('p', { class: 'muted' }, 'No task group yet.'), pager);
    return taskGroups;
  }
  fill(el, h('ul', { class: 'plain', id: 'recent-groups' }, taskGroups.map((group) => h('li', { 'data-group': group.taskGroupId },
    groupVerdict(group), ' ', groupLink(group), ' ', groupTally(group), ' ',
    h('span', { class: 'muted' }, group.schedulerId), ' ', when(group.created),
    group.sealed ? h('span', { class: 'muted' }, ' sealed') : null))),
  pager);
  return taskGroups;
}

/** `/tasks/groups?q=&pages=`: every task group, newest first, 100 a page, narrowed by name, id
 * or scheduler. */
export async function groupList(main) {
  const wanted = new URLSearchParams(location.search).get('q') || '';
  const search = h('input', { id: 'group-search', type: 'search', placeholder: 'name, group id or scheduler', value: wanted, 'aria-label': 'search groups' });
  const rows = h('tbody', { id: 'groups' });
  const more = h('div', { class: 'pager' });
  const loaded = [];
  const draw = () => {
    const q = search.value.trim().toLowerCase();
    // The search stays in the URL, so a link shows the same list.
    keepInUrl({ q: search.value.trim() });
    const found = (g) => [g.name || '', g.taskGroupId, g.schedulerId].some((text) => text.toLowerCase().includes(q));
    fill(rows, loaded.filter((g) => !q || found(g))
      .map((g) => h('tr', { 'data-group': g.taskGroupId },
        h('td', {}, groupLink(g)),
        h('td', {}, groupVerdict(g), ' ', groupTally(g)), h('td', { class: 'wide' }, g.schedulerId), h('td', {}, when(g.created)),
        h('td', { class: 'wide' }, g.sealed ? 'sealed' : ''))));
  };
  search.addEventListener('input', draw);
  fill(main, h('h1', {}, 'Task groups'), h('div', { class: 'toolbar' }, search),
    h('div', { class: 'scroll' }, h('table', { class: 'list' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Group'), h('th', {}, 'State'), h('th', { class: 'wide' }, 'Scheduler'), h('th', {}, 'Created'),
        h('th', { class: 'wide' }, ''))), rows)),
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

async function drawFailures(el, listedGroups) {
  // Cancellations are deliberate, not failures: left out unless asked for.
  const withCancels = new URLSearchParams(location.search).get('cancelled') === 'shown';
  const { tasks } = await get(queue('/tasks/failed?limit=50'));
  const shown = tasks.filter(({ status }) => withCancels || status.runs[status.runs.length - 1]?.reasonResolved !== 'canceled').slice(0, 10);
  const toggle = h('a', { href: withCancels ? '/' : '/?cancelled=shown', class: 'small', id: 'toggle-cancelled' },
    withCancels ? 'hide cancellations' : 'show cancellations too');
  if (!shown.length) return fill(el, h('p', { class: 'muted' }, 'Nothing failed lately. ', toggle));
  // By group, the group of the latest failure first: a push's failures read together.
  const byGroup = new Map();
  for (const item of shown) {
    const group = item.status.taskGroupId;
    if (!byGroup.has(group)) byGroup.set(group, []);
    byGroup.get(group).push(item);
  }
  const names = await groupNames([...byGroup.keys()], await listedGroups);
  fill(el, h('div', { id: 'failures' }, [...byGroup].map(([group, items]) => h('div', { class: 'failure-group', 'data-group': group },
    h('div', { class: 'small' }, h('a', { href: `/tasks/groups/${group}` }, names.get(group) || h('span', { class: 'mono' }, group)),
      h('span', { class: 'muted' }, ` · ${items.length} failed here lately`)),
    h('ul', { class: 'plain' }, items.map(({ task, status }) => h('li', { 'data-task': status.taskId },
      statusBadge(status), ' ', taskLink(status.taskId, task.metadata.name), ' ',
      h('span', { class: 'muted' }, status.taskQueueId), ' failed ', when(status.runs[status.runs.length - 1]?.resolved))))))), toggle);
}

/** The names of `groups`: as `listed` names them, else as each one's namesake task does (a
 * decision task), read in one batch; a group with neither goes by its id. */
async function groupNames(groups, listed) {
  const names = new Map(listed.filter((g) => g.name).map((g) => [g.taskGroupId, g.name]));
  const unnamed = groups.filter((id) => !names.has(id));
  if (!unnamed.length) return names;
  try {
    const { tasks } = await call('POST', queue('/tasks'), { taskIds: unnamed });
    for (const t of tasks) names.set(t.taskId, t.task.metadata.name);
  } catch { /* by id */ }
  return names;
}
