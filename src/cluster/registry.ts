import os from 'node:os';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { ConfigError } from '../server/config.js';
import { compileInput, KindModuleError, moduleHash, type LoadedKind } from '../server/kind-module.js';
import type { Service } from '../server/service.js';
import { K, type KindEntry } from './keys.js';

export interface NodeInfo {
  nodeId: string;
  url: string;
  /** The pacer's measured device rate, partitions/s (null before it measured). */
  capacity: number | null;
  /** Busy fraction of the node's device workers over the last heartbeat interval (running partitions included: ≤ 1). */
  occupancy: number;
  /** The node's pacer: its mode (bootstrap, steady, hold, blocked, idle). */
  pacerMode: string;
  /** Partitions preparing, waiting or on a device. */
  inFlight: number;
  jobsHeld: number;
  workers: number;
  /** Device time measured by its workers since it started, s. */
  busyS: number;
  /** The kinds it runs (it pulls only their jobs). */
  kinds: string[];
  updatedAt: string;
}

/**
 * The cluster's registry: its kinds (name → module hash, input schema; a node whose module for
 * a kind differs from the one live nodes run refuses to join) and its live nodes (each one's
 * last heartbeat).
 */
export class Registry {
  /** Kinds of the registry, as last read (submission checks of kinds this node does not run). */
  private readonly remote = new Map<string, { entry: KindEntry; kind: LoadedKind }>();

  constructor(private readonly d: { redis: Redis; nodeId: string; local: Pick<Service, 'loadedKinds'>; claim: string; claimMs: number }) {}

  /** Enters this node's kinds in the registry, or refuses to join when live nodes run another version of one. */
  async register(): Promise<void> {
    for (const [name, kind] of this.d.local.loadedKinds()) {
      const hash = moduleHash(kind.url);
      const raw = await this.d.redis.hget(K.kinds, name);
      const known = raw === null ? undefined : (JSON.parse(raw) as KindEntry);
      if (known && known.hash !== hash) {
        const runners = (await this.liveNodes()).filter((n) => n.nodeId !== this.d.nodeId && n.kinds.includes(name)).map((n) => n.nodeId);
        if (runners.length > 0) {
          throw new KindModuleError(fileURLToPath(kind.url), undefined, `differs from the module the cluster runs as kind ${JSON.stringify(name)} (content hash ${hash.slice(0, 12)}… here, ${known.hash.slice(0, 12)}… on ${runners.join(', ')}): this node does not join — a kind changes across the cluster at once: stop every node that runs it (${runners.join(', ')}; its queued jobs wait in Redis), then start them on the new module; or give the new version another name, to run beside the old`);
        }
      }
      const entry: KindEntry = { hash, schema: kind.schema, derivesPartitions: kind.derivesPartitions, description: kind.description, node: this.d.nodeId };
      await this.d.redis.hset(K.kinds, name, JSON.stringify(entry));
    }
  }
  /**
   * Takes this node's name (K.claim, set only where absent), or refuses to join under the name of a
   * live node of another process: two nodes of one name wrote one heartbeat, the cluster counted
   * one of them, and every job read as run by that name. A hold of this host whose process is gone
   * is this node's own before a crash: taken back at once. Any other is waited out once (it lives
   * 3 × heartbeatMs unrenewed: a predecessor in another container, say); renewed meanwhile, it is
   * a live node's.
   */
  async claimNodeId(): Promise<void> {
    const { redis, nodeId, claim, claimMs } = this.d;
    const key = K.claim(nodeId);
    for (let waited = false; ; waited = true) {
      if ((await redis.set(key, claim, 'PX', claimMs, 'NX')) === 'OK') return;
      const raw = await redis.get(key);
      let held: { host?: unknown; pid?: unknown } = {};
      try {
        held = JSON.parse(raw ?? '{}') as { host?: unknown; pid?: unknown };
      } catch {
        // (Not a hold this version wrote: waited out like any other.)
      }
      if (held.host === os.hostname() && typeof held.pid === 'number' && held.pid !== process.pid && !alive(held.pid)) {
        await redis.set(key, claim, 'PX', claimMs);
        return;
      }
      if (waited) {
        const h = await redis.hgetall(K.node(nodeId));
        throw new ConfigError([
          { source: 'cluster', path: 'cluster.nodeId', message: `${JSON.stringify(nodeId)} is the name of a live node (${h['url'] || 'not listening yet'}, host ${String(held.host ?? '?')}, pid ${String(held.pid ?? '?')}) — give each node its own cluster.nodeId (STOKER_CLUSTER_NODE_ID), or leave it out for "<host>-<pid>"` },
        ]);
      }
      const left = Math.max(0, await redis.pttl(key));
      await new Promise((r) => setTimeout(r, left + 50));
    }
  }

  /** A kind of the registry that this node does not run, as a validator of submissions. */
  async remoteKind(name: string): Promise<LoadedKind | undefined> {
    const raw = await this.d.redis.hget(K.kinds, name);
    if (raw === null) return undefined;
    const entry = JSON.parse(raw) as KindEntry;
    const cached = this.remote.get(name);
    if (cached && cached.entry.hash === entry.hash) return cached.kind;
    const kind: LoadedKind = {
      name,
      description: entry.description,
      url: '',
      schema: entry.schema,
      validate: entry.schema ? compileInput(entry.schema) : (input) => ({ ok: true, input }),
      // Only the nodes that run it know these; they check them when they take the job.
      memory: () => ({ prepareBytes: 0, deviceBytes: 0 }),
      bufferBytes: () => 0,
      partitions: () => undefined,
      derivesPartitions: entry.derivesPartitions,
      device: 'default',
      steps: { prepare: false, prepareBatch: false, run: false, runBatch: false },
      prepareBatch: null,
      finish: () => Promise.reject(new Error(`kind ${name} runs on other nodes`)),
    };
    this.remote.set(name, { entry, kind });
    return kind;
  }
  /** The nodes whose heartbeat is alive (a node whose hash expired is dropped from the set). */
  async liveNodes(): Promise<NodeInfo[]> {
    const ids = (await this.d.redis.smembers(K.nodes)).sort();
    const nodes: NodeInfo[] = [];
    for (const id of ids) {
      const h = await this.d.redis.hgetall(K.node(id));
      if (!h['nodeId']) {
        await this.d.redis.srem(K.nodes, id);
        continue;
      }
      nodes.push({
        nodeId: h['nodeId'],
        url: h['url'] ?? '',
        capacity: h['capacity'] === '' || h['capacity'] === undefined ? null : Number(h['capacity']),
        occupancy: Number(h['occupancy'] ?? 0),
        pacerMode: h['pacerMode'] ?? '',
        inFlight: Number(h['inFlight'] ?? 0),
        jobsHeld: Number(h['jobsHeld'] ?? 0),
        workers: Number(h['workers'] ?? 0),
        busyS: Number(h['busyS'] ?? 0),
        kinds: (h['kinds'] ?? '').split(',').filter((k) => k !== ''),
        updatedAt: h['updatedAt'] ?? '',
      });
    }
    return nodes;
  }
}

/** Whether a process of this host is alive (EPERM: it is, another user's). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as { code?: string }).code === 'EPERM';
  }
}
