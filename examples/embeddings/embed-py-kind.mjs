/**
 * The embed kind on a process device: the same input, partitions, memory and tokenizing
 * preparation as embed-kind.mjs (re-exported from it), but no `run` — the device step is
 * embed_device.py, the same model in numpy, in a Python process per device worker. The token
 * ids in the partition's shared buffer reach it as the item's payload, the token counts as
 * `item.prepared`; it answers with the vectors as bytes.
 *
 *   stoker serve --config examples/embeddings/python-device.toml
 */
export { name, input, partitions, buffer, memory, prepare } from './embed-kind.mjs';

export const description = 'text embeddings: tokenized on the CPU, the model in numpy on a Python process device; result: count × dim float32 (little-endian)';
