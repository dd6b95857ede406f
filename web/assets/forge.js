// Shared by every inspector page: the API client (with the tab's API key),
// the one SSE reader, DOM construction and formatting.
//
// Rule for every page: text from the server (model output, tool arguments
// and results, titles, names) only ever reaches the DOM as text nodes
// (textContent, createTextNode). No markup is built from strings.

const KEY_STORAGE = 'forge.apiKey';

// ---- DOM

// h builds an element. attrs: class, text, on<event> handlers, dataset,
// and plain attributes (set with setAttribute, so never parsed as markup).
// Children are nodes or strings (strings become text nodes).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, ...children);
  return el;
}

export function append(el, ...children) {
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(typeof c === 'string' || typeof c === 'number' ? String(c) : c);
  }
  return el;
}

export function clear(el) {
  el.replaceChildren();
  return el;
}

// pageLink returns the inspector path of a session or forum (ids are
// encoded: they come from the server, which we do not trust blindly).
export function sessionPath(id) { return '/ui/sessions/' + encodeURIComponent(id); }
export function forumPath(id) { return '/ui/forums/' + encodeURIComponent(id); }

// pathID returns the id in /ui/<kind>/<id>.
export function pathID() {
  const parts = location.pathname.split('/');
  return decodeURIComponent(parts[3] || '');
}

// ---- formatting

const numberFormat = new Intl.NumberFormat('en-US');

export function fmtInt(n) { return numberFormat.format(n || 0); }

export function fmtCost(c) {
  if (!c) return '$0';
  if (c >= 1) return '$' + c.toFixed(2);
  if (c >= 0.01) return '$' + c.toFixed(4);
  return '$' + c.toPrecision(2);
}

// fmtUsage: "120 in · 6 out" (plus reasoning and cache figures when set).
export function fmtUsage(u) {
  if (!u) return '';
  const bits = [fmtInt(u.input_tokens) + ' in', fmtInt(u.output_tokens) + ' out'];
  if (u.reasoning_tokens) bits.push(fmtInt(u.reasoning_tokens) + ' reasoning');
  if (u.cache_read_tokens) bits.push(fmtInt(u.cache_read_tokens) + ' cached');
  return bits.join(' · ');
}

export function addUsage(total, u) {
  if (!u) return total;
  for (const k of ['input_tokens', 'output_tokens', 'reasoning_tokens', 'cache_read_tokens', 'cache_write_tokens', 'cost']) {
    total[k] = (total[k] || 0) + (u[k] || 0);
  }
  return total;
}

// One formatter for every time shown: Date.toLocaleString builds a new one
// per call, which costs more than everything else in a long timeline.
const timeFormat = new Intl.DateTimeFormat(undefined, {dateStyle: 'short', timeStyle: 'medium'});

export function fmtTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  if (isNaN(d)) return String(iso);
  return timeFormat.format(d);
}

// shortID keeps the prefix and the last characters: ses_…7F3K2A.
export function shortID(id) {
  if (typeof id !== 'string') return '';
  const i = id.indexOf('_');
  if (i < 0 || id.length - i <= 9) return id;
  return id.slice(0, i + 1) + '…' + id.slice(-6);
}

export function idCode(id) {
  return h('code', {class: 'id', title: id, text: shortID(id)});
}

export function statusPill(status) {
  return h('span', {class: 'pill status-' + String(status || 'unknown').replace(/[^a-z_-]/gi, ''), text: status || '—'});
}

// pretty renders a JSON value for a <pre>: objects indented, strings as is.
export function pretty(v) {
  if (v === undefined) return '';
  if (typeof v === 'string') return v;
  try { return JSON.stringify(v, null, 2); } catch { return String(v); }
}

// ---- banners

let bannerEl = null;

// banner shows a message at the top of the page (kind: error|info), or
// hides it when text is empty.
export function banner(text, kind = 'error') {
  if (!bannerEl) {
    bannerEl = h('div', {id: 'banner', role: 'alert'});
    document.body.prepend(bannerEl);
  }
  bannerEl.className = 'banner ' + kind;
  bannerEl.hidden = !text;
  bannerEl.textContent = text || '';
}

