#include "runtime/exec/signals.hpp"

#include <fmt/format.h>

#include <csignal>

namespace saturn::exec {
namespace {
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal == 0) g_stop_signal = sig;
}
}  // namespace

void install_stop_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking MPI and file calls resume after the handler
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

int stop_signal_received() {
  return g_stop_signal;
}

void request_stop(int signal_number) {
  if (g_stop_signal == 0) g_stop_signal = signal_number;
}

std::string describe_signal(int signal_number) {
  const char* name = signal_number == SIGUSR1   ? "SIGUSR1"
                     : signal_number == SIGUSR2 ? "SIGUSR2"
                     : signal_number == SIGTERM ? "SIGTERM"
                     : signal_number == SIGINT  ? "SIGINT"
                     : signal_number == SIGHUP  ? "SIGHUP"
                                                : nullptr;
  return name ? fmt::format("signal {} ({})", signal_number, name)
              : fmt::format("signal {}", signal_number);
}

}  // namespace saturn::exec
