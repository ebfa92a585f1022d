/** What stoker/cluster exports, loaded once its optional packages are known to be there (index.ts). */
export { ClusterService } from './cluster-service.js';
export { startClusterServer } from './serve-cluster.js';
