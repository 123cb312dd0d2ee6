// KafkaJS scenarios against a live rafka, run by tests/integration/test_kafkajs.py.
//
// usage: node scenario.js SCENARIO BROKER [JSON options]
// Each scenario prints one JSON line with what the client saw; the Python test
// asserts on it. KafkaJS is a pure JavaScript client with its own protocol code
// and its own choice of API versions, so it checks rafka independently of librdkafka.
'use strict';

const { Kafka, CompressionTypes, logLevel } = require('kafkajs');

const [scenario, broker, rawOptions] = process.argv.slice(2);
const options = rawOptions ? JSON.parse(rawOptions) : {};

function client(extra = {}) {
  return new Kafka({
    clientId: 'rafka-kafkajs',
    brokers: [broker],
    logLevel: logLevel.NOTHING,
    retry: { retries: 8, initialRetryTime: 100 },
    ...extra,
  });
}

const mark = (label) => process.env.RAFKA_JS_TIMING && process.stderr.write(`${label} ${Date.now() - START}ms\n`);
const START = Date.now();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(what, check, ms = 20000) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

function messages(from, to) {
  const out = [];
  for (let i = from; i < to; i++) out.push({ key: `k${i}`, value: `v${i}`, headers: { seq: String(i) } });
  return out;
}

// A consumer that records what it receives and the partitions it was assigned.
async function member(kafka, groupId, topic, seen, extra = {}) {
  const consumer = kafka.consumer({ groupId, sessionTimeout: 6000, heartbeatInterval: 300, rebalanceTimeout: 6000, maxWaitTimeInMs: 300, ...extra });
  const state = { consumer, assigned: [] };
  consumer.on(consumer.events.GROUP_JOIN, (e) => { state.assigned = e.payload.memberAssignment[topic] || []; });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      seen.push({ key: message.key.toString(), value: message.value.toString(), partition,
                  offset: message.offset, seq: message.headers.seq && message.headers.seq.toString() });
    },
  });
  return state;
}

// Two members share a group, consume everything once, commit; a later member resumes.
async function group(kafka) {
  const { topic, groupId, count } = options;
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 4 }] });
  const producer = kafka.producer();
  await producer.connect();
  await producer.send({ topic, compression: CompressionTypes.GZIP, messages: messages(0, count) });

  const seen = [];
  const a = await member(kafka, groupId, topic, seen);
  const b = await member(kafka, groupId, topic, seen);
  await until('both members assigned', () => a.assigned.length > 0 && b.assigned.length > 0
    && a.assigned.length + b.assigned.length === 4);
  await until(`${count} messages`, () => seen.length >= count);
  const assignments = [a.assigned, b.assigned].map((p) => [...p].sort());
  const described = (await admin.describeGroups([groupId])).groups[0];
  const listed = (await admin.listGroups()).groups.filter((g) => g.groupId === groupId);
  await a.consumer.disconnect(); // commits what it consumed, then leaves the group
  await b.consumer.disconnect();
  const offsets = await admin.fetchOffsets({ groupId, topics: [topic] });
  const highWatermarks = await admin.fetchTopicOffsets(topic);

  // a new member of the same group starts from the committed offsets
  await producer.send({ topic, messages: messages(count, count + 5) });
  const resumed = [];
  const c = await member(kafka, groupId, topic, resumed);
  await until('5 new messages', () => resumed.length >= 5);
  await sleep(500); // anything redelivered would arrive by now
  await c.consumer.disconnect();
  const emptyGroup = (await admin.describeGroups([groupId])).groups[0];
  const deleted = await admin.deleteGroups([groupId]);
  await producer.disconnect();
  await admin.disconnect();
  return {
    seen, resumed, assignments,
    described: { state: described.state, protocolType: described.protocolType, protocol: described.protocol,
                 members: described.members.map((m) => m.clientId) },
    listed, offsets: offsets[0].partitions, highWatermarks,
    emptyGroup: { state: emptyGroup.state, members: emptyGroup.members.length }, deleted,
  };
}

