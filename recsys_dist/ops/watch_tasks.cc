// A native thread that watches the tasks of a tf_config cluster while the Python watch
// (cluster/liveness.py) cannot run: a thread that holds Python's GIL inside TensorFlow
// (connecting to a server that does not answer, creating variables on it) keeps every
// Python thread from running, the watch's included.
//
// The Python watch calls recsys_watch_tasks_beat() once per probe round. While those
// beats come, this thread only probes. When none came for `stale_s` seconds, it acts as
// the Python watch would: a task unreachable for `lost_s` seconds is reported on stdout
// with the line the Python watch logs (once; recsys_watch_tasks_reported() tells it which
// the Python watch reported already), and one unreachable for `give_up_s` seconds ends
// the process with the Python watch's error line and exit code 4. The Python watch says
// when a task is back (recsys_watch_tasks_take_back). Before the run's first step, a worker
// of the run lost while the Python watch cannot run starts the command again at once, as
// ProcessRestart.now would (recsys_watch_tasks_restart_before_first_step). Plain C: no
// TensorFlow, no GIL.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Task {
  std::string job;
  int index;
  std::string host;
  std::string port;
  std::atomic<double> down_since{-1};  // monotonic seconds, -1 while it answers
  std::atomic<bool> reported{false};  // lost and not back yet, said by either watch
  std::atomic<double> last_away{0};   // seconds it was unreachable, when it last came back
  std::atomic<bool> outside{false};   // not in the run (a worker missing at its start)
};

struct Watch {
  std::vector<Task*> tasks;
  double lost_s;
  double give_up_s;
  double stale_s;
  int exit_code;
  int generation;
};

// What starts the command again when a worker is lost before the first step.
struct Restart {
  std::string then;  // the end of the restart line
  std::string variable;
  std::string value;
  double pause_s;
  std::vector<std::string> argv;
};

std::atomic<double> last_beat{0};
std::atomic<Restart*> restart_before_first_step{nullptr};
// A watch acts while its generation is the current one; starting or stopping a watch
// moves it on. Watches are never freed: a process starts a few at most.
std::atomic<int> generation{0};
std::atomic<Watch*> current{nullptr};

double now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

// Whether a TCP connection to the task opens within `timeout_ms`.
bool reachable(const Task& task, int timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(task.host.c_str(), task.port.c_str(), &hints, &found) != 0) return false;
  bool up = false;
  for (addrinfo* a = found; a != nullptr && !up; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      up = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, timeout_ms) == 1) {
        int error = 0;
        socklen_t size = sizeof(error);
        up = getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 && error == 0;
      }
    }
    close(fd);
  }
  freeaddrinfo(found);
  return up;
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += n;
  }
}

std::string address(const Task& t) {
  const bool v6 = t.host.find(':') != std::string::npos;
  return (v6 ? "[" + t.host + "]" : t.host) + ":" + t.port;
}

