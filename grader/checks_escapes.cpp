// Checks for two bugs that once cost a student nothing: a response the origin cut off mid-body
// stored and served as a hit (cut-off), and a bounded queue that never makes the accept loop
// wait (queue-bound). Each has a planted-bug mutant in grader/mutants/ that it must catch.
#include <sys/eventfd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>

#include "check_support.h"
#include "net/socket.h"
#include "origin_server.h"

namespace grader {

using namespace std::chrono_literals;
namespace {

/// An origin that answers every request for the same object (4000 bytes, Content-Length
/// framed), but cuts the first answer off after half its body with a TCP reset: RFC 9112 §8
/// calls such a message incomplete, and RFC 9111 §3.3 forbids a cache to reuse it as a whole
/// response. Serves on a thread of its own; the destructor stops and joins it.
class CuttingOrigin {
 public:
  static constexpr std::size_t kSize = 4000;

  CuttingOrigin()
      : listener_(proxy::listen_tcp("127.0.0.1", 0)),
        stop_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
        thread_([this] { serve(); }) {}
  ~CuttingOrigin() {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(stop_.fd(), &one, sizeof one);  // ends accept_client's wait
    thread_.join();
  }
  CuttingOrigin(const CuttingOrigin&) = delete;
  CuttingOrigin& operator=(const CuttingOrigin&) = delete;

  [[nodiscard]] std::uint16_t port() const { return proxy::local_port(listener_); }
  /// Requests answered (or cut) so far. Any thread.
  [[nodiscard]] int requests() const { return requests_.load(); }

 private:
  void serve() {
    const std::string body = harness::deterministic_bytes(kSize);
    const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                             "Content-Length: " + std::to_string(kSize) + "\r\n\r\n";
    while (auto client = proxy::accept_client(listener_, stop_.fd())) {
      std::string request;
      char buf[4096];
      while (request.find("\r\n\r\n") == std::string::npos) {
        proxy::IoResult r = client->read_some(buf, 5000ms);
        if (r.status != proxy::IoStatus::ok || r.bytes == 0) break;
        request.append(buf, r.bytes);
      }
      if (request.find("\r\n\r\n") == std::string::npos) continue;
      if (requests_.fetch_add(1) == 0) {
        client->write_all(head + body.substr(0, kSize / 2), 5000ms);
        client->reset();
      } else {
        client->write_all(head + body, 5000ms);
      }
    }
  }

