// The OpenAI Agents SDK and LangChain against Forge, each in its default
// multi-turn: the client keeps the history and resends it (API.md,
// "Stateless clients and Chat Completions").
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Agent, MemorySession, OpenAIConversationsSession, OpenAIProvider, Runner, setTracingDisabled, tool } from '@openai/agents';
import { ChatOpenAI } from '@langchain/openai';
import { generateText, Output } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { AIMessage, HumanMessage } from '@langchain/core/messages';
import { z } from 'zod';
import { agent, base, forge } from './helpers.mjs';

setTracingDisabled(true);
const provider = new OpenAIProvider({ baseURL: `${base}/openai/v1`, apiKey: 'unused', useResponses: true });
const runner = new Runner({ modelProvider: provider, tracingDisabled: true });

// sessionOf is the Forge session a run's last response belongs to.
async function sessionOf(result) {
  const r = await forge('GET', `/openai/v1/responses/${result.lastResponseId}`);
  return r.conversation.id;
}

async function userTexts(sid) {
  const msgs = await forge('GET', `/v1/sessions/${sid}/messages?limit=100`);
  return msgs.data.filter((m) => m.role === 'user').map((m) => m.parts.map((p) => p.text ?? '').join(''));
}

test('Agents SDK: run twice passing result.history continues one session', async () => {
  await agent({ name: 'js-agents' });
  // Instructions are sent per request (the turn's overrides).
  const a = new Agent({ name: 'helper', model: 'js-agents', instructions: 'Be brief.' });
  const first = await runner.run(a, 'one');
  assert.equal(first.finalOutput, 'echo: one');
  const sid = await sessionOf(first);
  const second = await runner.run(a, [...first.history, { role: 'user', content: 'two' }]);
  assert.equal(second.finalOutput, 'echo: two');
  assert.equal(await sessionOf(second), sid);
  const turns = await forge('GET', `/v1/sessions/${sid}/turns`);
  assert.equal(turns.data.length, 2, 'nothing ran twice');
  assert.deepEqual(await userTexts(sid), ['one', 'two']);
});

test('Agents SDK: a function tool round trip, then the history resent', async () => {
  await agent({
    name: 'js-agents-tool',
    model_params: { script: [
      { tool_calls: [{ name: 'weather', arguments: { city: 'Paris' } }] },
      { text: 'sunny in Paris' },
      { text: 'you asked about Paris' },
    ] },
  });
  const weather = tool({
    name: 'weather', description: 'weather in a city', parameters: z.object({ city: z.string() }),
    execute: async ({ city }) => `sunny in ${city}`,
  });
  const a = new Agent({ name: 'weatherman', model: 'js-agents-tool', tools: [weather] });
  const first = await runner.run(a, 'weather?');
  assert.equal(first.finalOutput, 'sunny in Paris');
  const sid = await sessionOf(first);
  const second = await runner.run(a, [...first.history, { role: 'user', content: 'what did I ask?' }]);
  assert.equal(second.finalOutput, 'you asked about Paris');
  assert.equal(await sessionOf(second), sid);
  const turns = await forge('GET', `/v1/sessions/${sid}/turns`);
  assert.equal(turns.data.length, 3, 'the call, its output, the next question: nothing ran twice');
});

test('Agents SDK: MemorySession', async () => {
  await agent({ name: 'js-agents-memory' });
  const a = new Agent({ name: 'memo', model: 'js-agents-memory' });
  const session = new MemorySession();
  const first = await runner.run(a, 'one', { session });
  const second = await runner.run(a, 'two', { session });
  assert.equal(second.finalOutput, 'echo: two');
  const sid = await sessionOf(first);
  assert.equal(await sessionOf(second), sid);
  assert.deepEqual(await userTexts(sid), ['one', 'two']);
});

