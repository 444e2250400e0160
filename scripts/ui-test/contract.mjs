// The HTTP API against its OpenAPI document, on a live daemon
// (e2e/ui_test.go, TestOpenAPIContract):
//
//   - /api/openapi.json is a valid OpenAPI 3.1 document (swagger-parser)
//     and byte for byte the file in the repository;
//   - it documents every path the page and the scripts use;
//   - every documented path and method, called with its parameters'
//     example values, answers a documented status with the documented
//     content type, and a JSON body valid against the documented schema
//     (Ajv, JSON Schema 2020-12, with formats);
//   - documented error answers: a bad value of each integer or enum query
//     parameter and an unknown query parameter answer 400 where 400 is
//     documented, an unknown job answers 404 where 404 is documented, each
//     with a body valid against its schema;
//   - the page's actions (POST, with an operator's token and the daemon's
//     write connection): each, sent its documented example body, answers
//     its documented success; an unknown job 404, a body that is not JSON
//     415, a request from another origin 403, each with the error schema;
//   - /api/events answers text/event-stream and sends the hello event;
//   - with CRONSWAP_UI_TOKEN set (the daemon started with that
//     CRONSWAP_HTTP_TOKEN): without credentials every path but /healthz and
//     /readyz answers 401 with WWW-Authenticate Basic, and basic auth with
//     the token as password is let in.
//
// Settings (environment): CRONSWAP_UI_URL (required), CRONSWAP_UI_OPENAPI
// (the repository's file; default internal/httpapi/openapi.json from the
// repository root), CRONSWAP_UI_TOKEN (optional).
//
// Exit status 0 when everything matched; else 1 with every mismatch listed.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import SwaggerParser from '@apidevtools/swagger-parser';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { env, baseURL, authHeaders } from './lib.mjs';

const base = baseURL();
const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const docFile = env('CRONSWAP_UI_OPENAPI', join(repoRoot, 'internal', 'httpapi', 'openapi.json'));
const token = process.env.CRONSWAP_UI_TOKEN || '';
const auth = authHeaders();

// The API paths the page, the scripts and the docs rely on (the page's own
// routes, / and /ui/, are checked when documented, not required).
const mustDocument = [
  ['get', '/healthz'], ['get', '/readyz'], ['get', '/metrics'], ['get', '/api/status'],
  ['get', '/api/schedules'], ['get', '/api/schedules/{id}'], ['get', '/api/schedules/{id}/timeline'],
  ['get', '/api/schedules/{id}/detail'], ['get', '/api/overview'], ['get', '/api/schedule-rows'],
  ['get', '/api/events'], ['get', '/api/openapi.json'],
  ['get', '/api/session'], ['get', '/api/schedules/{id}/preview'], ['post', '/api/schedules/{id}/run-now'],
  ['post', '/api/schedules/{id}/disable'], ['post', '/api/schedules/{id}/enable'], ['post', '/api/schedules/{id}/resume'],
  ['post', '/api/schedules/{id}/retime'],
];

const mismatches = [];
const bad = (m) => { mismatches.push(m); console.error(`MISMATCH ${m}`); };
let calls = 0;

async function get(path, { headers = auth, redirect = 'manual', signal, method = 'GET', body } = {}) {
  calls++;
  return fetch(base + path, { method, headers, redirect, signal, body });
}

// 1. The document: served, equal to the repository's, valid 3.1.
const served = await (await get('/api/openapi.json')).text();
const inRepo = readFileSync(docFile, 'utf8');
let doc;
try {
  doc = JSON.parse(served);
} catch (e) {
  console.error(`/api/openapi.json is not JSON: ${e.message}`);
  process.exit(1);
}
if (served !== inRepo) {
  const same = isDeepStrictEqual(doc, JSON.parse(inRepo));
  bad(`/api/openapi.json differs from ${docFile}${same ? ' (bytes only: same JSON)' : ''}`);
}
if (!/^3\.1\./.test(doc.openapi || '')) bad(`openapi is "${doc.openapi}", want 3.1.x`);
try {
  await SwaggerParser.validate(structuredClone(doc));
} catch (e) {
  bad(`swagger-parser: ${e.message}`);
}
const deref = await SwaggerParser.dereference(structuredClone(doc));

for (const [m, p] of mustDocument) {
  if (!deref.paths?.[p]?.[m]) bad(`${m.toUpperCase()} ${p} is not documented`);
}

// 2. Schemas: Ajv 2020-12; OpenAPI's own annotation keywords are allowed.
const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false, validateFormats: true });
ajv.addVocabulary(['example', 'discriminator', 'xml', 'externalDocs']);
addFormats(ajv);
const validators = new Map();
function validatorFor(schema, where) {
  if (!validators.has(schema)) {
    try {
      validators.set(schema, ajv.compile(schema));
    } catch (e) {
      bad(`${where}: schema does not compile: ${e.message}`);
      validators.set(schema, null);
    }
  }
  return validators.get(schema);
}

