/**
 * The verdict that closes a replay's report (`tensorpool bench`, `tensorpool replay`): what tensorpool's routes
 * took in page faults and memory beside the peers, then their time against the fastest peer's, ranked only
 * where the interval of the paired ratios says so. A ratio whose interval holds 1 is no ranking: the verdict
 * says the machine was too noisy to tell (or, where the interval is narrow, that no difference was measured)
 * rather than give one that the next run may reverse.
 */
import { isPeer, type AllocatorName } from '../replay/allocators.js';
import type { AllocatorResult, ReplayReport } from '../replay/replay.js';
import { round } from './table.js';

/** The routes the verdict speaks for, when measured: the in-process pool and `tensorpool run`'s. */
const SUBJECTS: readonly AllocatorName[] = ['tensorpool', 'tensorpool-preload'];

/** A paired interval within this of 1 on both sides, holding 1, is a tie rather than noise. */
const TIE = 0.1;
/** The least confidence a ranking needs (20 repetitions give 5 paired ratios: 94%). */
const RANKING_CONFIDENCE = 0.9;

const NAMES: Partial<Record<AllocatorName, string>> = { malloc: 'glibc malloc' };
const nameOf = (allocator: AllocatorName): string => NAMES[allocator] ?? allocator;

/** A count of faults: whole with thousands separated, one decimal below 10. */
function count(value: number): string {
  return value < 10 ? String(round(value, 1)) : Math.round(value).toLocaleString('en-US');
}

/** "1.03x": a ratio with enough digits to tell it from its neighbours (two significant below 0.1). */
function times(ratio: number): string {
  return `${ratio >= 10 ? ratio.toFixed(1) : ratio >= 0.1 ? ratio.toFixed(2) : ratio.toPrecision(2)}x`;
}

/** Faults and memory: in full for the first allocator named, in short for the rest. */
function memory(r: AllocatorResult, first: boolean): string {
  return first
    ? `${count(r.steadyMinorFaultsPerRep)} page faults a repetition, memory ${times(r.rssVsLowerBound)} the trace's lower bound`
    : `${count(r.steadyMinorFaultsPerRep)} faults, ${times(r.rssVsLowerBound)}`;
}

/** How `r` ranks against the fastest peer, from the interval of their paired ratios. */
function time(r: AllocatorResult, peer: AllocatorName): string {
  const ratio = r.vsBestPeer!;
  const interval = r.vsBestPeerInterval;
  const against = `${nameOf(peer)}, the fastest peer here`;
  if (!interval || !(interval.confidence >= RANKING_CONFIDENCE)) {
    return `time: ${r.allocator} at ${times(ratio)} ${nameOf(peer)}'s, from too few repetitions to rank (the default --reps 20 are enough)`;
  }
  const bounds = `${Math.floor(100 * interval.confidence)}% interval of the paired ratios ${times(interval.low)}-${times(interval.high)}`;
  if (interval.high < 1) return `time: ${r.allocator} faster than ${against}: ${times(ratio)} its time (${bounds})`;
  if (interval.low > 1) return `time: ${r.allocator} slower than ${against}: ${times(ratio)} its time (${bounds})`;
  if (interval.low >= 1 - TIE && interval.high <= 1 + TIE) {
    return `time: no difference measured between ${r.allocator} and ${against} (${times(ratio)}; the ${bounds} holds 1)`;
  }
  return `time: too noisy to rank ${r.allocator} against ${against}: the ${bounds} holds 1 (a busy machine: run again with more --reps, or when it is quieter)`;
}

/**
 * The verdict's lines: the headline (tensorpool's first route against glibc's malloc, or the first peer
 * measured), the other routes and peers, then each route's time against the fastest peer.
 */
export function replayVerdict(report: ReplayReport): string[] {
  const measured = report.results.filter((r) => r.available);
  let subjects = measured.filter((r) => SUBJECTS.includes(r.allocator));
  if (subjects.length === 0) subjects = measured.filter((r) => r.allocator.startsWith('tensorpool')).slice(0, 1);
  if (subjects.length === 0) return [];
  const peers = measured.filter((r) => isPeer(r.allocator));
  const baseline = peers.find((r) => r.allocator === 'malloc') ?? peers[0];
  const headline = [subjects[0], ...(baseline ? [baseline] : [])];
  const others = [...subjects.slice(1), ...peers.filter((r) => r !== baseline)];
  const lines = [headline.map((r, i) => `${nameOf(r.allocator)}: ${memory(r, i === 0)}`).join('; ')];
  if (others.length) lines.push(`also ${others.map((r) => `${nameOf(r.allocator)}: ${memory(r, false)}`).join('; ')}`);
  for (const r of subjects) lines.push(report.bestPeer && r.vsBestPeer !== null ? time(r, report.bestPeer) : 'time: no peer ran to compare with');
  return lines;
}
