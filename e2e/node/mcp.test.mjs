// The official MCP TypeScript SDK's client (@modelcontextprotocol/sdk,
// pinned) against Forge's /mcp: each agent a tool ask_<agent>. The server
// (e2e/node_test.go TestNodeMCPClient) has two tenants' keys, FORGE_KEY_A
// and FORGE_KEY_B.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { base } from './helpers.mjs';

const keyA = process.env.FORGE_KEY_A;
const keyB = process.env.FORGE_KEY_B;
if (!keyA || !keyB) throw new Error('FORGE_KEY_A and FORGE_KEY_B are not set: run through go test ./e2e -run TestNodeMCPClient');

// api calls Forge's native API with a tenant's key.
async function api(key, method, path, body) {
  const r = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await r.text();
  assert.ok(r.ok, `${method} ${path}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

const agent = (key, def) => api(key, 'POST', '/v1/agents', { model: 'scripted/x', ...def });

// connect makes a client of /mcp with a tenant's key.
async function connect(key, capabilities = {}, setup = () => {}) {
  const c = new Client({ name: 'forge-node-test', version: '1.0.0' }, { capabilities });
  setup(c);
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${key}` } },
  });
  await c.connect(transport);
  return c;
}

// waitFor polls cond (async) until it answers truthy.
async function waitFor(what, cond) {
  const deadline = Date.now() + 20000;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const text = (res) => res.content.filter((c) => c.type === 'text').map((c) => c.text).join('');

test('tools are ask_<agent>; a call answers the text and structured content; session_id continues', async () => {
  await agent(keyA, { name: 'mcp-echo', model: 'scripted/echo' });
  const c = await connect(keyA);
  try {
    const { tools } = await c.listTools();
    const tool = tools.find((t) => t.name === 'ask_mcp-echo');
    assert.ok(tool, tools.map((t) => t.name).join());
    assert.deepEqual(tool.inputSchema.required, ['message']);
    assert.ok(tool.inputSchema.properties.session_id);

    const res = await c.callTool({ name: 'ask_mcp-echo', arguments: { message: 'hello node' } });
    assert.equal(res.isError, undefined);
    assert.equal(text(res), 'echo: hello node');
    const out = res.structuredContent;
    assert.match(out.session_id, /^ses_/);
    assert.match(out.turn_id, /^turn_/);
    assert.equal(out.output, 'echo: hello node');

    const next = await c.callTool({ name: 'ask_mcp-echo', arguments: { message: 'again', session_id: out.session_id } });
    assert.equal(next.structuredContent.session_id, out.session_id);
    assert.notEqual(next.structuredContent.turn_id, out.turn_id);
    assert.equal(text(next), 'echo: again');
    const turns = await api(keyA, 'GET', `/v1/sessions/${out.session_id}/turns`);
    assert.deepEqual(turns.data.map((t) => t.id).sort(), [out.turn_id, next.structuredContent.turn_id].sort());
  } finally {
    await c.close();
  }
});

test('progress notifications carry the streamed text', async () => {
  await agent(keyA, { name: 'mcp-talk', model_params: { script: [{ text: 'one two three four five', delay_ms: 2 }] } });
  const c = await connect(keyA);
  try {
    const seen = [];
    const res = await c.callTool({ name: 'ask_mcp-talk', arguments: { message: 'talk' } }, undefined, {
      onprogress: (p) => seen.push(p),
    });
    assert.equal(text(res), 'one two three four five');
    // The SDK calls onprogress before it settles the answer of the same
    // stream, in order.
    assert.ok(seen.length >= 3, JSON.stringify(seen));
    assert.deepEqual(seen.map((p) => p.progress), seen.map((_, i) => i + 1));
    assert.equal(seen.map((p) => p.message).join(''), 'one two three four five');
  } finally {
    await c.close();
  }
});

test('aborting the call cancels the turn', async () => {
  await agent(keyA, { name: 'mcp-slow', model_params: { script: [{ text: 'thinking', hang: true }] } });
  const c = await connect(keyA);
  try {
    const abort = new AbortController();
    let sessionID;
    const call = c.callTool({ name: 'ask_mcp-slow', arguments: { message: 'go' } }, undefined, {
      signal: abort.signal,
      onprogress: () => {},
    });
    const rejected = assert.rejects(call);
    // The session is the agent's newest: find its running turn.
    const running = await waitFor('a running turn', async () => {
      const list = await api(keyA, 'GET', '/v1/sessions?agent=mcp-slow');
      for (const s of list.data) {
        const turns = await api(keyA, 'GET', `/v1/sessions/${s.id}/turns`);
        const t = turns.data.find((t) => t.status === 'running');
        if (t) { sessionID = s.id; return t; }
      }
      return null;
    });
    abort.abort();
    await rejected;
    await waitFor('the turn cancelled', async () => {
      const t = await api(keyA, 'GET', `/v1/sessions/${sessionID}/turns/${running.id}`);
      return t.status === 'cancelled';
    });
  } finally {
    await c.close();
  }
});

test('a turn paused for an approval answers what is pending (a client without elicitation)', async () => {
  await agent(keyA, {
    name: 'mcp-ask', tools: ['echo'], approval: { echo: 'ask' },
    model_params: { script: [{ tool_calls: [{ name: 'echo', arguments: { text: 'x' } }] }, { text: 'approved, done' }] },
  });
  const c = await connect(keyA);
  try {
    const res = await c.callTool({ name: 'ask_mcp-ask', arguments: { message: 'echo x' } });
    assert.equal(res.isError, undefined);
    const out = res.structuredContent;
    assert.equal(out.pending.length, 1);
    const [action] = out.pending;
    assert.equal(action.type, 'approval');
    assert.equal(action.tool, 'echo');
    assert.match(text(res), new RegExp(`POST /v1/sessions/${out.session_id}/turns`));
    assert.match(text(res), new RegExp(action.call_id));
  } finally {
    await c.close();
  }
});

test('a client with elicitation is asked to approve; the same call goes on to the final text', async () => {
  await agent(keyA, {
    name: 'mcp-elicit', tools: ['echo'], approval: { echo: 'ask' },
    model_params: { script: [
      { tool_calls: [{ name: 'echo', arguments: { text: 'first' } }] },
      { tool_calls: [{ name: 'echo', arguments: { text: 'second' } }] },
      { text: 'all done' },
    ] },
  });
  const asked = [];
  const answers = [
    { action: 'accept', content: { approve: true } },
    { action: 'decline' },
  ];
  const c = await connect(keyA, { elicitation: {} }, (c) => c.setRequestHandler(ElicitRequestSchema, (req) => {
    asked.push(req.params);
    return answers[asked.length - 1] ?? { action: 'cancel' };
  }));
  try {
    const res = await c.callTool({ name: 'ask_mcp-elicit', arguments: { message: 'echo twice' } });
    assert.equal(res.isError, undefined);
    assert.equal(text(res), 'all done');
    assert.equal(res.structuredContent.status, 'done');
    assert.equal(res.structuredContent.pending, undefined);
    assert.equal(asked.length, 2);
    assert.match(asked[0].message, /mcp-elicit.*echo.*first/);
    assert.match(asked[1].message, /second/);
    assert.equal(asked[0].requestedSchema.properties.approve.type, 'boolean');
    assert.deepEqual(asked[0].requestedSchema.required, ['approve']);
    // The first call ran, the second was refused.
    const msgs = JSON.stringify(await api(keyA, 'GET', `/v1/sessions/${res.structuredContent.session_id}/messages`));
    assert.match(msgs, /"output":"first"/);
    assert.doesNotMatch(msgs, /"output":"second"/);
    assert.match(msgs, /the user denied this call: the MCP client answered decline/);
  } finally {
    await c.close();
  }
});

test("another tenant's session_id and agents are refused", async () => {
  await agent(keyA, { name: 'mcp-mine', model: 'scripted/echo' });
  await agent(keyB, { name: 'mcp-mine', model: 'scripted/echo' });
  const a = await connect(keyA);
  const b = await connect(keyB);
  try {
    const res = await a.callTool({ name: 'ask_mcp-mine', arguments: { message: 'secret' } });
    const sid = res.structuredContent.session_id;
    const { tools } = await b.listTools();
    assert.deepEqual(tools.map((t) => t.name), ['ask_mcp-mine']);
    const stolen = await b.callTool({ name: 'ask_mcp-mine', arguments: { message: 'x', session_id: sid } });
    assert.equal(stolen.isError, true);
    assert.match(text(stolen), /not_found/);
    const turns = await api(keyA, 'GET', `/v1/sessions/${sid}/turns`);
    assert.equal(turns.data.length, 1);
    // A wrong key never reaches MCP.
    await assert.rejects(connect('nope'), /401|Unauthorized|invalid/i);
  } finally {
    await a.close();
    await b.close();
  }
});

test('a new agent is in the next tools/list', async () => {
  const changed = [];
  const c = await connect(keyB, {}, (c) => c.setNotificationHandler(ToolListChangedNotificationSchema, (n) => changed.push(n)));
  try {
    const before = (await c.listTools()).tools.map((t) => t.name);
    assert.ok(!before.includes('ask_mcp-new'));
    await agent(keyB, { name: 'mcp-new', model: 'scripted/echo' });
    const after = (await c.listTools()).tools.map((t) => t.name);
    assert.ok(after.includes('ask_mcp-new'), after.join());
    // Forge announces no list changes (tools.listChanged is false): it
    // learns of a new agent only when asked, and a client lists again.
    assert.ok(c.getServerCapabilities().tools && !c.getServerCapabilities().tools.listChanged);
    assert.equal(changed.length, 0);
  } finally {
    await c.close();
  }
});
