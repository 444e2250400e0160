// The status page in headless Chromium, against a live daemon whose
// database the caller seeded (e2e/ui_test.go, TestStatusPageInBrowser):
//
//   - the page loads with no console error, no page error, no failed
//     request and no HTTP answer ≥ 400, and its event stream is live;
//   - its first paint, with every API answer held back, says it is
//     loading and does not say "offline" (nor does the page at any later
//     point: the daemon stays up), and the schedules view's first paint
//     shows no empty table;
//   - the overview shows this replica and the job counts, and each live
//     member's owned jobs equal what `cronswap members list` says;
//   - the schedules table lists the seeded jobs;
//   - a refresh (the 10 s tick) while the table's answer is on its way
//     does not throw that answer away: the rows show when it comes, and
//     the table is read again after it, not alongside it;
//   - a mongosh edit of one job's cron_expr appears in its row within 2 s,
//     without a reload (the time is measured from just before the update
//     inside mongosh to the first frame that shows it, and printed);
//   - a bad cron_expr edit shows its error on that job's row;
//   - filtering by category shows only that category's jobs;
//   - after `cronswap run-now` of a job, its row and its job page show
//     that run (run id trigger/<request>) as the last run;
//   - the job page shows a run and a missed slot in its timeline, its next
//     runs and its chart;
//   - screenshots of the overview and the job page at 1280×800.
//
// Settings (environment):
//   CRONSWAP_UI_URL         the daemon's base URL (required)
//   CRONSWAP_UI_MONGO_URI   connection string naming the database (required)
//   CRONSWAP_UI_MONGOSH     mongosh (default: mongosh on PATH)
//   CRONSWAP_UI_INSTANCE    the daemon's instance id, expected in the members table
//   CRONSWAP_UI_SCREENS     directory for the screenshots (default .run/ui-screens)
//   CRONSWAP_UI_CLI         the cronswap binary, for run-now and members list (required)
//   CRONSWAP_UI_CONFIG      its --config (required)
//   CRONSWAP_UI_EDIT_JOB, CRONSWAP_UI_BAD_JOB, CRONSWAP_UI_RUN_JOB, CRONSWAP_UI_RUN_NOW_JOB:
//     the jobs edited, broken, opened and run now (defaults seed-billing,
//     seed-broken, seed-every-5s, seed-cleanup)
//   CRONSWAP_UI_JOBS        comma-separated ids the table must list
//   CRONSWAP_UI_RESULT      file to write the measurements to as JSON (optional)
//   CRONSWAP_CHROMIUM       the browser (default /usr/bin/chromium)
//   CRONSWAP_UI_TOKEN       bearer token / basic-auth password, when the daemon has one
//
// Exit status 0 when every check passed; else 1 with every failure listed.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { env, baseURL, launch, newContext, watchProblems, tid, row, mongosh, cronswap, Gate, painted, Failures } from './lib.mjs';

const base = baseURL();
const mongoURI = env('CRONSWAP_UI_MONGO_URI');
const mongoshPath = env('CRONSWAP_UI_MONGOSH', 'mongosh');
const instance = env('CRONSWAP_UI_INSTANCE', '');
const screens = env('CRONSWAP_UI_SCREENS', '.run/ui-screens');
const editJob = env('CRONSWAP_UI_EDIT_JOB', 'seed-billing');
const badJob = env('CRONSWAP_UI_BAD_JOB', 'seed-broken');
const runJob = env('CRONSWAP_UI_RUN_JOB', 'seed-every-5s');
const runNowJob = env('CRONSWAP_UI_RUN_NOW_JOB', 'seed-cleanup');
const cliPath = env('CRONSWAP_UI_CLI');
const cliConfig = env('CRONSWAP_UI_CONFIG');
const seeded = env('CRONSWAP_UI_JOBS', 'seed-every-5s,seed-billing,seed-cleanup,seed-broken,seed-paused').split(',');
// The requirement: a mongosh edit shows up within 2 s.
const editDeadlineMs = 2000;
// Deadlines of conditions that have no stated requirement: generous.
const settle = 15000;

