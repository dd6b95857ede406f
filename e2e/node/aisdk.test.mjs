// The AI SDK's DefaultChatTransport (what useChat uses) and
// readUIMessageStream against Forge's chat endpoints.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DefaultChatTransport, readUIMessageStream } from 'ai';
import { agent, base, forge } from './helpers.mjs';

const transport = (name) => new DefaultChatTransport({ api: `${base}/aisdk/v1/agents/${name}/chat` });
const user = (id, text) => ({ id, role: 'user', parts: [{ type: 'text', text }] });
const textOf = (m) => m.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');

// send posts the chat and reads the answer as useChat does; continuing
// (an assistant message last) continues that message.
async function send(t, chatId, messages, { trigger = 'submit-message', messageId } = {}) {
  const stream = await t.sendMessages({ chatId, messages, trigger, messageId, abortSignal: undefined });
  const lastMsg = messages[messages.length - 1];
  let last;
  for await (const m of readUIMessageStream({
    stream, message: lastMsg.role === 'assistant' ? structuredClone(lastMsg) : undefined, terminateOnError: true,
  })) last = m;
  return last;
}

test('send: one user message streams one assistant message', async () => {
  await agent({ name: 'ui-send', model_params: { script: [{ reasoning: 'hmm', text: 'Hello there' }] } });
  const msg = await send(transport('ui-send'), 'chat-send', [user('u1', 'hi')]);
  assert.equal(msg.role, 'assistant');
  assert.match(msg.id, /^turn_/);
  assert.equal(textOf(msg), 'Hello there');
  assert.deepEqual(msg.parts.map((p) => p.type), ['step-start', 'reasoning', 'text']);
});

test('approval resubmission continues the same message', async () => {
  await agent({
    name: 'ui-approve', tools: ['echo'], approval: { echo: 'ask' },
    model_params: { script: [{ tool_calls: [{ name: 'echo', arguments: { text: 'approved!' } }] }, { text: 'done' }] },
  });
  const t = transport('ui-approve');
  const u = user('u1', 'echo it');
  const first = await send(t, 'chat-approve', [u]);
  const part = first.parts.find((p) => p.type === 'tool-echo');
  assert.equal(part.state, 'approval-requested', JSON.stringify(first.parts));
  // What addToolApprovalResponse does, then the automatic resubmission.
  part.state = 'approval-responded';
  part.approval = { ...part.approval, approved: true };
  const second = await send(t, 'chat-approve', [u, first]);
  assert.equal(second.id, first.id);
  const done = second.parts.find((p) => p.type === 'tool-echo');
  assert.equal(done.state, 'output-available');
  assert.equal(done.output, 'approved!');
  assert.equal(textOf(second), 'done');
});

test('client tool output is sent back and the turn continues', async () => {
  await agent({
    name: 'ui-client-tool',
    tools: [{ name: 'lookup', description: 'looks up', input_schema: { type: 'object' }, client: true }],
    model_params: { script: [{ tool_calls: [{ name: 'lookup', arguments: { q: '42' } }] }, { text: 'It is in Paris.' }] },
  });
  const t = transport('ui-client-tool');
  const u = user('u1', 'where is 42?');
  const first = await send(t, 'chat-tool', [u]);
  const part = first.parts.find((p) => p.type === 'tool-lookup');
  assert.equal(part.state, 'input-available');
  assert.deepEqual(part.input, { q: '42' });
  assert.ok(!part.providerExecuted);
  // What addToolOutput does.
  part.state = 'output-available';
  part.output = { city: 'Paris' };
  const second = await send(t, 'chat-tool', [u, first]);
  assert.equal(second.id, first.id);
  assert.equal(textOf(second), 'It is in Paris.');
});

