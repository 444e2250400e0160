// The status page's actions in headless Chromium (e2e/ui_test.go,
// TestStatusPageActionsInBrowser), against two daemons on one database:
// one with a write connection and a tokens file (an operator and a
// viewer), one with the same tokens and no write connection.
//
//   - an operator runs a job now from its page and sees that run (run id
//     trigger/<request>) in its timeline and as its last run, and the run
//     now itself in the timeline under the operator's name;
//   - disables it (the daemon's status says disabled, the document says
//     enabled: false and updated_by the operator's name, the timeline
//     shows the edit by that name) and enables it again;
//   - resumes it after failures (a pause written with mongosh), and the
//     timeline shows the resume under the operator's name;
//   - retimes it through the form: a bad expression shows the daemons'
//     error in the live preview and cannot be sent; a good one shows its
//     next runs, is sent, and the engine's next_run becomes the
//     preview's first run;
//   - the table offers run now and disable / enable per row;
//   - a viewer's page offers no action (it says why), and the viewer's
//     own POST is refused with 403, changing nothing;
//   - a form on another origin, posted with the operator's basic-auth
//     credentials, is refused, changing nothing;
//   - the daemon without a write connection offers no action to the
//     operator and says why.
//
// Settings (environment):
//   CRONSWAP_UI_URL          the daemon with the write connection (required)
//   CRONSWAP_UI_RO_URL       the daemon without one (required)
//   CRONSWAP_UI_OPERATOR     name:token of the operator (required)
//   CRONSWAP_UI_VIEWER       name:token of the viewer (required)
//   CRONSWAP_UI_MONGO_URI    connection string naming the database (required)
//   CRONSWAP_UI_MONGOSH      mongosh (default: mongosh on PATH)
//   CRONSWAP_UI_JOB          the job acted on (default seed-cleanup: weekly, so no cron run meanwhile)
//   CRONSWAP_UI_SCREENS      directory for a screenshot of the job page (default .run/ui-screens)
//   CRONSWAP_CHROMIUM        the browser (default /usr/bin/chromium)
//
// Exit status 0 when every check passed; else 1 with every failure listed.
import { createServer } from 'node:http';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { env, launch, watchProblems, tid, row, mongosh, Failures } from './lib.mjs';

const base = env('CRONSWAP_UI_URL').replace(/\/+$/, '');
const roBase = env('CRONSWAP_UI_RO_URL').replace(/\/+$/, '');
const [opName, opToken] = env('CRONSWAP_UI_OPERATOR').split(':');
const [viewerName, viewerToken] = env('CRONSWAP_UI_VIEWER').split(':');
const mongoURI = env('CRONSWAP_UI_MONGO_URI');
const mongoshPath = env('CRONSWAP_UI_MONGOSH', 'mongosh');
const job = env('CRONSWAP_UI_JOB', 'seed-cleanup');
const screens = env('CRONSWAP_UI_SCREENS', '.run/ui-screens');
const settle = 20000;

mkdirSync(screens, { recursive: true });
const fail = new Failures();
const browser = await launch();
const contextAs = (user, token) => browser.newContext({
  viewport: { width: 1280, height: 900 }, deviceScaleFactor: 1, httpCredentials: { username: user, password: token },
});
const bearer = (token) => ({ Authorization: `Bearer ${token}` });
const jobPage = (b) => `${b}/ui/#/jobs/${encodeURIComponent(job)}`;

/** doc is the job's document as mongosh reads it. */
async function doc() {
  const out = await mongosh(mongoshPath, mongoURI,
    `print(JSON.stringify(db.schedules.findOne({_id: ${JSON.stringify(job)}})))`);
  return JSON.parse(out.trim().split('\n').pop());
}

/** engine is what the daemon's engine holds for the job. */
async function engine() {
  const r = await fetch(`${base}/api/schedules/${encodeURIComponent(job)}`, { headers: bearer(opToken) });
  return r.json();
}

/** until polls fn until it returns a truthy value, within ms. */
async function until(what, fn, ms = settle) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const ctx = await contextAs(opName, opToken);
const page = await ctx.newPage();
page.setDefaultTimeout(settle);
const watch = watchProblems(page);

await fail.step('operator: the job page offers the actions', async () => {
  await page.goto(jobPage(base));
  await page.locator(tid('job-actions')).waitFor();
  await page.locator(tid('action-run-now')).waitFor();
  fail.check(await page.locator(tid('read-only')).count() === 0, 'the operator\'s page says it is read-only');
  fail.check((await page.locator(tid('action-toggle')).textContent()).trim() === 'Disable', 'the toggle does not offer Disable');
});

