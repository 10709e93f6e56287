#include "launch/hostlist.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <optional>

#include "runtime/core/error.hpp"

namespace saturn::launch {
namespace {

// Numbers longer than this would not fit an uint64_t; Slurm has no such hosts either.
constexpr std::size_t kMaxDigits = 18;

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_separator(char c) {
  return c == ',' || c == ' ' || c == '\t' || c == '\n';
}

[[noreturn]] void fail(std::string_view list, std::string_view why) {
  throw InputError(fmt::format("hostlist \"{}\": {}", list, why));
}

std::uint64_t parse_number(std::string_view list, std::string_view digits, std::string_view item) {
  if (digits.empty() || digits.size() > kMaxDigits)
    fail(list, fmt::format("\"{}\" is not a number or lo-hi range of at most {} digits", item,
                           kMaxDigits));
  std::uint64_t v = 0;
  for (char c : digits) {
    if (!is_digit(c))
      fail(list, fmt::format("\"{}\" is not a number or lo-hi range (digits only)", item));
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v;
}

std::string pad(std::uint64_t value, std::size_t width) {
  return fmt::format("{:0{}}", value, width);
}

// The suffixes one bracket group stands for, in order: "01-02,5" -> {"01", "02", "5"}.
std::vector<std::string> expand_group(std::string_view list, std::string_view group) {
  if (group.empty()) fail(list, "empty brackets \"[]\"");
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= group.size()) {
    const std::size_t comma = std::min(group.find(',', pos), group.size());
    const std::string_view item = group.substr(pos, comma - pos);
    if (item.empty()) fail(list, fmt::format("empty item in \"[{}]\" (a stray comma)", group));
    const std::size_t dash = item.find('-');
    const std::string_view lo_text = item.substr(0, dash);
    const std::uint64_t lo = parse_number(list, lo_text, item);
    std::uint64_t hi = lo;
    if (dash != std::string_view::npos) hi = parse_number(list, item.substr(dash + 1), item);
    if (hi < lo) fail(list, fmt::format("range \"{}\" runs downwards", item));
    if (hi - lo >= kMaxHostlistSize - out.size())
      fail(list, fmt::format("more than {} hosts", kMaxHostlistSize));
    for (std::uint64_t v = lo; v <= hi; ++v) out.push_back(pad(v, lo_text.size()));
    pos = comma + 1;
  }
  return out;
}

// One item of the list: a name with zero or more bracket groups, expanded into `out`.
void expand_item(std::string_view list, std::string_view item, std::vector<std::string>& out) {
  std::vector<std::string> names{std::string()};
  std::size_t pos = 0;
  while (pos < item.size()) {
    const std::size_t open = item.find('[', pos);
    const std::string_view text =
        item.substr(pos, open == std::string_view::npos ? item.npos : open - pos);
    if (open == std::string_view::npos && pos > 0)
      fail(list, fmt::format("\"{}\": text \"{}\" after the last bracket group (Slurm does not "
                             "allow a suffix there)",
                             item, text));
    for (auto& n : names) n += text;
    if (open == std::string_view::npos) break;
    const std::size_t close = item.find(']', open);  // nesting was rejected by the splitter
    const std::vector<std::string> suffixes =
        expand_group(list, item.substr(open + 1, close - open - 1));
    if (names.size() * suffixes.size() > kMaxHostlistSize - out.size())
      fail(list, fmt::format("more than {} hosts", kMaxHostlistSize));
    std::vector<std::string> product;
    product.reserve(names.size() * suffixes.size());
    for (const auto& n : names)
      for (const auto& s : suffixes) product.push_back(n + s);
    names = std::move(product);
    pos = close + 1;
  }
  for (auto& n : names) out.push_back(std::move(n));
}

// A host split into prefix and trailing number, for compression.
struct HostName {
  std::string prefix;
  std::optional<std::uint64_t> number;
  std::string digits;  // as written, e.g. "01"
};

HostName split_host(const std::string& host) {
  std::size_t start = host.size();
  while (start > 0 && is_digit(host[start - 1])) --start;
  HostName h{host, std::nullopt, ""};
  const std::size_t n = host.size() - start;
  if (n == 0 || n > kMaxDigits) return h;
  h.prefix = host.substr(0, start);
  h.digits = host.substr(start);
  std::uint64_t v = 0;
  for (char c : h.digits) v = v * 10 + static_cast<std::uint64_t>(c - '0');
  h.number = v;
  return h;
}

struct Range {
  std::string prefix;
  bool numeric;
  std::uint64_t lo, hi;
  std::size_t width;
};

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view hostlist) {
  std::vector<std::string> hosts;
  std::size_t start = 0;
  bool in_brackets = false;
  for (std::size_t i = 0; i <= hostlist.size(); ++i) {
    const char c = i < hostlist.size() ? hostlist[i] : ',';
    if (c == '[') {
      if (in_brackets) fail(hostlist, "nested '['");
      in_brackets = true;
    } else if (c == ']') {
      if (!in_brackets) fail(hostlist, "']' without a matching '['");
      in_brackets = false;
    } else if (in_brackets && i == hostlist.size()) {
      fail(hostlist, "'[' without a matching ']'");
    } else if (!in_brackets && is_separator(c)) {
      // Empty items ("a,,b", leading or trailing commas) are skipped, as Slurm does.
      if (i > start) expand_item(hostlist, hostlist.substr(start, i - start), hosts);
      start = i + 1;
    } else if (in_brackets && c != ',' && c != '-' && !is_digit(c)) {
      fail(hostlist,
           fmt::format("'{}' inside brackets (only digits, '-' and ',' belong there)", c));
    }
  }
  return hosts;
}

std::string compress_hostlist(const std::vector<std::string>& hosts) {
  std::vector<Range> ranges;
  for (const auto& host : hosts) {
    if (host.empty()) throw InputError("compress_hostlist: an empty host name");
    if (host.find_first_of("[], \t\n") != std::string::npos)
      throw InputError(fmt::format(
          "compress_hostlist: host name \"{}\" contains a bracket, comma or space", host));
    const HostName h = split_host(host);
    if (!h.number) {
      ranges.push_back({h.prefix, false, 0, 0, 0});
      continue;
    }
    // Extend only when the next number written at the range's width is this host's text, so
    // that expansion gives back exactly these names (n9,n10 -> n[9-10], but n9,n010 -> n[9,010]).
    if (!ranges.empty()) {
      Range& last = ranges.back();
      if (last.numeric && last.prefix == h.prefix && *h.number == last.hi + 1 &&
          pad(*h.number, last.width) == h.digits) {
        last.hi = *h.number;
        continue;
      }
    }
    ranges.push_back({h.prefix, true, *h.number, *h.number, h.digits.size()});
  }

  std::string out;
  std::size_t i = 0;
  while (i < ranges.size()) {
    if (!out.empty()) out += ',';
    const Range& first = ranges[i];
    std::size_t j = i + 1;
    if (first.numeric)
      while (j < ranges.size() && ranges[j].numeric && ranges[j].prefix == first.prefix) ++j;
    if (!first.numeric) {
      out += first.prefix;
    } else if (j == i + 1 && first.lo == first.hi) {
      out += first.prefix + pad(first.lo, first.width);
    } else {
      out += first.prefix + '[';
      for (std::size_t k = i; k < j; ++k) {
        if (k > i) out += ',';
        out += pad(ranges[k].lo, ranges[k].width);
        if (ranges[k].hi != ranges[k].lo) out += '-' + pad(ranges[k].hi, ranges[k].width);
      }
      out += ']';
    }
    i = j;
  }
  return out;
}

}  // namespace saturn::launch
