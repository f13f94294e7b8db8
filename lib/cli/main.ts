#!/usr/bin/env node
/**
 * The tensorpool command line. Each subcommand lives in its own file; this one dispatches, prints help,
 * and turns errors into messages: bad input ends with `tensorpool: <what is wrong>` and exit code 2, never a
 * stack trace.
 */
import { TensorPoolError } from '../errors.js';
import { CliError, withExamples, type Command } from './common.js';
import { useLauncherOutput } from './exec.js';
import { infoCommand } from './info.js';
import { planCommand } from './plan.js';
import { benchCommand, replayCommand } from './replay.js';
import { runCommand } from './run.js';
import { statsCommand } from './stats.js';
import { closest } from './suggest.js';
import { trainCommand } from './train.js';

const commands: Command[] = [benchCommand, replayCommand, trainCommand, planCommand, infoCommand, runCommand, statsCommand];

function help(): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  const usage = [
    'usage: tensorpool <command> [options]',
    '       tensorpool -v, --version',
    '',
    'commands:',
    ...commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    '',
    "Run 'tensorpool <command> --help' for a command's options and examples.",
  ].join('\n');
  return withExamples(usage, [
    { what: 'the bundled training-step trace against tensorpool and every allocator here (npm start)', command: 'tensorpool bench' },
    { what: 'a program under the process pool, its counters printed at exit', command: 'tensorpool run --stats -- node app.js' },
    { what: 'record a run and train a plan from the recording', command: 'tensorpool run --record app.csv -- node app.js && tensorpool train app.csv -o app.plan.json' },
    { what: 'run with the plan: its classes and schedule from the start', command: 'tensorpool run --plan app.plan.json -- node app.js' },
  ]);
}

/** What the first argument names when it is no command: a mistyped command or option, said in one line. */
function unknownCommand(name: string): CliError {
  if (name.startsWith('-')) {
    const match = closest(name, ['--help', '--version']);
    return new CliError(`unknown option '${name}'${match ? `: did you mean ${match}?` : ''} ('tensorpool --help' lists the commands)`);
  }
  const match = closest(name, commands.map((c) => c.name));
  return new CliError(
    match
      ? `unknown command '${name}': did you mean ${match}? ('tensorpool --help' lists the commands)`
      : `unknown command '${name}'; the commands are ${commands.map((c) => c.name).join(', ')} ('tensorpool --help' says what each does)`,
  );
}

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    console.log(help());
    return name === undefined ? 2 : 0;
  }
  if (name === '--version' || name === '-v') {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    console.log(require('../../package.json').version);
    return 0;
  }
  const command = commands.find((c) => c.name === name);
  try {
    if (!command) throw unknownCommand(name);
    const code = await command.run(rest);
    return typeof code === 'number' ? code : 0;
  } catch (error) {
    if (error instanceof CliError) {
      console.error(`tensorpool: ${error.message}`);
      return error.exitCode;
    }
    // Our own errors, and the system's (a file that cannot be read or written: the environment, not a bug).
    if (error instanceof TensorPoolError || (error as { code?: string }).code === 'ERR_TP_INVALID_ARGUMENT' || (error as NodeJS.ErrnoException).syscall) {
      console.error(`tensorpool: ${(error as Error).message}`);
      return 2;
    }
    throw error;
  }
}

if (require.main === module) {
  useLauncherOutput(process.env);
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (error) => {
      console.error(error);
      process.exitCode = 70; // an internal error: a bug, so the stack trace is worth having
    },
  );
}
