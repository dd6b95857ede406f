// /ui/sessions/{sid}: one session's timeline, from its stored events and
// then live from its event stream. From the page: send a message, cancel,
// approve or deny calls, answer client tools, fork from any turn, replay a
// finished turn.
//
// A session may hold thousands of turns, so the page starts from the end:
// it asks where the tip turn begins in the event log, reads the log from a
// little before that, starting at the first turn that begins there, shows
// it and follows the stream; the turn list, read in the background, then
// numbers the turns and cuts the older history into pages that are read
// and drawn as the reader scrolls up (history.js).

import {
  api, pages, EventStream, h, append, clear, banner, pathID, fmtUsage, fmtCost, fmtTime, idCode, statusPill,
  liveIndicator, renderKeyControl, forumPath, pretty,
} from './forge.js';
import {Timeline, TurnIndex} from './timeline.js';
import {History, partition} from './history.js';

const sid = pathID();
const $ = (id) => document.getElementById(id);
const sessionURL = '/v1/sessions/' + encodeURIComponent(sid);
const eventsURL = sessionURL + '/events';
const turnsURL = sessionURL + '/turns';
const turnURL = (id) => turnsURL + '/' + encodeURIComponent(id);

// The latest page holds the turns that begin at most LATEST_SPAN seqs
// before the tip turn (a few dozen short turns, a couple of long ones).
const LATEST_SPAN = 300;

let ses = null;
let index = null;
let hist = null;
let loading = true;
let pendingFrame = false;
let newTurns = 0; // turns that began while the reader was not at the bottom

// follow keeps the view at the bottom while the reader is there. Only a
// move up away from the bottom ends it: content growing below (the stream)
// or changing size above (pages coming and going, which scroll anchoring
// compensates) does not.
//
// A move up is the reader's only when the document kept its height since
// the last scroll: when pages above the viewport leave the DOM, scroll
// anchoring moves scrollY up by their height, which is layout, not intent.
let follow = true;
let lastY = 0;
let lastHeight = 0;
window.addEventListener('scroll', () => {
  const height = document.documentElement.scrollHeight;
  if (atBottom()) follow = true;
  else if (window.scrollY < lastY && height === lastHeight) follow = false;
  lastY = window.scrollY;
  lastHeight = height;
  if (follow) newTurns = 0;
  renderJump();
}, {passive: true});

// A wheel or key moving up is the reader's whatever the layout does.
function leaveBottom() {
  if (!follow || atTop()) return;
  follow = false;
  renderJump();
}
window.addEventListener('wheel', (e) => { if (e.deltaY < 0) leaveBottom(); }, {passive: true});
window.addEventListener('keydown', (e) => {
  if (['ArrowUp', 'PageUp', 'Home'].includes(e.key) && !e.target.closest('textarea, input')) leaveBottom();
});

function atTop() {
  return window.scrollY <= 0;
}

function atBottom() {
  return window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 80;
}

function scrollToBottom() {
  window.scrollTo(0, document.documentElement.scrollHeight);
  lastY = window.scrollY;
  lastHeight = document.documentElement.scrollHeight;
}

// pageResized is called when a page of the history got its real height.
function pageResized() {
  if (follow && !loading) scrollToBottom();
  refresh();
}

// Whatever changes the timeline's size while the reader follows (a turn
// laid out at its real size when it comes on screen, streamed text, a page
// mounted), the bottom stays in view; the observer runs after layout and
// before paint, so nothing jumps.
new ResizeObserver(() => {
  if (follow && !loading) scrollToBottom();
}).observe(document.getElementById('timeline'));

// refresh updates the summary, the composer and the scroll position once
// per frame however many events arrived.
function refresh() {
  if (pendingFrame) return;
  pendingFrame = true;
  requestAnimationFrame(() => {
    pendingFrame = false;
    renderSummary();
    renderComposer();
    if (follow && !loading) scrollToBottom();
    renderJump();
  });
}

// renderJump offers a way back to the newest turn to a reader scrolled up.
function renderJump() {
  const b = $('jump');
  b.hidden = follow || loading;
  b.textContent = 'Jump to latest' + (newTurns ? ' · ' + newTurns + (newTurns === 1 ? ' new turn' : ' new turns') : '');
}

function jumpToLatest() {
  follow = true;
  newTurns = 0;
  hist.showLatest();
  scrollToBottom();
  renderJump();
}

