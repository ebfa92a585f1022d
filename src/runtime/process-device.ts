/**
 * A device whose steps run in child processes: one long-lived process per device worker,
 * speaking framed messages over its stdin and stdout (docs/process-devices.md). The process says
 * `ready` once, then answers each `item` with a `result` that carries its own measure of the
 * step (`busyNs`: the time the item occupied it). A process that exits, hangs past the step's
 * timeout, breaks the framing or never says ready fails the item it holds (the engine retries it)
 * and is started again, after a backoff when it keeps failing. Its stderr goes to the server's log,
 * each line prefixed with the worker's name.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { delimiter } from 'node:path';
import { fileURLToPath } from 'node:url';
import { asBytes } from './bytes.js';
import { checkPrepared, sendable } from './lossless-json.js';
import { encodeFrame, FrameError, FrameReader, type Frame } from './frames.js';
import { batchSignal } from './batch-signal.js';
import type { DeviceRunner, PreparedBuffer, RunCall } from './threaded.js';
import { LineLimit } from './line-limit.js';
import { failure } from './no-retry.js';
import { printable } from './printable.js';
import { roundedWords } from './json-walk.js';
import { maskSecrets, secretValues } from './redact.js';
import { WorkerTurns } from './turns.js';
import type { BatchItemReply } from './threads/protocol.js';

export interface ProcessDeviceOptions {
  /** The device's name, in log lines and errors. */
  name: string;
  /** Processes: one per worker. */
  workers: number;
  /** The program and its arguments, e.g. `python3` and `["worker.py"]`. */
  command: string;
  args?: readonly string[];
  /** Added to the server's environment. */
  env?: Readonly<Record<string, string>>;
  cwd?: string;
  /** A process that has not said `ready` by then is ended and counts as failed. @default 30000 */
  readyTimeoutMs?: number;
  /** The largest payload a process may send in one frame. @default 1 GiB */
  maxFrameBytes?: number;
  /** Receives each line the processes write to stderr, prefixed `[device NAME/WORKER] `. @default process.stderr */
  log?: (line: string) => void;
  /**
   * A step withdrawn because its job ended (cancelled, or failed by another partition): its
   * process is ended (`end`: it may be deep in a long kernel), or the step is let finish and its
   * output dropped (`finish`: a process that loads a model for seconds or minutes is not started
   * again; the worker's next item waits behind it). A step past its timeout is ended either way.
   * @default 'end'
   */
  onWithdraw?: 'end' | 'finish';
  /** With onWithdraw 'finish': the longest a withdrawn step may take to finish before its process is ended. @default 60000 */
  finishTimeoutMs?: number;
}

/** The folder of the Python helper (python/stoker_worker.py at the package root): put on PYTHONPATH. */
export const PYTHON_HELPER_DIR = fileURLToPath(new URL('../../python/', import.meta.url));

/**
 * Processes in a row ending before ready after which a worker counts as failing to start (one
 * could be a fluke: a process killed as it started). Where every worker of the device is, a step
 * fails at once with why. Where others are not, the worker is reported down (`watchWorkers`: the
 * runtime takes it as a lost worker, and its item is withdrawn and goes to the others) until a
 * process of it says ready. Failing its steps made it a black hole — the engine sent it item
 * after item, and 20 of 20 jobs failed while a healthy worker was idle; and so did failing the
 * item that waited for each of its restarts (a worker broken after it had run: a media trial).
 */
const UNREADY_FAIL_FAST = 2;
/**
 * A worker whose failures put its next process off this long or more is reported down too, until
 * a process of it says ready: shown idle, it took the next item and held it through the backoff
 * (up to 30 s) while another worker sat idle (a device author's trial: 4 jobs in 29.8 s, not 1).
 */
const DOWN_AFTER_BACKOFF_MS = 1000;
/** The longest pause before starting a process that keeps failing again. */
const MAX_BACKOFF_MS = 30_000;
/** Lines of a process's stderr kept to explain why it failed. */
const STDERR_TAIL = 8;
/** A frame of a JavaScript stack trace (`    at f (file:1:2)`): a Python traceback's say where, and its error comes last anyway. */
const STACK_FRAME = /^\s+at\s/;
/** A line that names an error: `Error: …`, `ModuleNotFoundError: …`, `error: …`. */
const ERROR_LINE = /^\s*([\w.]*(Error|Exception)\b|error:|fatal:)/i;
/** A worker's stderr lines logged per window (the rest counted, and said after): a burst of 20,000 lines flooded the server's log. */
const STDERR_LINES = 200;
const STDERR_WINDOW_MS = 10_000;
/** How long a closing process may take to exit after its stdin ends. */
const CLOSE_GRACE_MS = 2000;

