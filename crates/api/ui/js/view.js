// Small helpers for drawing pages: elements, times, sizes and state badges.

/** An element: `h('a', {href: '/'}, 'text', child, ...)`; `on*` attributes are listeners. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'class') el.className = value;
    else el.setAttribute(key, value === true ? '' : value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces everything in `el` with `children`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** "3 min ago" / "in 2 h", with the exact time on hover. */
export function when(timestamp) {
  if (!timestamp) return h('span', { class: 'muted' }, '—');
  const at = new Date(timestamp);
  return h('time', { datetime: timestamp, title: at.toLocaleString() + ' (' + timestamp + ')' }, relative(at));
}

/** How far `at` is from now, in words. */
export function relative(at) {
  const seconds = Math.round((at.getTime() - Date.now()) / 1000);
  const abs = Math.abs(seconds);
  const [value, unit] =
    abs < 45 ? [abs, 's'] : abs < 2700 ? [Math.round(abs / 60), 'min'] : abs < 129600 ? [Math.round(abs / 3600), 'h'] : [Math.round(abs / 86400), 'd'];
  if (abs < 5) return 'just now';
  return seconds < 0 ? `${value} ${unit} ago` : `in ${value} ${unit}`;
}

/** Milliseconds as "1.2 s", "3 min 4 s". */
export function duration(ms) {
  if (ms === undefined || ms === null) return '—';
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

/** Bytes as "12.3 MiB". */
export function bytes(n) {
  if (n === undefined || n === null) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

/** A task, run, graph or worker state as a coloured badge. */
export function badge(state) {
  return h('span', { class: `badge state-${state}` }, state);
}

/** A run's state as its badge: a run a cancel ended says "cancelled", not a bare
 * "exception" (the API's state, kept in the badge's title). */
export function runBadge(run) {
  return run?.state === 'exception' && run.reasonResolved === 'canceled'
    ? h('span', { class: 'badge state-exception state-cancelled', title: 'exception: canceled' }, 'cancelled')
    : badge(run?.state);
}

/** A task's state as its badge, its last run's cancel said as such. */
export function statusBadge(status) {
  const last = status.runs?.[status.runs.length - 1];
  return status.state === 'exception' && last ? runBadge(last) : badge(status.state);
}

/** A group's verdict as its badge: running, blocked, waiting, failed or completed. */
export function groupVerdict(group) {
  return h('span', { class: `badge state-${group.verdict}`, 'data-verdict': group.verdict }, group.verdict);
}

/** How many tasks a group has, and how many failed: "13 failed of 1,200". */
export function groupTally(group) {
  const counts = group.taskCounts;
  const total = counts.total.toLocaleString('en');
  return h('span', { class: counts.failed ? 'error small tally' : 'muted small tally' },
    counts.failed ? `${counts.failed.toLocaleString('en')} failed of ${total}` : `${total} task${counts.total === 1 ? '' : 's'}`);
}

/** A link to a group by its name, its id beneath (or the id alone). */
export function groupLink(group) {
  const href = `/tasks/groups/${group.taskGroupId}`;
  return group.name
    ? h('span', {}, h('a', { href, class: 'group-name' }, group.name), ' ', h('span', { class: 'mono muted small' }, group.taskGroupId))
    : h('a', { href, class: 'mono' }, group.taskGroupId);
}

/** A titled section. */
export function section(title, ...children) {
  return h('section', { class: 'card' }, h('h2', {}, title), ...children);
}

/** An error as the page shows it. */
export function problem(err) {
  if (err.code === 'InsufficientScopes') {
    const expr = missingExpression(err.message);
    if (expr !== null) {
      const [said, items] = typeof expr === 'string' ? ['this scope:', [expr]]
        : expr.AnyOf ? ['one of these scopes:', expr.AnyOf]
          : ['these scopes:', expr.AllOf || []];
      return h('div', { class: 'error', role: 'alert' },
        h('p', {}, 'Not allowed: the signed-in client lacks ', said),
        h('ul', { class: 'missing-scopes' }, items.map(scopeItem)));
    }
  }
  if (err.code === 'AuthenticationFailed') {
    return h('p', { class: 'error', role: 'alert' },
      'Not signed in as you think: the server does not accept these credentials (', err.message, '). Sign out and in again.');
  }
  return h('p', { class: 'error', role: 'alert' }, err.code ? `${err.code}: ${err.message}` : String(err.message || err));
}

/** One scope of a refusal, or a nested expression said as "one of" / "all of". */
function scopeItem(expr) {
  if (typeof expr === 'string') return h('li', { class: 'mono' }, expr);
  const [said, items] = expr.AnyOf ? ['one of:', expr.AnyOf] : ['all of:', expr.AllOf || []];
  return h('li', {}, said, h('ul', { class: 'missing-scopes' }, items.map(scopeItem)));
}

/** The scope expression an InsufficientScopes message says is missing (its first fenced
 * block: a scope, or {AllOf|AnyOf: [...]}); null if it cannot tell. */
function missingExpression(message) {
  const block = /```\n([\s\S]*?)\n```/.exec(message || '');
  if (!block) return null;
  try { return JSON.parse(block[1]); } catch { return null; }
}

/** A definition list from [label, value] pairs, skipping empty values. */
export function facts(pairs) {
  return h('dl', { class: 'facts' }, pairs.filter(([, value]) => value !== undefined && value !== null && value !== '')
    .map(([label, value]) => [h('dt', {}, label), h('dd', {}, value)]));
}

/** A task's page link. */
export function taskLink(taskId, text) {
  return h('a', { href: `/tasks/${taskId}`, class: 'mono' }, text || taskId);
}

/** A worker's page link. */
export function workerHref(taskQueueId, workerGroup, workerId) {
  const [provisioner, workerType] = taskQueueId.split('/');
  return `/provisioners/${provisioner}/worker-types/${workerType}/workers/${encodeURIComponent(workerGroup)}/${encodeURIComponent(workerId)}`;
}

/** A queue's page link. */
export function queueLink(taskQueueId) {
  const [provisioner, workerType] = taskQueueId.split('/');
  return h('a', { href: `/provisioners/${provisioner}/worker-types/${workerType}`, class: 'mono' }, taskQueueId);
}

/** `n`, linked to the list of a queue's tasks in `state` now (pending or running). */
export function nowLink(taskQueueId, state, n) {
  return h('a', { href: `/tasks?state=${state}&taskQueueId=${encodeURIComponent(taskQueueId)}`, class: `now-${state}` }, `${n}`);
}

/** Keeps `params` in the page's URL, replacing its entry (a view changed is not a page to go
 * back to): each name set to its value, or removed when the value is empty. */
export function keepInUrl(params) {
  const url = new URL(location.href);
  for (const [name, value] of Object.entries(params)) {
    if (value === undefined || value === null || value === '') url.searchParams.delete(name);
    else url.searchParams.set(name, String(value));
  }
  if (url.href !== location.href) history.replaceState(history.state, '', url);
}

/** Most pages of a "more" listing a link may ask for at once. */
const MAX_PAGES = 20;

/** A listing read a page at a time behind a "more" button, the pages shown kept in the URL
 * (`?pages=N`) so that a reload or a shared link shows as many: `load(token)` reads a page,
 * shows it, and answers the next token (or none). */
export async function pagedListing(more, load) {
  const wanted = Math.min(MAX_PAGES, Math.max(1, Number(new URLSearchParams(location.search).get('pages')) || 1));
  let shown = 0;
  const next = async (token) => {
    try {
      const following = await load(token);
      shown += 1;
      keepInUrl({ pages: shown > 1 ? shown : '' });
      fill(more, following ? h('button', { class: 'more', onclick: () => next(following) }, 'more') : null);
      return following;
    } catch (err) {
      fill(more, problem(err));
      return null;
    }
  };
  let token = await next();
  while (token && shown < wanted) token = await next(token);
}

/** Runs `fn` at most once per `ms`, the last call winning. */
export function throttle(fn, ms) {
  let timer = null;
  return () => {
    if (timer) return;
    timer = setTimeout(() => { timer = null; fn(); }, ms);
  };
}
