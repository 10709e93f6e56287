#include "runtime/checkpoint/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "runtime/checkpoint/checksum.hpp"
#include "runtime/checkpoint/h5.hpp"
#include "runtime/checkpoint/slices.hpp"
#include "runtime/model/parameters.hpp"
#include "runtime/workload/config_json.hpp"

namespace saturn::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;

CheckpointError::CheckpointError(fs::path file, std::string dataset, const std::string& message)
    : IoError(dataset.empty()
                  ? fmt::format("checkpoint {}: {}", file.string(), message)
                  : fmt::format("checkpoint {}: dataset {}: {}", file.string(), dataset, message)),
      file_(std::move(file)),
      dataset_(std::move(dataset)) {}

bool CheckpointInfo::all_ok() const {
  return std::all_of(datasets.begin(), datasets.end(),
                     [](const DatasetInfo& d) { return !d.verified || d.ok; });
}

namespace {

// ---------------------------------------------------------------------------------------------
// MPI helpers and the agreement protocol

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

// A rank's outcome of one phase; phases never throw between collective HDF5 calls, so every
// rank reaches the agreement point, and then every rank throws the same error.
struct Status {
  bool failed = false;
  std::string dataset;
  std::string message;
  void fail(std::string ds, std::string msg) {
    if (failed) return;  // keep the first cause
    failed = true;
    dataset = std::move(ds);
    message = std::move(msg);
  }
};

// Runs f, recording an exception as this rank's failure.
template <typename F>
void attempt(Status& st, const std::string& dataset, F&& f) {
  if (st.failed) return;
  try {
    f();
  } catch (const std::exception& e) {
    st.fail(dataset, e.what());
  }
}

// If any rank failed, every rank throws the lowest failing rank's CheckpointError.
void agree(MPI_Comm comm, const fs::path& file, const Status& st) {
  const int me = rank_of(comm);
  int mine = st.failed ? me : INT_MAX;
  int first = INT_MAX;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == INT_MAX) return;
  std::string ds = st.dataset, msg = st.message;
  bcast_string(comm, first, ds);
  bcast_string(comm, first, msg);
  if (size_of(comm) > 1 && first != 0) msg += fmt::format(" (on rank {})", first);
  throw CheckpointError(file, ds, msg);
}

[[noreturn]] void h5_fail(const std::string& what) {
  const std::string cause = h5::take_error();
  throw std::runtime_error(cause.empty() ? what : what + ": " + cause);
}

hid_t check(hid_t id, const std::string& what) {
  if (id < 0) h5_fail(what);
  return id;
}

void check_err(herr_t rc, const std::string& what) {
  if (rc < 0) h5_fail(what);
}

// ---------------------------------------------------------------------------------------------
// Metadata

enum Kind { kParams = 0, kMoment1 = 1, kMoment2 = 2 };
constexpr int kKinds = 3;
const char* const kGroup[kKinds] = {"/model", "/optimizer/m", "/optimizer/v"};

std::string dataset_path(int kind, const std::string& name) {
  return std::string(kGroup[kind]) + "/" + name;
}

json meta_to_json(const CheckpointMeta& m) {
  return json{{"job_id", m.job_id},
              {"step", m.step},
              {"tokens_seen", m.tokens_seen},
              {"schedule_step", m.schedule_step},
              {"model", to_json(m.model)},
              {"train", to_json(m.train)},
              {"strategy", m.strategy},
              {"devices", m.devices},
              {"data_position", m.data_position},
              {"rng_state", m.rng_state},
              {"compute_threads", m.compute_threads},
              {"created_utc", m.created_utc}};
}

