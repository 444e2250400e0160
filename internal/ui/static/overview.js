// The overview (#/): this replica, the live members, the job counts, the
// fires of the last hour and the missed slots of the last day, all from
// /api/overview.
import { h, ago, fmtSeconds, fmtUTC, fmtInt, badge, reader } from './dom.js';
import { getJSON } from './api.js';

function kv(label, value, attrs = {}) {
  return h('div', { class: 'kv' }, h('dt', {}, label), h('dd', attrs, value));
}

function tile(label, n, testid, cls) {
  return h('div', { class: ['tile', cls] },
    h('div', { class: 'tile-n', testid }, fmtInt(n)),
    h('div', { class: 'tile-label' }, label));
}

function render(o) {
  const now = Date.now();
  const jobs = o.jobs || {};
  const fires = Object.entries(o.fires_last_hour || {}).sort((a, b) => b[1] - a[1]);
  const firesTotal = fires.reduce((n, [, v]) => n + v, 0);
  const members = [...(o.members || [])].sort((a, b) => (b.self - a.self) || a.instance_id.localeCompare(b.instance_id));
  return [
    h('section', { class: 'card' },
      h('h2', {}, 'This replica'),
      h('dl', { class: 'kvs' },
        kv('Instance', o.instance_id || '—', { class: 'mono' }),
        kv('Host', o.host || '—'),
        kv('Watch mode', o.watch_mode || '—', { testid: 'watch-mode' }),
        kv('Ready', o.ready ? 'ready' : 'not ready', { testid: 'ready', class: o.ready ? 'good' : 'bad' }),
        o.ready ? null : kv('Why', o.not_ready || '—', { testid: 'not-ready', class: o.error_repeats ? 'bad' : null }),
        o.reload ? kv('Full read', `${o.reload.reason}: ${fmtInt(o.reload.documents)} documents `
          + `(${(o.reload.bytes / 1e6).toFixed(1)} MB), ${fmtInt(o.reload.documents_per_second)} a second, `
          + `started ${ago(o.reload.started_at, now)}`, { testid: 'reload-progress' }) : null,
        kv('Last change event', o.last_event_at ? `${ago(o.last_event_at, now)} (${fmtUTC(o.last_event_at)})` : 'none yet'),
        kv('Resume token', o.token_saved_at ? `saved ${fmtSeconds(o.token_age_seconds)} ago (${fmtUTC(o.token_saved_at)})` : 'none saved'))),
    h('section', { class: 'card' },
      h('h2', {}, 'Jobs'),
      h('div', { class: 'tiles' },
        tile('armed', jobs.armed, 'count-armed', 'good'),
        tile('paused after failures', jobs.paused, 'count-paused', jobs.paused ? 'warn' : ''),
        tile('erroring', jobs.erroring, 'count-erroring', jobs.erroring ? 'bad' : ''),
        tile('disabled', jobs.disabled, 'count-disabled', ''),
        tile('total', jobs.total, 'count-total', '')),
      h('div', { class: 'tiles' },
        h('div', { class: 'tile wide' },
          h('div', { class: 'tile-label' }, 'Fires in the last hour, by outcome'),
          h('div', { class: 'fires', testid: 'fires-last-hour' },
            fires.length === 0 ? h('span', { class: 'muted' }, 'none') :
              fires.map(([st, n]) => h('span', { class: 'fire' }, badge(st), ' ', fmtInt(n))),
            fires.length > 1 ? h('span', { class: 'muted' }, ` total ${fmtInt(firesTotal)}`) : null)),
        h('div', { class: ['tile', o.missed_last_day ? 'warn' : ''] },
          h('div', { class: 'tile-n', testid: 'missed-last-day' }, fmtInt(o.missed_last_day)),
          h('div', { class: 'tile-label' }, 'missed slots, last 24 h'))),
      h('p', { class: 'muted small' }, `Counts read ${o.counts_at ? ago(o.counts_at, now) : '—'}; `,
        h('a', { href: '#/schedules' }, 'all schedules'), '.')),
    h('section', { class: 'card' },
      h('h2', {}, `Live members (${members.length})`),
      h('table', { class: 'grid', testid: 'members-table' },
        h('thead', {}, h('tr', {},
          h('th', {}, 'Instance'), h('th', {}, 'Host'), h('th', { class: 'num' }, 'PID'),
          h('th', {}, 'Heartbeat'), h('th', {}, 'Lease until'), h('th', { class: 'num' }, 'Owned jobs'),
          h('th', { class: 'num' }, 'Armed jobs'))),
        h('tbody', {}, members.length === 0
          ? h('tr', {}, h('td', { colspan: 7, class: 'muted' }, 'no live member'))
          : members.map((m) => h('tr', { testid: 'member-row', 'data-instance': m.instance_id, class: m.self ? 'self' : null },
            h('td', { class: 'mono' }, m.instance_id, m.self ? h('span', { class: 'tag' }, 'this replica') : null),
            h('td', {}, m.host || '—'),
            h('td', { class: 'num' }, m.pid ?? '—'),
            h('td', {}, `${fmtSeconds(m.heartbeat_age_seconds)} ago`),
            h('td', {}, fmtUTC(m.lease_until)),
            h('td', { class: 'num', testid: 'member-owned' }, fmtInt(m.owned_jobs)),
            h('td', { class: 'num', testid: 'member-armed' }, fmtInt(m.armed_jobs), m.divides ? null : h('span', { class: 'muted' }, ' (all)')))))),
      h('p', { class: 'muted small' }, 'Owned jobs: the jobs, enabled or not, whose fires the member claims first ',
        '(rendezvous hashing over the live members); armed jobs: those whose timer it arms (every job, or its share ',
        'when the replicas divide the schedules), as ', h('code', {}, 'cronswap members list'), ' counts them.')),
  ];
}

/** overviewView is the #/ view. */
export function overviewView(stamp) {
  const body = h('div', { class: 'loading muted' }, 'Loading…');
  const msg = h('div', { class: 'alert', role: 'alert', hidden: true });
  const el = h('div', { testid: 'overview', class: 'view' }, h('h1', {}, 'Overview'), msg, body);
  // One read at a time: a refresh while one is on its way waits for it
  // (dom.js reader).
  const reads = reader(async (key, current) => {
    try {
      const o = await getJSON('api/overview');
      if (!current()) return;
      body.replaceChildren(...render(o));
      body.className = '';
      msg.hidden = true;
      stamp();
    } catch (e) {
      if (!current()) return;
      msg.textContent = `Could not read the overview: ${e.message}`;
      msg.hidden = false;
      if (body.className.includes('loading')) { body.replaceChildren(); body.className = ''; }
    }
  });
  const refresh = () => reads.ask('overview');
  return {
    name: 'overview', title: 'Overview', el, refresh,
    onRun: refresh, onTick: refresh,
    onSchedule: refresh,
    stop() { reads.stop(); },
  };
}