// Content blocked by the policy means something tried to inject markup or
// load foreign code: say so loudly rather than fail silently.
document.addEventListener('securitypolicyviolation', (e) => {
  console.error('content security policy blocked', e.violatedDirective, e.blockedURI);
  banner('The page blocked content that violates its security policy (' + e.violatedDirective + ').');
});

// ---- API key

export function apiKey() {
  try { return sessionStorage.getItem(KEY_STORAGE) || ''; } catch { return ''; }
}

export function setAPIKey(k) {
  try {
    if (k) sessionStorage.setItem(KEY_STORAGE, k);
    else sessionStorage.removeItem(KEY_STORAGE);
  } catch { /* storage disabled: the key lives as long as this page */ }
  memoryKey = k;
}

let memoryKey = '';
function currentKey() { return apiKey() || memoryKey; }

let keyPrompt = null;

// askKey shows the key form (once, however many requests wait for it) and
// resolves when the user has entered a key.
function askKey(wrong) {
  if (keyPrompt) return keyPrompt;
  keyPrompt = new Promise((resolve) => {
    const input = h('input', {type: 'password', id: 'api-key', autocomplete: 'off', placeholder: 'API key', required: true});
    const form = h('form', {id: 'key-form', class: 'key-form'},
      h('p', {text: wrong ? 'That API key was refused. Enter a valid key for this server.'
        : 'This Forge server needs an API key.'}),
      input, ' ', h('button', {type: 'submit', text: 'Use key'}),
      h('p', {class: 'muted', text: 'The key stays in this browser tab (sessionStorage) and is sent only to this server.'}));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const k = input.value.trim();
      if (!k) return;
      setAPIKey(k);
      form.remove();
      keyPrompt = null;
      renderKeyControl();
      resolve();
    });
    document.body.prepend(form);
    input.focus();
  });
  return keyPrompt;
}

// renderKeyControl shows "forget key" in the header when a key is kept.
export function renderKeyControl() {
  const slot = document.getElementById('key-control');
  if (!slot) return;
  clear(slot);
  if (currentKey()) {
    slot.append(h('button', {type: 'button', class: 'link', text: 'Forget API key', onclick: () => {
      setAPIKey('');
      location.reload();
    }}));
  }
}

function authHeaders(headers) {
  const k = currentKey();
  if (k) headers.Authorization = 'Bearer ' + k;
  return headers;
}

// ---- API

export class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// api calls the Forge API: JSON in, JSON out. A 401 asks the user for a
// key and retries (a refused request did nothing, so a retry is safe).
export async function api(path, {method = 'GET', body, signal} = {}) {
  let refused = false;
  for (;;) {
    const headers = authHeaders({Accept: 'application/json'});
    const init = {method, headers, signal, cache: 'no-store', credentials: 'omit'};
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(path, init);
    if (resp.status === 401) {
      await askKey(refused || !!currentKey());
      refused = true;
      continue;
    }
    const text = await resp.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
    if (!resp.ok) {
      const e = (data && data.error) || {};
      throw new APIError(resp.status, e.code || 'http_' + resp.status, e.message || resp.statusText || 'request failed');
    }
    return data;
  }
}

// fetchBlob reads bytes of the API (a file's content) with the key, as
// api does; a missing file is an APIError with status 404.
export async function fetchBlob(path, {signal} = {}) {
  let refused = false;
  for (;;) {
    const resp = await fetch(path, {headers: authHeaders({Accept: '*/*'}), signal, cache: 'no-store', credentials: 'omit'});
    if (resp.status === 401) {
      await askKey(refused || !!currentKey());
      refused = true;
      continue;
    }
    if (!resp.ok) throw new APIError(resp.status, 'http_' + resp.status, resp.statusText || 'request failed');
    return resp.blob();
  }
}

// fmtBytes writes a size for people.
export function fmtBytes(n) {
  if (!(n >= 0)) return '';
  if (n < 1024) return n + ' B';
  if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KiB';
  return (n / 1024 / 1024).toFixed(1) + ' MiB';
}

