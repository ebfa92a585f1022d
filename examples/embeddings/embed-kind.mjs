/**
 * A job kind for `stoker serve`: text embeddings. A job embeds a list of texts, `batch` texts per
 * partition. Preparation (a preparation thread) tokenizes a partition's texts into token ids in
 * the partition's pooled shared buffer; the device step (a device worker thread) runs the "model"
 * — mean-pooled token embeddings through a two-layer MLP, then L2-normalised — and outputs the
 * partition's vectors as bytes (little-endian float32, `dim` per text). The job's result is every
 * vector in text order: `count × dim` float32s (the default finish concatenates bytes outputs).
 *
 *   stoker serve --kind ./embed-kind.mjs
 *   curl -s -XPOST localhost:7070/v1/jobs -H 'content-type: application/json' \
 *     -d '{"id":"e1","kind":"embed","input":{"texts":["a cat","a dog","stoker keeps gpus fed"]}}'
 *   curl -s -H 'accept: application/octet-stream' 'localhost:7070/v1/jobs/e1/result?wait=30s' > e1.f32
 *
 * Everything is deterministic (the weights come from `seed`), and `embed(texts, options)` computes
 * the same vectors in one thread, for checking.
 */

export const name = 'embed';
export const description = 'text embeddings: tokenized on the CPU, a mean-pooled two-layer MLP on the device; result: count × dim float32 (little-endian)';

const VOCAB = 4096;
const HIDDEN = 256;

export const input = {
  type: 'object',
  additionalProperties: false,
  required: ['texts'],
  properties: {
    texts: { type: 'array', minItems: 1, maxItems: 100000, items: { type: 'string', maxLength: 10000 }, description: 'the texts to embed' },
    dim: { type: 'integer', minimum: 8, maximum: 512, default: 64, description: 'floats per vector' },
    batch: { type: 'integer', minimum: 1, maximum: 1024, default: 16, description: 'texts per partition' },
    maxTokens: { type: 'integer', minimum: 1, maximum: 4096, default: 64, description: 'tokens kept per text' },
    seed: { type: 'integer', minimum: 0, maximum: 4294967295, default: 1, description: 'the model weights' },
  },
};

/** One partition per `batch` texts. */
export const partitions = (job) => Math.ceil(job.texts.length / job.batch);

/** The token ids of one partition: `batch × maxTokens` int32 (a pooled shared buffer). */
export const buffer = (job) => job.batch * job.maxTokens * 4;

/** The token buffer while preparing; on the device it is read until the step ends, and the vectors are small. */
export const memory = (job) => ({ prepareBytes: buffer(job), deviceBytes: buffer(job) + job.batch * job.dim * 4 });

/** Lower-case words (letters and digits) → FNV-1a hashes into the vocabulary. */
export function tokenize(text, maxTokens) {
  const ids = [];
  for (const word of text.toLowerCase().split(/[^\p{L}\p{N}]+/u)) {
    if (word === '') continue;
    let h = 0x811c9dc5;
    for (let i = 0; i < word.length; i++) h = Math.imul(h ^ word.charCodeAt(i), 0x01000193);
    ids.push((h >>> 0) % VOCAB);
    if (ids.length === maxTokens) break;
  }
  return ids;
}

function textsOf(job, partition) {
  return job.texts.slice(partition * job.batch, (partition + 1) * job.batch);
}

/** Preparation thread: token ids into the shared buffer (−1 pads), and each text's token count. */
export function prepare(job, ctx) {
  const ids = new Int32Array(ctx.buffer, 0, job.batch * job.maxTokens).fill(-1);
  const texts = textsOf(job, ctx.partition);
  const lengths = texts.map((t, row) => {
    const tokens = tokenize(t, job.maxTokens);
    ids.set(tokens, row * job.maxTokens);
    return tokens.length;
  });
  return { lengths };
}

/** Deterministic weights in [−1, 1) · scale (mulberry32). */
function weights(seed, n, scale) {
  const w = new Float32Array(n);
  let a = seed >>> 0;
  for (let i = 0; i < n; i++) {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    w[i] = ((((t ^ (t >>> 14)) >>> 0) / 2 ** 32) * 2 - 1) * scale;
  }
  return w;
}

