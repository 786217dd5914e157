// CUDA tensors through a process group by staging: see cuda_staging.h.
#include "pg/cuda_staging.h"

#include <atomic>
#include <mutex>

#include "cuda/staging.h"
#include "pg/coll_run.h"

namespace tpcomm::detail {

namespace {

// The Work of a staged operation: the host operation's Work, plus the pinned buffer it uses
// (kept until the operation and the copy back are done). When the host operation completed
// successfully, the first wait() or is_completed() that sees it queues the copy back.
class StagedWork final : public Work {
 public:
  StagedWork(std::shared_ptr<Work> inner, std::unique_ptr<cuda::Staged> staged, bool copy_out)
      : inner_(std::move(inner)), staged_(std::move(staged)), copy_out_(copy_out) {}

  bool wait(std::optional<std::chrono::milliseconds> timeout) override {
    inner_->wait(timeout);
    finish();
    return true;
  }
  bool is_completed() override {
    if (!inner_->is_completed()) return false;
    if (inner_->is_success()) finish();
    return true;
  }
  bool is_success() override { return inner_->is_success(); }
  std::exception_ptr exception() override { return inner_->exception(); }
  int source_rank() override { return inner_->source_rank(); }

  void finish() {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    if (copy_out_) staged_->copy_out();
  }

 private:
  std::shared_ptr<Work> inner_;
  std::unique_ptr<cuda::Staged> staged_;
  bool copy_out_;
  std::mutex mu_;
  bool done_ = false;
};

std::shared_ptr<Work> finish_blocking(std::shared_ptr<StagedWork> w) {
  w->wait(std::nullopt);
  return done_work();
}

}  // namespace

std::shared_ptr<Work> staged_send(ProcessGroup& pg, const Tensor& t, int dst, int tag, bool async) {
  auto staged =
      std::make_unique<cuda::Staged>(t, nullptr, true, async ? "isend: tensor" : "send: tensor");
  if (!async) {
    pg.send(staged->host(), dst, tag);
    return done_work();
  }
  auto inner = pg.isend(staged->host(), dst, tag);
  return std::make_shared<StagedWork>(std::move(inner), std::move(staged), false);
}

std::shared_ptr<Work> staged_recv(ProcessGroup& pg, const Tensor& t, int src, int tag, bool async) {
  auto staged =
      std::make_unique<cuda::Staged>(t, nullptr, false, async ? "irecv: tensor" : "recv: tensor");
  auto inner = pg.irecv(staged->host(), src, tag);
  auto w = std::make_shared<StagedWork>(std::move(inner), std::move(staged), true);
  if (!async) w->wait(std::nullopt);
  return w;  // keeps source_rank()
}

std::shared_ptr<Work> staged_all_reduce(ProcessGroup& pg, const Tensor& t, ReduceOp op,
                                        const CollectiveOptions& o) {
  auto staged = std::make_unique<cuda::Staged>(
      t, o.stream, true, "all_reduce (rank " + std::to_string(pg.rank()) + "): input");
  CollectiveOptions host = o;
  host.stream = nullptr;
  auto inner = pg.all_reduce(staged->host(), op, host);
  auto w = std::make_shared<StagedWork>(std::move(inner), std::move(staged), true);
  if (!o.async_op) return finish_blocking(std::move(w));
  return w;
}

}  // namespace tpcomm::detail
