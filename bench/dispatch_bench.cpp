// What it costs to hand one task to a thread: stage 2 creates a std::thread per task (and here
// joins it), stage 3 submits it to a worker that is already running. Each iteration dispatches
// one task and waits until it has run, so the time is dispatch + run + "done" seen by the
// submitter — the latency a connection pays before its transaction starts. Tasks are empty or
// spin for 10 µs (a cheap cache hit's worth of work). Wall-clock time: the submitter mostly
// waits, so its CPU time would hide the cost.
//
//   make bench-dispatch          (or build/release/bin/dispatch-bench)
#include <benchmark/benchmark.h>

#if __has_include("worker_pool.h")  // a tree without stage 3 (a lab starter) has no pool yet

#include <chrono>
#include <functional>
#include <semaphore>
#include <thread>

#include "worker_pool.h"

namespace {

// Busy work rather than a sleep: a 10 µs sleep takes 50+ µs of timer slack and scheduling.
void spin_for(std::chrono::microseconds duration) {
  const auto until = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < until) {
  }
}

void BM_ThreadPerTask(benchmark::State& state) {
  const std::chrono::microseconds work(state.range(0));
  for (auto _ : state) {
    std::thread thread([work] { spin_for(work); });
    thread.join();
  }
}

void BM_PoolSubmit(benchmark::State& state) {
  const std::chrono::microseconds work(state.range(0));
  std::binary_semaphore done(0);
  // One worker, as a pool that has a free worker looks to the task that arrives.
  proxy::WorkerPool<std::function<void()>> pool(1, 64, [](std::function<void()> task) { task(); });
  for (auto _ : state) {
    pool.submit([&done, work] {
      spin_for(work);
      done.release();
    });
    done.acquire();
  }
}

BENCHMARK(BM_ThreadPerTask)->ArgName("task_us")->Arg(0)->Arg(10)->UseRealTime();
BENCHMARK(BM_PoolSubmit)->ArgName("task_us")->Arg(0)->Arg(10)->UseRealTime();

}  // namespace

#endif  // __has_include("worker_pool.h")

BENCHMARK_MAIN();