function renderSummary() {
  const u = index.usage(ses.usage);
  const tip = index.newest();
  clear($('summary')).append(
    h('dl', {},
      h('dt', {text: 'Agent'}), h('dd', {text: ses.agent || '—'}),
      h('dt', {text: 'Kind'}), h('dd', {text: ses.kind || 'direct'}),
      h('dt', {text: 'Id'}), h('dd', {}, h('code', {text: ses.id})),
      h('dt', {text: 'Created'}), h('dd', {text: fmtTime(ses.created_at)}),
      h('dt', {text: 'Turns'}), h('dd', {id: 'turn-count', text: index.complete ? String(index.length) : '…'}),
      h('dt', {text: 'Tip'}), h('dd', {}, tip ? [idCode(tip.id), ' ', statusPill(tip.status)] : '—'),
      h('dt', {text: 'Usage'}), h('dd', {id: 'total-usage', text: fmtUsage(u) || '—'}),
      h('dt', {text: 'Cost'}), h('dd', {id: 'total-cost', text: fmtCost(u.cost)})));
}

function renderComposer() {
  const running = index.running();
  $('cancel').hidden = !running;
  // While a turn runs, a message waits in the session's queue (if_busy:
  // enqueue) and runs when the turns before it end.
  $('send').textContent = running ? 'Queue' : 'Send';
  const n = running && index.number(running.id);
  $('composer-note').textContent = running ? (n ? 'Turn ' + n : 'A turn') + ' is running: a message sent now is queued.' : '';
}

// ---- the queue: turns waiting to run, in order, each cancellable

let queueLoading = false;
let queueAgain = false;

async function loadQueue() {
  if (queueLoading) {
    queueAgain = true;
    return;
  }
  queueLoading = true;
  try {
    do {
      queueAgain = false;
      const page = await api(turnsURL + '?status=queued&limit=100');
      renderQueue(page.data || []);
    } while (queueAgain);
  } catch (err) {
    banner('Loading the queue failed: ' + err.message);
  } finally {
    queueLoading = false;
  }
}

function renderQueue(turns) {
  $('queue').hidden = turns.length === 0;
  $('queue-count').textContent = turns.length ? '(' + turns.length + ')' : '';
  clear($('queue-list')).append(...turns.map((t) => {
    const first = (t.input || []).find((i) => i.type === 'message');
    const text = first ? first.text : (t.input || []).map((i) => i.type).join(', ');
    const cancel = h('button', {type: 'button', class: 'small cancel-queued', text: 'Cancel', onclick: async () => {
      cancel.disabled = true;
      try {
        await api(sessionURL + '/cancel', {method: 'POST', body: {turn_id: t.id, reason: 'cancelled from the inspector'}});
      } catch (err) {
        banner('Cancel failed: ' + err.message);
      }
      loadQueue();
    }});
    return h('li', {dataset: {turn: t.id}}, h('span', {class: 'queued-text', text: text || '—'}), ' ',
      h('span', {class: 'muted', text: fmtTime(t.created_at)}), ' ', cancel);
  }));
}

async function postTurn(body) {
  return api(sessionURL + '/turns', {method: 'POST', body: Object.assign({background: true}, body)});
}

function sendForm(form, onSend) {
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const ta = form.querySelector('textarea');
    const out = form.querySelector('.form-error');
    const text = ta.value;
    if (!text.trim()) return;
    const buttons = form.querySelectorAll('button');
    buttons.forEach((b) => { b.disabled = true; });
    out.textContent = '';
    try {
      await onSend(text);
      ta.value = '';
    } catch (err) {
      out.textContent = err.message;
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
      refresh();
    }
  });
}

async function cancelRunning(button) {
  button.disabled = true;
  try {
    await api(sessionURL + '/cancel', {method: 'POST', body: {reason: 'cancelled from the inspector'}});
  } catch (err) {
    banner('Cancel failed: ' + err.message);
  } finally {
    button.disabled = false;
  }
}

// ---- per-turn controls

