// The schedules table (#/schedules): one page of rows from
// /api/schedule-rows, filtered, sorted and paged by the server, so the DOM
// holds one page however many jobs there are; for an operator, each row's
// run-now and disable / enable (actions.js).
import { h, badge, zoned, fmtUTC, fmtInt, ago, jobHref, debounce, reader } from './dom.js';
import { getJSON, getSession } from './api.js';
import { runAction, runNowText, enabledText, readOnlyNote } from './actions.js';

const STATUSES = ['armed', 'paused', 'disabled', 'error', 'ended', 'unarmed', 'missed'];
const COLUMNS = [
  { key: 'id', label: 'Job', sort: 'id' },
  { key: 'cron_expr', label: 'Expression · zone', sort: 'cron_expr' },
  { key: 'category', label: 'Category', sort: 'category' },
  { key: 'status', label: 'Status', sort: 'status' },
  { key: 'owner', label: 'Owner' },
  { key: 'next_run', label: 'Next run', sort: 'next_run' },
  { key: 'last_run', label: 'Last run' },
  { key: 'last_error', label: 'Last error' },
];

// lastRunCell shows a job's last run (docs/http.md: the newest of its
// records that ran, a run-now as well as a cron slot): its status, when it
// started, a mark for a run-now, and the replica that ran it.
function lastRunCell(lr, now) {
  if (!lr) return h('td', { testid: 'cell-last-run' }, h('span', { class: 'muted' }, 'none'));
  const runNow = lr.run_id.startsWith('trigger/');
  const title = `run ${lr.run_id}; ${runNow ? 'requested' : 'slot'} ${fmtUTC(lr.scheduled_at)}` +
    (lr.started_at ? `, started ${fmtUTC(lr.started_at)}` : '');
  return h('td', { testid: 'cell-last-run', 'data-run-id': lr.run_id },
    badge(lr.status), ' ', h('span', { title }, ago(lr.started_at || lr.scheduled_at, now)),
    runNow ? h('span', { class: 'tag' }, 'run now') : null,
    lr.instance_id ? h('div', { class: 'sub mono' }, lr.instance_id) : null);
}

// actionsCell holds a row's actions (an operator's page only): run now
// and disable / enable; out shows their outcome above the table.
function actionsCell(r, session, out, done) {
  if (r.invalid_id) return h('td', { testid: 'cell-actions' });
  const enc = encodeURIComponent(r.id);
  const run = h('button', { type: 'button', testid: 'row-run-now', class: 'small-btn' }, 'Run now');
  run.addEventListener('click', async () => {
    if (await runAction(out, `Run ${r.id} now`, `api/schedules/${enc}/run-now`, {}, runNowText)) done();
  });
  const toggle = h('button', { type: 'button', testid: 'row-toggle', class: 'small-btn', 'data-action': r.enabled ? 'disable' : 'enable' },
    r.enabled ? 'Disable' : 'Enable');
  toggle.addEventListener('click', async () => {
    const verb = r.enabled ? 'disable' : 'enable';
    if (await runAction(out, `${verb[0].toUpperCase()}${verb.slice(1)} ${r.id}`, `api/schedules/${enc}/${verb}`, {},
      (res) => enabledText(res, session.user))) done();
  });
  return h('td', { testid: 'cell-actions', class: 'row-actions' }, run, toggle);
}