mkdirSync(screens, { recursive: true });
const fail = new Failures();
const result = {};
const browser = await launch();
result.chromium = browser.version();
const ctx = await newContext(browser);
const page = await ctx.newPage();
page.setDefaultTimeout(settle);
const watch = watchProblems(page);
// Every text the live indicator shows, from the parse of the page on:
// "offline" must never be among them (the daemon stays up).
await page.addInitScript(() => {
  window.__liveStates = [];
  new MutationObserver(() => {
    const el = document.getElementById('live-status');
    const text = el && el.textContent.trim();
    if (text && window.__liveStates[window.__liveStates.length - 1] !== text) window.__liveStates.push(text);
  }).observe(document, { childList: true, subtree: true, characterData: true });
});

const js = (v) => JSON.stringify(v);
const editScript = (id, expr) =>
  `const t0 = Date.now(); const r = db.schedules.updateOne({_id: ${js(id)}}, {$set: {cron_expr: ${js(expr)}, updated_at: new Date()}});` +
  ` print(JSON.stringify({t0, matched: r.matchedCount}))`;

/** edit sets id's cron_expr with mongosh and returns the wall-clock ms just before the update. */
async function edit(id, expr) {
  const out = await mongosh(mongoshPath, mongoURI, editScript(id, expr));
  const line = out.trim().split('\n').pop();
  const r = JSON.parse(line);
  if (r.matched !== 1) throw new Error(`mongosh matched ${r.matched} documents for ${id}`);
  return r.t0;
}

let loaded = false;
await fail.step('page loads: redirect to /ui/, first paint loading and not offline, then overview, live event stream', async () => {
  // Hold every API answer (the event stream too) until the first paint
  // has been looked at.
  const gate = new Gate(page);
  await gate.close();
  const resp = await page.goto(`${base}/`, { waitUntil: 'load' });
  const url = new URL(page.url());
  fail.check(url.pathname === '/ui/', `GET / ended at ${page.url()}, want /ui/`);
  fail.check(resp && resp.ok(), `the page answered ${resp && resp.status()}`);
  await painted(page);
  const first = await page.evaluate(() => ({
    live: document.getElementById('live-status').textContent.trim(),
    loading: !!document.querySelector('[data-testid="overview"] .loading'),
    members: document.querySelectorAll('[data-testid="member-row"]').length,
  }));
  console.error(`first paint (${gate.held} API requests held): indicator "${first.live}", loading ${first.loading}`);
  fail.check(gate.held > 0, 'no API request was held: the first paint was not looked at before the answers');
  fail.check(first.live !== 'offline', `first paint: the indicator says "${first.live}" before the event stream answered`);
  fail.check(first.loading && first.members === 0, `first paint: overview loading ${first.loading}, ${first.members} member rows`);
  await gate.open();
  await page.locator(tid('overview')).waitFor();
  await page.locator(`${tid('live-status')}:text-is("live")`).waitFor();
  // Mark the document: a reload would lose the mark.
  await page.evaluate(() => { window.__cronswapNoReload = true; });
  loaded = true;
});

if (!loaded) {
  // Nothing else can pass without the page.
  watch.stop();
  for (const p of watch.problems) fail.check(false, p);
  await browser.close();
  fail.exit();
}

await fail.step('overview: this replica and the counts', async () => {
  await page.locator(tid('member-row')).first().waitFor();
  if (instance) {
    await page.locator(tid('member-row'), { hasText: instance }).first().waitFor();
  }
  for (const id of ['count-armed', 'count-paused', 'count-erroring', 'count-total', 'fires-last-hour',
    'missed-last-day', 'watch-mode', 'ready']) {
    fail.check(await page.locator(tid(id)).count() > 0, `overview: no [data-testid=${id}]`);
  }
  // The total arrives with the overview's data; wait for it rather than read a placeholder.
  await page.waitForFunction(
    ([sel, n]) => (document.querySelector(sel)?.textContent || '').replace(/\D/g, '') === String(n),
    [tid('count-total'), seeded.length], { timeout: settle });
  await page.screenshot({ path: join(screens, 'ui-overview.png') });
});