function turnControls(t) {
  const cancel = h('button', {type: 'button', class: 'small cancel', text: 'Cancel', onclick: (e) => cancelRunning(e.target)});
  const fork = h('button', {type: 'button', class: 'small fork', text: 'Fork', title: 'Send a new message that continues from this turn'});
  const replay = h('button', {type: 'button', class: 'small replay', text: 'Replay', title: 'Play this turn’s stored events again'});
  append(t.controls, cancel, fork, replay);

  const forkLabel = h('label');
  const forkSend = h('button', {type: 'submit'});
  const forkForm = h('form', {class: 'fork-form', hidden: true},
    forkLabel,
    h('textarea', {rows: 2, placeholder: 'Message'}),
    h('div', {}, forkSend, ' ',
      h('button', {type: 'button', class: 'link', text: 'Close', onclick: () => { forkForm.hidden = true; }})),
    h('div', {class: 'form-error'}));
  sendForm(forkForm, (text) => postTurn({input: [{type: 'message', text}], previous_turn_id: t.id}).then(() => {
    forkForm.hidden = true;
  }));
  fork.addEventListener('click', () => {
    forkForm.hidden = !forkForm.hidden;
    if (!forkForm.hidden) forkForm.querySelector('textarea').focus();
  });
  replay.addEventListener('click', () => startReplay(t, replay));
  t.extra.append(forkForm);

  t.onUpdate = () => {
    forkLabel.textContent = 'Fork: a new turn that continues from ' + t.label();
    forkSend.textContent = 'Send from ' + t.label();
    const running = t.data.status === 'running';
    cancel.hidden = !running;
    fork.hidden = running;
    replay.hidden = running;
  };
  t.onActions = (actions) => renderActions(t, actions);
  t.onResolved = () => renderActions(t, t.requiredActions);
  t.onUpdate();
}

// renderActions shows what a paused turn waits for. Every open call of a
// thread must be answered in one request, so the answers are collected and
// sent together once each action has one.
function renderActions(t, actions) {
  clear(t.actions);
  t.actions.hidden = !actions.length;
  if (!actions.length) return;
  if (t.resolvedBy) {
    t.actions.className = 'actions resolved';
    t.actions.append(h('div', {text: 'Answered in ' + index.label(t.resolvedBy.id) + '.'}));
    return;
  }
  t.actions.className = 'actions';
  const answers = new Map();
  const status = h('div', {class: 'form-error'});
  const rows = [];

  const submit = async () => {
    status.textContent = 'Sending…';
    try {
      await postTurn({input: actions.map((a) => answers.get(a.call_id)), previous_turn_id: t.id});
      status.textContent = '';
    } catch (err) {
      status.textContent = err.message;
      answers.clear();
      rows.forEach((r) => r.reset());
    }
  };
  const decide = (a, row, item, label) => {
    answers.set(a.call_id, item);
    row.done(label);
    if (answers.size === actions.length) submit();
  };

  for (const a of actions) {
    const el = h('div', {class: 'action action-' + String(a.type).replace(/[^a-z_]/g, ''), dataset: {call: a.call_id}});
    const controls = h('div', {class: 'action-controls'});
    const decided = h('span', {class: 'decided'});
    const row = {
      reset: () => { controls.hidden = false; decided.textContent = ''; },
      done: (label) => { controls.hidden = true; decided.textContent = label; },
    };
    rows.push(row);
    append(el, h('div', {class: 'action-head'}, h('strong', {text: a.tool || a.server || '?'}), ' ', idCode(a.call_id)),
      h('pre', {class: 'json', text: pretty(a.arguments === undefined ? {} : a.arguments)}));
    if (a.type === 'approval') {
      const reason = h('input', {type: 'text', class: 'reason', placeholder: 'Reason (optional)'});
      append(controls, reason, ' ',
        h('button', {type: 'button', class: 'approve', text: 'Approve', onclick: () => {
          const item = {type: 'approval', call_id: a.call_id, approved: true};
          if (reason.value) item.reason = reason.value;
          decide(a, row, item, 'approved');
        }}), ' ',
        h('button', {type: 'button', class: 'deny', text: 'Deny', onclick: () => {
          const item = {type: 'approval', call_id: a.call_id, approved: false};
          if (reason.value) item.reason = reason.value;
          decide(a, row, item, 'denied');
        }}));
      el.prepend(h('div', {class: 'action-title', text: 'Approval needed'}));
    } else if (a.type === 'client_tool') {
      const output = h('textarea', {rows: 3, class: 'client-output', placeholder: 'The tool’s result'});
      const isError = h('input', {type: 'checkbox', class: 'client-error'});
      append(controls, output, h('label', {}, isError, ' it failed'), ' ',
        h('button', {type: 'button', class: 'answer', text: 'Send result', onclick: () => {
          const item = {type: 'tool_result', call_id: a.call_id, output: output.value};
          if (isError.checked) item.is_error = true;
          decide(a, row, item, 'answered');
        }}));
      el.prepend(h('div', {class: 'action-title', text: 'Client tool: your answer is its result'}));
    } else if (a.type === 'auth') {
      const token = h('input', {type: 'password', class: 'token', placeholder: 'Token', autocomplete: 'off'});
      append(controls, token, ' ', h('button', {type: 'button', class: 'answer', text: 'Send token', onclick: () => {
        if (token.value) decide(a, row, {type: 'auth', call_id: a.call_id, token: token.value}, 'token sent');
      }}));
      el.prepend(h('div', {class: 'action-title'}, 'Authorization needed for MCP server ', h('strong', {text: a.server || '?'}),
        a.auth_url ? [' — get a token at ', h('code', {text: a.auth_url})] : ''));
    } else {
      append(controls, h('span', {class: 'muted', text: 'This action type (' + a.type + ') cannot be answered from the inspector.'}));
    }
    append(el, controls, decided);
    t.actions.append(el);
  }
  t.actions.append(status);
}

