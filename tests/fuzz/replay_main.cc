// Driver for fuzz targets built without libFuzzer: feeds LLVMFuzzerTestOneInput a bounded,
// deterministic stream of random and mutated inputs (argv[1] = count), plus any files named
// after it. Proves the target survives garbage in every build; Clang builds also get the real
// coverage-guided fuzzer.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// Optional: a target may provide seeds (valid inputs) to mutate.
extern "C" __attribute__((weak)) size_t tpcomm_fuzz_seeds(std::vector<std::vector<uint8_t>>* out);

int main(int argc, char** argv) {
  long count = argc > 1 ? std::atol(argv[1]) : 100000;
  for (int i = 2; i < argc; ++i) {
    std::ifstream f(argv[i], std::ios::binary);
    std::vector<uint8_t> buf((std::istreambuf_iterator<char>(f)), {});
    LLVMFuzzerTestOneInput(buf.data(), buf.size());
  }
  std::vector<std::vector<uint8_t>> seeds;
  if (tpcomm_fuzz_seeds) tpcomm_fuzz_seeds(&seeds);
  std::mt19937_64 rng(12345);
  std::vector<uint8_t> buf;
  for (long n = 0; n < count; ++n) {
    if (!seeds.empty() && (n % 2 == 0)) {
      buf = seeds[rng() % seeds.size()];
      int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips && !buf.empty(); ++k) {
        size_t pos = rng() % buf.size();
        switch (rng() % 4) {
          case 0: buf[pos] = static_cast<uint8_t>(rng()); break;
          case 1: buf.resize(pos); break;
          case 2: buf.insert(buf.begin() + pos, static_cast<uint8_t>(rng())); break;
          default: buf[pos] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        }
      }
    } else {
      buf.resize(rng() % 96);
      for (auto& b : buf) b = static_cast<uint8_t>(rng());
    }
    LLVMFuzzerTestOneInput(buf.data(), buf.size());
  }
  std::printf("replayed %ld inputs\n", count);
  return 0;
}
