/** The stoker package: the sans-I/O core and the simulator. The CLI is `stoker` (dist/cli/main.js). */
export * from './core/index.js';
export * from './sim/index.js';