interface Step {
  id: number;
  resolve: (r: { output: unknown; busyMs: number }) => void;
  reject: (e: Error) => void;
  sentAt: number;
  /** A batch of this many items (0: one item): its results by index (and how many came), and the largest busyNs among them. */
  size: number;
  results: (BatchItemReply | undefined)[];
  received: number;
  busyNs: number | undefined;
  /** A withdrawn step let finish (onWithdraw: 'finish'): ends its process past finishTimeoutMs. */
  dropTimer?: NodeJS.Timeout;
}

/** One worker's process, from spawn to exit. */
interface Life {
  child: ChildProcess;
  reader: FrameReader;
  ready: boolean;
  readyTimer: NodeJS.Timeout;
  /** Why it was ended, when the device ended it (a broken frame, an abort, a timeout). */
  endedBecause?: string;
  /** Its step would fail the same way again (an output over maxFrameBytes): no retry. */
  endedFinal?: boolean;
  exited: Promise<void>;
  /** Whether a step was sent to it (a failure of its first quotes what it wrote since it started). */
  sent?: boolean;
}

class WorkerProcess {
  private life: Life | undefined;
  private step: Step | undefined;
  /** A withdrawn step let finish (onWithdraw: 'finish'): its results are read and dropped; the next step waits for it to end (or for its process to). */
  private dropping: Step | undefined;
  private readonly afterDrop: (() => void)[] = [];
  /** A call holds the worker from its turn until its step settles (also while it waits for ready); the next waits (one lane: this worker's). */
  private readonly turns = new WorkerTurns();
  /** Calls waiting for the process to be ready. */
  private readonly waiting: { resolve: () => void; reject: (e: Error) => void }[] = [];
  /** Failures since the last item that succeeded: the backoff grows with them. */
  private failures = 0;
  /** This worker's processes in a row that ended before they said ready, and why the last one ended. */
  private unready = 0;
  private lastFailure = '';
  private restartTimer: NodeJS.Timeout | undefined;
  private readonly stderrTail: string[] = [];
  /** The first line of its stderr that names an error (`Error: Cannot find module …`), quoted where the tail no longer holds it. */
  private stderrError: string | undefined;
  private stderrPartial = '';
  private readonly stderrLog: LineLimit;
  /** Says the count of the lines held back once their window is over, where no line comes after. */
  private stderrFlush: NodeJS.Timeout | undefined;
  private closed = false;
  private nextId = 0;

  constructor(
    private readonly o: Required<Omit<ProcessDeviceOptions, 'cwd'>> & { cwd?: string },
    private readonly label: string,
    /** This worker's index on its device: a program on a machine of several GPUs pins itself to one by it. */
    private readonly index: number,
    /** Whether every worker of the device has ended UNREADY_FAIL_FAST processes in a row before ready. */
    private readonly deviceUnready: () => boolean,
    /** Called when this worker's process says ready or ends before it did (the device re-reads who is down). */
    private readonly changed: () => void = () => undefined,
    /** Takes this worker out of service now where the device would (see ProcessDevice.takeOut): whether it is out. */
    private readonly takeOut: () => boolean = () => false,
  ) {
    this.stderrLog = new LineLimit(o.log, STDERR_LINES, STDERR_WINDOW_MS, (n) => `[device ${label}] ${n} more stderr lines in the last ${STDERR_WINDOW_MS / 1000} s were not logged`, () => performance.now());
    this.secrets = secretValues({ args: o.args, env: { ...process.env, ...o.env } });
  }

  /** The credentials its processes are given: read *** in the stderr it logs and quotes. */
  private readonly secrets: string[];

  /** Whether this worker's processes keep ending before they are ready. */
  get failingToStart(): boolean {
    return this.unready >= UNREADY_FAIL_FAST;
  }

  /**
   * When this worker's next process starts (performance.now()), where a run of failures put it off
   * by DOWN_AFTER_BACKOFF_MS or more; NaN otherwise, and again once a process of it says ready.
   */
  restartAt = NaN;

  /** Whether this worker waits out a long backoff before its next process (see restartAt). */
  get backingOff(): boolean {
    return !Number.isNaN(this.restartAt);
  }

  /** Whether a process of this worker has said ready and is not being ended. */
  get isReady(): boolean {
    return this.life?.ready === true && !this.life.endedBecause;
  }

  /** Why its last process ended ('' while none has). */
  get failure(): string {
    return this.lastFailure;
  }

