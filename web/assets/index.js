// /ui/: every session and forum of the tenant, newest first, with a search
// by title or id. The status of each session's tip turn is read when its
// row scrolls into view (a few requests at a time).

import {api, pages, h, clear, banner, fmtUsage, fmtCost, fmtTime, statusPill, renderKeyControl, sessionPath, forumPath} from './forge.js';

const $ = (id) => document.getElementById(id);
const rows = new Map(); // id -> {item, el, haystack}
let sorted = [];

function newestFirst(a, b) {
  const ta = Date.parse(a.item.created_at) || 0;
  const tb = Date.parse(b.item.created_at) || 0;
  if (ta !== tb) return tb - ta;
  return a.item.id < b.item.id ? 1 : a.item.id > b.item.id ? -1 : 0;
}

// ---- tip statuses, loaded lazily

const tipQueue = [];
let tipActive = 0;
const TIP_CONCURRENCY = 4;

const observer = new IntersectionObserver((entries) => {
  for (const e of entries) {
    if (!e.isIntersecting) continue;
    observer.unobserve(e.target);
    tipQueue.push(e.target);
  }
  pumpTips();
});

function pumpTips() {
  while (tipActive < TIP_CONCURRENCY && tipQueue.length) {
    const cell = tipQueue.shift();
    tipActive++;
    api('/v1/sessions/' + encodeURIComponent(cell.dataset.session) + '/turns/' + encodeURIComponent(cell.dataset.turn))
      .then((turn) => clear(cell).append(statusPill(turn.status)))
      .catch((err) => clear(cell).append(h('span', {class: 'muted', title: err.message, text: 'unknown'})))
      .finally(() => { tipActive--; pumpTips(); });
  }
}

// ---- rows

function addRow(item, forum) {
  const isForum = forum || item.kind === 'forum';
  const existing = rows.get(item.id);
  if (existing) {
    if (!isForum || existing.forum) return; // a forum from /v1/forums wins over its /v1/sessions row
    existing.el.remove();
  }
  const href = isForum ? forumPath(item.id) : sessionPath(item.id);
  const title = item.title || (isForum ? 'Untitled forum' : 'Untitled session');
  const tip = h('td', {class: 'tip'});
  if (isForum) {
    tip.textContent = '';
  } else if (item.tip_turn_id) {
    tip.append(h('span', {class: 'muted', text: '…'}));
    tip.dataset.session = item.id;
    tip.dataset.turn = item.tip_turn_id;
    observer.observe(tip);
  } else {
    tip.textContent = 'no turns';
  }
  const usage = item.usage && (item.usage.input_tokens || item.usage.output_tokens || item.usage.cost) ? item.usage : null;
  const el = h('tr', {dataset: {id: item.id, kind: isForum ? 'forum' : item.kind || 'direct'}},
    h('td', {}, h('a', {href, text: title})),
    h('td', {text: isForum ? 'forum' : item.kind || 'direct'}),
    h('td', {text: item.agent || ''}),
    h('td', {}, h('code', {class: 'id', text: item.id})),
    tip,
    h('td', {class: 'num', text: usage ? fmtUsage(usage) : isForum ? '' : '—'}),
    h('td', {class: 'num', text: usage ? fmtCost(usage.cost) : isForum ? '' : '—'}),
    h('td', {}, h('time', {datetime: item.created_at || '', text: fmtTime(item.created_at)})));
  const r = {item, el, forum: isForum, haystack: (title + ' ' + item.id).toLowerCase()};
  rows.set(item.id, r);
}

function render() {
  sorted = [...rows.values()].sort(newestFirst);
  const tbody = $('rows');
  for (const r of sorted) tbody.append(r.el); // moves rows into order
  filter();
}

function filter() {
  const q = $('search').value.trim().toLowerCase();
  let shown = 0;
  for (const r of sorted) {
    const hit = !q || r.haystack.includes(q);
    r.el.hidden = !hit;
    if (hit) shown++;
  }
  $('count').textContent = q ? shown + ' of ' + sorted.length : sorted.length + (sorted.length === 1 ? ' item' : ' items');
  $('empty').hidden = sorted.length > 0 || document.body.dataset.state !== 'ready';
}

async function load(path, forum) {
  for await (const page of pages(path, {first: 200, rest: 1000})) {
    for (const item of page) addRow(item, forum);
    render();
  }
}

async function main() {
  renderKeyControl();
  document.body.dataset.state = 'loading';
  $('search').addEventListener('input', filter);
  $('search-form').addEventListener('submit', (e) => e.preventDefault());
  const sessions = load('/v1/sessions', false).catch((err) => banner('Loading sessions failed: ' + err.message));
  // Forums may not exist on this server yet: a 404 just means none.
  const forums = load('/v1/forums', true).then(() => { document.body.dataset.forums = 'listed'; }, (err) => {
    document.body.dataset.forums = err.status === 404 ? 'absent' : 'failed';
    if (err.status !== 404) {
      $('forums-note').hidden = false;
      $('forums-note').textContent = 'Loading forums failed: ' + err.message;
    }
  });
  await Promise.all([sessions, forums]);
  document.body.dataset.state = 'ready';
  filter();
}

main();
