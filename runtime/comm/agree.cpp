#include "runtime/comm/agree.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace saturn::comm {

void agree(Communicator& comm, const std::exception_ptr& local) {
  std::int32_t code = kExitOk;
  std::string message;
  if (local) {
    try {
      std::rethrow_exception(local);
    } catch (const AgreedFailure& e) {
      code = e.exit_code();
      message = e.what();
    } catch (const InputError& e) {
      code = kExitBadInput;
      message = e.what();
    } catch (const OutOfMemoryError& e) {
      code = kExitBadInput;
      message = e.what();
    } catch (const std::exception& e) {
      code = kExitFailure;
      message = e.what();
    } catch (...) {
      code = kExitFailure;
      message = "unknown error";
    }
  }
  // [failed?, lowest failing rank as -rank for MAX, exit code]
  std::int32_t any[2] = {code != kExitOk ? 1 : 0, code != kExitOk ? -comm.rank() : INT32_MIN};
  comm.allreduce(any, 2, ReduceOp::kMax);
  if (any[0] == 0) return;
  const int origin = -any[1];
  std::int32_t failed_here = code != kExitOk ? 1 : 0;
  comm.allreduce(&failed_here, 1, ReduceOp::kSum);
  std::int64_t length = comm.rank() == origin ? static_cast<std::int64_t>(message.size()) : 0;
  std::int32_t origin_code = comm.rank() == origin ? code : 0;
  comm.broadcast(&length, 1, origin);
  comm.broadcast(&origin_code, 1, origin);
  std::vector<std::int32_t> chars(static_cast<std::size_t>(length));
  if (comm.rank() == origin)
    for (std::size_t i = 0; i < chars.size(); ++i)
      chars[i] = static_cast<unsigned char>(message[i]);
  if (length > 0) comm.broadcast(chars.data(), chars.size(), origin);
  std::string text(chars.size(), ' ');
  for (std::size_t i = 0; i < chars.size(); ++i) text[i] = static_cast<char>(chars[i]);
  if (comm.size() > 1 && failed_here < comm.size()) text = fmt::format("rank {}: {}", origin, text);
  throw AgreedFailure(text, origin_code, origin);
}

int report_agreed_failure(Communicator& comm, const AgreedFailure& failure) {
  if (comm.rank() == 0) {
    std::fprintf(stderr, "saturn: error: %s\n", failure.what());
    std::fflush(stderr);
  }
  comm.barrier();
  return failure.exit_code();
}

}  // namespace saturn::comm
