// copy_small (src/core/small_copy.h): every size from 0 to 80 bytes copies exactly the n bytes
// asked for, at every alignment, and writes nothing past them.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/small_copy.h"

namespace tpcomm {
namespace {

TEST(SmallCopy, EverySizeAndAlignmentCopiesExactlyNBytes) {
  std::vector<uint8_t> src(128), dst(128);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  for (size_t n = 0; n <= 80; ++n) {
    for (size_t off = 0; off < 8; ++off) {
      std::fill(dst.begin(), dst.end(), uint8_t{0xEE});
      copy_small(dst.data() + off, src.data() + 8 - off, n);
      for (size_t i = 0; i < dst.size(); ++i) {
        uint8_t want = i >= off && i < off + n ? src[8 - off + (i - off)] : uint8_t{0xEE};
        ASSERT_EQ(dst[i], want) << "n " << n << ", offset " << off << ", byte " << i;
      }
    }
  }
}

}  // namespace
}  // namespace tpcomm
