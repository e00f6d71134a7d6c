// BullMQ's side of ./scripts/bench-peers, as Shoal's own benchmarks measure Shoal:
//   throughput: N jobs added by 32 producers (one add in flight each), processed by one Worker
//     with concurrency C (default 50; a no-op processor) and completed: jobs/s from the first
//     add to the last completion;
//   chain: N jobs one after another (each added when the previous one completed) with an idle
//     Worker of concurrency 16: milliseconds per link.
// Prints one line: "throughput <jobs/s>" or "chain <ms per link>". Redis at REDIS_PORT.
import { Queue, Worker } from 'bullmq';

const [mode, countText, concurrencyText] = process.argv.slice(2);
const count = Number(countText);
const concurrency = Number(concurrencyText ?? 50);
const connection = { host: '127.0.0.1', port: Number(process.env.REDIS_PORT) };
const name = `bench-${mode}-${process.pid}-${Date.now()}`;
const queue = new Queue(name, { connection });
// Completed jobs are removed, as Shoal's benchmark does not read them back either.
const jobOptions = { removeOnComplete: true, removeOnFail: true };

async function throughput() {
  let done = 0;
  let finish;
  const finished = new Promise((resolve) => { finish = resolve; });
  const worker = new Worker(name, async () => 'ok', { connection, concurrency });
  worker.on('completed', () => { if (++done === count) finish(); });
  await worker.waitUntilReady();
  const started = performance.now();
  let next = 0;
  const producer = async () => {
    while (next < count) {
      next += 1;
      await queue.add('job', { n: next }, jobOptions);
    }
  };
  await Promise.all(Array.from({ length: 32 }, producer));
  await finished;
  const seconds = (performance.now() - started) / 1000;
  console.log(`throughput ${Math.round(count / seconds)}`);
  await worker.close();
}

async function chain() {
  let done = 0;
  let finish;
  const finished = new Promise((resolve) => { finish = resolve; });
  const worker = new Worker(name, async () => 'ok', { connection, concurrency: 16 });
  worker.on('completed', () => {
    done += 1;
    if (done === count) finish();
    else queue.add('link', { n: done }, jobOptions);
  });
  await worker.waitUntilReady();
  const started = performance.now();
  await queue.add('link', { n: 0 }, jobOptions);
  await finished;
  console.log(`chain ${((performance.now() - started) / count).toFixed(2)}`);
  await worker.close();
}

await (mode === 'chain' ? chain() : throughput());
await queue.obliterate({ force: true });
await queue.close();
process.exit(0);
