// The session timeline: turns, their messages and parts, child threads,
// built from the session's events (the stored log, then the live tail).
//
// apply() is idempotent for every full-row event (a row event replaces what
// it is about), and deltas append to the part they belong to. So the page
// may apply a running turn's events a second time from its start (which it
// does when the live stream takes over from the paged history) and end up
// with exactly the streamed text: the part's start row resets its text and
// the deltas that follow rebuild it.
//
// A long session is shown as several Timelines, one per page of its
// history (history.js), which come and go as the reader scrolls. What one
// turn says about another (its number, whether it is a fork, which turn
// answered it, whether it is on the current branch, the session's usage)
// comes from the TurnIndex they share, which knows every turn, not only
// the ones on screen.

import {h, append, clear, fmtUsage, fmtCost, fmtTime, idCode, shortID, statusPill, pretty, addUsage, fetchBlob, fmtBytes} from './forge.js';
import {diffLines} from './diff.js';

// Tools whose arguments describe a file change, shown as a diff.
const FILE_EDIT_TOOLS = new Set(['edit_file', 'write_file']);

// TurnIndex is what the page knows of every turn of the session, in
// creation order: {id, prev, status, lastSeq, usage, resolves, steps}. It
// is fed by every event applied (turn.created and turn.done carry the
// whole turn) and, for a long session, by the turn list read in the
// background (load). Until it is complete (it holds every turn from the
// first) turn numbers are unknown (null) and whatever needs a turn it has
// not seen says less.
export class TurnIndex {
  constructor({complete = true} = {}) {
    this.list = [];
    this.byId = new Map();
    this.complete = complete;
    this.views = new Map(); // turn id -> the TurnView on screen, if any
    this.threads = new Map(); // thread id -> thread.created data
    this.resolvers = new Map(); // paused turn id -> the turn that answered it
    this.branch = null; // ids on the branch ending at the newest turn (cached)
    this.onChange = () => {};
  }

  get(id) { return this.byId.get(id) || null; }

  get length() { return this.list.length; }

  // number is the turn's position in the session, from 1; null while the
  // index is not complete.
  number(id) {
    const t = this.byId.get(id);
    return t && this.complete ? t.n : null;
  }

  // createdBefore is the id of the turn created just before id: null for
  // the first turn, undefined when the index does not know.
  createdBefore(id) {
    const t = this.byId.get(id);
    if (!t) return undefined;
    const i = t.i;
    if (i > 0) return this.list[i - 1].id;
    return this.complete ? null : undefined;
  }

  newest() { return this.list[this.list.length - 1] || null; }

  running() {
    const t = this.newest();
    return t && t.status === 'running' ? t : null;
  }

  resolverOf(id) { return this.resolvers.get(id) || null; }

  // add records a turn object (from an event or the turn list); a turn it
  // has not seen is the newest. Fields of an ended turn are not replaced by
  // an older running copy.
  add(turn, {quiet = false} = {}) {
    if (!turn || !turn.id) return null;
    let t = this.byId.get(turn.id);
    const fresh = !t;
    if (fresh) {
      t = {id: turn.id, prev: null, status: 'running', lastSeq: 0, usage: null, resolves: false, steps: {}, i: this.list.length, n: this.list.length + 1};
      this.byId.set(t.id, t);
      this.list.push(t);
      this.branch = null;
    }
    const ended = t.status !== 'running';
    if (!ended || (turn.status && turn.status !== 'running')) {
      if (turn.status) t.status = turn.status;
      if (turn.usage) t.usage = turn.usage;
    }
    if (typeof turn.last_seq === 'number') t.lastSeq = Math.max(t.lastSeq, turn.last_seq);
    if ('previous_turn_id' in turn) {
      t.prev = turn.previous_turn_id || null;
      const input = turn.input || [];
      t.resolves = !!(t.prev && input.length && input[0].type !== 'message');
      if (t.resolves && !this.resolvers.has(t.prev)) {
        this.resolvers.set(t.prev, t);
        const v = this.views.get(t.prev);
        if (v) v.resolved();
      }
    }
    if (fresh && !quiet) this.onChange('turn', t);
    return t;
  }

