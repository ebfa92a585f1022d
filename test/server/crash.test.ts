/**
 * The acceptance test: submit 50 jobs, kill -9 the server mid-run, restart it on the same
 * data dir: all 50 finish, each result exactly once, results correct. Here the server is killed
 * twice (kill, restart, kill again, restart), each time while some jobs are done, some running
 * (some of them with part of their partitions recorded) and some still queued.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Journal } from '../../src/server/journal.js';
import { collectEvents, http, metricValue, removeDir, sleepTotal, startServer, tempDataDir, waitUntil, type ServerProcess, type StreamedEvent } from './helpers.js';

const JOBS = 50;
const PARTITIONS = 5;
const idOf = (i: number) => `crash-${String(i).padStart(2, '0')}`;
const seedOf = (i: number) => 1000 + 7 * i;
const bodyOf = (i: number) => ({ id: idOf(i), kind: 'sleep', partitions: PARTITIONS, input: { seed: seedOf(i), prepareMs: 200, deviceMs: 20 } });
const ids = Array.from({ length: JOBS }, (_, i) => idOf(i));

/** What the journal held when the server died (read with the server down). */
interface Snapshot {
  done: Set<string>;
  states: Map<string, string>;
  /** Unfinished jobs: the partitions whose output was recorded. */
  recorded: Map<string, Set<number>>;
}

function snapshot(dir: string): Snapshot {
  const journal = Journal.open(dir);
  try {
    const snap: Snapshot = { done: new Set(), states: new Map(), recorded: new Map() };
    ids.forEach((id, i) => {
      const job = journal.get(id);
      expect(job, `${id} is in the journal`).toBeDefined();
      if (!job) return;
      snap.states.set(id, job.state);
      expect(['queued', 'running', 'done']).toContain(job.state);
      if (job.state === 'done') {
        snap.done.add(id);
        expect(job.result).toEqual({ partitions: PARTITIONS, total: sleepTotal(seedOf(i), PARTITIONS) });
        return;
      }
      const outputs = journal.partitionOutputs(id);
      expect(job.partitionsDone).toBe(outputs.size);
      // Each journaled partition output is the right one.
      for (const [p, out] of outputs) expect(out).toBe(2 * (seedOf(i) * 31 + p));
      snap.recorded.set(id, new Set(outputs.keys()));
    });
    const counts = journal.counts();
    expect(counts.queued + counts.running + counts.done).toBe(JOBS);
    return snap;
  } finally {
    journal.close();
  }
}

const servers: ServerProcess[] = [];
const dir = tempDataDir();

async function start(): Promise<ServerProcess> {
  const s = await startServer(dir);
  servers.push(s);
  return s;
}

afterAll(async () => {
  for (const s of servers) if (s.child.exitCode === null && s.child.signalCode === null) await s.crash();
  removeDir(dir);
});

/** Tracks a server's progress from its event stream. */
function progress(events: StreamedEvent[]) {
  const done = new Set<string>();
  const started = new Set<string>();
  const parts = new Map<string, number>();
  for (const e of events) {
    if (!e.id) continue;
    if (e.type === 'job.done') done.add(e.id);
    if (e.type === 'job.started') started.add(e.id);
    if (e.type === 'job.partition') parts.set(e.id, (parts.get(e.id) ?? 0) + 1);
  }
  const partial = [...parts].filter(([id, n]) => !done.has(id) && n > 0 && n < PARTITIONS).length;
  return { done, started, partial };
}

/** Kills the server with SIGKILL once `ready` holds, after checking GET /v1/status shows done and pending jobs. */
async function crashMidRun(s: ServerProcess, ready: () => boolean): Promise<void> {
  await waitUntil(async () => (ready() ? true : undefined), 30_000, 'the moment to crash', 5);
  const status = await http(s.url, 'GET', '/v1/status');
  expect(status.status).toBe(200);
  expect(status.body.jobs.done).toBeGreaterThan(0);
  expect(status.body.jobs.pending).toBeGreaterThan(0);
  expect(await s.crash()).toBe('SIGKILL');
}

