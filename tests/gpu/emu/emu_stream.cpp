// Deferred work on emulated CUDA streams: see emu_stream.hpp for the rules. A stream is a FIFO
// of items (work or a wait for another stream's position); positions count items queued, so an
// event is a (stream, position) pair and is reached once that many items have completed.
#include "tests/gpu/emu/emu_stream.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

namespace emu {
namespace {

struct StreamState;

struct Item {
  StreamWork work;
  bool started = false;
  // A wait item (cudaStreamWaitEvent) instead of work: complete once `wait_on` reached `until`.
  StreamState* wait_on = nullptr;
  std::uint64_t until = 0;
};

struct StreamState {
  int id = 0;
  bool blocking = true;  // synchronises with the legacy default stream
  bool destroyed = false;
  std::deque<Item> items;
  std::uint64_t queued = 0, completed = 0;
};

struct Registry {
  // States live until the process ends (events may still name a destroyed stream).
  std::vector<std::unique_ptr<StreamState>> streams;
  StreamState legacy;  // stream 0
  std::mt19937_64 rng{[] {
    const char* v = std::getenv("SATURN_EMU_SEED");
    return v != nullptr ? std::strtoull(v, nullptr, 10) : 12345ull;
  }()};
  int depth = 0;  // nesting of advance() calls, to bound recursion
};

Registry& registry() {
  static Registry r;
  return r;
}

double hang_seconds() {
  static const double s = [] {
    const char* v = std::getenv("SATURN_EMU_HANG_S");
    const double x = v != nullptr ? std::atof(v) : 300.0;
    return x > 0 ? x : 300.0;
  }();
  return s;
}

StreamState& state(cudaStream_t s) {
  if (s == nullptr) return registry().legacy;
  auto* st = reinterpret_cast<StreamState*>(s);
  if (st->destroyed) {
    std::fprintf(stderr, "CUDA emulator: use of destroyed stream %d\n", st->id);
    std::abort();
  }
  return *st;
}

std::vector<StreamState*> shuffled_streams() {
  Registry& r = registry();
  std::vector<StreamState*> all{&r.legacy};
  for (auto& s : r.streams)
    if (!s->destroyed) all.push_back(s.get());
  std::shuffle(all.begin(), all.end(), r.rng);
  return all;
}

// Advances `s` until `until` items have completed. Non-blocking: returns false at the first item
// that cannot complete now. Blocking: keeps every other stream moving while it waits, and
// reports a wait that makes no progress for hang_seconds() as a deadlock.
bool advance(StreamState& s, std::uint64_t until, bool blocking) {
  Registry& r = registry();
  if (r.depth > 64) return false;  // a chain of waits this deep is not worth following now
  ++r.depth;
  struct Depth {
    ~Depth() { --registry().depth; }
  } depth_guard;
  auto last_progress = std::chrono::steady_clock::now();
  int idle_rounds = 0;
  while (s.completed < until) {
    if (s.items.empty()) throw std::logic_error("CUDA emulator: stream position beyond its items");
    const std::uint64_t position = s.completed;
    Item& front = s.items.front();
    bool done = false;
    if (front.wait_on != nullptr) {
      StreamState& other = *front.wait_on;
      const std::uint64_t target = front.until;
      done = other.completed >= target || advance(other, target, blocking);
    } else {
      if (!front.started) {
        front.started = true;
        if (front.work.start) front.work.start();
      }
      // Nested progress may have completed this very item (`front` is then gone).
      if (s.completed != position) continue;
      done = !front.work.poll || front.work.poll();
    }
    if (s.completed != position) continue;
    if (done) {
      s.items.pop_front();
      ++s.completed;
      last_progress = std::chrono::steady_clock::now();
      idle_rounds = 0;
      continue;
    }
    if (!blocking) return false;
    // Waiting on something outside this stream: move the others (a GPU runs them meanwhile).
    if (progress()) {
      last_progress = std::chrono::steady_clock::now();
      idle_rounds = 0;
      continue;
    }
    const double idle =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last_progress).count();
    if (idle > hang_seconds()) {
      const Item& stuck = s.items.front();
      std::fprintf(
          stderr,
          "CUDA emulator: a wait on stream %d made no progress for %.0f s (SATURN_EMU_HANG_S)"
          " at '%s': a deadlock on a GPU (e.g. a NCCL peer that never issues the matching "
          "operation, or point-to-point sends to each other outside one ncclGroupStart/End)\n",
          s.id, idle,
          stuck.wait_on != nullptr ? "a wait for another stream" : stuck.work.name.c_str());
      std::abort();
    }
    if (++idle_rounds > 100)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    else
      std::this_thread::yield();
  }
  return true;
}

void complete_blocking_streams() {
  Registry& r = registry();
  advance(r.legacy, r.legacy.queued, true);
  for (StreamState* s : shuffled_streams())
    if (s->blocking) advance(*s, s->queued, true);
}

}  // namespace

