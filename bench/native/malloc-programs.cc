// Malloc-heavy programs in the manner of mimalloc-bench's, for bench/programs.ts: each allocates, writes and
// frees through the C library's malloc family (whose is LD_PRELOAD's choice) and prints a checksum of what it
// read back, which is the same under every allocator (a block whose contents changed under it shows there).
//
//   tp_malloc_programs trees DEPTH ROUNDS          binary trees of 32-byte nodes, each with a 16-256 byte
//                                                  label (every request small: at the default threshold
//                                                  the preload library never creates its pool)
//   tp_malloc_programs churn THREADS STEPS SLOTS   each thread keeps SLOTS blocks live and replaces one per
//                                                  step: 90% of sizes 16 B-2 KiB, 10% 2 KiB-1 MiB, log-uniform;
//                                                  a stamp written at the block's ends and every 4 KiB
//   tp_malloc_programs buffers ROUNDS              per round, a document grown by realloc to 32 MiB and 16
//                                                  buffers of 64 KiB-8 MiB, every byte written
//   tp_malloc_programs realloc THREADS STEPS SLOTS each thread keeps SLOTS blocks live; per step one slot:
//                                                  a quarter of the time its block is realloc'd to a new
//                                                  size (up or down), else freed and replaced; sizes 16 B-1 MiB
//                                                  log-uniform, 3% 1-16 MiB; one replaced block in 16 is
//                                                  handed to the next thread, which frees it; a stamp written
//                                                  every 4 KiB and checked (after a realloc, in what it kept)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <thread>
#include <vector>