  // observe updates the index from one event.
  observe(ev) {
    const d = ev.data || {};
    switch (ev.type) {
      case 'turn.created':
      case 'turn.done': {
        const t = this.add(Object.assign({id: ev.turn_id}, d));
        if (t && ev.type === 'turn.done') {
          t.lastSeq = Math.max(t.lastSeq, ev.seq || 0);
          t.steps = {};
          this.onChange('status', t);
        }
        break;
      }
      case 'step.finished': {
        const t = ev.turn_id && this.byId.get(ev.turn_id);
        if (t && t.status === 'running' && d.data && d.data.usage) t.steps[d.id] = d.data.usage;
        break;
      }
      case 'thread.created':
        this.threads.set(d.thread_id, d);
        break;
      default:
        break;
    }
  }

  // load replaces what the index knows with the turn list (oldest first),
  // keeping what events said since about turns the list holds, and the
  // turns the list does not have yet (newer) after them. The index is
  // complete from then on.
  load(turns) {
    const old = this.byId;
    this.list = [];
    this.byId = new Map();
    this.resolvers = new Map();
    this.branch = null;
    const add = (t) => {
      const e = {id: t.id, prev: null, status: 'running', lastSeq: 0, usage: null, resolves: false, steps: {}, i: this.list.length, n: this.list.length + 1};
      this.byId.set(e.id, e);
      this.list.push(e);
      return e;
    };
    for (const turn of turns) {
      const known = old.get(turn.id);
      const e = add(turn);
      if (known) Object.assign(e, {status: known.status, usage: known.usage, steps: known.steps, lastSeq: known.lastSeq});
      this.add(turn, {quiet: true});
      if (known) e.lastSeq = Math.max(e.lastSeq, known.lastSeq);
    }
    for (const known of old.values()) {
      if (this.byId.has(known.id)) continue;
      const e = add(known);
      Object.assign(e, known, {i: e.i, n: e.n});
      if (e.resolves && !this.resolvers.has(e.prev)) this.resolvers.set(e.prev, e);
    }
    this.complete = true;
    this.onChange('load', null);
  }

  // onBranch says whether the turn is on the branch ending at the newest
  // turn (every new turn, forks included, becomes the session tip).
  onBranch(id) {
    if (!this.branch) {
      this.branch = new Set();
      let t = this.newest();
      while (t && !this.branch.has(t.id)) {
        this.branch.add(t.id);
        t = t.prev ? this.byId.get(t.prev) : null;
      }
    }
    return this.branch.has(id);
  }

  // usage is the total of every turn (ended turns as reported, the running
  // one by its finished steps); base is what the session said before the
  // index was complete.
  usage(base) {
    const total = {};
    if (!this.complete) {
      addUsage(total, base);
      const r = this.running();
      if (r) for (const u of Object.values(r.steps)) addUsage(total, u);
      return total;
    }
    for (const t of this.list) {
      if (t.status !== 'running') addUsage(total, t.usage);
      else for (const u of Object.values(t.steps)) addUsage(total, u);
    }
    return total;
  }

  // label names a turn for a sentence: "turn 12", or its short id while
  // numbers are unknown.
  label(id) {
    const n = this.number(id);
    return n ? 'turn ' + n : 'turn ' + shortID(id);
  }
}

export class Timeline {
  // root: the element turns are appended to. opts.mainThread: the
  // session's main thread id. opts.controls(turnView): builds the
  // interactive parts of a turn card (absent: a read-only timeline, as in
  // a replay). opts.index: the TurnIndex shared with the other pages of
  // the session, which its owner feeds with every event; without one the
  // timeline keeps its own, fed by what it applies.
  constructor(root, opts = {}) {
    this.root = root;
    this.opts = opts;
    this.index = opts.index || new TurnIndex();
    this.ownIndex = !opts.index;
    this.turns = new Map(); // turn id -> TurnView
    this.order = []; // TurnViews in creation order
    this.parts = new Map(); // part id -> PartView
    this.messages = new Map(); // message id -> MessageView
    this.threadInfo = new Map(); // thread id -> thread.created data
    this.notices = new Set(); // seqs of notice events shown
    this.lastSeq = 0;
    this.onChange = opts.onChange || (() => {});
  }