test('regenerate forks before the regenerated answer', async () => {
  await agent({ name: 'ui-regen' });
  const ses = await forge('POST', '/v1/sessions', { agent: 'ui-regen' });
  const t = transport('ui-regen');
  const u1 = user('u1', 'one');
  const a1 = await send(t, ses.id, [u1]);
  assert.equal(textOf(a1), 'echo: one');
  const u2 = user('u2', 'two');
  const a2 = await send(t, ses.id, [u1, a1, u2]);
  assert.equal(textOf(a2), 'echo: two');
  const a3 = await send(t, ses.id, [u1, a1, u2], { trigger: 'regenerate-message', messageId: a2.id });
  assert.notEqual(a3.id, a2.id);
  const turns = (await forge('GET', `/v1/sessions/${ses.id}/turns`)).data;
  const byId = Object.fromEntries(turns.map((x) => [x.id, x]));
  assert.equal(byId[a3.id].previous_turn_id, a1.id, 'the regenerated turn forks from the first answer');
  assert.equal(byId[a2.id].previous_turn_id, a1.id, 'the old answer is kept on its branch');
  // An edited first message forks from the start.
  const a4 = await send(t, ses.id, [user('u1', 'uno')]);
  assert.equal(byId[a4.id], undefined);
  assert.equal(textOf(a4), 'echo: uno');
  const tip = await forge('GET', `/v1/sessions/${ses.id}`);
  assert.equal(tip.tip_turn_id, a4.id);
  assert.equal((await forge('GET', `/v1/sessions/${ses.id}/turns/${a4.id}`)).previous_turn_id, null);
});

test('reconnect mid-turn replays it, stop ends it with abort', async () => {
  await agent({ name: 'ui-resume', model_params: { script: [{ text: 'partial answer', hang: true }] } });
  const t = transport('ui-resume');
  const abort = new AbortController();
  const stream = await t.sendMessages({ chatId: 'chat-resume', messages: [user('u1', 'go')], trigger: 'submit-message', abortSignal: abort.signal });
  const reader = stream.getReader();
  let text = '';
  while (text !== 'partial answer') {
    const { value, done } = await reader.read();
    assert.ok(!done, 'the stream ended early');
    if (value.type === 'text-delta') text += value.delta;
  }
  abort.abort(); // the client goes away; the turn runs on
  await reader.cancel().catch(() => {});

  const resumed = await t.reconnectToStream({ chatId: 'chat-resume' });
  assert.ok(resumed, 'a running turn can be resumed');
  const chunks = [];
  const r2 = resumed.getReader();
  let replayed = '';
  while (replayed !== 'partial answer') {
    const { value, done } = await r2.read();
    assert.ok(!done, 'the resumed stream ended early');
    chunks.push(value);
    if (value.type === 'text-delta') replayed += value.delta;
  }
  assert.equal(chunks[0].type, 'start');
  const stop = await fetch(`${base}/aisdk/v1/agents/ui-resume/chat/chat-resume/stop`, { method: 'POST' });
  assert.deepEqual(await stop.json(), { stopped: true });
  for (;;) {
    const { value, done } = await r2.read();
    if (done) break;
    chunks.push(value);
  }
  assert.equal(chunks[chunks.length - 1].type, 'abort');
  // Nothing runs now: no stream to resume, and a second stop stops nothing.
  assert.equal(await t.reconnectToStream({ chatId: 'chat-resume' }), null);
  const again = await fetch(`${base}/aisdk/v1/agents/ui-resume/chat/chat-resume/stop`, { method: 'POST' });
  assert.deepEqual(await again.json(), { stopped: false });
});

test('a file part (sendMessage with files) reaches the model and comes back on reload', async () => {
  await agent({ name: 'ui-files', model: 'scripted/echo' });
  const file = { type: 'file', mediaType: 'text/plain', filename: 'notes.txt', url: 'data:text/plain;base64,' + Buffer.from('the order shipped\n').toString('base64') };
  const msg = await send(transport('ui-files'), 'chat-files', [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'read this' }, file] }]);
  assert.match(textOf(msg), /File: notes\.txt/);
  assert.match(textOf(msg), /the order shipped/);
  const restored = await forge('GET', '/aisdk/v1/agents/ui-files/chat/chat-files/messages');
  const back = restored[0].parts.find((p) => p.type === 'file');
  assert.equal(back.filename, 'notes.txt');
  assert.equal(back.mediaType, 'text/plain');
  assert.match(back.url, /^\/v1\/files\/file_/);
});
