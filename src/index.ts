/** The stoker package: the sans-I/O core, the simulator and the real-time runtime. The CLI is `stoker` (dist/cli/main.js). */
export * from './core/index.js';
export * from './sim/index.js';
export * from './runtime/index.js';