function rowOf(r, now, act) {
  const missed = (r.missed_last_day || 0) > 0;
  const next = zoned(r.next_run_local, r.next_run);
  return h('tr', {
    testid: 'schedule-row', 'data-job-id': r.id, 'data-status': r.status,
    class: [r.status === 'error' ? 'row-error' : '', missed ? 'row-missed' : ''],
  },
  h('td', { testid: 'cell-id', class: 'mono' },
    r.invalid_id ? h('span', { title: 'refused: its _id is not a job id' }, r.id) : h('a', { href: jobHref(r.id) }, r.id),
    r.job && r.job !== r.id ? h('div', { class: 'sub' }, `runs ${r.job}`) : null),
  h('td', { testid: 'cell-expr' },
    h('code', {}, r.cron_expr || '—'),
    h('div', { class: 'sub' }, r.timezone || '', r.dst ? ` · dst ${r.dst}` : '')),
  h('td', {}, r.category || h('span', { class: 'muted' }, '—')),
  h('td', { testid: 'cell-status' },
    badge(r.status, r.failure_pause ? { title: r.failure_pause.note } : {}),
    missed ? h('div', { class: 'sub warn-text' }, `${fmtInt(r.missed_last_day)} missed, 24 h`) : null),
  h('td', { testid: 'cell-owner', class: 'mono' }, r.owner || h('span', { class: 'muted' }, '—')),
  h('td', { testid: 'cell-next-run' },
    r.next_run ? [h('div', {}, next.local), next.utc ? h('div', { class: 'sub' }, next.utc) : null] :
      h('span', { class: 'muted' }, '—')),
  lastRunCell(r.last_run, now),
  h('td', { testid: 'cell-error', class: 'err', title: r.last_error || null }, r.last_error || ''),
  act ? act(r) : null);
}