// Transactions: a committed batch with consumer offsets, an aborted batch.
async function transactions(kafka) {
  const { topic, groupId } = options;
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 1 }] });
  const producer = kafka.producer({ transactionalId: `${topic}-tx`, idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const committed = await producer.transaction();
  await committed.send({ topic, messages: messages(0, 5) });
  await committed.sendOffsets({ consumerGroupId: groupId, topics: [{ topic, partitions: [{ partition: 0, offset: '3' }] }] });
  await committed.commit();
  const aborted = await producer.transaction();
  await aborted.send({ topic, messages: messages(5, 10) });
  await aborted.abort();
  const last = await producer.transaction();
  await last.send({ topic, messages: messages(10, 12) });
  await last.commit();
  await producer.disconnect();
  const groupOffsets = await admin.fetchOffsets({ groupId, topics: [topic] });

  // a read_committed consumer (KafkaJS's default) of another group sees only committed records
  const seen = [];
  const c = await member(kafka, `${groupId}-reader`, topic, seen);
  await until('7 committed messages', () => seen.length >= 7);
  await sleep(500);
  await c.consumer.disconnect();
  await admin.disconnect();
  return { seen: seen.map((m) => m.key), groupOffsets: groupOffsets[0].partitions };
}

// SASL: the user's organisation is the namespace of its topics and groups.
async function sasl() {
  const { mechanism, username, password, topic, otherUser } = options;
  const kafka = client({ sasl: { mechanism, username, password } });
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 1 }] });
  const producer = kafka.producer();
  await producer.connect();
  await producer.send({ topic, messages: messages(0, 3) });
  await producer.disconnect();
  const seen = [];
  const c = await member(kafka, `${topic}-g`, topic, seen);
  await until('3 messages', () => seen.length >= 3);
  await c.consumer.disconnect();
  const topics = await admin.listTopics();
  await admin.disconnect();

  const other = client({ sasl: { mechanism: 'plain', username: otherUser.username, password: otherUser.password } }).admin();
  await other.connect();
  const otherTopics = await other.listTopics();
  await other.disconnect();

  let wrongPassword = null;
  const bad = client({ sasl: { mechanism, username, password: 'wrong' }, retry: { retries: 0 } }).admin();
  try { await bad.connect(); wrongPassword = 'connected'; } catch (e) { wrongPassword = e.type || e.name; }
  await bad.disconnect().catch(() => {});
  return { seen: seen.map((m) => m.key), topics, otherTopics, wrongPassword };
}

// Admin calls a KafkaJS user makes: partitions, configs, offsets by time, records, topics.
async function admin(kafka) {
  const { topic, groupId } = options;
  const admin = kafka.admin();
  await admin.connect();
  const cluster = await admin.describeCluster();
  await admin.createTopics({ topics: [{ topic, numPartitions: 1, configEntries: [{ name: 'retention.ms', value: '3600000' }] }] });
  const duplicate = await admin.createTopics({ topics: [{ topic, numPartitions: 1 }] }); // false: exists
  await admin.createPartitions({ topicPartitions: [{ topic, count: 2 }] });
  const producer = kafka.producer();
  await producer.connect();
  const before = Date.now();
  await producer.send({ topic, messages: messages(0, 6).map((m) => ({ ...m, partition: 0 })) });
  await producer.disconnect();
  const byTime = await admin.fetchTopicOffsetsByTimestamp(topic, before - 60000);
  const configs = await admin.describeConfigs({ resources: [{ type: 2, name: topic, configNames: ['retention.ms', 'cleanup.policy'] }] });
  await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '2' }] });
  const afterDelete = await admin.fetchTopicOffsets(topic);
  // offsets set and reset by an admin while the group has no members
  await admin.setOffsets({ groupId, topic, partitions: [{ partition: 0, offset: '4' }, { partition: 1, offset: '0' }] });
  const set = await admin.fetchOffsets({ groupId, topics: [topic] });
  await admin.resetOffsets({ groupId, topic, earliest: true });
  const reset = await admin.fetchOffsets({ groupId, topics: [topic] });
  const seen = [];
  const c = await member(kafka, groupId, topic, seen);
  await until('4 records from the reset offsets', () => seen.length >= 4);
  await c.consumer.disconnect();
  // AlterConfigs replaces the topic's overrides with the given set
  await admin.alterConfigs({ validateOnly: false, resources: [{ type: 2, name: topic, configEntries: [{ name: 'segment.ms', value: '60000' }] }] });
  const altered = await admin.describeConfigs({ resources: [{ type: 2, name: topic, configNames: ['retention.ms', 'segment.ms'] }] });
  await admin.deleteTopics({ topics: [topic] });
  const topics = await admin.listTopics();
  await admin.disconnect();
  const sort = (ps) => [...ps].sort((x, y) => x.partition - y.partition);
  return {
    brokers: cluster.brokers.length, controller: cluster.controller, duplicate,
    byTime: sort(byTime), afterDelete: sort(afterDelete),
    configs: configs.resources[0].configEntries.map((e) => [e.configName, e.configValue]).sort(),
    altered: altered.resources[0].configEntries.map((e) => [e.configName, e.configValue, e.isDefault]).sort(),
    set: sort(set[0].partitions), reset: sort(reset[0].partitions),
    seen: seen.map((m) => [m.partition, m.offset]).sort(), deletedTopicListed: topics.includes(topic),
  };
}

const scenarios = { group, transactions, sasl, admin };

(async () => {
  const run = scenarios[scenario];
  if (!run) throw new Error(`unknown scenario ${scenario}`);
  const result = await run(client());
  process.stdout.write(JSON.stringify(result) + '\n');
  process.exit(0);
})().catch((e) => {
  process.stderr.write(`FAILED ${e.stack || e}\n`);
  process.exit(1);
});
