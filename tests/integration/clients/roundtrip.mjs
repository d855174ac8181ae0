// kafkajs side of strom's integration tests (tests/integration/test_clients.py).
// Run with NODE_PATH pointing at a node_modules that holds kafkajs.
//
//   node roundtrip.mjs produce BOOTSTRAP TOPIC COMPRESSION < spec
//       spec lines: partition \t timestamp \t key \t value \t headers  (hex or "-" for null;
//       headers "name=hex,..."; duplicate names must be adjacent: kafkajs takes headers as an object).
//       COMPRESSION: none or gzip (the codecs kafkajs ships). Idempotent producer, acks=-1.
//       prints "ACK \t index \t partition \t offset" per record, in input order.
//   node roundtrip.mjs consume BOOTSTRAP TOPIC PARTITIONS COUNT GROUP
//       kafkajs has no manual assignment: this always joins consumer group GROUP.
//       prints "REC \t partition \t offset \t tstype \t timestamp \t key \t value \t headers".
import { createRequire } from 'module';
import { readFileSync } from 'fs';
import path from 'path';

const require = createRequire(path.join(process.env.NODE_PATH || '.', 'x.js'));
const { Kafka, CompressionTypes, logLevel } = require('kafkajs');

const [mode, bootstrap, topic, arg3, arg4, arg5] = process.argv.slice(2);
// stdout to a pipe is asynchronous in node: exit only once everything written has been flushed
const emit = (s, code) => process.stdout.write(s + '\n', () => process.exit(code));
const fail = (m) => emit(`FAIL kafkajs: ${m}`, 1);
const dec = (s) => (s === '-' ? null : Buffer.from(s, 'hex'));
const enc = (b) => (b === null || b === undefined ? '-' : Buffer.from(b).toString('hex'));
const kafka = new Kafka({ clientId: 'strom-it', brokers: [bootstrap], logLevel: logLevel.NOTHING,
  retry: { retries: 10 } });
setTimeout(() => fail('timed out after 90 s'), 90000).unref();

async function produce(compression) {
  const lines = readFileSync(0, 'utf8').split('\n').filter((l) => l.length > 0);
  const messages = lines.map((line) => {
    const [p, ts, k, v, hs] = line.split('\t');
    const headers = {};
    for (const h of hs ? hs.split(',') : []) {
      const eq = h.indexOf('=');
      const name = h.slice(0, eq);
      const val = dec(h.slice(eq + 1));
      if (name in headers) headers[name] = [].concat(headers[name], [val]);
      else headers[name] = val;
    }
    return { partition: Number(p), timestamp: ts, key: dec(k), value: dec(v), headers };
  });
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const codec = compression === 'gzip' ? CompressionTypes.GZIP : CompressionTypes.None;
  const out = [];
  for (let start = 0; start < messages.length; start += 100) {
    const chunk = messages.slice(start, start + 100);
    const res = await producer.send({ topic, acks: -1, compression: codec, messages: chunk });
    const base = new Map(res.map((r) => [r.partition, BigInt(r.baseOffset)]));
    const seen = new Map();
    chunk.forEach((m, j) => {
      const n = seen.get(m.partition) || 0n;
      seen.set(m.partition, n + 1n);
      out.push(`ACK\t${start + j}\t${m.partition}\t${base.get(m.partition) + n}`);
    });
  }
  await producer.disconnect();
  return out.join('\n');
}

async function consume(count, group) {
  const consumer = kafka.consumer({ groupId: group });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const out = [];
  await new Promise((resolve) => {
    consumer.run({ autoCommit: true, eachMessage: async ({ partition, message }) => {
      const hs = [];
      for (const [k, v] of Object.entries(message.headers || {})) {
        for (const one of Array.isArray(v) ? v : [v]) hs.push(`${k}=${enc(one)}`);
      }
      out.push(['REC', partition, message.offset, 0, message.timestamp, enc(message.key),
        enc(message.value), hs.join(',')].join('\t'));
      if (out.length >= count) resolve();
    } });
  });
  await consumer.disconnect();
  return out.join('\n');
}

try {
  emit(mode === 'produce' ? await produce(arg3) : await consume(Number(arg4), arg5), 0);
} catch (e) {
  fail(String((e && e.stack) || e));
}
