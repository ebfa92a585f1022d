import type { ReadonlySnapshot } from '../pacer.js';

/**
 * The preparation limiter. Where preparations slow each other down (shared cores, memory
 * bandwidth), sizing the inventory from the measured latency runs away: more in preparation →
 * longer latency → a larger inventory target, and past the knee less finishes. Latency samples
 * show it late (the quick preparations finish first, the rest crawl); the age of those in flight
 * shows it at once: in a steady pipeline their mean age is E[L²] ÷ 2E[L].
 *
 * It takes over when all of these hold: the devices are short of work (smoothed occupancy below
 * STARVED); at least 2 × (workers + target) are preparing; the preparations are
 * slower than they were — the pipeline has filled (two latencies into the busy period, workers +
 * target preparations measured in it), twice that many are measured, and the latency estimate is
 * LATENCY_UP × its lowest since the fill; or those in flight are on average AGES_ALONE × older
 * than that lowest (not yet filled: than the lowest latency measured in the busy period) — both
 * lines wider where latencies spread (FLOOR_Z); and
 * they are on average OVERDUE × older than they should be, or the latency estimate OVERDUE ×
 * LATENCY_UP × that lowest (once the pipeline sits at the memory budget, its ages are steady
 * again) — all for half a latency on end; and then work is queued (a cap holds nothing back
 * otherwise), most of those preparing of kinds the floor measured (UNKNOWN_MAX), the slowdown
 * one that the growth in concurrency since the floor can explain (ELASTICITY_MAX), and the latest
 * preparations not as quick as those behind the floor (QUICK_SAMPLES). Or, with work queued, at
 * once where what finishes collapsed (COLLAPSE). An empty queue
 * does not start the wait again: under a stream of arrivals each job is dispatched as it comes
 * and the queue is empty between them (prep-knee-arrivals ran away to 1,300 preparing, as
 * unpaced does, while each arrival restarted the wait). Ages grow with time alone: where no
 * event would come to see them pass a line (`checkAt`), the pacer asks to observe again then. It then caps the
 * number preparing at what would finish as much at that lowest latency (Little's law, with the
 * latency the ages imply; at most half), and climbs down by STEP while a lower cap finishes as much. A STEP from above the knee
 * lands below it, and the best it left may be up to 1 ÷ STEP = 1.43 × the knee: past the first
 * step that finishes less it tries the cap that would finish as much as the best were the
 * throughput in proportion to the cap below the knee (Little's law with the latency no longer
 * falling: that step's cap × the best's throughput ÷ its own; on a plateau, the knee). Where that
 * finishes as much, it splits the difference (the geometric mean of the highest cap that finished
 * less and the best) until the two are within PROBE of each other; where it finishes less too,
 * there is no knee between (throughput falls all the way down, a gentle slope): it settles on the
 * best. Then it holds the best cap — REST + 1 measurements — between probes PROBE × above and
 * below it: it moves up where a probe finishes EPS_UP more (more memory must buy more than a
 * measurement's noise), down where one finishes as much.
 *
 * A lower cap finishes "as much" unless it finishes less than some cap measured above it (since
 * taking over: the latest measurement at each cap, the best's the running mean of its holds) by
 * more than EPS plus NOISE_Z standard errors of the difference. The noise allowance: where
 * throughput is flat past the knee, the lower cap, which holds less memory and gives shorter
 * latencies, wins what the noise cannot tell apart (with EPS alone, a measurement that read high
 * stopped the climb down above the knee). Every cap above, not only the best: on a gentle slope
 * (throughput still rising, slowly, past the knee) each step down finishes a little less, within
 * the allowance of the last, and judged against the last cap accepted those losses would add up
 * down the slope; judged against the most measured above, they cannot pass one allowance. A step
 * down the climb that finishes as much only within the noise (less by more than EPS than the
 * most measured above) may be a slope's: the cap that most was measured at is measured again (a
 * running mean with what it finished before) and the step judged against that. Held, the best
 * stays as much as every cap measured above it: where its running mean falls short of one, it
 * moves up to the least cap above that is (the probes below stop at the allowance; what is
 * measured above — the climb, the probes above — keeps the best from settling further down). A
 * hold that finishes less than the best's mean by more than EPS and the noise says the work or
 * the machine changed: the caps above are forgotten.
 *
 * A cap is measured over whole turnovers: once the pipeline is within it, the first `cap`
 * preparations flush what ran at the old cap (FIRST_FLUSH × `cap` after taking over), and the
 * next TIMED × `cap` (at least TIMED_MIN) give the throughput there by Little's law (mean number
 * preparing ÷ mean latency: steadier than counting completions, whose phase a cap change has
 * bunched). Its relative standard error is that of the mean latency of the timed preparations
 * (the number preparing sits at the cap); while it is over SE_MAX the measurement goes on, up to
 * EXTEND × as many turnovers (a noisy preparation takes longer to measure, and the noise
 * allowance of "as much" stays near SE_MAX) — unless it is a probe or a lower cap whose comparison
 * with the caps above is clear already (NOISE_Z of its standard errors short of the line): under
 * the knee the moves up, each a preparation or two at a small cap, pay far more than EPS_UP.
 *
 * Kinds' units: where kinds prepare for different times, the latency of a mix is no measure of a
 * cap — a cap timed on a block of a quick kind would read as finishing more than one timed on a
 * slow kind, whatever the contention. Each preparation's latency counts in its own kind's unit
 * (the snapshot's per-kind totals): a kind's unit is its mean latency in the first measurement
 * that timed UNIT_SAMPLES of it, divided by the level (the mean latency in units) of the kinds
 * with a unit in that same measurement (none timed there: the last measurement's level; none has
 * a unit yet: 1), so that every unit is a latency at one contention. A cap's throughput is then the mean number preparing ÷ the mean latency in units;
 * with one kind, the same comparisons as in milliseconds. Two kinds (15–25 s and 45–75 s) in
 * alternating blocks past a knee of 8: the climb down's steps read the blocks, not the caps,
 * and stoker finished 0.032 of the devices' capacity over 10 seeds; 0.047 in units (gradient
 * 0.048, unpaced 0.010, the best fixed cap 0.070).
 *
 * It lets go when a measurement finds the devices fed STARVED × λ or more (preparation is not the
 * bottleneck then), and after two moves up in a row, to where it took over, that each finish GAIN
 * of the proportional gain more: that was no contention (a slower preparation, say); and when its
 * first measurement, at a cap no more than were preparing while the floor's preparations ran (the
 * engine's prepareConcurrencyTotal), finds a latency LATENCY_UP × the floor: the floor read low. Where
 * the climb down's first step finished in proportion less, no quicker, with more noise than a PROBE
 * × probe could rise above, the first cap goes on trial (see uncontended): probes doubled. Over an idle
 * pipeline it stays, and the next busy period goes on from its cap (the knee is the machine's).
 * With no cap, the next busy period fills anew for its own floor, but until it measures a lower
 * latency its ages are held against the lowest of the last one, and the kinds known then stay
 * known: where the first preparations of a busy period crawl past the knee, none may finish for
 * minutes (random scenario 20 of `bench --random 200`, seed 3: 1.00 → 1.32 of unpaced's speed).
 */