  apply(ev) {
    if (typeof ev.seq === 'number' && ev.seq > this.lastSeq) this.lastSeq = ev.seq;
    if (this.ownIndex) this.index.observe(ev);
    const d = ev.data || {};
    switch (ev.type) {
      case 'turn.created':
        this.turn(ev.turn_id || d.id).update(d, ev);
        break;
      case 'turn.done':
        this.turn(ev.turn_id || d.id).update(d, ev);
        break;
      case 'message.created':
      case 'message.updated':
        this.message(d, ev);
        break;
      case 'model.message':
      case 'tool.call':
      case 'tool.response':
      case 'step.started':
      case 'step.finished':
      case 'patch':
        this.part(d, ev);
        break;
      case 'model.message.delta': {
        const p = this.parts.get(ev.id);
        if (p) p.appendText(d.delta || '');
        break;
      }
      case 'action.required':
        this.turn(ev.turn_id).setActions(d.required_actions || []);
        break;
      case 'thread.created':
        this.threadInfo.set(d.thread_id, d);
        this.turn(ev.turn_id).thread(d.thread_id);
        break;
      case 'thread.done':
        this.turn(ev.turn_id).thread(d.thread_id).done(d);
        break;
      default:
        this.notice(ev);
    }
    this.onChange(ev, this);
  }

  turn(id) {
    let t = this.turns.get(id);
    if (!t) {
      if (!this.index.get(id)) this.index.add({id}, {quiet: true});
      t = new TurnView(this, id);
      this.turns.set(id, t);
      this.order.push(t);
      this.root.append(t.el);
    }
    return t;
  }

  // dispose forgets the timeline's turns (its page leaves the DOM).
  dispose() {
    for (const t of this.order) {
      if (this.index.views.get(t.id) === t) this.index.views.delete(t.id);
    }
  }

  // container returns where a message of thread goes in turn t, or, for a
  // message outside any turn (what a forum copies into a monologue), in
  // the block of such messages at the end of the timeline.
  container(t, threadID) {
    if (!t) return this.loose();
    if (!threadID || threadID === this.opts.mainThread) return t.body;
    return t.thread(threadID).body;
  }

  // loose returns the block of messages outside turns that ends the
  // timeline, opening a new one after a turn.
  loose() {
    const last = this.root.lastElementChild;
    if (last && last.classList.contains('loose')) return last.querySelector('.turn-body');
    const block = h('section', {class: 'loose'},
      h('header', {class: 'turn-head'}, h('strong', {text: 'Outside turns'}), ' ', h('span', {class: 'meta', text: 'messages no turn wrote (a forum’s copies)'})),
      h('div', {class: 'turn-body'}));
    this.root.append(block);
    return block.querySelector('.turn-body');
  }

  // turnOf returns the view of the event's turn, or null outside turns.
  turnOf(id) {
    return id ? this.turn(id) : null;
  }

  message(m, ev) {
    let v = this.messages.get(m.id);
    const t = this.turnOf(m.turn_id || ev.turn_id);
    if (!v) {
      v = new MessageView(m);
      this.messages.set(m.id, v);
      this.container(t, m.thread_id || ev.thread_id).append(v.el);
    }
    v.update(m);
    for (const p of m.parts || []) {
      // A message row carries its parts as they are; a part still streaming
      // here is older than what its own events and deltas built.
      const known = this.parts.get(p.id);
      if (known && p.state === 'streaming') continue;
      this.part(p, ev, m.thread_id);
    }
  }

  part(p, ev, threadID) {
    let v = this.parts.get(p.id);
    if (!v) {
      let m = this.messages.get(p.message_id);
      if (!m) {
        // A part whose message we have not seen (should not happen): give
        // it an envelope of its own so nothing is dropped.
        m = new MessageView({id: p.message_id, role: 'assistant', parts: []});
        this.messages.set(p.message_id, m);
        this.container(this.turnOf(ev.turn_id), threadID || ev.thread_id).append(m.el);
      }
      v = new PartView(this, p);
      this.parts.set(p.id, v);
      m.parts.append(v.el);
      const t = this.turnOf(ev.turn_id);
      if (t && p.type === 'tool' && p.call_id) t.calls.set(p.call_id, v);
    }
    v.update(p);
    if (p.type === 'tool' && p.state === 'pending' && ev.turn_id) {
      // The answers are rows of a later turn: say which.
      const r = this.turn(ev.turn_id).resolvedBy;
      if (r) v.out.textContent = 'Answered in ' + this.index.label(r.id);
    }
    if (ev.type === 'step.finished' && ev.turn_id) this.turn(ev.turn_id).stepFinished(p);
  }

