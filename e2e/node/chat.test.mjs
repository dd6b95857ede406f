// The official OpenAI JS client against Forge's Chat Completions: the
// stateless client resends the whole conversation every time.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { agent, base, forge } from './helpers.mjs';

const client = new OpenAI({ baseURL: `${base}/openai/v1`, apiKey: 'unused', maxRetries: 0 });

test('chat.completions.create continues one session by resending history', async () => {
  await agent({ name: 'js-chat' });
  const messages = [{ role: 'user', content: 'one' }];
  const { data: first, response } = await client.chat.completions.create({ model: 'js-chat', messages }).withResponse();
  const sid = response.headers.get('forge-session-id');
  assert.ok(sid);
  assert.equal(first.object, 'chat.completion');
  assert.equal(first.choices[0].message.content, 'echo: one');
  assert.equal(first.choices[0].finish_reason, 'stop');
  assert.equal(first.usage.total_tokens, first.usage.prompt_tokens + first.usage.completion_tokens);
  messages.push(first.choices[0].message, { role: 'user', content: 'two' });
  const { data: second, response: r2 } = await client.chat.completions.create({ model: 'js-chat', messages }).withResponse();
  assert.equal(second.choices[0].message.content, 'echo: two');
  assert.equal(r2.headers.get('forge-session-id'), sid);
  const turns = await forge('GET', `/v1/sessions/${sid}/turns`);
  assert.equal(turns.data.length, 2);
});

test('streamed chunks with include_usage, then a client tool answered by a tool message', async () => {
  await agent({
    name: 'js-chat-tool',
    tools: [{ name: 'weather', description: 'weather in a city', client: true, input_schema: { type: 'object', properties: { city: { type: 'string' } } } }],
    model_params: { script: [
      { text: 'checking', tool_calls: [{ name: 'weather', arguments: { city: 'Paris' } }] },
      { text: 'sunny in Paris ✓' },
    ] },
  });
  const tools = [{ type: 'function', function: { name: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
  const messages = [{ role: 'user', content: 'weather?' }];
  const stream = await client.chat.completions.create({
    model: 'js-chat-tool', messages, tools, stream: true, stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const last = chunks[chunks.length - 1];
  assert.deepEqual(last.choices, []);
  assert.ok(last.usage.total_tokens > 0);
  const content = chunks.flatMap((c) => c.choices.map((ch) => ch.delta.content ?? '')).join('');
  assert.equal(content, 'checking');
  const calls = chunks.flatMap((c) => c.choices.flatMap((ch) => ch.delta.tool_calls ?? []));
  assert.equal(calls[0].index, 0);
  assert.equal(calls[0].function.name, 'weather');
  const args = calls.map((c) => c.function.arguments ?? '').join('');
  assert.deepEqual(JSON.parse(args), { city: 'Paris' });
  assert.equal(chunks[chunks.length - 2].choices[0].finish_reason, 'tool_calls');

  // The client's helper that accumulates a stream into a completion.
  const runner = client.chat.completions.stream({ model: 'js-chat-tool', messages, tools });
  const done = await runner.finalChatCompletion();
  const msg = done.choices[0].message;
  assert.equal(msg.tool_calls[0].function.name, 'weather');
  const { data: answer } = await client.chat.completions.create({
    model: 'js-chat-tool', tools,
    messages: [...messages, msg, { role: 'tool', tool_call_id: msg.tool_calls[0].id, content: '22°C, clear' }],
  }).withResponse();
  assert.equal(answer.choices[0].message.content, 'sunny in Paris ✓');
});

test('errors are OpenAI errors', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'no-such-agent', messages: [{ role: 'user', content: 'x' }] }),
    (err) => err.status === 404 && err.code === 'model_not_found',
  );
  await agent({ name: 'js-chat-strict', locked: true });
  await assert.rejects(
    client.chat.completions.create({ model: 'js-chat-strict', messages: [{ role: 'user', content: 'x' }], temperature: 0.3 }),
    (err) => err.status === 400 && err.type === 'invalid_request_error' && /agent js-chat-strict is locked/.test(err.message),
  );
  await assert.rejects(
    client.chat.completions.create({ model: 'js-chat-strict', messages: [{ role: 'user', content: 'x' }], logprobs: true }),
    (err) => err.status === 400 && err.param === 'logprobs',
  );
});

test('a history Forge never saw is imported, not re-run', async () => {
  await agent({ name: 'js-chat-import' });
  const { data, response } = await client.chat.completions.create({
    model: 'js-chat-import',
    messages: [
      { role: 'user', content: 'hello' },
      { role: 'assistant', content: 'hi, from another server' },
      { role: 'user', content: 'still there?' },
    ],
  }).withResponse();
  assert.equal(data.choices[0].message.content, 'echo: still there?');
  const sid = response.headers.get('forge-session-id');
  const turns = await forge('GET', `/v1/sessions/${sid}/turns`);
  assert.equal(turns.data.length, 1);
  const messages = await forge('GET', `/v1/sessions/${sid}/messages`);
  assert.deepEqual(messages.data.map((m) => m.role), ['user', 'assistant', 'user', 'assistant']);
});
