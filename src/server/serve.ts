import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import type { ServeConfig } from './config.js';
import { Service } from './service.js';

export interface RunningServer {
  service: Service;
  app: FastifyInstance;
  /** http://host:port the server listens on (the real port when config.server.port is 0). */
  url: string;
  /** Graceful shutdown: stop accepting jobs, let in-flight partitions finish (up to server.shutdownTimeoutS), journal the rest as unfinished, answer every waiter, close. */
  close(): Promise<void>;
}

/** Opens the journal, resumes its unfinished jobs, and listens. */
export async function startServer(config: ServeConfig): Promise<RunningServer> {
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
    app,
    url: address,
    close: () => (closed ??= service.close(undefined, () => app.close())),
  };
}
