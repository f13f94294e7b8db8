/** A progress bar on stderr: redrawn in place on a terminal, a line per quarter otherwise (logs stay short). */
export function progressBar(label: string): (done: number, total: number, what: string) => void {
  const tty = process.stderr.isTTY;
  let lastQuarter = -1;
  return (done, total, what) => {
    if (tty) {
      const width = 30;
      const filled = Math.round((width * done) / total);
      process.stderr.write(`\r${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total} ${what.padEnd(12)}`);
      if (done === total) process.stderr.write('\n');
    } else {
      const quarter = Math.floor((4 * done) / total);
      if (quarter !== lastQuarter) {
        lastQuarter = quarter;
        process.stderr.write(`${label}: ${done}/${total} repetitions\n`);
      }
    }
  };
}
