// Runs a program and reports what the kernel counted for it, as wait4 returns it: wall time, user and system
// CPU time, peak resident set size (ru_maxrss, the program's own, and that of any child it waited for) and
// minor page faults (ru_minflt, the program's and its waited-for children's).
// The NAME=VALUE assignments go to the program's environment only, so an LD_PRELOAD among them measures
// the program with that allocator while this helper runs without it. Standard input, output and error are
// the program's. SIGINT and SIGTERM are passed on to the program.
//
//   tp_rusage RESULT_FILE [NAME=VALUE...] -- PROGRAM [ARGS...]
// Writes one line to RESULT_FILE: wall_ns user_us sys_us maxrss_kib status minor_faults (status: the exit
// code, or 128 + the signal that ended the program; 127 when it could not be started). Exits with the same
// status.
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace {

volatile sig_atomic_t child = 0;

void forward(int signal) {
  if (child > 0) kill(child, signal);
}

long long nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

long long micros(const timeval& tv) { return tv.tv_sec * 1000000LL + tv.tv_usec; }

}  // namespace

int main(int argc, char** argv) {
  int dashes = 2;
  while (dashes < argc && strcmp(argv[dashes], "--") != 0) dashes++;
  if (argc < 4 || dashes >= argc - 1) {
    fprintf(stderr, "usage: tp_rusage RESULT_FILE [NAME=VALUE...] -- PROGRAM [ARGS...]\n");
    return 2;
  }
  for (int i = 2; i < dashes; i++) {
    if (strchr(argv[i], '=') == nullptr) {
      fprintf(stderr, "tp_rusage: '%s' is not NAME=VALUE\n", argv[i]);
      return 2;
    }
  }
  FILE* out = fopen(argv[1], "w");
  if (out == nullptr) {
    fprintf(stderr, "tp_rusage: cannot write %s: %s\n", argv[1], strerror(errno));
    return 2;
  }
  struct sigaction action = {};
  action.sa_handler = forward;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  const long long start = nowNs();
  const pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "tp_rusage: fork: %s\n", strerror(errno));
    return 2;
  }
  if (pid == 0) {
    for (int i = 2; i < dashes; i++) putenv(argv[i]);
    execvp(argv[dashes + 1], argv + dashes + 1);
    fprintf(stderr, "tp_rusage: cannot run %s: %s\n", argv[dashes + 1], strerror(errno));
    _exit(127);
  }
  child = pid;
  int status = 0;
  rusage usage = {};
  while (wait4(pid, &status, 0, &usage) < 0) {
    if (errno != EINTR) {
      fprintf(stderr, "tp_rusage: wait4: %s\n", strerror(errno));
      return 2;
    }
  }
  const long long wall = nowNs() - start;
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  fprintf(out, "%lld %lld %lld %ld %d %ld\n", wall, micros(usage.ru_utime), micros(usage.ru_stime), usage.ru_maxrss, code, usage.ru_minflt);
  if (fclose(out) != 0) {
    fprintf(stderr, "tp_rusage: cannot write %s: %s\n", argv[1], strerror(errno));
    return 2;
  }
  return code;
}
