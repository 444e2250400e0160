// One job (#/jobs/<id>): the schedule as applied, its next runs with
// daylight-saving shifts marked and its lock from
// /api/schedules/{id}/detail; its timeline and the chart of its runs from
// /api/schedules/{id}/timeline; the actions an operator may take
// (actions.js).
import { h, badge, zoned, fmtUTC, fmtMS, fmtInt, reader } from './dom.js';
import { getJSON } from './api.js';
import { chart } from './chart.js';
import { jobActions } from './actions.js';

// Timeline windows, widest first. A timeline holds at most 1000 entries
// and is cut at its end when the window has more, so a busy job's newest
// runs would be missing: the page then narrows the window.
const WINDOWS = [
  { from: '-7d', label: '7 days' },
  { from: '-24h', label: '24 hours' },
  { from: '-6h', label: '6 hours' },
  { from: '-1h', label: '1 hour' },
  { from: '-10m', label: '10 minutes' },
];

// What an operation entry's op reads as (docs/time.md#json).
const OPERATIONS = {
  run_now: 'run now',
  backfill: 'backfill',
  resume_after_failures: 'resume after failures',
};

function kv(label, value, attrs = {}) {
  return h('div', { class: 'kv' }, h('dt', {}, label), h('dd', attrs, value));
}

function json(v) {
  return v === null || v === undefined ? '(absent)' : JSON.stringify(v);
}

function lockState(lock) {
  if (!lock) return 'free (no replica holds its lock)';
  // A lock document outlives its run: an empty holder means free, and its
  // fence is the last run's.
  const parts = lock.holder ? [`held by ${lock.holder}`, `fence ${lock.fence}`] : ['free', `last fence ${lock.fence}`];
  if (lock.holder && lock.lease_until) parts.push(`lease until ${fmtUTC(lock.lease_until)}`);
  if (lock.run_id) parts.push(`run ${lock.run_id}`);
  if (lock.waiting) parts.push(`${lock.waiting} waiting`);
  if (lock.cancel) parts.push('cancel requested');
  return parts.join(' · ');
}

function entryDetails(e) {
  const d = [];
  switch (e.kind) {
    case 'run': {
      if (e.instance) d.push(h('span', { class: 'mono' }, e.instance));
      if (e.fence !== undefined && e.fence !== null) d.push(`fence ${e.fence}`);
      if (e.duration_ms !== undefined && e.duration_ms !== null) d.push(`took ${fmtMS(e.duration_ms)}`);
      if (e.started_at) d.push(`started ${fmtMS(new Date(e.started_at) - new Date(e.at))} late`);
      if (e.attempt) d.push(`attempt ${e.attempt}`);
      if (e.exit_code !== undefined && e.exit_code !== null) d.push(`exit ${e.exit_code}`);
      if (e.answer_status) d.push(h('span', { testid: 'answer', title: e.answer || null }, `answered ${e.answer_status}`));
      if (e.error) d.push(h('span', { class: 'err' }, e.error));
      break;
    }
    case 'skipped':
    case 'missed':
      if (e.reason) d.push(h('span', {}, `reason: ${e.reason}`));
      if (e.instance) d.push(h('span', { class: 'mono' }, e.instance));
      if (e.recorded_at) d.push(`recorded ${fmtUTC(e.recorded_at)}`);
      break;
    case 'edit':
      d.push(e.op || 'edit');
      if (e.updated_by) d.push(`by ${e.updated_by}`);
      if (e.update_message) d.push(h('q', { class: 'message', testid: 'edit-message' }, e.update_message));
      for (const c of e.changes || []) {
        d.push(h('span', { class: 'change' }, h('code', {}, c.field), ' ', h('code', {}, json(c.before)), ' → ', h('code', {}, json(c.after))));
      }
      break;
    case 'operation':
      d.push(OPERATIONS[e.op] || e.op);
      if (e.by) d.push(`by ${e.by}`);
      if (e.run_id) d.push(h('span', { class: 'mono' }, e.run_id));
      if (e.args) d.push(h('span', {}, 'args ', h('code', {}, JSON.stringify(e.args))));
      if (e.slots) {
        const s = e.slots;
        const counts = Object.keys(s.statuses || {}).sort().map((k) => `${fmtInt(s.statuses[k])} ${k}`).join(', ');
        d.push(`${fmtInt(s.count)} slot${s.count === 1 ? '' : 's'} ${fmtUTC(s.first)} → ${fmtUTC(s.last)}${counts ? `: ${counts}` : ''}`);
      }
      if (e.error) d.push(h('span', { class: 'err' }, e.error));
      break;
    case 'no_record':
      d.push(`${fmtInt(e.count || 1)} slot${(e.count || 1) === 1 ? '' : 's'}${e.last ? ` to ${fmtUTC(e.last)}` : ''}`);
      if (e.reason) d.push(e.reason === 'unrecorded' ? 'no record (no replica ran, skipped or recorded it)' : e.reason);
      break;
    default:
      break;
  }
  if (e.off_schedule) d.push(h('span', { class: 'tag' }, 'off schedule'));
  if (e.shifted) d.push(h('span', { class: 'tag dst-tag' }, 'DST shifted'));
  if (e.dst_note) d.push(h('span', { class: 'muted' }, e.dst_note));
  const out = [];
  d.forEach((x, i) => { if (i) out.push(' · '); out.push(x); });
  return out;
}