  notice(ev) {
    if (typeof ev.seq === 'number') {
      if (this.notices.has(ev.seq)) return;
      this.notices.add(ev.seq);
    }
    const d = ev.data || {};
    let text;
    switch (ev.type) {
      case 'mcp.initialized':
        text = 'MCP server ' + (d.server || d.name || '') + ' ready' + (d.tools ? ' (' + d.tools.length + ' tools)' : '');
        break;
      case 'sandbox.created':
        text = 'Sandbox created' + (d.isolated === false ? ' (not isolated)' : '');
        break;
      case 'sandbox.stopped':
        text = 'Sandbox stopped' + (d.reason ? ': ' + d.reason : '');
        break;
      case 'session.compacted':
        text = 'Session compacted: earlier messages are summarized for the model';
        break;
      default:
        text = ev.type + ' ' + pretty(d).slice(0, 200);
    }
    const target = ev.turn_id ? this.turn(ev.turn_id).body : this.root;
    target.append(h('div', {class: 'notice', dataset: {type: ev.type}, text}));
  }

  // markBranch dims the turns that are not on the branch ending at the
  // newest turn of the session.
  markBranch() {
    for (const v of this.order) {
      v.onBranch = this.index.onBranch(v.id);
      v.el.classList.toggle('off-branch', !v.onBranch);
    }
  }

  // renumber redraws what depends on other turns (numbers, fork marks,
  // answers) once the index knows more.
  renumber() {
    for (const v of this.order) v.renumber();
    this.markBranch();
  }
}

export class TurnView {
  constructor(tl, id) {
    this.tl = tl;
    this.id = id;
    this.n = tl.index.number(id);
    this.data = {id, status: 'running'};
    this.steps = {}; // usage of finished steps, while running
    this.threads = new Map(); // thread id -> ThreadView
    this.calls = new Map(); // call id -> PartView
    this.status = statusPill('running');
    this.meta = h('span', {class: 'meta'});
    this.usageEl = h('span', {class: 'usage'});
    this.controls = h('span', {class: 'controls'});
    this.title = h('strong', {class: 'turn-title', text: this.n ? 'Turn ' + this.n : 'Turn'});
    this.head = h('header', {class: 'turn-head'},
      this.title, ' ', idCode(id), ' ', this.status, ' ', this.meta, ' ', this.usageEl, this.controls);
    this.body = h('div', {class: 'turn-body'});
    this.actions = h('div', {class: 'actions', hidden: true});
    this.end = h('div', {class: 'turn-end', hidden: true});
    this.extra = h('div', {class: 'turn-extra'});
    this.el = h('section', {class: 'turn', id: 'turn-' + id, dataset: {turn: id, n: this.n ? String(this.n) : ''}},
      this.head, this.body, this.actions, this.end, this.extra);
    this.requiredActions = [];
    tl.index.views.set(id, this);
    if (tl.opts.controls) tl.opts.controls(this);
  }

  // resolvedBy is the index's entry of the turn that answered this one's
  // required actions, or null.
  get resolvedBy() { return this.tl.index.resolverOf(this.id); }

  // label names the turn in a sentence ("turn 12").
  label() { return this.n ? 'turn ' + this.n : 'this turn'; }

  update(d) {
    this.data = Object.assign({}, this.data, d);
    const s = this.data.status || 'running';
    this.el.dataset.status = s;
    this.status.replaceWith(this.status = statusPill(s));
    this.renderMeta();
    this.renderUsage();
    if (s !== 'running') this.renderEnd();
    if (Array.isArray(this.data.required_actions) && this.data.required_actions.length && s !== 'running') {
      this.setActions(this.data.required_actions);
    }
    if (this.onUpdate) this.onUpdate(this);
  }

