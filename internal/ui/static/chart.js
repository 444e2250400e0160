// The job page's chart: an inline SVG of the timeline's runs, each run's
// duration and its start lateness (started_at − slot) over slot time, on
// one axis (milliseconds below one second, seconds above).
import { s, fmtUTC } from './dom.js';

const W = 720;
const H = 200;
const M = { top: 14, right: 16, bottom: 34, left: 56 };

function niceMax(v) {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// minSpan is the narrowest x axis: its ticks (a quarter of it apart) then
// fall on distinct whole seconds.
const minSpan = 60e3;

// clock formats t as UTC hh:mm, or hh:mm:ss when the axis spans less than
// an hour.
function clock(t, span) {
  const d = new Date(t);
  const two = (n) => String(n).padStart(2, '0');
  const hm = `${two(d.getUTCHours())}:${two(d.getUTCMinutes())}`;
  return span < 3600e3 ? `${hm}:${two(d.getUTCSeconds())}` : hm;
}

// tickLabel formats a value of the y axis in the axis' unit (ms below one
// second, so that ticks do not round to the same label).
function tickLabel(v, ymax) {
  const n = ymax < 1 ? v * 1000 : v;
  return `${Math.round(n * 100) / 100}`;
}

/** runPoints turns timeline entries into the chart's points (seconds). */
export function runPoints(entries) {
  const pts = [];
  for (const e of entries || []) {
    if (e.kind !== 'run') continue;
    const at = new Date(e.at).getTime();
    const started = e.started_at ? new Date(e.started_at).getTime() : null;
    pts.push({
      at,
      status: e.status,
      duration: e.duration_ms !== undefined && e.duration_ms !== null ? e.duration_ms / 1000 : null,
      lateness: started !== null ? (started - at) / 1000 : null,
    });
  }
  return pts.sort((a, b) => a.at - b.at);
}

/** chart draws the SVG of the runs among entries over [from, to]. */
export function chart(entries, from, to) {
  const pts = runPoints(entries);
  const svg = s('svg', {
    viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img',
    'aria-label': 'Run duration and start lateness over time',
  });
  // The x axis spans the runs (with a margin), not the whole window: a
  // day's window with the runs of the last minute would squeeze them
  // into one column. It spans at least minSpan, or its tick labels (whole
  // seconds) would repeat.
  let x0 = new Date(from).getTime();
  let x1 = new Date(to).getTime();
  if (pts.length > 0) {
    const first = pts[0].at;
    const last = pts[pts.length - 1].at;
    const pad = Math.max((last - first) * 0.05, (minSpan - (last - first)) / 2, 1000);
    x0 = Math.max(x0, first - pad);
    x1 = Math.min(x1, last + pad);
    if (x1 - x0 < minSpan) {
      // Clamped by an end of the window: widen on the other side.
      if (x1 === new Date(to).getTime()) x0 = Math.max(new Date(from).getTime(), x1 - minSpan);
      else x1 = Math.min(new Date(to).getTime(), x0 + minSpan);
    }
  }
  if (!(x1 > x0)) x1 = x0 + 1;
  const ymax = niceMax(Math.max(0, ...pts.flatMap((p) => [p.duration ?? 0, p.lateness ?? 0])));
  const px = (t) => M.left + ((t - x0) / (x1 - x0)) * (W - M.left - M.right);
  const py = (v) => H - M.bottom - (Math.max(0, v) / ymax) * (H - M.top - M.bottom);

  // Axes, grid and labels.
  const g = s('g', { class: 'axes' });
  for (let i = 0; i <= 4; i++) {
    const v = (ymax * i) / 4;
    const y = py(v);
    g.appendChild(s('line', { x1: M.left, x2: W - M.right, y1: y, y2: y, class: i === 0 ? 'axis' : 'grid' }));
    g.appendChild(s('text', { x: M.left - 6, y: y + 4, 'text-anchor': 'end' }, tickLabel(v, ymax)));
  }
  for (let i = 0; i <= 4; i++) {
    const t = x0 + ((x1 - x0) * i) / 4;
    g.appendChild(s('text', { x: px(t), y: H - M.bottom + 16, 'text-anchor': i === 0 ? 'start' : i === 4 ? 'end' : 'middle' }, clock(t, x1 - x0)));
  }
  g.appendChild(s('line', { x1: M.left, x2: M.left, y1: M.top, y2: H - M.bottom, class: 'axis' }));
  g.appendChild(s('text', { x: 14, y: (M.top + H - M.bottom) / 2, transform: `rotate(-90 14 ${(M.top + H - M.bottom) / 2})`, 'text-anchor': 'middle', class: 'label' }, ymax < 1 ? 'milliseconds' : 'seconds'));
  g.appendChild(s('text', { x: (M.left + W - M.right) / 2, y: H - 4, 'text-anchor': 'middle', class: 'label' }, 'slot time (UTC)'));
  svg.appendChild(g);

  if (pts.length === 0) {
    svg.appendChild(s('text', { x: (M.left + W - M.right) / 2, y: (M.top + H - M.bottom) / 2, 'text-anchor': 'middle', class: 'empty' }, 'no runs in this window'));
    return svg;
  }
  for (const [key, cls] of [['lateness', 'late'], ['duration', 'dur']]) {
    const ps = pts.filter((p) => p[key] !== null);
    if (ps.length > 1) {
      svg.appendChild(s('polyline', { class: `line ${cls}`, points: ps.map((p) => `${px(p.at).toFixed(1)},${py(p[key]).toFixed(1)}`).join(' ') }));
    }
    if (ps.length <= 200) {
      for (const p of ps) {
        svg.appendChild(s('circle', { class: `pt ${cls} st-${p.status}`, cx: px(p.at).toFixed(1), cy: py(p[key]).toFixed(1), r: 2.5 },
          s('title', {}, `${fmtUTC(new Date(p.at).toISOString())} ${p.status}: ${key} ${p[key].toFixed(3)} s`)));
      }
    }
  }
  // Legend.
  const lg = s('g', { class: 'legend', transform: `translate(${W - M.right - 190} ${M.top})` },
    s('rect', { x: 0, y: 0, width: 10, height: 3, class: 'dur' }), s('text', { x: 14, y: 5 }, 'duration'),
    s('rect', { x: 90, y: 0, width: 10, height: 3, class: 'late' }), s('text', { x: 104, y: 5 }, 'start lateness'));
  svg.appendChild(lg);
  return svg;
}