const STARVED = 0.9;
const OVERDUE = 1.5;
const LATENCY_UP = 1.3;
const STEP = 0.7;
const EPS = 0.02;
const EPS_UP = 0.05;
const PROBE = 1.12;
const GAIN = 2 / 3;
const TIMED = 2;
const REST = 2;
const TIMED_MIN = 30;
/**
 * "As much" allows NOISE_Z standard errors of the difference of two measurements. With both at
 * SE_MAX, two caps that finish the same then read "less" about once in 140 comparisons
 * (Φ(−EPS ÷ (√2 × SE_MAX) − NOISE_Z); with one standard error, once in 40), and a cap that
 * finishes less reads "as much" while it is less by under EPS + NOISE_Z × √2 × SE_MAX ≈ 5 %. A
 * false "less" costs more: the climb down stops above the knee there, and the probes take many
 * measurements to undo it. With EPS alone, on prep-plateau, a best that had read high made the
 * lower caps read less: the peak preparing over the second half of the steady window averaged
 * 1.46 × the knee over 10 seeds, one seed 2.2 ×.
 */
const NOISE_Z = 1.5;
/**
 * A measurement goes on while its relative standard error is over SE_MAX, for at most EXTEND × its
 * TIMED turnovers: with both measurements at SE_MAX, "as much" allows about 5 % less (see
 * NOISE_Z; the throughput the limiter may give for memory). A latency with a coefficient of
 * variation of 0.14 (uniform 30–50 s) needs (0.14 ÷ 0.015)² ≈ 90 timed preparations for it, about
 * 4 turnovers at a cap of 24.
 */
const SE_MAX = 0.015;
const EXTEND = 3;
/**
 * The first measurement after taking over flushes FIRST_FLUSH turnovers: the drain from the
 * runaway ends in a burst of completions (the old preparations speed up as fewer contend), so the
 * next turnover starts bunched, and the first timed completions are its quick ones (Little's law
 * over them read 3 % high on average over 30 seeds of a plateau at 48, 0.72 × the devices' rate;
 * a best that reads high makes every lower cap read less). A turnover later the starts have spread.
 */
const FIRST_FLUSH = 2;
/**
 * Those in flight AGES_ALONE × older than the floor latency on average are evidence enough to take
 * over before `many` have finished (a steady pipeline's mean age is E[L](1 + cv²) ÷ 2: about the
 * floor even where latencies spread as widely as an exponential's). On a knee where each doubling
 * past it quarters the speed, the first fill put 130–200 in flight, the completions came one a
 * minute, and waiting for 16 of them let the pipeline reach the memory budget and crawl for 20
 * minutes more.
 */
const AGES_ALONE = 2 * OVERDUE * LATENCY_UP;
/**
 * Before the fill, the lowest latency measured counts from the EARLY_SAMPLES-th preparation
 * measured (in this busy period or before: the estimate carries over): the first one or two of a
 * heavy tail are its quickest (lognormal σ 1: 2 s where the mean is 49), and ages four times that
 * took over 16 s into a busy period, at a cap of 1. (From the fourth, a knee as steep as (n/16)²
 * was seen too late on some seeds.) Counted in the busy period alone, one-partition jobs a minute
 * apart, each its own busy period, never set it: 17 measured alone at 36 s, then 561 at once past
 * a knee of 16 ran with nothing to hold their ages against (random scenario 122 of
 * `bench --random 200`, seed 5: 1.11 of unpaced's speed; 2.90 counted so).
 */
const EARLY_SAMPLES = 3;
/**
 * With fewer than EARLY_SAMPLES measured, the latency estimate (the first ones) becomes the lowest
 * measured once AGES_ALONE × it has passed since the first with no more: a heavy tail's quick
 * first ones are followed by more soon (a hundred preparing with a mean of 49 s finish two a
 * second), while past a knee reached by the first fill the next may come half an hour later. The
 * bootstrap's first (31 s, 6 preparing, a knee of 4) was followed by 175 preparing and the second
 * 31 minutes on: nothing to hold their ages against (random scenario 1 of `bench --random 200`,
 * seed 1: 1.06 of unpaced's speed, gradient 2.44).
 */
const FIRST_ALONE = AGES_ALONE;
/**
 * The lines above hold for latencies that spread little (uniform 30–50 s: cv 0.14). Where they
 * spread more, the spread alone crosses them with no contention at all: the floor is the lowest
 * the latency estimate read, and an estimate over n samples (PacerView.latencySamples) reads
 * about FLOOR_Z of its standard errors (cv ÷ √n) low at its lowest over a long busy period, so
 * the latency line is at least 1 + FLOOR_Z × cv ÷ √n above the floor; and a steady pipeline's
 * mean age is E[L](1 + cv²) ÷ 2 (lognormal σ 1: 1.36 E[L]; two modes, 8 s for four in five and
 * 150 s for the fifth: 1.72 E[L], and 7.8 × the floor the quick mode sets), so the ages line
 * scales with it where that is over E[L]. With no contention at all, prep-knee's stages with lognormal σ 1
 * latencies finished 0.786 of unpaced's throughput over 10 seeds with the fixed lines, 0.860
 * with these; with two modes (8 s for four in five, 150 s for the fifth) 0.51 → 0.56 over 6
 * seeds (still taken over in the first minute, on ages the slow mode makes). On the knees with
 * uniform latencies nothing changes.
 */
const FLOOR_Z = 4;
/**
 * The first measurement after taking over looks from EARLY_LOOK timed preparations on whether
 * they prove the floor wrong (the standard error of fewer says little). A burst of one-partition
 * jobs with heavy-tailed preparation took it over and ended before its measurement could; the
 * cap of 5 it left, held into the next burst (30 s preparations), needed 40 completions, four
 * minutes of starved devices, to let go (0.33 of unpaced's throughput over 10 seeds; 0.78 with
 * this look and no flush after idle). Two modes with no contention (above): 0.56 → 0.76.
 */
const EARLY_LOOK = 8;
/**
 * A remembered limit under TRIAL_DOUBLE is on trial: it may be another workload's (one learned on
 * a flood of 1 ms preparations held 1 s ones to one at a time, the devices at 5 % for minutes),
 * and so small a cap starves any device fed by slower preparations. Its first measurement is
 * followed by probes above it, each doubled (where the proportional gain is large and a ×1.12
 * step moves nothing: 1 → 2 → 3 took a measurement each, and 8 → 9 gains too little to tell from
 * the noise), each timed over TRIAL_TIMED preparations at the least (not TIMED_MIN), the
 * remembered limit's own not extended; two gains in a row in proportion (TRIAL_GAIN) to the
 * remembered limit's own measurement, to twice that limit or more, let it go, as after a
 * take-over. A probe that gains less ends the trial: the limit holds. From 1 with 1 s
 * preparations, 2 workers of 0.13 s: let go 63 s into the run, 13 s of it busy (it held for
 * 150 s). A larger remembered limit probes above too, right after its first measurement, but
 * PROBE × a step (on prep-knee doubled probes went past 1.25 × the knee): held two more
 * measurements and probed below first, a remembered 12 with 1.5 s preparations nothing slows was
 * let go 48 s into the run (16.6 s now).
 */
const TRIAL_DOUBLE = 8;
const TRIAL_TIMED = EARLY_LOOK;
/**
 * On trial, a gain "in proportion" is half the proportional one (GAIN is 2/3): over TRIAL_TIMED
 * preparations a doubling that gains twice as much reads under 1 + GAIN about once in eight
 * (the latency's spread of a uniform 0.5–1.5 s, ±10 % for each measurement), and the trial
 * ended on a limit the work did not need (2.1 × unpaced's run time on one seed in ten); past a
 * knee, a doubled cap finishes about as much or less.
 */