// pages yields the items of a list endpoint page by page (each page an
// array), following next_cursor. sizes: the limit of the first page, then
// of every later one (a small first page paints sooner).
export async function* pages(path, {first = 100, rest = 1000, cursor = '', signal} = {}) {
  let limit = first;
  for (;;) {
    const sep = path.includes('?') ? '&' : '?';
    const url = path + sep + 'limit=' + limit + (cursor ? '&cursor=' + encodeURIComponent(cursor) : '');
    const page = await api(url, {signal});
    yield page.data || [];
    if (!page.next_cursor) return;
    cursor = page.next_cursor;
    limit = rest;
  }
}

// ---- SSE

// SSEParser turns a text stream into Server-Sent Events as the HTML
// standard parses them: lines end with CRLF, LF or CR; "data" lines join
// with LF; a line starting with ":" is a comment; "id" sets the last event
// id (unless it holds NUL); an event is dispatched at a blank line when it
// has data. onEvent receives {type, data, id}.
export class SSEParser {
  constructor(onEvent, onComment) {
    this.onEvent = onEvent;
    this.onComment = onComment || (() => {});
    this.buf = '';
    this.data = [];
    this.type = '';
    this.lastId = null;
    this.idSet = false; // whether the frame being read had an id line
  }

  feed(chunk) {
    this.buf += chunk;
    const re = /\r\n|\r|\n/g;
    let start = 0;
    let m;
    while ((m = re.exec(this.buf)) !== null) {
      // A CR at the very end may be the first half of a CRLF.
      if (m[0] === '\r' && m.index === this.buf.length - 1) break;
      this.line(this.buf.slice(start, m.index));
      start = m.index + m[0].length;
    }
    this.buf = this.buf.slice(start);
  }

  // end is called when the stream ends: an unterminated event is dropped,
  // as the standard says.
  end() {
    this.buf = '';
    this.data = [];
    this.type = '';
    this.idSet = false;
  }

  line(line) {
    if (line === '') {
      this.dispatch();
      return;
    }
    if (line[0] === ':') {
      this.onComment(line.slice(1).trim());
      return;
    }
    let field = line;
    let value = '';
    const i = line.indexOf(':');
    if (i >= 0) {
      field = line.slice(0, i);
      value = line.slice(i + 1);
      if (value[0] === ' ') value = value.slice(1);
    }
    switch (field) {
      case 'data': this.data.push(value); break;
      case 'event': this.type = value; break;
      case 'id':
        if (!value.includes('\0')) {
          this.lastId = value;
          this.idSet = true;
        }
        break;
      default: break; // retry and unknown fields: ignored
    }
  }

  dispatch() {
    const data = this.data;
    const type = this.type || 'message';
    const id = this.idSet ? this.lastId : null;
    this.data = [];
    this.type = '';
    this.idSet = false;
    if (data.length === 0) return;
    this.onEvent({type, data: data.join('\n'), id});
  }
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, {once: true});
});

// EventStream follows an SSE endpoint of the API with fetch() (so it can
// send the Authorization header, which EventSource cannot) and reconnects
// after any interruption with Last-Event-ID, so the events it delivers
// have no gap and no duplicate. Frames without an id (ephemeral events
// such as forum.typing) are delivered but move no cursor.
//
// opts: after (the seq to start after; absent: from the start), onEvent
// (called with {type, id, data} where data is the parsed JSON), onState
// (called with 'connecting' | 'open' | 'reconnecting' | 'failed' and a
// detail), onPing.
export class EventStream {
  constructor(url, opts = {}) {
    this.url = url;
    this.opts = opts;
    this.lastId = opts.after === undefined || opts.after === null ? null : String(opts.after);
    this.reconnects = 0;
    this.controller = new AbortController();
    this.closed = false;
  }

  start() {
    this.run();
    return this;
  }

  close() {
    this.closed = true;
    this.controller.abort();
  }

  state(s, detail) {
    if (this.opts.onState) this.opts.onState(s, detail || '', this);
  }

