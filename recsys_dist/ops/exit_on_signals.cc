// A native thread that ends the process after SIGTERM, SIGHUP or SIGINT even while a
// thread holds Python's GIL inside TensorFlow (a wait on a server that never answers).
//
// Python's own signal handler writes each signal's number to its wakeup fd. This thread
// reads that fd (recsys_watch_signals takes its read end), hands the byte on to the
// Python thread that ends the process with its cleanup (the write end it is given), and,
// when the signal is armed, waits `grace_ms` more: if the process is still there, Python
// could not run, and the thread writes the command's one line and calls _exit itself,
// with 128 + the signal's number. Plain C: no TensorFlow, no GIL.

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>

namespace {

struct Watch {
  int read_fd;
  int forward_fd;
  int grace_ms;
};

std::atomic<int> armed[65];

const char* name_of(int signum) {
  switch (signum) {
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    default: return "a signal";
  }
}

void* watch(void* argument) {
  const Watch w = *static_cast<Watch*>(argument);
  delete static_cast<Watch*>(argument);
  unsigned char signum = 0;
  for (;;) {
    const ssize_t got = read(w.read_fd, &signum, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return nullptr;
    while (write(w.forward_fd, &signum, 1) < 0 && errno == EINTR) {
    }
    if (signum < 65 && armed[signum].load() != 0) break;
  }
  timespec left{w.grace_ms / 1000, (w.grace_ms % 1000) * 1000000L};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
  char line[64] = "error: stopped by ";
  std::strncat(line, name_of(signum), sizeof(line) - std::strlen(line) - 2);
  std::strncat(line, "\n", sizeof(line) - std::strlen(line) - 1);
  ssize_t ignored = write(STDERR_FILENO, line, std::strlen(line));
  (void)ignored;
  _exit(128 + signum);
}

}  // namespace

extern "C" {

// Starts the thread; returns 0, or an errno value.
int recsys_watch_signals(int read_fd, int forward_fd, int grace_ms) {
  pthread_t thread;
  auto* w = new Watch{read_fd, forward_fd, grace_ms};
  const int failed = pthread_create(&thread, nullptr, watch, w);
  if (failed != 0) {
    delete w;
    return failed;
  }
  pthread_detach(thread);
  return 0;
}

// Whether `signum` ends the process (1) or not (0).
void recsys_arm_signal(int signum, int on) {
  if (signum > 0 && signum < 65) armed[signum].store(on);
}

}