void enqueue(cudaStream_t stream, StreamWork work) {
  StreamState& s = state(stream);
  Item item;
  item.work = std::move(work);
  s.items.push_back(std::move(item));
  ++s.queued;
}

void order_before(cudaStream_t stream) {
  if (stream == nullptr) {
    complete_blocking_streams();
    return;
  }
  StreamState& s = state(stream);
  advance(s, s.queued, true);
}

void synchronize_stream(cudaStream_t stream) {
  order_before(stream);
}

void synchronize_all() {
  Registry& r = registry();
  for (StreamState* s : shuffled_streams()) advance(*s, s->queued, true);
  advance(r.legacy, r.legacy.queued, true);
}

bool progress() {
  bool any = false;
  for (StreamState* s : shuffled_streams()) {
    const std::uint64_t before = s->completed;
    bool started_new = false;
    if (!s->items.empty() && !s->items.front().started && s->items.front().wait_on == nullptr)
      started_new = true;
    advance(*s, s->queued, false);
    any = any || s->completed != before || started_new;
  }
  return any;
}

cudaStream_t create_stream(bool blocking) {
  Registry& r = registry();
  auto s = std::make_unique<StreamState>();
  s->id = static_cast<int>(r.streams.size()) + 1;
  s->blocking = blocking;
  r.streams.push_back(std::move(s));
  return reinterpret_cast<cudaStream_t>(r.streams.back().get());
}

void destroy_stream(cudaStream_t stream) {
  if (stream == nullptr) return;
  StreamState& s = state(stream);
  // On a GPU, work queued on a destroyed stream still completes.
  advance(s, s.queued, true);
  s.destroyed = true;
}

void record(EventPosition& event, cudaStream_t stream) {
  StreamState& s = state(stream);
  event.stream = &s;
  event.position = s.queued;
  event.queried_pending = false;
}

bool reached(const EventPosition& event) {
  if (event.stream == nullptr) return true;
  return static_cast<StreamState*>(event.stream)->completed >= event.position;
}

void wait_event(const EventPosition& event) {
  if (reached(event)) return;
  advance(*static_cast<StreamState*>(event.stream), event.position, true);
}

bool query(EventPosition& event) {
  if (reached(event)) return true;
  if (!event.queried_pending) {
    event.queried_pending = true;
    return false;  // late completion: never ready at the first look
  }
  auto& s = *static_cast<StreamState*>(event.stream);
  advance(s, event.position, false);
  if (!reached(event)) progress();
  return reached(event);
}

void stream_wait(cudaStream_t stream, const EventPosition& event) {
  if (reached(event)) return;
  StreamState& s = state(stream);
  Item item;
  item.wait_on = static_cast<StreamState*>(event.stream);
  item.until = event.position;
  s.items.push_back(std::move(item));
  ++s.queued;
}

}  // namespace emu
