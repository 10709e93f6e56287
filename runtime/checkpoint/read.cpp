// Reading and verifying checkpoints: root attributes, sliced collective reads into any
// strategy's boxes, whole-file scans (saturn ckpt inspect), and streaming the weights.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>

#include "runtime/checkpoint/agreement.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/checkpoint/checksum.hpp"
#include "runtime/checkpoint/file_io.hpp"
#include "runtime/checkpoint/metadata.hpp"
#include "runtime/checkpoint/plan.hpp"
#include "runtime/model/config_diff.hpp"
#include "runtime/model/parameters.hpp"

namespace saturn::ckpt {

namespace fs = std::filesystem;
using namespace detail;

bool CheckpointInfo::all_ok() const {
  return std::all_of(datasets.begin(), datasets.end(),
                     [](const DatasetInfo& d) { return !d.verified || d.ok; });
}

CheckpointMeta read_meta(MPI_Comm comm, const fs::path& path) {
  h5::QuietErrors quiet;
  Status st;
  h5::Handle file = open_file(comm, path, st);
  agree(comm, path, st);
  CheckpointMeta m;
  attempt(st, "", [&] { m = read_root_attrs(file.get()); });
  agree(comm, path, st);
  return m;
}

namespace {

// Opens the file, reads and checks the metadata and the dataset layout (collective).
struct OpenCheckpoint {
  h5::Handle file;
  CheckpointMeta meta;
  bool with_optimizer = false;
};

OpenCheckpoint open_checked(MPI_Comm comm, const fs::path& path) {
  OpenCheckpoint oc;
  Status st;
  oc.file = open_file(comm, path, st);
  agree(comm, path, st);
  attempt(st, "", [&] { oc.meta = read_root_attrs(oc.file.get()); });
  agree(comm, path, st);
  oc.with_optimizer = check_datasets(oc.file.get(), oc.meta.model, st);
  agree(comm, path, st);
  return oc;
}

}  // namespace

CheckpointMeta read_checkpoint(MPI_Comm comm, const fs::path& path, const StateView& into,
                               const ReadOptions& options) {
  const StateSlices* lists[kKinds] = {&into.params, &into.m, &into.v};
  return read_checkpoint(
      comm, path, [&](StatePart part) { return *lists[static_cast<int>(part)]; },
      [](StatePart, const StateSlices&) {}, options);
}

namespace {

// InputError when the checkpoint's model has other tensors than the job's: both models' shapes
// and switches, and the first tensor that differs (its name and shapes, or its absence).
void check_model(const fs::path& path, const ModelConfig& stored, const ModelConfig& job) {
  const ParameterLayout want(job), have(stored);
  const auto& w = want.tensors();
  const auto& h = have.tensors();
  std::size_t i = 0;
  while (i < w.size() && i < h.size() && w[i].name == h[i].name && w[i].shape == h[i].shape) ++i;
  const std::optional<ModelDifference> diff = first_difference(stored, job);
  if (i == w.size() && i == h.size()) {
    if (!diff) return;
    // The same tensors computing another function (a window, a scale, soft-capping, rotary
    // frequencies, the norms): its weights were trained for another model.
    throw InputError(fmt::format(
        "checkpoint {} holds a model with {} = {}, this job's has {}: the same tensors computing "
        "another function (valid: the job's model as the checkpoint was trained)",
        path.string(), diff->field, diff->first, diff->second));
  }
  const auto shape = [](const ModelConfig& m) {
    return fmt::format(
        "{} model (n_layer {}, n_head {}, n_kv_head {}, head_dim {}, d_model {}, d_ff {}, vocab "
        "{}{}{}{}{}{})",
        arch_name(m.arch), m.n_layer, m.n_head, m.kv_heads(), m.head_dim(), m.d_model, m.ffn_dim(),
        m.vocab_size, m.tied() ? ", tied head" : "", m.qkv_bias ? ", q/k/v biases" : "",
        m.o_bias ? ", o bias" : "", m.mlp_bias ? ", MLP biases" : "",
        m.post_norms ? ", post-norms" : "");
  };
  const auto tensor = [](const std::vector<ParamTensor>& ts, std::size_t k) {
    return k < ts.size() ? fmt::format("{} {}", ts[k].name, fmt::join(ts[k].shape, "x"))
                         : std::string("nothing");
  };
  throw InputError(fmt::format(
      "checkpoint {} holds a {}, not this job's {}: its tensor {} is {} in the checkpoint, {} "
      "for the job",
      path.string(), shape(stored), shape(job), i, tensor(h, i), tensor(w, i)));
}

}  // namespace

CheckpointMeta read_checkpoint(MPI_Comm comm, const fs::path& path, const SliceSource& source,
                               const SliceSink& sink, const ReadOptions& options) {
  h5::QuietErrors quiet;
  const int me = rank_of(comm);
  OpenCheckpoint oc = open_checked(comm, path);
  if (options.check_meta) {
    Status st;
    try {
      options.check_meta(oc.meta);
    } catch (const InputError& e) {
      st.fail("", e.what(), true);
    } catch (const std::exception& e) {
      st.fail("", e.what());
    }
    agree(comm, path, st);
  }
  if (options.expect_model) check_model(path, oc.meta.model, *options.expect_model);
  Status st;
  h5::Handle dxpl;
  attempt(st, "", [&] { dxpl = transfer_props(options.two_phase_io); });
  agree(comm, path, st);
  const bool verify = options.verify != Verify::kNone;
  for (int kind = 0; kind < kKinds; ++kind) {
    StateSlices slices;
    attempt(st, kGroup[kind], [&] { slices = source(static_cast<StatePart>(kind)); });
    agree(comm, path, st);
    const auto descs = gather_descs(comm, kind, slices);
    const bool any = any_slices(descs);
    if (kind != kParams && !oc.with_optimizer) {
      if (any)
        throw CheckpointError(path, "/optimizer",
                              "the file holds weights only, but the optimizer state was asked for");
      continue;
    }
    if (!any && options.verify != Verify::kAll) continue;
    const auto plan = make_plan(descs, expected_of_kind(oc.meta.model, kind), path, false);
    std::vector<std::uint64_t> stored(plan.size(), 0), local(plan.size(), 0);
    std::vector<char> from_reads(plan.size(), 0);  // verified from the data read
    for (std::size_t d = 0; d < plan.size(); ++d) {
      const DatasetPlan& p = plan[d];
      if (p.rounds == 0 && options.verify != Verify::kAll) continue;
      const std::string dpath = p.path();
      h5::Handle ds;
      attempt(st, dpath, [&] {
        ds = h5::dataset(check(H5Dopen2(oc.file.get(), dpath.c_str(), H5P_DEFAULT), "cannot open"));
        if (verify) stored[d] = h5::read_u64_attr(ds.get(), "checksum");
      });
      agree(comm, path, st);
      const auto& mine = p.mine[static_cast<std::size_t>(me)];
      const auto& kept = p.kept[static_cast<std::size_t>(me)];
      for (int round = 0; round < p.rounds; ++round) {
        const int idx =
            round < static_cast<int>(mine.size()) ? mine[static_cast<std::size_t>(round)] : -1;
        const TensorSlice* sl = idx >= 0 ? &slices[static_cast<std::size_t>(idx)] : nullptr;
        transfer(st, dpath, ds.get(), dxpl.get(),
                 sl ? std::vector<Box>{Box{sl->start, sl->count}} : std::vector<Box>{},
                 sl ? sl->elements() : 0, sl ? sl->data : nullptr, false);
        if (sl && !st.failed && verify && p.tiled &&
            std::find(kept.begin(), kept.end(), idx) != kept.end())
          local[d] += hash_box(sl->shape, sl->start, sl->count, sl->data);
      }
      // Transfers take part (empty) after a failure, so one agreement per dataset suffices.
      const bool split = !(verify && p.tiled) && options.verify == Verify::kAll;
      const std::uint64_t sum =
          split ? split_hash(comm, ds.get(), p.shape, dxpl.get(), st, dpath) : 0;
      attempt(st, dpath, [&] {
        if (!ds.reset()) h5_fail("cannot close");
      });
      agree(comm, path, st);
      if (verify && p.tiled) {
        from_reads[d] = 1;
      } else if (split && sum != stored[d]) {
        throw CheckpointError(path, dpath,
                              fmt::format("checksum mismatch (stored {}, computed {}): the data "
                                          "is corrupt",
                                          format_checksum(stored[d]), format_checksum(sum)));
      }
    }
    if (verify) {
      std::vector<std::uint64_t> sums(plan.size(), 0);
      MPI_Allreduce(local.data(), sums.data(), static_cast<int>(plan.size()), MPI_UINT64_T, MPI_SUM,
                    comm);
      for (std::size_t d = 0; d < plan.size(); ++d)
        if (from_reads[d] && sums[d] != stored[d])
          throw CheckpointError(path, plan[d].path(),
                                fmt::format("checksum mismatch (stored {}, computed {}): the "
                                            "data is corrupt",
                                            format_checksum(stored[d]), format_checksum(sums[d])));
    }
    if (any) {
      attempt(st, kGroup[kind], [&] { sink(static_cast<StatePart>(kind), slices); });
      agree(comm, path, st);
    }
  }
  dxpl.reset();
  attempt(st, "", [&] {
    if (!oc.file.reset()) h5_fail("cannot close");
  });
  agree(comm, path, st);
  return oc.meta;
}

CheckpointInfo scan_checkpoint(MPI_Comm comm, const fs::path& path, bool verify) {
  h5::QuietErrors quiet;
  OpenCheckpoint oc = open_checked(comm, path);
  CheckpointInfo info;
  info.meta = oc.meta;
  Status st;
  h5::Handle dxpl;
  attempt(st, "", [&] { dxpl = transfer_props(false); });
  agree(comm, path, st);
  for (const auto& [key, shape] : expected_datasets(oc.meta.model, oc.with_optimizer)) {
    DatasetInfo di;
    di.path = dataset_path(key.first, key.second);
    di.shape = shape;
    h5::Handle ds;
    attempt(st, di.path, [&] {
      ds = h5::dataset(check(H5Dopen2(oc.file.get(), di.path.c_str(), H5P_DEFAULT), "cannot open"));
      di.stored_checksum = h5::read_u64_attr(ds.get(), "checksum");
    });
    agree(comm, path, st);
    if (verify) di.computed_checksum = split_hash(comm, ds.get(), shape, dxpl.get(), st, di.path);
    attempt(st, di.path, [&] {
      if (!ds.reset()) h5_fail("cannot close");
    });
    agree(comm, path, st);
    di.verified = verify;
    di.ok = verify && di.computed_checksum == di.stored_checksum;
    info.datasets.push_back(std::move(di));
  }
  return info;
}

CheckpointMeta visit_model_tensors(const fs::path& path, const TensorVisitor& f) {
  h5::QuietErrors quiet;
  MPI_Comm comm = MPI_COMM_SELF;
  OpenCheckpoint oc = open_checked(comm, path);
  Status st;
  h5::Handle dxpl;
  attempt(st, "", [&] { dxpl = transfer_props(false); });
  agree(comm, path, st);
  std::vector<float> buf;
  for (const auto& [key, shape] : expected_datasets(oc.meta.model, false)) {
    const std::string dpath = dataset_path(key.first, key.second);
    std::uint64_t stored = 0;
    h5::Handle ds;
    attempt(st, dpath, [&] {
      ds = h5::dataset(check(H5Dopen2(oc.file.get(), dpath.c_str(), H5P_DEFAULT), "cannot open"));
      stored = h5::read_u64_attr(ds.get(), "checksum");
    });
    agree(comm, path, st);
    const std::int64_t n = numel(shape);
    buf.resize(static_cast<std::size_t>(n));
    transfer(st, dpath, ds.get(), dxpl.get(),
             {Box{std::vector<std::int64_t>(shape.size(), 0), shape}}, n, buf.data(), false);
    agree(comm, path, st);
    const std::uint64_t sum = hash_run(0, buf.data(), buf.size());
    if (sum != stored)
      throw CheckpointError(path, dpath,
                            fmt::format("checksum mismatch (stored {}, computed {}): the data is "
                                        "corrupt",
                                        format_checksum(stored), format_checksum(sum)));
    f(key.second, shape, buf.data(), buf.size());
  }
  return oc.meta;
}

}  // namespace saturn::ckpt
