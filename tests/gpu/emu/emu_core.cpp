#include "tests/gpu/emu/emu_core.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/gpu/emu/emu_kernel_state.hpp"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace emu {

// Whether addr is in the guard page below one of the calling thread's kernel-thread stacks
// (defined with the fibers below; the fault handler asks).
bool in_fiber_guard(const char* addr);

// ================================ device memory ================================================

namespace {

constexpr std::size_t kAlign = 256;                       // cudaMalloc's alignment
constexpr std::size_t kFillLimit = std::size_t{8} << 20;  // NaN-filled on allocation up to this

std::size_t env_bytes(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  std::size_t scale = 1;
  if (end != nullptr) {
    if (*end == 'G' || *end == 'g') scale = std::size_t{1} << 30;
    if (*end == 'M' || *end == 'm') scale = std::size_t{1} << 20;
  }
  return static_cast<std::size_t>(x * static_cast<double>(scale));
}

class Arena {
 public:
  static Arena& get() {
    static Arena* a = new Arena();  // never destroyed: device frees may come from static dtors
    return *a;
  }

  void* alloc(std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::size_t need = (std::max<std::size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
    // First fit among the free ranges (offset -> size).
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < need) continue;
      const std::size_t off = it->first, size = it->second;
      free_.erase(it);
      if (size > need) free_.emplace(off + need, size - need);
      live_.emplace(off, need);
      in_use_ += need;
      extend(off + need);
      // Fresh device memory is not zero on a GPU: fill it with NaN bytes so code that reads
      // before writing shows up. Not the very large blocks (workspaces): their pages would stay
      // populated and make every protection change walk them.
      if (need <= kFillLimit) {
        Open open(*this);
        std::memset(base_ + off, 0xFF, need);
      }
      return base_ + off;
    }
    return nullptr;
  }

  bool release(void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!contains(p)) return false;
    const std::size_t off = static_cast<std::size_t>(static_cast<char*>(p) - base_);
    auto it = live_.find(off);
    if (it == live_.end()) return false;
    std::size_t begin = off, size = it->second;
    in_use_ -= size;
    live_.erase(it);
    // Merge with the free neighbours.
    auto next = free_.lower_bound(begin);
    if (next != free_.end() && next->first == begin + size) {
      size += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == begin) {
        begin = prev->first;
        size += prev->second;
        free_.erase(prev);
      }
    }
    free_.emplace(begin, size);
    return true;
  }

  bool contains(const void* p) const {
    const char* c = static_cast<const char*>(p);
    return c >= base_ && c < base_ + size_;
  }

  bool live_range(const void* p, std::size_t bytes) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!contains(p)) return false;
    const std::size_t off = static_cast<std::size_t>(static_cast<const char*>(p) - base_);
    auto it = live_.upper_bound(off);
    if (it == live_.begin()) return false;
    --it;
    return off + bytes <= it->first + it->second;
  }

  std::size_t total() const { return size_; }
  std::size_t in_use() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return in_use_;
  }

  void open() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (open_++ == 0) protect(PROT_READ | PROT_WRITE);
  }
  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (--open_ == 0) protect(PROT_NONE);
  }

  // For the fault handler (no locking there).
  const char* base() const { return base_; }
  std::size_t size() const { return size_; }

 private:
  struct Open {
    explicit Open(Arena& a) : a_(a) {
      if (a_.open_++ == 0) a_.protect(PROT_READ | PROT_WRITE);
    }
    ~Open() {
      if (--a_.open_ == 0) a_.protect(PROT_NONE);
    }
    Arena& a_;
  };

  Arena() {
    size_ = env_bytes("SATURN_EMU_MEMORY", std::size_t{16} << 30);
    void* p = mmap(nullptr, size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "CUDA emulator: cannot reserve %zu bytes of device memory\n", size_);
      std::abort();
    }
    base_ = static_cast<char*>(p);
    free_.emplace(0, size_);
    install_fault_handler();
  }

  void extend(std::size_t end) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    const std::size_t want = (end + page - 1) / page * page;
    if (want > high_) {
      // The newly used range takes the protection the rest of the arena has right now.
      if (open_ > 0 && mprotect(base_ + high_, want - high_, PROT_READ | PROT_WRITE) != 0) {
        std::perror("CUDA emulator: mprotect");
        std::abort();
      }
      high_ = want;
    }
  }

  void protect(int prot) {
    if (high_ == 0) return;
    if (mprotect(base_, high_, prot) != 0) {
      std::perror("CUDA emulator: mprotect");
      std::abort();
    }
  }

  static void install_fault_handler();

  mutable std::mutex mutex_;
  char* base_ = nullptr;
  std::size_t size_ = 0;
  std::size_t high_ = 0;  // bytes from base_ ever handed out (rounded to pages)
  std::size_t in_use_ = 0;
  int open_ = 0;
  std::map<std::size_t, std::size_t> free_, live_;  // offset -> size
};

