// What an app run by bench/app-bench.ts reports of itself: RSS and peak RSS (VmHWM), minor page faults and the
// time, read from /proc/self at the moment of the call.
import fs from 'node:fs';

function status() {
  const text = fs.readFileSync('/proc/self/status', 'utf8');
  const kb = (key) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(text)[1]) * 1024;
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}

function minorFaults() {
  const stat = fs.readFileSync('/proc/self/stat', 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[7]); // field 10, minflt
}

export const snapshot = () => ({ ...status(), faults: minorFaults(), ms: performance.now() });