/** schedulesView is the #/schedules view; state (filters, sort, page) outlives it. */
export function schedulesView(state, stamp) {
  const search = h('input', {
    type: 'search', testid: 'search', placeholder: 'Search id, expression, job, category', value: state.q,
    'aria-label': 'Search',
  });
  const category = h('select', { testid: 'filter-category', 'aria-label': 'Category' },
    h('option', { value: '' }, 'All categories'));
  if (state.category) category.appendChild(h('option', { value: state.category }, state.category));
  category.value = state.category;
  const status = h('select', { testid: 'filter-status', 'aria-label': 'Status' },
    h('option', { value: '' }, 'Any status'),
    STATUSES.map((s) => h('option', { value: s }, s === 'missed' ? 'missed a slot (24 h)' : s)));
  status.value = state.status;
  // Until the first answer the table says it is loading: no empty table,
  // no count, no pager.
  const prev = h('button', { type: 'button', testid: 'page-prev', disabled: true }, '‹ Prev');
  const next = h('button', { type: 'button', testid: 'page-next', disabled: true }, 'Next ›');
  const info = h('span', { testid: 'page-info', class: 'page-info' }, '');
  const total = h('span', { testid: 'rows-total' }, '…');
  const msg = h('div', { class: 'alert', role: 'alert', hidden: true });
  const outcome = h('p', { class: 'outcome', testid: 'table-outcome', role: 'status', hidden: true });
  const note = h('div', {});
  let session = null;
  let act = null;
  const heads = COLUMNS.map((c) => {
    if (!c.sort) return h('th', { scope: 'col' }, c.label);
    const btn = h('button', { type: 'button', class: 'sort', testid: `sort-${c.sort}` }, c.label, h('span', { class: 'arrow' }));
    btn.addEventListener('click', () => {
      if (state.sort === c.sort) state.order = state.order === 'asc' ? 'desc' : 'asc';
      else { state.sort = c.sort; state.order = 'asc'; }
      state.offset = 0;
      refresh();
    });
    return h('th', { scope: 'col', 'data-sort': c.sort }, btn);
  });
  const tbody = h('tbody', {},
    h('tr', { testid: 'rows-loading' }, h('td', { colspan: COLUMNS.length, class: 'muted empty' }, 'Loading…')));
  const headRow = h('tr', {}, heads);
  const table = h('table', { class: 'grid schedules', testid: 'schedules-table' },
    h('thead', {}, headRow), tbody);
  const el = h('div', { class: 'view' },
    h('h1', {}, 'Schedules ', h('span', { class: 'count' }, total, ' jobs')),
    h('div', { class: 'controls' }, search, category, status, h('span', { class: 'spacer' }), prev, info, next),
    note, msg, outcome, table);

  // An operator's page gets a column of actions; any other says why not.
  async function withSession() {
    if (session) return;
    session = await getSession();
    if (session.can_write) {
      headRow.appendChild(h('th', { scope: 'col', class: 'actions-col' }, 'Actions'));
      table.classList.add('with-actions');
      act = (r) => actionsCell(r, session, outcome, () => refresh());
    } else {
      note.replaceChildren(readOnlyNote(session));
    }
  }

  let lastTotal = 0;
  let loaded = false;

  function showSort() {
    for (const th of heads) {
      const key = th.getAttribute('data-sort');
      if (!key) continue;
      const on = key === state.sort;
      th.setAttribute('aria-sort', on ? (state.order === 'asc' ? 'ascending' : 'descending') : 'none');
      th.querySelector('.arrow').textContent = on ? (state.order === 'asc' ? ' ▲' : ' ▼') : '';
    }
  }

  function setCategories(cats) {
    const want = ['', ...cats];
    if (state.category && !cats.includes(state.category)) want.push(state.category);
    const have = [...category.options].map((o) => o.value);
    if (have.join('\n') === want.join('\n')) return;
    category.replaceChildren(...want.map((c) => h('option', { value: c }, c === '' ? 'All categories' : c)));
    category.value = state.category;
  }

  // One read of the table at a time per query: a refresh while the same
  // page is on its way waits for it (dom.js reader).
  const reads = reader(async (query, current) => {
    try {
      await withSession();
      const res = await getJSON(`api/schedule-rows?${query}`);
      if (!current()) return;
      if (res.items.length === 0 && res.total > 0 && state.offset > 0) {
        // The page is past the end (jobs went away): go to the last page.
        state.offset = Math.max(0, Math.floor((res.total - 1) / state.limit) * state.limit);
        refresh();
        return;
      }
      setCategories(res.categories || []);
      const now = Date.now();
      tbody.replaceChildren(...(res.items.length ? res.items.map((r) => rowOf(r, now, act))
        : [h('tr', {}, h('td', { colspan: COLUMNS.length + (act ? 1 : 0), class: 'muted empty' }, 'No job matches.'))]));
      lastTotal = res.total;
      loaded = true;
      total.textContent = fmtInt(res.total);
      const first = res.total === 0 ? 0 : res.offset + 1;
      const last = res.offset + res.items.length;
      info.textContent = `${fmtInt(first)}–${fmtInt(last)} of ${fmtInt(res.total)}`;
      prev.disabled = res.offset === 0;
      next.disabled = last >= res.total;
      msg.hidden = true;
      stamp();
    } catch (e) {
      if (!current()) return;
      msg.textContent = `Could not read the schedules: ${e.message}`;
      msg.hidden = false;
      if (!loaded) {
        tbody.replaceChildren(h('tr', {}, h('td', { colspan: COLUMNS.length, class: 'muted empty' }, 'Not loaded.')));
      }
    }
  });

  function refresh() {
    showSort();
    const p = new URLSearchParams();
    if (state.q) p.set('q', state.q);
    if (state.category) p.set('category', state.category);
    if (state.status) p.set('status', state.status);
    p.set('sort', state.sort);
    p.set('order', state.order);
    p.set('offset', String(state.offset));
    p.set('limit', String(state.limit));
    reads.ask(p.toString());
  }

  const onSearch = debounce(() => {
    if (search.value === state.q) return;
    state.q = search.value;
    state.offset = 0;
    refresh();
  }, 250);
  search.addEventListener('input', onSearch);
  category.addEventListener('change', () => { state.category = category.value; state.offset = 0; refresh(); });
  status.addEventListener('change', () => { state.status = status.value; state.offset = 0; refresh(); });
  prev.addEventListener('click', () => { state.offset = Math.max(0, state.offset - state.limit); refresh(); });
  next.addEventListener('click', () => {
    if (state.offset + state.limit < lastTotal) { state.offset += state.limit; refresh(); }
  });

  return {
    name: 'schedules', title: 'Schedules', el, refresh,
    onSchedule: refresh, onRun: refresh, onTick: refresh,
    stop() { reads.stop(); onSearch.cancel(); },
  };
}
