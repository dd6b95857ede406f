// /ui/webhooks: the tenant's webhooks; /ui/webhooks/{id}: one webhook and
// its recent deliveries (status, response code, error, next retry),
// newest first as the API lists them.

import {
  api, pages, h, statusPill, sessionPath, tableRow, tableHead, timeCell, showEmpty, runListPage,
} from './forge.js';

const $ = (id) => document.getElementById(id);

async function list() {
  $('head').append(tableHead('URL', 'Events', 'Description', 'Id', 'Created'));
  let n = 0;
  for await (const page of pages('/v1/webhooks')) {
    for (const w of page) {
      n++;
      const tr = tableRow(h('a', {href: '/ui/webhooks/' + encodeURIComponent(w.id), text: w.url}),
        (w.events || []).join(', '), w.description, h('code', {class: 'id', text: w.id}), timeCell(w.created_at));
      tr.dataset.id = w.id;
      $('rows').append(tr);
    }
  }
  showEmpty(n, 'No webhooks. Create one with POST /v1/webhooks or forge webhooks create.');
}

async function detail(id) {
  const w = await api('/v1/webhooks/' + encodeURIComponent(id));
  document.title = 'Webhook ' + w.id + ' · Forge';
  const d = $('detail');
  d.hidden = false;
  d.append(h('h2', {text: 'Webhook'}), h('dl', {class: 'fields'},
    h('dt', {text: 'Id'}), h('dd', {}, h('code', {class: 'id', text: w.id})),
    h('dt', {text: 'URL'}), h('dd', {text: w.url}),
    h('dt', {text: 'Events'}), h('dd', {text: (w.events || []).join(', ')}),
    h('dt', {text: 'Description'}), h('dd', {text: w.description || '—'}),
    h('dt', {text: 'Created'}), h('dd', {}, timeCell(w.created_at))),
  h('h2', {text: 'Recent deliveries'}));
  $('head').append(tableHead('Status', 'Event', 'Session', 'Attempts', 'Response', 'Error', 'Last attempt', 'Next retry'));
  let n = 0;
  for await (const page of pages('/v1/webhooks/' + encodeURIComponent(id) + '/deliveries')) {
    for (const dl of page) {
      n++;
      const session = dl.session_id ? h('a', {href: sessionPath(dl.session_id), text: dl.session_id}) : '';
      const tr = tableRow(statusPill(dl.status), dl.event_type + (dl.seq ? ' #' + dl.seq : ''), session, String(dl.attempts),
        dl.response_code ? String(dl.response_code) : '—', dl.error || '', timeCell(dl.last_attempt_at),
        dl.status === 'pending' ? timeCell(dl.next_attempt_at) : h('span', {class: 'muted', text: '—'}));
      tr.cells[5].className = 'error';
      tr.dataset.id = dl.id;
      tr.dataset.status = dl.status;
      $('rows').append(tr);
    }
  }
  showEmpty(n, 'No deliveries yet.');
}

runListPage(list, detail);
