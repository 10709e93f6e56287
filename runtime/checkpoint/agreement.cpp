#include "runtime/checkpoint/agreement.hpp"

#include <fmt/format.h>

#include <climits>

namespace saturn::ckpt {

CheckpointError::CheckpointError(std::filesystem::path file, std::string dataset,
                                 const std::string& message)
    : IoError(dataset.empty()
                  ? fmt::format("checkpoint {}: {}", file.string(), message)
                  : fmt::format("checkpoint {}: dataset {}: {}", file.string(), dataset, message)),
      file_(std::move(file)),
      dataset_(std::move(dataset)) {}

namespace detail {

int rank_of(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}

int size_of(MPI_Comm comm) {
  int s = 1;
  MPI_Comm_size(comm, &s);
  return s;
}

void bcast_string(MPI_Comm comm, int root, std::string& s) {
  auto n = static_cast<long long>(s.size());
  MPI_Bcast(&n, 1, MPI_LONG_LONG, root, comm);
  s.resize(static_cast<std::size_t>(n));
  if (n > 0) MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, root, comm);
}

void agree(MPI_Comm comm, const std::filesystem::path& file, const Status& st) {
  const int me = rank_of(comm);
  int mine = st.failed ? me : INT_MAX;
  int first = INT_MAX;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == INT_MAX) return;
  std::string ds = st.dataset, msg = st.message;
  int input = st.bad_input ? 1 : 0;
  bcast_string(comm, first, ds);
  bcast_string(comm, first, msg);
  MPI_Bcast(&input, 1, MPI_INT, first, comm);
  if (size_of(comm) > 1 && first != 0) msg += fmt::format(" (on rank {})", first);
  if (input) throw InputError(fmt::format("checkpoint {}: {}", file.string(), msg));
  throw CheckpointError(file, ds, msg);
}

}  // namespace detail
}  // namespace saturn::ckpt