// ---- replay

async function startReplay(t, button) {
  button.disabled = true;
  const events = [];
  try {
    for await (const page of pages(sessionURL + '/turns/' + encodeURIComponent(t.id) + '/events', {first: 1000, rest: 1000})) {
      events.push(...page);
    }
  } catch (err) {
    banner('Reading the turn’s events failed: ' + err.message);
    button.disabled = false;
    return;
  }
  const progress = h('span', {class: 'replay-progress'});
  const stage = h('div', {class: 'replay-stage'});
  let stopped = false;
  const box = h('div', {class: 'replay', dataset: {state: 'playing'}},
    h('div', {class: 'replay-bar'}, h('strong', {text: 'Replay of ' + t.label()}), ' ', progress, ' ',
      h('button', {type: 'button', class: 'small', text: 'Skip to end', onclick: () => { stopped = true; }}), ' ',
      h('button', {type: 'button', class: 'small', text: 'Close', onclick: () => { stopped = true; box.remove(); button.disabled = false; }})),
    stage);
  t.extra.append(box);
  const rtl = new Timeline(stage, {mainThread: ses.main_thread_id});
  for (let i = 0; i < events.length; i++) {
    rtl.apply(events[i]);
    progress.textContent = (i + 1) + ' / ' + events.length + ' events';
    if (!stopped) await new Promise((r) => setTimeout(r, 40));
  }
  box.dataset.state = 'finished';
  progress.textContent = events.length + ' events · finished';
  button.disabled = false;
}

// ---- loading

// The turn list (oldest first, every turn), read once, trimmed to what the
// index keeps.
let turnList = null;
function readTurnList() {
  if (!turnList) {
    turnList = (async () => {
      const out = [];
      for await (const page of pages(turnsURL, {first: 1000, rest: 1000})) {
        for (const t of page) {
          const input = Array.isArray(t.input) && t.input.length ? [{type: t.input[0].type}] : [];
          out.push({id: t.id, previous_turn_id: t.previous_turn_id, status: t.status, last_seq: t.last_seq, usage: t.usage, input});
        }
      }
      return out;
    })();
  }
  return turnList;
}

// latestFrom returns the seq to read the latest page after: LATEST_SPAN
// before the tip turn's turn.created (its first event, found through the
// turn's own events), or 0 when that is near the start of the log.
async function latestFrom() {
  if (!ses.tip_turn_id) return 0;
  const first = await api(turnURL(ses.tip_turn_id) + '/events?limit=1');
  const start = first.data && first.data[0] ? first.data[0].seq : 0;
  return Math.max(0, start - 1 - LATEST_SPAN);
}

// inUse says whether the reader is using something on a page (so it must
// stay in the DOM even scrolled away).
function inUse(el) {
  if (el.contains(document.activeElement) || el.querySelector('.replay[data-state=playing]')) return true;
  for (const input of el.querySelectorAll('textarea, input[type=text], input[type=password]')) if (input.value) return true;
  return false;
}

function indexChanged(kind) {
  if (!hist) return;
  if (kind === 'load') {
    for (const tl of hist.mounted()) tl.renumber();
  } else if (kind === 'turn' && !loading) {
    for (const tl of hist.mounted()) tl.markBranch();
    if (!follow) newTurns++;
  }
  if (!loading) refresh();
}

function indexComplete() {
  document.body.dataset.index = 'complete';
  performance.mark('forge:index-loaded');
}

