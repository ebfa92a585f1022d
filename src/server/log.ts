/**
 * Where a server says what its operator should know — a failing step, a full journal, a device
 * restarted, a process device's stderr: one line at a time, without its newline. `startServer`
 * (and `startClusterServer`) take one as `options.log`; standard error by default.
 */
export type ServerLog = (line: string) => void;

/** The default log: standard error. */
export const stderrLog: ServerLog = (line) => void process.stderr.write(`${line}\n`);
