/**
 * The durable job journal of `stoker serve`: one SQLite file (`stoker.db`) in the data dir, on
 * better-sqlite3. A job is durable once {@link Journal.insert} returns (WAL, `synchronous=FULL`),
 * the outputs of its finished partitions are kept until it ends so that a restarted daemon can
 * resume it, and each job ends exactly once ({@link Journal.finish}).
 *
 * The file is opened with `locking_mode=EXCLUSIVE` and the lock is taken at open, so one data dir
 * serves one daemon: a second open, from another process or another connection, fails with
 * `E_JOURNAL_LOCKED`. Every call is synchronous but {@link Journal.storeBlob} and
 * {@link Journal.readBlob}; JSON values are stored as TEXT, and a partition output or a result
 * that is bytes (a Uint8Array) as a BLOB in the same column — or, over BLOB_MIN_BYTES, in pieces
 * (a blob: see storeBlob), written and read a piece per turn of the event loop, and deleted
 * likewise once nothing refers to them (see #sweep).
 */
import { createHash } from 'node:crypto';
import { accessSync, closeSync, constants, existsSync, fsyncSync, mkdirSync, rmSync, statfsSync, statSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import Database from 'better-sqlite3';
import { checkIntegrity, checkWal, openMark, writeMark } from './journal-integrity.js';
import { BLOB_CHUNK_BYTES, BLOB_COLUMNS, BLOB_TABLES, canonical, fromRow, fromStored, JOB_STATES, PRIORITIES, RESULT_BYTES, SCHEMA, SCHEMA_VERSION, STATE_LIST, toJson, toStored, UNFINISHED, LIST_COLUMNS, VIEW_COLUMNS, type JobRow } from './journal-schema.js';
import { ignoreFull, JournalError, type JobState, type JournalJob, type JournalJobBody, type JournalJobInput, type JournalOptions, type JournalOutcome } from './journal-types.js';

export { ignoreFull, isJournalError, JournalError, type JobState, type JournalErrorCode, type JournalJob, type JournalJobBody, type JournalJobInput, type JournalOptions, type JournalOutcome } from './journal-types.js';

/** The prepared statements of a journal, created once at open. */
function prepareStatements(db: Database.Database) {
  return {
    get: db.prepare<[string], JobRow>(`SELECT *, ${RESULT_BYTES} AS result_bytes FROM jobs WHERE id = ?`),
    view: db.prepare<[string], JobRow>(`SELECT ${VIEW_COLUMNS} FROM jobs WHERE id = ?`),
    insert: db.prepare(`INSERT INTO jobs (id, kind, priority, partitions, input, deadline, body_hash, sent_hash, module_hash, state, submitted_at)
      VALUES (@id, @kind, @priority, @partitions, @input, @deadline, @bodyHash, @sentHash, @moduleHash, 'queued', @now)`),
    markRunning: db.prepare(`UPDATE jobs SET state = 'running', started_at = ? WHERE id = ? AND state = 'queued'`),
    addPartition: db.prepare(`INSERT OR IGNORE INTO partition_outputs (job_id, partition, output, output_blob) VALUES (?, ?, ?, ?)`),
    setPartition: db.prepare(`UPDATE partition_outputs SET output = ?, output_blob = ? WHERE job_id = ? AND partition = ?`),
    countPartition: db.prepare(`UPDATE jobs SET partitions_done = partitions_done + 1 WHERE id = ?`),
    outputs: db.prepare<[string], { partition: number; output: string | Buffer; output_blob: number | null }>('SELECT partition, output, output_blob FROM partition_outputs WHERE job_id = ? ORDER BY partition'),
    finish: db.prepare(`UPDATE jobs SET state = @state, finished_at = @now, result = @result, result_blob = @blob, error_code = @code, error_reason = @reason
      WHERE id = @id AND ${UNFINISHED}`),
    dropOutputs: db.prepare('DELETE FROM partition_outputs WHERE job_id = ?'),
    forget: db.prepare('DELETE FROM jobs WHERE id = ?'),
    resumed: db.prepare(`UPDATE jobs SET resumes = resumes + 1 WHERE id = ? AND ${UNFINISHED}`),
    unfinished: db.prepare<[], JobRow>(`SELECT * FROM jobs WHERE ${UNFINISHED} ORDER BY seq`),
    countsByKind: db.prepare<[], { kind: string; state: JobState; n: number }>('SELECT kind, state, COUNT(*) AS n FROM jobs GROUP BY kind, state ORDER BY kind, state'),
    recent: db.prepare<[number, number], JobRow>(`SELECT ${LIST_COLUMNS} FROM jobs WHERE seq < ? ORDER BY seq DESC LIMIT ?`),
    recentIn: db.prepare<[string, number, number], JobRow>(`SELECT ${LIST_COLUMNS} FROM jobs WHERE state IN (SELECT value FROM json_each(?)) AND seq < ? ORDER BY seq DESC LIMIT ?`),
    recentInExcept: db.prepare<[string, string, number, number], JobRow>(`SELECT ${LIST_COLUMNS} FROM jobs WHERE state IN (SELECT value FROM json_each(?)) AND id NOT IN (SELECT value FROM json_each(?)) AND seq < ? ORDER BY seq DESC LIMIT ?`),
    seqOf: db.prepare<[string], { seq: number }>('SELECT seq FROM jobs WHERE id = ?'),
    purge: db.prepare(`DELETE FROM jobs WHERE NOT ${UNFINISHED} AND finished_at < ?`),
    // Large bytes in pieces (BLOB_MIN_BYTES): written, read, and marked dead where nothing refers to them any more (then swept).
    newBlob: db.prepare<[number]>('INSERT INTO blobs (bytes) VALUES (?)'),
    addChunk: db.prepare<[number, number, Buffer]>('INSERT INTO blob_chunks (blob, seq, data) VALUES (?, ?, ?)'),
    chunk: db.prepare<[number, number], Buffer>('SELECT data FROM blob_chunks WHERE blob = ? AND seq = ?').pluck(),
    blobBytes: db.prepare<[number], number>('SELECT bytes FROM blobs WHERE id = ? AND dead = 0').pluck(),
    killBlob: db.prepare<[number]>('UPDATE blobs SET dead = 1 WHERE id = ?'),
    killOutputBlob: db.prepare<[string, number]>('UPDATE blobs SET dead = 1 WHERE id = (SELECT output_blob FROM partition_outputs WHERE job_id = ? AND partition = ?)'),
    killOutputBlobs: db.prepare<[string]>('UPDATE blobs SET dead = 1 WHERE id IN (SELECT output_blob FROM partition_outputs WHERE job_id = ? AND output_blob IS NOT NULL)'),
    killResultBlob: db.prepare<[string]>('UPDATE blobs SET dead = 1 WHERE id = (SELECT result_blob FROM jobs WHERE id = ?)'),
    killPurgedBlobs: db.prepare<[number]>(`UPDATE blobs SET dead = 1 WHERE id IN (SELECT result_blob FROM jobs WHERE NOT ${UNFINISHED} AND finished_at < ? AND result_blob IS NOT NULL)`),
    // (At open: a blob no row refers to was being written when the server stopped.)
    killOrphans: db.prepare(`UPDATE blobs SET dead = 1 WHERE dead = 0 AND id NOT IN (SELECT result_blob FROM jobs WHERE result_blob IS NOT NULL)
      AND id NOT IN (SELECT output_blob FROM partition_outputs WHERE output_blob IS NOT NULL)`),
    deadBlob: db.prepare<[], number>('SELECT id FROM blobs WHERE dead = 1 LIMIT 1').pluck(),
    sweepChunks: db.prepare<[number, number, number]>('DELETE FROM blob_chunks WHERE blob = ? AND seq IN (SELECT seq FROM blob_chunks WHERE blob = ? ORDER BY seq LIMIT ?)'),
    dropBlob: db.prepare<[number]>('DELETE FROM blobs WHERE id = ?'),
    purgeCounts: db.prepare<[number], { kind: string; state: JobState; n: number }>(`SELECT kind, state, COUNT(*) AS n FROM jobs WHERE NOT ${UNFINISHED} AND finished_at < ? GROUP BY kind, state`),
  };
}

type Statements = ReturnType<typeof prepareStatements>;

/** The durable job journal of `stoker serve`; see the module comment. Open with {@link Journal.open}. */
export class Journal {
  readonly #db: Database.Database;
  readonly #now: () => number;
  #closed = false;
  readonly #s: Statements;
  /** Jobs by kind and state, counted once at open and kept as jobs change: status and scrapes cost nothing per journaled job. */
  readonly #counts = new Map<string, Record<JobState, number>>();

  /** Whether this open made the journal (none was there): a start on a mistyped --data dir says so. */
  readonly created: boolean;

  /** The high-water mark file: the seq of the last acknowledged job, rewritten after each insert (see openMark). */
  readonly #mark: number | undefined;
  #markDirty = false;
  readonly #markTimer: NodeJS.Timeout;
  /** The group commit in progress: its count changes and its highest job seq, applied once it commits. */
  #group: { counts: [string, JobState, number][]; seq: number } | null = null;
  /** journal.maxBytes where set (the database file's cap: its write-ahead log comes on top). */
  readonly #maxBytes: number | undefined;
  /** Writes refused because the journal was full, since it was opened (for the operator: a metric, a log line). */
  fullRefusals = 0;
  /** Whether the latest write was refused for want of room (a new job written clears it), or because the journal could not be written. */
  full = false;
  /**
   * Why the journal cannot be written, where a write failed for another reason than room: its disk
   * failed or was remounted read-only, its files were made read-only (SQLITE_IOERR, SQLITE_READONLY).
   * Taken as a full journal is — submissions refused (507), ends kept in memory, /readyz not ready —
   * until a write goes through again: a start's write threw out of a timer and the server died,
   * after answering 500s with /readyz ready and nothing said (a container deployer's trial).
   */
  #unwritable: string | undefined;
  /**
   * journal.maxBytes in pages, where set: the database's page limit while a new job is written
   * (SQLite's max_page_count). The starts, outputs and ends of jobs already accepted are written
   * past it: capped too, an end that did not fit waited for room that only the purge of ended jobs
   * makes — with none to purge, accepted jobs stayed running for good (a container deployer's trial).
   */
  readonly #capPages: number | undefined;
  /** The page limit set now (the cap, or none). */
  #pageLimit = NO_PAGE_LIMIT;
  /** The database file's inode when it was opened: another there, or none, and the journal is gone (see checkFile). */
  readonly #ino: number;
  /** Why the journal's file is not the one open any more (removed, replaced), or undefined. */
  #gone: string | undefined;
  /** The bytes of the new job last refused for want of room (its input and its row): what checkRoom needs back. */
  #refusedBytes = 0;
  /** The next turn of the sweep of dead blobs (see #sweep), when one is due. */
  #sweepTimer: { cancel(): void } | undefined;

  private constructor(db: Database.Database, now: () => number, mark: number | undefined, maxBytes: number | undefined, created: boolean) {
    this.created = created;
    this.#db = db;
    this.#now = now;
    this.#maxBytes = maxBytes;
    this.#ino = statSync(db.name).ino;
    this.#capPages = maxBytes === undefined ? undefined : Math.max(1, Math.floor(maxBytes / (db.pragma('page_size', { simple: true }) as number)));
    this.#s = prepareStatements(db);
    this.#mark = mark;
    // The mark is written on every insert (page cache: a kill -9 keeps it) and synced once a second.
    this.#markTimer = setInterval(() => this.#syncMark(), 1000).unref();
    for (const r of this.#s.countsByKind.all()) this.#count(r.kind, r.state, r.n);
    this.#s.killOrphans.run();
    if (this.#s.deadBlob.get() !== undefined) this.#scheduleSweep();
  }

  /** The sweep's next turn: now (the next turn of the event loop), or after `ms`. */
  #scheduleSweep(ms = 0): void {
    if (this.#closed || this.#sweepTimer) return;
    if (ms > 0) {
      const t = setTimeout(() => this.#sweep(), ms).unref();
      this.#sweepTimer = { cancel: () => clearTimeout(t) };
    } else {
      const t = setImmediate(() => this.#sweep()).unref();
      this.#sweepTimer = { cancel: () => clearImmediate(t) };
    }
  }

  /**
   * Deletes the pieces of dead blobs (those no row refers to any more: a job's end dropped its
   * outputs, a purge its result), SWEEP_CHUNKS pieces a turn — deleted in one go, a large result's
   * pages held the event loop as its writing did — then the blob; on until none is left. A sweep
   * that fails (a full disk) tries again a second later; one cut short by a stop goes on at the next open.
   */
  #sweep(): void {
    this.#sweepTimer = undefined;
    if (this.#closed) return;
    const s = this.#s;
    let more: boolean;
    try {
      more = this.#write('the removal of large bytes no job needs', this.#db.transaction(() => {
        const blob = s.deadBlob.get();
        if (blob === undefined) return false;
        if (s.sweepChunks.run(blob, blob, SWEEP_CHUNKS).changes < SWEEP_CHUNKS) s.dropBlob.run(blob);
        return true;
      }));
    } catch {
      this.#scheduleSweep(1000);
      return;
    }
    if (more) this.#scheduleSweep();
  }

  #syncMark(): void {
    if (!this.#markDirty || this.#mark === undefined) return;
    this.#markDirty = false;
    try {
      fsyncSync(this.#mark);
    } catch {
      // A failing disk shows in the journal's own writes; the mark is a check, not the record.
    }
  }

  /** A committed change of the counts (inside a group: once the group commits). */
  #change(kind: string, state: JobState, n: number): void {
    if (this.#group) this.#group.counts.push([kind, state, n]);
    else this.#count(kind, state, n);
  }

  #count(kind: string, state: JobState, n: number): void {
    let c = this.#counts.get(kind);
    if (!c) this.#counts.set(kind, (c = { queued: 0, running: 0, done: 0, failed: 0, cancelled: 0 }));
    c[state] += n;
  }

  /**
   * Opens (creating it if need be) the journal `stoker.db` in `dir`, creating `dir` too.
   * @throws {JournalError} `E_JOURNAL_LOCKED` when another connection holds the dir,
   * `E_JOURNAL_VERSION` when the file has a newer schema, `E_JOURNAL_DIR` when the dir cannot be
   * used (a file in the way, read-only, no permission), `E_JOURNAL_OPEN` when the file cannot (not a database, …).
   */
  static open(dir: string, options: JournalOptions = {}): Journal {
    const path = join(dir, 'stoker.db');
    let db: Database.Database | undefined;
    let mark: number | undefined;
    try {
      makeDirs(dir);
    } catch (err) {
      // (A file at the path, or on the way to it: EEXIST, ENOTDIR. A folder it would be made in that
      // cannot be written: on a read-only file system recursive mkdir says ENOENT, which misleads.)
      const above = nearestExisting(dir);
      const unwritable = above === undefined ? undefined : writeError(above);
      throw new JournalError('E_JOURNAL_DIR', `cannot create the data dir ${dir}: ${unwritable && above !== undefined ? `${above}, where it would be made, cannot be written (${unwritable})` : dirProblem(err)}${GIVE_DIR}`, { cause: err });
    }
    try {
      checkWal(path);
      // An existing file is checked on a read-only connection first: refused, it is left as it was.
      // (Checked on the connection that would write it, a torn copy — its WAL from later than its
      // file — was refused as damaged after the close had checkpointed the WAL into the file and
      // deleted it: the advice to keep a copy came after the copy was changed.)
      const checked = existsSync(path) && precheck(path);
      const conn = new Database(path, { timeout: 0 });
      db = conn;
      conn.pragma('locking_mode = EXCLUSIVE');
      conn.pragma('journal_mode = WAL');
      conn.pragma('synchronous = FULL');
      // The WAL back to at most 8 MiB once checkpointed: a purge of 147,000 ended jobs grew it to
      // 43 MB, and it stayed so (SQLite reuses a WAL file, it does not shrink it).
      conn.pragma(`journal_size_limit = ${WAL_LIMIT_BYTES}`);
      conn.exec('BEGIN IMMEDIATE; COMMIT'); // takes the exclusive lock now, held until close
      const version = conn.pragma('user_version', { simple: true }) as number;
      if (version > SCHEMA_VERSION) {
        throw new JournalError('E_JOURNAL_VERSION', `journal ${path} has schema version ${version}, newer than this stoker's ${SCHEMA_VERSION}: upgrade stoker or choose another --data dir`);
      }
      if (version < SCHEMA_VERSION) {
        conn.transaction(() => {
          if (version === 0) conn.exec(SCHEMA);
          const columns = (table: string) => new Set((conn.pragma(`table_info(${table})`) as { name: string }[]).map((c) => c.name));
          const jobColumns = columns('jobs');
          for (const c of ['sent_hash', 'module_hash']) if (!jobColumns.has(c)) conn.exec(`ALTER TABLE jobs ADD COLUMN ${c} TEXT`);
          conn.exec(BLOB_TABLES);
          for (const [table, c] of BLOB_COLUMNS) if (!columns(table).has(c)) conn.exec(`ALTER TABLE ${table} ADD COLUMN ${c} INTEGER`);
          conn.pragma(`user_version = ${SCHEMA_VERSION}`);
        })();
      }
      if (!checked) checkIntegrity(conn, path);
      mark = openMark(path, conn);
      return new Journal(conn, options.now ?? Date.now, mark, options.maxBytes, version === 0);
    } catch (err) {
      db?.close();
      if (mark !== undefined) closeSync(mark);
      if (err instanceof JournalError) throw err;
      // (SQLite's native module not built — an install with --ignore-scripts skips it — or built for
      // another Node: it read "check the path … or move the file away", which would drop the jobs.)
      const text = String(err);
      if (/Could not locate the bindings file|NODE_MODULE_VERSION|better_sqlite3\.node/.test(text)) {
        throw new JournalError('E_JOURNAL_OPEN', `cannot open the journal ${path}: SQLite's native module (better-sqlite3) is not built for this Node ${process.version} (${text.split('\n')[0] as string}) — an install with --ignore-scripts skips its build: run \`npm rebuild better-sqlite3\` where stoker is installed, then start again; the data dir and its jobs are untouched`, { cause: err });
      }
      const code = err instanceof Error && 'code' in err ? err.code : undefined;
      if (typeof code === 'string' && (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED'))) {
        throw new JournalError('E_JOURNAL_LOCKED', `data dir ${dir} is in use by another stoker serve: stop it or choose another --data dir`, { cause: err });
      }
      const unwritable = writeError(dir);
      if (unwritable) throw new JournalError('E_JOURNAL_DIR', `the data dir ${dir} cannot be written (${unwritable})${GIVE_DIR}`, { cause: err });
      // (A file of the journal this user cannot write — another user's, made read-only — read "disk I/O error … move the file away", which would drop its jobs.)
      const locked = [path, `${path}-wal`, `${path}-shm`, `${path}.mark`].find((f) => existsSync(f) && writeError(f) !== undefined);
      if (locked) throw new JournalError('E_JOURNAL_DIR', `the journal's file ${locked} cannot be written (${writeError(locked) as string}): give it back to the user the server runs as (chown; its -wal, -shm and .mark files too), or make it writable (chmod u+w, chattr -i) — not moved away: it holds the jobs`, { cause: err });
      // (A full disk read "disk I/O error … move the file away", which would drop its jobs: SQLite needs a little room to open it.)
      const free = freeBytes(dir);
      if (free !== undefined && free < ROOM_DISK_BYTES) throw new JournalError('E_JOURNAL_FULL', `cannot open the journal ${path} (${String(err)}): the disk of the data dir ${dir} has ${free} bytes free, and opening the journal needs a little room (its -wal and -shm files; 1 MiB is plenty) — free some space on it, then start again; the journal and its jobs are intact: do not move them away`, { cause: err });
      throw new JournalError('E_JOURNAL_OPEN', `cannot open the journal ${path} (${String(err)}): ${/malformed|not a database|corrupt/i.test(String(err)) ? `the file is damaged; keep a copy of the data dir ${dir}, then start afresh by moving ${path} and its ${path}.mark, -wal and -shm files away (accepting the loss of the jobs it held)` : 'check the path and its permissions, or move the file (with its .mark, -wal and -shm files) away to start afresh'}`, { cause: err });
    }
  }

  /** The canonical hash of a job body: sha256 hex of its JSON with object keys sorted recursively. */
  static hash(body: JournalJobBody): string {
    const { kind, priority, partitions, input, deadline } = body;
    const json = toJson({ kind, priority, partitions, input: input ?? null, deadline: deadline ?? null }, 'the job body');
    const plain = JSON.parse(json) as unknown; // as stored: toJSON applied, undefined members dropped
    return createHash('sha256').update(canonical(plain)).digest('hex');
  }

  /**
   * The hash of a submission's body as the client sent it (its id left out; object keys sorted
   * recursively), or `undefined` for one that is not a JSON object. {@link hash} is of the body as
   * checked — the kind's defaults filled in — which a kind's new version changes: a retry of the
   * identical body read as another one (409), or failed the new schema (400).
   */
  static sentHash(raw: unknown): string | undefined {
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return undefined;
    const body: Record<string, unknown> = { ...raw };
    delete body['id'];
    const plain = JSON.parse(toJson(body, 'the job body')) as unknown; // as Journal.hash reads a body
    return createHash('sha256').update(canonical(plain)).digest('hex');
  }

  /** The database file's bytes holding data, and free (a purge frees pages; the file does not shrink). Its WAL not counted. */
  sizes(): { used: number; free: number } {
    if (!this.#db.open) return { used: 0, free: 0 }; // (a scrape as the server closes)
    const page = this.#db.pragma('page_size', { simple: true }) as number;
    const free = this.#db.pragma('freelist_count', { simple: true }) as number;
    return { used: this.#pagesInUse() * page, free: free * page };
  }

  /** Pages holding data (the file's pages less the free ones). */
  #pagesInUse(): number {
    return (this.#db.pragma('page_count', { simple: true }) as number) - (this.#db.pragma('freelist_count', { simple: true }) as number);
  }

  /** Runs a write; a full disk (or maxBytes) becomes `E_JOURNAL_FULL`, naming what was not written. */
  #write<T>(what: string, fn: () => T, newJob = false, bytes = 0): T {
    // (Written to a file no longer there, a job accepted would be lost at the next start. And past
    // the cap in pages in use, a new job is refused though free pages would hold it: the ends
    // written past the cap free their partitions' outputs, and new jobs kept fitting into those
    // while the results grew the file to 12 × the cap.)
    // (Looked at before each new job, not only once a second: jobs acknowledged in the second after
    // the data dir was deleted went to a file no longer there, and were lost at the restart.)
    if (newJob && this.#gone === undefined) this.checkFile();
    if (newJob && (this.#gone !== undefined || (this.#capPages !== undefined && this.#pagesInUse() >= this.#capPages))) {
      this.#refusedBytes = bytes;
      this.fullRefusals++;
      this.full = true;
      throw new JournalError('E_JOURNAL_FULL', `${this.fullReason()}: ${what} was not written — ${this.fullFix()}`);
    }
    const limit = newJob ? (this.#capPages ?? NO_PAGE_LIMIT) : NO_PAGE_LIMIT;
    if (limit !== this.#pageLimit) {
      this.#db.pragma(`max_page_count = ${limit}`);
      this.#pageLimit = limit;
    }
    try {
      const done = fn();
      // (Only a new job says there is room: an update that needs no new page, or a purge with nothing to purge, is no news.
      // Any write that lands says the journal can be written: a later full disk was said as the old I/O error.)
      if (newJob) this.full = false;
      this.#unwritable = undefined;
      return done;
    } catch (e) {
      const code = (e as { code?: unknown }).code;
      const unwritable = typeof code === 'string' && /^SQLITE_(IOERR|READONLY|CANTOPEN|PERM)/.test(code);
      if (code === 'SQLITE_FULL' || unwritable) {
        if (newJob) this.#refusedBytes = bytes;
        this.fullRefusals++;
        this.full = true;
        this.#unwritable = unwritable ? `${(e as Error).message} (${code})` : undefined;
        throw new JournalError('E_JOURNAL_FULL', `${this.fullReason()}: ${what} was not written — ${this.fullFix()}`, { cause: e });
      }
      throw e;
    }
  }

  /**
   * After a write was refused for want of room: whether a new job would fit again — free pages
   * under journal.maxBytes, and free space on the data dir's disk (ROOM_PAGES, ROOM_DISK_BYTES) —
   * and if so, not full any more. Only a new job written said so before: a server that /readyz
   * showed not ready got no submission from its load balancer, and stayed not ready once room was
   * back (a user trial).
   */
  checkRoom(): boolean {
    this.checkFile();
    if (this.#gone !== undefined) return false;
    if (!this.full) return true;
    try {
      // (A journal that could not be written is tried with a write of its own: its schema version, unchanged.)
      if (this.#unwritable !== undefined) {
        this.#db.pragma(`user_version = ${Number(this.#db.pragma('user_version', { simple: true }))}`);
        this.#unwritable = undefined;
      }
      if (this.#maxBytes !== undefined) {
        const page = this.#db.pragma('page_size', { simple: true }) as number;
        const used = this.#pagesInUse();
        // Room for the job last refused, not a few pages: a 20 KB input read ready again, and was
        // refused again, every few seconds (/readyz and the log flapping while every submit got 507).
        if ((used + Math.max(ROOM_PAGES, Math.ceil(this.#refusedBytes / page) + 1)) * page > this.#maxBytes) return false;
      }
      // (Not known: no room said.)
      if (!((freeBytes(dirname(this.#db.name)) ?? 0) >= ROOM_DISK_BYTES)) return false;
    } catch {
      return false;
    }
    this.full = false;
    return true;
  }

  /**
   * Whether the journal's file is still the one open: removed or replaced under the server (its
   * data dir deleted), the journal is gone for good — new jobs are refused as on a full journal
   * (they went to a file no longer there, and were lost at the next start), not ready, said.
   * Returns whether this look found it gone.
   */
  checkFile(): boolean {
    if (this.#gone !== undefined) return false;
    let ino: number | undefined;
    try {
      ino = statSync(this.#db.name).ino;
    } catch {
      ino = undefined;
    }
    if (ino === this.#ino) return false;
    this.#gone = ino === undefined ? `its file ${this.#db.name} was removed or moved away` : `its file ${this.#db.name} was replaced by another`;
    this.full = true;
    return true;
  }

  /** What makes room, for a full journal. */
  fullFix(): string {
    if (this.#gone !== undefined) return 'restart the server: it takes the file now there, or makes a new journal (put the file back, or a copy of it, before the restart to keep the jobs it held)';
    if (this.#unwritable !== undefined) return `check the data dir's disk, its mount and the permissions of its files (${basename(this.#db.name)} and its -wal, -shm and .mark files): writes resume by themselves once they go through`;
    return this.#maxBytes === undefined ? 'free space on that disk' : 'raise journal.maxBytes, or let finished jobs be purged sooner (server.resultTtlS), or free space on the disk';
  }

  /** Why the journal is full: its cap (journal.maxBytes), or the disk of its data dir (either may be it where a cap is set). */
  fullReason(): string {
    if (this.#gone !== undefined) return `the journal is gone: ${this.#gone} while the server ran`;
    if (this.#unwritable !== undefined) return `the journal cannot be written: ${this.#unwritable} — its disk failed or was remounted read-only, or its files were made read-only`;
    return this.#maxBytes === undefined ? 'the disk of the data dir is full' : `the journal is full: it reached journal.maxBytes (${this.#maxBytes} bytes, its write-ahead log not counted), or its disk is full`;
  }

  /**
   * Group commit: runs the writes `fn` makes in one transaction, so that they cost one sync of the
   * disk together instead of one each. Each write inside is a savepoint: one that throws, caught
   * by `fn`, rolls back only itself. Counts and the high-water mark change once the group has
   * committed; when it throws, nothing of it was written (nor counted in fullRefusals: its writes
   * are made again alone, GroupCommit's fallback). A group inside a group is part of it.
   * @throws {JournalError} `E_JOURNAL_FULL` (then nothing of the group was written), or what `fn` throws.
   */
  group<T>(fn: () => T): T {
    if (this.#group) return fn();
    this.#checkOpen();
    const g: { counts: [string, JobState, number][]; seq: number } = { counts: [], seq: 0 };
    this.#group = g;
    let result: T;
    // (A group that rolls back is written again write by write, where each refusal is counted: the
    // refusal that rolled it back counted twice — one 507, two journal writes refused.)
    const refused = this.fullRefusals;
    try {
      result = this.#write('a group of writes', this.#db.transaction(fn));
    } catch (e) {
      this.fullRefusals = refused;
      throw e;
    } finally {
      this.#group = null;
    }
    for (const [kind, state, n] of g.counts) this.#count(kind, state, n);
    if (g.seq > 0) {
      writeMark(this.#mark, g.seq);
      this.#markDirty = true;
    }
    return result;
  }

  /** The statements, after checking that the journal is open. */
  private get stmts(): Statements {
    this.#checkOpen();
    return this.#s;
  }

  #checkOpen(): void {
    if (this.#closed) throw new JournalError('E_JOURNAL_CLOSED', 'the journal is closed: open it again with Journal.open');
  }

  /** The row of job `id`, or `E_JOURNAL_UNKNOWN_JOB`. */
  private row(id: string): JobRow {
    const row = this.stmts.get.get(id);
    if (!row) throw new JournalError('E_JOURNAL_UNKNOWN_JOB', `no job has id ${JSON.stringify(id)}: check the id`);
    return row;
  }

  /**
   * Records a submitted job as `queued`; durable when this returns. Idempotent: a job with the
   * same id and the same body returns the existing job (in whatever state) with `created: false`.
   * @throws {JournalError} `E_JOURNAL_CONFLICT` when the id exists with a different body,
   * `E_JOURNAL_BAD_INPUT` when the job is malformed.
   */
  insert(job: JournalJobInput): { job: JournalJob; created: boolean } {
    const s = this.stmts;
    const { id, kind, priority, partitions, deadline } = job;
    if (typeof id !== 'string' || id === '' || typeof kind !== 'string' || !PRIORITIES.has(priority)
      || !Number.isSafeInteger(partitions) || partitions < 1 || (deadline != null && !Number.isFinite(deadline))) {
      throw new JournalError('E_JOURNAL_BAD_INPUT', `job ${JSON.stringify(id)} is malformed: it needs a non-empty id, a kind, a priority of critical|high|normal|low, a positive integer of partitions and a deadline that is epoch ms or null`);
    }
    const bodyHash = Journal.hash(job);
    const input = toJson(job.input, 'the job input');
    const result = this.#write(`job ${JSON.stringify(job.id)}`, this.#db.transaction(() => {
      const existing = s.get.get(job.id);
      if (existing) {
        if (existing.body_hash !== bodyHash && !(job.sentHash && existing.sent_hash === job.sentHash)) {
          throw new JournalError('E_JOURNAL_CONFLICT', `job ${JSON.stringify(job.id)} exists with a different body: resubmit the same body to retry, or use a new id`);
        }
        return { job: fromRow(existing), created: false, seq: 0 };
      }
      const { lastInsertRowid } = s.insert.run({
        id: job.id, kind: job.kind, priority: job.priority, partitions: job.partitions,
        input, deadline: job.deadline ?? null, bodyHash, sentHash: job.sentHash ?? null, moduleHash: job.moduleHash ?? null, now: this.#now(),
      });
      return { job: fromRow(this.row(job.id)), created: true, seq: Number(lastInsertRowid) };
    }), true, Buffer.byteLength(input) + JOB_ROW_BYTES);
    // Committed (a commit that fails throws above, and nothing is counted).
    if (result.created) {
      this.#change(job.kind, 'queued', 1);
      if (this.#group) this.#group.seq = Math.max(this.#group.seq, result.seq);
      else {
        writeMark(this.#mark, result.seq);
        this.#markDirty = true;
      }
    }
    return { job: result.job, created: result.created };
  }

  /** Marks a `queued` job `running`, stamping `startedAt` (`at`, epoch ms; default now); a no-op in any other state. */
  markRunning(id: string, at = this.#now()): void {
    const { kind } = this.row(id);
    if (this.#write(`the start of job ${JSON.stringify(id)}`, () => this.stmts.markRunning.run(at, id)).changes === 1) {
      this.#change(kind, 'queued', -1);
      this.#change(kind, 'running', 1);
    }
  }

  /**
   * Records (or replaces) the output of one finished partition of an unfinished job; idempotent.
   * Returns `false`, recording nothing, when the job has already ended (e.g. it was cancelled
   * while the partition ran).
   * @throws {JournalError} `E_JOURNAL_UNKNOWN_JOB`, or `E_JOURNAL_BAD_INPUT` when `partition` is
   * not in `0 … partitions−1` or `output` is not JSON-serialisable.
   */
  recordPartition(id: string, partition: number, output: unknown): boolean {
    return this.recordStored(id, partition, Journal.storedOutput(id, partition, output));
  }

  /**
   * A partition's output as the journal stores it (see {@link recordStored}): a caller that must
   * know at once whether the output can be stored, before the write itself.
   * @throws {JournalError} `E_JOURNAL_BAD_INPUT` when `output` is not JSON-serialisable.
   */
  static storedOutput(id: string, partition: number, output: unknown): string | Buffer {
    return toStored(output, `the output of partition ${partition} of job ${JSON.stringify(id)}`);
  }

  /**
   * {@link recordPartition} with the output already in its stored form ({@link Journal.storedOutput}),
   * or already journaled in pieces: `blob` ({@link storeBlob}; `json` is then ignored). A blob that
   * is not recorded (the job has ended, the write failed) is dropped.
   */
  recordStored(id: string, partition: number, json: string | Buffer, blob: number | null = null): boolean {
    const s = this.stmts;
    const stored = blob === null ? json : NO_BYTES;
    const recorded = this.#write(`the output of partition ${partition} of job ${JSON.stringify(id)}`, this.#db.transaction(() => {
      const row = this.row(id);
      if (!Number.isSafeInteger(partition) || partition < 0 || partition >= row.partitions) {
        throw new JournalError('E_JOURNAL_BAD_INPUT', `partition ${partition} of job ${JSON.stringify(id)} is out of range: it has partitions 0…${row.partitions - 1}`);
      }
      if (row.state !== 'queued' && row.state !== 'running') return false;
      if (s.addPartition.run(id, partition, stored, blob).changes === 1) s.countPartition.run(id);
      else {
        if (s.killOutputBlob.run(id, partition).changes > 0) this.#scheduleSweep();
        s.setPartition.run(stored, blob, id, partition);
      }
      return true;
    }));
    if (!recorded && blob !== null) this.dropBlob(blob);
    return recorded;
  }

  /**
   * Journals large bytes (over BLOB_MIN_BYTES) in pieces of BLOB_CHUNK_BYTES, one piece per turn of
   * the event loop; resolves with their blob, for {@link recordStored} or {@link finish} to refer
   * to. Until a row refers to it, a blob is the writer's: one that no row refers to when the
   * journal opens (a stop cut its writing short) is dropped. `what` names the bytes in errors.
   * @throws {JournalError} `E_JOURNAL_FULL`, `E_JOURNAL_CLOSED` (a stop meanwhile): nothing is kept of it.
   */
  async storeBlob(what: string, bytes: Uint8Array): Promise<number> {
    await nextTurn();
    const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const blob = Number(this.#write(what, () => this.stmts.newBlob.run(buf.length)).lastInsertRowid);
    try {
      for (let seq = 0, at = 0; at < buf.length; seq++, at += BLOB_CHUNK_BYTES) {
        if (seq > 0) await nextTurn();
        const piece = buf.subarray(at, at + BLOB_CHUNK_BYTES);
        this.#write(what, () => this.stmts.addChunk.run(blob, seq, piece));
      }
    } catch (e) {
      if (!this.#closed) ignoreFull(() => this.dropBlob(blob));
      throw e;
    }
    return blob;
  }

  /**
   * A blob's bytes ({@link storeBlob}), read a piece per turn of the event loop.
   * @throws {JournalError} `E_JOURNAL_UNKNOWN_JOB` where they are gone (their job was purged or removed meanwhile).
   */
  async readBlob(blob: number): Promise<Uint8Array> {
    const out = Buffer.allocUnsafe(this.#blobBytes(blob));
    let at = 0;
    for await (const piece of this.blobPieces(blob)) at += piece.copy(out, at);
    return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
  }

  /**
   * A blob's pieces ({@link storeBlob}) one by one, each read in its own turn of the event loop:
   * what sends it holds one piece at a time (each a multiple of 3 bytes but the last: their base64
   * joins as the whole's).
   * @throws {JournalError} `E_JOURNAL_UNKNOWN_JOB` where they are gone (their job was purged or removed meanwhile).
   */
  async *blobPieces(blob: number): AsyncGenerator<Buffer> {
    const bytes = this.#blobBytes(blob);
    for (let seq = 0, at = 0; at < bytes; seq++) {
      if (seq > 0) {
        await nextTurn();
        this.#blobBytes(blob);
      }
      const piece = this.#piece(blob, seq, bytes - at);
      at += piece.length;
      yield piece;
    }
  }

  /** A blob's bytes at once, holding the event loop while it reads them (a resume's outputs, as the server starts). */
  readBlobNow(blob: number): Uint8Array {
    const bytes = this.#blobBytes(blob);
    const out = Buffer.allocUnsafe(bytes);
    for (let seq = 0, at = 0; at < bytes; seq++) at += this.#piece(blob, seq, bytes - at).copy(out, at);
    return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
  }

  /** A live blob's size; `E_JOURNAL_UNKNOWN_JOB` where it is gone. */
  #blobBytes(blob: number): number {
    const bytes = this.stmts.blobBytes.get(blob);
    if (bytes === undefined) throw blobGone(blob);
    return bytes;
  }

  /** Piece `seq` of a blob, with `left` of its bytes still to come: `E_JOURNAL_DAMAGED` where it is missing, empty or longer. */
  #piece(blob: number, seq: number, left: number): Buffer {
    const piece = this.stmts.chunk.get(blob, seq);
    if (piece === undefined || piece.length === 0 || piece.length > left) {
      throw new JournalError('E_JOURNAL_DAMAGED', `the journal's large bytes ${blob} are damaged: piece ${seq} is ${piece === undefined ? 'missing' : `${piece.length} bytes where ${left} were left`}`);
    }
    return piece;
  }

  /** Drops a blob no row will refer to (its pieces are deleted by the sweep). */
  dropBlob(blob: number): void {
    this.#write(`the removal of large bytes ${blob}`, () => this.stmts.killBlob.run(blob));
    this.#scheduleSweep();
  }

  /** The recorded partition outputs of a job, by partition index (empty once it has ended). */
  partitionOutputs(id: string): Map<number, unknown> {
    return new Map(this.stmts.outputs.all(id).map((r) => [r.partition, r.output_blob === null ? fromStored(r.output) : this.readBlobNow(r.output_blob)]));
  }

  /**
   * Ends an unfinished job and deletes its partition outputs; returns `true`. A job that has
   * already ended is never changed again: returns `false`.
   * @throws {JournalError} `E_JOURNAL_UNKNOWN_JOB`, or `E_JOURNAL_BAD_INPUT` for a result JSON
   * cannot hold.
   */
  finish(id: string, outcome: JournalOutcome): boolean {
    const s = this.stmts;
    const blob = outcome.state === 'done' ? (outcome.blob ?? null) : null;
    const params = outcome.state === 'done'
      ? { id, state: 'done', result: blob === null ? toStored(outcome.result, `the result of job ${JSON.stringify(id)}`) : NO_BYTES, blob, code: null, reason: null }
      : { id, state: outcome.state, result: 'null', blob: null, code: outcome.code, reason: outcome.reason };
    const ended = this.#write(`the end of job ${JSON.stringify(id)}`, this.#db.transaction(() => {
      const row = this.row(id);
      if (s.finish.run({ ...params, now: this.#now() }).changes === 0) return undefined;
      if (s.killOutputBlobs.run(id).changes > 0) this.#scheduleSweep();
      s.dropOutputs.run(id);
      return row;
    }));
    if (!ended) {
      if (blob !== null) this.dropBlob(blob);
      return false;
    }
    this.#change(ended.kind, ended.state, -1);
    this.#change(ended.kind, outcome.state, 1);
    return true;
  }

  /** Counts one more resume of each of these unfinished jobs after a restart (a no-op for an ended one), in one transaction. */
  markResumed(which: string | readonly string[]): void {
    const ids = typeof which === 'string' ? [which] : which;
    if (ids.length === 0) return;
    for (const id of ids) this.row(id);
    // (One transaction, one sync of the disk: one each held a start with 20,000 jobs to resume for
    // 27 s before it listened — a liveness probe would have killed it.)
    const mark = this.#db.transaction(() => {
      for (const id of ids) this.stmts.resumed.run(id);
    });
    this.#write(ids.length === 1 ? `the resume of job ${JSON.stringify(ids[0])}` : `the resume of ${ids.length} jobs`, mark);
  }

  /** The job `id`, or `undefined`. */
  get(id: string): JournalJob | undefined {
    const row = this.stmts.get.get(id);
    return row && fromRow(row);
  }

  /** The job `id` for a view, or `undefined`: as {@link get}, but a result over VIEW_RESULT_MAX_BYTES is not read (`result` undefined, `resultBytes` its size). */
  view(id: string): JournalJob | undefined {
    const row = this.stmts.view.get(id);
    return row && fromRow(row);
  }

  /** The `queued` and `running` jobs, in submission order: what a restarted daemon resumes. */
  unfinished(): JournalJob[] {
    return this.stmts.unfinished.all().map(fromRow);
  }

  /**
   * The most recently submitted jobs, newest first: at most `limit` (default 50), only those in
   * one of `states` when given (an empty list matches none), none of the ids in `except` (with
   * `states` only), only those submitted before the job at `beforeSeq` when given (see seqOf). Read for a list's views: a result over LIST_RESULT_MAX_BYTES is not read
   * (`result` undefined, `resultBytes` its size).
   * @throws {JournalError} `E_JOURNAL_BAD_INPUT` when `limit` is not a whole number ≥ 0 or a state is unknown.
   */
  list(options: { limit?: number; states?: readonly JobState[]; except?: readonly string[]; beforeSeq?: number } = {}): JournalJob[] {
    const s = this.stmts;
    const limit = options.limit ?? 50;
    if (!Number.isSafeInteger(limit) || limit < 0) throw new JournalError('E_JOURNAL_BAD_INPUT', `limit must be a whole number ≥ 0 (got ${String(limit)})`);
    const before = options.beforeSeq ?? Number.MAX_SAFE_INTEGER;
    const { states } = options;
    if (states === undefined) return s.recent.all(before, limit).map(fromRow);
    const unknown = states.filter((st) => !JOB_STATES.has(st));
    if (unknown.length > 0) throw new JournalError('E_JOURNAL_BAD_INPUT', `unknown job state ${JSON.stringify(unknown[0])}: use queued, running, done, failed or cancelled`);
    const wanted = JSON.stringify([...new Set(states)]);
    const except = options.except ?? [];
    return (except.length === 0 ? s.recentIn.all(wanted, before, limit) : s.recentInExcept.all(wanted, JSON.stringify(except), before, limit)).map(fromRow);
  }

  /**
   * Writes a consistent copy of the journal to `file` (SQLite's online backup, page by page between
   * other work: the server's exclusive lock kept every other reader out, `sqlite3 .backup`
   * included). The copy is a journal to start a server on, as its data dir's `stoker.db`.
   * @throws {JournalError} `E_JOURNAL_FULL` where the disk has no room for the copy (it is removed).
   */
  async backup(file: string): Promise<void> {
    this.#checkOpen();
    try {
      await this.#db.backup(file);
    } catch (e) {
      rmSync(file, { force: true });
      const code = (e as { code?: unknown }).code;
      if (code === 'SQLITE_FULL' || code === 'ENOSPC') throw new JournalError('E_JOURNAL_FULL', `the copy of the journal did not fit on the disk of ${dirname(file)}: free space there (it needs about the journal's size)`, { cause: e });
      throw e;
    }
  }

  /** A job's place in submission order (what a list pages by), or undefined for one it does not hold. */
  seqOf(id: string): number | undefined {
    return this.stmts.seqOf.get(id)?.seq;
  }

  /** How many jobs are in each state (kept in memory: no query). */
  counts(): Record<JobState, number> {
    this.#checkOpen();
    const counts: Record<JobState, number> = { queued: 0, running: 0, done: 0, failed: 0, cancelled: 0 };
    for (const c of this.#counts.values()) for (const st of STATE_LIST) counts[st] += c[st];
    return counts;
  }

  /** Jobs by kind and state, every state of every kind ever journaled (0 included), kinds in name order (kept in memory: no query). */
  countsByKind(): { kind: string; state: JobState; count: number }[] {
    this.#checkOpen();
    return [...this.#counts.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).flatMap(([kind, c]) => STATE_LIST.map((state) => ({ kind, state, count: c[state] })));
  }

  /** How many jobs are unfinished (`queued` + `running`). */
  pending(): number {
    const c = this.counts();
    return c.queued + c.running;
  }

  /** Deletes the ended jobs with `finishedAt < now − olderThanMs`; returns how many. */
  purgeFinished(olderThanMs: number): number {
    const s = this.stmts;
    const before = this.#now() - olderThanMs;
    const purged = this.#write('the purge of ended jobs', this.#db.transaction(() => {
      const gone = s.purgeCounts.all(before);
      if (s.killPurgedBlobs.run(before).changes > 0) this.#scheduleSweep();
      s.purge.run(before);
      return gone;
    }));
    for (const r of purged) this.#change(r.kind, r.state, -r.n);
    return purged.reduce((a, r) => a + r.n, 0);
  }

  /** Removes a job (in any state) and its partition outputs, as if it had never been journaled; false when unknown. */
  forget(id: string): boolean {
    const s = this.stmts;
    const row = this.#write(`the removal of job ${JSON.stringify(id)}`, this.#db.transaction(() => {
      const r = s.get.get(id);
      if (!r) return undefined;
      if (s.killOutputBlobs.run(id).changes + s.killResultBlob.run(id).changes > 0) this.#scheduleSweep();
      s.dropOutputs.run(id);
      s.forget.run(id);
      return r;
    }));
    if (!row) return false;
    this.#change(row.kind, row.state, -1);
    return true;
  }

  /** Closes the file and releases the data dir; idempotent. Any later call throws `E_JOURNAL_CLOSED`. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#markTimer);
    this.#sweepTimer?.cancel();
    this.#sweepTimer = undefined;
    this.#syncMark();
    if (this.#mark !== undefined) closeSync(this.#mark);
    this.#db.close();
  }
}

/** The room {@link Journal.checkRoom} asks for before it calls a full journal writable again: free pages under journal.maxBytes, and bytes on the disk (the write-ahead log grows there first). */
const ROOM_PAGES = 4;
/** A job's row beside its input, bytes (its id, hashes, times: a few hundred), for the room a refused job needs back. */
const JOB_ROW_BYTES = 512;
const ROOM_DISK_BYTES = 1024 * 1024;

/** Bytes free on the disk of `dir` to this user (undefined: not known). */
function freeBytes(dir: string): number | undefined {
  try {
    const disk = statfsSync(dir);
    return disk.bavail * disk.bsize;
  } catch {
    return undefined;
  }
}

/** What a checkpointed WAL is cut back to (PRAGMA journal_size_limit). */
const WAL_LIMIT_BYTES = 8 * 1024 * 1024;

/** What a data dir error asks for, and where it is set. */
const GIVE_DIR = ' — give a directory you can write (dataDir in the config, --data, STOKER_DATA_DIR)';

/** A file system error on the data dir, in words. */
function dirProblem(e: unknown): string {
  const code = (e as { code?: string }).code;
  return code === 'EEXIST' || code === 'ENOTDIR' ? 'a file, not a directory, is in the way' : code === 'EROFS' ? 'the file system is read-only' : code === 'EACCES' || code === 'EPERM' ? 'no permission' : String(e);
}

/**
 * Creates `dir` and the folders above it that are missing, one level at a time: Node's recursive
 * mkdirSync looped for ever at 100 % CPU under /proc (ENOENT, then EEXIST on /proc: `--data
 * /proc/x` hung with no word); made one by one, the level that cannot be made says why.
 */
function makeDirs(dir: string): void {
  const missing: string[] = [];
  for (let d = resolve(dir); !existsSync(d); d = dirname(d)) {
    missing.push(d);
    if (dirname(d) === d) break;
  }
  const own = resolve(dir);
  for (const d of missing.reverse()) {
    try {
      // (The data dir itself readable by its user alone: it holds every job's input and result.)
      mkdirSync(d, d === own ? { mode: 0o700 } : undefined);
    } catch (e) {
      // (Made meanwhile by another process: fine.)
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
  }
  // (A file at the path itself: as mkdir says it.)
  if (!statSync(dir).isDirectory()) throw Object.assign(new Error(`EEXIST: file already exists, mkdir '${dir}'`), { code: 'EEXIST' });
}

/** The nearest folder on the way to `dir` that exists (undefined: none, or a file is in the way). */
function nearestExisting(dir: string): string | undefined {
  for (let d = resolve(dir); ; d = dirname(d)) {
    if (existsSync(d)) return statSync(d).isDirectory() ? d : undefined;
    if (dirname(d) === d) return undefined;
  }
}

/** Why `dir` cannot be written (a read-only file system, no permission), or undefined when it can. */
/**
 * Checks an existing journal file (see checkIntegrity) on a read-only connection, which reads its
 * WAL without checkpointing it into the file or removing it when it closes. Returns true.
 */
function precheck(path: string): true {
  const shm = `${path}-shm`;
  const hadShm = existsSync(shm);
  const ro = new Database(path, { readonly: true, fileMustExist: true, timeout: 0 });
  try {
    // (A newer schema is refused by the open that follows, before anything is written.)
    if ((ro.pragma('user_version', { simple: true }) as number) <= SCHEMA_VERSION) checkIntegrity(ro, path);
  } finally {
    ro.close();
    // The read-only connection made the WAL's shared-memory index, which it may not remove, and
    // the server's own (exclusive: no shared memory) never does: it was left in the data dir at
    // every stop. It holds nothing the WAL does not: SQLite rebuilds it.
    if (!hadShm) rmSync(shm, { force: true });
  }
  return true;
}

/** Pieces of dead blobs deleted in one turn of the sweep (see Journal.#sweep): 6 MiB. */
const SWEEP_CHUNKS = 8;

/** What a row holds where its bytes are in pieces (a blob). */
const NO_BYTES = Buffer.alloc(0);

/** The next turn of the event loop (after the I/O waiting now). */
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

const blobGone = (blob: number) => new JournalError('E_JOURNAL_UNKNOWN_JOB', `the journal's large bytes ${blob} are gone: their job was purged (server.resultTtlS) or removed meanwhile`);

/** SQLite's own largest page limit: none. */
const NO_PAGE_LIMIT = 4294967294;

function writeError(dir: string): string | undefined {
  try {
    accessSync(dir, constants.W_OK);
    return undefined;
  } catch (e) {
    return dirProblem(e);
  }
}
