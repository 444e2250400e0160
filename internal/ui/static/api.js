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
