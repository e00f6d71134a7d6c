// `/task-graphs/<taskGraphId>`: the graph's tasks drawn by depth, each coloured by its state
// and linked to its page, with the list beside it; kept current from the event stream.

import { TASK_EXCHANGES, get, listen } from '../api.js';
import { badge, fill, h, taskLink, throttle } from '../view.js';

/** Most tasks drawn; a larger graph is listed only. */
const MAX_DRAWN = 600;
/** Tasks listed per page. */
const PAGE_ROWS = 100;
const SVG = 'http://www.w3.org/2000/svg';
const [NODE_W, NODE_H, GAP_X, GAP_Y] = [170, 34, 60, 14];

export async function graphPage(main, graphId) {
  let inspected = null;
  const states = new Map();
  let draw = () => {};
  const refresh = async () => {
    inspected = await get(`/api/scheduler/v1/task-graph/${graphId}/inspect`);
    for (const t of inspected.tasks) states.set(t.taskId, t.state);
    draw();
  };
  const redraw = throttle(() => draw(), 200);
  // Listen first, then read the graph: nothing that happens in between is missed.
  const graphExchanges = ['task-graph-running', 'task-graph-blocked', 'task-graph-finished']
    .map((name) => ({ exchange: `exchange/taskcluster-scheduler/v1/${name}`, routingKeyPattern: `primary.*.*.*.*.*.*.*.${graphId}.#` }));
  await listen([
    ...TASK_EXCHANGES.map((exchange) => ({ exchange, routingKeyPattern: `primary.*.*.*.*.*.*.*.${graphId}.#` })),
    ...graphExchanges,
  ], (message) => {
    const payload = message.payload;
    if (!inspected) return;
    if (payload.status?.taskId && states.has(payload.status.taskId)) {
      states.set(payload.status.taskId, payload.status.state);
      redraw();
    } else if (payload.status?.taskGraphId) {
      refresh();
    }
  }, refresh);
  inspected = await get(`/api/scheduler/v1/task-graph/${graphId}/inspect`);
  for (const t of inspected.tasks) states.set(t.taskId, t.state);
  const head = h('div');
  const drawing = h('div', { class: 'graph scroll', id: 'graph' });
  const list = h('tbody');
  fill(main, head, drawing,
    h('section', { class: 'card' }, h('h2', {}, 'Tasks'),
      h('div', { class: 'scroll' }, h('table', { class: 'list' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Label'), h('th', {}, 'State'), h('th', { class: 'wide' }, 'Requires'), h('th', { class: 'num' }, 'Reruns left'))),
        list))));
  const pager = h('div', { class: 'pager' });
  main.append(pager);
  let layout = null;
  let page = 0;

  draw = () => {
    if (!layout || layout.count !== inspected.tasks.length) layout = place(inspected.tasks);
    const { status, metadata } = inspected;
    fill(head,
      h('h1', {}, metadata.name || graphId, ' ', badge(status.state)),
      h('p', { class: 'muted' }, h('span', { class: 'mono' }, graphId), metadata.description ? ` · ${metadata.description}` : '', ' · ',
        h('a', { href: `/tasks/groups/${graphId}` }, 'its task group')));
    if (inspected.tasks.length > MAX_DRAWN) {
      fill(drawing, h('p', { class: 'muted' }, `${inspected.tasks.length} tasks: too many to draw; listed below.`));
    } else {
      fill(drawing, svg(inspected.tasks, layout, states));
    }
    const byId = new Map(inspected.tasks.map((t) => [t.taskId, t]));
    const pages = Math.max(1, Math.ceil(inspected.tasks.length / PAGE_ROWS));
    page = Math.min(page, pages - 1);
    fill(pager, pages > 1 ? [
      h('button', { disabled: page === 0, onclick: () => { page--; draw(); } }, '‹ previous'),
      ` page ${page + 1} of ${pages} `,
      h('button', { disabled: page >= pages - 1, onclick: () => { page++; draw(); } }, 'next ›'),
    ] : null);
    fill(list, inspected.tasks.slice(page * PAGE_ROWS, (page + 1) * PAGE_ROWS).map((t) => h('tr', { 'data-task': t.taskId, 'data-state': states.get(t.taskId) },
      h('td', {}, taskLink(t.taskId, t.label)), h('td', {}, badge(states.get(t.taskId))),
      h('td', { class: 'wide' }, t.requires.map((id) => byId.get(id)?.label || id).join(', ')),
      h('td', { class: 'num' }, t.rerunsLeft))));
  };
  draw();
}

/** Each task's column (its depth: one past its deepest requirement) and row. */
function place(tasks) {
  const byId = new Map(tasks.map((t) => [t.taskId, t]));
  const depth = new Map();
  const depthOf = (t, seen = new Set()) => {
    if (depth.has(t.taskId)) return depth.get(t.taskId);
    if (seen.has(t.taskId)) return 0;
    seen.add(t.taskId);
    const d = Math.max(-1, ...t.requires.map((id) => (byId.has(id) ? depthOf(byId.get(id), seen) : -1))) + 1;
    depth.set(t.taskId, d);
    return d;
  };
  const columns = [];
  for (const t of tasks) {
    const d = depthOf(t);
    (columns[d] ||= []).push(t.taskId);
  }
  const at = new Map();
  columns.forEach((ids, col) => ids.forEach((id, row) => at.set(id, { x: col * (NODE_W + GAP_X) + 10, y: row * (NODE_H + GAP_Y) + 10 })));
  const rows = Math.max(1, ...columns.map((c) => c.length));
  return { at, count: tasks.length, width: columns.length * (NODE_W + GAP_X) + 20, height: rows * (NODE_H + GAP_Y) + 20 };
}

function el(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  node.append(...children);
  return node;
}

function svg(tasks, layout, states) {
  const root = el('svg', { width: layout.width, height: layout.height, viewBox: `0 0 ${layout.width} ${layout.height}`, role: 'img', 'aria-label': 'dependency graph' });
  for (const t of tasks) {
    const to = layout.at.get(t.taskId);
    for (const id of t.requires) {
      const from = layout.at.get(id);
      if (!from) continue;
      root.append(el('path', { class: 'edge', d: `M${from.x + NODE_W},${from.y + NODE_H / 2} C${from.x + NODE_W + GAP_X / 2},${from.y + NODE_H / 2} ${to.x - GAP_X / 2},${to.y + NODE_H / 2} ${to.x},${to.y + NODE_H / 2}` }));
    }
  }
  for (const t of tasks) {
    const { x, y } = layout.at.get(t.taskId);
    const state = states.get(t.taskId);
    const label = t.label.length > 22 ? `${t.label.slice(0, 21)}…` : t.label;
    const link = el('a', { href: `/tasks/${t.taskId}`, 'data-task': t.taskId, 'data-state': state },
      el('title', {}, `${t.label}: ${state}`),
      el('rect', { x, y, width: NODE_W, height: NODE_H, rx: 6, class: `node state-${state}` }),
      el('text', { x: x + 10, y: y + NODE_H / 2 + 5 }, label));
    root.append(link);
  }
  return root;
}