CheckpointMeta meta_from_json(const json& j) {
  CheckpointMeta m;
  m.job_id = j.at("job_id").get<std::string>();
  m.step = j.at("step").get<std::int64_t>();
  m.tokens_seen = j.at("tokens_seen").get<std::int64_t>();
  m.schedule_step = j.at("schedule_step").get<std::int64_t>();
  m.model = model_config_from_json(j.at("model"));
  m.train = train_config_from_json(j.at("train"));
  m.strategy = j.at("strategy").get<std::string>();
  m.devices = j.at("devices").get<int>();
  m.data_position = j.at("data_position").get<std::string>();
  m.rng_state = j.at("rng_state").get<std::string>();
  m.compute_threads = j.value("compute_threads", 0);
  m.created_utc = j.at("created_utc").get<std::string>();
  return m;
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void write_root_attrs(hid_t file, const CheckpointMeta& m) {
  h5::write_string_attr(file, "format", kFormat);
  h5::write_int_attr(file, "version", kVersion);
  h5::write_string_attr(file, "job_id", m.job_id);
  h5::write_int_attr(file, "step", m.step);
  h5::write_int_attr(file, "tokens_seen", m.tokens_seen);
  if (m.schedule_step >= 0 && m.schedule_step != m.step)
    h5::write_int_attr(file, "schedule_step", m.schedule_step);
  h5::write_string_attr(file, "model_config", to_json(m.model).dump());
  h5::write_string_attr(file, "train_config", to_json(m.train).dump());
  h5::write_string_attr(file, "strategy", m.strategy);
  h5::write_int_attr(file, "devices", m.devices);
  h5::write_string_attr(file, "data_position", m.data_position);
  h5::write_string_attr(file, "rng_state", m.rng_state);
  if (m.compute_threads > 0) h5::write_int_attr(file, "compute_threads", m.compute_threads);
  h5::write_string_attr(file, "created_utc", m.created_utc);
  h5::write_string_attr(file, "checksum_algorithm", kChecksumAlgorithm);
}

// Reads and checks the root attributes: format and version first, so that a foreign file is
// reported as such rather than as a missing attribute.
CheckpointMeta read_root_attrs(hid_t file) {
  if (!h5::has_attr(file, "format"))
    throw std::runtime_error(fmt::format("not a Saturn checkpoint (no 'format' attribute)"));
  const std::string format = h5::read_string_attr(file, "format");
  if (format != kFormat)
    throw std::runtime_error(
        fmt::format("not a Saturn checkpoint (format '{}', expected '{}')", format, kFormat));
  const std::int64_t version = h5::read_int_attr(file, "version");
  if (version != kVersion)
    throw std::runtime_error(
        fmt::format("format version {} is not supported by this build (it reads version {})",
                    version, kVersion));
  CheckpointMeta m;
  m.job_id = h5::read_string_attr(file, "job_id");
  m.step = h5::read_int_attr(file, "step");
  m.tokens_seen = h5::read_int_attr(file, "tokens_seen");
  m.schedule_step =
      h5::has_attr(file, "schedule_step") ? h5::read_int_attr(file, "schedule_step") : -1;
  try {
    m.model = model_config_from_json(json::parse(h5::read_string_attr(file, "model_config")));
    m.model.validate();
    m.train = train_config_from_json(json::parse(h5::read_string_attr(file, "train_config")));
  } catch (const json::exception& e) {
    throw std::runtime_error(
        fmt::format("model_config/train_config is not valid JSON: {}", e.what()));
  }
  m.strategy = h5::read_string_attr(file, "strategy");
  m.devices = static_cast<int>(h5::read_int_attr(file, "devices"));
  m.data_position = h5::read_string_attr(file, "data_position");
  m.rng_state = h5::read_string_attr(file, "rng_state");
  if (h5::has_attr(file, "compute_threads"))
    m.compute_threads = static_cast<int>(h5::read_int_attr(file, "compute_threads"));
  m.created_utc = h5::read_string_attr(file, "created_utc");
  return m;
}

// ---------------------------------------------------------------------------------------------
// Slice descriptors and the global plan (identical on every rank)

struct Desc {
  int kind = 0;
  std::string name;
  std::vector<std::int64_t> shape;
  Box box;
  bool has_data = false;
  int local = 0;       // index into the rank's list of this kind
  bool writer = true;  // false: a replica another rank writes
};

// TensorSlice::writer (when the strategies' contract has it): false marks a replica this rank
// must not write. Detected at compile time so that either form of the struct works.
template <typename S>
bool writes(const S& s) {
  if constexpr (requires { s.writer; })
    return static_cast<bool>(s.writer);
  else
    return true;
}

std::vector<std::vector<Desc>> gather_descs(MPI_Comm comm, int kind, const StateSlices& slices) {
  json local = json::array();
  for (std::size_t i = 0; i < slices.size(); ++i) {
    const TensorSlice& s = slices[i];
    local.push_back(json{kind, s.name, s.shape, s.start, s.count, s.data != nullptr, i, writes(s)});
  }
  const std::string mine = local.dump();
  const int P = size_of(comm);
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(P), displs(P);
  MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm);
  long long total = 0;
  for (int r = 0; r < P; ++r) {
    displs[r] = static_cast<int>(total);
    total += lens[r];
  }
  if (total > INT_MAX) throw Error("checkpoint: slice descriptors exceed 2 GiB");
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR,
                 comm);
  std::vector<std::vector<Desc>> out(P);
  for (int r = 0; r < P; ++r) {
    const json j = json::parse(all.substr(displs[r], lens[r]));
    for (const auto& e : j) {
      Desc d;
      d.kind = e[0].get<int>();
      d.name = e[1].get<std::string>();
      d.shape = e[2].get<std::vector<std::int64_t>>();
      d.box.start = e[3].get<std::vector<std::int64_t>>();
      d.box.count = e[4].get<std::vector<std::int64_t>>();
      d.has_data = e[5].get<bool>();
      d.local = e[6].get<int>();
      d.writer = e[7].get<bool>();
      out[r].push_back(std::move(d));
    }
  }
  return out;
}

