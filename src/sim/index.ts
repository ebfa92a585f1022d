export * from './scenario.js';
export * from './scenarios.js';
export * from './simulator.js';
export * from './window.js';
export * from './metrics.js';
export { Rng } from './random.js';
export * from './load-scenario.js';
export * from './load-pacer.js';
export * from './report.js';
