// The cache-line size the concurrent caches pad to, so that two shards never share a line.
#pragma once

#include <cstddef>

namespace proxy {

/// Bytes per CPU cache line on the machines we target (x86-64, Cortex-A53/A72/A76 in Raspberry
/// Pis). Written out rather than std::hardware_destructive_interference_size, whose value g++
/// warns may differ between compiler flags and so must not appear in a header's layout.
inline constexpr std::size_t kCacheLineBytes = 64;

}  // namespace proxy
