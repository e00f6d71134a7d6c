// `/tasks?tag=k:v&createdBy=..&state=..&taskQueueId=..&within=..`: Swarming's task list, newest
// first, by tag or creator, queue, state and time; with neither, the tasks that failed lately
// (when they failed; deliberate cancellations left out unless `cancels=on`); `pages=N` shows
// that many pages of 100.

import { get, queue, withQuery } from '../api.js';
import { fill, h, pagedListing, queueLink, statusBadge, taskLink, when } from '../view.js';

const PAGE_ROWS = 100;

const STATES = ['', 'unscheduled', 'pending', 'running', 'completed', 'failed', 'exception'];
/** Time ranges: the last hour, day or week (on `created`, or for failures when they failed). */
const WITHIN = [['', 'any time'], ['1h', 'last hour', 3600e3], ['24h', 'last day', 86400e3], ['7d', 'last week', 7 * 86400e3]];

export async function taskList(main) {
  const params = new URLSearchParams(location.search);
  const wanted = {
    tag: params.get('tag') || '', createdBy: params.get('createdBy') || '',
    state: params.get('state') || '', taskQueueId: params.get('taskQueueId') || '',
    within: params.get('within') || '', cancels: params.get('cancels') || '',
  };
  const listed = Boolean(wanted.tag || wanted.createdBy);
  const form = h('form', { class: 'toolbar', id: 'task-filter', method: 'get', action: '/tasks' },
    h('input', { name: 'tag', placeholder: 'tag key:value', value: wanted.tag, 'aria-label': 'tag' }),
    h('input', { name: 'createdBy', placeholder: 'created by (client id)', value: wanted.createdBy, 'aria-label': 'created by' }),
    h('input', { name: 'taskQueueId', placeholder: 'provisioner/workerType', value: wanted.taskQueueId, 'aria-label': 'queue' }),
    h('select', { name: 'state', 'aria-label': 'state' }, STATES.map((s) => h('option', { value: s, selected: s === wanted.state }, s || 'any state'))),
    h('select', { name: 'within', id: 'within', 'aria-label': 'time range' }, WITHIN.map(([v, label]) => h('option', { value: v, selected: v === wanted.within }, label))),
    listed ? null : h('label', {}, h('input', { type: 'checkbox', name: 'cancels', id: 'cancels', checked: wanted.cancels === 'on' }), ' with cancellations'),
    h('button', { type: 'submit' }, 'List'));
  // The page's policy forbids form actions; the form navigates by script instead.
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    location.assign(withQuery('/tasks', Object.fromEntries(new FormData(form))));
  });
  const count = h('span', { class: 'muted', id: 'count' });
  const rows = h('tbody', { id: 'tasks' });
  const more = h('div', { class: 'pager' });
  const empty = h('div');
  const title = [];
  if (wanted.tag) title.push('Tasks tagged ', h('span', { class: 'mono' }, wanted.tag));
  if (wanted.createdBy) title.push(wanted.tag ? ', created by ' : 'Tasks created by ', h('span', { class: 'mono' }, wanted.createdBy));
  if (!listed) title.push('Tasks that failed lately');
  fill(main, h('h1', {}, ...title), form, h('p', {}, count, ' ', h('a', { href: '/tasks/create', id: 'create-task', class: 'small' }, 'Create a task')),
    h('div', { class: 'scroll' }, h('table', { class: 'list' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Task'), h('th', {}, 'State'), h('th', { class: 'wide' }, 'Queue'), h('th', {}, listed ? 'Created' : 'Failed'))),
      rows)),
    empty, more);
  const range = WITHIN.find(([v]) => v === wanted.within)?.[2];
  const filters = {
    // Every tag asked for goes to the API, which refuses several rather than keep one.
    tag: params.getAll('tag'), createdBy: wanted.createdBy, taskQueueId: wanted.taskQueueId,
    state: listed || ['failed', 'exception'].includes(wanted.state) ? wanted.state : '',
    since: range ? new Date(Date.now() - range).toISOString() : '',
  };
  const last = (status) => status.runs[status.runs.length - 1];
  // A cancellation is somebody's decision, not a failure to look into.
  const shown = ({ status }) => listed || wanted.cancels === 'on' || last(status)?.reasonResolved !== 'canceled';
  const path = listed ? queue('/tasks') : queue('/tasks/failed');
  if (listed) {
    get(withQuery(queue('/tasks/count'), filters)).then(({ count: n }) => fill(count, `${n} tasks`)).catch(() => {});
  }
  await pagedListing(more, async (token) => {
    const page = await get(withQuery(path, { ...filters, limit: PAGE_ROWS, continuationToken: token }));
    rows.append(...page.tasks.filter(shown).map(({ task, status }) => h('tr', { 'data-task': status.taskId },
      h('td', {}, taskLink(status.taskId, task.metadata.name)), h('td', {}, statusBadge(status)),
      h('td', { class: 'wide' }, queueLink(status.taskQueueId)),
      h('td', {}, listed ? when(task.created) : when(last(status)?.resolved)))));
    fill(empty, rows.children.length ? null : h('p', { class: 'muted' }, 'No task matches.'));
    return page.continuationToken;
  });
}
