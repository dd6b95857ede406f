// The official OpenAI JS client against Forge's Responses API.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';
import { agent, base, forge } from './helpers.mjs';

const client = new OpenAI({ baseURL: `${base}/openai/v1`, apiKey: 'unused', maxRetries: 0 });

// plain drops what the SDK's parser adds on its own (output_text,
// output_parsed, parsed) so a streamed final response and a retrieved one
// compare as the server sent them.
const plain = (r) => JSON.parse(JSON.stringify(r, (k, v) =>
  (k === 'output_text' || k === 'output_parsed' || k === 'parsed') ? undefined : v));

test('stream().finalResponse() equals the stored response, and resumes by id', async () => {
  await agent({
    name: 'js-stream', tools: ['echo'],
    model_params: { script: [
      { reasoning: 'think first', tool_calls: [{ name: 'echo', arguments: { text: 'ping' } }] },
      { text: 'got ping ✓' },
    ] },
  });
  const stream = client.responses.stream({ model: 'js-stream', input: 'echo ping' });
  const seqs = [];
  const live = [];
  for await (const ev of stream) {
    seqs.push(ev.sequence_number);
    live.push(ev);
  }
  const final = await stream.finalResponse();
  assert.equal(final.output_text, 'got ping ✓');
  assert.deepEqual(final.output.map((o) => o.type), ['reasoning', 'mcp_call', 'message']);
  assert.equal(final.output[1].output, 'ping');
  for (let i = 1; i < seqs.length; i++) assert.ok(seqs[i] > seqs[i - 1], `sequence ${seqs[i]} after ${seqs[i - 1]}`);

  const got = await client.responses.retrieve(final.id);
  assert.deepEqual(plain(got), plain(final));

  // The SDK's own resume: replay by id, events after starting_after only.
  const cut = seqs[5];
  const resumed = client.responses.stream({ response_id: final.id, starting_after: cut });
  const after = [];
  for await (const ev of resumed) after.push(ev.sequence_number);
  assert.ok(after.length > 0 && after.every((n) => n > cut));
  assert.deepEqual(plain(await resumed.finalResponse()), plain(final));

  // Server-side resume of the finished response: numbers the live stream
  // used, and the rest of the text once (a replay delivers a part's text
  // as one delta, numbered as the live part's last delta).
  const deltas = (evs) => evs.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  const server = await client.responses.retrieve(final.id, { stream: true, starting_after: cut });
  const rest = [];
  for await (const ev of server) rest.push(ev);
  assert.ok(rest.length > 0 && rest.every((e) => e.sequence_number > cut && seqs.includes(e.sequence_number)));
  assert.equal(deltas(rest), deltas(live.filter((e) => e.sequence_number > cut)));
  assert.equal(rest[rest.length - 1].type, 'response.completed');
});

test('chains with previous_response_id and continues a conversation', async () => {
  await agent({ name: 'js-chain' });
  const first = await client.responses.create({ model: 'js-chain', input: 'one' });
  assert.equal(first.output_text, 'echo: one');
  const second = await client.responses.create({ model: 'js-chain', input: 'two', previous_response_id: first.id });
  assert.equal(second.previous_response_id, first.id);
  const third = await client.responses.create({ model: 'js-chain', input: 'three', conversation: first.conversation.id });
  assert.equal(third.previous_response_id, second.id);
  assert.equal(third.conversation.id, first.conversation.id);
});

test('approval round trip with mcp_approval_response', async () => {
  await agent({
    name: 'js-approve', tools: ['echo'], approval: { echo: 'ask' },
    model_params: { script: [{ tool_calls: [{ name: 'echo', arguments: { text: 'approved!' } }] }, { text: 'done' }] },
  });
  const stream = client.responses.stream({ model: 'js-approve', input: 'echo it' });
  const first = await stream.finalResponse();
  assert.equal(first.output.length, 1);
  const req = first.output[0];
  assert.equal(req.type, 'mcp_approval_request');
  assert.equal(req.name, 'echo');
  const second = await client.responses.stream({
    model: 'js-approve', previous_response_id: first.id,
    input: [{ type: 'mcp_approval_response', approval_request_id: req.id, approve: true }],
  }).finalResponse();
  assert.equal(second.output[0].type, 'mcp_call');
  assert.equal(second.output[0].output, 'approved!');
  assert.equal(second.output[0].approval_request_id, req.id);
  assert.equal(second.output_text, 'done');
});