  // renderMeta says whether the turn forks (its previous turn is not the
  // one created before it) or starts a new root, when the index knows.
  renderMeta() {
    const idx = this.tl.index;
    clear(this.meta);
    const prev = this.data.previous_turn_id;
    const before = idx.createdBefore(this.id);
    if (prev) {
      if (before !== undefined && before !== prev) {
        const n = idx.number(prev);
        append(this.meta, h('span', {class: 'fork-of', text: 'forked from ' + (n ? 'turn ' + n : shortID(prev))}), ' ');
      }
    } else if (before) {
      append(this.meta, h('span', {class: 'fork-of', text: 'new root'}), ' ');
    }
    append(this.meta, h('time', {datetime: this.data.created_at || '', text: fmtTime(this.data.created_at)}));
    const o = this.data.overrides;
    if (o) append(this.meta, ' ', overridesBadge(o));
  }

  // renumber takes the turn's number and its relations from the index
  // again (it learnt more since the card was drawn).
  renumber() {
    const n = this.tl.index.number(this.id);
    if (n !== this.n) {
      this.n = n;
      this.title.textContent = n ? 'Turn ' + n : 'Turn';
      this.el.dataset.n = n ? String(n) : '';
    }
    this.renderMeta();
    if (this.resolvedBy) this.resolved();
    else if (this.data.status && this.data.status !== 'running') this.renderEnd();
    if (this.onUpdate) this.onUpdate(this);
  }

  // resolved is called when the index learns which turn answered this one.
  resolved() {
    const r = this.resolvedBy;
    if (!r) return;
    const label = this.tl.index.label(r.id);
    // The paused turn's calls stay pending in its own rows forever (the
    // answers are rows of the later turn): say where they were answered.
    for (const c of this.calls.values()) {
      if (c.p && c.p.state === 'pending') c.out.textContent = 'Answered in ' + label;
    }
    if (this.data.status && this.data.status !== 'running') this.renderEnd();
    if (this.shownResolution === label) return;
    this.shownResolution = label;
    if (this.onResolved) this.onResolved(r);
  }

  usage() {
    if (this.data.status && this.data.status !== 'running' && this.data.usage) return this.data.usage;
    const total = {};
    for (const u of Object.values(this.steps)) addUsage(total, u);
    return total;
  }

  stepFinished(p) {
    const u = p.data && p.data.usage;
    if (u) this.steps[p.id] = u;
    this.renderUsage();
  }

  renderUsage() {
    const u = this.usage();
    this.usageEl.textContent = u.input_tokens || u.output_tokens ? fmtUsage(u) + ' · ' + fmtCost(u.cost) : '';
  }

  renderEnd() {
    const d = this.data;
    clear(this.end);
    this.end.hidden = false;
    if (d.status === 'errored' && d.error) {
      this.end.className = 'turn-end error';
      append(this.end, h('strong', {text: 'Error ' + (d.error.code || '')}), ': ', d.error.message || '');
    } else if (d.status === 'cancelled') {
      this.end.className = 'turn-end cancelled';
      append(this.end, 'Cancelled (' + (d.cancel_reason || 'unknown') + ')', d.cancel_message ? ': ' + d.cancel_message : '');
    } else if (d.status === 'done' && (!d.required_actions || !d.required_actions.length)) {
      this.end.className = 'turn-end done';
      append(this.end, 'Done' + (d.iterations ? ' in ' + d.iterations + (d.iterations === 1 ? ' step' : ' steps') : ''),
        d.ended_at ? ' · ' + fmtTime(d.ended_at) : '');
      if (d.output && d.output.json !== undefined && d.output.json !== null) {
        // Structured output: the answer parsed against the schema.
        this.end.append(h('details', {class: 'structured-output', open: true},
          h('summary', {text: 'Structured output'}), h('pre', {class: 'json', text: pretty(d.output.json)})));
      }
    } else {
      this.end.className = 'turn-end paused';
      append(this.end, 'Paused for ' + d.required_actions.map((a) => a.type.replace('_', ' ')).join(', ') +
        (this.resolvedBy ? '; answered in ' + this.tl.index.label(this.resolvedBy.id) : ''));
    }
  }

  setActions(actions) {
    this.requiredActions = actions;
    if (this.onActions) this.onActions(actions);
  }

