"""The embed kind's device step in numpy (a stoker process device, see python-device.toml).

The same model as embed-kind.mjs -- mean-pooled token embeddings through a two-layer MLP, then
L2-normalised -- with the same weights (mulberry32 from the job's seed, vectorised), so the two
give the same vectors to float32 rounding. Each item's payload is the partition's token ids
(batch x maxTokens int32, -1 pads); item.prepared["lengths"] has each text's token count.
On a GPU machine this is where PyTorch would run the model.
"""
import numpy as np

import stoker_worker

VOCAB = 4096
HIDDEN = 256
_models = {}


def weights(seed, n, scale):
    """mulberry32's n draws from seed, in [-1, 1) * scale (the state after i steps is seed + i * 0x6d2b79f5)."""
    with np.errstate(over="ignore"):
        t = (np.uint32(seed) + np.arange(1, n + 1, dtype=np.uint64).astype(np.uint32) * np.uint32(0x6D2B79F5)).astype(np.uint32)
        t = (t ^ (t >> np.uint32(15))) * (t | np.uint32(1))
        t = t ^ (t + (t ^ (t >> np.uint32(7))) * (t | np.uint32(61)))
        t = t ^ (t >> np.uint32(14))
    return ((t.astype(np.float64) / 2.0**32) * 2 - 1) * scale


def model(seed, dim):
    key = (seed, dim)
    if key not in _models:
        table = weights(seed, VOCAB * dim, 1).astype(np.float32).reshape(VOCAB, dim)
        w1 = weights(seed + 1, dim * HIDDEN, 1 / np.sqrt(dim)).astype(np.float32).reshape(dim, HIDDEN)
        w2 = weights(seed + 2, HIDDEN * dim, 1 / np.sqrt(HIDDEN)).astype(np.float32).reshape(HIDDEN, dim)
        _models[key] = (table, w1.astype(np.float64), w2.astype(np.float64))
    return _models[key]


def handle(item):
    job = item.input
    dim, max_tokens = job["dim"], job["maxTokens"]
    rows = len(item.prepared["lengths"])
    ids = np.frombuffer(item.payload, dtype=np.int32, count=job["batch"] * max_tokens).reshape(job["batch"], max_tokens)[:rows]
    table, w1, w2 = model(job["seed"], dim)
    mask = ids >= 0
    counts = np.maximum(mask.sum(axis=1, keepdims=True), 1)
    x = (table[np.where(mask, ids, 0)] * mask[:, :, None]).sum(axis=1, dtype=np.float64) / counts
    y = np.maximum(x @ w1, 0) @ w2
    norm = np.linalg.norm(y, axis=1, keepdims=True)
    return (y / np.where(norm == 0, 1, norm)).astype("<f4").tobytes()


stoker_worker.serve(handle)
