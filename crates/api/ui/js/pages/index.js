// The Index browser (`/tasks/index/<namespace>`, Taskcluster's URL): a namespace's
// namespaces and the tasks indexed directly under it, and for a namespace that holds a task,
// that task and its latest run's artifacts (each linked through the Index).

import { get, queue, withQuery } from '../api.js';
import { fill, h, pagedListing, section, taskLink, when } from '../view.js';

const index = (path) => `/api/index/v1${path}`;
const PAGE_ROWS = 100;

/** The breadcrumbs of `namespace`: the top, then each namespace above it and itself. */
function crumbs(namespace) {
  const words = namespace ? namespace.split('.') : [];
  return h('nav', { class: 'crumbs', id: 'index-crumbs' }, h('a', { href: '/tasks/index' }, 'Index'),
    words.map((word, i) => [' › ', h('a', { href: `/tasks/index/${words.slice(0, i + 1).join('.')}` }, word)]));
}

export async function indexPage(main, namespace = '') {
  const namespaces = h('tbody', { id: 'namespaces' });
  const tasks = h('tbody', { id: 'indexed-tasks' });
  const moreNamespaces = h('div', { class: 'pager' });
  const moreTasks = h('div', { class: 'pager' });
  const entry = h('div', { id: 'index-entry' });
  fill(main, h('h1', {}, 'Index ', namespace ? h('span', { class: 'mono' }, namespace) : null), crumbs(namespace), entry,
    section('Namespaces', h('div', { class: 'scroll' }, h('table', { class: 'list' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Namespace'), h('th', {}, 'Expires'))), namespaces)), moreNamespaces),
    section('Indexed tasks', h('div', { class: 'scroll' }, h('table', { class: 'list' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Task'), h('th', {}, 'Rank'), h('th', {}, 'Expires'))), tasks)), moreTasks));
  const suffix = namespace ? `/${namespace}` : '/';
  const listings = [
    pagedListing(moreNamespaces, async (token) => {
      const page = await get(withQuery(index(`/namespaces${suffix}`), { limit: PAGE_ROWS, continuationToken: token }));
      namespaces.append(...page.namespaces.map((ns) => h('tr', { 'data-namespace': ns.namespace },
        h('td', {}, h('a', { href: `/tasks/index/${ns.namespace}`, class: 'mono' }, ns.name)), h('td', {}, when(ns.expires)))));
      if (!namespaces.children.length) namespaces.append(h('tr', {}, h('td', { class: 'muted', colspan: 2 }, 'None.')));
      return page.continuationToken;
    }),
    pagedListing(moreTasks, async (token) => {
      const page = await get(withQuery(index(`/tasks${suffix}`), { limit: PAGE_ROWS, continuationToken: token }));
      tasks.append(...page.tasks.map((t) => h('tr', { 'data-indexed': t.namespace },
        h('td', {}, h('a', { href: `/tasks/index/${t.namespace}`, class: 'mono' }, t.namespace.split('.').pop())),
        h('td', {}, taskLink(t.taskId)), h('td', {}, String(t.rank)), h('td', {}, when(t.expires)))));
      if (!tasks.children.length) tasks.append(h('tr', {}, h('td', { class: 'muted', colspan: 4 }, 'None.')));
      return page.continuationToken;
    }),
  ];
  if (namespace) listings.push(drawEntry(entry, namespace));
  await Promise.all(listings);
}

/** The task indexed at `namespace` itself, if any, with its latest run's artifacts. */
async function drawEntry(el, namespace) {
  let found;
  try {
    found = await get(index(`/task/${namespace}`));
  } catch (err) {
    if (err.status === 404) return;
    throw err;
  }
  const artifacts = h('ul', { id: 'index-artifacts', class: 'plain' });
  fill(el, section('Indexed task', h('dl', { class: 'facts' },
    h('dt', {}, 'Task'), h('dd', {}, taskLink(found.taskId)), h('dt', {}, 'Rank'), h('dd', {}, String(found.rank)),
    h('dt', {}, 'Expires'), h('dd', {}, when(found.expires)),
    h('dt', {}, 'Data'), h('dd', {}, h('code', {}, JSON.stringify(found.data)))),
  h('h3', {}, 'Artifacts of its latest run'), artifacts));
  try {
    const page = await get(queue(`/task/${found.taskId}/artifacts`));
    fill(artifacts, page.artifacts.length ? page.artifacts.map((a) => h('li', {},
      h('a', { href: index(`/task/${namespace}/artifacts/${a.name}`), class: 'mono' }, a.name))) : h('li', { class: 'muted' }, 'None.'));
  } catch (err) {
    fill(artifacts, h('li', { class: 'muted' }, `No run to list: ${err.code || err.message}`));
  }
}
