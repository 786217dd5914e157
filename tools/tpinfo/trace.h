// tpinfo --trace DIR: merges the flight recorder dumps of all ranks (src/pg/flight_recorder.h)
// per group, prints a table and one conclusion line per group: the rank that is behind, the
// call the ranks disagree on, or "all ranks agree".
#pragma once

#include <string>

namespace tpcomm::tpinfo {

/// Reads every *.trace file of `dir` and writes the report to `out`; problems with files
/// (garbage, truncation) go to `err`. Returns the exit status: 0 when every file was read,
/// 1 when a file (or the directory) could not be, or held no dump.
int trace_report(const std::string& dir, std::string& out, std::string& err);

}  // namespace tpcomm::tpinfo
