// A session's history as pages that come and go with the scroll position.
//
// The event log is cut at turn ends into pages: page k holds the stored
// events with lo < seq <= hi, so every event is in exactly one page and a
// page holds whole turns. The last page is open-ended: it gets the live
// stream. Each page is a <div class="page"> in the timeline: while near
// the viewport it holds a Timeline of its turns ("mounted"); away from it,
// an empty box of the height it had (or an estimate, if it never was on
// screen), so the scrollbar stays true and the browser's scroll anchoring
// keeps what the reader looks at in place when a page above changes size.
// A page's events are read when it first comes near the viewport, kept for
// when it comes back, and applied a few milliseconds at a time so that no
// task holds the main thread for long.

import {api, h, clear} from './forge.js';
import {Timeline} from './timeline.js';

// Older pages hold at most PAGE_TURNS turns, fewer when their turns span
// more than PAGE_SPAN seqs (long tool loops); the live page starts a new
// one after LIVE_TURNS turns.
export const PAGE_TURNS = 16;
export const PAGE_SPAN = 1500;
const LIVE_TURNS = 32;
// The height given to a turn no page has measured yet.
const TURN_PX = 180;
// Pages are mounted within a viewport of the visible area and unmounted
// beyond three.
const NEAR = '100% 0px';
const FAR = '300% 0px';
// Pages whose events are kept once unmounted (the live page always is).
const KEEP_EVENTS = 40;
// How long one slice of work may hold the main thread.
const SLICE_MS = 8;

// yieldToMain lets the browser paint and handle input.
export function yieldToMain() {
  if (globalThis.scheduler && typeof scheduler.yield === 'function') return scheduler.yield();
  return new Promise((resolve) => setTimeout(resolve, 0));
}

// applySliced applies events[from...] to tl in slices of SLICE_MS,
// yielding between them; it also applies events pushed onto the array
// meanwhile. It stops (false) as soon as stale() says so.
export async function applySliced(tl, events, stale, from = 0) {
  let i = from;
  while (i < events.length) {
    const until = performance.now() + SLICE_MS;
    do {
      tl.apply(events[i++]);
    } while (i < events.length && performance.now() < until);
    if (i < events.length) {
      await yieldToMain();
      if (stale()) return false;
    }
  }
  return true;
}

// partition cuts the turns that ended at or before seq `upTo` (in creation
// order, from the index) into pages, newest last: [{lo, hi, turns}].
export function partition(list, upTo) {
  const older = [];
  let top = 0;
  for (const t of list) {
    if (t.lastSeq > upTo || t.status === 'running') continue;
    top = Math.max(top, t.lastSeq); // never decreasing, whatever the turns say
    older.push({id: t.id, end: top});
  }
  const pages = [];
  let hi = upTo;
  let count = 0;
  for (let i = older.length - 1; i >= 0; i--) {
    count++;
    const lo = i > 0 ? older[i - 1].end : 0;
    if (i === 0 || count >= PAGE_TURNS || hi - lo >= PAGE_SPAN) {
      pages.unshift({lo, hi, turns: count});
      hi = lo;
      count = 0;
    }
  }
  if (!pages.length && upTo > 0) pages.push({lo: 0, hi: upTo, turns: 0}); // events outside turns only
  return pages;
}

class Page {
  constructor(lo, hi, turns) {
    this.lo = lo;
    this.hi = hi; // Infinity for the live page
    this.turns = turns; // how many turns it holds (for estimates)
    this.events = null; // its stored events once read
    this.tl = null; // its Timeline while mounted
    this.state = 'placeholder'; // placeholder | loading | mounted
    this.gen = 0; // bumped by every unmount: a slower mount gives up
    this.height = 0; // measured height, 0 when never measured
    this.used = 0; // when it was last mounted (to drop the oldest events)
    this.el = h('div', {class: 'page', dataset: {state: 'placeholder', lo: String(lo), hi: String(hi)}});
  }
}

