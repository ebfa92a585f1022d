/** Those waiting for a job to end (`GET /v1/jobs/:id/result?wait=`): woken at its end, at their timeout, or at shutdown. */

/** The waiters of one service, by job id. */
export class Waiters {
  private readonly waiting = new Map<string, Set<() => void>>();

  /** Resolves when the job `id` ends ({@link wake}) or after `waitMs`, whichever comes first. */
  wait(id: string, waitMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      let set = this.waiting.get(id);
      if (!set) this.waiting.set(id, (set = new Set()));
      const wake = () => {
        clearTimeout(t);
        set.delete(wake);
        if (set.size === 0 && this.waiting.get(id) === set) this.waiting.delete(id);
        resolve();
      };
      const t = setTimeout(wake, waitMs);
      set.add(wake);
    });
  }

  /** The job `id` ended: its waiters go on. */
  wake(id: string): void {
    const set = this.waiting.get(id);
    if (set) for (const wake of [...set]) wake();
  }

  /** Shutdown: every waiter goes on. */
  wakeAll(): void {
    for (const set of this.waiting.values()) for (const wake of [...set]) wake();
  }
}
