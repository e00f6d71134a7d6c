// The page router: draws the page the URL names into <main>, and the sign-in in the header.

import { call, credentials, setCredentials } from './api.js';
import { fill, h, problem } from './view.js';
import { groupList, overview } from './pages/overview.js';
import { buildsPage } from './pages/builds.js';
import { createPage } from './pages/create.js';
import { groupPage } from './pages/group.js';
import { graphPage } from './pages/graph.js';
import { hookPage, hooksPage } from './pages/hooks.js';
import { indexPage } from './pages/index.js';
import { secretsPage } from './pages/secrets.js';
import { taskPage } from './pages/task.js';
import { taskList } from './pages/tasks.js';
import { fleetPage, queuePage, queuesPage, workerPage } from './pages/workers.js';

// Each page: its path, what draws it, and the tab's title (a page may refine it).
const ROUTES = [
  [/^\/$/, () => overview, () => 'Overview'],
  [/^\/tasks\/?$/, () => taskList, () => 'Tasks'],
  [/^\/tasks\/groups\/?$/, () => groupList, () => 'Task groups'],
  [/^\/tasks\/create\/?$/, () => createPage, () => 'Create a task'],
  [/^\/tasks\/index(?:\/([^/]+))?\/?$/, (m) => (main) => indexPage(main, m[1] || ''), (m) => (m[1] ? `Index ${m[1]}` : 'Index')],
  [/^\/tasks\/groups\/([^/]+)\/?$/, (m) => (main) => groupPage(main, m[1]), (m) => `Group ${m[1]}`],
  [/^\/tasks\/([^/]+)(?:\/runs\/(\d+))?\/?$/, (m) => (main) => taskPage(main, m[1], m[2]), (m) => `Task ${m[1]}`],
  // Taskcluster's log URL: the task's page at that run (its log shown there).
  [/^\/tasks\/([^/]+)\/runs\/(\d+)\/logs\/.+$/, (m) => (main) => taskPage(main, m[1], m[2]), (m) => `Task ${m[1]}`],
  [/^\/task-graphs\/([^/]+)\/?$/, (m) => (main) => graphPage(main, m[1]), (m) => `Graph ${m[1]}`],
  [/^\/provisioners\/?$/, () => (main) => queuesPage(main), () => 'Task queues'],
  [/^\/provisioners\/([^/]+)\/?$/, (m) => (main) => queuesPage(main, m[1]), (m) => `Provisioner ${m[1]}`],
  [/^\/provisioners\/([^/]+)\/worker-types\/([^/]+)\/?$/, (m) => (main) => queuePage(main, `${m[1]}/${m[2]}`), (m) => `Queue ${m[1]}/${m[2]}`],
  [/^\/provisioners\/([^/]+)\/worker-types\/([^/]+)\/workers\/([^/]+)\/([^/]+)\/?$/,
    (m) => (main) => workerPage(main, `${m[1]}/${m[2]}`, decodeURIComponent(m[3]), decodeURIComponent(m[4])),
    (m) => `Worker ${decodeURIComponent(m[4])}`],
  [/^\/workers\/?$/, () => fleetPage, () => 'Workers'],
  [/^\/hooks\/?$/, () => hooksPage, () => 'Hooks'],
  [/^\/hooks\/([^/]+)\/(.+?)\/?$/, (m) => (main) => hookPage(main, decodeURIComponent(m[1]), decodeURIComponent(m[2])),
    (m) => `Hook ${decodeURIComponent(m[1])}/${decodeURIComponent(m[2])}`],
  [/^\/secrets\/?$/, () => secretsPage, () => 'Secrets'],
  [/^\/builds\/?$/, () => buildsPage, () => 'Builds'],
];

/** Draws the header's sign-in: a form when anonymous, the client and a sign-out otherwise. */
function drawWho() {
  const who = document.getElementById('who');
  const creds = credentials();
  if (creds) {
    fill(who, h('span', { class: 'signed-in', title: 'requests from every tab of this browser session are signed as this client' }, creds.clientId), ' ',
      h('button', { class: 'link', id: 'sign-out', onclick: () => { setCredentials(null); location.reload(); } }, 'Sign out'));
    return;
  }
  const form = h('form', { id: 'sign-in', class: 'sign-in', hidden: true },
    h('input', { name: 'clientId', placeholder: 'clientId', autocomplete: 'username', required: true }),
    h('input', { name: 'accessToken', type: 'password', placeholder: 'accessToken', autocomplete: 'current-password', required: true }),
    h('button', { type: 'submit' }, 'Sign in'),
    h('span', { class: 'error', id: 'sign-in-error' }));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const creds = { clientId: form.clientId.value.trim(), accessToken: form.accessToken.value.trim() };
    try {
      // Proves the credentials before they are kept.
      await call('GET', '/api/auth/v1/scopes/current', undefined, creds);
      setCredentials(creds);
      location.reload();
    } catch (err) {
      const said = err.status === 401 || err.code === 'AuthenticationFailed'
        ? 'Not signed in: the server does not accept this clientId and accessToken.'
        : `Not signed in: ${err.code ? `${err.code}: ${err.message}` : String(err)}`;
      fill(document.getElementById('sign-in-error'), said);
    }
  });
  fill(who, h('button', { class: 'link', id: 'show-sign-in', onclick: () => { form.hidden = !form.hidden; form.clientId.focus(); } }, 'Sign in'), form);
}

async function route() {
  const main = document.getElementById('app');
  const path = location.pathname;
  try {
    const found = ROUTES.find(([pattern]) => pattern.test(path));
    if (!found) {
      document.title = 'Not found · Shoal';
      fill(main, h('p', { class: 'error' }, `No page at ${path}.`));
    } else {
      const match = path.match(found[0]);
      document.title = `${found[2](match)} · Shoal`;
      await found[1](match)(main);
    }
  } catch (err) {
    fill(main, problem(err));
  } finally {
    // Drawn, and listening where the page is live (tests wait for this).
    main.dataset.ready = 'true';
  }
}

drawWho();
route();