export class History {
  // root: the timeline element. opts: index (the shared TurnIndex),
  // eventsURL, timeline (options for each page's Timeline), onLayout
  // (called after a page changed size: the page re-pins the bottom),
  // keep(page element) (true while the reader uses something in it).
  constructor(root, opts) {
    this.root = root;
    this.opts = opts;
    this.index = opts.index;
    this.pages = [];
    this.live = null;
    this.pending = null; // the box standing for older pages not cut yet
    this.byEl = new Map();
    this.clock = 0;
    this.near = new IntersectionObserver((entries) => {
      for (const e of entries) if (e.isIntersecting) this.mount(this.byEl.get(e.target));
    }, {rootMargin: NEAR});
    this.far = new IntersectionObserver((entries) => {
      for (const e of entries) if (!e.isIntersecting) this.unmount(this.byEl.get(e.target));
    }, {rootMargin: FAR});
  }

  // start makes the live page, holding everything after seq lo, and when
  // lo > 0 a box for the older pages until olderPages() cuts them.
  start(lo) {
    if (lo > 0) {
      this.pending = h('div', {class: 'page older-pending', dataset: {state: 'pending'}, text: 'Loading older history…'});
      this.root.append(this.pending);
    }
    this.live = this.add(new Page(lo, Infinity, 0), null);
    this.pages.push(this.live);
    this.live.events = [];
    this.live.tl = this.timeline(this.live);
    this.live.state = 'mounted';
    this.live.el.dataset.state = 'mounted';
  }

  add(p, before) {
    this.byEl.set(p.el, p);
    this.root.insertBefore(p.el, before);
    this.near.observe(p.el);
    this.far.observe(p.el);
    return p;
  }

  timeline(p) {
    return new Timeline(p.el, Object.assign({}, this.opts.timeline, {index: this.index}));
  }

  // olderPages replaces the pending box with the pages before the live one.
  olderPages(cuts) {
    const before = this.pending || this.pages[0].el;
    // The turns on screen tell how tall the others may be.
    for (const p of this.pages) if (p.state === 'mounted' && !p.height) p.height = p.el.offsetHeight;
    const per = this.perTurn();
    const made = cuts.map((c) => {
      const p = new Page(c.lo, c.hi, c.turns);
      p.el.style.height = this.estimate(p, per) + 'px';
      return p;
    });
    for (const p of made) this.add(p, before);
    this.pages.unshift(...made);
    if (this.pending) {
      this.pending.remove();
      this.pending = null;
    }
  }

  // olderFailed says in the pending box that older history cannot be read.
  olderFailed(message) {
    if (this.pending) this.pending.textContent = 'Older history could not be read: ' + message;
  }

  // perTurn is the average height of the turns measured so far.
  perTurn() {
    let px = 0;
    let turns = 0;
    for (const q of this.pages) {
      if (q.height && q.turns) {
        px += q.height;
        turns += q.turns;
      }
    }
    return turns ? px / turns : TURN_PX;
  }

  // estimate is the height of a page never measured: its turns at the
  // average height of a turn.
  estimate(p, per = this.perTurn()) {
    return Math.max(40, Math.round(per * Math.max(1, p.turns)));
  }

  // addStored appends events read from the log to the live page and draws
  // them, a slice at a time (before the stream starts: live events would
  // otherwise be drawn before the slices reach the stored ones).
  async addStored(events) {
    const p = this.live;
    const from = p.events.length;
    for (const ev of events) {
      this.index.observe(ev);
      if (ev.type === 'turn.created') p.turns++;
      p.events.push(ev);
    }
    if (p.state === 'mounted') {
      const gen = p.gen;
      await applySliced(p.tl, p.events, () => gen !== p.gen || p.tl === null, from);
    }
  }

  // forgetAfter drops the live page's events after seq (the stream sends
  // them again); what they drew stays, and applying them again changes
  // nothing.
  forgetAfter(seq) {
    const evs = this.live.events;
    let i = evs.length;
    while (i > 0 && typeof evs[i - 1].seq === 'number' && evs[i - 1].seq > seq) i--;
    evs.length = i;
  }

  // apply takes one event of the live stream.
  apply(ev) {
    const fresh = ev.type === 'turn.created' && ev.turn_id && !this.index.get(ev.turn_id);
    this.index.observe(ev);
    let p = this.live;
    if (fresh) {
      if (p.turns >= LIVE_TURNS && typeof ev.seq === 'number') p = this.rollOver(ev.seq - 1);
      p.turns++;
    }
    p.events.push(ev);
    if (p.state === 'mounted') p.tl.apply(ev);
    // While it is loading, applySliced reaches the event in its turn.
  }

