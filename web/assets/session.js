// /ui/sessions/{sid}: one session's timeline, from its stored events (read
// in pages, rendered as each page arrives) and then live from its event
// stream. From the page: send a message, cancel, approve or deny calls,
// answer client tools, fork from any turn, replay a finished turn.

import {
  api, pages, EventStream, h, append, clear, banner, pathID, fmtUsage, fmtCost, fmtTime, idCode, statusPill,
  liveIndicator, nextFrame, renderKeyControl, forumPath, pretty,
} from './forge.js';
import {Timeline} from './timeline.js';

const sid = pathID();
const $ = (id) => document.getElementById(id);
const sessionURL = '/v1/sessions/' + encodeURIComponent(sid);
const eventsURL = sessionURL + '/events';

let ses = null;
let tl = null;
let loading = true;
let pendingFrame = false;

// follow keeps the view at the bottom while the user is there.
let follow = true;
window.addEventListener('scroll', () => {
  follow = window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 80;
}, {passive: true});

// refresh updates the summary, the composer and the scroll position once
// per frame however many events arrived.
function refresh() {
  if (pendingFrame) return;
  pendingFrame = true;
  requestAnimationFrame(() => {
    pendingFrame = false;
    renderSummary();
    renderComposer();
    if (follow && !loading) window.scrollTo(0, document.documentElement.scrollHeight);
  });
}

function renderSummary() {
  const u = tl.usage();
  const tip = tl.order[tl.order.length - 1];
  clear($('summary')).append(
    h('dl', {},
      h('dt', {text: 'Agent'}), h('dd', {text: ses.agent || '—'}),
      h('dt', {text: 'Kind'}), h('dd', {text: ses.kind || 'direct'}),
      h('dt', {text: 'Id'}), h('dd', {}, h('code', {text: ses.id})),
      h('dt', {text: 'Created'}), h('dd', {text: fmtTime(ses.created_at)}),
      h('dt', {text: 'Turns'}), h('dd', {text: String(tl.order.length)}),
      h('dt', {text: 'Tip'}), h('dd', {}, tip ? [idCode(tip.id), ' ', statusPill(tip.data.status)] : '—'),
      h('dt', {text: 'Usage'}), h('dd', {id: 'total-usage', text: fmtUsage(u) || '—'}),
      h('dt', {text: 'Cost'}), h('dd', {id: 'total-cost', text: fmtCost(u.cost)})));
}

function renderComposer() {
  const running = tl.running();
  $('cancel').hidden = !running;
  $('send').disabled = !!running;
  $('composer-note').textContent = running ? 'Turn ' + running.n + ' is running.' : '';
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

  const forkForm = h('form', {class: 'fork-form', hidden: true},
    h('label', {text: 'Fork: a new turn that continues from turn ' + t.n}),
    h('textarea', {rows: 2, placeholder: 'Message'}),
    h('div', {}, h('button', {type: 'submit', text: 'Send from turn ' + t.n}), ' ',
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
    t.actions.append(h('div', {text: 'Answered in turn ' + t.resolvedBy.n + '.'}));
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
    h('div', {class: 'replay-bar'}, h('strong', {text: 'Replay of turn ' + t.n}), ' ', progress, ' ',
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
  tl = new Timeline($('timeline'), {
    mainThread: ses.main_thread_id,
    controls: turnControls,
    onChange: (ev) => {
      if (loading) return; // the history loop refreshes once per page
      if (ev.type === 'turn.created') tl.markBranch();
      refresh();
    },
  });
  sendForm($('composer'), (text) => postTurn({input: [{type: 'message', text}]}));
  $('cancel').addEventListener('click', (e) => cancelRunning(e.target));

  // The stored log, page by page. Turns still running when it ends are
  // read again from their start by the live stream, which also carries
  // the deltas the log does not keep.
  const open = new Map(); // running turn id -> seq of its turn.created
  let first = true;
  try {
    for await (const page of pages(eventsURL, {first: 300, rest: 2000})) {
      for (const ev of page) {
        tl.apply(ev);
        if (ev.type === 'turn.created') open.set(ev.turn_id, ev.seq);
        else if (ev.type === 'turn.done') open.delete(ev.turn_id);
      }
      tl.markBranch();
      renderSummary();
      if (first) {
        first = false;
        performance.mark('forge:first-render');
      }
      await nextFrame();
    }
  } catch (err) {
    banner('Loading the history failed: ' + err.message);
  }
  performance.mark('forge:history-loaded');
  loading = false;
  let after = tl.lastSeq;
  for (const seq of open.values()) after = Math.min(after, seq - 1);
  document.body.dataset.state = 'live';
  refresh();
  window.scrollTo(0, document.documentElement.scrollHeight);
  new EventStream(eventsURL, {after, onEvent: (ev) => tl.apply(ev.data), onState: liveIndicator($('live'))}).start();
}

main();