const methods = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'];
const exampleOf = (p) => p.example ?? p.schema?.example ?? Object.values(p.examples || {})[0]?.value;

/** buildPath fills path parameters and query parameters from their examples (over-rides win). */
function buildPath(path, params, over = {}) {
  let out = path;
  const q = new URLSearchParams();
  for (const p of params) {
    const v = p.name in over ? over[p.name] : exampleOf(p);
    if (p.in === 'path') {
      if (v === undefined) bad(`${path}: path parameter ${p.name} has no example`);
      out = out.replace(`{${p.name}}`, encodeURIComponent(String(v)));
    } else if (p.in === 'query') {
      if (v === undefined) {
        if (!(p.name in over)) bad(`${path}: query parameter ${p.name} has no example`);
        continue;
      }
      if (v !== null) q.set(p.name, String(v));
    }
  }
  for (const [k, v] of Object.entries(over)) {
    if (!params.some((p) => p.name === k) && v !== null) q.set(k, String(v));
  }
  const qs = q.toString();
  return qs ? `${out}?${qs}` : out;
}

/**
 * check calls url (GET, or what req says) and compares the answer with
 * op's documented responses.
 */
async function check(label, op, url, wantStatus, req = {}) {
  const method = req.method || 'GET';
  let resp;
  try {
    resp = await get(url, req.method ? req : {});
  } catch (e) {
    bad(`${label} ${method} ${url}: ${e.message}`);
    return;
  }
  const status = String(resp.status);
  const ctype = (resp.headers.get('content-type') || '').split(';')[0].trim();
  const body = await resp.text();
  const where = `${label} ${method} ${url} → ${status}`;
  if (wantStatus && status !== String(wantStatus)) {
    bad(`${where}, want ${wantStatus}: ${body.slice(0, 200)}`);
    return;
  }
  const docd = op.responses?.[status] ?? op.responses?.[`${status[0]}XX`] ?? op.responses?.default;
  if (!docd) {
    bad(`${where}: status not documented (documented: ${Object.keys(op.responses || {})}): ${body.slice(0, 200)}`);
    return;
  }
  const content = docd.content || {};
  if (Object.keys(content).length === 0) return; // e.g. a redirect: no body documented
  if (!content[ctype]) {
    bad(`${where}: content type "${ctype}" not documented (documented: ${Object.keys(content)})`);
    return;
  }
  const schema = content[ctype].schema;
  if (ctype === 'application/json' || ctype.endsWith('+json')) {
    let v;
    try {
      v = JSON.parse(body);
    } catch (e) {
      bad(`${where}: body is not JSON: ${body.slice(0, 200)}`);
      return;
    }
    if (!schema) {
      bad(`${where}: no schema documented for ${ctype}`);
      return;
    }
    const validate = validatorFor(schema, where);
    if (validate && !validate(v)) {
      for (const e of validate.errors.slice(0, 20)) {
        bad(`${where}: body${e.instancePath || ''} ${e.message}${e.params ? ' ' + JSON.stringify(e.params) : ''}`);
      }
    }
  } else if (schema?.type === 'string' && typeof body !== 'string') {
    bad(`${where}: body is not text`);
  }
}

/** checkEvents reads /api/events until the hello event, then closes it. */
async function checkEvents(op) {
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), 10000);
  try {
    const resp = await get('/api/events', { signal: ac.signal, headers: { ...auth, Accept: 'text/event-stream' } });
    const ctype = (resp.headers.get('content-type') || '').split(';')[0].trim();
    if (resp.status !== 200) bad(`GET /api/events → ${resp.status}, want 200`);
    if (ctype !== 'text/event-stream') bad(`GET /api/events: content type "${ctype}", want text/event-stream`);
    if (!op.responses?.['200']?.content?.['text/event-stream']) bad('GET /api/events: 200 text/event-stream not documented');
    const reader = resp.body.getReader();
    let text = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
      const m = text.match(/(?:^|\n)event: ?hello\r?\ndata: ?(.*)\r?\n/);
      if (m) {
        let hello;
        try {
          hello = JSON.parse(m[1]);
        } catch {
          bad(`/api/events hello data is not JSON: ${m[1]}`);
          break;
        }
        if (typeof hello.instance_id !== 'string' || hello.instance_id === '') {
          bad(`/api/events hello has no instance_id: ${m[1]}`);
        }
        break;
      }
    }
    if (!/event: ?hello/.test(text)) bad(`/api/events sent no hello event: ${JSON.stringify(text.slice(0, 200))}`);
  } catch (e) {
    bad(`GET /api/events: no hello event within 10 s (${e.message})`);
  } finally {
    clearTimeout(timer);
    ac.abort();
  }
}

/**
 * checkPost sends a page action its documented example body (as the
 * page does: JSON, same origin), then the refusals it documents.
 */
