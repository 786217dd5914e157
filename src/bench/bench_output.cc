// tpbench's table, JSON and CSV.
#include "bench/bench_output.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "core/json.h"
#include "tpcomm/version.hpp"

namespace tpcomm::bench {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Time with a precision that keeps the column narrow (as nccl-tests).
std::string time_str(double us) {
  if (us < 1000) return fmt("%.2f", us);
  if (us < 100000) return fmt("%.1f", us);
  return fmt("%.0f", us);
}

std::string pad(const std::string& s, size_t w) {
  return s.size() >= w ? s : std::string(w - s.size(), ' ') + s;
}

std::string redop_str(const Row& row) { return row.redop ? reduce_op_name(*row.redop) : "none"; }

// Rounded as the table and the CSV print them: JSON carries the same figures.
double rounded(double v, double scale) { return std::round(v * scale) / scale; }

json::Json json_measure(const Measure& m) {
  if (!m.valid) return nullptr;
  json::Json j;
  j["time_us"] = rounded(m.time_us, 1e3);
  j["algbw"] = rounded(m.algbw, 1e4);
  j["busbw"] = rounded(m.busbw, 1e4);
  j["wrong"] = m.wrong < 0 ? json::Json(nullptr) : json::Json(m.wrong);
  return j;
}

std::string csv_measure(const Measure& m) {
  if (!m.valid) return ",,,";
  return fmt("%.3f", m.time_us) + "," + fmt("%.4f", m.algbw) + "," + fmt("%.4f", m.busbw) + "," +
         (m.wrong < 0 ? std::string() : std::to_string(m.wrong));
}

}  // namespace

double average_busbw(const SweepResult& r) {
  double sum = 0;
  int n = 0;
  for (const Row& row : r.rows) {
    for (const Measure* m : {&row.oop, &row.ip}) {
      if (m->valid) {
        sum += m->busbw;
        ++n;
      }
    }
  }
  return n ? sum / n : 0;
}

int64_t total_wrong(const SweepResult& r) {
  int64_t w = 0;
  for (const Row& row : r.rows) {
    for (const Measure* m : {&row.oop, &row.ip}) {
      if (m->valid && m->wrong > 0) w += m->wrong;
    }
  }
  return w;
}

void print_table(std::ostream& os, const BenchOptions& o, const SweepResult& r) {
  // nccl-tests' header: the parameters, then every rank's process, host and device.
  const int threads = r.ranks.size() > 1 && o.threads > 0 ? o.threads : 1;
  os << "# " << o.program << " (tpcomm " << version() << "): " << r.nranks << " ranks, transport "
     << r.transport << ", check " << (o.check ? "on" : "off");
  if (o.samples > 1) os << ", median of " << o.samples << " samples";
  if (!o.algorithm.empty()) os << ", algorithm " << o.algorithm;
  os << "\n# nThread " << threads << " nGpus " << o.ngpus << " minBytes " << o.min_bytes
     << " maxBytes " << o.max_bytes << " step: "
     << (o.increment > 0 ? std::to_string(o.increment) + "(bytes)"
                         : fmt("%g", o.factor) + "(factor)")
     << " warmup iters: " << o.warmup << " iters: " << o.iters << " agg iters: " << o.agg_iters
     << " validation: " << (o.check ? 1 : 0) << " graph: 0\n#\n# Using devices\n";
  for (size_t i = 0; i < r.ranks.size(); ++i) {
    char head[64];
    std::snprintf(head, sizeof head, "#  Rank %2zu Group %2d ", i, 0);
    os << head << r.ranks[i] << "\n";
  }
  os << "#\n";
  std::string last_op;
  for (const Row& row : r.rows) {
    if (row.op != last_op) {
      last_op = row.op;
      os << "# " << row.op << "\n"
         << "#                                                              out-of-place        "
            "               in-place\n"
         << "#       size         count      type   redop    root     time   algbw   busbw #wrong"
            "     time   algbw   busbw #wrong  algorithm\n"
         << "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)      "
            "      (us)  (GB/s)  (GB/s)\n";
    }
    os << pad(std::to_string(row.size), 12) << "  " << pad(std::to_string(row.count), 12) << "  "
       << pad(dtype_name(row.dtype), 8) << "  " << pad(redop_str(row), 6) << "  "
       << pad(std::to_string(row.root), 6);
    for (const Measure* m : {&row.oop, &row.ip}) {
      if (!m->valid) {
        os << "  " << pad("N/A", 7) << "  " << pad("N/A", 6) << "  " << pad("N/A", 6) << "  "
           << pad("N/A", 5);
        continue;
      }
      os << "  " << pad(time_str(m->time_us), 7) << "  " << pad(fmt("%.2f", m->algbw), 6) << "  "
         << pad(fmt("%.2f", m->busbw), 6) << "  "
         << pad(m->wrong < 0 ? "N/A" : std::to_string(m->wrong), 5);
    }
    os << "  " << row.algorithm << "\n";
  }
  int64_t wrong = total_wrong(r);
  os << "# Out of bounds values : " << wrong << (wrong ? " FAILED" : " OK") << "\n"
     << "# Avg bus bandwidth    : " << fmt("%.4f", average_busbw(r)) << "\n#\n";
}

void print_json(std::ostream& os, const BenchOptions& o, const SweepResult& r) {
  json::Json head;
  head["version"] = version();
  head["program"] = o.program;
  head["nranks"] = r.nranks;
  head["transport"] = r.transport;
  head["iters"] = o.iters;
  head["warmup"] = o.warmup;
  head["samples"] = o.samples;
  head["check"] = o.check;
  head["algorithm"] = o.algorithm;
  json::Json rows = json::Json::array();
  for (const Row& row : r.rows) {
    json::Json j;
    j["op"] = row.op;
    j["size"] = row.size;
    j["count"] = row.count;
    j["type"] = dtype_name(row.dtype);
    j["redop"] = redop_str(row);
    j["root"] = row.root;
    j["algorithm"] = row.algorithm;
    j["out_of_place"] = json_measure(row.oop);
    j["in_place"] = json_measure(row.ip);
    rows.push_back(std::move(j));
  }
  json::Json doc;
  doc["tpbench"] = std::move(head);
  doc["results"] = std::move(rows);
  doc["avg_busbw"] = rounded(average_busbw(r), 1e4);
  doc["wrong"] = total_wrong(r);
  os << json::dump(doc, 1) << "\n";
}

void print_csv(std::ostream& os, const BenchOptions&, const SweepResult& r) {
  os << "op,size,count,type,redop,root,algorithm,oop_time_us,oop_algbw,oop_busbw,oop_wrong,"
        "ip_time_us,ip_algbw,ip_busbw,ip_wrong\n";
  for (const Row& row : r.rows) {
    os << row.op << "," << row.size << "," << row.count << "," << dtype_name(row.dtype) << ","
       << redop_str(row) << "," << row.root << "," << row.algorithm << "," << csv_measure(row.oop)
       << "," << csv_measure(row.ip) << "\n";
  }
}

}  // namespace tpcomm::bench
