// Agreeing on failure before collective work: a rank that fails a local check (bad input, out
// of memory, an unreadable file) must not leave the others waiting in a collective. Every rank
// calls agree() at the same point with its own outcome; if any failed, all throw the same
// AgreedFailure, so all exit with the same code and the lowest failing rank's message.
#pragma once

#include <exception>
#include <string>

#include "runtime/comm/communicator.hpp"
#include "runtime/core/error.hpp"

namespace saturn::comm {

class AgreedFailure : public Error {
 public:
  AgreedFailure(const std::string& message, int exit_code, int origin_rank)
      : Error(message), exit_code_(exit_code), origin_rank_(origin_rank) {}
  // kExitBadInput for InputError / OutOfMemoryError on the failing rank, else kExitFailure.
  int exit_code() const { return exit_code_; }
  int origin_rank() const { return origin_rank_; }

 private:
  int exit_code_;
  int origin_rank_;
};

// Collective. Returns when no rank failed (`local` null everywhere); otherwise throws
// AgreedFailure on every rank with the message of the lowest failing rank (prefixed with
// "rank R: " when the communicator has several ranks and not all of them failed alike).
void agree(Communicator& comm, const std::exception_ptr& local);

// The end of a command after an agreed failure: rank 0 prints "saturn: error: MESSAGE" (as the
// executable's main() prints errors), then the ranks meet, then each returns the exit code.
// Collective. Meeting first matters: mpirun stops the whole job at the first non-zero exit,
// which could kill rank 0 before its message is out (seen in CI: an out-of-memory refusal that
// printed only mpirun's abort notice).
int report_agreed_failure(Communicator& comm, const AgreedFailure& failure);

// Runs f() and agrees on its outcome (see agree).
template <typename F>
void agree_on(Communicator& comm, F&& f) {
  std::exception_ptr failure;
  try {
    f();
  } catch (...) {
    failure = std::current_exception();
  }
  agree(comm, failure);
}

}  // namespace saturn::comm
