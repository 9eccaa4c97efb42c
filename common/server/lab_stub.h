// What the TODO(student) stubs of a lab starter call (labs/README.md, "Lab regions").
#pragma once

#include <cstdio>
#include <stdexcept>

namespace proxy {

/// Called by a lab starter's TODO(student) stub in place of the reference code: writes `what`
/// (e.g. "TODO(student) lab 3: BoundedQueue::pop (stage3-pool/bounded_queue.h)") and a newline
/// to stderr, then throws std::logic_error(what). It writes first because a stub reached on a
/// worker thread ends the process through std::terminate, and when two threads throw at once
/// the runtime aborts before it prints either message. Thread-safe; never returns.
[[noreturn]] inline void todo_student(const char* what) {
  std::fprintf(stderr, "%s\n", what);
  throw std::logic_error(what);
}

}  // namespace proxy
