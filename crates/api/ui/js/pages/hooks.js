// Hooks (`/hooks`, `/hooks/<hookGroupId>/<hookId>`, Taskcluster's URLs): every hook by group,
// and a hook's definition, schedule, last fires (with their tasks' states) and a Trigger
// action that fires it with the signed-in client's scopes.

import { call, get, withQuery } from '../api.js';
import { badge, facts, fill, h, pagedListing, problem, section, taskLink, when } from '../view.js';

const hooks = (path) => `/api/hooks/v1${path}`;
const hookPath = (group, id) => `/hooks/${encodeURIComponent(group)}/${encodeURIComponent(id)}`;

export async function hooksPage(main) {
  const list = h('div', { id: 'hook-groups' });
  fill(main, h('h1', {}, 'Hooks'), list);
  const { groups } = await get(hooks('/hooks'));
  if (!groups.length) {
    fill(list, h('p', { class: 'muted' }, 'No hooks yet.'));
    return;
  }
  const drawn = await Promise.all(groups.map(async (group) => {
    const { hooks: inGroup } = await get(hooks(`/hooks/${encodeURIComponent(group)}`));
    return section(group, h('div', { class: 'scroll' }, h('table', { class: 'list' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Hook'), h('th', {}, 'Name'), h('th', { class: 'wide' }, 'Schedule'))),
      h('tbody', {}, inGroup.map((hook) => h('tr', { 'data-hook': `${group}/${hook.hookId}` },
        h('td', {}, h('a', { href: hookPath(group, hook.hookId), class: 'mono' }, hook.hookId)),
        h('td', {}, hook.metadata.name),
        h('td', { class: 'wide mono' }, hook.schedule.join(', ') || '—')))))));
  }));
  fill(list, drawn);
}

export async function hookPage(main, group, id) {
  const [hook, status] = await Promise.all([get(hooks(hookPath(group, id))), get(hooks(`${hookPath(group, id)}/status`))]);
  const fires = h('tbody', { id: 'last-fires' });
  const more = h('div', { class: 'pager' });
  const payload = h('textarea', { id: 'trigger-payload', rows: 4, class: 'mono', 'aria-label': 'payload' }, '{}');
  const result = h('span', { class: 'action-result', id: 'trigger-result' });
  const trigger = h('button', { id: 'trigger', onclick: async () => {
    let body;
    try { body = JSON.parse(payload.value); } catch (err) { fill(result, problem({ message: `the payload is not JSON: ${err.message}` })); return; }
    try {
      const fired = await call('POST', hooks(`${hookPath(group, id)}/trigger`), body);
      fill(result, fired.taskId ? ['created ', taskLink(fired.taskId)] : 'the hook declined to create a task');
    } catch (err) {
      fill(result, problem(err));
    }
  } }, 'Trigger');
  fill(main, h('h1', {}, 'Hook ', h('span', { class: 'mono' }, `${group}/${id}`)),
    section('Hook', facts([
      ['Name', hook.metadata.name], ['Description', hook.metadata.description], ['Owner', hook.metadata.owner],
      ['Schedule', hook.schedule.length ? h('span', { class: 'mono' }, hook.schedule.join(', ')) : 'none (triggers only)'],
      ['Next fire', status.nextScheduledDate ? when(status.nextScheduledDate) : null],
    ])),
    section('Trigger', h('p', { class: 'muted' }, 'The payload must match the trigger schema; the task is created with the hook\'s role.'),
      payload, h('div', { class: 'actions' }, trigger, result)),
    section('Last fires', h('div', { class: 'scroll' }, h('table', { class: 'list' },
      h('thead', {}, h('tr', {}, h('th', {}, 'When'), h('th', {}, 'By'), h('th', {}, 'Result'), h('th', {}, 'Task'), h('th', { class: 'wide' }, 'Error'))),
      fires)), more),
    section('Definition',
      h('details', { id: 'task-template' }, h('summary', {}, 'Task template (JSON-e)'), h('pre', { class: 'mono small' }, JSON.stringify(hook.task, null, 2))),
      h('details', { id: 'trigger-schema' }, h('summary', {}, 'Trigger schema'), h('pre', { class: 'mono small' }, JSON.stringify(hook.triggerSchema, null, 2)))));
  await pagedListing(more, async (token) => {
    let page;
    try {
      page = await get(withQuery(hooks(`${hookPath(group, id)}/last-fires`), { limit: 100, continuationToken: token }));
    } catch (err) {
      if (err.status !== 404) throw err;
      fill(fires, h('tr', {}, h('td', { class: 'muted', colspan: 5 }, 'Never fired.')));
      return undefined;
    }
    fires.append(...page.lastFires.map((fire) => h('tr', { 'data-fire': fire.taskId },
      h('td', {}, when(fire.taskCreateTime)), h('td', {}, fire.firedBy),
      h('td', {}, h('span', { class: `badge state-${fire.result === 'success' ? 'completed' : 'failed'}` }, fire.result)),
      h('td', {}, fire.result === 'success' ? [taskLink(fire.taskId), ' ', badge(fire.taskState)] : h('span', { class: 'mono muted' }, fire.taskId)),
      h('td', { class: 'wide' }, fire.error ? h('pre', { class: 'mono small error' }, fire.error) : null))));
    return page.continuationToken;
  });
}
