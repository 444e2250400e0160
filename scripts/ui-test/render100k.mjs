// Measures the schedules view of a daemon holding many jobs (e2e/ui_test.go,
// TestStatusPage100k seeds 100,000): for each of CRONSWAP_UI_RUNS runs, in a
// fresh browser context (cold cache):
//
//   first_render_ms  navigation start → the first page of rows visible
//   page_flip_ms     click on page-next → the second page's rows visible
//   search_ms        the last keystroke in search → the matching rows shown
//                    (includes the page's debounce)
//
// and prints them, with their medians and the bytes the first render
// transferred, as one line of JSON on stdout. It reports times and asserts
// none; it does assert what the view shows: rows, the right total
// (CRONSWAP_UI_TOTAL), the second page after the flip, and the search's
// matches (CRONSWAP_UI_SEARCH, expecting CRONSWAP_UI_SEARCH_TOTAL rows).
//
// Settings (environment): CRONSWAP_UI_URL (required), CRONSWAP_UI_TOTAL
// (default 100000), CRONSWAP_UI_SEARCH (default bulk-04217),
// CRONSWAP_UI_SEARCH_TOTAL (default 10), CRONSWAP_UI_RUNS (default 5),
// CRONSWAP_CHROMIUM, CRONSWAP_UI_TOKEN.
import { env, baseURL, launch, newContext, watchProblems, tid, median, Failures } from './lib.mjs';

const base = baseURL();
const total = Number(env('CRONSWAP_UI_TOTAL', '100000'));
const search = env('CRONSWAP_UI_SEARCH', 'bulk-04217');
const searchTotal = Number(env('CRONSWAP_UI_SEARCH_TOTAL', '10'));
const runs = Number(env('CRONSWAP_UI_RUNS', '5'));
const timeout = 60000; // a deadline on each condition, not a measured bound

const fail = new Failures();
const browser = await launch();
const out = { chromium: browser.version(), total, runs: [] };
const rowSel = tid('schedule-row');
const digits = (s) => (s || '').replace(/\D/g, '');

for (let i = 0; i < runs; i++) {
  const ctx = await newContext(browser);
  const page = await ctx.newPage();
  page.setDefaultTimeout(timeout);
  const watch = watchProblems(page);
  let bytes = 0;
  page.on('requestfinished', async (r) => {
    try {
      const s = await r.sizes();
      bytes += s.responseBodySize + s.responseHeadersSize;
    } catch { /* the page went on */ }
  });
  const run = {};
  const failedBefore = fail.list.length;
  await fail.step(`run ${i + 1}`, async () => {
    await page.goto(`${base}/ui/#/schedules`, { waitUntil: 'commit' });
    // performance.now() counts from the navigation's start.
    run.first_render_ms = await (await page.waitForFunction(([s, t, n]) => {
      const r = document.querySelector(s);
      const tot = document.querySelector(t);
      if (!r || !tot || r.getBoundingClientRect().height === 0) return null;
      return tot.textContent.replace(/\D/g, '') === String(n) ? performance.now() : null;
    }, [rowSel, tid('rows-total'), total], { polling: 'raf', timeout })).jsonValue();
    run.first_render_bytes = bytes;
    const nav = await page.evaluate(() => {
      const n = performance.getEntriesByType('navigation')[0];
      return n ? { dom_content_loaded_ms: n.domContentLoadedEventEnd, load_ms: n.loadEventEnd } : {};
    });
    Object.assign(run, nav);
    const shown = await page.locator(rowSel).count();
    fail.check(shown > 0 && shown <= 500, `run ${i + 1}: ${shown} rows shown, want one page (1..500)`);
    fail.check(digits(await page.locator(tid('rows-total')).textContent()) === String(total),
      `run ${i + 1}: rows-total is not ${total}`);
    const info = await page.locator(tid('page-info')).textContent();
    fail.check(digits(info).endsWith(String(total)), `run ${i + 1}: page-info "${info}" does not end with the total ${total}`);
    run.rows_per_page = shown;

    // Page flip: the first row changes to the one after the first page.
    const first = await page.locator(rowSel).first().getAttribute('data-job-id');
    const t0 = await page.evaluate(() => performance.now());
    await page.locator(tid('page-next')).click();
    run.page_flip_ms = await (await page.waitForFunction(([s, prev]) => {
      const r = document.querySelector(s);
      return r && r.getAttribute('data-job-id') !== prev ? performance.now() : null;
    }, [rowSel, first], { polling: 'raf', timeout })).jsonValue() - t0;
    const info2 = await page.locator(tid('page-info')).textContent();
    fail.check(digits(info2).startsWith(String(shown + 1)), `run ${i + 1}: after page-next page-info is "${info2}", want it to start at ${shown + 1}`);

    // Search: from the last keystroke to the matching rows.
    const box = page.locator(tid('search'));
    await box.fill(search.slice(0, -1));
    const t1 = await page.evaluate(() => performance.now());
    await box.press(search.slice(-1));
    const t2 = await page.evaluate(() => performance.now());
    run.search_ms = await (await page.waitForFunction(([s, t, q, n]) => {
      const rs = [...document.querySelectorAll(s)];
      const tot = document.querySelector(t);
      if (!tot || tot.textContent.replace(/\D/g, '') !== String(n) || rs.length !== n) return null;
      return rs.every((r) => (r.getAttribute('data-job-id') || '').includes(q)) ? performance.now() : null;
    }, [rowSel, tid('rows-total'), search, searchTotal], { polling: 'raf', timeout })).jsonValue() - t2;
    run.keystroke_ms = t2 - t1;
  });
  watch.stop();
  for (const p of watch.problems) fail.check(false, `run ${i + 1}: ${p}`);
  out.runs.push(run);
  console.error(`run ${i + 1}: ${JSON.stringify(run)}`);
  await ctx.close();
  // A failed run would fail the same way again, each after its deadlines.
  if (fail.list.length > failedBefore) break;
}
await browser.close();

const med = (k) => {
  const xs = out.runs.map((r) => r[k]).filter((x) => typeof x === 'number');
  const m = median(xs);
  return m === null ? null : Math.round(m * 10) / 10;
};
out.median = {
  first_render_ms: med('first_render_ms'),
  page_flip_ms: med('page_flip_ms'),
  search_ms: med('search_ms'),
  first_render_bytes: med('first_render_bytes'),
};
console.log(JSON.stringify(out));
fail.exit();
