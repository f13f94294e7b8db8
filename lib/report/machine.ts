/** A one-line description of the machine a measurement ran on, for tables and JSON. */
import os from 'node:os';

/** The machine a measurement ran on: CPUs, memory, kernel, Node.js. */
export interface MachineInfo {
  cpus: number;
  cpuModel: string;
  memoryBytes: number;
  kernel: string;
  node: string;
}

export function machineInfo(): MachineInfo {
  const cpus = os.cpus();
  return {
    cpus: cpus.length,
    cpuModel: cpus[0]?.model.trim() ?? 'unknown',
    memoryBytes: os.totalmem(),
    kernel: `${os.type()} ${os.release()}`,
    node: process.version,
  };
}

export function describeMachine(m: MachineInfo = machineInfo()): string {
  return `${m.cpus} x ${m.cpuModel}, ${Math.round(m.memoryBytes / 2 ** 30)} GiB, ${m.kernel}, Node ${m.node}`;
}
