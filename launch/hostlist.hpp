// Slurm hostlists ("gpu[1,3-5],login1", "rack[1-2]-n[01-02]"), parsed and written by Saturn
// itself: `scontrol show hostnames` needs a slurm.conf, which login nodes and test boxes may lack.
// The grammar and outputs follow Slurm 22.05 (checked against its scontrol, see tests/launch):
//  * the list is split on commas and whitespace outside brackets; empty items are skipped;
//  * a bracket holds comma-separated numbers or lo-hi ranges; a range is zero-padded to the
//    width of lo as written ("node[01-04]" -> node01..node04, "n[8-11]" -> n8..n11);
//  * several bracket groups in one name expand to their cartesian product, leftmost slowest
//    ("rack[1-2]-n[01-02]" -> rack1-n01 rack1-n02 rack2-n01 rack2-n02);
//  * no text may follow the last bracket group ("a[1-2]b" is an error, as in Slurm 22.05);
//  * order and duplicates are kept.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace saturn::launch {

// Expansions larger than this are refused (Slurm's own limit per range is 65536 hosts).
inline constexpr std::size_t kMaxHostlistSize = std::size_t{1} << 20;

// Expands a hostlist into host names, in order. Throws InputError naming the list and the
// offending part for malformed input: unbalanced or nested brackets, an empty or descending
// range, non-digits in a range, text after the last bracket group.
std::vector<std::string> expand_hostlist(std::string_view hostlist);

// Compresses host names the way `scontrol show hostlist` does, without sorting: a host extends
// the previous range when it has the same prefix, the next number and the same written width;
// neighbouring ranges with one prefix share a bracket. expand_hostlist(compress_hostlist(h)) == h.
//   {gpu1, gpu3, gpu4, gpu5, login1} -> "gpu[1,3-5],login1";  {n3, n1, n2} -> "n[3,1-2]"
std::string compress_hostlist(const std::vector<std::string>& hosts);

}  // namespace saturn::launch
