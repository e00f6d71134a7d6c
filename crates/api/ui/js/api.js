// The API as the pages call it: JSON in and out, Taskcluster's error bodies as exceptions,
// requests signed with the credentials signed in for this browser session: kept in local
// storage with a mark that a session cookie holds, so every tab has them until sign-out,
// and none once the browser is closed (the cookie gone, the mark no longer matches).

import { hawkHeader } from './hawk.js';

const KEY = 'shoal.credentials';
const COOKIE = 'shoal_session';

/** This browser session's mark, from its session cookie. */
function sessionMark() {
  const found = document.cookie.split('; ').find((pair) => pair.startsWith(`${COOKIE}=`));
  return found ? found.slice(COOKIE.length + 1) : null;
}

/** The signed-in credentials, or null. */
export function credentials() {
  try {
    const kept = JSON.parse(localStorage.getItem(KEY));
    if (kept?.session && kept.session === sessionMark()) return kept.credentials;
    // Signed in during a browser session that has ended.
    if (kept) localStorage.removeItem(KEY);
    return JSON.parse(sessionStorage.getItem(KEY));
  } catch {
    return null;
  }
}

/** Keeps `creds` for every tab of this browser session (null signs out everywhere). */
export function setCredentials(creds) {
  sessionStorage.removeItem(KEY);
  if (creds) {
    const session = [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, '0')).join('');
    document.cookie = `${COOKIE}=${session}; path=/; SameSite=Strict`;
    localStorage.setItem(KEY, JSON.stringify({ session, credentials: creds }));
  } else {
    localStorage.removeItem(KEY);
    document.cookie = `${COOKIE}=; path=/; max-age=0; SameSite=Strict`;
  }
}

// Signed in or out in another tab: this one follows.
window.addEventListener('storage', (event) => { if (event.key === KEY) location.reload(); });

/** An error the API answered with. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Calls the API; answers the parsed JSON body. */
export async function call(method, path, body, creds = credentials()) {
  const headers = { accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (creds) headers.authorization = hawkHeader(creds, method, path);
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  if (!res.ok) throw new ApiError(res.status, json?.code || `HTTP ${res.status}`, json?.message || text);
  return json;
}

/** GET `path`. */
export const get = (path) => call('GET', path);

/** `path` with its query parameters (those not empty; an array repeats its parameter). */
export function withQuery(path, params) {
  const pairs = Object.entries(params).flatMap(([k, v]) => (Array.isArray(v) ? v.map((one) => [k, one]) : [[k, v]]));
  const query = new URLSearchParams(pairs.filter(([, v]) => v !== undefined && v !== null && v !== ''));
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}

/** Every page of a listing: calls `onPage(items)` per page, following continuation tokens. */
export async function allPages(path, key, onPage, params = {}) {
  let token;
  do {
    const page = await get(withQuery(path, { ...params, continuationToken: token }));
    onPage(page[key] || []);
    token = page.continuationToken;
  } while (token);
}

/** Queue API paths. */
export const queue = (path) => `/api/queue/v1${path}`;

/**
 * `status` with Shoal's facts from the task's result merged in: `createdBy`, `currentSlice`,
 * `dedupedFrom`, and each run's `stats`, `workerDimensions`, `workerVersion`, `slice`,
 * `dedupedFrom` (Taskcluster's status has no place for them).
 */
export function withResult(status, result) {
  const facts = new Map((result?.runs || []).map((run) => [run.runId, run]));
  const { runs: _, taskId: __, ...task } = result || {};
  return { ...status, ...task, runs: status.runs.map((run) => ({ ...run, ...facts.get(run.runId) })) };
}

/** The task's status with its result merged in (see `withResult`). */
export async function fullStatus(taskId, status) {
  const [current, result] = await Promise.all([
    status ? Promise.resolve({ status }) : get(queue(`/task/${taskId}/status`)),
    get(queue(`/task/${taskId}/result`)),
  ]);
  return withResult(current.status, result);
}

/**
 * Opens the event stream with `bindings`; `onMessage(message)` per event. Answers once the
 * server says the bindings are in place (so a listing read after it misses nothing), with a
 * function that closes the stream.
 */
export function listen(bindings, onMessage, onResync) {
  const url = withQuery('/api/events/v1/connect/', { bindings: JSON.stringify({ bindings }) });
  const source = new EventSource(url);
  source.addEventListener('message', (event) => onMessage(JSON.parse(event.data)));
  // The server ends the stream when this listener fell behind; the browser then reconnects.
  // Either way something may have been missed: fetch afresh.
  let opened = false;
  source.addEventListener('error', () => { if (opened && onResync) onResync(); });
  addEventListener('pagehide', () => source.close());
  return new Promise((resolve) => {
    source.addEventListener('ready', () => {
      opened = true;
      resolve(() => source.close());
    });
    // Without the stream the page still works; it just is not live.
    setTimeout(() => resolve(() => source.close()), 5000);
  });
}

/** The task exchanges whose messages carry a task's status. */
export const TASK_EXCHANGES = ['task-defined', 'task-pending', 'task-running', 'task-completed', 'task-failed', 'task-exception']
  .map((name) => `exchange/taskcluster-queue/v1/${name}`);
