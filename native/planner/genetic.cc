#include "planner/genetic.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "os/os.h"
#include "planner/place.h"

namespace tp::planner {

namespace {

constexpr size_t kPopulation = 24;
constexpr size_t kElites = 2;
constexpr int kMaxGenerations = 400;
constexpr int kStagnationLimit = 60;  // generations without a better layout

struct Individual {
  std::vector<uint32_t> order;
  uint64_t peak;
};

// Order crossover (OX1): a slice of `a` stays where it is; the other positions take the remaining buffers
// in the order `b` has them. The child is again a permutation.
std::vector<uint32_t> crossover(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b, std::mt19937_64& rng) {
  const size_t n = a.size();
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  size_t lo = pick(rng), hi = pick(rng);
  if (lo > hi) std::swap(lo, hi);
  std::vector<uint32_t> child(n);
  std::vector<bool> taken(n, false);
  for (size_t i = lo; i <= hi; ++i) {
    child[i] = a[i];
    taken[a[i]] = true;
  }
  size_t fill = (hi + 1) % n;
  for (size_t k = 0; k < n; ++k) {
    const uint32_t g = b[(hi + 1 + k) % n];
    if (taken[g]) continue;
    child[fill] = g;
    fill = (fill + 1) % n;
  }
  return child;
}

void mutate(std::vector<uint32_t>& order, std::mt19937_64& rng) {
  const size_t n = order.size();
  if (n < 2) return;
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  std::uniform_real_distribution<double> chance(0, 1);
  if (chance(rng) < 0.5) std::swap(order[pick(rng)], order[pick(rng)]);
  if (chance(rng) < 0.3) {  // move one buffer elsewhere in the order
    const size_t from = pick(rng), to = pick(rng);
    const uint32_t g = order[from];
    order.erase(order.begin() + static_cast<std::ptrdiff_t>(from));
    order.insert(order.begin() + static_cast<std::ptrdiff_t>(to), g);
  }
}

}  // namespace

PlanResult geneticSearch(const Problem& p, uint64_t timeLimitMs, uint64_t seed, uint64_t startNs) {
  PlanResult result;
  const uint64_t deadline = startNs + timeLimitMs * 1000000ull;
  const size_t n = p.count();
  Placer placer(p);
  std::mt19937_64 rng(seed);
  uint64_t bestPeak = UINT64_MAX;
  uint64_t evaluations = 0;
  // Decodes an order (S3's pre-allocation); the peak is UINT64_MAX when the deadline cut it short.
  auto evaluate = [&](std::vector<uint32_t> order, uint64_t until) {
    std::vector<uint64_t> offsets = placer.place(order, Fit::Best, until);
    if (offsets.empty()) return Individual{std::move(order), UINT64_MAX};
    const uint64_t peak = heightOf(p, offsets);
    ++evaluations;
    if (peak < bestPeak) {
      bestPeak = peak;
      result.offsets = std::move(offsets);
    }
    return Individual{std::move(order), peak};
  };

  // Seeds: greedy by size (evaluated first, so the baseline is always there), then other classic orders.
  std::vector<Individual> population;
  population.push_back(evaluate(sizeOrder(p), UINT64_MAX));
  if (n < 2) {
    result.notes = "one buffer";
    return result;
  }
  std::vector<double> area(n), width(n), start(n);
  for (uint32_t b = 0; b < n; ++b) {
    width[b] = p.width(b);
    area[b] = width[b] * static_cast<double>(p.size[b]);
    start[b] = p.isGraph() ? 0 : -static_cast<double>(p.lower[b]);
  }
  for (const std::vector<double>* key : {&area, &width, &start}) {
    if (os::monotonicNs() > deadline) break;
    population.push_back(evaluate(orderBy(p, *key), deadline));
  }
  while (population.size() < kPopulation && os::monotonicNs() < deadline) {
    std::vector<uint32_t> order = population[0].order;
    for (size_t k = 0; k < std::max<size_t>(1, n / 20); ++k) mutate(order, rng);
    population.push_back(evaluate(std::move(order), deadline));
  }

  int generation = 0, stagnant = 0;
  auto byPeak = [](const Individual& a, const Individual& b) { return a.peak < b.peak; };
  std::uniform_int_distribution<size_t> member(0, population.size() - 1);
  auto tournament = [&]() -> const Individual& {
    const Individual* best = &population[member(rng)];
    for (int k = 0; k < 2; ++k) {
      const Individual& other = population[member(rng)];
      if (other.peak < best->peak) best = &other;
    }
    return *best;
  };
  for (; generation < kMaxGenerations && stagnant < kStagnationLimit && os::monotonicNs() < deadline; ++generation) {
    const uint64_t before = bestPeak;
    std::sort(population.begin(), population.end(), byPeak);
    std::vector<Individual> next(population.begin(), population.begin() + static_cast<std::ptrdiff_t>(std::min(kElites, population.size())));
    while (next.size() < population.size() && os::monotonicNs() < deadline) {
      std::vector<uint32_t> child = crossover(tournament().order, tournament().order, rng);
      mutate(child, rng);
      next.push_back(evaluate(std::move(child), deadline));
    }
    if (next.size() == population.size()) population = std::move(next);
    stagnant = bestPeak < before ? 0 : stagnant + 1;
  }
  result.notes = std::to_string(generation) + " generations, " + std::to_string(evaluations) + " layouts decoded";
  return result;
}

}  // namespace tp::planner