const TRIAL_GAIN = 1 / 2;
/**
 * The latency estimate mixes the kinds (the snapshot gives no preparation latency per kind): a
 * slower kind arriving reads as slower preparations. No take-over where more than UNKNOWN_MAX of
 * those preparing are of kinds that had fewer than EARLY_SAMPLES preparations measured when the
 * floor (or the lowest latency) was set: nothing says they are slower than they would be alone.
 * With the wait no longer started again by an empty queue, a 7 s kind's floor took over when a
 * 13–86 s kind followed it, at a cap of 1 (random scenario 145 of `bench --random 200`, seed 1:
 * 0.45 of unpaced's speed, its p99 job latency 33 ×; 1.00 with this).
 */
const UNKNOWN_MAX = 0.5;
/**
 * … unless those preparing are UNKNOWN_GROWTH × as many as behind the floor, and their ages
 * UNKNOWN_GROWTH × past the line AGES_ALONE draws: nothing says the new kind is slower alone, but
 * a kind that arrived past a knee of 10 (39 s alone) ran to 210 preparing with none finished in
 * 600 s, and nothing took over (random scenario 20 of `bench --random 200`, seed 3). Four times
 * the evidence leaves a slower kind with no contention alone (random scenarios 183 of seed 1, 94
 * of seed 4: taken over at once with the one line, 0.69 and 0.59 of unpaced's speed).
 */
const UNKNOWN_GROWTH = 4;
/**
 * Past a knee the first fill ran through, the completions all but stop, and neither line is
 * crossed in time: the latency estimate has little new to read, the ages of those in flight stay
 * young as more are dispatched behind them, and the kinds arriving meanwhile are unknown to the
 * floor — while the number preparing runs to the memory budget or the end of the queue. What shows
 * it is what finishes: of those preparing COLLAPSE_SPAN latencies ago (the floor's or the
 * estimate's, the longer; at least COLLAPSE_SPAN_MIN_MS), of kinds the floor saw and at least
 * `many`, fewer than COLLAPSE_SPAN ÷ COLLAPSE finished since — the latency that implies is
 * COLLAPSE ÷ COLLAPSE_SPAN × the span: COLLAPSE × the latency it was drawn from, or over 78 s —
 * with UNKNOWN_GROWTH × as many preparing now as behind the floor. A slower kind does not count (a 30 s kind after a
 * floor of 12 s: none of it finishes in 24 s), nor do a few (none of five heavy-tailed ones
 * finishing in two latencies says nothing), nor a burst that just arrived (held against those
 * preparing a span ago). It takes over at once, at the usual cap (no overdue wait, no kinds' or
 * quick ones' or elasticity's veto: those guard the lines against a spread that this one allows
 * for); the floor's concurrency proves nothing of the floor here, so no first measurement lets go
 * on it. `bench --random 200`, six draws: the mean speed over the scenarios with a knee 1.24–1.51 →
 * 1.27–1.53 (seed 2 1.279 → 1.316, seed 3 1.408 → 1.467), those without unchanged to the fourth
 * decimal, peak memory 0.02 less; prep-knee's first fill peaks at 175 preparing, not at the
 * budget's 200 (0.913 → 0.938 of the best fixed cap over the window), while its second half reads
 * 0.973 → 0.969 and the steep knee's 0.949 → 0.941 (taken over sooner, on a smaller pipeline, at a
 * smaller cap: the probes climb back to the knee).
 */
const COLLAPSE_SPAN = 2;
const COLLAPSE = AGES_ALONE * UNKNOWN_GROWTH;
/**
 * The collapse line's span is at least this long: a real runtime whose event loop was held up for
 * a span (a collection, a large result) sees no completions over it, then all of them at once; a
 * 10 s hold-up is no passing pause. (A hold on the line itself instead — seen again a moment on —
 * lost half its gains in the simulator, where a completion now and then breaks it for seconds.)
 */
const COLLAPSE_SPAN_MIN_MS = 10_000;
/** How many looks back the collapse line keeps (one every quarter span: they reach back two spans). */
const COLLAPSE_MARKS = 8;
/** A kind's own preparations in a measurement before that measurement gives it its unit (the header's kinds' units). */
const UNIT_SAMPLES = 3;

/**
 * Contention slows preparations as the number in flight grows: past a knee, at most as
 * (n ÷ n₀)^a for the laws met (a up to 2 for the steepest knee tested). A slowdown more than
 * ELASTICITY_MAX as steep — the latency the ages imply, or the latency estimate, over the floor
 * against the number preparing now, or the latency estimate's concurrency, over the floor's — is
 * not contention: a slower mode or kind that has not finished yet (two modes, 12 s for four in
 * five and 82 s for the fifth, started together: the quick ones set the floor while 8 were
 * preparing, and with 10 preparing the slow ones' ages read 8 × it: taken over at a cap of 1,
 * random scenario 99 of `bench --random 200`, seed 3, 0.46 of unpaced's speed; 0.92 with this).
 */
const ELASTICITY_MAX = 3;
/**
 * Contention slows every preparation, the quick ones too; a slower mode or kind only adds slow
 * ones. Where the quickest of the latest QUICK_SAMPLES latencies (all measured since the floor
 * was set) is under LATENCY_UP × the quickest of those behind the floor, no take-over (the same
 * two modes, 8 preparing behind a floor measured while 3 were: (8 ÷ 3)³ explains the ages,
 * while the quick mode still finishes in 12 s). Only those that finished while the ones preparing
 * now ran (since their mean start) count: quick ones from before say nothing of them.
 */
const QUICK_SAMPLES = 8;

export interface PrepareLimiter {
  /** The cap in force, the number preparing when the limiter took over, the best cap measured and its throughput (items/ms). */
  cap: number;
  engagedAt: number;
  /**
   * When it took over: the floor latency the ages were held against, and the mean number preparing
   * while the preparations it was measured from ran (NaN: started from a remembered limit).
   */
  floorMs: number;
  floorPreparing: number;
  best: number;
  bestX: number;
  /** bestX's relative standard error (0: none known, a remembered limit's before it is measured). */
  bestSe: number;
  /**
   * The latest measurement at each cap measured since taking over (the best's: the running mean of
   * its holds): a lower cap finishes "as much" only as every cap above it.
   */
  measured: readonly Measured[];
  /** Climbing down, a step that finished as much only within the noise, judged again once the cap above it has been measured again (null: none). */
  recheck: Measured | null;
  /** Climbing down past the first step that finished less: the caps tried between it and the best (0: the proportional one is next). */
  tries: number;
  /** Climbing down (false) or settled on `best`; settled, the last probe's side (+1 above, −1 below). */
  settled: boolean;
  /** Climbing down, the highest cap measured to finish less than the best (NaN: none yet) and its throughput. */
  below: number;
  belowX: number;
  side: number;
  /** Moves up in a row with a nearly proportional gain; holds at the best since the last probe. */
  ups: number;
  rest: number;
  /**
   * A remembered limit on trial (see TRIAL_*): it has not yet shown, at a probe above it, that more
   * preparations at once stop finishing in proportion more. Until one does, the probes go up (a
   * small cap doubled) and each is timed over fewer preparations.
   */
  trial: boolean;
  /**
   * The measurement: when the pipeline came within the cap, when its first turnover ended, and
   * the snapshot's completions, ∫ preparing dt and latency total and sum of squares then.
   */
  from: number;
  turnedAt: number;
  mark: number;
  preparingMs: number;
  latencyMs: number;
  latencySqMs: number;
  /** Per kind (snapshot order), its preparations completed and their latency total and sum of squares when the timed turnovers began. */
  kindMarks: readonly KindMark[];
}