  // thread returns the view of a child thread in this turn: under the call
  // that delegated to it when that call is in this turn, else at the end
  // of the turn (a child resumed by a later turn).
  thread(id) {
    let v = this.threads.get(id);
    if (!v) {
      const info = this.tl.threadInfo.get(id) || this.tl.index.threads.get(id) || {thread_id: id};
      v = new ThreadView(info);
      this.threads.set(id, v);
      const call = info.call_id ? this.calls.get(info.call_id) : null;
      (call ? call.children : this.body).append(v.el);
    }
    return v;
  }
}

class ThreadView {
  constructor(info) {
    this.status = h('span', {class: 'pill', text: 'running'});
    this.result = h('div', {class: 'thread-result', hidden: true});
    this.body = h('div', {class: 'thread-body'});
    this.el = h('div', {class: 'thread', dataset: {thread: info.thread_id}},
      h('div', {class: 'thread-head'}, 'Subagent ', h('strong', {text: info.agent || '?'}), ' ', idCode(info.thread_id), ' ', this.status),
      this.body, this.result);
  }

  done(d) {
    this.status.replaceWith(this.status = statusPill(d.status || 'done'));
    if (d.error) {
      this.result.hidden = false;
      this.result.className = 'thread-result error';
      this.result.textContent = (d.error.code || 'error') + ': ' + (d.error.message || '');
    }
  }
}

class MessageView {
  constructor(m) {
    this.role = h('span', {class: 'role'});
    this.info = h('span', {class: 'msg-info'});
    this.parts = h('div', {class: 'parts'});
    this.el = h('div', {class: 'msg', dataset: {message: m.id}}, h('div', {class: 'msg-head'}, this.role, ' ', this.info), this.parts);
  }

  update(m) {
    const role = m.role || 'assistant';
    this.el.className = 'msg role-' + role.replace(/[^a-z]/g, '') + (m.summary ? ' summary' : '');
    this.role.textContent = {user: 'User', assistant: 'Assistant', tool: 'Resolutions'}[role] || role;
    const bits = [];
    if (m.author) bits.push(m.author);
    if (m.summary) bits.push('summary');
    if (m.model) bits.push(m.model);
    if (m.finish && m.finish !== 'stop' && m.finish !== 'tool_calls') bits.push('finish: ' + m.finish);
    this.info.textContent = bits.join(' · ');
  }
}

class PartView {
  constructor(tl, p) {
    this.tl = tl;
    this.type = p.type;
    this.el = h('div', {class: 'part part-' + String(p.type).replace(/[^a-z-]/g, ''), dataset: {part: p.id}});
    switch (p.type) {
      case 'text':
        this.textNode = document.createTextNode('');
        this.badge = h('span', {class: 'badge', hidden: true});
        append(this.el, h('div', {class: 'text'}, this.textNode), this.badge);
        break;
      case 'reasoning':
        this.textNode = document.createTextNode('');
        this.summary = h('summary', {text: 'Reasoning'});
        this.el.append(h('details', {class: 'reasoning'}, this.summary, h('div', {class: 'text'}, this.textNode)));
        break;
      case 'tool':
        this.head = h('div', {class: 'tool-head'});
        this.args = h('details', {class: 'args'});
        this.diff = h('div', {class: 'diff-wrap'});
        this.out = h('div', {class: 'tool-out', hidden: true});
        this.children = h('div', {class: 'children'});
        append(this.el, this.head, this.args, this.diff, this.out, this.children);
        break;
      default:
        break;
    }
  }

  appendText(s) {
    if (this.textNode) {
      this.textNode.appendData(s);
      this.el.classList.add('streaming');
      if (this.summary) this.summary.textContent = 'Reasoning (' + this.textNode.length + ' characters)';
    }
  }

