// The page's actions (docs/ui.md#actions): run now, disable / enable,
// resume after failures, and the retime form with its live preview. They
// are offered only when /api/session says the token may write; otherwise
// the page says why it is read-only. Every action is a POST with a JSON
// body to the daemon, which runs the command line's own code.
import { h, zoned, debounce } from './dom.js';
import { getJSON, postJSON, getSession } from './api.js';

const enc = encodeURIComponent;

/** runAction posts one action and reports its outcome in out (an element); it returns the answer or null. */
export async function runAction(out, label, path, body, describe) {
  out.hidden = false;
  out.className = 'outcome pending';
  out.textContent = `${label}…`;
  try {
    const res = await postJSON(path, body);
    out.className = 'outcome ok';
    out.textContent = describe(res);
    return res;
  } catch (e) {
    out.className = 'outcome failed';
    out.textContent = `${label} refused: ${e.message}`;
    return null;
  }
}

/** runNowText describes a run-now answer. */
export function runNowText(res) {
  return `Run of ${res.job_id} requested by ${res.requested_by}: run ${res.run_id} (it shows in the timeline once a daemon starts it).`;
}

/** enabledText describes an enable/disable answer. */
export function enabledText(res, by) {
  const what = res.enabled ? 'enabled' : 'disabled';
  return res.changed ? `${res.id} ${what} by ${by}.` : `${res.id} was already ${what}.`;
}

/** readOnlyNote is the page's word on why it offers no action. */
export function readOnlyNote(s) {
  return h('p', { class: 'muted small read-only', testid: 'read-only' }, s.read_only || 'read-only');
}

function previewList(p) {
  if (!p.valid) return h('p', { class: 'err', testid: 'retime-error' }, p.error);
  const items = (p.next_runs || []).slice(0, 5).map((f) => {
    const z = zoned(f.at_local, f.at);
    return h('li', { testid: 'preview-run', class: f.shifted || f.repeat || f.note ? 'dst' : null },
      z.local, z.utc ? h('span', { class: 'sub' }, ` ${z.utc}`) : null,
      f.shifted ? h('span', { class: 'tag dst-tag' }, 'shifted') : null,
      f.repeat ? h('span', { class: 'tag dst-tag' }, 'repeated hour') : null);
  });
  return [
    p.warning ? h('p', { class: 'warn-text small' }, p.warning) : null,
    items.length ? h('ol', { class: 'next-runs' }, items) : h('p', { class: 'muted' }, 'No run: the job is disabled.'),
    h('p', { class: 'muted small' }, `In ${p.timezone}.`),
  ];
}

/**
 * jobActions is the job page's actions card, built once per view (a
 * refresh of the page keeps what the form holds). update(schedule) follows
 * the job's state; onDone is called after an action succeeded.
 */
