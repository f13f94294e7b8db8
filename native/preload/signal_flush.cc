#include "signal_flush.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>

#include "process_pool.h"
#include "always_run.h"
#include "next_symbol.h"

extern "C" int __sigaction(int, const struct sigaction*, struct sigaction*);

namespace tp::preload {

namespace {

using SigactionFn = int (*)(int, const struct sigaction*, struct sigaction*);
std::atomic<SigactionFn> nextSigaction{nullptr};

// The sigaction next in the chain (glibc's), found outside any signal handler before one is installed.
// Not inlined: the name it looks up then lies with the always-run code's constants (always_run.ld), not
// with those of the first caller GCC inlined it into.
TP_ALWAYS_RUN __attribute__((noinline)) SigactionFn realSigaction() {
  const SigactionFn f = nextSymbolOnce(nextSigaction, "sigaction");
  return f ? f : __sigaction;
}

std::atomic<void (*)()> flushing{nullptr};

// What stands where the program's action is: its own (installed as it is), this library's flush in place of
// the default action, or a trampoline that emulates SA_RESETHAND around the program's handler.
enum class Standing { Program, Flush, Resetting };
struct Watched {
  int signal;
  std::atomic<Standing> standing{Standing::Program};
  // The program's action while Resetting; while Flush, the default action as the program set it (its flags and
  // mask, which sigaction() reports back), or as none was set (empty).
  struct sigaction program {};
};
Watched watched[2] = {{SIGINT}, {SIGTERM}};

TP_ALWAYS_RUN Watched* watchOf(int signal) {
  if (!flushing.load(std::memory_order_acquire)) return nullptr;
  for (Watched& w : watched) {
    if (w.signal == signal) return &w;
  }
  return nullptr;
}

// The flush, then the default action. Writing allocates, which a signal handler may not safely do: when this
// thread was inside the pool nothing is written, and an alarm bounds the rest (had the signal interrupted the
// C library's malloc on this thread, writing would wait on its lock: SIGALRM's default action then ends the
// process).
void flushThenDie(int signal, siginfo_t*, void*) {
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  realSigaction()(signal, &fallback, nullptr);
  if (!insidePool()) {
    realSigaction()(SIGALRM, &fallback, nullptr);
    alarm(10);
    InternalScope inside;
    if (auto* flush = flushing.load(std::memory_order_acquire)) flush();
  }
  raise(signal);  // blocked until this handler returns, then the default action
}

int installFlush(Watched& w) {
  struct sigaction ours {};
  ours.sa_sigaction = flushThenDie;
  ours.sa_flags = SA_SIGINFO;
  sigemptyset(&ours.sa_mask);
  const int result = realSigaction()(w.signal, &ours, nullptr);
  if (result == 0) w.standing.store(Standing::Flush, std::memory_order_release);
  return result;
}

// The program's handler that asked for SA_RESETHAND: the reset it asked for puts the flush in place of the
// default action, then its handler runs (a handler that raises the signal again, as Node's does, gets it once
// it returns: the flush, then the default action).
void resetThenCall(int signal, siginfo_t* info, void* context) {
  Watched* w = watchOf(signal);
  if (!w) return;
  const struct sigaction program = w->program;
  installFlush(*w);
  if (program.sa_flags & SA_SIGINFO) program.sa_sigaction(signal, info, context);
  else program.sa_handler(signal);
}

// (sa_handler and sa_sigaction share their storage: SIG_DFL and SIG_IGN read the same through either)
bool isHandler(const struct sigaction& a) { return a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN; }

// What the kernel holds now, as the program should see it. A program's signal() or sigset() reaches the
// kernel without this library: where the kernel no longer holds what was installed here, the program's is.
int programView(Watched& w, struct sigaction* view) {
  struct sigaction current {};
  if (realSigaction()(w.signal, nullptr, &current) != 0) return -1;
  const Standing standing = w.standing.load(std::memory_order_acquire);
  const bool oursThere = (current.sa_flags & SA_SIGINFO) &&
                         current.sa_sigaction == (standing == Standing::Flush ? flushThenDie : resetThenCall);
  if (standing == Standing::Program || !oursThere) {
    w.standing.store(Standing::Program, std::memory_order_release);
    *view = current;
  } else {
    *view = w.program;
  }
  return 0;
}

// Puts what stands for the action `act` in place (the library's flush for the default action, the trampoline
// for a handler that asked for SA_RESETHAND, else `act` itself), as the program asked for `act`.
int stand(Watched& w, const struct sigaction& act) {
  if (act.sa_handler == SIG_DFL) {
    w.program = act;
    return installFlush(w);
  }
  if (isHandler(act) && (act.sa_flags & SA_RESETHAND)) {
    w.program = act;
    struct sigaction trampoline = act;
    trampoline.sa_sigaction = resetThenCall;
    trampoline.sa_flags = (act.sa_flags & ~SA_RESETHAND) | SA_SIGINFO;
    const int result = realSigaction()(w.signal, &trampoline, nullptr);
    if (result == 0) w.standing.store(Standing::Resetting, std::memory_order_release);
    return result;
  }
  const int result = realSigaction()(w.signal, &act, nullptr);
  if (result == 0) w.standing.store(Standing::Program, std::memory_order_release);
  return result;
}

}  // namespace

TP_ALWAYS_RUN void findNextSigaction() { realSigaction(); }

void flushOnTerminatingSignals(void (*flush)()) {
  realSigaction();
  flushing.store(flush, std::memory_order_release);
  // What the program set before (Node's handler for its terminal, with SA_RESETHAND, is set as it starts)
  // stands as if set now.
  for (Watched& w : watched) {
    struct sigaction current {};
    if (realSigaction()(w.signal, nullptr, &current) != 0) continue;
    if (current.sa_handler == SIG_DFL || (isHandler(current) && (current.sa_flags & SA_RESETHAND))) stand(w, current);
  }
}

TP_ALWAYS_RUN int programSigaction(int signal, const struct sigaction* act, struct sigaction* old) {
  Watched* w = watchOf(signal);
  if (!w) return realSigaction()(signal, act, old);
  struct sigaction view {};
  if (old && programView(*w, &view) != 0) return -1;
  if (act) {
    const int result = stand(*w, *act);
    if (result != 0) return result;
  }
  if (old) *old = view;
  return 0;
}

}  // namespace tp::preload