  proxy::Socket listener_;
  proxy::Socket stop_;  // an eventfd: readable once the destructor asks the thread to stop
  std::atomic<int> requests_{0};
  std::thread thread_;  // joined by the destructor, after stop_ is signalled
};

}  // namespace

RunOutcome check_cut_off(const CheckSpec&, const StageInfo& stage, const CheckContext& ctx) {
  CuttingOrigin origin;
  const std::string url = "http://127.0.0.1:" + std::to_string(origin.port()) + "/object";
  Launched proxy = launch(stage, "release", {"--cache-bytes", "100000", "--max-object-bytes", "50000"},
                          ctx, "cut-off");
  const std::uint16_t port = proxy.process->port();
  Verdict v;
  std::string err;
  auto first = try_fetch(port, url, err);
  v.expect(!first || !first->complete || first->body.size() < CuttingOrigin::kSize,
           "the client sees that the first response was cut off (it must not look whole)",
           first ? describe(*first) : err);
  auto second = try_fetch(port, url, err);
  v.expect(second && second->status == 200 && second->body == harness::deterministic_bytes(CuttingOrigin::kSize),
           "the same URL afterwards is fetched whole, byte-exact: the cut-off response was never stored",
           second ? describe(*second) + (second->body.size() == CuttingOrigin::kSize / 2
                                             ? " (the half the origin sent before it reset: served from the cache?)"
                                             : "")
                  : err);
  v.expect(origin.requests() == 2, "the second request reached the origin (a miss, not a hit)",
           "the origin saw " + std::to_string(origin.requests()) + " requests");
  expect_clean_stop(v, proxy);
  return {v.passed(), v.text(), {}};
}

RunOutcome check_queue_bound(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx) {
  const int queue = spec.params.value("queue", 2);
  const int flood = spec.params.value("clients", 12);
  const int hold_ms = spec.params.value("hold_ms", 4000);
  harness::OriginServer origin;
  const std::string base = "http://127.0.0.1:" + std::to_string(origin.port());
  Launched proxy = launch(stage, "release", {"--workers", "1", "--queue", std::to_string(queue)}, ctx,
                          "queue-bound");
  const std::uint16_t port = proxy.process->port();
  const pid_t pid = proxy.process->pid();
  const std::size_t idle_fds = fd_count(pid);
  Verdict v;
  std::vector<proxy::Socket> clients;
  clients.push_back(testing_support::send_request(
      port, testing_support::proxy_get(base + "/delay/" + std::to_string(hold_ms) + "/bytes/100")));
  v.expect(origin.wait_for_requests("/delay/", 1, 10s), "the one worker (--workers 1) is busy with a slow origin");
  for (int i = 0; i < flood; ++i) {
    clients.push_back(testing_support::send_request(
        port, testing_support::proxy_get(base + "/bytes/100?flood=" + std::to_string(i))));
  }
  // Inside the proxy at most: the worker's client and origin sockets, --queue queued clients,
  // and the one client the accept loop holds while it waits for room. The rest must stay in
  // the kernel's listen backlog, never accepted. What is never reached cannot be waited for, so
  // the count is watched for a fixed window (well within the slow origin's hold).
  const std::size_t bound = idle_fds + 2 + static_cast<std::size_t>(queue) + 1;
  std::size_t most = 0;
  const auto window_end = CheckClock::now() + std::chrono::milliseconds(hold_ms / 2);
  eventually([&] {
    most = std::max(most, fd_count(pid));
    return CheckClock::now() >= window_end;
  }, std::chrono::milliseconds(hold_ms));
  v.expect(most >= idle_fds + 2 + static_cast<std::size_t>(queue),
           "the queue fills: " + std::to_string(queue) + " clients wait inside the proxy (--queue " +
               std::to_string(queue) + ")",
           "at most " + std::to_string(most - std::min(most, idle_fds)) + " descriptors above idle");
  int served = 0;
  int shed = 0;
  // One deadline for the whole flood, not 30 s per client: a pool that stops serving (the
  // lost-wakeup mutant) then fails here with the count of answers, inside the rubric's time
  // limit, instead of being killed at it with no evidence. The worker is free after hold_ms and
  // every answer is 100 bytes, so 30 s more is generous on a loaded machine.
  const auto answers_due = CheckClock::now() + std::chrono::milliseconds(hold_ms) + 30s;
  for (std::size_t i = 0; i < clients.size(); ++i) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(answers_due - CheckClock::now());
    auto r = testing_support::read_response(clients[i], std::max(left, 200ms));
    if (r && r->status == 200 && r->body == harness::deterministic_bytes(100)) ++served;
    if (r && r->status == 503) ++shed;
  }
  v.expect(served + shed == static_cast<int>(clients.size()),
           "every client of the flood gets an answer once the worker is free: its response "
           "(byte-exact) or a 503 (load shedding)",
           std::to_string(served) + " served, " + std::to_string(shed) + " told 503, of " +
               std::to_string(clients.size()));
  const harness::ExitStatus stopped = expect_clean_stop(v, proxy);
  // A stage that sheds load (stage 4) accepts every connection and reads its request head
  // without a worker (it parks connections in epoll), then answers each request past the queue
  // 503 at once: the descriptors it holds for that moment are no queue, and how many there are
  // at the peak depends only on how fast the flood's heads arrive. What waited for a worker is
  // the peak its stats line reports.
  const std::size_t at = stopped.output.rfind("peak_queued=");
  // Such a stage says so in its stats line (shed=N). With none of the flood told 503 it waited
  // somewhere else (its queue grew, or the poller held the clients): the descriptors below
  // cannot tell, so it must not fall back on them and pass.
  const bool sheds = stopped.output.find(" shed=") != std::string::npos;
  if (sheds && shed == 0) {
    v.expect(false,
             "past a full queue a stage that sheds load answers each newcomer 503 at once",
             "not one of " + std::to_string(flood) + " clients flooding a full queue (--workers 1 "
             "--queue " + std::to_string(queue) + ") was told 503; the stats line says " +
                 stopped.output.substr(stopped.output.find(" shed="), 8));
  } else if (shed > 0 && at != std::string::npos) {
    const long peak = std::strtol(stopped.output.c_str() + at + 12, nullptr, 10);
    v.expect(peak <= queue,
             "while the queue is full each new request is shed at once with 503: at most --queue "
             "requests wait for a worker",
             "peak_queued=" + std::to_string(peak) + " in the stats line, past --queue " +
                 std::to_string(queue));
  } else {
    v.expect(most <= bound,
             "while the queue is full the accept loop stops accepting: no more than --queue "
             "clients (plus the one it holds) wait inside the proxy",
             "open descriptors rose to " + std::to_string(most) + " (idle " +
                 std::to_string(idle_fds) + ", bound " + std::to_string(bound) + "): " +
                 std::to_string(flood) +
                 " flooding clients were accepted instead of waiting in the listen backlog. "
                 "push() must wait for room (backpressure), not append past the capacity");
  }
  return {v.passed(), v.text(), {}};
}

}  // namespace grader
