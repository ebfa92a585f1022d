/**
 * stoker/cluster: a server as one node of a cluster on BullMQ and Redis. Needs the optional
 * packages bullmq and ioredis (`npm install bullmq ioredis`): without them, importing this module
 * fails with an error saying so (not Node's "Cannot find package").
 *
 * ```js
 * import { loadConfig } from 'stoker/server';
 * import { startClusterServer } from 'stoker/cluster';
 * const node = await startClusterServer(loadConfig({ values: { cluster: { redis: 'redis://127.0.0.1:6379' } } }));
 * ```
 */
import { importOptional } from '../runtime/optional.js';

const cluster = await importOptional(() => import('./cluster-exports.js'), 'stoker/cluster (cluster mode)', ['bullmq', 'ioredis']);

export const ClusterService = cluster.ClusterService;
export type ClusterService = import('./cluster-service.js').ClusterService;
export type { NodeInfo } from './cluster-service.js';
export const startClusterServer = cluster.startClusterServer;