struct sigaction g_previous_segv;

void write_str(const char* s) {
  const ssize_t ignored = write(STDERR_FILENO, s, std::strlen(s));
  (void)ignored;
}

void on_fault(int sig, siginfo_t* info, void* /*context*/) {
  const Arena& a = Arena::get();
  const char* addr = static_cast<const char*>(info->si_addr);
  if (addr >= a.base() && addr < a.base() + a.size()) {
    char msg[256];
    std::snprintf(msg, sizeof msg,
                  "\nCUDA emulator: host code touched emulated device memory at %p (offset %zu "
                  "of the device arena) outside a kernel, copy or memset: device memory must "
                  "only be reached through the device (upload/download/copy, kernels)\n",
                  static_cast<const void*>(addr), static_cast<std::size_t>(addr - a.base()));
    write_str(msg);
    signal(SIGABRT, SIG_DFL);
    abort();
  }
  if (in_fiber_guard(addr)) {
    write_str(
        "\nCUDA emulator: a kernel thread overflowed its emulated stack (128 KiB): a "
        "kernel with large local arrays or deep recursion (a GPU thread has far less)\n");
    signal(SIGABRT, SIG_DFL);
    abort();
  }
  // Not ours: put the previous action back and return; the faulting instruction runs again
  // and that action (MPI's handler, or the default) decides.
  sigaction(sig, &g_previous_segv, nullptr);
}

void Arena::install_fault_handler() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = &on_fault;
  // On the alternate stack: a fault from a kernel thread's overflowing stack has no room on it.
  sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_previous_segv);
}

}  // namespace

void* device_alloc(std::size_t bytes) {
  return Arena::get().alloc(bytes);
}
bool device_free(void* p) {
  return Arena::get().release(p);
}
bool is_device(const void* p) {
  return Arena::get().contains(p);
}
bool is_device_range(const void* p, std::size_t bytes) {
  return Arena::get().live_range(p, bytes);
}
std::size_t device_total() {
  return Arena::get().total();
}
std::size_t device_in_use() {
  return Arena::get().in_use();
}

DeviceAccess::DeviceAccess() {
  Arena::get().open();
}
DeviceAccess::~DeviceAccess() {
  Arena::get().close();
}

// ================================ kernels ======================================================

}  // namespace emu

