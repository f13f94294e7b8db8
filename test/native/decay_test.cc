// Decay's model (core/decay.h) on synthetic time: when an epoch ends, with and without iteration marks, and how
// the period follows memory given back and handed out again.
#include "check.h"
#include "core/decay.h"

using tp::DecayModel;

namespace {
constexpr uint64_t kMs = 1000000;
}  // namespace

TEST(decay_model_an_epoch_ends_once_it_has_lasted_the_period) {
  DecayModel model(100, 0);
  CHECK(model.on() && model.periodMs() == 100 && model.periodNs() == 100 * kMs);
  CHECK(!model.epochEnded(99 * kMs));
  CHECK(model.epochEnded(100 * kMs));
  model.startEpoch(100 * kMs, false);
  CHECK(!model.epochEnded(199 * kMs) && model.epochEnded(200 * kMs));
  CHECK(!DecayModel(DecayModel::kNever, 0).on());
}

TEST(decay_model_where_the_program_marks_iterations_an_epoch_also_needs_its_marks_however_long_it_lasts) {
  // A slow iteration (a loaded machine): a period of 100 ms passes within one. Memory reused every iteration
  // must not be found idle, so the epoch waits for kMarks marks.
  DecayModel model(100, 0);
  uint64_t now = 0;
  model.mark(now, true);
  for (uint64_t i = 2; i < DecayModel::kMarks; ++i) {
    now += 150 * kMs;  // each iteration longer than the period
    model.mark(now, false);
    CHECK(!model.epochEnded(now));
  }
  now += 150 * kMs;
  model.mark(now, false);  // the 16th
  CHECK(model.epochEnded(now));
}

TEST(decay_model_marks_that_stop_end_the_epoch_after_twice_the_longest_iteration) {
  DecayModel model(100, 0);
  model.mark(0, true);
  model.mark(400 * kMs, false);  // one iteration of 400 ms, then no more marks
  CHECK(!model.epochEnded(1199 * kMs));  // 799 ms since the last mark: not twice the longest iteration
  CHECK(model.epochEnded(1200 * kMs));
}

TEST(decay_model_memory_handed_out_again_doubles_the_period_and_quiet_epochs_halve_it) {
  DecayModel model(100, 0);
  uint64_t now = 0;
  for (uint64_t expected : {2, 4, 8, 16, 32, 64, 64}) {
    now += model.periodNs();
    CHECK(model.epochEnded(now));
    model.startEpoch(now, true);
    CHECK(model.scale() == expected && model.periodMs() == 100 * expected);
  }
  for (uint64_t epoch = 1; epoch <= DecayModel::kQuietEpochs; ++epoch) {
    now += model.periodNs();
    model.startEpoch(now, false);
    CHECK(model.scale() == (epoch < DecayModel::kQuietEpochs ? 64u : 32u));
  }
  // With marks, the marks an epoch needs scale too.
  DecayModel marked(100, 0);
  marked.startEpoch(100 * kMs, true);  // scale 2
  uint64_t t = 100 * kMs;
  for (uint64_t i = 0; i < DecayModel::kMarks; ++i) marked.mark(t += kMs, i == 0);
  t += 199 * kMs;  // past the period (200 ms), the marks not stopped (199 ms since the last, under the period)
  CHECK(!marked.epochEnded(t));  // 16 marks of the 32 it needs
  for (uint64_t i = 0; i < DecayModel::kMarks; ++i) marked.mark(t, false);
  CHECK(marked.epochEnded(t));
}

TEST(decay_model_a_period_beyond_what_nanoseconds_hold_saturates) {
  DecayModel model(uint64_t{1} << 62, 0);
  CHECK(model.periodNs() > DecayModel::kNever - kMs);  // as long as nanoseconds hold, not wrapped round
  CHECK(!model.epochEnded(uint64_t{1} << 62));
}
