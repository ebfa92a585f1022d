/**
 * stoker/server: the service (`stoker serve`) from your own program — its configuration, your job
 * kinds, and a server that runs them behind the HTTP API, the journal, metrics and the dashboard.
 *
 * ```js
 * import { loadConfig, startServer } from 'stoker/server';
 * const server = await startServer(loadConfig({ values: { dataDir: './data', kinds: { embed: { module: './embed-kind.mjs' } } } }));
 * console.log(server.url);        // http://127.0.0.1:7070
 * await server.close();           // graceful: in-flight partitions finish, the rest resume on the next start
 * ```
 */
export { startServer, loadServerKinds, type RunningServer, type StartOptions } from './serve.js';
export type { ServerLog } from './log.js';
export { loadConfig, configToToml, ConfigError, CONFIG_DOC, type ConfigIssue, type ConfigValues, type DeviceValues, type BatchValues, type KindConfig, type LoadConfigOptions, type ServeConfig, type ServerConfig, type EngineConfig, type DeviceConfig, type DeviceBatchConfig, type HttpDeviceConfig, type ProcessDeviceConfig, type PrepareConfig, type ClusterConfig } from './config.js';
export { loadKind, KindModuleError, type InputIssue, type Json, type KindModule, type LoadedKind, type PrepareContext, type RunContext } from './kind-module.js';
export { BUILT_IN_KINDS, loadKinds, type KindSource, type KindView } from './kinds.js';
export { Service, type ServiceEvent } from './service.js';
export type { Submitted } from './intake.js';
export type { StatesPage, JobProgressEvent } from './progress.js';
export type { HistoryView } from './history.js';
export type { Replay } from './event-log.js';
export type { ChromeTrace } from '../report/chrome-trace.js';
export { ServiceError } from './errors.js';
export { JobView, ResultView, StatusView, SubmitBody, TimelineView } from './api.js';
export { buildApp, type ApiService } from './app.js';
export { Journal, JournalError, type JobState, type JournalJob } from './journal.js';
export { OptionalPackageError } from '../runtime/optional.js';
