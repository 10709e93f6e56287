// SIGUSR1 / SIGTERM / SIGINT (Slurm's pre-timeout signal, a user's scancel, kill or Ctrl-C):
// the handler only sets a flag; ranks agree on it at step boundaries, checkpoint every running
// job, exit 99.
#pragma once

#include <string>

namespace saturn::exec {

void install_stop_signal_handlers();
// The number of the first stop signal received, or 0.
int stop_signal_received();
// For tests and for a coordinator that decides to stop (it sets the same flag).
void request_stop(int signal_number);
// "signal 15 (SIGTERM)": how logs, stop reasons and the timeline name a stop signal.
std::string describe_signal(int signal_number);

}  // namespace saturn::exec
