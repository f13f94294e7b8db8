import { readTrace } from '../trace/read.js';
import { AUTO_INTERVALS, train, type TrainCandidate, type TrainOrder } from '../train.js';
import { formatBytes, formatTable, round } from '../report/table.js';
import { CliError, bytesOption, integerOption, oneOf, onePositional, parseCommand, writeJsonFile, type Command } from './common.js';

const usage = `usage: tensorpool train <trace> [-o plan.json] [--interval auto|BYTES] [--order alloc-time|size-desc|auto]
                        [--refine on|off] [--iteration N|all] [--json FILE]

Trains a size-class plan (S0) from a trace and prints the lower bound, the arena it needs, their ratio,
the classes and blocks, and the training time.

  -o, --output FILE   write the plan JSON (load it with new Pool({ plan: FILE }) or --plan FILE)
  --interval          size-class interval in bytes (4096, 64K), or auto: try ${AUTO_INTERVALS.map((i) => (i >= 1024 ? i / 1024 + 'K' : i)).join(', ')}
                      and keep the smallest arena (default auto)
  --order             traversal order: alloc-time (S0's default), size-desc, or auto: both (default alloc-time)
  --refine            on: after S0, lower the arena by moving tensors between classes (a class needs only
                      as many blocks as it has tensors living at once); off: S0 literally (default: on
                      with --order auto, else off)
  --iteration         train on iteration N (1-based) or on the whole trace (default all)
  --json FILE         write { lowerBound, arenaBytes, ratio, interval, order, classes, blocks, borrows, trainMs, refined,
                      literalArenaBytes, ... }`;

export const trainCommand: Command = {
  name: 'train',
  summary: 'train a size-class plan (S0) from a trace',
  usage,
  run(argv) {
    const { values, flags, positionals } = parseCommand(
      argv,
      {
        output: { type: 'string', short: 'o' },
        interval: { type: 'string' },
        order: { type: 'string' },
        refine: { type: 'string' },
        iteration: { type: 'string' },
        json: { type: 'string' },
      },
      usage,
      ['output', 'json'],
    );
    if (flags.help) return void console.log(usage);
    const path = onePositional(positionals, 'trace file', usage);
    const interval = values.interval === undefined || values.interval === 'auto' ? 'auto' : bytesOption(values.interval, '--interval');
    const order = oneOf<TrainOrder | 'auto'>(values.order, '--order', ['alloc-time', 'size-desc', 'auto'], 'alloc-time');
    const trace = readTrace(path);
    const iteration = values.iteration === undefined || values.iteration === 'all' ? 'all' : integerOption(values.iteration, '--iteration', 1);
    if (iteration !== 'all' && iteration > trace.iterations) {
      throw new CliError(`--iteration ${iteration}: the trace has ${trace.iterations} iteration(s)`);
    }
    const refine = values.refine === undefined ? undefined : oneOf(values.refine, '--refine', ['on', 'off'], 'off') === 'on';
    const plan = train(trace, { interval, order, iteration, refine });
    const t = plan.training;
    const candidates = (t.candidates as TrainCandidate[] | undefined) ?? [];

    console.log(`trace        ${path} (${trace.format}, ${trace.eventCount} events, ${trace.bufferCount} buffers, ${trace.iterations} iteration(s))`);
    console.log(`trained on   ${iteration === 'all' ? 'the whole trace' : `iteration ${iteration}`}, order ${t.order}, interval ${plan.interval}${interval === 'auto' ? ' (auto)' : ''}`);
    console.log(`lower bound  ${formatBytes(plan.lowerBound!)} (${plan.lowerBound} B)`);
    console.log(`arena        ${formatBytes(plan.arenaBytes)} (${plan.arenaBytes} B, ${round(plan.ratio!, 3)}x the lower bound)`);
    if (t.refined) {
      const literal = t.literalArenaBytes as number;
      console.log(`refined      from S0's ${formatBytes(literal)} (${round(literal / plan.lowerBound!, 3)}x the lower bound)`);
    }
    console.log(`classes      ${plan.classes.length} classes, ${plan.blocks} blocks; ${t.borrows} of ${t.tensors} tensors borrow a larger class`);
    console.log(`time         ${round(t.trainMs as number, 1)} ms`);
    console.log('');
    console.log(formatTable(['class size', 'blocks', 'bytes'], plan.classes.map((c) => [c.size, c.blocks, formatBytes(c.size * c.blocks)])));
    if (candidates.length > 1) {
      console.log('');
      console.log(formatTable(
        ['interval', 'order', 'classes', 'blocks', 'arena', 'x lower bound', 'S0 alone', 'borrows', 'ms'],
        candidates.map((c) => [
          c.interval,
          c.order,
          c.classes,
          c.blocks,
          formatBytes(c.arenaBytes),
          round(c.ratio, 3),
          c.refined ? round(c.literalArenaBytes / plan.lowerBound!, 3) : '–',
          c.borrows,
          round(c.trainMs, 1),
        ]),
      ));
    }
    if (values.output) {
      plan.write(values.output);
      console.log(`\nwrote ${values.output}`);
    }
    writeJsonFile(values.json, {
      trace: path,
      lowerBound: plan.lowerBound,
      arenaBytes: plan.arenaBytes,
      ratio: plan.ratio,
      interval: plan.interval,
      order: t.order,
      iteration,
      classes: plan.classes,
      blocks: plan.blocks,
      borrows: t.borrows,
      tensors: t.tensors,
      trainMs: t.trainMs,
      refined: t.refined ?? false,
      literalArenaBytes: t.literalArenaBytes ?? plan.arenaBytes,
      candidates,
    });
  },
};