/** A kind's preparation counters at a moment. */
interface KindMark {
  done: number;
  latencyMs: number;
  latencySqMs: number;
}

/** A cap's throughput (items/ms) and its relative standard error. */
export interface Measured {
  cap: number;
  x: number;
  se: number;
  /** Its preparations' mean latency in their kinds' units (the header's kinds' units). */
  level: number;
}

/** What the limiter reads of the pacer at each observation. */
export interface PacerView {
  /** The device rate planned with, and what the devices drain now (smoothed occupancy), items/ms. */
  lambda: number;
  draining: number;
  /** The preparation latency estimate and its second moment, ms and ms², and the mean number preparing while those preparations ran. */
  latency: number;
  latencySq: number;
  latencyConcurrency: number;
  /** How many samples the latency estimate weighs, in effect (its standard error is the latencies' spread ÷ √ of it). */
  latencySamples: number;
  /** When the current busy period began (NaN: idle), and the preparations completed by then. */
  busySince: number;
  busyFromCompletions: number;
  /** The waiting target. */
  target: number;
}

/** Whether contention can explain a preparation `slowdown` at `growth` × the concurrency (at most ELASTICITY_MAX as steep as proportional). */
function explained(slowdown: number, growth: number): boolean {
  return growth > 1 && slowdown <= growth ** ELASTICITY_MAX;
}

/**
 * What a cap must finish, with a relative standard error `se`, to finish as much as every cap
 * measured above it: not less than any by more than EPS and `z` standard errors of the difference
 * (−Infinity: none measured above it).
 */
function asMuchLine(measured: readonly Measured[], cap: number, se: number, z: number): number {
  let line = -Infinity;
  for (const o of measured) if (o.cap > cap) line = Math.max(line, o.x * (1 - EPS - z * Math.hypot(se, o.se)));
  return line;
}

/** The preparation limiter's state (see the constants above) and the cap it holds. */
export class PrepareLimit {
  /** The limiter while it holds a cap (null: no cap). */
  state: PrepareLimiter | null = null;
  /** The most preparations in flight it allows (Infinity: no cap). */
  cap = Infinity;
  /** The lowest latency estimate since the pipeline filled (this busy period); since when the limiter's conditions hold. */
  private floor = Infinity;
  /** The lowest latency estimate in this busy period, filled or not (the quick finish first: it may read low), or carried over from the last one (its floor). */
  private early = Infinity;
  /** The mean number preparing while the preparations behind the floor, and behind the lowest latency measured, ran. */
  private floorPreparing = 0;
  private earlyPreparing = 0;
  /** The least the floor may read for the rest of the busy period: what a cap that proved the floor wrong measured (0: none). */
  private floorAtLeast = 0;
  private overdueSince = NaN;
  private filled = false;
  /** When the first preparation was measured, while fewer than EARLY_SAMPLES are (NaN: none yet). */
  private firstAt = NaN;
  /** Per kind (snapshot order): whether its preparations had been measured when the floor or the lowest latency was set (in this busy period or an earlier one). */
  private known: boolean[] = [];
  /** Per kind (snapshot order): the latency its timed preparations are measured in (the header's kinds' units); undefined until one was timed. */
  private readonly units: (number | undefined)[] = [];
  /** The mean latency in units of the last measurement (1 before any). */
  private level = 1;
  /** The latest QUICK_SAMPLES preparation latencies (one per observation: the mean of those that finished), ms; how many were pushed; and the snapshot's totals at the last. */
  private readonly recent = new Float64Array(QUICK_SAMPLES).fill(Infinity);
  /** Looks back for the collapse line (see COLLAPSE): when, and the snapshot's preparations completed and preparing then; how many were taken (this busy period). */
  private readonly lookAt = new Float64Array(COLLAPSE_MARKS);
  private readonly lookKinds: { preparing: number; done: number }[][] = [];
  private looks = 0;
  private readonly recentAt = new Float64Array(QUICK_SAMPLES);
  private recentCount = 0;
  private seenCompletions = 0;
  private seenLatencyMs = 0;
  /** The quickest of `recent` when the floor (or the lowest latency measured) was last set, and recentCount then. */
  private floorQuickest = 0;
  private floorQuickAt = 0;
  /**
   * When taking over may next be decided with no event in between (Infinity: not before an
   * event): the ages of those in flight grow with time alone, and where nothing finishes or
   * starts for minutes (past a steep knee, with the inventory at its target) no event would come.
   * The pacer asks to be woken then.
   */
  checkAt = Infinity;

  /** `prior`: a remembered preparation limit (≥ 1): the limiter starts there, settled (it lets go as usual). */
  constructor(prior: number) {
    if (prior >= 1) {
      const cap = Math.round(prior);
      // Its first measurement is its last hold before a probe above it (on trial, doubled).
      const trial = cap < TRIAL_DOUBLE;
      this.state = { cap, engagedAt: cap, floorMs: NaN, floorPreparing: NaN, best: cap, bestX: 0, bestSe: 0, measured: [], recheck: null, tries: 0, settled: true, below: NaN, belowX: NaN, side: -1, ups: 0, rest: REST, trial, from: NaN, turnedAt: NaN, mark: 0, preparingMs: 0, latencyMs: 0, latencySqMs: 0, kindMarks: [] };
      this.cap = cap;
    }
  }

