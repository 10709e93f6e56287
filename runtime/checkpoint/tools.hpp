// Single-process tools on one checkpoint file: `saturn ckpt inspect` and `saturn ckpt export`.
// They run on MPI_COMM_SELF (MPI must be initialised: see mpi_env.hpp).
#pragma once

#include <filesystem>
#include <string>

#include "runtime/checkpoint/checkpoint.hpp"

namespace saturn::ckpt {

// Metadata and datasets; with `verify`, every checksum recomputed (CheckpointInfo::all_ok).
// Root attributes whose meta_checksum does not match throw CheckpointError.
CheckpointInfo inspect_checkpoint(const std::filesystem::path& file, bool verify = true);

// Human-readable report (what `saturn ckpt inspect` prints).
std::string format_inspection(const std::filesystem::path& file, const CheckpointInfo& info);

// Writes the model weights (not the optimizer state) as a safetensors file: 8-byte little-endian
// header length, a JSON header {"__metadata__": {...}, "<name>": {"dtype": "F32", "shape": [...],
// "data_offsets": [begin, end]}, ...} padded with spaces to a multiple of 8, then the raw
// little-endian float32 data in the header's order. Names are the checkpoint's (Hugging Face).
// Each tensor's checksum is verified as it streams through (one tensor in memory at a time);
// the output is written to OUT.tmp and renamed, so a failed export leaves nothing behind.
// Returns the number of tensors written.
std::size_t export_safetensors(const std::filesystem::path& file, const std::filesystem::path& out);

}  // namespace saturn::ckpt
