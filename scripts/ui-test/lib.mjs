// Shared helpers of the browser tests: settings from the environment, the
// headless Chromium launch (Debian's /usr/bin/chromium, never a downloaded
// browser), the collector of page problems, and small waiting helpers.
import { spawn } from 'node:child_process';
import { chromium } from 'playwright-core';

/** env returns the variable name, or def; it throws when neither is set. */
export function env(name, def) {
  const v = process.env[name];
  if (v !== undefined && v !== '') return v;
  if (def !== undefined) return def;
  throw new Error(`${name} is not set`);
}

/** baseURL is the daemon's base URL (CRONSWAP_UI_URL), without a trailing slash. */
export function baseURL() {
  return env('CRONSWAP_UI_URL').replace(/\/+$/, '');
}

/** authHeaders are the request headers carrying CRONSWAP_UI_TOKEN, if set. */
export function authHeaders() {
  const tok = process.env.CRONSWAP_UI_TOKEN;
  return tok ? { Authorization: `Bearer ${tok}` } : {};
}

/** launch starts headless Chromium from CRONSWAP_CHROMIUM (default /usr/bin/chromium). */
export async function launch() {
  const executablePath = env('CRONSWAP_CHROMIUM', '/usr/bin/chromium');
  // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
  return chromium.launch({ executablePath, headless: true, args: ['--no-sandbox', '--disable-gpu'] });
}

/** newContext opens a 1280×800 context, authenticated when CRONSWAP_UI_TOKEN is set. */
export async function newContext(browser) {
  const opts = { viewport: { width: 1280, height: 800 }, deviceScaleFactor: 1 };
  const tok = process.env.CRONSWAP_UI_TOKEN;
  if (tok) opts.httpCredentials = { username: 'ui-test', password: tok };
  return browser.newContext(opts);
}

/**
 * watchProblems records every console error, uncaught page error, failed
 * request and HTTP answer ≥ 400 of page into the returned list, until
 * stop() is called (closing the page aborts its event stream, which is no
 * problem of the page).
 */
export function watchProblems(page) {
  const problems = [];
  let on = true;
  page.on('console', (m) => {
    if (on && m.type() === 'error') problems.push(`console error: ${m.text()} (${m.location().url || '?'})`);
  });
  page.on('pageerror', (e) => {
    if (on) problems.push(`page error: ${e.message}`);
  });
  page.on('requestfailed', (r) => {
    if (on) problems.push(`request failed: ${r.method()} ${r.url()}: ${r.failure()?.errorText}`);
  });
  page.on('response', (r) => {
    if (on && r.status() >= 400) problems.push(`HTTP ${r.status()}: ${r.request().method()} ${r.url()}`);
  });
  return { problems, stop: () => { on = false; } };
}

/** tid is the CSS selector of a data-testid. */
export const tid = (id) => `[data-testid="${id}"]`;

/** row is the selector of the schedules-table row of job id. */
export const row = (id) => `${tid('schedule-row')}[data-job-id="${CSS_escape(id)}"]`;

function CSS_escape(s) {
  return String(s).replace(/["\\]/g, '\\$&');
}

/**
 * run starts path with args and environment env, and returns its stdout;
 * it rejects on a non-zero exit, with what it printed.
 */
export function run(path, args, env = process.env) {
  return new Promise((resolve, reject) => {
    const p = spawn(path, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { err += d; });
    p.on('error', reject);
    p.on('close', (code) => {
      if (code === 0) resolve(out);
      else reject(new Error(`${path} ${args.join(' ')}: exit ${code}\n${out}${err}`));
    });
  });
}

/**
 * mongosh runs one --eval against uri (which names the database) and
 * returns its stdout; it rejects on a non-zero exit.
 */
export function mongosh(path, uri, evalJS) {
  return run(path, [uri, '--quiet', '--norc', '--eval', evalJS], { ...process.env, MONGOSH_SKIP_NODE_VERSION_CHECK: '1' });
}

/**
 * cronswap runs the command line (path) with args and --config config,
 * the database as the config names it (the CRONSWAP_* overrides of the
 * environment removed), and returns its stdout.
 */
export function cronswap(path, config, args) {
  const env = { ...process.env };
  for (const k of ['CRONSWAP_MONGO_URI', 'CRONSWAP_CONFIG', 'CRONSWAP_INSTANCE_ID']) delete env[k];
  return run(path, [...args, '--config', config], env);
}

/**
 * Gate holds every request of page to the daemon's API until open() —
 * so that a test can look at what the page paints before any answer.
 */
export class Gate {
  constructor(page) {
    this.page = page;
    this.held = 0;
    this.pending = [];
    this.released = new Promise((r) => { this.release = r; });
  }

  /** close starts holding the API requests. */
  async close() {
    await this.page.route('**/api/**', (route) => {
      this.held++;
      const p = this.released.then(() => route.continue());
      this.pending.push(p);
      return p;
    });
  }

  /** open lets the held requests go on and stops holding new ones. */
  async open() {
    this.release();
    await Promise.all(this.pending);
    await this.page.unroute('**/api/**');
  }
}

/** painted resolves after the page's next two animation frames: what it shows has been painted. */
export function painted(page) {
  return page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
}

/** median of a list of numbers. */
export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  if (n === 0) return null;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/** Failures collects the checks that failed, so one run reports them all. */
export class Failures {
  constructor() { this.list = []; }
  /** check records msg when ok is false. */
  check(ok, msg) { if (!ok) this.list.push(msg); return ok; }
  /** step runs fn and records its error under name instead of stopping. */
  async step(name, fn) {
    const t0 = Date.now();
    try {
      await fn();
      console.error(`ok   ${name} (${Date.now() - t0} ms)`);
    } catch (e) {
      this.list.push(`${name}: ${e.message.split('\n').slice(0, 6).join('\n  ')}`);
      console.error(`FAIL ${name} (${Date.now() - t0} ms)`);
    }
  }
  /** exit prints the failures and exits non-zero when there are any. */
  exit() {
    if (this.list.length) {
      console.error(`\n${this.list.length} failure(s):`);
      for (const f of this.list) console.error(`- ${f}`);
      process.exit(1);
    }
  }
}