  start(): void {
    if (this.closed || this.life || this.restartTimer) return;
    // A new process: the failure messages quote its own stderr only.
    this.stderrTail.length = 0;
    this.stderrError = undefined;
    this.stderrPartial = '';
    const { command, args, env, cwd } = this.o;
    const pythonPath = [PYTHON_HELPER_DIR, process.env['PYTHONPATH'], env['PYTHONPATH']].filter((p) => p).join(delimiter);
    const child = spawn(command, args, { cwd, env: { ...process.env, ...env, PYTHONPATH: pythonPath, STOKER_WORKER: String(this.index), STOKER_WORKERS: String(this.o.workers) }, stdio: ['pipe', 'pipe', 'pipe'] });
    const reader = new FrameReader(this.o.maxFrameBytes);
    let exit: () => void = () => undefined;
    const life: Life = {
      child,
      reader,
      ready: false,
      readyTimer: setTimeout(() => this.end(life, `it did not say ready within ${this.o.readyTimeoutMs / 1000} s (readyTimeoutS)`), this.o.readyTimeoutMs),
      exited: new Promise<void>((r) => (exit = r)),
    };
    this.life = life;
    child.stdout?.on('data', (chunk: Buffer) => this.onData(life, chunk));
    child.stderr?.on('data', (chunk: Buffer) => this.onStderr(chunk));
    child.stdin?.on('error', () => {
      // EPIPE when the process is gone: its exit event says why.
    });
    let gone = false;
    const onGone = (why: string) => {
      if (gone) return;
      gone = true;
      clearTimeout(life.readyTimer);
      this.flushStderr();
      exit();
      this.onExit(life, life.endedBecause ?? why);
    };
    child.once('error', (e) => onGone(`it could not be started: ${e.message} — check the device's command (${JSON.stringify(command)}) and cwd`));
    child.once('exit', (code, signal) => onGone(`it exited (${signal ? `signal ${signal}` : `code ${code}`})`));
  }

  async run(call: RunCall): Promise<{ output: unknown; busyMs: number }> {
    // (Refused at once, retry: false, where JSON would change it: an Int32Array inside it became {"0":…}.)
    sendableCheck(call);
    return this.claim(call.signal, [call], () => this.send([call], call.signal, false));
  }

  /** A batch as one step: its items' frames back to back, one result per item (see docs/process-devices.md). */
  async runBatch(calls: RunCall[]): Promise<{ results: BatchItemReply[]; busyMs: number }> {
    // An item whose prepared value cannot be sent fails alone; the others run.
    return sendable(calls, sendableCheck, async (ok) => {
      const signal = batchSignal(ok);
      const r = await this.claim(signal, ok, () => this.send(ok, signal, true));
      return { results: r.output as BatchItemReply[], busyMs: r.busyMs };
    });
  }

  /**
   * Holds the worker for one step, from its turn until it settles (also while the process gets
   * ready). A step that waited (for a process to be ready, behind a withdrawn step) says when it is
   * sent (`begin`): its device timeout counts from then.
   */
  private claim<T>(signal: AbortSignal, calls: RunCall[], step: () => Promise<T>): Promise<T> {
    return this.turns.take(0, async () => {
      if (this.closed) throw new Error('the device is closed');
      let waited = false;
      // Behind a withdrawn step let finish: sent once it is over (its process ended past
      // finishTimeoutMs, this step waits for the next one, as after any withdrawn step).
      if (this.dropping) {
        waited = true;
        await new Promise<void>((resolve) => this.afterDrop.push(resolve));
        if (signal.aborted) throw new Error(`${this.label}: withdrawn before it was sent`);
      }
      // Not started, not ready yet, or being ended (after a withdrawn step): wait for the next one —
      // unless every worker's processes keep ending before they are ready (a wrong command, a
      // missing file): the step fails at once with why, rather than wait out restarts that back
      // off to 30 s, its worker shown busy all along (or, with a device timeout, fail saying only
      // that it timed out). See UNREADY_FAIL_FAST.
      if (!this.life?.ready || this.life.endedBecause) {
        if (this.failingToStart && this.deviceUnready()) throw new Error(`${this.lastFailure} — it ended before it was ready ${this.unready} times in a row (it is started again in the background): check the device's command, args and cwd`);
        waited = true;
        await this.untilReady(signal);
      }
      if (waited) for (const c of calls) c.begin?.();
      return step();
    });
  }

