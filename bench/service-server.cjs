// An HTTP inference server as users write one, knowing nothing of tensorpool but with SERVICE_POOLED
// (bench/service.ts runs it under each configuration): node:http on loopback, SERVICE_WORKERS worker_threads
// each holding an onnxruntime-node session of SERVICE_MODEL. GET /infer?dims=1x3x640x640 makes the request's
// input of those dims (deterministic values, as an image or a tokenised text would give), runs it on the least
// busy worker and answers {"checksum": ...} (the first output's sum). Environment:
//   SERVICE_MODEL      the .onnx file            SERVICE_WORKERS  worker threads (default 2)
//   SERVICE_THREADS    intra-op threads a session (default 1)
//   ORT_ARENA=0        enableCpuMemArena: false  ORT_MEM_PATTERN=0  enableMemPattern: false
//   SERVICE_POOLED=1   the in-process route instead: each worker a PooledSession (tensorpool/onnxruntime)
//                      over a Pool of its own, lent to ONNX Runtime; the request's input array is copied
//                      into the session's pooled tensor, and input and outputs are released after the run
//   SERVICE_COLLECT_AFTER  with SERVICE_POOLED: the PooledSession's collectAfter (bytes or off; default unset)
// Prints one line {"port": P, "pid": PID} once every session is made and it listens; SIGTERM or SIGINT end
// it (exit code 0).
const http = require('node:http');
const { Worker, isMainThread, parentPort } = require('node:worker_threads');

const pooled = process.env.SERVICE_POOLED === '1';

if (!isMainThread) {
  const ort = require('onnxruntime-node');
  const options = { intraOpNumThreads: Number(process.env.SERVICE_THREADS || 1) };
  if (process.env.ORT_ARENA === '0') options.enableCpuMemArena = false;
  if (process.env.ORT_MEM_PATTERN === '0') options.enableMemPattern = false;
  let ready;
  if (pooled) {
    const { Pool } = require('../dist/index.js');
    const { PooledSession } = require('../dist/onnxruntime.js');
    const collect = process.env.SERVICE_COLLECT_AFTER;
    const pooledOptions = { ort, sessionOptions: options };
    if (collect) pooledOptions.collectAfter = collect === 'off' ? 'off' : Number(collect);
    ready = PooledSession.create(new Pool(), process.env.SERVICE_MODEL, pooledOptions);
  } else {
    ready = ort.InferenceSession.create(process.env.SERVICE_MODEL, options);
  }
  ready.then(() => parentPort.postMessage({ ready: true }), (error) => parentPort.postMessage({ error: String(error) }));
  parentPort.on('message', async ({ id, dims }) => {
    try {
      const session = await ready;
      const inference = pooled ? session.session : session;
      const name = inference.inputNames[0];
      const type = inference.inputMetadata?.[0]?.type ?? 'float32';
      const count = dims.reduce((a, b) => a * b, 1);
      const data = type === 'int64' ? new BigInt64Array(count) : new Float32Array(count);
      for (let i = 0; i < count; i++) data[i] = type === 'int64' ? BigInt((i * 31) % 8000) : ((i * 7919) % 1009) / 1009;
      let input = new ort.Tensor(type, data, dims);
      if (pooled) {
        input = session.tensor(type, dims);
        input.data.set(data);
      }
      const result = await session.run({ [name]: input });
      const output = result[inference.outputNames[0]].data;
      let checksum = 0;
      for (let i = 0; i < output.length; i++) checksum += output[i];
      if (pooled) session.release(input, ...Object.values(result));
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
  // A pool lent to ONNX Runtime serves the sessions created after it: with SERVICE_POOLED, one worker makes
  // its session (lending its pool) once the one before has made its own.
  const startWorker = () => {
    const worker = new Worker(__filename);
    const entry = { worker, busy: 0 };
    worker.on('message', (m) => {
      if (m.id === undefined) {
        if (m.error) {
          console.error(m.error);
          process.exit(1);
        }
        if (++ready === count) server.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: server.address().port, pid: process.pid })));
        else if (pooled) startWorker();
        return;
      }
      entry.busy--;
      const respond = waiting.get(m.id);
      waiting.delete(m.id);
      respond(m);
    });
    workers.push(entry);
  };
  startWorker();
  if (!pooled) for (let i = 1; i < count; i++) startWorker();
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
