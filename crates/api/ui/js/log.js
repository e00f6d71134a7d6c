// A run's log: the end first (a window of its last bytes, so a 50 MB log shows at once),
// every line numbered from the first screen with a link tied to its run
// (`/tasks/<id>/runs/<n>#L<n>`, ranges `#L10-L20`), a linked line read by its number
// wherever it is, earlier and later windows on demand, ANSI colours, a search of the whole
// log on the server (its term kept in the URL), and following while the run runs.

import { fill, h } from './view.js';

/** Bytes read per window. */
const WINDOW = 256 * 1024;
/** Lines shown before a linked line, when its window is read. */
const BEFORE_TARGET = 100;
/** Most lines kept on the page while following; older ones make room. */
const KEEP_LINES = 50000;
/** Most search results listed. */
const MAX_RESULTS = 1000;
const encoder = new TextEncoder();

/** The elements of one line of output, its ANSI SGR colours as classes, other escapes dropped. */
export function ansiLine(text) {
  const parts = [];
  let classes = [];
  let at = 0;
  const push = (piece) => { if (piece) parts.push(classes.length ? h('span', { class: classes.join(' ') }, piece) : piece); };
  for (const m of text.matchAll(/\x1b\[([0-9;]*)([A-Za-z])/g)) {
    push(text.slice(at, m.index));
    at = m.index + m[0].length;
    if (m[2] !== 'm') continue;
    for (const code of (m[1] || '0').split(';').map(Number)) {
      if (code === 0) classes = [];
      else if (code === 1) classes.push('ansi-bold');
      else if (code === 22) classes = classes.filter((c) => c !== 'ansi-bold');
      else if (code === 39) classes = classes.filter((c) => !c.startsWith('ansi-fg'));
      else if (code === 49) classes = classes.filter((c) => !c.startsWith('ansi-bg'));
      else if ((code >= 30 && code <= 37) || (code >= 90 && code <= 97)) {
        classes = classes.filter((c) => !c.startsWith('ansi-fg')).concat(`ansi-fg${code}`);
      } else if ((code >= 40 && code <= 47) || (code >= 100 && code <= 107)) {
        classes = classes.filter((c) => !c.startsWith('ansi-bg')).concat(`ansi-bg${code}`);
      }
    }
  }
  push(text.slice(at).replace(/\x1b/g, ''));
  return parts;
}

/** `#L<a>` or `#L<a>-L<b>`: the lines a hash names, or null. */
export function linkedLines(hash) {
  const m = /^#L(\d+)(?:-L(\d+))?$/.exec(hash);
  if (!m) return null;
  const a = Number(m[1]);
  const b = m[2] ? Number(m[2]) : a;
  return [Math.min(a, b), Math.max(a, b)];
}

/** A window's lines: a full window ({@link WINDOW} bytes) up to its last newline (the rest
 * is the next window's), else all of it; with the bytes taken and whether it was full. */
async function wholeLines(res) {
  const data = new Uint8Array(await res.arrayBuffer());
  const full = data.length >= WINDOW;
  const bytes = full ? data.lastIndexOf(10) + 1 || data.length : data.length;
  const text = new TextDecoder().decode(data.subarray(0, bytes));
  return { lines: text ? text.replace(/\n$/, '').split('\n') : [], bytes, full };
}

/** The log of one run: read once when the run is over, followed while it runs. */
export class LogView {
  constructor(el) {
    this.el = el;
    this.key = null;
    this.abort = null;
    window.addEventListener('hashchange', () => this.jumpToHash());
  }

  show(taskId, run) {
    if (!run) {
      fill(this.el, h('p', { class: 'muted' }, 'No run yet, so no log.'));
      this.key = null;
      return;
    }
    if (run.state === 'pending' || !run.started) {
      // Not started (yet, or ever): nothing was logged, and nothing finished either.
      const said = run.state === 'pending' ? 'waiting to start' : 'never started, so no log';
      fill(this.el, h('p', {}, `Run ${run.runId} · `, h('span', { class: 'muted', id: 'log-state' }, said)));
      this.key = null;
      return;
    }
    const live = run.state === 'running';
    const key = `${taskId}/${run.runId}/${live}`;
    // Already showing it (a following read ends by itself when the run does).
    if (key === this.key || (this.key === `${taskId}/${run.runId}/true` && this.following)) return;
    this.key = key;
    this.abort?.abort();
    this.url = `/logs/v1/${taskId}/${run.runId}`;
    this.page = `/tasks/${taskId}/runs/${run.runId}`;
    this.lines = h('div', { class: 'log', id: 'log', role: 'log' });
    this.earlierBar = h('div', { class: 'log-earlier', id: 'log-earlier' });
    this.laterBar = h('div', { class: 'log-later', id: 'log-later' });
    this.state = h('span', { class: live ? 'live' : 'muted', id: 'log-state' }, live ? 'following' : 'finished');
    this.hits = h('span', { class: 'muted', id: 'log-hits' });
    this.results = h('ol', { class: 'log-results plain', id: 'log-results' });
    const term = new URLSearchParams(location.search).get('search') || '';
    this.search = h('input', { id: 'log-search', type: 'search', placeholder: 'search the whole log', 'aria-label': 'search the whole log', value: term });
    this.search.addEventListener('keydown', (event) => {
      if (event.key !== 'Enter') return;
      if (this.searched === this.search.value && this.found?.length) this.step(event.shiftKey ? -1 : 1);
      else this.find(true);
    });
    fill(this.el,
      h('p', { class: 'log-head' }, `Run ${run.runId} · `, this.state, ' · ', h('a', { href: this.url }, 'raw log'), ' ', this.search, ' ',
        h('button', { id: 'log-previous', class: 'small', title: 'previous match', onclick: () => this.step(-1) }, '↑'),
        h('button', { id: 'log-next', class: 'small', title: 'next match', onclick: () => this.step(1) }, '↓'), ' ', this.hits),
      this.results, this.earlierBar, this.lines, this.laterBar);
    const wanted = linkedLines(location.hash);
    if (wanted && !live) this.readAround(wanted[0]);
    else this.read(live);
    if (term) this.find(false);
  }

  /** Reads the last window (and, following, what is appended until the run ends). */
  async read(follow) {
    const controller = new AbortController();
    this.abort = controller;
    this.following = follow;
    this.reset();
    try {
      const res = await fetch(`${this.url}?tail=${WINDOW}${follow ? '&follow=true' : ''}`, { signal: controller.signal });
      if (!res.ok) {
        fill(this.lines, res.status === 404 ? 'No log for this run.' : `HTTP ${res.status}`);
        this.end();
        return;
      }
      this.startWindow(res);
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let pending = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        pending += value;
        const cut = pending.lastIndexOf('\n');
        if (cut < 0) continue;
        const complete = pending.slice(0, cut);
        pending = pending.slice(cut + 1);
        this.append(complete.split('\n'));
      }
      if (pending) {
        this.append([pending]);
      }
      this.endOffset = null;
      this.drawBars();
      // Nothing logged: said in words rather than shown as an empty box.
      if (!this.count) fill(this.laterBar, h('p', { class: 'muted', id: 'log-empty' }, 'The log is empty: this run wrote nothing to it.'));
      this.jumpToHash();
      this.end();
    } catch (err) {
      if (err.name !== 'AbortError') fill(this.state, `stopped: ${err.message}`);
    } finally {
      this.following = false;
    }
  }

  reset() {
    this.start = 0;
    this.first = 1;
    this.count = 0;
    this.dropped = false;
    this.endOffset = null;
    fill(this.lines);
  }

  /** Where a window's answer starts, and the number of its first line. */
  startWindow(res) {
    this.start = Number(res.headers.get('x-log-offset') || 0);
    this.first = Number(res.headers.get('x-log-line') || 1);
  }

  /** Reads the window holding line `n` (some lines before it first), replacing the view. */
  async readAround(n) {
    this.abort?.abort();
    this.following = false;
    this.reset();
    const from = Math.max(1, n - BEFORE_TARGET);
    const res = await fetch(`${this.url}?line=${from}&limit=${WINDOW}`);
    if (!res.ok) {
      fill(this.lines, res.status === 404 ? 'No log for this run.' : `HTTP ${res.status}`);
      this.end();
      return;
    }
    this.startWindow(res);
    const { lines, bytes, full } = await wholeLines(res);
    this.endOffset = full ? this.start + bytes : null;
    this.append(lines);
    this.drawBars();
    this.jumpToHash();
    this.state.className = 'muted';
    fill(this.state, `lines ${this.first}–${this.first + this.count - 1}`);
  }

  /** The read is over: a followed log says it finished. */
  end() {
    if (this.following) fill(this.state, 'finished');
    this.state.className = 'muted';
  }

  /** One element per line, numbered from `firstNumber`, each number a link tied to the run. */
  lineElements(texts, firstNumber) {
    return texts.map((text, i) => {
      const n = firstNumber + i;
      return h('div', { class: 'line', id: `L${n}`, 'data-line': n },
        h('a', { class: 'line-no', href: `${this.page}${location.search}#L${n}` }, String(n)),
        h('span', { class: 'line-text' }, ansiLine(text)));
    });
  }

  append(texts) {
    const atEnd = window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 40;
    this.lines.append(...this.lineElements(texts, this.first + this.count));
    this.count += texts.length;
    while (this.lines.childElementCount > KEEP_LINES) {
      this.lines.firstElementChild.remove();
      this.first += 1;
      this.count -= 1;
      this.dropped = true;
    }
    if (atEnd && this.following) window.scrollTo(0, document.documentElement.scrollHeight);
    this.markHits();
  }

  /** The controls reading the windows before and after those shown, while there are some. */
  drawBars() {
    fill(this.earlierBar, this.start > 0 && !this.dropped
      ? h('button', { id: 'log-earlier-button', onclick: () => this.earlier() },
        `Earlier lines (${Math.round(this.start / 1024)} KiB before line ${this.first})`)
      : null);
    fill(this.laterBar, this.endOffset !== null
      ? h('button', { id: 'log-later-button', onclick: () => this.later() }, 'Later lines')
      : null);
  }

  async earlier() {
    const from = Math.max(0, this.start - WINDOW);
    const res = await fetch(`${this.url}?offset=${from}&limit=${this.start - from}`);
    if (!res.ok) {
      fill(this.earlierBar, `HTTP ${res.status}`);
      return;
    }
    let text = await res.text();
    let start = from;
    if (from > 0) {
      const cut = text.indexOf('\n');
      start += encoder.encode(text.slice(0, cut + 1)).length;
      text = text.slice(cut + 1);
    }
    const texts = text.replace(/\n$/, '').split('\n');
    const kept = this.lines.firstElementChild;
    const above = kept ? kept.getBoundingClientRect().top : 0;
    this.start = start;
    this.first -= texts.length;
    this.count += texts.length;
    this.lines.prepend(...this.lineElements(texts, this.first));
    // The lines read stay where they were on the screen.
    if (kept) window.scrollBy(0, kept.getBoundingClientRect().top - above);
    this.markHits();
    this.drawBars();
  }

  async later() {
    const res = await fetch(`${this.url}?offset=${this.endOffset}&limit=${WINDOW}`);
    if (!res.ok) {
      fill(this.laterBar, `HTTP ${res.status}`);
      return;
    }
    const { lines, bytes, full } = await wholeLines(res);
    this.append(lines);
    this.endOffset = full && bytes ? this.endOffset + bytes : null;
    this.drawBars();
  }

  /** `#L<n>` or `#L<a>-L<b>`: those lines, marked and in view, read first when not shown. */
  jumpToHash() {
    const wanted = linkedLines(location.hash);
    for (const old of this.lines.querySelectorAll('.target')) old.classList.remove('target');
    if (!wanted) return;
    const [a, b] = wanted;
    const first = document.getElementById(`L${a}`);
    if (!first) {
      if (this.count && !this.following && !this.jumping) {
        this.jumping = true;
        this.readAround(a).finally(() => { this.jumping = false; });
      }
      return;
    }
    for (let n = a; n <= b; n += 1) document.getElementById(`L${n}`)?.classList.add('target');
    first.scrollIntoView({ block: 'center' });
  }

  /** Searches the whole log on the server (the term goes in the page's URL); `jump`: then
   * shows the first match. */
  async find(jump) {
    const wanted = this.search.value;
    const url = new URL(location.href);
    if (wanted) url.searchParams.set('search', wanted);
    else url.searchParams.delete('search');
    history.replaceState(null, '', url);
    this.searched = wanted;
    this.found = [];
    this.at = -1;
    fill(this.results);
    if (!wanted) {
      fill(this.hits);
      this.markHits();
      return;
    }
    fill(this.hits, 'searching…');
    const res = await fetch(`${this.url}/search?q=${encodeURIComponent(wanted)}`);
    if (!res.ok) {
      fill(this.hits, `search failed: HTTP ${res.status}`);
      return;
    }
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let pending = '';
    let summary = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (done || this.searched !== wanted) break;
      pending += value;
      const parts = pending.split('\n');
      pending = parts.pop();
      for (const part of parts.filter(Boolean)) {
        const found = JSON.parse(part);
        if (found.done) {
          summary = found;
          continue;
        }
        this.found.push(found.line);
        if (this.found.length <= MAX_RESULTS) {
          this.results.append(h('li', {}, h('a', { href: `${this.page}${location.search}#L${found.line}`, class: 'line-no' }, `L${found.line}`), ' ',
            h('span', { class: 'log-result-text' }, ansiLine(found.text))));
        }
      }
      this.sayHits(summary);
    }
    if (this.searched !== wanted) return;
    this.sayHits(summary);
    this.markHits();
    if (jump && this.found.length) this.step(1);
  }

  sayHits(summary) {
    const n = this.found.length;
    const where = this.at >= 0 ? `${this.at + 1} of ` : '';
    if (!summary) fill(this.hits, `${n} so far…`);
    else if (!n) fill(this.hits, `no match in the whole log (${summary.lines} lines)`);
    else fill(this.hits, `${where}${n}${summary.truncated ? '+' : ''} matching lines in the whole log`);
  }

  /** Moves to the next (1) or previous (-1) matching line, wrapping around (the search's
   * list holds at most its first 1,000). */
  step(direction) {
    if (!this.found?.length) return;
    this.at = (this.at + direction + this.found.length) % this.found.length;
    const n = this.found[this.at];
    if (location.hash === `#L${n}`) this.jumpToHash();
    else location.hash = `#L${n}`;
    this.sayHits({ lines: 0, truncated: this.found.length > MAX_RESULTS });
  }

  /** Marks the lines shown that the search found. */
  markHits() {
    for (const old of this.lines.querySelectorAll('.hit')) old.classList.remove('hit');
    for (const n of this.found || []) document.getElementById(`L${n}`)?.classList.add('hit');
  }
}
