/**
 * The embed kind behind a server started from your own program (stoker/server): it embeds a few
 * texts through the HTTP API, checks the vectors against embed() and stops.
 *
 *   npm install stoker && node serve.mjs      (with embed-kind.mjs beside it)
 */
import { loadConfig, startServer } from 'stoker/server';
import { embed } from './embed-kind.mjs';

const config = loadConfig({
  env: {}, // only these values (and the defaults), not STOKER_* variables
  values: {
    dataDir: './embed-data',
    server: { port: 0 }, // a free port
    prepare: { threads: 1 },
    kinds: { embed: { module: new URL('./embed-kind.mjs', import.meta.url).href } },
  },
});
const server = await startServer(config);
try {
  const texts = ['a cat sat on the mat', 'the dog barked', 'stoker keeps accelerators fed'];
  const submitted = await fetch(`${server.url}/v1/jobs`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ kind: 'embed', input: { texts, batch: 2 } }),
  });
  const job = await submitted.json();
  const reply = await fetch(`${server.url}/v1/jobs/${job.id}/result?wait=60s`, { headers: { accept: 'application/octet-stream' } });
  if (reply.status !== 200) throw new Error(`job ${job.id}: ${reply.status} ${await reply.text()}`);
  const vectors = new Float32Array(await reply.arrayBuffer());
  const same = vectors.every((v, i) => v === embed(texts)[i]);
  console.log(`${texts.length} texts → ${vectors.length / texts.length} floats each, in ${job.partitions} partitions; first vector starts ${[...vectors.subarray(0, 3)].map((v) => v.toFixed(4)).join(' ')}; ${same ? 'equal to embed()' : 'NOT equal to embed()'}`);
  if (!same) process.exitCode = 1;
} finally {
  await server.close();
}