await fail.step('overview: owned jobs of each live member as `cronswap members list` counts them', async () => {
  const cli = JSON.parse(await cronswap(cliPath, cliConfig, ['members', 'list', '-o', 'json']));
  const live = cli.filter((m) => m.live);
  const shown = await page.locator(tid('member-row')).evaluateAll((rs) => rs.map((r) => ({
    id: r.getAttribute('data-instance'), owned: r.querySelector('[data-testid="member-owned"]').textContent.trim(),
  })));
  console.error(`owned jobs: page ${JSON.stringify(shown)}, members list ${JSON.stringify(live.map((m) => [m.instance_id, m.owned_jobs]))}`);
  fail.check(shown.length === live.length && live.length >= 2, `the page lists ${shown.length} live members, members list ${live.length} (want ≥ 2)`);
  for (const m of live) {
    const s = shown.find((x) => x.id === m.instance_id);
    fail.check(s && s.owned === String(m.owned_jobs), `${m.instance_id}: the page says ${s && s.owned} owned jobs, members list ${m.owned_jobs}`);
  }
  if (instance) {
    const self = live.find((m) => m.instance_id === instance);
    fail.check(self && self.owned_jobs > 0 && self.owned_jobs < seeded.length,
      `${instance} owns ${self && self.owned_jobs} of ${seeded.length} jobs: want some, not all`);
  }
});

await fail.step('schedules table: first paint loading, then lists the seeded jobs', async () => {
  const gate = new Gate(page);
  await gate.close();
  await page.locator(tid('nav-schedules')).click();
  await page.locator(tid('schedules-table')).waitFor();
  await painted(page);
  const first = await page.evaluate(() => ({
    loading: !!document.querySelector('[data-testid="rows-loading"]'),
    rows: document.querySelectorAll('[data-testid="schedule-row"]').length,
    total: document.querySelector('[data-testid="rows-total"]').textContent.trim(),
    empty: document.querySelector('[data-testid="schedules-table"] tbody').textContent.includes('No job matches'),
    live: document.getElementById('live-status').textContent.trim(),
  }));
  fail.check(gate.held > 0, 'no API request was held for the schedules view');
  fail.check(first.loading && first.rows === 0 && !first.empty && first.total === '…',
    `schedules first paint: loading ${first.loading}, ${first.rows} rows, empty ${first.empty}, total "${first.total}"`);
  fail.check(first.live === 'live', `schedules first paint: the indicator says "${first.live}"`);
  await gate.open();
  for (const id of seeded) await page.locator(row(id)).waitFor();
  const total = (await page.locator(tid('rows-total')).textContent()).replace(/\D/g, '');
  fail.check(total === String(seeded.length), `rows-total says ${total}, want ${seeded.length}`);
});