await fail.step('operator: run now, and the run in the timeline', async () => {
  await page.locator(tid('action-run-now')).click();
  const outcome = page.locator(`${tid('action-outcome')}.ok`);
  await outcome.waitFor();
  const text = await outcome.textContent();
  const m = /run (trigger\/[0-9a-f]+)/.exec(text);
  fail.check(m && text.includes(`requested by ${opName}`), `outcome "${text}"`);
  if (!m) return;
  // The timeline lists the run (off schedule) and the last run is it.
  await page.locator(`${tid('job-last-run')}[data-run-id="${m[1]}"]`).waitFor({ timeout: 60000 });
  await page.locator(`${tid('timeline-entry')}[data-kind="run"]`, { hasText: 'off schedule' }).first().waitFor();
  // The request itself, in the job's history: run now, by the operator, with its run.
  const op = page.locator(`${tid('timeline-entry')}[data-kind="operation"]`, { hasText: m[1] }).first();
  await op.waitFor();
  const opText = await op.textContent();
  fail.check(opText.includes('run now') && opText.includes(`by ${opName}`), `the run now in the timeline reads "${opText}"`);
});

await fail.step('operator: disable, in the document and the edit history by name, then enable', async () => {
  await page.locator(tid('action-toggle')).click();
  await page.locator(`${tid('action-outcome')}.ok`, { hasText: `disabled by ${opName}` }).waitFor();
  await page.locator(`${tid('job-status')}:text-is("disabled")`).waitFor();
  const d = await doc();
  fail.check(d.enabled === false && d.updated_by === opName, `document after disable: enabled ${d.enabled}, updated_by ${d.updated_by}`);
  await page.locator(`${tid('timeline-entry')}[data-kind="edit"]`, { hasText: `by ${opName}` }).first().waitFor();
  fail.check((await page.locator(tid('action-toggle')).textContent()).trim() === 'Enable', 'the toggle does not offer Enable');
  await page.locator(tid('action-toggle')).click();
  await page.locator(`${tid('action-outcome')}.ok`, { hasText: `enabled by ${opName}` }).waitFor();
  await page.locator(`${tid('job-status')}:text-is("armed")`).waitFor();
  fail.check((await doc()).enabled === true, 'the document is not enabled again');
});

await fail.step('operator: resume after failures, and the resume in the timeline by name', async () => {
  await mongosh(mongoshPath, mongoURI, `db.job_pauses.insertOne({ _id: ${JSON.stringify(job)}, state: "paused", ` +
    'paused_at: new Date(), note: "paused by hand for the test", failures: 2 })');
  await page.goto(jobPage(base));
  await page.locator(`${tid('action-resume')}:not([hidden])`).click({ timeout: 60000 });
  await page.locator(`${tid('action-outcome')}.ok`, { hasText: `resumed after failures by ${opName}` }).waitFor();
  const op = page.locator(`${tid('timeline-entry')}[data-kind="operation"]`, { hasText: 'resume after failures' }).first();
  await op.waitFor({ timeout: 60000 });
  const opText = await op.textContent();
  fail.check(opText.includes(`by ${opName}`), `the resume in the timeline reads "${opText}"`);
});

await fail.step('operator: retime through the form, with the live preview; the engine\'s next_run follows', async () => {
  const expr = page.locator(tid('retime-expr'));
  const before = await engine();
  const zoneBefore = (await doc()).timezone;
  await expr.fill('0 61 * * *');
  await page.locator(`${tid('retime-preview')}[data-valid="false"] ${tid('retime-error')}`).waitFor();
  const err = await page.locator(tid('retime-error')).textContent();
  fail.check(/cron_expr/.test(err), `the preview's error "${err}"`);
  fail.check(await page.locator(tid('retime-submit')).isDisabled(), 'a refused expression can be sent');
  const want = '0 30 4 * * *';
  await expr.fill(want);
  await page.locator(`${tid('retime-preview')}[data-valid="true"] ${tid('preview-run')}`).first().waitFor();
  const first = await page.evaluate(() => document.querySelector('[data-testid="preview-run"]').textContent);
  const shown = await page.locator(tid('retime-preview')).textContent();
  fail.check(!/null|undefined/.test(shown), `the preview shows "${shown}"`);
  fail.check(/04:30:00/.test(first), `the preview's first run "${first}"`);
  await page.locator(`${tid('retime-submit')}:not([disabled])`).click();
  await page.locator(`${tid('action-outcome')}.ok`, { hasText: 'retimed by' }).waitFor();
  const after = await until('the engine re-armed the job', async () => {
    const s = await engine();
    return s.cron_expr === want && s.next_run && s.next_run !== before.next_run ? s : null;
  });
  const local = new Date(after.next_run);
  fail.check(local.getUTCMinutes() === 30, `next_run ${after.next_run} after the retime`);
  const d = await doc();
  fail.check(d.cron_expr === want && d.updated_by === opName, `document after retime: ${d.cron_expr} by ${d.updated_by}`);
  fail.check(d.timezone === zoneBefore, `the retime changed the zone the form did not change: ${zoneBefore} → ${d.timezone}`);
  await page.locator(`${tid('job-expr')}:has-text("${want}")`).waitFor();
  await page.screenshot({ path: join(screens, 'ui-actions.png'), fullPage: false });
});