async function checkPost(path, op, params) {
  const media = op.requestBody?.content?.['application/json'];
  if (!media) {
    bad(`POST ${path}: no application/json request body documented`);
    return;
  }
  const example = JSON.stringify(media.example ?? {});
  const json = { ...auth, 'Content-Type': 'application/json', Accept: 'application/json' };
  const post = (headers, body = example) => ({ method: 'POST', headers, body });
  const ok = Object.keys(op.responses || {}).filter((st) => /^2\d\d$/.test(st)).sort()[0];
  if (!ok) bad(`POST ${path}: no 2xx response documented`);
  await check('example', op, buildPath(path, params), ok, post(json));
  if (op.responses?.['404']) {
    await check('unknown job', op, buildPath(path, params, { id: 'no-such-job-in-the-contract-test' }), 404, post(json));
  }
  if (op.responses?.['415']) {
    await check('a form\'s body', op, buildPath(path, params), 415, post({ ...auth, 'Content-Type': 'text/plain' }, 'a=1'));
  }
  if (op.responses?.['403']) {
    await check('another origin', op, buildPath(path, params), 403, post({ ...json, Origin: 'http://another.example' }));
  }
  if (token && op.responses?.['401'] === undefined) bad(`POST ${path}: 401 not documented though the daemon requires a token`);
}

// 3. Every documented operation with its examples, then its error answers.
for (const [path, item] of Object.entries(deref.paths || {})) {
  for (const m of methods) {
    const op = item[m];
    if (!op) continue;
    const params = [...(item.parameters || []), ...(op.parameters || [])];
    if (m === 'post') {
      await checkPost(path, op, params);
      continue;
    }
    if (m !== 'get') {
      bad(`${m.toUpperCase()} ${path}: only GET and the page's actions (POST) are expected`);
      continue;
    }
    if (path === '/api/events') {
      await checkEvents(op);
      continue;
    }
    const ok = Object.keys(op.responses || {}).filter((s) => /^[23]\d\d$/.test(s)).sort()[0];
    if (!ok) bad(`GET ${path}: no 2xx/3xx response documented`);
    await check('example', op, buildPath(path, params), ok);
    const query = params.filter((p) => p.in === 'query');
    if (op.responses?.['400'] && query.length) {
      for (const p of query) {
        const types = [].concat(p.schema?.type || []);
        if (types.includes('integer') || types.includes('number')) {
          await check(`bad ${p.name}`, op, buildPath(path, params, { [p.name]: 'not-a-number' }), 400);
          if (p.schema.minimum !== undefined) {
            await check(`${p.name} below minimum`, op, buildPath(path, params, { [p.name]: p.schema.minimum - 1 }), 400);
          }
          if (p.schema.maximum !== undefined) {
            await check(`${p.name} above maximum`, op, buildPath(path, params, { [p.name]: p.schema.maximum + 1 }), 400);
          }
        }
        if (Array.isArray(p.schema?.enum)) {
          await check(`bad ${p.name}`, op, buildPath(path, params, { [p.name]: 'no-such-value' }), 400);
        }
      }
      await check('unknown parameter', op, buildPath(path, params, { no_such_parameter: '1' }), 400);
    }
    if (op.responses?.['404'] && params.some((p) => p.in === 'path' && p.name === 'id')) {
      await check('unknown job', op, buildPath(path, params, { id: 'no-such-job-in-the-contract-test' }), 404);
    }
    if (token && op.responses?.['401'] === undefined && !['/healthz', '/readyz'].includes(path)) {
      bad(`GET ${path}: 401 not documented though the daemon requires a token`);
    }
  }
}

// 4. Auth, when the daemon has a token.
if (token) {
  for (const path of Object.keys(deref.paths || {})) {
    if (!deref.paths[path].get || path.includes('{')) continue;
    const resp = await get(path, { headers: {} });
    await resp.body?.cancel();
    const open = path === '/healthz' || path === '/readyz';
    if (open && resp.status === 401) bad(`GET ${path} without credentials → 401, want it open`);
    if (!open) {
      if (resp.status !== 401) bad(`GET ${path} without credentials → ${resp.status}, want 401`);
      const wa = resp.headers.get('www-authenticate') || '';
      if (!/^Basic realm="cronswap"/.test(wa)) bad(`GET ${path} 401: WWW-Authenticate "${wa}", want Basic realm="cronswap"`);
    }
  }
  const basic = `Basic ${Buffer.from(`anyone:${token}`).toString('base64')}`;
  const rb = await get('/api/status', { headers: { Authorization: basic } });
  await rb.body?.cancel();
  if (rb.status !== 200) bad(`GET /api/status with basic auth (token as password) → ${rb.status}, want 200`);
  const wrong = await get('/api/status', { headers: { Authorization: `Bearer x${token}` } });
  await wrong.body?.cancel();
  if (wrong.status !== 401) bad(`GET /api/status with a wrong bearer token → ${wrong.status}, want 401`);
}

console.log(JSON.stringify({ paths: Object.keys(deref.paths || {}).length, calls, mismatches: mismatches.length }));
if (mismatches.length) {
  console.error(`\n${mismatches.length} mismatch(es) between the daemon and its OpenAPI document:`);
  for (const m of mismatches) console.error(`- ${m}`);
  process.exit(1);
}