test('Agents SDK: OpenAIConversationsSession', async () => {
  await agent({ name: 'js-agents-conv' });
  const a = new Agent({ name: 'conv', model: 'js-agents-conv' });
  const session = new OpenAIConversationsSession({ baseURL: `${base}/openai/v1`, apiKey: 'unused' });
  const first = await runner.run(a, 'one', { session });
  assert.equal(first.finalOutput, 'echo: one');
  const second = await runner.run(a, 'two', { session });
  assert.equal(second.finalOutput, 'echo: two');
  const sid = await sessionOf(first);
  assert.equal(await sessionOf(second), sid);
  assert.deepEqual(await userTexts(sid), ['one', 'two']);
  const items = await session.getItems();
  assert.deepEqual(items.map((i) => i.role), ['user', 'assistant', 'user', 'assistant']);
  await session.clearSession();
});

test('LangChain ChatOpenAI (Chat Completions) multi-turn', async () => {
  await agent({ name: 'js-langchain' });
  const llm = new ChatOpenAI({ model: 'js-langchain', apiKey: 'unused', configuration: { baseURL: `${base}/openai/v1` }, maxRetries: 0 });
  const history = [new HumanMessage('one')];
  const first = await llm.invoke(history);
  assert.equal(first.content, 'echo: one');
  history.push(new AIMessage(first.content), new HumanMessage('two'));
  const second = await llm.invoke(history);
  assert.equal(second.content, 'echo: two');
  const sessions = await forge('GET', '/v1/sessions?agent=js-langchain');
  assert.equal(sessions.data.length, 1, 'one session for the conversation');
  assert.deepEqual(await userTexts(sessions.data[0].id), ['one', 'two']);
});

test('AI SDK generateText multi-turn over Responses (item_reference to Forge ids)', async () => {
  await agent({ name: 'js-aisdk-multi', model_params: { script: [{ reasoning: 'thinking', text: 'first' }, { text: 'second' }] } });
  const requests = [];
  const provider = createOpenAI({
    baseURL: `${base}/openai/v1`, apiKey: 'unused',
    fetch: async (url, init) => { requests.push(JSON.parse(init.body)); return fetch(url, init); },
  });
  const model = provider.responses('js-aisdk-multi');
  const messages = [{ role: 'user', content: 'one' }];
  const first = await generateText({ model, messages });
  assert.equal(first.text, 'first');
  assert.equal(first.reasoningText, 'thinking', 'reasoning shown from its summary');
  messages.push(...first.response.messages, { role: 'user', content: 'two' });
  const second = await generateText({ model, messages });
  assert.equal(second.text, 'second');
  assert.ok(requests[1].input.some((it) => it.type === 'item_reference'), JSON.stringify(requests[1].input));
  const r = await forge('GET', `/openai/v1/responses/${second.response.id}`);
  assert.equal(r.previous_response_id, first.response.id);
  const turns = await forge('GET', `/v1/sessions/${r.conversation.id}/turns`);
  assert.equal(turns.data.length, 2, 'nothing ran twice');
});

test('AI SDK Output.object over Responses: text.format json_schema, validated by Forge', async () => {
  await agent({ name: 'js-aisdk-object', model_params: { script: [
    { text: '{"severity": "high"}' },
    { text: '{"severity": "high", "area": "billing"}' },
  ] } });
  const requests = [];
  const provider = createOpenAI({
    baseURL: `${base}/openai/v1`, apiKey: 'unused',
    fetch: async (url, init) => { requests.push(JSON.parse(init.body)); return fetch(url, init); },
  });
  const schema = z.object({ severity: z.enum(['low', 'high']), area: z.string() });
  const result = await generateText({
    model: provider.responses('js-aisdk-object'), prompt: 'triage: the invoice is wrong',
    output: Output.object({ schema, name: 'triage' }),
  });
  // The SDK asked in the Responses way, Forge repaired the first answer
  // (area missing) and the SDK parsed the valid one.
  assert.equal(requests[0].text.format.type, 'json_schema', JSON.stringify(requests[0]));
  assert.equal(requests[0].text.format.name, 'triage');
  assert.deepEqual(result.output, { severity: 'high', area: 'billing' });
  const r = await forge('GET', `/openai/v1/responses/${result.response.id}`);
  const turn = (await forge('GET', `/v1/sessions/${r.conversation.id}/turns`)).data.at(-1);
  assert.deepEqual(turn.output.json, { severity: 'high', area: 'billing' });
});