// The context switch of the fibers (x86-64 System V): saves the callee-saved registers on the
// current stack, stores the stack pointer in *from, loads `to` and restores the same from there.
// The floating-point control words are not switched: kernels never change them.
extern "C" void saturn_emu_switch(void** from, void* to);
asm(R"(
  .text
  .globl saturn_emu_switch
  .type saturn_emu_switch,@function
saturn_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size saturn_emu_switch, .-saturn_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");

namespace emu {

namespace {

constexpr std::size_t kStackBytes = std::size_t{128} << 10;  // per thread of a block
// Inaccessible bytes below each stack. Wider than any one frame a kernel could push (a page
// would not be: a frame larger than it steps over the guard into the mapping below, another
// thread's stack, and the overflow shows as corruption or an unexplained fault elsewhere).
constexpr std::size_t kGuardBytes = std::size_t{256} << 10;

enum class Wait { kNone, kBlock, kWarp };

struct Fiber {
  void* sp = nullptr;
  char* stack = nullptr;  // mmap'd, with a guard page below
  bool done = false;
  Wait wait = Wait::kNone;
  unsigned shuffles = 0;  // warp shuffles this thread has done (parity picks the slot set)
};

// xorshift64*: the schedule's shuffles need speed, not statistical quality.
struct FastRng {
  std::uint64_t s;
  std::uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1DULL;
  }
  // Lemire's multiply-shift: no division in the scheduler's hot loop.
  unsigned below(unsigned n) { return static_cast<unsigned>(((next() >> 32) * n) >> 32); }
};

struct Runner {
  std::vector<Fiber> fibers;
  void* scheduler_sp = nullptr;
  Fiber* current = nullptr;
  unsigned current_index = 0;
  const std::function<void()>* body = nullptr;
  std::vector<double> slots[2];  // warp shuffle values, by shuffle parity, per thread
  // Warp rendezvous (warp_rendezvous): by the same parity, per thread, the operation each lane
  // waits at, its deposit's size and the deposit (kMaxRendezvousBytes per thread).
  std::vector<const char*> rendezvous_what[2];
  std::vector<std::size_t> rendezvous_bytes[2];
  std::vector<unsigned char> rendezvous_data[2];
  std::vector<unsigned char> smem;
  FastRng rng{20240520ULL};
  bool running = false;
  std::vector<unsigned> order;  // the threads' run order, reshuffled every phase
  // Per block being run: how many threads have exited, wait at __syncthreads, or wait at a
  // shuffle in each warp.
  unsigned done = 0, at_block = 0;
  std::vector<unsigned> at_warp;

  std::vector<char> signal_stack;  // this thread's alternate stack for the fault handler

  Runner() {
    if (const char* s = std::getenv("SATURN_EMU_SEED"); s != nullptr)
      rng.s = std::strtoull(s, nullptr, 10) | 1;
    stack_t existing;
    if (sigaltstack(nullptr, &existing) == 0 && (existing.ss_flags & SS_DISABLE) != 0) {
      signal_stack.resize(std::size_t{64} << 10);
      stack_t ss{};
      ss.ss_sp = signal_stack.data();
      ss.ss_size = signal_stack.size();
      sigaltstack(&ss, nullptr);
    }
  }
  ~Runner() {
    if (!signal_stack.empty()) {
      stack_t ss{};
      ss.ss_flags = SS_DISABLE;
      sigaltstack(&ss, nullptr);
    }
  }

  void ensure(unsigned threads) {
    while (fibers.size() < threads) {
      Fiber f;
      void* p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
      if (p == MAP_FAILED) throw std::runtime_error("CUDA emulator: cannot map a thread stack");
      mprotect(p, kGuardBytes, PROT_NONE);  // guard: a kernel thread overflowing its stack faults
      f.stack = static_cast<char*>(p) + kGuardBytes;
      fibers.push_back(f);
    }
    slots[0].assign(threads, 0.0);
    slots[1].assign(threads, 0.0);
    for (int p = 0; p < 2; ++p) {
      rendezvous_what[p].assign(threads, nullptr);
      rendezvous_bytes[p].assign(threads, 0);
      if (rendezvous_data[p].size() < threads * kMaxRendezvousBytes)
        rendezvous_data[p].resize(threads * kMaxRendezvousBytes);
    }
    at_warp.assign(threads / 32, 0);
  }
};

// The launching thread's (kernels run on the thread that launches them, in its fibers).
thread_local Runner* g_runner = nullptr;

// SATURN_EMU_STATS=1: what the emulator did, printed at exit (for tuning it).
struct Stats {
  std::uint64_t launches = 0, blocks = 0, phases = 0, switches = 0;
  std::map<std::string, std::uint64_t> by_kernel;  // switches by launch shape
  bool on = std::getenv("SATURN_EMU_STATS") != nullptr;
  ~Stats() {
    if (on) {
      std::vector<std::pair<std::uint64_t, std::string>> v;
      for (const auto& [k, n] : by_kernel) v.push_back({n, k});
      std::sort(v.rbegin(), v.rend());
      for (std::size_t i = 0; i < v.size() && i < 12; ++i)
        std::fprintf(stderr, "  %12llu switches: %s\n", static_cast<unsigned long long>(v[i].first),
                     v[i].second.c_str());
    }
    if (on)
      std::fprintf(
          stderr, "CUDA emulator: %llu launches, %llu blocks, %llu phases, %llu switches\n",
          static_cast<unsigned long long>(launches), static_cast<unsigned long long>(blocks),
          static_cast<unsigned long long>(phases), static_cast<unsigned long long>(switches));
  }
};
Stats g_stats;

Runner& runner() {
  static thread_local Runner r;
  return r;
}

}  // namespace

bool in_fiber_guard(const char* addr) {
  const Runner* r = g_runner;
  if (r == nullptr) return false;
  for (const Fiber& f : r->fibers)
    if (addr >= f.stack - kGuardBytes && addr < f.stack) return true;
  return false;
}

namespace {

[[noreturn]] void fiber_main() {
  Runner& r = *g_runner;
  (*r.body)();
  r.current->done = true;
  ++r.done;
  saturn_emu_switch(&r.current->sp, r.scheduler_sp);
  std::abort();  // a finished fiber is never resumed
}

void start(Fiber& f, unsigned t) {
  // A frame that saturn_emu_switch "returns" into fiber_main from: six registers, the return
  // address, and a fake caller's return address (alignment as after a call). Each thread's
  // stack top is moved by a different number of cache lines: stacks a power of two apart would
  // all map to the same cache sets and evict one another at every switch.
  char* top = f.stack + kStackBytes - (t % 512) * 80;
  top -= reinterpret_cast<std::uintptr_t>(top) % 16;
  auto* sp = reinterpret_cast<std::uint64_t*>(top);
  *--sp = 0;                                             // fiber_main's caller (none)
  *--sp = reinterpret_cast<std::uint64_t>(&fiber_main);  // popped by ret
  for (int i = 0; i < 6; ++i) *--sp = 0;                 // rbp rbx r12 r13 r14 r15
  f.sp = sp;
  f.done = false;
  f.wait = Wait::kNone;
  f.shuffles = 0;
}

void yield(Wait w) {
  Runner* r = g_runner;
  if (r == nullptr || !r->running)
    throw std::logic_error("CUDA emulator: a barrier outside a kernel");
  Fiber& f = *r->current;
  f.wait = w;
  if (w == Wait::kBlock)
    ++r->at_block;
  else
    ++r->at_warp[r->current_index / 32];
  saturn_emu_switch(&f.sp, r->scheduler_sp);
}

[[noreturn]] void deadlock(const Runner& r, unsigned threads) {
  unsigned warp = 0;
  for (unsigned w : r.at_warp) warp += w;
  std::fprintf(stderr,
               "CUDA emulator: deadlock in block (%u,%u,%u) of %u threads: %u wait at "
               "__syncthreads, %u at a warp shuffle or warp-collective operation (__syncwarp, "
               "WMMA), %u exited; a barrier not every thread reaches hangs (or is undefined) on "
               "a GPU\n",
               blockIdx.x, blockIdx.y, blockIdx.z, threads, r.at_block, warp, r.done);
  std::abort();
}

void run_block(Runner& r, unsigned threads) {
  std::vector<unsigned>& order = r.order;
  for (unsigned t = 0; t < threads; ++t) start(r.fibers[t], t);
  r.done = r.at_block = 0;
  std::fill(r.at_warp.begin(), r.at_warp.end(), 0u);
  for (;;) {
    // One phase: every runnable thread runs until it waits or exits, in a shuffled order.
    for (unsigned i = threads - 1; i > 0; --i) std::swap(order[i], order[r.rng.below(i + 1)]);
    ++g_stats.phases;
    for (unsigned i = 0; i < threads; ++i) {
      const unsigned t = order[i];
      Fiber& f = r.fibers[t];
      if (f.done || f.wait != Wait::kNone) continue;
      r.current = &f;
      r.current_index = t;
      threadIdx = uint3{t, 0, 0};
      ++g_stats.switches;
      saturn_emu_switch(&r.scheduler_sp, f.sp);
    }
    if (r.done == threads) return;
    // Release a warp whose 32 lanes all wait at a shuffle (every lane takes part: one that
    // exited is a deadlock), else the block once every thread not exited waits at
    // __syncthreads.
    bool released = false;
    for (unsigned w = 0; w < threads / 32; ++w) {
      if (r.at_warp[w] != 32) continue;
      for (unsigned l = 0; l < 32; ++l) r.fibers[w * 32 + l].wait = Wait::kNone;
      r.at_warp[w] = 0;
      released = true;
    }
    if (released) continue;
    if (r.at_block > 0 && r.at_block + r.done == threads) {
      for (unsigned t = 0; t < threads; ++t) r.fibers[t].wait = Wait::kNone;
      r.at_block = 0;
      continue;
    }
    deadlock(r, threads);
  }
}

}  // namespace

void syncthreads() {
  yield(Wait::kBlock);
}

double shuffle(double v, int src_lane) {
  Runner& r = *g_runner;
  const unsigned t = r.current_index, warp = t / 32;
  Fiber& f = *r.current;
  // Every lane deposits into the slot set of this shuffle's parity and waits for its warp; a
  // lane can be at most one shuffle ahead of the slowest (it waits there), so reading the
  // other parity's slots never sees a newer value.
  std::vector<double>& slot = r.slots[f.shuffles % 2];
  slot[t] = v;
  r.rendezvous_what[f.shuffles % 2][t] = "__shfl_sync";  // a WMMA lane beside it sees a mismatch
  yield(Wait::kWarp);
  const double got = slot[warp * 32 + static_cast<unsigned>(src_lane & 31)];
  ++f.shuffles;
  return got;
}

const void* warp_rendezvous(const char* what, const void* data, std::size_t bytes) {
  Runner* r = g_runner;
  if (r == nullptr || !r->running)
    throw std::logic_error(std::string("CUDA emulator: ") + what + " outside a kernel");
  if (bytes > kMaxRendezvousBytes) warp_violation(what, "deposit larger than the emulator's slot");
  const unsigned t = r->current_index, warp = t / 32;
  Fiber& f = *r->current;
  // Double-buffered by parity as shuffle(), sharing its counter, so that shuffles and
  // rendezvous of one warp stay in step.
  const unsigned parity = f.shuffles % 2;
  r->rendezvous_what[parity][t] = what;
  r->rendezvous_bytes[parity][t] = bytes;
  unsigned char* slots = r->rendezvous_data[parity].data();
  if (bytes > 0) std::memcpy(slots + t * kMaxRendezvousBytes, data, bytes);
  yield(Wait::kWarp);
  ++f.shuffles;
  for (unsigned l = 0; l < 32; ++l) {
    const unsigned other = warp * 32 + l;
    const char* theirs = r->rendezvous_what[parity][other];
    if (theirs != what && (theirs == nullptr || std::strcmp(theirs, what) != 0)) {
      const std::string detail = "lane " + std::to_string(l) + " of the warp is at " +
                                 (theirs != nullptr ? theirs : "?") +
                                 " instead: every lane must reach the same warp-collective "
                                 "operation (undefined behaviour on a GPU)";
      warp_violation(what, detail.c_str());
    }
    if (r->rendezvous_bytes[parity][other] != bytes)
      warp_violation(what, ("lane " + std::to_string(l) + " passed a different operand").c_str());
  }
  return slots + warp * 32 * kMaxRendezvousBytes;
}

void warp_violation(const char* what, const char* detail) {
  const unsigned t = g_runner != nullptr ? g_runner->current_index : 0;
  std::fprintf(stderr,
               "CUDA emulator: warp-collective violation at %s in block (%u,%u,%u), warp %u, "
               "lane %u: %s\n",
               what, blockIdx.x, blockIdx.y, blockIdx.z, t / 32, t % 32, detail);
  std::abort();
}

void* dynamic_smem() {
  // 128-byte aligned, as a GPU's dynamic shared memory is at least (WMMA needs 32 bytes).
  const auto addr = reinterpret_cast<std::uintptr_t>(g_runner->smem.data());
  return g_runner->smem.data() + (128 - addr % 128) % 128;
}

void launch(Dim3 grid, Dim3 block, std::size_t smem_bytes, const std::function<void()>& body) {
  const unsigned threads = block.x * block.y * block.z;
  if (threads == 0 || threads % 32 != 0 || threads > 1024 || block.y != 1 || block.z != 1)
    throw std::runtime_error(
        "CUDA emulator: blocks must be 1-D, a multiple of 32 threads, at "
        "most 1024; got " +
        std::to_string(block.x) + "x" + std::to_string(block.y) + "x" + std::to_string(block.z));
  if (grid.x == 0 || grid.y == 0 || grid.z == 0)
    throw std::runtime_error("CUDA emulator: empty grid");
  if (grid.y > 65535 || grid.z > 65535)
    throw std::runtime_error("CUDA emulator: grid y/z beyond 65535 (a launch error on a GPU)");
  Runner& r = runner();
  if (r.running) throw std::logic_error("CUDA emulator: a launch from inside a kernel");
  r.ensure(threads);
  r.body = &body;
  blockDim = dim3(block.x, block.y, block.z);
  gridDim = dim3(grid.x, grid.y, grid.z);
  const std::size_t blocks = static_cast<std::size_t>(grid.x) * grid.y * grid.z;
  std::vector<std::size_t> order(blocks);
  std::iota(order.begin(), order.end(), std::size_t{0});
  for (std::size_t i = blocks - 1; i > 0; --i) std::swap(order[i], order[r.rng.next() % (i + 1)]);
  r.order.resize(threads);
  std::iota(r.order.begin(), r.order.end(), 0u);
  DeviceAccess access;
  ++g_stats.launches;
  const std::uint64_t switches_before = g_stats.switches;
  g_runner = &r;
  r.running = true;
  for (std::size_t b : order) {
    blockIdx = uint3{static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
                     static_cast<unsigned>(b / (static_cast<std::size_t>(grid.x) * grid.y))};
    r.smem.assign(smem_bytes + 128 + 16, 0xFF);  // garbage, as on a GPU; room to align
    ++g_stats.blocks;
    run_block(r, threads);
  }
  r.running = false;
  g_runner = nullptr;
  if (g_stats.on) {
    g_stats.by_kernel[body.target_type().name() + std::string(" grid ") + std::to_string(grid.x) +
                      "x" + std::to_string(grid.y) + " block " + std::to_string(threads)] +=
        g_stats.switches - switches_before;
  }
}

}  // namespace emu