await fail.step('operator: the table offers run now and disable / enable per row', async () => {
  await page.goto(`${base}/ui/#/schedules`);
  await page.locator(`${row(job)} ${tid('row-run-now')}`).waitFor();
  fail.check(await page.locator(`${row(job)} ${tid('row-toggle')}[data-action="disable"]`).count() === 1, 'no Disable in the row');
});

watch.stop();
for (const p of watch.problems) fail.check(false, `operator's page: ${p}`);

await fail.step('viewer: no action on the page, and a direct POST is refused', async () => {
  const vctx = await contextAs(viewerName, viewerToken);
  const vp = await vctx.newPage();
  vp.setDefaultTimeout(settle);
  await vp.goto(jobPage(base));
  await vp.locator(`${tid('job-actions')} ${tid('read-only')}`).waitFor();
  const note = await vp.locator(tid('read-only')).first().textContent();
  fail.check(note.includes('viewer'), `the viewer's note "${note}"`);
  fail.check(await vp.locator(tid('action-run-now')).count() === 0 && await vp.locator(tid('retime-form')).count() === 0,
    'the viewer\'s page offers actions');
  await vp.goto(`${base}/ui/#/schedules`);
  await vp.locator(row(job)).waitFor();
  fail.check(await vp.locator(tid('row-run-now')).count() === 0, 'the viewer\'s table offers actions');
  // The viewer's own request, as the page would send it.
  const status = await vp.evaluate(async (path) => (await fetch(path, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}',
  })).status, `/api/schedules/${encodeURIComponent(job)}/disable`);
  fail.check(status === 403, `the viewer's POST answered ${status}, want 403`);
  fail.check((await doc()).enabled !== false, 'the viewer disabled the job');
  await vctx.close();
});

await fail.step('a cross-origin form post with the operator\'s credentials is refused', async () => {
  const target = `${base}/api/schedules/${encodeURIComponent(job)}/disable`;
  const evil = createServer((req, res) => {
    res.setHeader('Content-Type', 'text/html');
    res.end(`<!doctype html><form id="f" method="POST" enctype="text/plain" action="${target}">` +
      '<input name=\'{"a":"\' value=\'"}\'></form><script>document.getElementById("f").submit()</script>');
  });
  await new Promise((r) => evil.listen(0, '127.0.0.1', r));
  const evilURL = `http://127.0.0.1:${evil.address().port}/`;
  try {
    const ep = await ctx.newPage();
    const answered = ep.waitForResponse((r) => r.url() === target && r.request().method() === 'POST' && r.status() !== 401);
    await ep.goto(evilURL);
    const r = await answered;
    fail.check(r.status() === 403 || r.status() === 415, `the cross-origin form's POST answered ${r.status()}, want 403`);
    const body = await r.text();
    fail.check(/another (site|origin)|JSON body/.test(body), `the refusal says "${body.trim()}"`);
    fail.check((await doc()).enabled !== false, 'the cross-origin form disabled the job');
    await ep.close();
  } finally {
    evil.close();
  }
});

await fail.step('the daemon without a write connection offers no action, and says why', async () => {
  const rp = await ctx.newPage();
  rp.setDefaultTimeout(settle);
  await rp.goto(jobPage(roBase));
  await rp.locator(`${tid('job-actions')} ${tid('read-only')}`).waitFor();
  const note = await rp.locator(tid('read-only')).first().textContent();
  fail.check(note.includes('write connection'), `the read-only note "${note}"`);
  fail.check(await rp.locator(tid('action-run-now')).count() === 0, 'the read-only daemon offers run now');
  const status = await rp.evaluate(async (path) => (await fetch(path, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}',
  })).status, `/api/schedules/${encodeURIComponent(job)}/run-now`);
  fail.check(status === 403, `the operator's POST to the read-only daemon answered ${status}, want 403`);
  await rp.close();
});

await browser.close();
console.log(JSON.stringify({ failures: fail.list.length }));
fail.exit();
