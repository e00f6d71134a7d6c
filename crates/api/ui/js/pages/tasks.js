// `/tasks?tag=k:v&tag=..&createdBy=..&state=..&taskQueueId=..&within=..`: Swarming's task
// list, newest first, by tags (every one) or creator, queue, state and time; with neither and
// state pending or running, what waits or runs now, fleet-wide or in one queue; with neither
// else, the tasks that failed lately (when they failed; deliberate cancellations left out
// unless `cancels=on`); `pages=N` shows that many pages of 100.

import { get, queue, withQuery } from '../api.js';
import { fill, h, pagedListing, queueLink, statusBadge, taskLink, when } from '../view.js';

const PAGE_ROWS = 100;

const STATES = ['', 'unscheduled', 'pending', 'running', 'completed', 'failed', 'exception'];
/** States listed fleet-wide, as they are now. */
const NOW = ['pending', 'running'];
/** Time ranges: the last hour, day or week (on `created`, or for failures when they failed). */
const WITHIN = [['', 'any time'], ['1h', 'last hour', 3600e3], ['24h', 'last day', 86400e3], ['7d', 'last week', 7 * 86400e3]];

export async function taskList(main) {
  const params = new URLSearchParams(location.search);
  const wanted = {
    tags: params.getAll('tag').flatMap((t) => t.split(/\s+/)).filter(Boolean), createdBy: params.get('createdBy') || '',
    state: params.get('state') || '', taskQueueId: params.get('taskQueueId') || '',
    within: params.get('within') || '', cancels: params.get('cancels') || '',
  };
  const listed = Boolean(wanted.tags.length || wanted.createdBy);
  const live = !listed && NOW.includes(wanted.state);
  const form = h('form', { class: 'toolbar', id: 'task-filter', method: 'get', action: '/tasks' },
    h('input', { name: 'tag', placeholder: 'tags key:value (several: space between)', value: wanted.tags.join(' '), 'aria-label': 'tags' }),
    h('input', { name: 'createdBy', placeholder: 'created by (client id)', value: wanted.createdBy, 'aria-label': 'created by' }),
    h('input', { name: 'taskQueueId', placeholder: 'provisioner/workerType', value: wanted.taskQueueId, 'aria-label': 'queue' }),
    h('select', { name: 'state', 'aria-label': 'state' }, STATES.map((s) => h('option', { value: s, selected: s === wanted.state }, s || 'any state'))),
    h('select', { name: 'within', id: 'within', 'aria-label': 'time range' }, WITHIN.map(([v, label]) => h('option', { value: v, selected: v === wanted.within }, label))),
    listed || live ? null : h('label', {}, h('input', { type: 'checkbox', name: 'cancels', id: 'cancels', checked: wanted.cancels === 'on' }), ' with cancellations'),
    h('button', { type: 'submit' }, 'List'));
  // The page's policy forbids form actions; the form navigates by script instead.
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const chosen = Object.fromEntries(new FormData(form));
    // Each tag its own parameter, so a link names them as the API takes them.
    chosen.tag = chosen.tag.split(/\s+/).filter(Boolean);
    location.assign(withQuery('/tasks', chosen));
  });
  const count = h('span', { class: 'muted', id: 'count' });
  const rows = h('tbody', { id: 'tasks' });
  const more = h('div', { class: 'pager' });
  const empty = h('div');
  const title = [];
  const tagged = wanted.tags.flatMap((t, n) => [n ? ' and ' : '', h('span', { class: 'mono' }, t)]);
  const named = NOW.includes(wanted.state) ? `${wanted.state[0].toUpperCase()}${wanted.state.slice(1)} tasks` : 'Tasks';
  if (live) title.push(named, ...(wanted.taskQueueId ? [' in ', h('span', { class: 'mono' }, wanted.taskQueueId)] : [', fleet-wide']));
  else if (wanted.tags.length) title.push(`${named} tagged `, ...tagged);
  if (wanted.createdBy) title.push(wanted.tags.length ? ', created by ' : 'Tasks created by ', h('span', { class: 'mono' }, wanted.createdBy));
  if (!listed && !live) title.push('Tasks that failed lately');
  const since = live ? (wanted.state === 'pending' ? 'Waiting since' : 'Running since') : listed ? 'Created' : 'Failed';
  fill(main, h('h1', {}, ...title), form, h('p', {}, count, ' ', h('a', { href: '/tasks/create', id: 'create-task', class: 'small' }, 'Create a task'),
    live ? null : [' · ', h('a', { href: '/tasks?state=pending', class: 'small', id: 'pending-now' }, 'pending now'),
      ' · ', h('a', { href: '/tasks?state=running', class: 'small', id: 'running-now' }, 'running now')]),
    h('div', { class: 'scroll' }, h('table', { class: 'list' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Task'), h('th', {}, 'State'), h('th', { class: 'wide' }, 'Queue'), h('th', {}, since))),
      rows)),
    empty, more);
  const range = WITHIN.find(([v]) => v === wanted.within)?.[2];
  const filters = {
    tag: wanted.tags, createdBy: wanted.createdBy, taskQueueId: wanted.taskQueueId,
    state: listed || live || ['failed', 'exception'].includes(wanted.state) ? wanted.state : '',
    since: range ? new Date(Date.now() - range).toISOString() : '',
  };
  const last = (status) => status.runs[status.runs.length - 1];
  // A cancellation is somebody's decision, not a failure to look into.
  const shown = ({ status }) => listed || live || wanted.cancels === 'on' || last(status)?.reasonResolved !== 'canceled';
  const path = listed || live ? queue('/tasks') : queue('/tasks/failed');
  if (listed) {
    get(withQuery(queue('/tasks/count'), filters)).then(({ count: n }) => fill(count, `${n} tasks`)).catch(() => {});
  } else if (live && wanted.taskQueueId) {
    get(queue(`/task-queues/${wanted.taskQueueId}/counts`))
      .then((c) => fill(count, `${wanted.state === 'pending' ? c.pendingTasks : c.claimedTasks} ${wanted.state}`)).catch(() => {});
  }
  const at = ({ task, status }) => {
    if (live) return when(wanted.state === 'pending' ? last(status)?.scheduled : last(status)?.started);
    return listed ? when(task.created) : when(last(status)?.resolved);
  };
  await pagedListing(more, async (token) => {
    const page = await get(withQuery(path, { ...filters, limit: PAGE_ROWS, continuationToken: token }));
    rows.append(...page.tasks.filter(shown).map((item) => h('tr', { 'data-task': item.status.taskId },
      h('td', {}, taskLink(item.status.taskId, item.task.metadata.name)), h('td', {}, statusBadge(item.status)),
      h('td', { class: 'wide' }, queueLink(item.status.taskQueueId)), h('td', {}, at(item)))));
    fill(empty, rows.children.length ? null : h('p', { class: 'muted' }, live ? `Nothing is ${wanted.state} now.` : 'No task matches.'));
    return page.continuationToken;
  });
}
