// tpinfo --links (in the library so that tests reach it): under a launcher, every rank reports
// the transport chosen for each peer and why, then tries every link (a small and a large
// message each way); rank 0 prints the rank x rank matrix, the reasons, and each failure with
// advice.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace tpcomm::tpinfo {

/// One rank's view of its link to one peer.
struct LinkRow {
  int from = -1;
  int to = -1;
  std::string transport;  ///< "" when no transport could be chosen
  std::string reason;     ///< why this transport (or why none)
  bool ok = false;        ///< preflight passed
  double ms = 0;          ///< preflight time (both messages each way)
  std::string error;      ///< what failed, when !ok
};

/// Serialization of a rank's rows through the store (one line per row).
std::string encode_rows(const std::vector<LinkRow>& rows);
/// Parses encode_rows output; throws InvalidArgument naming `what` when it is malformed.
std::vector<LinkRow> decode_rows(const std::string& text, const std::string& what);

/// Advice for a failed link over `transport` given its error text ("" when none applies).
std::string link_advice(const std::string& transport, const std::string& error);

/// The report rank 0 prints: matrix, reasons (deduplicated), preflight summary, failures.
std::string format_links(int world_size, const std::vector<LinkRow>& rows, size_t bytes);

/// Options of --links.
struct LinksOptions {
  std::chrono::milliseconds timeout{30000};  ///< preflight and rendezvous deadline
  size_t bytes = 1 << 20;                    ///< the large preflight message
};

/// Runs --links in this process (a rank of a launched job: env:// rendezvous). Returns the
/// exit code: 0 when every link passed, 1 when some failed, 2 on a usage problem.
int run_links(const LinksOptions& options);

}  // namespace tpcomm::tpinfo