  update(p) {
    this.p = p;
    this.el.dataset.state = p.state || '';
    switch (p.type) {
      case 'text':
      case 'reasoning':
        this.textNode.data = p.text || '';
        this.el.classList.toggle('streaming', p.state === 'streaming');
        if (this.badge) {
          this.badge.hidden = p.state !== 'interrupted';
          this.badge.textContent = this.badge.hidden ? '' : 'interrupted';
        }
        if (this.summary) {
          this.summary.textContent = 'Reasoning (' + (p.text || '').length + ' characters' + (p.state === 'streaming' ? ', streaming' : '') + ')';
        }
        break;
      case 'tool':
        this.renderTool(p);
        break;
      case 'step-start':
        clear(this.el).append(h('div', {class: 'step', text: 'Step ' + ((p.data && p.data.iteration) || '')}));
        break;
      case 'step-finish': {
        const d = p.data || {};
        clear(this.el).append(h('div', {class: 'step-usage'},
          'Step ' + (d.iteration || '') + ' finished' + (d.finish ? ' (' + d.finish + ')' : '') + ' · ' +
            (d.estimated ? 'estimated: ' : ''),
          fmtUsage(d.usage) + ' · ' + fmtCost(d.usage && d.usage.cost) +
            (d.snapshot ? ' · workspace ' + d.snapshot + (d.snapshot_partial ? ' (partial)' : '') : '')));
        break;
      }
      case 'agent': {
        // A mention of a subagent (direct sessions: data.name; a forum
        // copy names its agent in text).
        const name = (p.data && p.data.name) || p.text || '';
        clear(this.el).append(h('div', {class: 'agent-mention', text: '@' + name}));
        break;
      }
      case 'subtask': {
        const d = p.data || {};
        clear(this.el).append(h('div', {class: 'subtask'},
          h('span', {class: 'subtask-head', text: 'Delegated to ' + (d.agent || '?') + ' · ' + (d.status || '')}),
          h('span', {class: 'muted', text: ' thread ' + (d.thread_id || '')}),
          h('pre', {class: 'subtask-prompt', text: d.prompt || ''})));
        break;
      }
      case 'patch':
        this.renderPatch(p.data || {});
        break;
      case 'compaction': {
        const d = p.data || {};
        clear(this.el).append(h('div', {class: 'notice', text: 'Compaction requested (' + (d.reason || (d.auto ? 'automatic' : 'manual')) + ')'}));
        break;
      }
      case 'file':
        this.renderFile(p.data || {});
        break;
      default:
        clear(this.el).append(h('div', {class: 'muted', text: p.type + ' part'}), h('pre', {text: pretty(p.data || p.text || '')}));
    }
  }

  // renderFile shows an attachment: an image as a thumbnail, any file as a
  // link that downloads it. The bytes are fetched with the API key and
  // shown from a blob: URL; a deleted file says so.
  renderFile(d) {
    if (this.fileID === d.file_id) return; // drawn already
    this.fileID = d.file_id;
    const url = '/v1/files/' + encodeURIComponent(d.file_id || '') + '/content';
    const name = d.filename || d.file_id || 'file';
    const note = h('span', {class: 'muted', text: ' ' + [d.mime_type, fmtBytes(d.bytes)].filter(Boolean).join(', ')});
    const link = h('a', {href: '#', class: 'file-link', text: name});
    let blobURL = null;
    const load = async () => {
      if (!blobURL) blobURL = URL.createObjectURL(await fetchBlob(url));
      return blobURL;
    };
    const gone = (err) => {
      note.textContent = err && err.status === 404 ? ' (the file was deleted)' : ' (could not be read: ' + (err && err.message) + ')';
      this.el.classList.add('file-gone');
    };
    link.addEventListener('click', async (e) => {
      e.preventDefault();
      try {
        const a = h('a', {href: await load(), download: name});
        document.body.append(a);
        a.click();
        a.remove();
      } catch (err) {
        gone(err);
      }
    });
    clear(this.el).append(h('div', {class: 'file-head'}, h('span', {class: 'file-icon', text: '📎 '}), link, note));
    if (/^image\/(png|jpeg|gif|webp)$/.test(d.mime_type || '')) {
      const img = h('img', {class: 'thumb', alt: name});
      this.el.append(img);
      load().then((u) => { img.src = u; }, (err) => { img.remove(); gone(err); });
    }
  }