namespace {

struct Random {
  uint64_t s;
  explicit Random(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  // Log-uniform in [low, high].
  size_t logUniform(size_t low, size_t high) {
    const double u = static_cast<double>(next() >> 11) / static_cast<double>(1ull << 53);
    const double bits = __builtin_log2(static_cast<double>(low)) + u * __builtin_log2(static_cast<double>(high) / low);
    const size_t size = static_cast<size_t>(__builtin_exp2(bits));
    return size < low ? low : size > high ? high : size;
  }
};

void* allocate(size_t bytes) {
  void* p = malloc(bytes);
  if (p == nullptr) {
    fprintf(stderr, "tp_malloc_programs: malloc(%zu) failed\n", bytes);
    exit(1);
  }
  return p;
}

struct Node {
  Node* left;
  Node* right;
  char* label;
  uint64_t value;
};

Node* build(int depth, Random& random) {
  Node* node = static_cast<Node*>(allocate(sizeof(Node)));
  const size_t length = random.logUniform(16, 256);
  node->label = static_cast<char*>(allocate(length));
  memset(node->label, static_cast<int>(length & 0x7f), length);
  node->label[length - 1] = 0;
  node->value = random.next();
  node->left = depth > 0 ? build(depth - 1, random) : nullptr;
  node->right = depth > 0 ? build(depth - 1, random) : nullptr;
  return node;
}

uint64_t checkAndFree(Node* node) {
  if (node == nullptr) return 0;
  const uint64_t sum = node->value + strlen(node->label) + checkAndFree(node->left) * 3 + checkAndFree(node->right) * 5;
  free(node->label);
  free(node);
  return sum;
}

uint64_t trees(int depth, int rounds) {
  Random random(1);
  uint64_t sum = 0;
  Node* longLived = build(depth, random);
  for (int round = 0; round < rounds; round++) {
    for (int d = 4; d <= depth; d += 2) {
      for (int i = 0; i < (1 << (depth - d)); i++) sum += checkAndFree(build(d, random));
    }
  }
  return sum + checkAndFree(longLived);
}

uint64_t stampOf(uint64_t serial, size_t at) { return (serial * 0xBF58476D1CE4E5B9ull) ^ at; }

void stamp(char* p, size_t bytes, uint64_t serial) {
  for (size_t at = 0; at + 8 <= bytes; at += 4096) {
    const uint64_t word = stampOf(serial, at);
    memcpy(p + at, &word, 8);
  }
  if (bytes >= 8) {
    const uint64_t last = stampOf(serial, bytes);
    memcpy(p + bytes - 8, &last, 8);
  }
}

// The stamps every 4 KiB of a block of at least `bytes`.
uint64_t readPageStamps(const char* p, size_t bytes, uint64_t serial) {
  uint64_t sum = 0, word = 0;
  for (size_t at = 0; at + 8 <= bytes; at += 4096) {
    memcpy(&word, p + at, 8);
    sum += word == stampOf(serial, at);
  }
  return sum;
}

uint64_t readStamp(const char* p, size_t bytes, uint64_t serial) {
  uint64_t sum = readPageStamps(p, bytes, serial), word = 0;
  if (bytes >= 8) {
    memcpy(&word, p + bytes - 8, 8);
    sum += word == stampOf(serial, bytes);
  }
  return sum;
}

// A thread's live block: its stamp's serial.
struct Slot {
  char* p = nullptr;
  size_t bytes = 0;
  uint64_t serial = 0;
};

// The stamps of every slot's block that held, the blocks freed.
uint64_t checkAndFreeAll(std::vector<Slot>& live) {
  uint64_t sum = 0;
  for (Slot& slot : live) {
    sum += readStamp(slot.p, slot.bytes, slot.serial);
    free(slot.p);
  }
  return sum;
}

uint64_t churnThread(int thread, long steps, int slots) {
  Random random(100 + thread);
  std::vector<Slot> live(slots);
  uint64_t sum = 0;
  for (long step = 0; step < steps + slots; step++) {
    Slot& slot = live[step < slots ? step : random.next() % slots];
    if (slot.p != nullptr) {
      sum += readStamp(slot.p, slot.bytes, slot.serial);
      free(slot.p);
    }
    slot.bytes = random.next() % 10 == 0 ? random.logUniform(2048, 1 << 20) : random.logUniform(16, 2048);
    slot.serial = static_cast<uint64_t>(step) * 64 + thread;
    slot.p = static_cast<char*>(allocate(slot.bytes));
    stamp(slot.p, slot.bytes, slot.serial);
  }
  return sum + checkAndFreeAll(live);
}

uint64_t churn(int threads, long steps, int slots) {
  std::vector<uint64_t> sums(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; t++) workers.emplace_back([&, t] { sums[t] = churnThread(t, steps, slots); });
  uint64_t sum = 0;
  for (int t = 0; t < threads; t++) {
    workers[t].join();
    sum = sum * 31 + sums[t];
  }
  return sum;
}

uint64_t buffers(int rounds) {
  Random random(7);
  uint64_t sum = 0;
  for (int round = 0; round < rounds; round++) {
    char* document = nullptr;
    size_t length = 0;
    while (length < (32u << 20)) {
      const size_t piece = random.logUniform(1024, 256 << 10);
      document = static_cast<char*>(realloc(document, length + piece));
      if (document == nullptr) {
        fprintf(stderr, "tp_malloc_programs: realloc(%zu) failed\n", length + piece);
        exit(1);
      }
      memset(document + length, static_cast<int>(piece & 0xff), piece);
      length += piece;
    }
    for (size_t at = 0; at < length; at += 65536) sum += static_cast<unsigned char>(document[at]);
    free(document);
    char* held[16];
    size_t sizes[16];
    for (int i = 0; i < 16; i++) {
      sizes[i] = random.logUniform(64 << 10, 8 << 20);
      held[i] = static_cast<char*>(allocate(sizes[i]));
      memset(held[i], i + round, sizes[i]);
    }
    for (int i = 0; i < 16; i++) {
      sum += static_cast<unsigned char>(held[i][sizes[i] - 1]) + sizes[i];
      free(held[i]);
    }
  }
  return sum;
}

// realloc: the block's size, 16 B-1 MiB log-uniform, or 1-16 MiB 3% of the time.
size_t reallocSize(Random& random) {
  return random.next() % 100 < 3 ? random.logUniform(1 << 20, 16 << 20) : random.logUniform(16, 1 << 20);
}

// Blocks handed from one thread to the next: each thread swaps a block into its successor's box and frees
// what it found in its own.
struct Mailbox {
  std::atomic<Slot*> box{nullptr};
};

// The stamps of a handed-over block that held (none for nullptr), the block freed.
uint64_t checkAndFreeHanded(Slot* handed) {
  if (handed == nullptr) return 0;
  const uint64_t sum = readStamp(handed->p, handed->bytes, handed->serial);
  free(handed->p);
  delete handed;
  return sum;
}

uint64_t takeMail(Mailbox& mailbox) { return checkAndFreeHanded(mailbox.box.exchange(nullptr, std::memory_order_acq_rel)); }

uint64_t reallocThread(int thread, long steps, int slots, Mailbox& own, Mailbox& next) {
  Random random(200 + thread);
  std::vector<Slot> live(slots);
  uint64_t sum = 0;
  for (long step = 0; step < steps + slots; step++) {
    Slot& slot = live[step < slots ? step : random.next() % slots];
    const uint64_t serial = static_cast<uint64_t>(step) * 64 + thread;
    const size_t bytes = reallocSize(random);
    const uint64_t action = random.next() % 16;
    if (slot.p != nullptr && action < 4) {
      char* moved = static_cast<char*>(realloc(slot.p, bytes));
      if (moved == nullptr) {
        fprintf(stderr, "tp_malloc_programs: realloc(%zu) failed\n", bytes);
        exit(1);
      }
      // What realloc kept: every stamp where it grew, those below the new size where it shrank.
      sum += bytes >= slot.bytes ? readStamp(moved, slot.bytes, slot.serial) : readPageStamps(moved, bytes, slot.serial);
      slot.p = moved;
    } else {
      if (slot.p != nullptr && action == 4) {
        sum += checkAndFreeHanded(next.box.exchange(new Slot(slot), std::memory_order_acq_rel));
      } else if (slot.p != nullptr) {
        sum += readStamp(slot.p, slot.bytes, slot.serial);
        free(slot.p);
      }
      sum += takeMail(own);
      slot.p = static_cast<char*>(allocate(bytes));
    }
    slot.bytes = bytes;
    slot.serial = serial;
    stamp(slot.p, slot.bytes, slot.serial);
  }
  return sum + checkAndFreeAll(live);
}

uint64_t reallocs(int threads, long steps, int slots) {
  std::vector<Mailbox> boxes(threads);
  std::vector<uint64_t> sums(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; t++) {
    workers.emplace_back([&, t] { sums[t] = reallocThread(t, steps, slots, boxes[t], boxes[(t + 1) % threads]); });
  }
  uint64_t sum = 0;
  for (int t = 0; t < threads; t++) {
    workers[t].join();
    sum += sums[t];  // which thread checked a handed-over block depends on timing: the sum does not
  }
  for (Mailbox& box : boxes) sum += takeMail(box);
  return sum;
}

long number(const char* text, const char* what, long most) {
  char* end = nullptr;
  const long value = strtol(text, &end, 10);
  if (end == text || *end != 0 || value < 1 || value > most) {
    fprintf(stderr, "tp_malloc_programs: %s must be an integer from 1 to %ld, got '%s'\n", what, most, text);
    exit(2);
  }
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  uint64_t sum = 0;
  if (strcmp(mode, "trees") == 0 && argc == 4) {
    sum = trees(static_cast<int>(number(argv[2], "DEPTH", 24)), static_cast<int>(number(argv[3], "ROUNDS", 1000000)));
  } else if (strcmp(mode, "churn") == 0 && argc == 5) {
    sum = churn(static_cast<int>(number(argv[2], "THREADS", 64)), number(argv[3], "STEPS", 1L << 40), static_cast<int>(number(argv[4], "SLOTS", 1 << 20)));
  } else if (strcmp(mode, "buffers") == 0 && argc == 3) {
    sum = buffers(static_cast<int>(number(argv[2], "ROUNDS", 1000000)));
  } else if (strcmp(mode, "realloc") == 0 && argc == 5) {
    sum = reallocs(static_cast<int>(number(argv[2], "THREADS", 64)), number(argv[3], "STEPS", 1L << 40), static_cast<int>(number(argv[4], "SLOTS", 1 << 20)));
  } else {
    fprintf(stderr, "usage: tp_malloc_programs trees DEPTH ROUNDS | churn THREADS STEPS SLOTS | buffers ROUNDS | realloc THREADS STEPS SLOTS\n");
    return 2;
  }
  printf("%s %llu\n", mode, static_cast<unsigned long long>(sum));
  return 0;
}
