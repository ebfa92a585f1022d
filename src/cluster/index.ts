/**
 * stoker/cluster: a server as one node of a cluster on BullMQ and Redis. Needs the optional
 * packages bullmq and ioredis (`npm install bullmq ioredis`).
 *
 * ```js
 * import { loadConfig } from 'stoker/server';
 * import { startClusterServer } from 'stoker/cluster';
 * const node = await startClusterServer(loadConfig({ values: { cluster: { redis: 'redis://127.0.0.1:6379' } } }));
 * ```
 */
export { ClusterService, type NodeInfo } from './cluster-service.js';
export { startClusterServer } from './serve-cluster.js';
