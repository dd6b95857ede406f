// The official A2A JS SDK (@a2a-js/sdk, pinned) against Forge's /a2a/{agent}:
// the v1.0 ClientFactory with its v0.3 compatibility layer (Forge speaks
// A2A v0.3 JSON-RPC), as an A2A client of a v0.3 agent is set up.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Role, TaskState } from '@a2a-js/sdk';
import { ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { TaskNotFoundError } from '@a2a-js/sdk/errors';
import { agent, base } from './helpers.mjs';

const legacyCompat = { enabled: true };

// client fetches the agent's card and makes a client from it.
async function client(name) {
  const factory = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ legacyCompat })],
    cardResolver: new DefaultAgentCardResolver({ legacyCompat }),
  }));
  // The card's whole URL and an empty path: the default path would
  // resolve against the host's root.
  return factory.createFromUrl(`${base}/a2a/${name}/.well-known/agent-card.json`, '');
}

let n = 0;
const message = (text, extra = {}) => ({
  message: {
    messageId: `m${++n}`, role: Role.ROLE_USER, contextId: '', taskId: '',
    parts: [{ content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: '' }],
    metadata: undefined, extensions: [], referenceTaskIds: [], ...extra,
  },
});
const textOf = (parts) => parts.map((p) => (p.content?.$case === 'text' ? p.content.value : '')).join('');

test('the agent card', async () => {
  await agent({ name: 'a2a-card', model: 'scripted/echo', tools: ['echo'] });
  const r = await fetch(`${base}/a2a/a2a-card/.well-known/agent-card.json`);
  assert.equal(r.status, 200);
  const raw = await r.json();
  assert.equal(raw.protocolVersion, '0.3.0');
  assert.equal(raw.capabilities.streaming, true);
  const c = await client('a2a-card');
  const card = await c.getAgentCard();
  assert.equal(card.name, 'a2a-card');
  assert.equal(card.capabilities.streaming, true);
  assert.ok(card.supportedInterfaces.some((i) => i.url.endsWith('/a2a/a2a-card') && i.protocolBinding === 'JSONRPC'),
    JSON.stringify(card.supportedInterfaces));
});

test('sendMessage: a completed task with the answer as an artifact, then getTask', async () => {
  await agent({ name: 'a2a-send', model: 'scripted/echo' });
  const c = await client('a2a-send');
  const task = await c.sendMessage(message('hello sdk'));
  assert.match(task.id, /^turn_/);
  assert.match(task.contextId, /^ses_/);
  assert.equal(task.status.state, TaskState.TASK_STATE_COMPLETED);
  assert.equal(task.artifacts.length, 1);
  assert.equal(textOf(task.artifacts[0].parts), 'echo: hello sdk');
  const again = await c.getTask({ id: task.id, tenant: '' });
  assert.equal(again.id, task.id);
  assert.equal(again.status.state, TaskState.TASK_STATE_COMPLETED);
  // The same context continues the session.
  const next = await c.sendMessage(message('and again', { contextId: task.contextId }));
  assert.equal(next.contextId, task.contextId);
  assert.notEqual(next.id, task.id);
});

test('sendMessageStream: the task, working, the text in chunks, the final status', async () => {
  await agent({ name: 'a2a-stream', model: 'scripted/x', model_params: { script: [{ text: 'streamed in several words' }] } });
  const c = await client('a2a-stream');
  const events = [];
  for await (const ev of c.sendMessageStream(message('go'))) events.push(ev);
  const kinds = events.map((e) => e.payload.$case);
  assert.equal(kinds[0], 'task', kinds.join());
  const task = events[0].payload.value;
  assert.equal(task.status.state, TaskState.TASK_STATE_SUBMITTED);
  assert.equal(kinds[1], 'statusUpdate');
  assert.equal(events[1].payload.value.status.state, TaskState.TASK_STATE_WORKING);
  const last = events[events.length - 1].payload;
  assert.equal(last.$case, 'statusUpdate', kinds.join());
  assert.equal(last.value.taskId, task.id);
  assert.equal(last.value.status.state, TaskState.TASK_STATE_COMPLETED);
  // Rebuild the artifact as a client does: append or replace by id.
  const artifacts = new Map();
  const chunks = events.filter((e) => e.payload.$case === 'artifactUpdate').map((e) => e.payload.value);
  assert.ok(chunks.length >= 3, kinds.join());
  for (const a of chunks) {
    assert.equal(a.taskId, task.id);
    const id = a.artifact.artifactId;
    artifacts.set(id, (a.append ? artifacts.get(id) ?? '' : '') + textOf(a.artifact.parts));
  }
  assert.equal(chunks[0].append, false);
  assert.ok(chunks.slice(1).every((a) => a.append));
  assert.ok(chunks[chunks.length - 1].lastChunk);
  assert.deepEqual([...artifacts], [[`${task.id}-output`, 'streamed in several words']]);

  // Resubscribing to the ended task: the task, then its final status.
  const re = [];
  for await (const ev of c.resubscribeTask({ id: task.id, tenant: '' })) re.push(ev);
  assert.deepEqual(re.map((e) => e.payload.$case), ['task', 'statusUpdate']);
  assert.equal(re[1].payload.value.status.state, TaskState.TASK_STATE_COMPLETED);
});