await fail.step('a refresh while the table\'s answer is on its way keeps that answer', async () => {
  // A page of its own, whose clock the test moves: the table's first
  // answer is held while the page's 10 s refresh falls due. The page must
  // show that answer when it comes (a daemon slower than the refresh still
  // renders), and read the table again after it, not alongside it.
  const ctx2 = await newContext(browser);
  try {
    const p2 = await ctx2.newPage();
    p2.setDefaultTimeout(settle);
    await p2.clock.install();
    // The table's requests, in order: go lets one through; overlapped says
    // another was still held when it was made.
    const held = [];
    const waiters = [];
    await p2.route('**/api/schedule-rows**', (route) => new Promise((resolve) => {
      const r = { answered: false, overlapped: held.some((x) => !x.answered) };
      r.go = () => { r.answered = true; resolve(route.continue().catch(() => {})); };
      held.push(r);
      for (const w of waiters.splice(0)) w();
    }));
    const requests = (n) => new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`${held.length} table requests after ${settle} ms, want ${n}`)), settle);
      const check = () => {
        if (held.length >= n) { clearTimeout(t); resolve(); } else waiters.push(check);
      };
      check();
    });
    await p2.goto(`${base}/ui/#/schedules`, { waitUntil: 'load' });
    await requests(1);
    await p2.clock.runFor(10_000); // the page's periodic refresh, with the first answer held
    held[0].go();
    await p2.locator(row(seeded[0])).waitFor();
    await requests(2);
    fail.check(!held[1].overlapped, 'the table was read again while its first answer was held');
    for (const r of held) if (!r.answered) r.go();
    await p2.unroute('**/api/schedule-rows**');
  } finally {
    await ctx2.close();
  }
});

await fail.step(`a mongosh edit of ${editJob} shows within ${editDeadlineMs} ms, without a reload`, async () => {
  const sel = `${row(editJob)} ${tid('cell-expr')}`;
  const before = (await page.locator(sel).textContent()).trim();
  const expr = before.includes('0 30 6 * * *') ? '0 45 6 * * *' : '0 30 6 * * *';
  // Watch from the page itself: the first animation frame that shows the
  // new expression, stamped with the wall clock mongosh also uses.
  const seen = page.waitForFunction(([s, want]) => {
    const el = document.querySelector(s);
    return el && el.textContent.includes(want) ? Date.now() : null;
  }, [sel, expr], { polling: 'raf', timeout: settle });
  const t0 = await edit(editJob, expr);
  const shownAt = await (await seen).jsonValue();
  const ms = shownAt - t0;
  result.edit_to_page_ms = ms;
  console.error(`edit of ${editJob} to "${expr}" on the page after ${ms} ms`);
  fail.check(ms <= editDeadlineMs, `the edit showed after ${ms} ms, want ≤ ${editDeadlineMs} ms`);
  fail.check(await page.evaluate(() => window.__cronswapNoReload === true), 'the page reloaded to show the edit');
});

await fail.step(`a bad cron_expr edit of ${badJob} shows its error on the row`, async () => {
  await edit(badJob, 'every now and then');
  const r = page.locator(`${row(badJob)}[data-status="error"]`);
  await r.waitFor();
  fail.check(await r.evaluate((el) => el.classList.contains('row-error')), `row ${badJob} lacks class row-error`);
  const msg = (await r.locator(tid('cell-error')).textContent()).trim();
  fail.check(msg.length > 0, `row ${badJob}: cell-error is empty`);
  console.error(`error on the row of ${badJob}: ${msg}`);
  for (const id of seeded.filter((x) => x !== badJob)) {
    const st = await page.locator(row(id)).getAttribute('data-status');
    fail.check(st !== 'error', `row ${id} has status error though only ${badJob} was broken`);
  }
});

await fail.step('filter by category', async () => {
  const cat = page.locator(tid('filter-category'));
  const options = await cat.locator('option').evaluateAll((os) => os.map((o) => o.value));
  for (const c of ['billing', 'cleanup', 'reports']) fail.check(options.includes(c), `filter-category lacks ${c}: ${options}`);
  await cat.selectOption('billing');
  await page.waitForFunction(([s, want]) => {
    const ids = [...document.querySelectorAll(s)].map((e) => e.getAttribute('data-job-id'));
    return ids.length === 1 && ids[0] === want;
  }, [tid('schedule-row'), 'seed-billing']);
  await cat.selectOption('');
  await page.waitForFunction(([s, n]) => document.querySelectorAll(s).length === n, [tid('schedule-row'), seeded.length]);
});

