// The session timeline: turns, their messages and parts, child threads,
// built from the session's events (the stored log, then the live tail).
//
// apply() is idempotent for every full-row event (a row event replaces what
// it is about), and deltas append to the part they belong to. So the page
// may apply a running turn's events a second time from its start (which it
// does when the live stream takes over from the paged history) and end up
// with exactly the streamed text: the part's start row resets its text and
// the deltas that follow rebuild it.

import {h, append, clear, fmtUsage, fmtCost, fmtTime, idCode, shortID, statusPill, pretty, addUsage} from './forge.js';
import {diffLines} from './diff.js';

// Tools whose arguments describe a file change, shown as a diff.
const FILE_EDIT_TOOLS = new Set(['edit_file', 'write_file']);

export class Timeline {
  // root: the element turns are appended to. opts.mainThread: the
  // session's main thread id. opts.controls(turnView): builds the
  // interactive parts of a turn card (absent: a read-only timeline, as in
  // a replay).
  constructor(root, opts = {}) {
    this.root = root;
    this.opts = opts;
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
      t = new TurnView(this, id, this.order.length + 1);
      this.turns.set(id, t);
      this.order.push(t);
      this.root.append(t.el);
    }
    return t;
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

  // usage is the total of every turn (ended turns as reported, running
  // turns by their finished steps).
  usage() {
    const total = {};
    for (const t of this.order) addUsage(total, t.usage());
    return total;
  }

  running() {
    return this.order.find((t) => t.data.status === 'running') || null;
  }

  // markBranch dims the turns that are not on the branch ending at the
  // newest turn (every new turn, forks included, becomes the session tip).
  markBranch() {
    const on = new Set();
    let t = this.order[this.order.length - 1];
    while (t && !on.has(t.id)) {
      on.add(t.id);
      const prev = t.data.previous_turn_id;
      t = prev ? this.turns.get(prev) : null;
    }
    for (const v of this.order) {
      v.el.classList.toggle('off-branch', !on.has(v.id));
      v.onBranch = on.has(v.id);
    }
  }
}

export class TurnView {
  constructor(tl, id, n) {
    this.tl = tl;
    this.id = id;
    this.n = n;
    this.data = {id, status: 'running'};
    this.steps = {}; // usage of finished steps, while running
    this.threads = new Map(); // thread id -> ThreadView
    this.calls = new Map(); // call id -> PartView
    this.status = statusPill('running');
    this.meta = h('span', {class: 'meta'});
    this.usageEl = h('span', {class: 'usage'});
    this.controls = h('span', {class: 'controls'});
    this.head = h('header', {class: 'turn-head'},
      h('strong', {text: 'Turn ' + n}), ' ', idCode(id), ' ', this.status, ' ', this.meta, ' ', this.usageEl, this.controls);
    this.body = h('div', {class: 'turn-body'});
    this.actions = h('div', {class: 'actions', hidden: true});
    this.end = h('div', {class: 'turn-end', hidden: true});
    this.extra = h('div', {class: 'turn-extra'});
    this.el = h('section', {class: 'turn', id: 'turn-' + id, dataset: {turn: id, n: String(n)}},
      this.head, this.body, this.actions, this.end, this.extra);
    this.requiredActions = [];
    this.resolvedBy = null;
    if (tl.opts.controls) tl.opts.controls(this);
  }

  update(d) {
    this.data = Object.assign({}, this.data, d);
    const s = this.data.status || 'running';
    this.el.dataset.status = s;
    this.status.replaceWith(this.status = statusPill(s));
    clear(this.meta);
    const prev = this.data.previous_turn_id;
    if (prev) {
      const p = this.tl.turns.get(prev);
      const before = this.tl.order[this.n - 2];
      if (!before || before.id !== prev) {
        append(this.meta, h('span', {class: 'fork-of', text: 'forked from ' + (p ? 'turn ' + p.n : shortID(prev))}), ' ');
      }
    } else if (this.n > 1) {
      append(this.meta, h('span', {class: 'fork-of', text: 'new root'}), ' ');
    }
    append(this.meta, h('time', {datetime: this.data.created_at || '', text: fmtTime(this.data.created_at)}));
    this.renderUsage();
    if (s !== 'running') this.renderEnd();
    if (Array.isArray(this.data.required_actions) && this.data.required_actions.length && s !== 'running') {
      this.setActions(this.data.required_actions);
    }
    this.markResolutions();
    if (this.onUpdate) this.onUpdate(this);
  }

  // markResolutions tells the turn this one resumes that it was answered.
  markResolutions() {
    const input = this.data.input || [];
    const prev = this.data.previous_turn_id;
    if (!prev || !input.length || input[0].type === 'message') return;
    const p = this.tl.turns.get(prev);
    if (p && !p.resolvedBy) {
      p.resolvedBy = this;
      // The paused turn's calls stay pending in its own rows forever (the
      // answers are rows of this turn): say where they were answered.
      for (const c of p.calls.values()) {
        if (c.p && c.p.state === 'pending') c.out.textContent = 'Answered in turn ' + this.n;
      }
      if (p.data.status && p.data.status !== 'running') p.renderEnd();
      if (p.onResolved) p.onResolved(this);
    }
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
    } else {
      this.end.className = 'turn-end paused';
      append(this.end, 'Paused for ' + d.required_actions.map((a) => a.type.replace('_', ' ')).join(', ') +
        (this.resolvedBy ? '; answered in turn ' + this.resolvedBy.n : ''));
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
      const info = this.tl.threadInfo.get(id) || {thread_id: id};
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
          'Step ' + (d.iteration || '') + ' finished' + (d.finish ? ' (' + d.finish + ')' : '') + ' · ',
          fmtUsage(d.usage) + ' · ' + fmtCost(d.usage && d.usage.cost)));
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
      default:
        clear(this.el).append(h('div', {class: 'muted', text: p.type + ' part'}), h('pre', {text: pretty(p.data || p.text || '')}));
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
