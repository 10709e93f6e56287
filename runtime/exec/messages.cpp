#include "runtime/exec/messages.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "runtime/core/error.hpp"
#include "runtime/workload/config_json.hpp"

namespace saturn::exec {

namespace {

using nlohmann::json;

// The tag of each stream of messages: a receiver asks for one kind, in order per sender.
enum Tag : int {
  kTagWorker = 101,    // WorkerMessage
  kTagCommand = 102,   // Command
  kTagProgress = 103,  // Progress
  kTagReport = 104,    // SegmentReport
  kTagStop = 105,      // StopRequest
};

// ---- transport: JSON text, matched probes ---------------------------------------------------

void send_text(MPI_Comm comm, int dest, int tag, const std::string& text) {
  MPI_Send(text.data(), static_cast<int>(text.size()), MPI_CHAR, dest, tag, comm);
}

// Matched probes (MPI_Improbe/MPI_Mrecv): rank 0's coordinator thread and worker thread both
// receive on the control communicator, and a plain probe-then-receive could race.
std::optional<json> try_receive_json(MPI_Comm comm, int source, int tag, int* from) {
  int flag = 0;
  MPI_Message message;
  MPI_Status status;
  MPI_Improbe(source, tag, comm, &flag, &message, &status);
  if (!flag) return std::nullopt;
  int count = 0;
  MPI_Get_count(&status, MPI_CHAR, &count);
  std::string text(static_cast<std::size_t>(count), '\0');
  MPI_Mrecv(text.data(), count, MPI_CHAR, &message, MPI_STATUS_IGNORE);
  if (from != nullptr) *from = status.MPI_SOURCE;
  return json::parse(text);
}

// ---- encoding, one function each way per message --------------------------------------------

json encode_launch(const SegmentLaunch& l) {
  json j = {{"job", l.job_id},  {"strategy", l.strategy}, {"knobs", l.knobs},
            {"ranks", l.ranks}, {"segment", l.segment},   {"tag", l.tag}};
  if (l.pause_step > 0) j["pause_step"] = l.pause_step;
  return j;
}

SegmentLaunch decode_launch(const json& j) {
  SegmentLaunch l;
  l.job_id = j.at("job").get<std::string>();
  l.strategy = j.at("strategy").get<std::string>();
  l.knobs = j.at("knobs").get<std::vector<std::string>>();
  l.ranks = j.at("ranks").get<std::vector<int>>();
  l.segment = j.at("segment").get<int>();
  l.tag = j.at("tag").get<int>();
  l.pause_step = j.value("pause_step", std::int64_t{0});
  return l;
}

// A job with everything a rank needs to train it (a submitted job's own data and model).
json encode_job(const JobSpec& spec) {
  json j = spec;
  j["init_from"] = spec.init_from.string();
  j["train_data"] = spec.train_data.string();
  j["val_data"] = spec.val_data.string();
  j["where"] = spec.where;
  return j;
}

JobSpec decode_job(const json& m) {
  JobSpec spec = job_spec_from_json(m);
  spec.init_from = m.at("init_from").get<std::string>();
  spec.train_data = m.at("train_data").get<std::string>();
  spec.val_data = m.at("val_data").get<std::string>();
  spec.where = m.at("where").get<std::string>();
  return spec;
}

SegmentStatus parse_segment_status(const std::string& s) {
  for (auto st : {SegmentStatus::kFinished, SegmentStatus::kStopped, SegmentStatus::kFailed})
    if (s == segment_status_name(st)) return st;
  throw Error(fmt::format("control message: unknown segment status '{}'", s));
}

json encode_times(const SegmentTimes& t) {
  return {{"setup_s", t.setup_s},        {"steps_s", t.steps_s}, {"steps", t.steps},
          {"evals_s", t.evals_s},        {"evals", t.evals},     {"checkpoints_s", t.checkpoints_s},
          {"checkpoints", t.checkpoints}};
}

SegmentTimes decode_times(const json& j) {
  SegmentTimes t;
  t.setup_s = j.at("setup_s").get<double>();
  t.steps_s = j.at("steps_s").get<double>();
  t.steps = j.at("steps").get<std::int64_t>();
  t.evals_s = j.at("evals_s").get<double>();
  t.evals = j.at("evals").get<std::int64_t>();
  t.checkpoints_s = j.at("checkpoints_s").get<double>();
  t.checkpoints = j.at("checkpoints").get<std::int64_t>();
  return t;
}

json encode_outcome(const SegmentOutcome& o) {
  json j = {{"status", segment_status_name(o.status)},
            {"step", o.step},
            {"reason", o.reason},
            {"peak_device_bytes", o.peak_device_bytes},
            {"times", encode_times(o.times)}};
  if (o.val_loss) j["val_loss"] = *o.val_loss;
  if (o.signal != 0) j["signal"] = o.signal;
  if (!o.early_stop.is_null()) j["early_stop"] = o.early_stop;
  return j;
}

SegmentOutcome decode_outcome(const json& j) {
  SegmentOutcome o;
  o.status = parse_segment_status(j.at("status").get<std::string>());
  o.step = j.at("step").get<std::int64_t>();
  o.reason = j.at("reason").get<std::string>();
  o.peak_device_bytes = j.at("peak_device_bytes").get<double>();
  o.times = decode_times(j.at("times"));
  if (j.contains("val_loss")) o.val_loss = j["val_loss"].get<double>();
  o.signal = j.value("signal", 0);
  if (j.contains("early_stop")) o.early_stop = j["early_stop"];
  return o;
}

json encode(const WorkerMessage& m) {
  if (const auto* s = std::get_if<StopSignal>(&m))
    return {{"type", "signal"}, {"signal", s->signal}};
  return {{"type", "ready"}};
}

json encode(const Command& m) {
  if (const auto* l = std::get_if<LaunchSegment>(&m))
    return {{"type", "launch"}, {"launch", encode_launch(l->launch)}};
  if (const auto* a = std::get_if<AddJobs>(&m)) {
    json jobs = json::array();
    for (const auto& spec : a->jobs) jobs.push_back(encode_job(spec));
    return {{"type", "add_jobs"}, {"jobs", jobs}};
  }
  return {{"type", "exit"}, {"code", std::get<Exit>(m).code}};
}

json encode(const Progress& p) {
  json j = {{"job", p.job},
            {"step", p.step},
            {"loss", p.loss},
            {"tokens_per_s", p.tokens_per_s},
            {"step_time_s", p.step_time_s},
            {"times", encode_times(p.times)}};
  if (p.val_loss) j["val_loss"] = *p.val_loss;
  return j;
}

json encode(const SegmentReport& r) {
  return {{"job", r.job}, {"outcome", encode_outcome(r.outcome)}};
}

json encode(const StopRequest& s) {
  return {{"job", s.job}, {"segment", s.segment}, {"reason", s.reason}};
}

template <class M>
M decode(const json& j);

template <>
WorkerMessage decode<WorkerMessage>(const json& j) {
  const std::string type = j.at("type").get<std::string>();
  if (type == "signal") return StopSignal{j.at("signal").get<int>()};
  if (type == "ready") return RankReady{};
  throw Error(fmt::format("control message: unknown worker message '{}'", type));
}

template <>
Command decode<Command>(const json& j) {
  const std::string type = j.at("type").get<std::string>();
  if (type == "launch") return LaunchSegment{decode_launch(j.at("launch"))};
  if (type == "add_jobs") {
    AddJobs a;
    for (const auto& spec : j.at("jobs")) a.jobs.push_back(decode_job(spec));
    return a;
  }
  if (type == "exit") return Exit{j.at("code").get<int>()};
  throw Error(fmt::format("control message: unknown command '{}'", type));
}

template <>
Progress decode<Progress>(const json& j) {
  Progress p;
  p.job = j.at("job").get<std::string>();
  p.step = j.at("step").get<std::int64_t>();
  p.loss = j.at("loss").get<double>();
  p.tokens_per_s = j.at("tokens_per_s").get<double>();
  p.step_time_s = j.at("step_time_s").get<double>();
  p.times = decode_times(j.at("times"));
  if (j.contains("val_loss")) p.val_loss = j["val_loss"].get<double>();
  return p;
}

template <>
SegmentReport decode<SegmentReport>(const json& j) {
  return {j.at("job").get<std::string>(), decode_outcome(j.at("outcome"))};
}

template <>
StopRequest decode<StopRequest>(const json& j) {
  return {j.at("job").get<std::string>(), j.at("segment").get<int>(),
          j.at("reason").get<std::string>()};
}

template <class M>
constexpr int tag_of() {
  if constexpr (std::is_same_v<M, WorkerMessage>) return kTagWorker;
  if constexpr (std::is_same_v<M, Command>) return kTagCommand;
  if constexpr (std::is_same_v<M, Progress>) return kTagProgress;
  if constexpr (std::is_same_v<M, SegmentReport>) return kTagReport;
  if constexpr (std::is_same_v<M, StopRequest>) return kTagStop;
}

}  // namespace

const char* segment_status_name(SegmentStatus s) {
  switch (s) {
    case SegmentStatus::kFinished:
      return "finished";
    case SegmentStatus::kStopped:
      return "stopped";
    case SegmentStatus::kFailed:
      return "failed";
  }
  return "?";
}

void send(MPI_Comm comm, int dest, const WorkerMessage& m) {
  send_text(comm, dest, kTagWorker, encode(m).dump());
}
void send(MPI_Comm comm, int dest, const Command& m) {
  send_text(comm, dest, kTagCommand, encode(m).dump());
}
void send(MPI_Comm comm, int dest, const Progress& m) {
  send_text(comm, dest, kTagProgress, encode(m).dump());
}
void send(MPI_Comm comm, int dest, const SegmentReport& m) {
  send_text(comm, dest, kTagReport, encode(m).dump());
}
void send(MPI_Comm comm, int dest, const StopRequest& m) {
  send_text(comm, dest, kTagStop, encode(m).dump());
}

template <class M>
std::optional<M> try_receive(MPI_Comm comm, int source, int* from) {
  const auto j = try_receive_json(comm, source, tag_of<M>(), from);
  if (!j) return std::nullopt;
  return decode<M>(*j);
}

template <class M>
M receive(MPI_Comm comm, int source, int* from) {
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    if (auto m = try_receive<M>(comm, source, from)) return *m;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
}

template std::optional<WorkerMessage> try_receive<WorkerMessage>(MPI_Comm, int, int*);
template std::optional<Command> try_receive<Command>(MPI_Comm, int, int*);
template std::optional<Progress> try_receive<Progress>(MPI_Comm, int, int*);
template std::optional<SegmentReport> try_receive<SegmentReport>(MPI_Comm, int, int*);
template std::optional<StopRequest> try_receive<StopRequest>(MPI_Comm, int, int*);
template Command receive<Command>(MPI_Comm, int, int*);

PendingSends::~PendingSends() {
  for (auto& s : sends_) MPI_Wait(&s.request, MPI_STATUS_IGNORE);
}

void PendingSends::send(MPI_Comm comm, int dest, const Command& message) {
  Send s;
  s.text = std::make_unique<std::string>(encode(message).dump());
  MPI_Isend(s.text->data(), static_cast<int>(s.text->size()), MPI_CHAR, dest, kTagCommand, comm,
            &s.request);
  sends_.push_back(std::move(s));
}

void PendingSends::progress() {
  std::erase_if(sends_, [](Send& s) {
    int done = 0;
    MPI_Test(&s.request, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
}

}  // namespace saturn::exec
