// Links against the installed libtpcomm and uses its public API only.
#include <tpcomm/tpcomm.hpp>

#include <cstdio>

int main() {
  tpcomm::HashStore store;
  store.set("k", std::string_view("v"));
  int64_t n = store.add("n", 41) + 1;
  std::vector<float> v(4, 1.0f);
  tpcomm::Tensor t = tpcomm::Tensor::of(v);
  if (store.get_string("k") != "v" || n != 42 || t.nbytes() != 16) return 1;
  std::printf("consumer OK: tpcomm %s (%s)\n", tpcomm::version(), tpcomm::build_options());
  return 0;
}
