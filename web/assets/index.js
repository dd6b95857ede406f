// /ui/: every session and forum of the tenant, newest first, with a search
// by title or id. The list is read in pages in the background and kept as
// data; the table holds only the first rows of what matches (ROWS at a
// time, more as the reader scrolls to its end), so a tenant with thousands
// of sessions costs no more DOM than one with a hundred. The status of each
// session's tip turn is read when its row scrolls into view (a few requests
// at a time).
//
// The API lists sessions oldest first, so the newest is known only once
// every page is read; rows are drawn as pages arrive, newest first among
// those read so far.

import {api, pages, h, clear, banner, fmtUsage, fmtCost, fmtTime, statusPill, renderKeyControl, sessionPath, forumPath} from './forge.js';

const $ = (id) => document.getElementById(id);
const ROWS = 100; // rows added to the table at a time
const rows = new Map(); // id -> {item, forum, haystack, el}
let sorted = []; // every row, newest first
let matching = []; // the rows the search keeps, newest first
let shown = ROWS; // how many of them the table holds
let dirty = false;
let pendingFrame = false;
let version = 0; // bumped by every change of the rows
let drawn = {version: -1, q: null, count: 0}; // what the table holds

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

const tipObserver = new IntersectionObserver((entries) => {
  for (const e of entries) {
    if (!e.isIntersecting) continue;
    tipObserver.unobserve(e.target);
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
  if (existing && (!isForum || existing.forum)) return; // a forum from /v1/forums wins over its /v1/sessions row
  const title = item.title || (isForum ? 'Untitled forum' : 'Untitled session');
  rows.set(item.id, {item, forum: isForum, title, haystack: (title + ' ' + item.id).toLowerCase(), el: null});
  dirty = true;
  version++;
}

// rowElement builds a row's <tr> the first time it is shown.
function rowElement(r) {
  if (r.el) return r.el;
  const {item, forum: isForum, title} = r;
  const href = isForum ? forumPath(item.id) : sessionPath(item.id);
  const tip = h('td', {class: 'tip'});
  if (isForum) {
    tip.textContent = '';
  } else if (item.tip_turn_id) {
    tip.append(h('span', {class: 'muted', text: '…'}));
    tip.dataset.session = item.id;
    tip.dataset.turn = item.tip_turn_id;
    tipObserver.observe(tip);
  } else {
    tip.textContent = 'no turns';
  }
  const usage = item.usage && (item.usage.input_tokens || item.usage.output_tokens || item.usage.cost) ? item.usage : null;
  r.el = h('tr', {dataset: {id: item.id, kind: isForum ? 'forum' : item.kind || 'direct'}},
    h('td', {}, h('a', {href, text: title})),
    h('td', {text: isForum ? 'forum' : item.kind || 'direct'}),
    h('td', {text: item.agent || ''}),
    h('td', {}, h('code', {class: 'id', text: item.id})),
    tip,
    h('td', {class: 'num', text: usage ? fmtUsage(usage) : isForum ? '' : '—'}),
    h('td', {class: 'num', text: usage ? fmtCost(usage.cost) : isForum ? '' : '—'}),
    h('td', {}, h('time', {datetime: item.created_at || '', text: fmtTime(item.created_at)})));
  return r.el;
}

// render redraws the table once per frame, however many pages arrived.
function render() {
  if (pendingFrame) return;
  pendingFrame = true;
  requestAnimationFrame(() => {
    pendingFrame = false;
    draw();
  });
}

function draw() {
  if (dirty) {
    sorted = [...rows.values()].sort(newestFirst);
    dirty = false;
  }
  const q = $('search').value.trim().toLowerCase();
  if (drawn.version === version && drawn.q === q) {
    // Only the window grew: add its new rows, leave the others be.
    const upTo = Math.min(shown, matching.length);
    if (upTo > drawn.count) $('rows').append(...matching.slice(drawn.count, upTo).map(rowElement));
  } else {
    matching = q ? sorted.filter((r) => r.haystack.includes(q)) : sorted;
    $('rows').replaceChildren(...matching.slice(0, shown).map(rowElement));
  }
  drawn = {version, q, count: Math.min(shown, matching.length)};
  $('count').textContent = q ? matching.length + ' of ' + sorted.length : sorted.length + (sorted.length === 1 ? ' item' : ' items');
  const more = matching.length - Math.min(shown, matching.length);
  const note = $('more');
  note.hidden = more <= 0;
  note.textContent = more > 0 ? 'Showing ' + shown + ' of ' + matching.length + ': scroll for more' : '';
  $('empty').hidden = sorted.length > 0 || document.body.dataset.state !== 'ready';
  if (more > 0) {
    // Observing again reports where the note is now: rows that do not
    // fill the screen are followed by the next ones at once.
    moreObserver.unobserve(note);
    moreObserver.observe(note);
  }
}

// Reaching the end of the table adds the next rows.
const moreObserver = new IntersectionObserver((entries) => {
  if (!entries.some((e) => e.isIntersecting) || shown >= matching.length) return;
  shown += ROWS;
  render();
}, {rootMargin: '600px 0px'});

function search() {
  shown = ROWS;
  render();
}

async function load(path, forum) {
  for await (const page of pages(path, {first: 1000, rest: 1000})) {
    for (const item of page) addRow(item, forum);
    render();
  }
}

async function main() {
  renderKeyControl();
  document.body.dataset.state = 'loading';
  $('search').addEventListener('input', search);
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
  draw();
}

main();