test('client tool round trip with function_call_output', async () => {
  await agent({
    name: 'js-client-tool',
    tools: [{ name: 'lookup', description: 'looks up', input_schema: { type: 'object' }, client: true }],
    model_params: { script: [{ tool_calls: [{ name: 'lookup', arguments: { q: '42' } }] }, { text: 'It is in Paris.' }] },
  });
  const first = await client.responses.create({ model: 'js-client-tool', input: 'where is 42?' });
  const call = first.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(first.output));
  assert.equal(JSON.parse(call.arguments).q, '42');
  const second = await client.responses.create({
    model: 'js-client-tool', previous_response_id: first.id,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: 'Paris' }],
  });
  assert.equal(second.output_text, 'It is in Paris.');
});

test('a background response is cancelled; errors have OpenAI shape', async () => {
  await agent({ name: 'js-cancel', model_params: { script: [{ text: 'never ends', hang: true }] } });
  const bg = await client.responses.create({ model: 'js-cancel', input: 'hang', background: true });
  assert.equal(bg.status, 'in_progress');
  const cancelled = await client.responses.cancel(bg.id);
  assert.equal(cancelled.status, 'cancelled');
  assert.equal((await client.responses.retrieve(bg.id)).status, 'cancelled');

  await assert.rejects(client.responses.create({ model: 'nobody', input: 'hi' }), (err) => {
    assert.equal(err.status, 404);
    assert.equal(err.code, 'model_not_found');
    return true;
  });
  await assert.rejects(client.responses.create({ model: 'js-cancel', input: 'hi', temperature: 5 }), (err) => {
    assert.equal(err.status, 400);
    assert.equal(err.param, 'temperature');
    assert.equal(err.type, 'invalid_request_error');
    return true;
  });
});

// A 1×1 PNG.
const dot = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==', 'base64');

test('files.create, then input_image by file_id and as a data URL', async () => {
  await agent({ name: 'js-files' });
  const f = await client.files.create({ file: await toFile(dot, 'dot.png', { type: 'image/png' }), purpose: 'user_data' });
  assert.equal(f.object, 'file');
  assert.equal(f.bytes, dot.length);
  assert.equal(f.filename, 'dot.png');
  assert.equal((await client.files.retrieve(f.id)).id, f.id);
  assert.deepEqual(Buffer.from(await (await client.files.content(f.id)).arrayBuffer()), dot);
  const listed = [];
  for await (const x of client.files.list()) listed.push(x.id);
  assert.ok(listed.includes(f.id));

  const r = await client.responses.create({
    model: 'js-files',
    input: [{ role: 'user', content: [
      { type: 'input_text', text: 'what are these?' },
      { type: 'input_image', file_id: f.id, detail: 'auto' },
      { type: 'input_image', image_url: `data:image/png;base64,${dot.toString('base64')}`, detail: 'auto' },
    ] }],
  });
  assert.equal(r.status, 'completed');
  assert.equal(r.output_text, 'echo: what are these?');
  // The user message holds both images as file parts: the upload itself,
  // and the inline copy stored once (the same bytes).
  const msgs = await forge('GET', `/v1/sessions/${r.conversation.id}/messages`);
  const user = msgs.data.find((m) => m.role === 'user');
  const files = user.parts.filter((p) => p.type === 'file').map((p) => p.data);
  assert.equal(files.length, 2, JSON.stringify(user.parts));
  assert.equal(files[0].file_id, f.id);
  for (const d of files) assert.equal(d.mime_type, 'image/png');
  const inline = await fetch(`${base}/v1/files/${files[1].file_id}/content`);
  assert.deepEqual(Buffer.from(await inline.arrayBuffer()), dot);

  // Hostile: a remote URL is never fetched; a lying data URL and another
  // file's unknown id are refused, in OpenAI's error shape.
  const refused = async (content, status) => {
    await assert.rejects(client.responses.create({ model: 'js-files', input: [{ role: 'user', content }] }), (err) => {
      assert.equal(err.status, status, err.message);
      return true;
    });
  };
  await refused([{ type: 'input_image', image_url: 'http://169.254.169.254/latest/meta-data', detail: 'auto' }], 400);
  await refused([{ type: 'input_image', image_url: `data:image/png;base64,${Buffer.from('MZ not a png').toString('base64')}`, detail: 'auto' }], 400);
  await refused([{ type: 'input_image', file_id: 'file_nobody', detail: 'auto' }], 404);

  await client.files.delete(f.id);
  await assert.rejects(client.files.retrieve(f.id), (err) => err.status === 404);
});
