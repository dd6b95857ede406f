// /ui/schedules: the tenant's schedules (when, paused, next run) with a
// pause/resume button each; /ui/schedules/{id}: one schedule and its runs,
// each linked to the session of the turn it started.

import {
  api, pages, h, clear, banner, statusPill, sessionPath, tableRow, tableHead, timeCell, showEmpty, runListPage,
} from './forge.js';

const $ = (id) => document.getElementById(id);

function when(s) { return s.cron ? 'cron ' + s.cron + (s.timezone ? ' (' + s.timezone + ')' : '') : 'every ' + s.every; }
function state(s) { return statusPill(s.paused ? 'paused' : 'active'); }

// toggle is the pause/resume button of s; onChange gets the new schedule.
function toggle(s, onChange) {
  const b = h('button', {type: 'button', class: 'small toggle', text: s.paused ? 'Resume' : 'Pause'});
  b.addEventListener('click', async () => {
    b.disabled = true;
    try {
      const next = await api('/v1/schedules/' + encodeURIComponent(s.id), {method: 'PATCH', body: {paused: !s.paused}});
      onChange(next);
    } catch (err) {
      banner('Updating the schedule failed: ' + err.message);
      b.disabled = false;
    }
  });
  return b;
}

function listRow(s) {
  const tr = tableRow(h('a', {href: '/ui/schedules/' + encodeURIComponent(s.id), text: s.agent}), when(s), state(s),
    s.paused ? h('span', {class: 'muted', text: '—'}) : timeCell(s.next_run_at), s.session_id || 'new each run',
    h('code', {class: 'id', text: s.id}), toggle(s, (next) => tr.replaceWith(listRow(next))));
  tr.dataset.id = s.id;
  tr.dataset.paused = String(s.paused);
  return tr;
}

async function list() {
  $('head').append(tableHead('Agent', 'When', 'State', 'Next run', 'Session', 'Id', ''));
  let n = 0;
  for await (const page of pages('/v1/schedules')) {
    for (const s of page) {
      n++;
      $('rows').append(listRow(s));
    }
  }
  showEmpty(n, 'No schedules. Create one with POST /v1/schedules or forge schedules create.');
}

function summary(s) {
  const d = clear($('detail'));
  d.hidden = false;
  d.dataset.paused = String(s.paused);
  d.append(h('h2', {text: 'Schedule'}), h('dl', {class: 'fields'},
    h('dt', {text: 'Id'}), h('dd', {}, h('code', {class: 'id', text: s.id})),
    h('dt', {text: 'Agent'}), h('dd', {text: s.agent}),
    h('dt', {text: 'When'}), h('dd', {text: when(s)}),
    h('dt', {text: 'State'}), h('dd', {}, state(s), ' ', toggle(s, summary)),
    h('dt', {text: 'Next run'}), h('dd', {}, s.paused ? h('span', {class: 'muted', text: 'paused'}) : timeCell(s.next_run_at)),
    h('dt', {text: 'Catch up'}), h('dd', {text: s.catch_up || ''}),
    h('dt', {text: 'Session'}), h('dd', {}, s.session_id ? h('a', {href: sessionPath(s.session_id), text: s.session_id}) : 'a new one each run'),
    h('dt', {text: 'Created'}), h('dd', {}, timeCell(s.created_at))),
  h('h2', {text: 'Runs'}));
}

async function detail(id) {
  const s = await api('/v1/schedules/' + encodeURIComponent(id));
  document.title = 'Schedule ' + s.id + ' · Forge';
  summary(s);
  $('head').append(tableHead('Slot', 'Fired', 'Status', 'Turn', 'Turn status', 'Error'));
  let n = 0;
  for await (const page of pages('/v1/schedules/' + encodeURIComponent(id) + '/runs')) {
    for (const r of page) {
      n++;
      const turn = r.turn_id && r.session_id
        ? h('a', {href: sessionPath(r.session_id) + '#' + encodeURIComponent(r.turn_id), text: r.turn_id}) : h('span', {class: 'muted', text: '—'});
      const tr = tableRow(timeCell(r.slot), timeCell(r.fired_at), statusPill(r.status), turn, r.turn_status ? statusPill(r.turn_status) : '', r.error || '');
      tr.cells[5].className = 'error';
      tr.dataset.id = r.id;
      $('rows').append(tr);
    }
  }
  showEmpty(n, 'No runs yet.');
}

runListPage(list, detail);