await fail.step(`run-now of ${runNowJob}: its row and its job page show it as the last run`, async () => {
  const cell = `${row(runNowJob)} ${tid('cell-last-run')}`;
  await page.locator(cell).waitFor();
  const before = await page.locator(cell).getAttribute('data-run-id');
  const res = JSON.parse(await cronswap(cliPath, cliConfig, ['run-now', runNowJob, '--wait', '60s', '-o', 'json']));
  fail.check(res.status === 'succeeded' && res.run_id.startsWith('trigger/'), `run-now: ${JSON.stringify(res)}`);
  console.error(`run-now of ${runNowJob}: ${res.run_id} ${res.status} (last run before: ${before || 'none'})`);
  // The run's event reaches this page when this replica ran it, the 10 s
  // refresh when the other did.
  await page.locator(`${cell}[data-run-id="${res.run_id}"]`).waitFor();
  fail.check((await page.locator(cell).textContent()).includes('run now'), `row ${runNowJob}: the last run is not marked run now`);
  await page.locator(`${row(runNowJob)} ${tid('cell-id')} a`).click();
  await page.locator(`${tid('job-page')}[data-job-id="${runNowJob}"] ${tid('job-last-run')}[data-run-id="${res.run_id}"]`).waitFor();
  await page.locator(tid('nav-schedules')).click();
  await page.locator(row(runJob)).waitFor();
});

await fail.step(`job page of ${runJob}: a run, a missed slot, next runs, chart`, async () => {
  await page.locator(`${row(runJob)} ${tid('cell-id')} a, a${row(runJob)} ${tid('cell-id')}, ${row(runJob)} a${tid('cell-id')}`).first().click();
  const jp = page.locator(`${tid('job-page')}[data-job-id="${runJob}"]`);
  await jp.waitFor();
  fail.check(decodeURIComponent(new URL(page.url()).hash) === `#/jobs/${runJob}`, `job page at ${page.url()}`);
  await page.locator(`${tid('timeline-entry')}[data-kind="run"]`).first().waitFor();
  await page.locator(`${tid('timeline-entry')}[data-kind="missed"]`).first().waitFor();
  // A run that happens while the page is open appears without a reload
  // (run events): the number of run entries grows, or, when the
  // timeline shows a fixed number, its newest entry changes.
  const runs = () => page.locator(`${tid('timeline-entry')}[data-kind="run"]`).evaluateAll(
    (es) => es.map((e) => e.textContent).join('\n'));
  const seenBefore = await runs();
  await page.waitForFunction(([s, prev]) => {
    const now = [...document.querySelectorAll(s)].map((e) => e.textContent).join('\n');
    return now !== prev;
  }, [`${tid('timeline-entry')}[data-kind="run"]`, seenBefore], { timeout: settle });
  const expr = (await page.locator(tid('job-expr')).textContent()).trim();
  fail.check(expr.includes('*/5 * * * * *'), `job-expr shows "${expr}"`);
  const next = await page.locator(`${tid('next-runs')} ${tid('next-run')}`).count();
  fail.check(next >= 1, `next-runs lists ${next} entries`);
  fail.check(await page.locator(`${tid('chart')} svg, svg${tid('chart')}`).count() > 0, 'no inline <svg> in chart');
  fail.check((await page.locator(tid('lock-state')).count()) > 0, 'no lock-state');
  fail.check(await page.evaluate(() => window.__cronswapNoReload === true), 'the page reloaded');
  await page.screenshot({ path: join(screens, 'ui-job.png') });
});

const liveStates = await page.evaluate(() => window.__liveStates);
console.error(`the live indicator said: ${liveStates.join(' → ')}`);
fail.check(liveStates.length > 0 && !liveStates.includes('offline'), `the live indicator said ${liveStates.join(' → ')}; never "offline" while the daemon is up`);
watch.stop();
for (const p of watch.problems) fail.check(false, p);
result.problems = watch.problems.length;
await browser.close();
console.log(JSON.stringify(result));
const resFile = process.env.CRONSWAP_UI_RESULT;
if (resFile) writeFileSync(resFile, JSON.stringify(result) + '\n');
fail.exit();
