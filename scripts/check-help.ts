// Every bench and script answers --help with its usage and runs nothing else: each file found (bench/*.ts
// that no other bench imports, bench/*.sh, scripts/*.{sh,ts,py}) is run with --help and must exit 0 within
// LIMIT_MS, printing "usage", with nothing on stderr. Files are discovered, so a new bench is checked too.
//   usage: npm run test:help (npx tsx scripts/check-help.ts) [--help]
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const root = path.resolve(__dirname, '..');
const LIMIT_MS = 30_000;
const RUNNERS: Record<string, string[]> = {
  '.ts': [process.execPath, path.join(root, 'node_modules/tsx/dist/cli.mjs')],
  '.sh': ['sh'],
  '.py': ['python3'],
};

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  console.log(fs.readFileSync(__filename, 'utf8').split('\n').filter((l) => l.startsWith('//')).map((l) => l.replace(/^\/\/ ?/, '')).join('\n'));
  process.exit(0);
}

/** The benches and scripts a user runs: a bench file that another bench imports is a module (harness.ts). */
function discover(): string[] {
  const list = (dir: string) => fs.readdirSync(path.join(root, dir)).sort().map((name) => `${dir}/${name}`);
  const bench = list('bench');
  const imported = (file: string) => bench.some((other) => other.endsWith('.ts') && fs.readFileSync(path.join(root, other), 'utf8').includes(`from './${path.basename(file, '.ts')}.js'`));
  return [
    ...bench.filter((f) => (f.endsWith('.ts') && !imported(f)) || f.endsWith('.sh')),
    ...list('scripts').filter((f) => /\.(sh|ts|py)$/.test(f)),
  ];
}

interface Outcome {
  file: string;
  problem?: string;
  skipped?: string;
  ms: number;
}

function check(file: string): Promise<Outcome> {
  const [command, ...args] = RUNNERS[path.extname(file)];
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(command, [...args, file, '--help'], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), LIMIT_MS);
    // A runner that is not installed (python3) is said, not failed: that script cannot run here at all.
    child.on('error', (error: NodeJS.ErrnoException) =>
      resolve({ file, problem: error.code === 'ENOENT' ? undefined : error.message, skipped: error.code === 'ENOENT' ? `${command} not found` : undefined, ms: Date.now() - started }),
    );
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const ms = Date.now() - started;
      const problem =
        signal === 'SIGKILL' ? `still running after ${LIMIT_MS / 1000} s: --help ran the work`
        : code !== 0 ? `exit code ${code ?? signal}: ${stderr.trim().split('\n').slice(-2).join(' | ')}`
        : !/usage/i.test(stdout) ? 'printed no usage'
        : stderr.trim() ? `wrote to stderr: ${stderr.trim().split('\n')[0]}`
        : undefined;
      resolve({ file, problem, ms });
    });
  });
}

async function main(): Promise<void> {
  const files = discover();
  const queue = [...files];
  const outcomes: Outcome[] = [];
  // Two at a time: the CI machine has two cores.
  await Promise.all([0, 1].map(async () => {
    for (let file = queue.shift(); file !== undefined; file = queue.shift()) outcomes.push(await check(file));
  }));
  const failed = outcomes.filter((o) => o.problem);
  for (const o of failed) console.error(`check-help: ${o.file}: ${o.problem}`);
  for (const o of outcomes) if (o.skipped) console.log(`check-help: ${o.file}: SKIPPED (${o.skipped})`);
  const slowest = outcomes.reduce((a, b) => (b.ms > a.ms ? b : a));
  console.log(`check-help: ${outcomes.length - failed.length - outcomes.filter((o) => o.skipped).length} of ${files.length} benches and scripts answer --help (slowest ${slowest.file}, ${slowest.ms} ms)`);
  if (failed.length) process.exitCode = 1;
}

void main();
