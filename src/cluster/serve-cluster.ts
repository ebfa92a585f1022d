import type { FastifyInstance } from 'fastify';
import path from 'node:path';
import { buildApp } from '../server/app.js';
import type { ServeConfig } from '../server/config.js';
import { Journal } from '../server/journal.js';
import type { ServerLog } from '../server/log.js';
import { listen, loadServerKinds, refuseExposure, startLog, type RunningServer, type StartOptions } from '../server/serve.js';
import { Service } from '../server/service.js';
import { ClusterService } from './cluster-service.js';

/**
 * Opens this node's own journal (it mirrors the cluster jobs it ran): a job it held unfinished
 * before a restart is the cluster's, not resumed here, so it is forgotten (taken again, it runs
 * afresh); the ended ones keep their results, to republish should Redis lose them.
 */
async function openLocal(config: ServeConfig, log: ServerLog): Promise<{ local: Service; created: boolean }> {
  const kinds = await loadServerKinds(config);
  const dataDir = path.join(config.dataDir, 'node');
  const journal = Journal.open(dataDir);
  try {
    for (const j of journal.unfinished()) journal.forget(j.id);
  } finally {
    journal.close();
  }
  // Its jobs' ends are recorded in Redis too: an end its full journal cannot take still reaches the cluster.
  return { local: await Service.open({ ...config, dataDir }, kinds, { endsRecordedElsewhere: true, log }), created: journal.created };
}

/** `stoker serve --cluster redis://…`: a cluster node. */
export async function startClusterServer(config: ServeConfig, options?: StartOptions): Promise<RunningServer> {
  const log = startLog(options);
  refuseExposure(config);
  const { local, created } = await openLocal(config, log);
  let accepted: Journal;
  try {
    await local.devicesStarted();
    accepted = Journal.open(path.join(config.dataDir, 'accepted'));
  } catch (e) {
    await local.close(0);
    throw e;
  }
  const cluster = new ClusterService(config, local, accepted, log);
  let app: FastifyInstance;
  let address: string;
  try {
    app = buildApp(cluster);
    await cluster.connect();
    address = await listen(app, config);
  } catch (e) {
    await cluster.close();
    throw e;
  }
  cluster.start(address);
  let closed: Promise<void> | undefined;
  return {
    service: local,
    api: cluster,
    app,
    url: address,
    notes: [cluster.persistence, ...[local.priorsNote, local.idleDevicesNote].filter((n): n is string => n !== undefined)],
    newJournal: created,
    close: () => (closed ??= cluster.close(() => app.close())),
  };
}