describe('kill -9 mid-run and restart on the same data dir', () => {
  it('finishes all 50 jobs, each exactly once, with correct results, across two crashes', { timeout: 120_000 }, async () => {
    // Run 1: submit all 50, crash with some done, some running (some partly), some queued.
    const s1 = await start();
    const ev1 = await collectEvents(s1.url);
    const submitted = await Promise.all(ids.map((_, i) => http(s1.url, 'POST', '/v1/jobs', bodyOf(i))));
    for (const r of submitted) expect(r.status).toBe(202);
    const submittedAt = new Map(submitted.map((r) => [r.body.id as string, r.body.submittedAt as string]));
    await crashMidRun(s1, () => {
      const p = progress(ev1.events);
      return p.done.size >= 3 && p.partial >= 1 && JOBS - p.started.size >= 3;
    });
    await ev1.close();
    const snap1 = snapshot(dir);
    const states1 = [...snap1.states.values()];
    expect(states1).toContain('done');
    expect(states1).toContain('running');
    expect(states1).toContain('queued');
    expect(snap1.done.size).toBeLessThan(JOBS);

    // Run 2: resumes; its partitions recorded before the crash are kept (not run again).
    const s2 = await start();
    const ev2 = await collectEvents(s2.url);
    for (const [id, rec] of snap1.recorded) {
      const job = await http(s2.url, 'GET', `/v1/jobs/${id}`);
      expect(job.status).toBe(200);
      expect(job.body.resumes).toBe(1);
      expect(job.body.partitionsDone).toBeGreaterThanOrEqual(rec.size);
      expect(job.body.submittedAt).toBe(submittedAt.get(id));
      if (job.body.partitionStates) for (const p of rec) expect(job.body.partitionStates[p]).toBe('done');
    }
    for (const id of snap1.done) expect((await http(s2.url, 'GET', `/v1/jobs/${id}`)).body).toMatchObject({ state: 'done', resumes: 0 });
    const doneAtStart2 = (await http(s2.url, 'GET', '/v1/status')).body.jobs.done as number;
    await crashMidRun(s2, () => progress(ev2.events).done.size >= 3 && doneAtStart2 + progress(ev2.events).done.size <= JOBS - 3);
    await ev2.close();
    const snap2 = snapshot(dir);
    for (const id of snap1.done) expect(snap2.done.has(id), `${id} stays done`).toBe(true);
    for (const [id, rec] of snap1.recorded) {
      const now = snap2.recorded.get(id);
      if (now) for (const p of rec) expect(now.has(p), `${id} partition ${p} stays recorded`).toBe(true);
    }
    expect(snap2.done.size).toBeGreaterThan(snap1.done.size);
    expect(snap2.done.size).toBeLessThan(JOBS);
    // Partitions were recorded before some crash while their job was unfinished: the test saw the case it is about.
    const partial = [...snap1.recorded, ...snap2.recorded].filter(([, rec]) => rec.size > 0 && rec.size < PARTITIONS);
    expect(partial.length).toBeGreaterThan(0);

    // Run 3: everything finishes.
    const s3 = await start();
    const ev3 = await collectEvents(s3.url);
    const results = await Promise.all(
      ids.map((id) =>
        waitUntil(
          async () => {
            const r = await http(s3.url, 'GET', `/v1/jobs/${id}/result?wait=10s`);
            expect([200, 202]).toContain(r.status);
            return r.status === 200 ? r.body : undefined;
          },
          60_000,
          `the result of ${id}`,
          0,
        ),
      ),
    );
    results.forEach((r, i) => {
      expect(r).toMatchObject({ id: idOf(i), state: 'done', error: null, result: { partitions: PARTITIONS, total: sleepTotal(seedOf(i), PARTITIONS) } });
      expect(r.finishedAt).toEqual(expect.any(String));
    });
    for (const [i, id] of ids.entries()) {
      const job = await http(s3.url, 'GET', `/v1/jobs/${id}`);
      const resumes = (snap1.done.has(id) ? 0 : 1) + (snap2.done.has(id) ? 0 : 1);
      expect(job.body).toMatchObject({ id, state: 'done', partitionsDone: PARTITIONS, partitionStates: null, resumes, error: null, submittedAt: submittedAt.get(id) });
      expect(job.body.result).toEqual({ partitions: PARTITIONS, total: sleepTotal(seedOf(i), PARTITIONS) });
      expect(job.body.finishedAt).toEqual(expect.any(String));
    }
    const status = await http(s3.url, 'GET', '/v1/status');
    expect(status.body.jobs).toMatchObject({ done: JOBS, pending: 0, queued: 0, running: 0, failed: 0, cancelled: 0 });

    // Exactly once: each server ended only the jobs that were unfinished when it started.
    const metrics = (await http(s3.url, 'GET', '/metrics')).body as string;
    expect(metricValue(metrics, 'stoker_jobs_ended_total', { kind: 'sleep', state: 'done' })).toBe(JOBS - snap2.done.size);
    expect(metricValue(metrics, 'stoker_jobs_ended_total', { kind: 'sleep', state: 'failed' })).toBe(0);
    const ended = (events: StreamedEvent[]) => events.filter((e) => e.type === 'job.done').map((e) => e.id as string);
    for (const [events, before, after] of [
      [ev2.events, snap1, snap2],
      [ev3.events, snap2, undefined],
    ] as const) {
      const doneIds = ended(events);
      expect(new Set(doneIds).size).toBe(doneIds.length);
      for (const id of doneIds) {
        expect(before.done.has(id), `${id} ended again after a restart`).toBe(false);
        if (after) expect(after.done.has(id)).toBe(true);
      }
      // A partition recorded before the crash is not run again.
      for (const e of events) if (e.type === 'job.partition') expect(before.recorded.get(e.id as string)?.has(e.partition as number) ?? false).toBe(false);
      expect(events.some((e) => e.type === 'job.failed' || e.type === 'job.cancelled')).toBe(false);
    }
    expect(ended(ev3.events).length).toBeLessThanOrEqual(JOBS - snap2.done.size);

    // An idempotent resubmit after the restarts is the same job, not a new run.
    const again = await http(s3.url, 'POST', '/v1/jobs', bodyOf(7));
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ id: idOf(7), state: 'done', submittedAt: submittedAt.get(idOf(7)), result: { partitions: PARTITIONS, total: sleepTotal(seedOf(7), PARTITIONS) } });
    expect((await http(s3.url, 'GET', '/v1/status')).body.jobs).toMatchObject({ done: JOBS, pending: 0 });
    const metricsAfter = (await http(s3.url, 'GET', '/metrics')).body as string;
    expect(metricValue(metricsAfter, 'stoker_jobs_ended_total', { kind: 'sleep', state: 'done' })).toBe(JOBS - snap2.done.size);
    await ev3.close();

    // A graceful stop; the journal then holds each of the 50 jobs once, done, with its partition outputs dropped.
    expect(await s3.stop()).toBe(0);
    const journal = Journal.open(dir);
    try {
      expect(journal.counts()).toEqual({ queued: 0, running: 0, done: JOBS, failed: 0, cancelled: 0 });
      for (const id of ids) {
        expect(journal.get(id)?.state).toBe('done');
        expect(journal.partitionOutputs(id).size).toBe(0);
      }
    } finally {
      journal.close();
    }
  });
});