  private send(calls: RunCall[], signal: AbortSignal, batch: boolean): Promise<{ output: unknown; busyMs: number }> {
    // Withdrawn while the process started: nothing was sent, the healthy process stays.
    if (signal.aborted) return Promise.reject(new Error(`${this.label}: withdrawn before it was sent`));
    const life = this.life as Life;
    const id = this.nextId++;
    // A failure of this step quotes what the process wrote since it was sent (or since it started,
    // for its first): lines an earlier item printed were quoted as this one's.
    if (life.sent) {
      this.stderrTail.length = 0;
      this.stderrError = undefined;
    }
    life.sent = true;
    return new Promise((resolve, reject) => {
      const step: Step = { id, resolve, reject, sentAt: performance.now(), size: batch ? calls.length : 0, results: [], received: 0, busyNs: undefined };
      this.step = step;
      // Withdrawn (cancel, timeout, shutdown): the process may be deep in a kernel, so it is ended.
      // Its payload was copied into the pipe, so the step can settle at once and the worker take
      // the next item, which waits for the restarted process.
      const abort = () => {
        if (this.step !== step) return;
        this.step = undefined;
        const why = (signal.reason as Error | undefined)?.message ?? 'aborted';
        // Every item's job ended (E_CANCELLED; a batch's items each): let it finish, for at most
        // finishTimeoutMs (a step that hangs would hold the worker for good). A timeout
        // (E_DEVICE_FAILED) may be a hang: ended either way.
        const cancelled = calls.every((c) => (c.signal.reason as { code?: unknown } | undefined)?.code === 'E_CANCELLED');
        if (this.o.onWithdraw === 'finish' && cancelled && !this.dropping) {
          this.dropping = step;
          step.dropTimer = setTimeout(() => this.dropping === step && this.end(life, `a withdrawn step did not finish within ${this.o.finishTimeoutMs / 1000} s (finishTimeoutS)`), this.o.finishTimeoutMs);
        } else this.end(life, `the step was withdrawn (${why})`);
        reject(new Error(`${this.label}: aborted: ${why}`));
      };
      signal.addEventListener('abort', abort, { once: true });
      const frames: Buffer[] = [];
      try {
        calls.forEach((call, index) => {
          const { header, payload } = itemFrame(id, call);
          if (batch) header['batch'] = { size: calls.length, index };
          frames.push(...encodeFrame(header, payload));
        });
      } catch (e) {
        this.step = undefined;
        return reject(e instanceof FrameError ? Object.assign(new Error(`the item cannot be sent to the device (its input and prepared value travel as JSON): ${e.message}`), { retry: false as const }) : (e as Error));
      }
      for (const b of frames) life.child.stdin?.write(b);
    });
  }

