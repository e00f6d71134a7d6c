// `/tasks?tag=k:v&createdBy=..&state=..&taskQueueId=..`: Swarming's task list, newest first,
// by tag or creator, queue and state; with neither, the tasks that failed lately.

import { get, queue, withQuery } from '../api.js';
import { badge, fill, h, problem, queueLink, taskLink, when } from '../view.js';

const STATES = ['', 'unscheduled', 'pending', 'running', 'completed', 'failed', 'exception'];

export async function taskList(main) {
  const params = new URLSearchParams(location.search);
  const wanted = {
    tag: params.get('tag') || '', createdBy: params.get('createdBy') || '',
    state: params.get('state') || '', taskQueueId: params.get('taskQueueId') || '',
  };
  const form = h('form', { class: 'toolbar', id: 'task-filter', method: 'get', action: '/tasks' },
    h('input', { name: 'tag', placeholder: 'tag key:value', value: wanted.tag, 'aria-label': 'tag' }),
    h('input', { name: 'createdBy', placeholder: 'created by (client id)', value: wanted.createdBy, 'aria-label': 'created by' }),
    h('input', { name: 'taskQueueId', placeholder: 'provisioner/workerType', value: wanted.taskQueueId, 'aria-label': 'queue' }),
    h('select', { name: 'state', 'aria-label': 'state' }, STATES.map((s) => h('option', { value: s, selected: s === wanted.state }, s || 'any state'))),
    h('button', { type: 'submit' }, 'List'));
  // The page's policy forbids form actions; the form navigates by script instead.
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    location.assign(withQuery('/tasks', Object.fromEntries(new FormData(form))));
  });
  const count = h('span', { class: 'muted', id: 'count' });
  const rows = h('tbody', { id: 'tasks' });
  const more = h('div', { class: 'pager' });
  const listed = Boolean(wanted.tag || wanted.createdBy);
  const title = [];
  if (wanted.tag) title.push('Tasks tagged ', h('span', { class: 'mono' }, wanted.tag));
  if (wanted.createdBy) title.push(wanted.tag ? ', created by ' : 'Tasks created by ', h('span', { class: 'mono' }, wanted.createdBy));
  if (!listed) title.push('Tasks that failed lately');
  fill(main, h('h1', {}, ...title), form, h('p', {}, count),
    h('div', { class: 'scroll' }, h('table', { class: 'list' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Task'), h('th', {}, 'State'), h('th', { class: 'wide' }, 'Queue'), h('th', {}, 'Created'))),
      rows)),
    more);
  const filters = { ...wanted, state: listed || ['failed', 'exception'].includes(wanted.state) ? wanted.state : '' };
  const path = listed ? queue('/tasks') : queue('/tasks/failed');
  if (listed) {
    get(withQuery(queue('/tasks/count'), filters)).then(({ count: n }) => fill(count, `${n} tasks`)).catch(() => {});
  }
  const load = async (token) => {
    try {
      const page = await get(withQuery(path, { ...filters, limit: 100, continuationToken: token }));
      rows.append(...page.tasks.map(({ task, status }) => h('tr', { 'data-task': status.taskId },
        h('td', {}, taskLink(status.taskId, task.metadata.name)), h('td', {}, badge(status.state)),
        h('td', { class: 'wide' }, queueLink(status.taskQueueId)), h('td', {}, when(task.created)))));
      fill(more, page.continuationToken ? h('button', { onclick: () => load(page.continuationToken) }, 'more') : null);
      if (!rows.children.length) fill(more, h('p', { class: 'muted' }, 'No task matches.'));
    } catch (err) {
      fill(more, problem(err));
    }
  };
  await load();
}