  async run() {
    let backoff = 250;
    let refused = false;
    let first = true;
    while (!this.closed) {
      if (!first) {
        this.reconnects++;
        this.state('reconnecting', 'retrying in ' + backoff + ' ms');
        await sleep(backoff, this.controller.signal);
        backoff = Math.min(backoff * 2, 8000);
        if (this.closed) return;
      }
      first = false;
      this.state('connecting');
      const headers = authHeaders({Accept: 'text/event-stream'});
      if (this.lastId !== null) headers['Last-Event-ID'] = this.lastId;
      let resp;
      try {
        resp = await fetch(this.url, {headers, signal: this.controller.signal, cache: 'no-store', credentials: 'omit'});
      } catch (e) {
        if (this.closed) return;
        continue;
      }
      if (resp.status === 401) {
        await askKey(refused || !!currentKey());
        refused = true;
        first = true;
        continue;
      }
      if (!resp.ok) {
        let msg = resp.statusText;
        try { msg = (await resp.json()).error.message; } catch { /* keep the status text */ }
        if (resp.status >= 400 && resp.status < 500 && resp.status !== 408 && resp.status !== 429) {
          this.state('failed', msg);
          return;
        }
        continue;
      }
      refused = false;
      this.state('open');
      let fatal = false;
      const parser = new SSEParser((frame) => {
        if (frame.id !== null) this.lastId = frame.id;
        let data = null;
        try { data = JSON.parse(frame.data); } catch { data = frame.data; }
        if (frame.type === 'error') {
          // The server ends the stream after this frame. A missing session
          // will not come back; anything else may.
          const e = (data && data.error) || {};
          if (e.code === 'not_found' || e.code === 'invalid_request') fatal = true;
          this.state(fatal ? 'failed' : 'reconnecting', e.message || 'stream error');
          return;
        }
        backoff = 250; // events flow: the next interruption retries fast
        this.opts.onEvent({type: frame.type, id: frame.id, data});
      }, () => { if (this.opts.onPing) this.opts.onPing(); });
      try {
        const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
        for (;;) {
          const {value, done} = await reader.read();
          if (done) break;
          parser.feed(value);
        }
      } catch (e) {
        if (this.closed) return;
      }
      parser.end();
      if (fatal) return;
    }
  }
}

// nextFrame resolves after the browser had a chance to paint.
export function nextFrame() {
  return new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
}

// liveIndicator keeps a header pill in sync with an EventStream's state.
export function liveIndicator(el) {
  return (state, detail, stream) => {
    el.className = 'pill live-' + state;
    const n = stream && stream.reconnects ? ' (reconnected ' + stream.reconnects + '×)' : '';
    el.textContent = {connecting: 'connecting…', open: 'live', reconnecting: 'reconnecting…', failed: 'disconnected'}[state] + n;
    el.title = detail || '';
    if (stream) document.body.dataset.reconnects = String(stream.reconnects);
    document.body.dataset.stream = state;
    if (state === 'failed') banner('The live stream stopped: ' + detail);
  };
}

// ---- list pages (webhooks, schedules)

// tableRow is a table row of cells: nodes as they are, anything else as
// text.
export function tableRow(...cells) {
  return h('tr', {}, ...cells.map((c) => (c instanceof Node ? h('td', {}, c) : h('td', {text: c ?? ''}))));
}

export function tableHead(...names) { return h('tr', {}, ...names.map((n) => h('th', {text: n}))); }

// timeCell shows a time, or a dash for none (absent, or Go's zero time).
export function timeCell(iso) {
  return iso && !iso.startsWith('0001-') ? h('time', {datetime: iso, text: fmtTime(iso)}) : h('span', {class: 'muted', text: '—'});
}

// showEmpty shows text in #empty when a list had no rows.
export function showEmpty(n, text) {
  const empty = document.getElementById('empty');
  empty.hidden = n > 0;
  empty.textContent = text;
}

// runListPage renders /ui/<kind> (list) or /ui/<kind>/{id} (detail),
// marking the body's state for tests and failures with a banner.
export async function runListPage(list, detail) {
  renderKeyControl();
  document.body.dataset.state = 'loading';
  const id = pathID();
  try {
    await (id ? detail(id) : list());
    document.body.dataset.state = 'ready';
  } catch (err) {
    banner('Loading failed: ' + err.message);
    document.body.dataset.state = 'failed';
  }
}
