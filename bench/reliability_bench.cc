// Per-call cost of the reliability features on the collective path (the budget: under 2 % of
// an 8-byte all_reduce): the flight recorder's entry (begin, arguments, end) alone, and a whole
// 8-byte all_reduce of a one-rank world (the full ProcessGroup path: queue check, EngineComm,
// signature, recorder, dispatch; no peer, so no scheduling noise from a second process) with
// the recorder and the signature on and off.
//
//   bin/reliability_bench --benchmark_repetitions=10 --benchmark_report_aggregates_only=true
//
// Arguments of BM_AllReduce1Rank: /recorder (0 off, 1 on)/signature (0 off, 1 on).
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <memory>
#include <vector>

#include "core/config.h"
#include "pg/flight_recorder.h"
#include "tpcomm/collectives.hpp"
#include "tpcomm/tpcomm.hpp"

namespace {

using tpcomm::detail::fr::Entry;
using tpcomm::detail::fr::Ring;
using tpcomm::detail::fr::State;

void BM_RecorderEntry(benchmark::State& state) {
  Ring::Meta meta;
  meta.group_name = "bench";
  meta.ranks = {0};
  Ring ring(meta, 2048);
  uint64_t seq = 0;
  for (auto _ : state) {
    Entry* e = ring.begin(2, seq++, 1);
    e->dtype = 7;
    e->count = 2;
    e->root = -1;
    e->redop = 0;
    benchmark::DoNotOptimize(e);
    Ring::end(e, State::Completed, "ring");
  }
}
BENCHMARK(BM_RecorderEntry);

void BM_AllReduce1Rank(benchmark::State& state) {
  setenv("TPCOMM_FLIGHT_RECORDER", state.range(0) ? "2048" : "0", 1);
  setenv("TPCOMM_CHECK_SIGNATURE", state.range(1) ? "1" : "0", 1);
  setenv("TPCOMM_FLIGHT_RECORDER_DIR", "/nonexistent/tpcomm_bench", 1);
  tpcomm::config::reload();
  auto pg = tpcomm::ProcessGroup::create(std::make_shared<tpcomm::HashStore>(), 0, 1);
  std::vector<float> v(2, 1.0f);
  tpcomm::Tensor t = tpcomm::Tensor::of(v);
  for (auto _ : state) pg->all_reduce(t);
  pg->destroy();
  unsetenv("TPCOMM_FLIGHT_RECORDER");
  unsetenv("TPCOMM_CHECK_SIGNATURE");
  unsetenv("TPCOMM_FLIGHT_RECORDER_DIR");
  tpcomm::config::reload();
}
BENCHMARK(BM_AllReduce1Rank)->Args({0, 0})->Args({1, 1})->Args({1, 0})->Args({0, 1});

}  // namespace

BENCHMARK_MAIN();