  /** Ends the process for good (stdin closed, then killed after a grace period). */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.restartTimer);
    this.restartTimer = undefined;
    for (const w of this.waiting.splice(0)) w.reject(new Error('the device is closed'));
    const life = this.life;
    if (!life) return;
    life.endedBecause = 'the device was closed';
    life.child.stdin?.end();
    const grace = setTimeout(() => life.child.kill('SIGKILL'), CLOSE_GRACE_MS);
    await life.exited;
    clearTimeout(grace);
  }

  /** Resolves once a process is ready; a withdrawn call stops waiting at once (nothing was sent, nothing is ended). */
  private untilReady(signal: AbortSignal): Promise<void> {
    this.start();
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        const i = this.waiting.indexOf(w);
        if (i >= 0) this.waiting.splice(i, 1);
        reject(new Error(`${this.label}: withdrawn while its process started`));
      };
      const w = {
        resolve: () => (signal.removeEventListener('abort', onAbort), resolve()),
        reject: (e: Error) => (signal.removeEventListener('abort', onAbort), reject(e)),
      };
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(w);
    });
  }

  private onData(life: Life, chunk: Buffer): void {
    // A process being ended is not trusted any more (a late ready after the ready timeout, say).
    if (this.life !== life || life.endedBecause) return;
    let frames: Frame[];
    try {
      frames = life.reader.push(chunk);
    } catch (e) {
      // An output over the limit would be sent again: its job fails at once (the stream is lost all the same).
      const fe = e as FrameError;
      const what = !fe.oversize ? 'it wrote a malformed frame' : fe.message.startsWith('a frame header') ? 'it wrote an output too large for JSON' : 'it wrote an output over maxFrameBytes';
      return this.end(life, `${what}: ${fe.message}`, fe.oversize);
    }
    for (const f of frames) {
      if (this.life !== life || life.endedBecause) return;
      const type = f.header['type'];
      if (life.ready && type === 'result' && this.dropping && f.header['id'] === this.dropping.id) {
        this.drop(this.dropping, f);
        continue;
      }
      if (!life.ready) {
        if (type !== 'ready') return this.end(life, `its first frame must be {"type":"ready"}, got ${JSON.stringify(f.header).slice(0, 100)}`);
        const protocol = f.header['protocol'];
        if (protocol !== undefined && protocol !== PROTOCOL) return this.end(life, `it speaks protocol ${JSON.stringify(protocol)}, and this stoker protocol ${PROTOCOL}: send {"type":"ready","protocol":${PROTOCOL}} and frames as docs/process-devices.md says`);
        life.ready = true;
        this.unready = 0;
        this.restartAt = NaN;
        clearTimeout(life.readyTimer);
        for (const w of this.waiting.splice(0)) w.resolve();
        this.changed();
        continue;
      }
      const step = this.step;
      const shown = JSON.stringify(f.header).slice(0, 100);
      if (!step) return this.end(life, `it sent ${shown} while no item was out (a second result for an item?)`);
      if (type !== 'result') return this.end(life, `it sent ${shown} where the result of item ${step.id} was due: its "type" must be "result"`);
      if (f.header['id'] !== step.id) return this.end(life, `it sent ${shown} where the result of item ${step.id} was due: its "id" must be the number ${step.id}, the item's`);
      const wrong = resultProblem(f);
      if (wrong) return this.end(life, `it sent ${shown}: ${wrong}`);
      if (step.size === 0) {
        this.step = undefined;
        this.settle(step, f);
      } else if (!this.batchResult(life, step, f)) return;
    }
  }

  /** A result of the withdrawn step let finish: dropped; the step is over with its last (a batch's: one per item, or one for all). */
  private drop(step: Step, f: Frame): void {
    if (!(step.size === 0 || f.header['index'] === undefined || ++step.received >= step.size)) return;
    this.dropped();
  }

  /** The withdrawn step let finish is over (finished, or its process ended): the next step goes. */
  private dropped(): void {
    clearTimeout(this.dropping?.dropTimer);
    this.dropping = undefined;
    for (const go of this.afterDrop.splice(0)) go();
  }

  /**
   * One result of a batch: by its `index`; a result without one is the whole batch's failure.
   * Settles the step when it is complete; false when the process broke the protocol (it is ended).
   */
  private batchResult(life: Life, step: Step, f: Frame): boolean {
    const h = f.header;
    const index = h['index'];
    if (index === undefined && h['ok'] !== true) {
      this.step = undefined;
      this.failures = 0;
      // (A batch of one — an item run again alone — that would fail the same way again says so: it was tried again to the last retry.)
      step.reject(failure(`${this.label}: ${typeof h['error'] === 'string' ? maskSecrets(h['error'], this.secrets) : 'the batch failed (no error message)'}`, step.size === 1 ? h['retry'] : undefined));
      return true;
    }
    if (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index >= step.size || step.results[index] !== undefined) {
      this.end(life, `it sent ${JSON.stringify(h).slice(0, 100)} where a result of batch ${step.id} with a new index from 0 to ${step.size - 1} was due`);
      return false;
    }
    const busyNs = (h['busyNs'] ?? undefined) as number | undefined;
    const bad = busyProblem(busyNs, performance.now() - step.sentAt);
    if (bad) {
      this.end(life, `${bad} (the batch)`);
      return false;
    }
    if (busyNs !== undefined) step.busyNs = Math.max(step.busyNs ?? 0, busyNs);
    // (As a single item's: the worker named, the trailing newline of a traceback left off.)
    const error = `${this.label}: ${typeof h['error'] === 'string' ? maskSecrets(h['error'].trimEnd(), this.secrets) : 'the item failed (no error message)'}`;
    const rounds = h['ok'] === true ? roundedSaid(f) : undefined;
    step.results[index] = rounds ? { error: `${this.label}: ${rounds}`, retry: false } : h['ok'] === true ? { output: outputOf(f) } : h['retry'] === false ? { error, retry: false } : { error };
    if (++step.received < step.size) return true;
    this.step = undefined;
    this.failures = 0;
    step.resolve({ output: step.results, busyMs: step.busyNs === undefined ? performance.now() - step.sentAt : step.busyNs / 1e6 });
    return true;
  }

  private settle(step: Step, f: Frame): void {
    const h = f.header;
    const wallMs = performance.now() - step.sentAt;
    if (h['ok'] !== true) {
      this.failures = 0;
      return step.reject(failure(`${this.label}: ${typeof h['error'] === 'string' ? maskSecrets(h['error'], this.secrets) : 'the step failed (no error message)'}`, h['retry']));
    }
    const busyNs = (h['busyNs'] ?? undefined) as number | undefined;
    const bad = busyProblem(busyNs, wallMs);
    if (bad) return step.reject(new Error(`${this.label}: ${bad}`));
    this.failures = 0;
    const rounds = roundedSaid(f);
    if (rounds) return step.reject(failure(`${this.label}: ${rounds}`, false));
    this.checkBusyUnit(busyNs, wallMs);
    step.resolve({ output: outputOf(f), busyMs: busyNs === undefined ? wallMs : busyNs / 1e6 });
  }

  /**
   * Says once when a step's busyNs is under 1 % of the time it was out, on a step of 100 ms or more:
   * ms (or s) in the place of ns, most likely — the pacer took a device of 10 items/s for 353,389
   * and held 515 in flight against a target of 4 (a device written from the docs alone). Said, not
   * refused: a process may hand the work to something it does not time.
   */
  private checkBusyUnit(busyNs: number | undefined, wallMs: number): void {
    if (this.saidBusyUnit || busyNs === undefined || wallMs < 100 || busyNs / 1e6 >= wallMs * 0.01) return;
    this.saidBusyUnit = true;
    this.o.log(`[device ${this.label}] busyNs ${busyNs} for a step that was out ${Math.round(wallMs)} ms: ${(busyNs / 1e6).toPrecision(3)} ms of work — report ns (time.perf_counter_ns() around the work, Go's time.Since(t).Nanoseconds()), not ms or s: the pacer's rates come from it`);
  }

  /** Whether checkBusyUnit has spoken (once per worker). */
  private saidBusyUnit = false;

  /** Ends a process the device no longer trusts; its exit fails the item it holds and starts it again. */
  private end(life: Life, why: string, final = false): void {
    if (life.endedBecause) return;
    life.endedBecause = why;
    life.endedFinal = final;
    life.child.kill('SIGKILL');
  }

  private onExit(life: Life, why: string): void {
    if (this.life !== life) return;
    this.life = undefined;
    const first = this.stderrError !== undefined && !this.stderrTail.includes(this.stderrError) ? `; its stderr first said: ${this.stderrError}` : '';
    const tail = this.stderrTail.length > 0 ? `${first}; its last stderr: ${this.stderrTail.join(' | ')}` : '';
    const error = failure(`${this.label} (${this.o.command}): ${why}${tail}`, life.endedFinal ? false : undefined);
    const wasReady = life.ready;
    this.unready = wasReady ? 0 : this.unready + 1;
    // A withdrawn step's process was ended on purpose: start the next one at once (whatever the backoff of failures before it).
    const withdrawn = life.endedBecause?.startsWith('the step was withdrawn') === true;
    let delay = 0;
    if (!this.closed) {
      if (!withdrawn) this.failures++;
      delay = withdrawn || this.failures === 0 ? 0 : Math.min(MAX_BACKOFF_MS, 250 * 2 ** (this.failures - 1));
      if (delay >= DOWN_AFTER_BACKOFF_MS) this.restartAt = performance.now() + delay;
    }
    const step = this.step;
    this.step = undefined;
    this.dropped();
    // Out of service now (a long backoff): said with the step's failure, so that the engine sends
    // the worker nothing more first (told after, the item it was handed meanwhile was prepared
    // again; told before, the step's own item went back without spending a try — a poison item
    // would crash every worker in turn for ever).
    if (step && this.backingOff && !this.closed && this.takeOut()) Object.assign(error, { workerLost: true });
    step?.reject(error);
    // The steps waiting for a process that ended before it was ready fail with why where every
    // worker's processes keep doing so; otherwise they wait for the next (this worker reported
    // down, the runtime withdraws them for the others).
    if (!wasReady && this.failingToStart && this.deviceUnready()) for (const w of this.waiting.splice(0)) w.reject(error);
    if (!wasReady && !this.closed) this.changed();
    this.lastFailure = error.message;
    if (this.closed) return;
    this.o.log(`[device ${this.label}] ${printable(why)}: starting it again${delay > 0 ? ` in ${delay} ms` : ''}`);
    // (Without a step, or where the device's other workers changed meanwhile: the device re-reads who is down.)
    if (delay >= DOWN_AFTER_BACKOFF_MS) setImmediate(() => !this.closed && this.changed());
    this.restartTimer = setTimeout(() => {
      this.restartTimer = undefined;
      this.start();
    }, delay);
  }

  private onStderr(chunk: Buffer): void {
    const text = this.stderrPartial + chunk.toString('utf8');
    const lines = text.split('\n');
    this.stderrPartial = lines.pop() ?? '';
    for (const line of lines) this.logLine(line);
  }

  private flushStderr(): void {
    if (this.stderrPartial !== '') this.logLine(this.stderrPartial);
    this.stderrPartial = '';
  }

  /**
   * Says how many stderr lines went unlogged once their window is over, with no next line needed —
   * and again for a window that began while the last one's timer was pending: that timer found
   * the new window not over, and its count waited for the next line (two minutes in a trial).
   */
  private flushStderrCount(): void {
    if (!this.stderrLog.holding || this.stderrFlush) return;
    this.stderrFlush = setTimeout(() => {
      this.stderrFlush = undefined;
      this.stderrLog.flush();
      this.flushStderrCount();
    }, Math.max(0, this.stderrLog.windowEnd - performance.now()) + 1).unref();
  }

  private logLine(said: string): void {
    const line = maskSecrets(said, this.secrets);
    this.stderrLog.line(`[device ${this.label}] ${line}`);
    this.flushStderrCount();
    // (A JavaScript stack's frames and blank lines are left out of what a failure quotes: a Node
    // program's tail was eight `at …` lines, and the line saying what went wrong was not among them.)
    if (STACK_FRAME.test(line) || line.trim() === '') return;
    const shown = line.length > 200 ? `${line.slice(0, 200)}…` : line;
    if (this.stderrError === undefined && ERROR_LINE.test(line)) this.stderrError = shown;
    this.stderrTail.push(shown);
    if (this.stderrTail.length > STDERR_TAIL) this.stderrTail.shift();
  }
}

