// A run's log: the end first (a window of its last bytes, so a 50 MB log shows at once),
// earlier windows on demand, ANSI colours, line numbers with `#L<n>` links once the view
// reaches the log's start, and search; followed while the run runs.

import { fill, h } from './view.js';

/** Bytes read per window. */
const WINDOW = 256 * 1024;
/** Most lines kept on the page while following; older ones make room. */
const KEEP_LINES = 50000;
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

/** Gives `line` its number and its `#L<n>` link. */
function number(line, n) {
  line.id = `L${n}`;
  line.prepend(h('a', { class: 'line-no', href: `#L${n}` }, String(n)));
}

/** The log of one run: read once when the run is over, followed while it runs. */
export class LogView {
  constructor(el) {
    this.el = el;
    this.key = null;
    this.abort = null;
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
    this.ended = undefined;
    this.abort?.abort();
    this.url = `/logs/v1/${taskId}/${run.runId}`;
    this.lines = h('div', { class: 'log', id: 'log', role: 'log' });
    this.earlierBar = h('div', { class: 'log-earlier', id: 'log-earlier' });
    this.state = h('span', { class: live ? 'live' : 'muted', id: 'log-state' }, live ? 'following' : 'finished');
    this.hits = h('span', { class: 'muted', id: 'log-hits' });
    this.search = h('input', { id: 'log-search', type: 'search', placeholder: 'search the log', 'aria-label': 'search the log' });
    this.search.addEventListener('keydown', (event) => { if (event.key === 'Enter') this.find(event.shiftKey ? -1 : 1); });
    this.search.addEventListener('input', () => { this.hit = 0; this.find(0); });
    fill(this.el,
      h('p', { class: 'log-head' }, `Run ${run.runId} · `, this.state, ' · ', h('a', { href: this.url }, 'raw log'), ' ', this.search, ' ', this.hits),
      this.earlierBar, this.lines);
    this.read(live);
  }

  /** Reads the last window (and, following, what is appended until the run ends). */
  async read(follow) {
    const controller = new AbortController();
    this.abort = controller;
    this.following = follow;
    this.start = 0;
    this.numbered = false;
    this.dropped = false;
    this.count = 0;
    let text = '';
    try {
      const res = await fetch(`${this.url}?tail=${WINDOW}${follow ? '&follow=true' : ''}`, { signal: controller.signal });
      if (!res.ok) {
        fill(this.lines, res.status === 404 ? 'No log for this run.' : `HTTP ${res.status}`);
        this.end('');
        return;
      }
      this.start = Number(res.headers.get('x-log-offset') || 0);
      this.numbered = this.start === 0;
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let pending = '';
      let first = this.start > 0;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        pending += value;
        if (first) {
          // Started mid-line: the part is the earlier window's to show.
          const cut = pending.indexOf('\n');
          if (cut < 0) continue;
          this.start += encoder.encode(pending.slice(0, cut + 1)).length;
          pending = pending.slice(cut + 1);
          first = false;
        }
        const cut = pending.lastIndexOf('\n');
        if (cut < 0) continue;
        const complete = pending.slice(0, cut);
        text += complete + '\n';
        pending = pending.slice(cut + 1);
        this.append(complete.split('\n'));
      }
      if (pending) {
        text += pending;
        this.append([pending]);
      }
      this.drawEarlier();
      this.jumpToHash();
      this.end(text);
    } catch (err) {
      if (err.name !== 'AbortError') fill(this.state, `stopped: ${err.message}`);
    } finally {
      this.following = false;
    }
  }

  end(text) {
    if (this.following) fill(this.state, 'finished');
    this.state.className = 'muted';
    this.ended = text;
    this.onEnd?.(text);
  }

  /** One element per line; numbered (and linkable) once the view starts at the log's start. */
  lineElements(texts, firstNumber) {
    return texts.map((text, n) => {
      const line = h('div', { class: 'line' }, h('span', { class: 'line-text' }, ansiLine(text)));
      if (this.numbered) number(line, firstNumber + n);
      return line;
    });
  }

  append(texts) {
    const atEnd = this.lines.scrollTop + this.lines.clientHeight >= this.lines.scrollHeight - 20;
    this.lines.append(...this.lineElements(texts, this.count + 1));
    this.count += texts.length;
    while (this.lines.childElementCount > KEEP_LINES) {
      this.lines.firstElementChild.remove();
      this.dropped = true;
    }
    if (atEnd) this.lines.scrollTop = this.lines.scrollHeight;
    if (this.search.value) this.find(0);
  }

  /** The control reading the window before the first line shown, while there is one. */
  drawEarlier() {
    const more = this.start > 0 && !this.dropped;
    fill(this.earlierBar, more
      ? h('button', { id: 'log-earlier-button', onclick: () => this.earlier() },
        `Earlier lines (${Math.round(this.start / 1024)} KiB before these)`)
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
    const scrolled = this.lines.scrollHeight - this.lines.scrollTop;
    this.start = start;
    this.lines.prepend(...this.lineElements(texts, 1));
    this.count += texts.length;
    if (start === 0) {
      // The whole log is here now: every line gets its number, in place.
      this.numbered = true;
      [...this.lines.children].forEach((line, n) => number(line, n + 1));
    }
    this.lines.scrollTop = this.lines.scrollHeight - scrolled;
    this.drawEarlier();
  }

  /** `#L<n>`: that line, marked and in view. */
  jumpToHash() {
    const line = /^#L\d+$/.test(location.hash) ? document.getElementById(location.hash.slice(1)) : null;
    if (!line) return;
    line.classList.add('target');
    this.lines.scrollTop = line.offsetTop - this.lines.offsetTop - this.lines.clientHeight / 3;
  }

  /** Marks the lines holding the search text; `step` moves to the next (1) or previous (-1). */
  find(step) {
    const wanted = this.search.value.toLowerCase();
    for (const old of this.lines.querySelectorAll('.hit')) old.classList.remove('hit');
    if (!wanted) {
      fill(this.hits);
      return;
    }
    const found = [...this.lines.children].filter((line) => line.lastChild.textContent.toLowerCase().includes(wanted));
    found.forEach((line) => line.classList.add('hit'));
    if (!found.length) {
      fill(this.hits, 'no match');
      return;
    }
    // Staying (0) keeps the current match while lines arrive; a step wraps around.
    const at = Math.min(Math.max(this.hit ?? 0, 0), found.length - 1);
    this.hit = step === 0 ? at : (at + step + found.length) % found.length;
    const current = found[this.hit];
    current.classList.add('current');
    this.lines.querySelectorAll('.current').forEach((line) => { if (line !== current) line.classList.remove('current'); });
    this.lines.scrollTop = current.offsetTop - this.lines.offsetTop - this.lines.clientHeight / 3;
    fill(this.hits, `${this.hit + 1} of ${found.length}`);
  }
}