export function jobActions(id, onDone) {
  const out = h('p', { class: 'outcome', testid: 'action-outcome', role: 'status', hidden: true });
  const body = h('div', {}, h('p', { class: 'muted small' }, 'Loading…'));
  const card = h('section', { class: 'card actions', testid: 'job-actions' }, h('h2', {}, 'Actions'), body, out);
  let session = null;
  let sc = null;
  let built = false;
  const expr = h('input', { type: 'text', testid: 'retime-expr', 'aria-label': 'Cron expression', class: 'mono', size: 24 });
  const tz = h('input', { type: 'text', testid: 'retime-tz', 'aria-label': 'Time zone', placeholder: 'daemon default', size: 20 });
  const preview = h('div', { testid: 'retime-preview', class: 'preview' });
  const submit = h('button', { type: 'submit', testid: 'retime-submit', disabled: true }, 'Retime');
  const toggle = h('button', { type: 'button', testid: 'action-toggle' }, '…');
  const resume = h('button', { type: 'button', testid: 'action-resume', hidden: true }, 'Resume after failures');
  const runNow = h('button', { type: 'button', testid: 'action-run-now' }, 'Run now');
  let previewSeq = 0;

  // What the form started from: only the fields changed are sent, so
  // that the daemon's default zone (shown when the job names none) is not
  // written into the job.
  const initial = { expr: '', tz: '' };
  function edit() {
    const e = {};
    if (expr.value !== initial.expr) e.cron_expr = expr.value;
    if (tz.value !== initial.tz) e.timezone = tz.value;
    return e;
  }

  async function refreshPreview() {
    const n = ++previewSeq;
    const e = edit();
    const q = new URLSearchParams(Object.keys(e).length ? e : { cron_expr: expr.value });
    try {
      const p = await getJSON(`api/schedules/${enc(id)}/preview?${q}`);
      if (n !== previewSeq) return;
      preview.replaceChildren(...[].concat(previewList(p)).filter(Boolean));
      preview.setAttribute('data-valid', String(p.valid));
      submit.disabled = !p.valid || Object.keys(edit()).length === 0;
    } catch (e) {
      if (n !== previewSeq) return;
      preview.replaceChildren(h('p', { class: 'err', testid: 'retime-error' }, e.message));
      preview.setAttribute('data-valid', 'false');
      submit.disabled = true;
    }
  }
  const onInput = debounce(refreshPreview, 250);
  expr.addEventListener('input', () => { submit.disabled = true; onInput(); });
  tz.addEventListener('input', () => { submit.disabled = true; onInput(); });

  function fill() {
    initial.expr = expr.value = sc.cron_expr || '';
    initial.tz = tz.value = sc.timezone || '';
    refreshPreview();
  }

  runNow.addEventListener('click', async () => {
    if (await runAction(out, 'Run now', `api/schedules/${enc(id)}/run-now`, {}, runNowText)) onDone();
  });
  toggle.addEventListener('click', async () => {
    const enable = !sc.enabled;
    const res = await runAction(out, enable ? 'Enable' : 'Disable', `api/schedules/${enc(id)}/${enable ? 'enable' : 'disable'}`, {},
      (r) => enabledText(r, session.user));
    if (res) { sc.enabled = res.enabled; showState(); onDone(); }
  });
  resume.addEventListener('click', async () => {
    const res = await runAction(out, 'Resume', `api/schedules/${enc(id)}/resume`, {},
      (r) => (r.resumed ? `${id} resumed after failures by ${session.user}.` : `${id} was not paused after failures.`));
    if (res) onDone();
  });
  const form = h('form', { testid: 'retime-form', class: 'retime' },
    h('label', {}, 'Expression ', expr), h('label', {}, 'Zone ', tz), submit,
    h('div', { class: 'sub' }, 'Checked with the daemons\' rules as you type; the next runs:'), preview);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const res = await runAction(out, 'Retime', `api/schedules/${enc(id)}/retime`, edit(),
      (r) => `${r.id} retimed by ${session.user}: ${r.cron_expr}${r.timezone ? ` in ${r.timezone}` : ''}` +
        `${r.warning ? ` (warning: ${r.warning})` : ''}; the daemons re-arm it now.`);
    if (res) {
      initial.expr = expr.value;
      initial.tz = tz.value;
      submit.disabled = true;
      onDone();
    }
  });

  function showState() {
    toggle.textContent = sc.enabled ? 'Disable' : 'Enable';
    toggle.setAttribute('data-action', sc.enabled ? 'disable' : 'enable');
    resume.hidden = !sc.failure_pause;
  }

  async function update(schedule) {
    sc = { ...schedule };
    if (!session) session = await getSession();
    if (!session.can_write) {
      body.replaceChildren(readOnlyNote(session));
      return;
    }
    if (!built) {
      built = true;
      body.replaceChildren(
        h('div', { class: 'buttons' }, runNow, toggle, resume,
          h('span', { class: 'muted small' }, `as ${session.user}`)),
        form);
      fill();
    }
    showState();
  }
  return { el: card, update };
}