struct DatasetPlan {
  int kind = 0;
  std::string name;
  std::vector<std::int64_t> shape;
  // Per rank: indices into that rank's slices of this kind that it moves, and the subset whose
  // hash counts (replicated boxes count once).
  std::vector<std::vector<int>> mine;
  std::vector<std::vector<int>> kept;
  bool tiled = false;  // kept boxes cover the tensor exactly once
  int rounds = 0;      // max over ranks of mine[r].size()
  std::string path() const { return dataset_path(kind, name); }
};

// Groups every rank's slices by dataset, checks them against the expected shapes, and marks
// which copy of a replicated box counts. `expected` lists (kind, name) -> shape in file order.
// Throws Error naming the dataset (every rank throws the same, as all see the same input).
std::vector<DatasetPlan> make_plan(
    const std::vector<std::vector<Desc>>& descs,
    const std::vector<std::pair<std::pair<int, std::string>, std::vector<std::int64_t>>>& expected,
    const fs::path& file, bool writing) {
  std::map<std::pair<int, std::string>, std::size_t> index;
  std::vector<DatasetPlan> plan;
  plan.reserve(expected.size());
  for (const auto& [key, shape] : expected) {
    index[key] = plan.size();
    DatasetPlan p;
    p.kind = key.first;
    p.name = key.second;
    p.shape = shape;
    p.mine.resize(descs.size());
    p.kept.resize(descs.size());
    plan.push_back(std::move(p));
  }
  auto bad = [&](const std::string& ds, const std::string& msg) {
    return Error(fmt::format("checkpoint {}: dataset {}: {}", file.string(), ds, msg));
  };
  for (std::size_t r = 0; r < descs.size(); ++r) {
    for (std::size_t i = 0; i < descs[r].size(); ++i) {
      const Desc& d = descs[r][i];
      if (d.kind < 0 || d.kind >= kKinds) throw Error("checkpoint: bad slice kind");
      const std::string ds = dataset_path(d.kind, d.name);
      const auto it = index.find({d.kind, d.name});
      if (it == index.end())
        throw bad(ds, fmt::format("rank {} passes a slice of a tensor that is not in {}", r,
                                  writing ? "the model's layout" : "the checkpoint"));
      DatasetPlan& p = plan[it->second];
      if (d.shape != p.shape)
        throw bad(ds, fmt::format("rank {} gives shape [{}], the {} has [{}]", r,
                                  fmt::join(d.shape, ", "), writing ? "model" : "checkpoint",
                                  fmt::join(p.shape, ", ")));
      const auto nd = p.shape.size();
      bool in_bounds = d.box.start.size() == nd && d.box.count.size() == nd;
      for (std::size_t k = 0; in_bounds && k < nd; ++k)
        in_bounds = d.box.start[k] >= 0 && d.box.count[k] >= 0 &&
                    d.box.start[k] + d.box.count[k] <= p.shape[k];
      if (!in_bounds)
        throw bad(ds, fmt::format("rank {} gives a box start [{}] count [{}] outside [{}]", r,
                                  fmt::join(d.box.start, ", "), fmt::join(d.box.count, ", "),
                                  fmt::join(p.shape, ", ")));
      if (d.box.elements() > 0 && !d.has_data)
        throw bad(ds, fmt::format("rank {} gives a non-empty slice without data", r));
      if (d.box.elements() > 0 && (d.writer || !writing))
        p.mine[r].push_back(static_cast<int>(i));  // into descs[r]
    }
  }
  for (DatasetPlan& p : plan) {
    // The lowest rank holding a box counts it; identical boxes elsewhere are replicas.
    std::vector<std::pair<int, const Box*>> kept;
    std::int64_t covered = 0;
    for (std::size_t r = 0; r < descs.size(); ++r) {
      for (int i : p.mine[r]) {
        const Box& b = descs[r][static_cast<std::size_t>(i)].box;
        const bool dup =
            std::any_of(kept.begin(), kept.end(), [&](const auto& k) { return *k.second == b; });
        if (dup) continue;
        kept.emplace_back(static_cast<int>(r), &b);
        p.kept[r].push_back(i);
        covered += b.elements();
      }
      p.rounds = std::max(p.rounds, static_cast<int>(p.mine[r].size()));
    }
    bool disjoint = true;
    // Pairwise overlap test where it is cheap; beyond that, the element count alone.
    if (kept.size() <= 256) {
      for (std::size_t a = 0; a < kept.size() && disjoint; ++a)
        for (std::size_t b = a + 1; b < kept.size() && disjoint; ++b)
          if (overlaps(*kept[a].second, *kept[b].second)) {
            disjoint = false;
            if (writing)
              throw bad(p.path(), fmt::format("slices from ranks {} and {} overlap without being "
                                              "identical (pass replicated data as identical boxes)",
                                              kept[a].first, kept[b].first));
          }
    }
    p.tiled = disjoint && covered == numel(p.shape);
    if (writing && !p.tiled)
      throw bad(p.path(), fmt::format("the ranks' slices cover {} of {} elements (every element "
                                      "must be held by some rank)",
                                      covered, numel(p.shape)));
    if (writing) p.mine = p.kept;  // only one copy of a replicated box is written
    for (std::size_t r = 0; r < descs.size(); ++r)
      for (auto* list : {&p.mine[r], &p.kept[r]})
        for (int& i : *list) i = descs[r][static_cast<std::size_t>(i)].local;
  }
  return plan;
}