test('resubscribeTask re-attaches to a running task; cancelTask ends it', async () => {
  await agent({ name: 'a2a-slow', model_params: { script: [{ text: 'still thinking', hang: true }] } });
  const c = await client('a2a-slow');
  const hangUp = new AbortController();
  let taskId;
  for await (const ev of c.sendMessageStream(message('go'), { signal: hangUp.signal })) {
    if (ev.payload.$case === 'task') taskId = ev.payload.value.id;
    if (ev.payload.$case === 'artifactUpdate') break; // the turn has started writing
  }
  hangUp.abort();
  const running = await c.getTask({ id: taskId, tenant: '' });
  assert.equal(running.status.state, TaskState.TASK_STATE_WORKING);
  const kinds = [];
  let text = '';
  let last;
  for await (const ev of c.resubscribeTask({ id: taskId, tenant: '' })) {
    kinds.push(ev.payload.$case);
    if (ev.payload.$case === 'artifactUpdate') {
      text += textOf(ev.payload.value.artifact.parts);
      if (text === 'still thinking' && !ev.payload.value.lastChunk) {
        const cancelled = await c.cancelTask({ id: taskId, tenant: '', metadata: undefined });
        assert.equal(cancelled.status.state, TaskState.TASK_STATE_CANCELED);
      }
    }
    last = ev.payload;
  }
  assert.equal(kinds[0], 'task', kinds.join());
  assert.equal(text, 'still thinking');
  assert.equal(last.$case, 'statusUpdate');
  assert.equal(last.value.status.state, TaskState.TASK_STATE_CANCELED);
});

test('a turn waiting for an approval is input-required; a data part approves it', async () => {
  await agent({
    name: 'a2a-ask', tools: ['echo'], approval: { echo: 'ask' },
    model_params: { script: [{ tool_calls: [{ name: 'echo', arguments: { text: 'x' } }] }, { text: 'approved, done' }] },
  });
  const c = await client('a2a-ask');
  const events = [];
  for await (const ev of c.sendMessageStream(message('echo x'))) events.push(ev);
  const last = events[events.length - 1].payload.value;
  assert.equal(last.status.state, TaskState.TASK_STATE_INPUT_REQUIRED);
  const data = last.status.message.parts.find((p) => p.content.$case === 'data').content.value;
  const [action] = data.required_actions;
  assert.equal(action.type, 'approval');
  const task = await c.getTask({ id: last.taskId, tenant: '' });
  assert.equal(task.status.state, TaskState.TASK_STATE_INPUT_REQUIRED);
  const resumed = await c.sendMessage(message('', {
    contextId: last.contextId, taskId: last.taskId,
    parts: [{ content: { $case: 'data', value: { type: 'approval', call_id: action.call_id, approved: true } }, metadata: undefined, filename: '', mediaType: '' }],
  }));
  assert.equal(resumed.status.state, TaskState.TASK_STATE_COMPLETED);
  assert.equal(textOf(resumed.artifacts[0].parts), 'approved, done');
});

test('an unknown task is TaskNotFound, in getTask and resubscribeTask', async () => {
  await agent({ name: 'a2a-missing', model: 'scripted/echo' });
  const c = await client('a2a-missing');
  await assert.rejects(c.getTask({ id: 'turn_nope', tenant: '' }), TaskNotFoundError);
  await assert.rejects(async () => {
    for await (const ev of c.resubscribeTask({ id: 'turn_nope', tenant: '' })) assert.fail(JSON.stringify(ev));
  }, TaskNotFoundError);
});
