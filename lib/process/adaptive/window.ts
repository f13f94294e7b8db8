/**
 * Adaptive mode's window: the latest `recordLimit` iterations, their events held by the native recorder
 * (native/core/recorder.h), each with its pattern (allocations and requested bytes) and the blocks live as it
 * began; and what "the same pattern" is. Iterations with no allocation are not in it. When the recorder
 * fills up (maxRecordEvents) the window starts over from the next iteration. One window belongs to one
 * Adaptation, on the pool's thread.
 */
import type { NativeControlledPool, NativeIterationSummary, NativeRecording } from '../../native.js';
import type { Settings } from './options.js';

/** An iteration's pattern: what tells input shapes apart. */
export interface Pattern {
  allocs: number;
  bytes: number;
}

/** Allocations by which an iteration may differ from its pattern's (other threads' strays). */
const STRAY_ALLOCATIONS = 2;

/**
 * The same pattern: within 2% (or two) in allocations and within 2% in bytes. An iteration with a stray
 * allocation or two (a thread or a one-off buffer of a process recorded under the preload library) still
 * counts as its pattern's, in an iteration of a few dozen allocations too; training lays out what was
 * recorded, and the schedule lets such strays miss alone.
 */
export function nearPattern(a: Pattern, b: Pattern): boolean {
  const near = (x: number, y: number) => Math.abs(x - y) <= 0.02 * Math.max(x, y);
  return (near(a.allocs, b.allocs) || Math.abs(a.allocs - b.allocs) <= STRAY_ALLOCATIONS) && near(a.bytes, b.bytes);
}

/** A recorded iteration: the number of its first recorded event, its pattern, and the blocks live as it began. */
interface Recorded {
  from: number;
  pattern: Pattern;
  carried: number;
}

/** What a mark tells the window: the blocks carried into the iteration that ended, and whether the window had to start over. */
export interface Marked {
  carried: number;
  /** Why the window started over at this mark (the recorder filled up), or null. */
  restarted: string | null;
}

export class IterationWindow {
  readonly #native: NativeControlledPool;
  readonly #settings: Settings;
  #on = false; // recording (not during the warm-up)
  #since = 0; // the recorder has run without a gap since this event number
  #recorded: Recorded[] = []; // oldest first, at most recordLimit
  #nextStart = 0; // recorder event number at which the iteration under way began
  #carried = 0; // blocks live at the last mark: carried into the iteration under way

  constructor(nativePool: NativeControlledPool, settings: Settings) {
    this.#native = nativePool;
    this.#settings = settings;
  }

  /** Iterations in the window. */
  get length(): number {
    return this.#recorded.length;
  }

  /** Whether the window holds recordLimit iterations. */
  get full(): boolean {
    return this.#recorded.length === this.#settings.recordLimit;
  }

  /** The window starts (again) at event `from`, empty. */
  start(from: number): void {
    this.#on = true;
    this.#recorded = [];
    this.#since = from;
    this.#native.discardRecording(from);
    this.#native.startRecording(this.#settings.maxRecordEvents);
  }

  /**
   * A mark: the iteration that ended (summed up in `s`) joins the window if it allocated and the window
   * records, and the oldest leaves it past recordLimit; their events are discarded.
   */
  mark(s: NativeIterationSummary): Marked {
    const started = this.#nextStart;
    this.#nextStart = s.recorderEnd;
    const carried = this.#carried;
    this.#carried = s.liveBlocks;
    if (s.allocs === 0 || !this.#on) return { carried, restarted: null };
    if (!this.#native.recordingState().on) {
      // The recorder filled up (maxRecordEvents) and stopped: the window starts over from here.
      this.start(s.recorderEnd);
      const { maxRecordEvents } = this.#settings;
      return { carried, restarted: `the window held more than ${maxRecordEvents} events (raise adaptive.maxRecordEvents or lower adaptive.recordLimit)` };
    }
    if (started < this.#since) return { carried, restarted: null }; // began before the recorder did
    this.#recorded.push({ from: started, pattern: { allocs: s.allocs, bytes: s.bytes }, carried });
    if (this.#recorded.length > this.#settings.recordLimit) this.#recorded.shift();
    this.#native.discardRecording(this.#recorded[0].from);
    return { carried, restarted: null };
  }

  /** No plan yet: whether the window holds enough to train the first one. */
  learnt(): boolean {
    const recorded = this.#recorded;
    if (recorded.length === 0) return false;
    const latest = recorded[recorded.length - 1].pattern;
    return (
      this.occurrences(latest) >= this.#settings.stableIterations ||
      this.patterns().length >= this.#settings.maxPatterns ||
      recorded.length >= this.#settings.recordLimit
    );
  }

  /** The iterations of the window whose pattern is `pattern`'s. */
  occurrences(pattern: Pattern): number {
    return this.#recorded.filter((r) => nearPattern(r.pattern, pattern)).length;
  }

  /** The different patterns of the window, each once; with `times`, those it holds at least that often. */
  patterns(times = 1): Pattern[] {
    const counts: { pattern: Pattern; n: number }[] = [];
    for (const r of this.#recorded) {
      const seen = counts.find((c) => nearPattern(c.pattern, r.pattern));
      if (seen) seen.n++;
      else counts.push({ pattern: r.pattern, n: 1 });
    }
    return counts.filter((c) => c.n >= times).map((c) => c.pattern);
  }

  /** The most blocks live at the start of one of the window's iterations. */
  maxCarried(): number {
    return Math.max(0, ...this.#recorded.map((r) => r.carried));
  }

  /** A copy of the window's events, and its name: the iterations it holds, the last being `last`. */
  copy(last: number): { recording: NativeRecording; name: string } {
    const recording = this.#native.copyRecording(this.#recorded[0].from);
    return { recording, name: `recorded iterations ${last - this.#recorded.length + 1}-${last}` };
  }
}
