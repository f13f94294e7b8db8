// Runs inside a process started by `tensorpool run` (test/preload.test.ts): does what argv[2] names and
// prints one JSON line with what it saw.
const { processPool, measureFaults, memoryUsage, parseTrace, readTrace, syntheticTrainingTrace, train } = require('../../dist/index.js');
const { native } = require('../../dist/native.js');

const task = process.argv[2];
const pool = processPool();
const out = { pool: pool && { mode: pool.mode, minBytes: pool.minBytes } };
let pending = null; // the promise of a task that awaits (adaptive mode's background work)

// A replay of a trace through the C library's malloc family (posix_memalign / free), as a runtime makes it,
// every page touched. It marks no iteration of the process pool (unmarked): the tasks mark their own, as the
// program they stand for would (the replayer marks the pool at each run's start otherwise).
function libcReplayer(trace) {
  return new native.NativeReplayer('libc', trace.ops, trace.eventBuffer, trace.sizes, { touch: 'pages', iterationMarks: false, unmarked: true });
}

function replayerOf(file) {
  const trace = readTrace(file);
  return { trace, replayer: libcReplayer(trace) };
}

// One write per 4 KiB page of a Float32Array.
function touchPages(x) {
  for (let i = 0; i < x.length; i += 1024) x[i] = i;
}

// `loop` once to warm up, then five measured rounds: each one's minor faults, and the pool's counters around
// them (with the allocations they made and how many of them a block of the pool served: its own class's or a
// larger one's, whichever was free; which one is the pool's business).
function measuredRounds(loop) {
  loop();
  const before = pool.stats();
  const faults = [0, 1, 2, 3, 4].map(() => measureFaults(loop).minor);
  const after = pool.stats();
  const served = after.hits + after.borrows - before.hits - before.borrows;
  return { faults, before, after, allocs: after.allocs - before.allocs, served };
}