void pause(double s) {
  if (s <= 0) return;
  timespec left{static_cast<time_t>(s), static_cast<long>((s - (long)s) * 1e9)};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

// Replaces the process by the command started again; returns only if that fails.
void restart_now(const Task& task, const Restart& r) {
  write_all(STDOUT_FILENO, "restart  " + task.job + " " + std::to_string(task.index) + " (" +
                               address(task) + ") was lost before the first step" + r.then +
                               "\n");
  setenv(r.variable.c_str(), r.value.c_str(), 1);
  pause(r.pause_s);
  std::vector<char*> argv;
  for (const std::string& arg : r.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
}

std::string seconds(double s) {  // as Python's f"{s:g}" for the settings' values
  char text[32];
  std::snprintf(text, sizeof(text), "%g", s);
  return text;
}

void* watch(void* argument) {
  Watch& w = *static_cast<Watch*>(argument);
  auto stopped = [&w] { return generation.load() != w.generation; };
  while (!stopped()) {
    const double started = now();
    for (Task* task : w.tasks) {
      if (stopped()) return nullptr;
      const bool up = reachable(*task, 1000);
      const double at = now();
      if (up) {
        const double since = task->down_since.exchange(-1);
        if (since >= 0) task->last_away.store(at - since);
        continue;  // the Python watch says it is back (recsys_watch_tasks_take_back)
      }
      if (task->down_since.load() < 0) task->down_since.store(at);
      const double away = at - task->down_since.load();
      const bool python_stuck = at - last_beat.load() >= w.stale_s;
      if (!python_stuck) continue;
      const std::string name = task->job + " " + std::to_string(task->index);
      char away_text[32];
      std::snprintf(away_text, sizeof(away_text), "%.0f", away);
      const bool outside = task->outside.load();
      if (away >= w.lost_s && !task->reported.exchange(true)) {
        const std::string then =
            outside ? "; the run goes on without it and takes it in when it answers"
            : task->job == "worker"
                ? "; the other workers take its work until it answers again (the run stops "
                  "if it is not back within " + seconds(w.give_up_s) +
                  " s, cluster.give_up_after_seconds)"
                : "; training waits for it (its variables are there) and stops if it is not "
                  "back within " + seconds(w.give_up_s) + " s (cluster.give_up_after_seconds)";
        write_all(STDOUT_FILENO, "lost     " + name + " (" + address(*task) +
                                     "): unreachable for " + away_text + " s" + then + "\n");
      }
      Restart* restart = restart_before_first_step.load();
      if (away >= w.lost_s && restart != nullptr && task->job == "worker" && !outside) {
        restart_now(*task, *restart);
      }
      if (away >= w.give_up_s && !outside) {
        write_all(STDERR_FILENO,
                  "error: " + name + " (" + address(*task) + ") has been unreachable for " +
                      away_text + " s (cluster.give_up_after_seconds = " +
                      seconds(w.give_up_s) +
                      "); the run stops. Bring the task back, then run the command again "
                      "to resume from the last checkpoint\n");
        _exit(w.exit_code);
      }
    }
    pause(1.0 - (now() - started));
  }
  return nullptr;
}

}  // namespace

extern "C" {

// Starts the thread, in place of a watch started before. `tasks`: one "job index
// host:port" per line. Returns 0, or an errno value (EINVAL: a line it cannot read).
int recsys_watch_tasks(const char* tasks, double lost_s, double give_up_s, double stale_s,
                       int exit_code) {
  auto* w = new Watch{{}, lost_s, give_up_s, stale_s, exit_code, 0};
  const char* line = tasks;
  while (*line != '\0') {
    const char* end = std::strchr(line, '\n');
    const std::string text(line, end ? end - line : std::strlen(line));
    char job[64], addr[256];
    int index = 0;
    if (!text.empty()) {
      if (std::sscanf(text.c_str(), "%63s %d %255s", job, &index, addr) != 3) {
        delete w;
        return EINVAL;
      }
      std::string a(addr);
      const size_t colon = a.rfind(':');
      if (colon == std::string::npos) {
        delete w;
        return EINVAL;
      }
      auto* t = new Task;
      t->job = job;
      t->index = index;
      t->host = a.substr(0, colon);
      if (t->host.size() > 1 && t->host.front() == '[') {
        t->host = t->host.substr(1, t->host.size() - 2);
      }
      t->port = a.substr(colon + 1);
      w->tasks.push_back(t);
    }
    if (end == nullptr) break;
    line = end + 1;
  }
  last_beat.store(now());
  restart_before_first_step.store(nullptr);  // the new watch's owner arms it anew
  w->generation = generation.fetch_add(1) + 1;
  current.store(w);
  pthread_t thread;
  const int failed = pthread_create(&thread, nullptr, watch, w);
  if (failed != 0) {
    current.store(nullptr);
    return failed;
  }
  pthread_detach(thread);
  return 0;
}

// The Python watch ran a probe round.
void recsys_watch_tasks_beat() { last_beat.store(now()); }

// The Python watch is about to report task `position` (its place in the `tasks` lines)
// lost: 1 if this thread has reported it already (the Python watch then stays silent).
int recsys_watch_tasks_reported(int position) {
  Watch* w = current.load();
  if (w == nullptr || position < 0 || position >= static_cast<int>(w->tasks.size())) return 0;
  return w->tasks[position]->reported.exchange(true) ? 1 : 0;
}

// For the Python watch, which sees task `position` answer: whether either watch had
// reported it lost (and forgets it), with the seconds it was unreachable in `away`.
int recsys_watch_tasks_take_back(int position, double* away) {
  Watch* w = current.load();
  if (w == nullptr || position < 0 || position >= static_cast<int>(w->tasks.size())) return 0;
  Task* task = w->tasks[position];
  const double since = task->down_since.load();  // this thread has not probed it since
  *away = since >= 0 ? now() - since : task->last_away.load();
  return task->reported.exchange(false) ? 1 : 0;
}

// Until recsys_watch_tasks_first_step(): a worker of the run lost while the Python watch
// cannot run prints "restart  <task> was lost before the first step<then>", sets
// `variable` to `value`, waits `pause_s` and replaces the process by `argv` (`argc`
// NUL-terminated strings one after another; the first is the program).
void recsys_watch_tasks_restart_before_first_step(const char* then, const char* variable,
                                                  const char* value, double pause_s,
                                                  const char* argv, int argc) {
  auto* r = new Restart{then, variable, value, pause_s, {}};
  for (int i = 0; i < argc; ++i) {
    r->argv.emplace_back(argv);
    argv += r->argv.back().size() + 1;
  }
  restart_before_first_step.store(r);  // never freed: armed once per process start
}

// The run's first step is back: a lost worker no longer starts the command again.
void recsys_watch_tasks_first_step() { restart_before_first_step.store(nullptr); }

// Task `position` is not in the run (a worker missing at its start): it never ends it.
void recsys_watch_tasks_outside(int position) {
  Watch* w = current.load();
  if (w == nullptr || position < 0 || position >= static_cast<int>(w->tasks.size())) return;
  w->tasks[position]->outside.store(true);
}

// Stops the watch (the watched run ended).
void recsys_watch_tasks_stop() {
  generation.fetch_add(1);
  current.store(nullptr);
}

}
