// /ui/forums/{fid}: the room as its members see it (messages, replies,
// notices, who joined and left, who is typing), with a link from each agent
// stint, and from each of its replies, to the monologue it was thinking in.
// Built from the forum's stored events (in pages) and then its live stream.

import {
  api, pages, EventStream, h, append, clear, banner, pathID, fmtTime, liveIndicator, nextFrame, renderKeyControl, sessionPath,
} from './forge.js';

const fid = pathID();
const $ = (id) => document.getElementById(id);
const forumURL = '/v1/forums/' + encodeURIComponent(fid);

const stints = new Map(); // participant id -> {stint, monologues: [ids], current}
const messages = new Map(); // message id -> message
const typing = new Map(); // participant id -> true
const seen = new Set(); // seqs applied
let loading = true;

function nameOf(actorID) {
  if (typeof actorID !== 'string') return '?';
  const i = actorID.indexOf(':');
  return i >= 0 ? actorID.slice(i + 1) : actorID;
}

function isAgent(actorID) {
  return typeof actorID === 'string' && actorID.startsWith('agent:');
}

function stintState(id) {
  let s = stints.get(id);
  if (!s) {
    s = {stint: {id}, monologues: [], current: ''};
    stints.set(id, s);
  }
  return s;
}

function noteMonologue(s, id) {
  if (!id) return;
  if (!s.monologues.includes(id)) s.monologues.push(id);
  s.current = id;
}

function upsertStint(st) {
  const s = stintState(st.id);
  s.stint = Object.assign({}, s.stint, st);
  if (!s.current) noteMonologue(s, st.metadata && st.metadata.monologue_id);
  return s;
}

function monologueLink(id, text) {
  return h('a', {class: 'monologue', href: sessionPath(id), title: 'Monologue ' + id, text: text || 'monologue'});
}

// ---- members

function renderMembers() {
  const active = clear($('members'));
  const left = clear($('left'));
  for (const s of stints.values()) {
    const st = s.stint;
    if (!st.actor_id) continue;
    const li = h('li', {class: isAgent(st.actor_id) ? 'agent' : 'human', dataset: {participant: st.id}},
      h('strong', {text: nameOf(st.actor_id)}), ' ',
      h('span', {class: 'badge', text: isAgent(st.actor_id) ? 'agent' + (st.trigger ? ' · ' + st.trigger : '') : 'human'}));
    if (isAgent(st.actor_id) && s.current) {
      li.append(' ', monologueLink(s.current));
      const earlier = s.monologues.filter((m) => m !== s.current);
      if (earlier.length) {
        li.append(h('div', {class: 'muted'}, 'earlier: ', ...earlier.flatMap((m, i) => [i ? ', ' : '', monologueLink(m, 'monologue ' + (i + 1))])));
      }
    }
    li.append(h('div', {class: 'muted', text: 'joined ' + fmtTime(st.joined_at) + (st.left_at ? ' · left ' + fmtTime(st.left_at) : '')}));
    (st.left_at ? left : active).append(li);
  }
}

function renderTyping() {
  const names = [...typing.keys()].map((id) => nameOf((stints.get(id) || {stint: {}}).stint.actor_id || id));
  $('typing').textContent = names.length ? names.join(', ') + (names.length === 1 ? ' is typing…' : ' are typing…') : '';
}

// ---- messages

