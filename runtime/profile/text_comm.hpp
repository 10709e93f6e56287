// Text over a Communicator, whose typed calls carry numbers only: JSON documents (stores,
// results, calibrations) travel packed four bytes to an int32.
#pragma once

#include <string>
#include <vector>

#include "runtime/comm/communicator.hpp"

namespace saturn::profile {

// Collective: every rank ends with root's `text`.
void broadcast_text(comm::Communicator& comm, std::string& text, int root);

// Collective: every rank ends with every rank's text, indexed by rank.
std::vector<std::string> all_gather_text(comm::Communicator& comm, const std::string& text);

}  // namespace saturn::profile
