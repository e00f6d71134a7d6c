// taskgraph's actions on a task's page, as Taskcluster's UI offers them: the decision task
// (the one whose id is the task's group) publishes `public/actions.json`; each hook action whose
// context matches the task's tags is offered with a form made from its input schema, and runs
// by firing its hook (`triggerHook`) with its `hookPayload` rendered for this task.

import { call, queue } from '../api.js';
import { fill, h, problem, taskLink } from '../view.js';

/** The actions of the task's group that apply to it, `[]` when its group publishes none. */
export async function actionsFor(task, status) {
  let published;
  try {
    // A public artifact, read unsigned: the queue redirects to its bytes, which a signature
    // made for the artifact's URL would not cover.
    published = await call('GET', queue(`/task/${status.taskGroupId}/artifacts/public/actions.json`), undefined, null);
  } catch (err) {
    if (err.status === 404) return [];
    throw err;
  }
  if (published.version !== 1 || !Array.isArray(published.actions)) return [];
  const tags = task.tags || {};
  // A context is a list of tag sets; a task action matches when one set's tags are all the
  // task's. An empty context is a group action, not offered on a task.
  const matches = (action) => Array.isArray(action.context) && action.context.some(
    (set) => Object.entries(set).every(([key, value]) => tags[key] === value));
  const seen = new Set();
  return published.actions.filter((action) => action.kind === 'hook' && matches(action)).filter((action) => {
    // Several actions may share a name (fallback versions); the first that matches is the one.
    if (seen.has(action.name)) return false;
    seen.add(action.name);
    return true;
  }).map((action) => ({ ...action, variables: published.variables || {} }));
}

/** The action's `hookPayload` rendered as taskgraph writes them: `{"$eval": "<name>"}` is the
 * context's value of that name; any other JSON-e operator is refused, saying so. */
export function rendered(template, context) {
  if (Array.isArray(template)) return template.map((item) => rendered(item, context));
  if (template && typeof template === 'object') {
    const keys = Object.keys(template);
    if (keys.length === 1 && keys[0] === '$eval' && /^[A-Za-z_][A-Za-z0-9_]*$/.test(template.$eval)) {
      if (!(template.$eval in context)) throw new Error(`the action's payload names ${template.$eval}, which it was not given`);
      return context[template.$eval];
    }
    const operator = keys.find((key) => key.startsWith('$'));
    if (operator) throw new Error(`the action's payload uses JSON-e's ${operator}, which this page does not render`);
    return Object.fromEntries(keys.map((key) => [key, rendered(template[key], context)]));
  }
  return template;
}

/** A form for the action's input schema: a field per property of an object schema (booleans,
 * numbers and strings, with their defaults), or the input as JSON for any other schema. */
function inputForm(schema) {
  const properties = schema?.type === 'object' ? Object.entries(schema.properties || {}) : null;
  const simple = properties && properties.every(([, p]) => ['boolean', 'integer', 'number', 'string'].includes(p.type));
  if (!simple) {
    const json = h('textarea', { rows: 6, class: 'mono', name: 'input', 'aria-label': 'input (JSON)' },
      JSON.stringify(schema?.default ?? {}, null, 2));
    return { fields: [json], read: () => JSON.parse(json.value) };
  }
  const inputs = properties.map(([name, p]) => {
    const input = p.type === 'boolean'
      ? h('input', { type: 'checkbox', name, checked: Boolean(p.default) })
      : p.enum
        ? h('select', { name }, p.enum.map((value) => h('option', { value, selected: value === p.default }, String(value))))
        : h('input', { type: p.type === 'string' ? 'text' : 'number', name, value: p.default ?? '', min: p.minimum, max: p.maximum });
    return [name, p, input];
  });
  const read = () => Object.fromEntries(inputs.filter(([, p, input]) => p.type === 'boolean' || input.value !== '').map(([name, p, input]) => {
    if (p.type === 'boolean') return [name, input.checked];
    return [name, p.type === 'string' ? input.value : Number(input.value)];
  }));
  const fields = inputs.map(([name, p, input]) => h('label', { class: 'field', title: p.description || '' }, `${p.title || name} `, input));
  return { fields, read };
}

/** Draws the Actions menu into `el` for the signed-in (hidden when none apply). */
export async function drawActionsMenu(el, task, status, signedIn) {
  let actions;
  try {
    actions = await actionsFor(task, status);
  } catch (err) {
    fill(el, problem(err));
    return;
  }
  if (!actions.length) return fill(el);
  const form = h('div', { class: 'action-form', id: 'action-form' });
  const choose = (action) => {
    const { fields, read } = inputForm(action.schema);
    const result = h('span', { class: 'action-result', id: 'hook-action-result', role: 'status' });
    const run = h('button', { id: 'run-action', disabled: !signedIn, onclick: async () => {
      let payload;
      try {
        const context = { ...action.variables, input: action.schema ? read() : null, taskId: status.taskId, taskGroupId: status.taskGroupId };
        payload = rendered(action.hookPayload, context);
      } catch (err) {
        fill(result, problem({ message: err.message }));
        return;
      }
      fill(result, `${action.title}…`);
      try {
        const path = `/api/hooks/v1/hooks/${encodeURIComponent(action.hookGroupId)}/${encodeURIComponent(action.hookId)}/trigger`;
        const fired = await call('POST', path, payload);
        fill(result, fired.taskId ? ['started ', taskLink(fired.taskId)] : 'the hook declined to create a task');
      } catch (err) {
        fill(result, problem(err));
      }
    } }, action.title);
    fill(form, h('h3', {}, action.title), h('p', { class: 'muted' }, action.description), fields, h('div', { class: 'actions' }, run, result));
  };
  fill(el, h('details', { class: 'actions-menu', id: 'actions-menu' },
    h('summary', {}, 'Actions'),
    h('ul', { class: 'plain' }, actions.map((action) => h('li', {},
      h('button', { class: 'link', 'data-action': action.name, title: action.description, onclick: () => choose(action) }, action.title)))),
    signedIn ? null : h('p', { class: 'muted' }, 'Sign in to run an action.'),
    form));
}