function timelineTable(tl) {
  const entries = [...(tl.entries || [])].reverse(); // newest first
  return h('table', { class: 'grid timeline', testid: 'timeline' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Time (UTC)'), h('th', {}, 'Kind'), h('th', {}, 'Outcome'), h('th', {}, 'Details'))),
    h('tbody', {}, entries.length === 0
      ? h('tr', {}, h('td', { colspan: 4, class: 'muted' }, 'nothing in this window'))
      : entries.map((e) => h('tr', { testid: 'timeline-entry', 'data-kind': e.kind, class: `k-${e.kind}` },
        h('td', { class: 'nowrap' }, fmtUTC(e.at)),
        h('td', {}, e.kind.replace('_', ' ')),
        h('td', {}, e.status ? badge(e.status) : ''),
        h('td', {}, entryDetails(e))))));
}

function nextRuns(list) {
  if ((list || []).length === 0) return h('p', { testid: 'next-runs', class: 'muted' }, 'None: the job is not armed.');
  return h('ol', { testid: 'next-runs', class: 'next-runs' },
    list.map((f) => {
      const dst = f.shifted || f.repeat || !!f.note;
      const z = zoned(f.at_local, f.at);
      return h('li', { testid: 'next-run', class: dst ? 'dst' : null },
        h('span', {}, z.local), z.utc ? [' ', h('span', { class: 'sub' }, z.utc)] : null,
        f.shifted ? h('span', { class: 'tag dst-tag' }, 'shifted') : null,
        f.repeat ? h('span', { class: 'tag dst-tag' }, 'repeated hour') : null,
        f.note ? h('div', { class: 'sub' }, f.note) : null);
    }));
}

// lastRun shows the job's last run (docs/http.md: the newest of its
// records that ran, a run-now as well as a cron slot), as the schedules
// table does.
function lastRun(lr) {
  if (!lr) return 'none';
  const runNow = lr.run_id.startsWith('trigger/');
  return [badge(lr.status), ' ', runNow ? `run now, requested ${fmtUTC(lr.scheduled_at)}` : `slot ${fmtUTC(lr.scheduled_at)}`,
    lr.started_at ? `, started ${fmtUTC(lr.started_at)}` : '',
    lr.instance_id ? [' on ', h('span', { class: 'mono' }, lr.instance_id)] : null,
    h('div', { class: 'sub mono' }, lr.run_id)];
}

// zoneNote says how the job's times read: in its zone, with UTC beside
// when the zone is not at UTC.
function zoneNote(tz) {
  const utc = !tz || tz === 'UTC' || tz === 'Etc/UTC';
  return `${utc ? 'In UTC' : `In ${tz}, with UTC beside when it differs`}; daylight-saving shifts marked.`;
}

function head(id, d) {
  return h('div', { class: 'job-head' }, h('h1', { class: 'mono' }, id), badge(d.status, { testid: 'job-status' }));
}

function render(id, d, tl, win, narrowed) {
  const sc = d.schedule;
  const fp = sc.failure_pause;
  const next = zoned(d.next_run_local, sc.next_run);
  return [
    h('div', { class: 'cols' },
      h('section', { class: 'card' },
        h('h2', {}, 'Schedule as applied'),
        h('dl', { class: 'kvs' },
          kv('Expression', h('code', {}, sc.cron_expr || '—'), { testid: 'job-expr' }),
          kv('Zone', sc.timezone || '—'),
          kv('Daylight saving', sc.dst || 'shift (default)'),
          kv('Enabled', sc.enabled ? 'yes' : 'no (disabled)'),
          kv('Armed', sc.armed ? 'yes' : 'no'),
          sc.ended ? kv('Ended', sc.ended, { testid: 'job-ended', class: 'warn-text' }) : null,
          kv('Action', sc.job || id),
          kv('Category', sc.category || '—'),
          kv('Owner', sc.owner || '—', { testid: 'job-owner', class: 'mono', title: 'the live member that claims its fires first' }),
          kv('Armed by', sc.armed_by ? sc.armed_by.join(', ') : 'every live member', {
            testid: 'job-armed-by', class: 'mono',
            title: 'the live members whose timer fires the job: its owner and its next owner when the replicas divide the schedules' }),
          kv('Next run', sc.next_run ? (next.utc ? `${next.local} (${next.utc})` : next.local) : '—'),
          kv('Last run', lastRun(d.last_run), { testid: 'job-last-run', 'data-run-id': d.last_run ? d.last_run.run_id : '' }),
          kv('Last error', sc.last_error || '', { testid: 'job-error', class: 'err' }),
          fp ? kv('Paused after failures', `${fp.failures} failed slots since ${fmtUTC(fp.paused_at)}: ${fp.note}`, { class: 'warn-text' }) : null,
          kv('Lock', lockState(d.lock), { testid: 'lock-state' }))),
      h('section', { class: 'card' },
        h('h2', {}, 'Next runs'),
        h('p', { class: 'muted small', testid: 'zone-note' }, zoneNote(sc.timezone)),
        nextRuns(d.next_runs))),
    h('section', { class: 'card' },
      h('h2', {}, 'Runs: duration and start lateness'),
      h('div', { testid: 'chart', class: 'chart-box' }, chart(tl.entries, tl.from, tl.to))),
    h('section', { class: 'card' },
      h('h2', {}, 'Timeline ', h('span', { class: 'muted small' }, `${fmtUTC(tl.from)} → ${fmtUTC(tl.to)}, newest first`)),
      win,
      narrowed ? h('p', { class: 'muted small' }, `Narrowed to the last ${narrowed}: a wider window holds more than 1000 entries.`) : null,
      tl.truncated ? h('p', { class: 'muted small' }, `Cut at 1000 entries (up to ${fmtUTC(tl.next_from)}).`) : null,
      timelineTable(tl)),
  ];
}

/** jobView is the #/jobs/<id> view. */
export function jobView(id, stamp) {
  const body = h('div', { class: 'loading muted' }, 'Loading…');
  const msg = h('div', { class: 'alert', role: 'alert', hidden: true });
  const top = h('div', {});
  // The actions card stays in place across refreshes (what its form
  // holds, and the focus, survive them).
  const actions = jobActions(id, () => refresh());
  actions.el.hidden = true;
  const el = h('div', { testid: 'job-page', 'data-job-id': id, class: 'view' },
    h('p', { class: 'crumbs' }, h('a', { href: '#/schedules' }, '‹ Schedules')), msg, top, actions.el, body);
  let chosen = 1; // 24 hours
  let used = chosen;
  const win = h('select', { 'aria-label': 'Timeline window', class: 'win' },
    WINDOWS.map((w, i) => h('option', { value: String(i) }, `last ${w.label}`)));
  win.value = String(chosen);
  win.addEventListener('change', () => { chosen = Number(win.value); used = chosen; refresh(); });
  const enc = encodeURIComponent(id);

  async function timeline(current) {
    for (let i = used; ; i++) {
      const tl = await getJSON(`api/schedules/${enc}/timeline?from=${WINDOWS[i].from}`);
      if (!tl.truncated || i === WINDOWS.length - 1 || !current()) {
        used = i;
        return tl;
      }
    }
  }

  // One read at a time per window: a refresh while one is on its way
  // waits for it (dom.js reader).
  const reads = reader(async (key, current) => {
    try {
      const [d, tl] = await Promise.all([getJSON(`api/schedules/${enc}/detail`), timeline(current)]);
      if (!current()) return;
      top.replaceChildren(head(id, d));
      body.replaceChildren(...render(id, d, tl, win, used !== chosen ? WINDOWS[used].label : ''));
      body.className = '';
      actions.el.hidden = false;
      actions.update(d.schedule);
      msg.hidden = true;
      stamp();
    } catch (e) {
      if (!current()) return;
      msg.textContent = e.status === 404 ? `No job ${id} is known to this daemon.` : `Could not read job ${id}: ${e.message}`;
      msg.hidden = false;
      if (body.className.includes('loading')) { body.replaceChildren(); body.className = ''; }
    }
  });
  const refresh = () => reads.ask(String(chosen));
  const mine = (ids) => ids.has('') || ids.has(id);
  return {
    name: 'job', title: id, el, refresh,
    onSchedule(ids) { if (mine(ids)) refresh(); },
    onRun(ids) { if (mine(ids)) refresh(); },
    onTick: refresh,
    stop() { reads.stop(); },
  };
}
