// The splitmix64 finalizer, as recsys_dist.hashing.mix64: hashed integer ids
// (feature_transforms.cc) and the shard of a dynamic table's id (dynamic_routing.cc).
#ifndef RECSYS_DIST_OPS_MIX64_H_
#define RECSYS_DIST_OPS_MIX64_H_

#include <cstdint>

namespace recsys_dist {

inline uint64_t Mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace recsys_dist

#endif  // RECSYS_DIST_OPS_MIX64_H_
