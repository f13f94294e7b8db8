// An HTTP inference server as users write one, knowing nothing of tensorpool (bench/service.ts runs it
// under each configuration): node:http on loopback, SERVICE_WORKERS worker_threads each holding an
// onnxruntime-node session of SERVICE_MODEL. GET /infer?dims=1x3x640x640 makes the request's input of
// those dims (deterministic values, as an image or a tokenised text would give), runs it on the least
// busy worker and answers {"checksum": ...} (the first output's sum). Environment:
//   SERVICE_MODEL      the .onnx file            SERVICE_WORKERS  worker threads (default 2)
//   SERVICE_THREADS    intra-op threads a session (default 1)
//   ORT_ARENA=0        enableCpuMemArena: false  ORT_MEM_PATTERN=0  enableMemPattern: false
// Prints one line {"port": P, "pid": PID} once every session is made and it listens; SIGTERM or SIGINT end
// it (exit code 0).
const http = require('node:http');
const { Worker, isMainThread, parentPort } = require('node:worker_threads');

if (!isMainThread) {
  const ort = require('onnxruntime-node');
  const options = { intraOpNumThreads: Number(process.env.SERVICE_THREADS || 1) };
  if (process.env.ORT_ARENA === '0') options.enableCpuMemArena = false;
  if (process.env.ORT_MEM_PATTERN === '0') options.enableMemPattern = false;
  const ready = ort.InferenceSession.create(process.env.SERVICE_MODEL, options);
  ready.then(() => parentPort.postMessage({ ready: true }), (error) => parentPort.postMessage({ error: String(error) }));
  parentPort.on('message', async ({ id, dims }) => {
    try {
      const session = await ready;
      const name = session.inputNames[0];
      const type = session.inputMetadata?.[0]?.type ?? 'float32';
      const count = dims.reduce((a, b) => a * b, 1);
      const data = type === 'int64' ? new BigInt64Array(count) : new Float32Array(count);
      for (let i = 0; i < count; i++) data[i] = type === 'int64' ? BigInt((i * 31) % 8000) : ((i * 7919) % 1009) / 1009;
      const result = await session.run({ [name]: new ort.Tensor(type, data, dims) });
      const output = result[session.outputNames[0]].data;
      let checksum = 0;
      for (let i = 0; i < output.length; i++) checksum += output[i];
      parentPort.postMessage({ id, checksum });
    } catch (error) {
      parentPort.postMessage({ id, error: String(error) });
    }
  });
} else {
  const workers = [];
  const waiting = new Map();
  let next = 0;
  let ready = 0;
  const count = Number(process.env.SERVICE_WORKERS || 2);
  for (let i = 0; i < count; i++) {
    const worker = new Worker(__filename);
    const entry = { worker, busy: 0 };
    worker.on('message', (m) => {
      if (m.id === undefined) {
        if (m.error) {
          console.error(m.error);
          process.exit(1);
        }
        if (++ready === count) server.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: server.address().port, pid: process.pid })));
        return;
      }
      entry.busy--;
      const respond = waiting.get(m.id);
      waiting.delete(m.id);
      respond(m);
    });
    workers.push(entry);
  }
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://localhost');
    const dims = (url.searchParams.get('dims') || '').split('x').map(Number);
    if (url.pathname !== '/infer' || dims.length === 0 || !dims.every((d) => Number.isInteger(d) && d > 0)) {
      res.writeHead(400).end('GET /infer?dims=AxBxC\n');
      return;
    }
    const entry = workers.reduce((a, b) => (b.busy < a.busy ? b : a));
    const id = next++;
    entry.busy++;
    waiting.set(id, (m) => {
      res.writeHead(m.error ? 500 : 200, { 'content-type': 'application/json' }).end(JSON.stringify(m.error ? { error: m.error } : { checksum: m.checksum }));
    });
    entry.worker.postMessage({ id, dims });
  });
  const stop = () => {
    server.close();
    Promise.all(workers.map((w) => w.worker.terminate())).then(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