// withMentions splits text into text nodes and mention spans.
function withMentions(text, mentions) {
  const el = h('div', {class: 'fmsg-text'});
  const names = (Array.isArray(mentions) ? mentions : []).filter((m) => typeof m === 'string' && m);
  if (!names.length) {
    el.textContent = text;
    return el;
  }
  const esc = names.sort((a, b) => b.length - a.length).map((n) => n.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  const re = new RegExp('@(' + esc.join('|') + ')(?![A-Za-z0-9_-])', 'g');
  let last = 0;
  let m;
  while ((m = re.exec(text)) !== null) {
    if (m.index > last) el.append(text.slice(last, m.index));
    el.append(h('span', {class: 'mention', text: m[0]}));
    last = m.index + m[0].length;
  }
  if (last < text.length) el.append(text.slice(last));
  return el;
}

function snippet(text) {
  const t = String(text || '').replace(/\s+/g, ' ');
  return t.length > 80 ? t.slice(0, 79) + '…' : t;
}

function renderMessage(m) {
  if (messages.has(m.id)) return;
  messages.set(m.id, m);
  const kind = ['message', 'reply', 'notice'].includes(m.kind) ? m.kind : 'message';
  const el = h('div', {class: 'fmsg kind-' + kind, id: 'm-' + m.id, dataset: {message: m.id, kind}});
  const head = h('div', {class: 'fmsg-head'});
  if (kind === 'notice' || !m.author) {
    head.append(h('strong', {class: 'author system', text: 'Forge'}), ' ', h('span', {class: 'badge', text: 'notice'}));
  } else {
    const actor = m.author.actor_id;
    head.append(h('strong', {class: 'author ' + (isAgent(actor) ? 'agent' : 'human'), text: nameOf(actor)}));
    if (isAgent(actor)) head.append(' ', h('span', {class: 'badge', text: 'agent'}));
    const s = stints.get(m.author.participant_id);
    if (isAgent(actor) && s && s.current) head.append(' ', monologueLink(s.current));
    typing.delete(m.author.participant_id);
  }
  head.append(' ', h('time', {datetime: m.created_at || '', text: fmtTime(m.created_at)}));
  el.append(head);
  if (m.reply_to) {
    const orig = messages.get(m.reply_to);
    el.append(h('a', {class: 'reply-to', href: '#m-' + m.reply_to},
      '↪ in reply to ', orig ? nameOf(orig.author && orig.author.actor_id) + ': “' + snippet(orig.text) + '”' : m.reply_to));
  }
  el.append(withMentions(String(m.text || ''), m.mentions));
  $('messages').append(el);
}

function roomLine(text, ...extra) {
  $('messages').append(h('div', {class: 'room-line'}, text, ...extra));
}

function apply(ev) {
  if (typeof ev.seq === 'number' && ev.seq > 0) {
    if (seen.has(ev.seq)) return;
    seen.add(ev.seq);
  }
  const d = ev.data || {};
  switch (ev.type) {
    case 'forum.message':
      renderMessage(d);
      renderTyping();
      break;
    case 'forum.member.joined': {
      const s = upsertStint(d);
      noteMonologue(s, d.metadata && d.metadata.monologue_id);
      roomLine(nameOf(d.actor_id) + ' joined');
      renderMembers();
      break;
    }
    case 'forum.member.left':
      upsertStint(d);
      typing.delete(d.id);
      roomLine(nameOf(d.actor_id) + ' left');
      renderMembers();
      renderTyping();
      break;
    case 'agent.monologue.compacted': {
      const s = stintState(d.participant_id);
      if (d.old_monologue_id && !s.monologues.includes(d.old_monologue_id)) s.monologues.unshift(d.old_monologue_id);
      noteMonologue(s, d.new_monologue_id);
      roomLine(nameOf(s.stint.actor_id) + '’s monologue was compacted: ',
        monologueLink(d.old_monologue_id, 'before'), ' → ', monologueLink(d.new_monologue_id, 'after'));
      renderMembers();
      break;
    }
    case 'forum.typing':
      if (d.typing) typing.set(d.participant_id, true);
      else typing.delete(d.participant_id);
      renderTyping();
      break;
    default:
      break; // nothing else is meant for a forum reader
  }
  if (!loading) window.scrollTo(0, document.documentElement.scrollHeight);
}

async function main() {
  renderKeyControl();
  document.body.dataset.state = 'loading';
  let forum;
  try {
    forum = await api(forumURL);
  } catch (err) {
    document.body.dataset.state = 'error';
    banner(err.status === 404 ? 'There is no forum ' + fid + ' (for this API key).' : 'Loading the forum failed: ' + err.message);
    return;
  }
  document.title = (forum.title || forum.id) + ' · Forge';
  $('title').textContent = forum.title || 'Untitled forum';
  try {
    for await (const page of pages(forumURL + '/members?all=true', {first: 1000, rest: 1000})) {
      for (const st of page) upsertStint(st);
    }
  } catch (err) {
    banner('Loading the members failed: ' + err.message);
  }
  // Replaying the log rebuilds the members' monologue history from the
  // join and compaction events; start it from scratch.
  const current = new Map([...stints].map(([id, s]) => [id, s.current]));
  for (const s of stints.values()) { s.monologues = []; s.current = ''; }
  renderMembers();
  let after = 0;
  try {
    for await (const page of pages(forumURL + '/events', {first: 300, rest: 2000})) {
      for (const ev of page) {
        apply(ev);
        if (typeof ev.seq === 'number' && ev.seq > after) after = ev.seq;
      }
      await nextFrame();
    }
  } catch (err) {
    banner('Loading the room failed: ' + err.message);
  }
  // A stint whose join the log did not show keeps what the members list said.
  for (const [id, s] of stints) noteMonologue(s, s.current || current.get(id));
  renderMembers();
  loading = false;
  document.body.dataset.state = 'live';
  window.scrollTo(0, document.documentElement.scrollHeight);
  new EventStream(forumURL + '/events', {after, onEvent: (ev) => apply(ev.data), onState: liveIndicator($('live'))}).start();
}

main();