using Expected = std::vector<std::pair<std::pair<int, std::string>, std::vector<std::int64_t>>>;

Expected expected_datasets(const ModelConfig& model, bool with_optimizer) {
  const ParameterLayout layout(model);
  Expected out;
  for (int k = 0; k < (with_optimizer ? kKinds : 1); ++k)
    for (const auto& t : layout.tensors()) out.push_back({{k, t.name}, t.shape});
  return out;
}

// The datasets of one kind.
Expected expected_of_kind(const ModelConfig& model, int kind) {
  const ParameterLayout layout(model);
  Expected out;
  for (const auto& t : layout.tensors()) out.push_back({{kind, t.name}, t.shape});
  return out;
}

bool any_slices(const std::vector<std::vector<Desc>>& descs) {
  for (const auto& d : descs)
    if (!d.empty()) return true;
  return false;
}

// ---------------------------------------------------------------------------------------------
// HDF5 file access

// meta_block: bytes of metadata to allocate together when creating a file (0: HDF5's default).
h5::Handle file_access(MPI_Comm comm, std::size_t meta_block = 0) {
  h5::Handle fapl = h5::plist(check(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"));
  check_err(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL), "H5Pset_fapl_mpio");
  // Metadata is read by one rank and broadcast, and written collectively: every rank sees the
  // same metadata and none of them hammer the file system.
  check_err(H5Pset_all_coll_metadata_ops(fapl.get(), true), "H5Pset_all_coll_metadata_ops");
  check_err(H5Pset_coll_metadata_write(fapl.get(), true), "H5Pset_coll_metadata_write");
  // The 1.8+ object format checksums its metadata, so a flipped byte in a header is detected
  // too; h5py and every HDF5 >= 1.8 read it.
  check_err(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V110),
            "H5Pset_libver_bounds");
  // Object headers and attributes of hundreds of datasets are allocated together instead of
  // between the datasets' data: a cold open then reads them with a few sequential I/Os
  // (readahead) rather than hundreds of scattered small ones (strace: 700 reads of 0.5-3 KiB
  // spread over a 1.5 GB file before, within its first MiB after).
  if (meta_block > 0)
    check_err(H5Pset_meta_block_size(fapl.get(), meta_block), "H5Pset_meta_block_size");
  return fapl;
}