  renderTool(p) {
    clear(this.head).append(h('span', {class: 'tool-name', text: p.tool || '?'}), ' ', statusPill(p.state || 'pending'), ' ', idCode(p.call_id || ''));
    const args = p.arguments;
    clear(this.args).append(h('summary', {text: 'Arguments'}), h('pre', {class: 'json', text: pretty(args === undefined ? {} : args)}));
    this.args.open = !FILE_EDIT_TOOLS.has(p.tool);
    clear(this.diff);
    if (FILE_EDIT_TOOLS.has(p.tool) && args && typeof args === 'object') {
      const path = typeof args.path === 'string' ? args.path : '';
      if (p.tool === 'edit_file' && typeof args.old_string === 'string' && typeof args.new_string === 'string') {
        this.diff.append(renderDiff(path, args.old_string, args.new_string));
      } else if (p.tool === 'write_file' && typeof args.content === 'string') {
        this.diff.append(renderDiff(path, '', args.content));
      }
    }
    this.out.hidden = true;
    clear(this.out);
    if (p.state === 'completed' && typeof p.output === 'string') {
      this.out.hidden = false;
      this.out.className = 'tool-out';
      this.out.append(outputBlock('Result', p.output));
    } else if (p.state === 'error') {
      this.out.hidden = false;
      this.out.className = 'tool-out error';
      this.out.append(outputBlock('Error', typeof p.error === 'string' ? p.error : pretty(p.error)));
    } else if (p.state === 'pending') {
      this.out.hidden = false;
      this.out.className = 'tool-out pending';
      this.out.textContent = 'Waiting for an approval or the client’s answer';
    }
  }

  renderPatch(d) {
    const files = Array.isArray(d.files) ? d.files : [];
    const list = h('ul', {class: 'patch-files'});
    for (const f of files) {
      list.append(h('li', {class: 'file-' + String(f.status || '').replace(/[^a-z]/g, '')},
        h('span', {class: 'file-status', text: f.status || ''}), ' ', h('code', {text: f.path || ''}), ' ',
        f.binary ? h('span', {class: 'muted', text: 'binary'}) : [h('span', {class: 'add', text: '+' + (f.added || 0)}), ' ', h('span', {class: 'del', text: '−' + (f.removed || 0)})]));
    }
    clear(this.el).append(h('div', {class: 'patch'},
      h('div', {class: 'patch-head', text: 'Files changed (' + files.length + ')' + (d.partial ? ', partial' : '')}), list));
  }
}

// outputBlock shows a tool's output; long outputs start collapsed.
// overridesBadge names the per-request settings a turn ran with; the
// instructions it added are its title.
function overridesBadge(o) {
  const set = [];
  if (o.instructions) set.push('instructions');
  if (o.temperature !== undefined) set.push('temperature ' + o.temperature);
  if (o.top_p !== undefined) set.push('top_p ' + o.top_p);
  if (o.max_output_tokens !== undefined) set.push('max ' + o.max_output_tokens + ' tokens');
  if (o.tools && o.tools.length) set.push(o.tools.length === 1 ? 'tool ' + o.tools[0].name : o.tools.length + ' tools');
  if (o.output_schema) set.push('output ' + o.output_schema.name);
  const title = (o.instructions ? 'Instructions added: ' + o.instructions : '') +
    (o.tools && o.tools.length ? (o.instructions ? '\n' : '') + 'Client tools: ' + o.tools.map((t) => t.name).join(', ') : '');
  return h('span', {class: 'overrides', title: title || 'per-request settings', text: 'overrides: ' + set.join(' · ')});
}

function outputBlock(label, text) {
  const lines = text.split('\n').length;
  const det = h('details', {}, h('summary', {text: label + (lines > 1 ? ' (' + lines + ' lines)' : '')}), h('pre', {text}));
  det.open = text.length <= 2000 && lines <= 40;
  return det;
}

function renderDiff(path, before, after) {
  const table = h('div', {class: 'diff'});
  const ops = diffLines(before, after);
  for (const op of ops) {
    const sign = op.op === '+' ? '+' : op.op === '-' ? '−' : ' ';
    table.append(h('div', {class: 'diff-line ' + ({'+': 'add', '-': 'del', '=': 'same', '…': 'gap'}[op.op])},
      h('span', {class: 'sign', text: op.op === '…' ? '…' : sign}), h('span', {class: 'code', text: op.text})));
  }
  return h('div', {class: 'diff-block'}, h('div', {class: 'diff-path', text: path}), table);
}
