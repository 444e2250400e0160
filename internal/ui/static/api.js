// Reads of the daemon's JSON API, relative to the page (served at /ui/, the
// API at /api/), so the page works behind a proxy that moves both.

const base = new URL('../', document.baseURI);

/** url is the absolute URL of an API path such as "api/overview". */
export function url(path) {
  return new URL(path, base).toString();
}

/** getJSON fetches an API path and returns its JSON; it throws with the server's error message on a non-2xx answer. */
export async function getJSON(path, signal) {
  const r = await fetch(url(path), { headers: { Accept: 'application/json' }, cache: 'no-store', signal });
  if (!r.ok) {
    let msg = '';
    try { msg = (await r.json()).error || ''; } catch { /* not JSON */ }
    const e = new Error(`${path}: HTTP ${r.status}${msg ? `: ${msg}` : ''}`);
    e.status = r.status;
    throw e;
  }
  return r.json();
}

/**
 * postJSON sends body as JSON to an API path (the page's actions) and
 * returns the answer's JSON; it throws with the server's error message on
 * a non-2xx answer. The JSON body is what the daemon requires of a write:
 * no cross-site form can send one.
 */
export async function postJSON(path, body = {}) {
  const r = await fetch(url(path), {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
    body: JSON.stringify(body),
    cache: 'no-store',
  });
  let data = null;
  try { data = await r.json(); } catch { /* not JSON */ }
  if (!r.ok) {
    const e = new Error((data && data.error) || `HTTP ${r.status}`);
    e.status = r.status;
    throw e;
  }
  return data;
}

let session = null;

/**
 * getSession returns who the page acts as and whether it may offer its
 * actions ({user, role, can_write, read_only}), read once per page load.
 */
export function getSession() {
  if (!session) {
    session = getJSON('api/session').catch((e) => {
      session = null;
      return { user: '', role: '', can_write: false, read_only: `read-only: ${e.message}` };
    });
  }
  return session;
}
