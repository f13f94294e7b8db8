// A --require of the user's own (test/hooks.test.ts puts it in NODE_OPTIONS) that creates an onnxruntime-node
// session at once, before the app runs: test/hooks/app.cjs 'early' runs it. (NODE_OPTIONS reaches the
// tensorpool CLI too: only app.cjs's process makes the session.)
if (require('node:path').basename(process.argv[1] ?? '') === 'app.cjs') {
  globalThis.earlySession = require('onnxruntime-node').InferenceSession.create(process.argv[2], { intraOpNumThreads: 1 });
}
