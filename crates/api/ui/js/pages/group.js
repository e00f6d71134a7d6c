// `/tasks/groups/<taskGroupId>`: every task of a group with its state, filtered by state and
// by name, a page of rows at a time (a group may hold tens of thousands), under a header with
// its progress and durations, kept current from the event stream without reloading (only the
// rows that changed are drawn again). The filters and page are kept in the URL
// (`?state=&q=&page=`), so a link or a reload shows the same view.

import { TASK_EXCHANGES, allPages, call, credentials, get, listen, queue } from '../api.js';
import { duration, fill, h, keepInUrl, problem, queueLink, relative, statusBadge, taskLink, throttle, when } from '../view.js';

const PAGE_ROWS = 100;
const STATES = ['unscheduled', 'pending', 'running', 'completed', 'failed', 'exception'];

export async function groupPage(main, groupId) {
  const tasks = new Map(); // taskId -> {name, status}
  let order = null; // tasks by name, until one arrives or is renamed
  let open = false; // any task unresolved
  const asked = new URLSearchParams(location.search);
  const view = {
    state: asked.get('state') || '',
    text: (asked.get('q') || '').toLowerCase(),
    page: Math.max(0, (Number(asked.get('page')) || 1) - 1),
  };
  const counts = h('div', { class: 'chips', id: 'counts' });
  const progress = h('div', { class: 'progress', id: 'progress', role: 'img' });
  const times = h('p', { class: 'muted', id: 'durations' });
  const drawn = new Map(); // taskId -> {key, el}: the rows on show, redrawn only when changed
  const table = h('tbody', { id: 'tasks' });
  const pager = h('div', { class: 'pager' });
  const loading = h('span', { class: 'muted', id: 'loading' }, 'loading…');
  const filter = h('input', { type: 'search', placeholder: 'filter by name or taskId', id: 'filter', 'aria-label': 'filter', value: asked.get('q') || '' });
  let typing = null;
  filter.addEventListener('input', () => {
    clearTimeout(typing);
    typing = setTimeout(() => { view.text = filter.value.toLowerCase(); view.page = 0; draw(); }, 120);
  });
  const group = await get(queue(`/task-group/${groupId}`));
  // A graph's tasks form the group of the graph's id.
  const graphLink = h('span');
  get(`/api/scheduler/v1/task-graph/${groupId}/info`)
    .then(() => fill(graphLink, ' · ', h('a', { href: `/task-graphs/${groupId}` }, 'graph view')))
    .catch(() => {});
  fill(main,
    h('h1', {}, 'Task group ', h('span', { class: 'mono' }, groupId)),
    h('p', { class: 'muted' }, `scheduler ${group.schedulerId}`, group.sealed ? ' · sealed ' : '', group.sealed ? when(group.sealed) : '',
      ' · expires ', when(group.expires), graphLink, ' · ', loading),
    groupActions(groupId, tasks),
    progress, times,
    counts, h('div', { class: 'toolbar' }, filter),
    h('div', { class: 'scroll' }, h('table', { class: 'list' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Task'), h('th', {}, 'State'), h('th', { class: 'wide' }, 'Queue'),
        h('th', { class: 'num' }, 'Runs'), h('th', { class: 'wide' }, 'Last change'))),
      table)),
    pager);

  const matches = ({ name, status }) => (!view.state || status.state === view.state)
    && (!view.text || name.toLowerCase().includes(view.text) || status.taskId.toLowerCase().includes(view.text));

  const draw = () => {
    const byState = Object.fromEntries(STATES.map((s) => [s, 0]));
    for (const { status } of tasks.values()) byState[status.state] = (byState[status.state] || 0) + 1;
    fill(counts, h('button', { class: `chip ${view.state ? '' : 'on'}`, onclick: () => { view.state = ''; view.page = 0; draw(); } }, `all ${tasks.size}`),
      STATES.filter((s) => byState[s]).map((s) => h('button', {
        class: `chip state-${s} ${view.state === s ? 'on' : ''}`, 'data-state': s,
        onclick: () => { view.state = view.state === s ? '' : s; view.page = 0; draw(); },
      }, `${s} ${byState[s]}`)));
    // Sorted once per change of membership or names, not per keystroke or state change.
    order ||= [...tasks.values()].sort(byName);
    const shown = order.filter(matches);
    const pages = Math.max(1, Math.ceil(shown.length / PAGE_ROWS));
    view.page = Math.min(view.page, pages - 1);
    remember();
    open = drawProgress(progress, byState, tasks.size);
    drawDurations(times, tasks, open);
    drawRows(table, drawn, shown.slice(view.page * PAGE_ROWS, (view.page + 1) * PAGE_ROWS));
    fill(pager, pages > 1 ? [
      h('button', { disabled: view.page === 0, onclick: () => { view.page--; draw(); } }, '‹ previous'),
      ` page ${view.page + 1} of ${pages} (${shown.length} tasks) `,
      h('button', { disabled: view.page >= pages - 1, onclick: () => { view.page++; draw(); } }, 'next ›'),
    ] : h('span', { class: 'muted' }, `${shown.length} tasks`));
  };
  const redraw = throttle(draw, 200);
  // The view in the URL, so a link or a reload shows the same.
  function remember() {
    keepInUrl({ state: view.state, q: view.text, page: view.page > 0 ? view.page + 1 : '' });
  }

  // Listen first, then list: nothing that happens in between is missed.
  const pendingNames = new Set();
  await listen(TASK_EXCHANGES.map((exchange) => ({ exchange, routingKeyPattern: `primary.*.*.*.*.*.*.*.${groupId}.#` })),
    (message) => {
      const status = message.payload.status;
      if (!status) return;
      const known = tasks.get(status.taskId);
      if (known) known.status = status;
      else {
        tasks.set(status.taskId, { name: status.taskId, status });
        order = null;
      }
      if (!known && !pendingNames.has(status.taskId)) {
        pendingNames.add(status.taskId);
        get(queue(`/task/${status.taskId}`)).then((task) => {
          tasks.get(status.taskId).name = task.metadata.name;
          order = null;
          redraw();
        }).catch(() => {});
      }
      redraw();
    }, () => location.reload());
  await allPages(queue(`/task-group/${groupId}/list`), 'tasks', (page) => {
    for (const { task, status } of page) {
      const known = tasks.get(status.taskId);
      // An event may have brought a newer status while the listing was read.
      const newer = known && runsOf(known.status) > runsOf(status) ? known.status : status;
      if (known) {
        known.name = task.metadata.name;
        known.status = newer;
      } else {
        tasks.set(status.taskId, { name: task.metadata.name, status: newer });
      }
    }
    order = null;
    fill(loading, `${tasks.size} tasks loaded…`);
    redraw();
  }, { limit: 1000 });
  fill(loading, 'live');
  loading.classList.add('live');
  draw();
  // Under way, the durations move on between events.
  const tick = setInterval(() => { if (open && document.visibilityState === 'visible') drawDurations(times, tasks, true); }, 1000);
  addEventListener('pagehide', () => clearInterval(tick));
}

