// The error of a bad command line: tools print its one line and exit 2.
#pragma once

#include "tpcomm/error.hpp"

namespace tpcomm::cli {

/// A bad command line (or options that do not fit the job): the tool prints what() (one line,
/// with the hint) and exits 2.
class UsageError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

}  // namespace tpcomm::cli