if (task === 'float32') {
  const { faults, before, after, allocs, served } = measuredRounds(() => {
    for (let k = 0; k < 4; k++) touchPages(new Float32Array(4 << 20));
    global.gc();
  });
  Object.assign(out, { faults, allocs, served });
  out.osFallbacks = after.osFallbacks + after.osOversize - before.osFallbacks - before.osOversize;
} else if (task === 'after-trim') {
  // After a mark, four buffers of 16 MiB from malloc (processPool().alloc()), written and released; the pool trimmed
  // (malloc_trim); four more: their pages fault in again unless the trim left the first ones' memory resident.
  const round = () => {
    const buffers = [0, 1, 2, 3].map(() => new Float32Array(pool.alloc(16 << 20)));
    for (const x of buffers) touchPages(x);
    for (const x of buffers) pool.release(x);
  };
  pool.markIteration(); // start-up is over: a plan's span reserve keeps what is written in it from here
  round();
  out.trimmed = pool.trim();
  const before = pool.stats();
  out.faults = measureFaults(round).minor;
  const after = pool.stats();
  out.allocs = after.allocs - before.allocs;
  out.served = after.hits + after.borrows - before.hits - before.borrows;
  out.osFallbacks = after.osFallbacks + after.osOversize - before.osFallbacks - before.osOversize;
} else if (task === 'alloc') {
  // processPool().alloc(): 16 MiB ArrayBuffers from malloc, released at once (no garbage collection here).
  const live = () => pool.stats().liveBlocks;
  const { faults, before, after, allocs, served } = measuredRounds(() => {
    for (let k = 0; k < 4; k++) {
      const x = new Float32Array(pool.alloc(16 << 20));
      touchPages(x);
      pool.release(x);
    }
  });
  Object.assign(out, { faults, allocs, served });
  out.liveAfterLoops = after.liveBlocks - before.liveBlocks;
  const kept = pool.alloc(1 << 20);
  out.liveWithOne = live() - after.liveBlocks;
  pool.release(kept);
  out.keptLength = kept.byteLength; // detached
  out.liveAfterRelease = live() - after.liveBlocks;
  // A buffer whose memory moved to another one (structuredClone's transfer, as postMessage): its release
  // would free nothing, and says so.
  const moved = pool.alloc(1 << 20);
  structuredClone(moved, { transfer: [moved] });
  try {
    pool.release(moved);
    out.releaseMoved = 'released';
  } catch (error) {
    out.releaseMoved = `${error.code}: ${error.message}`;
  }
} else if (task === 'heap-top') {
  // An 8 MiB block (the pool's: run with a threshold of 1 MiB), then 16 blocks of 256 KiB (the C library's),
  // all live, then all freed: 4 MiB free at the top of glibc's heap at the end of every repetition, kept
  // below a trim threshold of twice 8 MiB (glibc's own, had it mapped and freed the 8 MiB), or, above glibc's
  // mmap threshold, unmapped block by block.
  let csv = 'op,id,size,stream\na,16,8388608,0\nf,16,,0\n';
  for (let i = 0; i < 16; i++) csv += `a,${i},262144,0\n`;
  for (let i = 0; i < 16; i++) csv += `f,${i},,0\n`;
  const trace = parseTrace(Buffer.from(csv), 'heap-top.csv');
  const replayer = libcReplayer(trace);
  replayer.run(false);
  out.faults = [0, 1, 2, 3, 4].map(() => measureFaults(() => replayer.run(false)).minor);
} else if (task === 'record') {
  // The pool records from the start of the process (tensorpool run --record): the replay is iteration 2.
  const { trace, replayer } = replayerOf(process.argv[3]);
  pool.markIteration();
  replayer.run(false);
  pool.markIteration();
  const whole = pool.stopRecording();
  out.iterations = whole.summary().iterations;
  const recorded = whole.iteration(2);
  out.wholeAllocs = Array.from(whole.ops).filter((op) => op === 0).length;
  // Events of buffers the pool serves, as sizes (negative for a free): the trace's, and what the pool recorded
  // of the main thread's buffers (stream 0; V8's background threads allocate meanwhile).
  const served = (t, min, mainThreadOnly) => {
    const events = [];
    const mainThread = new Set();
    for (let e = 0; e < t.ops.length; e++) {
      const buffer = t.eventBuffer[e];
      const bytes = t.sizes[buffer];
      if (t.ops[e] === 2 || bytes < min) continue;
      if (t.ops[e] === 0 && (!mainThreadOnly || t.eventStream[e] === 0)) mainThread.add(buffer);
      if (mainThread.has(buffer)) events.push(t.ops[e] === 0 ? bytes : -bytes);
    }
    return events;
  };
  out.expected = served(trace, pool.minBytes, false);
  out.recorded = served(recorded, 0, true);
  out.otherThreads = Array.from(recorded.eventStream).filter((s, e) => recorded.ops[e] === 0 && s !== 0).length;
  train(recorded).write(process.argv[4]);
} else if (task === 'planned') {
  const { replayer } = replayerOf(process.argv[3]);
  pool.markIteration();
  const before = pool.stats();
  replayer.run(false);
  const after = pool.stats();
  out.allocs = after.allocs - before.allocs;
  out.osFallbacks = after.osFallbacks + after.osOversize - before.osFallbacks - before.osOversize;
  out.liveBefore = before.liveBlocks;
} else if (task === 'adaptive') {
  // tensorpool run --adaptive: the trace replayed through malloc/free as iterations, marked from here; between
  // iterations the loop waits for what adaptive mode does in the background (training on a worker thread
  // that allocates through this same process pool, then building the arena).
  const { replayer } = replayerOf(process.argv[3]);
  out.modes = [];
  out.osFallbacks = [];
  out.allocs = [];
  pending = (async () => {
    for (let i = 0; i < 8; i++) {
      const before = pool.stats();
      replayer.run(false);
      pool.markIteration();
      const after = pool.stats();
      out.modes.push(after.adaptive.mode);
      out.osFallbacks.push(after.osFallbacks + after.osOversize - before.osFallbacks - before.osOversize);
      out.allocs.push(after.allocs - before.allocs);
      await pool.adaptiveReady();
    }
    const { switches, lastSwitch, lastError } = pool.stats().adaptive;
    out.adaptive = { switches, trainedOn: lastSwitch && lastSwitch.trainedOn, lastError };
  })();
} else if (task === 'residency') {
  // Memory resident only once used, and calloc of fresh memory writing nothing.
  const rss = () => process.memoryUsage().rss;
  let before = rss();
  const untouched = [];
  for (let i = 0; i < 1000; i++) untouched.push(pool.alloc(100 << 10));
  out.untouchedGrowth = rss() - before;
  for (const x of untouched) pool.release(x);
  before = rss();
  const zeros = new Uint8Array(1 << 30); // calloc(1 GiB)
  out.callocGrowth = rss() - before;
  out.callocZero = zeros[0] === 0 && zeros[zeros.length - 1] === 0 && zeros[123456789] === 0;
} else if (task === 'idle') {
  // 200 MiB written and freed, then idle, making no call of the pool (decay's thread gives back what a program
  // with threads leaves idle), until as much went back as the test asks (after the decay period the test sets,
  // and an epoch after it) or 30 s passed. In a process of its own: memory that decay gave back while other
  // work ran on a loaded machine, then handed out again, doubles its period; a call of the pool while idle would
  // do so too, as the block it took would be one given back.
  const MiB = 1 << 20;
  const rss = () => process.memoryUsage().rss;
  const sleep = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
  const used = [];
  for (let i = 0; i < 200; i++) {
    const x = new Float32Array(pool.alloc(MiB));
    touchPages(x);
    used.push(x);
  }
  for (const x of used) pool.release(x);
  const freed = rss();
  const purgedBefore = pool.stats().purgedBytes;
  const idleFrom = Date.now();
  do {
    sleep(50);
    out.purgedBytes = pool.stats().purgedBytes - purgedBefore;
    out.decayDrop = freed - rss();
  } while ((out.purgedBytes < 190 * MiB || out.decayDrop <= 150 * MiB) && Date.now() < idleFrom + 30_000);
  out.idleMs = Date.now() - idleFrom;
} else if (task === 'varying') {
  // A loop whose shapes vary, as an inference service's or a training loop's batches do: five batch sizes (a
  // synthetic training step each, replayed through malloc/free, every page touched) in a cycle, one mark a
  // step. Memory one shape freed must serve the next: the arena holds about the largest shape's live peak,
  // not every size's own peak. A warm-up cycle, then three measured ones.
  const shapes = [1, 2, 3, 5, 6].map((batchScale) => {
    const trace = syntheticTrainingTrace({ layers: 8, iterations: 1, seed: 5, batchScale, maxActivation: 2 << 20 });
    return libcReplayer(trace);
  });
  const cycle = () => {
    for (const k of [0, 3, 1, 4, 2]) {
      shapes[k].run(false);
      pool.markIteration();
    }
  };
  cycle();
  const warm = pool.stats();
  const rssWarm = process.memoryUsage().rss;
  out.faults = [0, 1, 2].map(() => measureFaults(cycle).minor);
  const after = pool.stats();
  out.rssGrowth = process.memoryUsage().rss - rssWarm;
  out.allocs = after.allocs - warm.allocs;
  out.served = after.hits + after.borrows - warm.hits - warm.borrows;
  out.grown = after.grown - warm.grown;
  out.osFallbacks = after.osFallbacks + after.osOversize;
  out.arenaBytes = after.arenaBytes;
  out.peakBytesLive = after.peakBytesLive;
} else if (task === 'shapes') {
  // An app that only marks its iterations (no mode given to tensorpool run): a cycle of three input shapes
  // (batch sizes) replayed through malloc/free, touching every page, for 18 iterations, then two shapes it
  // has not seen for 12. Per iteration: adaptive mode's state, the OS fallbacks it took and RSS after it.
  const shapes = [1, 2, 3, 5, 6].map((batchScale) => {
    const trace = syntheticTrainingTrace({ layers: 8, iterations: 1, seed: 3, batchScale });
    return libcReplayer(trace);
  });
  const order = [...Array.from({ length: 18 }, (_, i) => i % 3), ...Array.from({ length: 12 }, (_, i) => 3 + (i % 2))];
  out.iterations = [];
  pending = (async () => {
    for (const k of order) {
      const before = pool.stats();
      shapes[k].run(false);
      pool.markIteration();
      const after = pool.stats();
      out.iterations.push({
        mode: after.adaptive ? after.adaptive.mode : null,
        generation: after.generation,
        osFallbacks: after.osFallbacks + after.osOversize - before.osFallbacks - before.osOversize,
        rss: memoryUsage().rss,
      });
      await pool.adaptiveReady(); // the app waits for the background (at once without --adaptive)
    }
    const a = pool.stats().adaptive;
    out.lastError = a && a.lastError;
    out.switches = a ? a.history.map((h) => ({ iteration: h.iteration, reason: h.reason, patterns: h.trigger ? h.trigger.newPattern : null })) : [];
  })();
}
Promise.resolve(pending).then(() => console.log(JSON.stringify(out)));
