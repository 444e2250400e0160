// The status page: hash routes (#/ overview, #/schedules, #/jobs/<id>), the
// live event stream and the refresh timers. Each view is an object with
// el (its root element), refresh() and optionally onSchedule(id),
// onRun(id) and stop().
import { coalescer, fmtUTC } from './dom.js';
import { url } from './api.js';
import { overviewView } from './overview.js';
import { schedulesView } from './schedules.js';
import { jobView } from './job.js';

const main = document.getElementById('main');
const liveEl = document.getElementById('live-status');
const updatedEl = document.getElementById('updated');

// The schedules view keeps its filters, sort and page across visits.
const tableState = { q: '', category: '', status: '', sort: 'id', order: 'asc', offset: 0, limit: 50 };
let view = null;

/** stamp shows when the view last got data. */
function stamp() {
  updatedEl.textContent = `updated ${fmtUTC(new Date().toISOString()).slice(11)}`;
}

function route() {
  const hash = location.hash || '#/';
  if (view && view.stop) view.stop();
  // The stamp is the shown view's: a new view has no data yet.
  updatedEl.textContent = '';
  let next;
  let m;
  if ((m = /^#\/jobs\/(.+)$/.exec(hash))) {
    let id;
    try { id = decodeURIComponent(m[1]); } catch { id = m[1]; }
    next = jobView(id, stamp);
  } else if (hash.startsWith('#/schedules')) {
    next = schedulesView(tableState, stamp);
  } else {
    next = overviewView(stamp);
  }
  view = next;
  for (const a of document.querySelectorAll('header nav a')) {
    const target = a.getAttribute('href');
    const on = target === '#/' ? next.name === 'overview' : next.name === 'schedules' && target === '#/schedules';
    if (on) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  main.replaceChildren(next.el);
  document.title = next.title ? `${next.title} · cronswap` : 'cronswap';
  next.refresh();
}

// Live updates. The EventSource reconnects by itself after an error; the
// indicator follows its state. On a (re)connect everything shown is
// refetched, since events may have been missed while offline.
let scheduleIDs = new Set();
const onSchedule = coalescer(() => {
  const ids = scheduleIDs;
  scheduleIDs = new Set();
  if (view && view.onSchedule) view.onSchedule(ids);
}, 200);
let runIDs = new Set();
const onRun = coalescer(() => {
  const ids = runIDs;
  runIDs = new Set();
  if (view && view.onRun) view.onRun(ids);
}, 1000);

// The indicator says "connecting…" until the stream first opens or fails
// (index.html), so the first paint never claims "offline"; then "live"
// while it is open, "offline" while the browser reconnects.
function setLive(on) {
  const state = on ? 'live' : 'offline';
  liveEl.textContent = state;
  liveEl.setAttribute('data-state', state);
  liveEl.classList.remove('connecting');
  liveEl.classList.toggle('on', on);
  liveEl.classList.toggle('offline', !on);
}

function parseID(ev) {
  try { return String(JSON.parse(ev.data).id ?? ''); } catch { return ''; }
}

function connect() {
  const es = new EventSource(url('api/events'));
  let wasOpen = false;
  es.addEventListener('open', () => {
    setLive(true);
    if (wasOpen && view) view.refresh();
    wasOpen = true;
  });
  es.addEventListener('error', () => setLive(es.readyState === EventSource.OPEN));
  es.addEventListener('hello', (ev) => {
    try { liveEl.title = `event stream of ${JSON.parse(ev.data).instance_id}`; } catch { /* keep the title */ }
  });
  es.addEventListener('schedule', (ev) => { scheduleIDs.add(parseID(ev)); onSchedule(); });
  es.addEventListener('run', (ev) => { runIDs.add(parseID(ev)); onRun(); });
}

// The slow periodic refresh: the overview's ages and counts, and a job's
// runs by other replicas (run events come from this replica only).
setInterval(() => { if (view && view.onTick) view.onTick(); }, 10000);

window.addEventListener('hashchange', route);
route();
connect();
