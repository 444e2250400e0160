// The schedules table (#/schedules): one page of rows from
// /api/schedule-rows, filtered, sorted and paged by the server, so the DOM
// holds one page however many jobs there are.
import { h, badge, fmtLocal, fmtUTC, fmtInt, ago, jobHref, debounce } from './dom.js';
import { getJSON } from './api.js';

const STATUSES = ['armed', 'paused', 'disabled', 'error', 'unarmed', 'missed'];
const COLUMNS = [
  { key: 'id', label: 'Job', sort: 'id' },
  { key: 'cron_expr', label: 'Expression · zone', sort: 'cron_expr' },
  { key: 'category', label: 'Category', sort: 'category' },
  { key: 'status', label: 'Status', sort: 'status' },
  { key: 'next_run', label: 'Next run', sort: 'next_run' },
  { key: 'last_run', label: 'Last run' },
  { key: 'last_error', label: 'Last error' },
];

function rowOf(r, now) {
  const missed = (r.missed_last_day || 0) > 0;
  const lr = r.last_run;
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
  h('td', { testid: 'cell-next-run' },
    r.next_run ? [h('div', {}, fmtLocal(r.next_run_local)), h('div', { class: 'sub' }, fmtUTC(r.next_run))] :
      h('span', { class: 'muted' }, '—')),
  h('td', { testid: 'cell-last-run' },
    lr ? [badge(lr.status), ' ', h('span', { title: fmtUTC(lr.scheduled_at) }, ago(lr.scheduled_at, now)),
      lr.instance_id ? h('div', { class: 'sub mono' }, lr.instance_id) : null] :
      h('span', { class: 'muted' }, 'none')),
  h('td', { testid: 'cell-error', class: 'err', title: r.last_error || null }, r.last_error || ''));
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
  const prev = h('button', { type: 'button', testid: 'page-prev' }, '‹ Prev');
  const next = h('button', { type: 'button', testid: 'page-next' }, 'Next ›');
  const info = h('span', { testid: 'page-info', class: 'page-info' }, '');
  const total = h('span', { testid: 'rows-total' }, '');
  const msg = h('div', { class: 'alert', role: 'alert', hidden: true });
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
  const tbody = h('tbody', {});
  const table = h('table', { class: 'grid schedules', testid: 'schedules-table' },
    h('thead', {}, h('tr', {}, heads)), tbody);
  const el = h('div', { class: 'view' },
    h('h1', {}, 'Schedules ', h('span', { class: 'count' }, total, ' jobs')),
    h('div', { class: 'controls' }, search, category, status, h('span', { class: 'spacer' }), prev, info, next),
    msg, table);

  let seq = 0;
  let stopped = false;
  let lastTotal = 0;

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

  async function refresh() {
    const n = ++seq;
    showSort();
    const p = new URLSearchParams();
    if (state.q) p.set('q', state.q);
    if (state.category) p.set('category', state.category);
    if (state.status) p.set('status', state.status);
    p.set('sort', state.sort);
    p.set('order', state.order);
    p.set('offset', String(state.offset));
    p.set('limit', String(state.limit));
    try {
      const res = await getJSON(`api/schedule-rows?${p}`);
      if (stopped || n !== seq) return;
      if (res.items.length === 0 && res.total > 0 && state.offset > 0) {
        // The page is past the end (jobs went away): go to the last page.
        state.offset = Math.max(0, Math.floor((res.total - 1) / state.limit) * state.limit);
        refresh();
        return;
      }
      setCategories(res.categories || []);
      const now = Date.now();
      tbody.replaceChildren(...(res.items.length ? res.items.map((r) => rowOf(r, now))
        : [h('tr', {}, h('td', { colspan: COLUMNS.length, class: 'muted empty' }, 'No job matches.'))]));
      lastTotal = res.total;
      total.textContent = fmtInt(res.total);
      const first = res.total === 0 ? 0 : res.offset + 1;
      const last = res.offset + res.items.length;
      info.textContent = `${fmtInt(first)}–${fmtInt(last)} of ${fmtInt(res.total)}`;
      prev.disabled = res.offset === 0;
      next.disabled = last >= res.total;
      msg.hidden = true;
      stamp();
    } catch (e) {
      if (stopped || n !== seq) return;
      msg.textContent = `Could not read the schedules: ${e.message}`;
      msg.hidden = false;
    }
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
    stop() { stopped = true; onSearch.cancel(); },
  };
}