  // rollOver ends the live page at seq and opens the next one.
  rollOver(seq) {
    const old = this.live;
    old.hi = seq;
    old.el.dataset.hi = String(seq);
    const p = this.add(new Page(seq, Infinity, 0), null);
    this.pages.push(p);
    p.events = [];
    if (old.state !== 'placeholder') {
      p.tl = this.timeline(p);
      p.state = 'mounted';
      p.el.dataset.state = 'mounted';
    } else {
      p.el.style.height = '0px';
    }
    this.live = p;
    return p;
  }

  // mounted returns the Timelines on screen.
  mounted() {
    return this.pages.filter((p) => p.tl && p.state === 'mounted').map((p) => p.tl);
  }

  async mount(p) {
    if (!p || p.state !== 'placeholder') return;
    const gen = ++p.gen;
    p.state = 'loading';
    p.el.dataset.state = 'loading';
    p.used = ++this.clock;
    if (!p.events) {
      try {
        p.events = await this.read(p.lo, p.hi);
      } catch (err) {
        if (gen !== p.gen) return;
        p.state = 'placeholder';
        p.el.dataset.state = 'failed';
        clear(p.el).append(h('div', {class: 'page-error'}, 'Reading this part of the history failed: ' + err.message + ' ',
          h('button', {type: 'button', class: 'small', text: 'Retry', onclick: () => this.mount(p)})));
        return;
      }
      if (gen !== p.gen) return;
      p.turns = p.events.filter((ev) => ev.type === 'turn.created').length || p.turns;
      this.dropOldEvents();
    }
    clear(p.el);
    p.tl = this.timeline(p);
    const done = await applySliced(p.tl, p.events, () => gen !== p.gen);
    if (!done || gen !== p.gen) return;
    p.tl.markBranch();
    p.el.style.height = '';
    p.state = 'mounted';
    p.el.dataset.state = 'mounted';
    requestAnimationFrame(() => {
      if (p.state === 'mounted') p.height = p.el.offsetHeight;
    });
    this.opts.onLayout();
  }

  unmount(p) {
    if (!p || p.state === 'placeholder' || (this.opts.keep && this.opts.keep(p.el))) return;
    if (p.state === 'mounted') p.height = p.el.offsetHeight || p.height;
    p.gen++;
    if (p.tl) p.tl.dispose();
    p.tl = null;
    p.el.style.height = (p.height || this.estimate(p)) + 'px';
    clear(p.el);
    p.state = 'placeholder';
    p.el.dataset.state = 'placeholder';
  }

  // dropOldEvents forgets the events of the least recently used pages
  // that are off screen, beyond KEEP_EVENTS pages (they are read again).
  dropOldEvents() {
    const kept = this.pages.filter((p) => p.events && p !== this.live && p.state === 'placeholder');
    if (kept.length <= KEEP_EVENTS) return;
    kept.sort((a, b) => a.used - b.used);
    for (const p of kept.slice(0, kept.length - KEEP_EVENTS)) p.events = null;
  }

  // read returns the stored events with lo < seq <= hi. The log is read
  // forward (the API has no upper bound): a limit of hi minus the last seq
  // seen covers what is left, seqs being distinct, so a page costs one
  // request, and what it reads past hi is dropped.
  async read(lo, hi) {
    const out = [];
    let cursor = '';
    let last = lo;
    for (;;) {
      const limit = Math.min(1000, Math.max(20, hi - last));
      const page = await api(this.opts.eventsURL + '?limit=' + limit +
        (cursor ? '&cursor=' + encodeURIComponent(cursor) : '&after=' + lo));
      for (const ev of page.data || []) {
        if (ev.seq > hi) return out;
        out.push(ev);
        last = ev.seq;
      }
      if (!page.next_cursor) return out;
      cursor = page.next_cursor;
    }
  }

  // showLatest makes sure the live page is mounted.
  showLatest() {
    if (this.live.state === 'placeholder') this.mount(this.live);
  }
}
