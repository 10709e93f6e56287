#include "runtime/exec/messages.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

namespace saturn::exec {

void send_json(MPI_Comm comm, int dest, int tag, const nlohmann::json& message) {
  const std::string text = message.dump();
  MPI_Send(text.data(), static_cast<int>(text.size()), MPI_CHAR, dest, tag, comm);
}

namespace {
// Matched probes (MPI_Mprobe/MPI_Mrecv): rank 0's coordinator thread and worker thread both
// receive on the control communicator, and a plain probe-then-receive could race.
nlohmann::json receive_matched(MPI_Message* message, const MPI_Status& status, int* from) {
  int count = 0;
  MPI_Get_count(&status, MPI_CHAR, &count);
  std::string text(static_cast<std::size_t>(count), '\0');
  MPI_Mrecv(text.data(), count, MPI_CHAR, message, MPI_STATUS_IGNORE);
  if (from != nullptr) *from = status.MPI_SOURCE;
  return nlohmann::json::parse(text);
}
}  // namespace

nlohmann::json recv_json(MPI_Comm comm, int source, int tag, int* from) {
  // Poll with a short sleep instead of a blocking probe: Open MPI spins inside blocking calls,
  // and an idle rank waiting for work must not take a core from ranks that train.
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    if (auto m = try_recv_json(comm, source, tag, from)) return *m;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
}

std::optional<nlohmann::json> try_recv_json(MPI_Comm comm, int source, int tag, int* from) {
  int flag = 0;
  MPI_Message message;
  MPI_Status status;
  MPI_Improbe(source, tag, comm, &flag, &message, &status);
  if (!flag) return std::nullopt;
  return receive_matched(&message, status, from);
}

PendingSends::~PendingSends() {
  for (auto& s : sends_) MPI_Wait(&s.request, MPI_STATUS_IGNORE);
}

void PendingSends::send_json(MPI_Comm comm, int dest, int tag, const nlohmann::json& message) {
  Send s;
  s.text = std::make_unique<std::string>(message.dump());
  MPI_Isend(s.text->data(), static_cast<int>(s.text->size()), MPI_CHAR, dest, tag, comm,
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
