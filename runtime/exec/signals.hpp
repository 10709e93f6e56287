// SIGUSR1 / SIGTERM (Slurm's pre-timeout signal, a user's scancel or kill): the handler only
// sets a flag; ranks agree on it at step boundaries, checkpoint every running job, exit 99.
#pragma once

namespace saturn::exec {

void install_stop_signal_handlers();
// The number of the first stop signal received, or 0.
int stop_signal_received();
// For tests and for a coordinator that decides to stop (it sets the same flag).
void request_stop(int signal_number);

}  // namespace saturn::exec
