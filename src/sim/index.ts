export * from './scenario.js';
export * from './scenarios.js';
export * from './simulator.js';
export * from './metrics.js';
export { Rng } from './random.js';