  /** Called on every observation, after the pacer's estimates: takes over, measures, moves the cap, lets go. */
  update(s: ReadonlySnapshot, p: PacerView): void {
    const starved = p.lambda > 0 && p.draining < STARVED * p.lambda;
    const lim = this.state;
    this.checkAt = Infinity;
    this.sample(s);
    // Idle: the next busy period goes on from where this one left the limiter — settled, from
    // the best cap (the knee is the machine's; a workload that does not contend there lets it go
    // at its first measurement); still climbing down, from the step it had reached.
    if (s.backlog + s.preparing + s.waiting + s.onDevice === 0) {
      if (lim && !Number.isNaN(lim.from)) {
        // (A remembered limit on trial goes on with its probes above.)
        if (lim.settled && !lim.trial) this.hold({ ...lim, engagedAt: lim.best, rest: 0, ups: 0 }, lim.best, s);
        else this.hold(lim, lim.cap, s);
      }
      if (this.floor < this.early) {
        this.early = this.floor;
        this.earlyPreparing = this.floorPreparing;
      }
      this.floor = Infinity;
      this.floorAtLeast = 0;
      this.filled = false;
      this.overdueSince = NaN;
      this.looks = 0;
      return;
    }
    // Filled: two latencies into the busy period, with workers + target preparations measured in
    // it for the floor; to take over, twice that (the quickest finish first: fewer would be no
    // evidence of slower ones).
    const measured = s.prepareCompletions - p.busyFromCompletions;
    // (Once filled, it stays so for the busy period: a latency that grows as fast as time passes must not unfill it.)
    if (!this.filled) this.filled = s.now - p.busySince >= 2 * p.latency && measured >= s.workers + p.target;
    const filled = this.filled;
    if (filled && p.latency < this.floor) {
      this.floor = Math.max(p.latency, this.floorAtLeast);
      this.floorPreparing = p.latencyConcurrency;
      this.know(s);
      this.markQuickest();
    }
    // From the EARLY_SAMPLES-th preparation measured — or, with fewer, once AGES_ALONE latencies
    // have passed since the first with no more (see FIRST_ALONE).
    const fewSince = s.prepareCompletions > 0 && s.prepareCompletions < EARLY_SAMPLES ? (this.firstAt = Number.isNaN(this.firstAt) ? s.now : this.firstAt) : NaN;
    const silent = !Number.isNaN(fewSince) && s.now - fewSince >= FIRST_ALONE * p.latency;
    if ((s.prepareCompletions >= EARLY_SAMPLES || silent) && p.latency > 0 && p.latency < this.early) {
      this.early = Math.max(p.latency, this.floorAtLeast);
      this.earlyPreparing = p.latencyConcurrency;
      this.know(s, silent ? 1 : EARLY_SAMPLES);
      this.markQuickest();
    } else if (!Number.isNaN(fewSince) && this.early === Infinity && p.latency > 0) this.checkAt = fewSince + FIRST_ALONE * p.latency + 1;
    const reference = filled ? this.floor : this.early;
    const span = Math.max(COLLAPSE_SPAN_MIN_MS, COLLAPSE_SPAN * Math.max(Number.isFinite(reference) ? reference : 0, p.latency));
    this.look(s, span);
    if (!lim) {
      // Many preparations that take far longer than they did — more than the devices and the
      // target hold, and the latency up on its floor (not a small pipeline that a memory budget
      // refills in bursts: ages bunch, latency stays) — with work queued behind them at the end
      // (not a drain's last, slowest ones: nothing waits behind them). The cheap tests first:
      // this runs on every event.
      const many = 2 * (s.workers + p.target);
      // The latency the ages are held against: the floor once filled, else the lowest measured.
      const floor = filled ? this.floor : this.early;
      if (!(starved && s.preparing >= many && floor > 0 && Number.isFinite(floor))) {
        this.overdueSince = NaN;
        return;
      }
      const expectedAge = p.latencySq / (2 * p.latency);
      const meanStart = s.preparingStartMsTotal / s.preparing;
      const age = s.now - meanStart;
      // Where latencies spread (a heavy tail, two modes, kinds prepared for very different
      // times), neither line may be crossed by the spread alone (see FLOOR_Z).
      const cv2 = Math.max(0, p.latencySq / (p.latency * p.latency) - 1);
      const up = Math.max(LATENCY_UP, 1 + FLOOR_Z * Math.sqrt(cv2 / p.latencySamples));
      const agesAlone = AGES_ALONE * Math.max(1, (1 + cv2) / 2);
      // (Collapsed: taken over at once, as below; the floor's concurrency proves nothing of the floor here, so no first measurement proves it wrong.)
      if (s.backlog > 0 && this.collapsed(s, span, many, filled ? this.floorPreparing : this.earlyPreparing)) {
        this.takeOver(s, floor, NaN, (2 * age) / (1 + cv2));
        return;
      }
      // Slower preparations: the latency estimate LATENCY_UP × its floor once filled, with `many`
      // measured in the busy period (fewer are no evidence: the quick finish first), or those in
      // flight AGES_ALONE × older than that floor — or, not yet filled, than the lowest latency
      // measured in the busy period: past a steep knee they crawl, and the completions that would
      // show it (and fill the pipeline) take many latencies to come, the floor they set the crawl's.
      const agesSlow = age > agesAlone * floor;
      const latencySlow = filled && measured >= many && p.latency >= up * floor;
      if (!(agesSlow || latencySlow)) {
        this.overdueSince = NaN;
        this.checkAt = meanStart + agesAlone * floor + 1; // (a millisecond past it: the tests are strict)
        return;
      }
      const overdue = age > OVERDUE * expectedAge || p.latency >= OVERDUE * up * floor;
      // … for half a latency on end: arrivals that refill a draining pipeline bunch its ages for a moment too.
      if (!overdue) {
        this.overdueSince = NaN;
        this.checkAt = meanStart + OVERDUE * expectedAge + 1;
        return;
      }
      if (Number.isNaN(this.overdueSince)) this.overdueSince = s.now;
      if (s.now - this.overdueSince < p.latency / 2) {
        this.checkAt = this.overdueSince + p.latency / 2;
        return;
      }
      // Nothing queued now: nothing a cap would hold back; the next arrival decides (the wait runs on).
      if (s.backlog === 0) return;
      // Most of those preparing are of kinds the floor never saw: a slower kind, not contention, may be all it shows.
      const floorPreparing = filled ? this.floorPreparing : this.earlyPreparing;
      if (this.unknownShare(s) > UNKNOWN_MAX && !(s.preparing >= UNKNOWN_GROWTH * floorPreparing && age > UNKNOWN_GROWTH * agesAlone * floor)) {
        this.overdueSince = NaN;
        return;
      }
      // The latency the ages imply (mean age = E[L](1 + cv²) ÷ 2).
      const latencyNow = (2 * age) / (1 + cv2);
      // A slowdown more than the growth in concurrency since the floor could explain, or the
      // latest preparations as quick as those behind the floor: a slower mode or kind, not
      // contention. On the latency estimate, only with more preparing than behind the floor: its
      // samples' concurrency may be a slower kind's block that drained before the estimate showed
      // it (a tokeniser and an image kind, nothing contending: a cap of 2 taken with 12 preparing,
      // as many as behind the floor, held at 1–7 for ten minutes).
      const quickAsBefore = this.recentCount - this.floorQuickAt >= QUICK_SAMPLES && this.quickest(meanStart) < LATENCY_UP * this.floorQuickest;
      if (quickAsBefore || !((agesSlow && explained(latencyNow / floor, s.preparing / floorPreparing)) || (latencySlow && s.preparing > floorPreparing && explained(p.latency / floor, p.latencyConcurrency / floorPreparing)))) {
        this.overdueSince = NaN;
        return;
      }
      this.takeOver(s, floor, floorPreparing, latencyNow);
      return;
    }
    // Within the cap: the first turnover starts; after it, the next ones are timed.
    if (Number.isNaN(lim.from)) {
      if (s.preparing <= lim.cap) {
        lim.from = s.now;
        lim.mark = s.prepareCompletions;
        // Nothing in flight (the cap held over an idle pipeline), nothing ran at another cap: the
        // first measurement is timed from the start (a cap of 5 with 30 s preparations flushes
        // for a minute).
        if (s.preparing === 0 && Number.isNaN(lim.best) && lim.measured.length === 0) this.turn(lim, s);
      }
      return;
    }
    const timed = Math.max(lim.trial ? TRIAL_TIMED : TIMED_MIN, TIMED * lim.cap);
    const n = s.prepareCompletions - lim.mark;
    // The first measurement after taking over, at a cap no more than were preparing behind the
    // floor, may prove the floor wrong (below) from EARLY_LOOK timed preparations on.
    const first = Number.isNaN(lim.best) && lim.measured.length === 0 && lim.cap <= lim.floorPreparing;
    const early = first && !Number.isNaN(lim.turnedAt) && n >= EARLY_LOOK;
    if (n < (Number.isNaN(lim.turnedAt) ? (Number.isNaN(lim.best) ? FIRST_FLUSH : 1) * lim.cap : timed) && !early) return;
    if (Number.isNaN(lim.turnedAt)) {
      this.turn(lim, s);
      return;
    }
    // Little's law over the timed turnovers: mean number preparing ÷ their mean latency (less
    // noisy than counting completions in a window, whose phase the cap change has bunched); its
    // relative standard error that of the mean latency (the spread of the timed latencies).
    const meanLatency = (s.prepareLatencyMsTotal - lim.latencyMs) / n;
    // The floor proved wrong before the measurement ends: slower by LATENCY_UP with NOISE_Z
    // standard errors to spare (a cap of a few with preparations of a minute takes minutes to time).
    if (n < timed) {
      const varLatency = Math.max(0, (s.prepareLatencySqTotal - lim.latencySqMs) / n - meanLatency * meanLatency);
      const seLatency = meanLatency > 0 ? Math.sqrt(varLatency / (n - 1)) / meanLatency : 0;
      if (meanLatency * (1 - NOISE_Z * seLatency) >= LATENCY_UP * lim.floorMs) this.floorWrong(meanLatency);
      return;
    }
    const meanPreparing = (s.preparingMsTotal - lim.preparingMs) / Math.max(1, s.now - lim.turnedAt);
    // What the caps are compared by: the throughput with each preparation counted in its own
    // kind's latency (the header's kinds' units), and its relative standard error; what the devices are fed, in items.
    const { mean: slowdown, se } = this.slowdown(lim, s, meanLatency);
    const x = meanPreparing / slowdown;
    const items = meanPreparing / meanLatency;
    // Timed on while its standard error is over SE_MAX, unless what it is compared with is
    // already clear: NOISE_Z of its standard errors do not reach the line (above the best, EPS_UP
    // more; below it, as much as the caps above with both at SE_MAX). The best's own measurements
    // go on, and so does a cap above measured again for a step down (`recheck`).
    const lower = !Number.isNaN(lim.best) && (!lim.settled || lim.cap < lim.best);
    // (On trial, the remembered limit's own measurement is compared with none: not extended.)
    if (se > SE_MAX && n < EXTEND * TIMED * lim.cap && !(lim.trial && lim.cap === lim.best)) {
      const line = lim.settled && lim.cap > lim.best ? lim.bestX * (1 + EPS_UP) : lower && !lim.recheck ? asMuchLine(lim.measured, lim.cap, SE_MAX, NOISE_Z) : NaN;
      if (!(Math.abs(x - line) > NOISE_Z * se * x)) return;
    }
    // The first measurement after taking over, at a cap no more than were preparing on average
    // while the floor's preparations ran, found a latency LATENCY_UP × that floor: no contention
    // explains a slower preparation with fewer in flight. The floor was wrong — where latencies
    // have a heavy tail the quick ones finish first, and until the slow ones do, the floor is the
    // quick ones' (lognormal σ 1, no contention at all: taken over 44 s into the busy period on a
    // floor of 8 s, the mean 49 s, and held at 7–11 preparing for good, a third of the
    // throughput). It lets go, and the floor stays at least what this cap measured for the rest
    // of the busy period.
    if (first && meanLatency >= LATENCY_UP * lim.floorMs) {
      this.floorWrong(meanLatency);
      return;
    }
    // The devices fed STARVED × λ or more over the measurement: preparation is not what limits
    // them (at its last instant their smoothed occupancy says less: a few preparations that
    // finish together fill them for a moment).
    if (!(items < STARVED * p.lambda)) {
      this.letGo();
      return;
    }
    // As much: not less than any cap measured above it by more than EPS and the noise of the two
    // measurements (see the header). Each measurement is kept (`measured`), the latest at each cap.
    const asMuch = x >= asMuchLine(lim.measured, lim.cap, se, NOISE_Z);
    const kept = [...lim.measured.filter((o) => o.cap !== lim.cap), { cap: lim.cap, x, se, level: slowdown }];
    const up = (c: number, trial = lim.trial) => (trial ? 2 * c : Math.max(c + 1, Math.round(c * PROBE)));
    const down = (c: number) => Math.max(1, Math.min(c - 1, Math.round(c / PROBE)));
    if (!lim.settled) {
      // Climbing down: a lower cap that finishes as much is better (less memory, shorter latency).
      if (lim.recheck) {
        // The cap above a step that finished as much only within the noise, measured again: a
        // running mean with what it finished before; the step judged again against that.
        const was = lim.measured.find((o) => o.cap === lim.cap);
        const again = was ? { cap: lim.cap, x: (was.x + x) / 2, se: Math.hypot(was.se, se) / 2, level: (was.level + slowdown) / 2 } : { cap: lim.cap, x, se, level: slowdown };
        const step = lim.recheck;
        const checked = { ...lim, measured: [...lim.measured.filter((o) => o.cap !== lim.cap), again], recheck: null, ...(lim.cap === lim.best ? { bestX: again.x, bestSe: again.se } : {}) };
        this.judge(checked, step, false, s);
        return;
      }
      // (At a cap of 1 there is nowhere lower to go: settled there.)
      if (lim.cap === 1) {
        this.hold({ ...lim, best: 1, bestX: x, bestSe: se, measured: kept, settled: true, side: -1 }, up(1), s);
        return;
      }
      this.judge({ ...lim, measured: kept }, { cap: lim.cap, x, se, level: slowdown }, true, s);
    } else if (lim.cap === lim.best) {
      // Holding the best: its throughput measured again (a running mean over the holds there:
      // each new one weighs half, and so does its variance); every REST + 1 holds a probe, on the
      // other side than the last. Less than the mean by more than EPS and the noise: the work or
      // the machine changed, and what the caps above finished before is forgotten.
      const rest = lim.rest + 1;
      // (A remembered limit's first measurement is its first: nothing measured to average with.)
      const first = lim.rest === 0 || !(lim.bestX > 0);
      const bestX = first ? x : (lim.bestX + x) / 2;
      const bestSe = first ? se : Math.hypot(lim.bestSe, se) / 2;
      const was = lim.measured.find((o) => o.cap === lim.best);
      const level = first || !was ? slowdown : (was.level + slowdown) / 2;
      const changed = x < lim.bestX * (1 - EPS - NOISE_Z * Math.hypot(se, lim.bestSe));
      const held = { ...lim, bestX, bestSe, measured: [...(changed ? [] : lim.measured.filter((o) => o.cap !== lim.best)), { cap: lim.best, x: bestX, se: bestSe, level }] };
      // Not as much as a cap above it: up to the least cap above that is as much as every cap above it.
      const asMuchHeld = (o: Measured) => o.x >= asMuchLine(held.measured, o.cap, o.se, NOISE_Z);
      const to = asMuchHeld({ cap: held.best, x: bestX, se: bestSe, level }) ? undefined : held.measured.filter((o) => o.cap > held.best && asMuchHeld(o)).sort((a, b) => a.cap - b.cap)[0];
      if (to) this.hold({ ...held, best: to.cap, bestX: to.x, bestSe: to.se, rest: 0, ups: 0 }, to.cap, s);
      else if (rest <= REST) this.hold({ ...held, rest }, lim.best, s);
      else this.hold({ ...held, side: -lim.side, rest: 0 }, -lim.side > 0 ? up(lim.best) : down(lim.best), s);
    } else if (lim.cap > lim.best) {
      // A take-over's trial (see uncontended) whose doubled probe did not gain in proportion: a
      // knee lies between, and the next probe splits the difference (the geometric mean), from the
      // better of the two, rather than climbing PROBE by PROBE from one end (a steep knee at 24
      // under a trial from 16 or 18: the probe at 32 or 36 finished 1.15 × or 0.89 × as much, and
      // the climbs back to 24 took six measurements and more).
      const between = lim.trial && !Number.isNaN(lim.floorMs) && lim.cap > PROBE * PROBE * lim.best ? Math.round(Math.sqrt(lim.best * lim.cap)) : NaN;
      if (x >= lim.bestX * (1 + EPS_UP)) {
        // (On trial, in proportion to the remembered limit's own measurement: a probe's few timed preparations may read high.)
        const from = (lim.trial && lim.measured.find((o) => o.cap === lim.engagedAt)) || { cap: lim.best, x: lim.bestX };
        const ups = x >= from.x * (1 + (lim.trial ? TRIAL_GAIN : GAIN) * (lim.cap / from.cap - 1)) ? lim.ups + 1 : 0;
        if (ups >= 2 && lim.cap >= (lim.trial ? 2 : 1) * lim.engagedAt) {
          this.letGo();
          return;
        }
        const trial = lim.trial && ups > 0;
        this.hold({ ...lim, best: lim.cap, bestX: x, bestSe: se, measured: kept, ups, trial }, trial || Number.isNaN(between) ? up(lim.cap, trial) : between, s);
      } else this.hold({ ...lim, measured: kept, ups: 0, trial: false }, Number.isNaN(between) ? lim.best : between, s);
    } else if (asMuch) this.hold({ ...lim, best: lim.cap, bestX: x, bestSe: se, measured: kept, ups: 0 }, down(lim.cap), s);
    else this.hold({ ...lim, measured: kept, ups: 0 }, lim.best, s);
  }
  /**
   * Climbing down, a lower cap measured (`step`, already in `lim.measured`): a step down, or a cap
   * tried between the best and the highest that finished less. `mayRecheck`: not yet judged.
   */
  private judge(lim: PrepareLimiter, step: Measured, mayRecheck: boolean, s: ReadonlySnapshot): void {
    const asMuch = step.x >= asMuchLine(lim.measured, step.cap, step.se, NOISE_Z);
    if (Number.isNaN(lim.below)) {
      // A step down. As much only within the noise (less by more than EPS than the most measured
      // above it): that cap is measured again first, and the step judged again (`recheck`).
      const most = lim.measured.reduce<Measured | null>((m, o) => (o.cap > step.cap && (!m || o.x > m.x) ? o : m), null);
      if (mayRecheck && asMuch && most && step.x < most.x * (1 - EPS)) this.hold({ ...lim, recheck: step }, most.cap, s);
      else if (asMuch) this.hold({ ...lim, best: step.cap, bestX: step.x, bestSe: step.se }, Math.max(1, Math.floor(step.cap * STEP)), s);
      else if (this.uncontended(lim, step)) this.hold({ ...lim, settled: true, trial: true, engagedAt: lim.best, side: 1, rest: 0, ups: 0 }, 2 * lim.best, s);
      else this.split({ ...lim, below: step.cap, belowX: step.x }, s);
      return;
    }
    // A cap tried between: as much, the best; less, the highest that finished less. Where the
    // proportional one (the first) finishes less than the best itself, there is no knee between:
    // settled on the best.
    const next = asMuch ? { ...lim, best: step.cap, bestX: step.x, bestSe: step.se, tries: lim.tries + 1 } : { ...lim, below: step.cap, belowX: step.x, tries: lim.tries + 1 };
    if (lim.tries === 0 && step.x < lim.bestX * (1 - EPS - NOISE_Z * Math.hypot(step.se, lim.bestSe))) this.hold({ ...next, settled: true, side: -1 }, Math.max(next.best + 1, Math.round(next.best * PROBE)), s);
    else this.split(next, s);
  }
  /**
   * The climb down's first step finished less, and its preparations were no quicker than the
   * first measurement's (in their kinds' units, within NOISE_Z standard errors of the
   * difference): fewer preparing did not make them quicker, so nothing at these caps says they
   * contend — the take-over read something else (a heavy tail's quick first ones: the floor set
   * by them, the latency estimate then rising to the mean as the slow ones finish, while the
   * number preparing grew). The cap goes on trial (see TRIAL_DOUBLE), the first measurement's
   * standing in for the remembered limit: probes above it doubled, two gains in proportion let go,
   * one that gains less ends the trial. (Lognormal σ 1 preparations, no contention: a step from
   * 30 to 21 finished 0.62 as much at a latency 1.13 × as long, and the probes above the first
   * cap, ×1.12 each, measured ±9 %: held at 20–38 for good, a quarter to half of unpaced's
   * throughput.) Only where that noise — NOISE_Z standard errors of the difference — is more than
   * a PROBE × probe would gain: with latencies that spread little, the same step says only that
   * the knee lies above the first cap, and the probes find it (a steep knee at 24, first caps of
   * 12–22: trials there overshot to 32–44 preparing, 0.949 → 0.933 of the best fixed cap over the window's second half). Later steps do
   * not: below a knee the climb down's last step is no quicker either.
   */
  private uncontended(lim: PrepareLimiter, step: Measured): boolean {
    const first = lim.measured.find((o) => o.cap === lim.best);
    if (lim.measured.length !== 2 || !first) return false;
    const noise = NOISE_Z * Math.hypot(step.se, first.se);
    return noise > PROBE - 1 && step.level >= first.level * (1 - noise);
  }
  /**
   * Past the climb down's first step that finished less (`below`): the cap that would finish as
   * much as the best in proportion to it (rounded up: under the knee throughput falls in
   * proportion, over it only memory is spent); past a cap tried between, the geometric mean of
   * the highest that finished less and the best. Until they are within PROBE (or nothing lies
   * between): then settled on the best, probing above it.
   */
  private split(lim: PrepareLimiter, s: ReadonlySnapshot): void {
    const mid = lim.tries === 0 ? Math.ceil((lim.below * lim.bestX) / lim.belowX - 1e-9) : Math.round(Math.sqrt(lim.below * lim.best));
    if (lim.best > PROBE * lim.below && mid > lim.below && mid < lim.best) this.hold(lim, mid, s);
    else this.hold({ ...lim, settled: true, side: -1 }, Math.max(lim.best + 1, Math.round(lim.best * PROBE)), s);
  }
  private hold(lim: PrepareLimiter, cap: number, s: ReadonlySnapshot): void {
    // A cap that is not a number of preparations (a latency of 0 upstream, say) is no cap.
    if (!(cap >= 1 && Number.isFinite(cap))) {
      this.letGo();
      return;
    }
    this.state = { ...lim, cap, from: NaN, turnedAt: NaN, mark: s.prepareCompletions };
    this.cap = cap;
    this.overdueSince = NaN;
  }
  /** The kinds EARLY_SAMPLES of whose preparations have finished (on a device, waiting or done there) count as seen by the latency reference. */
  private know(s: ReadonlySnapshot, samples = EARLY_SAMPLES): void {
    for (let k = 0; k < s.kinds.length; k++) {
      const c = s.kinds[k] as ReadonlySnapshot['kinds'][number];
      let done = c.waiting + c.onDevice;
      for (const n of c.completions) done += n;
      if (done >= samples) this.known[k] = true;
    }
  }
  /** Notes the latency of the preparations finished since the last observation (their mean), if any. */
  private sample(s: ReadonlySnapshot): void {
    const done = s.prepareCompletions - this.seenCompletions;
    if (done <= 0) return;
    this.recentAt[this.recentCount % QUICK_SAMPLES] = s.now;
    this.recent[this.recentCount++ % QUICK_SAMPLES] = (s.prepareLatencyMsTotal - this.seenLatencyMs) / done;
    this.seenCompletions = s.prepareCompletions;
    this.seenLatencyMs = s.prepareLatencyMsTotal;
  }
  /** Takes over at what would finish as much as now at the floor latency (Little's law, with the latency now), at most half of those preparing. */
  private takeOver(s: ReadonlySnapshot, floor: number, floorPreparing: number, latencyNow: number): void {
    const cap = Math.max(1, Math.floor(s.preparing * Math.min(0.5, floor / latencyNow)));
    this.hold({ cap, engagedAt: s.preparing, floorMs: floor, floorPreparing, best: NaN, bestX: 0, bestSe: 0, measured: [], recheck: null, tries: 0, settled: false, below: NaN, belowX: NaN, side: -1, ups: 0, rest: 0, trial: false, from: NaN, turnedAt: NaN, mark: 0, preparingMs: 0, latencyMs: 0, latencySqMs: 0, kindMarks: [] }, cap, s);
  }
  /** Takes a look back for the collapse line, one every quarter of its `span` (none while that is no duration). */
  private look(s: ReadonlySnapshot, span: number): void {
    if (!(span > 0 && Number.isFinite(span))) return;
    const last = this.looks > 0 ? (this.lookAt[(this.looks - 1) % COLLAPSE_MARKS] as number) : -Infinity;
    if (s.now - last < span / 4) return;
    const i = this.looks++ % COLLAPSE_MARKS;
    this.lookAt[i] = s.now;
    this.lookKinds[i] = s.kinds.map((k) => ({ preparing: k.preparing, done: k.prepareCompletions }));
  }
  /**
   * Whether what finished over the last `span` collapsed (see COLLAPSE): of those of the kinds the
   * floor saw preparing a span ago — at least `many`, with UNKNOWN_GROWTH × as many as the floor's
   * `floorPreparing` preparing now — fewer than COLLAPSE_SPAN ÷ COLLAPSE finished, counting every
   * completion of those kinds since (in a span, n preparing at a latency L finish about n × span ÷
   * L). (Held against those preparing a span ago, not the mean since: a burst that has just
   * arrived has had no time to finish; and not against a few: none of five heavy-tailed ones
   * finishing in two floors says nothing.)
   */
  private collapsed(s: ReadonlySnapshot, span: number, many: number, floorPreparing: number): boolean {
    // The latest look at least a span back.
    for (let k = this.looks - 1; k >= Math.max(0, this.looks - COLLAPSE_MARKS); k--) {
      const i = k % COLLAPSE_MARKS;
      const at = this.lookAt[i] as number;
      if (s.now - at < span) continue;
      // Of the kinds the floor saw: a kind it did not may be slower alone (a 30 s kind after a
      // floor of 12 s: none of it finishes in a span of 24 s).
      let then = 0;
      let done = 0;
      (this.lookKinds[i] ?? []).forEach((k, j) => {
        if (!this.known[j]) return;
        then += k.preparing;
        done += (s.kinds[j]?.prepareCompletions ?? k.done) - k.done;
      });
      return s.preparing >= UNKNOWN_GROWTH * floorPreparing && then >= many && done * COLLAPSE < COLLAPSE_SPAN * then;
    }
    return false;
  }
  /** The quickest of the latest QUICK_SAMPLES latencies (Infinity: none). */
  private quickest(since = -Infinity): number {
    let q = Infinity;
    for (let i = 0; i < QUICK_SAMPLES; i++) if ((this.recentAt[i] as number) >= since) q = Math.min(q, this.recent[i] as number);
    return q;
  }
  /** The floor (or the lowest latency measured) was set: its quickest latencies, to hold the latest against. */
  private markQuickest(): void {
    this.floorQuickest = this.quickest();
    this.floorQuickAt = this.recentCount;
  }
  /** The share of those preparing whose kind the latency reference never saw. */
  private unknownShare(s: ReadonlySnapshot): number {
    let unknown = 0;
    for (let k = 0; k < s.kinds.length; k++) if (!this.known[k]) unknown += s.kinds[k]?.preparing ?? 0;
    return s.preparing > 0 ? unknown / s.preparing : 0;
  }
  /** The first turnover at the cap ended: the timed ones start. */
  private turn(lim: PrepareLimiter, s: ReadonlySnapshot): void {
    lim.turnedAt = s.now;
    lim.mark = s.prepareCompletions;
    lim.preparingMs = s.preparingMsTotal;
    lim.latencyMs = s.prepareLatencyMsTotal;
    lim.latencySqMs = s.prepareLatencySqTotal;
    lim.kindMarks = s.kinds.map((k) => ({ done: k.prepareCompletions, latencyMs: k.prepareLatencyMsTotal, latencySqMs: k.prepareLatencySqTotal }));
  }
  /**
   * The timed preparations' mean latency in units of each kind's own (the header's kinds' units), and its
   * relative standard error; the kinds first timed now get their unit.
   */
  private slowdown(lim: PrepareLimiter, s: ReadonlySnapshot, meanLatency: number): { mean: number; se: number } {
    const d = s.kinds.map((k, i) => {
      const m = lim.kindMarks[i] ?? { done: 0, latencyMs: 0, latencySqMs: 0 };
      return { n: k.prepareCompletions - m.done, sum: k.prepareLatencyMsTotal - m.latencyMs, sq: k.prepareLatencySqTotal - m.latencySqMs };
    });
    const timed = s.prepareCompletions - lim.mark;
    const variance = Math.max(0, (s.prepareLatencySqTotal - lim.latencySqMs) / timed - meanLatency * meanLatency);
    const seLatency = meanLatency > 0 ? Math.sqrt(variance / (timed - 1)) / meanLatency : 0;
    // Kinds that do not account for every timed preparation (a snapshot made by hand): the latencies as they are.
    if (d.reduce((a, x) => a + x.n, 0) !== timed) return { mean: meanLatency, se: seLatency };
    // The kinds with a unit set the level (none timed now: the last measurement's, the cap's
    // contention taken as unchanged; none has a unit yet: 1); a kind new to the measurements, with
    // UNIT_SAMPLES of its own, gets the unit that puts it at that level.
    const inUnits = () => {
      const t = { n: 0, sum: 0, sq: 0 };
      d.forEach((x, k) => {
        const u = this.units[k];
        if (u === undefined || x.n <= 0) return;
        t.n += x.n;
        t.sum += x.sum / u;
        t.sq += x.sq / (u * u);
      });
      return t;
    };
    const anchored = inUnits();
    const level = anchored.n > 0 ? anchored.sum / anchored.n : this.level;
    d.forEach((x, k) => {
      if (this.units[k] === undefined && x.n >= UNIT_SAMPLES && x.sum > 0 && level > 0) this.units[k] = x.sum / x.n / level;
    });
    const { n, sum, sq } = inUnits();
    // (Only kinds with too few of their own to get a unit: the last level, the spread as measured.)
    if (n === 0) return { mean: this.level, se: seLatency };
    const mean = sum / n;
    if (mean > 0 && Number.isFinite(mean)) this.level = mean;
    const spread = Math.max(0, sq / n - mean * mean);
    return { mean, se: mean > 0 && n > 1 ? Math.sqrt(spread / (n - 1)) / mean : 0 };
  }
  /** The floor proved wrong by a cap that measured `latencyMs`: it lets go, and the floor stays at least that for the busy period. */
  private floorWrong(latencyMs: number): void {
    this.floorAtLeast = latencyMs;
    this.floor = Math.max(this.floor, latencyMs);
    this.early = Math.max(this.early, latencyMs);
    this.letGo();
  }
  private letGo(): void {
    this.state = null;
    this.cap = Infinity;
    this.overdueSince = NaN;
  }
}
