// Small DOM helpers. Every value reaches the page as a text node or an
// attribute value (never as markup), so nothing needs escaping by hand.

const SVG_NS = 'http://www.w3.org/2000/svg';

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'testid') el.setAttribute('data-testid', v);
    else if (k === 'class') el.setAttribute('class', Array.isArray(v) ? v.filter(Boolean).join(' ') : v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

/** h creates an HTML element with attributes (testid → data-testid, on* → listeners) and children. */
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** s creates an SVG element, like h. */
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

/** pad2 pads a number to two digits. */
const pad2 = (n) => String(n).padStart(2, '0');

/** fmtUTC renders an RFC 3339 time as "2026-12-01 21:50:05Z"; "—" for none. */
export function fmtUTC(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return `${d.getUTCFullYear()}-${pad2(d.getUTCMonth() + 1)}-${pad2(d.getUTCDate())} ` +
    `${pad2(d.getUTCHours())}:${pad2(d.getUTCMinutes())}:${pad2(d.getUTCSeconds())}Z`;
}

/** fmtLocal renders an RFC 3339 time with its own offset ("2026-12-02T06:30:00+01:00") as "2026-12-02 06:30:00 +01:00". */
export function fmtLocal(s) {
  if (!s) return '—';
  const m = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)$/.exec(s);
  if (!m) return String(s);
  return `${m[1]} ${m[2]} ${m[3] === 'Z' ? '+00:00' : m[3]}`;
}

/**
 * zoned renders a time of a job's zone: local is RFC 3339 with the zone's
 * offset, utc the same instant in UTC. It returns the text in the zone and
 * the UTC text to show beside it, or null for the UTC text when the offset
 * is zero (a job in UTC, or in a zone at UTC then), so that no time is
 * printed twice.
 */
export function zoned(local, utc) {
  if (!local) return { local: fmtUTC(utc), utc: null };
  if (/(?:Z|[+-]00:00)$/.test(local)) return { local: fmtUTC(local), utc: null };
  return { local: fmtLocal(local), utc: fmtUTC(utc) };
}

/** fmtSeconds renders a number of seconds as "4 s", "3 min 5 s", "2 h 10 min" or "3 d 4 h". */
export function fmtSeconds(sec) {
  if (sec === null || sec === undefined || Number.isNaN(sec)) return '—';
  const neg = sec < 0;
  let t = Math.abs(sec);
  let out;
  if (t < 10) out = `${Math.round(t * 10) / 10} s`;
  else if (t < 60) out = `${Math.round(t)} s`;
  else if (t < 3600) out = `${Math.floor(t / 60)} min ${Math.round(t % 60)} s`;
  else if (t < 86400) out = `${Math.floor(t / 3600)} h ${Math.floor((t % 3600) / 60)} min`;
  else out = `${Math.floor(t / 86400)} d ${Math.floor((t % 86400) / 3600)} h`;
  return neg ? `−${out}` : out;
}

/** ago renders the age of an RFC 3339 time ("12 s ago"), "—" for none. */
export function ago(iso, now = Date.now()) {
  if (!iso) return '—';
  const t = new Date(iso).getTime();
  if (Number.isNaN(t)) return '—';
  const sec = (now - t) / 1000;
  return sec >= 0 ? `${fmtSeconds(sec)} ago` : `in ${fmtSeconds(-sec)}`;
}

/** fmtMS renders a duration in milliseconds ("850 ms", "2.4 s", "3 min 5 s"). */
export function fmtMS(ms) {
  if (ms === null || ms === undefined) return '—';
  if (Math.abs(ms) < 1000) return `${Math.round(ms)} ms`;
  return fmtSeconds(ms / 1000);
}

/** fmtInt renders an integer with thousands separators. */
export function fmtInt(n) {
  if (n === null || n === undefined) return '—';
  return Number(n).toLocaleString('en-US');
}

/** badge is a small status label whose class follows the status. */
export function badge(status, attrs = {}) {
  const cls = ['badge', `st-${String(status || 'none').replace(/[^a-z_]/g, '')}`, attrs.class];
  return h('span', { ...attrs, class: cls }, status || '—');
}

/** jobHref is the page's link to one job. */
export function jobHref(id) {
  return `#/jobs/${encodeURIComponent(id)}`;
}

/** coalescer runs fn once, delay ms after the first of any number of calls in between. */
export function coalescer(fn, delay) {
  let timer = null;
  const call = () => {
    if (timer !== null) return;
    timer = setTimeout(() => { timer = null; fn(); }, delay);
  };
  call.cancel = () => { if (timer !== null) clearTimeout(timer); timer = null; };
  return call;
}

/** debounce runs fn delay ms after the last call. */
export function debounce(fn, delay) {
  let timer = null;
  const call = (...args) => {
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(() => { timer = null; fn(...args); }, delay);
  };
  call.cancel = () => { if (timer !== null) clearTimeout(timer); timer = null; };
  return call;
}

/**
 * reader runs a view's reads, one at a time for the same query.
 * ask(key) calls read(key, current) unless a read of the same key is in
 * flight; then that read's answer is still shown when it arrives, and one
 * more read of key follows it. So a refresh (the 10 s tick, an event)
 * never throws away an answer on its way, however slow the daemon is, and
 * never stacks reads of the same thing on it. A read of another key (the
 * user changed the query) starts at once, and the older read's answer is
 * dropped: read checks current() before it shows anything, which is false
 * for every read but the newest, and for all once stop() was called.
 */
export function reader(read) {
  let gen = 0;
  let inflight = null; // the key of the newest read while it runs
  let again = false;
  let stopped = false;
  async function ask(key) {
    if (stopped) return;
    if (inflight === key) {
      again = true;
      return;
    }
    const n = ++gen;
    inflight = key;
    again = false;
    try {
      await read(key, () => !stopped && n === gen);
    } finally {
      if (n === gen) {
        inflight = null;
        if (again) {
          again = false;
          ask(key);
        }
      }
    }
  }
  return { ask, stop() { stopped = true; } };
}