h5::Handle transfer_props(bool two_phase) {
  h5::Handle dxpl = h5::plist(check(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate"));
  check_err(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE), "H5Pset_dxpl_mpio");
  if (!two_phase)
    check_err(H5Pset_dxpl_mpio_collective_opt(dxpl.get(), H5FD_MPIO_INDIVIDUAL_IO),
              "H5Pset_dxpl_mpio_collective_opt");
  return dxpl;
}

h5::Handle open_file(MPI_Comm comm, const fs::path& path, Status& st) {
  h5::Handle f;
  attempt(st, "", [&] {
    h5::Handle fapl = file_access(comm);
    f = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
    if (!f) {
      std::error_code ec;
      if (!fs::exists(path, ec)) throw std::runtime_error("no such file");
      h5_fail("cannot open as HDF5");
    }
  });
  return f;
}

// File space with the union of `boxes` selected (a flat range: the union's row-major order is
// the range's order, so one contiguous buffer receives it).
h5::Handle select_boxes(hid_t ds, const std::vector<Box>& boxes) {
  h5::Handle fs_ = h5::space(check(H5Dget_space(ds), "H5Dget_space"));
  if (boxes.empty()) check_err(H5Sselect_none(fs_.get()), "H5Sselect_none");
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    std::vector<hsize_t> start(boxes[i].start.begin(), boxes[i].start.end());
    std::vector<hsize_t> count(boxes[i].count.begin(), boxes[i].count.end());
    check_err(H5Sselect_hyperslab(fs_.get(), i == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, start.data(),
                                  nullptr, count.data(), nullptr),
              "H5Sselect_hyperslab");
  }
  return fs_;
}

