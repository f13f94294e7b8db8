#include "exec.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

namespace tp::os {

namespace {

// Signals 1..64; those the kernel or the C library keeps for itself (SIGKILL, SIGSTOP, glibc's 32 and 33)
// refuse a new action, which is what they keep across execve anyway.
constexpr int kSignals = 64;

std::vector<char*> pointersTo(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (const std::string& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

int execProgram(const std::string& path, const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  // Everything that allocates is done first: nothing below may fail for memory.
  std::vector<char*> args = pointersTo(argv);
  std::vector<char*> environment = pointersTo(env);
  std::vector<std::string> shellArgv{"/bin/sh", path};
  shellArgv.insert(shellArgv.end(), argv.begin() + 1, argv.end());
  std::vector<char*> shellArgs = pointersTo(shellArgv);

  sigset_t all, before, none;
  sigfillset(&all);
  sigemptyset(&none);
  // No handler of this process runs between the actions set here and the execve.
  pthread_sigmask(SIG_SETMASK, &all, &before);
  struct sigaction previous[kSignals + 1];
  bool changed[kSignals + 1] = {};
  for (int s = 1; s <= kSignals; ++s) {
    struct sigaction action {};
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    changed[s] = sigaction(s, &action, &previous[s]) == 0;
  }
  for (int fd = 0; fd <= 2; ++fd) {
    const int flags = fcntl(fd, F_GETFD);
    if (flags != -1 && (flags & FD_CLOEXEC)) fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC);
  }

  pthread_sigmask(SIG_SETMASK, &none, nullptr);
  execve(path.c_str(), args.data(), environment.data());
  if (errno == ENOEXEC) execve("/bin/sh", shellArgs.data(), environment.data());
  const int error = errno;

  pthread_sigmask(SIG_SETMASK, &all, nullptr);
  for (int s = 1; s <= kSignals; ++s) {
    if (changed[s]) sigaction(s, &previous[s], nullptr);
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  return error;
}

}  // namespace tp::os
