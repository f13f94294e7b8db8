#include "shared_pools.h"

#include <map>
#include <mutex>

namespace tp::napi {

namespace {

struct Registry {
  std::mutex mu;
  std::map<uint64_t, std::weak_ptr<Pool>> pools;
  uint64_t next = 1;
};

// Never destroyed: a worker may still look a pool up while the process runs its exit handlers.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

uint64_t sharePool(const std::shared_ptr<Pool>& pool) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto it = r.pools.begin(); it != r.pools.end();) {
    if (it->second.expired()) {
      it = r.pools.erase(it);
    } else if (it->second.lock() == pool) {
      return it->first;
    } else {
      ++it;
    }
  }
  r.pools.emplace(r.next, pool);
  return r.next++;
}

std::shared_ptr<Pool> findSharedPool(uint64_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.pools.find(id);
  return it == r.pools.end() ? nullptr : it->second.lock();
}

}  // namespace tp::napi