/** The model's weights, made once per thread and (seed, dim). */
const models = new Map();
function model(seed, dim) {
  const key = `${seed}/${dim}`;
  let m = models.get(key);
  if (!m) {
    m = { table: weights(seed, VOCAB * dim, 1), w1: weights(seed + 1, dim * HIDDEN, 1 / Math.sqrt(dim)), w2: weights(seed + 2, HIDDEN * dim, 1 / Math.sqrt(HIDDEN)) };
    models.set(key, m);
  }
  return m;
}

/** The model on token ids (rows of `maxTokens`, −1 pads): `rows × dim` float32 vectors. */
function forward(ids, rows, maxTokens, dim, seed) {
  const { table, w1, w2 } = model(seed, dim);
  const out = new Float32Array(rows * dim);
  const x = new Float32Array(dim);
  const h = new Float32Array(HIDDEN);
  for (let r = 0; r < rows; r++) {
    x.fill(0);
    let n = 0;
    for (let t = 0; t < maxTokens; t++) {
      const id = ids[r * maxTokens + t];
      if (id < 0) break;
      for (let d = 0; d < dim; d++) x[d] += table[id * dim + d];
      n++;
    }
    if (n > 0) for (let d = 0; d < dim; d++) x[d] /= n;
    // h = relu(x · W1), y = h · W2, then y / |y|.
    for (let j = 0; j < HIDDEN; j++) {
      let s = 0;
      for (let d = 0; d < dim; d++) s += x[d] * w1[d * HIDDEN + j];
      h[j] = s > 0 ? s : 0;
    }
    let norm = 0;
    for (let d = 0; d < dim; d++) {
      let s = 0;
      for (let j = 0; j < HIDDEN; j++) s += h[j] * w2[j * dim + d];
      out[r * dim + d] = s;
      norm += s * s;
    }
    norm = Math.sqrt(norm) || 1;
    for (let d = 0; d < dim; d++) out[r * dim + d] /= norm;
  }
  return out;
}

/** Device thread: the vectors of the partition's texts, as bytes. */
export function run(prepared, ctx) {
  const job = ctx.input;
  const ids = new Int32Array(ctx.buffer, 0, job.batch * job.maxTokens);
  const vectors = forward(ids, prepared.lengths.length, job.maxTokens, job.dim, job.seed);
  return new Uint8Array(vectors.buffer);
}

/**
 * On a device that batches (`[device.batch]`): a batch's partitions through the model together,
 * one forward pass over all their rows (per model setting — dim, maxTokens, seed — among them).
 */
export function runBatch(prepared, ctx) {
  const out = new Array(prepared.length);
  const groups = new Map();
  prepared.forEach((_, i) => {
    const { dim, maxTokens, seed } = ctx[i].input;
    const key = `${dim}/${maxTokens}/${seed}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(i);
  });
  for (const members of groups.values()) {
    const { dim, maxTokens, seed } = ctx[members[0]].input;
    const rows = members.map((i) => prepared[i].lengths.length);
    const ids = new Int32Array(rows.reduce((a, b) => a + b, 0) * maxTokens);
    let at = 0;
    members.forEach((i, k) => {
      ids.set(new Int32Array(ctx[i].buffer, 0, rows[k] * maxTokens), at);
      at += rows[k] * maxTokens;
    });
    const vectors = forward(ids, at / maxTokens, maxTokens, dim, seed);
    let row = 0;
    members.forEach((i, k) => {
      out[i] = new Uint8Array(vectors.buffer.slice(row * dim * 4, (row + rows[k]) * dim * 4));
      row += rows[k];
    });
  }
  return out;
}

/** The vectors of texts already tokenized (one array of token ids per text): what an inference server would compute. */
export function embedTokens(rows, { dim = 64, maxTokens = 64, seed = 1 } = {}) {
  const ids = new Int32Array(rows.length * maxTokens).fill(-1);
  rows.forEach((tokens, row) => ids.set(tokens.slice(0, maxTokens), row * maxTokens));
  return forward(ids, rows.length, maxTokens, dim, seed);
}

/** The same vectors in one thread, without stoker (defaults as in the input schema): for checking results. */
export function embed(texts, { dim = 64, maxTokens = 64, seed = 1 } = {}) {
  return embedTokens(texts.map((t) => tokenize(t, maxTokens)), { dim, maxTokens, seed });
}