h5::Handle memory_space(std::int64_t elements) {
  const hsize_t n = elements > 0 ? static_cast<hsize_t>(elements) : 1;
  h5::Handle ms = h5::space(check(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"));
  if (elements <= 0) check_err(H5Sselect_none(ms.get()), "H5Sselect_none");
  return ms;
}

std::vector<std::int64_t> dataset_shape(hid_t ds) {
  h5::Handle sp = h5::space(check(H5Dget_space(ds), "H5Dget_space"));
  const int nd = H5Sget_simple_extent_ndims(sp.get());
  if (nd < 0) h5_fail("H5Sget_simple_extent_ndims");
  std::vector<hsize_t> dims(static_cast<std::size_t>(nd));
  H5Sget_simple_extent_dims(sp.get(), dims.data(), nullptr);
  return {dims.begin(), dims.end()};
}

// Checks that the file holds exactly the datasets of `model`'s layout (and, if it has an
// /optimizer group, the moments too), float32 with the layout's shapes. Returns whether the
// optimizer state is present. Collective (metadata reads only).
bool check_datasets(hid_t file, const ModelConfig& model, Status& st) {
  bool with_optimizer = false;
  attempt(st, "", [&] {
    with_optimizer = H5Lexists(file, "optimizer", H5P_DEFAULT) > 0;
    if (H5Lexists(file, "model", H5P_DEFAULT) <= 0) throw std::runtime_error("no /model group");
  });
  const ParameterLayout layout(model);
  for (int k = 0; k < (with_optimizer ? kKinds : 1) && !st.failed; ++k) {
    attempt(st, kGroup[k], [&] {
      if (k > 0 && H5Lexists(file, "optimizer", H5P_DEFAULT) > 0 &&
          H5Lexists(file, kGroup[k], H5P_DEFAULT) <= 0)
        throw std::runtime_error("group missing");
      h5::Handle g = h5::group(check(H5Gopen2(file, kGroup[k], H5P_DEFAULT), "cannot open"));
      const auto names = h5::list_group(g.get());
      for (const auto& t : layout.tensors()) {
        if (!std::binary_search(names.begin(), names.end(), t.name))
          throw std::runtime_error(
              fmt::format("missing dataset {} ({} {} of the checkpoint's model_config has it)",
                          dataset_path(k, t.name), arch_name(model.arch), model.n_layer));
      }
      for (const auto& n : names) {
        bool known = false;
        for (const auto& t : layout.tensors()) known = known || t.name == n;
        if (!known)
          throw std::runtime_error(fmt::format(
              "dataset {} is not a tensor of the checkpoint's model_config", dataset_path(k, n)));
      }
    });
    for (const auto& t : layout.tensors()) {
      if (st.failed) break;
      const std::string path = dataset_path(k, t.name);
      attempt(st, path, [&] {
        h5::Handle ds =
            h5::dataset(check(H5Dopen2(file, path.c_str(), H5P_DEFAULT), "cannot open"));
        h5::Handle ty = h5::type(check(H5Dget_type(ds.get()), "H5Dget_type"));
        if (H5Tget_class(ty.get()) != H5T_FLOAT || H5Tget_size(ty.get()) != 4)
          throw std::runtime_error("not float32");
        const auto shape = dataset_shape(ds.get());
        if (shape != t.shape)
          throw std::runtime_error(fmt::format("shape [{}], the model_config needs [{}]",
                                               fmt::join(shape, ", "), fmt::join(t.shape, ", ")));
      });
    }
  }
  return with_optimizer;
}

// One collective transfer of `n` elements between `data` and the selection `boxes` of `ds`.
// Every rank calls it equally often; a rank with nothing to move, or that has already failed,
// takes part with an empty selection, so no rank is left waiting in the collective.
void transfer(Status& st, const std::string& path, hid_t ds, hid_t dxpl,
              const std::vector<Box>& boxes, std::int64_t n, float* data, bool write) {
  static float dummy = 0;
  const bool active = !st.failed && n > 0;
  h5::Handle fsel, ms;
  try {
    fsel = select_boxes(ds, active ? boxes : std::vector<Box>{});
    ms = memory_space(active ? n : 0);
  } catch (const std::exception& e) {
    st.fail(path, e.what());
    fsel = select_boxes(ds, {});
    ms = memory_space(0);
  }
  float* buf = active ? data : &dummy;
  const herr_t rc = write ? H5Dwrite(ds, H5T_NATIVE_FLOAT, ms.get(), fsel.get(), dxpl, buf)
                          : H5Dread(ds, H5T_NATIVE_FLOAT, ms.get(), fsel.get(), dxpl, buf);
  if (rc < 0) {
    const std::string cause = h5::take_error();
    st.fail(path, std::string(write ? "cannot write" : "cannot read") +
                      (cause.empty() ? "" : ": " + cause));
  }
}

// Part k of `parts` equal parts of [0, n) (the first n % parts parts one longer).
std::pair<std::int64_t, std::int64_t> part(std::int64_t n, std::int64_t parts, std::int64_t k) {
  const std::int64_t q = n / parts, r = n % parts;
  return {k * q + std::min(k, r), (k + 1) * q + std::min(k + 1, r)};
}

// Checksum of a whole dataset, read in equal flat parts by the ranks (bounded buffers).
std::uint64_t split_hash(MPI_Comm comm, hid_t ds, const std::vector<std::int64_t>& shape,
                         hid_t dxpl, Status& st, const std::string& path) {
  const auto P = static_cast<std::int64_t>(size_of(comm));
  const auto me = static_cast<std::int64_t>(rank_of(comm));
  const std::int64_t n = numel(shape);
  constexpr std::int64_t kChunk = std::int64_t{1} << 22;  // 16 MiB of floats per read
  const std::int64_t rounds = std::max<std::int64_t>(1, (n + P * kChunk - 1) / (P * kChunk));
  const std::int64_t parts = rounds * P;
  std::vector<float> buf(static_cast<std::size_t>(n / parts + 1));
  std::uint64_t local = 0;
  for (std::int64_t c = 0; c < rounds; ++c) {
    const auto [lo, hi] = part(n, parts, c * P + me);
    transfer(st, path, ds, dxpl, flat_range_boxes(shape, lo, hi), hi - lo, buf.data(), false);
    if (!st.failed)
      local +=
          hash_run(static_cast<std::uint64_t>(lo), buf.data(), static_cast<std::size_t>(hi - lo));
  }
  std::uint64_t sum = 0;
  MPI_Allreduce(&local, &sum, 1, MPI_UINT64_T, MPI_SUM, comm);
  return sum;
}

// The test hook's "RANK:N[:SUBSTRING]": rank RANK kills itself after N datasets of a file whose
// path contains SUBSTRING (any file when absent). {-1, -1} when unset or not for this file.
std::pair<int, int> test_kill_point(const fs::path& file) {
  const char* v = std::getenv(kTestKillEnv);
  if (!v || !*v) return {-1, -1};
  int r = -1, n = -1, used = 0;
  if (std::sscanf(v, "%d:%d%n", &r, &n, &used) != 2) return {-1, -1};
  const std::string only = v[used] == ':' ? std::string(v + used + 1) : std::string();
  if (!only.empty() && file.string().find(only) == std::string::npos) return {-1, -1};
  return {r, n};
}

void fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0)
    throw std::runtime_error(
        fmt::format("cannot open {} to fsync: {}", p.string(), std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0)
    throw std::runtime_error(fmt::format("fsync {}: {}", p.string(), std::strerror(err)));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Write

void write_checkpoint(MPI_Comm comm, const fs::path& path, const CheckpointMeta& meta,
                      const StateView& state, const WriteOptions& options) {
  const StateSlices* lists[kKinds] = {&state.params, &state.m, &state.v};
  write_checkpoint(
      comm, path, meta, [&](StatePart part) { return *lists[static_cast<int>(part)]; }, options);
}

void write_checkpoint(MPI_Comm comm, const fs::path& path, const CheckpointMeta& meta,
                      const SliceSource& source, const WriteOptions& options) {
  h5::QuietErrors quiet;
  const int me = rank_of(comm);
  // Everyone writes rank 0's metadata: attribute writes must be identical on all ranks.
  CheckpointMeta m = meta;
  std::string meta_text;
  if (me == 0) {
    m.created_utc = utc_now();
    meta_text = meta_to_json(m).dump();
  }
  bcast_string(comm, 0, meta_text);
  m = meta_from_json(json::parse(meta_text));

  fs::path tmp = path;
  tmp += ".tmp";
  Status st;
  if (me == 0)
    attempt(st, "", [&] {
      if (!path.parent_path().empty()) fs::create_directories(path.parent_path());
    });
  agree(comm, path, st);

  const auto [kill_rank, kill_after] = test_kill_point(path);
  bool closed_ok = false;
  try {
    h5::Handle file;
    attempt(st, "", [&] {
      // About 2 KiB of headers and attributes per dataset (three per tensor).
      const std::size_t datasets = 3 * ParameterLayout(m.model).tensors().size();
      const std::size_t block =
          std::clamp<std::size_t>(datasets * 2048, std::size_t{64} << 10, std::size_t{4} << 20);
      h5::Handle fapl = file_access(comm, block);
      file = h5::file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
      if (!file) h5_fail(fmt::format("cannot create {}", tmp.string()));
    });
    agree(comm, path, st);
    h5::Handle dxpl, dcpl;
    attempt(st, "", [&] {
      dxpl = transfer_props(options.two_phase_io);
      dcpl = h5::plist(check(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate"));
      // Every element is written by some rank: skip the fill pass (it would double the I/O).
      check_err(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "H5Pset_fill_time");
      check_err(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), "H5Pset_alloc_time");
      write_root_attrs(file.get(), m);
      h5::Handle g = h5::group(
          check(H5Gcreate2(file.get(), "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "group"));
    });
    agree(comm, path, st);

    int written = 0;
    bool with_optimizer = false;
    for (int kind = 0; kind < kKinds; ++kind) {
      // One kind at a time: a strategy's slices may stay valid only until its next export.
      StateSlices slices;
      attempt(st, kGroup[kind], [&] { slices = source(static_cast<StatePart>(kind)); });
      agree(comm, path, st);
      const auto descs = gather_descs(comm, kind, slices);
      const bool any = any_slices(descs);
      if (kind == kMoment1) {
        with_optimizer = any;
        if (any)
          attempt(st, "/optimizer", [&] {
            for (const char* g : {"optimizer", "optimizer/m", "optimizer/v"})
              h5::Handle grp = h5::group(
                  check(H5Gcreate2(file.get(), g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "group"));
          });
        agree(comm, path, st);
      }
      if (kind == kMoment2 && any != with_optimizer)
        throw Error(
            fmt::format("checkpoint {}: the ranks pass {} but no {} (AdamW's moments "
                        "are saved together or not at all)",
                        path.string(), any ? "/optimizer/v" : "/optimizer/m",
                        any ? "/optimizer/m" : "/optimizer/v"));
      if (kind != kParams && !with_optimizer) continue;
      const auto plan = make_plan(descs, expected_of_kind(m.model, kind), path, true);

      // Checksums first: each rank hashes what it writes, one allreduce combines them.
      std::vector<std::uint64_t> local(plan.size(), 0), sums(plan.size(), 0);
      for (std::size_t d = 0; d < plan.size(); ++d)
        for (int i : plan[d].mine[static_cast<std::size_t>(me)]) {
          const TensorSlice& sl = slices[static_cast<std::size_t>(i)];
          local[d] += hash_box(sl.shape, sl.start, sl.count, sl.data);
        }
      MPI_Allreduce(local.data(), sums.data(), static_cast<int>(plan.size()), MPI_UINT64_T, MPI_SUM,
                    comm);

      for (std::size_t d = 0; d < plan.size(); ++d) {
        const DatasetPlan& p = plan[d];
        const std::string dpath = p.path();
        h5::Handle ds;
        attempt(st, dpath, [&] {
          std::vector<hsize_t> dims(p.shape.begin(), p.shape.end());
          h5::Handle sp = h5::space(check(
              H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "space"));
          ds = h5::dataset(H5Dcreate2(file.get(), dpath.c_str(), H5T_IEEE_F32LE, sp.get(),
                                      H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
          if (!ds) h5_fail("cannot create");
          h5::write_u64_attr(ds.get(), "checksum", sums[d]);
        });
        agree(comm, path, st);
        const auto& mine = p.mine[static_cast<std::size_t>(me)];
        for (int round = 0; round < p.rounds; ++round) {
          const TensorSlice* sl =
              round < static_cast<int>(mine.size())
                  ? &slices[static_cast<std::size_t>(mine[static_cast<std::size_t>(round)])]
                  : nullptr;
          transfer(st, dpath, ds.get(), dxpl.get(),
                   sl ? std::vector<Box>{Box{sl->start, sl->count}} : std::vector<Box>{},
                   sl ? sl->elements() : 0, sl ? sl->data : nullptr, true);
        }
        attempt(st, dpath, [&] {
          if (!ds.reset()) h5_fail("cannot close");
        });
        agree(comm, path, st);
        ++written;
        if (me == kill_rank && written == kill_after) std::raise(SIGKILL);
      }
    }
    if (options.durable)  // MPI_File_sync of every rank's data (parallel file systems)
      attempt(st, "", [&] { check_err(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), "flush"); });
    agree(comm, path, st);
    dcpl.reset();
    dxpl.reset();
    closed_ok = file.reset();
  } catch (const Error&) {
    // Every rank is here together (errors are agreed, plans identical): the file is closed.
    if (me == 0) {
      std::error_code ec;
      fs::remove(tmp, ec);
    }
    throw;
  }

  // The vote: the file becomes visible only if every rank closed it cleanly.
  int ok = closed_ok ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
  Status fin;
  if (!all_ok) fin.fail("", "closing the file failed on some rank: " + h5::take_error());
  if (me == 0) {
    if (!all_ok) {
      std::error_code ec;
      fs::remove(tmp, ec);
    } else {
      attempt(fin, "", [&] {
        if (options.durable) fsync_path(tmp, false);
        std::error_code ec;
        fs::rename(tmp, path, ec);
        if (ec)
          throw std::runtime_error(
              fmt::format("cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message()));
        if (options.durable)
          fsync_path(path.parent_path().empty() ? "." : path.parent_path(), true);
      });
    }
  }
  agree(comm, path, fin);
}

// ---------------------------------------------------------------------------------------------
// Read

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

CheckpointMeta read_checkpoint(MPI_Comm comm, const fs::path& path, const SliceSource& source,
                               const SliceSink& sink, const ReadOptions& options) {
  h5::QuietErrors quiet;
  const int me = rank_of(comm);
  OpenCheckpoint oc = open_checked(comm, path);
  if (options.expect_model) {
    const ParameterLayout want(*options.expect_model), have(oc.meta.model);
    bool same = want.tensors().size() == have.tensors().size();
    for (std::size_t i = 0; same && i < want.tensors().size(); ++i)
      same = want.tensors()[i].name == have.tensors()[i].name &&
             want.tensors()[i].shape == have.tensors()[i].shape;
    if (!same)
      throw InputError(fmt::format(
          "checkpoint {} holds a {} model (n_layer {}, n_head {}, d_model {}, vocab {}), not "
          "this job's {} model (n_layer {}, n_head {}, d_model {}, vocab {})",
          path.string(), arch_name(oc.meta.model.arch), oc.meta.model.n_layer, oc.meta.model.n_head,
          oc.meta.model.d_model, oc.meta.model.vocab_size, arch_name(options.expect_model->arch),
          options.expect_model->n_layer, options.expect_model->n_head,
          options.expect_model->d_model, options.expect_model->vocab_size));
  }
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