/**
 * What is wrong with a result's busyNs, or undefined: it is absent, or a number of ns ≥ 0 no longer
 * than the step has been out (`wallMs` since it was sent; 1 ms and 1 % over for the two clocks'
 * granularity). A longer one cannot be the time the item occupied the worker — ms or a timestamp
 * in its place (1e30 ns was taken: the pacer's rate went to 0, 30 items of 2 ms took 49 s, and the
 * device's busy seconds and its remembered service time kept it).
 */
function busyProblem(v: unknown, wallMs: number): string | undefined {
  // (null is left out too: a Go *int64 without omitempty sends it, and the item failed.)
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) return `busyNs must be a finite number ≥ 0 (the ns the item occupied the worker), got ${JSON.stringify(v)}`;
  if (v / 1e6 > wallMs * 1.01 + 1) return `busyNs ${v} is longer than the ${Math.round(wallMs * 1e6)} ns since the step was sent: report the ns the item occupied the worker (time.perf_counter_ns() around the work), not a timestamp nor a count since the process started`;
  return undefined;
}

/** The protocol this stoker speaks (a process's ready frame may say which it speaks). */
const PROTOCOL = 1;

/**
 * What breaks the protocol in a result's fields, or undefined: an `ok` that is not a boolean, an
 * `error` or `retry` of another type, bytes announced with no `payloadBytes` (the bytes written
 * after it were read as the next frame: its output was empty and the next item hung), a payload
 * beside a JSON output. (A malformed ok or error read as "the step failed (no error message)",
 * retried, and a valid output was dropped.)
 */
