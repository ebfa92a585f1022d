import type { FastifyInstance } from 'fastify';
import { buildApp, type ApiService } from './app.js';
import type { ServeConfig } from './config.js';
import { Service } from './service.js';

export interface RunningServer {
  /** The local service (in cluster mode: this node's own engine and journal). */
  service: Service;
  /** What the HTTP API serves: `service` itself, or in cluster mode the cluster around it. */
  api: ApiService;
  app: FastifyInstance;
  /** http://host:port the server listens on (the real port when config.server.port is 0). */
  url: string;
  /** Graceful shutdown: stop accepting jobs, let in-flight partitions finish (up to server.shutdownTimeoutS), journal the rest as unfinished, answer every waiter, close. */
  close(): Promise<void>;
}

/** Opens the journal, resumes its unfinished jobs, and listens. With `cluster.redis` set: a cluster node (src/cluster, loaded only then). */
export async function startServer(config: ServeConfig): Promise<RunningServer> {
  if (config.cluster.redis !== 'none') {
    const { startClusterServer } = await import('../cluster/cluster-service.js');
    return startClusterServer(config);
  }
  const service = Service.open(config);
  const app = buildApp(service);
  let address: string;
  try {
    address = await app.listen({ host: config.server.host, port: config.server.port });
  } catch (e) {
    await service.close(0);
    throw e;
  }
  let closed: Promise<void> | undefined;
  return {
    service,
    api: service,
    app,
    url: address,
    close: () => (closed ??= service.close(undefined, () => app.close())),
  };
}
