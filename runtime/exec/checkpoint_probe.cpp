#include "runtime/exec/checkpoint_probe.hpp"

#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/checkpoint/slices.hpp"
#include "runtime/model/parameters.hpp"
#include "runtime/profile/cost_model.hpp"

namespace saturn::exec {

double checkpoint_dataset_seconds(const std::filesystem::path& dir,
                                  const profile::WriteRates& rates) {
  // 8 blocks of tiny tensors: 100 trained tensors, 300 datasets, 150 KiB.
  ckpt::CheckpointMeta meta;
  meta.job_id = "write-probe";
  meta.model.n_layer = 8;
  meta.model.n_head = 2;
  meta.model.d_model = 16;
  meta.model.vocab_size = 64;
  meta.model.max_seq_len = 16;
  meta.train.batch_size = 1;
  meta.train.seq_len = 16;
  const ParameterLayout layout(meta.model);
  std::vector<float> params(layout.total(), 0.5f), m(layout.total(), 0.0f), v(layout.total(), 0.0f);
  const ckpt::StateView state{ckpt::whole_tensor_slices(layout, params.data()),
                              ckpt::whole_tensor_slices(layout, m.data()),
                              ckpt::whole_tensor_slices(layout, v.data())};
  const std::filesystem::path path =
      dir / fmt::format(".saturn-checkpoint-probe-{}.h5", ::getpid());
  double fastest = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ckpt::write_checkpoint(MPI_COMM_SELF, path, meta, state);
    fastest = std::min(
        fastest, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  const double datasets = profile::checkpoint_datasets(meta.model);
  const double beyond = fastest - rates.seconds(profile::checkpoint_bytes(meta.model));
  return std::max(0.0, beyond / datasets);
}

}  // namespace saturn::exec
