// Default implementations of CollComm's composite waits.
#include "collectives/comm.h"

#include <chrono>
#include <sstream>
#include <thread>

#include "tpcomm/error.hpp"

namespace tpcomm::coll {

void CollComm::wait_all(std::span<Request> reqs) {
  for (Request& r : reqs) wait(r);
}

int CollComm::wait_any(std::span<Request* const> reqs) {
  bool any = false;
  for (Request* r : reqs) any = any || (r != nullptr && !r->empty());
  if (!any) return -1;
  Deadline dl = deadline();
  auto pause = std::chrono::microseconds(0);
  for (;;) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      Request* r = reqs[i];
      if (r != nullptr && !r->empty() && test(*r)) return static_cast<int>(i);
    }
    if (dl.expired()) {
      std::ostringstream os;
      os << "rank " << rank() << ": timed out waiting for any of " << reqs.size()
         << " pending collective operations";
      throw TimeoutError(os.str());
    }
    if (pause.count() == 0) {
      std::this_thread::yield();
      pause = std::chrono::microseconds(1);
    } else {
      std::this_thread::sleep_for(pause);
      if (pause < std::chrono::microseconds(100)) pause *= 2;
    }
  }
}

}  // namespace tpcomm::coll