function resultProblem(f: Frame): string | undefined {
  const h = f.header;
  if (h['ok'] !== true && h['ok'] !== false) return `"ok" must be true or false (got ${JSON.stringify(h['ok']) ?? 'nothing'})`;
  if (h['ok'] === false && h['error'] !== undefined && typeof h['error'] !== 'string') return `"error" must be a string, the message (got ${JSON.stringify(h['error']).slice(0, 60)})`;
  if (h['retry'] !== undefined && typeof h['retry'] !== 'boolean') return `"retry" must be true or false (got ${JSON.stringify(h['retry'])})`;
  if (h['ok'] === true && h['bytes'] === true && h['payloadBytes'] === undefined) return '"bytes": true needs "payloadBytes", the number of bytes that follow the header (0 for empty bytes)';
  if (h['ok'] === true && f.payload && h['bytes'] !== true && 'output' in h) return 'it gave both a JSON "output" and a payload: give one, a payload with "bytes": true';
  return undefined;
}

/**
 * What is wrong with a successful result's output, or undefined: an integer in it that JSON.parse
 * rounded (the same output again would be rounded again: no retry).
 */
function roundedSaid(f: Frame): string | undefined {
  const r = f.rounded?.find((x) => x.path === '$.output' || /^\$\.output[.[]/.test(x.path));
  if (!r) return undefined;
  const w = roundedWords(r.literal);
  return `${r.path.slice(2)} is ${w.integer}, ${w.rest}`;
}

/** A successful result's output: its payload, empty bytes (`bytes` without one), or its JSON `output`. */
function outputOf(f: Frame): unknown {
  return f.payload ?? (f.header['bytes'] === true ? new Uint8Array(0) : (f.header['output'] ?? null));
}

/** Throws (retry: false) for a prepared value JSON would change; bytes go as the payload. */
function sendableCheck(call: RunCall): void {
  const p: PreparedBuffer = call.prepared;
  if (p.file || !asBytes(p.meta)) checkPrepared(p.meta);
}

/** The `item` frame of a step: small things in the header, the bytes (prepare's, or the partition's buffer) as the payload. */
function itemFrame(id: number, call: RunCall): { header: Record<string, unknown>; payload?: Uint8Array } {
  const p: PreparedBuffer = call.prepared;
  const header: Record<string, unknown> = { type: 'item', id, job: call.jobId, kind: call.kind, partition: call.partition, partitions: call.partitions, input: call.input };
  const bytes = p.file ? undefined : asBytes(p.meta);
  if (bytes) return { header: { ...header, prepared: null }, payload: bytes };
  if (p.file) return { header: { ...header, prepared: p.meta ?? null, payloadPath: p.file.path, payloadPathBytes: p.file.bytes } };
  header['prepared'] = p.meta ?? null;
  if (p.buffer) return { header, payload: new Uint8Array(p.buffer.buffer, 0, p.bytes ?? p.buffer.classBytes) };
  return { header };
}

/** A process device: a worker process per device worker, started at once. */
export class ProcessDevice implements DeviceRunner {
  private readonly workers: WorkerProcess[];
  /** Which workers are down (see watchWorkers), as last told. */
  private readonly down: boolean[];
  private listener: ((worker: number, up: boolean) => void) | undefined;
  private readonly name: string;
  private readonly log: (line: string) => void;

  constructor(options: ProcessDeviceOptions) {
    const o = {
      args: [],
      env: {},
      readyTimeoutMs: 30_000,
      maxFrameBytes: 2 ** 30,
      onWithdraw: 'end' as const,
      finishTimeoutMs: 60_000,
      log: (line: string) => void process.stderr.write(`${line}\n`),
      ...options,
    };
    this.name = o.name;
    this.log = o.log;
    const unready = () => this.workers.every((w) => w.failingToStart);
    this.workers = Array.from({ length: o.workers }, (_, w) => new WorkerProcess(o, `${o.name}/${w}`, w, unready, () => this.sync(), () => this.takeOut(w)));
    this.down = this.workers.map(() => false);
    for (const w of this.workers) w.start();
  }

  /**
   * Hears which workers are down: one whose processes keep ending before they are ready while
   * another worker's do not (UNREADY_FAIL_FAST), until a process of it says ready. (Where every
   * worker's do, none is down: their steps fail at once with why, rather than wait for good.)
   */
  watchWorkers(listener: (worker: number, up: boolean) => void): void {
    this.listener = listener;
    // Those down already (before anyone listened) are told too.
    this.down.forEach((down, i) => down && listener(i, false));
    this.sync();
  }

  /** Whether worker `i` should be out of service now (see watchWorkers and DOWN_AFTER_BACKOFF_MS). */
  private shouldBeDown(i: number): boolean {
    const w = this.workers[i] as WorkerProcess;
    // (One that cannot start stays down while another can, whatever the others' backoffs: counted
    // with them, a worker that never starts was put back in service while another backed off.)
    if (w.failingToStart) return !this.workers.every((x) => x.failingToStart);
    return w.backingOff && !this.workers.every((x) => x.failingToStart || x.backingOff);
  }

  /** Says that worker `i` is taken out of service, and why. */
  private sayDown(i: number): void {
    const w = this.workers[i] as WorkerProcess;
    const why = w.failingToStart ? 'its processes keep ending before they are ready' : `its processes keep failing: the next starts in ${Math.max(0, (w.restartAt - performance.now()) / 1000).toFixed(1)} s`;
    this.log(`[device ${this.name}/${i}] ${why}: taken out of service (its items go to the other workers) until one is ready`);
  }

  /**
   * Takes worker `i` out of service now where it should be, saying so: its caller tells the engine
   * with the failure of the step the worker held, and the listener hears it a moment later (where
   * that failure came too late to count, the engine learns it so). Whether it is out.
   */
  private takeOut(i: number): boolean {
    const down = this.shouldBeDown(i);
    if (down && !this.down[i]) {
      this.down[i] = true;
      this.sayDown(i);
      setImmediate(() => this.down[i] && this.listener?.(i, false));
    }
    return down;
  }

  /** Tells the listener of every worker whose being down changed. */
  private sync(): void {
    this.workers.forEach((w, i) => {
      const down = this.shouldBeDown(i);
      if (down === this.down[i]) return;
      this.down[i] = down;
      if (down) this.sayDown(i);
      else if (w.failingToStart) this.log(`[device ${this.name}/${i}] every worker's processes now end before they are ready: its steps fail at once, saying why`);
      else if (w.backingOff) this.log(`[device ${this.name}/${i}] every worker of the device is being started again: back in service, its items wait for its next process`);
      else this.log(`[device ${this.name}/${i}] back in service`);
      this.listener?.(i, !down);
    });
  }

  /**
   * Resolves once a worker's process is ready (undefined), or with why they fail where every
   * worker's processes keep ending before they are ready (a wrong command, args or cwd: seconds
   * at most, as they end at once), or undefined after `timeoutMs` (slow to start, not failing).
   */
  async started(timeoutMs: number): Promise<string | undefined> {
    const until = performance.now() + timeoutMs;
    while (performance.now() < until) {
      if (this.workers.some((w) => w.isReady)) return undefined;
      if (this.workers.every((w) => w.failingToStart)) return (this.workers[0] as WorkerProcess).failure;
      await new Promise((r) => setTimeout(r, 25));
    }
    return undefined;
  }

  run(call: RunCall): Promise<{ output: unknown; busyMs: number }> {
    const w = this.workers[call.worker];
    if (!w) return Promise.reject(new Error(`no worker ${call.worker} on device ${call.device}`));
    return w.run(call);
  }

  runBatch(calls: RunCall[]): Promise<{ results: BatchItemReply[]; busyMs: number }> {
    const first = calls[0];
    const w = first ? this.workers[first.worker] : undefined;
    if (!first || !w) return Promise.reject(new Error(`no worker ${first?.worker} on device ${first?.device}`));
    return w.runBatch(calls);
  }

  async close(): Promise<void> {
    this.listener = undefined;
    await Promise.all(this.workers.map((w) => w.close()));
  }
}
