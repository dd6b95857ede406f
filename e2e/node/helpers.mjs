// Shared helpers of the Node client tests: FORGE_URL is a running forge
// serve (e2e/node_test.go starts one).
import assert from 'node:assert/strict';

export const base = process.env.FORGE_URL;
if (!base) {
  throw new Error('FORGE_URL is not set: run these tests through go test ./e2e -run TestNodeClients');
}

// agent creates a Forge agent (scripted model) through the native API.
export async function agent(def) {
  const r = await fetch(`${base}/v1/agents`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'scripted/x', ...def }),
  });
  assert.equal(r.status, 201, await r.text());
}

// forge calls the native API and returns the decoded answer.
export async function forge(method, path, body) {
  const r = await fetch(`${base}${path}`, {
    method,
    headers: body ? { 'content-type': 'application/json' } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await r.text();
  assert.ok(r.ok, `${method} ${path}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}
