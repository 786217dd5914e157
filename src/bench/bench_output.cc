// tpbench's table, JSON and CSV.
#include "bench/bench_output.h"

#include <cstdio>
#include <string>

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

std::string json_str(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string json_measure(const Measure& m) {
  if (!m.valid) return "null";
  return "{\"time_us\": " + fmt("%.3f", m.time_us) + ", \"algbw\": " + fmt("%.4f", m.algbw) +
         ", \"busbw\": " + fmt("%.4f", m.busbw) +
         ", \"wrong\": " + (m.wrong < 0 ? std::string("null") : std::to_string(m.wrong)) + "}";
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
  os << "# tpbench: " << r.nranks << " ranks, transport " << r.transport << ", iters " << o.iters
     << ", warmup " << o.warmup << ", check " << (o.check ? "on" : "off");
  if (o.samples > 1) os << ", median of " << o.samples << " samples";
  if (!o.algorithm.empty()) os << ", algorithm " << o.algorithm;
  os << "\n#\n";
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
  os << "{\"tpbench\": {\"nranks\": " << r.nranks << ", \"transport\": " << json_str(r.transport)
     << ", \"iters\": " << o.iters << ", \"warmup\": " << o.warmup << ", \"samples\": " << o.samples
     << ", \"check\": " << (o.check ? "true" : "false")
     << ", \"algorithm\": " << json_str(o.algorithm) << "},\n \"results\": [";
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const Row& row = r.rows[i];
    os << (i ? ",\n  " : "\n  ") << "{\"op\": " << json_str(row.op) << ", \"size\": " << row.size
       << ", \"count\": " << row.count << ", \"type\": " << json_str(dtype_name(row.dtype))
       << ", \"redop\": " << json_str(redop_str(row)) << ", \"root\": " << row.root
       << ", \"algorithm\": " << json_str(row.algorithm)
       << ", \"out_of_place\": " << json_measure(row.oop)
       << ", \"in_place\": " << json_measure(row.ip) << "}";
  }
  os << "],\n \"avg_busbw\": " << fmt("%.4f", average_busbw(r)) << ", \"wrong\": " << total_wrong(r)
     << "}\n";
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