const byName = (a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : a.status.taskId < b.status.taskId ? -1 : 1);

const runsOf = (status) => status.runs.length * 10 + STATES.indexOf(status.state);

/** The group's progress as a bar by state with "N of M resolved", and "blocked" when nothing
 * runs or waits to but tasks wait on dependencies that did not complete; answers whether the
 * group is under way (some task unresolved, and not blocked). */
function drawProgress(bar, byState, total) {
  const count = (s) => byState[s] || 0;
  const resolved = count('completed') + count('failed') + count('exception');
  const blocked = !count('pending') && !count('running') && count('unscheduled') > 0 && count('failed') + count('exception') > 0;
  const share = (n) => `${total ? (100 * n) / total : 0}%`;
  bar.setAttribute('aria-label', `${resolved} of ${total} resolved`);
  // Widths set through the CSSOM: the page's policy forbids style attributes.
  const part = (s) => { const el = h('span', { class: `state-${s}`, title: `${s} ${byState[s]}` }); el.style.width = share(byState[s]); return el; };
  fill(bar, h('div', { class: 'bar' }, ['completed', 'failed', 'exception', 'running', 'pending'].filter((s) => byState[s]).map(part)),
    h('span', { class: 'progress-text' }, `${resolved} of ${total} resolved`, total ? ` (${Math.floor((100 * resolved) / total)}%)` : ''),
    blocked ? h('span', { class: 'warning', id: 'group-blocked' },
      ` · blocked: ${count('unscheduled')} ${count('unscheduled') === 1 ? 'task waits' : 'tasks wait'} on dependencies that did not complete`) : null);
  return resolved < total && !blocked;
}

/** The group's durations: since its first run started, until its last ended (or now, while
 * `open`), the time its runs took in all, and its longest run. The line is rebuilt only when
 * its first run or longest task changes; otherwise only its figures are rewritten, so its
 * link stays the element it was while the line ticks. */
