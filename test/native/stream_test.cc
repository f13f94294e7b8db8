// Native tests of streams, the event pool and stream-ordered release, with several streams at once (run
// under ASan + UBSan by scripts/sanitize.sh).
#include <cstring>
#include <thread>
#include <vector>

#include "check.h"
#include "core/pool.h"
#include "stream/stream.h"

using namespace tp;

namespace {

std::shared_ptr<Pool> streamPool() {
  PlanSpec plan;
  plan.interval = 4096;
  plan.classes = {{4096, 64}, {1 << 20, 8}};
  std::string error;
  auto pool = Pool::create(plan, PoolOptions{}, &error);
  CHECK(pool != nullptr);
  return pool;
}

Task fillTask(void* p, uint64_t bytes, uint8_t value, std::shared_ptr<void> keep) {
  Task t;
  t.kind = Task::Kind::Fill;
  t.dst = p;
  t.bytes = bytes;
  t.pattern = value;
  t.keep = std::move(keep);
  return t;
}

}  // namespace

TEST(stream_runs_tasks_in_order_and_events_pass_in_order) {
  auto stream = Stream::create();
  std::vector<float> x(1000, 2.0f), y(1000, 1.0f);
  std::vector<uint8_t> a(4096), b(4096);
  stream->enqueue(fillTask(a.data(), a.size(), 7, nullptr));
  Task copy;
  copy.kind = Task::Kind::Copy;
  copy.dst = b.data();
  copy.src = a.data();
  copy.bytes = a.size();
  stream->enqueue(copy);
  Task axpy;
  axpy.kind = Task::Kind::Axpy;
  axpy.a = 3;
  axpy.src = x.data();
  axpy.dst = y.data();
  axpy.bytes = x.size();
  const uint64_t last = stream->enqueue(axpy);
  stream->waitFor(last);
  CHECK(b[4095] == 7 && y[999] == 7.0f && stream->passed(last));
  stream->close(false);
  CHECK(stream->enqueue(fillTask(a.data(), 1, 0, nullptr)) == 0);
}

TEST(gates_hold_work_back_and_cancel_releases_them) {
  auto stream = Stream::create();
  auto gate = std::make_shared<Gate>();
  Task wait;
  wait.kind = Task::Kind::Wait;
  wait.gate = gate;
  stream->enqueue(wait);
  std::vector<uint8_t> a(64, 0);
  const uint64_t fill = stream->enqueue(fillTask(a.data(), a.size(), 5, nullptr));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(!stream->passed(fill) && a[0] == 0);
  gate->open();
  stream->waitFor(fill);
  CHECK(a[0] == 5);
  // A gate that never opens: cancel releases it and drops the queued fill.
  auto never = std::make_shared<Gate>();
  wait.gate = never;
  stream->enqueue(wait);
  const uint64_t dropped = stream->enqueue(fillTask(a.data(), a.size(), 9, nullptr));
  stream->close(true);
  CHECK(stream->passed(dropped) && a[0] == 5);
}

TEST(deferred_release_with_several_streams_reuses_events) {
  auto pool = streamPool();
  std::vector<std::shared_ptr<Stream>> streams{Stream::create(), Stream::create(), Stream::create()};
  std::vector<std::thread> producers;
  for (size_t k = 0; k < streams.size(); ++k) {
    producers.emplace_back([&, k] {
      for (int i = 0; i < 3000; ++i) {
        Allocation a = pool->alloc(4096);
        CHECK(a.status == AllocStatus::Ok);
        streams[k]->enqueue(fillTask(a.data, 4096, static_cast<uint8_t>(i), pool->pin()));
        CHECK(pool->releaseAfter(a.data, streams[k]) == ReleaseStatus::Ok);
      }
    });
  }
  for (std::thread& t : producers) t.join();
  for (auto& s : streams) s->waitFor(s->recorded());
  pool->reclaim();
  const PoolStats s = pool->stats();
  CHECK(s.deferredPending == 0 && s.liveBlocks == 0);
  CHECK(s.eventsCreated + s.eventsReused == 9000 && s.eventsReused > 0);
  for (auto& stream : streams) stream->close(false);

  // One thread: a block on its way back cannot be released again, nor released once more with a stream.
  auto stream = Stream::create();
  Allocation a = pool->alloc(4096);
  stream->enqueue(fillTask(a.data, 4096, 1, pool->pin()));
  CHECK(pool->releaseAfter(a.data, stream) == ReleaseStatus::Ok);
  CHECK(pool->release(a.data) == ReleaseStatus::NotLive);
  CHECK(pool->releaseAfter(a.data, stream) == ReleaseStatus::NotLive);
  CHECK(pool->liveSize(a.data) == 0);
  stream->close(false);
}

TEST(pinned_pools_keep_os_blocks_and_arenas_mapped) {
  PlanSpec plan;
  plan.interval = 4096;
  plan.classes = {{4096, 1}};
  std::string error;
  auto pool = Pool::create(plan, PoolOptions{}, &error);
  auto stream = Stream::create();
  Allocation big = pool->alloc(8 << 20);  // an mmap'd OS block
  CHECK(big.route == Route::OsOversize);
  auto gate = std::make_shared<Gate>();
  Task wait;
  wait.kind = Task::Kind::Wait;
  wait.gate = gate;
  stream->enqueue(wait);
  const uint64_t fill = stream->enqueue(fillTask(big.data, 8 << 20, 3, pool->pin()));
  CHECK(pool->release(big.data) == ReleaseStatus::Ok);  // not unmapped: the fill is still to run
  pool->close();
  gate->open();
  stream->waitFor(fill);  // ASan would report the fill writing into unmapped memory
  stream->close(false);
  CHECK(pool->stats().arenas == 0);
}
