#include "handle_book.h"

namespace tp::napi {

bool HandleBook::keep(const void* data, uint64_t bytes) {
  auto at = tickets_.find(Key{data, bytes});
  if (at == tickets_.end() || at->second->dormant) return false;
  at->second->dormant = true;
  return true;
}

bool HandleBook::wake(const void* data, uint64_t bytes, uint64_t serial) {
  auto at = tickets_.find(Key{data, bytes});
  if (at == tickets_.end() || !at->second->dormant) return false;
  at->second->dormant = false;
  at->second->serial = serial;
  return true;
}

void HandleBook::forget(const void* data, uint64_t bytes) {
  auto at = tickets_.find(Key{data, bytes});
  if (at != tickets_.end() && at->second->dormant) tickets_.erase(at);
}

void HandleBook::forgetAll() {
  for (auto at = tickets_.begin(); at != tickets_.end();) {
    at = at->second->dormant ? tickets_.erase(at) : std::next(at);
  }
}

void HandleBook::finalized(const Ticket* ticket) {
  auto at = tickets_.find(Key{ticket->data, ticket->bytes});
  if (at != tickets_.end() && at->second == ticket) tickets_.erase(at);
}

}  // namespace tp::napi
