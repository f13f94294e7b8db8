// Work queued on a stream runs on a thread of its own; a buffer released behind the stream is reused only
// once the stream has passed that point. Run: node examples/streams.mjs
import { Pool, Stream } from 'tensorpool';

const pool = new Pool();
const stream = new Stream();
const a = pool.float32(1 << 20).fill(1);
const b = pool.float32(1 << 20);
const y = pool.float32(1 << 20).fill(0);

stream.copy(b, a).axpy(2, b, y); // y += 2 * b, queued: JS does not wait
pool.release(a, { stream }); // a goes back once the stream has passed this point
await stream.synchronize();
pool.reclaim(); // takes back the blocks whose stream has passed (every alloc() does it too)
console.log(`y[0] = ${y[0]}, releases still waiting for the stream: ${pool.stats().deferredPending}`);
pool.release(b);
pool.release(y);
await stream.close();
pool.close();