async function main() {
  renderKeyControl();
  document.body.dataset.state = 'loading';
  try {
    ses = await api(sessionURL);
  } catch (err) {
    document.body.dataset.state = 'error';
    banner(err.status === 404 ? 'There is no session ' + sid + ' (for this API key).' : 'Loading the session failed: ' + err.message);
    return;
  }
  if (ses.kind === 'forum') {
    location.replace(forumPath(ses.id));
    return;
  }
  document.title = (ses.title || ses.id) + ' · Forge';
  $('title').textContent = ses.title || 'Untitled session';
  if (ses.kind === 'monologue') {
    $('composer').hidden = true;
    $('monologue-note').hidden = false;
  }
  index = new TurnIndex({complete: !ses.tip_turn_id});
  index.onChange = indexChanged;
  hist = new History($('timeline'), {
    index, eventsURL, onLayout: pageResized, keep: inUse,
    timeline: {mainThread: ses.main_thread_id, controls: turnControls},
  });
  sendForm($('composer'), async (text) => {
    const body = {input: [{type: 'message', text}]};
    if (index.running()) body.if_busy = 'enqueue';
    const t = await postTurn(body);
    if (t && t.status === 'queued') loadQueue();
  });
  $('cancel').addEventListener('click', (e) => cancelRunning(e.target));
  $('jump').addEventListener('click', jumpToLatest);

  performance.mark('forge:session');

  // The latest page: the log from `from`, starting at the first turn that
  // begins there (what comes before belongs to the older pages, which end
  // at lo), then the stream. Turns still running when the log ends are
  // read again by the live stream from their start, which also carries the
  // deltas the log does not keep.
  let lo = 0;
  const open = new Map(); // running turn id -> seq of its turn.created
  let after = 0;
  try {
    const from = await latestFrom();
    const reader = pages(eventsURL + '?after=' + from, {first: 500, rest: 1000})[Symbol.asyncIterator]();
    let page = [];
    lo = from;
    if (from > 0) {
      const skipped = [];
      for (;;) {
        const next = await reader.next();
        if (next.done) {
          page = skipped; // no turn begins there (it cannot happen): show what was read
          break;
        }
        const i = next.value.findIndex((ev) => ev.type === 'turn.created');
        if (i >= 0) {
          lo = next.value[i].seq - 1;
          page = next.value.slice(i);
          break;
        }
        skipped.push(...next.value);
      }
    } else {
      index.complete = true;
    }
    performance.mark('forge:window');
    if (index.complete) indexComplete();
    hist.start(lo);
    after = lo;
    for (;;) {
      for (const ev of page) {
        if (ev.type === 'turn.created') open.set(ev.turn_id, ev.seq);
        else if (ev.type === 'turn.done') open.delete(ev.turn_id);
        if (ev.seq > after) after = ev.seq;
      }
      await hist.addStored(page);
      const next = await reader.next();
      if (next.done) break;
      page = next.value;
    }
  } catch (err) {
    banner('Loading the history failed: ' + err.message);
    if (!hist.live) {
      document.body.dataset.state = 'error';
      return;
    }
  }
  loading = false;
  for (const tl of hist.mounted()) tl.markBranch();
  renderSummary();
  renderComposer();
  scrollToBottom();
  performance.mark('forge:first-render');
  document.body.dataset.state = 'live';
  for (const seq of open.values()) after = Math.min(after, seq - 1);
  hist.forgetAfter(after);
  loadQueue();
  // Other clients may queue turns too (no event says so): look again now
  // and then while a turn runs.
  setInterval(() => { if (index.running() || !$('queue').hidden) loadQueue(); }, 5000);
  new EventStream(eventsURL, {
    after,
    onEvent: (ev) => {
      hist.apply(ev.data);
      refresh();
      // A queued turn leaves the queue when it starts or is cancelled.
      if (ev.data && (ev.data.type === 'turn.created' || ev.data.type === 'turn.done') && !$('queue').hidden) loadQueue();
    },
    onState: liveIndicator($('live')),
  }).start();

  // The older history: numbered and cut into pages once the turn list is in.
  if (lo > 0) {
    try {
      if (!index.complete) {
        index.load(await readTurnList());
        indexComplete();
      }
      hist.olderPages(partition(index.list, lo));
    } catch (err) {
      document.body.dataset.index = 'failed';
      hist.olderFailed(err.message);
    }
    refresh();
  }
}

main();
