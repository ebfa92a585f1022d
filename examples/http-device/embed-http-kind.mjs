/**
 * The embed kind on an HTTP device: the same input and partitions as the embeddings example
 * (re-exported from it); preparation tokenizes the partition's texts and its value — the token
 * ids, the model's settings — is what stoker POSTs to the device's url (embed-server.mjs), whose
 * answer, the vectors as bytes, is the partition's output.
 *
 *   node examples/http-device/embed-server.mjs --port 8100 &
 *   stoker serve --config examples/http-device/http-device.toml
 */
import { tokenize } from '../embeddings/embed-kind.mjs';

export { name, input, partitions } from '../embeddings/embed-kind.mjs';

export const description = 'text embeddings: tokenized on the CPU, the model behind an HTTP endpoint; result: count × dim float32 (little-endian)';

/** A partition holds its token ids while preparing, and about as much while its request is out. */
export const memory = (job) => ({ prepareBytes: job.batch * job.maxTokens * 8, deviceBytes: job.batch * (job.maxTokens * 8 + job.dim * 4) });

export function prepare(job, ctx) {
  const texts = job.texts.slice(ctx.partition * job.batch, (ctx.partition + 1) * job.batch);
  return { tokens: texts.map((t) => tokenize(t, job.maxTokens)), dim: job.dim, maxTokens: job.maxTokens, seed: job.seed };
}