function drawDurations(times, tasks, open) {
  const now = Date.now();
  let first = Infinity;
  let last = 0;
  let busy = 0;
  let longest = null;
  for (const { name, status } of tasks.values()) {
    for (const run of status.runs) {
      if (!run.started) continue;
      const started = Date.parse(run.started);
      const ended = run.resolved ? Date.parse(run.resolved) : now;
      first = Math.min(first, started);
      if (run.resolved) last = Math.max(last, ended);
      busy += ended - started;
      if (!longest || ended - started > longest.took) longest = { took: ended - started, name, taskId: status.taskId };
    }
  }
  if (first === Infinity) {
    delete times.dataset.shape;
    return fill(times, 'No task has started yet.');
  }
  const shape = `${first}\u0000${longest.taskId}\u0000${longest.name}`;
  if (times.dataset.shape !== shape) {
    times.dataset.shape = shape;
    fill(times, 'Started ', when(new Date(first).toISOString()), ' · ', h('span', { class: 'group-span' }), ' · ',
      h('span', { class: 'group-busy' }), ' of run time in all · longest ', taskLink(longest.taskId, longest.name),
      ' (', h('span', { class: 'group-longest' }), ')');
  }
  const set = (selector, text) => {
    const el = times.querySelector(selector);
    if (el.textContent !== text) el.textContent = text;
  };
  set('time', relative(new Date(first)));
  set('.group-span', open ? `under way for ${duration(now - first)}` : `took ${duration(last - first)}`);
  set('.group-busy', duration(busy));
  set('.group-longest', duration(longest.took));
}

/** Shows `entries` in `body`, keeping the element of each row whose task has not changed
 * (a click in the table never lands on a row replaced under it). */
function drawRows(body, drawn, entries) {
  const els = entries.map((entry) => {
    const { status } = entry;
    const key = `${entry.name}\u0000${status.state}\u0000${status.runs.length}\u0000${lastChange(status)}`;
    const known = drawn.get(status.taskId);
    return known && known.key === key ? known : { key, el: row(entry), taskId: status.taskId };
  });
  const same = body.children.length === els.length
    && els.every(({ el, taskId }, i) => body.children[i] === el || body.children[i].dataset.task === taskId);
  if (same) {
    els.forEach(({ el }, i) => { if (body.children[i] !== el) body.children[i].replaceWith(el); });
  } else {
    body.replaceChildren(...els.map(({ el }) => el));
  }
  drawn.clear();
  for (const entry of els) drawn.set(entry.taskId, entry);
}

function lastChange(status) {
  const last = status.runs[status.runs.length - 1];
  return last ? last.resolved || last.started || last.scheduled : null;
}

function row({ name, status }) {
  return h('tr', { 'data-task': status.taskId, 'data-state': status.state },
    h('td', {}, h('a', { href: `/tasks/${status.taskId}` }, name), h('div', { class: 'mono muted small' }, status.taskId)),
    h('td', {}, statusBadge(status)),
    h('td', { class: 'wide' }, queueLink(status.taskQueueId)),
    h('td', { class: 'num' }, status.runs.length),
    h('td', { class: 'wide' }, when(lastChange(status))));
}

/** Seal, cancel (sealing first, as the queue asks) and rerun the failed: each asked first,
 * its result said; for the signed-in only. */
function groupActions(groupId, tasks) {
  const signedIn = Boolean(credentials());
  const message = h('span', { class: 'action-result', id: 'group-action-result', role: 'status' });
  const act = (label, question, work) => async () => {
    if (!window.confirm(question)) return;
    fill(message, `${label}…`);
    try {
      fill(message, `${label}: ${await work()}`);
    } catch (err) {
      fill(message, problem(err));
    }
  };
  const seal = () => call('POST', queue(`/task-group/${groupId}/seal`));
  const hint = signedIn ? null : 'sign in to act on this group';
  return h('div', { class: 'actions', id: 'group-actions' },
    h('button', { id: 'seal-group', disabled: !signedIn, title: hint,
      onclick: act('Seal', `Seal group ${groupId}? No task can join it afterwards.`, async () => { await seal(); return 'sealed'; }) }, 'Seal'),
    h('button', { id: 'cancel-group', disabled: !signedIn, title: hint,
      onclick: act('Cancel group', `Seal group ${groupId} and cancel every unresolved task of it?`, async () => {
        await seal();
        const answer = await call('POST', queue(`/task-group/${groupId}/cancel`));
        return `${answer.cancelledCount} cancelled`;
      }) }, 'Cancel group'),
    h('button', { id: 'rerun-failed', disabled: !signedIn, title: hint,
      onclick: act('Rerun failed', `Rerun every failed task of group ${groupId}?`, async () => {
        // Failed, or ended in an exception other than a cancel (a cancel was meant).
        const failed = [...tasks.values()].map(({ status }) => status).filter((status) => status.state === 'failed'
          || (status.state === 'exception' && status.runs[status.runs.length - 1]?.reasonResolved !== 'canceled'));
        for (const status of failed) await call('POST', queue(`/task/${status.taskId}/rerun`));
        return `${failed.length} rerun`;
      }) }, 'Rerun failed'),
    signedIn ? null : h('span', { class: 'muted' }, ' Sign in to seal, cancel or rerun.'),
    message);
}
